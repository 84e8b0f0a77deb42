//! `bench-pg`: starts a seeded throwaway PostgreSQL (`bench::pg`) for running the CRM app
//! or the conformance suite by hand.
//!
//! Prints the application URL (`postgres://crm:crm@127.0.0.1:PORT/NAME`) as the only line on
//! stdout, then serves until stdin reaches end of file, or SIGINT/SIGTERM arrives; then stops
//! the server and removes its directory. Exit status: 0 after a clean stop, 2 on a usage
//! error, 1 when the server cannot be started or stopped (one error line on stderr).
//!
//! ```text
//! bench-pg --db crm | { read -r url; DATABASE_URL=$url target-app; }
//! ```

use std::io::Write as _;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Parser;
use tokio::io::AsyncReadExt as _;
use tokio::signal::unix::{signal, SignalKind};

/// Start a seeded throwaway PostgreSQL and print its URL.
#[derive(Debug, Parser)]
#[command(version, about)]
struct Args {
    /// Name of the seeded database ([a-z_][a-z0-9_]*).
    #[arg(long, default_value = "crm")]
    db: String,
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
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench-pg: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &Args) -> anyhow::Result<()> {
    let pg = bench::pg::TempPostgres::start().context("start PostgreSQL")?;
    let url = pg.create_seeded_db(&args.db).with_context(|| format!("create the seeded database {}", args.db))?;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().context("start the tokio runtime")?;
    // The handlers go in before the URL is printed: a caller that signals as soon as it has
    // read the URL must find them (else the default action kills us and the server is left
    // to PR_SET_PDEATHSIG).
    let (mut term, mut int) = {
        let _ctx = rt.enter();
        (
            signal(SignalKind::terminate()).context("install the SIGTERM handler")?,
            signal(SignalKind::interrupt()).context("install the SIGINT handler")?,
        )
    };
    {
        let mut out = std::io::stdout().lock();
        writeln!(out, "{url}").and_then(|()| out.flush()).context("write the URL to stdout")?;
    }
    rt.block_on(async {
        let mut stdin = tokio::io::stdin();
        let mut buf = [0u8; 256];
        let stdin_eof = async {
            loop {
                match stdin.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {}
                }
            }
        };
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
            () = stdin_eof => {}
        }
        anyhow::Ok(())
    })?;
    // tokio reads stdin on a blocking thread, which a signal does not interrupt, and dropping
    // the runtime would wait for it (until stdin gets a byte or its end: with `sleep infinity |
    // bench-pg`, never). Leave it behind: the process exits after the stop.
    rt.shutdown_background();
    pg.stop().context("stop PostgreSQL")
}
