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
use crate::run::{AppTarget, BenchOptions, ProfileHook, ProfileSession, Progress};
use clap::Parser;

use profiler::collect;
use profiler::render;
use profiler::symbolize;
use profiler::target::Target;

/// Arguments of `profiler bench`.
#[derive(Debug, Clone, Parser)]
pub struct Args {
    /// Output folder. Default is `reports/<UTC date-time>-bench/`.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Tests to run, comma-separated: json, db, queries, deals-list, deals-create. Default is all five.
    #[arg(long, value_delimiter = ',')]
    pub only: Vec<Test>,
    /// Measured runs per test; the median is reported.
    #[arg(long, default_value_t = 3)]
    pub runs: u32,
    /// Length of each measured (and of the profiled) run, s.
    #[arg(long, default_value_t = 15)]
    pub duration: u64,
    /// Warm-up per test, s.
    #[arg(long, default_value_t = 10)]
    pub warmup: u64,
    /// wrk connections. Default is 64, the app's pool size, which keeps the pool busy without
    /// queueing most requests on it on a 2-CPU machine.
    #[arg(long, default_value_t = 64)]
    pub connections: u32,
    /// wrk threads. Default is the number of CPUs in `--load-cpus`.
    #[arg(long)]
    pub threads: Option<u32>,
    /// CPUs of the app. Default: `0` on a 2-CPU machine, else the first half.
    #[arg(long)]
    pub app_cpus: Option<String>,
    /// CPUs of wrk. Default: `1` on a 2-CPU machine, else the second half.
    #[arg(long)]
    pub load_cpus: Option<String>,
    /// CPUs of PostgreSQL (the throwaway server). Default: the same as `--load-cpus`.
    #[arg(long)]
    pub pg_cpus: Option<String>,
    /// `CRM_COSTS` for the app: `all`, `none`, a list, or `all,-name`.
    #[arg(long, default_value = "all", value_parser = parse_costs)]
    pub costs: String,
    /// Database pool size of the app (the seed's method: 64).
    #[arg(long, default_value_t = 64)]
    pub pool_size: u32,
    /// Container name.
    #[arg(long, default_value = "navree")]
    pub name: String,
    /// Run the app as a pinned process in a cgroup of its own instead of in Docker.
    #[arg(long)]
    pub no_docker: bool,
    /// Use this PostgreSQL database (already seeded) instead of a throwaway server.
    #[arg(long)]
    pub database_url: Option<String>,
    /// The target-app binary. Default: `target-app` beside this `profiler` binary.
    #[arg(long)]
    pub app_binary: Option<PathBuf>,
    /// Do not run `cargo build --release -p target-app` first, and reuse an existing image.
    #[arg(long)]
    pub skip_build: bool,
    /// One short run per test (5 s, 2 s warm-up), the whole run in about 1.5 minutes.
    #[arg(long)]
    pub smoke: bool,
    /// Re-measure the first test at the end and report the difference.
    #[arg(long)]
    pub drift: bool,
    /// No profiled runs (measure only).
    #[arg(long)]
    pub no_profile: bool,
    /// Sampling frequency of the profiled runs, Hz.
    #[arg(long, default_value_t = 99)]
    pub frequency: u64,
    /// Start the database and the app, print the attach command line, wait for Ctrl-C.
    #[arg(long)]
    pub serve: bool,
    /// Extra attribution rules (TOML), added to the built-in catalog and target-app's own
    /// rules (`target-app/rules.toml`); a layer of the same name replaces the earlier one.
    #[arg(long)]
    pub rules: Vec<PathBuf>,
    /// Shared JWT secret of the app and the load scripts.
    #[arg(long, default_value = crate::DEFAULT_JWT_SECRET)]
    pub jwt_secret: String,
    /// Validate the ranking against target-app's switches instead (`validation.md`,
    /// `validation.json`; see docs/bench.md): a profiled bench run with `CRM_COSTS=all` and one
    /// with `none`, then per test alternating runs `all`, `all,-<switch>` (`--rounds`), the app
    /// restarted before each (`--costs` is ignored). With the defaults (all five tests, eight
    /// switches, 15 s runs) it takes about 65 minutes; `--runs 1 --duration 5 --warmup 2` about
    /// 25; `--smoke --only json,db --switches pool-ping` about 2.5.
    #[arg(long)]
    pub validate: bool,
    /// Switches to validate, comma-separated (`--validate`). Default is all eight.
    #[arg(long, value_delimiter = ',')]
    pub switches: Vec<String>,
    /// Alternation rounds of `--validate`: each switch gets one run without it per round,
    /// between two runs with every cost on.
    #[arg(long, default_value_t = 3)]
    pub rounds: u32,
    /// `--validate` also measures switches on the tests whose work they do not change (a
    /// control: their gains should be within noise).
    #[arg(long)]
    pub measure_absent: bool,
    /// Measure the agent's overhead instead (`overhead.json`, `overhead.md`): per test, `--pairs`
    /// alternating runs without and with the agent in each mode (sampling, +offcpu, +syscalls,
    /// everything). `--duration` is the length of each run; `--smoke` makes it 1 pair of 3 s.
    #[arg(long)]
    pub overhead: bool,
    /// A/B pairs per test and mode for `--overhead`.
    #[arg(long, default_value_t = 5)]
    pub pairs: u32,
}

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
}

