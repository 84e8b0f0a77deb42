//! The conformance suite: about 200 checks of `bench/SPEC.md` (including its section
//! "Choices where the contract is silent") against a running CRM API.
//!
//! [`run`] (or [`try_run`], which reports an unreachable server as an error) sends every
//! request over HTTP/1.1 to `base_url` (e.g. `http://127.0.0.1:8080`) and returns a [`Report`]
//! with one [`Check`] per assertion, in the order they ran. Requests go through reqwest; two
//! body-limit checks use a raw TCP connection so that the timing of an early 413 is under the
//! suite's control. Tokens are minted with [`crate::token`] from `secret` for seeded users
//! (1..=100, `user{id}@example.com`, see [`crate::seed`]).
//!
//! The suite reads the database only through the API and leaves it usable: it inserts a few
//! dozen deals (`POST /api/deals`), which is what a benchmark run does anyway, and checks that
//! depend on the data (totals, the first page) read the current state first. Run it against a
//! server nobody else writes to while it runs: the list checks compare consecutive pages.
//!
//! Besides the per-endpoint checks, every response is recorded and checked at the end:
//! `Content-Type: application/json`, security headers, a distinct `X-Request-Id`, the error
//! shape on every 4xx/5xx, no 500 at all, no SQL or stack trace in error bodies, and no
//! password hash, TOTP secret or recovery code anywhere.

mod http;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::Read as _;
use std::time::Duration;

use chrono::{DateTime, FixedOffset};
use reqwest::Method;
use serde_json::{json, Value};

pub use http::Resp;
use http::{Body, RawBody};

use crate::seed::{MAX_AMOUNT_CENTS, STAGES};
use crate::token::{self, BadToken};

/// 2 MiB, the body limit of SPEC.md, bytes.
pub const BODY_LIMIT: usize = 2 * 1024 * 1024;

/// Limits of one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Options {
    /// Time budget of the whole run. Against a healthy server the suite takes about a
    /// second; a server whose requests hang (e.g. a pool waiting for a dead database) would
    /// otherwise cost ~200 request timeouts. Past the budget, the remaining requests are not
    /// sent and their checks fail at once. Default is 120 s.
    pub budget: Duration,
    /// Timeout of one request (connect, send, whole response). Default is 10 s.
    pub request_timeout: Duration,
}

impl Default for Options {
    fn default() -> Options {
        Options { budget: Duration::from_secs(120), request_timeout: http::REQUEST_TIMEOUT }
    }
}

/// The seeded user most checks sign in as.
const USER: i64 = 42;

/// One assertion of the suite (serializes as `{"name","passed","detail"}`).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Check {
    /// What is checked, e.g. `GET /queries?queries=501 -> array of 500`.
    pub name: String,
    /// Whether the app behaved as the contract says.
    pub passed: bool,
    /// On failure: what was expected, what came back (request, status, start of the body).
    pub detail: Option<String>,
}

/// The outcome of a run: every check, in the order they ran (serializes as `{"checks":[...]}`).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Report {
    /// All checks.
    pub checks: Vec<Check>,
}

impl Report {
    /// Number of checks that passed.
    pub fn passed(&self) -> usize {
        self.checks.iter().filter(|c| c.passed).count()
    }

    /// Number of checks that failed.
    pub fn failed(&self) -> usize {
        self.checks.len() - self.passed()
    }

    /// The failed checks.
    pub fn failures(&self) -> impl Iterator<Item = &Check> {
        self.checks.iter().filter(|c| !c.passed)
    }

    /// `conformance: N passed, M failed`.
    pub fn summary_line(&self) -> String {
        format!("conformance: {} passed, {} failed", self.passed(), self.failed())
    }
}

/// Why the suite could not run at all.
#[derive(Debug, thiserror::Error)]
pub enum ConformanceError {
    /// The base URL is not `http://HOST:PORT` (no path, query or TLS).
    #[error("invalid base URL {url:?}: {reason}")]
    BadUrl {
        /// The URL as given.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// No HTTP answer from `GET /json`.
    #[error("cannot reach {url}: {reason}")]
    Unreachable {
        /// The URL as given.
        url: String,
        /// The client's error chain.
        reason: String,
    },
}

/// Runs the whole suite. A server that cannot be reached gives a report with one failed
/// check named `server reachable`.
pub async fn run(base_url: &str, secret: &str) -> Report {
    match try_run(base_url, secret).await {
        Ok(r) => r,
        Err(e) => Report { checks: vec![Check { name: "server reachable".into(), passed: false, detail: Some(e.to_string()) }] },
    }
}

/// Runs the whole suite.
///
/// # Errors
/// [`ConformanceError::BadUrl`] for a URL that is not `http://host:port`, and
/// [`ConformanceError::Unreachable`] when `GET /json` gets no HTTP response at all.
pub async fn try_run(base_url: &str, secret: &str) -> Result<Report, ConformanceError> {
    try_run_with(base_url, secret, Options::default()).await
}

/// [`try_run`] with explicit [`Options`].
///
/// # Errors
/// As [`try_run`].
pub async fn try_run_with(base_url: &str, secret: &str, options: Options) -> Result<Report, ConformanceError> {
    let bad = |reason: &str| ConformanceError::BadUrl { url: base_url.to_string(), reason: reason.to_string() };
    let url = reqwest::Url::parse(base_url).map_err(|e| bad(&e.to_string()))?;
    if url.scheme() != "http" {
        return Err(bad("only http:// is supported"));
    }
    if url.path() != "/" || url.query().is_some() {
        return Err(bad("give the server's root, without a path or query"));
    }
    let host = url.host_str().ok_or_else(|| bad("no host"))?.to_string();
    let port = url.port_or_known_default().ok_or_else(|| bad("no port"))?;
    let base = base_url.trim_end_matches('/').to_string();
    let client = reqwest::Client::builder()
        .timeout(options.request_timeout)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| bad(&e.to_string()))?;
    let mut s = Suite {
        client,
        base,
        addr: format!("{host}:{port}"),
        host_header: format!("{host}:{port}"),
        secret: secret.to_string(),
        checks: Vec::new(),
        log: Vec::new(),
        world: HashMap::new(),
        deadline: std::time::Instant::now() + options.budget,
        options,
    };
    if let Err(reason) = s.req(Method::GET, "/json", &[], Body::None).await {
        return Err(ConformanceError::Unreachable { url: base_url.to_string(), reason });
    }
    s.json_endpoint().await;
    s.db_endpoint().await;
    s.queries_endpoint().await;
    s.authentication().await;
    s.pagination().await;
    s.create().await;
    s.routing().await;
    s.compression().await;
    s.every_response();
    Ok(Report { checks: s.checks })
}

macro_rules! ensure {
    ($cond:expr, $($arg:tt)+) => {
        if !$cond {
            return Err(format!($($arg)+));
        }
    };
}

struct Suite {
    client: reqwest::Client,
    base: String,
    addr: String,
    host_header: String,
    secret: String,
    checks: Vec<Check>,
    log: Vec<Resp>,
    /// Every world row seen: id -> randomNumber (must never disagree).
    world: HashMap<i64, BTreeSet<i64>>,
    /// Past this instant requests are not sent (see [`Options::budget`]).
    deadline: std::time::Instant,
    options: Options,
}

/// A deal as the list and create endpoints return it, checked for shape.
#[derive(Debug, Clone)]
struct Deal {
    id: i64,
    title: String,
    amount_cents: i64,
    stage: String,
    created_at: DateTime<FixedOffset>,
    owner_id: i64,
    owner_name: String,
    owner_email: String,
    raw: Value,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Meta {
    page: i64,
    per_page: i64,
    total: i64,
    total_pages: i64,
}

fn ceil_div(a: i64, b: i64) -> i64 {
    if a <= 0 {
        0
    } else {
        (a + b - 1) / b
    }
}

impl Suite {
    fn record(&mut self, name: impl Into<String>, result: Result<(), String>) {
        let (passed, detail) = match result {
            Ok(()) => (true, None),
            Err(d) => (false, Some(d)),
        };
        self.checks.push(Check { name: name.into(), passed, detail });
    }

    fn token(&self, user: i64) -> String {
        token::mint_valid(&self.secret, user)
    }

    fn bearer(&self, user: i64) -> String {
        format!("Bearer {}", self.token(user))
    }

