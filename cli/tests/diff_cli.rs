//! `profiler diff` on bad input: one clear line on stderr, exit status 2, no panic; and the
//! importers agree with each other (the same profile as folded stacks and as pprof is
//! "identical"), and with `perf` itself on real `perf script` output.

use std::path::{Path, PathBuf};
use std::process::Command;

fn data() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../agent/tests/data/diff")
}

fn run(args: &[&Path], extra: &[&str]) -> (i32, String, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_profiler")).arg("diff").args(args).args(extra).output().unwrap();
    (o.status.code().unwrap_or(-1), String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned())
}

/// Asserts exit 2 and one `profiler: error:` line containing `what`.
fn refused(args: &[&Path], what: &str) {
    let (code, _, stderr) = run(args, &[]);
    assert_eq!(code, 2, "stderr: {stderr}");
    assert_eq!(stderr.lines().count(), 1, "not one line: {stderr}");
    assert!(stderr.starts_with("profiler: error: ") && stderr.contains(what), "expected `{what}` in: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

fn base_profile() -> serde_json::Value {
    let bytes = std::fs::read(data().join("base/deals-create/profile.json.gz")).unwrap();
    let mut text = String::new();
    std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(&bytes[..]), &mut text).unwrap();
    serde_json::from_str(&text).unwrap()
}

#[test]
fn bad_inputs_give_one_line_and_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let base = data().join("base");
    let base_file = data().join("base/deals-create/profile.json.gz");

    let text = d.join("notes.txt");
    std::fs::write(&text, "hello world\nthis is not a profile\n").unwrap();
    refused(&[&base_file, &text], "HEAD: ");
    refused(&[&base_file, &text], "not profile.json, pprof, perf script or folded stacks");

    let other_json = d.join("package.json");
    std::fs::write(&other_json, r#"{"name": "x", "version": "1.0.0"}"#).unwrap();
    refused(&[&other_json, &base_file], "not a profiler profile.json");

    let mut future = base_profile();
    future["schema_version"] = 99.into();
    let future_path = d.join("future.json");
    std::fs::write(&future_path, future.to_string()).unwrap();
    refused(&[&base_file, &future_path], "schema version 99 is newer");

    let mut empty = base_profile();
    empty["on_cpu"] = serde_json::json!([]);
    let empty_path = d.join("empty.json");
    std::fs::write(&empty_path, empty.to_string()).unwrap();
    refused(&[&empty_path, &base_file], "empty profile");

    let truncated = d.join("truncated.json.gz");
    let gz = std::fs::read(&base_file).unwrap();
    std::fs::write(&truncated, &gz[..gz.len() / 2]).unwrap();
    refused(&[&base_file, &truncated], "invalid gzip file");

    let mut other_target = base_profile();
    for p in other_target["processes"].as_array_mut().unwrap() {
        p["exe"] = "/usr/bin/nginx".into();
    }
    let other_path = d.join("nginx.json");
    std::fs::write(&other_path, other_target.to_string()).unwrap();
    refused(&[&base_file, &other_path], "different targets");

    refused(&[&base, &base_file], "compare a bench output with a bench output");

    // A bench output of another test: results.json says `db`.
    let other_bench = d.join("db-bench");
    std::fs::create_dir_all(other_bench.join("deals-create")).unwrap();
    let results = std::fs::read_to_string(data().join("head/results.json")).unwrap().replace("\"deals-create\"", "\"db\"").replace("\"dir\": \"db\"", "\"dir\": \"deals-create\"");
    std::fs::write(other_bench.join("results.json"), results).unwrap();
    std::fs::copy(data().join("head/deals-create/profile.json.gz"), other_bench.join("deals-create/profile.json.gz")).unwrap();
    refused(&[&base, &other_bench], "different tests");

    let mut future_results: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(data().join("head/results.json")).unwrap()).unwrap();
    future_results["schema_version"] = 7.into();
    let future_bench = d.join("future-bench");
    std::fs::create_dir_all(&future_bench).unwrap();
    std::fs::write(future_bench.join("results.json"), future_results.to_string()).unwrap();
    refused(&[&base, &future_bench], "results.json schema version 7 is newer");

    refused(&[&base, &d.join("missing")], "HEAD: ");
    refused(&[d, &base], "neither results.json");
}