impl ProfileSession for AgentSession {
    fn finish(mut self: Box<Self>) -> Result<(u64, String), String> {
        self.stop.store(true, Ordering::Relaxed);
        let handle = self.handle.take().ok_or("the profiling session was already finished")?;
        handle.join().map_err(|_| "the profiling thread panicked".to_string())?
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
    /// Which tracers run (`--overhead` measures each mode; the profiled run has everything).
    mode: super::overhead::AgentMode,
    /// Also count library calls and lock acquisitions with uprobes (`counters.json`): on for
    /// the profiled run, off in `--overhead`, whose modes are `profiler attach`'s. Each count
    /// is an `int3` trap: on `/json` the five per request cost about 8% of the app's CPU.
    counters: bool,
    /// Time every BPF program with the kernel's run statistics
    /// ([`collect::Options::bpf_run_stats`]) for `footprint.json` and the agent cost line: on
    /// for the profiled run, off in `--overhead`, as in `profiler attach`.
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
        // The profiled run counts every syscall (`--overhead` runs use `profiler attach`'s
        // windows). It covers the app's restart: a one-off burst such as the dynamic loader's
        // `newfstatat`s falls in a window or not, and is then scaled x4 or counted 0 (in
        // diff_bench: `newfstatat` 0 -> 0.081 calls/req between two benches of the same app).
        let syscalls_duty_pct = if self.counters { 100 } else { collect::DEFAULT_SYSCALL_DUTY_PCT };
        let options = self.mode.options(collect::Options {
            frequency_hz: self.frequency_hz,
            db_port: target.db_port,
            syscalls_duty_pct,
            bpf_run_stats: self.bpf_stats,
            ..Default::default()
        });
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let cancelled = Arc::new(AtomicBool::new(false));
        let was_cancelled = cancelled.clone();
        let out = out_dir.to_path_buf();
        let rules = self.rules.clone();
        let with_counters = self.counters;
        let (attached_tx, attached_rx) = mpsc::channel::<()>();
        // Target::resolve talks to Docker on a runtime of its own: it must run outside ours.
        // The app's own pid: the cgroup's lowest pid is not always the app (the `sleep`
        // that holds the cgroup while the app restarts, a process left by another program).
        let app_pid = target.pid;
        let handle = std::thread::spawn(move || -> Result<(u64, String), String> {
            let mut resolved = t.resolve().map_err(|e| format!("{e:#}"))?;
            // Exact counts of library calls (tokio task spawns) over the same window: uprobe
            // counters on the app's binary, filtered on its cgroup (attribute::counters).
            let main_pid = if app_pid > 0 { app_pid } else { resolved.main_pid };
            let counters = match (&resolved.cgroup_dir, main_pid) {
                (Some(cg), pid) if pid > 0 && with_counters => {
                    let exe = PathBuf::from(format!("/proc/{pid}/exe"));
                    // The app's own crate, for the lock counters: Cargo names a binary crate
                    // like its executable.
                    let crates: Vec<String> = std::fs::read_link(&exe).ok().and_then(|p| profiler::attribute::locks::crate_of_executable(&p)).into_iter().collect();
                    let specs = profiler::attribute::counters::default_specs(&exe, &crates);
                    profiler::attribute::counters::Counters::open_specs(&exe, cg, &specs)
                        .map_err(|e| tracing::warn!("no call counters: {e}"))
                        .ok()
                }
                _ => None,
            };
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
            let call_counts = counters.as_ref().map(|c| c.read());
            drop(counters);
            let profile = symbolize::symbolize(raw);
            // The symbolizer's caches were dropped with it: give their heap back, so that
            // this run's peak and the next run do not start from them (profiler::memory).
            profiler::memory::release_free();
            render::write_all_with(&profile, &out, &render::Options { rules: Some(&*rules), ..Default::default() }).map_err(|e| format!("{e:#}"))?;
            if let Some(c) = &call_counts {
                c.write(&out).map_err(|e| format!("writing counters.json: {e}"))?;
            }
            if let Some(f) = super::overhead::RunFootprint::of(&profile, reports_started.elapsed()) {
                f.write(&out).map_err(|e| format!("writing footprint.json: {e}"))?;
            }
            // ranking.md/json with the wire's request count (if any) and an unknown bound;
            // `attribute::write_bench_rankings` rewrites them with wrk's count and the bound.
            let opts = profiler::attribute::RankingOptions { rules: &rules, wire: None, base_req_per_s: None, label: test.name() };
            profiler::attribute::write_ranking(&profile, None, profiler::attribute::Bound::Unknown, &opts, &out)
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
        Ok(Box::new(AgentSession { stop, cancelled, handle: Some(handle), out: out_dir.to_path_buf() }))
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

/// The CPUs this process may run on (`sched_getaffinity(2)`), ascending; empty if unknown.
fn allowed_cpus() -> Vec<u32> {
    // SAFETY: cpu_set_t is plain data; sched_getaffinity fills it for this process.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    if unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) } != 0 {
        return Vec::new();
    }
    // SAFETY: CPU_ISSET reads the set filled above, with an index below CPU_SETSIZE.
    (0..libc::CPU_SETSIZE as usize).filter(|&c| unsafe { libc::CPU_ISSET(c, &set) }).map(|c| c as u32).collect()
}

/// Checks a cpuset list (`0`, `1-3`, `0,2-3`, as `taskset -c` and Docker take them) against
/// `allowed` (not checked when empty), so that a bad list is refused before PostgreSQL and
/// the app start.
///
/// # Errors
/// One line naming the flag: not a list, or a CPU this machine does not let us use.
fn check_cpu_list(flag: &str, list: &str, allowed: &[u32]) -> Result<()> {
    let bad = || anyhow::anyhow!("{flag} {list}: not a CPU list (like 0, 1-3 or 0,2-3)");
    let mut cpus = Vec::new();
    for part in list.split(',') {
        let (a, b) = part.split_once('-').unwrap_or((part, part));
        let (a, b): (u32, u32) = (a.trim().parse().map_err(|_| bad())?, b.trim().parse().map_err(|_| bad())?);
        if a > b {
            return Err(bad());
        }
        cpus.extend(a..=b.min(a + 4096));
    }
    if let Some(cpu) = cpus.iter().find(|c| !allowed.is_empty() && !allowed.contains(c)) {
        let have: Vec<String> = allowed.iter().map(u32::to_string).collect();
        bail!("{flag} {list}: CPU {cpu} is not available here (CPUs {})", have.join(","));
    }
    Ok(())
}

/// The run's settings from the command line (`--smoke`: 1 run of 5 s after 2 s of warm-up).
pub(crate) fn options(args: &Args) -> Result<BenchOptions> {
    let (app_default, load_default) = default_cpus();
    let app_cpus = args.app_cpus.clone().unwrap_or(app_default);
    let load_cpus = args.load_cpus.clone().unwrap_or(load_default);
    let pg_cpus = Some(args.pg_cpus.clone().unwrap_or_else(|| load_cpus.clone()));
    let allowed = allowed_cpus();
    for (flag, list) in [("--app-cpus", &app_cpus), ("--load-cpus", &load_cpus), ("--pg-cpus", pg_cpus.as_ref().unwrap_or(&load_cpus))] {
        check_cpu_list(flag, list, &allowed)?;
    }
    let threads = args.threads.unwrap_or_else(|| profiler::attribute::cpu_list_len(&load_cpus));
    let (runs, duration, warmup) = if args.smoke { (1, 5, 2) } else { (args.runs, args.duration, args.warmup) };
    if runs == 0 || duration == 0 {
        bail!("--runs and --duration must be at least 1");
    }
    let app_binary = match &args.app_binary {
        Some(p) => p.clone(),
        None => std::env::current_exe().context("locating the profiler binary")?.with_file_name("target-app"),
    };
    let out_dir = match &args.out {
        Some(p) => p.clone(),
        None => PathBuf::from("reports").join(format!("{}-bench", chrono::Utc::now().format("%Y%m%dT%H%M%SZ"))),
    };
    Ok(BenchOptions {
        out_dir,
        tests: if args.only.is_empty() { Test::ALL.to_vec() } else { args.only.clone() },
        runs,
        duration: Duration::from_secs(duration),
        warmup: Duration::from_secs(warmup),
        connections: args.connections,
        threads,
        app_cpus,
        load_cpus,
        pg_cpus,
        costs: args.costs.clone(),
        pool_size: args.pool_size,
        name: args.name.clone(),
        docker: !args.no_docker,
        database_url: args.database_url.clone(),
        app_binary,
        rebuild_image: !args.skip_build,
        drift: args.drift,
        jwt_secret: args.jwt_secret.clone(),
        frequency_hz: args.frequency,
        smoke: args.smoke,
        request_timeout: Duration::from_secs(10),
    })
}

fn build_app(progress: &dyn Progress) -> Result<()> {
    let Some(root) = workspace_root() else {
        // An installed profiler without its sources: use --app-binary.
        return Ok(());
    };
    progress.step("cargo build --release -p target-app", Duration::ZERO);
    let status = std::process::Command::new("cargo")
        .args(["build", "--release", "-p", "target-app"])
        .current_dir(&root)
        .status()
        .context("running cargo (is the Rust toolchain on PATH?)")?;
    if !status.success() {
        bail!("cargo build --release -p target-app failed ({status})");
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
    if let Err(e) = profiler::attribute::write_bench_rankings(results, out, rules) {
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

/// Checks a `--costs` value with target-app's own parser (`target_app::costs::Costs::parse`),
/// so that a mistyped name is refused before PostgreSQL and the app are started (the app
/// would exit with its configuration error, seen only after the bench's 60 s start-up wait).
///
/// # Errors
/// The parser's message, naming the bad entry and the eight known names.
fn parse_costs(value: &str) -> Result<String, String> {
    target_app::costs::Costs::parse(value).map(|_| value.to_string()).map_err(|e| e.to_string().replace("CRM_COSTS", "--costs"))
}

/// Runs `profiler bench`. Returns the process exit code (0 clean, 1 failed requests).
pub fn run(args: Args) -> Result<u8> {
    if unsafe { libc::geteuid() } != 0 {
        bail!("profiler bench must run as root (eBPF, Docker and cgroups need it): sudo profiler bench");
    }
    if args.validate {
        return super::validate::run(args);
    }
    let opts = options(&args)?;
    let rules = bench_rules(&args.rules)?;
    // The output folder is checked before the build and the runs (not for --serve, which
    // writes nothing); one this run created is removed again if nothing gets measured.
    let created = match args.serve {
        true => None,
        false => Some(profiler::output::prepare_dir(&opts.out_dir).with_context(|| format!("cannot write into {}", opts.out_dir.display()))?),
    };
    let progress = StderrProgress { started: Mutex::new(None) };
    if !args.skip_build && args.app_binary.is_none() {
        build_app(&progress)?;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().context("starting the async runtime")?;

    if args.serve {
        return runtime.block_on(async {
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
        });
    }

    if args.overhead {
        let mut opts = opts;
        if args.smoke {
            opts.duration = Duration::from_secs(3);
            opts.warmup = Duration::from_secs(1);
        }
        let pairs = if args.smoke { 1 } else { args.pairs.max(1) };
        let rules = Arc::new(rules);
        let frequency_hz = args.frequency;
        super::overhead::run(&opts, pairs, &runtime, &progress, |mode| Box::new(AgentHook { frequency_hz, rules: rules.clone(), mode, counters: false, bpf_stats: false }))?;
        return Ok(0);
    }
    let hook = AgentHook { frequency_hz: args.frequency, rules: Arc::new(rules.clone()), mode: super::overhead::AgentMode::Everything, counters: true, bpf_stats: true };
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
        print!("{}", results.summary_table());
        eprintln!("bench: wrote {}", opts.out_dir.join("index.html").display());
    } else {
        if let Some(created) = &created {
            created.remove_if_empty();
        }
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
    fn cpu_lists() {
        assert_eq!(profiler::attribute::cpu_list_len("0"), 1);
        assert_eq!(profiler::attribute::cpu_list_len("1-3"), 3);
        assert_eq!(profiler::attribute::cpu_list_len("0,2-3"), 3);
    }

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
        assert!(allowed_cpus().contains(&0));
    }

    #[test]
    fn smoke_settings() {
        let args = Args::parse_from(["bench", "--smoke", "--only", "json,db"]);
        let o = options(&args).unwrap();
        assert_eq!((o.runs, o.duration.as_secs(), o.warmup.as_secs()), (1, 5, 2));
        assert_eq!(o.tests, vec![Test::Json, Test::Db]);
    }
}