    fn budget_left(&self, what: &str) -> Result<(), String> {
        if std::time::Instant::now() > self.deadline {
            return Err(format!("{what}: not sent, the suite's {} s budget is used up (is the server hanging?)", self.options.budget.as_secs_f64()));
        }
        Ok(())
    }

    async fn req(&mut self, method: Method, target: &str, headers: &[(&str, &str)], body: Body) -> Result<Resp, String> {
        self.budget_left(&format!("{method} {target}"))?;
        let r = http::send(&self.client, &self.base, method, target, headers, body).await?;
        self.log.push(r.clone());
        Ok(r)
    }

    async fn raw(&mut self, method: &str, target: &str, headers: &[(&str, &str)], body: RawBody) -> Result<Resp, String> {
        self.budget_left(&format!("{method} {target}"))?;
        let r = http::raw(&self.addr, &self.host_header, method, target, headers, body, self.options.request_timeout).await?;
        self.log.push(r.clone());
        Ok(r)
    }

    async fn get_as(&mut self, target: &str, user: i64) -> Result<Resp, String> {
        let auth = self.bearer(user);
        self.req(Method::GET, target, &[("authorization", &auth)], Body::None).await
    }

    async fn post_deal(&mut self, body: Vec<u8>, content_type: Option<&str>, user: Option<i64>) -> Result<Resp, String> {
        let auth = user.map(|u| self.bearer(u));
        let mut headers: Vec<(&str, &str)> = Vec::new();
        if let Some(a) = &auth {
            headers.push(("authorization", a));
        }
        if let Some(ct) = content_type {
            headers.push(("content-type", ct));
        }
        self.req(Method::POST, "/api/deals", &headers, Body::Bytes(body)).await
    }

    async fn post_json(&mut self, body: &Value) -> Result<Resp, String> {
        self.post_deal(body.to_string().into_bytes(), Some("application/json"), Some(USER)).await
    }

    /// GET a list page as [`USER`] and check its shape.
    async fn list(&mut self, query: &str) -> Result<(Vec<Deal>, Meta), String> {
        let r = self.get_as(&format!("/api/deals{query}"), USER).await?;
        list_body(&r)
    }

    fn saw_world(&mut self, id: i64, n: i64) {
        self.world.entry(id).or_default().insert(n);
    }

    // ---------------------------------------------------------------- /json

