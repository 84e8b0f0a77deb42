//! The profiler's named costs on the field-cases routes, against `expected.toml`: each case's
//! finding fires on its route with its per-request figures within 25% of the instrument
//! outside the profiler (`[[case.compare]]`: perf, perf stat tracepoints, strace; a share of
//! samples also within 3 of its standard errors; a share that follows the machine is measured by
//! perf during the profile), and stays silent on its control; the `silent` ids fire on neither.
//! Syscall counts are taken with `--syscalls-duty 100` (every call counted, as perf stat counts
//! them) unless a case says otherwise (`attach`).

mod common;

use common::{profile, profile_routes, skip_unless_root, App};
use serde::Deserialize;
use std::time::Duration;

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
    /// `profiler attach` options of both profiles; default: every syscall counted
    /// (`--syscalls-duty 100`), as perf stat counts them.
    #[serde(default = "every_syscall")]
    attach: Vec<String>,
    /// The finding's predicted gain against the control's throughput over the case's, both
    /// measured without the agent in alternating wrk runs ([`alternating_req_per_s`]): `[lo,
    /// hi]` bounds the prediction over that measured gain (a person checked both figures, see
    /// `expected.toml`).
    #[serde(default)]
    gain_over_measured: Option<[f64; 2]>,
}

fn every_syscall() -> Vec<String> {
    vec!["--syscalls-duty".into(), "100".into()]
}

fn yes() -> bool {
    true
}

#[derive(Debug, Deserialize)]
struct Truth {
    route: String,
    figure: String,
    /// The instrument's figure; with `perf_children` or `perf_self`, the one of the last hand
    /// measurement, for reference: the test measures its own.
    value: f64,
    /// Measured by `perf` during the profile ([`common::profile_with_perf`]) instead of taken
    /// from `value`: the share of the app's samples with a function whose name contains one of these on the
    /// stack (each sample counted once).
    #[serde(default)]
    perf_children: Vec<String>,
    /// Measured by `perf` on the spot: the share of the app's samples whose leaf frame is the
    /// function of exactly this name.
    #[serde(default)]
    perf_self: Option<String>,
}

impl Truth {
    /// The figure to compare with and its standard error: `value` and 0, or perf's share for a
    /// truth measured on the spot and that share's binomial standard error over perf's samples.
    fn measured(&self, perf: Option<&common::PerfStacks>) -> (f64, f64) {
        let Some(perf) = perf.filter(|_| self.live()) else { return (self.value, 0.0) };
        let got = self.perf_reading(perf);
        let n = perf.stacks.len() as f64;
        let se = (got * (1.0 - got) / n).sqrt();
        println!("  perf on this machine, during the profile: {} = {got:.4} ± {se:.4} ({n} samples; the last hand measurement: {})", self.figure, self.value);
        (got, se)
    }

    /// This truth's figure in perf's stacks.
    fn perf_reading(&self, perf: &common::PerfStacks) -> f64 {
        if let Some(name) = &self.perf_self {
            return perf.leaf_share(name);
        }
        let names: Vec<&str> = self.perf_children.iter().map(String::as_str).collect();
        let share = perf.share_under(&names);
        // A truth that matches nothing is a typo or a lost unwinding, not a share of 0.
        assert!(share > 0.0, "perf saw no function named like {names:?} on {}", self.route);
        share
    }

    fn live(&self) -> bool {
        !self.perf_children.is_empty() || self.perf_self.is_some()
    }
}

/// A figure of the finding (`cpu_share`, `counts.NAME` or `counts.A / counts.B`) and the truth
/// figure it is checked against, on the case's route.
///
/// With `leave_out_leaf` (a regex on the leaf frame's function), both shares are taken over
/// the samples whose leaf frame does not match, the profile's from its own stacks and the
/// instrument's from `leaf_truth`. For leaves whose share follows the machine, not the code:
/// - a timer interrupt that falls in an IRQ-off section is taken where interrupts come back on
///   (`_raw_spin_unlock_irqrestore`), and how many samples land there depends on the sampler's
///   timer (on the DNS route, 22% of perf's samples and 34% of the agent's, with the shares of
///   the other functions alike once it is left out);
/// - the zeroing of memory (`__memset_*`, the kernel's `clear_page_*`) follows the heap's
///   state: on the brotli route it took 26-36% of perf's samples from run to run, which moved
///   the zopfli share from 0.60 to 0.72, while the zopfli share of the rest stayed 0.93-0.94.
#[derive(Debug, Deserialize)]
struct Compare {
    truth: String,
    ranking: String,
    #[serde(default)]
    leave_out_leaf: Option<String>,
    #[serde(default)]
    leaf_truth: Option<String>,
    /// The relative tolerance of this comparison when it is not [`TOLERANCE`]: a share near 1
    /// needs a tighter one, or the comparison could not fail.
    #[serde(default)]
    tolerance: Option<f64>,
}

/// The share of the profile's on-CPU samples whose leaf frame's function matches the regex
/// `leaf`.
fn leaf_share(profile: &serde_json::Value, leaf: &str) -> f64 {
    let leaf = regex::Regex::new(leaf).expect("leave_out_leaf is a regex");
    let (mut all, mut at) = (0u64, 0u64);
    for c in profile["on_cpu"].as_array().expect("on_cpu") {
        let n = c["count"].as_u64().unwrap();
        all += n;
        let frames = profile["stacks"][c["stack"].as_u64().unwrap() as usize]["frames"].as_array().unwrap();
        if frames.last().and_then(|f| profile["frames"][f.as_u64().unwrap() as usize]["function"].as_str()).is_some_and(|f| leaf.is_match(f)) {
            at += n;
        }
    }
    at as f64 / all.max(1) as f64
}

/// The tolerance of every comparison: 25% of the instrument's figure.
const TOLERANCE: f64 = 0.25;

fn expected() -> Expected {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("expected.toml");
    toml::from_str(&std::fs::read_to_string(&path).expect("expected.toml")).expect("expected.toml parses")
}

/// The generic finding `id` of a ranking, if it is there.
fn generic<'a>(ranking: &'a serde_json::Value, id: &str) -> Option<&'a serde_json::Value> {
    ranking["generic"].as_array()?.iter().find(|g| g["id"] == id)
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

/// Seconds of `perf record` for a truth measured on the spot, inside the profile's
/// [`PROFILE_SECS`] of load (about 500 samples at the agent's 99 Hz).
const PERF_SECS: u64 = 5;

fn check(route: &str) {
    check_on(route, None);
}

/// Rounds of [`alternating_req_per_s`], each a run of [`ALTERNATING_SECS`] on either route.
const ALTERNATING_ROUNDS: u32 = 3;

/// Seconds of one run of [`alternating_req_per_s`].
const ALTERNATING_SECS: u64 = 2;

/// The throughput of `case` and of `control` on `app` without the agent, req/s: wrk -c8
/// (as the profiles) on each in turn, [`ALTERNATING_ROUNDS`] times; the mean of each route's
/// rounds.
/// Alternating keeps the machine's drift out of the ratio: one profiled run of each, back to
/// back, once measured a gain of +62% where the model predicted +91% and other runs measure
/// +93-97%.
fn alternating_req_per_s(app: &App, case: &str, control: &str) -> (f64, f64) {
    let mut sums = (0.0, 0.0);
    for _ in 0..ALTERNATING_ROUNDS {
        sums.0 += common::wrk(&app.url(case), ALTERNATING_SECS, 8).req_per_s;
        sums.1 += common::wrk(&app.url(control), ALTERNATING_SECS, 8).req_per_s;
    }
    (sums.0 / f64::from(ALTERNATING_ROUNDS), sums.1 / f64::from(ALTERNATING_ROUNDS))
}

