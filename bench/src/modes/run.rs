//! `profiler bench`: the bundled CRM benchmark end to end, with the agent attached.
//!
//! Builds target-app (unless `--skip-build`) and its image, starts a throwaway PostgreSQL
//! and the app, runs the conformance gate, then per test a warm-up, `--runs` measured runs and
//! one profiled run (see [`crate::run`]). Writes `results.json`, one folder per test with the
//! attach outputs, and `index.html` into `--out`, and prints the summary table. Exit status: 0
//! when every run was clean, 1 when any request failed, 2 on error.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use crate::load::Test;
use crate::results::BenchResults;
use crate::run::{AppTarget, BenchOptions, CountSession, ProfileHook, ProfileSession, Progress};
use super::args::{AppArgs, LoadArgs, OverheadArgs, RunArgs, ServeArgs};

use profiler::collect;
use profiler::render;
use profiler::symbolize;
use profiler::target::Target;

/// Progress on stderr: one line per step, with its duration when it ends.
#[derive(Default)]
pub(crate) struct StderrProgress {
    started: Mutex<Option<Instant>>,
}

impl Progress for StderrProgress {
    fn step(&self, message: &str, expected: Duration) {
        *self.started.lock().unwrap_or_else(|e| e.into_inner()) = Some(Instant::now());
        if expected.is_zero() {
            eprintln!("bench: {message} ...");
        } else {
            eprintln!("bench: {message} (about {} s) ...", expected.as_secs().max(1));
        }
    }

    fn done(&self, message: &str) {
        let took = self.started.lock().unwrap_or_else(|e| e.into_inner()).take().map(|t| t.elapsed());
        match took {
            Some(t) => eprintln!("bench:   {message} [{:.1} s]", t.as_secs_f64()),
            None => eprintln!("bench:   {message}"),
        }
    }
}

/// The agent attached for one profiled run: collection in a thread, stopped by `finish`.
struct AgentSession {
    stop: Arc<AtomicBool>,
    /// Raised when the session is dropped without `finish` (the bench was interrupted during
    /// the profiled run): the profile is then written as partial.
    cancelled: Arc<AtomicBool>,
    /// `None` once joined by `finish`.
    handle: Option<JoinHandle<Result<(u64, String), String>>>,
    /// Where the profile goes, for the line printed when it is cut short.
    out: PathBuf,
    /// Holds the syscall windows closed through the app's restart and warm-up.
    syscalls_gate: collect::Gate,
}

impl ProfileSession for AgentSession {
    fn finish(mut self: Box<Self>) -> Result<(u64, String), String> {
        self.stop.store(true, Ordering::Relaxed);
        let handle = self.handle.take().ok_or("the profiling session was already finished")?;
        handle.join().map_err(|_| "the profiling thread panicked".to_string())?
    }

    fn measured_part_begins(&self) {
        self.syscalls_gate.open();
    }
}

impl Drop for AgentSession {
    /// Dropped without `finish`: the bench's run was cancelled (Ctrl-C) while the agent was
    /// attached. The collection is stopped and what it collected is drained and written,
    /// marked partial, before the bench writes its results: nothing collected is lost.
    fn drop(&mut self) {
        let Some(handle) = self.handle.take() else { return };
        self.cancelled.store(true, Ordering::Relaxed);
        self.stop.store(true, Ordering::Relaxed);
        match handle.join() {
            Ok(Ok((samples, _))) => eprintln!("bench: the profiled run was interrupted; its partial profile ({samples} samples) is in {}", self.out.display()),
            Ok(Err(e)) => eprintln!("bench: the profiled run was interrupted; writing its profile failed: {e}"),
            Err(_) => eprintln!("bench: the profiled run was interrupted; the profiling thread panicked"),
        }
    }
}

/// Attaches the agent (on-CPU, off-CPU, syscalls) to the app for each profiled run.
struct AgentHook {
    frequency_hz: u64,
    rules: Arc<profiler::attribute::RuleSet>,
    /// Which tracers run (`bench overhead` measures each mode; the profiled run has everything).
    mode: super::overhead::AgentMode,
    /// Also count library calls and lock acquisitions with uprobes (`counters.json`), in a
    /// counting run after the profiled run ([`ProfileHook::start_counting`]): on in the
    /// bench, off in `bench overhead`, whose modes are `profiler attach`'s. Each count is a
    /// breakpoint trap: on `/json` the 4 per request cost 12% of the app's CPU (2.06 of
    /// 16.6 µs), more than every BPF program, when they counted in the profiled run.
    counters: bool,
    /// Time every BPF program with the kernel's run statistics
    /// ([`collect::Options::bpf_run_stats`]) for `footprint.json` and the agent cost line: on
    /// for the profiled run, off in `bench overhead`, as in `profiler attach`.
    bpf_stats: bool,
}