    async fn json_endpoint(&mut self) {
        let r = self.req(Method::GET, "/json", &[], Body::None).await;
        self.record(
            "GET /json -> 200 with exactly {\"message\":\"Hello, World!\"}",
            r.as_ref().map_err(Clone::clone).and_then(|r| {
                expect_status(r, 200)?;
                ensure!(r.body == br#"{"message":"Hello, World!"}"#, "{}: body {}", r.what(), r.body_head());
                Ok(())
            }),
        );
        self.record(
            "GET /json: Content-Length, when sent, matches the 27-byte body",
            r.as_ref().map_err(Clone::clone).and_then(|r| match r.header("content-length") {
                Some(cl) => {
                    ensure!(cl == r.body.len().to_string() && cl == "27", "{}: content-length {cl}, body {} bytes", r.what(), r.body.len());
                    Ok(())
                }
                None => Ok(()),
            }),
        );
        let r = self.req(Method::GET, "/json?unused=1", &[], Body::None).await;
        self.record(
            "GET /json?unused=1 -> 200, a query string changes nothing",
            r.and_then(|r| {
                expect_status(&r, 200)?;
                ensure!(r.body == br#"{"message":"Hello, World!"}"#, "{}: body {}", r.what(), r.body_head());
                Ok(())
            }),
        );
    }

    // ---------------------------------------------------------------- /db

    async fn db_endpoint(&mut self) {
        let r = self.req(Method::GET, "/db", &[], Body::None).await;
        let first = r.and_then(|r| {
            expect_status(&r, 200)?;
            let v = r.json()?;
            world_obj(&v).map_err(|e| format!("{}: {e}: {}", r.what(), r.body_head()))
        });
        if let Ok((id, n)) = first {
            self.saw_world(id, n);
        }
        self.record("GET /db -> 200 {\"id\",\"randomNumber\"}, integers in 1..10000, no other keys", first.map(|_| ()));

        let mut ids = BTreeSet::new();
        let mut errors = Vec::new();
        for _ in 0..20 {
            match self.req(Method::GET, "/db", &[], Body::None).await.and_then(|r| {
                expect_status(&r, 200)?;
                world_obj(&r.json()?)
            }) {
                Ok((id, n)) => {
                    ids.insert(id);
                    self.saw_world(id, n);
                }
                Err(e) => errors.push(e),
            }
        }
        self.record("GET /db x20: every response is a valid world row", if errors.is_empty() { Ok(()) } else { Err(errors.join("; ")) });
        // 20 uniform draws from 10,000 ids: fewer than 15 distinct has probability ~1e-12.
        self.record(
            "GET /db x20: the row is random (>= 15 distinct ids)",
            if ids.len() >= 15 { Ok(()) } else { Err(format!("only {} distinct ids: {ids:?}", ids.len())) },
        );
    }

    // ---------------------------------------------------------------- /queries

    async fn queries_endpoint(&mut self) {
        let cases: [(&str, usize); 16] = [
            ("", 1),
            ("?queries=", 1),
            ("?queries=0", 1),
            ("?queries=-1", 1),
            ("?queries=abc", 1),
            ("?queries=1.5", 1),
            ("?queries=99999999999999999999", 1),
            ("?queries=-9223372036854775808", 1),
            ("?queries=1", 1),
            ("?queries=2", 2),
            ("?queries=20", 20),
            ("?queries=499", 499),
            ("?queries=500", 500),
            ("?queries=501", 500),
            ("?queries=1000", 500),
            ("?queries=9223372036854775807", 500),
        ];
        let mut distinct: BTreeMap<usize, usize> = BTreeMap::new();
        for (q, want) in cases {
            let target = format!("/queries{q}");
            let r = self.req(Method::GET, &target, &[], Body::None).await;
            let rows = r.and_then(|r| {
                expect_status(&r, 200)?;
                let v = r.json()?;
                let arr = v.as_array().ok_or_else(|| format!("{}: not a JSON array: {}", r.what(), r.body_head()))?;
                ensure!(arr.len() == want, "{}: {} objects, want {want}", r.what(), arr.len());
                arr.iter().map(world_obj).collect::<Result<Vec<_>, _>>().map_err(|e| format!("{}: {e}", r.what()))
            });
            if let Ok(rows) = &rows {
                for &(id, n) in rows {
                    self.saw_world(id, n);
                }
                distinct.insert(want, rows.iter().map(|r| r.0).collect::<BTreeSet<_>>().len());
            }
            self.record(format!("GET /queries{q} -> array of {want} world rows"), rows.map(|_| ()));
        }
        // Expected distinct ids among n uniform draws from 10,000: 20 -> ~19.98, 500 -> ~487.8.
        self.record(
            "GET /queries?queries=20: separate random rows (>= 18 distinct ids)",
            match distinct.get(&20) {
                Some(&d) if d >= 18 => Ok(()),
                other => Err(format!("distinct ids: {other:?}")),
            },
        );
        self.record(
            "GET /queries?queries=500: separate random rows (>= 460 distinct ids)",
            match distinct.get(&500) {
                Some(&d) if d >= 460 => Ok(()),
                other => Err(format!("distinct ids: {other:?}")),
            },
        );
        let conflicts: Vec<String> =
            self.world.iter().filter(|(_, ns)| ns.len() > 1).map(|(id, ns)| format!("id {id}: {ns:?}")).take(5).collect();
        self.record(
            "/db and /queries agree: one randomNumber per id across all responses",
            if self.world.len() < 100 {
                Err(format!("only {} world rows seen", self.world.len()))
            } else if conflicts.is_empty() {
                Ok(())
            } else {
                Err(conflicts.join("; "))
            },
        );
    }

    // ---------------------------------------------------------------- authentication

    async fn authentication(&mut self) {
        const T: &str = "/api/deals?page=1&per_page=1";
        let r = self.get_as(T, USER).await;
        self.record("GET /api/deals with a valid token -> 200", r.and_then(|r| expect_status(&r, 200)));
        for user in [1, 100] {
            let r = self.get_as(T, user).await;
            self.record(format!("GET /api/deals as seeded user {user} -> 200"), r.and_then(|r| expect_status(&r, 200)));
        }
        let lower = format!("bearer {}", self.token(USER));
        let r = self.req(Method::GET, T, &[("authorization", &lower)], Body::None).await;
        self.record("auth scheme is case-insensitive: `bearer <token>` -> 200", r.and_then(|r| expect_status(&r, 200)));

        let valid = self.token(USER);
        let header_cases: Vec<(String, Option<String>)> = vec![
            ("no Authorization header".into(), None),
            ("another scheme: Basic".into(), Some("Basic dXNlcjpwYXNz".into())),
            ("another scheme: Token <valid jwt>".into(), Some(format!("Token {valid}"))),
            ("the valid jwt without a scheme".into(), Some(valid.clone())),
            ("`Bearer` alone".into(), Some("Bearer".into())),
            ("empty token `Bearer `".into(), Some("Bearer ".into())),
            ("`Bearer` then a comma list".into(), Some(format!("Bearer {valid}, Basic dXNlcjpwYXNz"))),
        ];
        for (what, header) in header_cases {
            let headers: Vec<(&str, &str)> = header.as_deref().map(|h| vec![("authorization", h)]).unwrap_or_default();
            let r = self.req(Method::GET, T, &headers, Body::None).await;
            self.record(format!("GET /api/deals, {what} -> 401 unauthorized"), r.and_then(|r| expect_401(&r)));
        }
        let r = self.req(Method::GET, &format!("{T}&access_token={valid}"), &[], Body::None).await;
        self.record("GET /api/deals with the token only in the query string -> 401", r.and_then(|r| expect_401(&r)));

        for bad in BadToken::ALL {
            let auth = format!("Bearer {}", bad.token(&self.secret, USER));
            let r = self.req(Method::GET, T, &[("authorization", &auth)], Body::None).await;
            self.record(format!("GET /api/deals, token {} -> 401 unauthorized", bad.name()), r.and_then(|r| expect_401(&r)));
        }

        // POST is guarded too, and a refused POST writes nothing.
        let before = self.list("?per_page=1").await.map(|(_, m)| m.total);
        let body = json!({"title": "must not be stored", "amount_cents": 1, "stage": "lead"}).to_string();
        for bad in [None, Some(BadToken::Expired), Some(BadToken::AlgNone), Some(BadToken::UnknownUser), Some(BadToken::BadSignature)] {
            let mut headers = vec![("content-type", "application/json".to_string())];
            if let Some(b) = bad {
                headers.push(("authorization", format!("Bearer {}", b.token(&self.secret, USER))));
            }
            let hdrs: Vec<(&str, &str)> = headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
            let r = self.req(Method::POST, "/api/deals", &hdrs, Body::Bytes(body.clone().into_bytes())).await;
            let what = bad.map_or("no token", BadToken::name);
            self.record(format!("POST /api/deals, {what} -> 401 unauthorized"), r.and_then(|r| expect_401(&r)));
        }
        let after = self.list("?per_page=1").await.map(|(_, m)| m.total);
        self.record(
            "refused POSTs stored nothing (meta.total unchanged)",
            match (before, after) {
                (Ok(b), Ok(a)) if a == b => Ok(()),
                (b, a) => Err(format!("total before {b:?}, after {a:?}")),
            },
        );
    }

    // ---------------------------------------------------------------- pagination

    async fn pagination(&mut self) {
        let first = self.list("").await;
        let total = first.as_ref().map(|(_, m)| m.total).unwrap_or(0);
        self.record(
            "GET /api/deals (no query) -> page 1, per_page 20, 20 deals, total_pages = ceil(total/20)",
            first.as_ref().map_err(Clone::clone).and_then(|(data, m)| {
                ensure!(m.page == 1 && m.per_page == 20, "meta {m:?}");
                ensure!(data.len() as i64 == total.min(20), "{} deals on page 1 of {total}", data.len());
                ensure!(m.total_pages == ceil_div(total, 20), "total_pages {} for total {total}", m.total_pages);
                Ok(())
            }),
        );
        self.record(
            "GET /api/deals: the seeded 1,000 deals are there (total >= 1000)",
            if total >= 1000 { Ok(()) } else { Err(format!("meta.total = {total}")) },
        );

        // Walk every page with per_page=100.
        let pages = ceil_div(total, 100);
        let mut all: Vec<Deal> = Vec::new();
        let mut walk_err = Vec::new();
        for p in 1..=pages {
            match self.list(&format!("?page={p}&per_page=100")).await {
                Ok((data, m)) => {
                    if m != (Meta { page: p, per_page: 100, total, total_pages: pages }) {
                        walk_err.push(format!("page {p}: meta {m:?}"));
                    }
                    let want = if p < pages { 100 } else { total - (pages - 1) * 100 };
                    if data.len() as i64 != want {
                        walk_err.push(format!("page {p}: {} deals, want {want}", data.len()));
                    }
                    all.extend(data);
                }
                Err(e) => walk_err.push(e),
            }
        }
        if let Err(e) = &first {
            walk_err.insert(0, format!("the first page failed: {e}"));
        }
        self.record(
            "GET /api/deals?per_page=100, every page: meta right, full pages, the rest on the last",
            if walk_err.is_empty() { Ok(()) } else { Err(walk_err.iter().take(5).cloned().collect::<Vec<_>>().join("; ")) },
        );
        let ids: BTreeSet<i64> = all.iter().map(|d| d.id).collect();
        self.record(
            "walking all pages yields meta.total deals, each once",
            if all.len() as i64 == total && ids.len() == all.len() && total > 0 {
                Ok(())
            } else {
                Err(format!("{} deals, {} distinct ids, total {total}", all.len(), ids.len()))
            },
        );
        self.record("the whole list is ordered by created_at DESC, id DESC", if all.len() < 2 { Err(format!("{} deals listed", all.len())) } else { ordered(&all) });
        self.record("every deal: title 1..200 chars, amount_cents 0..10^12, stage one of six", {
            let bad: Vec<String> = all
                .iter()
                .filter(|d| {
                    let n = d.title.chars().count();
                    !(1..=200).contains(&n) || !(0..=MAX_AMOUNT_CENTS).contains(&d.amount_cents) || !STAGES.contains(&d.stage.as_str())
                })
                .map(|d| d.raw.to_string())
                .take(3)
                .collect();
            if all.is_empty() {
                Err("no deals listed".into())
            } else if bad.is_empty() {
                Ok(())
            } else {
                Err(bad.join("; "))
            }
        });
        self.record("every owner is a seeded user: id 1..100, email user{id}@example.com, a name", {
            let bad: Vec<String> = all
                .iter()
                .filter(|d| !(1..=100).contains(&d.owner_id) || d.owner_email != format!("user{}@example.com", d.owner_id) || d.owner_name.is_empty())
                .map(|d| d.raw["owner"].to_string())
                .take(3)
                .collect();
            if all.is_empty() {
                Err("no deals listed".into())
            } else if bad.is_empty() {
                Ok(())
            } else {
                Err(bad.join("; "))
            }
        });
        self.record("one owner id, one name across the list", {
            let mut names: HashMap<i64, BTreeSet<&str>> = HashMap::new();
            for d in &all {
                names.entry(d.owner_id).or_default().insert(&d.owner_name);
            }
            let bad: Vec<String> = names.iter().filter(|(_, n)| n.len() > 1).map(|(id, n)| format!("{id}: {n:?}")).take(3).collect();
            if all.is_empty() {
                Err("no deals listed".into())
            } else if bad.is_empty() {
                Ok(())
            } else {
                Err(bad.join("; "))
            }
        });
        self.record("all six stages occur in the list", {
            let seen: BTreeSet<&str> = all.iter().map(|d| d.stage.as_str()).collect();
            if STAGES.iter().all(|s| seen.contains(s)) {
                Ok(())
            } else {
                Err(format!("stages seen: {seen:?}"))
            }
        });

        // Page boundaries: pages of 7 concatenated = one page of 21; page 2 of 20 = items 20..40.
        let mut sevens = Vec::new();
        let mut err = None;
        for p in 1..=3 {
            match self.list(&format!("?page={p}&per_page=7")).await {
                Ok((d, _)) => sevens.extend(d.into_iter().map(|d| d.id)),
                Err(e) => err = Some(e),
            }
        }
        let one21 = self.list("?page=1&per_page=21").await;
        self.record(
            "pages 1..3 of per_page=7, concatenated = page 1 of per_page=21",
            match (err, one21) {
                (Some(e), _) | (None, Err(e)) => Err(e),
                (None, Ok((d, _))) => {
                    let ids: Vec<i64> = d.iter().map(|d| d.id).collect();
                    if ids == sevens {
                        Ok(())
                    } else {
                        Err(format!("7s {sevens:?} vs 21 {ids:?}"))
                    }
                }
            },
        );
        let p2 = self.list("?page=2&per_page=20").await;
        self.record(
            "page 2 of per_page=20 = items 21..40 of the walk",
            p2.and_then(|(d, _)| {
                let got: Vec<i64> = d.iter().map(|d| d.id).collect();
                let want: Vec<i64> = all.iter().skip(20).take(20).map(|d| d.id).collect();
                ensure!(got == want, "got {got:?}, want {want:?}");
                Ok(())
            }),
        );
        let last = self.list(&format!("?page={}&per_page=20", ceil_div(total, 20))).await;
        self.record(
            "the last page of per_page=20 holds the oldest deals",
            last.and_then(|(d, m)| {
                let got: Vec<i64> = d.iter().map(|d| d.id).collect();
                let skip = usize::try_from((m.total_pages - 1) * 20).unwrap_or(0);
                let want: Vec<i64> = all.iter().skip(skip).map(|d| d.id).collect();
                ensure!(got == want && !got.is_empty(), "got {got:?}, want {want:?}");
                Ok(())
            }),
        );

        for (q, n, tp) in [("?per_page=1", 1, total), ("?per_page=100", 100, ceil_div(total, 100)), ("?page=3&per_page=33", 33, ceil_div(total, 33))] {
            let r = self.list(q).await;
            self.record(
                format!("GET /api/deals{q} -> {n} deals, total_pages {tp}"),
                r.and_then(|(d, m)| {
                    ensure!(d.len() == n, "{} deals", d.len());
                    ensure!(m.total_pages == tp && m.per_page == n as i64 && m.total == total, "meta {m:?}");
                    Ok(())
                }),
            );
        }
        let r = self.list("?page=1&per_page=5&sort=title&filter=x").await;
        self.record(
            "unknown query parameters are ignored",
            r.and_then(|(d, m)| {
                ensure!(d.len() == 5 && m.per_page == 5, "{} deals, meta {m:?}", d.len());
                Ok(())
            }),
        );

        let past = ceil_div(total, 20) + 1;
        for q in [
            format!("?page={past}&per_page=20"),
            "?page=1000000".to_string(),
            format!("?page={}", i64::MAX),
            format!("?page={}&per_page=100", i64::MAX),
            format!("?page={}&per_page=1", i64::MAX - 1),
        ] {
            let r = self.list(&q).await;
            self.record(
                format!("GET /api/deals{q}: past the end -> 200 with data [] and the real total"),
                r.and_then(|(d, m)| {
                    ensure!(d.is_empty(), "{} deals", d.len());
                    ensure!(m.total == total, "meta {m:?}");
                    let want_page: i64 = q.trim_start_matches("?page=").split('&').next().and_then(|p| p.parse().ok()).unwrap_or(-1);
                    ensure!(m.page == want_page, "meta.page {} (want {want_page})", m.page);
                    Ok(())
                }),
            );
        }

        let invalid: [(&str, &[&str]); 16] = [
            ("?per_page=0", &["per_page"]),
            ("?per_page=101", &["per_page"]),
            ("?per_page=-1", &["per_page"]),
            ("?per_page=abc", &["per_page"]),
            ("?per_page=", &["per_page"]),
            ("?per_page=2.5", &["per_page"]),
            ("?per_page=99999999999999999999", &["per_page"]),
            ("?page=0", &["page"]),
            ("?page=-1", &["page"]),
            ("?page=abc", &["page"]),
            ("?page=", &["page"]),
            ("?page=1.5", &["page"]),
            ("?page=99999999999999999999", &["page"]),
            ("?page=-9223372036854775808", &["page"]),
            ("?page=%FF", &["page"]),
            ("?page=0&per_page=0", &["page", "per_page"]),
        ];
        for (q, fields) in invalid {
            let r = self.get_as(&format!("/api/deals{q}"), USER).await;
            self.record(
                format!("GET /api/deals{q} -> 400 validation_failed on {}", fields.join(" and ")),
                r.and_then(|r| expect_validation(&r, fields)),
            );
        }
    }

    // ---------------------------------------------------------------- POST /api/deals

    async fn create(&mut self) {
        let before = self.list("?per_page=1").await.map(|(_, m)| m.total);
        let mut created = 0i64;
        let nonce = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let title = format!("Conformance deal {nonce}");

        // The main create, checked in depth.
        let started = chrono::Utc::now();
        let r = self.post_json(&json!({"title": title, "amount_cents": 123_456, "stage": "proposal"})).await;
        let main = r.and_then(|r| {
            expect_status(&r, 201)?;
            let d = deal(&r.json()?).map_err(|e| format!("{}: {e}", r.what()))?;
            Ok((r, d))
        });
        if main.is_ok() {
            created += 1;
        }
        self.record(
            "POST /api/deals -> 201 with a Deal echoing title, amount_cents, stage",
            main.as_ref().map_err(Clone::clone).and_then(|(_, d)| {
                ensure!(d.title == title && d.amount_cents == 123_456 && d.stage == "proposal", "{}", d.raw);
                Ok(())
            }),
        );
        self.record(
            "POST /api/deals: Location is /api/deals/{id} of the body",
            main.as_ref().map_err(Clone::clone).and_then(|(r, d)| {
                let loc = r.header("location").ok_or("no Location header")?;
                ensure!(loc == format!("/api/deals/{}", d.id), "Location {loc:?}, body id {}", d.id);
                Ok(())
            }),
        );
        self.record(
            "POST /api/deals: owner = the signed-in user (42, user42@example.com)",
            main.as_ref().map_err(Clone::clone).and_then(|(_, d)| {
                ensure!(d.owner_id == USER && d.owner_email == "user42@example.com", "{}", d.raw["owner"]);
                Ok(())
            }),
        );
        self.record(
            "POST /api/deals: created_at is the insert time (within 5 minutes of now)",
            main.as_ref().map_err(Clone::clone).and_then(|(_, d)| {
                let skew = (d.created_at.with_timezone(&chrono::Utc) - started).num_seconds().abs();
                ensure!(skew <= 300, "created_at {} vs now {started}", d.created_at);
                Ok(())
            }),
        );
        let page1 = self.list("?page=1&per_page=20").await;
        self.record(
            "the created deal is first on page 1, identical to the POST response",
            match (&main, &page1) {
                (Ok((_, d)), Ok((data, _))) => match data.first() {
                    Some(f) if f.raw == d.raw => Ok(()),
                    other => Err(format!("first on page 1: {:?}; created: {}", other.map(|f| f.raw.to_string()), d.raw)),
                },
                (Err(e), _) | (_, Err(e)) => Err(e.clone()),
            },
        );
        self.record(
            "meta.total grew by one",
            match (&before, &page1) {
                (Ok(b), Ok((_, m))) if m.total == b + 1 => Ok(()),
                (b, p) => Err(format!("before {b:?}, after {:?}", p.as_ref().map(|(_, m)| m.total))),
            },
        );
        let location = match &main {
            Ok((r, d)) => r.header("location").map(|l| (l, d.raw.clone())).ok_or_else(|| "no Location header".to_string()),
            Err(e) => Err(e.clone()),
        };
        let res = match location {
            Ok((loc, want)) => self.get_as(&loc, USER).await.and_then(|g| match g.status {
                404 => expect_error(&g, 404, "not_found").map(|_| ()),
                200 => {
                    ensure!(g.json()? == want, "{}: {}", g.what(), g.body_head());
                    Ok(())
                }
                _ => Err(format!("{}: {}", g.what(), g.body_head())),
            }),
            Err(e) => Err(e),
        };
        self.record("GET of the Location is 404 or the same deal (not part of the contract)", res);

        // Another user owns what they create.
        let r = self.post_deal(json!({"title": "owned by 7", "amount_cents": 1, "stage": "lead"}).to_string().into_bytes(), Some("application/json"), Some(7)).await;
        let other = r.and_then(|r| {
            expect_status(&r, 201)?;
            let d = deal(&r.json()?)?;
            ensure!(d.owner_id == 7 && d.owner_email == "user7@example.com", "{}", d.raw["owner"]);
            Ok(d)
        });
        if other.is_ok() {
            created += 1;
        }
        self.record(
            "POST as user 7 -> owner 7, and a larger id than the previous insert",
            other.and_then(|d| match &main {
                Ok((_, m)) => {
                    ensure!(d.id > m.id, "ids {} then {}", m.id, d.id);
                    Ok(())
                }
                Err(e) => Err(e.clone()),
            }),
        );

        // Bodies that must be accepted, and echoed verbatim.
        let emoji200: String = "😀".repeat(200);
        let combining200: String = "e\u{301}".repeat(100);
        let valid_bodies: Vec<(String, Value)> = vec![
            ("title of 200 ASCII characters".into(), json!({"title": "t".repeat(200), "amount_cents": 1, "stage": "lead"})),
            ("title of 200 emoji (800 bytes)".into(), json!({"title": emoji200, "amount_cents": 1, "stage": "lead"})),
            ("title of 200 scalar values with combining marks".into(), json!({"title": combining200, "amount_cents": 1, "stage": "lead"})),
            ("title of 1 character".into(), json!({"title": "x", "amount_cents": 1, "stage": "lead"})),
            ("title with quotes, backslash, newline, tab, HTML".into(), json!({"title": "\"q\" \\b\\ \n\t<script>x</script> ✓", "amount_cents": 1, "stage": "lead"})),
            ("title with leading/trailing spaces (not trimmed)".into(), json!({"title": "  spaced  ", "amount_cents": 1, "stage": "lead"})),
            ("title that looks like SQL".into(), json!({"title": "x'); DROP TABLE deals; --", "amount_cents": 1, "stage": "lead"})),
            ("amount_cents 0".into(), json!({"title": "zero", "amount_cents": 0, "stage": "lead"})),
            ("amount_cents 10^12".into(), json!({"title": "max", "amount_cents": MAX_AMOUNT_CENTS, "stage": "lead"})),
            ("fields in another order".into(), json!({"stage": "won", "amount_cents": 5, "title": "reordered"})),
        ];
        let mut valid_bodies = valid_bodies;
        for s in STAGES {
            valid_bodies.push((format!("stage {s}"), json!({"title": format!("stage {s}"), "amount_cents": 7, "stage": s})));
        }
        for (what, body) in valid_bodies {
            let r = self.post_json(&body).await;
            let res = r.and_then(|r| {
                expect_status(&r, 201)?;
                let d = deal(&r.json()?).map_err(|e| format!("{}: {e}", r.what()))?;
                ensure!(
                    json!(d.title) == body["title"] && json!(d.amount_cents) == body["amount_cents"] && json!(d.stage) == body["stage"],
                    "sent {body}, got {}",
                    d.raw
                );
                Ok(())
            });
            if res.is_ok() {
                created += 1;
            }
            self.record(format!("POST /api/deals, {what} -> 201, stored verbatim"), res);
        }
        for ct in ["application/json; charset=utf-8", "Application/JSON", "application/vnd.crm+json"] {
            let r = self.post_deal(json!({"title": format!("ct {ct}"), "amount_cents": 1, "stage": "lead"}).to_string().into_bytes(), Some(ct), Some(USER)).await;
            let res = r.and_then(|r| expect_status(&r, 201));
            if res.is_ok() {
                created += 1;
            }
            self.record(format!("POST /api/deals with Content-Type `{ct}` -> 201"), res);
        }

        // Exactly 2 MiB (valid JSON padded with whitespace) is within the limit.
        let mut exact = json!({"title": "exactly 2 MiB", "amount_cents": 1, "stage": "lead"}).to_string().into_bytes();
        exact.resize(BODY_LIMIT, b' ');
        let r = self.post_deal(exact, Some("application/json"), Some(USER)).await;
        let res = r.and_then(|r| expect_status(&r, 201));
        if res.is_ok() {
            created += 1;
        }
        self.record("POST /api/deals, a body of exactly 2 MiB (2,097,152 bytes) -> 201", res);

        // Rule breaks.
        let t = |title: Value| json!({"title": title, "amount_cents": 1, "stage": "lead"});
        let a = |amount: Value| json!({"title": "amount", "amount_cents": amount, "stage": "lead"});
        let s = |stage: Value| json!({"title": "stage", "amount_cents": 1, "stage": stage});
        let cases: Vec<(String, Vec<u8>, Vec<&str>)> = vec![
            ("empty title".into(), t(json!("")).to_string().into(), vec!["title"]),
            ("title of 201 ASCII characters".into(), t(json!("t".repeat(201))).to_string().into(), vec!["title"]),
            ("title of 201 emoji".into(), t(json!("😀".repeat(201))).to_string().into(), vec!["title"]),
            ("title of 201 scalar values with combining marks".into(), t(json!(format!("{}e", "e\u{301}".repeat(100)))).to_string().into(), vec!["title"]),
            ("title with U+0000".into(), t(json!("nul\u{0}byte")).to_string().into(), vec!["title"]),
            ("title a number".into(), t(json!(5)).to_string().into(), vec!["title"]),
            ("title an array".into(), t(json!(["x"])).to_string().into(), vec!["title"]),
            ("title an object".into(), t(json!({"a": 1})).to_string().into(), vec!["title"]),
            ("title null".into(), t(Value::Null).to_string().into(), vec!["title"]),
            ("amount_cents -1".into(), a(json!(-1)).to_string().into(), vec!["amount_cents"]),
            ("amount_cents 10^12+1".into(), a(json!(MAX_AMOUNT_CENTS + 1)).to_string().into(), vec!["amount_cents"]),
            ("amount_cents i64::MAX".into(), a(json!(i64::MAX)).to_string().into(), vec!["amount_cents"]),
            ("amount_cents i64::MIN".into(), a(json!(i64::MIN)).to_string().into(), vec!["amount_cents"]),
            ("amount_cents 10^19 (beyond i64)".into(), br#"{"title":"amount","amount_cents":10000000000000000000,"stage":"lead"}"#.to_vec(), vec!["amount_cents"]),
            ("amount_cents 1.5".into(), br#"{"title":"amount","amount_cents":1.5,"stage":"lead"}"#.to_vec(), vec!["amount_cents"]),
            ("amount_cents 100.0".into(), br#"{"title":"amount","amount_cents":100.0,"stage":"lead"}"#.to_vec(), vec!["amount_cents"]),
            ("amount_cents 1e3".into(), br#"{"title":"amount","amount_cents":1e3,"stage":"lead"}"#.to_vec(), vec!["amount_cents"]),
            ("amount_cents \"100\"".into(), a(json!("100")).to_string().into(), vec!["amount_cents"]),
            ("amount_cents true".into(), a(json!(true)).to_string().into(), vec!["amount_cents"]),
            ("amount_cents null".into(), a(Value::Null).to_string().into(), vec!["amount_cents"]),
            ("stage unknown".into(), s(json!("closed")).to_string().into(), vec!["stage"]),
            ("stage wrong case `Won`".into(), s(json!("Won")).to_string().into(), vec!["stage"]),
            ("stage wrong case `LEAD`".into(), s(json!("LEAD")).to_string().into(), vec!["stage"]),
            ("stage with a space ` won`".into(), s(json!(" won")).to_string().into(), vec!["stage"]),
            ("stage empty".into(), s(json!("")).to_string().into(), vec!["stage"]),
            ("stage a number".into(), s(json!(1)).to_string().into(), vec!["stage"]),
            ("stage null".into(), s(Value::Null).to_string().into(), vec!["stage"]),
            ("title missing".into(), br#"{"amount_cents":1,"stage":"lead"}"#.to_vec(), vec!["title"]),
            ("amount_cents missing".into(), br#"{"title":"x","stage":"lead"}"#.to_vec(), vec!["amount_cents"]),
            ("stage missing".into(), br#"{"title":"x","amount_cents":1}"#.to_vec(), vec!["stage"]),
            ("empty object".into(), b"{}".to_vec(), vec!["title", "amount_cents", "stage"]),
            ("unknown field `color`".into(), br#"{"title":"x","amount_cents":1,"stage":"lead","color":"red"}"#.to_vec(), vec!["color"]),
            ("unknown field `owner_id` (mass assignment)".into(), br#"{"title":"x","amount_cents":1,"stage":"lead","owner_id":1}"#.to_vec(), vec!["owner_id"]),
            ("unknown field `id`".into(), br#"{"title":"x","amount_cents":1,"stage":"lead","id":5}"#.to_vec(), vec!["id"]),
            ("empty title and amount -1 together".into(), br#"{"title":"","amount_cents":-1,"stage":"lead"}"#.to_vec(), vec!["title", "amount_cents"]),
            ("every field wrong".into(), br#"{"title":"","amount_cents":-1,"stage":"nope"}"#.to_vec(), vec!["title", "amount_cents", "stage"]),
            ("a JSON array".into(), b"[]".to_vec(), vec![]),
            ("a JSON string".into(), br#""deal""#.to_vec(), vec![]),
            ("a JSON number".into(), b"5".to_vec(), vec![]),
            ("JSON null".into(), b"null".to_vec(), vec![]),
        ];
        for (what, body, fields) in cases {
            let r = self.post_deal(body, Some("application/json"), Some(USER)).await;
            let label = if fields.is_empty() { "validation_failed".to_string() } else { format!("validation_failed on {}", fields.join(", ")) };
            self.record(format!("POST /api/deals, {what} -> 400 {label}"), r.and_then(|r| expect_validation(&r, &fields)));
        }

        let malformed: [(&str, &[u8]); 7] = [
            ("truncated JSON", br#"{"title":"#),
            ("an empty body", b""),
            ("single-quoted keys", b"{'title':'x','amount_cents':1,'stage':'lead'}"),
            ("trailing garbage", br#"{"title":"x","amount_cents":1,"stage":"lead"} x"#),
            ("invalid UTF-8", b"{\"title\":\"\xff\xfe\",\"amount_cents\":1,\"stage\":\"lead\"}"),
            ("a trailing comma", br#"{"title":"x","amount_cents":1,"stage":"lead",}"#),
            ("plain text", b"title=x&amount_cents=1"),
        ];
        for (what, body) in malformed {
            let r = self.post_deal(body.to_vec(), Some("application/json"), Some(USER)).await;
            self.record(format!("POST /api/deals, {what} -> 400 malformed_json"), r.and_then(|r| expect_error(&r, 400, "malformed_json").map(|_| ())));
        }

        let good = json!({"title": "media type", "amount_cents": 1, "stage": "lead"}).to_string().into_bytes();
        for ct in [None, Some("text/plain"), Some("application/x-www-form-urlencoded"), Some("multipart/form-data; boundary=x"), Some("application/jsonp")] {
            let r = self.post_deal(good.clone(), ct, Some(USER)).await;
            self.record(
                format!("POST /api/deals with Content-Type {} -> 415 unsupported_media_type", ct.map_or("missing".to_string(), |c| format!("`{c}`"))),
                r.and_then(|r| expect_error(&r, 415, "unsupported_media_type").map(|_| ())),
            );
        }
        let r = self.post_deal(good.clone(), Some("text/plain"), None).await;
        self.record("POST /api/deals, no token and text/plain -> 401 (auth before media type)", r.and_then(|r| expect_401(&r)));
        let r = self.post_deal(b"{".to_vec(), Some("application/json"), None).await;
        self.record("POST /api/deals, no token and malformed JSON -> 401 (auth before parsing)", r.and_then(|r| expect_401(&r)));

        // Over the limit: announced by Content-Length, and streamed chunked.
        let auth = self.bearer(USER);
        let mut over = json!({"title": "over 2 MiB", "amount_cents": 1, "stage": "lead"}).to_string().into_bytes();
        over.resize(BODY_LIMIT + 1, b' ');
        let r = self
            .raw(
                "POST",
                "/api/deals",
                &[("authorization", &auth), ("content-type", "application/json")],
                RawBody::Announced { declared: over.len(), bytes: over, wait: Duration::from_millis(500) },
            )
            .await;
        self.record(
            "POST /api/deals, Content-Length 2 MiB + 1 (valid JSON) -> 413 payload_too_large",
            r.and_then(|r| expect_error(&r, 413, "payload_too_large").map(|_| ())),
        );
        let r = self
            .raw(
                "POST",
                "/api/deals",
                &[("authorization", &auth), ("content-type", "application/json")],
                RawBody::Chunked { total: 3 * 1024 * 1024, fill: b' ' },
            )
            .await;
        self.record(
            "POST /api/deals, 3 MiB chunked without Content-Length -> 413 payload_too_large",
            r.and_then(|r| expect_error(&r, 413, "payload_too_large").map(|_| ())),
        );

        let after = self.list("?per_page=1").await.map(|(_, m)| m.total);
        self.record(
            "rejected POSTs stored nothing: meta.total = before + accepted inserts",
            match (&before, &after) {
                (Ok(b), Ok(a)) if *a == b + created => Ok(()),
                (b, a) => Err(format!("before {b:?}, after {a:?}, accepted {created}")),
            },
        );
        let r = self.list("?page=1&per_page=100").await;
        self.record("after the inserts the list is still ordered by created_at DESC, id DESC", r.and_then(|(d, _)| ordered(&d)));
    }

    // ---------------------------------------------------------------- routing

    async fn routing(&mut self) {
        let auth = self.bearer(USER);
        for (target, with_token) in [("/nope", false), ("/api/nope", true), ("/JSON", false), ("/json/", false), ("/json%00", false), ("/api/deals/extra/path", true)] {
            let headers: Vec<(&str, &str)> = if with_token { vec![("authorization", &auth)] } else { vec![] };
            let r = self.req(Method::GET, target, &headers, Body::None).await;
            self.record(format!("GET {target} -> 404 not_found"), r.and_then(|r| expect_error(&r, 404, "not_found").map(|_| ())));
        }
        let cases: [(Method, &str, bool, &[&str]); 6] = [
            (Method::POST, "/json", false, &["GET"]),
            (Method::DELETE, "/db", false, &["GET"]),
            (Method::PUT, "/queries", false, &["GET"]),
            (Method::DELETE, "/api/deals", true, &["GET", "POST"]),
            (Method::PATCH, "/api/deals", true, &["GET", "POST"]),
            (Method::PUT, "/api/deals", true, &["GET", "POST"]),
        ];
        for (m, target, with_token, allow) in cases {
            let headers: Vec<(&str, &str)> = if with_token { vec![("authorization", &auth)] } else { vec![] };
            let r = self.req(m.clone(), target, &headers, Body::None).await;
            self.record(
                format!("{m} {target} -> 405 method_not_allowed with Allow: {}", allow.join(", ")),
                r.and_then(|r| {
                    expect_error(&r, 405, "method_not_allowed")?;
                    let got = r.header("allow").ok_or("no Allow header")?;
                    let got: BTreeSet<String> = got.split(',').map(|m| m.trim().to_ascii_uppercase()).collect();
                    ensure!(allow.iter().all(|a| got.contains(*a)), "Allow {got:?}");
                    Ok(())
                }),
            );
        }
    }

    // ---------------------------------------------------------------- compression

    async fn compression(&mut self) {
        let plain = self.req(Method::GET, "/queries?queries=100", &[], Body::None).await;
        self.record(
            "no Accept-Encoding -> no Content-Encoding, plain JSON",
            plain.and_then(|r| {
                expect_status(&r, 200)?;
                ensure!(r.header("content-encoding").is_none(), "Content-Encoding {:?}", r.header("content-encoding"));
                r.json().map(|_| ())
            }),
        );
        let auth = self.bearer(USER);
        for (target, with_token, n) in [("/queries?queries=100", false, 100usize), ("/api/deals?per_page=100", true, 100)] {
            let mut headers = vec![("accept-encoding", "gzip")];
            if with_token {
                headers.push(("authorization", &auth));
            }
            let r = self.req(Method::GET, target, &headers, Body::None).await;
            self.record(
                format!("GET {target} with Accept-Encoding: gzip -> gzip body that decodes to the JSON"),
                r.and_then(|r| {
                    expect_status(&r, 200)?;
                    ensure!(r.header("content-encoding").as_deref() == Some("gzip"), "{}: Content-Encoding {:?}", r.what(), r.header("content-encoding"));
                    let mut out = Vec::new();
                    flate2::read::GzDecoder::new(r.body.as_slice()).read_to_end(&mut out).map_err(|e| format!("gunzip: {e}"))?;
                    let v: Value = serde_json::from_slice(&out).map_err(|e| format!("decoded body is not JSON: {e}"))?;
                    let len = v.as_array().or_else(|| v["data"].as_array()).map(Vec::len);
                    ensure!(len == Some(n), "decoded {len:?} items");
                    Ok(())
                }),
            );
        }
    }

    // ---------------------------------------------------------------- every response

    fn every_response(&mut self) {
        let n = self.log.len();
        let mut bad_ct = Vec::new();
        let mut bad_nosniff = Vec::new();
        let mut bad_frame = Vec::new();
        let mut bad_rid = Vec::new();
        let mut rids: HashMap<String, usize> = HashMap::new();
        let mut fivehundreds = Vec::new();
        let mut leaks = Vec::new();
        let mut secrets = Vec::new();
        let mut json_bodies = 0usize;
        let mut error_bodies = 0usize;
        let mut bad_errors = Vec::new();
        for r in &self.log {
            if !r.is_json_content_type() {
                bad_ct.push(format!("{} ({:?})", r.what(), r.header("content-type")));
            }
            if !r.header("x-content-type-options").is_some_and(|v| v.eq_ignore_ascii_case("nosniff")) {
                bad_nosniff.push(r.what());
            }
            if !r.header("x-frame-options").is_some_and(|v| v.eq_ignore_ascii_case("deny")) {
                bad_frame.push(r.what());
            }
            match r.header("x-request-id") {
                Some(id) if !id.trim().is_empty() => *rids.entry(id).or_default() += 1,
                _ => bad_rid.push(r.what()),
            }
            if r.status >= 500 {
                fivehundreds.push(format!("{}: {}", r.what(), r.body_head()));
            }
            if r.status >= 400 {
                error_bodies += 1;
                if let Some(p) = leak(&r.body) {
                    leaks.push(format!("{} contains {p:?}: {}", r.what(), r.body_head()));
                }
                let code = serde_json::from_slice::<Value>(&r.body).ok().and_then(|v| v["error"]["code"].as_str().map(str::to_string));
                if let Err(e) = expect_error(r, r.status, code.as_deref().unwrap_or("<any snake_case code>")) {
                    bad_errors.push(e);
                }
            }
            if r.header("content-encoding").is_none() {
                if let Ok(v) = serde_json::from_slice::<Value>(&r.body) {
                    json_bodies += 1;
                    if let Some(p) = secret_in(&v) {
                        secrets.push(format!("{}: {p}", r.what()));
                    }
                }
            }
        }
        let dup: Vec<String> = rids.iter().filter(|(_, c)| **c > 1).map(|(id, c)| format!("{id} x{c}")).take(5).collect();
        let list = |v: &[String]| if v.is_empty() { Ok(()) } else { Err(format!("{} of {n}: {}", v.len(), v.iter().take(5).cloned().collect::<Vec<_>>().join("; "))) };
        self.record(format!("every response ({n}) has Content-Type application/json"), list(&bad_ct));
        self.record("every response has X-Content-Type-Options: nosniff", list(&bad_nosniff));
        self.record("every response has X-Frame-Options: DENY", list(&bad_frame));
        self.record("every response has an X-Request-Id", list(&bad_rid));
        self.record("every X-Request-Id is different", if rids.is_empty() { Err("no X-Request-Id seen".into()) } else { list(&dup) });
        self.record("no response was a 5xx (nothing the suite sends may fail the server)", list(&fivehundreds));
        self.record(
            "no error body shows SQL, a stack trace or a panic message",
            if error_bodies == 0 { Err("no error responses seen".into()) } else { list(&leaks) },
        );
        self.record(
            "no body carries a password hash, TOTP secret or recovery codes",
            if json_bodies < n / 2 { Err(format!("only {json_bodies} of {n} bodies were JSON")) } else { list(&secrets) },
        );
        self.record("every 4xx/5xx body has the error shape (fields only on validation_failed)", list(&bad_errors));
    }
}

fn expect_status(r: &Resp, want: u16) -> Result<(), String> {
    ensure!(r.status == want, "{}, want {want}: {}", r.what(), r.body_head());
    Ok(())
}

/// Checks `{"error":{"code","message"[, "fields"]}}` with `code` (any snake_case code when
/// `code` starts with `<`) and returns the `error` object.
fn expect_error(r: &Resp, status: u16, code: &str) -> Result<Value, String> {
    expect_status(r, status)?;
    ensure!(r.is_json_content_type(), "{}: Content-Type {:?}", r.what(), r.header("content-type"));
    let v = r.json()?;
    let top = v.as_object().ok_or_else(|| format!("{}: not an object: {}", r.what(), r.body_head()))?;
    ensure!(top.len() == 1 && top.contains_key("error"), "{}: top-level keys must be exactly [\"error\"]: {}", r.what(), r.body_head());
    let e = top["error"].as_object().ok_or_else(|| format!("{}: error is not an object", r.what()))?;
    for k in e.keys() {
        ensure!(["code", "message", "fields"].contains(&k.as_str()), "{}: unexpected key error.{k}", r.what());
    }
    let got = e.get("code").and_then(Value::as_str).ok_or_else(|| format!("{}: error.code is not a string", r.what()))?;
    let snake = !got.is_empty() && got.starts_with(|c: char| c.is_ascii_lowercase()) && got.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    ensure!(snake, "{}: error.code {got:?} is not snake_case", r.what());
    ensure!(code.starts_with('<') || got == code, "{}: error.code {got:?}, want {code:?}: {}", r.what(), r.body_head());
    let msg = e.get("message").and_then(Value::as_str).ok_or_else(|| format!("{}: error.message is not a string", r.what()))?;
    ensure!(!msg.trim().is_empty(), "{}: empty error.message", r.what());
    if got == "validation_failed" {
        let f = e.get("fields").and_then(Value::as_object).ok_or_else(|| format!("{}: validation_failed without a fields object", r.what()))?;
        ensure!(!f.is_empty(), "{}: empty fields", r.what());
        for (k, msgs) in f {
            let msgs = msgs.as_array().ok_or_else(|| format!("{}: fields.{k} is not an array", r.what()))?;
            ensure!(!msgs.is_empty(), "{}: fields.{k} is empty", r.what());
            ensure!(msgs.iter().all(|m| m.as_str().is_some_and(|s| !s.trim().is_empty())), "{}: fields.{k} must hold non-empty strings", r.what());
        }
    } else {
        ensure!(!e.contains_key("fields"), "{}: fields on a {got} error", r.what());
    }
    Ok(Value::Object(e.clone()))
}

fn expect_validation(r: &Resp, fields: &[&str]) -> Result<(), String> {
    let e = expect_error(r, 400, "validation_failed")?;
    for f in fields {
        ensure!(e["fields"].get(*f).is_some(), "{}: no fields.{f}: {}", r.what(), r.body_head());
    }
    Ok(())
}

fn expect_401(r: &Resp) -> Result<(), String> {
    expect_error(r, 401, "unauthorized")?;
    let www = r.header("www-authenticate").ok_or_else(|| format!("{}: no WWW-Authenticate header", r.what()))?;
    ensure!(www.to_ascii_lowercase().starts_with("bearer"), "{}: WWW-Authenticate {www:?}", r.what());
    Ok(())
}

fn int_in(v: &Value, key: &str, lo: i64, hi: i64) -> Result<i64, String> {
    let n = v.get(key).and_then(Value::as_i64).ok_or_else(|| format!("{key} is not a JSON integer: {v}"))?;
    ensure!((lo..=hi).contains(&n), "{key} = {n} outside {lo}..={hi}");
    Ok(n)
}

fn exact_keys(v: &Value, keys: &[&str]) -> Result<(), String> {
    let o = v.as_object().ok_or_else(|| format!("not an object: {v}"))?;
    let got: BTreeSet<&str> = o.keys().map(String::as_str).collect();
    let want: BTreeSet<&str> = keys.iter().copied().collect();
    ensure!(got == want, "keys {got:?}, want {want:?}");
    Ok(())
}

fn world_obj(v: &Value) -> Result<(i64, i64), String> {
    exact_keys(v, &["id", "randomNumber"])?;
    Ok((int_in(v, "id", 1, 10_000)?, int_in(v, "randomNumber", 1, 10_000)?))
}

fn deal(v: &Value) -> Result<Deal, String> {
    exact_keys(v, &["id", "title", "amount_cents", "stage", "created_at", "owner"]).map_err(|e| format!("Deal: {e}"))?;
    let owner = &v["owner"];
    exact_keys(owner, &["id", "name", "email"]).map_err(|e| format!("Deal.owner: {e}"))?;
    let created = v["created_at"].as_str().ok_or_else(|| format!("created_at is not a string: {v}"))?;
    let created_at = DateTime::parse_from_rfc3339(created).map_err(|e| format!("created_at {created:?} is not RFC 3339: {e}"))?;
    ensure!(created_at.offset().local_minus_utc() == 0, "created_at {created:?} is not UTC");
    Ok(Deal {
        id: int_in(v, "id", 1, i64::MAX)?,
        title: v["title"].as_str().ok_or_else(|| format!("title is not a string: {v}"))?.to_string(),
        amount_cents: v["amount_cents"].as_i64().ok_or_else(|| format!("amount_cents is not a JSON integer: {v}"))?,
        stage: v["stage"].as_str().ok_or_else(|| format!("stage is not a string: {v}"))?.to_string(),
        created_at,
        owner_id: owner["id"].as_i64().ok_or_else(|| format!("owner.id is not a JSON integer: {v}"))?,
        owner_name: owner["name"].as_str().ok_or_else(|| format!("owner.name is not a string: {v}"))?.to_string(),
        owner_email: owner["email"].as_str().ok_or_else(|| format!("owner.email is not a string: {v}"))?.to_string(),
        raw: v.clone(),
    })
}

fn list_body(r: &Resp) -> Result<(Vec<Deal>, Meta), String> {
    expect_status(r, 200)?;
    let v = r.json()?;
    let ctx = |e: String| format!("{}: {e}", r.what());
    exact_keys(&v, &["data", "meta"]).map_err(ctx)?;
    let m = &v["meta"];
    exact_keys(m, &["page", "per_page", "total", "total_pages"]).map_err(|e| ctx(format!("meta: {e}")))?;
    let meta = Meta {
        page: int_in(m, "page", 1, i64::MAX).map_err(ctx)?,
        per_page: int_in(m, "per_page", 1, 100).map_err(ctx)?,
        total: int_in(m, "total", 0, i64::MAX).map_err(ctx)?,
        total_pages: int_in(m, "total_pages", 0, i64::MAX).map_err(ctx)?,
    };
    ensure!(meta.total_pages == ceil_div(meta.total, meta.per_page), "{}: total_pages {} for total {} per_page {}", r.what(), meta.total_pages, meta.total, meta.per_page);
    let data = v["data"].as_array().ok_or_else(|| ctx("data is not an array".into()))?;
    ensure!(data.len() as i64 <= meta.per_page, "{}: {} deals > per_page {}", r.what(), data.len(), meta.per_page);
    let deals = data.iter().map(deal).collect::<Result<Vec<_>, _>>().map_err(ctx)?;
    Ok((deals, meta))
}

fn ordered(deals: &[Deal]) -> Result<(), String> {
    for w in deals.windows(2) {
        let (a, b) = (&w[0], &w[1]);
        ensure!((a.created_at, a.id) > (b.created_at, b.id), "deal {} ({}) before deal {} ({})", a.id, a.created_at, b.id, b.created_at);
    }
    Ok(())
}

/// A substring of an error body that shows internals, if any.
fn leak(body: &[u8]) -> Option<&'static str> {
    let text = String::from_utf8_lossy(body);
    const PATTERNS: [&str; 16] = [
        "SELECT ", "INSERT ", "UPDATE ", " FROM ", "sqlx", "SQLSTATE", "error returned from database", "violates", "syntax error",
        "panicked", "stack backtrace", "RUST_BACKTRACE", ".rs:", "src/", "tokio", "thread '",
    ];
    PATTERNS.into_iter().find(|p| text.contains(p))
}

/// A key or value anywhere in `v` that looks like a user secret column.
fn secret_in(v: &Value) -> Option<String> {
    match v {
        Value::Object(o) => o.iter().find_map(|(k, v)| {
            let lk = k.to_ascii_lowercase();
            if ["password", "totp", "recovery", "secret"].iter().any(|s| lk.contains(s)) {
                Some(format!("key {k:?}"))
            } else {
                secret_in(v)
            }
        }),
        Value::Array(a) => a.iter().find_map(secret_in),
        Value::String(s) if s.starts_with("$2b$") || s.starts_with("$2a$") || s.starts_with("$2y$") => Some(format!("bcrypt-like value {s:?}")),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn resp(status: u16, body: &str) -> Resp {
        let mut headers = reqwest::header::HeaderMap::new();
        headers.insert("content-type", reqwest::header::HeaderValue::from_static("application/json"));
        Resp { method: "GET".into(), target: "/x".into(), status, headers, body: body.as_bytes().to_vec() }
    }

    #[test]
    fn error_shape_rules() {
        assert!(expect_error(&resp(404, r#"{"error":{"code":"not_found","message":"no such route"}}"#), 404, "not_found").is_ok());
        // fields on a non-validation error
        assert!(expect_error(&resp(404, r#"{"error":{"code":"not_found","message":"x","fields":{}}}"#), 404, "not_found").is_err());
        // validation without fields, with empty fields, with a non-string message
        assert!(expect_validation(&resp(400, r#"{"error":{"code":"validation_failed","message":"x"}}"#), &[]).is_err());
        assert!(expect_validation(&resp(400, r#"{"error":{"code":"validation_failed","message":"x","fields":{}}}"#), &[]).is_err());
        assert!(expect_validation(&resp(400, r#"{"error":{"code":"validation_failed","message":"x","fields":{"t":[1]}}}"#), &[]).is_err());
        assert!(expect_validation(&resp(400, r#"{"error":{"code":"validation_failed","message":"x","fields":{"t":["bad"]}}}"#), &["t"]).is_ok());
        assert!(expect_validation(&resp(400, r#"{"error":{"code":"validation_failed","message":"x","fields":{"t":["bad"]}}}"#), &["u"]).is_err());
        // extra top-level key, CamelCase code, empty message
        assert!(expect_error(&resp(400, r#"{"error":{"code":"x","message":"m"},"trace":1}"#), 400, "x").is_err());
        assert!(expect_error(&resp(400, r#"{"error":{"code":"NotFound","message":"m"}}"#), 400, "<any>").is_err());
        assert!(expect_error(&resp(400, r#"{"error":{"code":"x","message":" "}}"#), 400, "x").is_err());
    }

    #[test]
    fn deal_shape_rules() {
        let ok = json!({"id":1,"title":"t","amount_cents":5,"stage":"won","created_at":"2025-01-02T03:04:05.123456Z","owner":{"id":3,"name":"n","email":"user3@example.com"}});
        assert!(deal(&ok).is_ok());
        let mut extra = ok.clone();
        extra["owner"]["password_hash"] = json!("$2b$12$x");
        assert!(deal(&extra).is_err());
        assert!(secret_in(&extra).is_some());
        let mut local = ok.clone();
        local["created_at"] = json!("2025-01-02T03:04:05+02:00");
        assert!(deal(&local).is_err());
        let mut float = ok.clone();
        float["amount_cents"] = json!(5.0);
        assert!(deal(&float).is_err());
        assert!(secret_in(&ok).is_none());
    }

    #[test]
    fn order_is_strictly_descending() {
        let mk = |id: i64, t: &str| {
            deal(&json!({"id":id,"title":"t","amount_cents":5,"stage":"won","created_at":t,"owner":{"id":3,"name":"n","email":"e"}})).expect("deal")
        };
        assert!(ordered(&[mk(2, "2025-01-02T00:00:00Z"), mk(1, "2025-01-01T00:00:00Z")]).is_ok());
        assert!(ordered(&[mk(1, "2025-01-02T00:00:00Z"), mk(2, "2025-01-02T00:00:00Z")]).is_err());
        assert!(ordered(&[mk(1, "2025-01-01T00:00:00Z"), mk(2, "2025-01-02T00:00:00Z")]).is_err());
    }
}