/// Folded stacks keep names only; pprof also keeps source files, with which the rules qualify
/// inlined frames (their DWARF names are unqualified), so layers and costs may differ between
/// the two. The stacks themselves must agree: every function row is unchanged.
#[test]
fn folded_and_pprof_of_one_profile_have_the_same_stacks() {
    let dir = tempfile::tempdir().unwrap();
    let side = profiler::compare::import::from_bytes(&std::fs::read(data().join("base/deals-create/profile.json.gz")).unwrap(), Path::new("p")).unwrap();
    let profile = side.tests[0].profile.as_ref().unwrap();
    // Folded without thread names (pprof keeps threads as labels, not frames).
    let options = profiler::profile::folded::Options { include_thread: false, ..Default::default() };
    let folded = dir.path().join("stacks.folded");
    std::fs::write(&folded, profiler::profile::folded::to_string(profile, &profile.on_cpu, &options)).unwrap();
    let pprof = dir.path().join("profile.pb.gz");
    profiler::profile::pprof::write(profile, profiler::profile::pprof::Kind::OnCpu, std::fs::File::create(&pprof).unwrap()).unwrap();
    let (code, stdout, stderr) = run(&[&folded, &pprof], &["--format", "json"]);
    assert_eq!(code, 0, "{stderr}");
    let d: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let rows = d["tests"][0]["rows"].as_array().unwrap();
    let frames: Vec<&serde_json::Value> = rows.iter().filter(|r| r["section"] == "frames" || r["section"] == "self_frames").collect();
    assert!(frames.len() > 50, "only {} function rows", frames.len());
    for r in frames {
        assert_eq!(r["significance"], "no_change", "{r}");
    }
    assert_eq!(d["tests"][0]["normalization"], "per_sample");
    let n: u64 = profile.on_cpu.iter().map(|c| c.count).sum();
    assert_eq!(d["tests"][0]["samples"], serde_json::json!([n, n]));
}

#[test]
fn perf_script_samples_match_perf() {
    let dir = tempfile::tempdir().unwrap();
    let data_file = dir.path().join("perf.data");
    let rec = Command::new("perf")
        .args(["record", "-q", "-e", "cpu-clock", "-F", "499", "-g", "-o"])
        .arg(&data_file)
        .args(["--", "sh", "-c", "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done"])
        .output()
        .expect("perf missing: scripts/setup installs linux-perf");
    assert!(rec.status.success(), "perf record: {}", String::from_utf8_lossy(&rec.stderr));
    let script = Command::new("perf").args(["script", "-i"]).arg(&data_file).output().unwrap();
    assert!(script.status.success(), "perf script: {}", String::from_utf8_lossy(&script.stderr));
    let text = String::from_utf8_lossy(&script.stdout).into_owned();
    // perf's own count: one event line per sample (stack lines start with a tab).
    let samples = text.lines().filter(|l| !l.trim().is_empty() && !l.starts_with('\t') && l.contains("cpu-clock")).count() as u64;
    assert!(samples > 20, "perf recorded only {samples} samples");
    let side = profiler::compare::import::from_bytes(text.as_bytes(), Path::new("perf.txt")).unwrap();
    assert_eq!(side.kind, profiler::compare::import::InputKind::PerfScript);
    let profile = side.tests[0].profile.as_ref().unwrap();
    assert_eq!(profile.on_cpu.iter().map(|c| c.count).sum::<u64>(), samples);
    // inferno's collapser puts the command first: every stack starts with `sh`.
    assert!(profile.stacks.iter().all(|s| profile.frames[s.frames[0] as usize].function == "sh"));
}

/// Runs `profiler diff` with `env` set; returns (exit code, stdout, stderr).
fn run_env(args: &[&Path], extra: &[&str], env: &[(&str, &str)]) -> (i32, String, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_profiler")).arg("diff").args(args).args(extra).envs(env.iter().copied()).output().unwrap();
    (o.status.code().unwrap_or(-1), String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned())
}

/// Asserts exit 2 and exactly `line` (plus its line break) on stderr.
fn refused_with(args: &[&Path], extra: &[&str], line: &str) {
    let (code, _, stderr) = run(args, extra);
    assert_eq!(code, 2, "stderr: {stderr}");
    assert_eq!(stderr, format!("{line}\n"));
}

