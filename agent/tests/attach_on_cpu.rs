//! Known answer (a): on-CPU shares of two hot functions, profiled by pid.
//!
//! `ka_two_hot_functions` spends 3.3 ms of its thread CPU time in `profiler_ka_hot_75` for
//! every 1.1 ms in `profiler_ka_hot_25`. Raw sampled user addresses are attributed to those
//! functions with the ELF symbol table and `/proc/PID/maps` (not the symbolizer), and the
//! number of samples is checked against the CPU time the kernel accounted to the process.
//! These tests pin the kernel-side frame-pointer sampler (`Unwind::Fp`, `on_cpu_sample`),
//! which is what they are the known answers for.

use test_support::{skip_unless, Need};

mod attach_support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use attach_support::{example, first_frame_in, function_ranges, Spawned};
use profiler::collect::{self, Options, StopReason, Unwind};
use profiler::target::{Filter, Target};

/// Prime and far from multiples of the 250 Hz scheduler tick, so samples do not beat with it.
const FREQUENCY_HZ: u64 = 397;

/// Shares (in %) of the samples attributed to (hot_75, hot_25), and the share of samples
/// attributed to either.
fn shares(profile: &profiler::profile::RawProfile, ranges: &[std::ops::Range<u64>]) -> (f64, f64, f64) {
    let mut hits = [0u64; 2];
    let mut total = 0;
    for stack in &profile.on_cpu {
        total += stack.count;
        if let Some(i) = first_frame_in(&stack.user, ranges) {
            hits[i] += stack.count;
        }
    }
    let attributed = (hits[0] + hits[1]) as f64;
    (100.0 * hits[0] as f64 / attributed, 100.0 * hits[1] as f64 / attributed, 100.0 * attributed / total as f64)
}

#[test]
fn on_cpu_shares_by_pid_match_construction() {
    if skip_unless(&[Need::Root]) {
        return;
    }
    let exe = example("ka_two_hot_functions");
    let mut child = Spawned::new(&exe, &["30"]);
    assert_eq!(child.read_line(), "ready");
    let pid = child.pid();
    let mut target = Target::Pid(pid).resolve().expect("resolve pid");
    assert_eq!(target.filter, Filter::Pids([pid].into()));

    let options = Options { frequency_hz: FREQUENCY_HZ, offcpu: false, syscalls: false, wire: false, unwind: Unwind::Fp, ..Default::default() };
    let stop = AtomicBool::new(false);
    let (profile, reason) = collect::run(&mut target, &options, Duration::from_secs(4), &stop, |_| {}).expect("collect");
    assert_eq!(reason, StopReason::Deadline);
    assert_eq!(profile.meta.partial, None);
    assert_eq!(profile.meta.frequency_hz, FREQUENCY_HZ);
    assert!(profile.meta.duration_ns >= 4_000_000_000 && profile.meta.duration_ns < 5_000_000_000, "{}", profile.meta.duration_ns);

    // Only the target's samples were kept by the kernel-side filter.
    assert!(profile.on_cpu.iter().all(|s| s.pid == pid), "samples of other processes leaked in");
    assert!(profile.processes.iter().any(|p| p.pid == pid && p.comm == "ka_two_hot_func" && p.exe.ends_with("ka_two_hot_functions")), "{:?}", profile.processes);

    // Samples vs the CPU time the kernel accounted (/proc/PID/stat, 10 ms ticks).
    let samples: u64 = profile.on_cpu.iter().map(|s| s.count).sum();
    let cpu_ns = profile.meta.target_cpu_ns.expect("target CPU time");
    let expected = cpu_ns as f64 * FREQUENCY_HZ as f64 / 1e9;
    eprintln!("samples {samples}, target CPU {} ms, expected {expected:.0} samples", cpu_ns / 1_000_000);
    assert!(cpu_ns > 1_000_000_000, "the busy child used only {cpu_ns} ns of CPU in 4 s");
    assert!((samples as f64 - expected).abs() <= 0.15 * expected, "{samples} samples for {expected:.0} expected");

    let ranges = function_ranges(&exe, pid, "/ka_two_hot_functions", &["profiler_ka_hot_75", "profiler_ka_hot_25"]);
    let (a, b, attributed) = shares(&profile, &ranges);
    eprintln!("hot_75 {a:.1}%, hot_25 {b:.1}%, attributed {attributed:.1}% of {samples} samples");
    assert!(attributed >= 90.0, "only {attributed:.1}% of samples were in the hot functions");
    assert!((a - 75.0).abs() <= 5.0, "hot_75 got {a:.1}%");
    assert!((b - 25.0).abs() <= 5.0, "hot_25 got {b:.1}%");
    // Every stack is leaf first and walks past the hot function into main.
    let stack = profile.on_cpu.iter().max_by_key(|s| s.count).unwrap();
    assert!(stack.user.len() >= 3, "user stack too short: {:x?}", stack.user);
}

