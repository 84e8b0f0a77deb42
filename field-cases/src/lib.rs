//! `field-cases`: a web app whose routes each carry ONE classic cost of async Rust services,
//! each beside a CONTROL route that does the same work without the pattern.
//!
//! It is the ground truth the profiler's detectors are tested against: the figures that
//! describe each case (syscalls per request, shares of on-CPU samples, throughput) are
//! measured with instruments outside the profiler and written down in `field-cases/README.md`
//! and `field-cases/expected.toml`.
//!
//! | case | control | the cost |
//! |---|---|---|
//! | `/case/regex-per-request` | `/control/regex-static` | `Regex::new` on every request |
//! | `/case/blocking-sleep` | `/control/async-sleep` | `std::thread::sleep` on a runtime worker |
//! | `/case/global-mutex` | `/control/no-lock` | one process-wide `Mutex` held during CPU work |
//! | `/case/hash-on-worker` | `/control/hash-blocking` | a password hash on a runtime worker |
//! | `/case/log-stdout` | `/control/log-buffered` | one `write` to stdout per request |
//! | `/case/brotli-11` | `/control/brotli-5` | brotli at quality 11 per response |
//! | `/case/json-from-reader` | `/control/json-from-slice` | `serde_json::from_reader` on an unbuffered `File` |
//! | `/case/n-plus-one` | `/control/join` | one `SELECT` per item of a list (N+1 queries, [`N_PLUS_ONE_ITEMS`] items) |
//! | `/case/connect-per-request` | `/control/pooled-connection` | a new database connection (TCP, start-up, SCRAM authentication) for every request |
//! | `/case/transaction-across-wait` | `/control/wait-before-transaction` | a transaction held open across an `.await` ([`TRANSACTION_WAIT`]): idle in transaction |
//! | `/case/connection-across-wait`, `/case/connection-before-wait` | `/control/wait-before-connection` | a pooled connection kept checked out across an `.await` ([`TRANSACTION_WAIT`]) between its two reads, or between the checkout and its first read |
//! | `/case/pretty-json` | `/control/compact-json` | a JSON response pretty-printed (`serde_json::to_vec_pretty`) instead of compact |
//!
//! The database routes need `--database-url` (PostgreSQL); without it they answer 503.
//!
//! `/stats` returns the number of requests served per route since start; `/stats/connect` the
//! connections `/case/connect-per-request` opened and the time it spent opening them.

use std::collections::hash_map::DefaultHasher;
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, LazyLock, Mutex, OnceLock};
use std::time::Duration;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::json;

/// Every route with a request counter, in the order `/stats` lists them.
pub const ROUTES: [&str; 33] = [
    "/case/regex-per-request",
    "/control/regex-static",
    "/case/blocking-sleep",
    "/control/async-sleep",
    "/case/global-mutex",
    "/control/no-lock",
    "/case/hash-on-worker",
    "/control/hash-blocking",
    "/case/log-stdout",
    "/control/log-buffered",
    "/case/brotli-11",
    "/control/brotli-5",
    "/case/json-from-reader",
    "/control/json-from-slice",
    "/case/lock-across-sleep",
    "/control/sleep-without-lock",
    "/case/file-read-per-request",
    "/control/file-read-once",
    "/case/dns-per-request",
    "/control/dns-once",
    "/case/n-plus-one",
    "/control/join",
    "/case/connect-per-request",
    "/control/pooled-connection",
    "/case/transaction-across-wait",
    "/control/wait-before-transaction",
    "/case/connection-across-wait",
    "/control/wait-before-connection",
    "/case/connection-before-wait",
    "/case/pretty-json",
    "/control/compact-json",
    "/case/prepare-per-execution",
    "/control/prepared-once",
];

/// Items an order of the database routes has: `/case/n-plus-one` runs one `SELECT` for the
/// order's item ids, then one `SELECT` per item ([`N_PLUS_ONE_ITEMS`] + 1 statements per
/// request); `/control/join` runs one `SELECT ... JOIN` for the same rows.
pub const N_PLUS_ONE_ITEMS: usize = 20;
/// Orders the database routes pick from (each with [`N_PLUS_ONE_ITEMS`] items).
pub const ORDERS: u64 = 100;

/// The log-line pattern that `/case/regex-per-request` compiles on every request and
/// `/control/regex-static` compiles once. Unicode classes (`\d`, `\S`) make its compilation
/// the expensive part (tens to hundreds of µs), the match itself is cheap.
pub const LOG_LINE_PATTERN: &str = r#"^(?P<ip>\d{1,3}(?:\.\d{1,3}){3}) (?P<ident>\S+) (?P<user>\S+) \[(?P<ts>\d{2}/[A-Za-z]{3}/\d{4}:\d{2}:\d{2}:\d{2} [+-]\d{4})\] "(?P<method>GET|POST|PUT|PATCH|DELETE|HEAD|OPTIONS) (?P<path>[^ "?]+)(?:\?(?P<query>[^ "]*))? HTTP/(?P<version>\d\.\d)" (?P<status>[1-5]\d{2}) (?P<size>\d+|-)(?: "(?P<referer>[^"]*)" "(?P<agent>[^"]*)")?$"#;

/// The line both regex routes match.
pub const LOG_LINE_SAMPLE: &str = r#"127.0.0.1 - alice [10/Oct/2026:13:55:36 +0000] "GET /api/v1/deals?page=2&per_page=50 HTTP/1.1" 200 2326 "https://crm.example/deals" "wrk/4.2.0""#;

/// Duration of the sleep of `/case/blocking-sleep` and `/control/async-sleep`.
pub const SLEEP: Duration = Duration::from_millis(2);

