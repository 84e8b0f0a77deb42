//! `profiler diff`: arguments -> [`profiler::diff::Options`] -> [`profiler::diff::run`].

use std::path::PathBuf;

use clap::{Parser, ValueEnum};
use profiler::diff::{Format, Options};

/// What `--format` prints to stdout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FormatArg {
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
    pub format: Option<FormatArg>,
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


impl From<Args> for Options {
    fn from(a: Args) -> Options {
        let format = a.format.map(|f| match f {
            FormatArg::Md => Format::Md,
            FormatArg::Json => Format::Json,
        });
        Options {
            base: a.base,
            head: a.head,
            out: a.out,
            format,
            fail_on_regression: a.fail_on_regression,
            noise_floor: a.noise_floor,
            // target-app's layers when its sources are beside this binary (diffs of benches),
            // then the user's.
            rules: bench::modes::run::target_app_rules_file().into_iter().chain(a.rules).collect(),
        }
    }
}
