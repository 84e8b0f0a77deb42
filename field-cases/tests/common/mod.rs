//! Test harness of `field-cases`: start the release app, load it with wrk, profile it with
//! `profiler attach`, and read the app's own `/stats`.
//!
//! Everything runs on 127.0.0.1, bounded in time, and is killed on drop. The binaries come
//! from `cargo build --release --workspace` and are looked up next to the test executable
//! (`target/release/deps/..` -> `target/release/`).

#![allow(dead_code)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long the app may take to print "listening on".
const START_TIMEOUT: Duration = Duration::from_secs(20);
/// How long the profiler may take to attach (loading and verifying the BPF programs).
const ATTACH_TIMEOUT: Duration = Duration::from_secs(90);

/// `target/release/<name>`, found next to the test executable; panics with how to build it.
pub fn release_bin(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    // target/release/deps/harness-<hash> -> target/release
    let dir = exe.parent().and_then(Path::parent).expect("test executable in target/<profile>/deps/");
    let bin = dir.join(name);
    assert!(
        bin.is_file(),
        "{} is missing: build it first with `cargo build --release --workspace` (the tests start the release binaries)",
        bin.display()
    );
    bin
}

/// Returns true (after printing one `skipped: needs ...` line) when the test must be skipped:
/// the profiler loads eBPF programs (root) and the load comes from wrk. Under
/// `PROFILER_TEST_STRICT=1` (scripts/test) a missing need fails the test instead.
pub fn skip_unless_root() -> bool {
    test_support::skip_unless(&[test_support::Need::Root, test_support::Need::Wrk])
}

/// CPUs this process may run on.
pub fn cpu_count() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// Pins the command's process to one CPU (before exec), when the machine has at least 2.
fn pin(cmd: &mut Command, cpu: usize) {
    if cpu_count() < 2 {
        return;
    }
    // SAFETY: only async-signal-safe libc calls between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut set);
            if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Sends SIGTERM, waits up to `grace`, then SIGKILL; reaps the child.
fn stop(child: &mut Child, grace: Duration) {
    if let Ok(Some(_)) = child.try_wait() {
        return;
    }
    // SAFETY: kill on our own child's pid.
    unsafe {
        libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
    }
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// A running `field-cases` app (release build), pinned to CPU 0 when 2 CPUs exist.
/// Killed on drop.
pub struct App {
    child: Child,
    /// The address it listens on (a free port picked by the kernel: unique per test).
    pub addr: SocketAddr,
    /// Its pid.
    pub pid: u32,
    /// Held while the app lives: one app at a time in a test binary (cargo runs its tests on
    /// parallel threads). Each pins its app and wrk to their CPUs, and its shares are compared
    /// with figures perf measured with nothing else loading the machine.
    _alone: std::sync::MutexGuard<'static, ()>,
}

static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Runs `f` while no app of this test binary runs (the lock an [`App`] holds while it lives):
/// for CPU-heavy set-up, such as a cargo build, that would slow another test's measured app.
pub fn alone<T>(f: impl FnOnce() -> T) -> T {
    let _alone = ONE_AT_A_TIME.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    f()
}

impl App {
    /// Starts the app with 2 workers on a free loopback port; stdout goes to /dev/null.
    pub fn start() -> App {
        App::start_with(2)
    }

    /// Starts the app with `workers` tokio workers.
    pub fn start_with(workers: usize) -> App {
        App::start_full(workers, None)
    }

    /// Starts the app with 2 workers and the database routes on `database_url`.
    pub fn start_with_db(database_url: &str) -> App {
        App::start_full(2, Some(database_url))
    }

    /// Starts `bin` (a build of field-cases, e.g. one without frame pointers) with 2 workers.
    pub fn start_binary(bin: &Path) -> App {
        App::start_full_from(bin, 2, None)
    }

    /// Starts `bin` (a build of field-cases, e.g. one without frame pointers) with 2 workers
    /// and the database routes on `database_url`.
    pub fn start_binary_with_db(bin: &Path, database_url: &str) -> App {
        App::start_full_from(bin, 2, Some(database_url))
    }

    fn start_full(workers: usize, database_url: Option<&str>) -> App {
        App::start_full_from(&release_bin("field-cases"), workers, database_url)
    }

    fn start_full_from(bin: &Path, workers: usize, database_url: Option<&str>) -> App {
        let alone = ONE_AT_A_TIME.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let mut cmd = Command::new(bin);
        if let Some(url) = database_url {
            cmd.env("DATABASE_URL", url);
        }
        cmd.args(["--workers", &workers.to_string(), "--listen", "127.0.0.1:0"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        pin(&mut cmd, 0);
        let mut child = cmd.spawn().unwrap_or_else(|e| panic!("cannot start {}: {e}", bin.display()));
        let stderr = child.stderr.take().expect("piped stderr");
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut sent = false;
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if !sent {
                    if let Some(addr) = line.strip_prefix("listening on ") {
                        let _ = tx.send(Ok(addr.trim().to_string()));
                        sent = true;
                        continue;
                    }
                    let _ = tx.send(Err(line));
                } else {
                    eprintln!("field-cases: {line}");
                }
            }
        });
        let deadline = Instant::now() + START_TIMEOUT;
        let mut other = Vec::new();
        let addr = loop {
            match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(Ok(addr)) => break addr.parse::<SocketAddr>().expect("listening address"),
                Ok(Err(line)) => other.push(line),
                Err(_) => {
                    stop(&mut child, Duration::from_secs(1));
                    panic!("field-cases did not print \"listening on\" within {START_TIMEOUT:?}; stderr: {other:?}");
                }
            }
        };
        let pid = child.id();
        App { child, addr, pid, _alone: alone }
    }

    /// `http://ADDR/route`.
    pub fn url(&self, route: &str) -> String {
        format!("http://{}{route}", self.addr)
    }

    /// GET `route` over one HTTP/1.1 connection; returns (status, body).
    pub fn get(&self, route: &str) -> (u16, Vec<u8>) {
        http_get(self.addr, route)
    }

    /// The app's `/stats`: requests served per route since start.
    pub fn stats(&self) -> serde_json::Value {
        let (status, body) = self.get("/stats");
        assert_eq!(status, 200, "/stats answered {status}");
        serde_json::from_slice(&body).expect("/stats is JSON")
    }

    /// Requests served by `route` since start (from `/stats`).
    pub fn served(&self, route: &str) -> u64 {
        self.stats()[route].as_u64().unwrap_or_else(|| panic!("/stats has no {route}"))
    }

    /// Requests served by every route since start (from `/stats`).
    pub fn served_total(&self) -> u64 {
        self.stats().as_object().expect("object").values().filter_map(|v| v.as_u64()).sum()
    }
}