impl ProfileHook for AgentHook {
    fn start(&self, target: &AppTarget, test: Test, out_dir: &Path, expected: Duration) -> Result<Box<dyn ProfileSession>, String> {
        // The cgroup first: it holds the app across the restart the run makes under the agent.
        let t = match (&target.cgroup, &target.container) {
            (Some(cg), _) => Target::Cgroup(cg.clone()),
            (None, Some(name)) => Target::Container(name.clone()),
            (None, None) => Target::Pid(target.pid),
        };
        // Syscalls are counted in `profiler attach`'s windows, from the end of the warm-up
        // (`measured_part_begins`): the profile covers the app's restart, whose one-off bursts
        // (the dynamic loader's `newfstatat`s) would fall in a window or not and be scaled x4
        // or counted 0 (in diff_bench, with windows from the start: `newfstatat` 0 -> 0.081
        // calls/req between two benches of the same app).
        let syscalls_gate = collect::Gate::closed();
        let options = self.mode.options(collect::Options {
            frequency_hz: self.frequency_hz,
            db_port: target.db_port,
            syscalls_duty_pct: collect::DEFAULT_SYSCALL_DUTY_PCT,
            syscalls_gate: Some(syscalls_gate.clone()),
            bpf_run_stats: self.bpf_stats,
            ..Default::default()
        });
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let cancelled = Arc::new(AtomicBool::new(false));
        let was_cancelled = cancelled.clone();
        let out = out_dir.to_path_buf();
        let rules = self.rules.clone();
        let (attached_tx, attached_rx) = mpsc::channel::<()>();
        // Target::resolve talks to Docker on a runtime of its own: it must run outside ours.
        let handle = std::thread::spawn(move || -> Result<(u64, String), String> {
            let mut resolved = t.resolve().map_err(|e| format!("{e:#}"))?;
            let mut signalled = false;
            // The collection ends when `finish` raises the flag (the run is over); the long
            // deadline is only a guard.
            let guard = expected * 4 + Duration::from_secs(60);
            let (mut raw, reason) = collect::run(&mut resolved, &options, guard, &flag, |_| {
                if !signalled {
                    signalled = true;
                    let _ = attached_tx.send(());
                }
            })
            .map_err(|e| format!("{e:#}"))?;
            if reason == collect::StopReason::Interrupted
                && raw.meta.partial.as_deref() == Some(collect::INTERRUPTED)
                && !was_cancelled.load(Ordering::Relaxed)
            {
                // Stopped by us at the end of the load run: the profile is complete.
                raw.meta.partial = None;
            }
            let reports_started = Instant::now();
            let profile = symbolize::symbolize(raw);
            // The symbolizer's caches were dropped with it: give their heap back, so that
            // this run's peak and the next run do not start from them (profiler::memory).
            profiler::memory::release_free();
            render::write_all_with(&profile, &out, &render::Options { rules: Some(&*rules), ..Default::default() }).map_err(|e| format!("{e:#}"))?;
            if let Some(f) = super::overhead::RunFootprint::of(&profile, reports_started.elapsed()) {
                f.write(&out).map_err(|e| format!("writing footprint.json: {e}"))?;
            }
            // ranking.md/json with the wire's request count (if any) and an unknown bound;
            // `render::ranking::write_bench_rankings` rewrites them with wrk's count and the bound.
            let opts = profiler::attribute::RankingOptions { rules: &rules, wire: None, base_req_per_s: None, label: test.name(), closed_loop: None };
            profiler::render::ranking::write_ranking(&profile, None, profiler::attribute::Bound::Unknown, &opts, &out)
                .map_err(|e| format!("writing ranking.md/json: {e}"))?;
            let samples = profile.on_cpu.iter().map(|c| c.count).sum();
            let summary = render::summary(&profile);
            drop(profile);
            profiler::memory::release_free();
            Ok((samples, summary))
        });
        // Wait until the programs are attached (first tick) or the thread failed.
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match attached_rx.recv_timeout(Duration::from_millis(20)) {
                Ok(()) => break,
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    return match handle.join() {
                        Ok(Err(e)) => Err(e),
                        Ok(Ok(_)) => Err("the collection ended before the run started".into()),
                        Err(_) => Err("the profiling thread panicked".into()),
                    };
                }
                Err(mpsc::RecvTimeoutError::Timeout) if Instant::now() > deadline => {
                    stop.store(true, Ordering::Relaxed);
                    return Err(format!("{test}: the agent did not attach within 30 s"));
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
            }
        }
        Ok(Box::new(AgentSession { stop, cancelled, handle: Some(handle), out: out_dir.to_path_buf(), syscalls_gate }))
    }

    /// Uprobe counters of tokio's task spawns and the app's lock fast paths on the app's
    /// executable, filtered on its cgroup ([`profiler::attribute::counters`]).
    fn start_counting(&self, target: &AppTarget, out_dir: &Path) -> Result<Option<Box<dyn CountSession>>, String> {
        if !self.counters {
            return Ok(None);
        }
        let pid = target.pid;
        let cgroup = match (&target.cgroup, &target.container) {
            (Some(cg), _) => cg.clone(),
            // Target::resolve talks to Docker on a runtime of its own: outside ours.
            (None, Some(name)) => {
                let t = Target::Container(name.clone());
                std::thread::spawn(move || t.resolve().map_err(|e| format!("{e:#}")))
                    .join()
                    .map_err(|_| "resolving the container panicked".to_string())??
                    .cgroup_dir
                    .ok_or("the app's container has no cgroup v2 directory")?
            }
            (None, None) => return Err("the app runs outside a cgroup v2 directory: uprobe counters filter on one".into()),
        };
        let exe = PathBuf::from(format!("/proc/{pid}/exe"));
        // The app's own crate, for the lock counters: Cargo names a binary crate like its
        // executable.
        let crates: Vec<String> = std::fs::read_link(&exe).ok().and_then(|p| profiler::attribute::locks::crate_of_executable(&p)).into_iter().collect();
        let specs = profiler::attribute::counters::default_specs(&exe, &crates);
        let counters = profiler::attribute::counters::Counters::open_specs(&exe, &cgroup, &specs)?;
        Ok(Some(Box::new(CountingSession { counters, out: out_dir.to_path_buf() })))
    }
}

