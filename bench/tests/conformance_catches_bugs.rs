//! The conformance suite checked against a small in-memory CRM written here from SPEC.md
//! (and its "Choices where the contract is silent"): the correct fake must pass every
//! check, and each deliberately planted bug must make the named checks fail. This is how we
//! know the suite catches bugs rather than passing anything (the real app is checked by
//! target-app/tests).

use std::collections::BTreeMap;
use std::io::Write as _;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Router;
use bench::conformance::{self, Report};
use bench::DEFAULT_JWT_SECRET;
use chrono::{DateTime, Duration, SecondsFormat, TimeZone, Utc};
use rand::Rng;
use serde_json::{json, Map, Value};

const STAGES: [&str; 6] = ["lead", "qualified", "proposal", "negotiation", "won", "lost"];
const LIMIT: usize = 2 * 1024 * 1024;

/// One planted bug (or none).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Bug {
    None,
    NoWwwAuthenticate,
    AcceptsExpired,
    AcceptsUnknownUser,
    AcceptsOtherHmacAlgs,
    OrderAscending,
    LeaksPasswordHash,
    TitleLengthInBytes,
    TrimsTitle,
    NoUpperClamp,
    MethodNotAllowedAs404,
    HtmlNotFound,
    NoBodyLimit,
    AmountMaxExclusive,
    TotalCountsThePage,
    FieldsOnEveryError,
    ConstantRequestId,
    OffsetOverflow500,
    AcceptsOwnerIdField,
    WrongLocation,
    NoGzip,
    HangsOnDb,
    LimitOneByteShort,
    TitleAllows201,
    SchemeCaseSensitive,
    EmptyQueriesIsZero,
    PerPageAllows101,
    StageCaseInsensitive,
}

#[derive(Clone)]
struct DealRow {
    id: i64,
    owner: i64,
    title: String,
    amount: i64,
    stage: String,
    created_at: DateTime<Utc>,
}

struct Fake {
    bug: Bug,
    deals: Mutex<Vec<DealRow>>,
    next_id: AtomicI64,
    request_ids: AtomicU64,
}

fn random_number(id: i64) -> i64 {
    (id * 7919) % 10_000 + 1
}

fn error(status: StatusCode, code: &str, message: &str, fields: Option<BTreeMap<String, Vec<String>>>) -> Response {
    let mut e = json!({"code": code, "message": message});
    if let Some(f) = fields {
        e["fields"] = json!(f);
    }
    (status, [(header::CONTENT_TYPE, "application/json")], json!({ "error": e }).to_string()).into_response()
}

fn json_resp(status: StatusCode, v: &Value) -> Response {
    (status, [(header::CONTENT_TYPE, "application/json")], v.to_string()).into_response()
}

fn validation(fields: BTreeMap<String, Vec<String>>) -> Response {
    error(StatusCode::BAD_REQUEST, "validation_failed", "validation failed", Some(fields))
}

fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let Ok(v) = u8::from_str_radix(std::str::from_utf8(&b[i + 1..i + 3]).unwrap_or("zz"), 16) {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(if b[i] == b'+' { b' ' } else { b[i] });
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

fn query(req: &Request) -> BTreeMap<String, String> {
    req.uri()
        .query()
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (percent_decode(k), percent_decode(v))
        })
        .collect()
}

impl Fake {
    fn deal_json(&self, d: &DealRow) -> Value {
        let mut owner = json!({"id": d.owner, "name": format!("User {}", d.owner), "email": format!("user{}@example.com", d.owner)});
        if self.bug == Bug::LeaksPasswordHash {
            owner["password_hash"] = json!("$2b$12$abcdefghijklmnopqrstuuABCDEFGHIJKLMNOPQRSTUVWXYZ01234");
        }
        json!({
            "id": d.id, "title": d.title, "amount_cents": d.amount, "stage": d.stage,
            "created_at": d.created_at.to_rfc3339_opts(SecondsFormat::Micros, true), "owner": owner,
        })
    }

