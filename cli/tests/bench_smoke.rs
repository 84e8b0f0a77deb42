//! `profiler bench --smoke` end to end, for real: throwaway PostgreSQL, the app in Docker, the
//! conformance gate, five tests with the agent attached. Runs as root in CI (scripts/test builds
//! the workspace first, so `target-app` sits beside `profiler`).
//!
//! The tests that start a bench take [`one_bench`] first: a bench gives its app the port 8080
//! when it is free when asked (then binds it in the container), so two benches started at once
//! could both pick it and the second would measure the first one's app; and both pin their app
//! and load to the same CPUs.

use test_support::{skip_unless, Need};

use std::path::Path;
use std::process::Command;
use std::sync::{Mutex, MutexGuard};

use serde_json::Value;

/// One bench at a time in this test process (see the module docs).
fn one_bench() -> MutexGuard<'static, ()> {
    static BENCH: Mutex<()> = Mutex::new(());
    BENCH.lock().unwrap_or_else(|e| e.into_inner())
}

#[test]
fn bench_smoke_measures_and_profiles_all_five_tests() {
    if skip_unless(&[Need::Root, Need::Docker]) {
        return;
    }
    let _bench = one_bench();
    let out = tempfile::tempdir().unwrap();
    let profiler = env!("CARGO_BIN_EXE_profiler");
    let app = Path::new(profiler).with_file_name("target-app");
    assert!(app.is_file(), "{} missing: build the workspace first (scripts/test does)", app.display());
    let status = Command::new(profiler)
        .args(["bench", "--smoke", "--skip-build", "--name", "profiler-ci-bench", "--out"])
        .arg(out.path())
        .status()
        .expect("run profiler bench");
    assert!(status.success(), "profiler bench --smoke exited with {status}");

    let results: Value = serde_json::from_str(&std::fs::read_to_string(out.path().join("results.json")).unwrap()).unwrap();
    assert!(results["conformance"]["passed"].as_u64().unwrap() >= 150, "{}", results["conformance"]);
    assert_eq!(results["conformance"]["failed"], 0);
    assert!(results["time_to_ready_ms"].as_f64().unwrap() > 0.0);
    let tests = results["tests"].as_array().unwrap();
    let names: Vec<&str> = tests.iter().map(|t| t["test"].as_str().unwrap()).collect();
    assert_eq!(names, ["json", "db", "queries", "deals-list", "deals-create"]);
    for t in tests {
        let name = t["test"].as_str().unwrap();
        assert!(t["req_per_s"].as_f64().unwrap() > 0.0, "{name}: no throughput");
        assert_eq!(t["failed_requests"], 0, "{name}: failed requests");
        assert!(t["profile_error"].is_null(), "{name}: {}", t["profile_error"]);
        let profiled = &t["profiled"];
        assert!(profiled["samples"].as_u64().unwrap() > 0, "{name}: no samples");
        let dir = out.path().join(name);
        for f in ["flamegraph.svg", "stacks.folded", "profile.json"] {
            let p = dir.join(f);
            assert!(p.is_file() && std::fs::metadata(&p).unwrap().len() > 0, "{name}: {} missing or empty", p.display());
        }
    }
    // `/json`'s profiled run traces every syscall and the wire: the agent's own BPF programs
    // run in the app's syscalls (about 10% of its samples in a smoke run here), and their
    // frames carry the names kallsyms gave them while they were loaded. Before, they were
    // named after the last kernel symbol below the JIT area (a data label,
    // `__stop_runtime_ptr_USER_PTR_MAX` on this kernel).
    let folded = std::fs::read_to_string(out.path().join("json").join("stacks.folded")).unwrap();
    let frames: Vec<&str> = folded.lines().flat_map(|l| l.rsplit_once(' ').unwrap().0.split(';')).collect();
    assert!(
        frames.iter().any(|f| f.starts_with("bpf_prog_") && (f.contains("_on_sys_enter") || f.contains("_on_sock_"))),
        "no sample named in the agent's own BPF programs"
    );
    assert!(!frames.iter().any(|f| f.starts_with("__stop_") || f.starts_with("__start_")), "a kernel data label named a frame");
    // The profiled run times each BPF program with the kernel's run statistics: the sampler
    // ran at least once per sample it kept, and the per-program times add up to the total.
    let footprint: Value = serde_json::from_str(&std::fs::read_to_string(out.path().join("json").join("footprint.json")).unwrap()).unwrap();
    let programs = footprint["programs"].as_array().unwrap_or_else(|| panic!("no programs in footprint.json: {footprint}"));
    let sampler = programs.iter().find(|p| p["program"].as_str().is_some_and(|n| n.starts_with("on_cpu_sample"))).unwrap_or_else(|| panic!("no sampler in {programs:?}"));
    let json_samples = tests[0]["profiled"]["samples"].as_u64().unwrap();
    assert!(sampler["runs"].as_u64().unwrap() >= json_samples, "sampler ran {} times for {json_samples} samples", sampler["runs"]);
    assert!(programs.iter().any(|p| p["program"] == "on_sys_enter" && p["runs"].as_u64().unwrap() > 0), "{programs:?}");
    let html = std::fs::read_to_string(out.path().join("index.html")).unwrap();
    for id in ["throughput", "latency", "cpu"] {
        assert!(html.contains(&format!("<svg id=\"{id}\"")), "index.html lacks the {id} chart");
    }
    assert!(html.contains("json/flamegraph.svg"));
    // The page renders in a real browser: headless Chromium loads it (no external assets to
    // wait for), and the DOM it built holds the three charts with their bars.
    let chromium = ["chromium", "chromium-browser"].into_iter().find(|c| Command::new(c).arg("--version").output().is_ok())
        .expect("chromium missing: scripts/setup installs the Debian package `chromium`");
    let profile_dir = tempfile::tempdir().unwrap();
    let dom = Command::new(chromium)
        .args(["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking", "--disable-component-update", "--disable-sync", "--dump-dom"])
        .arg(format!("--user-data-dir={}", profile_dir.path().display()))
        .arg(format!("file://{}", out.path().join("index.html").display()))
        .output()
        .unwrap();
    let dom = String::from_utf8_lossy(&dom.stdout);
    for class in ["bar rps", "bar p50", "bar p99", "bar app", "bar pg"] {
        assert!(dom.contains(&format!("class=\"{class}\"")), "the rendered DOM lacks bars of class {class}");
    }
    assert_eq!(dom.matches("<object class=\"flamegraph on-cpu\"").count(), 5, "one on-CPU flamegraph per test");
    assert_eq!(dom.matches("<object class=\"flamegraph off-cpu\"").count(), 5, "one off-CPU flamegraph per test");
    // The findings come first: a run row per test in the findings table, before the charts.
    assert_eq!(dom.matches("<tr class=\"run\">").count(), 5, "a findings group per test");
    assert!(dom.find("<section id=\"findings\">").unwrap() < dom.find("<svg id=\"throughput\"").unwrap());
    assert!(!dom.contains("| rank |") && !dom.contains("<pre class=\"ranking\">"), "the ranking as Markdown text");
    // Nothing left running: the container is gone.
    let ps = Command::new("docker").args(["ps", "-a", "--format", "{{.Names}}"]).output().unwrap();
    assert!(!String::from_utf8_lossy(&ps.stdout).lines().any(|n| n == "profiler-ci-bench"));
}

