//! The gain model's arithmetic, the choice of the bound resource, and the files written.

use profiler::attribute::costs::{Confidence, Finding, FindingKind};
use profiler::attribute::ranking::{predict, GainInputs, SATURATED};
use profiler::render::ranking;
use profiler::attribute::{cpu_bound_gain, latency_bound_gain, Bound, RankingOptions, RuleSet};
use profiler::render::ranking::write_ranking;

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

fn finding(samples: u64, share: f64, cpu_us: Option<f64>, rt: Option<f64>, db_us: Option<f64>) -> Finding {
    Finding {
        id: "x".into(),
        title: "x".into(),
        kind: FindingKind::NamedCost,
        confidence: Confidence::High,
        samples,
        cpu_share: share,
        cpu_share_se: 0.0,
        cpu_us_per_request: cpu_us,
        round_trips_per_request: rt,
        db_latency_us_per_request: db_us,
        counts_per_request: Default::default(),
        frames: Vec::new(),
        evidence: Vec::new(),
        advice: String::new(),
        owner: None,
        samples_by_role: Default::default(),
        worker_blocked_us_per_request: None,
        endpoints: Vec::new(),
        endpoints_unattributed: 0,
        endpoints_measure: Default::default(),
    }
}

#[test]
fn cpu_bound_arithmetic() {
    // s = 10%: 1/0.9 - 1 = 11.11%; s = 50%: +100%; s = 0: 0; s = 1: unbounded.
    assert!(close(cpu_bound_gain(0.10), 1.0 / 0.9 - 1.0));
    assert!(close(cpu_bound_gain(0.5), 1.0));
    assert!(close(cpu_bound_gain(0.0), 0.0));
    assert!(cpu_bound_gain(1.0).is_infinite());
    assert!(close(cpu_bound_gain(-0.1), 0.0));
}

#[test]
fn latency_bound_arithmetic() {
    // Little's law: X = N / L. L = 1000 µs, d = 100 µs: 1000/900 - 1 = 11.11%.
    assert!(close(latency_bound_gain(1000.0, 100.0), 1000.0 / 900.0 - 1.0));
    // N = 64 connections at L = 3200 µs give 20,000 req/s; removing 320 µs gives 64/2880 µs
    // = 22,222 req/s: +11.1%, the same as the formula.
    let before = 64.0 / 3200e-6;
    let after = 64.0 / 2880e-6;
    assert!(close(latency_bound_gain(3200.0, 320.0), after / before - 1.0));
    assert!(close(latency_bound_gain(1000.0, 0.0), 0.0));
    assert!(latency_bound_gain(1000.0, 1000.0).is_infinite());
}

#[test]
fn bound_classification() {
    // The app's single CPU 95% busy: app CPU.
    assert_eq!(Bound::classify((0.95, 1.0), Some((0.3, 1.0)), 64, 3000.0), Bound::AppCpu { used_cpus: 0.95, capacity_cpus: 1.0 });
    // PostgreSQL 9.0 of 10 CPUs and the app 5.6 of 8: database CPU.
    assert_eq!(Bound::classify((5.6, 8.0), Some((9.0, 10.0)), 256, 3000.0), Bound::DbCpu { used_cpus: 9.0, capacity_cpus: 10.0, served_latency_us: None });
    // Both saturated: the more utilized one.
    assert!(matches!(Bound::classify((0.9, 1.0), Some((0.99, 1.0)), 64, 1.0), Bound::DbCpu { .. }));
    // Neither at the threshold: latency at the given concurrency.
    let just_below = SATURATED - 0.01;
    assert_eq!(Bound::classify((just_below, 1.0), Some((0.45, 1.0)), 64, 11_024.7), Bound::Latency { connections: 64, latency_us: 11_024.7 });
    assert!(matches!(Bound::classify((SATURATED, 1.0), None, 64, 1.0), Bound::AppCpu { .. }));
}

#[test]
fn predictions_per_bound() {
    let inputs = GainInputs { round_trips_per_request: Some(3.0), driver_cpu_share: 0.30, cpu_us_per_request: Some(200.0), base_req_per_s: Some(1000.0), ..GainInputs::default() };
    let cpu_cost = finding(100, 0.10, Some(20.0), None, None);
    let app = Bound::AppCpu { used_cpus: 1.0, capacity_cpus: 1.0 };
    let g = predict(&cpu_cost, &app, &inputs);
    assert!(close(g.gain_pct, 100.0 / 9.0), "{}", g.gain_pct);
    assert!(close(g.predicted_req_per_s.unwrap(), 1000.0 / 0.9));
    assert_eq!(g.resource, "app_cpu");
    // A wire-only cost (1 extra of 3 round trips, no samples of its own) under app CPU: its CPU
    // share is 1/3 of the driver's 30% = 10%.
    let rt_cost = finding(0, 0.0, None, Some(1.0), Some(50.0));
    let g = predict(&rt_cost, &app, &inputs);
    assert!(close(g.share.unwrap(), 0.10), "{:?}", g.share);
    assert!(close(g.gain_pct, 100.0 / 9.0));
    // Database CPU: share of round trips 1/3 -> 1/(2/3) - 1 = +50%; an app-CPU cost gains 0.
    let db = Bound::DbCpu { used_cpus: 1.0, capacity_cpus: 1.0, served_latency_us: None };
    assert!(close(predict(&rt_cost, &db, &inputs).gain_pct, 50.0));
    assert!(close(predict(&cpu_cost, &db, &inputs).gain_pct, 0.0));
    // Latency 1000 µs: the CPU cost removes 20 µs -> 1000/980 - 1; the wire cost removes its
    // 50 µs of round trip + 1/3 × 30% × 200 µs = 20 µs of CPU: 70 µs -> 1000/930 - 1.
    let lat = Bound::Latency { connections: 64, latency_us: 1000.0 };
    let g = predict(&cpu_cost, &lat, &inputs);
    assert!(close(g.removed_us.unwrap(), 20.0));
    assert!(close(g.gain_pct, (1000.0 / 980.0 - 1.0) * 100.0));
    let g = predict(&rt_cost, &lat, &inputs);
    assert!(close(g.removed_us.unwrap(), 70.0), "{:?}", g.removed_us);
    assert!(close(g.gain_pct, (1000.0 / 930.0 - 1.0) * 100.0));
    // Unknown bound: as app CPU, labelled.
    assert_eq!(predict(&cpu_cost, &Bound::Unknown, &inputs).resource, "assumed_app_cpu");
}

