//! Known answer (c): `ka_known_sleeps` sleeps 20 × 50 ms inside `profiler_ka_sleepy`; the
//! off-CPU time recorded on stacks through that function must be within 10 % of 1 s, in
//! 20 waits. Addresses are checked with the ELF symbol table and `/proc/PID/maps`.

use test_support::{skip_unless, Need};

mod attach_support;

use attach_support::{example, first_frame_in, function_ranges, Spawned};
use profiler::collect::{Collector, Options};
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