fn write_json(path: &Path, v: &serde_json::Value) -> PathBuf {
    std::fs::write(path, v.to_string()).unwrap();
    path.to_path_buf()
}

/// A bench output like `head/` with `edit` applied to its results.json.
fn bench_with(d: &Path, name: &str, edit: impl FnOnce(&mut serde_json::Value)) -> PathBuf {
    let dir = d.join(name);
    std::fs::create_dir_all(dir.join("deals-create")).unwrap();
    std::fs::copy(data().join("head/deals-create/profile.json.gz"), dir.join("deals-create/profile.json.gz")).unwrap();
    let mut results: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(data().join("head/results.json")).unwrap()).unwrap();
    edit(&mut results);
    write_json(&dir.join("results.json"), &results);
    dir
}

fn small_folded() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../agent/tests/data/folded/small.stacks.folded")).unwrap()
}

/// Each cause once: the error types wrote their source into their message and returned it as
/// their source too, and `main` printed the chain, so every OS and parser error came twice.
#[test]
fn errors_say_each_cause_once() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let base_file = data().join("base/deals-create/profile.json.gz");

    let missing = d.join("nonexistent.json");
    refused_with(&[&missing, &base_file], &[], &format!("profiler: error: BASE: {}: No such file or directory (os error 2)", missing.display()));
    refused_with(&[&base_file, &missing], &[], &format!("profiler: error: HEAD: {}: No such file or directory (os error 2)", missing.display()));

    let trunc = d.join("trunc.json");
    std::fs::write(&trunc, "{\"format\": \"profiler-profile\", \"meta\": {\"target\": \"x").unwrap();
    refused_with(&[&trunc, &base_file], &[], &format!("profiler: error: BASE: {}: not JSON: EOF while parsing a string at line 1 column 52", trunc.display()));

    let array = d.join("array.json");
    std::fs::write(&array, "[1, 2]").unwrap();
    refused_with(&[&base_file, &array], &[], &format!("profiler: error: HEAD: {}: not a profiler profile.json (a JSON array, expected an object)", array.display()));

    let no_format = write_json(&d.join("no-format.json"), &serde_json::json!({"schema_version": 1}));
    refused_with(&[&no_format, &base_file], &[], &format!("profiler: error: BASE: {}: not a profiler profile.json (no \"format\": \"profiler-profile\" field)", no_format.display()));

    let mut future = base_profile();
    future["schema_version"] = 99.into();
    let future = write_json(&d.join("future.json"), &future);
    refused_with(
        &[&base_file, &future],
        &[],
        &format!("profiler: error: HEAD: {}: profile schema version 99 is newer than the 2 this profiler reads; use a newer profiler", future.display()),
    );

    // A bench output whose test folder is missing.
    let bench = d.join("bench");
    std::fs::create_dir_all(&bench).unwrap();
    std::fs::copy(data().join("base/results.json"), bench.join("results.json")).unwrap();
    refused_with(
        &[&bench, &data().join("head")],
        &[],
        &format!(
            "profiler: error: BASE: {}: invalid results.json: test deals-create was profiled into deals-create, but {} has no profile.json or profile.json.gz",
            bench.join("results.json").display(),
            bench.join("deals-create").display()
        ),
    );

    // --rules: a TOML error has several lines; they are joined into one.
    let rules = d.join("bad.toml");
    std::fs::write(&rules, "x = \n").unwrap();
    let (code, _, stderr) = run(&[&base_file, &base_file], &["--rules", rules.to_str().unwrap()]);
    assert_eq!(code, 2, "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "not one line: {stderr}");
    assert!(stderr.starts_with(&format!("profiler: error: {}", rules.display())), "{stderr}");
}

