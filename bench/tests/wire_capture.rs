//! Wire capture end to end, for real (root): a throwaway PostgreSQL, target-app as a process,
//! the agent attached by pid with `collect::Options::wire`, a known number of requests from a
//! tiny keep-alive client, and the decoded summary checked against target-app/README.md's
//! measured ground truth (PostgreSQL round trips and pings per request, HTTP requests per
//! endpoint). Also checks that no `Authorization` value and no request-body byte reaches the
//! serialized profile.
//!
//! Needs `target/release/target-app` beside the test's `profiler` binary
//! (`cargo build --release --workspace --bin target-app`).

use test_support::{skip_unless, Need};

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

mod app_support;
use app_support::App;

use profiler::collect::{Collector, Options, Unwind};
use profiler::profile::{json, Profile};
use profiler::target::Target;
use profiler::wire::pg::StatementShape;

/// A token-looking marker sent in every `Authorization` header: must never reach a profile.
const SECRET_TOKEN_MARK: &str = "wIrEsEcReTtOkEn";
/// A marker in every request body: must never reach a profile.
const SECRET_BODY_MARK: &str = "wIrEbOdYsEcReT";

fn start_app(db_url: &str, costs: &str) -> App {
    // target/<profile>/deps/<this test> -> target/<profile>/target-app
    let exe = std::env::current_exe().expect("current_exe");
    let app = exe.parent().and_then(Path::parent).expect("target/<profile>/deps/<test>").join("target-app");
    assert!(app.is_file(), "{} missing: cargo build --release --workspace --bin target-app", app.display());
    let mut cmd = Command::new(&app);
    cmd.env("DATABASE_URL", db_url).env("CRM_COSTS", costs);
    App::start(cmd)
}

/// One request on a keep-alive connection; returns the status. Reads the whole response
/// (Content-Length framing, which target-app uses for every response).
fn request(conn: &mut BufReader<TcpStream>, method: &str, path: &str, token: &str, body: Option<&str>) -> u16 {
    let mut req = format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n");
    if let Some(b) = body {
        req.push_str(&format!("Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{b}", b.len()));
    } else {
        req.push_str("\r\n");
    }
    conn.get_mut().write_all(req.as_bytes()).unwrap();
    let mut status_line = String::new();
    conn.read_line(&mut status_line).unwrap();
    let status: u16 = status_line.split_whitespace().nth(1).unwrap().parse().unwrap();
    let mut len = None;
    loop {
        let mut h = String::new();
        conn.read_line(&mut h).unwrap();
        if h == "\r\n" || h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            if k.eq_ignore_ascii_case("content-length") {
                len = Some(v.trim().parse::<usize>().unwrap());
            }
        }
    }
    let mut body = vec![0; len.expect("Content-Length")];
    conn.read_exact(&mut body).unwrap();
    status
}

fn connect(port: u16) -> BufReader<TcpStream> {
    let s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_nodelay(true).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    BufReader::new(s)
}

/// Attaches to `app` with the wire capture on, runs `work`, waits for the pings sqlx sends
/// after the last response (on release), and returns the symbolized profile and the text of
/// every file `render::write_all` writes for it (profile.json, wire.json, ...).
fn capture(app: &App, db_port: u16, work: impl FnOnce()) -> (Profile, String) {
    capture_with(app, db_port, None, work)
}

/// [`capture`] with a `--db-url` for the `pg_stat_activity` poller.
fn capture_with(app: &App, db_port: u16, db_url: Option<&str>, work: impl FnOnce()) -> (Profile, String) {
    let target = Target::Pid(app.child.id()).resolve().expect("resolve");
    let options = Options {
        frequency_hz: 49,
        offcpu: false,
        syscalls: true,
        unwind: Unwind::Fp,
        wire: true,
        db_port,
        db_url: db_url.map(str::to_owned),
        ..Default::default()
    };
    // BPF run statistics, printed for agent-ebpf/README.md (two clock reads per run).
    let stats_fd = profiler::collect::enable_run_stats().expect("bpf stats");
    let collector = Collector::start(&target, &options).expect("attach");
    let t0 = Instant::now();
    work();
    std::thread::sleep(Duration::from_millis(700));
    let secs = t0.elapsed().as_secs_f64();
    for s in collector.program_stats() {
        if s.runs > 0 && (s.program.starts_with("on_sock") || s.program.starts_with("on_sys")) {
            eprintln!(
                "bpf stats: {:<18} {:>9} runs ({:>8.0}/s) {:>6} ns/run",
                s.program,
                s.runs,
                s.runs as f64 / secs,
                s.run_time_ns / s.runs
            );
        }
    }
    drop(stats_fd);
    let raw = collector.finish(&target, None).expect("finish");
    let profile = profiler::symbolize::symbolize(raw);
    let mut text = String::from_utf8(json::to_vec(&profile)).unwrap();
    // Every file the agent writes (wire.json included) goes into the privacy check too.
    let dir = tempfile::tempdir().unwrap();
    let written = profiler::render::write_all(&profile, dir.path()).expect("render");
    assert!(written.iter().any(|p| p.ends_with("wire.json")), "wire.json not written");
    let wire_json: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.path().join("wire.json")).unwrap()).unwrap();
    assert_eq!(wire_json["summary"]["http"]["requests"], profile.wire.as_ref().unwrap().http.requests);
    for path in written {
        text.push_str(&String::from_utf8_lossy(&std::fs::read(path).unwrap()));
    }
    (profile, text)
}