#[test]
fn writes_ranking_md_and_json() {
    let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/attribute/layers.profile.json");
    let p = profiler::profile::json::read(&path).unwrap();
    let rules = RuleSet::builtin();
    let dir = tempfile::tempdir().unwrap();
    let bound = Bound::Latency { connections: 64, latency_us: 5000.0 };
    let opts = RankingOptions { rules: &rules, wire: None, base_req_per_s: Some(12_800.0), label: "json", closed_loop: None };
    let r = write_ranking(&p, Some(500), bound, &opts, dir.path()).unwrap();
    let md = std::fs::read_to_string(dir.path().join("ranking.md")).unwrap();
    assert!(md.starts_with("# Ranking of named costs: json (pid 100)\n"), "{md}");
    assert!(md.contains("- bound: latency at 64 connections (mean 5.00 ms"), "{md}");
    assert!(md.contains("Little's law"), "the model is printed");
    assert!(md.contains("| crypto | auth | 40 | 40.00% ± 4.90 | 800.00 |"), "{md}");
    // The fixture's one named cost (see attribute_layers.rs): 800 µs of sha2 per request on the
    // workers; latency-bound, 5000 / (5000 - 800) - 1 = +19.0%.
    assert!(md.contains("| 1 | `long-cpu-on-worker`: `jsonwebtoken` runs 800 µs of synchronous CPU per request on the runtime's worker threads | Medium | 40 |"), "{md}");
    assert!(md.contains("| +19.0% |"), "{md}");
    assert!(md.contains("## Threads by role"), "{md}");
    let json: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.path().join("ranking.json")).unwrap()).unwrap();
    assert_eq!(json["schema_version"], 1);
    assert_eq!(json["bound"]["resource"], "latency");
    assert_eq!(json["requests"], 500);
    assert_eq!(json["layers"][0]["layer"], "crypto");
    // ranking.json reads back (floats may differ in the last bit: compare what a reader sees).
    let back: profiler::attribute::Ranking = serde_json::from_value(json).unwrap();
    assert_eq!((back.samples, back.requests, back.layers.len(), back.generic.len()), (r.samples, r.requests, r.layers.len(), r.generic.len()));
    assert_eq!(ranking::markdown(&back), md);
}

/// `write_bench_rankings` on the `results.json` of the recorded `--costs all` smoke run (tests
/// json, db, deals-create), each test folder holding the recorded profile of that test.
#[test]
fn bench_rankings_use_wrk_requests_and_the_measured_bound() {
    use std::io::Read;
    let data = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/attribute/recorded");
    let results: profiler::runs::BenchResults =
        serde_json::from_slice(&std::fs::read(data.join("all.results.json")).unwrap()).unwrap();
    let out = tempfile::tempdir().unwrap();
    for t in ["json", "db", "deals-create"] {
        let mut bytes = Vec::new();
        let f = std::fs::File::open(data.join(format!("all-{t}.profile.json.gz"))).unwrap();
        flate2::read::GzDecoder::new(f).read_to_end(&mut bytes).unwrap();
        std::fs::create_dir_all(out.path().join(t)).unwrap();
        std::fs::write(out.path().join(t).join("profile.json"), bytes).unwrap();
    }
    let written = profiler::render::ranking::write_bench_rankings(&results, out.path(), &RuleSet::builtin()).unwrap();
    assert_eq!(written.len(), 7, "{written:?}");
    let db: serde_json::Value = serde_json::from_slice(&std::fs::read(out.path().join("db/ranking.json")).unwrap()).unwrap();
    // The profiled run's completed requests; the median measured run's latency and req/s.
    assert_eq!(db["requests"], 26885);
    assert_eq!(db["bound"]["resource"], "latency");
    assert_eq!(db["bound"]["connections"], 64);
    assert!((db["bound"]["latency_us"].as_f64().unwrap() - 11024.7).abs() < 1e-6);
    assert!((db["base_req_per_s"].as_f64().unwrap() - results.tests[1].req_per_s).abs() < 1e-6);
    // The closed loop from the median run: wrk's 64 connections, the app's CPU use over its
    // req/s on its one CPU, PostgreSQL's on its one, and a delay that gives that req/s.
    let m = results.tests[1].median();
    let model: profiler::attribute::closed_loop::ClosedLoop = serde_json::from_value(db["closed_loop"].clone()).unwrap();
    assert_eq!(model.customers, 64);
    assert!((model.stations[0].demand_us - m.app.cpu * 1e6 / m.wrk.req_per_s).abs() < 1e-6 && model.stations[0].servers == 1.0, "{model:?}");
    assert!((model.stations[1].demand_us - m.postgres.as_ref().unwrap().cpu * 1e6 / m.wrk.req_per_s).abs() < 1e-6, "{model:?}");
    assert!((model.model_req_per_s - m.wrk.req_per_s).abs() < 1e-3 * m.wrk.req_per_s && model.delay_us > 0.0, "{model:?}");
    assert!(db["costs"].as_array().unwrap().iter().all(|c| c["gain"]["resource"] == "closed_loop"), "{}", db["costs"]);
    let combined = std::fs::read_to_string(out.path().join("ranking.md")).unwrap();
    // The bound's line says whose gains they are: the closed loop's, not the latency formula's.
    let db_line = "## db: latency at 64 connections (mean 11.02 ms; neither CPU set is 85% busy); gains from the closed loop of 64 requests in flight over app CPU (1.00 CPUs,";
    for t in ["## json: latency", "## db: latency", "## deals-create: latency", "| `pool-ping` |", "Little's law", "mean value analysis", db_line] {
        assert!(combined.contains(t), "{t} missing in:\n{combined}");
    }
}

