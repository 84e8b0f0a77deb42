//! Known answer (b): `ka_n_syscalls` makes exactly 12,345 `getppid` calls after its start
//! line; the per-syscall statistics of the pid target must count exactly that many, while
//! this test process makes its own `getppid` calls that the filter must leave out.
//!
//! Counting in windows (`Options::syscalls_duty_pct` < 100): a thread making `getppid` calls
//! at a steady pace that it counts itself gives the known answer the scaled count must meet;
//! a thread sleeping 600 ms at a time (longer than a window) must never lend a call's start
//! to a later window.

use test_support::{skip_unless, Need};

mod attach_support;

use attach_support::{example, Spawned};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use profiler::collect::{self, Collector, Options};
use profiler::target::Target;

const N: u64 = 12_345;

#[test]
fn getppid_count_is_exact() {
    if skip_unless(&[Need::Root]) {
        return;
    }
    let mut child = Spawned::new(&example("ka_n_syscalls"), &[&N.to_string()]);
    assert_eq!(child.read_line(), "ready");
    let target = Target::Pid(child.pid()).resolve().expect("resolve pid");
    let options = Options { offcpu: false, syscalls: true, syscalls_duty_pct: 100, wire: false, ..Default::default() };
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
    if skip_unless(&[Need::Root]) {
        return;
    }
    // The test process itself is the target: a nonblocking read of an empty pipe returns
    // -EAGAIN, a close of a bad fd returns -EBADF, a nonblocking connect often -EINPROGRESS.
    let target = Target::Pid(std::process::id()).resolve().unwrap();
    let options = Options { offcpu: false, syscalls: true, syscalls_duty_pct: 100, wire: false, ..Default::default() };
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
    // Nonblocking connects, as every async runtime makes them: those that return -1 with
    // EINPROGRESS (the handshake under way; counted here by their own return values) are
    // not ready, not failed.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = match listener.local_addr().unwrap() {
        std::net::SocketAddr::V4(a) => a,
        a => panic!("{a}"),
    };
    let sin = libc::sockaddr_in { sin_family: libc::AF_INET as libc::sa_family_t, sin_port: addr.port().to_be(), sin_addr: libc::in_addr { s_addr: u32::from(*addr.ip()).to_be() }, sin_zero: [0; 8] };
    let mut in_progress = 0;
    for _ in 0..20 {
        // SAFETY: a new socket, a valid sockaddr_in of its size; the fd is closed below.
        unsafe {
            let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_NONBLOCK, 0);
            assert!(fd >= 0);
            let r = libc::syscall(libc::SYS_connect, fd, std::ptr::from_ref(&sin), std::mem::size_of::<libc::sockaddr_in>());
            if r == -1 && *libc::__errno_location() == libc::EINPROGRESS {
                in_progress += 1;
            }
            libc::close(fd);
        }
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
    let connect = profile.syscalls.iter().find(|s| s.name == "connect").expect("connect");
    assert!(connect.count >= 20 && connect.eagain >= in_progress && connect.errors >= connect.eagain, "{in_progress} of 20 connects returned EINPROGRESS: {connect:?}");
    drop(listener);
}

/// A thread of this process calls `getppid` once every `PACE`, counting its calls, while
/// `collect::run` counts syscalls 25% of the time for 4 s: the estimate (calls seen x run /
/// traced time) must be the thread's own count over the run within 15%, from about 1 s of
/// counting in 4 windows.
#[test]
fn windowed_counts_estimate_the_run() {
    if skip_unless(&[Need::Root]) {
        return;
    }
    const PACE: Duration = Duration::from_micros(50);
    let stop = Arc::new(AtomicBool::new(false));
    let calls = Arc::new(AtomicU64::new(0));
    let worker = {
        let (stop, calls) = (stop.clone(), calls.clone());
        std::thread::spawn(move || {
            let start = Instant::now();
            let mut next = start;
            while !stop.load(Ordering::Relaxed) {
                // SAFETY: getppid has no arguments.
                unsafe { libc::syscall(libc::SYS_getppid) };
                calls.fetch_add(1, Ordering::Relaxed);
                next += PACE;
                while Instant::now() < next {
                    std::hint::spin_loop();
                }
            }
        })
    };
    std::thread::sleep(Duration::from_millis(200));
    let mut target = Target::Pid(std::process::id()).resolve().unwrap();
    let options = Options { offcpu: false, syscalls: true, syscalls_duty_pct: 25, wire: false, frequency_hz: 19, ..Default::default() };
    let mut first = None;
    let started = Instant::now();
    let (profile, _) = collect::run(&mut target, &options, Duration::from_secs(4), &AtomicBool::new(false), |_| {
        first.get_or_insert_with(|| (calls.load(Ordering::Relaxed), Instant::now()));
    })
    .expect("run");
    let (last, ended) = (calls.load(Ordering::Relaxed), Instant::now());
    stop.store(true, Ordering::Relaxed);
    worker.join().unwrap();

    // The thread's own count over the run: its rate between the first tick and the end
    // (both just after the programs were attached / detached) times the run's length.
    let (c0, t0) = first.expect("ticked");
    let rate = (last - c0) as f64 / (ended - t0).as_secs_f64();
    let expected = rate * profile.meta.duration_ns as f64 / 1e9;
    let windows = profile.meta.syscall_windows.clone().expect("windows recorded");
    let scale = profile.meta.syscall_scale();
    let seen = profile.syscalls.iter().find(|s| s.name == "getppid").map_or(0, |s| s.count);
    let estimate = seen as f64 * scale;
    eprintln!(
        "run {:.3} s (wall {:.3} s), {} windows, traced {:.3} s, scale {scale:.3}; getppid seen {seen}, estimate {estimate:.0}, thread's count {expected:.0} ({rate:.0}/s)",
        profile.meta.duration_ns as f64 / 1e9,
        started.elapsed().as_secs_f64(),
        windows.windows,
        windows.traced_ns as f64 / 1e9
    );
    assert_eq!(windows.duty_pct, 25);
    assert_eq!(windows.windows, 4, "one window at the start of each second of a 4 s run");
    // 4 x 250 ms, measured from the attach to the detach: a busy machine makes the run loop
    // close a window late, which the estimate takes into account (it divides by this time).
    let traced = windows.traced_ns as f64 / 1e9;
    assert!((0.95..1.6).contains(&traced), "traced {traced:.3} s, not about 4 x 250 ms");
    assert!(seen > 5_000, "getppid seen {seen}");
    // 15%: a wrong factor or a window counted wrong is off by 25% or more; a busy machine
    // makes the thread's pace bursty (it catches up after being descheduled), which the
    // windows sample: -0.08% on a quiet machine, -6.6% beside a release build.
    assert!((estimate / expected - 1.0).abs() < 0.15, "estimate {estimate:.0} vs the thread's {expected:.0}");
    // The rendered report says it is an estimate and scales the count.
    let report = profiler::render::syscalls::report(&profile_of(profile));
    let row = report.syscalls.iter().find(|r| r.name == "getppid").unwrap();
    assert_eq!(row.traced_calls, seen);
    assert_eq!(row.count, estimate.round() as u64);
    assert!((report.traced_share - 1.0 / scale).abs() < 1e-9);
}

