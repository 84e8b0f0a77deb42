//! Driver for measuring the unwinding modes on a running process: profiles `--pid` for
//! `--seconds` with `--unwind fp|dwarf|auto`, symbolizes, and prints one JSON line with the
//! samples, the share of complete stacks (not truncated by the symbolizer's rule), the top
//! truncated leaf functions, the BPF programs' run count and mean run time (kernel run
//! statistics), the agent's own CPU time over the run (utime + stime of
//! /proc/self/stat, ms) and, for the stack-copy modes, the unwinding report.
//!
//! Usage: `unwind_measure --pid PID [--unwind dwarf] [--seconds 10] [--frequency 99]
//! [--stack-copy-bytes 16384]`

use std::collections::HashMap;
use std::time::Duration;

use profiler::collect::{self, Options, Unwind};
use profiler::target::Target;

/// utime + stime of this process, ms (clock ticks of 10 ms).
fn own_cpu_ms() -> u64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = after.split_whitespace().collect();
    // Fields after the comm: state is index 0, utime is field 14 of the line (index 11 here).
    let utime: u64 = f.get(11).and_then(|v| v.parse().ok()).unwrap_or(0);
    let stime: u64 = f.get(12).and_then(|v| v.parse().ok()).unwrap_or(0);
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
    (utime + stime) * 1000 / hz.max(1)
}

fn main() {
    let mut pid = None;
    let mut unwind = Unwind::Dwarf;
    let mut seconds = 10u64;
    let mut frequency = 99u64;
    let mut stack_copy_bytes = collect::DEFAULT_STACK_COPY_BYTES;
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < args.len() {
        let v = args.get(i + 1).cloned().unwrap_or_default();
        match args[i].as_str() {
            "--pid" => pid = v.parse().ok(),
            "--unwind" => unwind = v.parse().expect("--unwind auto|fp|dwarf"),
            "--seconds" => seconds = v.parse().expect("--seconds N"),
            "--frequency" => frequency = v.parse().expect("--frequency HZ"),
            "--stack-copy-bytes" => stack_copy_bytes = v.parse().expect("--stack-copy-bytes N"),
            other => panic!("unknown argument {other}"),
        }
        i += 2;
    }
    let pid: u32 = pid.expect("--pid PID");
    let target = Target::Pid(pid).resolve().expect("resolve pid");
    let options = Options { frequency_hz: frequency, offcpu: false, syscalls: false, wire: false, unwind, stack_copy_bytes, ..Default::default() };
    let cpu_before = own_cpu_ms();
    // Kernel-side cost: BPF run statistics (run count and time of each program).
    let _stats = collect::enable_run_stats().expect("BPF_ENABLE_STATS");
    let collector = collect::Collector::start(&target, &options).expect("collect");
    std::thread::sleep(Duration::from_secs(seconds));
    let programs: Vec<serde_json::Value> = collector
        .program_stats()
        .iter()
        .filter(|p| p.runs > 0)
        .map(|p| serde_json::json!({"program": p.program, "runs": p.runs, "ns_per_run": p.run_time_ns / p.runs}))
        .collect();
    let raw = collector.finish(&target, None).expect("finish");
    let cpu_collect = own_cpu_ms() - cpu_before;
    let lost = raw.lost;
    let report = raw.meta.unwind.clone();
    let profile = profiler::symbolize::symbolize(raw);
    let samples: u64 = profile.on_cpu.iter().map(|s| s.count).sum();
    let truncated: u64 = profile.on_cpu.iter().filter(|s| profile.stacks[s.stack as usize].truncated).map(|s| s.count).sum();
    let mut leaves: HashMap<String, u64> = HashMap::new();
    for s in profile.on_cpu.iter().filter(|s| profile.stacks[s.stack as usize].truncated) {
        let stack = &profile.stacks[s.stack as usize];
        // The outermost user frame of a truncated stack: where the walk stopped.
        let root = stack.frames.iter().map(|&f| &profile.frames[f as usize]).find(|f| f.kind == profiler::profile::FrameKind::User);
        let name = root.map(|f| format!("{} ({})", f.display_name(), f.module)).unwrap_or_else(|| "[no user frame]".into());
        *leaves.entry(name).or_default() += s.count;
    }
    let mut leaves: Vec<(String, u64)> = leaves.into_iter().collect();
    leaves.sort_by_key(|l| std::cmp::Reverse(l.1));
    leaves.truncate(8);
    let out = serde_json::json!({
        "unwind": unwind.as_str(),
        "seconds": seconds,
        "frequency_hz": frequency,
        "samples": samples,
        "complete_pct": if samples > 0 { 100.0 * (samples - truncated) as f64 / samples as f64 } else { 0.0 },
        "truncated_stops_outermost_user_frame": leaves,
        "agent_cpu_ms_collect": cpu_collect,
        "agent_cpu_ms_total": own_cpu_ms() - cpu_before,
        "agent_max_rss_kb": std::fs::read_to_string("/proc/self/status").ok().and_then(|s| s.lines().find_map(|l| l.strip_prefix("VmHWM:").map(|v| v.trim().trim_end_matches(" kB").trim().parse::<u64>().unwrap_or(0)))),
        "lost": lost,
        "bpf_programs": programs,
        "unwind_report": report,
    });
    println!("{}", serde_json::to_string_pretty(&out).unwrap());
}
