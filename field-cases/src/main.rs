//! `field-cases`: serves [`field_cases::app`] on `--listen` with `--workers` tokio workers.

use clap::Parser;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Command line of `field-cases`.
#[derive(Debug, Parser)]
#[command(version, about = "Routes that each carry one classic cost of async Rust, each beside a control route without it")]
struct Args {
    /// Address to listen on (loopback).
    #[arg(long, default_value = "127.0.0.1:8099")]
    listen: std::net::SocketAddr,
    /// Tokio worker threads.
    #[arg(long, default_value_t = 2)]
    workers: usize,
    /// PostgreSQL connection string of the database routes (`/case/n-plus-one`,
    /// `/control/join`); their tables are created and filled at start.
    #[arg(long, env = "DATABASE_URL", hide_env_values = true)]
    database_url: Option<String>,
    /// Connections of the database pool, and tokio-postgres connections of the prepare
    /// routes.
    #[arg(long, default_value_t = 4)]
    db_connections: u32,
}

fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if args.workers == 0 {
        anyhow::bail!("--workers must be at least 1");
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(args.workers).enable_all().build()?;
    runtime.block_on(async move {
        let db = match &args.database_url {
            Some(url) => {
                let pool = sqlx::postgres::PgPoolOptions::new().max_connections(args.db_connections).connect(url).await?;
                field_cases::seed_db(&pool).await?;
                let clients = field_cases::connect_clients(url, args.db_connections as usize).await?;
                Some(field_cases::Database { pool, clients })
            }
            None => None,
        };
        let app = field_cases::try_app(db)?;
        let listener = tokio::net::TcpListener::bind(args.listen).await?;
        eprintln!("listening on {}", listener.local_addr()?);
        axum::serve(listener, app).with_graceful_shutdown(shutdown()).await?;
        anyhow::Ok(())
    })
}

/// Resolves on Ctrl-C or SIGTERM, so that the fixtures' temporary files are removed.
async fn shutdown() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}
