//! Each of the eight costs proven from outside the app's code: the built binary runs
//! against PostgreSQL through a counting wire-protocol proxy (`common::pgproxy`), with
//! uprobes counted by `perf stat` on tokio's task-spawn path, on the app's named
//! `#[inline(never)]` cost functions, and the `getrandom` syscall tracepoint. Every test
//! compares `CRM_COSTS=all` with `all,-<switch>` over a known number of requests, after a
//! warm-up (so every statement is already prepared on the pool's one connection).
//!
//! The last test measures every endpoint with all costs on and off and checks the table of
//! per-request figures that target-app/README.md gives.

mod common;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;

use test_support::{skip_unless, Need};

use common::pgproxy::{Exchange, PgProxy, Stats};
use common::uprobes::{PerfStat, Uprobes};
use common::{spawn_binary, token, AppProcess, Db, OneConnection};

const SELECT_WORLD: &str = "SELECT id, randomnumber FROM world WHERE id = $1";
const SELECT_USER_NARROW: &str = "SELECT id, name, email FROM users WHERE id = $1";
const SELECT_USER_WIDE: &str =
    "SELECT id, email, name, password_hash, totp_secret, recovery_codes, created_at FROM users WHERE id = $1";
const SET_ACTOR: &str = "SELECT set_config('app.actor', $1, true)";

/// One kind of request of the SPEC's load tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Endpoint {
    Json,
    Db,
    Queries20,
    DealsList,
    DealsCreate,
}

impl Endpoint {

    fn label(self) -> &'static str {
        match self {
            Endpoint::Json => "GET /json",
            Endpoint::Db => "GET /db",
            Endpoint::Queries20 => "GET /queries?queries=20",
            Endpoint::DealsList => "GET /api/deals?page=P&per_page=20",
            Endpoint::DealsCreate => "POST /api/deals",
        }
    }

    async fn send(self, c: &mut OneConnection, i: usize) {
        let user = (i % 100) as i64 + 1;
        let auth = format!("Bearer {}", token(user));
        let (status, body) = match self {
            Endpoint::Json => c.request("GET", "/json", &[], None).await,
            Endpoint::Db => c.request("GET", "/db", &[], None).await,
            Endpoint::Queries20 => c.request("GET", "/queries?queries=20", &[], None).await,
            Endpoint::DealsList => {
                c.request("GET", &format!("/api/deals?page={}&per_page=20", i % 50 + 1), &[("Authorization", &auth)], None).await
            }
            Endpoint::DealsCreate => {
                let body = format!(
                    r#"{{"title":"deal {i}","amount_cents":{},"stage":"{}"}}"#,
                    i * 100,
                    ["lead", "qualified", "proposal", "negotiation", "won", "lost"][i % 6]
                );
                c.request("POST", "/api/deals", &[("Authorization", &auth), ("Content-Type", "application/json")], Some(&body)).await
            }
        };
        let want = if self == Endpoint::DealsCreate { 201 } else { 200 };
        assert_eq!(status, want, "{} #{i}: {body}", self.label());
    }
}

/// What one measured run saw, totals over `n` requests.
struct Measured {
    n: usize,
    wire: Stats,
    probes: BTreeMap<String, u64>,
}

impl Measured {
    /// Sum of the probe counts whose event name starts with `prefix`.
    fn probe(&self, prefix: &str) -> u64 {
        self.probes.iter().filter(|(k, _)| k.split(':').nth(1).unwrap_or(k).starts_with(prefix)).map(|(_, v)| v).sum()
    }
    fn per_request(&self, total: u64) -> f64 {
        total as f64 / self.n as f64
    }
    fn exchanges(&self, e: &Exchange) -> usize {
        self.wire.count(|x| x == e)
    }
}

fn upstream(url: &str) -> SocketAddr {
    let host = url.split('@').nth(1).unwrap().split('/').next().unwrap();
    host.parse().expect("127.0.0.1:PORT in the database URL")
}