/// Counts that overflow a u64 sum or pass 2^53 are refused, naming the file and the field (a
/// release build wrapped them: "17 / 16 on-CPU samples", exit 0).
#[test]
fn overflowing_counts_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let small = Path::new(env!("CARGO_MANIFEST_DIR")).join("../agent/tests/data/folded/small.stacks.folded");
    let lines = small_folded().lines().count();

    let big = d.join("big.folded");
    std::fs::write(&big, format!("{}a;b;c 18446744073709551615\n", small_folded())).unwrap();
    refused_with(
        &[&small, &big],
        &[],
        &format!(
            "profiler: error: HEAD: {}: invalid folded stacks: line {}: sample count 18446744073709551615 takes the file's total past 9007199254740992 (2^53), more than any profile holds",
            big.display(),
            lines + 1
        ),
    );
    // Two counts that fit alone but not together.
    let pair = d.join("pair.folded");
    std::fs::write(&pair, "a;b 5000000000000000\na;c 5000000000000000\n").unwrap();
    refused(&[&pair, &small], "line 2: sample count 5000000000000000 takes the file's total past 9007199254740992");

    let base_file = data().join("base/deals-create/profile.json.gz");
    let mut p = base_profile();
    p["on_cpu"][0]["count"] = u64::MAX.into();
    let on_cpu = write_json(&d.join("on-cpu.json"), &p);
    refused_with(
        &[&base_file, &on_cpu],
        &[],
        &format!(
            "profiler: error: HEAD: {}: invalid profile.json: on_cpu[0].count = 18446744073709551615: the sum of on_cpu[].count passes 2^53 (9007199254740992), more than any profile holds",
            on_cpu.display()
        ),
    );
    let mut p = base_profile();
    p["on_cpu"][0]["count"] = (u64::MAX / 2).into();
    p["on_cpu"][1]["count"] = (u64::MAX / 2).into();
    refused(&[&write_json(&d.join("halves.json"), &p), &base_file], "the sum of on_cpu[].count passes 2^53");

    let mut p = base_profile();
    p["syscalls"][0]["count"] = u64::MAX.into();
    refused(&[&base_file, &write_json(&d.join("syscalls.json"), &p)], "invalid profile.json: syscalls[0].count = 18446744073709551615: the sum of syscalls[].count passes 2^53");

    let mut p = base_profile();
    p["off_cpu"][0]["total_ns"] = u64::MAX.into();
    refused(&[&base_file, &write_json(&d.join("wait-ns.json"), &p)], "the sum of off_cpu[].total_ns passes 18446744073709551615 (it overflows)");

    let mut p = base_profile();
    p["wire"]["http"]["requests"] = u64::MAX.into();
    refused(&[&base_file, &write_json(&d.join("requests.json"), &p)], "wire.http.requests = 18446744073709551615");

    // pprof: a sample value that takes the total past 2^53.
    let side = profiler::compare::import::from_bytes(&std::fs::read(&base_file).unwrap(), Path::new("p")).unwrap();
    let mut profile = side.tests[0].profile.clone().unwrap();
    profile.on_cpu[0].count = 1 << 62;
    let pprof = d.join("big.pb.gz");
    profiler::profile::pprof::write(&profile, profiler::profile::pprof::Kind::OnCpu, std::fs::File::create(&pprof).unwrap()).unwrap();
    refused(&[&pprof, &pprof], "invalid pprof profile: sample[");
    refused(&[&pprof, &pprof], "4611686018427387904 takes the samples' total past 9007199254740992 (2^53)");
}

