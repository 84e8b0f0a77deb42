//! Known-answer program for event-loop waits off the CPU: after a start line on stdin, blocks
//! in `epoll_wait` on an empty epoll set (each call waits its whole timeout) from two call
//! sites, `profiler_ka_loop_a` and `profiler_ka_loop_b`: COUNT waits in a, then COUNT in b,
//! then COUNT alternating b, a, b, a, ... (COUNT / 2 each); prints `done`, and exits at the
//! next line or end of stdin. Each site makes 1.5 × COUNT waits of MILLISECONDS.
//!
//! Both sites call the same `profiler_ka_epoll_wait` from the same depth, so the syscall is
//! entered with the same instruction and stack pointers: only the return address in the frame
//! record tells them apart, which is what the off-CPU program's event-loop stack reuse must
//! see. The wait is a raw `epoll_wait` system call issued by inline assembly from functions
//! with frame pointers, so that the user stack walk passes through the sites.
//! Usage: `ka_epoll_waits [COUNT] [MILLISECONDS]` (defaults 40 and 5).

use std::io::{BufRead, Write};

/// `epoll_wait(epfd, events, 1, ms)` through the `syscall` instruction; returns the raw result
/// (0 when the timeout expired).
#[no_mangle]
#[inline(never)]
pub extern "C" fn profiler_ka_epoll_wait(epfd: i32, ms: i32) -> i64 {
    let mut event = libc::epoll_event { events: 0, u64: 0 };
    let ret: i64;
    // SAFETY: epoll_wait(epfd, events, maxevents = 1, timeout) writes at most one event into
    // `event`, which outlives the call; rcx and r11 are clobbered by `syscall`.
    unsafe {
        std::arch::asm!(
            "syscall",
            inlateout("rax") libc::SYS_epoll_wait => ret,
            in("rdi") epfd as i64,
            in("rsi") &mut event as *mut libc::epoll_event,
            in("rdx") 1usize,
            in("r10") ms as i64,
            lateout("rcx") _,
            lateout("r11") _,
            options(nostack),
        );
    }
    ret
}

/// `count` waits of `ms` from the caller, which passes its own `tag` so that the two sites'
/// code differs (identical functions would be folded into one address); returns how many did
/// not time out.
#[inline(always)]
fn waits(epfd: i32, count: u32, ms: i32, tag: u8) -> u32 {
    (0..count).map(|_| u32::from(std::hint::black_box(profiler_ka_epoll_wait(epfd, ms)) != 0) * u32::from(std::hint::black_box(tag) != 0)).sum()
}

/// Call site a: `count` waits of `ms`; returns how many did not time out.
#[no_mangle]
#[inline(never)]
pub extern "C" fn profiler_ka_loop_a(epfd: i32, count: u32, ms: i32) -> u32 {
    waits(epfd, count, ms, b'a')
}

/// Call site b: as [`profiler_ka_loop_a`], from another function.
#[no_mangle]
#[inline(never)]
pub extern "C" fn profiler_ka_loop_b(epfd: i32, count: u32, ms: i32) -> u32 {
    waits(epfd, count, ms, b'b')
}

fn main() {
    let mut args = std::env::args().skip(1).map(|s| s.parse::<u32>());
    let (count, ms) = match (args.next(), args.next()) {
        (None, _) => (40, 5),
        (Some(Ok(c)), None) => (c, 5),
        (Some(Ok(c)), Some(Ok(m))) if m <= i32::MAX as u32 => (c, m as i32),
        _ => {
            eprintln!("usage: ka_epoll_waits [COUNT] [MILLISECONDS]");
            std::process::exit(2);
        }
    };
    // SAFETY: epoll_create1 has no memory arguments.
    let epfd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
    if epfd < 0 {
        eprintln!("epoll_create1: {}", std::io::Error::last_os_error());
        std::process::exit(1);
    }
    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    println!("ready");
    let _ = std::io::stdout().flush();
    let _ = lines.next();
    let mut early = profiler_ka_loop_a(epfd, count, ms) + profiler_ka_loop_b(epfd, count, ms);
    for i in 0..count {
        early += if i % 2 == 0 { profiler_ka_loop_b(epfd, 1, ms) } else { profiler_ka_loop_a(epfd, 1, ms) };
    }
    println!("done {early}");
    let _ = std::io::stdout().flush();
    let _ = lines.next();
}
