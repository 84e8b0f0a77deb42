//! The profiler's named costs on the field-cases routes, against `expected.toml`: each case's
//! finding fires on its route with its per-request figures within 25% of the instrument
//! outside the profiler (a share of samples also within 3 of its standard errors) (`[[case.compare]]`: perf, perf stat tracepoints, strace), and stays
//! silent on its control; the `silent` ids fire on neither. Syscall counts are taken with
//! `--syscalls-duty 100` (every call counted, as perf stat counts them).

mod common;

use common::{profile, profile_routes, skip_unless_root, App};
use serde::Deserialize;

#[derive(Debug, Deserialize)]
struct Expected {
    case: Vec<Case>,
}

#[derive(Debug, Deserialize)]
struct Case {
    route: String,
    control: String,
    finding: String,
    #[serde(default = "yes")]
    reproduced: bool,
    #[serde(default)]
    silent: Vec<String>,
    truth: Vec<Truth>,
    #[serde(default)]
    compare: Vec<Compare>,
}

fn yes() -> bool {
    true
}

#[derive(Debug, Deserialize)]
struct Truth {
    route: String,
    figure: String,
    value: f64,
}

/// A figure of the finding (`cpu_share`, `counts.NAME` or `counts.A / counts.B`) and the truth
/// figure it is checked against, on the case's route.
#[derive(Debug, Deserialize)]
struct Compare {
    truth: String,
    ranking: String,
}

/// The tolerance of every comparison: 25% of the instrument's figure.
const TOLERANCE: f64 = 0.25;

fn expected() -> Expected {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("expected.toml");
    toml::from_str(&std::fs::read_to_string(&path).expect("expected.toml")).expect("expected.toml parses")
}

fn ids(ranking: &serde_json::Value) -> Vec<String> {
    ranking["costs"].as_array().map(|a| a.iter().filter_map(|c| c["id"].as_str().map(str::to_string)).collect()).unwrap_or_default()
}

/// Reads `cpu_share`, `counts.NAME` or `counts.A / counts.B` of a finding.
fn figure(finding: &serde_json::Value, expr: &str) -> Option<f64> {
    let one = |e: &str| -> Option<f64> {
        let e = e.trim();
        match e.strip_prefix("counts.") {
            Some(name) => finding["counts_per_request"][name].as_f64(),
            None => finding[e].as_f64(),
        }
    };
    match expr.split_once('/') {
        Some((a, b)) => Some(one(a)? / one(b)?),
        None => one(expr),
    }
}

const PROFILE_SECS: u64 = 6;