/// The uprobe counters of one counting run.
struct CountingSession {
    counters: profiler::attribute::counters::Counters,
    /// The test's output folder: `counters.json` goes there.
    out: PathBuf,
}

impl CountSession for CountingSession {
    fn finish(self: Box<Self>, requests: u64) -> Result<String, String> {
        let mut counts = self.counters.read();
        drop(self.counters);
        counts.requests = Some(requests);
        counts.write(&self.out).map_err(|e| format!("writing counters.json: {e}"))?;
        let traps = match counts.trap_ns() {
            Some(ns) if requests > 0 => format!(", their traps ~{:.2} µs per request", ns / 1e3 / requests as f64),
            _ => String::new(),
        };
        Ok(format!("{} calls counted for {requests} requests{traps}", counts.hits()))
    }
}

/// CPU lists for app and load on this machine: halves of the online CPUs (`0` and `1` on 2 CPUs).
fn default_cpus() -> (String, String) {
    let n = std::thread::available_parallelism().map_or(1, |n| n.get());
    if n <= 1 {
        return ("0".into(), "0".into());
    }
    let half = n / 2;
    let app = if half == 1 { "0".to_string() } else { format!("0-{}", half - 1) };
    let load = if n - half == 1 { format!("{half}") } else { format!("{half}-{}", n - 1) };
    (app, load)
}


fn workspace_root() -> Option<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent()?.to_path_buf();
    root.join("Cargo.toml").is_file().then_some(root)
}

/// Checks a cpuset list (`0`, `1-3`, `0,2-3`, as `taskset -c` and Docker take them) against
/// `allowed` (not checked when empty), so that a bad list is refused before PostgreSQL and
/// the app start.
///
/// # Errors
/// One line naming the flag: not a list, or a CPU this machine does not let us use.
fn check_cpu_list(flag: &str, list: &str, allowed: &[u32]) -> Result<()> {
    let cpus = profiler::sys::cpus::parse_list(list).ok_or_else(|| anyhow::anyhow!("{flag} {list}: not a CPU list (like 0, 1-3 or 0,2-3)"))?;
    if let Some(cpu) = cpus.iter().find(|c| !allowed.is_empty() && !allowed.contains(c)) {
        let have: Vec<String> = allowed.iter().map(u32::to_string).collect();
        bail!("{flag} {list}: CPU {cpu} is not available here (CPUs {})", have.join(","));
    }
    Ok(())
}

