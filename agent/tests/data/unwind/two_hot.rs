//! Known-answer program for DWARF unwinding, std only, built by the `unwind_dwarf` test with
//! plain `rustc -O -C force-frame-pointers=no` (no frame pointers in this code).
//!
//! One thread spends 3.3 ms of its CPU time (CLOCK_THREAD_CPUTIME_ID) in
//! `profiler_nofp_hot_75` for every 1.1 ms in `profiler_nofp_hot_25`, both called from
//! `profiler_nofp_rounds`. Usage: `two_hot SECONDS`; prints `ready` once running.
//!
//! The 4.4 ms cycle is deliberately not a multiple of the 4 ms scheduler tick nor close to a
//! multiple of the test's sampling period (499 Hz: 2.004 ms): with a 3 ms + 1 ms cycle the
//! samples drifted through less than one cycle in a 3 s run, so the measured split depended on
//! the starting phase (a clean CI run measured 80.1% for the 75% function).

use std::io::Write;
use std::time::{Duration, Instant};

#[repr(C)]
struct Timespec {
    tv_sec: i64,
    tv_nsec: i64,
}

extern "C" {
    fn clock_gettime(clock: i32, ts: *mut Timespec) -> i32;
}

const CLOCK_THREAD_CPUTIME_ID: i32 = 3;

fn thread_cpu_ns() -> u64 {
    let mut ts = Timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: valid out pointer.
    unsafe { clock_gettime(CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

#[inline(always)]
fn spin(seed: u64, ns: u64) -> u64 {
    let mut x = seed;
    let end = thread_cpu_ns() + ns;
    while thread_cpu_ns() < end {
        for _ in 0..(1 << 16) {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407));
        }
    }
    x
}

/// 3.3 ms of CPU per round: 75 % of the samples.
#[no_mangle]
#[inline(never)]
pub extern "C" fn profiler_nofp_hot_75(seed: u64) -> u64 {
    spin(seed, 3_300_000)
}

/// 1.1 ms of CPU per round: 25 % of the samples.
#[no_mangle]
#[inline(never)]
pub extern "C" fn profiler_nofp_hot_25(seed: u64) -> u64 {
    spin(seed, 1_100_000)
}

/// The caller of both hot functions, until `seconds` have passed.
#[no_mangle]
#[inline(never)]
pub extern "C" fn profiler_nofp_rounds(seconds: u64) -> u64 {
    let stop = Instant::now() + Duration::from_secs(seconds);
    let mut x = 1;
    while Instant::now() < stop {
        x = profiler_nofp_hot_75(x);
        x = profiler_nofp_hot_25(x);
    }
    x
}

fn main() {
    let seconds: u64 = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(30);
    std::hint::black_box(spin(1, 1_000_000));
    println!("ready");
    let _ = std::io::stdout().flush();
    println!("{}", profiler_nofp_rounds(seconds));
}