fn check(route: &str) {
    if skip_unless_root() {
        return;
    }
    let exp = expected();
    let case = exp.case.iter().find(|c| c.route == route).unwrap_or_else(|| panic!("{route} not in expected.toml"));
    let app = App::start();
    let extra = ["--syscalls-duty", "100"];
    // A warm-up request each: lazily built state (the static regex, the logger thread).
    assert_eq!(app.get(&case.route).0, 200);
    assert_eq!(app.get(&case.control).0, 200);
    let on = profile(&app, &case.route, PROFILE_SECS, &extra);
    let off = profile(&app, &case.control, PROFILE_SECS, &extra);
    let (on_ids, off_ids) = (ids(&on.ranking), ids(&off.ranking));
    println!("{}: {on_ids:?} ({:.0} req/s); {}: {off_ids:?} ({:.0} req/s)", case.route, on.wrk.req_per_s, case.control, off.wrk.req_per_s);
    if case.reproduced {
        assert!(on_ids.contains(&case.finding), "{} did not fire on {}: {on_ids:?}\n{}", case.finding, case.route, on.ranking["generic"]);
    }
    assert!(!off_ids.contains(&case.finding), "{} fired on the control {}: {off_ids:?}", case.finding, case.control);
    for s in &case.silent {
        assert!(!on_ids.contains(s), "{s} fired on {}: {on_ids:?}", case.route);
        assert!(!off_ids.contains(s), "{s} fired on {}: {off_ids:?}", case.control);
    }
    if !case.reproduced {
        // The instruments saw no such cost on a quiet machine; whether it appears depends on
        // the machine's load (a lock holder preempted under parallel tests does make the other
        // worker wait), so only the control and the silent ids are checked.
        return;
    }
    let finding = on.ranking["costs"].as_array().unwrap().iter().find(|c| c["id"] == case.finding.as_str()).unwrap();
    println!("  {}", finding["title"]);
    for c in &case.compare {
        let truth = case.truth.iter().find(|t| t.figure == c.truth && t.route == case.route).unwrap_or_else(|| panic!("no truth {} on {}", c.truth, case.route));
        let got = figure(finding, &c.ranking).unwrap_or_else(|| panic!("{}: no {} in {finding}", case.finding, c.ranking));
        // A share carries the profile's own sampling error: 25% of a 10% share is about 2
        // standard errors of 600 samples, so a share may also be off by 3 of them.
        let sampling = if c.ranking == "cpu_share" { 3.0 * finding["cpu_share_se"].as_f64().unwrap_or(0.0) } else { 0.0 };
        let allowed = (TOLERANCE * truth.value.abs()).max(sampling);
        println!("  {} = {got:.4} against {} = {} ({:+.1}%, allowed ±{allowed:.4})", c.ranking, c.truth, truth.value, 100.0 * (got - truth.value) / truth.value);
        assert!((got - truth.value).abs() <= allowed, "{}: {} = {got:.4}, the instrument's {} = {} (off by more than {allowed:.4}: 25% of it, or 3 standard errors of the share)", case.route, c.ranking, c.truth, truth.value);
    }
}

#[test]
fn regex_compiled_per_request() {
    check("/case/regex-per-request");
}

#[test]
fn blocking_sleep_on_a_worker() {
    check("/case/blocking-sleep");
}

#[test]
fn uncontended_global_mutex() {
    check("/case/global-mutex");
}

#[test]
fn lock_held_across_a_blocking_call() {
    check("/case/lock-across-sleep");
}

#[test]
fn password_hash_on_a_worker() {
    check("/case/hash-on-worker");
}

#[test]
fn stdout_logging_per_request() {
    check("/case/log-stdout");
}

#[test]
fn brotli_at_quality_11() {
    check("/case/brotli-11");
}

#[test]
fn json_from_an_unbuffered_reader() {
    check("/case/json-from-reader");
}

/// The worked example of docs/rules.md: a user's own `[[cost]]` in a `--rules` file
/// (`rules/password-hashing.toml`) fires on the route that hashes in `spawn_blocking`, where no
/// built-in cost does, with its share within 25% of perf's and its samples on the blocking pool.
#[test]
fn a_users_fingerprint_from_a_rules_file() {
    if skip_unless_root() {
        return;
    }
    let exp = expected();
    let route = "/control/hash-blocking";
    let truth = exp.case.iter().flat_map(|c| &c.truth).find(|t| t.route == route && t.figure == "cpu_share.sha2_pbkdf2").expect("truth").value;
    let rules = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("rules/password-hashing.toml");
    let app = App::start();
    assert_eq!(app.get(route).0, 200);
    let p = profile(&app, route, PROFILE_SECS, &["--rules", rules.to_str().unwrap()]);
    let got = ids(&p.ranking);
    assert!(got.contains(&"password-hashing".to_string()), "{got:?}");
    assert!(!got.contains(&"long-cpu-on-worker".to_string()), "the hash runs on the blocking pool: {got:?}");
    let f = p.ranking["costs"].as_array().unwrap().iter().find(|c| c["id"] == "password-hashing").unwrap();
    let share = f["cpu_share"].as_f64().unwrap();
    println!("{}: share {share:.4} against perf's {truth}", f["title"]);
    assert!((share - truth).abs() / truth <= TOLERANCE, "share {share} against perf's {truth}");
    assert!(f["title"].as_str().unwrap().contains("µs of CPU per request"), "{}", f["title"]);
    let on_pool = f["samples_by_role"]["blocking pool"].as_u64().unwrap_or(0);
    assert!(on_pool * 10 >= f["samples"].as_u64().unwrap() * 9, "{}", f["samples_by_role"]);
}

