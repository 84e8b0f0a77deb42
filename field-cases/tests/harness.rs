//! Checks the harness itself (not the detectors): the profiler's request count over a
//! profiled load agrees with the app's own `/stats`.

mod common;

use common::{profile, skip_unless_root, App};

#[test]
fn ranking_requests_match_the_apps_own_count() {
    if skip_unless_root() {
        return;
    }
    let app = App::start();
    // A warm-up request: the static regex is compiled on the first one.
    assert_eq!(app.get("/control/regex-static").0, 200);
    let p = profile(&app, "/control/regex-static", 5, &[]);
    let requests = p.ranking["requests"].as_u64().unwrap_or_else(|| panic!("ranking.json has no requests: {}", p.ranking));
    let served = p.served;
    assert!(served > 1000, "the app served only {served} requests in 5 s; wrk:\n{}", p.wrk.output);
    // wrk counts what completed; the app counts what it started: they differ by at most the
    // requests in flight when wrk stopped (8 connections).
    assert!(p.wrk.requests.abs_diff(served) <= 16, "wrk {} vs /stats {served}", p.wrk.requests);
    let ratio = requests as f64 / served as f64;
    println!(
        "ranking requests {requests} ({:?}), /stats {served}, wrk {} ({:.0} req/s): ratio {ratio:.3}",
        p.ranking["requests_source"], p.wrk.requests, p.wrk.req_per_s
    );
    assert!((0.9..=1.1).contains(&ratio), "ranking.json requests {requests} vs the app's /stats {served} (ratio {ratio:.3})");
}
