//! Checks the harness itself (not the detectors): the profiler's request count over a
//! profiled load agrees with the app's own `/stats`, and the stacks of `perf script` give the
//! shares `perf report` would.

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

/// `perf script -F pid,ip,sym` as perf 6 prints it (two samples of the app, one of another
/// process, frames leaf first), read back into the shares the live truths compare with.
#[test]
fn perf_script_stacks_give_children_and_self_shares() {
    let text = "\
   4242 
\tffffffff8152f0a1 _copy_to_iter
\tffffffff81530a22 filemap_read
\tffffffff81530b10 vfs_read
\t          34870d field_cases::file_read_per_request
\t          5bcf13 tokio::runtime::scheduler::multi_thread::worker::run

   4242 
\t          34870d field_cases::count_lines
\t          5bcf13 tokio::runtime::scheduler::multi_thread::worker::run

   977 
\tffffffff81530b10 vfs_read
\t          1234 [unknown]

";
    let perf = common::parse_perf_script(text, 4242);
    assert_eq!(perf.stacks.len(), 2, "{perf:?}");
    assert_eq!(perf.stacks[0].first().map(String::as_str), Some("_copy_to_iter"));
    assert_eq!(perf.share_under(&["vfs_read", "do_sys_openat2"]), 0.5);
    // A sample is counted once however many of the names its stack holds.
    assert_eq!(perf.share_under(&["vfs_read", "filemap_read", "worker::run"]), 1.0);
    assert_eq!(perf.leaf_share("_copy_to_iter"), 0.5);
    assert_eq!(perf.leaf_share("filemap_read"), 0.0);
    assert_eq!(common::parse_perf_script(text, 977).share_under(&["vfs_read"]), 1.0);
    assert_eq!(common::parse_perf_script(text, 1).share_under(&["vfs_read"]), 0.0);
}