impl Drop for App {
    fn drop(&mut self) {
        stop(&mut self.child, Duration::from_secs(3));
    }
}

/// A minimal HTTP/1.1 GET with `Connection: close` (10 s timeouts).
pub fn http_get(addr: SocketAddr, route: &str) -> (u16, Vec<u8>) {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(10)).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
    write!(s, "GET {route} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").expect("send");
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).expect("read response");
    let split = raw.windows(4).position(|w| w == b"\r\n\r\n").expect("end of headers");
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let status = head.split_whitespace().nth(1).and_then(|c| c.parse().ok()).expect("status code");
    let mut body = raw[split + 4..].to_vec();
    if head.to_ascii_lowercase().contains("transfer-encoding: chunked") {
        body = dechunk(&body);
    }
    (status, body)
}

fn dechunk(mut b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(eol) = b.windows(2).position(|w| w == b"\r\n") {
        let n = usize::from_str_radix(String::from_utf8_lossy(&b[..eol]).trim(), 16).unwrap_or(0);
        if n == 0 {
            break;
        }
        out.extend_from_slice(&b[eol + 2..eol + 2 + n]);
        b = &b[eol + 2 + n + 2..];
    }
    out
}

/// What wrk reported.
#[derive(Debug, Clone, Default)]
pub struct WrkResult {
    /// Requests completed ("N requests in").
    pub requests: u64,
    /// "Requests/sec".
    pub req_per_s: f64,
    /// Mean latency (Thread Stats, Latency Avg), ms.
    pub mean_latency_ms: f64,
    /// Non-2xx/3xx responses.
    pub non_2xx: u64,
    /// Socket errors (connect + read + write + timeout).
    pub socket_errors: u64,
    /// wrk's whole output.
    pub output: String,
}