/// Who pays a finding: the first five endpoints by name, the rest in one row, then the samples
/// on no request; shares of all joined samples (100 here: 40+20+10+8+6 listed, 4+2 others, 10
/// on no request), and the line ranking.md prints.
#[test]
fn payers_of_a_finding_by_hand() {
    use profiler::attribute::costs::EndpointShare;
    let mut f = finding(100, 0.5, None, None, None);
    for (e, n) in [("GET /a", 40), ("GET /b", 20), ("POST /c", 10), ("GET /d", 8), ("GET /e", 6), ("GET /f", 4), ("GET /g", 2)] {
        f.endpoints.push(EndpointShare { endpoint: e.into(), count: n, share: n as f64 / 100.0, per_request: None });
    }
    f.endpoints_unattributed = 10;
    let rows = f.payers();
    let got: Vec<(&str, bool, u64)> = rows.iter().map(|p| (p.label.as_str(), p.endpoint, p.count)).collect();
    assert_eq!(
        got,
        [("GET /a", true, 40), ("GET /b", true, 20), ("POST /c", true, 10), ("GET /d", true, 8), ("GET /e", true, 6), ("2 other endpoints", false, 6), ("serving no request", false, 10)]
    );
    assert!(close(rows[0].share, 0.40) && close(rows[5].share, 0.06) && close(rows[6].share, 0.10));
    assert!(finding(1, 0.1, None, None, None).payers().is_empty());
}

/// The regex route's attach (see the next test): 4.303 s of the target's CPU over a run of 10.09 s on
/// `capacity` CPUs, 3,902 requests (3,900 answered in 5.1 ms each), 3,443 of them in a steady
/// window of 4.4 s.
fn regex_route_attach(capacity: f64) -> profiler::profile::Profile {
    use profiler::wire::summary::{EndpointStats, SteadyWindow};
    let mut p = profiler::profile::Profile::default();
    p.meta.duration_ns = 10_086_215_718;
    p.meta.target_cpu_ns = Some(4_303_000_000);
    p.meta.target_cpu_capacity = Some(capacity);
    let mut w = profiler::wire::WireSummary::default();
    w.http.requests = 3902;
    w.http.endpoints = vec![EndpointStats {
        endpoint: "GET /case/regex-per-request".into(),
        requests: 3902,
        statuses: [(200, 3900)].into_iter().collect(),
        latency_total_ns: 3900 * 5_100_000,
        latency_mean_ns: 5_100_000,
    }];
    w.steady = Some(SteadyWindow { start_ns: 100_000_000, end_ns: 4_500_000_000, http_requests: 3443, endpoints: Vec::new(), pg: Default::default(), http_connection_buckets: None });
    p.wire = Some(w);
    p
}