fn report(label: &str, p: &Profile) {
    let w = p.wire.as_ref().unwrap();
    eprintln!(
        "{label}: http requests {} responses {} endpoints {:?}; pg connections opened {} round trips {} (answered {}) pings {} by kind {:?}, statements {:?}",
        w.http.requests,
        w.http.responses,
        w.http.endpoints.iter().map(|e| (&e.endpoint, e.requests)).collect::<Vec<_>>(),
        w.pg.connections,
        w.pg.round_trips,
        w.pg.round_trips_answered,
        w.pg.pings,
        w.pg.by_kind,
        w.pg.statements.iter().map(|s| (s.shape.to_string(), s.executions)).collect::<Vec<_>>()
    );
    eprintln!("{label}: capture {:?}", p.meta.wire);
    let syscalls: Vec<_> = p.syscalls.iter().take(12).map(|s| (&s.name, s.count, s.eagain)).collect();
    eprintln!("{label}: syscalls (name, count, eagain) {syscalls:?}");
}

fn assert_private(label: &str, text: &str) {
    assert!(!text.contains(SECRET_TOKEN_MARK), "{label}: an Authorization value reached the profile");
    assert!(!text.contains(SECRET_BODY_MARK), "{label}: a request-body byte reached the profile");
}

/// `n` requests `GET /db` on 4 keep-alive connections, one at a time, each with a token that
/// must not reach the profile.
fn db_requests(app: &App, n: u64) {
    let token = format!("{SECRET_TOKEN_MARK}.x.y");
    let mut conns: Vec<_> = (0..4).map(|_| connect(app.port)).collect();
    for i in 0..n {
        let c = &mut conns[(i % 4) as usize];
        assert_eq!(request(c, "GET", "/db", &token, None), 200);
    }
}

/// `GET /db`: N requests on 4 keep-alive connections, one at a time.
fn db_run(pg: &bench::pg::TempPostgres, db_url: &str, costs: &str) -> (Profile, String, u64) {
    const N: u64 = 200;
    let app = start_app(db_url, costs);
    let work = |n: u64| db_requests(&app, n);
    // Warm-up the profile does not see, with the same pattern: the pool opens the
    // connections this pattern needs and prepares the statement on each (a request served
    // by a fresh connection has a prepare round trip instead of the ping before checkout).
    work(N);
    std::thread::sleep(Duration::from_millis(300));
    let (p, text) = capture(&app, pg.port(), || work(N));
    (p, text, N)
}

#[test]
fn db_requests_round_trips_and_pings_match_the_ground_truth() {
    if skip_unless(&[Need::Root]) {
        return;
    }
    let started = Instant::now();
    let pg = bench::pg::TempPostgres::start().expect("postgres");
    let url = pg.create_seeded_db("crm").expect("seed");

    // CRM_COSTS=all: 3 round trips per /db request, 2 of them pings (README table).
    let (p, text, n) = db_run(&pg, &url, "all");
    report("GET /db all", &p);
    assert_private("GET /db all", &text);
    let w = p.wire.as_ref().expect("wire summary");
    let cap = p.meta.wire.as_ref().expect("wire report");
    assert_eq!(cap.ringbuf_dropped, 0);
    assert_eq!(w.http.requests, n, "HTTP requests seen");
    assert_eq!(w.requests_of("GET /db"), n);
    assert_eq!(w.http.responses, n);
    assert_steady_counts("all", w, n, 3, 2, true);
    assert_eq!(w.pg.round_trips_answered, w.pg.round_trips);
    if w.pg.connections == 0 {
        let per = w.per_request(w.http.requests).unwrap();
        assert_eq!((per.round_trips, per.pings), (3.0, 2.0));
    }
    assert_eq!(w.pg.statement_executions, n);

    // all,-pool-ping: 2 round trips per request, 1 ping (the release ping).
    let (p, text, n) = db_run(&pg, &url, "all,-pool-ping");
    report("GET /db all,-pool-ping", &p);
    assert_private("GET /db all,-pool-ping", &text);
    let w = p.wire.as_ref().expect("wire summary");
    assert_eq!(w.http.requests, n);
    assert_eq!(w.requests_of("GET /db"), n);
    assert_steady_counts("all,-pool-ping", w, n, 2, 1, false);
    assert_eq!(w.pg.statement_executions, n);
    eprintln!("db test took {:?}", started.elapsed());
    pg.stop().unwrap();
}

