//! Known-answer program for off-CPU time: after a start line on stdin, sleeps 20 × 50 ms
//! (1 s in all) inside `profiler_ka_sleepy`, prints `done`, and exits at the next line or
//! end of stdin.
//!
//! The sleep is a raw `nanosleep` system call issued by inline assembly from a function
//! with a frame pointer, so the user stack walk at switch-out passes through
//! `profiler_ka_sleepy` (glibc's wrappers have no frame pointers and would hide it).
//! Usage: `ka_known_sleeps [COUNT] [MILLISECONDS]` (defaults 20 and 50).

use std::io::{BufRead, Write};

/// `nanosleep(2)` through the `syscall` instruction; returns the raw result.
#[no_mangle]
#[inline(never)]
pub extern "C" fn profiler_ka_nanosleep(ms: u64) -> i64 {
    let ts = libc::timespec { tv_sec: (ms / 1000) as libc::time_t, tv_nsec: ((ms % 1000) * 1_000_000) as libc::c_long };
    let ret: i64;
    // SAFETY: nanosleep(req, rem = NULL) reads `ts`, which outlives the call; rcx and r11
    // are clobbered by `syscall`.
    unsafe {
        std::arch::asm!(
            "syscall",
            inlateout("rax") libc::SYS_nanosleep => ret,
            in("rdi") &ts as *const libc::timespec,
            in("rsi") 0usize,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    ret
}

/// The function whose off-CPU time the test checks: `count` sleeps of `ms` each.
#[no_mangle]
#[inline(never)]
pub extern "C" fn profiler_ka_sleepy(count: u64, ms: u64) -> i64 {
    let mut failures = 0;
    for _ in 0..count {
        if profiler_ka_nanosleep(ms) != 0 {
            failures += 1;
        }
    }
    failures
}

fn main() {
    let mut args = std::env::args().skip(1).map(|s| s.parse::<u64>());
    let (count, ms) = match (args.next(), args.next()) {
        (None, _) => (20, 50),
        (Some(Ok(c)), None) => (c, 50),
        (Some(Ok(c)), Some(Ok(m))) => (c, m),
        _ => {
            eprintln!("usage: ka_known_sleeps [COUNT] [MILLISECONDS]");
            std::process::exit(2);
        }
    };
    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    println!("ready");
    let _ = std::io::stdout().flush();
    let _ = lines.next();
    let failures = profiler_ka_sleepy(count, ms);
    println!("done {failures}");
    let _ = std::io::stdout().flush();
    let _ = lines.next();
}