/// An attach's bound from its own measurements: an attach of 10.09 s around 5 s of `wrk -c4`
/// on field-cases' regex route (the app pinned to one CPU) used 4.30 s of CPU for 3,902
/// requests, 3,443 of them in a steady window of 4.4 s: 1.10 ms per request at 782 req/s is
/// 0.86 of the one CPU under load (0.43 over the whole run, which the idle seconds dilute).
/// On 2 CPUs the same figures are half a CPU set: the wire's latency bounds.
#[test]
fn attach_bound_from_the_targets_cpu_set_and_the_wire() {
    let mut p = regex_route_attach(1.0);
    let w = p.wire.clone().unwrap();
    let used = 4.303 / 3902.0 * (3443.0 / 4.4);
    match Bound::of_profile(&p) {
        Bound::AppCpu { used_cpus, capacity_cpus } => assert!((used_cpus - used).abs() < 1e-9 && capacity_cpus == 1.0, "{used_cpus} of {capacity_cpus}"),
        b => panic!("{b:?}"),
    }
    p.meta.target_cpu_capacity = Some(2.0);
    match Bound::of_profile(&p) {
        Bound::ServedLatency { used_cpus, capacity_cpus, latency_us } => {
            assert!((used_cpus - used).abs() < 1e-9 && capacity_cpus == 2.0 && (latency_us - 5100.0).abs() < 1e-9, "{used_cpus} {capacity_cpus} {latency_us}");
        }
        b => panic!("{b:?}"),
    }
    // The gain of 255 µs of CPU per request at 5.1 ms: 5100/(5100-255)-1.
    let g = predict(&finding(10, 0.05, Some(255.0), None, None), &Bound::of_profile(&p), &GainInputs::default());
    assert_eq!(g.resource, "served_latency");
    assert!(close(g.gain_pct, (5100.0 / 4845.0 - 1.0) * 100.0), "{}", g.gain_pct);
    // Without a steady window: the mean over the run (0.43 of 1 CPU), then the latency.
    p.meta.target_cpu_capacity = Some(1.0);
    p.wire.as_mut().unwrap().steady = None;
    assert!(matches!(Bound::of_profile(&p), Bound::ServedLatency { used_cpus, .. } if (used_cpus - 4.303 / 10.086_215_718).abs() < 1e-9));
    // No response paired, no capacity or no CPU reading: unknown, never a guess.
    p.wire.as_mut().unwrap().http.endpoints[0].statuses.clear();
    assert_eq!(Bound::of_profile(&p), Bound::Unknown);
    p.wire = Some(w);
    p.meta.target_cpu_capacity = None;
    assert_eq!(Bound::of_profile(&p), Bound::Unknown);
    p.meta.target_cpu_capacity = Some(1.0);
    p.meta.target_cpu_ns = None;
    assert_eq!(Bound::of_profile(&p), Bound::Unknown);
}

/// A database server on the host (`Meta::db_servers`) bounds an attach when its CPU set is the
/// busier one at or above 85%: the same regex-route figures (3,902 requests, 3,443 in a steady
/// window of 4.4 s, the app at 0.43 of its 2 CPUs under load) with a PostgreSQL that used
/// 5.0 s of CPU: 5.0 / 3902 × 782.5 = 1.003 CPUs under load, more than its 1-CPU set can
/// use, so read as the set full (1.00 of 1).
#[test]
fn attach_bound_from_the_database_servers_cpu() {
    use profiler::profile::DbServer;
    let mut p = regex_route_attach(2.0);
    let server = DbServer { port: 5432, pid: 42, command: "postgres".into(), cpu_ns: 5_000_000_000, exited_cpu_ns: 0, capacity_cpus: Some(1.0) };
    p.meta.db_servers = vec![server.clone()];
    let db_used = (5.0_f64 / 3902.0 * (3443.0 / 4.4)).min(1.0);
    let bound = Bound::of_profile(&p);
    match bound {
        Bound::DbCpu { used_cpus, capacity_cpus, served_latency_us } => {
            assert!((used_cpus - db_used).abs() < 1e-9 && capacity_cpus == 1.0 && served_latency_us == Some(5100.0), "{bound:?}");
        }
        b => panic!("{b:?}"),
    }
    assert!(bound.describe().starts_with("database CPU (1.00 of 1 CPUs used under load)"), "{}", bound.describe());
    // A ping that is 2 of 3 round trips: +200% by its share, capped by its 600 µs of round
    // trips at 5.1 ms: 5100/4500 - 1.
    let inputs = GainInputs { round_trips_per_request: Some(3.0), ..Default::default() };
    let g = predict(&finding(0, 0.0, None, Some(2.0), Some(600.0)), &bound, &inputs);
    assert_eq!(g.resource, "db_cpu");
    assert!(close(g.gain_pct, (5100.0 / 4500.0 - 1.0) * 100.0), "{g:?}");
    // A cost smaller by share than by latency keeps its share: 0.1 of 3 round trips, 1 ms.
    let g = predict(&finding(0, 0.0, None, Some(0.1), Some(1000.0)), &bound, &inputs);
    assert!(close(g.gain_pct, (1.0 / (1.0 - 0.1 / 3.0) - 1.0) * 100.0), "{g:?}");
    // An app-CPU cost frees none of the database's CPU.
    assert!(close(predict(&finding(10, 0.05, Some(255.0), None, None), &bound, &inputs).gain_pct, 0.0));
    // The server at half its CPU set, or with its capacity unknown: not the bound.
    p.meta.db_servers = vec![DbServer { cpu_ns: 2_500_000_000, ..server.clone() }];
    assert!(matches!(Bound::of_profile(&p), Bound::ServedLatency { .. }));
    p.meta.db_servers = vec![DbServer { capacity_cpus: None, ..server.clone() }];
    assert!(matches!(Bound::of_profile(&p), Bound::ServedLatency { .. }));
    // The app busier than the server, both saturated: the app's CPU.
    p.meta.target_cpu_capacity = Some(0.5);
    p.meta.db_servers = vec![server];
    assert!(matches!(Bound::of_profile(&p), Bound::AppCpu { .. }));
}

