//! CPU and memory of a set of processes, sampled from `/proc` while a test runs.
//!
//! CPU time is `utime + stime` of `/proc/PID/stat` (fields 14 and 15, in clock ticks of
//! `sysconf(_SC_CLK_TCK)`, see proc(5)); it covers every thread of the process. Memory is
//! `VmRSS` of `/proc/PID/status`, bytes. The set of processes is found again at every sample
//! (a root pid and all its descendants), so PostgreSQL backends that start during a run count.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub use profiler::runs::Usage;

use profiler::sys::stat::clock_ticks_per_second;

/// Resident memory of one process, bytes (`VmRSS`), 0 when gone or a kernel thread.
pub fn rss_bytes(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map(|kb| kb * 1024)
        .unwrap_or(0)
}

/// `root` and all its descendants that exist now, with their CPU ticks.
pub fn tree(root: u32) -> HashMap<u32, u64> {
    let all = profiler::sys::stat::all();
    let mut members: HashSet<u32> = HashSet::from([root]);
    loop {
        let before = members.len();
        for (&pid, s) in &all {
            if members.contains(&s.ppid) {
                members.insert(pid);
            }
        }
        if members.len() == before {
            break;
        }
    }
    all.into_iter().filter(|(pid, _)| members.contains(pid)).map(|(pid, s)| (pid, s.cpu_ticks)).collect()
}

/// Samples a process tree in a background thread until [`Sampler::finish`].
pub struct Sampler {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<Usage>>,
}

impl Sampler {
    /// Starts sampling the tree under `root` every `interval`.
    pub fn start(root: u32, interval: Duration) -> Sampler {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let handle = std::thread::spawn(move || {
            let hz = clock_ticks_per_second();
            let start = Instant::now();
            // Ticks per pid at the start and the latest seen: processes that exit keep their last value.
            let first = tree(root);
            let mut last = first.clone();
            let mut usage = Usage::default();
            loop {
                let now = tree(root);
                let rss: u64 = now.keys().map(|&p| rss_bytes(p)).sum();
                usage.peak_rss_bytes = usage.peak_rss_bytes.max(rss);
                usage.samples += 1;
                last.extend(now);
                if flag.load(Ordering::Relaxed) {
                    break;
                }
                std::thread::sleep(interval);
            }
            let elapsed = start.elapsed();
            let ticks: u64 = last.iter().map(|(pid, t)| t.saturating_sub(first.get(pid).copied().unwrap_or(0))).sum();
            usage.cpu_ns = ticks * 1_000_000_000 / hz;
            usage.cpu = usage.cpu_ns as f64 / elapsed.as_nanos().max(1) as f64;
            usage
        });
        Sampler { stop, handle: Some(handle) }
    }

    /// Stops sampling and returns the usage over the whole sampling period.
    pub fn finish(mut self) -> Usage {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.take().and_then(|h| h.join().ok()).unwrap_or_default()
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_time_matches_the_kernels_own_count() {
        // A shell loop of builtins (no forks) burns CPU until killed. Whatever CPU it gets on
        // a busy machine, the sampler's total must equal the kernel's count for the process
        // (read from /proc/PID/stat just before the sampler's last sample) within 3 ticks.
        let mut child = std::process::Command::new("sh").arg("-c").arg("while :; do :; done").spawn().unwrap();
        let pid = child.id();
        let sampler = Sampler::start(pid, Duration::from_millis(20));
        std::thread::sleep(Duration::from_millis(600));
        let before_finish = profiler::sys::stat::read(pid).unwrap().cpu_ticks;
        let usage = sampler.finish();
        let after_finish = profiler::sys::stat::read(pid).unwrap().cpu_ticks;
        child.kill().unwrap();
        child.wait().unwrap();
        let tick_ns = 1_000_000_000 / clock_ticks_per_second();
        let lo = before_finish.saturating_sub(3) * tick_ns;
        let hi = after_finish * tick_ns;
        assert!(usage.cpu_ns >= lo && usage.cpu_ns <= hi, "sampler {} ns, kernel {}..{} ns", usage.cpu_ns, lo, hi);
        assert!(usage.cpu > 0.0 && usage.cpu <= 1.05, "cpu {}", usage.cpu);
        assert!(usage.peak_rss_bytes > 0);
        assert!(usage.samples >= 5, "samples {}", usage.samples);
    }

    #[test]
    fn own_tree_and_rss() {
        assert!(tree(std::process::id()).contains_key(&std::process::id()));
        assert!(rss_bytes(std::process::id()) > 0);
    }
}
