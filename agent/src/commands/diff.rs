//! `profiler diff BASE HEAD`: compares two runs and says whether HEAD regressed, and where.
//!
//! Each side is a bench output folder, an attach output folder, a `profile.json`, a pprof
//! file, `perf script` text or folded stacks ([`crate::diff::import`]). Writes `diff.md`,
//! `diff.json`, the differential flamegraph(s) and the page `index.html`
//! ([`crate::render::diff_html`]) into `--out`; `--format md|json` prints one
//! of them to stdout (the default without `--out` is `md`). Exit status: 0 when no test
//! regressed beyond `--fail-on-regression`, 1 when one did, 2 on error (bad input included).

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::{Parser, ValueEnum};

use crate::diff::{self, compare};
use crate::render::diff_html::{self, DiffGraphs};
use crate::render::flamegraph::{self, FrameStyles, Widths};

/// What `--format` prints to stdout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// `diff.md`.
    Md,
    /// `diff.json`.
    Json,
}

/// Arguments of `profiler diff`.
#[derive(Debug, Clone, Parser)]
pub struct Args {
    /// The base run: bench or attach output folder, profile.json, pprof, perf script or folded stacks.
    pub base: PathBuf,
    /// The head run (same kinds as BASE).
    pub head: PathBuf,
    /// Write diff.md, diff.json, diff.svg (HEAD's widths), diff-base.svg (BASE's widths) and
    /// index.html (the page showing them) into this folder; a bench with several tests gets
    /// diff-<test>.svg and diff-base-<test>.svg per test.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Print diff.md or diff.json to stdout. Default: md when there is no --out.
    #[arg(long, value_enum)]
    pub format: Option<Format>,
    /// Exit 1 when req/s fell or CPU per request rose by more than this many percent on any
    /// test (beyond noise when the noise is known).
    #[arg(long, default_value_t = 5.0, value_name = "PCT")]
    pub fail_on_regression: f64,
    /// Drift between BASE and HEAD that their own runs cannot show, percent: added to the
    /// noise of every figure (a change must exceed the runs' spreads plus PCT% of its value).
    #[arg(long, default_value_t = 0.0, value_name = "PCT")]
    pub noise_floor: f64,
    /// Extra attribution rules (TOML) for the layers, added to the built-in catalog and
    /// target-app's own rules; used on both sides alike.
    #[arg(long)]
    pub rules: Vec<PathBuf>,
}

fn workspace_root() -> Option<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent()?.to_path_buf();
    root.join("Cargo.toml").is_file().then_some(root)
}

/// The rules: the built-in catalog, target-app's layers when the sources are beside this
/// binary (as `profiler bench` uses them), then `--rules`.
fn rules(extra: &[PathBuf]) -> Result<crate::attribute::RuleSet> {
    let mut files: Vec<PathBuf> = workspace_root().map(|r| r.join("target-app").join("rules.toml")).filter(|p| p.is_file()).into_iter().collect();
    files.extend(extra.iter().cloned());
    crate::attribute::RuleSet::builtin_with_files(&files).map_err(|e| anyhow::anyhow!("{e}"))
}

/// Runs `profiler diff`. Returns the exit code: 0 no regression, 1 a regression beyond the
/// threshold.
///
/// # Errors
/// Bad options (`--fail-on-regression`, `--noise-floor`, an `--out` that is a file),
/// unreadable, unsupported or implausible inputs, sides that cannot be compared, unwritable
/// outputs.
pub fn run(args: Args) -> Result<u8> {
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
    let base = diff::import::load(&args.base).context("BASE")?;
    let head = diff::import::load(&args.head).context("HEAD")?;
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
            let (before, after) = (diff::folded_lines(b), diff::folded_lines(h));
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