/// How long `/case/lock-across-sleep` holds its lock (sleeping), and `/control/sleep-without-lock`
/// sleeps without one.
pub const LOCKED_SLEEP: Duration = Duration::from_micros(300);

/// The wait (a `tokio::time::sleep`, standing for a call to another service) of
/// `/case/transaction-across-wait`, inside its transaction, and of
/// `/control/wait-before-transaction`, before it.
pub const TRANSACTION_WAIT: Duration = Duration::from_millis(5);

/// Rounds of hashing and map updates of the mutex routes: about 30 µs of CPU here.
pub const TALLY_ROUNDS: u64 = 600;

/// Keys of the tally map (the map never grows past this).
pub const TALLY_KEYS: u64 = 512;

/// PBKDF2-HMAC-SHA256 iterations of the hash routes: about 5 ms of CPU here.
pub const PBKDF2_ROUNDS: u32 = 40_000;

/// Items in the JSON body of the brotli routes (about 9.4 KB).
pub const BROTLI_ITEMS: usize = 48;

/// Items in the JSON file of the JSON routes (about 16 KB).
pub const CATALOG_ITEMS: usize = 64;

static REGEX: LazyLock<regex::Regex> = LazyLock::new(|| regex::Regex::new(LOG_LINE_PATTERN).expect("static pattern"));

/// The process-wide state of `/case/global-mutex`.
static TALLY: LazyLock<Mutex<Tally>> = LazyLock::new(|| Mutex::new(Tally::new()));

/// Per-route counters, indexed like [`ROUTES`].
#[derive(Debug)]
struct Stats {
    served: [AtomicU64; ROUTES.len()],
    /// Time `/case/connect-per-request` spent opening its connections, ns (the app's own
    /// clock around `PgConnection::connect_with`), and the connections it opened.
    connect: (AtomicU64, AtomicU64),
    /// Per route of `/case/connection-across-wait`, `/control/wait-before-connection` and
    /// `/case/connection-before-wait`: the time their checkouts held a pooled connection outside its two statements, ns (the app's
    /// own clock: from `acquire` returning to the connection's drop, less the time inside each
    /// statement's `fetch_one`), and the checkouts.
    held: [(AtomicU64, AtomicU64); 3],
}

impl Default for Stats {
    fn default() -> Stats {
        Stats { served: std::array::from_fn(|_| AtomicU64::new(0)), connect: Default::default(), held: Default::default() }
    }
}

impl Stats {
    /// Counts one request of route `i` and returns its number (from 1).
    fn hit(&self, i: usize) -> u64 {
        self.served[i].fetch_add(1, Ordering::Relaxed) + 1
    }
}

/// What the handlers share: counters, fixtures, the background logger.
struct AppState {
    stats: Stats,
    /// The JSON body the brotli routes compress.
    brotli_body: Vec<u8>,
    /// The JSON file the JSON routes parse; removed when the state is dropped.
    catalog: tempfile::NamedTempFile,
    /// The text file `/case/file-read-per-request` reads on every request ([`TEXT_FILE_BYTES`]);
    /// removed when the state is dropped.
    text_file: tempfile::NamedTempFile,
    /// Its content, read once at start-up for `/control/file-read-once`.
    text: String,
    /// `localhost:80` resolved once at start-up, for `/control/dns-once`.
    resolved: Vec<std::net::SocketAddr>,
    /// Lines for the background logger thread of `/control/log-buffered`, started by its
    /// first request (so that no other route's figures include the thread's wake-ups).
    log_tx: OnceLock<Option<mpsc::Sender<String>>>,
    /// The database of the database routes, when `--database-url` was given.
    db: Option<sqlx::PgPool>,
    /// tokio-postgres connections of the prepare routes, each with [`ITEM_PRICE`] prepared
    /// once on it, taken round robin.
    clients: Vec<(tokio_postgres::Client, tokio_postgres::Statement)>,
}

type Shared = Arc<AppState>;

/// Builds the router with fresh fixtures (the JSON file in a temporary directory, the brotli
/// body); the background logger thread starts with the first `/control/log-buffered`.
///
/// # Panics
/// When the fixtures cannot be written (see [`try_app`]).
pub fn app() -> Router {
    try_app(None).expect("cannot set up the field-cases fixtures")
}

/// The database of the database routes.
pub struct Database {
    /// sqlx's pool, already seeded ([`seed_db`]).
    pub pool: sqlx::PgPool,
    /// tokio-postgres connections of `/case/prepare-per-execution` and
    /// `/control/prepared-once` ([`connect_clients`]).
    pub clients: Vec<(tokio_postgres::Client, tokio_postgres::Statement)>,
}