/// PostgreSQL on a port the agent was not told (the throwaway server's free port, not 5432):
/// recognised by its bytes. A cold capture sees each connection's start-up and the `Parse`
/// of the statement (its text from the wire); after a warm-up, a second capture with
/// `--db-url` sees only `Bind`s of names prepared before it, and `pg_stat_activity` gives
/// them back the same text: one shape, N executions, none left without text.
#[test]
fn postgres_on_any_port_and_statements_prepared_before_attach() {
    if skip_unless(&[Need::Root]) {
        return;
    }
    const N: u64 = 200;
    let pg = bench::pg::TempPostgres::start().expect("postgres");
    assert_ne!(pg.port(), 5432, "the test needs PostgreSQL on a port the agent is not told");
    let url = pg.create_seeded_db("crm").expect("seed");
    let app = start_app(&url, "all");
    let work = |n: u64| db_requests(&app, n);
    let (cold, _) = capture(&app, 5432, || work(20));
    report("cold, default --db-port", &cold);
    let w = cold.wire.as_ref().unwrap();
    let cap = cold.meta.wire.as_ref().unwrap();
    assert!(w.pg.connections >= 1, "start-ups seen on port {}", pg.port());
    assert!(cap.pg_recognised >= w.pg.connections, "recognised {} < connections {}", cap.pg_recognised, w.pg.connections);
    assert_eq!(w.pg.statement_executions, 20);
    let cold_shapes: Vec<_> = w.pg.statements.iter().map(|s| s.shape.clone()).collect();
    assert_eq!(cold_shapes.len(), 1, "one statement behind GET /db: {cold_shapes:?}");
    assert!(matches!(&cold_shapes[0], StatementShape::Sql { truncated: false, .. }), "{cold_shapes:?}");

    work(N);
    std::thread::sleep(Duration::from_millis(300));
    let (warm, text) = capture_with(&app, 5432, Some(&url), || work(N));
    report("warm, --db-url", &warm);
    assert_private("warm, --db-url", &text);
    let w = warm.wire.as_ref().unwrap();
    let cap = warm.meta.wire.as_ref().unwrap();
    let st = cap.statement_texts.as_ref().expect("statement text report");
    eprintln!("statement texts: {st:?}");
    // The pool may open a connection during the run (its start-up and Parse are then seen):
    // the others were recognised mid-stream, from their first Bind.
    assert!(cap.pg_recognised > w.pg.connections, "connections seen mid-stream: {cap:?}");
    assert!(st.polls > 10, "polls {}", st.polls);
    assert_eq!(w.pg.statement_executions, N);
    assert_eq!(w.pg.prepared_before_attach_executions, 0, "every execution got its text: {st:?}");
    assert!(st.names_recovered >= 1 && st.executions_recovered >= N / 2, "{st:?}");
    let shapes: Vec<_> = w.pg.statements.iter().map(|s| (s.shape.clone(), s.executions)).collect();
    assert_eq!(shapes, vec![(cold_shapes[0].clone(), N)], "the text the cold capture read from the Parse");
    // README table: a query and two pings per /db (a connection the pool opens during the
    // run has a prepare instead of its first ping).
    assert_steady_counts("warm, --db-url", w, N, 3, 2, true);
    drop(app);
    pg.stop().unwrap();
}

