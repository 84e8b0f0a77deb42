//! The pprof writer checked by the real `go tool pprof` (golang-go): the file must load and
//! `-top` must show the fixture's hand-computed flat and cumulative values.
//!
//! Fixture `data/profile/small.json` (see its README): 17 samples at 99 Hz; leaf functions
//! `format_escaped_str` 8 (5 + 3, inlined into `to_vec`), `do_epoll_wait` 4,
//! `<[u8; 32] as Debug>::fmt` 2, `[unknown]` in libfoo.so 2, `_int_malloc` 1; the 14 worker
//! samples all pass through `clone3`; 10 through `Harness::poll` (8 + 2).

use std::collections::HashMap;
use std::io::Read;
use std::path::Path;
use std::process::Command;

use ::pprof::protos::{self, Message};
use profiler::profile::json;
use profiler::profile::pprof::{self as writer, Kind};

fn fixture() -> profiler::profile::Profile {
    json::read(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/profile/small.json"))
        .unwrap()
}

/// Runs `go tool pprof -top <args> file` and returns its stdout; fails loudly without `go`.
fn go_pprof_top(file: &Path, args: &[&str]) -> String {
    let out = Command::new("go")
        .args(["tool", "pprof", "-top"])
        .args(args)
        .arg(file)
        .env("PPROF_TMPDIR", file.parent().unwrap())
        .output()
        .expect("`go` is required for this test (Debian: apt-get install golang-go); it was not found");
    assert!(
        out.status.success(),
        "go tool pprof failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// `-top` rows as name -> (flat, cum) text.
fn rows(top: &str) -> HashMap<String, (String, String)> {
    top.lines()
        .skip_while(|l| !l.trim_start().starts_with("flat"))
        .skip(1)
        .filter_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            (f.len() >= 6).then(|| (f[5..].join(" "), (f[0].to_string(), f[3].to_string())))
        })
        .collect()
}

#[test]
fn go_tool_pprof_reads_on_cpu_profile() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("profile.pb.gz");
    writer::write(&fixture(), Kind::OnCpu, std::fs::File::create(&path).unwrap()).unwrap();

    let top = go_pprof_top(&path, &["-sample_index=samples"]);
    println!("{top}");
    assert!(top.contains("File: target-app"), "the executable is the main mapping");
    assert!(top.contains("Duration: 2s, Total samples = 17"), "{top}");
    let r = rows(&top);
    let flat = |name: &str| r.get(name).map(|v| v.0.as_str()).unwrap_or_else(|| panic!("{name} missing in\n{top}"));
    let cum = |name: &str| r.get(name).map(|v| v.1.as_str()).unwrap();
    // pprof marks lines of a location that were inlined with "(inline)"; it shortens C++-like
    // names: `<[u8; 32] as core::fmt::Debug>::fmt` shows as `::fmt`, `[unknown] (libfoo.so)`
    // as `[unknown]`.
    assert_eq!(flat("serde_json::ser::format_escaped_str (inline)"), "8");
    assert_eq!(flat("do_epoll_wait"), "4");
    assert_eq!(flat("::fmt"), "2");
    assert_eq!(flat("[unknown]"), "2");
    assert_eq!(flat("_int_malloc"), "1");
    assert_eq!(flat("serde_json::ser::to_vec"), "0");
    assert_eq!(cum("serde_json::ser::to_vec"), "8");
    assert_eq!(cum("clone3"), "14");
    assert_eq!(cum("tokio::runtime::task::harness::Harness::poll"), "10");
    assert_eq!(cum("target_app::auth::verify_token (inline)"), "2");

    // Default sample type cpu: samples × 1e9/99 ns = samples × 10,101,010 ns.
    let top = go_pprof_top(&path, &[]);
    assert!(top.contains("Type: cpu"), "{top}");
    let r = rows(&top);
    // 8 × 10,101,010 ns = 80.81 ms; 17 × = 171.72 ms.
    assert_eq!(r["serde_json::ser::format_escaped_str (inline)"].0, "80.81ms");
    assert!(top.contains("Total samples = 171.72ms"), "{top}");
}

#[test]
fn go_tool_pprof_reads_off_cpu_profile() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("offcpu.pb.gz");
    writer::write(&fixture(), Kind::OffCpu, std::fs::File::create(&path).unwrap()).unwrap();
    let top = go_pprof_top(&path, &["-nodefraction=0", "-unit=us"]);
    println!("{top}");
    assert!(top.contains("Type: offcpu"), "{top}");
    let r = rows(&top);
    // futex: 2,500,400 + 1,000,700 = 3,501,100 ns; epoll: 1,499,600 ns; nanosleep: 400 ns.
    // All three end in `schedule`: 5,001,100 ns.
    assert_eq!(r["schedule"].0, "5001.10us");
    assert_eq!(r["__x64_sys_futex"].1, "3501.10us");
    assert_eq!(r["__x64_sys_epoll_wait"].1, "1499.60us");
    assert_eq!(r["hrtimer_nanosleep"].1, "0.40us");

    let top = go_pprof_top(&path, &["-sample_index=waits", "-nodefraction=0"]);
    let r = rows(&top);
    // 10 + 4 futex waits, 6 epoll, 1 nanosleep.
    assert_eq!(r["schedule"].0, "21");
    assert_eq!(r["futex_wait"].1, "14");
}

#[test]
fn inlined_frames_share_one_location() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("profile.pb.gz");
    writer::write(&fixture(), Kind::OnCpu, std::fs::File::create(&path).unwrap()).unwrap();
    let mut bytes = Vec::new();
    flate2::read::GzDecoder::new(std::fs::File::open(&path).unwrap())
        .read_to_end(&mut bytes)
        .unwrap();
    let p = protos::Profile::decode(&*bytes).unwrap();
    let name = |function_id: u64| {
        let f = p.function.iter().find(|f| f.id == function_id).unwrap();
        p.string_table[f.name as usize].clone()
    };
    let two_line: Vec<Vec<String>> = p
        .location
        .iter()
        .filter(|l| l.line.len() > 1)
        .map(|l| l.line.iter().map(|line| name(line.function_id)).collect())
        .collect();
    // Innermost first, as profile.proto asks ("line[i] is inlined into line[i+1]").
    assert_eq!(
        two_line.len(),
        2,
        "{two_line:?}"
    );
    assert!(two_line.contains(&vec![
        "serde_json::ser::format_escaped_str".to_string(),
        "serde_json::ser::to_vec".to_string()
    ]));
    assert!(two_line.contains(&vec![
        "target_app::auth::verify_token".to_string(),
        "<target_app::auth::AuthLayer<S> as tower_service::Service<http::request::Request<B>>>::call".to_string()
    ]));
    // The on-CPU stacks 0-4 use frames 0..=25 (26 frames; 26..=34 are off-CPU only): 26
    // functions; the 2 inlined frames share their caller's location: 24 locations.
    assert_eq!(p.function.len(), 26);
    assert_eq!(p.location.len(), 24);
    assert_eq!(p.period, 10_101_010);
    assert_eq!(p.sample.len(), 6);
}