/// Implausible figures are refused with the field: they were accepted with exit 0.
#[test]
fn implausible_figures_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let base = data().join("base");
    let base_file = data().join("base/deals-create/profile.json.gz");

    let b = bench_with(d, "rps", |r| r["tests"][0]["runs"][0]["wrk"]["req_per_s"] = 1e308.into());
    refused_with(
        &[&base, &b],
        &[],
        &format!("profiler: error: HEAD: {}: invalid results.json: tests[0].runs[0].wrk.req_per_s = 1e308 is not a throughput (0 to 1e8 req/s)", b.join("results.json").display()),
    );
    let b = bench_with(d, "negative", |r| r["tests"][0]["runs"][2]["wrk"]["req_per_s"] = (-1.0).into());
    refused(&[&base, &b], "tests[0].runs[2].wrk.req_per_s = -1 is not a throughput");
    let b = bench_with(d, "requests", |r| r["tests"][0]["runs"][1]["wrk"]["requests"] = u64::MAX.into());
    refused(&[&base, &b], "invalid results.json: tests[0].runs[1].wrk.requests = 18446744073709551615 in ");
    let b = bench_with(d, "profiled-requests", |r| r["tests"][0]["profiled"]["run"]["wrk"]["requests"] = u64::MAX.into());
    refused(&[&base, &b], "tests[0].profiled.run.wrk.requests = 18446744073709551615 in ");
    let b = bench_with(d, "latency", |r| r["tests"][0]["runs"][0]["wrk"]["latency"]["p99_us"] = u64::MAX.into());
    refused(&[&base, &b], "tests[0].runs[0].wrk.latency.p99_us = 18446744073709551615 is more than an hour");
    let b = bench_with(d, "cpu", |r| r["tests"][0]["runs"][0]["app"]["cpu_ns"] = u64::MAX.into());
    refused(&[&b, &base], "BASE: ");
    refused(&[&b, &base], "tests[0].runs[0].app.cpu_ns = 18446744073709551615 is more than twice what 2 CPUs give");
    let b = bench_with(d, "v0", |r| r["schema_version"] = 0.into());
    refused_with(&[&base, &b], &[], &format!("profiler: error: HEAD: {}: invalid results.json: schema_version 0: results.json versions start at 1", b.join("results.json").display()));

    for (hz, name) in [(u64::MAX, "max"), (0, "zero")] {
        let mut p = base_profile();
        p["meta"]["frequency_hz"] = hz.into();
        let path = write_json(&d.join(format!("hz-{name}.json")), &p);
        refused_with(
            &[&base_file, &path],
            &[],
            &format!("profiler: error: HEAD: {}: invalid profile.json: meta.frequency_hz = {hz} is not a sampling frequency (1 to 1000000 Hz)", path.display()),
        );
    }
    let mut p = base_profile();
    p["schema_version"] = 0.into();
    let v0 = write_json(&d.join("v0.json"), &p);
    refused_with(&[&v0, &base_file], &[], &format!("profiler: error: BASE: {}: invalid profile.json: schema_version 0: profile.json versions start at 1", v0.display()));

    // Counts that fit but that the run could not have made: 1e12 samples at 999 Hz in 4.7 s
    // on 2 CPUs, 1e15 syscalls (4.9e15 calls per request with u64::MAX before).
    let mut p = base_profile();
    p["on_cpu"][0]["count"] = 1_000_000_000_000u64.into();
    let samples = write_json(&d.join("samples.json"), &p);
    refused(&[&base_file, &samples], "invalid profile.json: on_cpu[].count add up to 1000000000");
    // 2 x (999 Hz x 4.686 s + 1) x 2 CPUs.
    refused(&[&base_file, &samples], "samples in 4.686 s on 2 CPUs (meta.duration_ns, meta.cpus) at 999 Hz: more than the 18728 the sampler can take");
    let mut p = base_profile();
    p["syscalls"][0]["count"] = 1_000_000_000_000_000u64.into();
    refused(&[&base_file, &write_json(&d.join("calls.json"), &p)], "syscalls[].count add up to");
    let mut p = base_profile();
    p["meta"]["syscall_windows"] = serde_json::json!({"duty_pct": 25, "period_ns": 1_000_000_000u64, "windows": 5, "traced_ns": 1});
    refused(&[&base_file, &write_json(&d.join("windows.json"), &p)], "meta.syscall_windows.traced_ns = 1 of a 4.686 s run would scale the syscall counts by");
}

/// Log lines carry no colour codes when stderr is not a terminal (inferno's warnings came
/// with ANSI escapes into CI logs).
#[test]
fn log_lines_have_no_colour_codes_off_a_terminal() {
    let dir = tempfile::tempdir().unwrap();
    let perf = dir.path().join("clean.perf");
    let event = "target-app 1234 1234 100.000001: 1001001 cpu-clock:\n\t55d0c0a1b2c3 work+0x33 (/usr/local/bin/target-app)\n\n";
    std::fs::write(&perf, event.repeat(3)).unwrap();
    // inferno logs the event type it keeps at info level.
    let (code, _, stderr) = run_env(&[&perf, &perf], &[], &[("RUST_LOG", "info")]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("INFO"), "no log line to check: {stderr:?}");
    assert!(!stderr.contains('\x1b'), "ANSI escape codes on a stderr that is not a terminal: {stderr:?}");
}

