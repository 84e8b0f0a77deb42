//! Where the agent's memory goes over repeated attaches in one process (inside one
//! `profiler bench overhead` process the peak RSS has grown to about 300 MB over 60 attaches).
//! A measurement to run by hand as root (it loads the BPF programs), not a test.
//!
//! Usage: `attach_repeat [RUNS] [SECONDS] [trim]` (defaults 10 and 2). The process profiles
//! itself: a worker thread keeps one CPU busy in a few nested functions while the main thread
//! runs what `profiler attach --pid` does, `RUNS` times: `collect::run` for `SECONDS`,
//! `symbolize::symbolize` (blazesym, on this binary with its line tables), `render::write_all`
//! into a temporary directory and the summary, with `profiler::memory::release_free` after
//! symbolizing as the commands do. After each phase it prints the resident set
//! (`VmRSS`) and its high-water mark (`VmHWM`) from `/proc/self/status`, in MB (10^6 bytes).
//! With `trim`, `malloc_trim(0)` runs after each run and the resident set is printed again:
//! memory that comes back then was free in the allocator, not held by the agent.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use profiler::collect;
use profiler::target::Target;

/// A field of `/proc/self/status` in MB (10^6 bytes; the file gives kB), 0 when missing.
fn status_mb(status: &str, name: &str) -> f64 {
    status
        .lines()
        .find_map(|l| l.strip_prefix(name))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        .map_or(0.0, |kb| kb * 1024.0 / 1e6)
}

/// Largest `RssAnon` (heap, anonymous mappings) and `RssFile` (mapped files, e.g. the
/// binaries blazesym maps) seen since the last [`Peaks::take`], sampled every 5 ms.
#[derive(Default)]
struct Peaks {
    anon_kb: std::sync::atomic::AtomicU64,
    file_kb: std::sync::atomic::AtomicU64,
}

impl Peaks {
    fn sample(&self) {
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let kb = |name| (status_mb(&status, name) * 1e6 / 1024.0) as u64;
        self.anon_kb.fetch_max(kb("RssAnon:"), Ordering::Relaxed);
        self.file_kb.fetch_max(kb("RssFile:"), Ordering::Relaxed);
    }

    /// (anon, file) peaks in MB, and a new period.
    fn take(&self) -> (f64, f64) {
        let mb = |kb: u64| kb as f64 * 1024.0 / 1e6;
        (
            mb(self.anon_kb.swap(0, Ordering::Relaxed)),
            mb(self.file_kb.swap(0, Ordering::Relaxed)),
        )
    }
}

/// `VmRSS` and `VmHWM` of this process, MB.
fn rss_mb() -> (f64, f64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    (status_mb(&status, "VmRSS:"), status_mb(&status, "VmHWM:"))
}

#[inline(never)]
fn busy_leaf(x: u64) -> u64 {
    (0..1000u64).fold(x, |a, i| a.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(i))
}

#[inline(never)]
fn busy_middle(x: u64) -> u64 {
    std::hint::black_box(busy_leaf(x) ^ busy_leaf(x + 1))
}

fn main() {
    let mut args = std::env::args().skip(1);
    let runs: u32 = args.next().and_then(|a| a.parse().ok()).unwrap_or(10);
    let seconds: u64 = args.next().and_then(|a| a.parse().ok()).unwrap_or(2);
    let trim = args.next().as_deref() == Some("trim");
    let done = std::sync::Arc::new(AtomicBool::new(false));
    let worker_done = done.clone();
    let worker = std::thread::Builder::new()
        .name("busy".into())
        .spawn(move || {
            let mut x = 1;
            while !worker_done.load(Ordering::Relaxed) {
                x = busy_middle(x);
            }
            x
        })
        .expect("worker thread");
    let peaks = std::sync::Arc::new(Peaks::default());
    let sampler_peaks = peaks.clone();
    let sampler_done = done.clone();
    let sampler = std::thread::spawn(move || {
        while !sampler_done.load(Ordering::Relaxed) {
            sampler_peaks.sample();
            std::thread::sleep(Duration::from_millis(5));
        }
    });
    let (rss, hwm) = rss_mb();
    println!("start: rss {rss:.1} MB, hwm {hwm:.1} MB");
    let stop = AtomicBool::new(false);
    for run in 1..=runs {
        let mut target = Target::Pid(std::process::id())
            .resolve()
            .unwrap_or_else(|e| {
                eprintln!("attach_repeat: {e}");
                std::process::exit(2)
            });
        let (raw, _) = collect::run(
            &mut target,
            &collect::Options::default(),
            Duration::from_secs(seconds),
            &stop,
            |_| {},
        )
        .unwrap_or_else(|e| {
            eprintln!("attach_repeat: {e:#}");
            std::process::exit(2)
        });
        let after_collect = rss_mb();
        let collect_peaks = peaks.take();
        let profile = profiler::symbolize::symbolize(raw);
        peaks.sample();
        // As `profiler attach` and the bench's profiled runs do (profiler::memory).
        profiler::memory::release_free();
        let after_symbolize = rss_mb();
        let symbolize_peaks = peaks.take();
        let dir = tempfile::tempdir().expect("temporary directory");
        profiler::render::write_all(&profile, dir.path()).unwrap_or_else(|e| {
            eprintln!("attach_repeat: {e}");
            std::process::exit(2)
        });
        let summary = profiler::render::summary(&profile);
        let after_write = rss_mb();
        let samples: u64 = profile.on_cpu.iter().map(|c| c.count).sum();
        drop(profile);
        drop(summary);
        let end = rss_mb();
        print!(
            "run {run}: {samples} samples; rss/hwm MB: collected {:.1}/{:.1}, symbolized {:.1}/{:.1}, written {:.1}/{:.1}, dropped {:.1}/{:.1}",
            after_collect.0,
            after_collect.1,
            after_symbolize.0,
            after_symbolize.1,
            after_write.0,
            after_write.1,
            end.0,
            end.1
        );
        if trim {
            // SAFETY: malloc_trim has no preconditions.
            unsafe { libc::malloc_trim(0) };
            print!(", after malloc_trim {:.1}", rss_mb().0);
        }
        println!(
            "  peak RssAnon/RssFile MB (5 ms samples): collecting {:.1}/{:.1}, symbolizing {:.1}/{:.1}",
            collect_peaks.0, collect_peaks.1, symbolize_peaks.0, symbolize_peaks.1
        );
    }
    done.store(true, Ordering::Relaxed);
    let _ = worker.join();
    let _ = sampler.join();
}