/// The host's CPUs bound an attach when the app may use all of them and the host is at least
/// 85% busy although neither the app (0.43 of 2 CPUs) nor the database (2.5 s: 0.50 of its 2
/// CPUs under load) alone is: the regex-route figures with `Meta::cpus` 2 and the host busy
/// 9.0 s over the run (9.0 / 3902 × 782.5 = 1.80 of 2 CPUs under load), 4,000 round trips on
/// the wire (625 µs of the server's CPU each), and wrk found as the app's HTTP client with
/// 1.2 s. The CPU that serves the requests is 4.303 + 2.5 + 1.2 = 8.003 s, 2051.0 µs per
/// request; the host's other 0.997 s is left out. A ping at 2 round trips per request with
/// 20 µs of app CPU takes (20 + 2 × 625) / 2051.0 of it; below 85% busy, the served latency
/// again.
#[test]
fn attach_bound_from_the_hosts_cpus() {
    use profiler::profile::{DbServer, HttpClient};
    let mut p = regex_route_attach(2.0);
    p.meta.cpus = 2;
    p.meta.host_busy_ns = Some(9_000_000_000);
    p.meta.db_servers = vec![DbServer { port: 5432, pid: 42, command: "postgres".into(), cpu_ns: 2_500_000_000, exited_cpu_ns: 0, capacity_cpus: Some(2.0) }];
    p.meta.http_clients = vec![HttpClient { pid: 43, command: "wrk".into(), cpu_ns: 1_200_000_000 }];
    p.wire.as_mut().unwrap().pg.round_trips = 4000;
    let bound = Bound::of_profile(&p);
    let per_request = 8.003e6 / 3902.0;
    let under_load = 3443.0 / 4.4 / 3902.0;
    match bound {
        Bound::HostCpu { used_cpus, capacity_cpus, cpu_us_per_request, other_cpus, client_cpus, upstream_cpus: None, db_cpu_us_per_round_trip } => {
            assert!((used_cpus - 9.0 * under_load).abs() < 1e-9 && capacity_cpus == 2.0, "{bound:?}");
            assert!(close(cpu_us_per_request, per_request) && close(db_cpu_us_per_round_trip.unwrap(), 625.0), "{bound:?}");
            assert!(close(other_cpus, 0.997 * under_load) && close(client_cpus.unwrap(), 1.2 * under_load), "{bound:?}");
        }
        b => panic!("{b:?}"),
    }
    assert!(bound.describe().starts_with("the host's CPUs (1.80 of 2 busy under load"), "{}", bound.describe());
    let g = predict(&finding(4, 0.01, Some(20.0), Some(2.0), Some(600.0)), &bound, &GainInputs::default());
    assert_eq!(g.resource, "host_cpu");
    assert!(close(g.gain_pct, (1.0 / (1.0 - (20.0 + 1250.0) / per_request) - 1.0) * 100.0), "{g:?}");
    // The app confined to one CPU of the two: its own set, not the host's, is what it can use.
    p.meta.target_cpu_capacity = Some(1.0);
    assert!(!matches!(Bound::of_profile(&p), Bound::HostCpu { .. }));
    p.meta.target_cpu_capacity = Some(2.0);
    p.meta.host_busy_ns = Some(6_000_000_000);
    assert!(matches!(Bound::of_profile(&p), Bound::ServedLatency { .. }));
    // 1.0 s of the server's 2.5 s went to connections set up (and closed) during the run, 100
    // of them on the wire: the round trips keep the other 1.5 s, 375 µs each.
    p.meta.host_busy_ns = Some(9_000_000_000);
    p.meta.db_servers[0].exited_cpu_ns = 1_000_000_000;
    p.wire.as_mut().unwrap().pg.connections_timed = 100;
    match Bound::of_profile(&p) {
        Bound::HostCpu { db_cpu_us_per_round_trip, .. } => assert!(close(db_cpu_us_per_round_trip.unwrap(), 375.0)),
        b => panic!("{b:?}"),
    }
    // An upstream service the app calls on this host used 0.5 s of the other 0.997 s: it
    // serves the requests too (8.503 s, 2179.1 µs per request), the other processes keep
    // 0.497 s, and the same ping's share shrinks to (20 + 2 × 375) / 2179.1.
    p.meta.upstream_servers = vec![profiler::profile::UpstreamServer { port: 8081, pid: 44, command: "upstream".into(), cpu_ns: 500_000_000 }];
    let bound = Bound::of_profile(&p);
    match bound {
        Bound::HostCpu { cpu_us_per_request, other_cpus, upstream_cpus, .. } => {
            assert!(close(cpu_us_per_request, 8.503e6 / 3902.0) && close(other_cpus, 0.497 * under_load) && close(upstream_cpus.unwrap(), 0.5 * under_load), "{bound:?}");
        }
        b => panic!("{b:?}"),
    }
    assert!(bound.describe().contains("the servers' it calls on this host (0."), "{}", bound.describe());
    let g = predict(&finding(4, 0.01, Some(20.0), Some(2.0), Some(600.0)), &bound, &GainInputs::default());
    assert!(close(g.gain_pct, (1.0 / (1.0 - (20.0 + 750.0) / (8.503e6 / 3902.0)) - 1.0) * 100.0), "{g:?}");
}