/// A folded file with one line that is not UTF-8 is read as folded stacks and refused naming
/// that line (it was taken for a broken protobuf); a folded file whose first frame starts with
/// `[` is not taken for JSON.
#[test]
fn text_inputs_are_read_as_text() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let small = Path::new(env!("CARGO_MANIFEST_DIR")).join("../agent/tests/data/folded/small.stacks.folded");
    let lines = small_folded().lines().count();
    let bin = d.join("bin.folded");
    let mut bytes = small_folded().into_bytes();
    bytes.extend_from_slice(b"\xff\xfe binary 3\n");
    std::fs::write(&bin, bytes).unwrap();
    refused_with(
        &[&small, &bin],
        &[],
        &format!("profiler: error: HEAD: {}: invalid folded stacks: line {}: not UTF-8 text (byte 0xff at column 1)", bin.display(), lines + 1),
    );
    // The same line first: the file is not known to be folded stacks yet.
    let first = d.join("first.folded");
    std::fs::write(&first, b"\xff\xfe binary 3\na;b 2\n").unwrap();
    refused(&[&first, &small], "not profile.json, pprof, perf script or folded stacks: line 1: not UTF-8 text (byte 0xff at column 1)");

    let unknown = d.join("unknown.folded");
    std::fs::write(&unknown, "[unknown];main;work 3\n[unknown];main;idle 2\n").unwrap();
    let (code, stdout, stderr) = run(&[&unknown, &unknown], &["--format", "json"]);
    assert_eq!(code, 0, "{stderr}");
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["base"]["kind"], "folded");
    assert_eq!(v["tests"][0]["samples"], serde_json::json!([5, 5]));
}

/// A truncated `profile.json` whose first line happens to end in a number (`{"meta": 3`) is
/// refused as JSON, not read as a folded stack of 3 samples with exit 0.
#[test]
fn a_truncated_json_file_is_refused_as_json() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.json");
    std::fs::write(&bad, "{\"meta\": 3\n").unwrap();
    let good = data().join("base/deals-create/profile.json.gz");
    refused(&[&bad, &good], "EOF while parsing");
}

/// Folded stacks: blank lines are skipped; a frame without a name is refused with its line.
#[test]
fn folded_lines_without_frame_names_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let blank = d.join("blank.folded");
    std::fs::write(&blank, "a;b 3\n\n   \na;c 4\n").unwrap();
    let (code, stdout, stderr) = run(&[&blank, &blank], &["--format", "json"]);
    assert_eq!(code, 0, "{stderr}");
    let v: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(v["tests"][0]["samples"], serde_json::json!([7, 7]));

    let empty = d.join("empty.folded");
    std::fs::write(&empty, "a;b 3\n;;; 12\n").unwrap();
    refused_with(&[&blank, &empty], &[], &format!("profiler: error: HEAD: {}: invalid folded stacks: line 2: frame 1 of `;;;` has no name", empty.display()));
    let middle = d.join("middle.folded");
    std::fs::write(&middle, "a;;b 3\n").unwrap();
    refused(&[&middle, &blank], "line 1: frame 2 of `a;;b` has no name");
}

/// `perf script` text with lines inferno cannot parse is refused (inferno skipped them with a
/// warning and the diff went on, exit 0).
#[test]
fn perf_script_with_garbage_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let good = "target-app 1234 1234 100.000001: 1001001 cpu-clock:\n\t55d0c0a1b2c3 work+0x33 (/usr/local/bin/target-app)\n\t55d0c0a1b000 main+0x10 (/usr/local/bin/target-app)\n\n";
    let garbage = d.join("garbage.perf");
    std::fs::write(&garbage, format!("{good}this is not perf output\nneither is this\n\n{good}")).unwrap();
    refused_with(
        &[&garbage, &garbage],
        &[],
        &format!(
            "profiler: error: BASE: {}: invalid perf script output: line 5: `this is not perf output` is neither an event line (`COMMAND PID TIME: EVENT:`) nor a stack line (`ADDRESS SYMBOL (MODULE)`) (and 1 more line like it)",
            garbage.display()
        ),
    );
    let bad_stack = d.join("bad-stack.perf");
    std::fs::write(&bad_stack, format!("{good}target-app 1234 1234 100.000002: 1001001 cpu-clock:\n\t55d0c0a1b2c3 work+0x33 (/usr/local/bin/target-app)\n\tno module here\n\n")).unwrap();
    refused(&[&bad_stack, &bad_stack], "line 7: `\\tno module here` is neither an event line");
}

