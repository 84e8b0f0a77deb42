//! `profiler bench overhead --smoke --only json` end to end, for real: throwaway PostgreSQL,
//! the app in Docker, one A/B pair per agent mode. Checks the shape of `overhead.json` and
//! `overhead.md`, that every ratio is its pair's attached req/s over unattached req/s (no
//! timing assertion: the speed of this shared machine drifts by 25% within a minute, see
//! `diff_bench`), that each attached run really ran in its
//! mode (its `profile.json` has on-CPU samples; syscall statistics only where the mode has
//! them, wire data only in `everything`) and that the footprint was recorded. Runs as root in
//! CI (scripts/test builds the workspace first, so `target-app` sits beside `profiler`).

use test_support::{skip_unless, Need};

use std::path::Path;
use std::process::Command;

use serde_json::Value;

#[test]
fn overhead_smoke_measures_every_mode_on_json() {
    if skip_unless(&[Need::Root, Need::Docker]) {
        return;
    }
    let out = tempfile::tempdir().unwrap();
    let profiler = env!("CARGO_BIN_EXE_profiler");
    let app = Path::new(profiler).with_file_name("target-app");
    assert!(
        app.is_file(),
        "{} missing: build the workspace first (scripts/test does)",
        app.display()
    );
    let status = Command::new(profiler)
        .args([
            "bench",
            "overhead",
            "--smoke",
            "--only",
            "json",
            "--skip-build",
            "--name",
            "profiler-ci-overhead",
            "--out",
        ])
        .arg(out.path())
        .status()
        .expect("run profiler bench overhead");
    assert!(
        status.success(),
        "profiler bench overhead --smoke exited with {status}"
    );

    let report: Value =
        serde_json::from_str(&std::fs::read_to_string(out.path().join("overhead.json")).unwrap())
            .unwrap();
    let rows = report["rows"].as_array().unwrap();
    let modes: Vec<&str> = rows.iter().map(|r| r["mode"].as_str().unwrap()).collect();
    assert_eq!(modes, ["sampling", "+offcpu", "+syscalls", "everything"]);
    for row in rows {
        let mode = row["mode"].as_str().unwrap();
        assert_eq!(row["test"], "json");
        assert!(row["error"].is_null(), "{mode}: {}", row["error"]);
        assert_eq!(row["pairs"], 1, "{mode}");
        let pair = &row["runs"][0];
        let (a, b) = (
            pair["unattached_req_per_s"].as_f64().unwrap(),
            pair["attached_req_per_s"].as_f64().unwrap(),
        );
        assert!(a > 0.0 && b > 0.0, "{mode}: {pair}");
        // One pair: its ratio is the median, the minimum and the maximum.
        for key in ["ratio_median", "ratio_min", "ratio_max"] {
            let r = row[key].as_f64().unwrap();
            assert!((r - b / a).abs() < 1e-9, "{mode}: {key} = {r}, pair {b} / {a}");
        }
        assert_eq!(pair["failed_requests"], 0, "{mode}: failed requests");
        let dir = out.path().join(pair["dir"].as_str().unwrap());
        let profile: Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("profile.json")).unwrap())
                .unwrap();
        let samples: u64 = profile["on_cpu"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["count"].as_u64().unwrap())
            .sum();
        assert!(
            samples > 0,
            "{mode}: no on-CPU samples, the agent did not sample the app"
        );
        let syscalls = profile["syscalls"].as_array().map_or(0, Vec::len);
        assert_eq!(
            syscalls > 0,
            matches!(mode, "+syscalls" | "everything"),
            "{mode}: {syscalls} syscall rows"
        );
        assert_eq!(
            profile["meta"]["wire"].is_object(),
            mode == "everything",
            "{mode}: wire report {}",
            profile["meta"]["wire"]
        );
        let f = &profile["meta"]["footprint"];
        let attach_ns = f["attach_ns"].as_u64().unwrap();
        assert!(
            attach_ns > 0 && attach_ns < 30_000_000_000,
            "{mode}: attach took {attach_ns} ns"
        );
        // The agent binary alone maps more than 5 MB; a peak under that is a misread.
        assert!(
            f["peak_rss_bytes"].as_u64().unwrap() > 5_000_000,
            "{mode}: {f}"
        );
        let footprint: Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("footprint.json")).unwrap())
                .unwrap();
        assert!(
            footprint["reports_ms"].as_f64().unwrap() > 0.0,
            "{mode}: {footprint}"
        );
        // The agent's own threads are a part of its process (which also runs wrk and the
        // harness here); the footprint test checks the split against a spinning thread.
        let threads = footprint["threads_cpu_pct_of_one_cpu"].as_f64().unwrap();
        let process = footprint["cpu_pct_of_one_cpu"].as_f64().unwrap();
        assert!(
            threads > 0.0 && threads <= process,
            "{mode}: agent threads {threads}%, process {process}%"
        );
    }
    let footprint = report["footprint"].as_array().unwrap();
    assert_eq!(footprint.len(), 4);
    for f in footprint {
        assert_eq!(f["runs"], 1, "{f}");
        assert!(f["attach_ms_median"].as_f64().unwrap() > 0.0, "{f}");
        assert!(f["threads_cpu_pct_median"].as_f64().is_some(), "{f}");
    }
    let md = std::fs::read_to_string(out.path().join("overhead.md")).unwrap();
    assert!(md.contains("| json | everything |"), "{md}");
    assert!(md.contains("Agent footprint"), "{md}");
    assert!(md.contains("agent threads' CPU"), "{md}");
}