/// Builds the router; see [`app`]. `db`: the database routes' connections; without it they
/// answer 503.
///
/// # Errors
/// When the JSON fixture cannot be written to the temporary directory.
pub fn try_app(db: Option<Database>) -> anyhow::Result<Router> {
    let (db, clients) = match db {
        Some(d) => (Some(d.pool), d.clients),
        None => (None, Vec::new()),
    };
    let mut catalog = tempfile::Builder::new().prefix("field-cases-catalog-").suffix(".json").tempfile()?;
    catalog.write_all(&catalog_json())?;
    catalog.flush()?;
    let text = text_content();
    let mut text_file = tempfile::Builder::new().prefix("field-cases-text-").suffix(".txt").tempfile()?;
    text_file.write_all(text.as_bytes())?;
    text_file.flush()?;
    let resolved = std::net::ToSocketAddrs::to_socket_addrs(DNS_NAME)?.collect();
    let state = Arc::new(AppState {
        text_file,
        text,
        resolved,
        stats: Stats::default(),
        brotli_body: brotli_body(),
        catalog,
        log_tx: OnceLock::new(),
        clients,
        db,
    });
    Ok(Router::new()
        .route("/case/regex-per-request", get(regex_per_request))
        .route("/control/regex-static", get(regex_static))
        .route("/case/blocking-sleep", get(blocking_sleep))
        .route("/control/async-sleep", get(async_sleep))
        .route("/case/global-mutex", get(global_mutex))
        .route("/control/no-lock", get(no_lock))
        .route("/case/hash-on-worker", get(hash_on_worker))
        .route("/control/hash-blocking", get(hash_blocking))
        .route("/case/log-stdout", get(log_stdout))
        .route("/control/log-buffered", get(log_buffered))
        .route("/case/brotli-11", get(brotli_11))
        .route("/control/brotli-5", get(brotli_5))
        .route("/case/json-from-reader", get(json_from_reader))
        .route("/control/json-from-slice", get(json_from_slice))
        .route("/case/lock-across-sleep", get(lock_across_sleep))
        .route("/control/sleep-without-lock", get(sleep_without_lock))
        .route("/case/file-read-per-request", get(file_read_per_request))
        .route("/control/file-read-once", get(file_read_once))
        .route("/case/dns-per-request", get(dns_per_request))
        .route("/control/dns-once", get(dns_once))
        .route("/case/n-plus-one", get(n_plus_one))
        .route("/control/join", get(join))
        .route("/case/connect-per-request", get(connect_per_request))
        .route("/control/pooled-connection", get(pooled_connection))
        .route("/case/transaction-across-wait", get(transaction_across_wait))
        .route("/control/wait-before-transaction", get(wait_before_transaction))
        .route("/case/pretty-json", get(pretty_json))
        .route("/control/compact-json", get(compact_json))
        .route("/stats", get(stats))
        .route("/case/connection-across-wait", get(connection_across_wait))
        .route("/control/wait-before-connection", get(wait_before_connection))
        .route("/case/connection-before-wait", get(connection_before_wait))
        .route("/stats/connect", get(connect_stats))
        .route("/stats/held", get(held_stats))
        .route("/case/prepare-per-execution", get(prepare_per_execution))
        .route("/control/prepared-once", get(prepared_once))
        .with_state(state))
}

// ---- /stats -------------------------------------------------------------------------------

async fn stats(State(st): State<Shared>) -> Json<serde_json::Value> {
    let mut m = serde_json::Map::new();
    for (route, n) in ROUTES.iter().zip(&st.stats.served) {
        m.insert((*route).to_string(), n.load(Ordering::Relaxed).into());
    }
    Json(serde_json::Value::Object(m))
}

/// `{"connections": N, "connect_ns": T}`: what `/case/connect-per-request` spent opening its
/// connections since start, by the app's own clock.
async fn connect_stats(State(st): State<Shared>) -> Json<serde_json::Value> {
    let (ns, n) = &st.stats.connect;
    Json(json!({ "connections": n.load(Ordering::Relaxed), "connect_ns": ns.load(Ordering::Relaxed) }))
}

/// `{"case": {"checkouts": N, "held_ns": T}, "control": {...}, "before": {...}}`: what the
/// checkouts of `/case/connection-across-wait`, `/control/wait-before-connection` and
/// `/case/connection-before-wait` held their pooled connection outside their statements since
/// start, by the app's own clock.
async fn held_stats(State(st): State<Shared>) -> Json<serde_json::Value> {
    let one = |i: usize| {
        let (ns, n) = &st.stats.held[i];
        json!({ "checkouts": n.load(Ordering::Relaxed), "held_ns": ns.load(Ordering::Relaxed) })
    };
    Json(json!({ "case": one(0), "control": one(1), "before": one(2) }))
}

// ---- 1. regex -----------------------------------------------------------------------------

fn match_line(re: &regex::Regex) -> serde_json::Value {
    match re.captures(LOG_LINE_SAMPLE) {
        Some(c) => json!({
            "matched": true,
            "method": &c["method"],
            "path": &c["path"],
            "status": &c["status"],
        }),
        None => json!({ "matched": false }),
    }
}

async fn regex_per_request(State(st): State<Shared>) -> Json<serde_json::Value> {
    st.stats.hit(0);
    let re = regex::Regex::new(LOG_LINE_PATTERN).expect("static pattern");
    Json(match_line(&re))
}

async fn regex_static(State(st): State<Shared>) -> Json<serde_json::Value> {
    st.stats.hit(1);
    Json(match_line(&REGEX))
}

// ---- 2. sleep -----------------------------------------------------------------------------

async fn blocking_sleep(State(st): State<Shared>) -> Json<serde_json::Value> {
    st.stats.hit(2);
    std::thread::sleep(SLEEP);
    Json(json!({ "slept_ms": SLEEP.as_millis() as u64 }))
}

async fn async_sleep(State(st): State<Shared>) -> Json<serde_json::Value> {
    st.stats.hit(3);
    tokio::time::sleep(SLEEP).await;
    Json(json!({ "slept_ms": SLEEP.as_millis() as u64 }))
}

// ---- 3. mutex -----------------------------------------------------------------------------

/// Counters keyed by a hash, plus a running digest: the work of the mutex routes.
#[derive(Debug)]
struct Tally {
    counts: HashMap<u64, u64>,
    digest: u64,
}

impl Tally {
    fn new() -> Self {
        Tally { counts: HashMap::with_capacity(TALLY_KEYS as usize), digest: 0 }
    }

    /// [`TALLY_ROUNDS`] rounds of SipHash and a map update: about 30 µs.
    #[inline(never)]
    fn update(&mut self, seed: u64) -> u64 {
        for i in 0..TALLY_ROUNDS {
            let mut h = DefaultHasher::new();
            (seed, i, self.digest).hash(&mut h);
            let k = h.finish();
            *self.counts.entry(k % TALLY_KEYS).or_insert(0) += 1;
            self.digest = self.digest.rotate_left(7) ^ k;
        }
        self.digest
    }
}

