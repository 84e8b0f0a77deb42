//! `target-app`: serves the CRM API (see the library docs and target-app/README.md).
//! Configuration comes from the environment ([`target_app::Config`]); a bad value prints one
//! line and exits with status 2. Other start-up failures exit with status 1.

use std::net::SocketAddr;
use std::process::ExitCode;

use anyhow::Context as _;
use axum::serve::ListenerExt;
use mimalloc::MiMalloc;
use target_app::{app, db, AppState, Config, Settings};
use tracing_subscriber::EnvFilter;

/// mimalloc, built with frame pointers (CFLAGS in .cargo/config.toml), so that samples inside
/// the allocator keep their callers.
#[global_allocator]
static GLOBAL: MiMalloc = MiMalloc;

fn main() -> ExitCode {
    let config = match Config::from_env() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("target-app: configuration error: {e}");
            return ExitCode::from(2);
        }
    };
    let filter = match EnvFilter::try_new(&config.log_filter) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("target-app: configuration error: RUST_LOG={:?} is invalid: {e}", config.log_filter);
            return ExitCode::from(2);
        }
    };
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("target-app: error: cannot start the tokio runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(serve(config)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("target-app: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn serve(config: Config) -> anyhow::Result<()> {
    let pool = db::connect(&config.database_url, config.costs, config.db_pool_size)
        .await
        .context("cannot connect to PostgreSQL (DATABASE_URL)")?;
    let settings = Settings {
        jwt_secret: config.jwt_secret.clone(),
        costs: config.costs,
        rate_limit_per_second: config.rate_limit_per_second,
        maintenance_file: config.maintenance_file.clone(),
    };
    let addr = SocketAddr::new(config.host, config.port);
    let listener = tokio::net::TcpListener::bind(addr).await.with_context(|| format!("cannot listen on {addr}"))?;
    let local = listener.local_addr().context("listener address")?;
    // One line on stderr when ready: tests and scripts wait for it.
    eprintln!("target-app: listening on http://{local} (CRM_COSTS={}, pool {})", config.costs, config.db_pool_size);
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    axum::serve(listener, app(AppState::new(pool, settings)).into_make_service_with_connect_info::<SocketAddr>())
        .with_graceful_shutdown(shutdown_signal())
        .await
        .context("server error")
}

async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(s) => s,
            Err(_) => {
                let _ = ctrl_c.await;
                return;
            }
        };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    let _ = ctrl_c.await;
}