/// `POST /api/deals` on a fresh app: a first capture of a few cold requests (every statement
/// is prepared inside it, so the shapes are seen as SQL), then a warm-up the profile does not
/// see, then a second capture of N requests in the steady state (the counts).
fn deals_run(pg: &bench::pg::TempPostgres, db_url: &str, costs: &str) -> (Profile, Profile, u64) {
    const N: u64 = 100;
    let app = start_app(db_url, costs);
    let token = bench::token::mint_valid(bench::DEFAULT_JWT_SECRET, 1);
    let work = |n: u64| {
        let mut conns: Vec<_> = (0..2).map(|_| connect(app.port)).collect();
        for i in 0..n {
            let body = format!(r#"{{"title":"{SECRET_BODY_MARK} {i}","amount_cents":{},"stage":"lead"}}"#, 1000 + i);
            let c = &mut conns[(i % 2) as usize];
            assert_eq!(request(c, "POST", "/api/deals", &token, Some(&body)), 201);
        }
    };
    let (cold, cold_text) = capture(&app, pg.port(), || work(4));
    assert_private(&format!("POST /api/deals {costs} cold"), &cold_text);
    assert!(!cold_text.contains(&token), "{costs}: the bearer token reached the profile");
    work(N);
    std::thread::sleep(Duration::from_millis(300));
    let (p, text) = capture(&app, pg.port(), || work(N));
    assert_private(&format!("POST /api/deals {costs}"), &text);
    assert!(!text.contains(&token), "{costs}: the bearer token reached the profile");
    (cold, p, N)
}

/// Round trips and pings of `n` requests against the README's `round_trips` and `pings` per
/// request. Exact when the pool opened no PostgreSQL connection during the capture. When it
/// did (sqlx replaces connections now and then), each new connection adds one start-up and
/// one prepare-only round trip per statement (its first use), which the ground truth (steady
/// state) does not count, and with `pool-ping` on its first checkout has no ping (sqlx tests
/// only idle connections): those are allowed for, and no more.
fn assert_steady_counts(label: &str, w: &profiler::wire::WireSummary, n: u64, round_trips: u64, pings: u64, pool_ping: bool) {
    let fresh = w.pg.connections;
    if fresh == 0 {
        assert_eq!(w.pg.round_trips, round_trips * n, "{label}: round trips");
        assert_eq!(w.pg.pings, pings * n, "{label}: pings");
        return;
    }
    let skipped_pings = if pool_ping { fresh } else { 0 };
    assert_eq!(w.pg.round_trips - w.pg.by_kind.prepare, round_trips * n - skipped_pings, "{label}: round trips ({fresh} new connections)");
    assert!(w.pg.pings <= pings * n && w.pg.pings >= pings * n - skipped_pings, "{label}: pings {} ({fresh} new connections)", w.pg.pings);
}

fn has_set_config(p: &Profile) -> bool {
    p.wire.as_ref().unwrap().pg.statements.iter().any(|s| matches!(&s.shape, StatementShape::Sql { text, .. } if text.contains("set_config")))
}

#[test]
fn deal_inserts_round_trips_and_set_config_match_the_ground_truth() {
    if skip_unless(&[Need::Root]) {
        return;
    }
    let pg = bench::pg::TempPostgres::start().expect("postgres");
    let url = pg.create_seeded_db("crm").expect("seed");

    // all: 7 round trips per insert, 2 pings, one committed transaction, set_config shape.
    let (cold, p, n) = deals_run(&pg, &url, "all");
    report("POST /api/deals all (cold)", &cold);
    report("POST /api/deals all", &p);
    assert!(has_set_config(&cold), "set_config shape missing with actor-set-config on");
    let w = p.wire.as_ref().unwrap();
    assert_eq!(w.requests_of("POST /api/deals"), n);
    assert_steady_counts("all", w, n, 7, 2, true);
    assert_eq!(w.pg.transactions.ended, n);
    assert_eq!(w.pg.transactions.committed, n);

    // none: 5 round trips, 1 ping, no set_config.
    let (cold, p, n) = deals_run(&pg, &url, "none");
    report("POST /api/deals none (cold)", &cold);
    report("POST /api/deals none", &p);
    assert!(!has_set_config(&cold), "set_config shape present with actor-set-config off");
    assert!(cold.wire.as_ref().unwrap().pg.statements.iter().any(|s| s.shape.to_string().starts_with("INSERT INTO deals")), "INSERT shape missing");
    let w = p.wire.as_ref().unwrap();
    assert_eq!(w.requests_of("POST /api/deals"), n);
    assert_steady_counts("none", w, n, 5, 1, false);
    assert_eq!(w.pg.transactions.committed, n);
    pg.stop().unwrap();
}