/// Runs `wrk -t1 -cCONNS -dSECSs URL` pinned to CPU 1 (when 2 CPUs exist), bounded: killed
/// if it runs 15 s past its duration.
pub fn wrk(url: &str, secs: u64, conns: u32) -> WrkResult {
    assert!(url.starts_with("http://127.0.0.1:"), "load goes to loopback only: {url}");
    let mut cmd = Command::new("wrk");
    cmd.args(["-t1", &format!("-c{conns}"), &format!("-d{secs}s"), "--timeout", "5s", url])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    pin(&mut cmd, 1);
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("cannot start wrk ({e}): install it with `apt-get install wrk`"));
    let deadline = Instant::now() + Duration::from_secs(secs + 15);
    loop {
        match child.try_wait().expect("wait wrk") {
            Some(_) => break,
            None if Instant::now() > deadline => {
                stop(&mut child, Duration::from_secs(1));
                panic!("wrk did not finish within {secs} s + 15 s");
            }
            None => std::thread::sleep(Duration::from_millis(50)),
        }
    }
    let mut output = String::new();
    child.stdout.take().expect("stdout").read_to_string(&mut output).expect("wrk output");
    let mut err = String::new();
    let _ = child.stderr.take().expect("stderr").read_to_string(&mut err);
    let r = parse_wrk(&output);
    assert!(r.requests > 0, "wrk completed no request; stdout:\n{output}\nstderr:\n{err}");
    r
}

/// Parses wrk's default output.
pub fn parse_wrk(output: &str) -> WrkResult {
    let mut r = WrkResult { output: output.to_string(), ..Default::default() };
    for line in output.lines().map(str::trim) {
        let words: Vec<&str> = line.split_whitespace().collect();
        if line.contains(" requests in ") {
            r.requests = words[0].parse().unwrap_or(0);
        } else if let Some(v) = line.strip_prefix("Requests/sec:") {
            r.req_per_s = v.trim().parse().unwrap_or(0.0);
        } else if words.first() == Some(&"Latency") && words.len() > 1 {
            r.mean_latency_ms = duration_ms(words[1]);
        } else if let Some(v) = line.strip_prefix("Non-2xx or 3xx responses:") {
            r.non_2xx = v.trim().parse().unwrap_or(0);
        } else if let Some(v) = line.strip_prefix("Socket errors:") {
            r.socket_errors = v.split(',').filter_map(|p| p.split_whitespace().last()?.parse::<u64>().ok()).sum();
        }
    }
    r
}

/// "150.23us" / "2.01ms" / "1.20s" / "3.00m" -> ms.
fn duration_ms(s: &str) -> f64 {
    let (num, unit) = s.split_at(s.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(s.len()));
    let v: f64 = num.parse().unwrap_or(f64::NAN);
    match unit {
        "us" => v / 1e3,
        "ms" => v,
        "s" => v * 1e3,
        "m" => v * 60e3,
        _ => f64::NAN,
    }
}

/// One profiled load: the profiler's ranking and what the instruments outside it saw.
#[derive(Debug)]
pub struct Profiled {
    /// `DIR/ranking.json`.
    pub ranking: serde_json::Value,
    /// wrk's figures for the load run while the profiler was attached.
    pub wrk: WrkResult,
    /// Requests the app served on every route during the wrk run (`/stats` after - before).
    pub served: u64,
    /// The profiler's stdout (its summary).
    pub profiler_stdout: String,
    /// The output directory (removed on drop).
    pub out: tempfile::TempDir,
}

impl Profiled {
    /// The run's `profile.json`, parsed.
    pub fn profile_json(&self) -> serde_json::Value {
        let path = self.out.path().join("out/profile.json");
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()))
    }
}

/// Whether a process has opened perf events or BPF links (the profiler is attaching).
fn has_bpf_attachments(pid: u32) -> bool {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) else { return false };
    dir.filter_map(Result::ok).filter_map(|e| std::fs::read_link(e.path()).ok()).any(|l| {
        let l = l.to_string_lossy();
        l.contains("perf_event") || l.contains("bpf_link")
    })
}

/// Runs `profiler attach --pid APP --duration SECS+4 --out DIR` (plus `extra` arguments),
/// waits until it has attached, runs wrk on `route` for `secs` seconds (so the whole load
/// falls inside the profile), waits for the profiler to write its reports and returns
/// `DIR/ranking.json`, wrk's figures and the app's own request count over the load.
pub fn profile(app: &App, route: &str, secs: u64, extra: &[&str]) -> Profiled {
    profile_routes(app, &[route], secs, extra).0
}

/// [`profile`] with one wrk per route, all at once (4 connections each when there are
/// several); [`Profiled::wrk`] is the first route's, the second value every route's.
pub fn profile_routes(app: &App, routes: &[&str], secs: u64, extra: &[&str]) -> (Profiled, Vec<WrkResult>) {
    let (p, all, ()) = profile_routes_during(app, routes, secs, extra, || ());
    (p, all)
}