/// An attach of field-cases' `/case/connect-per-request` (one run, 2026-12-07): the app pinned
/// to one CPU used 1.13 s for 1,069 requests, 1,038 of them in a load window of 5.9 s (no
/// steady window: a connection is set up for every request); PostgreSQL, free to use both
/// CPUs, 10.32 s, all of it in processes that exited (1,067 set-ups on the wire); the host
/// 11.85 s. Under load: the app 1.13 / 1069 × 175.93 = 0.19 of its CPU, the server 1.70 of its
/// 2 (0.849), the host 1.95 of 2: the host bounds, because the server's CPU set spans it.
/// The set-up's share: (746.5 µs of the app + 0.998 × 9,672 µs of the server) over 10,711 µs
/// per request, +3,340%, capped by the app's one CPU without its 746.5 µs: 10^6 / (1,057.1 -
/// 746.5) = 3,219.6 req/s, +1,730% over 175.93. Switching to the pool measured +1,950.7% in
/// the same run (wrk, one run each). Counted over the whole run of 10.09 s the server read
/// 1.02 of 2 and the bound was the served latency: +202%.
#[test]
fn a_database_server_spanning_the_host_makes_the_host_the_bound() {
    use profiler::profile::DbServer;
    use profiler::wire::summary::LoadWindow;
    let mut p = regex_route_attach(1.0);
    p.meta.cpus = 2;
    p.meta.duration_ns = 10_085_612_732;
    p.meta.target_cpu_ns = Some(1_130_000_000);
    p.meta.host_busy_ns = Some(11_850_000_000);
    p.meta.db_servers = vec![DbServer { port: 5432, pid: 42, command: "postgres".into(), cpu_ns: 10_320_000_000, exited_cpu_ns: 10_320_000_000, capacity_cpus: Some(2.0) }];
    {
        let w = p.wire.as_mut().unwrap();
        w.http.requests = 1069;
        w.steady = None;
        w.load = Some(LoadWindow { start_ns: 100_000_000, end_ns: 6_000_000_000, http_requests: 1038 });
        w.pg.round_trips = 2138;
        w.pg.connections_timed = 1067;
    }
    let x = 1038.0 / 5.9;
    let bound = Bound::of_profile(&p);
    let per_request = (1.13e6 + 10.32e6) / 1069.0;
    match bound {
        Bound::HostCpu { used_cpus, cpu_us_per_request, db_cpu_us_per_round_trip, .. } => {
            assert!(close(used_cpus, 11.85 / 1069.0 * x) && close(cpu_us_per_request, per_request), "{bound:?}");
            assert_eq!(db_cpu_us_per_round_trip, Some(0.0), "every CPU second of the server was a set-up's");
        }
        b => panic!("{b:?}"),
    }
    let mut f = finding(79, 0.69, Some(746.5), Some(1.0), Some(25_000.0));
    let setups = 1067.0 / 1069.0;
    f.counts_per_request.insert("connection_setups".into(), setups);
    let app = 1.13e6 / 1069.0;
    let inputs = GainInputs {
        req_per_s: Some(x),
        db_setup_cpu_us: Some(10.32e6 / 1067.0),
        db_cpu_us_per_request: Some(10.32e6 / 1069.0),
        app_cpu_us_per_request: Some(app),
        app_capacity_cpus: Some(1.0),
        ..Default::default()
    };
    let g = predict(&f, &bound, &inputs);
    assert_eq!(g.resource, "host_cpu");
    assert!(close(g.gain_pct, (1e6 / (app - 746.5) / x - 1.0) * 100.0), "{g:?}");
    assert!((g.gain_pct - 1730.0).abs() < 1.0, "{g:?}");
    // Without the app's figures, the share of the host's serving CPU alone.
    let g = predict(&f, &bound, &GainInputs { app_cpu_us_per_request: None, ..inputs });
    let s = (746.5 + setups * 10.32e6 / 1067.0) / per_request;
    assert!(close(g.gain_pct, (1.0 / (1.0 - s) - 1.0) * 100.0) && (g.gain_pct - 3340.0).abs() < 10.0, "{g:?}");
    // The server confined to one CPU too: it is the bound itself. Its CPU per request at the
    // load's rate reads 1.70 CPUs, more than its one: CPU spent outside the load counted per
    // request, read as the set full. With half the CPU it is at 0.85 of 1.0, and nothing that
    // serves the requests spans the host: the served latency.
    p.meta.db_servers[0].capacity_cpus = Some(1.0);
    assert!(matches!(Bound::of_profile(&p), Bound::DbCpu { used_cpus, capacity_cpus, .. } if used_cpus == 1.0 && capacity_cpus == 1.0), "{:?}", Bound::of_profile(&p));
    p.meta.db_servers[0].cpu_ns = 5_000_000_000;
    assert!(matches!(Bound::of_profile(&p), Bound::ServedLatency { .. }), "{:?}", Bound::of_profile(&p));
}

