//! Known answer (c): `ka_known_sleeps` sleeps 20 × 50 ms inside `profiler_ka_sleepy`; the
//! off-CPU time recorded on stacks through that function must be within 10 % of 1 s, in
//! 20 waits. Addresses are checked with the ELF symbol table and `/proc/PID/maps`.

use test_support::{skip_unless, Need};

mod attach_support;

use attach_support::{example, first_frame_in, function_ranges, Spawned};
use profiler::collect::{self, Collector, Options};
use profiler::target::Target;

#[test]
fn sleeps_add_up_to_one_second() {
    if skip_unless(&[Need::Root]) {
        return;
    }
    let exe = example("ka_known_sleeps");
    let mut child = Spawned::new(&exe, &["20", "50"]);
    assert_eq!(child.read_line(), "ready");
    let pid = child.pid();
    let target = Target::Pid(pid).resolve().expect("resolve pid");
    let options = Options { offcpu: true, syscalls: false, offcpu_min_block_ns: 1_000, wire: false, ..Default::default() };
    let collector = Collector::start(&target, &options).expect("start");
    let ranges = function_ranges(&exe, pid, "/ka_known_sleeps", &["profiler_ka_sleepy"]);
    child.send_line("go");
    assert_eq!(child.read_line(), "done 0");
    let profile = collector.finish(&target, None).expect("finish");

    let (mut waits, mut total_ns) = (0, 0);
    for stack in &profile.off_cpu {
        assert_eq!(stack.pid, pid);
        if first_frame_in(&stack.user, &ranges).is_some() {
            waits += stack.count;
            total_ns += stack.total_ns;
            // The kernel part of the stack is there too (schedule, hrtimer_nanosleep...).
            assert!(!stack.kernel.is_empty());
        }
    }
    eprintln!("{waits} waits, {} ms off-CPU in profiler_ka_sleepy", total_ns / 1_000_000);
    assert_eq!(waits, 20);
    let expected = 1_000_000_000f64;
    assert!((total_ns as f64 - expected).abs() <= 0.10 * expected, "off-CPU {total_ns} ns");
    assert_eq!(profile.meta.offcpu_min_block_ns, 1_000);
    assert_eq!(profile.lost.offcpu_dropped, 0);
}

#[test]
fn open_wait_is_counted_up_to_the_end() {
    if skip_unless(&[Need::Root]) {
        return;
    }
    // One 3 s sleep, the run ends after about 1 s: the open wait counts ~1 s.
    let exe = example("ka_known_sleeps");
    let mut child = Spawned::new(&exe, &["1", "3000"]);
    assert_eq!(child.read_line(), "ready");
    let pid = child.pid();
    let target = Target::Pid(pid).resolve().unwrap();
    let options = Options { offcpu: true, syscalls: false, wire: false, ..Default::default() };
    let collector = Collector::start(&target, &options).unwrap();
    let ranges = function_ranges(&exe, pid, "/ka_known_sleeps", &["profiler_ka_sleepy"]);
    child.send_line("go");
    std::thread::sleep(std::time::Duration::from_millis(1000));
    let profile = collector.finish(&target, Some("test stops early".into())).unwrap();
    let total_ns: u64 = profile.off_cpu.iter().filter(|s| first_frame_in(&s.user, &ranges).is_some()).map(|s| s.total_ns).sum();
    eprintln!("open wait counted {} ms", total_ns / 1_000_000);
    assert!(total_ns > 800_000_000 && total_ns < 1_200_000_000, "{total_ns}");
    assert_eq!(profile.meta.partial.as_deref(), Some("test stops early"));
}

