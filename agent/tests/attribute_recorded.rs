//! Fingerprints on real profiles of target-app, recorded with
//! `profiler bench --smoke --skip-build --only json,db,deals-create --frequency 999
//! --costs all|none` (agent/tests/data/attribute/recorded/, gzipped profile.json plus the run
//! figures in runs.json). With `none` no seeded cost may fire; with `all` the frame-based ones
//! that apply to each test must (the wire-based ones need a wire capture these profiles lack).

use std::io::Read;
use std::path::PathBuf;

use profiler::attribute::{rank, Bound, Ranking, RankingOptions, RuleSet};
use profiler::profile::Profile;

fn data() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/attribute/recorded")
}

fn load(name: &str) -> Profile {
    let path = data().join(format!("{name}.profile.json.gz"));
    let mut bytes = Vec::new();
    flate2::read::GzDecoder::new(std::fs::File::open(&path).unwrap()).read_to_end(&mut bytes).unwrap();
    profiler::profile::json::from_slice(&bytes, &path).unwrap()
}

fn run(name: &str) -> serde_json::Value {
    let runs: serde_json::Value = serde_json::from_slice(&std::fs::read(data().join("runs.json")).unwrap()).unwrap();
    runs[name].clone()
}

fn ranking(name: &str, rules: &RuleSet) -> Ranking {
    let p = load(name);
    let r = run(name);
    let bound = Bound::classify(
        (r["app_cpu"].as_f64().unwrap(), profiler::sys::cpus::list_len(r["app_cpus"].as_str().unwrap()).into()),
        Some((r["pg_cpu"].as_f64().unwrap(), profiler::sys::cpus::list_len(r["pg_cpus"].as_str().unwrap()).into())),
        r["connections"].as_u64().unwrap() as u32,
        r["median_latency_mean_us"].as_f64().unwrap(),
    );
    let opts = RankingOptions { rules, wire: None, base_req_per_s: r["median_req_per_s"].as_f64(), label: name, closed_loop: None };
    rank(&p, r["profiled_requests"].as_u64(), bound, &opts)
}

fn ids(r: &Ranking) -> Vec<&str> {
    let mut v: Vec<&str> = r.costs.iter().map(|c| c.finding.id.as_str()).collect();
    v.sort_unstable();
    v
}

const TESTS: [&str; 3] = ["json", "db", "deals-create"];

#[test]
fn with_costs_none_no_seeded_cost_fires() {
    let rules = RuleSet::builtin();
    for t in TESTS {
        let r = ranking(&format!("none-{t}"), &rules);
        assert!(r.costs.is_empty(), "none-{t}: {:?}", ids(&r));
    }
}

/// Which seeded costs apply to which test (target-app's ground truth): json has no database and
/// no transaction; db has no transaction (no set_config, no user lookup) and no body. What
/// frames alone cannot show here: `session-setting-round-trip` and `wide-user-lookup` (wire only: these
/// profiles were recorded without a wire capture), and `global-locks` on deals-create (the
/// uncontended lock and unlock calls got fewer than 2 samples in 5 s at 999 Hz; on json and db,
/// counting the unlock calls too, as the catalog's `lock` frame set does, they got 2 or more).
#[test]
fn with_costs_all_the_frame_based_costs_fire() {
    let rules = RuleSet::builtin();
    let want: [(&str, Vec<&str>); 3] = [
        ("json", vec!["global-locks", "metrics-labels", "spawn-per-request"]),
        ("db", vec!["global-locks", "metrics-labels", "pool-ping", "spawn-per-request"]),
        ("deals-create", vec!["change-events", "double-json-parse", "metrics-labels", "pool-ping", "spawn-per-request"]),
    ];
    for (t, w) in want {
        let r = ranking(&format!("all-{t}"), &rules);
        if let Some(g) = r.costs.iter().find(|c| c.finding.id == "global-locks") {
            println!("all-{t}: global-locks {} samples, frames {:?}", g.finding.samples, g.finding.frames);
        }
        assert_eq!(ids(&r), w, "all-{t}");
        let skipped: Vec<&str> = r.not_evaluated.iter().map(|n| n.id.as_str()).collect();
        assert_eq!(skipped, vec!["session-setting-round-trip", "wide-user-lookup", "prepare-per-execution"], "all-{t}");
        // Every cost has evidence with per-request figures and a predicted gain.
        for c in &r.costs {
            assert!(c.finding.cpu_us_per_request.is_some_and(|u| u > 0.0), "{t} {}", c.finding.id);
            assert!(c.gain.gain_pct > 0.0 && c.gain.resource == "latency", "{t} {} {:?}", c.finding.id, c.gain);
        }
    }
}

#[test]
fn random_request_ids_are_one_getrandom_per_request() {
    let rules = RuleSet::builtin();
    for t in TESTS {
        let all = ranking(&format!("all-{t}"), &rules);
        let g = all.syscalls_per_request.iter().find(|(n, _)| n == "getrandom").unwrap().1;
        assert!((0.99..1.02).contains(&g), "all-{t}: {g}");
        let none = ranking(&format!("none-{t}"), &rules);
        let g = none.syscalls_per_request.iter().find(|(n, _)| n == "getrandom").map_or(0.0, |x| x.1);
        assert!(g < 0.01, "none-{t}: {g}");
    }
}