/// A connection set up per request (field-cases' `/case/connect-per-request`, tokio-postgres
/// against a local PostgreSQL, one run: 652 µs of the app's sampled CPU per request in the
/// set-up, about 7.8 ms of the server's CPU per request, the app's 970 µs per request on its
/// one CPU at 215 req/s). A set-up forks and authenticates a server process: the servers' CPU
/// per set-up (7.5 ms here, measured from the processes that exited) is its share of the
/// database's CPU, 7.5 / 7.8, `1/(1-s) - 1` = +2,500%; freed of it the app's one CPU allows
/// 10^6 / (970 - 652) = 3,144.7 req/s, +1,362.6% over 215: the smaller gain. Counted as a
/// share of the round trips, as each alike, the set-up's round trip read a few percent, and
/// the served latency (29.2 ms, 19.1 ms of it the set-up) capped it at +187%; switching to the
/// pool's connections measured +1,359% to +1,927% (three runs).
#[test]
fn connection_set_ups_take_the_servers_cpu_they_measured() {
    let mut f = finding(83, 0.75, Some(652.0), Some(1.0), Some(19_056.0));
    f.counts_per_request.insert("connection_setups".into(), 1.0);
    let bound = Bound::DbCpu { used_cpus: 1.7, capacity_cpus: 2.0, served_latency_us: Some(29_232.9) };
    let mut inputs = GainInputs {
        round_trips_per_request: Some(3.0),
        req_per_s: Some(215.0),
        db_setup_cpu_us: Some(7_500.0),
        db_cpu_us_per_request: Some(7_800.0),
        app_cpu_us_per_request: Some(970.0),
        app_capacity_cpus: Some(1.0),
        ..Default::default()
    };
    let g = predict(&f, &bound, &inputs);
    assert_eq!(g.resource, "db_cpu");
    assert!(close(g.gain_pct, (1e6 / (970.0 - 652.0) / 215.0 - 1.0) * 100.0), "{g:?}");
    assert!((g.gain_pct - 1362.6).abs() < 0.1, "{g:?}");
    // Without the app's figures, the database's share alone.
    inputs.app_cpu_us_per_request = None;
    let g = predict(&f, &bound, &inputs);
    assert!(close(g.gain_pct, (1.0 / (1.0 - 7_500.0 / 7_800.0) - 1.0) * 100.0), "{g:?}");
    // Without the server's CPU per set-up: the share of the round trips (1 of 3), below its
    // cap by the served latency, as before.
    inputs.db_setup_cpu_us = None;
    let g = predict(&f, &bound, &inputs);
    assert!(close(g.gain_pct, 50.0) && g.formula.contains("share of round trips"), "{g:?}");
    // A finding without set-ups is not given the set-ups' CPU.
    inputs.db_setup_cpu_us = Some(7_500.0);
    let g = predict(&finding(0, 0.0, None, Some(1.0), Some(600.0)), &bound, &inputs);
    assert!(close(g.gain_pct, (29_232.9 / (29_232.9 - 600.0) - 1.0) * 100.0), "{g:?}");
    // The host's CPUs: the set-ups' server CPU joins the app's and the round trips'.
    let host = Bound::HostCpu { used_cpus: 1.9, capacity_cpus: 2.0, cpu_us_per_request: 9_000.0, other_cpus: 0.0, client_cpus: None, upstream_cpus: None, db_cpu_us_per_round_trip: Some(50.0) };
    let g = predict(&f, &host, &inputs);
    assert!(close(g.gain_pct, (1.0 / (1.0 - (652.0 + 50.0 + 7_500.0) / 9_000.0) - 1.0) * 100.0), "{g:?}");
}

/// A host busy with other work (a fresh user's trial: another person's compile filled both
/// CPUs while the app used 5% of them): the app's 0.2 s of CPU over 3,902 requests (51.3 µs
/// each) is all that serves them, with no database or client on this host. A cost of 20 µs of
/// CPU per request is 39% of it: +63.9%. Counting the host's 9.0 s of busy time as the
/// requests' (2,306.5 µs each, as the bound did) read +0.9%, while switching such costs off
/// measured +720% in that trial.
#[test]
fn a_host_busy_with_other_work_leaves_its_cpu_out_of_the_gain() {
    let mut p = regex_route_attach(2.0);
    p.meta.cpus = 2;
    p.meta.target_cpu_ns = Some(200_000_000);
    p.meta.host_busy_ns = Some(9_000_000_000);
    let bound = Bound::of_profile(&p);
    let Bound::HostCpu { cpu_us_per_request, client_cpus: None, .. } = bound else { panic!("{bound:?}") };
    assert!(close(cpu_us_per_request, 2e5 / 3902.0), "{bound:?}");
    assert!(bound.describe().contains("none found on this host"), "{}", bound.describe());
    let g = predict(&finding(4, 0.01, Some(20.0), None, None), &bound, &GainInputs::default());
    assert!(close(g.gain_pct, (1.0 / (1.0 - 20.0 / (2e5 / 3902.0)) - 1.0) * 100.0), "{g:?}");
    assert!(g.gain_pct > 60.0, "{g:?}");
}