/// Off-CPU waits of `ka_epoll_waits COUNT MS` through each of its two call sites: (waits, ns)
/// for `profiler_ka_loop_a` and `profiler_ka_loop_b`, with the event-loop stack reuse set to
/// `rewalk_every`.
fn epoll_waits_by_site(count: u32, ms: u32, rewalk_every: u64) -> [(u64, u64); 2] {
    let exe = example("ka_epoll_waits");
    let mut child = Spawned::new(&exe, &[&count.to_string(), &ms.to_string()]);
    assert_eq!(child.read_line(), "ready");
    let pid = child.pid();
    let target = Target::Pid(pid).resolve().expect("resolve pid");
    let options = Options { offcpu: true, offcpu_loop_rewalk_every: rewalk_every, syscalls: false, wire: false, ..Default::default() };
    let collector = Collector::start(&target, &options).expect("start");
    let ranges = function_ranges(&exe, pid, "/ka_epoll_waits", &["profiler_ka_loop_a", "profiler_ka_loop_b"]);
    assert!(ranges[0].end <= ranges[1].start || ranges[1].end <= ranges[0].start, "the two sites share code: {ranges:?}");
    child.send_line("go");
    assert_eq!(child.read_line(), "done 0", "every epoll_wait must wait its whole timeout");
    let profile = collector.finish(&target, None).expect("finish");
    eprintln!("switch-ins the tracepoint did not show: {}", profile.lost.offcpu_switch_ins_unseen);
    let mut sites = [(0, 0); 2];
    for stack in profile.off_cpu.iter().filter(|s| s.pid == pid) {
        if let Some(site) = first_frame_in(&stack.user, &ranges) {
            sites[site].0 += stack.count;
            sites[site].1 += stack.total_ns;
            assert!(!stack.kernel.is_empty(), "an epoll wait without its kernel stack");
        }
    }
    sites
}

#[test]
fn event_loop_waits_keep_their_call_sites_when_their_stacks_are_reused() {
    if skip_unless(&[Need::Root]) {
        return;
    }
    // 40 waits of 5 ms from site a, 40 from site b, then 40 alternating: 60 waits and 300 ms
    // per site by construction. Both sites enter the syscall with the same registers; only
    // the return address in the frame record differs, so a reuse keyed on registers alone
    // would give the first of b's waits a's stack.
    let (count, ms) = (40, 5);
    for rewalk_every in [collect::DEFAULT_LOOP_REWALK_EVERY, 1] {
        let sites = epoll_waits_by_site(count, ms, rewalk_every);
        eprintln!("rewalk every {rewalk_every}: site a {:?}, site b {:?} (waits, ns)", sites[0], sites[1]);
        for (name, (waits, ns)) in ["a", "b"].iter().zip(sites) {
            assert_eq!(waits, 60, "site {name}: waits (rewalk every {rewalk_every})");
            let expected = 60.0 * ms as f64 * 1e6;
            assert!(ns as f64 >= expected && (ns as f64) < expected * 1.5, "site {name}: {ns} ns off-CPU, at least {expected}");
        }
    }
}

#[test]
fn a_thread_that_exits_leaves_no_wait_open() {
    if skip_unless(&[Need::Root]) {
        return;
    }
    // One 50 ms sleep, then the process exits while the run goes on for 600 ms more. Its
    // last switch-out (do_task_dead) is not a wait: nothing of the process may count to the
    // end of the run. Before, that switch-out counted as an open wait of about 600 ms.
    let exe = example("ka_known_sleeps");
    let mut child = Spawned::new(&exe, &["1", "50"]);
    assert_eq!(child.read_line(), "ready");
    let pid = child.pid();
    let target = Target::Pid(pid).resolve().unwrap();
    let options = Options { offcpu: true, syscalls: false, wire: false, ..Default::default() };
    let collector = Collector::start(&target, &options).unwrap();
    child.send_line("go");
    assert_eq!(child.read_line(), "done 0");
    child.send_line("exit");
    std::thread::sleep(std::time::Duration::from_millis(600));
    let profile = collector.finish(&target, None).unwrap();
    let total_ns: u64 = profile.off_cpu.iter().filter(|s| s.pid == pid).map(|s| s.total_ns).sum();
    eprintln!(
        "the exited process: {} ms off-CPU; switch-ins the tracepoint did not show: {}",
        total_ns / 1_000_000,
        profile.lost.offcpu_switch_ins_unseen
    );
    assert!(total_ns >= 50_000_000 && total_ns < 300_000_000, "{total_ns} ns");
}
