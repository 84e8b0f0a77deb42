//! The command line of `profiler bench`: `profiler bench [run] [FLAGS]`, `profiler bench
//! validate`, `profiler bench overhead` and `profiler bench serve`, each with only the flags it
//! uses (clap refuses the others). [`Args::mode`] gives the mode to run; `profiler bench` with
//! no subcommand is `profiler bench run`.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::load::Test;

/// Arguments of `profiler bench`: a mode, or the flags of `run` directly.
#[derive(Debug, Clone, clap::Args)]
#[command(args_conflicts_with_subcommands = true, subcommand_value_name = "MODE", subcommand_help_heading = "Modes")]
pub struct Args {
    /// The mode; without one, `run`.
    #[command(subcommand)]
    pub mode: Option<Mode>,
    /// The flags of `run`, when no mode is named.
    #[command(flatten)]
    pub run: RunArgs,
}

impl Args {
    /// The mode to run: the one named, else [`Mode::Run`] with the flags given.
    pub fn mode(self) -> Mode {
        self.mode.unwrap_or(Mode::Run(self.run))
    }
}

/// The modes of `profiler bench`.
#[derive(Debug, Clone, Subcommand)]
pub enum Mode {
    /// The benchmark with the agent attached (the default): per test a warm-up, `--runs`
    /// measured runs and one profiled run; writes `results.json`, the rankings and `index.html`.
    Run(RunArgs),
    /// Check the ranking against target-app's switches (`validation.md`, `validation.json`; see
    /// docs/bench.md): a profiled bench run with `CRM_COSTS=all` and one with `none`, then per
    /// test alternating runs `all`, `all,-<switch>` (`--rounds`), the app restarted before each.
    /// With the defaults (all five tests, eight switches, 15 s runs) it takes about 65 minutes;
    /// `--runs 1 --duration 5 --warmup 2` about 25; `--smoke --only json,db --switches pool-ping`
    /// about 2.5.
    Validate(ValidateArgs),
    /// Measure the agent's overhead (`overhead.json`, `overhead.md`): per test, `--pairs`
    /// alternating runs without and with the agent attached in each mode (sampling, +offcpu,
    /// +syscalls, everything). `--duration` is the length of each run; `--smoke` makes it 1 pair
    /// of 3 s.
    Overhead(OverheadArgs),
    /// Start the database and the app, print the attach command line, wait for Ctrl-C.
    Serve(ServeArgs),
}

/// Where the app and its database run (every mode).
#[derive(Debug, Clone, clap::Args)]
pub struct AppArgs {
    /// CPUs of the app. Default: `0` on a 2-CPU machine, else the first half.
    #[arg(long)]
    pub app_cpus: Option<String>,
    /// CPUs of wrk. Default: `1` on a 2-CPU machine, else the second half.
    #[arg(long)]
    pub load_cpus: Option<String>,
    /// CPUs of PostgreSQL (the throwaway server). Default: the same as `--load-cpus`.
    #[arg(long)]
    pub pg_cpus: Option<String>,
    /// Database pool size of the app (the seed's method: 64).
    #[arg(long, default_value_t = 64)]
    pub pool_size: u32,
    /// Container name.
    #[arg(long, default_value = "navree")]
    pub name: String,
    /// Run the app as a pinned process in a cgroup of its own instead of in Docker.
    #[arg(long)]
    pub no_docker: bool,
    /// Use this PostgreSQL database (already seeded) instead of a throwaway server.
    #[arg(long)]
    pub database_url: Option<String>,
    /// The target-app binary. Default: `target-app` beside this `profiler` binary.
    #[arg(long)]
    pub app_binary: Option<PathBuf>,
    /// Do not run `cargo build --release --workspace --bin target-app` first, and reuse an existing image.
    #[arg(long)]
    pub skip_build: bool,
    /// Shared JWT secret of the app and the load scripts.
    #[arg(long, default_value = crate::DEFAULT_JWT_SECRET)]
    pub jwt_secret: String,
}

/// The load, the agent's sampling and where the outputs go (`run`, `validate`, `overhead`).
#[derive(Debug, Clone, clap::Args)]
pub struct LoadArgs {
    /// Output folder. Default is `reports/<UTC date-time>-<mode>/`.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Tests to run, comma-separated: json, db, queries, deals-list, deals-create. Default is all five.
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<Test>,
    /// Measured runs per test; the median is reported.
    #[arg(long, default_value_t = 3)]
    pub runs: u32,
    /// Length of each measured (and of the profiled) run, s.
    #[arg(long, default_value_t = 15)]
    pub duration: u64,
    /// Warm-up per test, s.
    #[arg(long, default_value_t = 10)]
    pub warmup: u64,
    /// wrk connections. Default is 64, the app's pool size, which keeps the pool busy without
    /// queueing most requests on it on a 2-CPU machine.
    #[arg(long, default_value_t = 64)]
    pub connections: u32,
    /// wrk threads. Default is the number of CPUs in `--load-cpus`.
    #[arg(long)]
    pub threads: Option<u32>,
    /// One short run per test (5 s, 2 s warm-up), the whole run in about 1.5 minutes.
    #[arg(long)]
    pub smoke: bool,
    /// Sampling frequency of the profiled runs, Hz.
    #[arg(long, default_value_t = 99)]
    pub frequency: u64,
    /// Extra attribution rules (TOML), added to the built-in catalog and target-app's own
    /// rules (`target-app/rules.toml`); a layer of the same name replaces the earlier one.
    #[arg(long)]
    pub rules: Vec<PathBuf>,
}

