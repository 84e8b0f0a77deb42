//! `profiler report DIR/profile.json [--out DIR]`: re-render a recorded profile without a target.
//!
//! Reads the `profile.json`, writes every rendered file ([`crate::render::write_all_with`]),
//! the ranking (`ranking.md`, `ranking.json`) and the report page `index.html`
//! ([`crate::render::html::attach_page`]) into the output directory (default: the profile's
//! own directory), as `profiler attach` does, and prints the text summary
//! ([`crate::render::summary`]) on stdout.
//!
//! A `ranking.json` already in the output directory is the run's own (a bench's knows the
//! bound its load measured, which the profile does not hold): it is kept and shown unless
//! `--rules` is given, which ranks anew. One that cannot be read is replaced.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;

use crate::{profile, render};

/// What `profiler report` renders and where (the command line's arguments, parsed).
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// The `profile.json` to render, or the folder of an attach output that holds it.
    pub profile: PathBuf,
    /// Directory for the rendered files, created when missing; `None`: the profile's directory.
    pub out: Option<PathBuf>,
    /// Rule files added to the built-in catalog; when any is given the ranking is made anew.
    pub rules: Vec<PathBuf>,
    /// Full demangled names in flamegraph frames instead of short ones.
    pub full_frame_names: bool,
}

/// Runs `profiler report`.
///
/// # Errors
/// When the profile cannot be read or is not a valid `profile.json` of a supported schema,
/// or holds values no run could have ([`crate::compare::import::check_counts`]), or when the
/// output directory or a file in it cannot be written. A broken pipe on stdout
/// is returned as an `io::Error` of kind `BrokenPipe` (the binary exits 0 for it).
pub fn run(opts: &Options) -> anyhow::Result<()> {
    let rules = crate::attribute::RuleSet::builtin_with_files(&opts.rules).map_err(|e| anyhow::anyhow!("{e}"))?;
    // An attach output folder: its profile.json.
    let in_folder = opts.profile.join("profile.json");
    let opts = &Options { profile: if opts.profile.is_dir() && in_folder.is_file() { in_folder } else { opts.profile.clone() }, ..opts.clone() };
    let profile = profile::json::read(&opts.profile).context("cannot read the profile")?;
    // The same checks as `profiler diff` makes of a profile.json (a frequency of 0 Hz, counts
    // that overflow or no run could have): one line naming the field, not a report of nonsense.
    crate::compare::import::check_counts(&profile, crate::compare::import::InputKind::ProfileJson)
        .map_err(|e| anyhow::anyhow!("cannot read the profile: {}: {e}", opts.profile.display()))?;
    let out = match &opts.out {
        Some(out) => out.clone(),
        None => match opts.profile.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
            _ => PathBuf::from("."),
        },
    };
    let render_opts = render::Options {
        rules: Some(&rules),
        flamegraph: render::flamegraph::Options { short_names: !opts.full_frame_names, ..Default::default() },
    };
    let written = render::write_all_with(&profile, &out, &render_opts)
        .with_context(|| format!("cannot render into {}", out.display()))?;
    for path in &written {
        tracing::info!(path = %path.display(), "wrote");
    }
    let kept = if opts.rules.is_empty() {
        std::fs::read(out.join("ranking.json")).ok().and_then(|b| serde_json::from_slice::<crate::attribute::Ranking>(&b).ok())
    } else {
        None
    };
    let ranking = match kept {
        Some(r) => {
            tracing::info!("kept the run's ranking.json (give --rules to rank anew)");
            r
        }
        None => {
            let opts = crate::attribute::RankingOptions { rules: &rules, wire: None, base_req_per_s: None, label: "", closed_loop: None };
            crate::render::ranking::write_ranking(&profile, None, crate::attribute::Bound::of_profile(&profile), &opts, &out)
                .with_context(|| format!("cannot write ranking.md into {}", out.display()))?
        }
    };
    let page = out.join("index.html");
    crate::output::write_bytes_replacing(&page, render::html::attach_page(&profile, &ranking, &out))
        .with_context(|| format!("cannot write {}", page.display()))?;
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(render::summary(&profile).as_bytes())?;
    writeln!(stdout, "files: {}", out.display())?;
    stdout.flush()?;
    Ok(())
}