/// [`check`] on `bin` (a build of field-cases, e.g. one without frame pointers; default the
/// workspace's) with the two profiles, case and control, when the case reproduced.
fn check_on(route: &str, bin: Option<&std::path::Path>) -> Option<(common::Profiled, common::Profiled)> {
    if skip_unless_root() {
        return None;
    }
    let exp = expected();
    let case = exp.case.iter().find(|c| c.route == route).unwrap_or_else(|| panic!("{route} not in expected.toml"));
    let live = case.truth.iter().any(Truth::live);
    if live && test_support::skip_unless(&[test_support::Need::Perf]) {
        return None;
    }
    let app = match bin {
        Some(bin) => App::start_binary(bin),
        None => App::start(),
    };
    let extra: Vec<&str> = case.attach.iter().map(String::as_str).collect();
    // A warm-up request each: lazily built state (the static regex, the logger thread).
    assert_eq!(app.get(&case.route).0, 200);
    assert_eq!(app.get(&case.control).0, 200);
    let (on, perf) = if live {
        let (on, perf) = common::profile_with_perf(&app, &case.route, PROFILE_SECS, &extra, PERF_SECS);
        (on, Some(perf))
    } else {
        (profile(&app, &case.route, PROFILE_SECS, &extra), None)
    };
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
        return None;
    }
    let finding = on.ranking["costs"].as_array().unwrap().iter().find(|c| c["id"] == case.finding.as_str()).unwrap();
    println!("  {}", finding["title"]);
    if let Some([lo, hi]) = case.gain_over_measured {
        let predicted = finding["gain"]["gain_pct"].as_f64().expect("a predicted gain");
        let (case_x, control_x) = alternating_req_per_s(&app, &case.route, &case.control);
        let measured = 100.0 * (control_x / case_x - 1.0);
        println!("  bound: {}; gain: {}", on.ranking["bound"], finding["gain"]["formula"]);
        println!(
            "  predicted gain {predicted:+.1}%, measured {measured:+.1}% unprofiled ({case_x:.0} -> {control_x:.0} req/s; profiled {:.0} -> {:.0}): {:.2}x",
            on.wrk.req_per_s,
            off.wrk.req_per_s,
            predicted / measured
        );
        assert!(measured > 0.0 && (lo..=hi).contains(&(predicted / measured)), "{}: predicted {predicted:+.1}% against {measured:+.1}% measured, not within {lo}-{hi}x", case.route);
    }
    for c in &case.compare {
        let truth = case.truth.iter().find(|t| t.figure == c.truth && t.route == case.route).unwrap_or_else(|| panic!("no truth {} on {}", c.truth, case.route));
        let mut got = figure(finding, &c.ranking).unwrap_or_else(|| panic!("{}: no {} in {finding}", case.finding, c.ranking));
        let (mut expected, mut truth_se) = truth.measured(perf.as_ref());
        // A share carries the profile's own sampling error (and perf's, for a truth perf
        // measured during the profile): 25% of a 10% share is about 2 standard errors of 600
        // samples, so a share may also be off by 3 standard errors of the difference.
        let mut share_se = finding["cpu_share_se"].as_f64().unwrap_or(0.0);
        if let (Some(leaf), Some(leaf_truth)) = (&c.leave_out_leaf, &c.leaf_truth) {
            let profile: serde_json::Value = on.profile_json();
            let ours = leaf_share(&profile, leaf);
            let theirs = case.truth.iter().find(|t| &t.figure == leaf_truth && t.route == case.route).unwrap_or_else(|| panic!("no truth {leaf_truth}")).measured(perf.as_ref()).0;
            println!("  leaving out the samples at `{leaf}`: {:.1}% of the profile's, {:.1}% of the instrument's", 100.0 * ours, 100.0 * theirs);
            got /= 1.0 - ours;
            share_se /= 1.0 - ours;
            expected /= 1.0 - theirs;
            truth_se /= 1.0 - theirs;
        }
        let sampling = if c.ranking == "cpu_share" { 3.0 * share_se.hypot(truth_se) } else { 0.0 };
        let truth = Truth { route: truth.route.clone(), figure: truth.figure.clone(), value: expected, perf_children: Vec::new(), perf_self: None };
        let allowed = (c.tolerance.unwrap_or(TOLERANCE) * truth.value.abs()).max(sampling);
        println!("  {} = {got:.4} against {} = {} ({:+.1}%, allowed ±{allowed:.4})", c.ranking, c.truth, truth.value, 100.0 * (got - truth.value) / truth.value);
        assert!((got - truth.value).abs() <= allowed, "{}: {} = {got:.4}, the instrument's {} = {} (off by more than {allowed:.4}: the tolerance of it, or 3 standard errors of the share)", case.route, c.ranking, c.truth, truth.value);
    }
    Some((on, off))
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

/// Off-CPU waits per request (from the profile's off-CPU stacks) whose stack carries the
/// kernel's mark of a contended lock's futex wait, and the requests the wire counted.
fn marked_lock_waits_per_request(p: &common::Profiled) -> f64 {
    let profile = p.profile_json();
    let mark = profile["frames"].as_array().expect("frames").iter().position(|f| f["function"] == profiler::symbolize::CONTENDED_LOCK_WAIT);
    let waits: u64 = profile["off_cpu"]
        .as_array()
        .expect("off_cpu")
        .iter()
        .filter(|c| mark.is_some_and(|m| profile["stacks"][c["stack"].as_u64().unwrap() as usize]["frames"].as_array().unwrap().iter().any(|f| f.as_u64() == Some(m as u64))))
        .map(|c| c["count"].as_u64().unwrap())
        .sum();
    let requests = p.ranking["requests"].as_f64().expect("the ranking's request count");
    waits as f64 / requests
}

/// field-cases built without frame pointers (as a user's service is by default) into the
/// `nofp` folder beside the workspace's release build, while no other test's app runs (the
/// build takes both CPUs for up to two minutes; a second call finds it built).
fn field_cases_without_frame_pointers() -> std::path::PathBuf {
    let target = common::release_bin("field-cases").parent().and_then(std::path::Path::parent).expect("target dir").join("nofp");
    common::alone(|| test_support::build_without_frame_pointers("field-cases", &target))
}