async fn global_mutex(State(st): State<Shared>) -> Json<serde_json::Value> {
    let n = st.stats.hit(4);
    let (digest, keys) = {
        let mut t = TALLY.lock().unwrap_or_else(|e| e.into_inner());
        let d = t.update(n);
        (d, t.counts.len())
    };
    Json(json!({ "digest": digest, "keys": keys }))
}

/// Size of the text file of the file routes, bytes (1 MiB).
pub const TEXT_FILE_BYTES: usize = 1 << 20;

/// The name the DNS routes resolve (from /etc/hosts: no network).
pub const DNS_NAME: &str = "localhost:80";

/// A deterministic text of [`TEXT_FILE_BYTES`] bytes: lines of a log.
pub fn text_content() -> String {
    let mut s = String::with_capacity(TEXT_FILE_BYTES);
    let mut i = 0u64;
    while s.len() < TEXT_FILE_BYTES {
        s.push_str(&format!("{i:08} level=info msg=\"request served\" route=/api/v1/deals status=200\n"));
        i += 1;
    }
    s.truncate(TEXT_FILE_BYTES);
    s
}

/// Counts the lines of a text (the work both file routes do on the content).
pub fn count_lines(text: &str) -> usize {
    text.bytes().filter(|&b| b == b'\n').count()
}

/// Reads a 1 MiB file with `std::fs::read_to_string` on the runtime's worker, every request
/// (from the page cache: the worker runs the kernel's copy, no other task meanwhile).
async fn file_read_per_request(State(st): State<Shared>) -> Json<serde_json::Value> {
    st.stats.hit(16);
    let text = std::fs::read_to_string(st.text_file.path()).unwrap_or_default();
    Json(json!({ "lines": count_lines(&text) }))
}

async fn file_read_once(State(st): State<Shared>) -> Json<serde_json::Value> {
    st.stats.hit(17);
    Json(json!({ "lines": count_lines(&st.text) }))
}

/// Resolves `localhost:80` with `ToSocketAddrs` (glibc's getaddrinfo: nsswitch.conf,
/// /etc/hosts) on the runtime's worker, every request.
async fn dns_per_request(State(st): State<Shared>) -> Json<serde_json::Value> {
    st.stats.hit(18);
    let n = std::net::ToSocketAddrs::to_socket_addrs(DNS_NAME).map(|a| a.count()).unwrap_or(0);
    Json(json!({ "addresses": n }))
}

async fn dns_once(State(st): State<Shared>) -> Json<serde_json::Value> {
    st.stats.hit(19);
    Json(json!({ "addresses": st.resolved.len() }))
}

/// The lock `/case/lock-across-sleep` holds while it sleeps.
static SLOW_LOCK: Mutex<u64> = Mutex::new(0);

/// A process-wide `std::sync::Mutex` held across a blocking call (a 300 µs sleep standing for
/// slow I/O under the lock): the other worker, taking the next request, waits on the lock's
/// futex. Both routes of the pair block their worker in the sleep alike.
async fn lock_across_sleep(State(st): State<Shared>) -> Json<serde_json::Value> {
    st.stats.hit(14);
    let n = {
        let mut g = SLOW_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        *g += 1;
        std::thread::sleep(LOCKED_SLEEP);
        *g
    };
    Json(json!({ "n": n }))
}

async fn sleep_without_lock(State(st): State<Shared>) -> Json<serde_json::Value> {
    let n = st.stats.hit(15);
    std::thread::sleep(LOCKED_SLEEP);
    Json(json!({ "n": n }))
}

thread_local! {
    /// The per-thread state of `/control/no-lock`: the same map as the global one (the same
    /// keys get updated, nothing is allocated per request), but no thread shares it.
    static LOCAL_TALLY: std::cell::RefCell<Tally> = std::cell::RefCell::new(Tally::new());
}

/// The work of `/control/no-lock` (and, under the lock, of `/case/global-mutex`):
/// [`TALLY_ROUNDS`] rounds of SipHash and a map update, here on the calling thread's own map
/// (no lock). Returns the digest and the number of keys.
pub fn tally_local(seed: u64) -> (u64, usize) {
    LOCAL_TALLY.with_borrow_mut(|t| (t.update(seed), t.counts.len()))
}

async fn no_lock(State(st): State<Shared>) -> Json<serde_json::Value> {
    let n = st.stats.hit(5);
    let (digest, keys) = tally_local(n);
    Json(json!({ "digest": digest, "keys": keys }))
}

// ---- 4. password hash ---------------------------------------------------------------------

/// PBKDF2-HMAC-SHA256 with [`PBKDF2_ROUNDS`] iterations of a fixed password and a salt
/// made from `n`: about 5 ms of CPU.
#[inline(never)]
pub fn hash_password(n: u64) -> String {
    let mut salt = *b"field-cases-salt-00000000";
    salt[17..].copy_from_slice(format!("{:08x}", n as u32).as_bytes());
    let mut out = [0u8; 32];
    pbkdf2::pbkdf2_hmac::<sha2::Sha256>(b"correct horse battery staple", &salt, PBKDF2_ROUNDS, &mut out);
    out.iter().map(|b| format!("{b:02x}")).collect()
}

async fn hash_on_worker(State(st): State<Shared>) -> Json<serde_json::Value> {
    let n = st.stats.hit(6);
    let hash = hash_password(n);
    Json(json!({ "hash": hash }))
}

