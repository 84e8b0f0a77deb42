//! Shared helpers of the integration tests: a seeded throwaway PostgreSQL (bench::pg) and the
//! app, either in-process (`target_app::app`) or as the built binary.

#![allow(dead_code)]

pub mod pgproxy;
pub mod uprobes;

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use bench::pg::TempPostgres;
use target_app::{app, db, AppState, Costs, Settings};

/// The JWT secret the tests run the app with (bench's default).
pub const SECRET: &str = bench::seed::DEFAULT_JWT_SECRET;

/// A running PostgreSQL with one seeded database.
pub struct Db {
    pub pg: TempPostgres,
    pub url: String,
}

static DB_SEQ: AtomicU32 = AtomicU32::new(0);

impl Db {
    /// Starts PostgreSQL and creates a seeded database. Panics (the test fails) when anything
    /// is missing: these tests never skip.
    pub fn start() -> Db {
        let pg = TempPostgres::start().expect("start a throwaway PostgreSQL (bench::pg)");
        let name = format!("crm_{}_{}", std::process::id(), DB_SEQ.fetch_add(1, Ordering::Relaxed));
        let url = pg.create_seeded_db(&name).expect("create the seeded database");
        Db { pg, url }
    }

    /// Another seeded database on the same server.
    pub fn another(&self) -> String {
        let name = format!("crm_{}_{}", std::process::id(), DB_SEQ.fetch_add(1, Ordering::Relaxed));
        self.pg.create_seeded_db(&name).expect("create the seeded database")
    }
}

/// The app served in-process on 127.0.0.1:<free port>.
pub struct InProcess {
    pub base: String,
    handle: tokio::task::JoinHandle<()>,
}

impl Drop for InProcess {
    fn drop(&mut self) {
        self.handle.abort();
    }
}

/// Serves `target_app::app` for `costs` against `url` (pool of `pool_size`).
pub async fn serve_in_process(url: &str, costs: Costs, pool_size: u32) -> InProcess {
    let pool = db::connect(url, costs, pool_size).await.expect("connect to the seeded database");
    let state = AppState::new(pool, Settings::new(SECRET, costs));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind 127.0.0.1:0");
    let addr = listener.local_addr().unwrap();
    let handle = tokio::spawn(async move {
        axum::serve(listener, app(state).into_make_service_with_connect_info::<SocketAddr>()).await.expect("serve");
    });
    InProcess { base: format!("http://{addr}"), handle }
}

/// The built `target-app` binary, running; killed on drop.
pub struct AppProcess {
    pub child: Child,
    pub base: String,
    pub stderr_tail: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl AppProcess {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for AppProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The path of the built binary.
pub fn binary() -> &'static str {
    env!("CARGO_BIN_EXE_target-app")
}

/// Starts the binary with `env` (plus PORT=0, HOST=127.0.0.1, JWT_SECRET) and waits for its
/// "listening on" line (at most 20 s).
pub fn spawn_binary(env: &[(&str, &str)]) -> AppProcess {
    let mut cmd = Command::new(binary());
    cmd.env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOST", "127.0.0.1")
        .env("PORT", "0")
        .env("JWT_SECRET", SECRET)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("spawn target-app");
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let tail = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let tail2 = tail.clone();
    std::thread::spawn(move || {
        let mut tx = Some(tx);
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(rest) = line.split("listening on ").nth(1) {
                if let Some(tx) = tx.take() {
                    let _ = tx.send(rest.split_whitespace().next().unwrap_or("").to_string());
                }
            }
            tail2.lock().unwrap().push(line);
        }
    });
    let base = match rx.recv_timeout(Duration::from_secs(20)) {
        Ok(b) => b,
        Err(_) => {
            let _ = child.kill();
            panic!("target-app did not report 'listening on' within 20 s; stderr: {:?}", tail.lock().unwrap());
        }
    };
    AppProcess { child, base, stderr_tail: tail }
}

/// A client that keeps one connection alive (requests are sent one after another).
pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .pool_max_idle_per_host(1)
        .timeout(Duration::from_secs(30))
        .build()
        .expect("reqwest client")
}

/// A valid token for user `id`.
pub fn token(id: i64) -> String {
    bench::token::mint_valid(SECRET, id)
}
