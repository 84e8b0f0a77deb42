//! `profiler report` end to end, through the real binary: the hand-made fixture renders every
//! file, the SVGs are well-formed XML with the expected titles, the summary and
//! `syscalls.json` hold the numbers computed by hand in `data/profile/README.md`, and bad input
//! exits 2 with one line on stderr.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use profiler::profile::{json, Profile};

fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../agent/tests/data/profile/small.json")
}

fn profiler(args: &[&std::ffi::OsStr]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_profiler"))
        .args(args)
        .env_remove("RUST_LOG")
        .output()
        .unwrap()
}

fn report(profile: &Path, out: Option<&Path>) -> Output {
    let mut args = vec![std::ffi::OsStr::new("report"), profile.as_os_str()];
    if let Some(out) = out {
        args.push("--out".as_ref());
        args.push(out.as_os_str());
    }
    profiler(&args)
}

/// Parses `svg` with quick-xml to the end (an error on any malformed markup) and returns the
/// text of the element with `id="title"` (inferno's title) or of `<title>` (the empty SVG).
fn svg_title(svg: &str) -> String {
    use quick_xml::events::Event;
    let mut reader = quick_xml::Reader::from_str(svg);
    let mut in_title = false;
    let mut title = None;
    let mut root = None;
    loop {
        match reader.read_event().unwrap_or_else(|e| panic!("invalid XML: {e}")) {
            Event::Start(e) => {
                let name = String::from_utf8(e.name().as_ref().to_vec()).unwrap();
                root.get_or_insert(name.clone());
                let id_title = e
                    .attributes()
                    .flatten()
                    .any(|a| a.key.as_ref() == b"id" && a.value.as_ref() == b"title");
                in_title = title.is_none() && (id_title || (name == "title" && title.is_none()));
            }
            Event::Text(t) if in_title => {
                title = Some(t.decode().unwrap().into_owned());
                in_title = false;
            }
            Event::End(_) => in_title = false,
            Event::Eof => break,
            _ => {}
        }
    }
    assert_eq!(root.as_deref(), Some("svg"));
    title.expect("no title in the SVG")
}

fn one_error_line(out: &Output) -> String {
    assert_eq!(out.status.code(), Some(2), "stderr: {}", String::from_utf8_lossy(&out.stderr));
    let stderr = String::from_utf8(out.stderr.clone()).unwrap();
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.starts_with("profiler: error: "), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    stderr
}

