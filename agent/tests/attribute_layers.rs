//! The layer table on a hand-made profile (tests/data/attribute/layers.profile.json) whose
//! values were computed by hand:
//!
//! 100 samples at 100 Hz (period 10,000 µs), 500 requests, so 1 sample = 20 µs per request.
//!
//! | stack (root first)                                   | samples | self (owner of the innermost owned frame) |
//! |------------------------------------------------------|--------:|-----------------|
//! | start_thread; tokio run; hyper; Auth::call; jwt; sha2 |  40 (30 + 10, two threads) | crypto (sha2 via its file path) |
//! | start_thread; tokio run; hyper; Auth::call; mi_malloc |  10 | alloc |
//! | start_thread; tokio run; hyper; serde_json           |  20 | serde_json |
//! | start_thread; tokio run; hyper; __x64_sys_sendto [k] |  20 | kernel net |
//! | start_thread; tokio run; hyper; myapp::util::checksum |   8 | the crate `myapp` (no rule claims it; never hyper below it) |
//! | [unknown] in libfoo.so (truncated)                   |   2 | the library `libfoo.so` |
//!
//! Threads 101 and 102 are tokio workers (`tokio run` is `multi_thread::worker::run`); 103 has
//! only the truncated stack.

use std::path::PathBuf;

use profiler::attribute::layers::UNATTRIBUTED;
use profiler::attribute::{rank, Attribution, Bound, RankingOptions, RuleSet};
use profiler::profile::Profile;

fn data(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/attribute").join(name)
}

fn fixture() -> (Profile, RuleSet) {
    let p = profiler::profile::json::read(&data("layers.profile.json")).unwrap();
    let rules = RuleSet::builtin_with_files(&[data("layers.rules.toml")]).unwrap();
    (p, rules)
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() < 1e-9
}

#[test]
fn self_and_total_by_hand() {
    let (p, rules) = fixture();
    let attr = Attribution::new(&p, &rules, Some(500));
    assert_eq!(attr.samples, 100);
    assert_eq!(attr.truncated_samples, 2);
    assert!(close(attr.period_us.unwrap(), 10_000.0));
    let table = attr.layer_table(&p);
    let rows: Vec<(&str, u64, u64)> = table.iter().map(|r| (r.layer.as_str(), r.self_samples, r.total_samples)).collect();
    assert_eq!(
        rows,
        vec![
            ("crypto", 40, 40),
            ("kernel net", 20, 20),
            ("serde_json", 20, 20),
            ("alloc", 10, 10),
            ("myapp", 8, 8),
            ("libfoo.so", 2, 2),
            ("hyper", 0, 98),
            ("tokio scheduler", 0, 98),
            ("auth", 0, 50),
            ("jsonwebtoken", 0, 40),
        ]
    );
    assert!(table.iter().all(|r| r.layer != UNATTRIBUTED));
    let myapp = table.iter().find(|r| r.layer == "myapp").unwrap();
    // `myapp` is the app's own crate: the profile's process runs the executable `myapp`.
    assert_eq!(myapp.category, profiler::attribute::layers::APP_CATEGORY);
    // Threads 101 and 102 have tokio's worker loop on their stacks; 103 has only the truncated
    // `[unknown]` stack, so its role is not known from its stacks.
    let role = |tid: u32| attr.role_names[attr.thread_roles[&(100, tid)]].as_str();
    assert_eq!((role(101), role(102), role(103)), ("runtime worker", "runtime worker", "other"));
    // Self samples partition the profile; totals do not.
    assert_eq!(table.iter().map(|r| r.self_samples).sum::<u64>(), 100);
}