/// [`profile`] with `perf record` on the app for `perf_secs` (< `secs`) while the load runs,
/// from its first half second, at the profile's sampling frequency (`--frequency` in `extra`,
/// else the agent's default). The outside instrument sees the same requests as the profile (the
/// file-read route's kernel share moved from 0.100 to 0.128 within one process, 30 s apart, so a
/// reading taken before or after the profile can miss what the profile saw) and samples as
/// often: at 999 Hz perf and the agent alike read that share as 0.108-0.112, at 99 Hz both as
/// 0.084-0.091, one after the other on one process under one load.
pub fn profile_with_perf(app: &App, route: &str, secs: u64, extra: &[&str], perf_secs: u64) -> (Profiled, PerfStacks) {
    assert!(perf_secs < secs, "perf must record inside the load");
    let hz = extra.iter().position(|a| *a == "--frequency").and_then(|i| extra.get(i + 1)).map_or(Some(AGENT_FREQUENCY_HZ), |f| f.parse().ok()).expect("--frequency N");
    let (p, _, perf) = profile_routes_during(app, &[route], secs, extra, || {
        std::thread::sleep(Duration::from_millis(500));
        perf_record(app, perf_secs, hz)
    });
    (p, perf)
}

/// `profiler attach --frequency`'s default, Hz.
const AGENT_FREQUENCY_HZ: u64 = 99;

/// [`profile_routes`], running `during` on this thread once the load has started (its result
/// the third value).
pub fn profile_routes_during<T>(app: &App, routes: &[&str], secs: u64, extra: &[&str], during: impl FnOnce() -> T) -> (Profiled, Vec<WrkResult>, T) {
    let profiler = release_bin("profiler");
    let out = tempfile::Builder::new().prefix("field-cases-profile-").tempdir().expect("tempdir");
    let dir = out.path().join("out");
    let duration = secs + 4;
    let mut cmd = Command::new(&profiler);
    cmd.args(["attach", "--pid", &app.pid.to_string(), "--duration", &duration.to_string(), "--out"])
        .arg(&dir)
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("cannot start {}: {e}", profiler.display()));
    let pid = child.id();
    // Drain both pipes in threads so the profiler never blocks on a full pipe.
    let mut so = child.stdout.take().expect("stdout");
    let mut se = child.stderr.take().expect("stderr");
    let out_thread = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = so.read_to_string(&mut s);
        s
    });
    let err_thread = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = se.read_to_string(&mut s);
        s
    });
    struct Guard(Option<Child>);
    impl Drop for Guard {
        fn drop(&mut self) {
            if let Some(c) = self.0.as_mut() {
                stop(c, Duration::from_secs(20));
            }
        }
    }
    let mut guard = Guard(Some(child));
    let deadline = Instant::now() + ATTACH_TIMEOUT;
    loop {
        if let Some(status) = guard.0.as_mut().expect("child").try_wait().expect("wait profiler") {
            guard.0 = None;
            panic!("the profiler exited ({status}) before attaching; stderr:\n{}", err_thread.join().unwrap_or_default());
        }
        if has_bpf_attachments(pid) {
            break;
        }
        assert!(Instant::now() < deadline, "the profiler did not attach within {ATTACH_TIMEOUT:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    // The first perf event or link is open: give the rest of the programs a moment to attach.
    std::thread::sleep(Duration::from_millis(1000));
    let before = app.served_total();
    let conns = if routes.len() > 1 { 4 } else { 8 };
    let runs: Vec<std::thread::JoinHandle<WrkResult>> = routes
        .iter()
        .map(|r| {
            let url = app.url(r);
            std::thread::spawn(move || wrk(&url, secs, conns))
        })
        .collect();
    let during = during();
    let all: Vec<WrkResult> = runs.into_iter().map(|t| t.join().expect("wrk thread")).collect();
    let wrk = all[0].clone();
    let after = app.served_total();
    // The profiler ends on its own after --duration, then symbolizes and writes its reports.
    let mut child = guard.0.take().expect("child");
    let deadline = Instant::now() + Duration::from_secs(duration + 120);
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait profiler") {
            break s;
        }
        if Instant::now() > deadline {
            stop(&mut child, Duration::from_secs(5));
            panic!("the profiler did not finish within {duration} s + 120 s");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let profiler_stdout = out_thread.join().unwrap_or_default();
    let profiler_stderr = err_thread.join().unwrap_or_default();
    assert!(status.success(), "profiler attach failed ({status}); stderr:\n{profiler_stderr}\nstdout:\n{profiler_stdout}");
    let path = dir.join("ranking.json");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}; profiler stderr:\n{profiler_stderr}", path.display()));
    let ranking = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not JSON: {e}", path.display()));
    (Profiled { ranking, wrk, served: after - before, profiler_stdout, out }, all, during)
}