/// The run's settings from the command line (`--smoke`: 1 run of 5 s after 2 s of warm-up);
/// `mode` names the default output folder, `reports/<UTC date-time>-<mode>/`.
///
/// # Errors
/// A CPU list that is malformed or names a CPU this process may not use; `--runs` or
/// `--duration` of 0.
pub(crate) fn options(app: &AppArgs, load: &LoadArgs, costs: &str, mode: &str) -> Result<BenchOptions> {
    let (app_default, load_default) = default_cpus();
    let app_cpus = app.app_cpus.clone().unwrap_or(app_default);
    let load_cpus = app.load_cpus.clone().unwrap_or(load_default);
    let pg_cpus = Some(app.pg_cpus.clone().unwrap_or_else(|| load_cpus.clone()));
    let allowed = profiler::sys::cpus::allowed();
    for (flag, list) in [("--app-cpus", &app_cpus), ("--load-cpus", &load_cpus), ("--pg-cpus", pg_cpus.as_ref().unwrap_or(&load_cpus))] {
        check_cpu_list(flag, list, &allowed)?;
    }
    let threads = load.threads.unwrap_or_else(|| profiler::sys::cpus::list_len(&load_cpus));
    let (runs, duration, warmup) = if load.smoke { (1, 5, 2) } else { (load.runs, load.duration, load.warmup) };
    if runs == 0 || duration == 0 {
        bail!("--runs and --duration must be at least 1");
    }
    let app_binary = match &app.app_binary {
        Some(p) => p.clone(),
        None => std::env::current_exe().context("locating the profiler binary")?.with_file_name("target-app"),
    };
    let out_dir = match &load.out {
        Some(p) => p.clone(),
        None => PathBuf::from("reports").join(format!("{}-{mode}", chrono::Utc::now().format("%Y%m%dT%H%M%SZ"))),
    };
    Ok(BenchOptions {
        out_dir,
        tests: if load.only.is_empty() { Test::ALL.to_vec() } else { load.only.clone() },
        runs,
        duration: Duration::from_secs(duration),
        warmup: Duration::from_secs(warmup),
        connections: load.connections,
        threads,
        app_cpus,
        load_cpus,
        pg_cpus,
        costs: costs.to_string(),
        pool_size: app.pool_size,
        name: app.name.clone(),
        docker: !app.no_docker,
        database_url: app.database_url.clone(),
        app_binary,
        rebuild_image: !app.skip_build,
        drift: false,
        jwt_secret: app.jwt_secret.clone(),
        frequency_hz: load.frequency,
        smoke: load.smoke,
        request_timeout: Duration::from_secs(10),
    })
}

fn build_app(progress: &dyn Progress) -> Result<()> {
    let Some(root) = workspace_root() else {
        // An installed profiler without its sources: use --app-binary.
        return Ok(());
    };
    // `--workspace` resolves the dependencies' features as the workspace build does
    // (scripts/bench), so after it this is a no-op; `-p target-app` alone would resolve them
    // for target-app only and rebuild its dependency tree (2m10s on a fresh clone).
    progress.step("cargo build --release --workspace --bin target-app", Duration::ZERO);
    let status = std::process::Command::new("cargo")
        .args(["build", "--release", "--workspace", "--bin", "target-app"])
        .current_dir(&root)
        .status()
        .context("running cargo (is the Rust toolchain on PATH?)")?;
    if !status.success() {
        bail!("cargo build --release --workspace --bin target-app failed ({status})");
    }
    progress.done("target-app built");
    Ok(())
}

/// target-app's own layers (`target-app/rules.toml`), when the workspace's sources are beside
/// this binary: what a bench run ranks with, besides the built-in catalog.
pub fn target_app_rules_file() -> Option<PathBuf> {
    workspace_root().map(|root| root.join("target-app").join("rules.toml")).filter(|p| p.is_file())
}

/// The rules of a bench run: the built-in catalog, target-app's own layers
/// ([`target_app_rules_file`]) and `--rules` files, in that order.
fn bench_rules(extra: &[PathBuf]) -> Result<profiler::attribute::RuleSet> {
    let mut files: Vec<PathBuf> = target_app_rules_file().into_iter().collect();
    files.extend(extra.iter().cloned());
    profiler::attribute::RuleSet::builtin_with_files(&files).map_err(|e| anyhow::anyhow!("{e}"))
}

