//! The `profiler` binary: argument parsing, logging set-up and error printing only.
//!
//! One args module per subcommand turns its clap `Args` into the library's `Options`
//! ([`profiler::attach`], [`profiler::report`], [`profiler::diff::run`]); `bench` takes
//! [`bench::modes::Args`] as they are (its modes are subcommands: `run`, `validate`, `overhead`, `serve`). Errors print their chain on one line,
//! `profiler: error: ` + [`errors::error_line`] (each cause once), and exit with status 2; a broken pipe on stdout (`profiler report ... | head`) exits 0, as
//! ripgrep does.

use std::io::IsTerminal;
use std::process::ExitCode;

use clap::{ArgAction, Parser, Subcommand};
mod attach;
mod diff;
mod errors;
mod report;

/// A Linux eBPF profiler for the request pipelines of web services.
#[derive(Debug, Parser)]
#[command(name = "profiler", version, propagate_version = true)]
struct Cli {
    /// More log output on stderr: -v info, -vv debug, -vvv trace. `RUST_LOG` overrides it.
    #[arg(short, long, action = ArgAction::Count, global = true)]
    verbose: u8,

    #[command(subcommand)]
    command: Command,
}

/// The subcommands: `Args -> Options -> <library>::run`.
#[derive(Debug, Subcommand)]
enum Command {
    /// Profile a running process, cgroup or container (on-CPU, off-CPU, syscalls).
    Attach(attach::Args),
    /// Re-render a recorded profile (flamegraphs, folded stacks, pprof, syscalls, ranking, report page, summary).
    Report(report::Args),
    /// Run the bundled CRM benchmark with the agent attached (the main job), or one of its modes.
    Bench(Box<bench::modes::Args>),
    /// Compare two runs (bench or attach outputs, profiles): regression triage for pull requests.
    Diff(diff::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    init_logging(cli.verbose);
    let result = match cli.command {
        Command::Attach(args) => profiler::attach::run(&args.into()).map(|()| 0),
        Command::Report(args) => profiler::report::run(&args.into()).map(|()| 0),
        Command::Bench(args) => bench::modes::run(*args),
        Command::Diff(args) => profiler::diff::run(&args.into()),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(err) if errors::is_broken_pipe(&err) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("profiler: error: {}", errors::error_line(&err));
            ExitCode::from(2)
        }
    }
}

/// Logs go to stderr: `RUST_LOG` when set, else `warn` raised by each `-v`; coloured only
/// when stderr is a terminal (no escape codes in CI logs, files and pipes).
fn init_logging(verbose: u8) {
    use tracing_subscriber::EnvFilter;
    let default = match verbose {
        0 => "warn",
        1 => "info",
        2 => "debug",
        _ => "trace",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .with_target(verbose >= 2)
        .init();
}
