//! A counting TCP proxy between the app and PostgreSQL that decodes the PostgreSQL v3 wire
//! protocol (https://www.postgresql.org/docs/15/protocol-message-formats.html) in both
//! directions and records every exchange the client closes with `Sync` ('S') or a simple
//! `Query` ('Q') and the server answers with `ReadyForQuery` ('Z'): its kind and statement
//! text (from `Parse` or `Query`, or the prepared statement a `Bind` names). A `Sync` alone
//! is a ping (that is what sqlx's `PgConnection::ping` sends). The `ReadyForQuery` that ends
//! connection start-up is not an exchange. Client writes ("flushes") that close at least one
//! exchange are counted too. Connect with `sslmode=disable`.

#![allow(dead_code)]

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What one exchange was.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Exchange {
    /// A lone `Sync`.
    Ping,
    /// A simple-protocol `Query` with this text (`BEGIN`, `COMMIT`, ...).
    Simple(String),
    /// Extended protocol that parsed (prepared) this statement.
    Prepare(String),
    /// Extended protocol that bound and executed this already-prepared statement.
    Execute(String),
    /// Anything else (e.g. a `Close` only).
    Other(String),
}

/// What the proxy saw since the last [`PgProxy::take`].
#[derive(Debug, Default, Clone)]
pub struct Stats {
    /// Every exchange, in the order the `ReadyForQuery`s came back.
    pub exchanges: Vec<Exchange>,
    /// Client writes that closed at least one exchange.
    pub flushes: u64,
    /// TCP connections accepted.
    pub connections: u64,
}

impl Stats {
    /// How many exchanges match `pred`.
    pub fn count(&self, pred: impl Fn(&Exchange) -> bool) -> usize {
        self.exchanges.iter().filter(|e| pred(e)).count()
    }
    /// Exchanges grouped by kind and text, with counts.
    pub fn histogram(&self) -> Vec<(Exchange, usize)> {
        let mut m: HashMap<Exchange, usize> = HashMap::new();
        for e in &self.exchanges {
            *m.entry(e.clone()).or_default() += 1;
        }
        let mut v: Vec<_> = m.into_iter().collect();
        v.sort();
        v
    }
}

/// The proxy; listens on 127.0.0.1:<free port> until dropped.
pub struct PgProxy {
    pub addr: SocketAddr,
    stats: Arc<Mutex<Stats>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for PgProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[derive(Default)]
struct Conn {
    pending: Mutex<VecDeque<Exchange>>,
}

impl PgProxy {
    /// Starts a proxy to `upstream` (host:port).
    pub async fn start(upstream: SocketAddr) -> PgProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let addr = listener.local_addr().unwrap();
        let stats = Arc::new(Mutex::new(Stats::default()));
        let s = stats.clone();
        let task = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else { return };
                let server = TcpStream::connect(upstream).await.expect("proxy: connect to PostgreSQL");
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                s.lock().unwrap().connections += 1;
                let conn = Arc::new(Conn::default());
                let (cr, cw) = client.into_split();
                let (sr, sw) = server.into_split();
                tokio::spawn(client_to_server(cr, sw, conn.clone(), s.clone()));
                tokio::spawn(server_to_client(sr, cw, conn, s.clone()));
            }
        });
        PgProxy { addr, stats, task }
    }

    /// `url` (a `postgres://user:pw@host:port/db` URL) pointed at the proxy, without TLS.
    pub fn url_for(&self, url: &str) -> String {
        let (scheme_auth, rest) = url.split_once('@').expect("URL with user@host");
        let (_, db) = rest.split_once('/').expect("URL with a database");
        format!("{scheme_auth}@{}/{db}?sslmode=disable", self.addr)
    }

    /// Waits until no exchange has completed for `quiet`, then [`PgProxy::take`]s.
    pub async fn take_when_quiet(&self, quiet: std::time::Duration) -> Stats {
        let mut last = usize::MAX;
        loop {
            let now = self.stats.lock().unwrap().exchanges.len();
            if now == last {
                return self.take();
            }
            last = now;
            tokio::time::sleep(quiet).await;
        }
    }

    /// Returns what was seen so far and starts over.
    pub fn take(&self) -> Stats {
        let mut s = self.stats.lock().unwrap();
        let connections = s.connections;
        let out = std::mem::take(&mut *s);
        s.connections = connections;
        out
    }
}