#[test]
fn out_that_is_a_file_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("existing-file");
    std::fs::write(&file, "x").unwrap();
    let base_file = data().join("base/deals-create/profile.json.gz");
    refused_with(&[&base_file, &base_file], &["--out", file.to_str().unwrap()], &format!("profiler: error: --out {} is a file, not a folder", file.display()));
}

/// An attach output folder of `profile` (a file of the test data) with `runs` as its
/// `runs.json` (none when `Null`).
fn attach_with(d: &Path, name: &str, profile: &str, runs: serde_json::Value) -> PathBuf {
    let dir = d.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(data().join(profile), dir.join("profile.json.gz")).unwrap();
    if !runs.is_null() {
        write_json(&dir.join("runs.json"), &runs);
    }
    dir
}

fn runs_json(req_per_s: &[f64], cpu_us_per_request: f64) -> serde_json::Value {
    let runs: Vec<serde_json::Value> = req_per_s
        .iter()
        .map(|&r| {
            let requests = (r * 5.0) as u64;
            serde_json::json!({"duration_s": 5.0, "requests": requests, "req_per_s": r, "p50_us": 900, "p99_us": 4000,
                               "app_cpu_ns": (requests as f64 * cpu_us_per_request * 1e3) as u64})
        })
        .collect();
    serde_json::json!({"format": "profiler-runs", "schema_version": 1, "runs": runs})
}

#[test]
fn attach_outputs_with_runs_json_compare_throughput_and_cpu() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let base = attach_with(d, "base", "base/deals-create/profile.json.gz", runs_json(&[1000.0, 1010.0, 990.0], 500.0));
    let head = attach_with(d, "head", "head/deals-create/profile.json.gz", runs_json(&[500.0, 505.0, 495.0], 1000.0));
    let out = d.join("diff");
    let (code, stdout, stderr) = run(&[&base, &head], &["--out", out.to_str().unwrap()]);
    assert_eq!(code, 1, "a halved req/s beyond the runs' spread fails the gate\nstdout: {stdout}\nstderr: {stderr}");
    let md = std::fs::read_to_string(out.join("diff.md")).unwrap();
    assert!(md.contains("| req/s | 1000 | 500 | -500 (-50.0%) | ±30.0 | **worse, beyond noise** |"), "{md}");
    assert!(md.contains("| app CPU per request (accounted, /proc) (µs/req) | 500 | 1000 |"), "{md}");
    // The same runs on both sides: nothing in the gate moved.
    let same = attach_with(d, "same", "head/deals-create/profile.json.gz", runs_json(&[1000.0, 1010.0, 990.0], 500.0));
    let (code, _, stderr) = run(&[&base, &same], &["--format", "md"]);
    assert_eq!(code, 0, "{stderr}");
    // runs.json on one side only: the runs are not compared, and the diff says so.
    let bare = attach_with(d, "bare", "head/deals-create/profile.json.gz", serde_json::Value::Null);
    let (_, stdout, _) = run(&[&base, &bare], &["--format", "md"]);
    assert!(stdout.contains("only one side has measured runs"), "{stdout}");
}

/// An attach output folder whose `profile.json` is the test data's BASE profile with a wire
/// steady window of `requests` HTTP requests in 10 s and every paired response taking
/// `latency_ms`.
fn attach_with_wire(d: &Path, name: &str, requests: u64, latency_ms: u64) -> PathBuf {
    let mut p = base_profile();
    let wire = p["wire"].as_object_mut().unwrap();
    let pg = wire["pg"].clone();
    wire.insert(
        "steady".into(),
        serde_json::json!({"start_ns": 1_000_000_000u64, "end_ns": 11_000_000_000u64, "http_requests": requests, "endpoints": [], "pg": pg}),
    );
    for e in wire["http"]["endpoints"].as_array_mut().unwrap() {
        let paired: u64 = e["statuses"].as_object().unwrap().values().map(|n| n.as_u64().unwrap()).sum();
        e["latency_total_ns"] = serde_json::json!(paired * latency_ms * 1_000_000);
        e["latency_mean_ns"] = serde_json::json!(if paired > 0 { latency_ms * 1_000_000 } else { 0 });
    }
    let dir = d.join(name);
    std::fs::create_dir_all(&dir).unwrap();
    write_json(&dir.join("profile.json"), &p);
    dir
}