#[test]
fn the_release_ping_is_generic_and_present_either_way() {
    let rules = RuleSet::builtin();
    for name in ["all-db", "none-db", "all-deals-create", "none-deals-create"] {
        let r = ranking(name, &rules);
        let g = r.generic.iter().find(|g| g.id == "ping-on-release");
        assert!(g.is_some_and(|g| g.samples >= 100), "{name}");
    }
    // The ping before checkout (the switch) is its own, under the pool's acquire.
    let all = ranking("all-db", &rules);
    let ping = all.costs.iter().find(|c| c.finding.id == "pool-ping").unwrap();
    assert!(ping.finding.samples >= 400, "{}", ping.finding.samples);
}

#[test]
fn target_app_layers_are_on_the_request_path() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target-app/rules.toml");
    let rules = RuleSet::builtin_with_files(&[&path]).unwrap();
    let r = ranking("all-deals-create", &rules);
    let total = |name: &str| r.layers.iter().find(|l| l.layer == name).map_or(0, |l| l.total_samples);
    for layer in ["request context", "timeout", "security headers", "error rendering", "rate limit", "body limit", "authentication", "unit of work", "router, access check, handler"] {
        assert!(total(layer) > 0, "{layer} has no samples");
    }
    // The handler runs inside the unit of work. (The unit of work spawns the rest of the
    // pipeline as a task here, so the outer layers' totals miss the work done in that task:
    // a spawned task's stacks start at tokio's harness.)
    assert!(total("unit of work") >= total("router, access check, handler"));
}

/// Profiles recorded with the wire capture on (`--costs all`, db and deals-create), ranked with
/// the wire's own request count. sqlx prepares its statements when a connection opens, before
/// the profiled run attaches, so the wire shows `prepared before attach` names, not SQL: the
/// shape-based fingerprints (`session-setting-round-trip`, `wide-user-lookup`) are evaluated and cannot
/// fire on these captures.
#[test]
fn wire_capture_counts_pings_per_request() {
    let rules = RuleSet::builtin();
    for t in ["db", "deals-create"] {
        let p = load(&format!("all-wire-{t}"));
        let w = p.wire.as_ref().expect("recorded with the wire capture");
        let requests = w.http.requests;
        // Ground truth (target-app cost tests): 2 pings per checkout with the cost, one of them
        // on release; db and deals-create check out one connection per request.
        assert_eq!(w.pg.pings, 2 * requests, "{t}");
        let opts = RankingOptions { rules: &rules, wire: None, base_req_per_s: None, label: t, closed_loop: None };
        let r = rank(&p, None, Bound::Unknown, &opts);
        assert_eq!((r.requests, r.requests_source.as_deref()), (Some(requests), Some("wire")));
        assert!(r.not_evaluated.is_empty());
        let ping = r.costs.iter().find(|c| c.finding.id == "pool-ping").expect("pool-ping");
        assert_eq!(ping.finding.confidence, profiler::attribute::Confidence::High);
        // Recorded before back-to-back pings were counted: the finding fires on 2 pings per
        // request, and does not claim a count of pings before checkout it cannot separate.
        assert_eq!(ping.finding.counts_per_request.get("pings"), Some(&2.0), "{t}");
        assert_eq!(ping.finding.round_trips_per_request, None, "{t}");
        for id in ["session-setting-round-trip", "wide-user-lookup"] {
            assert!(r.costs.iter().all(|c| c.finding.id != id), "{t}: {id} cannot fire on prepared-before-attach shapes");
        }
    }
    // deals-create: one transaction per request (BEGIN, 3 statements, COMMIT = 5 round trips).
    let p = load("all-wire-deals-create");
    let w = p.wire.as_ref().unwrap();
    assert_eq!(w.pg.transactions.ended, w.http.requests);
    assert_eq!(w.pg.transactions.round_trips, 5 * w.http.requests);
}

/// `database-traffic-not-decoded`: the recorded `/db` profile has sqlx frames on its stacks.
/// With its wire capture (PostgreSQL round trips decoded) nothing is said; with the same
/// capture emptied of PostgreSQL (as when the database is reached over TLS) the ranking warns
/// that the database figures are missing.
#[test]
fn driver_frames_without_decoded_traffic_are_flagged() {
    let rules = RuleSet::builtin();
    let mut p = load("all-wire-db");
    assert!(p.wire.as_ref().is_some_and(|w| w.pg.round_trips > 0), "the fixture has a PostgreSQL capture");
    let r = ranking_of(&p, &rules);
    assert!(!r.generic.iter().any(|f| f.id == "database-traffic-not-decoded"), "{:?}", r.generic.iter().map(|f| &f.id).collect::<Vec<_>>());
    let w = p.wire.as_mut().unwrap();
    w.pg = Default::default();
    w.steady = None;
    let r = ranking_of(&p, &rules);
    let f = r.generic.iter().find(|f| f.id == "database-traffic-not-decoded").expect("warning");
    // sqlx frames are on 25-40% of a /db profile's samples (its layer table: the pool and the driver).
    assert!(f.cpu_share > 0.05, "{}", f.title);
    assert!(f.title.contains("no PostgreSQL traffic was decoded"), "{}", f.title);
}

fn ranking_of(p: &Profile, rules: &RuleSet) -> Ranking {
    let opts = RankingOptions { rules, wire: None, base_req_per_s: None, label: "db", closed_loop: None };
    rank(p, None, Bound::Unknown, &opts)
}
