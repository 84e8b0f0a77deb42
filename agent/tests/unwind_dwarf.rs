//! Known answers for DWARF (`.eh_frame`) unwinding of copied user stacks, against the
//! frame-pointer walk on the same programs (so that the test can fail).
//!
//! (a) `tests/data/unwind/two_hot.rs`, built WITHOUT frame pointers: 75 % / 25 % of its CPU in
//!     two known functions called from a known caller. With `Unwind::Dwarf` the shares are
//!     within 5 points, the caller is found and >= 90 % of the stacks reach the thread start;
//!     with `Unwind::Fp` the caller and the thread start are mostly lost.
//! (b) `tests/data/unwind/syscall_wrapper.rs`, built WITH frame pointers, lives in glibc's
//!     `send`/`recv` wrappers (multi-threaded path: rbp clobbered). With `Unwind::Dwarf`,
//!     >= 95 % of the samples in libc carry the Rust caller and reach the thread start; with
//!     `Unwind::Fp` most do not.
//!
//! Frames are attributed with the ELF symbol table of the program and `/proc/PID/maps` (not
//! the symbolizer); the symbolizer's truncation rule decides "reaches the thread start".

use test_support::{skip_unless, Need};

mod attach_support;

use std::ops::Range;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use attach_support::{function_ranges, Spawned};
use profiler::collect::{self, Options, StopReason, Unwind};
use profiler::profile::{FrameKind, Profile, RawProfile};
use profiler::target::Target;

const FREQUENCY_HZ: u64 = 499;
const SECONDS: u64 = 3;

/// Compiles `tests/data/unwind/NAME.rs` with plain rustc into a temporary directory.
fn build(name: &str, frame_pointers: bool) -> (tempfile::TempDir, PathBuf) {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/unwind").join(format!("{name}.rs"));
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join(name);
    let fp = if frame_pointers { "force-frame-pointers=yes" } else { "force-frame-pointers=no" };
    let out = Command::new(std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into()))
        .args(["--edition", "2021", "-O", "-C", fp, "-C", "debuginfo=line-tables-only", "-o"])
        .arg(&exe)
        .arg(&src)
        .output()
        .expect("running rustc");
    assert!(out.status.success(), "rustc {}: {}", src.display(), String::from_utf8_lossy(&out.stderr));
    (dir, exe)
}

fn profile(pid: u32, unwind: Unwind) -> RawProfile {
    let mut target = Target::Pid(pid).resolve().expect("resolve pid");
    let options = Options { frequency_hz: FREQUENCY_HZ, offcpu: false, syscalls: false, wire: false, unwind, ..Default::default() };
    let stop = AtomicBool::new(false);
    let (raw, reason) = collect::run(&mut target, &options, Duration::from_secs(SECONDS), &stop, |_| {}).expect("collect");
    assert_eq!(reason, StopReason::Deadline);
    assert!(raw.on_cpu.iter().all(|s| s.pid == pid), "samples of other processes leaked in");
    raw
}

/// Position in `user` (leaf first) of the first frame inside one of `ranges`, with the range
/// index. Return addresses (all frames but the leaf) are looked up at address - 1.
fn first_in(user: &[u64], ranges: &[Range<u64>]) -> Option<(usize, usize)> {
    user.iter().enumerate().find_map(|(pos, &a)| {
        let pc = if pos == 0 { a } else { a - 1 };
        ranges.iter().position(|r| r.contains(&pc)).map(|i| (i, pos))
    })
}

fn is_return_address_in(user: &[u64], pos: usize, range: &Range<u64>) -> bool {
    user.get(pos).is_some_and(|&a| pos > 0 && range.contains(&(a - 1)))
}

/// Samples of `profile` matching `select` (on the user frames' modules, leaf last), and how
/// many of them are not truncated.
fn complete_share(profile: &Profile, select: impl Fn(&[&profiler::profile::Frame]) -> bool) -> (u64, u64) {
    let (mut all, mut complete) = (0, 0);
    for s in &profile.on_cpu {
        let stack = &profile.stacks[s.stack as usize];
        let user: Vec<_> = stack.frames.iter().map(|&f| &profile.frames[f as usize]).filter(|f| f.kind == FrameKind::User).collect();
        if select(&user) {
            all += s.count;
            if !stack.truncated {
                complete += s.count;
            }
        }
    }
    (all, complete)
}