#[test]
fn a_mistyped_cost_is_refused_before_anything_starts() {
    // target-app's own parser checks --costs: no database, no container, no 60 s wait for an
    // app that exits with its configuration error.
    let started = std::time::Instant::now();
    let o = Command::new(env!("CARGO_BIN_EXE_profiler"))
        .args(["bench", "--smoke", "--skip-build", "--only", "json", "--costs", "all,-nope", "--name", "profiler-ci-bad-costs"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(stderr.contains("invalid value 'all,-nope' for '--costs <COSTS>': unknown cost `nope` in --costs (known: pool-ping,"), "{stderr}");
    assert!(started.elapsed() < std::time::Duration::from_secs(5), "took {:?}", started.elapsed());
    assert!(!stderr.contains("PostgreSQL"), "{stderr}");
}

#[test]
fn an_unwritable_out_and_an_early_stop_leave_no_folder() {
    let _bench = one_bench();
    let profiler = env!("CARGO_BIN_EXE_profiler");
    let dir = tempfile::tempdir().unwrap();
    // An --out that is a file: refused before the build and the database, as attach does.
    let file = dir.path().join("a-file");
    std::fs::write(&file, "x").unwrap();
    let o = Command::new(profiler).args(["bench", "--smoke", "--skip-build", "--only", "json", "--out"]).arg(&file).output().unwrap();
    assert_eq!(o.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(stderr.trim(), format!("profiler: error: cannot write into {}: it is a file, not a folder", file.display()));

    // Ctrl-C while PostgreSQL starts (initdb alone takes over a second): nothing measured,
    // nothing written, and the folder this run created is gone.
    let out = dir.path().join("early");
    let child = Command::new(profiler)
        .args(["bench", "--smoke", "--skip-build", "--only", "json", "--name", "profiler-ci-early", "--out"])
        .arg(&out)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(500));
    // SAFETY: kill(2) on the pid of our own child.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGINT) }, 0);
    let o = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("bench: nothing was measured; no files written"), "{stderr}");
    assert!(stderr.ends_with("profiler: error: interrupted (Ctrl-C or SIGTERM)\n"), "{stderr}");
    assert!(!out.exists(), "{} was left behind", out.display());
}

/// Ctrl-C during the profiled run: the agent's collection so far is drained and written into
/// the test's folder, marked partial, and results.json says the profiled run did not finish.
#[test]
fn a_bench_stopped_in_its_profiled_run_keeps_the_partial_profile() {
    if skip_unless(&[Need::Root, Need::Docker]) {
        return;
    }
    let _bench = one_bench();
    use std::io::{BufRead, BufReader};
    let out = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_profiler"))
        .args(["bench", "--skip-build", "--only", "json", "--runs", "1", "--duration", "4", "--warmup", "1", "--name", "profiler-ci-cut", "--out"])
        .arg(out.path())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut stderr = BufReader::new(child.stderr.take().unwrap());
    let mut seen = String::new();
    loop {
        let mut line = String::new();
        assert!(stderr.read_line(&mut line).unwrap() > 0, "bench ended before its profiled run:\n{seen}");
        seen.push_str(&line);
        if line.contains("json: profiled run") {
            break;
        }
    }
    // Attached, the app restarted under the agent and warmed up for 1 s: into the run.
    std::thread::sleep(std::time::Duration::from_secs(4));
    // SAFETY: kill(2) on the pid of our own child.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGINT) }, 0);
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut stderr, &mut rest).unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(2), "{seen}{rest}");
    assert!(rest.contains("bench: the profiled run was interrupted; its partial profile ("), "{rest}");
    let profile: Value = serde_json::from_slice(&std::fs::read(out.path().join("json").join("profile.json")).unwrap()).unwrap();
    assert_eq!(profile["meta"]["partial"], "interrupted (Ctrl-C or SIGTERM)");
    let samples: u64 = profile["on_cpu"].as_array().unwrap().iter().map(|c| c["count"].as_u64().unwrap()).sum();
    assert!(samples > 0, "no samples in the partial profile");
    let results: Value = serde_json::from_slice(&std::fs::read(out.path().join("results.json")).unwrap()).unwrap();
    assert_eq!(results["partial"], "interrupted (Ctrl-C or SIGTERM); unfinished: json (all 1 runs; the profiled run did not finish)");
}