const APP_PROBES: [(&str, &str); 10] = [
    ("spawn_request", "target_app::layers::unit_of_work::spawn_request"),
    ("lock_maintenance_mutex", "target_app::layers::maintenance::lock_maintenance_mutex"),
    ("read_maintenance_flag", "target_app::layers::maintenance::read_maintenance_flag"),
    ("lock_rate_table", "target_app::layers::rate_limit::lock_rate_table"),
    ("new_uuid_v4", "target_app::layers::request_context::new_uuid_v4"),
    ("request_labels", "target_app::layers::request_context::request_labels"),
    ("record_response_metrics", "target_app::layers::request_context::record_response_metrics"),
    ("scan_for_auth", "target_app::auth::Providers::scan_for_auth"),
    ("parse_json_value", "target_app::extract::json::parse_json_value"),
    ("serialize_change_row", "target_app::events::serialize_change_row"),
];

/// tokio's spawn path: every task spawned on the runtime is bound to its owned-task list once.
const TOKIO_PROBES: [(&str, &str); 1] = [("tokio_bind_task", "tokio::runtime::task::list::OwnedTasks<S>::bind_inner")];

fn probes() -> Uprobes {
    Uprobes::add(Path::new(common::binary()), "crm_costs", &APP_PROBES, &TOKIO_PROBES)
}

const GETRANDOM: &str = "syscalls:sys_enter_getrandom";

/// Starts the binary with `costs` (pool of one connection) behind a fresh proxy, warms up
/// with `warmup` requests, then counts `n` requests.
async fn measure(db: &Db, costs: &str, ep: Endpoint, warmup: usize, n: usize, uprobes: &Uprobes) -> Measured {
    let proxy = PgProxy::start(upstream(&db.url)).await;
    let url = proxy.url_for(&db.url);
    let costs_owned = costs.to_string();
    let app: AppProcess = tokio::task::spawn_blocking(move || {
        spawn_binary(&[("DATABASE_URL", &url), ("CRM_COSTS", &costs_owned), ("DB_POOL_SIZE", "1")])
    })
    .await
    .unwrap();
    let mut c = OneConnection::connect(&app.base).await;
    for i in 0..warmup {
        ep.send(&mut c, 1000 + i).await;
    }
    let mut events = uprobes.perf_events();
    events.push(GETRANDOM.to_string());
    let pid = app.pid();
    let mut perf = tokio::task::spawn_blocking(move || {
        let mut p = PerfStat::start(pid, &events);
        p.enable();
        p
    })
    .await
    .unwrap();
    proxy.take();
    for i in 0..n {
        ep.send(&mut c, i).await;
    }
    // sqlx returns a connection to the pool (with a ping) in a task it spawns when the
    // connection is dropped, which may finish after the response: wait until the wire has
    // been quiet for 200 ms.
    let wire = proxy.take_when_quiet(std::time::Duration::from_millis(200)).await;
    let probes = tokio::task::spawn_blocking(move || {
        perf.disable();
        perf.finish()
    })
    .await
    .unwrap();
    drop(app);
    Measured { n, wire, probes }
}

const N: usize = 20;

