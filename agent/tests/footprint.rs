//! The agent's CPU in its footprint: its own threads (the collection's and the drain
//! threads') apart from the rest of its process. `profiler bench` runs the agent inside the
//! process that also runs wrk and reads `/proc`, so the process's CPU is not the agent's.
//! Ground truth: the process's CPU from `getrusage` when nothing else in it runs, and a
//! spinning thread's own CPU clock when one does. Its own test binary, and its tests one at a
//! time ([`exclusive`]): the other tests of a binary run on threads of the same process.
//! Needs root (BPF).

use test_support::{skip_unless, Need};

mod attach_support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use attach_support::{example, exclusive, Spawned};
use profiler::collect::{self, Options, StopReason, Unwind};
use profiler::profile::RawProfile;
use profiler::target::Target;

/// 3 s of on-CPU sampling of a busy process at 4,999 Hz with user-space (DWARF) unwinding,
/// so that the drain thread has tens of ms of work.
fn collect_3s() -> (RawProfile, u64) {
    let exe = example("ka_two_hot_functions");
    let mut child = Spawned::new(&exe, &["30"]);
    assert_eq!(child.read_line(), "ready");
    let mut target = Target::Pid(child.pid()).resolve().expect("resolve pid");
    let options = Options { frequency_hz: 4999, offcpu: false, syscalls: false, wire: false, unwind: Unwind::Dwarf, bpf_run_stats: true, ..Default::default() };
    let wall = Instant::now();
    let (profile, reason) = collect::run(&mut target, &options, Duration::from_secs(3), &AtomicBool::new(false), |_| {}).expect("collect");
    assert_eq!(reason, StopReason::Deadline);
    (profile, wall.elapsed().as_nanos() as u64)
}

#[test]
fn footprint_counts_the_agent_threads_apart_from_the_rest_of_the_process() {
    if skip_unless(&[Need::Root]) {
        return;
    }
    let _alone = exclusive();
    // 1. Nothing else runs in this process: the agent's threads are all of its CPU.
    let (profile, _) = collect_3s();
    let f = profile.meta.footprint.as_ref().expect("footprint");
    let threads = f.threads_cpu_ns.expect("agent threads' CPU (finished on the thread that started)");
    eprintln!("alone: process {} µs, agent threads {} µs", f.cpu_ns / 1000, threads / 1000);
    assert!(threads >= 10_000_000, "the agent's threads used only {threads} ns in 3 s at 4,999 Hz");
    // getrusage counts in µs; the test harness's main thread only waits.
    assert!(f.cpu_ns.abs_diff(threads) <= 2_000_000 + f.cpu_ns / 20, "process {} ns, agent threads {threads} ns: a thread of the agent was left out", f.cpu_ns);

    // 2. A thread that is not the agent's burns CPU all through the run. The process's CPU
    // holds it, the agent threads' does not: what lies between them is the spinner's own
    // clock over the run, up to what it spun while the agent loaded and drained.
    let stop_spinning = Arc::new(AtomicBool::new(false));
    let spinner = {
        let stop = stop_spinning.clone();
        std::thread::spawn(move || {
            let mut x = 0u64;
            while !stop.load(Ordering::Relaxed) {
                x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
            }
        })
    };
    let spun_before = collect::thread_cpu_ns(&spinner);
    let (profile, wall_ns) = collect_3s();
    let spun = collect::thread_cpu_ns(&spinner) - spun_before;
    stop_spinning.store(true, Ordering::Relaxed);
    spinner.join().unwrap();
    let f = profile.meta.footprint.as_ref().expect("footprint");
    let threads = f.threads_cpu_ns.expect("agent threads' CPU");
    let others = f.cpu_ns.saturating_sub(threads);
    let outside = wall_ns.saturating_sub(profile.meta.duration_ns);
    eprintln!(
        "with a spinner: process {} ms, agent threads {} ms, the rest {} ms; spinner {} ms, {} ms of wall time outside the collection",
        f.cpu_ns / 1_000_000,
        threads / 1_000_000,
        others / 1_000_000,
        spun / 1_000_000,
        outside / 1_000_000
    );
    assert!(spun > 1_000_000_000, "the spinner got only {spun} ns of CPU in 3 s");
    assert!(threads < 500_000_000, "agent threads {threads} ns: the spinner was counted as the agent's");
    assert!(others <= spun + 20_000_000, "the rest of the process ({others} ns) is more than the spinner ({spun} ns)");
    assert!(others + outside + 20_000_000 >= spun, "the rest of the process ({others} ns) misses the spinner ({spun} ns, {outside} ns of wall time outside the run)");
}

/// The footprint's per-program costs come from the kernel's BPF run statistics, which the
/// collection turns on when asked ([`Options::bpf_run_stats`]). Ground truth: the perf timer that runs the sampling
/// program, at 4,999 Hz on every CPU; the busy target keeps at least one CPU running all
/// through the 3 s, so the program ran at least 4,999 x 3 s (less 10%) and at most
/// 4,999 x CPUs x 3 s (plus 10%) times, and at least as often as it kept a sample.
#[test]
fn footprint_times_each_bpf_program_by_the_kernel_s_run_statistics() {
    if skip_unless(&[Need::Root]) {
        return;
    }
    let _alone = exclusive();
    let (profile, _) = collect_3s();
    let f = profile.meta.footprint.as_ref().expect("footprint");
    eprintln!("programs: {:?}", f.programs);
    assert_eq!(f.programs.len(), 1, "only the sampler was attached: {:?}", f.programs);
    let p = &f.programs[0];
    let seconds = profile.meta.duration_ns as f64 / 1e9;
    let most = 4999.0 * profile.meta.cpus as f64 * seconds * 1.1;
    let least = 4999.0 * seconds * 0.9;
    assert!((least..=most).contains(&(p.runs as f64)), "{} ran {} times in {seconds:.2} s at 4,999 Hz on {} CPUs", p.program, p.runs, profile.meta.cpus);
    let samples: u64 = profile.on_cpu.iter().map(|s| s.count).sum();
    assert!(p.runs >= samples, "{} runs but {samples} samples kept", p.runs);
    assert_eq!(f.bpf_run_count, Some(p.runs));
    assert_eq!(f.bpf_run_ns, Some(p.run_time_ns));
    let per_run = p.run_time_ns / p.runs;
    assert!((100..200_000).contains(&per_run), "{per_run} ns per run of {}", p.program);
}