fn pct(part: u64, all: u64) -> f64 {
    100.0 * part as f64 / all.max(1) as f64
}

/// Shares of hot_75 / hot_25 among attributed samples, % of samples attributed, % of the
/// attributed samples whose next frame is a return into `profiler_nofp_rounds`.
fn two_hot_figures(raw: &RawProfile, ranges: &[Range<u64>]) -> (f64, f64, f64, f64) {
    let (mut hits, mut total, mut with_caller) = ([0u64; 2], 0, 0);
    for s in &raw.on_cpu {
        total += s.count;
        if let Some((i, pos)) = first_in(&s.user, &ranges[..2]) {
            hits[i] += s.count;
            if is_return_address_in(&s.user, pos + 1, &ranges[2]) {
                with_caller += s.count;
            }
        }
    }
    let attributed = hits[0] + hits[1];
    (pct(hits[0], attributed), pct(hits[1], attributed), pct(attributed, total), pct(with_caller, attributed))
}

#[test]
fn two_hot_functions_without_frame_pointers() {
    if skip_unless(&[Need::Root]) {
        return;
    }
    let (_dir, exe) = build("two_hot", false);
    let mut child = Spawned::new(&exe, &["60"]);
    assert_eq!(child.read_line(), "ready");
    let pid = child.pid();
    let ranges = function_ranges(&exe, pid, "/two_hot", &["profiler_nofp_hot_75", "profiler_nofp_hot_25", "profiler_nofp_rounds"]);

    let raw = profile(pid, Unwind::Dwarf);
    let report = raw.meta.unwind.clone().expect("the stack-copy path reports its unwinding");
    let samples: u64 = raw.on_cpu.iter().map(|s| s.count).sum();
    assert_eq!(report.mode, "dwarf");
    assert_eq!(report.samples, samples, "every unwound sample is in the profile");
    assert!(samples as f64 >= 0.3 * (FREQUENCY_HZ * SECONDS) as f64, "only {samples} samples of a busy thread");
    let module = report.modules.iter().find(|m| m.module == "two_hot").expect("two_hot in the per-binary report");
    assert_eq!(module.unwind_info, "eh_frame_hdr");
    assert!(module.cfi_frames > 0 && module.fp_fallback_frames == 0, "{module:?}");
    assert!(report.bytes_copied_total > 0 && report.bytes_copied_max <= report.stack_copy_bytes);
    let (a, b, attributed, caller) = two_hot_figures(&raw, &ranges);
    let symbolized = profiler::symbolize::symbolize(raw);
    let (all, complete) = complete_share(&symbolized, |_| true);
    eprintln!(
        "dwarf: {samples} samples, hot_75 {a:.1}%, hot_25 {b:.1}%, attributed {attributed:.1}%, caller found {caller:.1}%, complete {:.1}%, {} bytes copied per sample",
        pct(complete, all),
        report.bytes_copied_total / report.samples.max(1)
    );
    assert!(attributed >= 90.0, "only {attributed:.1}% of samples in the hot functions");
    assert!((a - 75.0).abs() <= 5.0, "hot_75 got {a:.1}%");
    assert!((b - 25.0).abs() <= 5.0, "hot_25 got {b:.1}%");
    assert!(caller >= 95.0, "the caller profiler_nofp_rounds was found for only {caller:.1}%");
    assert!(pct(complete, all) >= 90.0, "only {:.1}% of stacks reach the thread start", pct(complete, all));

    // The same process with frame pointers: the walk cannot find the caller (this is what
    // the DWARF path fixes, and proves that the figures above can fail).
    let raw = profile(pid, Unwind::Fp);
    assert!(raw.meta.unwind.is_none());
    let (a, _, _, caller) = two_hot_figures(&raw, &ranges);
    let symbolized = profiler::symbolize::symbolize(raw);
    let (all, complete) = complete_share(&symbolized, |_| true);
    eprintln!("fp: hot_75 {a:.1}%, caller found {caller:.1}%, complete {:.1}%", pct(complete, all));
    assert!(caller < 50.0, "frame pointers found the caller in {caller:.1}%: is the program really built without them?");
    assert!(pct(complete, all) < 50.0);
}