async fn hash_blocking(State(st): State<Shared>) -> Response {
    let n = st.stats.hit(7);
    match tokio::task::spawn_blocking(move || hash_password(n)).await {
        Ok(hash) => Json(json!({ "hash": hash })).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

// ---- 5. logging ---------------------------------------------------------------------------

fn log_line(route: &str, n: u64) -> String {
    format!(
        "level=info route={route} n={n} request_id={:016x} user=alice status=200 msg=\"request served\"",
        n.wrapping_mul(0x9e37_79b9_7f4a_7c15)
    )
}

/// How often the background logger drains its channel and flushes.
pub const LOG_FLUSH_EVERY: Duration = Duration::from_millis(20);

/// Starts the background logger of `/control/log-buffered`: every [`LOG_FLUSH_EVERY`] it
/// takes every queued line into a 64 KiB `BufWriter` on stdout and flushes it, so a `write`
/// carries hundreds of lines under load. It ends when the sender is dropped.
fn spawn_logger() -> std::io::Result<mpsc::Sender<String>> {
    let (tx, rx) = mpsc::channel::<String>();
    std::thread::Builder::new().name("field-cases-logger".into()).spawn(move || {
        let mut out = std::io::BufWriter::with_capacity(64 * 1024, std::io::stdout());
        loop {
            std::thread::sleep(LOG_FLUSH_EVERY);
            let mut wrote = false;
            loop {
                match rx.try_recv() {
                    Ok(line) => {
                        let _ = out.write_all(line.as_bytes());
                        let _ = out.write_all(b"\n");
                        wrote = true;
                    }
                    Err(mpsc::TryRecvError::Empty) => break,
                    Err(mpsc::TryRecvError::Disconnected) => {
                        let _ = out.flush();
                        return;
                    }
                }
            }
            if wrote {
                let _ = out.flush();
            }
        }
    })?;
    Ok(tx)
}

async fn log_stdout(State(st): State<Shared>) -> Json<serde_json::Value> {
    let n = st.stats.hit(8);
    let line = log_line("/case/log-stdout", n);
    // std's stdout is a LineWriter whatever it points to: one write(2) per line.
    let _ = writeln!(std::io::stdout().lock(), "{line}");
    Json(json!({ "logged": line.len() }))
}

async fn log_buffered(State(st): State<Shared>) -> Json<serde_json::Value> {
    let n = st.stats.hit(9);
    let line = log_line("/control/log-buffered", n);
    let len = line.len();
    // std's Sender is Sync (no lock around it); an unbounded send never blocks, and the
    // logger thread polls, so no send wakes it.
    match st.log_tx.get_or_init(|| spawn_logger().ok()) {
        Some(tx) => {
            let _ = tx.send(line);
        }
        None => return Json(json!({ "error": "the logger thread could not be started" })),
    }
    Json(json!({ "logged": len }))
}

// ---- 6. brotli ----------------------------------------------------------------------------

/// The deterministic JSON body of the brotli routes (about 9.4 KB: at quality 11 a 31 KB body
/// of the same kind took about 60 ms here, see README.md), built once per [`app`]: a page of
/// CRM deals with the same keys on every item and scattered values.
pub fn brotli_body() -> Vec<u8> {
    let stages = ["lead", "qualified", "proposal", "negotiation", "won", "lost"];
    let items: Vec<serde_json::Value> = (0..BROTLI_ITEMS as u64)
        .map(|i| {
            let x = i.wrapping_mul(2_654_435_761) % 100_000;
            json!({
                "id": i,
                "title": format!("Deal {i:04} with Company {}", x % 997),
                "stage": stages[(x % 6) as usize],
                "amount_cents": x * 137 % 10_000_000,
                "owner": { "id": x % 41, "email": format!("owner{}@crm.example", x % 41) },
                "tags": [format!("t{}", x % 13), format!("region-{}", x % 7)],
                "created_at": format!("2026-{:02}-{:02}T{:02}:{:02}:00Z", 1 + x % 12, 1 + x % 28, x % 24, x % 60),
            })
        })
        .collect();
    serde_json::to_vec(&json!({ "deals": items, "page": 1, "per_page": BROTLI_ITEMS })).expect("serializable")
}

/// Compresses `body` with brotli at `quality`, window 2^22 (what both brotli routes do).
///
/// # Errors
/// Never in practice (writes into a `Vec`).
pub fn brotli_compress(body: &[u8], quality: i32) -> std::io::Result<Vec<u8>> {
    let params = brotli::enc::BrotliEncoderParams { quality, lgwin: 22, ..Default::default() };
    let mut out = Vec::with_capacity(body.len() / 4);
    brotli::BrotliCompress(&mut &body[..], &mut out, &params)?;
    Ok(out)
}

fn brotli_response(result: std::io::Result<Vec<u8>>) -> Response {
    match result {
        Ok(bytes) => ([(header::CONTENT_TYPE, "application/json"), (header::CONTENT_ENCODING, "br")], bytes).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

async fn brotli_11(State(st): State<Shared>) -> Response {
    st.stats.hit(10);
    brotli_response(brotli_compress(&st.brotli_body, 11))
}

async fn brotli_5(State(st): State<Shared>) -> Response {
    st.stats.hit(11);
    brotli_response(brotli_compress(&st.brotli_body, 5))
}

// ---- 7. JSON from a file ------------------------------------------------------------------

/// The typed document of the JSON routes.
#[derive(Debug, Serialize, Deserialize)]
pub struct Catalog {
    /// Catalog version.
    pub version: u32,
    /// The products.
    pub items: Vec<Item>,
}

/// One product of [`Catalog`].
#[derive(Debug, Serialize, Deserialize)]
pub struct Item {
    /// Product id.
    pub id: u64,
    /// Stock keeping unit.
    pub sku: String,
    /// Display name.
    pub name: String,
    /// Price in cents.
    pub price_cents: u64,
    /// Whether it can be ordered.
    pub active: bool,
    /// Free-form tags.
    pub tags: Vec<String>,
}

/// The JSON file of the JSON routes (about 16 KB), pretty-printed like a config file.
pub fn catalog_json() -> Vec<u8> {
    serde_json::to_vec_pretty(&catalog(CATALOG_ITEMS)).expect("serializable")
}

/// A catalog of `n` items.
pub fn catalog(n: usize) -> Catalog {
    let items = (0..n as u64)
        .map(|i| Item {
            id: 1000 + i,
            sku: format!("SKU-{:06}", i * 7919 % 1_000_000),
            name: format!("Product number {i} of the field-cases catalog"),
            price_cents: i * 1337 % 100_000,
            active: i % 5 != 0,
            tags: vec![format!("category-{}", i % 9), format!("supplier-{}", i % 4), "in-stock".into()],
        })
        .collect();
    Catalog { version: 3, items }
}

fn catalog_path(st: &AppState) -> PathBuf {
    st.catalog.path().to_path_buf()
}

fn catalog_summary(c: &Catalog) -> serde_json::Value {
    json!({
        "version": c.version,
        "items": c.items.len(),
        "active": c.items.iter().filter(|i| i.active).count(),
        "total_cents": c.items.iter().map(|i| i.price_cents).sum::<u64>(),
    })
}

fn parse_error(e: impl std::fmt::Display) -> Response {
    (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response()
}

async fn json_from_reader(State(st): State<Shared>) -> Response {
    st.stats.hit(12);
    // An unbuffered File: serde_json's IoRead asks for one byte per read(2).
    let parsed = std::fs::File::open(catalog_path(&st))
        .map_err(anyhow::Error::from)
        .and_then(|f| serde_json::from_reader::<_, Catalog>(f).map_err(anyhow::Error::from));
    match parsed {
        Ok(c) => Json(catalog_summary(&c)).into_response(),
        Err(e) => parse_error(e),
    }
}

async fn json_from_slice(State(st): State<Shared>) -> Response {
    st.stats.hit(13);
    let parsed = std::fs::read(catalog_path(&st))
        .map_err(anyhow::Error::from)
        .and_then(|b| serde_json::from_slice::<Catalog>(&b).map_err(anyhow::Error::from));
    match parsed {
        Ok(c) => Json(catalog_summary(&c)).into_response(),
        Err(e) => parse_error(e),
    }
}

// ---- /case/pretty-json, /control/compact-json -------------------------------------------------

/// Items of the catalog `/case/pretty-json` and `/control/compact-json` answer with: 1,024
/// (about 150 KB compact, 250 KB pretty), so that serializing it is most of a request.
pub const JSON_PAGE_ITEMS: usize = 1024;

/// The catalog both JSON routes answer with ([`JSON_PAGE_ITEMS`] items), built once.
static CATALOG: LazyLock<Catalog> = LazyLock::new(|| catalog(JSON_PAGE_ITEMS));

/// The catalog pretty-printed into the body: indentation and line breaks on every field.
async fn pretty_json(State(st): State<Shared>) -> Response {
    st.stats.hit(29);
    match serde_json::to_vec_pretty(&*CATALOG) {
        Ok(body) => ([(header::CONTENT_TYPE, "application/json")], body).into_response(),
        Err(e) => parse_error(e),
    }
}

/// The same catalog, compact, through axum's `Json` response.
async fn compact_json(State(st): State<Shared>) -> Response {
    st.stats.hit(30);
    Json(&*CATALOG).into_response()
}

// ---- /case/n-plus-one, /control/join -------------------------------------------------------

/// Creates and fills the tables of the database routes (idempotent): `fc_items` (1,000 items)
/// and `fc_order_items` ([`ORDERS`] orders of [`N_PLUS_ONE_ITEMS`] items each).
///
/// # Errors
/// The first statement PostgreSQL refused.
pub async fn seed_db(pool: &sqlx::PgPool) -> Result<(), sqlx::Error> {
    sqlx::query("CREATE TABLE IF NOT EXISTS fc_items (id int PRIMARY KEY, name text NOT NULL, price_cents int NOT NULL)")
        .execute(pool)
        .await?;
    sqlx::query("CREATE TABLE IF NOT EXISTS fc_order_items (order_id int NOT NULL, item_id int NOT NULL REFERENCES fc_items(id), PRIMARY KEY (order_id, item_id))")
        .execute(pool)
        .await?;
    sqlx::query("INSERT INTO fc_items SELECT g, 'item ' || g, (g * 37) % 10000 FROM generate_series(1, 1000) g ON CONFLICT DO NOTHING")
        .execute(pool)
        .await?;
    sqlx::query(&format!(
        "INSERT INTO fc_order_items SELECT o, ((o * 131 + k * 17) % 1000) + 1 FROM generate_series(1, {ORDERS}) o, generate_series(1, {N_PLUS_ONE_ITEMS}) k ON CONFLICT DO NOTHING"
    ))
    .execute(pool)
    .await?;
    Ok(())
}

fn no_db() -> Response {
    (StatusCode::SERVICE_UNAVAILABLE, "start field-cases with --database-url for the database routes\n").into_response()
}

fn order_of(n: u64) -> i32 {
    (n % ORDERS + 1) as i32
}

async fn n_plus_one(State(st): State<Shared>) -> Response {
    let Some(db) = &st.db else { return no_db() };
    let order = order_of(st.stats.hit(20));
    let ids: Vec<(i32,)> = match sqlx::query_as("SELECT item_id FROM fc_order_items WHERE order_id = $1 ORDER BY item_id").bind(order).fetch_all(db).await {
        Ok(v) => v,
        Err(e) => return (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    };
    let mut total: i64 = 0;
    for (id,) in ids {
        match sqlx::query_as::<_, (String, i32)>("SELECT name, price_cents FROM fc_items WHERE id = $1").bind(id).fetch_one(db).await {
            Ok((_, price)) => total += i64::from(price),
            Err(e) => return (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
        }
    }
    Json(serde_json::json!({ "order": order, "total_cents": total })).into_response()
}

async fn join(State(st): State<Shared>) -> Response {
    let Some(db) = &st.db else { return no_db() };
    let order = order_of(st.stats.hit(21));
    let rows: Vec<(String, i32)> = match sqlx::query_as(
        "SELECT i.name, i.price_cents FROM fc_order_items o JOIN fc_items i ON i.id = o.item_id WHERE o.order_id = $1 ORDER BY o.item_id",
    )
    .bind(order)
    .fetch_all(db)
    .await
    {
        Ok(v) => v,
        Err(e) => return (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    };
    let total: i64 = rows.iter().map(|(_, p)| i64::from(*p)).sum();
    Json(serde_json::json!({ "order": order, "total_cents": total })).into_response()
}

// ---- /case/connect-per-request, /control/pooled-connection ----------------------------------

/// The statement of both connection routes: one order's item count and total.
const ORDER_TOTAL: &str = "SELECT count(*), coalesce(sum(i.price_cents), 0)::bigint FROM fc_order_items o JOIN fc_items i ON i.id = o.item_id WHERE o.order_id = $1";

async fn order_total<'c, E: sqlx::PgExecutor<'c>>(db: E, order: i32) -> Response {
    match sqlx::query_as::<_, (i64, i64)>(ORDER_TOTAL).bind(order).fetch_one(db).await {
        Ok((items, total)) => Json(serde_json::json!({ "order": order, "items": items, "total_cents": total })).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

/// Opens a connection of its own with the pool's options (TCP, start-up message, the
/// server's authentication: SCRAM-SHA-256 in the tests' PostgreSQL), runs [`ORDER_TOTAL`] on
/// it and closes it (Terminate): one connection set up per request.
async fn connect_per_request(State(st): State<Shared>) -> Response {
    use sqlx::Connection;
    let Some(db) = &st.db else { return no_db() };
    let order = order_of(st.stats.hit(22));
    let start = std::time::Instant::now();
    let mut conn = match sqlx::PgConnection::connect_with(&db.connect_options()).await {
        Ok(c) => c,
        Err(e) => return (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    };
    st.stats.connect.0.fetch_add(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
    st.stats.connect.1.fetch_add(1, Ordering::Relaxed);
    let response = order_total(&mut conn, order).await;
    let _ = conn.close().await;
    response
}

/// [`ORDER_TOTAL`] on a connection of the pool.
async fn pooled_connection(State(st): State<Shared>) -> Response {
    let Some(db) = &st.db else { return no_db() };
    let order = order_of(st.stats.hit(23));
    order_total(db, order).await
}

// ---- /case/transaction-across-wait, /control/wait-before-transaction ------------------------

/// The two reads of both transaction routes: an order's item count, then its total.
const ORDER_ITEMS: &str = "SELECT count(*) FROM fc_order_items WHERE order_id = $1";

/// BEGIN, [`ORDER_ITEMS`], then (when `wait_inside`) [`TRANSACTION_WAIT`] with the transaction
/// and its pooled connection held, then [`ORDER_TOTAL`] and COMMIT; else the wait before BEGIN.
async fn order_in_transaction(db: &sqlx::PgPool, order: i32, wait_inside: bool) -> Response {
    if !wait_inside {
        tokio::time::sleep(TRANSACTION_WAIT).await;
    }
    let result: Result<(i64, i64), sqlx::Error> = async {
        let mut tx = db.begin().await?;
        let (items,): (i64,) = sqlx::query_as(ORDER_ITEMS).bind(order).fetch_one(&mut *tx).await?;
        if wait_inside {
            tokio::time::sleep(TRANSACTION_WAIT).await;
        }
        let (_, total): (i64, i64) = sqlx::query_as(ORDER_TOTAL).bind(order).fetch_one(&mut *tx).await?;
        tx.commit().await?;
        Ok((items, total))
    }
    .await;
    match result {
        Ok((items, total)) => Json(serde_json::json!({ "order": order, "items": items, "total_cents": total })).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

/// The order's two reads in one transaction that stays open across [`TRANSACTION_WAIT`].
async fn transaction_across_wait(State(st): State<Shared>) -> Response {
    let Some(db) = &st.db else { return no_db() };
    let order = order_of(st.stats.hit(24));
    order_in_transaction(db, order, true).await
}

/// The same wait before the same transaction.
async fn wait_before_transaction(State(st): State<Shared>) -> Response {
    let Some(db) = &st.db else { return no_db() };
    let order = order_of(st.stats.hit(25));
    order_in_transaction(db, order, false).await
}

// ---- /case/connection-across-wait, /control/wait-before-connection -------------------------

/// Where [`order_on_held_connection`] waits [`TRANSACTION_WAIT`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HeldWait {
    /// Before the checkout: nothing held.
    BeforeCheckout,
    /// Between the checkout and its first statement.
    AfterCheckout,
    /// Between the two statements.
    BetweenStatements,
}

/// A pooled connection, [`ORDER_ITEMS`] and [`ORDER_TOTAL`], the connection back to the pool;
/// [`TRANSACTION_WAIT`] where `wait` says (no transaction). The checkout's time outside its
/// two statements (from `acquire` returning to the drop) goes to `held[slot]`.
async fn order_on_held_connection(st: &AppState, db: &sqlx::PgPool, order: i32, wait: HeldWait, slot: usize) -> Response {
    if wait == HeldWait::BeforeCheckout {
        tokio::time::sleep(TRANSACTION_WAIT).await;
    }
    let result: Result<(i64, i64), sqlx::Error> = async {
        let mut conn = db.acquire().await?;
        let held = std::time::Instant::now();
        if wait == HeldWait::AfterCheckout {
            tokio::time::sleep(TRANSACTION_WAIT).await;
        }
        let t = std::time::Instant::now();
        let (items,): (i64,) = sqlx::query_as(ORDER_ITEMS).bind(order).fetch_one(&mut *conn).await?;
        let mut in_statements = t.elapsed();
        if wait == HeldWait::BetweenStatements {
            tokio::time::sleep(TRANSACTION_WAIT).await;
        }
        let t = std::time::Instant::now();
        let (_, total): (i64, i64) = sqlx::query_as(ORDER_TOTAL).bind(order).fetch_one(&mut *conn).await?;
        in_statements += t.elapsed();
        drop(conn);
        let (ns, n) = &st.stats.held[slot];
        ns.fetch_add(held.elapsed().saturating_sub(in_statements).as_nanos() as u64, Ordering::Relaxed);
        n.fetch_add(1, Ordering::Relaxed);
        Ok((items, total))
    }
    .await;
    match result {
        Ok((items, total)) => Json(serde_json::json!({ "order": order, "items": items, "total_cents": total })).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

/// The order's two reads on one pooled connection kept checked out across [`TRANSACTION_WAIT`].
async fn connection_across_wait(State(st): State<Shared>) -> Response {
    let Some(db) = &st.db else { return no_db() };
    let order = order_of(st.stats.hit(26));
    order_on_held_connection(&st, db, order, HeldWait::BetweenStatements, 0).await
}

/// The same wait before the checkout.
async fn wait_before_connection(State(st): State<Shared>) -> Response {
    let Some(db) = &st.db else { return no_db() };
    let order = order_of(st.stats.hit(27));
    order_on_held_connection(&st, db, order, HeldWait::BeforeCheckout, 1).await
}

/// The same wait between the checkout and the first read: the connection taken too early.
async fn connection_before_wait(State(st): State<Shared>) -> Response {
    let Some(db) = &st.db else { return no_db() };
    let order = order_of(st.stats.hit(28));
    order_on_held_connection(&st, db, order, HeldWait::AfterCheckout, 2).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pattern_matches_the_sample() {
        assert_eq!(match_line(&REGEX)["path"], "/api/v1/deals");
    }

    #[test]
    fn fixtures_have_the_documented_sizes() {
        let b = brotli_body().len();
        assert!((8_000..=60_000).contains(&b), "brotli body {b} bytes");
        let c = catalog_json().len();
        assert!((10_000..=50_000).contains(&c), "catalog {c} bytes");
        let parsed: Catalog = serde_json::from_slice(&catalog_json()).unwrap();
        assert_eq!(parsed.items.len(), CATALOG_ITEMS);
    }

    #[test]
    fn brotli_round_trips_at_both_levels() {
        let body = brotli_body();
        for q in [5, 11] {
            let packed = brotli_compress(&body, q).unwrap();
            let mut back = Vec::new();
            brotli::BrotliDecompress(&mut &packed[..], &mut back).unwrap();
            assert_eq!(back, body);
        }
    }
}

// ---- /case/prepare-per-execution, /control/prepared-once ------------------------------------

/// The statement of both prepare routes: one item's name and price.
pub const ITEM_PRICE: &str = "SELECT name, price_cents FROM fc_items WHERE id = $1";

/// Opens `n` tokio-postgres connections to `url` (no TLS), each driven by a task of its own,
/// and prepares [`ITEM_PRICE`] once on each.
///
/// # Errors
/// The first connection or preparation that failed.
pub async fn connect_clients(url: &str, n: usize) -> Result<Vec<(tokio_postgres::Client, tokio_postgres::Statement)>, tokio_postgres::Error> {
    let mut clients = Vec::with_capacity(n);
    for _ in 0..n {
        let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls).await?;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                eprintln!("tokio-postgres connection: {e}");
            }
        });
        let statement = client.prepare(ITEM_PRICE).await?;
        clients.push((client, statement));
    }
    Ok(clients)
}

/// The connection and item of request `n` (round robin over the clients).
fn client_of(st: &AppState, n: u64) -> Option<(&(tokio_postgres::Client, tokio_postgres::Statement), i32)> {
    let c = st.clients.get(n as usize % st.clients.len().max(1))?;
    Some((c, (n % 1000 + 1) as i32))
}

fn item_response(rows: Result<Vec<tokio_postgres::Row>, tokio_postgres::Error>, id: i32) -> Response {
    match rows {
        Ok(rows) => {
            let price: Option<i32> = rows.first().map(|r| r.get(1));
            Json(serde_json::json!({ "item": id, "price_cents": price })).into_response()
        }
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

/// [`ITEM_PRICE`] through tokio-postgres' `query` with the SQL text: the driver prepares a
/// statement of its own naming for this one execution (Parse/Describe/Sync, its own round
/// trip), executes it (Bind/Execute/Sync) and closes it when the statement drops (Close/Sync,
/// sent without waiting for the answer): three round trips for one execution.
async fn prepare_per_execution(State(st): State<Shared>) -> Response {
    let Some(((client, _), id)) = client_of(&st, st.stats.hit(31)) else { return no_db() };
    item_response(client.query(ITEM_PRICE, &[&id]).await, id)
}

/// The same statement prepared once per connection at start-up: one round trip per request.
async fn prepared_once(State(st): State<Shared>) -> Response {
    let Some(((client, statement), id)) = client_of(&st, st.stats.hit(32)) else { return no_db() };
    item_response(client.query(statement, &[&id]).await, id)
}
