//! Known answer (b): `ka_n_syscalls` makes exactly 12,345 `getppid` calls after its start
//! line; the per-syscall statistics of the pid target must count exactly that many, while
//! this test process makes its own `getppid` calls that the filter must leave out.

mod attach_support;

use attach_support::{example, Spawned};
use profiler::collect::{Collector, Options};
use profiler::target::Target;

const N: u64 = 12_345;

#[test]
fn getppid_count_is_exact() {
    let mut child = Spawned::new(&example("ka_n_syscalls"), &[&N.to_string()]);
    assert_eq!(child.read_line(), "ready");
    let target = Target::Pid(child.pid()).resolve().expect("resolve pid");
    let options = Options { offcpu: false, syscalls: true, wire: false, ..Default::default() };
    let collector = Collector::start(&target, &options).expect("start");

    // Noise from another process: must not be counted.
    for _ in 0..1000 {
        // SAFETY: getppid has no arguments.
        unsafe { libc::syscall(libc::SYS_getppid) };
    }
    child.send_line("go");
    let done = child.read_line();
    assert!(done.starts_with("done "), "{done}");
    let profile = collector.finish(&target, None).expect("finish");

    let getppid = profile.syscalls.iter().find(|s| s.name == "getppid").expect("getppid counted");
    assert_eq!(getppid.nr, libc::SYS_getppid as u32);
    assert_eq!(getppid.count, N);
    assert_eq!(getppid.errors, 0);
    assert_eq!(getppid.eagain, 0);
    assert_eq!(getppid.latency_log2_ns.len(), 32);
    assert_eq!(getppid.latency_log2_ns.iter().sum::<u64>(), N, "histogram holds every call");
    let mean_ns = getppid.total_ns / N;
    eprintln!("getppid: {N} calls, mean {mean_ns} ns, histogram {:?}", getppid.latency_log2_ns);
    // getppid is a few hundred ns at most; allow for preemption on a busy 2-CPU host.
    assert!(mean_ns > 20 && mean_ns < 50_000, "mean latency {mean_ns} ns");

    // The child's other calls are there too: the write of the `done` line. (Its read of the
    // `go` line is not asserted: the child is usually already blocked in that read when the
    // programs attach, and a call entered before the attach has no entry timestamp, so
    // syscalls.bpf.c leaves it out rather than count a wrong latency.)
    assert!(profile.syscalls.iter().any(|s| s.name == "write" && s.count >= 1), "{:?}", profile.syscalls);
    assert_eq!(profile.lost.samples_dropped, 0);
}

#[test]
fn errors_and_eagain_are_counted_apart() {
    // The test process itself is the target: a nonblocking read of an empty pipe returns
    // -EAGAIN, a close of a bad fd returns -EBADF.
    let target = Target::Pid(std::process::id()).resolve().unwrap();
    let options = Options { offcpu: false, syscalls: true, wire: false, ..Default::default() };
    let collector = Collector::start(&target, &options).unwrap();
    let mut fds = [0i32; 2];
    // SAFETY: valid array of two fds.
    assert_eq!(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK) }, 0);
    let mut buf = [0u8; 8];
    for _ in 0..100 {
        // SAFETY: valid fd and buffer.
        let r = unsafe { libc::syscall(libc::SYS_read, fds[0], buf.as_mut_ptr(), buf.len()) };
        assert_eq!(r, -1);
    }
    for _ in 0..7 {
        // SAFETY: closing an fd that is not open only returns EBADF.
        unsafe { libc::syscall(libc::SYS_close, 1_000_000) };
    }
    let profile = collector.finish(&target, None).unwrap();
    // SAFETY: our fds.
    unsafe {
        libc::close(fds[0]);
        libc::close(fds[1]);
    }
    let read = profile.syscalls.iter().find(|s| s.name == "read").expect("read");
    assert!(read.eagain >= 100 && read.errors >= 100, "{read:?}");
    let close = profile.syscalls.iter().find(|s| s.name == "close").expect("close");
    assert!(close.errors >= 7, "{close:?}");
    assert!(close.eagain <= close.errors);
}