    #[allow(clippy::result_large_err)] // a test fake: the refusal is the response itself
    fn authenticate(&self, headers: &HeaderMap) -> Result<i64, Response> {
        let refuse = || {
            let mut r = error(StatusCode::UNAUTHORIZED, "unauthorized", "invalid or missing bearer token", None);
            if self.bug != Bug::NoWwwAuthenticate {
                r.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            }
            r
        };
        let h = headers.get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).ok_or_else(refuse)?;
        let (scheme, token) = h.split_once(' ').ok_or_else(refuse)?;
        let scheme_ok = if self.bug == Bug::SchemeCaseSensitive { scheme == "Bearer" } else { scheme.eq_ignore_ascii_case("bearer") };
        if !scheme_ok || token.is_empty() || token.contains(' ') {
            return Err(refuse());
        }
        let mut v = jsonwebtoken::Validation::new(jsonwebtoken::Algorithm::HS256);
        if self.bug == Bug::AcceptsOtherHmacAlgs {
            v.algorithms = vec![jsonwebtoken::Algorithm::HS256, jsonwebtoken::Algorithm::HS384, jsonwebtoken::Algorithm::HS512];
        }
        v.set_issuer(&["crm-bench"]);
        v.set_required_spec_claims(&["exp", "iss", "sub"]);
        v.validate_exp = self.bug != Bug::AcceptsExpired;
        let data = jsonwebtoken::decode::<Value>(token, &jsonwebtoken::DecodingKey::from_secret(DEFAULT_JWT_SECRET.as_bytes()), &v)
            .map_err(|_| refuse())?;
        if data.claims.get("typ") != Some(&json!("access")) {
            return Err(refuse());
        }
        let id: i64 = data.claims["sub"].as_str().and_then(|s| s.parse().ok()).ok_or_else(refuse)?;
        if !(1..=100).contains(&id) && self.bug != Bug::AcceptsUnknownUser {
            return Err(refuse());
        }
        Ok(id)
    }

    fn list(&self, req: &Request) -> Response {
        let q = query(req);
        let mut fields = BTreeMap::new();
        let mut parse = |name: &str, default: i64, ok: &dyn Fn(i64) -> bool| match q.get(name) {
            None => default,
            Some(v) => match v.parse::<i64>() {
                Ok(n) if ok(n) => n,
                _ => {
                    fields.insert(name.to_string(), vec![format!("{name} is invalid")]);
                    default
                }
            },
        };
        let page = parse("page", 1, &|n| n >= 1);
        let max_per_page = if self.bug == Bug::PerPageAllows101 { 101 } else { 100 };
        let per_page = parse("per_page", 20, &|n| (1..=max_per_page).contains(&n));
        if !fields.is_empty() {
            return validation(fields);
        }
        let mut deals = self.deals.lock().expect("lock").clone();
        deals.sort_by_key(|d| std::cmp::Reverse((d.created_at, d.id)));
        if self.bug == Bug::OrderAscending {
            deals.reverse();
        }
        let offset = match (page - 1).checked_mul(per_page) {
            Some(o) => o,
            None if self.bug == Bug::OffsetOverflow500 => {
                return error(StatusCode::INTERNAL_SERVER_ERROR, "internal_error", "SELECT * FROM deals OFFSET overflow", None)
            }
            None => i64::MAX,
        };
        let data: Vec<Value> = deals
            .iter()
            .skip(usize::try_from(offset).unwrap_or(usize::MAX))
            .take(per_page as usize)
            .map(|d| self.deal_json(d))
            .collect();
        let total = if self.bug == Bug::TotalCountsThePage { data.len() as i64 } else { deals.len() as i64 };
        let total_pages = (total + per_page - 1) / per_page;
        json_resp(StatusCode::OK, &json!({"data": data, "meta": {"page": page, "per_page": per_page, "total": total, "total_pages": total_pages}}))
    }

    fn create(&self, user: i64, body: &[u8]) -> Response {
        let v: Value = match serde_json::from_slice(body) {
            Ok(v) => v,
            Err(_) => return error(StatusCode::BAD_REQUEST, "malformed_json", "the body is not valid JSON", None),
        };
        let Some(o) = v.as_object() else {
            return validation(BTreeMap::from([("body".to_string(), vec!["must be a JSON object".to_string()])]));
        };
        let mut fields: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let mut bad = |k: &str, m: &str| fields.entry(k.to_string()).or_default().push(m.to_string());
        for k in o.keys() {
            let known = ["title", "amount_cents", "stage"].contains(&k.as_str());
            let tolerated = self.bug == Bug::AcceptsOwnerIdField && k == "owner_id";
            if !known && !tolerated {
                bad(k, "unknown field");
            }
        }
        let title = match o.get("title") {
            Some(Value::String(s)) => {
                let n = if self.bug == Bug::TitleLengthInBytes { s.len() } else { s.chars().count() };
                let max = if self.bug == Bug::TitleAllows201 { 201 } else { 200 };
                if !(1..=max).contains(&n) {
                    bad("title", "must be 1..200 characters");
                }
                if s.contains('\0') {
                    bad("title", "must not contain U+0000");
                }
                if self.bug == Bug::TrimsTitle {
                    s.trim().to_string()
                } else {
                    s.clone()
                }
            }
            Some(_) => {
                bad("title", "must be a string");
                String::new()
            }
            None => {
                bad("title", "is required");
                String::new()
            }
        };
        let max = if self.bug == Bug::AmountMaxExclusive { 999_999_999_999 } else { 1_000_000_000_000 };
        let amount = match o.get("amount_cents") {
            Some(Value::Number(n)) if n.is_i64() || n.is_u64() => match n.as_i64() {
                Some(a) if (0..=max).contains(&a) => a,
                _ => {
                    bad("amount_cents", "must be 0..10^12");
                    0
                }
            },
            Some(_) => {
                bad("amount_cents", "must be an integer");
                0
            }
            None => {
                bad("amount_cents", "is required");
                0
            }
        };
        let stage = match o.get("stage") {
            Some(Value::String(s)) if STAGES.contains(&s.as_str()) => s.clone(),
            Some(Value::String(s)) if self.bug == Bug::StageCaseInsensitive && STAGES.contains(&s.to_ascii_lowercase().as_str()) => s.to_ascii_lowercase(),
            Some(_) => {
                bad("stage", "must be one of the six stages");
                String::new()
            }
            None => {
                bad("stage", "is required");
                String::new()
            }
        };
        if !fields.is_empty() {
            return validation(fields);
        }
        let row = DealRow { id: self.next_id.fetch_add(1, Ordering::SeqCst), owner: user, title, amount, stage, created_at: Utc::now() };
        self.deals.lock().expect("lock").push(row.clone());
        let mut r = json_resp(StatusCode::CREATED, &self.deal_json(&row));
        let loc = if self.bug == Bug::WrongLocation { format!("/deals/{}", row.id) } else { format!("/api/deals/{}", row.id) };
        r.headers_mut().insert(header::LOCATION, HeaderValue::from_str(&loc).expect("ascii"));
        r
    }

    async fn route(&self, req: Request) -> Response {
        let path = req.uri().path().to_string();
        let allow: &[&str] = match path.as_str() {
            "/json" | "/db" | "/queries" => &["GET"],
            "/api/deals" => &["GET", "POST"],
            _ => {
                if self.bug == Bug::HtmlNotFound {
                    return (StatusCode::NOT_FOUND, [(header::CONTENT_TYPE, "text/html")], "<h1>Not Found</h1>").into_response();
                }
                return error(StatusCode::NOT_FOUND, "not_found", "no such route", None);
            }
        };
        let declared = req.headers().get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<usize>().ok());
        let limit = if self.bug == Bug::LimitOneByteShort { LIMIT - 1 } else { LIMIT };
        if self.bug != Bug::NoBodyLimit && declared.is_some_and(|n| n > limit) {
            return error(StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large", "body over 2 MiB", None);
        }
        let user = if path.starts_with("/api/") {
            match self.authenticate(req.headers()) {
                Ok(u) => Some(u),
                Err(r) => return r,
            }
        } else {
            None
        };
        if !allow.contains(&req.method().as_str()) {
            if self.bug == Bug::MethodNotAllowedAs404 {
                return error(StatusCode::NOT_FOUND, "not_found", "no such route", None);
            }
            let mut r = error(StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed", "method not allowed", None);
            r.headers_mut().insert(header::ALLOW, HeaderValue::from_str(&allow.join(", ")).expect("ascii"));
            return r;
        }
        match (req.method().clone(), path.as_str()) {
            (Method::GET, "/json") => json_resp(StatusCode::OK, &json!({"message": "Hello, World!"})),
            (Method::GET, "/db") => {
                if self.bug == Bug::HangsOnDb {
                    tokio::time::sleep(std::time::Duration::from_secs(3600)).await;
                }
                let id = rand::thread_rng().gen_range(1..=10_000);
                json_resp(StatusCode::OK, &json!({"id": id, "randomNumber": random_number(id)}))
            }
            (Method::GET, "/queries") => {
                let raw = query(&req).get("queries").cloned();
                if self.bug == Bug::EmptyQueriesIsZero && raw.as_deref() == Some("") {
                    return json_resp(StatusCode::OK, &json!([]));
                }
                let n = raw.and_then(|q| q.parse::<i64>().ok()).unwrap_or(1);
                let n = if self.bug == Bug::NoUpperClamp { n.max(1) } else { n.clamp(1, 500) };
                let rows: Vec<Value> = (0..n)
                    .map(|_| {
                        let id = rand::thread_rng().gen_range(1..=10_000);
                        json!({"id": id, "randomNumber": random_number(id)})
                    })
                    .collect();
                json_resp(StatusCode::OK, &Value::Array(rows))
            }
            (Method::GET, "/api/deals") => self.list(&req),
            (Method::POST, "/api/deals") => {
                let ct = req.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("").to_ascii_lowercase();
                let mime = ct.split(';').next().unwrap_or("").trim().to_string();
                let json_like = mime == "application/json" || (mime.starts_with("application/") && mime.ends_with("+json"));
                if !json_like {
                    return error(StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type", "body must be application/json", None);
                }
                let limit = if self.bug == Bug::NoBodyLimit { usize::MAX } else { limit };
                let body = match axum::body::to_bytes(req.into_body(), limit).await {
                    Ok(b) => b,
                    Err(_) => return error(StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large", "body over 2 MiB", None),
                };
                self.create(user.unwrap_or(0), &body)
            }
            _ => error(StatusCode::NOT_FOUND, "not_found", "no such route", None),
        }
    }
}

async fn handle(State(fake): State<Arc<Fake>>, req: Request) -> Response {
    let gzip = req.headers().get(header::ACCEPT_ENCODING).and_then(|v| v.to_str().ok()).is_some_and(|v| v.contains("gzip"));
    let mut resp = fake.route(req).await;
    let h = resp.headers_mut();
    h.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    let rid = if fake.bug == Bug::ConstantRequestId { 1 } else { fake.request_ids.fetch_add(1, Ordering::SeqCst) };
    h.insert("x-request-id", HeaderValue::from_str(&format!("req-{rid}")).expect("ascii"));
    if fake.bug == Bug::FieldsOnEveryError && resp.status().is_client_error() {
        let (parts, body) = resp.into_parts();
        let bytes = axum::body::to_bytes(body, usize::MAX).await.unwrap_or_default();
        let mut v: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
        if v["error"].get("fields").is_none() {
            v["error"]["fields"] = Value::Object(Map::new());
        }
        resp = Response::from_parts(parts, Body::from(v.to_string()));
        resp.headers_mut().remove(header::CONTENT_LENGTH);
    }
    if gzip && fake.bug != Bug::NoGzip {
        let (mut parts, body) = resp.into_parts();
        let bytes = axum::body::to_bytes(body, usize::MAX).await.unwrap_or_default();
        if bytes.len() >= 1024 {
            let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
            enc.write_all(&bytes).expect("gzip");
            parts.headers.insert(header::CONTENT_ENCODING, HeaderValue::from_static("gzip"));
            parts.headers.remove(header::CONTENT_LENGTH);
            return Response::from_parts(parts, Body::from(enc.finish().expect("gzip")));
        }
        return Response::from_parts(parts, Body::from(bytes));
    }
    resp
}

/// Starts the fake on a free loopback port; returns its base URL.
async fn start(bug: Bug) -> String {
    let base = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).single().expect("date");
    let deals = (1..=1000)
        .map(|id| DealRow {
            id,
            owner: id % 100 + 1,
            title: format!("Seed deal {id}"),
            amount: id * 1000,
            stage: STAGES[(id % 6) as usize].to_string(),
            created_at: base - Duration::seconds(id * 31_000 + (id * 7) % 13),
        })
        .collect();
    let fake = Arc::new(Fake { bug, deals: Mutex::new(deals), next_id: AtomicI64::new(1001), request_ids: AtomicU64::new(1) });
    let app = Router::new().fallback(handle).with_state(fake);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, app).await.expect("serve") });
    format!("http://{addr}")
}