/// A closed gate (`Options::syscalls_gate`) holds every window closed: `getresuid` calls made
/// before it opens are not counted, the 2,345 made after are, exactly. (`getresuid`: no other
/// test of this process makes it.)
#[test]
fn no_window_opens_before_the_gate() {
    if skip_unless(&[Need::Root]) {
        return;
    }
    let getresuid = |n: u32| {
        let (mut r, mut e, mut s): (libc::uid_t, libc::uid_t, libc::uid_t) = (0, 0, 0);
        for _ in 0..n {
            // SAFETY: getresuid writes three uid_t through pointers to these locals.
            unsafe { libc::syscall(libc::SYS_getresuid, &mut r as *mut libc::uid_t, &mut e as *mut libc::uid_t, &mut s as *mut libc::uid_t) };
        }
    };
    let target = Target::Pid(std::process::id()).resolve().unwrap();
    let gate = collect::Gate::closed();
    let options = Options { offcpu: false, syscalls: true, syscalls_duty_pct: 100, syscalls_gate: Some(gate.clone()), wire: false, frequency_hz: 19, ..Default::default() };
    let mut collector = Collector::start(&target, &options).expect("start");
    getresuid(1_000);
    collector.tick().expect("tick");
    getresuid(1_000);
    gate.open();
    collector.tick().expect("tick");
    getresuid(2_345);
    let profile = collector.finish(&target, None).expect("finish");
    let counted = profile.syscalls.iter().find(|s| s.name == "getresuid").map_or(0, |s| s.count);
    assert_eq!(counted, 2_345);
    assert_eq!(profile.meta.syscall_windows.expect("windows recorded").windows, 1);
}

/// A call that begins in one window and ends in a later one (its exit in between not seen)
/// must not be counted with the first call's start: a thread sleeping 600 ms at a time,
/// longer than a 250 ms window, has no counted sleep of 268 ms or more (without the window
/// numbers in `syscalls.bpf.c`, its sleeps showed up at about 1.2 s).
#[test]
fn calls_spanning_windows_are_not_counted() {
    if skip_unless(&[Need::Root]) {
        return;
    }
    let stop = Arc::new(AtomicBool::new(false));
    let sleeper = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(600));
            }
        })
    };
    let mut target = Target::Pid(std::process::id()).resolve().unwrap();
    let options = Options { offcpu: false, syscalls: true, syscalls_duty_pct: 25, wire: false, frequency_hz: 19, ..Default::default() };
    let (profile, _) = collect::run(&mut target, &options, Duration::from_secs(5), &AtomicBool::new(false), |_| {}).expect("run");
    stop.store(true, Ordering::Relaxed);
    sleeper.join().unwrap();
    let sleeps = profile.syscalls.iter().find(|s| s.name == "clock_nanosleep").expect("the run loop's own sleeps are seen");
    eprintln!("clock_nanosleep: {} seen, histogram {:?}", sleeps.count, sleeps.latency_log2_ns);
    let long: u64 = sleeps.latency_log2_ns[28..].iter().sum();
    assert_eq!(long, 0, "calls of >= 2^28 ns counted across windows: {:?}", sleeps.latency_log2_ns);
}

/// The symbolized profile of a raw one (no frames needed for syscall reports).
fn profile_of(raw: profiler::profile::RawProfile) -> profiler::profile::Profile {
    profiler::profile::Profile { schema_version: profiler::profile::SCHEMA_VERSION, meta: raw.meta, syscalls: raw.syscalls, ..Default::default() }
}