#[test]
fn early_stop_still_drains_what_was_collected() {
    if skip_unless(&[Need::Root]) {
        return;
    }
    let exe = example("ka_two_hot_functions");
    // Interrupted by the stop flag (Ctrl-C) after about one second.
    let mut child = Spawned::new(&exe, &["30"]);
    assert_eq!(child.read_line(), "ready");
    let mut target = Target::Pid(child.pid()).resolve().unwrap();
    let options = Options { frequency_hz: FREQUENCY_HZ, wire: false, unwind: Unwind::Fp, ..Default::default() };
    let stop = AtomicBool::new(false);
    let begin = Instant::now();
    let (profile, reason) = collect::run(&mut target, &options, Duration::from_secs(30), &stop, |elapsed| {
        if elapsed >= Duration::from_secs(1) {
            stop.store(true, Ordering::Relaxed);
        }
    })
    .unwrap();
    assert_eq!(reason, StopReason::Interrupted);
    assert!(begin.elapsed() < Duration::from_secs(5));
    assert_eq!(profile.meta.partial.as_deref(), Some("interrupted (Ctrl-C or SIGTERM)"));
    assert_samples_match_cpu_time(&profile);
    drop(child);

    // The target exits after 2 s while the run was asked for 30 s.
    let mut child = Spawned::new(&exe, &["2"]);
    assert_eq!(child.read_line(), "ready");
    let mut target = Target::Pid(child.pid()).resolve().unwrap();
    let begin = Instant::now();
    let (profile, reason) = collect::run(&mut target, &options, Duration::from_secs(30), &stop_flag(), |_| {}).unwrap();
    assert_eq!(reason, StopReason::TargetGone);
    assert!(begin.elapsed() < Duration::from_secs(6), "{:?}", begin.elapsed());
    assert_eq!(profile.meta.partial.as_deref(), Some("target exited"));
    // The exited process's CPU time is known only up to the last reading of the run loop
    // (at most 1 s before the exit): a lower bound. 2 s of a busy thread on 2 CPUs.
    let samples: u64 = profile.on_cpu.iter().map(|s| s.count).sum();
    let cpu_ns = profile.meta.target_cpu_ns.expect("CPU time up to the last reading");
    let lower = cpu_ns as f64 * FREQUENCY_HZ as f64 / 1e9;
    eprintln!("{samples} samples, at least {} ms of CPU ({lower:.0} samples)", cpu_ns / 1_000_000);
    assert!(samples as f64 >= 0.8 * lower, "{samples} samples for at least {lower:.0}");
    assert!(samples <= 5 * FREQUENCY_HZ / 2, "{samples} samples: more than 2.5 s of CPU for one thread living 2 s");
}

/// The samples kept match the CPU time the kernel accounted to the target during the run
/// (within 20 %: /proc/PID/stat has 10 ms ticks and short runs have few samples).
fn assert_samples_match_cpu_time(profile: &profiler::profile::RawProfile) {
    let samples: u64 = profile.on_cpu.iter().map(|s| s.count).sum();
    let cpu_ns = profile.meta.target_cpu_ns.expect("target CPU time");
    let expected = cpu_ns as f64 * FREQUENCY_HZ as f64 / 1e9;
    eprintln!("{samples} samples, {} ms of CPU, {expected:.0} expected", cpu_ns / 1_000_000);
    assert!(cpu_ns >= 200_000_000, "the busy child got only {cpu_ns} ns of CPU");
    assert!((samples as f64 - expected).abs() <= 0.20 * expected, "{samples} samples for {expected:.0} expected");
}

fn stop_flag() -> AtomicBool {
    AtomicBool::new(false)
}

#[test]
fn missing_pid_is_a_clear_error() {
    let err = Target::Pid(u32::MAX - 1).resolve().unwrap_err();
    assert_eq!(err.to_string(), format!("no process with pid {}", u32::MAX - 1));
}