fn failed_names(r: &Report) -> Vec<String> {
    r.failures().map(|c| c.name.clone()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_correct_fake_passes_every_check() {
    let url = start(Bug::None).await;
    let report = conformance::run(&url, DEFAULT_JWT_SECRET).await;
    let failures: Vec<String> = report.failures().map(|c| format!("{}: {}", c.name, c.detail.clone().unwrap_or_default())).collect();
    assert!(failures.is_empty(), "{} failures:\n{}", failures.len(), failures.join("\n"));
    assert!(report.checks.len() >= 200, "{} checks", report.checks.len());
    let names: std::collections::BTreeSet<&str> = report.checks.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(names.len(), report.checks.len(), "check names are unique");
    // A second run against the same (now larger) data passes too: the suite reads the state.
    let again = conformance::run(&url, DEFAULT_JWT_SECRET).await;
    assert_eq!(again.failed(), 0, "{:?}", failed_names(&again));
    assert_eq!(again.checks.len(), report.checks.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_planted_bug_fails_the_checks_that_name_it() {
    let cases: &[(Bug, &[&str])] = &[
        (Bug::NoWwwAuthenticate, &["GET /api/deals, no Authorization header -> 401 unauthorized", "GET /api/deals, token expired -> 401 unauthorized"]),
        (Bug::AcceptsExpired, &["GET /api/deals, token expired -> 401 unauthorized", "POST /api/deals, expired -> 401 unauthorized"]),
        (Bug::AcceptsUnknownUser, &["GET /api/deals, token unknown_user -> 401 unauthorized", "GET /api/deals, token user_zero -> 401 unauthorized"]),
        (Bug::AcceptsOtherHmacAlgs, &["GET /api/deals, token alg_hs384 -> 401 unauthorized", "GET /api/deals, token alg_hs512 -> 401 unauthorized"]),
        (Bug::OrderAscending, &["the whole list is ordered by created_at DESC, id DESC", "the created deal is first on page 1, identical to the POST response"]),
        (Bug::LeaksPasswordHash, &["no body carries a password hash, TOTP secret or recovery codes", "GET /api/deals (no query) -> page 1, per_page 20, 20 deals, total_pages = ceil(total/20)"]),
        (Bug::TitleLengthInBytes, &["POST /api/deals, title of 200 emoji (800 bytes) -> 201, stored verbatim"]),
        (Bug::TrimsTitle, &["POST /api/deals, title with leading/trailing spaces (not trimmed) -> 201, stored verbatim"]),
        (Bug::NoUpperClamp, &["GET /queries?queries=501 -> array of 500 world rows", "GET /queries?queries=1000 -> array of 500 world rows"]),
        (Bug::MethodNotAllowedAs404, &["POST /json -> 405 method_not_allowed with Allow: GET", "DELETE /api/deals -> 405 method_not_allowed with Allow: GET, POST"]),
        (Bug::HtmlNotFound, &["GET /nope -> 404 not_found", "every response (226) has Content-Type application/json"]),
        (Bug::NoBodyLimit, &["POST /api/deals, Content-Length 2 MiB + 1 (valid JSON) -> 413 payload_too_large", "POST /api/deals, 3 MiB chunked without Content-Length -> 413 payload_too_large"]),
        (Bug::AmountMaxExclusive, &["POST /api/deals, amount_cents 10^12 -> 201, stored verbatim"]),
        (Bug::TotalCountsThePage, &["walking all pages yields meta.total deals, each once", "meta.total grew by one"]),
        (Bug::FieldsOnEveryError, &["GET /nope -> 404 not_found", "every 4xx/5xx body has the error shape (fields only on validation_failed)"]),
        (Bug::ConstantRequestId, &["every X-Request-Id is different"]),
        (Bug::OffsetOverflow500, &["GET /api/deals?page=9223372036854775807: past the end -> 200 with data [] and the real total", "no response was a 5xx (nothing the suite sends may fail the server)", "no error body shows SQL, a stack trace or a panic message"]),
        (Bug::AcceptsOwnerIdField, &["POST /api/deals, unknown field `owner_id` (mass assignment) -> 400 validation_failed on owner_id"]),
        (Bug::WrongLocation, &["POST /api/deals: Location is /api/deals/{id} of the body"]),
        (Bug::NoGzip, &["GET /queries?queries=100 with Accept-Encoding: gzip -> gzip body that decodes to the JSON"]),
        (Bug::LimitOneByteShort, &["POST /api/deals, a body of exactly 2 MiB (2,097,152 bytes) -> 201"]),
        (Bug::TitleAllows201, &["POST /api/deals, title of 201 ASCII characters -> 400 validation_failed on title"]),
        (Bug::SchemeCaseSensitive, &["auth scheme is case-insensitive: `bearer <token>` -> 200"]),
        (Bug::EmptyQueriesIsZero, &["GET /queries?queries= -> array of 1 world rows"]),
        (Bug::PerPageAllows101, &["GET /api/deals?per_page=101 -> 400 validation_failed on per_page"]),
        (Bug::StageCaseInsensitive, &["POST /api/deals, stage wrong case `Won` -> 400 validation_failed on stage", "POST /api/deals, stage wrong case `LEAD` -> 400 validation_failed on stage"]),
    ];
    let mut missed = Vec::new();
    for (bug, must_fail) in cases {
        let url = start(*bug).await;
        let report = conformance::run(&url, DEFAULT_JWT_SECRET).await;
        let failed = failed_names(&report);
        for name in *must_fail {
            let hit = if name.starts_with("every response (") {
                failed.iter().any(|f| f.starts_with("every response (") && f.ends_with("has Content-Type application/json"))
            } else {
                failed.iter().any(|f| f == name)
            };
            if !hit {
                missed.push(format!("{bug:?}: check {name:?} did not fail (failed: {failed:?})"));
            }
        }
        assert!(report.failed() >= must_fail.len(), "{bug:?}");
    }
    assert!(missed.is_empty(), "{}", missed.join("\n"));
}

/// Runs the `conformance` binary; returns (exit code, stdout, stderr).
async fn conformance_bin(args: &[&str]) -> (i32, String, String) {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_conformance"))
        .args(args)
        .env_remove("JWT_SECRET")
        .output()
        .await
        .expect("run the conformance binary");
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_binary_reports_failures_and_exits_by_result() {
    let good = start(Bug::None).await;
    let (code, out, _) = conformance_bin(&["--url", &good]).await;
    assert_eq!(code, 0, "{out}");
    let last = out.lines().last().unwrap_or("");
    assert!(last.starts_with("conformance: ") && last.ends_with(" passed, 0 failed"), "{out}");
    assert_eq!(out.lines().count(), 1, "only the summary when all pass: {out}");

    let buggy = start(Bug::ConstantRequestId).await;
    let (code, out, _) = conformance_bin(&["--url", &buggy]).await;
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("FAIL  every X-Request-Id is different"), "{out}");
    assert!(out.lines().last().unwrap_or("").ends_with(" passed, 1 failed"), "{out}");

    // The wrong secret: every authenticated check fails, nothing else does.
    let (code, out, _) = conformance_bin(&["--url", &good, "--secret", "not-the-secret"]).await;
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("FAIL  GET /api/deals with a valid token -> 200"), "{out}");
    assert!(!out.contains("FAIL  GET /json"), "{out}");

    // Usage and connection errors: exit 2, one line on stderr.
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        l.local_addr().expect("addr").port()
    };
    for args in [vec!["--url".to_string(), format!("http://127.0.0.1:{closed}")], vec!["--url".into(), "ftp://x:1".into()], vec![], vec!["--url".into(), format!("{good}/api")]] {
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        let (code, out, err) = conformance_bin(&a).await;
        assert_eq!(code, 2, "{args:?}: {out}{err}");
        assert!(out.is_empty(), "{args:?}: stdout {out}");
        if !args.is_empty() {
            assert_eq!(err.lines().count(), 1, "{args:?}: one error line: {err}");
            assert!(err.starts_with("conformance: error: "), "{err}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_server_costs_the_budget_not_two_hundred_timeouts() {
    let url = start(Bug::HangsOnDb).await;
    let options = conformance::Options { budget: std::time::Duration::from_secs(3), request_timeout: std::time::Duration::from_secs(1) };
    let t0 = std::time::Instant::now();
    let report = conformance::try_run_with(&url, DEFAULT_JWT_SECRET, options).await.expect("reachable");
    let took = t0.elapsed();
    assert!(took < std::time::Duration::from_secs(8), "took {took:?}");
    let db = report.checks.iter().find(|c| c.name.starts_with("GET /db -> 200")).expect("the /db check");
    assert!(!db.passed && db.detail.as_deref().unwrap_or("").contains("timed out"), "{db:?}");
    let last = report.checks.iter().rev().find(|c| c.name.starts_with("POST /json -> 405")).expect("a late check");
    assert!(!last.passed && last.detail.as_deref().unwrap_or("").contains("budget"), "{last:?}");
    // The report still lists every check, so counts stay comparable between runs.
    assert!(report.checks.len() >= 200, "{}", report.checks.len());
}
