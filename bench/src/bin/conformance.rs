//! `conformance`: runs the CRM API conformance suite (`bench::conformance`) against a server.
//!
//! Prints every failing check (name, then the detail indented), then the line
//! `conformance: N passed, M failed`. Exit status: 0 when every check passed, 1 when any
//! failed, 2 on a usage error or when the server cannot be reached.

use std::process::ExitCode;

use anyhow::Context as _;
use clap::Parser;

/// Checks a running CRM API against bench/SPEC.md.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// Base URL of the server, e.g. http://127.0.0.1:8080 (HTTP only, no path).
    #[arg(long)]
    url: String,
    /// HS256 secret the server verifies tokens with (its JWT_SECRET).
    #[arg(long, env = "JWT_SECRET", default_value = bench::DEFAULT_JWT_SECRET, hide_default_value = true)]
    secret: String,
    /// Also list the checks that passed.
    #[arg(long)]
    verbose: bool,
}

fn main() -> ExitCode {
    let args = match Args::try_parse() {
        Ok(a) => a,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    match run(&args) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("conformance: error: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn run(args: &Args) -> anyhow::Result<bool> {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().context("start the tokio runtime")?;
    let report = rt.block_on(bench::conformance::try_run(&args.url, &args.secret))?;
    for c in &report.checks {
        match (&c.detail, c.passed) {
            (_, true) if args.verbose => println!("ok    {}", c.name),
            (_, true) => {}
            (Some(d), false) => println!("FAIL  {}\n      {}", c.name, d.replace('\n', "\n      ")),
            (None, false) => println!("FAIL  {}", c.name),
        }
    }
    println!("{}", report.summary_line());
    Ok(report.failed() == 0)
}