/// A blocking call on a worker: `b` = 2,000 µs switched out per request, `c` = 35 µs of worker
/// CPU, 2 workers, 950 req/s measured (field-cases' `/case/blocking-sleep` under `wrk -c8`
/// reads about that: two workers each held 2.035 ms per request serve at most 983 req/s). With N
/// = 8 requests in flight (the load generator's connections, or the 8 HTTP connections the wire
/// saw) the loop without the block runs at min(2/35 µs, 8/2,035 µs) = 3,931 req/s: +313.8%.
/// Without N the fallback counts the wait as leaving the latency: b/c = +5,714%. (A fresh user's
/// service measured +160% for the same change: its async sleep took longer than 2 ms.)
#[test]
fn blocked_workers_gain_from_the_concurrency() {
    let mut f = finding(3, 0.01, Some(1.0), None, None);
    f.worker_blocked_us_per_request = Some(2_000.0);
    let with_n = GainInputs { worker_cpu_us_per_request: Some(35.0), workers: Some(2.0), req_per_s: Some(950.0), concurrency: Some(8.0), ..GainInputs::default() };
    let g = predict(&f, &Bound::Unknown, &with_n);
    assert_eq!(g.resource, "runtime_workers");
    assert!(close(g.gain_pct, (8.0e6 / 2_035.0 / 950.0 - 1.0) * 100.0), "{g:?}");
    assert!((313.0..314.5).contains(&g.gain_pct), "{g:?}");
    let without_n = GainInputs { concurrency: None, ..with_n };
    let g = predict(&f, &Bound::Unknown, &without_n);
    assert!(close(g.gain_pct, 2_000.0 / 35.0 * 100.0), "{g:?}");
}

/// A blocking call on a worker of a host busy with the service, its database and its client:
/// a fresh user's axum service (a 500 µs `std::thread::sleep` under a lock on one of four
/// routes; 2 workers, `wrk -c8`), its attach read the host's CPUs bound at 1.86 of 2 CPUs busy,
/// 0.89 of them other processes', 1,955.7 µs of serving CPU per request, 499 req/s; the
/// workers' model read W/(c+B-b) = 2/(957.1+49.1) µs = 1,988 req/s, +298.4%, above what the
/// host had left. Capped by the host: (2 - 0.89)/1,955.7 µs = 567.6 req/s, +13.7%; the user
/// measured +14% by switching the sleep off (8 s runs, 1,050 -> 1,188-1,203 req/s).
#[test]
fn a_freed_wait_gains_no_more_than_the_cpu_left() {
    let mut f = finding(3, 0.0, Some(0.0), None, None);
    f.samples = 0;
    f.worker_blocked_us_per_request = Some(276.7);
    let inputs = GainInputs {
        worker_cpu_us_per_request: Some(957.1),
        workers: Some(2.0),
        worker_blocked_us_per_request: Some(325.8),
        req_per_s: Some(499.0),
        base_req_per_s: Some(499.0),
        concurrency: Some(8.0),
        ..GainInputs::default()
    };
    let host = Bound::HostCpu { used_cpus: 1.86, capacity_cpus: 2.0, cpu_us_per_request: 1955.7, other_cpus: 0.89, client_cpus: Some(0.03), upstream_cpus: None, db_cpu_us_per_round_trip: Some(62.5) };
    let g = predict(&f, &host, &inputs);
    assert_eq!(g.resource, "runtime_workers");
    let cap = (2.0 - 0.89) * 1e6 / 1955.7 / 499.0 - 1.0;
    assert!(close(g.gain_pct, cap * 100.0), "{g:?}");
    assert!((13.0..14.5).contains(&g.gain_pct), "{g:?}");
    assert!(g.formula.contains("the host's CPUs left to the requests"), "{}", g.formula);
    // Without a CPU figure to cap it, the workers' model stands.
    let g = predict(&f, &Bound::Unknown, &inputs);
    assert!(close(g.gain_pct, (2.0e6 / (957.1 + 49.1) / 499.0 - 1.0) * 100.0), "{g:?}");
}

/// A lock wait behind another blocking call: field-cases' `/case/lock-across-sleep` holds a
/// process-wide lock across a 356 µs `std::thread::sleep`, so each request blocks its worker
/// in the sleep (356.4 µs) and the other worker on the lock (356.1 µs): `c` = 17.0 µs of
/// worker CPU, 2 workers, `wrk -c8`, 2,753 req/s measured. Freed of the lock wait, each
/// worker is still held by the sleep: min(2/(17.0+356.4) µs, 8/(17.0+712.5) µs) = 5,356 req/s,
/// +94.6%; switching the lock off (`/control/sleep-without-lock`) measured 5,424-5,440 req/s
/// against 2,749-2,753 (+97-98%, the field-cases tests of 2026-12-06). Counting the lock wait
/// alone, as the model did, read min(2/17.0 µs, 8/373.1 µs) = 21,442 req/s: +679%.
#[test]
fn blocked_workers_gain_keeps_the_other_blocking_waits() {
    let mut f = finding(3, 0.01, Some(1.0), None, None);
    f.worker_blocked_us_per_request = Some(356.1);
    let inputs = GainInputs {
        worker_cpu_us_per_request: Some(17.0),
        workers: Some(2.0),
        worker_blocked_us_per_request: Some(356.1 + 356.4),
        req_per_s: Some(2753.0),
        concurrency: Some(8.0),
        ..GainInputs::default()
    };
    let g = predict(&f, &Bound::Unknown, &inputs);
    assert!(close(g.gain_pct, (2.0e6 / (17.0 + 356.4) / 2753.0 - 1.0) * 100.0), "{g:?}");
    assert!((94.0..95.0).contains(&g.gain_pct), "{g:?}");
    // Without the other waits (no off-CPU figure of the workers), the old reading.
    let g = predict(&f, &Bound::Unknown, &GainInputs { worker_blocked_us_per_request: None, ..inputs });
    assert!((678.0..680.0).contains(&g.gain_pct), "{g:?}");
}