#[test]
fn attach_outputs_without_runs_compare_the_wires_throughput_and_latency() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let base = attach_with_wire(d, "base", 10_000, 8);
    let head = attach_with_wire(d, "head", 5_000, 16);
    let (code, stdout, stderr) = run(&[&base, &head], &["--format", "md"]);
    // The same profile on both sides: only the wire's throughput and latency moved, and a
    // halved throughput fails the gate although the CPU per request did not change.
    assert_eq!(code, 1, "stdout: {stdout}\nstderr: {stderr}");
    assert!(stdout.contains("| throughput (wire, steady window) (req/s) | 1000 | 500 | -500 (-50.0%) | ? | significance unknown |"), "{stdout}");
    assert!(stdout.contains("| latency mean (wire) (ms) | 8.00 | 16.0 | +8.00 (+100.0%) | ? | significance unknown |"), "{stdout}");
    assert!(stdout.contains("req/s seen on the wire 1000 → 500 (-50.0%"), "{stdout}");
    // The same throughput: nothing in the gate moved.
    let same = attach_with_wire(d, "same", 10_000, 8);
    let (code, stdout, stderr) = run(&[&base, &same], &["--format", "md"]);
    assert_eq!(code, 0, "stdout: {stdout}\nstderr: {stderr}");
}

#[test]
fn bad_runs_json_is_refused_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let base = attach_with(d, "base", "base/deals-create/profile.json.gz", runs_json(&[1000.0], 500.0));
    let mut swapped = runs_json(&[1000.0], 500.0);
    swapped["runs"][0]["p50_us"] = 5000.into();
    let head = attach_with(d, "p50", "head/deals-create/profile.json.gz", swapped);
    refused_with(
        &[&base, &head],
        &[],
        &format!("profiler: error: HEAD: {}: invalid runs.json: runs[0].p50_us = 5000 is above p99_us = 4000", head.join("runs.json").display()),
    );
    let head = attach_with(d, "format", "head/deals-create/profile.json.gz", serde_json::json!({"runs": []}));
    refused(&[&base, &head], "not a runs.json (no \"format\": \"profiler-runs\")");
    let mut future = runs_json(&[1000.0], 500.0);
    future["schema_version"] = 2.into();
    let head = attach_with(d, "future", "head/deals-create/profile.json.gz", future);
    refused(&[&base, &head], "runs.json schema version 2 is newer than the 1 this profiler reads");
    let mut cpu = runs_json(&[1000.0], 500.0);
    cpu["runs"][0]["app_cpu_ns"] = u64::MAX.into();
    let head = attach_with(d, "cpu", "head/deals-create/profile.json.gz", cpu);
    refused(&[&head, &base], "BASE: ");
    refused(&[&head, &base], "runs[0].app_cpu_ns = 18446744073709551615 is more than twice what");
    let mut typo = runs_json(&[1000.0], 500.0);
    typo["runs"][0]["req_per_sec"] = 1.into();
    let head = attach_with(d, "typo", "head/deals-create/profile.json.gz", typo);
    refused(&[&base, &head], "unknown field `req_per_sec`");
}

#[test]
fn a_side_whose_scaled_counts_round_to_zero_gets_an_empty_graph() {
    // Per sample, BASE is scaled by HEAD's samples over BASE's (0.001 here): every BASE
    // count (10) rounds to 0, and diff-base.svg has nothing to draw.
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().join("base.folded");
    let head = dir.path().join("head.folded");
    std::fs::write(&base, (0..100).map(|i| format!("main;serve;parse{i} 10\n")).collect::<String>()).unwrap();
    std::fs::write(&head, "main;serve;compile 1\n").unwrap();
    let out = dir.path().join("diff");
    let (code, stdout, stderr) = run(&[&base, &head], &["--out", out.to_str().unwrap()]);
    assert!(code == 0 || code == 1, "exit {code}\nstdout: {stdout}\nstderr: {stderr}");
    for svg in ["diff.svg", "diff-base.svg"] {
        let text = std::fs::read_to_string(out.join(svg)).unwrap();
        assert!(text.starts_with("<?xml") || text.contains("<svg"), "{svg}: {text}");
    }
}
