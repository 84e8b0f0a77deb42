//! Known-answer program for on-CPU sampling: one thread that spends 75 % of its CPU time
//! in `profiler_ka_hot_75` and 25 % in `profiler_ka_hot_25`, by construction.
//!
//! It alternates 3.3 ms of its own CPU time (CLOCK_THREAD_CPUTIME_ID, so preemption by other
//! load does not skew the split) in the first function with 1.1 ms in the second. The 4.4 ms
//! cycle is deliberately not a multiple of the 4 ms scheduler tick (CONFIG_HZ=250 here): a
//! 3 ms + 1 ms cycle stays in phase with tick-aligned time slices on a loaded machine and
//! skewed the measured split by up to 7 points.
//! Usage: `ka_two_hot_functions [SECONDS]` (default 60); prints `ready` once running.
//!
//! std only (glibc's `clock_gettime` declared here), so that `unwind_nofp` can also build it
//! with plain `rustc` without frame pointers.

use std::io::Write;
use std::time::{Duration, Instant};

/// `struct timespec` of x86_64 Linux.
#[repr(C)]
struct Timespec {
    tv_sec: i64,
    tv_nsec: i64,
}

extern "C" {
    fn clock_gettime(clock: i32, ts: *mut Timespec) -> i32;
}

/// `CLOCK_THREAD_CPUTIME_ID` of Linux (`<linux/time.h>`).
const CLOCK_THREAD_CPUTIME_ID: i32 = 3;

fn thread_cpu_ns() -> u64 {
    let mut ts = Timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: valid out pointer.
    unsafe { clock_gettime(CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Busy work until the thread has used `ns` more CPU time. The clock is read only every
/// 2^16 iterations (~50 µs), so samples land in this function's own code.
#[inline(never)]
fn spin_for(ns: u64, seed: u64) -> u64 {
    let end = thread_cpu_ns() + ns;
    let mut x = seed;
    loop {
        for _ in 0..(1 << 16) {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407));
        }
        if thread_cpu_ns() >= end {
            return x;
        }
    }
}

/// 3.3 ms of CPU per round: 75 % of the samples.
#[no_mangle]
#[inline(never)]
pub extern "C" fn profiler_ka_hot_75(seed: u64) -> u64 {
    let mut x = seed;
    let end = thread_cpu_ns() + 3_300_000;
    while thread_cpu_ns() < end {
        for _ in 0..(1 << 16) {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407));
        }
    }
    x
}

/// 1.1 ms of CPU per round: 25 % of the samples.
#[no_mangle]
#[inline(never)]
pub extern "C" fn profiler_ka_hot_25(seed: u64) -> u64 {
    let mut x = seed;
    let end = thread_cpu_ns() + 1_100_000;
    while thread_cpu_ns() < end {
        for _ in 0..(1 << 16) {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407));
        }
    }
    x
}

fn main() {
    let seconds: u64 = match std::env::args().nth(1).map(|s| s.parse()) {
        None => 60,
        Some(Ok(s)) => s,
        Some(Err(_)) => {
            eprintln!("usage: ka_two_hot_functions [SECONDS]");
            std::process::exit(2);
        }
    };
    // Warm up so that the first samples already see the steady state.
    let mut x = spin_for(1_000_000, 1);
    println!("ready");
    let _ = std::io::stdout().flush();
    let stop = Instant::now() + Duration::from_secs(seconds);
    while Instant::now() < stop {
        x = profiler_ka_hot_75(x);
        x = profiler_ka_hot_25(x);
    }
    println!("{x}");
}