#[test]
fn shares_errors_and_us_per_request_by_hand() {
    let (p, rules) = fixture();
    let attr = Attribution::new(&p, &rules, Some(500));
    let table = attr.layer_table(&p);
    let jwt = table.iter().find(|r| r.layer == "crypto").unwrap();
    assert!(close(jwt.self_share, 0.40));
    // sqrt(0.4 × 0.6 / 100)
    assert!(close(jwt.self_share_se, 0.048_989_794_855_663_56), "{}", jwt.self_share_se);
    // 40 samples × 10,000 µs / 500 requests
    assert!(close(jwt.self_us_per_request.unwrap(), 800.0));
    let auth = table.iter().find(|r| r.layer == "auth").unwrap();
    assert_eq!(auth.category, "app");
    assert!(close(auth.total_share, 0.50));
    assert!(close(auth.total_share_se, 0.05));
    assert!(close(auth.total_us_per_request.unwrap(), 1000.0));
    assert!(close(auth.self_us_per_request.unwrap(), 0.0));
    let hyper = table.iter().find(|r| r.layer == "hyper").unwrap();
    assert!(close(hyper.total_us_per_request.unwrap(), 1960.0));
    // Without a request count there are no per-request figures, shares stay.
    let no_req = Attribution::new(&p, &rules, None).layer_table(&p);
    assert!(no_req.iter().all(|r| r.self_us_per_request.is_none() && r.total_us_per_request.is_none()));
    assert!(close(no_req[0].self_share, 0.40));
}

#[test]
fn without_app_rules_the_auth_layer_is_unknown_code() {
    let (p, _) = fixture();
    let rules = RuleSet::builtin();
    let attr = Attribution::new(&p, &rules, Some(500));
    let table = attr.layer_table(&p);
    assert!(table.iter().all(|r| r.layer != "auth"));
    // The alloc stack's innermost match is still alloc; Auth::call is simply not a layer.
    assert_eq!(table.iter().find(|r| r.layer == "alloc").unwrap().self_samples, 10);
}

#[test]
fn generic_findings_by_hand() {
    let (p, rules) = fixture();
    let opts = RankingOptions { rules: &rules, wire: None, base_req_per_s: None, label: "fixture", closed_loop: None };
    let r = rank(&p, Some(500), Bound::Unknown, &opts);
    // The one named cost: the JWT decode (sha2 in the crypto layer below it) runs 40 samples × 10,000 µs / 500
    // requests = 800 µs per request on the runtime's workers, above the 500 µs of
    // long-cpu-on-worker even at its lower bound (40 - 2·√40 = 27.4 samples = 548 µs).
    let ids: Vec<&str> = r.costs.iter().map(|c| c.finding.id.as_str()).collect();
    assert_eq!(ids, vec!["long-cpu-on-worker"]);
    let long = &r.costs[0].finding;
    assert_eq!(long.samples, 40);
    assert!(close(long.cpu_us_per_request.unwrap(), 800.0));
    assert_eq!(long.samples_by_role.get("runtime worker"), Some(&40));
    // Both jsonwebtoken (the decode the app called) and crypto (the sha2 it ran) hold all 40
    // samples: the outermost, jsonwebtoken, names the work.
    assert!(long.title.starts_with("`jsonwebtoken` runs 800 µs"), "{}", long.title);
    let hottest = r.generic.iter().find(|g| g.id == "hottest-code").unwrap();
    assert_eq!(hottest.owner.as_deref(), Some("crypto"));
    let owners: Vec<(&str, u64)> = hottest.frames.iter().map(|f| (f.frame.as_str(), f.samples)).collect();
    assert_eq!(owners[..3], [("crypto", 40), ("kernel net", 20), ("serde_json", 20)]);
    let hot = r.generic.iter().find(|g| g.id == "hot-functions").unwrap();
    let frames: Vec<(&str, u64)> = hot.frames.iter().map(|f| (f.frame.as_str(), f.samples)).collect();
    assert_eq!(frames, vec![("myapp::util::checksum", 8), ("[unknown]", 2)]);
    let alloc = r.generic.iter().find(|g| g.id == "allocation").unwrap();
    assert_eq!(alloc.samples, 10);
    assert!(close(alloc.cpu_us_per_request.unwrap(), 200.0));
    let trunc = r.generic.iter().find(|g| g.id == "truncated-stacks").unwrap();
    assert_eq!(trunc.samples, 2);
    assert!(close(trunc.cpu_share, 0.02));
    assert_eq!(r.syscalls_per_request, vec![("recvfrom".to_string(), 6.0), ("sendto".to_string(), 3.0)]);
    // 100 samples × 10,000 µs / 500 requests
    assert!(close(r.cpu_us_per_request.unwrap(), 2000.0));
    assert!(close(r.sampled_cpu_us.unwrap(), 1_000_000.0));
    assert!(close(r.measured_cpu_us.unwrap(), 1_000_000.0));
    assert_eq!(r.requests_source.as_deref(), Some("given"));
}