fn write_outputs(results: &BenchResults, out: &Path, rules: &profiler::attribute::RuleSet) -> Result<()> {
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let json = serde_json::to_string_pretty(results).context("serializing results.json")?;
    profiler::output::write_bytes_replacing(out.join("results.json"), json + "\n").with_context(|| format!("writing {}", out.join("results.json").display()))?;
    // Rankings per test (with wrk's request count and the measured bound) and the combined
    // ranking.md; a failure here leaves the measurements intact.
    if let Err(e) = profiler::render::ranking::write_bench_rankings(results, out, rules) {
        eprintln!("bench: could not write the rankings: {e}");
    }
    let html = render::html::bench_page(results, out);
    profiler::output::write_bytes_replacing(out.join("index.html"), html).with_context(|| format!("writing {}", out.join("index.html").display()))?;
    Ok(())
}

/// Resolves on Ctrl-C (SIGINT) or SIGTERM, so that `kill` cleans up as Ctrl-C does.
pub(crate) async fn stop_signal() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term => {}
    }
}

/// Builds target-app unless `--skip-build` or `--app-binary` says otherwise.
fn build_unless_skipped(app: &AppArgs, progress: &dyn Progress) -> Result<()> {
    if !app.skip_build && app.app_binary.is_none() {
        build_app(progress)?;
    }
    Ok(())
}

fn bench_runtime() -> Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().context("starting the async runtime")
}

/// `profiler bench serve`: starts the database and the app, prints the attach command line on
/// stdout, and stops both at Ctrl-C or SIGTERM. Returns exit status 0.
///
/// # Errors
/// Bad CPU lists, the build, PostgreSQL or the app failing to start.
pub fn serve(args: &ServeArgs) -> Result<u8> {
    let opts = options(&args.app, &LoadArgs::default(), &args.costs, "serve")?;
    super::require_root()?;
    let progress = StderrProgress { started: Mutex::new(None) };
    build_unless_skipped(&args.app, &progress)?;
    bench_runtime()?.block_on(async {
        let mut env = crate::run::Environment::start(&opts, &progress).await?;
        // The path of this very binary: `profiler` is usually not on PATH (target/release).
        let exe = std::env::current_exe().map_or_else(|_| "profiler".to_string(), |p| p.display().to_string());
        let mut attach = match &env.target.container {
            Some(name) => format!("sudo {exe} attach --container {name}"),
            None => format!("sudo {exe} attach --cgroup {}", env.target.cgroup.as_ref().map_or(String::new(), |c| c.display().to_string())),
        };
        if env.target.db_port != 5432 {
            attach.push_str(&format!(" --db-port {}", env.target.db_port));
        }
        eprintln!("bench: serving at {}; database {}", env.target.base_url, env.database_url);
        println!("{attach}");
        eprintln!("bench: Ctrl-C (or SIGTERM) stops the app and the database");
        stop_signal().await;
        env.shutdown().await;
        Ok(0)
    })
}

/// `profiler bench overhead`: alternating runs without and with the agent in each
/// [`super::overhead::AgentMode`]; writes `overhead.json` and `overhead.md`. Returns 0.
///
/// # Errors
/// As [`run`], and an agent that failed to attach.
pub fn overhead(args: &OverheadArgs) -> Result<u8> {
    let mut opts = options(&args.app, &args.load, &args.costs, "overhead")?;
    let rules = Arc::new(bench_rules(&args.load.rules)?);
    super::require_root()?;
    profiler::output::prepare_dir(&opts.out_dir).with_context(|| format!("cannot write into {}", opts.out_dir.display()))?;
    let progress = StderrProgress { started: Mutex::new(None) };
    build_unless_skipped(&args.app, &progress)?;
    if args.load.smoke {
        opts.duration = Duration::from_secs(3);
        opts.warmup = Duration::from_secs(1);
    }
    let pairs = if args.load.smoke { 1 } else { args.pairs.max(1) };
    let frequency_hz = args.load.frequency;
    super::overhead::run(&opts, pairs, &bench_runtime()?, &progress, |mode| Box::new(AgentHook { frequency_hz, rules: rules.clone(), mode, counters: false, bpf_stats: false }))?;
    Ok(0)
}