#[test]
fn report_renders_every_file_with_hand_computed_numbers() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("out");
    let out = report(&fixture(), Some(&out_dir));
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));

    for name in [
        "profile.json",
        "stacks.folded",
        "flamegraph.svg",
        "offcpu.folded",
        "offcpu.svg",
        "profile.pb.gz",
        "offcpu.pb.gz",
        "syscalls.json",
        "ranking.md",
        "ranking.json",
        "index.html",
    ] {
        let len = std::fs::metadata(out_dir.join(name)).map(|m| m.len()).unwrap_or(0);
        assert!(len > 0, "{name} missing or empty");
    }
    // The re-written profile.json is the same profile, stamped with the current schema.
    let mut original = json::read(&fixture()).unwrap();
    original.schema_version = profiler::profile::SCHEMA_VERSION;
    assert_eq!(json::read(&out_dir.join("profile.json")).unwrap(), original);
    let golden = Path::new(env!("CARGO_MANIFEST_DIR")).join("../agent/tests/data/folded");
    assert_eq!(
        std::fs::read_to_string(out_dir.join("stacks.folded")).unwrap(),
        std::fs::read_to_string(golden.join("small.stacks.folded")).unwrap()
    );
    assert_eq!(
        std::fs::read_to_string(out_dir.join("offcpu.folded")).unwrap(),
        std::fs::read_to_string(golden.join("small.offcpu.folded")).unwrap()
    );

    let svg = std::fs::read_to_string(out_dir.join("flamegraph.svg")).unwrap();
    assert_eq!(svg_title(&svg), "On-CPU: pid 4242, 2.0 s, 99 Hz, 17 samples");
    // Frames are drawn with their share (inferno shows `_[i]`/`_[k]` frames without the
    // suffix and colors them apart): 8 of 17 samples, 4 of 17.
    assert!(svg.contains("<title>serde_json::ser::format_escaped_str (8 samples, 47.06%)</title>"), "frame missing");
    assert!(svg.contains("<title>do_epoll_wait (4 samples, 23.53%)</title>"), "frame missing");
    assert!(svg.contains("<title>tokio-runtime-w (14 samples, 82.35%)</title>"), "thread missing");
    // 1 truncated sample of 17 = 5.9%, in the subtitle.
    assert!(svg.contains("5.9% of stacks truncated"));
    let svg = std::fs::read_to_string(out_dir.join("offcpu.svg")).unwrap();
    // 21 waits; 5,001,100 ns = 5001 µs.
    assert_eq!(svg_title(&svg), "Off-CPU time (µs): pid 4242, 2.0 s, 21 waits, 5001 µs switched out");

    // The summary, line by line (values in data/profile/README.md).
    let stdout = String::from_utf8(out.stdout).unwrap();
    println!("{stdout}");
    for line in [
        "profile of pid 4242",
        "  2.0 s from 2026-11-30T09:00:00Z at 99 Hz on 2 CPUs (kernel 6.18.0, agent 0.1.0)",
        // 17 / 99 Hz = 0.1717 s; tids 100, 101, 102.
        "on-CPU samples: 17 (0.17 s of CPU), 3 threads",
        // 150 ms of 2 s.
        "target CPU use: 0.15 s = 7.5% of one CPU",
        "lost: 1 samples dropped, 2 stack collisions, 0 stack walk failures, 0 off-CPU dropped, 0 ring buffer dropped",
        "truncated stacks: 1 of 17 samples (5.9%)",
        "off-CPU: 21 waits, 5.0 ms switched out",
        // 8/17, 4/17, 2/17, 2/17, 1/17; ties by name, '<' before '['. The leaf of stack 0 is
        // format_escaped_str, inlined into to_vec: its samples count to to_vec.
        "   47.1%         8  serde_json::ser::to_vec",
        "   23.5%         4  do_epoll_wait_[k]",
        "   11.8%         2  <[u8, 32] as core::fmt::Debug>::fmt",
        "   11.8%         2  [unknown] (libfoo.so)",
        "    5.9%         1  _int_malloc",
        // calls/s = calls / 2 s; latencies in µs, see the README's table.
        "  recvfrom               1200      600.0      700       700       1.0       0.5       2.0",
        "  epoll_wait              600      300.0        0         0    2500.0    2097.2    4152.4",
        "  sendto                  250      125.0        0         0       3.0       2.4      24.6",
    ] {
        assert!(stdout.lines().any(|l| l == line), "missing line {line:?} in\n{stdout}");
    }
    assert!(!stdout.contains("PARTIAL"));
    let order: Vec<usize> = ["recvfrom", "epoll_wait", "sendto"]
        .iter()
        .map(|n| stdout.find(&format!("  {n} ")).unwrap())
        .collect();
    assert!(order.windows(2).all(|w| w[0] < w[1]), "syscalls not sorted by calls");

    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out_dir.join("syscalls.json")).unwrap()).unwrap();
    let s = &v["syscalls"];
    let close = |a: &serde_json::Value, b: f64| {
        let a = a.as_f64().unwrap();
        assert!((a - b).abs() < 1e-6, "{a} != {b}");
    };
    assert_eq!(s[0]["name"], "recvfrom");
    close(&s[0]["calls_per_sec"], 600.0);
    close(&s[0]["eagain_per_sec"], 350.0);
    close(&s[0]["mean_latency_ns"], 1000.0);
    close(&s[0]["p50_latency_ns"], 256.0 + 256.0 * 600.0 / 700.0);
    close(&s[0]["p99_latency_ns"], 1986.56);
    assert_eq!(s[1]["name"], "epoll_wait");
    close(&s[1]["p50_latency_ns"], 2_097_152.0);
    close(&s[1]["p99_latency_ns"], 4_152_360.96);
    assert_eq!(s[2]["name"], "sendto");
    close(&s[2]["p50_latency_ns"], 2048.0 + 2048.0 * 25.0 / 146.0);
    close(&s[2]["p99_latency_ns"], 24_576.0);
    assert_eq!(v["duration_ns"], 2_000_000_000u64);
}

