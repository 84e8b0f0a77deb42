//! `profiler report DIR/profile.json [--out DIR]`: re-render a recorded profile without a target.
//!
//! Reads the `profile.json`, writes every rendered file ([`crate::render::write_all`]) into the
//! output directory (default: the profile's own directory) and prints the text summary
//! ([`crate::render::summary`]) on stdout.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context;

use crate::{profile, render};

/// Arguments of `profiler report`.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// The `profile.json` to render (written by `profiler attach` or `profiler bench`).
    pub profile: PathBuf,
    /// Directory for the rendered files; created when missing. Default: the profile's directory.
    #[arg(long, short)]
    pub out: Option<PathBuf>,
}

/// Runs `profiler report`.
///
/// # Errors
/// When the profile cannot be read or is not a valid `profile.json` of a supported schema,
/// or holds values no run could have ([`crate::diff::import::check_counts`]), or when the
/// output directory or a file in it cannot be written. A broken pipe on stdout
/// is returned as an `io::Error` of kind `BrokenPipe` (main exits 0 for it).
pub fn run(args: Args) -> anyhow::Result<()> {
    let profile = profile::json::read(&args.profile).context("cannot read the profile")?;
    // The same checks as `profiler diff` makes of a profile.json (a frequency of 0 Hz, counts
    // that overflow or no run could have): one line naming the field, not a report of nonsense.
    crate::diff::import::check_counts(&profile, crate::diff::import::InputKind::ProfileJson)
        .map_err(|e| anyhow::anyhow!("cannot read the profile: {}: {e}", args.profile.display()))?;
    let out = match args.out {
        Some(out) => out,
        None => match args.profile.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
            _ => PathBuf::from("."),
        },
    };
    let written = render::write_all(&profile, &out)
        .with_context(|| format!("cannot render into {}", out.display()))?;
    for path in &written {
        tracing::info!(path = %path.display(), "wrote");
    }
    let mut stdout = std::io::stdout().lock();
    stdout.write_all(render::summary(&profile).as_bytes())?;
    writeln!(stdout, "files: {}", out.display())?;
    stdout.flush()?;
    Ok(())
}