/// Executable ranges of libc.so.6 in `pid`.
fn libc_ranges(pid: u32) -> Vec<Range<u64>> {
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).unwrap();
    maps.lines()
        .filter(|l| l.ends_with("/libc.so.6") && l.split_whitespace().nth(1).is_some_and(|p| p.contains('x')))
        .map(|l| {
            let (s, e) = l.split_whitespace().next().unwrap().split_once('-').unwrap();
            u64::from_str_radix(s, 16).unwrap()..u64::from_str_radix(e, 16).unwrap()
        })
        .collect()
}

/// Samples of the pingpong thread with the leaf in libc, and % of them with a return into
/// `profiler_wrap_pingpong` among their first four frames.
fn wrapper_figures(raw: &RawProfile, libc: &[Range<u64>], caller: &Range<u64>) -> (u64, u64, f64) {
    let (mut thread, mut in_libc, mut with_caller) = (0, 0, 0);
    for s in raw.on_cpu.iter().filter(|s| s.thread == "pingpong") {
        thread += s.count;
        if s.user.first().is_some_and(|ip| libc.iter().any(|r| r.contains(ip))) {
            in_libc += s.count;
            if (1..4).any(|pos| is_return_address_in(&s.user, pos, caller)) {
                with_caller += s.count;
            }
        }
    }
    (thread, in_libc, pct(with_caller, in_libc))
}

fn leaf_in_libc(user: &[&profiler::profile::Frame]) -> bool {
    user.last().is_some_and(|f| f.module == "libc.so.6")
}

#[test]
fn glibc_syscall_wrappers_keep_their_rust_callers() {
    if skip_unless(&[Need::Root]) {
        return;
    }
    let (_dir, exe) = build("syscall_wrapper", true);
    let mut child = Spawned::new(&exe, &["60"]);
    assert_eq!(child.read_line(), "ready");
    let pid = child.pid();
    let caller = function_ranges(&exe, pid, "/syscall_wrapper", &["profiler_wrap_pingpong"]).remove(0);
    let libc = libc_ranges(pid);
    assert!(!libc.is_empty(), "libc.so.6 not mapped");

    let raw = profile(pid, Unwind::Dwarf);
    let report = raw.meta.unwind.clone().expect("unwind report");
    let libc_report = report.modules.iter().find(|m| m.module == "libc.so.6").expect("libc in the per-binary report");
    assert_eq!(libc_report.unwind_info, "eh_frame_hdr");
    let (thread, in_libc, with_caller) = wrapper_figures(&raw, &libc, &caller);
    let symbolized = profiler::symbolize::symbolize(raw);
    let (wrapped, complete) = complete_share(&symbolized, leaf_in_libc);
    eprintln!(
        "dwarf: pingpong {thread} samples, {in_libc} with the leaf in libc, caller found {with_caller:.1}%, complete {:.1}% of {wrapped}",
        pct(complete, wrapped)
    );
    assert!(in_libc as f64 >= 0.5 * thread as f64, "the program should live in glibc's wrappers: {in_libc} of {thread}");
    assert!(with_caller >= 95.0, "profiler_wrap_pingpong found above the wrapper in only {with_caller:.1}%");
    assert!(pct(complete, wrapped) >= 95.0, "only {:.1}% of the wrapper stacks reach the thread start", pct(complete, wrapped));

    let raw = profile(pid, Unwind::Fp);
    let (_, in_libc, with_caller) = wrapper_figures(&raw, &libc, &caller);
    let symbolized = profiler::symbolize::symbolize(raw);
    let (wrapped, complete) = complete_share(&symbolized, leaf_in_libc);
    eprintln!("fp: {in_libc} with the leaf in libc, caller found {with_caller:.1}%, complete {:.1}%", pct(complete, wrapped));
    assert!(with_caller < 50.0, "frame pointers found the caller in {with_caller:.1}%: the wrappers should break the walk");
    assert!(pct(complete, wrapped) < 50.0);
}
