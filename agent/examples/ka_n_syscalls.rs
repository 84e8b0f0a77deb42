//! Known-answer program for syscall counting: after a start line on stdin, makes exactly
//! N `getppid` system calls (raw `syscall(SYS_getppid)`, which glibc never caches), prints
//! `done`, and exits at the next line or end of stdin.
//! Usage: `ka_n_syscalls [N]` (default 12345).

use std::io::{BufRead, Write};

fn main() {
    let n: u64 = match std::env::args().nth(1).map(|s| s.parse()) {
        None => 12345,
        Some(Ok(n)) => n,
        Some(Err(_)) => {
            eprintln!("usage: ka_n_syscalls [N]");
            std::process::exit(2);
        }
    };
    let stdin = std::io::stdin();
    let mut lines = stdin.lock().lines();
    println!("ready");
    let _ = std::io::stdout().flush();
    let _ = lines.next();
    let mut sum = 0i64;
    for _ in 0..n {
        // SAFETY: getppid has no arguments and cannot fail.
        sum = sum.wrapping_add(unsafe { libc::syscall(libc::SYS_getppid) });
    }
    println!("done {}", sum / n.max(1) as i64);
    let _ = std::io::stdout().flush();
    let _ = lines.next();
}
