//! `profiler report`: arguments -> [`profiler::report::Options`] -> [`profiler::report::run`].

use std::path::PathBuf;

use profiler::report::Options;

/// Arguments of `profiler report`.
#[derive(Debug, Clone, clap::Args)]
pub struct Args {
    /// The `profile.json` to render (written by `profiler attach` or `profiler bench`), or the
    /// output folder that holds it.
    pub profile: PathBuf,
    /// Directory for the rendered files; created when missing. Default: the profile's directory.
    #[arg(long, short)]
    pub out: Option<PathBuf>,
    /// Extra attribution rules (TOML) added to the built-in catalog, as for `profiler attach`;
    /// with them the ranking is made anew even when the directory has one.
    #[arg(long)]
    pub rules: Vec<PathBuf>,
    /// Draw the full demangled Rust names in flamegraph frames (default: short names).
    #[arg(long)]
    pub full_frame_names: bool,
}

impl From<Args> for Options {
    fn from(a: Args) -> Options {
        Options { profile: a.profile, out: a.out, rules: a.rules, full_frame_names: a.full_frame_names }
    }
}
