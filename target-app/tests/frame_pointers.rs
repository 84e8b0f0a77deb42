//! The binary's stacks walk with frame pointers all the way to the thread's start, including
//! samples taken inside the allocator (mimalloc, built with -fno-omit-frame-pointer; Debian's
//! glibc malloc has no frame pointers and cuts such stacks). Checked from outside with perf:
//! `perf record -F 999 -g --call-graph fp -p PID` while wrk loads `/db` and a POST, then
//! `perf script`: a sample's stack is complete when its outermost user frame is a thread
//! entry (`clone3`/`clone`/`start_thread` for threads, `_start`/`__libc_start_main` for the
//! main thread).

use test_support::{skip_unless, Need};

mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::{spawn_binary, Db};

/// Outermost frames that mean "walked to the thread's start".
const ROOTS: [&str; 6] = ["clone3", "__clone3", "clone", "start_thread", "_start", "__libc_start_main"];

#[derive(Debug, Default)]
struct Share {
    /// Samples with at least one user-space frame.
    samples: usize,
    complete: usize,
    /// Samples taken in user mode (first frame in user space).
    user_mode: usize,
    user_mode_complete: usize,
    /// Samples with a mimalloc frame (`mi_*`, `_mi_*`).
    in_malloc: usize,
    in_malloc_complete: usize,
    /// Incomplete samples whose outermost frame is in glibc (libc.so.6).
    cut_in_glibc: usize,
}

fn analyse(script: &str) -> (Share, Vec<String>) {
    let mut s = Share::default();
    let mut broken = Vec::new();
    for block in script.split("\n\n").filter(|b| !b.trim().is_empty()) {
        let frames: Vec<&str> = block.lines().skip(1).map(str::trim).filter(|l| !l.is_empty()).collect();
        let Some(first) = frames.first() else { continue };
        // "ADDR SYMBOL+OFF (DSO)": keep the symbol.
        let sym = |l: &str| l.split_whitespace().nth(1).unwrap_or("").split('+').next().unwrap_or("").to_string();
        let user: Vec<&str> = frames.iter().copied().filter(|l| !l.contains("[kernel.kallsyms]")).collect();
        let Some(outer_line) = user.last() else { continue }; // kernel-only sample (a kthread)
        let outer = sym(outer_line);
        s.samples += 1;
        let user_mode = !first.contains("[kernel.kallsyms]");
        let complete = ROOTS.iter().any(|r| outer == *r || outer.ends_with(r));
        let malloc = user.iter().any(|l| {
            let f = sym(l);
            f.starts_with("mi_") || f.starts_with("_mi_")
        });
        s.complete += usize::from(complete);
        s.user_mode += usize::from(user_mode);
        s.user_mode_complete += usize::from(user_mode && complete);
        s.in_malloc += usize::from(malloc);
        s.in_malloc_complete += usize::from(malloc && complete);
        if !complete {
            if outer_line.contains("libc.so") {
                s.cut_in_glibc += 1;
            }
            if broken.len() < 5 && !outer_line.contains("libc.so") {
                broken.push(block.to_string());
            }
        }
    }
    (s, broken)
}

fn pct(a: usize, b: usize) -> f64 {
    100.0 * a as f64 / b.max(1) as f64
}

#[test]
fn stacks_reach_the_thread_start_including_mimalloc() {
    if skip_unless(&[Need::Root, Need::Perf, Need::Wrk]) {
        return;
    }
    let db = Db::start();
    let app = spawn_binary(&[("DATABASE_URL", &db.url), ("CRM_COSTS", "all")]);
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("perf.data");
    let url = format!("{}/db", app.base);
    // Warm up the pool, then record while wrk runs.
    let warm = Command::new("wrk").args(["-t1", "-c4", "-d1s", &url]).output().expect("run wrk (Debian package wrk)");
    assert!(warm.status.success(), "wrk: {}", String::from_utf8_lossy(&warm.stderr));
    let perf = Command::new("perf")
        .args(["record", "-F", "999", "-g", "--call-graph", "fp", "-o"])
        .arg(&data)
        .args(["-p", &app.pid().to_string()])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn perf");
    std::thread::sleep(Duration::from_millis(500));
    let load = Command::new("wrk").args(["-t1", "-c8", "-d3s", &url]).output().expect("run wrk");
    assert!(load.status.success());
    // SAFETY: signalling our own child.
    unsafe { libc::kill(perf.id() as i32, libc::SIGINT) };
    let out = perf.wait_with_output().unwrap();
    assert!(out.status.success() || data.exists(), "perf record: {}", String::from_utf8_lossy(&out.stderr));
    let script = Command::new("perf").args(["script", "-F", "comm,tid,ip,sym,dso", "-i"]).arg(&data).output().expect("perf script");
    assert!(script.status.success(), "perf script: {}", String::from_utf8_lossy(&script.stderr));
    let (s, broken) = analyse(&String::from_utf8_lossy(&script.stdout));
    println!(
        "samples with user frames: {}, complete: {} ({:.1}%); cut inside glibc: {} ({:.1}%); \
         user-mode samples: {}, complete: {} ({:.1}%); inside mimalloc: {}, complete: {} ({:.1}%)",
        s.samples, s.complete, pct(s.complete, s.samples), s.cut_in_glibc, pct(s.cut_in_glibc, s.samples),
        s.user_mode, s.user_mode_complete, pct(s.user_mode_complete, s.user_mode),
        s.in_malloc, s.in_malloc_complete, pct(s.in_malloc_complete, s.in_malloc),
    );
    assert!(s.samples >= 500, "too few samples ({}) for a share", s.samples);
    assert!(s.in_malloc >= 10, "no samples inside mimalloc ({}): is it the global allocator?", s.in_malloc);
    assert!(pct(s.in_malloc_complete, s.in_malloc) >= 95.0, "mimalloc samples: {s:?}");
    assert!(pct(s.user_mode_complete, s.user_mode) >= 95.0, "user-mode samples: {s:?}");
    // Every other cut stack ends in a glibc syscall wrapper (Debian's glibc has no frame
    // pointers): nothing of the app's own code, std or mimalloc breaks the walk.
    assert!(
        s.complete + s.cut_in_glibc >= s.samples * 99 / 100,
        "stacks cut outside glibc: {s:?}; first ones:\n{}",
        broken.join("\n---\n")
    );
}
