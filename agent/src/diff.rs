//! `profiler diff BASE HEAD` ([`run`]): compares two runs and says whether HEAD regressed, and where.
//!
//! Each side is a bench output folder, an attach output folder, a `profile.json`, a pprof
//! file, `perf script` text or folded stacks ([`crate::compare::import`]). Writes `diff.md`,
//! `diff.json`, the differential flamegraph(s) and the page `index.html`
//! ([`crate::render::diff_html`]) into `--out`; `--format md|json` prints one
//! of them to stdout (the default without `--out` is `md`). Exit status: 0 when no test
//! regressed beyond `--fail-on-regression`, 1 when one did, 2 on error (bad input included).

use std::path::PathBuf;

use anyhow::{Context, Result};

use crate::compare;
use crate::render::diff_html::{self, DiffGraphs};
use crate::render::flamegraph::{self, FrameStyles, Widths};

/// Which file `profiler diff` prints to stdout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// `diff.md`.
    Md,
    /// `diff.json`.
    Json,
}

/// The two runs `profiler diff` compares, its thresholds and its outputs (the command line's
/// arguments, parsed).
#[derive(Debug, Clone)]
pub struct Options {
    /// The base run (any input [`crate::compare::import::load`] reads).
    pub base: PathBuf,
    /// The head run.
    pub head: PathBuf,
    /// Folder for diff.md, diff.json, the differential flamegraphs and index.html.
    pub out: Option<PathBuf>,
    /// The file printed to stdout; `None`: md without `out`, nothing with it.
    pub format: Option<Format>,
    /// Regression threshold, percent (>= 0).
    pub fail_on_regression: f64,
    /// Drift added to every figure's noise, percent (>= 0).
    pub noise_floor: f64,
    /// Rule files added to the built-in catalog, in order; used on both sides alike.
    pub rules: Vec<PathBuf>,
}

/// The rules: the built-in catalog, then `files` in order.
fn rules(files: &[PathBuf]) -> Result<crate::attribute::RuleSet> {
    crate::attribute::RuleSet::builtin_with_files(files).map_err(|e| anyhow::anyhow!("{e}"))
}

/// Runs `profiler diff`. Returns the exit code: 0 no regression, 1 a regression beyond the
/// threshold.
///
/// # Errors
/// Bad options (`--fail-on-regression`, `--noise-floor`, an `--out` that is a file),
/// unreadable, unsupported or implausible inputs, sides that cannot be compared, unwritable
/// outputs.
pub fn run(args: &Options) -> Result<u8> {
    if !(args.fail_on_regression.is_finite() && args.fail_on_regression >= 0.0) {
        anyhow::bail!("--fail-on-regression must be a percentage >= 0, got {}", args.fail_on_regression);
    }
    if !(args.noise_floor.is_finite() && args.noise_floor >= 0.0) {
        anyhow::bail!("--noise-floor must be a percentage >= 0, got {}", args.noise_floor);
    }
    if let Some(out) = args.out.as_ref().filter(|o| o.exists() && !o.is_dir()) {
        anyhow::bail!("--out {} is a file, not a folder", out.display());
    }
    let rules = rules(&args.rules)?;
    let base = compare::import::load(&args.base).context("BASE")?;
    let head = compare::import::load(&args.head).context("HEAD")?;
    let opts = compare::Options { rules: &rules, fail_on_regression_pct: args.fail_on_regression, noise_floor_pct: args.noise_floor };
    let result = compare::compare(&base, &head, &opts)?;
    let md = crate::render::diff_md::render(&result);
    let json = serde_json::to_string_pretty(&result).context("serializing diff.json")? + "\n";
    if let Some(out) = &args.out {
        std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
        crate::output::write_bytes_replacing(out.join("diff.md"), &md).with_context(|| format!("writing {}", out.join("diff.md").display()))?;
        crate::output::write_bytes_replacing(out.join("diff.json"), &json).with_context(|| format!("writing {}", out.join("diff.json").display()))?;
        let several = result.tests.len() > 1;
        let mut graphs = Vec::new();
        for t in &result.tests {
            let (Some(b), Some(h)) = (
                base.tests.iter().find(|x| x.name == t.name).and_then(|x| x.profile.as_ref()),
                head.tests.iter().find(|x| x.name == t.name).and_then(|x| x.profile.as_ref()),
            ) else {
                continue;
            };
            let (scale, per) = match (t.normalization, t.requests) {
                (compare::Normalization::PerRequest, (Some(rb), Some(rh))) => (rh as f64 / rb as f64, "per request"),
                _ => (t.samples.1 as f64 / t.samples.0.max(1) as f64, "per sample"),
            };
            let mut styles = FrameStyles::of(h, &rules);
            styles.merge(FrameStyles::of(b, &rules));
            let (before, after) = (compare::folded_lines(b), compare::folded_lines(h));
            let mut files = Vec::new();
            for (widths, stem, whose) in [(Widths::Head, "diff", "HEAD"), (Widths::Base, "diff-base", "BASE")] {
                let name = if several { format!("{stem}-{}.svg", t.name) } else { format!("{stem}.svg") };
                let path = out.join(&name);
                let title = if t.name.is_empty() { "Differential flamegraph".to_string() } else { format!("Differential flamegraph: {}", t.name) };
                let subtitle = format!("widths: {whose} samples; red: more in HEAD, blue: less (BASE scaled {per}, x{scale:.3})");
                crate::output::write_replacing(&path, |w| flamegraph::write_differential_svg(&before, &after, scale, widths, &title, &subtitle, Some(&styles), w))
                    .with_context(|| format!("writing {}", path.display()))?;
                files.push(name);
            }
            let [head_widths, base_widths]: [String; 2] = files.try_into().expect("two graphs");
            graphs.push(DiffGraphs { test: t.name.clone(), head_widths, base_widths });
        }
        let page = out.join("index.html");
        crate::output::write_bytes_replacing(&page, diff_html::diff_page(&result, &graphs, out)).with_context(|| format!("writing {}", page.display()))?;
    }
    let format = args.format.or(if args.out.is_none() { Some(Format::Md) } else { None });
    {
        use std::io::Write as _;
        let mut stdout = std::io::stdout().lock();
        match format {
            Some(Format::Md) => stdout.write_all(md.as_bytes())?,
            Some(Format::Json) => stdout.write_all(json.as_bytes())?,
            None => writeln!(stdout, "{}", crate::render::diff_md::headline(&result))?,
        }
        stdout.flush()?;
    }
    Ok(u8::from(result.failed))
}