/// What `perf` saw of the app under load: the call stack of each of the app's on-CPU samples.
#[derive(Debug, Default)]
pub struct PerfStacks {
    /// One entry per sample of the app's process: its frames' function names, leaf first
    /// (`perf script --no-inline`: inlined calls are not frames of their own).
    pub stacks: Vec<Vec<String>>,
}

impl PerfStacks {
    /// Share (0..1) of the samples with a frame whose function name contains one of `names`
    /// (perf report's children share of a function, counted once per sample, so nested or
    /// recursive frames are never added twice); 0 without samples.
    pub fn share_under(&self, names: &[&str]) -> f64 {
        self.share(|stack| stack.iter().any(|f| names.iter().any(|n| f.contains(n))))
    }

    /// Share (0..1) of the samples whose leaf frame is the function named exactly `name`
    /// (perf report's self share).
    pub fn leaf_share(&self, name: &str) -> f64 {
        self.share(|stack| stack.first().is_some_and(|f| f == name))
    }

    fn share(&self, pick: impl Fn(&[String]) -> bool) -> f64 {
        if self.stacks.is_empty() {
            return 0.0;
        }
        self.stacks.iter().filter(|s| pick(s)).count() as f64 / self.stacks.len() as f64
    }
}

/// Records the app's CPU with `perf record -F HZ -e cpu-clock --call-graph dwarf,16384` for
/// `secs` s (on CPU 0, where the app is pinned, when there are 2 CPUs; else `-p PID`) and reads
/// the app's stacks back with `perf script --no-inline -F pid,ip,sym`. The outside instrument of
/// a share that follows the machine (glibc's name service reads files whose size and count
/// differ from machine to machine), taken on the machine that runs the test, under the caller's
/// load. Shares are taken from the stacks, not from `perf report --sort symbol`: that splits
/// one function into several rows when another process of the same binary runs (a test beside
/// this one), and its default percentages divide by every sample of the CPU.
fn perf_record(app: &App, secs: u64, hz: u64) -> PerfStacks {
    let dir = tempfile::tempdir().expect("tempdir");
    let data = dir.path().join("perf.data");
    let mut rec = Command::new("perf");
    rec.args(["record", "-q", "-o"]).arg(&data).args(["-F", &hz.to_string(), "-e", "cpu-clock", "--call-graph", "dwarf,16384"]);
    if cpu_count() >= 2 {
        rec.args(["-a", "-C", "0"]);
    } else {
        rec.args(["-p", &app.pid.to_string()]);
    }
    let rec = rec.args(["--", "sleep", &secs.to_string()]).stdout(Stdio::null()).output().expect("perf record (scripts/setup installs linux-perf)");
    assert!(rec.status.success(), "perf record: {}", String::from_utf8_lossy(&rec.stderr));
    let script = Command::new("perf").args(["script", "-i"]).arg(&data).args(["--no-inline", "-F", "pid,ip,sym"]).output().expect("perf script");
    assert!(script.status.success(), "perf script: {}", String::from_utf8_lossy(&script.stderr));
    let stacks = parse_perf_script(&String::from_utf8_lossy(&script.stdout), app.pid);
    assert!(stacks.stacks.len() as u64 >= hz * secs / 4, "perf recorded {} samples of the app in {secs} s at {hz} Hz", stacks.stacks.len());
    stacks
}

/// Parses `perf script -F pid,ip,sym` into the stacks of process `pid`: a sample is a line with
/// its pid, then one line per frame (`\t  ffffffff8123 vfs_read`: address, function name, which
/// perf gives as `[unknown]` when it has none), then a blank line.
pub fn parse_perf_script(text: &str, pid: u32) -> PerfStacks {
    let mut out = PerfStacks::default();
    for sample in text.split("\n\n") {
        let mut lines = sample.lines().filter(|l| !l.trim().is_empty());
        let Some(head) = lines.next() else { continue };
        if head.trim().parse::<u32>() != Ok(pid) {
            continue;
        }
        let frames = lines.filter_map(|l| l.trim().split_once(' ').map(|(_, sym)| sym.trim().to_string())).collect();
        out.stacks.push(frames);
    }
    out
}