#[test]
fn file_read_on_a_worker() {
    check("/case/file-read-per-request");
}

#[test]
fn dns_lookup_on_a_worker() {
    check("/case/dns-per-request");
}

/// Executions of one statement per request by PostgreSQL's own count (`pg_stat_statements`,
/// reset just before the attach) over the requests the app served meanwhile (its `/stats`).
fn statement_calls(pg: &bench::pg::TempPostgres, db: &str, like: &str) -> u64 {
    let out = pg
        .psql(db, &format!("SELECT coalesce(sum(calls), 0) FROM pg_stat_statements WHERE query LIKE '{like}'"))
        .expect("pg_stat_statements");
    out.trim().parse().unwrap_or_else(|_| panic!("pg_stat_statements answered {out:?}"))
}

/// N+1 queries, attached to an app that has run for a while (every statement was prepared on
/// every pooled connection before the attach; `--db-url` gives them back their text): the
/// finding names the per-item statement with its text and N within 10% of
/// `pg_stat_statements`; silent on the JOIN that fetches the same rows in one statement.
#[test]
fn n_plus_one_queries_after_warm_up() {
    if skip_unless_root() {
        return;
    }
    let pg = bench::pg::TempPostgres::start_with(&[("shared_preload_libraries", "pg_stat_statements")]).expect("postgres");
    let url = pg.create_seeded_db("fc").expect("database");
    pg.psql("fc", "CREATE EXTENSION pg_stat_statements").expect("extension");
    let app = App::start_with_db(&url);
    const ITEM: &str = "SELECT name, price_cents FROM fc_items WHERE id = %";
    for (route, fires) in [("/case/n-plus-one", true), ("/control/join", false)] {
        // Warm-up: the pool opens its connections and each prepares the route's statements.
        common::wrk(&app.url(route), 2, 8);
        pg.psql("fc", "SELECT pg_stat_statements_reset()").expect("reset");
        let before = app.served(route);
        let p = profile(&app, route, PROFILE_SECS, &["--db-url", &url]);
        let served = app.served(route) - before;
        let calls = statement_calls(&pg, "fc", ITEM);
        let truth = calls as f64 / served as f64;
        let got = ids(&p.ranking);
        println!("{route}: {got:?}; pg_stat_statements: {calls} calls of the item query / {served} requests = {truth:.3}");
        // The endpoint's round trips (counted for the request holding each connection): each
        // statement is a checkout of its own, and a checkout costs sqlx's ping before it and
        // its ping on release (target-app's /db ground truth, by a wire proxy: a query and two
        // pings), so 3 per statement that pg_stat_statements counted for the route.
        let statements = statement_calls(&pg, "fc", "%FROM fc%") as f64 / served as f64;
        let endpoint = format!("GET {route}");
        let row = p.ranking["endpoints"].as_array().and_then(|a| a.iter().find(|e| e["endpoint"] == endpoint.as_str())).unwrap_or_else(|| panic!("{endpoint} not in the endpoint breakdown: {}", p.ranking["endpoints"]));
        let rts = row["db_round_trips_per_request"].as_f64().unwrap();
        println!("  endpoint breakdown: {row}; pg_stat_statements: {statements:.3} statements per request");
        assert!((rts - 3.0 * statements).abs() <= 0.02 * 3.0 * statements, "{endpoint}: {rts} round trips per request, against 3 x {statements} statements");
        if !fires {
            assert!(!got.contains(&"n-plus-one-queries".to_string()), "fired on the control {route}: {got:?}");
            continue;
        }
        assert!(got.contains(&"n-plus-one-queries".to_string()), "{route}: {got:?}");
        let f = p.ranking["costs"].as_array().unwrap().iter().find(|c| c["id"] == "n-plus-one-queries").unwrap();
        let n = f["counts_per_request"]["statement_executions"].as_f64().unwrap();
        let title = f["title"].as_str().unwrap();
        println!("  {title}\n  N = {n:.3} against pg_stat_statements' {truth:.3}");
        assert!((n - truth).abs() <= 0.10 * truth, "N = {n} against pg_stat_statements' {truth}");
        assert!(title.contains("FROM fc_items WHERE id = ?"), "the statement's text: {title}");
        assert_eq!(truth.round() as usize, field_cases::N_PLUS_ONE_ITEMS, "the app runs one query per item");
    }
    drop(app);
    pg.stop().expect("stop postgres");
}