#[test]
fn default_output_is_the_profile_directory() {
    let dir = tempfile::tempdir().unwrap();
    let profile = dir.path().join("profile.json");
    std::fs::copy(fixture(), &profile).unwrap();
    let out = report(&profile, None);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(dir.path().join("flamegraph.svg").exists());
    assert!(dir.path().join("syscalls.json").exists());
    // The page as `profiler attach` writes it: findings first, the flamegraphs beside it.
    let page = std::fs::read_to_string(dir.path().join("index.html")).unwrap();
    let (findings, graphs) = (page.find(r#"id="findings""#).expect("findings"), page.find(r#"id="flamegraphs""#).expect("flamegraphs"));
    assert!(findings < graphs);
    assert!(page.contains(r#"data="flamegraph.svg""#) && page.contains(r#"data="offcpu.svg""#), "{page}");
    // 17 samples of 99 Hz over 2 s, no request count: the ranking says so.
    let ranking: serde_json::Value = serde_json::from_slice(&std::fs::read(dir.path().join("ranking.json")).unwrap()).unwrap();
    assert_eq!(ranking["requests"], serde_json::Value::Null);
    // The attach output folder itself renders its profile.json (a fresh user passed the folder
    // and got "Is a directory").
    std::fs::remove_file(dir.path().join("flamegraph.svg")).unwrap();
    let out = report(dir.path(), None);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(dir.path().join("flamegraph.svg").exists());
}

#[test]
fn a_ranking_of_the_run_is_kept_unless_rules_are_given() {
    let dir = tempfile::tempdir().unwrap();
    let profile = dir.path().join("profile.json");
    std::fs::copy(fixture(), &profile).unwrap();
    assert!(report(&profile, None).status.success());
    // As a bench writes it: with the request count its load measured, which the profile lacks.
    let path = dir.path().join("ranking.json");
    let mut ranking: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    ranking["requests"] = 12345.into();
    std::fs::write(&path, serde_json::to_vec(&ranking).unwrap()).unwrap();
    assert!(report(&profile, None).status.success());
    let kept: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    assert_eq!(kept["requests"], 12345);
    assert!(std::fs::read_to_string(dir.path().join("index.html")).unwrap().contains("12,345 requests"));
    // With --rules, ranked anew.
    let rules = dir.path().join("rules.toml");
    std::fs::write(&rules, "").unwrap();
    let out = profiler(&["report".as_ref(), profile.as_os_str(), "--rules".as_ref(), rules.as_os_str()]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let anew: serde_json::Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    assert_eq!(anew["requests"], serde_json::Value::Null);
}

#[test]
fn partial_runs_say_so() {
    let dir = tempfile::tempdir().unwrap();
    let mut p = json::read(&fixture()).unwrap();
    p.meta.partial = Some("target exited after 1.3 s".into());
    let path = dir.path().join("profile.json");
    json::write(&p, &path).unwrap();
    let out = report(&path, None);
    assert!(out.status.success());
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(stdout.contains("\n  PARTIAL: the run ended early: target exited after 1.3 s\n"), "{stdout}");
    let svg = std::fs::read_to_string(dir.path().join("flamegraph.svg")).unwrap();
    assert!(svg.contains("PARTIAL: target exited after 1.3 s"));
}

#[test]
fn empty_profile_still_renders_valid_files() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("profile.json");
    // A run that sampled nothing: no stacks, but a real frequency.
    let mut empty = Profile::default();
    empty.meta.frequency_hz = 99;
    json::write(&empty, &path).unwrap();
    let out = report(&path, None);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for svg in ["flamegraph.svg", "offcpu.svg"] {
        let text = std::fs::read_to_string(dir.path().join(svg)).unwrap();
        let title = svg_title(&text);
        assert!(title.contains("0 samples") || title.contains("0 waits"), "{title}");
        assert!(text.contains("no samples"));
    }
    assert_eq!(std::fs::read_to_string(dir.path().join("stacks.folded")).unwrap(), "");
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(stdout.contains("on-CPU samples: 0 (0.00 s of CPU), 0 threads"), "{stdout}");
    assert!(stdout.contains("truncated stacks: 0 of 0 samples (0.0%)"), "{stdout}");
}

#[test]
fn bad_input_exits_2_with_one_line() {
    let dir = tempfile::tempdir().unwrap();

    let err = one_error_line(&report(&dir.path().join("missing.json"), None));
    assert!(err.contains("missing.json: No such file or directory"), "{err}");

    let future = dir.path().join("future.json");
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(fixture()).unwrap()).unwrap();
    v["schema_version"] = 99.into();
    std::fs::write(&future, serde_json::to_vec(&v).unwrap()).unwrap();
    let err = one_error_line(&report(&future, None));
    let expected = format!("profile schema version 99 is newer than the {} this profiler reads", profiler::profile::SCHEMA_VERSION);
    assert!(err.contains(&expected), "{err}");

    // Values no run has: refused as `profiler diff` refuses them (rendered, this one would
    // read "at 0 Hz", "751 samples (0.00 s of CPU)").
    let zero_hz = dir.path().join("zero-hz.json");
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(fixture()).unwrap()).unwrap();
    v["meta"]["frequency_hz"] = 0.into();
    std::fs::write(&zero_hz, serde_json::to_vec(&v).unwrap()).unwrap();
    let err = one_error_line(&report(&zero_hz, None));
    assert!(err.contains("zero-hz.json: meta.frequency_hz = 0 is not a sampling frequency"), "{err}");
    assert!(!dir.path().join("flamegraph.svg").exists(), "rendered a report of an invalid profile");

    let not_json = dir.path().join("flamegraph.svg");
    std::fs::write(&not_json, "<svg/>").unwrap();
    let err = one_error_line(&report(&not_json, None));
    assert!(err.contains("flamegraph.svg: not JSON: expected value at line 1 column 1"), "{err}");

    // An output path below a regular file cannot be created.
    let file = dir.path().join("file");
    std::fs::write(&file, "x").unwrap();
    let err = one_error_line(&report(&fixture(), Some(&file.join("out"))));
    assert!(err.contains("cannot create directory"), "{err}");
    assert!(err.contains("Not a directory"), "{err}");

    // Usage errors come from clap, also with exit 2.
    let out = profiler(&["report".as_ref()]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn broken_pipe_exits_0() {
    use std::os::fd::{FromRawFd, OwnedFd};
    let dir = tempfile::tempdir().unwrap();
    // stdout is a pipe whose read end is already closed, as after `| head -0`: the first
    // write fails with EPIPE (Rust ignores SIGPIPE).
    let mut fds = [0; 2];
    // SAFETY: pipe(2) fills two fresh descriptors, which are then owned here.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    let (read_end, write_end) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    drop(read_end);
    let out = Command::new(env!("CARGO_BIN_EXE_profiler"))
        .args(["report".as_ref(), fixture().as_os_str(), "--out".as_ref(), dir.path().as_os_str()])
        .stdout(Stdio::from(write_end))
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "stderr: {}", String::from_utf8_lossy(&out.stderr));
    assert!(out.stderr.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
    // The files were still written.
    assert!(dir.path().join("flamegraph.svg").exists());
}
