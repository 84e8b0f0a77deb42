//! Known-answer program for DWARF unwinding through glibc's syscall wrappers, std only, built
//! by the `unwind_dwarf` test with plain `rustc -O -C force-frame-pointers=yes` (this code
//! keeps frame pointers; Debian's glibc does not).
//!
//! A second thread ("pingpong") sends and receives 64-byte datagrams over a Unix socket pair
//! with glibc's `send` and `recv`, called directly from `profiler_wrap_pingpong`. Because the
//! process has two threads, glibc takes the wrappers' multi-threaded path, which pushes rbp
//! and then uses ebp as a scratch register around the `syscall` instruction: a frame-pointer
//! walk from there cannot find `profiler_wrap_pingpong`.
//! Usage: `syscall_wrapper SECONDS`; prints `ready` once running.

use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixDatagram;
use std::time::{Duration, Instant};

extern "C" {
    fn send(fd: i32, buf: *const u8, len: usize, flags: i32) -> isize;
    fn recv(fd: i32, buf: *mut u8, len: usize, flags: i32) -> isize;
}

/// Sends and receives datagrams until `seconds` have passed; returns the bytes received.
#[no_mangle]
#[inline(never)]
pub extern "C" fn profiler_wrap_pingpong(a: i32, b: i32, seconds: u64) -> u64 {
    let stop = Instant::now() + Duration::from_secs(seconds);
    let mut buf = [7u8; 64];
    let mut total = 0u64;
    while Instant::now() < stop {
        for _ in 0..64 {
            // SAFETY: valid fds and a 64-byte buffer.
            unsafe {
                send(a, buf.as_ptr(), buf.len(), 0);
                let n = recv(b, buf.as_mut_ptr(), buf.len(), 0);
                total += n.max(0) as u64;
            }
        }
    }
    total
}

fn main() {
    let seconds: u64 = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(30);
    let (a, b) = UnixDatagram::pair().expect("socketpair");
    let worker = std::thread::Builder::new()
        .name("pingpong".into())
        .spawn(move || profiler_wrap_pingpong(a.as_raw_fd(), b.as_raw_fd(), seconds))
        .expect("spawn");
    println!("ready");
    let _ = std::io::stdout().flush();
    println!("{}", worker.join().expect("join"));
}
