//! How long the agent takes to write every report of a large profile: a generated profile of
//! 100,000 distinct on-CPU stacks (and 10,000 off-CPU stacks), written with
//! `render::write_all` (profile.json, folded stacks, flamegraphs, pprof files, syscalls.json)
//! plus the text summary, timed over a few repetitions. A benchmark to run by hand, not a
//! test (the issue-6 goal is at most 2 s on this machine).
//!
//! Usage: `report_write_100k [STACKS] [REPEATS] [KEEP_DIR]` (defaults 100000 and 3; with
//! `KEEP_DIR`, the first run's files are left there, e.g. to compare them byte for byte with
//! what `profiler report KEEP_DIR/profile.json` of another build writes). The profile is
//! deterministic (a fixed-seed xorshift): 20,000 distinct functions over 40 modules, stacks
//! 12-48 frames deep sharing a few root prefixes, as real Rust services have (runtime frames
//! at the root, the request's frames at the leaf).

use std::time::Instant;

use profiler::profile::{
    Frame, FrameKind, Meta, Process, Profile, Stack, StackCount, SCHEMA_VERSION,
};

/// xorshift64*: deterministic and good enough to spread frames.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn generate(stacks: usize) -> Profile {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let functions = 20_000u32;
    let frames: Vec<Frame> = (0..functions)
        .map(|i| Frame {
            function: format!(
                "crate_{}::module_{}::Type{}::function_{i}::{{{{closure}}}}",
                i % 40,
                i % 300,
                i % 1000
            ),
            module: if i < 500 {
                "[kernel]".to_string()
            } else {
                format!("lib{}.so", i % 40)
            },
            kind: if i < 500 {
                FrameKind::Kernel
            } else {
                FrameKind::User
            },
            inlined: i % 7 == 0,
            file: (i % 3 == 0).then(|| format!("src/module_{}.rs", i % 300)),
            line: (i % 3 == 0).then_some(i % 2000),
        })
        .collect();
    // A few shared roots (thread start, runtime), then random user frames, a kernel tail
    // on some. Distinct by construction: the last user frame and the depth come from the
    // stack's index.
    let roots: Vec<Vec<u32>> = (0..8)
        .map(|r| (0..6).map(|d| 500 + r * 6 + d).collect())
        .collect();
    let mut all = Vec::with_capacity(stacks + stacks / 10);
    let mut on_cpu = Vec::with_capacity(stacks);
    let mut off_cpu = Vec::with_capacity(stacks / 10);
    for i in 0..stacks + stacks / 10 {
        let mut f = roots[i % roots.len()].clone();
        let depth = 6 + rng.below(36) as usize;
        for _ in 0..depth {
            f.push(548 + rng.below(u64::from(functions) - 548) as u32);
        }
        f.push(548 + (i as u32 % (functions - 548)));
        f.push(548 + ((i / (functions as usize - 548)) as u32 % (functions - 548)));
        if i % 3 == 0 {
            for _ in 0..(2 + rng.below(6)) {
                f.push(rng.below(500) as u32);
            }
        }
        all.push(Stack {
            frames: f,
            truncated: i % 50 == 0,
        });
        let count = StackCount {
            pid: 100,
            tid: 100 + (i % 16) as u32,
            thread: format!("worker-{}", i % 16),
            stack: i as u32,
            count: 1 + rng.below(20),
            total_ns: 0,
            endpoints: Vec::new(),
        };
        if i < stacks {
            on_cpu.push(count);
        } else {
            off_cpu.push(StackCount {
                total_ns: 1_000 + rng.below(50_000_000),
                ..count
            });
        }
    }
    Profile {
        schema_version: SCHEMA_VERSION,
        meta: Meta {
            target: "generated".to_string(),
            duration_ns: 30_000_000_000,
            frequency_hz: 99,
            cpus: 2,
            ..Meta::default()
        },
        processes: vec![Process {
            pid: 100,
            ..Process::default()
        }],
        frames,
        stacks: all,
        on_cpu,
        off_cpu,
        ..Profile::default()
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let stacks: usize = args.next().map_or(100_000, |a| {
        a.parse().unwrap_or_else(|_| {
            eprintln!("report_write_100k: STACKS must be a number, got {a}");
            std::process::exit(2)
        })
    });
    let repeats: u32 = args.next().map_or(3, |a| {
        a.parse().unwrap_or_else(|_| {
            eprintln!("report_write_100k: REPEATS must be a number, got {a}");
            std::process::exit(2)
        })
    });
    let t = Instant::now();
    let profile = generate(stacks);
    println!(
        "generated {} on-CPU + {} off-CPU distinct stacks, {} frames, in {:.0} ms",
        profile.on_cpu.len(),
        profile.off_cpu.len(),
        profile.frames.len(),
        t.elapsed().as_secs_f64() * 1e3
    );
    let keep = args.next().map(std::path::PathBuf::from);
    let dir = tempfile::tempdir().expect("temporary directory");
    let mut times = Vec::new();
    for r in 0..repeats.max(1) {
        let out = match &keep {
            Some(keep) if r == 0 => keep.clone(),
            _ => dir.path().join(format!("run-{r}")),
        };
        let t = Instant::now();
        let written = profiler::render::write_all(&profile, &out).unwrap_or_else(|e| {
            eprintln!("report_write_100k: {e}");
            std::process::exit(2)
        });
        let summary = profiler::render::summary(&profile);
        let took = t.elapsed();
        times.push(took.as_secs_f64());
        let bytes: u64 = written
            .iter()
            .filter_map(|p| std::fs::metadata(p).ok())
            .map(|m| m.len())
            .sum();
        println!(
            "run {}: write_all + summary {:.0} ms, {} files, {:.1} MB, summary {} lines",
            r + 1,
            took.as_secs_f64() * 1e3,
            written.len(),
            bytes as f64 / 1e6,
            summary.lines().count()
        );
        if r == 0 {
            for p in &written {
                println!(
                    "  {} {:.1} MB",
                    p.file_name()
                        .map_or_else(String::new, |n| n.to_string_lossy().into_owned()),
                    std::fs::metadata(p).map_or(0, |m| m.len()) as f64 / 1e6
                );
            }
        }
        if keep.is_none() || r > 0 {
            let _ = std::fs::remove_dir_all(&out);
        }
    }
    times.sort_by(f64::total_cmp);
    println!(
        "median {:.0} ms over {} runs (goal: at most 2000 ms)",
        times[times.len() / 2] * 1e3,
        times.len()
    );
}