impl Default for LoadArgs {
    /// The command line's defaults (no flag given).
    fn default() -> Self {
        #[derive(Parser)]
        struct Defaults {
            #[command(flatten)]
            load: LoadArgs,
        }
        Defaults::parse_from(["bench"]).load
    }
}

/// `profiler bench run`.
#[derive(Debug, Clone, clap::Args)]
pub struct RunArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub app: AppArgs,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub load: LoadArgs,
    /// `CRM_COSTS` for the app: `all`, `none`, a list, or `all,-name`.
    #[arg(long, default_value = "all", value_parser = parse_costs)]
    pub costs: String,
    /// Re-measure the first test at the end and report the difference.
    #[arg(long)]
    pub drift: bool,
    /// No profiled runs (measure only).
    #[arg(long)]
    pub no_profile: bool,
}

/// `profiler bench validate`: every run's `CRM_COSTS` is set by the mode.
#[derive(Debug, Clone, clap::Args)]
pub struct ValidateArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub app: AppArgs,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub load: LoadArgs,
    /// Switches to validate, comma-separated. Default is all eight.
    #[arg(long, value_delimiter = ',')]
    pub switches: Vec<String>,
    /// Alternation rounds: each switch gets one run without it per round, between two runs
    /// with every cost on.
    #[arg(long, default_value_t = 3)]
    pub rounds: u32,
    /// Also measure switches on the tests whose work they do not change (a control: their
    /// gains should be within noise).
    #[arg(long)]
    pub measure_absent: bool,
}

/// `profiler bench overhead`.
#[derive(Debug, Clone, clap::Args)]
pub struct OverheadArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub app: AppArgs,
    #[command(flatten)]
    #[allow(missing_docs)]
    pub load: LoadArgs,
    /// `CRM_COSTS` for the app: `all`, `none`, a list, or `all,-name`.
    #[arg(long, default_value = "all", value_parser = parse_costs)]
    pub costs: String,
    /// A/B pairs per test and mode.
    #[arg(long, default_value_t = 5)]
    pub pairs: u32,
}

/// `profiler bench serve`.
#[derive(Debug, Clone, clap::Args)]
pub struct ServeArgs {
    #[command(flatten)]
    #[allow(missing_docs)]
    pub app: AppArgs,
    /// `CRM_COSTS` for the app: `all`, `none`, a list, or `all,-name`.
    #[arg(long, default_value = "all", value_parser = parse_costs)]
    pub costs: String,
}

/// Checks a `--costs` value with target-app's own parser (`target_app::costs::Costs::parse`),
/// so that a mistyped name is refused before PostgreSQL and the app are started (the app
/// would exit with its configuration error, seen only after the bench's 60 s start-up wait).
///
/// # Errors
/// The parser's message, naming the bad entry and the eight known names.
fn parse_costs(value: &str) -> Result<String, String> {
    target_app::costs::Costs::parse(value).map(|_| value.to_string()).map_err(|e| e.to_string().replace("CRM_COSTS", "--costs"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        bench: Args,
    }

    fn mode(args: &[&str]) -> Result<Mode, String> {
        Cli::try_parse_from(std::iter::once("bench").chain(args.iter().copied())).map(|c| c.bench.mode()).map_err(|e| e.kind().to_string())
    }

    #[test]
    fn no_mode_is_run_with_its_flags() {
        let Ok(Mode::Run(r)) = mode(&["--smoke", "--costs", "all,-pool-ping"]) else { panic!("not run") };
        assert!(r.load.smoke);
        assert_eq!(r.costs, "all,-pool-ping");
        let Ok(Mode::Run(r)) = mode(&["run", "--drift"]) else { panic!("not run") };
        assert!(r.drift);
    }

    #[test]
    fn each_mode_takes_only_its_flags() {
        let Ok(Mode::Validate(v)) = mode(&["validate", "--smoke", "--switches", "pool-ping", "--rounds", "2"]) else { panic!("not validate") };
        assert_eq!((v.switches.as_slice(), v.rounds, v.load.smoke), (&["pool-ping".to_string()][..], 2, true));
        let Ok(Mode::Overhead(o)) = mode(&["overhead", "--pairs", "7"]) else { panic!("not overhead") };
        assert_eq!(o.pairs, 7);
        assert!(matches!(mode(&["serve", "--name", "x"]), Ok(Mode::Serve(s)) if s.app.name == "x"));
        // Flags of another mode are refused, not ignored.
        assert!(mode(&["validate", "--costs", "none"]).is_err());
        assert!(mode(&["serve", "--runs", "2"]).is_err());
        assert!(mode(&["--pairs", "2"]).is_err());
        assert!(mode(&["--smoke", "validate"]).is_err());
        assert!(mode(&["--costs", "all,-no-such-cost"]).is_err());
    }

    #[test]
    fn load_defaults_are_the_command_lines() {
        let d = LoadArgs::default();
        assert_eq!((d.runs, d.duration, d.warmup, d.connections, d.frequency, d.smoke), (3, 15, 10, 64, 99, false));
    }
}