/// Two routes under load at once, each with its own cost: every finding names the endpoint
/// that pays it. By the app's code, `hash_password` runs only in `/case/hash-on-worker`'s
/// handler and `Regex::new` per request only in `/case/regex-per-request`'s, so each finding's
/// samples must be (nearly) all on its route although both routes share the two workers.
/// The wire's request counts per endpoint are checked against the app's own counters.
#[test]
fn each_finding_names_the_endpoint_that_pays_it() {
    if skip_unless_root() {
        return;
    }
    let app = App::start();
    let (hash, regex) = ("/case/hash-on-worker", "/case/regex-per-request");
    assert_eq!(app.get(hash).0, 200);
    assert_eq!(app.get(regex).0, 200);
    let (hash_before, regex_before) = (app.served(hash), app.served(regex));
    let (p, _) = profile_routes(&app, &[hash, regex], PROFILE_SECS, &[]);
    let served = [(hash, app.served(hash) - hash_before), (regex, app.served(regex) - regex_before)];
    let profile: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(p.out.path().join("out/profile.json")).expect("profile.json")).expect("JSON");
    let joined = &profile["endpoints"];
    println!("join: {joined}");
    let attributed = joined["attributed"].as_u64().expect("attributed");
    let unattributed = joined["unattributed"].as_u64().expect("unattributed");
    assert!(attributed > 100, "too few samples joined to endpoints: {joined}");
    assert!(unattributed * 20 <= attributed + unattributed, "more than 5% of the samples on no request: {joined}");
    // The wire saw each route's requests (the app counts the ones it served; the load ends
    // inside the profile, requests in flight at the edges aside).
    for (route, n) in served {
        let endpoint = format!("GET {route}");
        let wire = profile["wire"]["http"]["endpoints"].as_array().expect("wire endpoints").iter().find(|e| e["endpoint"] == endpoint.as_str()).unwrap_or_else(|| panic!("{endpoint} not in the wire summary"))["requests"].as_u64().unwrap();
        println!("{endpoint}: {wire} requests on the wire, {n} served by the app's count");
        assert!(wire.abs_diff(n) <= 8 + n / 100, "{endpoint}: the wire saw {wire} requests, the app served {n}");
    }
    for (id, route) in [("long-cpu-on-worker", hash), ("construction-per-request", regex)] {
        let f = p.ranking["costs"].as_array().unwrap().iter().find(|c| c["id"] == id).unwrap_or_else(|| panic!("{id} did not fire: {}", p.ranking["costs"]));
        let endpoints = f["endpoints"].as_array().unwrap_or_else(|| panic!("{id} names no endpoint: {f}"));
        println!("{id}: {endpoints:?}, serving no request {}", f["endpoints_unattributed"]);
        let first = &endpoints[0];
        assert_eq!(first["endpoint"], format!("GET {route}"), "{id}: {endpoints:?}");
        assert!(first["share"].as_f64().unwrap() >= 0.95, "{id}: only {} of its samples on {route}: {endpoints:?}", first["share"]);
    }
}
