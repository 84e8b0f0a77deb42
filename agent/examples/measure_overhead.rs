//! Measures what the agent costs a syscall-heavy load: `wrk` against
//! `overhead_http_server` on loopback, with the collector detached and attached in four
//! configurations, alternating so that drift of the machine hits every mode alike.
//! A last pass with BPF run statistics on reports each program's runs and ns per run.
//!
//! Usage (root): `measure_overhead [ROUNDS] [SECONDS] [pid|cgroup]` (defaults 3, 3, cgroup).
//! With `cgroup`, the server is moved into a fresh cgroup v2 directory (the container case:
//! the filter is one helper call); with `pid`, the filter is the pid-set hash lookup.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use profiler::collect::{enable_run_stats, Collector, Options, Unwind};
use profiler::target::{cgroup2_mount, ResolvedTarget, Target};

fn wrk(port: &str, seconds: u64) -> f64 {
    let out = Command::new("wrk")
        .args(["-t1", "-c32", &format!("-d{seconds}s"), &format!("http://127.0.0.1:{port}/")])
        .output()
        .expect("running wrk (Debian package wrk)");
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| l.strip_prefix("Requests/sec:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no Requests/sec in wrk output:\n{text}"))
}

#[derive(Clone, Copy)]
enum Mode {
    Off,
    Sample,
    SampleOffcpu,
    All,
    AllOtherTarget,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Off => "detached",
            Mode::Sample => "sampling",
            Mode::SampleOffcpu => "sampling+offcpu",
            Mode::All => "sampling+offcpu+syscalls",
            Mode::AllOtherTarget => "all three, target = another (idle) process",
        }
    }
}

fn options(mode: Mode) -> Option<Options> {
    // The configuration the numbers in agent-ebpf/README.md were taken with: frame-pointer
    // sampling in the kernel, no wire capture.
    let base = Options { unwind: Unwind::Fp, wire: false, ..Options::default() };
    match mode {
        Mode::Off => None,
        Mode::Sample => Some(Options { offcpu: false, syscalls: false, ..base }),
        Mode::SampleOffcpu => Some(Options { syscalls: false, ..base }),
        Mode::All | Mode::AllOtherTarget => Some(base),
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let rounds: usize = args.next().map(|s| s.parse().expect("ROUNDS")).unwrap_or(3);
    let seconds: u64 = args.next().map(|s| s.parse().expect("SECONDS")).unwrap_or(3);
    let by_cgroup = args.next().as_deref() != Some("pid");

    let examples = std::env::current_exe().unwrap().parent().unwrap().to_path_buf();
    let mut server: Child = Command::new(examples.join("overhead_http_server"))
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn overhead_http_server");
    let mut line = String::new();
    BufReader::new(server.stdout.take().unwrap()).read_line(&mut line).unwrap();
    let port = line.trim().strip_prefix("ready ").expect("ready PORT").to_owned();
    let mut idle = Command::new("sleep").arg("1000").spawn().unwrap();

    // With `cgroup`, the server and the idle process each get a cgroup v2 directory.
    let cgroup_dirs: Vec<PathBuf> = if by_cgroup {
        [("server", server.id()), ("idle", idle.id())]
            .iter()
            .map(|(what, pid)| {
                let dir = cgroup2_mount().unwrap().join(format!("profiler-overhead-{what}-{}", std::process::id()));
                std::fs::create_dir_all(&dir).unwrap();
                std::fs::write(dir.join("cgroup.procs"), pid.to_string()).unwrap();
                dir
            })
            .collect()
    } else {
        Vec::new()
    };
    let (server_target, idle_target): (ResolvedTarget, ResolvedTarget) = if by_cgroup {
        (Target::Cgroup(cgroup_dirs[0].clone()).resolve().unwrap(), Target::Cgroup(cgroup_dirs[1].clone()).resolve().unwrap())
    } else {
        (Target::Pid(server.id()).resolve().unwrap(), Target::Pid(idle.id()).resolve().unwrap())
    };
    println!("filter: {:?}", server_target.filter);

    wrk(&port, 2); // warm-up
    let modes = [Mode::Off, Mode::Sample, Mode::SampleOffcpu, Mode::All, Mode::AllOtherTarget];
    let mut results: BTreeMap<usize, Vec<f64>> = BTreeMap::new();
    for round in 0..rounds {
        for (i, &mode) in modes.iter().enumerate() {
            let target = if matches!(mode, Mode::AllOtherTarget) { &idle_target } else { &server_target };
            let collector = options(mode).map(|o| Collector::start(target, &o).expect("start collector"));
            let rps = wrk(&port, seconds);
            if let Some(c) = collector {
                drop(c);
            }
            println!("round {round} {:<45} {rps:>10.0} req/s", mode.name());
            results.entry(i).or_default().push(rps);
        }
    }
    let mean = |v: &Vec<f64>| v.iter().sum::<f64>() / v.len() as f64;
    let base = mean(&results[&0]);
    println!("\nmode                                          mean req/s  ratio to detached");
    for (i, mode) in modes.iter().enumerate() {
        let m = mean(&results[&i]);
        println!("{:<45} {m:>10.0}  {:.3}", mode.name(), m / base);
    }

    // Per-program cost from the kernel's BPF run statistics.
    let _stats = enable_run_stats().expect("enable BPF run statistics");
    for (label, target) in [("target = server", &server_target), ("target = idle process", &idle_target)] {
        let collector = Collector::start(target, &options(Mode::All).unwrap()).unwrap();
        let rps = wrk(&port, seconds);
        println!("\nBPF run statistics, {label} ({rps:.0} req/s with stats on):");
        for s in collector.program_stats() {
            let per_run = if s.runs > 0 { s.run_time_ns as f64 / s.runs as f64 } else { 0.0 };
            println!(
                "  {:<15} {:>10} runs  {:>7.1} ns/run  {:>6.1} ms total ({:.2}% of {} CPU-s)",
                s.program,
                s.runs,
                per_run,
                s.run_time_ns as f64 / 1e6,
                100.0 * s.run_time_ns as f64 / (seconds as f64 * 2e9),
                seconds * 2
            );
        }
    }

    let _ = server.kill();
    let _ = server.wait();
    let _ = idle.kill();
    let _ = idle.wait();
    std::thread::sleep(Duration::from_millis(200));
    for dir in cgroup_dirs {
        let _ = std::fs::remove_dir(dir);
    }
}