/// Runs `profiler bench` (`run`). Returns the process exit code (0 clean, 1 failed requests).
///
/// # Errors
/// Bad CPU lists, an output folder that cannot be written, the build, PostgreSQL, Docker, the
/// conformance gate or the agent failing, or Ctrl-C (after what was measured is written).
pub fn run(args: &RunArgs) -> Result<u8> {
    let mut opts = options(&args.app, &args.load, &args.costs, "bench")?;
    opts.drift = args.drift;
    let rules = bench_rules(&args.load.rules)?;
    super::require_root()?;
    // The output folder is checked before the build and the runs; one this run created is
    // removed again if nothing gets measured.
    let created = profiler::output::prepare_dir(&opts.out_dir).with_context(|| format!("cannot write into {}", opts.out_dir.display()))?;
    let progress = StderrProgress { started: Mutex::new(None) };
    build_unless_skipped(&args.app, &progress)?;
    let runtime = bench_runtime()?;
    let hook = AgentHook { frequency_hz: args.load.frequency, rules: Arc::new(rules.clone()), mode: super::overhead::AgentMode::Everything, counters: true, bpf_stats: true };
    let hook_ref: Option<&dyn ProfileHook> = if args.no_profile { None } else { Some(&hook) };
    let results = Arc::new(Mutex::new(BenchResults::default()));
    let outcome = runtime.block_on(async {
        tokio::select! {
            r = crate::run::run(&opts, hook_ref, &progress, results.clone()) => r.map_err(anyhow::Error::from),
            _ = stop_signal() => Err(anyhow::anyhow!(profiler::collect::INTERRUPTED)),
        }
    });
    // Whatever happened, write what was measured. On Ctrl-C the select dropped the run; stop
    // whatever it had started (the container by name; the database is removed by its Drop).
    if outcome.is_err() {
        let name = opts.name.clone();
        let docker = opts.docker;
        runtime.block_on(async move {
            if docker {
                if let Ok(d) = crate::docker::connect().await {
                    let _ = crate::docker::remove_own_container(&d, &name).await;
                }
            }
        });
    }
    let mut results = results.lock().unwrap_or_else(|e| e.into_inner()).clone();
    if let Err(e) = &outcome {
        results.mark_partial(&format!("{e:#}"));
    }
    if results.finished_at.is_empty() && !results.started_at.is_empty() {
        // The run was dropped before it could note its end (Ctrl-C).
        results.finished_at = crate::run::now_rfc3339();
    }
    let measured_anything =
        !results.tests.is_empty() || results.unfinished.is_some() || results.conformance.passed + results.conformance.failed > 0;
    if measured_anything {
        write_outputs(&results, &opts.out_dir, &rules)?;
        print!("{}", profiler::render::summary::bench_table(&results));
        eprintln!("bench: wrote {}", opts.out_dir.join("index.html").display());
    } else {
        created.remove_if_empty();
        eprintln!("bench: nothing was measured; no files written");
    }
    outcome?;
    if results.failed_requests() > 0 {
        eprintln!("bench: {} requests failed: see results.json", results.failed_requests());
        return Ok(1);
    }
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_are_checked_before_anything_starts() {
        let allowed = [0, 1];
        assert!(check_cpu_list("--app-cpus", "0", &allowed).is_ok());
        assert!(check_cpu_list("--load-cpus", "0-1", &allowed).is_ok());
        assert!(check_cpu_list("--load-cpus", "0,1", &allowed).is_ok());
        let err = |list: &str| check_cpu_list("--app-cpus", list, &allowed).unwrap_err().to_string();
        assert_eq!(err("7"), "--app-cpus 7: CPU 7 is not available here (CPUs 0,1)");
        assert_eq!(err("1-3"), "--app-cpus 1-3: CPU 2 is not available here (CPUs 0,1)");
        assert_eq!(err("x"), "--app-cpus x: not a CPU list (like 0, 1-3 or 0,2-3)");
        assert_eq!(err("1-0"), "--app-cpus 1-0: not a CPU list (like 0, 1-3 or 0,2-3)");
        assert_eq!(err(""), "--app-cpus : not a CPU list (like 0, 1-3 or 0,2-3)");
        // This machine's own set is what options() checks against.
        assert!(profiler::sys::cpus::allowed().contains(&0));
    }

    fn test_app() -> AppArgs {
        use clap::Parser;
        #[derive(Parser)]
        struct Defaults {
            #[command(flatten)]
            app: AppArgs,
        }
        Defaults::parse_from(["bench"]).app
    }

    #[test]
    fn smoke_settings() {
        let load = LoadArgs { smoke: true, only: vec![Test::Json, Test::Db], ..LoadArgs::default() };
        let o = options(&test_app(), &load, "all", "bench").unwrap();
        assert_eq!((o.runs, o.duration.as_secs(), o.warmup.as_secs()), (1, 5, 2));
        assert_eq!(o.tests, vec![Test::Json, Test::Db]);
    }
}