async fn both(db: &Db, cost: &str, ep: Endpoint) -> (Measured, Measured) {
    let p = probes();
    let on = measure(db, "all", ep, 5, N, &p).await;
    let off = measure(db, &format!("all,-{cost}"), ep, 5, N, &p).await;
    (on, off)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pool_ping_adds_one_sync_round_trip_per_checkout() {
    if skip_unless(&[Need::Root]) {
        return;
    }
    let db = Db::start();
    let (on, off) = both(&db, "pool-ping", Endpoint::Db).await;
    // sqlx's ping is a lone Sync answered by ReadyForQuery. sqlx 0.8 also pings every
    // connection it takes back into the pool (PoolConnection::return_to_pool), whatever
    // test_before_acquire says: so with the cost 2 pings per /db (before the SELECT and on
    // release), without it 1 (on release).
    assert_eq!(on.exchanges(&Exchange::Ping), 2 * N, "{:?}", on.wire.histogram());
    assert_eq!(on.exchanges(&Exchange::Execute(SELECT_WORLD.into())), N);
    assert_eq!(on.wire.exchanges.len(), 3 * N, "{:?}", on.wire.histogram());
    assert_eq!(on.wire.flushes, 3 * N as u64, "each exchange waits for its answer");
    assert_eq!(off.exchanges(&Exchange::Ping), N, "{:?}", off.wire.histogram());
    assert_eq!(off.exchanges(&Exchange::Execute(SELECT_WORLD.into())), N);
    assert_eq!(off.wire.exchanges.len(), 2 * N, "{:?}", off.wire.histogram());
    assert_eq!(off.wire.flushes, 2 * N as u64);
    // The ping the cost adds comes right before the SELECT (acquire), the other right after.
    let w = &on.wire.exchanges;
    for (i, e) in w.iter().enumerate() {
        if *e == Exchange::Execute(SELECT_WORLD.into()) {
            assert_eq!((&w[i - 1], &w[i + 1]), (&Exchange::Ping, &Exchange::Ping), "ping, SELECT, ping at {i}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn actor_set_config_adds_one_round_trip_per_transaction() {
    if skip_unless(&[Need::Root]) {
        return;
    }
    let db = Db::start();
    for ep in [Endpoint::DealsList, Endpoint::DealsCreate] {
        let (on, off) = both(&db, "actor-set-config", ep).await;
        for (m, want) in [(&on, N), (&off, 0)] {
            assert_eq!(m.exchanges(&Exchange::Simple("BEGIN".into())), N, "{ep:?}: {:?}", m.wire.histogram());
            assert_eq!(m.exchanges(&Exchange::Simple("COMMIT".into())), N, "{ep:?}");
            assert_eq!(m.exchanges(&Exchange::Execute(SET_ACTOR.into())), want, "{ep:?}: {:?}", m.wire.histogram());
        }
        assert_eq!(on.wire.exchanges.len() - off.wire.exchanges.len(), N, "{ep:?}: exactly one more round trip each");
        // Order inside a transaction: BEGIN, then set_config straight after it.
        let w = &on.wire.exchanges;
        let begins: Vec<usize> = w.iter().enumerate().filter(|(_, e)| **e == Exchange::Simple("BEGIN".into())).map(|(i, _)| i).collect();
        for b in begins {
            assert_eq!(w[b + 1], Exchange::Execute(SET_ACTOR.into()), "{ep:?}: set_config right after BEGIN");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn spawn_per_request_spawns_one_task_per_request_even_on_json() {
    if skip_unless(&[Need::Root]) {
        return;
    }
    let db = Db::start();
    let (on, off) = both(&db, "spawn-per-request", Endpoint::Json).await;
    assert_eq!(on.probe("tokio_bind_task"), N as u64, "tokio tasks bound during {N} /json: {:?}", on.probes);
    assert_eq!(on.probe("spawn_request"), N as u64);
    assert_eq!(off.probe("tokio_bind_task"), 0, "{:?}", off.probes);
    assert_eq!(off.probe("spawn_request"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn global_locks_take_three_process_wide_locks_per_request() {
    if skip_unless(&[Need::Root]) {
        return;
    }
    let db = Db::start();
    let (on, off) = both(&db, "global-locks", Endpoint::Json).await;
    for ev in ["lock_maintenance_mutex", "read_maintenance_flag", "lock_rate_table"] {
        assert_eq!(on.probe(ev), N as u64, "{ev}: {:?}", on.probes);
        assert_eq!(off.probe(ev), 0, "{ev}: {:?}", off.probes);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn metrics_labels_build_labels_and_a_uuid_per_request() {
    if skip_unless(&[Need::Root]) {
        return;
    }
    let db = Db::start();
    let (on, off) = both(&db, "metrics-labels", Endpoint::Json).await;
    for ev in ["request_labels", "record_response_metrics", "new_uuid_v4"] {
        assert_eq!(on.probe(ev), N as u64, "{ev}: {:?}", on.probes);
        assert_eq!(off.probe(ev), 0, "{ev}: {:?}", off.probes);
    }
    // uuid's v4 reads 16 bytes from the kernel: one getrandom(2) per request, counted by the
    // syscall tracepoint; the counter-based id makes none.
    assert_eq!(on.probes[GETRANDOM], N as u64, "{:?}", on.probes);
    assert_eq!(off.probes[GETRANDOM], 0, "{:?}", off.probes);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn wide_user_lookup_scans_providers_and_selects_every_column() {
    if skip_unless(&[Need::Root]) {
        return;
    }
    let db = Db::start();
    let (on, off) = both(&db, "wide-user-lookup", Endpoint::DealsList).await;
    assert_eq!(on.exchanges(&Exchange::Execute(SELECT_USER_WIDE.into())), N, "{:?}", on.wire.histogram());
    assert_eq!(on.exchanges(&Exchange::Execute(SELECT_USER_NARROW.into())), 0);
    assert_eq!(on.probe("scan_for_auth"), N as u64);
    assert_eq!(off.exchanges(&Exchange::Execute(SELECT_USER_WIDE.into())), 0, "{:?}", off.wire.histogram());
    assert_eq!(off.exchanges(&Exchange::Execute(SELECT_USER_NARROW.into())), N);
    assert_eq!(off.probe("scan_for_auth"), 0);
    assert_eq!(on.wire.exchanges.len(), off.wire.exchanges.len(), "same number of round trips, only wider");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn double_json_parse_builds_a_value_first() {
    if skip_unless(&[Need::Root]) {
        return;
    }
    let db = Db::start();
    let (on, off) = both(&db, "double-json-parse", Endpoint::DealsCreate).await;
    assert_eq!(on.probe("parse_json_value"), N as u64, "{:?}", on.probes);
    assert_eq!(off.probe("parse_json_value"), 0, "{:?}", off.probes);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn change_events_serialize_every_inserted_row() {
    if skip_unless(&[Need::Root]) {
        return;
    }
    let db = Db::start();
    let (on, off) = both(&db, "change-events", Endpoint::DealsCreate).await;
    assert_eq!(on.probe("serialize_change_row"), N as u64, "{:?}", on.probes);
    assert_eq!(off.probe("serialize_change_row"), 0, "{:?}", off.probes);
    // The insert itself is the same either way.
    let insert = |m: &Measured| m.wire.count(|e| matches!(e, Exchange::Execute(s) if s.starts_with("INSERT INTO deals")));
    assert_eq!(insert(&on), N);
    assert_eq!(insert(&off), N);
}

/// Per-request figures of one endpoint under one setting (the README table's row).
#[derive(Debug, Clone, PartialEq)]
struct Row {
    round_trips: f64,
    pings: f64,
    begin_commit: f64,
    set_config: f64,
    user_select: &'static str,
    statements: f64,
    tokio_tasks: f64,
    locks: f64,
    value_parses: f64,
    serializations: f64,
    uuid_getrandom: f64,
}

fn row(m: &Measured) -> Row {
    let per = |x: usize| x as f64 / m.n as f64;
    let w = &m.wire;
    let wide = w.count(|e| *e == Exchange::Execute(SELECT_USER_WIDE.into()));
    let narrow = w.count(|e| *e == Exchange::Execute(SELECT_USER_NARROW.into()));
    Row {
        round_trips: per(w.exchanges.len()),
        pings: per(w.count(|e| *e == Exchange::Ping)),
        begin_commit: per(w.count(|e| matches!(e, Exchange::Simple(s) if s == "BEGIN" || s == "COMMIT"))),
        set_config: per(w.count(|e| *e == Exchange::Execute(SET_ACTOR.into()))),
        user_select: if wide > 0 { "all 7 columns" } else if narrow > 0 { "id, name, email" } else { "-" },
        statements: per(w.count(|e| matches!(e, Exchange::Execute(s) if s != SET_ACTOR))),
        tokio_tasks: m.per_request(m.probe("tokio_bind_task")),
        locks: m.per_request(m.probe("lock_maintenance_mutex") + m.probe("read_maintenance_flag") + m.probe("lock_rate_table")),
        value_parses: m.per_request(m.probe("parse_json_value")),
        serializations: m.per_request(m.probe("serialize_change_row")),
        uuid_getrandom: m.per_request(m.probes[GETRANDOM]),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ground_truth_table_all_vs_none() {
    if skip_unless(&[Need::Root]) {
        return;
    }
    let db = Db::start();
    let p = probes();
    // (endpoint, all, none): the figures of target-app/README.md.
    #[rustfmt::skip]
    let expected: [(Endpoint, Row, Row); 5] = [
        (Endpoint::Json,
         Row { round_trips: 0.0, pings: 0.0, begin_commit: 0.0, set_config: 0.0, user_select: "-", statements: 0.0, tokio_tasks: 1.0, locks: 3.0, value_parses: 0.0, serializations: 0.0, uuid_getrandom: 1.0 },
         Row { round_trips: 0.0, pings: 0.0, begin_commit: 0.0, set_config: 0.0, user_select: "-", statements: 0.0, tokio_tasks: 0.0, locks: 0.0, value_parses: 0.0, serializations: 0.0, uuid_getrandom: 0.0 }),
        (Endpoint::Db,
         Row { round_trips: 3.0, pings: 2.0, begin_commit: 0.0, set_config: 0.0, user_select: "-", statements: 1.0, tokio_tasks: 2.0, locks: 3.0, value_parses: 0.0, serializations: 0.0, uuid_getrandom: 1.0 },
         Row { round_trips: 2.0, pings: 1.0, begin_commit: 0.0, set_config: 0.0, user_select: "-", statements: 1.0, tokio_tasks: 1.0, locks: 0.0, value_parses: 0.0, serializations: 0.0, uuid_getrandom: 0.0 }),
        (Endpoint::Queries20,
         Row { round_trips: 60.0, pings: 40.0, begin_commit: 0.0, set_config: 0.0, user_select: "-", statements: 20.0, tokio_tasks: 21.0, locks: 3.0, value_parses: 0.0, serializations: 0.0, uuid_getrandom: 1.0 },
         Row { round_trips: 40.0, pings: 20.0, begin_commit: 0.0, set_config: 0.0, user_select: "-", statements: 20.0, tokio_tasks: 20.0, locks: 0.0, value_parses: 0.0, serializations: 0.0, uuid_getrandom: 0.0 }),
        (Endpoint::DealsList,
         Row { round_trips: 9.0, pings: 2.0, begin_commit: 2.0, set_config: 1.0, user_select: "all 7 columns", statements: 4.0, tokio_tasks: 2.0, locks: 3.0, value_parses: 0.0, serializations: 0.0, uuid_getrandom: 1.0 },
         Row { round_trips: 7.0, pings: 1.0, begin_commit: 2.0, set_config: 0.0, user_select: "id, name, email", statements: 4.0, tokio_tasks: 1.0, locks: 0.0, value_parses: 0.0, serializations: 0.0, uuid_getrandom: 0.0 }),
        (Endpoint::DealsCreate,
         Row { round_trips: 7.0, pings: 2.0, begin_commit: 2.0, set_config: 1.0, user_select: "all 7 columns", statements: 2.0, tokio_tasks: 2.0, locks: 3.0, value_parses: 1.0, serializations: 1.0, uuid_getrandom: 1.0 },
         Row { round_trips: 5.0, pings: 1.0, begin_commit: 2.0, set_config: 0.0, user_select: "id, name, email", statements: 2.0, tokio_tasks: 1.0, locks: 0.0, value_parses: 0.0, serializations: 0.0, uuid_getrandom: 0.0 }),
    ];
    let mut table = String::from(
        "| endpoint | costs | round trips | pings | BEGIN+COMMIT | set_config | user SELECT | other statements | tokio tasks | global locks | Value parses | change-event serializations | getrandom |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    let mut mismatches = Vec::new();
    for (ep, want_all, want_none) in expected {
        for (costs, want) in [("all", want_all), ("none", want_none)] {
            let m = measure(&db, costs, ep, 5, N, &p).await;
            let got = row(&m);
            table.push_str(&format!(
                "| {} | {costs} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
                ep.label(), got.round_trips, got.pings, got.begin_commit, got.set_config, got.user_select,
                got.statements, got.tokio_tasks, got.locks, got.value_parses, got.serializations, got.uuid_getrandom
            ));
            if m.wire.flushes != m.wire.exchanges.len() as u64 {
                mismatches.push(format!("{} {costs}: {} client flushes for {} exchanges", ep.label(), m.wire.flushes, m.wire.exchanges.len()));
            }
            if got != want {
                mismatches.push(format!("{} {costs}: got {got:?}\n  want {want:?}\n  wire {:?}", ep.label(), m.wire.histogram()));
            }
        }
    }
    println!("{table}");
    assert!(mismatches.is_empty(), "{table}\n{}", mismatches.join("\n"));
}

/// The unit of work seen on the wire: `COMMIT` after a 201, `ROLLBACK` after a 400 (the
/// transaction was begun for the user lookup before the body was found invalid), no
/// transaction at all for `/db` and `/json`.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn unit_of_work_commits_below_400_and_rolls_back_above() {
    let db = Db::start();
    let proxy = PgProxy::start(upstream(&db.url)).await;
    let url = proxy.url_for(&db.url);
    let app = tokio::task::spawn_blocking(move || spawn_binary(&[("DATABASE_URL", &url), ("CRM_COSTS", "none"), ("DB_POOL_SIZE", "1")]))
        .await
        .unwrap();
    let mut c = OneConnection::connect(&app.base).await;
    let auth = format!("Bearer {}", token(7));
    let json = [("Authorization", auth.as_str()), ("Content-Type", "application/json")];
    // Warm up: prepare every statement once.
    c.request("POST", "/api/deals", &json, Some(r#"{"title":"w","amount_cents":1,"stage":"won"}"#)).await;
    c.request("GET", "/db", &[], None).await;
    proxy.take_when_quiet(std::time::Duration::from_millis(200)).await;

    let (status, body) = c.request("POST", "/api/deals", &json, Some(r#"{"title":"","amount_cents":-1,"stage":"won"}"#)).await;
    assert_eq!(status, 400, "{body}");
    let bad = proxy.take_when_quiet(std::time::Duration::from_millis(200)).await;
    assert_eq!(
        bad.exchanges,
        vec![
            Exchange::Simple("BEGIN".into()),
            Exchange::Execute(SELECT_USER_NARROW.into()),
            Exchange::Simple("ROLLBACK".into()),
            Exchange::Ping,
        ],
        "400: rolled back"
    );

    let (status, body) = c.request("POST", "/api/deals", &json, Some(r#"{"title":"ok","amount_cents":5,"stage":"lead"}"#)).await;
    assert_eq!(status, 201, "{body}");
    let good = proxy.take_when_quiet(std::time::Duration::from_millis(200)).await;
    assert_eq!(good.exchanges.len(), 5, "{:?}", good.exchanges);
    assert_eq!(good.exchanges[0], Exchange::Simple("BEGIN".into()));
    assert!(matches!(&good.exchanges[2], Exchange::Execute(s) if s.starts_with("INSERT INTO deals")));
    assert_eq!(good.exchanges[3], Exchange::Simple("COMMIT".into()), "201: committed");

    let (status, _) = c.request("GET", "/json", &[], None).await;
    assert_eq!(status, 200);
    let (status, _) = c.request("GET", "/db", &[], None).await;
    assert_eq!(status, 200);
    let plain = proxy.take_when_quiet(std::time::Duration::from_millis(200)).await;
    assert_eq!(plain.exchanges, vec![Exchange::Execute(SELECT_WORLD.into()), Exchange::Ping], "/db: no transaction");
    // The committed deal is there, the refused one is not (read with psql, outside the app).
    let db_name = db.url.rsplit('/').next().unwrap();
    let titles = db.pg.psql(db_name, "SELECT count(*) FROM deals WHERE title IN ('ok', '')").unwrap();
    assert_eq!(titles.trim(), "1");
}
