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

/// A minimal HTTP/1.1 client on exactly one keep-alive TCP connection (the cost tests need
/// to know that no new connection, hence no new server task, appears while counting).
/// Responses must carry `Content-Length` (every response of this app does without
/// `Accept-Encoding`).
pub struct OneConnection {
    stream: tokio::io::BufReader<tokio::net::TcpStream>,
    host: String,
}

impl OneConnection {
    /// Connects to `base` (`http://127.0.0.1:PORT`).
    pub async fn connect(base: &str) -> OneConnection {
        let host = base.trim_start_matches("http://").trim_end_matches('/').to_string();
        let tcp = tokio::net::TcpStream::connect(&host).await.expect("connect to the app");
        tcp.set_nodelay(true).unwrap();
        OneConnection { stream: tokio::io::BufReader::new(tcp), host }
    }

    /// Sends one request and reads the whole response: (status, body).
    pub async fn request(&mut self, method: &str, path: &str, headers: &[(&str, &str)], body: Option<&str>) -> (u16, String) {
        use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt};
        let mut req = format!("{method} {path} HTTP/1.1\r\nHost: {}\r\n", self.host);
        for (k, v) in headers {
            req.push_str(&format!("{k}: {v}\r\n"));
        }
        if let Some(b) = body {
            req.push_str(&format!("Content-Length: {}\r\n", b.len()));
        }
        req.push_str("\r\n");
        if let Some(b) = body {
            req.push_str(b);
        }
        self.stream.get_mut().write_all(req.as_bytes()).await.expect("write request");
        let mut status_line = String::new();
        self.stream.read_line(&mut status_line).await.expect("read status line");
        let status: u16 = status_line.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or_else(|| panic!("bad status line {status_line:?}"));
        let mut len = None;
        loop {
            let mut line = String::new();
            self.stream.read_line(&mut line).await.expect("read header");
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some((k, v)) = line.split_once(':') {
                if k.eq_ignore_ascii_case("content-length") {
                    len = v.trim().parse::<usize>().ok();
                }
            }
        }
        let len = len.unwrap_or_else(|| panic!("{method} {path}: response without Content-Length"));
        let mut body = vec![0u8; len];
        self.stream.read_exact(&mut body).await.expect("read body");
        (status, String::from_utf8_lossy(&body).into_owned())
    }
}