/// [`lock_held_across_a_blocking_call`] on field-cases built as a user's service is by
/// default, without frame pointers, where a lock's futex wait and a condition variable's look
/// alike from their user stacks. The kernel marks the lock's waits from the futex call's
/// arguments: on the case, marked waits per request within 25% of perf's count of the app's
/// FUTEX_WAIT calls per request (1.0: the other worker waits once per request); on the
/// control, where the same sleep holds no lock, at most 0.01 (perf: 0.00052 futex waits per
/// request, of any kind).
#[test]
fn lock_held_across_a_blocking_call_without_frame_pointers() {
    if skip_unless_root() {
        return;
    }
    let bin = field_cases_without_frame_pointers();
    let route = "/case/lock-across-sleep";
    let Some((on, off)) = check_on(route, Some(&bin)) else { return };
    let truth = expected().case.iter().flat_map(|c| c.truth.iter()).find(|t| t.route == route && t.figure == "syscalls.futex_wait").expect("perf's futex waits").value;
    let (case, control) = (marked_lock_waits_per_request(&on), marked_lock_waits_per_request(&off));
    println!("  marked lock waits per request: {case:.3} on the case (perf: {truth} FUTEX_WAIT calls), {control:.4} on the control");
    assert!((case - truth).abs() <= TOLERANCE * truth, "{case:.3} marked lock waits per request against perf's {truth}");
    assert!(control <= 0.01, "{control:.4} marked lock waits per request on the control");
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

/// Load of [`windowed_syscall_counts_per_request`], s.
const WINDOWED_PROFILE_SECS: u64 = 12;

/// Syscalls counted in the default windows (the first 25% of each second) give the per-request
/// figures perf stat counts with every call seen: within 2% on a route of 2 reads per request,
/// and within 8% on a route of 16,461 one-byte reads per request, which every traced call
/// slows (calls per second inside the windows fall: a scaling by time alone read 9,634-10,773,
/// 36% short). The scale is the share of the requests' work done inside the windows
/// (`syscalls_scaled_by`; these requests are served in 25-30 ms, 98-123 ms by wrk with its 8
/// connections queued at the 2 workers, so each weighs its time inside at the windows' fitted
/// slow-down, `profiler::wire::spread`): 15,638-16,608 in eight runs of
/// [`WINDOWED_PROFILE_SECS`] against 250 ms windows. Counting each request at its response read
/// 15,356-16,765 in nine runs; on the runs that read 3-5% low
/// both weightings agree within 1%, so that shortfall is not in the share (nor in lost
/// `sys_exit`s: at most 3 a run), and what it is remains open; hence 8%, which scaling by time
/// alone misses by far. Spreading each request evenly over its time read
/// 14,728-15,444 (6 s of load): a request that straddles an edge runs slower inside the window,
/// so its time there overstated its calls there.
#[test]
fn windowed_syscall_counts_per_request() {
    if skip_unless_root() {
        return;
    }
    let exp = expected();
    let app = App::start();
    for route in ["/control/json-from-slice", "/case/json-from-reader"] {
        let truth = exp.case.iter().flat_map(|c| &c.truth).find(|t| t.route == route && t.figure == "syscalls.read").unwrap_or_else(|| panic!("no syscalls.read truth on {route}"));
        assert_eq!(app.get(route).0, 200);
        let p = profile(&app, route, WINDOWED_PROFILE_SECS, &[]);
        let r = &p.ranking;
        let got = r["syscalls_per_request"].as_array().and_then(|v| v.iter().find(|e| e[0] == "read")).and_then(|e| e[1].as_f64()).unwrap_or_else(|| panic!("no read per request on {route}: {}", r["syscalls_per_request"]));
        // What scaling by time alone gives, for the record: the calls counted times the run over
        // the windows' time, per request.
        let profile: serde_json::Value = p.profile_json();
        let meta = &profile["meta"];
        let counted = profile["syscalls"].as_array().and_then(|v| v.iter().find(|s| s["name"] == "read")).and_then(|s| s["count"].as_f64()).unwrap_or(0.0);
        let by_time = counted * meta["duration_ns"].as_f64().unwrap_or(0.0) / meta["syscall_windows"]["traced_ns"].as_f64().unwrap_or(f64::NAN) / r["requests"].as_f64().unwrap_or(f64::NAN);
        println!(
            "{route}: {got:.4} reads per request (scaled by {}, share {:.4}); by time alone {by_time:.4}; perf stat {}; wrk: {:.1} req/s, mean latency {:.2} ms",
            r["syscalls_scaled_by"],
            r["syscalls_traced_share"].as_f64().unwrap_or(1.0),
            truth.value,
            p.wrk.req_per_s,
            p.wrk.mean_latency_ms
        );
        assert_eq!(r["syscalls_scaled_by"], "requests", "{route}: the windows' share of the requests was not used");
        let tolerance = if truth.value > 100.0 { 0.08 } else { 0.02 };
        assert!((got - truth.value).abs() <= tolerance * truth.value, "{route}: {got:.4} reads per request from windows, perf stat {} (more than {:.0}% apart)", truth.value, 100.0 * tolerance);
    }
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
fn pretty_printed_json_responses() {
    check("/case/pretty-json");
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

/// A PostgreSQL server with `pg_stat_statements`, the seeded database `fc` and the app on it:
/// (server, connection string, app).
fn app_with_statement_counts() -> (bench::pg::TempPostgres, String, App) {
    // initdb, the server's start and the seeding take a CPU for seconds, which another test's
    // measured app would lose: they run while no app runs.
    let (pg, url) = common::alone(|| {
        let pg = bench::pg::TempPostgres::start_with(&[("shared_preload_libraries", "pg_stat_statements")]).expect("postgres");
        let url = pg.create_seeded_db("fc").expect("database");
        pg.psql("fc", "CREATE EXTENSION pg_stat_statements").expect("extension");
        (pg, url)
    });
    let app = App::start_with_db(&url);
    (pg, url, app)
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
    let (pg, url, app) = app_with_statement_counts();
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

/// A statement prepared for each execution by tokio-postgres (`query` with SQL text: Parse,
/// Bind/Execute, then a Close the driver does not wait for, on connections that pipeline the
/// queries of concurrent requests): `prepare-per-execution` fires with its prepare-only and
/// close-only round trips at 2 per execution that `pg_stat_statements` counted, the endpoint's
/// round trips are 3 per execution (1 on the control, whose statement was prepared once per
/// connection at start-up), and the endpoint's database time is within its latency: a round
/// trip sent before its connection's previous answer waits only from that answer. Silent on
/// the control.
#[test]
fn prepare_per_execution_with_tokio_postgres() {
    if skip_unless_root() {
        return;
    }
    let (pg, _url, app) = app_with_statement_counts();
    let mut profiled = Vec::new();
    let mut predicted = f64::NAN;
    for (route, fires) in [("/case/prepare-per-execution", true), ("/control/prepared-once", false)] {
        common::wrk(&app.url(route), 2, 8);
        pg.psql("fc", "SELECT pg_stat_statements_reset()").expect("reset");
        let before = app.served(route);
        let p = profile(&app, route, PROFILE_SECS, &[]);
        let served = app.served(route) - before;
        let calls = statement_calls(&pg, "fc", "SELECT name, price_cents FROM fc_items WHERE id = %");
        let truth = calls as f64 / served as f64;
        let got = ids(&p.ranking);
        profiled.push(p.wrk.req_per_s);
        println!("{route}: {got:?} ({:.0} req/s); pg_stat_statements: {calls} calls / {served} requests = {truth:.3}", p.wrk.req_per_s);
        assert!((truth - 1.0).abs() < 0.02, "the route runs its statement once per request: {truth}");
        let endpoint = format!("GET {route}");
        let row = p.ranking["endpoints"].as_array().and_then(|a| a.iter().find(|e| e["endpoint"] == endpoint.as_str())).unwrap_or_else(|| panic!("{endpoint} not in the endpoint breakdown: {}", p.ranking["endpoints"]));
        println!("  endpoint breakdown: {row}");
        let rts = row["db_round_trips_per_request"].as_f64().unwrap();
        let per_execution = if fires { 3.0 } else { 1.0 };
        assert!((rts - per_execution * truth).abs() <= 0.03 * per_execution * truth, "{endpoint}: {rts} round trips per request, against {per_execution} x {truth} executions");
        let (db_us, latency_us) = (row["db_us_per_request"].as_f64().unwrap(), row["latency_us"].as_f64().unwrap());
        assert!(db_us <= latency_us, "{endpoint}: {db_us} µs of round trips per request, beyond its {latency_us} µs latency");
        if !fires {
            assert!(!got.contains(&"prepare-per-execution".to_string()), "fired on the control {route}: {got:?}");
            continue;
        }
        let f = p.ranking["costs"].as_array().unwrap().iter().find(|c| c["id"] == "prepare-per-execution").unwrap_or_else(|| panic!("{route}: prepare-per-execution did not fire: {got:?}"));
        let extra = f["counts_per_request"]["round_trips"].as_f64().unwrap();
        println!("  {}\n  evidence: {}\n  gain: {}\n  closed loop: {}", f["title"], f["evidence"], f["gain"], p.ranking["closed_loop"]);
        assert!((extra - 2.0 * truth).abs() <= 0.03 * 2.0 * truth, "{extra} prepare-only and close-only round trips per request, against 2 x {truth} executions");
        predicted = f["gain"]["gain_pct"].as_f64().expect("a predicted gain");
    }
    // The gain measured without the agent, case and control in turn.
    let (case_x, control_x) = alternating_req_per_s(&app, "/case/prepare-per-execution", "/control/prepared-once");
    let measured = 100.0 * (control_x / case_x - 1.0);
    println!(
        "  predicted gain {predicted:+.1}%, measured {measured:+.1}% unprofiled ({case_x:.0} -> {control_x:.0} req/s; profiled {:.0} -> {:.0}): {:.2}x",
        profiled[0],
        profiled[1],
        predicted / measured
    );
    // The closed loop (the app pinned to one CPU, PostgreSQL and wrk on both): predicted
    // +55.5% against +80.1% measured (4,306 -> 7,755 req/s; 0.69x), where the served latency
    // alone had read +92.8% against +156% to +178% by hand (0.52-0.59x). The model leaves in
    // the delay the waits for a CPU at each of a round trip's hand-offs, which go with it.
    assert!(measured > 0.0 && (0.4..=1.5).contains(&(predicted / measured)), "prepare-per-execution: predicted {predicted:+.1}% against {measured:+.1}% measured, not within 0.4-1.5x");
    drop(app);
    pg.stop().expect("stop postgres");
}

/// Sessions PostgreSQL has established to database `db` (`pg_stat_database.sessions`, counted
/// by the server for every connection it accepted), read from another database so that the
/// reading's own session is not one of them.
fn sessions(pg: &bench::pg::TempPostgres, db: &str) -> u64 {
    let out = pg.psql("postgres", &format!("SELECT sessions FROM pg_stat_database WHERE datname = '{db}'")).expect("pg_stat_database");
    out.trim().parse().unwrap_or_else(|_| panic!("pg_stat_database answered {out:?}"))
}

/// A database connection opened for every request (TCP, start-up, SCRAM authentication):
/// `connection-per-request` fires with connect calls per request within 10% of the sessions
/// PostgreSQL established per request served (`pg_stat_database.sessions`, 1 by the app's
/// code), names the endpoint that pays it, and stays silent on the same statement run on the
/// pool's connections. Syscalls are counted in the default windows, as a user's attach does.
#[test]
fn connection_per_request() {
    if skip_unless_root() {
        return;
    }
    let (pg, _url, app) = app_with_statement_counts();
    let connect_stats = || {
        let (status, body) = app.get("/stats/connect");
        assert_eq!(status, 200, "/stats/connect answered {status}");
        let v: serde_json::Value = serde_json::from_slice(&body).expect("/stats/connect is JSON");
        (v["connections"].as_u64().expect("connections"), v["connect_ns"].as_u64().expect("connect_ns"))
    };
    // The case's req/s and predicted gain, printed beside what the control (the pool's
    // connections) measured: a figure for a person, not an assertion (timing).
    let mut case: Option<(f64, f64)> = None;
    for (route, fires) in [("/case/connect-per-request", true), ("/control/pooled-connection", false)] {
        common::wrk(&app.url(route), 2, 8);
        let order_total = "%fc_order_items o JOIN fc_items%";
        let (sessions_before, before, connect_before, calls_before) = (sessions(&pg, "fc"), app.served(route), connect_stats(), statement_calls(&pg, "fc", order_total));
        let p = profile(&app, route, PROFILE_SECS, &[]);
        let served = app.served(route) - before;
        let connect_after = connect_stats();
        let calls = (statement_calls(&pg, "fc", order_total) - calls_before) as f64 / served as f64;
        // The server counts a session when its backend reports its statistics, at the latest
        // when it exits: the last connections of the load closed with it.
        std::thread::sleep(Duration::from_millis(1500));
        let opened = sessions(&pg, "fc") - sessions_before;
        let truth = opened as f64 / served as f64;
        let got = ids(&p.ranking);
        println!("{route}: {got:?}; pg_stat_database: {opened} sessions / {served} requests = {truth:.3}");
        if !fires {
            if let Some((req_per_s, predicted)) = case {
                println!("  reusing the pool's connections: predicted {predicted:+.1}%, measured {:+.1}% (wrk, one run each)", 100.0 * (p.wrk.req_per_s / req_per_s - 1.0));
            }
            assert!(truth < 0.01, "the control opened {opened} connections for {served} requests");
            assert!(!got.contains(&"connection-per-request".to_string()), "fired on the control {route}: {got:?}");
            continue;
        }
        assert!((truth - 1.0).abs() <= 0.02, "the app opens one connection per request: {truth:.3}");
        let f = p.ranking["costs"].as_array().unwrap().iter().find(|c| c["id"] == "connection-per-request").unwrap_or_else(|| panic!("{route}: connection-per-request did not fire: {got:?}"));
        let connects = f["counts_per_request"]["syscalls.connect"].as_f64().expect("connect calls per request");
        println!("  {}\n  evidence: {}\n  connect calls per request {connects:.3} against pg_stat_database's {truth:.3}", f["title"].as_str().unwrap_or_default(), f["evidence"]);
        assert!((connects - truth).abs() <= 0.10 * truth, "{connects:.3} connect calls per request against {truth:.3} sessions per request");
        // The set-up time: the wire's, from the first start-up message to the first
        // ReadyForQuery, against the app's own clock around `connect_with`, which also holds
        // the socket's creation and the TCP handshake before the first message.
        let wire_ms = f["counts_per_request"]["connection_setup_us"].as_f64().expect("set-up µs per request") / f["counts_per_request"]["connection_setups"].as_f64().expect("set-ups per request") / 1e3;
        let app_ms = (connect_after.1 - connect_before.1) as f64 / 1e6 / (connect_after.0 - connect_before.0) as f64;
        println!("  set-up {wire_ms:.3} ms per connection on the wire against {app_ms:.3} ms by the app's clock; gain {}", f["gain"]);
        println!("  bound: {}; throughput {} ({})", p.ranking["bound"], p.ranking["base_req_per_s"], p.ranking["throughput_source"]);
        // The server's CPU per set-up (its backends that exited, and the postmaster's forks):
        // a backend is one thread, so it cannot use more CPU than it lived, about the set-up
        // on the wire plus the rest of the request; the postmaster's accept and fork are a
        // fraction of a millisecond. A fork and an authentication take at least 0.2 ms.
        let server_ms = f["counts_per_request"]["connection_setup_db_cpu_us"].as_f64().expect("the server's CPU of set-ups per request") / f["counts_per_request"]["connection_setups"].as_f64().expect("set-ups per request") / 1e3;
        let rest_ms = p.ranking["endpoints"].as_array().and_then(|e| e.iter().find(|e| e["endpoint"] == format!("GET {route}"))).and_then(|r| r["rest_us_per_request"].as_f64()).unwrap_or(0.0) / 1e3;
        println!("  the server's CPU per set-up: {server_ms:.3} ms (its lifetime about {:.3} ms)", wire_ms + rest_ms);
        assert!(server_ms >= 0.2 && server_ms <= wire_ms + rest_ms + 1.0, "{server_ms:.3} ms of the server's CPU per set-up against {wire_ms:.3} ms of set-up and {rest_ms:.3} ms of the rest");
        assert!(wire_ms <= app_ms && wire_ms >= 0.8 * app_ms, "set-up {wire_ms:.3} ms per connection on the wire against {app_ms:.3} ms by the app's clock");
        // The endpoint's breakdown holds the set-up (joined with each connection's first
        // round trip), not its rest.
        let row = p.ranking["endpoints"].as_array().and_then(|e| e.iter().find(|e| e["endpoint"] == format!("GET {route}"))).expect("the endpoint's row");
        let connect_ms = row["connect_us_per_request"].as_f64().expect("connect µs per request") / 1e3;
        println!("  endpoint: connect {connect_ms:.3} ms, rest {:.3} ms per request", row["rest_us_per_request"].as_f64().unwrap_or(f64::NAN) / 1e3);
        assert!(connect_ms <= app_ms * truth && connect_ms >= 0.8 * app_ms * truth, "{connect_ms:.3} ms of set-up per request in the endpoint's row against {app_ms:.3} ms per connection");
        assert!(generic(&p.ranking, "unexplained-wait").is_none(), "unexplained-wait on {route}: {}", p.ranking["generic"]);
        case = Some((p.wrk.req_per_s, f["gain"]["gain_pct"].as_f64().unwrap_or(f64::NAN)));
        // The statement each request runs on its own connection, which it closes before the
        // response, is joined to the endpoint: executions per request against
        // pg_stat_statements' calls per request served.
        let join = &p.ranking["endpoint_join"];
        let id = join["endpoints"].as_array().and_then(|e| e.iter().position(|x| x == &format!("GET {route}").as_str())).expect("the endpoint in the join");
        let db = join["db"].as_array().and_then(|d| d.iter().find(|d| d["endpoint"] == id)).unwrap_or_else(|| panic!("no database work joined to {route}: {join}"));
        let executions: f64 = db["statements"].as_array().map_or(0.0, |s| s.iter().filter_map(|x| x["executions"].as_f64()).sum());
        let requests = p.ranking["endpoints"].as_array().and_then(|e| e.iter().find(|e| e["endpoint"] == format!("GET {route}"))).and_then(|e| e["requests"].as_f64()).expect("the endpoint's requests");
        println!("  statement executions joined to the endpoint: {:.3} per request against pg_stat_statements' {calls:.3}", executions / requests);
        assert!((executions / requests - calls).abs() <= 0.05 * calls, "{:.3} executions per request joined to {route} against {calls:.3}", executions / requests);
        let endpoints = f["endpoints"].as_array().unwrap_or_else(|| panic!("connection-per-request names no endpoint: {f}"));
        assert_eq!(endpoints[0]["endpoint"], format!("GET {route}"), "{endpoints:?}");
    }
    drop(app);
    pg.stop().expect("stop postgres");
}

/// Time the backends of database `db` spent idle inside a transaction, ms
/// (`pg_stat_database.idle_in_transaction_time`: the server's own clock, from the
/// ReadyForQuery that left a transaction open to the next message it read).
fn idle_in_transaction_ms(pg: &bench::pg::TempPostgres, db: &str) -> f64 {
    let out = pg.psql("postgres", &format!("SELECT idle_in_transaction_time FROM pg_stat_database WHERE datname = '{db}'")).expect("pg_stat_database");
    out.trim().parse().unwrap_or_else(|_| panic!("pg_stat_database answered {out:?}"))
}

/// How long an idle backend may keep its session statistics before it reports them
/// (PostgreSQL's `PGSTAT_IDLE_INTERVAL`, 10 s), and a margin: after a load, the pooled
/// connections' last figures reach `pg_stat_database` within it.
const PG_STATS_IDLE_FLUSH: Duration = Duration::from_secs(12);

/// A transaction held open across a 5 ms wait (`TRANSACTION_WAIT`, a timer standing for a call
/// to another service): `idle-in-transaction` fires with its idle time per request between
/// PostgreSQL's own (`pg_stat_database.idle_in_transaction_time` over the requests served)
/// less the endpoint's round-trip time and PostgreSQL's own (the bound is explained at the
/// assertion), names the endpoint that pays it, and stays silent on the same wait before BEGIN.
#[test]
fn idle_in_transaction() {
    if skip_unless_root() {
        return;
    }
    let (pg, _url, app) = app_with_statement_counts();
    let wait_ms = field_cases::TRANSACTION_WAIT.as_secs_f64() * 1e3;
    // The case's req/s and predicted gain, printed beside what the control (the wait moved out
    // of the transaction) measured: a figure for a person, not an assertion (timing).
    let mut case: Option<(f64, f64)> = None;
    for (route, fires) in [("/case/transaction-across-wait", true), ("/control/wait-before-transaction", false)] {
        common::wrk(&app.url(route), 2, 8);
        std::thread::sleep(PG_STATS_IDLE_FLUSH);
        let (idle_before, before) = (idle_in_transaction_ms(&pg, "fc"), app.served(route));
        let p = profile(&app, route, PROFILE_SECS, &[]);
        let served = app.served(route) - before;
        std::thread::sleep(PG_STATS_IDLE_FLUSH);
        let truth = (idle_in_transaction_ms(&pg, "fc") - idle_before) / served as f64;
        let got = ids(&p.ranking);
        println!(
            "{route}: {got:?}; pg_stat_database: {truth:.3} ms idle in transaction per request over {served} requests; wrk {:.0} req/s, mean latency {:.2} ms",
            p.wrk.req_per_s, p.wrk.mean_latency_ms
        );
        // Inside a transaction the gaps are idle-in-transaction's, not a held checkout's.
        assert!(!got.contains(&"connection-held-idle".to_string()), "connection-held-idle fired on {route}: {got:?}");
        if !fires {
            if let Some((req_per_s, predicted)) = case {
                println!("  moving the wait out of the transaction: predicted {predicted:+.1}%, measured {:+.1}% (wrk, one run each)", 100.0 * (p.wrk.req_per_s / req_per_s - 1.0));
            }
            // Moving the wait out of the transaction leaves its gaps to scheduling: 0.61-0.65
            // ms per request with this load alone on the machine, 1.85 ms with another test
            // loading both CPUs.
            assert!(truth < 0.4 * wait_ms, "the control's transactions sat idle {truth:.3} ms per request");
            assert!(!got.contains(&"idle-in-transaction".to_string()), "fired on the control {route}: {got:?}");
            // The timer each request awaits is neither CPU nor a round trip: the endpoint's
            // rest holds it, and `unexplained-wait` says so.
            let w = generic(&p.ranking, "unexplained-wait").unwrap_or_else(|| panic!("no unexplained-wait on {route}: {}", p.ranking["generic"]));
            let rest = w["counts_per_request"]["rest_us"].as_f64().expect("rest µs") / 1e3;
            println!("  {}", w["title"]);
            assert!(rest >= 0.9 * wait_ms, "{rest:.3} ms of rest per request, less than the {wait_ms} ms timer");
            continue;
        }
        assert!(truth >= 0.9 * wait_ms, "the case's transactions sat idle only {truth:.3} ms per request, less than its {wait_ms} ms wait");
        let f = p.ranking["costs"].as_array().unwrap().iter().find(|c| c["id"] == "idle-in-transaction").unwrap_or_else(|| panic!("{route}: idle-in-transaction did not fire: {got:?}"));
        let idle = f["counts_per_request"]["idle_in_transaction_us"].as_f64().expect("idle µs per request") / 1e3;
        println!("  {}\n  evidence: {}\n  gain: {}\n  {idle:.3} ms per request against pg_stat_database's {truth:.3}", f["title"].as_str().unwrap_or_default(), f["evidence"], f["gain"]);
        // The agent times each gap at the app's socket (answer read to next message written);
        // PostgreSQL from its own send of the answer to its read of the next message, so its
        // figure also holds both deliveries of every message across the gap, each a part of a
        // round trip the agent times. Hence: agent <= server <= agent + the endpoint's round-trip
        // time. Measured: -6.0% and -6.6% on an idle machine, -19% (6.256 vs 7.728 ms) with
        // other tests loading both CPUs.
        let row = p.ranking["endpoints"].as_array().and_then(|e| e.iter().find(|e| e["endpoint"] == format!("GET {route}"))).unwrap_or_else(|| panic!("no endpoint row for {route}"));
        let db = row["db_us_per_request"].as_f64().expect("db µs per request") / 1e3;
        println!("  the endpoint's round trips: {db:.3} ms per request; bound [{idle:.3}, {:.3}] for pg_stat_database's {truth:.3}", idle + db);
        assert!(idle <= 1.03 * truth, "{idle:.3} ms idle in transaction per request, above PostgreSQL's {truth:.3}");
        assert!(truth <= idle + db, "PostgreSQL's {truth:.3} ms idle in transaction per request, beyond the agent's {idle:.3} plus the round trips' {db:.3}");
        assert!(idle >= 0.5 * truth, "{idle:.3} ms idle in transaction per request, less than half PostgreSQL's {truth:.3}");
        case = Some((p.wrk.req_per_s, f["gain"]["gain_pct"].as_f64().unwrap_or(f64::NAN)));
        let endpoints = f["endpoints"].as_array().unwrap_or_else(|| panic!("idle-in-transaction names no endpoint: {f}"));
        assert_eq!(endpoints[0]["endpoint"], format!("GET {route}"), "{endpoints:?}");
    }
    drop(app);
    pg.stop().expect("stop postgres");
}

/// `(checkouts, held ns)` of the app's own clock for `slot` (`case` or `control`) of
/// `/stats/held`: its checkouts' time outside their statements since start.
fn held_by_app(app: &App, slot: &str) -> (u64, u64) {
    let (status, body) = app.get("/stats/held");
    assert_eq!(status, 200, "/stats/held answered {status}");
    let v: serde_json::Value = serde_json::from_slice(&body).expect("/stats/held JSON");
    (v[slot]["checkouts"].as_u64().expect("checkouts"), v[slot]["held_ns"].as_u64().expect("held_ns"))
}

/// CPU time of every thread of `pid` (utime + stime), ns.
fn process_cpu_ns(pid: u32) -> u64 {
    profiler::sys::stat::read(pid).unwrap_or_else(|| panic!("no /proc/{pid}/stat")).cpu_ns()
}

/// A pooled connection kept checked out across a 5 ms wait outside any transaction
/// (`TRANSACTION_WAIT`), between its two reads or between the checkout and its first read:
/// `connection-held-idle` fires on each with its held time per request within 25% of the app's
/// own clock (from `acquire` returning to the drop, less the statements),
/// names the endpoint that pays it, and stays silent on the same wait before the checkout;
/// `idle-in-transaction` fires on neither (no transaction is open). Each endpoint's latency on
/// the wire is checked against wrk's, and the workers' parked share (the findings' gate)
/// against the app's CPU time from /proc.
#[test]
fn connection_held_idle() {
    if skip_unless_root() {
        return;
    }
    let (pg, _url, app) = app_with_statement_counts();
    held_idle_case(&app, true);
    drop(app);
    pg.stop().expect("stop postgres");
}

/// [`connection_held_idle`] on field-cases built as a user's service is by default: without
/// frame pointers. Off-CPU stacks are walked by frame pointers, so the workers' waits no
/// longer show the runtime's park: the gate counts their waits in `epoll_wait` and futexes
/// instead, and must read what /proc says.
#[test]
fn connection_held_idle_without_frame_pointers() {
    if skip_unless_root() {
        return;
    }
    let bin = field_cases_without_frame_pointers();
    let (pg, url, app) = app_with_statement_counts();
    drop(app);
    let app = App::start_binary_with_db(&bin, &url);
    held_idle_case(&app, false);
    drop(app);
    pg.stop().expect("stop postgres");
}

/// The checks of [`connection_held_idle`] on `app`; `park_frames`: whether the workers' idle
/// share must come from the runtime's park frames (a frame-pointer build) or from the kernel
/// calls they wait in.
fn held_idle_case(app: &App, park_frames: bool) {
    let wait_ms = field_cases::TRANSACTION_WAIT.as_secs_f64() * 1e3;
    // The case's req/s and predicted gain, printed beside what the control (the wait moved
    // before the checkout) measured: a figure for a person, not an assertion (timing).
    let mut cases: Vec<(&str, f64, f64)> = Vec::new();
    for (route, slot, fires) in
        [("/case/connection-across-wait", "case", true), ("/case/connection-before-wait", "before", true), ("/control/wait-before-connection", "control", false)]
    {
        common::wrk(&app.url(route), 2, 8);
        let before = held_by_app(app, slot);
        let cpu_before = process_cpu_ns(app.pid);
        let spawned = std::time::Instant::now();
        let (p, _, before_load) = common::profile_routes_during(app, &[route], PROFILE_SECS, &[], || spawned.elapsed());
        let cpu_ns = process_cpu_ns(app.pid) - cpu_before;
        let after = held_by_app(app, slot);
        let truth = (after.1 - before.1) as f64 / 1e6 / (after.0 - before.0).max(1) as f64;
        let got = ids(&p.ranking);
        println!(
            "{route}: {got:?}; the app's clock: {truth:.3} ms held outside the statements per checkout over {} checkouts; wrk {:.0} req/s, mean latency {:.2} ms",
            after.0 - before.0,
            p.wrk.req_per_s,
            p.wrk.mean_latency_ms
        );
        for silent in ["idle-in-transaction", "blocking-call-on-worker", "lock-contention"] {
            assert!(!got.contains(&silent.to_string()), "{silent} fired on {route}: {got:?}");
        }
        // The gate: the workers' parked share against 1 - the app's CPU time over the run (all
        // its threads; the 2 workers do nearly all of it). The app is idle before and after the
        // load, so its CPU between the attach's start and end is all of it. A wait begun
        // before the attach is not seen: each worker parked from before the attach until the
        // load began (at most the time from spawning the profiler to starting wrk) counts as
        // busy, so the agent may read up to that much below.
        let idle = &p.ranking["worker_idle"];
        let share = idle["share"].as_f64().unwrap_or_else(|| panic!("no worker_idle in the ranking: {idle}"));
        let run_ns = p.profile_json()["meta"]["duration_ns"].as_f64().expect("duration_ns");
        let proc_idle = 1.0 - cpu_ns as f64 / (2.0 * run_ns);
        let unseen = before_load.as_secs_f64() * 1e9 / run_ns;
        println!(
            "  workers parked: {:.1}% by the agent ({idle}); 1 - CPU/(2 workers x run) = {:.1}% by /proc, less up to {:.1} points parked before the attach",
            100.0 * share,
            100.0 * proc_idle,
            100.0 * unseen
        );
        assert_eq!(idle["from_park_frames"].as_bool(), Some(park_frames), "{idle}");
        assert!(share <= proc_idle + 0.03 && share >= proc_idle - unseen - 0.03, "workers parked {share:.3} against {proc_idle:.3} by /proc (less up to {unseen:.3})");
        // The endpoint's latency on the wire (request head read to response written) against
        // wrk's (which adds the client, loopback and the kernel's queues): never above it,
        // and most of it at this load (0.93-0.985 of it here).
        let row = p.ranking["endpoints"].as_array().and_then(|e| e.iter().find(|e| e["endpoint"] == format!("GET {route}"))).unwrap_or_else(|| panic!("no endpoint row for {route}"));
        let wire_ms = row["latency_us"].as_f64().expect("the endpoint's latency") / 1e3;
        println!("  latency: wire {wire_ms:.3} ms, wrk {:.3} ms ({:.3} of it)", p.wrk.mean_latency_ms, wire_ms / p.wrk.mean_latency_ms);
        assert!(wire_ms <= 1.02 * p.wrk.mean_latency_ms && wire_ms >= 0.7 * p.wrk.mean_latency_ms, "the wire's {wire_ms:.3} ms against wrk's {:.3} ms", p.wrk.mean_latency_ms);
        if !fires {
            for (case, req_per_s, predicted) in &cases {
                println!("  {case}: moving the wait before the checkout: predicted {predicted:+.1}%, measured {:+.1}% (wrk, one run each)", 100.0 * (p.wrk.req_per_s / req_per_s - 1.0));
            }
            assert!(truth < 0.4 * wait_ms, "the control's checkouts held their connection {truth:.3} ms per request");
            assert!(!got.contains(&"connection-held-idle".to_string()), "fired on the control {route}: {got:?}");
            continue;
        }
        assert!(truth >= 0.9 * wait_ms, "the case's checkouts held their connection only {truth:.3} ms per request, less than its {wait_ms} ms wait");
        let f = p.ranking["costs"].as_array().unwrap().iter().find(|c| c["id"] == "connection-held-idle").unwrap_or_else(|| panic!("{route}: connection-held-idle did not fire: {got:?}"));
        let held = f["counts_per_request"]["held_idle_us"].as_f64().expect("held idle µs per request") / 1e3;
        println!("  {}\n  evidence: {}\n  gain: {}\n  {held:.3} ms per request against the app's {truth:.3}", f["title"].as_str().unwrap_or_default(), f["evidence"], f["gain"]);
        assert!((held - truth).abs() <= 0.25 * truth, "{held:.3} ms held idle per request against the app's {truth:.3}");
        cases.push((route, p.wrk.req_per_s, f["gain"]["gain_pct"].as_f64().unwrap_or(f64::NAN)));
        let endpoints = f["endpoints"].as_array().unwrap_or_else(|| panic!("connection-held-idle names no endpoint: {f}"));
        assert_eq!(endpoints[0]["endpoint"], format!("GET {route}"), "{endpoints:?}");
    }
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
    let profile: serde_json::Value = p.profile_json();
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
        // Requests whose line the capture cut (`GET /case/…`, a prefix of both routes) may be
        // either route's: they count neither for nor against the join, which is judged on the
        // samples whose endpoint is known. On this route they held 0, 15% and 29% of
        // construction-per-request's samples in three runs of this test while the wire's
        // request counts per route matched the app's (so few requests, each with many
        // samples), and none in runs of the same load by hand: why is not known yet. The
        // bound stops a join that loses most request lines.
        let other = if route == hash { regex } else { hash };
        let share_on = |want: &dyn Fn(&str) -> bool| -> f64 { endpoints.iter().filter(|e| e["endpoint"].as_str().is_some_and(|n| want(n))).map(|e| e["share"].as_f64().unwrap()).sum() };
        let cut = share_on(&|n| n.ends_with('…'));
        let (own, elsewhere) = (share_on(&|n| n == format!("GET {route}")) / (1.0 - cut), share_on(&|n| n == format!("GET {other}")) / (1.0 - cut));
        assert_eq!(first["endpoint"], format!("GET {route}"), "{id}: {endpoints:?}");
        assert!(cut <= 0.5 && own >= 0.90 && elsewhere <= 0.05, "{id}: of the samples whose endpoint is known, {own:.3} on {route}, {elsewhere:.3} on {other}; {cut:.3} on cut request lines: {endpoints:?}");
    }
}

/// Two database routes under load at once on a pool of 4 connections for 8 concurrent
/// requests, so that requests wait for the pool and resume on workers whose last socket call
/// was another request's: each endpoint's statements and round trips are those of its own
/// requests. Ground truth: `pg_stat_statements` per statement (the item query runs only in
/// `/case/n-plus-one`, the JOIN only in `/control/join`) over the requests the app served per
/// route; round trips are 3 per statement (a checkout each, with sqlx's ping before it and on
/// release, as `n_plus_one_queries_after_warm_up` checks on one route).
#[test]
fn statements_are_joined_to_their_endpoint_under_mixed_load_with_pool_waits() {
    if skip_unless_root() {
        return;
    }
    let (pg, url, app) = app_with_statement_counts();
    let (np1, join) = ("/case/n-plus-one", "/control/join");
    common::wrk(&app.url(np1), 2, 8);
    common::wrk(&app.url(join), 2, 8);
    pg.psql("fc", "SELECT pg_stat_statements_reset()").expect("reset");
    let before = (app.served(np1), app.served(join));
    let (p, _) = profile_routes(&app, &[np1, join], PROFILE_SECS, &["--db-url", &url]);
    let served = (app.served(np1) - before.0, app.served(join) - before.1);
    let items = statement_calls(&pg, "fc", "SELECT name, price_cents FROM fc_items WHERE id = %");
    let lists = statement_calls(&pg, "fc", "SELECT item_id FROM fc_order_items%");
    let joins = statement_calls(&pg, "fc", "SELECT i.name, i.price_cents FROM fc_order_items o JOIN%");
    println!("served {served:?}; pg_stat_statements: {items} item queries, {lists} list queries, {joins} joins");
    let profile: serde_json::Value = p.profile_json();
    let joined = &profile["endpoints"];
    let db_of = |route: &str| -> &serde_json::Value {
        let id = joined["endpoints"].as_array().unwrap().iter().position(|e| e == &format!("GET {route}")).unwrap_or_else(|| panic!("GET {route} not joined: {joined}"));
        joined["db"].as_array().unwrap().iter().find(|d| d["endpoint"] == id).unwrap_or_else(|| panic!("no database work joined to {route}: {joined}"))
    };
    let executions = |d: &serde_json::Value, like: &str| -> u64 {
        d["statements"].as_array().map_or(0, |a| a.iter().filter(|s| s["shape"]["text"].as_str().is_some_and(|t| t.starts_with(like))).map(|s| s["executions"].as_u64().unwrap()).sum())
    };
    let wire_requests = |route: &str| -> f64 {
        profile["wire"]["http"]["endpoints"].as_array().unwrap().iter().find(|e| e["endpoint"] == format!("GET {route}")).unwrap()["requests"].as_f64().unwrap()
    };
    println!("unattributed: {}", joined["db_unattributed"]);
    for route in [np1, join] {
        println!("GET {route}: {}", db_of(route));
    }
    for (route, like, truth_calls, other, n) in [
        (np1, "SELECT name, price_cents FROM fc_items WHERE id = ?", items, join, served.0),
        (join, "SELECT i.name, i.price_cents FROM fc_order_items o JOIN", joins, np1, served.1),
    ] {
        let d = db_of(route);
        let (got, requests) = (executions(d, like) as f64, wire_requests(route));
        let truth = truth_calls as f64 / n as f64;
        println!("GET {route}: {got} executions of `{like}` over {requests} requests = {:.3}; pg_stat_statements {truth_calls} / {n} served = {truth:.3}", got / requests);
        assert!((got / requests - truth).abs() <= 0.05 * truth, "GET {route}: {:.3} per request, pg_stat_statements {truth:.3}", got / requests);
        // None of it on the other route.
        let elsewhere = executions(db_of(other), like);
        assert!(elsewhere as f64 <= 0.01 * got, "GET {other} was given {elsewhere} executions of `{like}` (GET {route} {got})");
        // Round trips: 3 per statement the join can place (the list query, never a request's
        // last and run by /case/n-plus-one alone under a load of two endpoints, is left with no
        // request, checked below).
        let statements = truth;
        let rts = d["round_trips"].as_f64().unwrap() / requests;
        println!("  {rts:.3} round trips per request against 3 x {statements:.3}");
        assert!((rts - 3.0 * statements).abs() <= 0.05 * 3.0 * statements, "GET {route}: {rts:.3} round trips per request against 3 x {statements:.3} statements");
    }
    let left = executions(&joined["db_unattributed"], "SELECT item_id FROM fc_order_items");
    println!("the list query: {left} executions with no request, pg_stat_statements {lists}");
    assert!(left.abs_diff(lists) as f64 <= 0.02 * lists as f64, "the list query: {left} executions with no request, pg_stat_statements {lists}");
    let f = p.ranking["costs"].as_array().unwrap().iter().find(|c| c["id"] == "n-plus-one-queries").unwrap_or_else(|| panic!("n-plus-one-queries did not fire: {}", p.ranking["costs"]));
    let title = f["title"].as_str().unwrap();
    let n = f["counts_per_request"]["statement_executions"].as_f64().unwrap();
    let truth = items as f64 / served.0 as f64;
    println!("{title}\n  N = {n:.3} against {truth:.3}; paid by {}", f["endpoints"]);
    assert!(title.contains("GET /case/n-plus-one") && title.contains("FROM fc_items WHERE id = ?"), "{title}");
    assert!((n - truth).abs() <= 0.10 * truth, "N = {n} against pg_stat_statements' {truth}");
    let first = &f["endpoints"][0];
    assert_eq!(first["endpoint"], "GET /case/n-plus-one", "{}", f["endpoints"]);
    assert!(first["share"].as_f64().unwrap() >= 0.95, "{}", f["endpoints"]);
    assert_eq!(f["endpoints_measure"], "executions");
    drop(app);
    pg.stop().expect("stop postgres");
}

/// `usage_usec` of a cgroup v2 `cpu.stat`: the kernel's count of the CPU its processes used,
/// exited ones included.
fn cgroup_usage_s(dir: &std::path::Path) -> f64 {
    let text = std::fs::read_to_string(dir.join("cpu.stat")).expect("cpu.stat");
    let usec: f64 = text.lines().find_map(|l| l.strip_prefix("usage_usec ")).expect("usage_usec").trim().parse().unwrap();
    usec / 1e6
}

/// The database server's CPU on an attach (`profile.json` `meta.db_servers`, from
/// `/proc/PID/stat` of the postmaster's process tree) against the kernel's count for a cgroup
/// of PostgreSQL's own (`cpu.stat` `usage_usec`, read before and after the attach; the server
/// idles outside the load), with PostgreSQL pinned to one CPU and held to 0.3 of it by a CPU
/// quota, under an N+1 route's load. The bound follows the cgroup's reading of the server's use
/// under load: `database CPU` at or above 90% of its capacity, never at or below 80%.
#[test]
fn database_server_cpu_against_its_cgroup() {
    if skip_unless_root() {
        return;
    }
    let (pg, _url, app) = app_with_statement_counts();
    let root = pg.pid().expect("the postmaster's pid");
    // The cgroup v2 mount (`/sys/fs/cgroup`, or `/sys/fs/cgroup/unified` on a hybrid host).
    let mounts = std::fs::read_to_string("/proc/mounts").expect("/proc/mounts");
    let mount = std::path::PathBuf::from(mounts.lines().find(|l| l.split(' ').nth(2) == Some("cgroup2")).and_then(|l| l.split(' ').nth(1)).expect("a cgroup2 mount"));
    let cgroup = mount.join(format!("profiler-field-cases-pg-{}", std::process::id()));
    std::fs::create_dir_all(&cgroup).expect("creating a cgroup for PostgreSQL");
    struct Back(std::path::PathBuf, std::path::PathBuf);
    impl Drop for Back {
        fn drop(&mut self) {
            // Every process back to the root cgroup, then the empty cgroup removed.
            if let Ok(procs) = std::fs::read_to_string(self.0.join("cgroup.procs")) {
                for pid in procs.lines() {
                    let _ = std::fs::write(self.1.join("cgroup.procs"), pid);
                }
            }
            let _ = std::fs::remove_dir(&self.0);
        }
    }
    let _back = Back(cgroup.clone(), mount.clone());
    // A CPU quota of QUOTA CPUs so that the server saturates: in the v1 `cpu` hierarchy on a
    // hybrid host (where Docker puts `--cpus`), else in the v2 cgroup when its `cpu`
    // controller is on; without either, the server is only pinned to one CPU.
    const QUOTA: f64 = 0.3;
    let v1 = mounts.lines().find(|l| l.split(' ').nth(2) == Some("cgroup") && l.split(' ').nth(3).is_some_and(|o| o.split(',').any(|c| c == "cpu"))).and_then(|l| l.split(' ').nth(1)).map(std::path::PathBuf::from);
    let quota_dir = v1.as_ref().map(|m| m.join(format!("profiler-field-cases-pg-{}", std::process::id())));
    if let Some(d) = &quota_dir {
        std::fs::create_dir_all(d).expect("a v1 cpu cgroup");
    }
    let _back_v1 = quota_dir.as_ref().map(|d| Back(d.clone(), v1.clone().unwrap()));
    for pid in bench::procstat::tree(root).keys() {
        std::fs::write(cgroup.join("cgroup.procs"), pid.to_string()).unwrap_or_else(|e| panic!("moving {pid} into {}: {e}", cgroup.display()));
        if let Some(d) = &quota_dir {
            std::fs::write(d.join("cgroup.procs"), pid.to_string()).unwrap_or_else(|e| panic!("moving {pid} into {}: {e}", d.display()));
        }
        let _ = std::process::Command::new("taskset").args(["-a", "-p", "-c", "1", &pid.to_string()]).stdout(std::process::Stdio::null()).status();
    }
    let capacity = match &quota_dir {
        Some(d) => {
            std::fs::write(d.join("cpu.cfs_period_us"), "100000").expect("cpu.cfs_period_us");
            std::fs::write(d.join("cpu.cfs_quota_us"), format!("{}", (QUOTA * 100_000.0) as u64)).expect("cpu.cfs_quota_us");
            QUOTA
        }
        None if std::fs::write(cgroup.join("cpu.max"), format!("{} 100000", (QUOTA * 100_000.0) as u64)).is_ok() => QUOTA,
        None => 1.0,
    };
    const ROUTE: &str = "/case/n-plus-one";
    common::wrk(&app.url(ROUTE), 2, 8);
    let before = cgroup_usage_s(&cgroup);
    let (p, _, load_start) = common::profile_routes_during(&app, &[ROUTE], PROFILE_SECS, &[], || cgroup_usage_s(&cgroup));
    let after = cgroup_usage_s(&cgroup);
    let profile = p.profile_json();
    let servers = profile["meta"]["db_servers"].as_array().cloned().unwrap_or_default();
    println!("db_servers: {servers:?}; cgroup: {:.3} s over the attach, {:.3} s from the load's start", after - before, after - load_start);
    assert_eq!(servers.len(), 1, "one server: {servers:?}\n{}", p.profiler_stdout);
    let s = &servers[0];
    assert_eq!(s["pid"].as_u64(), Some(u64::from(root)));
    assert_eq!(s["port"].as_u64(), Some(u64::from(pg.port())));
    assert_eq!(s["capacity_cpus"].as_f64(), Some(capacity), "its quota, or the one CPU it is pinned to");
    let agent = s["cpu_ns"].as_f64().unwrap() / 1e9;
    let truth = after - before;
    assert!(agent <= truth + 0.05 && agent >= 0.9 * truth, "the agent's {agent:.3} s of the server's CPU against the cgroup's {truth:.3} s");
    assert!(p.profiler_stdout.contains("database server CPU use: postgres (pid "), "{}", p.profiler_stdout);
    let util = (after - load_start) / PROFILE_SECS as f64 / capacity;
    let bound = p.ranking["bound"]["resource"].as_str().unwrap_or_default().to_owned();
    println!("the server under load: {util:.2} of its CPU by the cgroup; bound: {}", p.ranking["bound"]);
    if util >= 0.9 {
        assert_eq!(bound, "db_cpu", "the cgroup read {util:.2} of the server's CPU");
    } else if util <= 0.8 {
        assert_ne!(bound, "db_cpu", "the cgroup read {util:.2} of the server's CPU");
    }
    drop(app);
    pg.stop().expect("stop postgres");
}
