//! Golden tests of `diff.md` on a recorded pair (agent/tests/data/diff/): two `profiler bench
//! --only deals-create --runs 3 --duration 3 --warmup 2 --frequency 999` runs,
//! BASE with `--costs all`, HEAD with `--costs all,-double-json-parse` (results.json and the
//! profiled run's profile.json, gzip-compressed). `BLESS=1` rewrites the goldens.
//!
//! Values in the goldens checked by hand against the raw files (python3 over results.json and
//! profile.json; see the asserts in `golden_figures_match_the_raw_files`).

use std::path::{Path, PathBuf};
use std::process::Command;

fn data() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../agent/tests/data/diff")
}

/// Runs `profiler diff` in the data folder; returns (exit code, diff.md, stderr).
fn diff(args: &[&str]) -> (i32, String, String) {
    let out = tempfile::tempdir().unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_profiler"))
        .current_dir(data())
        .arg("diff")
        .args(args)
        .arg("--out")
        .arg(out.path())
        .output()
        .unwrap();
    let md = std::fs::read_to_string(out.path().join("diff.md")).unwrap_or_default();
    for svg in ["diff.svg", "diff-base.svg"] {
        let text = std::fs::read_to_string(out.path().join(svg)).unwrap_or_else(|e| panic!("{svg}: {e}"));
        assert!(text.contains("<svg") && text.trim_end().ends_with("</svg>"), "{svg} is not a whole SVG");
    }
    (o.status.code().unwrap_or(-1), md, String::from_utf8_lossy(&o.stderr).into_owned())
}

fn check_golden(name: &str, md: &str) {
    let path = data().join(name);
    if std::env::var_os("BLESS").is_some() {
        std::fs::write(&path, md).unwrap();
    }
    let golden = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e} (BLESS=1 writes it)", path.display()));
    assert!(golden == md, "{} differs from the output (BLESS=1 rewrites it):\n{md}", path.display());
}

/// GitHub-comment safety: under the size limit, no raw HTML outside code spans, and every
/// table row has as many cells as its header.
fn check_github_safe(md: &str) {
    assert!(md.chars().count() < 65_536, "diff.md has {} characters", md.chars().count());
    let mut in_table: Option<usize> = None;
    for line in md.lines() {
        let outside: String = line.split('`').step_by(2).collect();
        assert!(!outside.contains('<') && !outside.contains('>'), "raw HTML-like text outside code spans: {line}");
        if line.starts_with('|') {
            let cells = line.replace("\\|", "").matches('|').count();
            match in_table {
                None => in_table = Some(cells),
                Some(n) => assert_eq!(cells, n, "table row with another cell count: {line}"),
            }
        } else {
            in_table = None;
        }
    }
}

#[test]
fn bench_pair_golden() {
    let (code, md, stderr) = diff(&["base", "head"]);
    assert_eq!(code, 0, "{stderr}");
    check_github_safe(&md);
    check_golden("bench.diff.md", &md);
}

#[test]
fn profile_pair_golden() {
    // The same two profiles as single files: no measured runs, so no noise estimate.
    let (code, md, stderr) = diff(&["base/deals-create/profile.json.gz", "head/deals-create/profile.json.gz"]);
    // Sampled CPU per request +8.3% with unknown noise is beyond the default 5% threshold.
    assert_eq!(code, 1, "{stderr}");
    check_github_safe(&md);
    check_golden("profiles.diff.md", &md);
    let (code, _, stderr) = diff(&["base/deals-create/profile.json.gz", "head/deals-create/profile.json.gz", "--fail-on-regression", "10"]);
    assert_eq!(code, 0, "{stderr}");
}

#[test]
fn golden_figures_match_the_raw_files() {
    // Figures of bench.diff.md recomputed by hand from the raw files (python3):
    // - req/s medians: BASE runs 1796.1, 1844.5, 1787.1 -> 1796; HEAD 1742.5, 1723.3, 1675.5
    //   -> 1723; noise = (1844.5-1787.1) + (1742.5-1675.5) = 124.4;
    // - sampled CPU per request, parked tokio workers left out (samples whose stack holds a
    //   `Context::park`, `runtime::park::`, `Driver::park`, `io::driver::Driver::turn` or
    //   `std::thread::park` frame: 30 of BASE's 717, 23 of HEAD's 686): 687 x 1e6/999 µs / 3734
    //   requests = 184.2 µs; HEAD 663 x 1e6/999 / 3326 = 199.5 µs. The requests are the wire
    //   capture's count over the profile (`wire.summary.http.requests`: 3734, 3326), not wrk's
    //   count of the measured run (3670, 3262), which leaves out the warm-up the profile covers;
    // - double-json-parse: 8 samples x 1e6/999 / 3734 = 2.14 µs/req, 0 in HEAD;
    // - database round trips (`wire.pg.round_trips`): 26124 / 3734 = 6.996 and 23282 / 3326 =
    //   7.000 per request (target-app/README.md: 7 on deals-create); BEGIN 3732 / 3734 and
    //   3326 / 3326 (1 a request). With wrk's count they read 7.12 and 1.02;
    // - database CPU per request (`runs[].postgres.cpu_ns` / `runs[].wrk.requests`): BASE
    //   1.57e9 / 5437, 1.72e9 / 5598, 1.66e9 / 5439 ns -> 288.8, 307.3, 305.2 µs, median 305;
    //   HEAD 1.56e9 / 5309, 1.57e9 / 5209, 1.51e9 / 5097 -> 293.8, 301.4, 296.3, median 296;
    //   noise (307.3 - 288.8) + (301.4 - 293.8) = 26.1.
    // - profiles.diff.md (the two profile.json files, no measured runs): the wire's mean
    //   latency, the sum of `wire.http.endpoints[].latency_total_ns` over the sum of their
    //   `statuses` counts: 43.22 ms BASE, 48.99 ms HEAD. No steady window in these profiles, so
    //   no throughput row.
    let profiles = std::fs::read_to_string(data().join("profiles.diff.md")).unwrap();
    assert!(profiles.contains("| latency mean (wire) (ms) | 43.2 | 49.0 | +5.77 (+13.3%) | ? |"), "{profiles}");
    assert!(!profiles.contains("throughput (wire"), "{profiles}");
    let md = std::fs::read_to_string(data().join("bench.diff.md")).unwrap();
    for expected in [
        "| req/s | 1796 | 1723 | -72.9 (-4.1%) | ±124 |",
        "| sampled CPU per request (profile) (µs/req) | 184 | 200 |",
        "| database CPU per request (accounted, /proc) (µs/req) | 305 | 296 | -8.95 (-2.9%) | ±26.1 |",
        "left out of the profile figures: 30 → 23 on-CPU samples of parked runtime workers",
        "| `double-json-parse` | 2.14 | 0 | -2.14 (-100.0%) |",
        "| `all round trips` | 7.00 | 7.00 |",
        "| `BEGIN` | 1.00 | 1.00 |",
        "- named in BASE only (gone in HEAD): `double-json-parse`: JSON bodies are parsed",
    ] {
        assert!(md.contains(expected), "bench.diff.md lacks `{expected}`");
    }
}

#[test]
fn identical_sides_say_no_change() {
    let (code, md, stderr) = diff(&["base", "base"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(md.starts_with("## profiler diff: no change (identical)\n"), "{md}");
}