fn cstr(b: &[u8]) -> (String, &[u8]) {
    let end = b.iter().position(|&c| c == 0).unwrap_or(b.len());
    (String::from_utf8_lossy(&b[..end]).into_owned(), b.get(end + 1..).unwrap_or(&[]))
}

#[derive(Debug)]
enum Msg {
    Parse(String),
    Bind(String),
    Other(u8),
}

async fn client_to_server(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    conn: Arc<Conn>,
    stats: Arc<Mutex<Stats>>,
) {
    let mut buf: Vec<u8> = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    let mut started = false;
    let mut statements: HashMap<String, String> = HashMap::new();
    let mut batch: Vec<Msg> = Vec::new();
    loop {
        let n = match from.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        buf.extend_from_slice(&chunk[..n]);
        let mut closed = 0;
        // Record before forwarding, so the answer cannot overtake the bookkeeping.
        loop {
            if !started {
                if buf.len() < 8 {
                    break;
                }
                let len = u32::from_be_bytes(buf[0..4].try_into().unwrap()) as usize;
                if buf.len() < len {
                    break;
                }
                let code = u32::from_be_bytes(buf[4..8].try_into().unwrap());
                assert_ne!(code, 80_877_103, "proxy: got an SSLRequest; connect with sslmode=disable");
                started = true;
                buf.drain(..len);
                continue;
            }
            if buf.len() < 5 {
                break;
            }
            let ty = buf[0];
            let len = u32::from_be_bytes(buf[1..5].try_into().unwrap()) as usize;
            if buf.len() < 1 + len {
                break;
            }
            let body = buf[5..1 + len].to_vec();
            buf.drain(..1 + len);
            match ty {
                b'P' => {
                    let (name, rest) = cstr(&body);
                    let (sql, _) = cstr(rest);
                    statements.insert(name, sql.clone());
                    batch.push(Msg::Parse(sql));
                }
                b'B' => {
                    let (_portal, rest) = cstr(&body);
                    let (stmt, _) = cstr(rest);
                    batch.push(Msg::Bind(stmt));
                }
                b'S' | b'Q' => {
                    let ex = if ty == b'Q' {
                        Exchange::Simple(cstr(&body).0)
                    } else if let Some(sql) = batch.iter().find_map(|m| match m {
                        Msg::Parse(s) => Some(s.clone()),
                        _ => None,
                    }) {
                        Exchange::Prepare(sql)
                    } else if let Some(stmt) = batch.iter().find_map(|m| match m {
                        Msg::Bind(s) => Some(s.clone()),
                        _ => None,
                    }) {
                        Exchange::Execute(statements.get(&stmt).cloned().unwrap_or_else(|| format!("<unknown statement {stmt}>")))
                    } else if batch.is_empty() {
                        Exchange::Ping
                    } else {
                        Exchange::Other(format!("{batch:?}"))
                    };
                    batch.clear();
                    conn.pending.lock().unwrap().push_back(ex);
                    closed += 1;
                }
                other => batch.push(Msg::Other(other)),
            }
        }
        if closed > 0 {
            stats.lock().unwrap().flushes += 1;
        }
        if to.write_all(&chunk[..n]).await.is_err() {
            return;
        }
    }
}

async fn server_to_client(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    conn: Arc<Conn>,
    stats: Arc<Mutex<Stats>>,
) {
    let mut buf: Vec<u8> = Vec::new();
    let mut chunk = vec![0u8; 64 * 1024];
    let mut setup_done = false;
    loop {
        let n = match from.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        buf.extend_from_slice(&chunk[..n]);
        loop {
            if buf.len() < 5 {
                break;
            }
            let ty = buf[0];
            let len = u32::from_be_bytes(buf[1..5].try_into().unwrap()) as usize;
            if buf.len() < 1 + len {
                break;
            }
            buf.drain(..1 + len);
            if ty == b'Z' {
                if !setup_done {
                    setup_done = true;
                } else {
                    let ex = conn.pending.lock().unwrap().pop_front().unwrap_or(Exchange::Other("unmatched ReadyForQuery".into()));
                    stats.lock().unwrap().exchanges.push(ex);
                }
            }
        }
        if to.write_all(&chunk[..n]).await.is_err() {
            return;
        }
    }
}
