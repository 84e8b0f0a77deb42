//! The benchmark run, end to end (`profiler bench`): a throwaway PostgreSQL, the app in a
//! container (or a pinned process in a cgroup of its own), the conformance gate, then per test
//! a warm-up, the measured runs and one profiled run, with CPU and memory sampled throughout.
//!
//! The method is the seed's (`../shared/seeds/001_*.txt`, "How a run goes"): fresh data, time
//! to ready from the container start to the first 200 from `GET /json`, conformance before any
//! measurement, warm-up, N measured runs with the median reported, failed requests counted
//! and reported. Everything started here is stopped and removed at the end, on error and on
//! Ctrl-C too ([`Environment::shutdown`]).
//!
//! The profiled run is delegated to a [`ProfileHook`] so that this crate does not depend on
//! the agent: `profiler bench` passes one that attaches the agent to the app.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::docker::{self, DockerError, RunSpec};
use crate::load::{self, LoadError, Test, WrkOptions};
use crate::pg::{PgError, TempPostgres};
use crate::procstat::{self, Sampler, Usage};
use crate::results::{BenchResults, ConformanceResult, Drift, ProfiledRun, RunResult, Settings, TestResult, Versions};

/// Path of the app binary inside the image.
pub const APP_PATH_IN_IMAGE: &str = "/usr/local/bin/target-app";

/// Image repository the app is imported as.
pub const IMAGE_REPO: &str = "profiler-target-app";

/// Longest warm-up of the app restarted under the agent before the profiled run (the
/// `--warmup` of the test, capped at this, at least 1 s).
pub const PROFILED_WARMUP_MAX: Duration = Duration::from_secs(3);

/// Interval of the CPU and memory sampler.
const SAMPLE_INTERVAL: Duration = Duration::from_millis(250);

/// Everything `profiler bench` can be told. Defaults are in the agent's clap definitions.
#[derive(Debug, Clone)]
pub struct BenchOptions {
    /// Output folder (created).
    pub out_dir: PathBuf,
    /// Tests to run, in order.
    pub tests: Vec<Test>,
    /// Measured runs per test.
    pub runs: u32,
    /// Length of each measured run.
    pub duration: Duration,
    /// Warm-up per test (0: none).
    pub warmup: Duration,
    /// wrk connections.
    pub connections: u32,
    /// wrk threads.
    pub threads: u32,
    /// CPU set of the app (`--cpuset-cpus` / taskset).
    pub app_cpus: String,
    /// CPU set of wrk.
    pub load_cpus: String,
    /// CPU set of PostgreSQL (throwaway server only), `None` for unpinned.
    pub pg_cpus: Option<String>,
    /// `CRM_COSTS` for the app.
    pub costs: String,
    /// `DB_POOL_SIZE` for the app.
    pub pool_size: u32,
    /// Container name (or the cgroup's name with `docker = false`).
    pub name: String,
    /// Run the app in Docker (else as a pinned process in a cgroup of its own).
    pub docker: bool,
    /// Use this database instead of a throwaway server (it must hold the seeded schema).
    pub database_url: Option<String>,
    /// The target-app binary (release, frame pointers).
    pub app_binary: PathBuf,
    /// Import the image again even if one with the binary's tag exists.
    pub rebuild_image: bool,
    /// Re-measure the first test at the end.
    pub drift: bool,
    /// Shared JWT secret.
    pub jwt_secret: String,
    /// Sampling frequency of the profiled runs, Hz (0: no profiled runs).
    pub frequency_hz: u64,
    /// Smoke mode (recorded in the results).
    pub smoke: bool,
    /// Per-request timeout of wrk.
    pub request_timeout: Duration,
}

/// How the app runs, for the profile hook and for `bench serve`.
#[derive(Debug, Clone)]
pub struct AppTarget {
    /// Container name, when the app runs in Docker.
    pub container: Option<String>,
    /// cgroup v2 directory holding the app: the process's own cgroup, or the container's
    /// parent cgroup ([`cgroup_parent_of`]), which keeps holding the app across
    /// [`Environment::restart_app`]. `None` when the host has no cgroup v2 mount.
    pub cgroup: Option<PathBuf>,
    /// Host pid of the app's process.
    pub pid: u32,
    /// `http://127.0.0.1:PORT`.
    pub base_url: String,
    /// TCP port the app listens on.
    pub port: u16,
    /// TCP port of the PostgreSQL server the app talks to (the wire capture classifies
    /// sockets to this peer port as database sockets).
    pub db_port: u16,
}

/// A profiling session started before a profiled run and finished after it.
pub trait ProfileSession: Send {
    /// Stops collecting and writes the outputs. Returns the number of on-CPU samples and the
    /// text summary.
    fn finish(self: Box<Self>) -> Result<(u64, String), String>;

    /// The measured part of the profiled run begins: the app's restart and warm-up are over.
    /// Counts that one-off bursts would make noisy start here (the default does nothing).
    fn measured_part_begins(&self) {}
}

/// A count of the app's library calls over a run of its own, started before that run and
/// finished after it.
pub trait CountSession: Send {
    /// Stops counting and writes the counts with `requests`, the requests the load generator
    /// completed in the run, into the test's output folder. Returns a one-line summary.
    fn finish(self: Box<Self>, requests: u64) -> Result<String, String>;
}

/// Starts profiling sessions (implemented by the agent).
pub trait ProfileHook: Send + Sync {
    /// Attaches to `target` and starts collecting; outputs go to `out_dir`. `expected` is how
    /// long the session will run (for progress display). When `target.cgroup` is set the hook
    /// must attach to that cgroup (descendants included), not to the container or the pid:
    /// the run restarts the app under it once `start` has returned.
    fn start(&self, target: &AppTarget, test: Test, out_dir: &Path, expected: Duration) -> Result<Box<dyn ProfileSession>, String>;

    /// Starts counting the app's library calls (uprobes) for a run of their own after the
    /// profiled run, outputs to `out_dir`: each call counted is a breakpoint trap in the app,
    /// which would slow the profiled run. `Ok(None)` when this hook counts nothing (the
    /// default).
    ///
    /// # Errors
    /// Why the counters could not be set up.
    fn start_counting(&self, _target: &AppTarget, _out_dir: &Path) -> Result<Option<Box<dyn CountSession>>, String> {
        Ok(None)
    }
}

/// Longest counting run ([`ProfileHook::start_counting`]): 5 s, or the measured runs' length
/// when shorter. The counts are exact; their error is the requests in flight when the run ends
/// (counted calls, no completed request), at most the load's connections: 64 of the 6,900-7,900
/// requests the slowest test (`queries`) completed in 5 s, under 1%.
pub const COUNTING_RUN_MAX: Duration = Duration::from_secs(5);

/// Progress lines for a person watching (the agent shows them with indicatif or on stderr).
pub trait Progress: Send + Sync {
    /// A step started (`message`), expected to take about `expected` (zero: unknown).
    fn step(&self, message: &str, expected: Duration);
    /// A step finished with a short result.
    fn done(&self, message: &str);
}

/// Why a benchmark run failed.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// PostgreSQL could not be started or seeded.
    #[error("PostgreSQL: {0}")]
    Postgres(#[from] PgError),
    /// Docker failed.
    #[error(transparent)]
    Docker(#[from] DockerError),
    /// wrk failed.
    #[error("wrk: {0}")]
    Load(#[from] LoadError),
    /// The app binary is missing.
    #[error("target-app binary not found at {0}: build it with `cargo build --release --workspace --bin target-app`")]
    NoAppBinary(PathBuf),
    /// The app did not answer `GET /json` with 200 in time.
    #[error("the app did not answer GET /json with 200 within {timeout_s} s; its last log lines:\n{log}")]
    NotReady {
        /// How long we waited, s.
        timeout_s: u64,
        /// The app's last log lines.
        log: String,
    },
    /// The conformance gate failed: nothing was measured.
    #[error("conformance gate: {failed} of {total} checks failed; nothing was measured:\n{list}")]
    Conformance {
        /// Failed checks.
        failed: u32,
        /// All checks.
        total: u32,
        /// The failing checks, one a line.
        list: String,
    },
    /// A file could not be written.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The run was interrupted (Ctrl-C); what was measured until then is in results.json.
    #[error("interrupted; the results measured so far are in {0}")]
    Interrupted(PathBuf),
    /// Something else (cgroup set-up, spawning the app).
    #[error("{0}")]
    Other(String),
}

/// What was started for a run; [`Environment::shutdown`] stops all of it.
pub struct Environment {
    pg: Option<TempPostgres>,
    docker: Option<bollard::Docker>,
    container: Option<String>,
    process: Option<Child>,
    cgroup: Option<PathBuf>,
    /// How the app was started, for [`Environment::restart_app`].
    launch: Option<Launch>,
    /// The app, as the profile hook sees it.
    pub target: AppTarget,
    /// Database URL the app uses.
    pub database_url: String,
    /// Host pid of the PostgreSQL postmaster (throwaway server only).
    pub pg_pid: Option<u32>,
    /// From the container's start (the engine's start call, after it was created; with
    /// `--no-docker`, the spawn) to the first 200 from `GET /json`, ms.
    pub time_to_ready_ms: f64,
    /// Idle resident memory of the app, bytes.
    pub idle_rss_bytes: u64,
    /// Versions seen.
    pub versions: Versions,
    /// `CRM_COSTS` the app runs with now (changed by [`Environment::restart_app`]).
    pub costs: String,
}

/// What [`Environment::restart_app`] needs to start the app again the same way.
#[derive(Debug, Clone)]
struct Launch {
    /// `KEY=value` environment of the app (`CRM_COSTS=...` among them).
    env_vars: Vec<String>,
    /// Docker: the image; `None` runs the binary as a process.
    image: Option<String>,
    /// Container name (and the cgroup's name).
    name: String,
    /// CPU set of the app.
    cpus: String,
    /// The app binary (process mode).
    binary: PathBuf,
}

/// The parent cgroup the app container runs under (`--cgroup-parent`), relative to each
/// hierarchy's root: `/profiler-bench-<name>`. Its cgroup v2 directory is what a profiler
/// attaches to ([`AppTarget::cgroup`]): it holds the app across [`Environment::restart_app`].
pub fn cgroup_parent_of(name: &str) -> String {
    format!("/profiler-bench-{name}")
}

impl Environment {
    /// Starts PostgreSQL (or uses `--database-url`) and the app, waits until it answers.
    pub async fn start(opts: &BenchOptions, progress: &dyn Progress) -> Result<Environment, BenchError> {
        if !opts.app_binary.is_file() {
            return Err(BenchError::NoAppBinary(opts.app_binary.clone()));
        }
        let mut env = Environment {
            pg: None,
            docker: None,
            container: None,
            process: None,
            cgroup: None,
            launch: None,
            target: AppTarget { container: None, cgroup: None, pid: 0, base_url: String::new(), port: 0, db_port: 5432 },
            database_url: String::new(),
            pg_pid: None,
            time_to_ready_ms: 0.0,
            idle_rss_bytes: 0,
            versions: Versions { profiler: env!("CARGO_PKG_VERSION").into(), ..Default::default() },
            costs: opts.costs.clone(),
        };
        // From here on, a failure must still stop what was started.
        match env.start_inner(opts, progress).await {
            Ok(()) => Ok(env),
            Err(e) => {
                env.shutdown().await;
                Err(e)
            }
        }
    }

    async fn start_inner(&mut self, opts: &BenchOptions, progress: &dyn Progress) -> Result<(), BenchError> {
        self.versions.kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default().trim().into();
        self.versions.wrk = Command::new("wrk")
            .arg("-v")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).lines().next().unwrap_or("").trim().to_string())
            .unwrap_or_default();

        // 1. The database.
        if let Some(url) = &opts.database_url {
            self.database_url = url.clone();
        } else {
            progress.step("starting a throwaway PostgreSQL and seeding it", Duration::from_secs(5));
            let pg = tokio::task::spawn_blocking(|| -> Result<(TempPostgres, String), PgError> {
                let pg = TempPostgres::start()?;
                let url = pg.create_seeded_db("crm")?;
                Ok((pg, url))
            })
            .await
            .map_err(|e| BenchError::Other(format!("PostgreSQL start-up task: {e}")))??;
            self.pg_pid = pg.0.pid();
            self.versions.postgres = pg.0.psql("postgres", "SHOW server_version").unwrap_or_default().trim().to_string();
            if let (Some(cpus), Some(pid)) = (&opts.pg_cpus, self.pg_pid) {
                // Backends fork from the postmaster and inherit its affinity.
                let _ = Command::new("taskset").args(["-a", "-p", "-c", cpus, &pid.to_string()]).stdout(Stdio::null()).status();
            }
            self.database_url = pg.1;
            self.pg = Some(pg.0);
            progress.done(&format!("PostgreSQL {} on 127.0.0.1:{}", self.versions.postgres, self.pg.as_ref().map_or(0, |p| p.port())));
        }

        // 2. The app.
        let port = free_port(8080)?;
        let base_url = format!("http://127.0.0.1:{port}");
        let env_vars = vec![
            format!("DATABASE_URL={}", self.database_url),
            format!("JWT_SECRET={}", opts.jwt_secret),
            format!("PORT={port}"),
            "HOST=127.0.0.1".to_string(),
            format!("CRM_COSTS={}", opts.costs),
            format!("DB_POOL_SIZE={}", opts.pool_size),
            "RUST_LOG=warn".to_string(),
        ];
        let image = if opts.docker {
            let docker = docker::connect().await?;
            self.versions.docker = docker.version().await.ok().and_then(|v| v.version);
            let tag = binary_tag(&opts.app_binary)?;
            let image = format!("{IMAGE_REPO}:{tag}");
            let exists = docker.inspect_image(&image).await.is_ok();
            if exists && !opts.rebuild_image {
                progress.done(&format!("image {image} is up to date"));
            } else {
                progress.step(&format!("building image {image} offline (docker import)"), Duration::from_secs(3));
                docker::build_image(&docker, &opts.app_binary, APP_PATH_IN_IMAGE, IMAGE_REPO, &tag).await?;
                progress.done(&format!("image {image} built"));
            }
            self.docker = Some(docker);
            progress.step(&format!("starting container {} (--network host, CPUs {})", opts.name, opts.app_cpus), Duration::ZERO);
            Some(image)
        } else {
            progress.step(&format!("starting {} as a process on CPUs {}", opts.app_binary.display(), opts.app_cpus), Duration::ZERO);
            None
        };
        self.launch = Some(Launch { env_vars, image, name: opts.name.clone(), cpus: opts.app_cpus.clone(), binary: opts.app_binary.clone() });
        let started = self.launch_app().await?;
        self.target.base_url = base_url.clone();
        self.target.port = port;
        self.target.db_port = db_port_of(&self.database_url).unwrap_or(5432);

        self.wait_app_ready().await?;
        self.time_to_ready_ms = started.elapsed().as_secs_f64() * 1e3;
        tokio::time::sleep(Duration::from_millis(200)).await;
        self.idle_rss_bytes = procstat::tree(self.target.pid).keys().map(|&p| procstat::rss_bytes(p)).sum();
        progress.done(&format!(
            "app ready at {base_url} in {:.1} ms, idle memory {:.1} MB",
            self.time_to_ready_ms,
            self.idle_rss_bytes as f64 / 1e6
        ));
        Ok(())
    }

    /// Starts the app from [`Launch`]: in Docker under the parent cgroup
    /// [`cgroup_parent_of`]`(name)` (replacing a container of the same name), or as a pinned
    /// process moved into the cgroup v2 directory `profiler-bench-<name>`. Sets
    /// [`AppTarget::pid`], `container` and `cgroup`. Returns the instant just before the start.
    async fn launch_app(&mut self) -> Result<Instant, BenchError> {
        let launch = self.launch.clone().ok_or_else(|| BenchError::Other("the app was never started".into()))?;
        let started;
        match (&launch.image, &self.docker) {
            (Some(image), Some(docker)) => {
                let spec = RunSpec {
                    name: launch.name.clone(),
                    image: image.clone(),
                    cmd: vec![APP_PATH_IN_IMAGE.to_string()],
                    env: launch.env_vars.clone(),
                    cpuset_cpus: Some(launch.cpus.clone()),
                    memory_bytes: Some(4 << 30),
                };
                valid_name(&launch.name)?;
                let parent = cgroup_parent_of(&launch.name);
                let running = docker::run_container_in(docker, &spec, Some(&parent)).await?;
                started = running.started;
                self.container = Some(launch.name.clone());
                self.target.container = Some(launch.name.clone());
                self.target.pid = running.pid;
                // The engine created the parent in the cgroup v2 hierarchy too (cgroupfs driver).
                self.target.cgroup = cgroup2_mount().map(|m| m.join(parent.trim_start_matches('/'))).filter(|d| d.is_dir());
            }
            _ => {
                let cgroup = create_cgroup(&launch.name)?;
                let mut cmd = Command::new("taskset");
                cmd.arg("-c").arg(&launch.cpus).arg(&launch.binary).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::piped());
                for kv in &launch.env_vars {
                    let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
                    cmd.env(k, v);
                }
                started = Instant::now();
                let child = cmd.spawn().map_err(|e| BenchError::Other(format!("could not start {}: {e}", launch.binary.display())))?;
                // taskset execs the app: the pid stays the same.
                let pid = child.id();
                self.process = Some(child);
                std::fs::write(cgroup.join("cgroup.procs"), pid.to_string())
                    .map_err(|source| BenchError::Io { path: cgroup.join("cgroup.procs"), source })?;
                self.target.pid = pid;
                self.target.cgroup = Some(cgroup.clone());
                self.cgroup = Some(cgroup);
            }
        }
        Ok(started)
    }

    /// Waits up to 60 s for the first 200 from `GET /json`; else [`BenchError::NotReady`] with
    /// the app's last log lines.
    async fn wait_app_ready(&mut self) -> Result<(), BenchError> {
        if wait_ready(self.target.port, Duration::from_secs(60)).await {
            return Ok(());
        }
        let log = self.app_log().await;
        Err(BenchError::NotReady { timeout_s: 60, log })
    }

    /// Restarts the app (a new container of the same name and image under the same parent
    /// cgroup, or a new process in the same cgroup), with `CRM_COSTS=costs` when given (else
    /// the current [`Environment::costs`]), and waits until it answers `GET /json` with 200.
    /// PostgreSQL keeps running: the database (and whatever the runs wrote to it) stays.
    /// Updates [`AppTarget::pid`]; the port, base URL and [`AppTarget::cgroup`] stay the same,
    /// so a profiler attached to that cgroup sees the new app from its first instruction
    /// (connections opened and statements prepared in view). The new app starts with an
    /// empty pool: warm it up before measuring.
    ///
    /// # Errors
    /// Docker or process errors; [`BenchError::NotReady`] when the new app does not answer
    /// within 60 s (a bad `costs` value makes the app exit with status 2: its log says why).
    pub async fn restart_app(&mut self, costs: Option<&str>) -> Result<(), BenchError> {
        let launch = self.launch.as_mut().ok_or_else(|| BenchError::Other("restart_app: the app was never started".into()))?;
        if let Some(c) = costs {
            launch.env_vars.retain(|kv| !kv.starts_with("CRM_COSTS="));
            launch.env_vars.push(format!("CRM_COSTS={c}"));
            self.costs = c.to_string();
        }
        // A profiler attached to the cgroup ends its collection when no process is left in it
        // (the target exited): a placeholder process holds the cgroup while the app is replaced.
        // Killed when dropped: also when this future is dropped half-way (Ctrl-C).
        let _keeper = self.target.cgroup.as_deref().and_then(CgroupHolder::start);
        let outcome = async {
            if let (Some(d), Some(name)) = (&self.docker, self.container.take()) {
                docker::remove_container(d, &name).await?;
            }
            if let Some(mut child) = self.process.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
            self.launch_app().await?;
            self.wait_app_ready().await
        }
        .await;
        outcome
    }

    /// Puts the `deals` table back to its seeded state (the conformance gate inserts deals):
    /// deletes the rows past the seed's [`crate::seed::DEAL_ROWS`] and resets the id sequence,
    /// so that every measured run lists the same pages. Only for the throwaway server; with
    /// `--database-url` the database is left as it is. Returns the number of rows deleted.
    pub fn reset_deals(&self) -> Result<u64, PgError> {
        let Some(pg) = &self.pg else { return Ok(0) };
        let n = crate::seed::DEAL_ROWS;
        let out = pg.psql(
            "crm",
            &format!("WITH gone AS (DELETE FROM deals WHERE id > {n} RETURNING 1) SELECT count(*) FROM gone;\nSELECT setval('deals_id_seq', {n});\nVACUUM ANALYZE deals;"),
        )?;
        Ok(out.lines().next().and_then(|l| l.trim().parse().ok()).unwrap_or(0))
    }

    /// The app's last log lines.
    pub async fn app_log(&mut self) -> String {
        if let (Some(d), Some(name)) = (&self.docker, &self.container) {
            return docker::last_log_lines(d, name, 20).await;
        }
        if let Some(child) = &mut self.process {
            if let Ok(Some(_)) = child.try_wait() {
                let mut s = String::new();
                if let Some(mut e) = child.stderr.take() {
                    let _ = e.read_to_string(&mut s);
                }
                let lines: Vec<&str> = s.lines().collect();
                return lines[lines.len().saturating_sub(20)..].join("\n");
            }
            return "(the process is still running and printed nothing it had to)".into();
        }
        String::new()
    }

    /// Stops and removes everything that was started. Never fails: problems are logged.
    pub async fn shutdown(&mut self) {
        if let (Some(d), Some(name)) = (&self.docker, self.container.take()) {
            if let Err(e) = docker::remove_container(d, &name).await {
                tracing::warn!("could not remove container {name}: {e}");
            }
        }
        if let Some(mut child) = self.process.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        if let Some(cg) = self.cgroup.take() {
            let _ = std::fs::remove_dir(&cg);
        }
        if let Some(l) = self.launch.as_ref().filter(|l| l.image.is_some()) {
            // The engine removes the container's own cgroups, not the parent it created.
            docker::remove_cgroup_parent(&cgroup_parent_of(&l.name));
        }
        if let Some(pg) = self.pg.take() {
            if let Err(e) = tokio::task::spawn_blocking(move || pg.stop()).await.unwrap_or(Ok(())) {
                tracing::warn!("PostgreSQL did not stop cleanly: {e}");
            }
        }
    }
}

/// A tag that changes when the binary changes: its GNU build id when present, else size+mtime.
fn binary_tag(binary: &Path) -> Result<String, BenchError> {
    let meta = std::fs::metadata(binary).map_err(|source| BenchError::Io { path: binary.into(), source })?;
    let mtime = meta.modified().ok().and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok()).map_or(0, |d| d.as_secs());
    Ok(format!("{:x}-{:x}", meta.len(), mtime))
}

/// The port of a `postgres://user:pass@host:PORT/db` URL (5432 when none is given).
pub fn db_port_of(url: &str) -> Option<u16> {
    let rest = url.split("://").nth(1)?;
    let authority = rest.split('/').next()?;
    let hostport = authority.rsplit('@').next()?;
    match hostport.rsplit_once(':') {
        Some((_, port)) if !hostport.ends_with(']') => port.parse().ok(),
        _ => Some(5432),
    }
}

/// `preferred` when it is free on 127.0.0.1, else a free port the kernel picks.
fn free_port(preferred: u16) -> Result<u16, BenchError> {
    if TcpListener::bind(("127.0.0.1", preferred)).is_ok() {
        return Ok(preferred);
    }
    TcpListener::bind(("127.0.0.1", 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| BenchError::Other(format!("no free port on 127.0.0.1: {e}")))
}

/// The cgroup v2 mount point ([`profiler::sys::cgroup::cgroup2_mount`]); `None` when there
/// is none or mountinfo cannot be read.
pub fn cgroup2_mount() -> Option<PathBuf> {
    profiler::sys::cgroup::cgroup2_mount().ok().flatten()
}

/// A `sleep` process moved into a cgroup v2 directory, so that the cgroup is not empty while
/// the app is replaced (it sleeps, so it adds no CPU, syscall or wire traffic to a profile).
/// Killed and reaped when dropped, and killed by the kernel if the bench process dies first
/// (`PR_SET_PDEATHSIG`): a holder left behind would stay in the cgroup for 10 minutes and be
/// taken for the app by the next bench.
struct CgroupHolder(Child);

impl CgroupHolder {
    /// Starts the holder in `cgroup`; `None` when it could not be started or moved.
    fn start(cgroup: &Path) -> Option<CgroupHolder> {
        use std::os::unix::process::CommandExt;
        let mut command = Command::new("sleep");
        command.arg("600").stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
        // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
        unsafe {
            command.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let holder = CgroupHolder(command.spawn().ok()?);
        std::fs::write(cgroup.join("cgroup.procs"), holder.0.id().to_string()).ok()?;
        Some(holder)
    }
}

impl Drop for CgroupHolder {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A container / cgroup name of letters, digits, `-` and `_`.
fn valid_name(name: &str) -> Result<(), BenchError> {
    let valid = !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if !valid {
        return Err(BenchError::Other(format!("invalid name `{name}`: use letters, digits, - and _")));
    }
    Ok(())
}

fn create_cgroup(name: &str) -> Result<PathBuf, BenchError> {
    valid_name(name)?;
    let mount = cgroup2_mount().ok_or_else(|| BenchError::Other("no cgroup2 mount found in /proc/self/mountinfo".into()))?;
    let dir = mount.join(format!("profiler-bench-{name}"));
    match std::fs::create_dir(&dir) {
        Ok(()) => Ok(dir),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(dir),
        Err(source) => Err(BenchError::Io { path: dir, source }),
    }
}

/// Polls `GET /json` on 127.0.0.1:`port` every millisecond until a 200 or `timeout`.
pub async fn wait_ready(port: u16, timeout: Duration) -> bool {
    tokio::task::spawn_blocking(move || {
        let deadline = Instant::now() + timeout;
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        while Instant::now() < deadline {
            if http_status(addr, "/json") == Some(200) {
                return true;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        false
    })
    .await
    .unwrap_or(false)
}

/// Status code of a plain `GET path` over HTTP/1.1, or `None` when nothing answered.
fn http_status(addr: SocketAddr, path: &str) -> Option<u16> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_millis(200)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    write!(s, "GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n").ok()?;
    let mut buf = [0u8; 64];
    let n = s.read(&mut buf).ok()?;
    let head = std::str::from_utf8(&buf[..n]).ok()?;
    head.strip_prefix("HTTP/1.1 ")?.get(..3)?.parse().ok()
}

/// Now, UTC, RFC 3339 to the second (`2026-12-01T06:56:16Z`): the format of
/// `results.json`'s `started_at` and `finished_at`.
pub fn now_rfc3339() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| s.lines().find_map(|l| l.strip_prefix("model name").map(|v| v.trim_start_matches([' ', '\t', ':']).to_string())))
        .unwrap_or_default()
}

/// One wrk run of `test` for `duration` against `env`'s app, with the app and PostgreSQL CPU
/// and memory sampled while it runs (wrk settings from `opts`; `scratch` holds wrk's script).
///
/// # Errors
/// [`BenchError::Load`] when wrk fails; [`BenchError::Other`] when its task panicked.
pub async fn measured_run(env: &Environment, opts: &BenchOptions, test: Test, duration: Duration, token: &str, scratch: &Path) -> Result<RunResult, BenchError> {
    let app_sampler = Sampler::start(env.target.pid, SAMPLE_INTERVAL);
    let pg_sampler = env.pg_pid.map(|pid| Sampler::start(pid, SAMPLE_INTERVAL));
    let wrk = WrkOptions {
        base_url: env.target.base_url.clone(),
        test,
        duration,
        connections: opts.connections,
        threads: opts.threads,
        cpus: Some(opts.load_cpus.clone()),
        token: test.authenticated().then(|| token.to_string()),
        timeout: opts.request_timeout,
    };
    let scratch = scratch.to_path_buf();
    let result = tokio::task::spawn_blocking(move || load::run(&wrk, &scratch))
        .await
        .map_err(|e| BenchError::Other(format!("wrk task: {e}")))?;
    let app: Usage = app_sampler.finish();
    let postgres = pg_sampler.map(Sampler::finish);
    Ok(RunResult { wrk: result?, app, postgres })
}

/// The counting run after a profiled run ([`ProfileHook::start_counting`]): the counters set
/// up, a load run of at most [`COUNTING_RUN_MAX`], the counts written with its completed
/// requests. Counters that cannot be set up cost a line, not the bench. Returns the run's
/// failed requests (reported with the test's, as every run's are).
///
/// # Errors
/// The load run's own failure.
#[allow(clippy::too_many_arguments)]
async fn count_calls(
    env: &Environment,
    opts: &BenchOptions,
    hook: &dyn ProfileHook,
    test: Test,
    dir: &Path,
    token: &str,
    scratch: &Path,
    progress: &dyn Progress,
) -> Result<u64, BenchError> {
    let session = match hook.start_counting(&env.target, dir) {
        Ok(Some(session)) => session,
        Ok(None) => return Ok(0),
        Err(e) => {
            progress.done(&format!("{test}: no call counts: {e}"));
            return Ok(0);
        }
    };
    let duration = opts.duration.min(COUNTING_RUN_MAX);
    progress.step(&format!("{test}: counting run ({} s, library calls counted with uprobes)", duration.as_secs()), duration);
    let run = measured_run(env, opts, test, duration, token, scratch).await;
    let requests = run.as_ref().map_or(0, |r| r.wrk.requests);
    let finished = tokio::task::spawn_blocking(move || session.finish(requests)).await.unwrap_or_else(|e| Err(format!("counting task: {e}")));
    let run = run?;
    match finished {
        Ok(summary) => progress.done(&format!("{test}: counting run {:.0} req/s, {summary}", run.wrk.req_per_s)),
        Err(e) => progress.done(&format!("{test}: counting failed: {e}")),
    }
    Ok(run.wrk.failed())
}

/// Runs the whole benchmark. `results` receives every measurement as soon as it is made, so
/// that an interrupted run still has what it measured. Writes nothing itself: the caller
/// writes results.json and the reports.
pub async fn run(
    opts: &BenchOptions,
    hook: Option<&dyn ProfileHook>,
    progress: &dyn Progress,
    results: Arc<Mutex<BenchResults>>,
) -> Result<(), BenchError> {
    std::fs::create_dir_all(&opts.out_dir).map_err(|source| BenchError::Io { path: opts.out_dir.clone(), source })?;
    {
        let mut r = results.lock().unwrap_or_else(|e| e.into_inner());
        r.schema_version = crate::results::RESULTS_SCHEMA_VERSION;
        r.started_at = now_rfc3339();
        r.cpus = std::thread::available_parallelism().map_or(1, |n| n.get() as u32);
        r.cpu_model = cpu_model();
        r.settings = Settings {
            tests: opts.tests.clone(),
            runs: opts.runs,
            duration_s: opts.duration.as_secs(),
            warmup_s: opts.warmup.as_secs(),
            connections: opts.connections,
            threads: opts.threads,
            app_cpus: opts.app_cpus.clone(),
            load_cpus: opts.load_cpus.clone(),
            pg_cpus: opts.pg_cpus.clone(),
            costs: opts.costs.clone(),
            pool_size: opts.pool_size,
            name: opts.name.clone(),
            docker: opts.docker,
            external_database: opts.database_url.is_some(),
            frequency_hz: if hook.is_some() { opts.frequency_hz } else { 0 },
            smoke: opts.smoke,
        };
    }
    let mut env = Environment::start(opts, progress).await?;
    let outcome = measure(&mut env, opts, hook, progress, &results).await;
    env.shutdown().await;
    results.lock().unwrap_or_else(|e| e.into_inner()).finished_at = now_rfc3339();
    outcome
}

async fn measure(
    env: &mut Environment,
    opts: &BenchOptions,
    hook: Option<&dyn ProfileHook>,
    progress: &dyn Progress,
    results: &Arc<Mutex<BenchResults>>,
) -> Result<(), BenchError> {
    {
        let mut r = results.lock().unwrap_or_else(|e| e.into_inner());
        r.versions = env.versions.clone();
        r.time_to_ready_ms = env.time_to_ready_ms;
        r.idle_rss_bytes = env.idle_rss_bytes;
    }

    // The conformance gate: one failure and nothing is measured.
    progress.step("conformance gate", Duration::from_secs(5));
    let report = crate::conformance::run(&env.target.base_url, &opts.jwt_secret).await;
    let conformance = ConformanceResult {
        passed: report.passed() as u32,
        failed: report.failed() as u32,
        failures: report.failures().map(|c| format!("{}: {}", c.name, c.detail.as_deref().unwrap_or("failed"))).collect(),
    };
    results.lock().unwrap_or_else(|e| e.into_inner()).conformance = conformance.clone();
    if conformance.failed > 0 {
        return Err(BenchError::Conformance {
            failed: conformance.failed,
            total: conformance.passed + conformance.failed,
            list: conformance.failures.join("\n"),
        });
    }
    progress.done(&format!("conformance: {} passed, 0 failed", conformance.passed));
    let deleted = env.reset_deals()?;
    if deleted > 0 {
        progress.done(&format!("deals reset to the seed (the gate had inserted {deleted})"));
    }

    let token = crate::token::mint_valid(&opts.jwt_secret, 1);
    let scratch = tempfile::tempdir().map_err(|source| BenchError::Io { path: "<tempdir>".into(), source })?;

    for &test in &opts.tests {
        if !opts.warmup.is_zero() {
            progress.step(&format!("{test}: warm-up {} s", opts.warmup.as_secs()), opts.warmup);
            let warm = measured_run(env, opts, test, opts.warmup, &token, scratch.path()).await?;
            progress.done(&format!("{test}: warm-up {:.0} req/s", warm.wrk.req_per_s));
        }
        let mut runs = Vec::new();
        for i in 0..opts.runs.max(1) {
            progress.step(&format!("{test}: run {}/{} ({} s)", i + 1, opts.runs.max(1), opts.duration.as_secs()), opts.duration);
            let run = measured_run(env, opts, test, opts.duration, &token, scratch.path()).await?;
            progress.done(&format!(
                "{test}: run {}: {:.0} req/s, p99 {:.2} ms, {} failed",
                i + 1,
                run.wrk.req_per_s,
                run.wrk.latency.p99_us as f64 / 1e3,
                run.wrk.failed()
            ));
            runs.push(run);
            // Kept as soon as measured: an interrupted bench still reports this test's
            // finished runs (results.json `unfinished`).
            results.lock().unwrap_or_else(|e| e.into_inner()).unfinished = Some(TestResult::from_runs(test, runs.clone()));
        }
        let mut result = TestResult::from_runs(test, runs);
        if let Some(hook) = hook {
            let dir = opts.out_dir.join(test.name());
            // The agent attaches to the app's cgroup, then the app is restarted under it, so
            // that its database connections are opened and its statements prepared in view
            // of the wire capture (a driver prepares each statement once per connection), and
            // warmed up under the agent before the measured profiled run. The profile covers
            // restart, warm-up and run: its per-request figures use the wire's own request
            // count over that window, not wrk's count of the run alone.
            let restart = env.target.cgroup.is_some();
            let warm = if restart { opts.warmup.clamp(Duration::from_secs(1), PROFILED_WARMUP_MAX) } else { Duration::ZERO };
            progress.step(
                &format!(
                    "{test}: profiled run ({}{} s, agent attached)",
                    if restart { format!("app restarted under the agent, {} s warm-up + ", warm.as_secs()) } else { String::new() },
                    opts.duration.as_secs()
                ),
                opts.duration + warm,
            );
            match hook.start(&env.target, test, &dir, opts.duration + warm + Duration::from_secs(2)) {
                Ok(session) => {
                    let mut run = Ok(());
                    if restart {
                        run = env.restart_app(None).await;
                        if run.is_ok() {
                            run = measured_run(env, opts, test, warm, &token, scratch.path()).await.map(|_| ());
                        }
                    }
                    let run = match run {
                        Ok(()) => {
                            session.measured_part_begins();
                            measured_run(env, opts, test, opts.duration, &token, scratch.path()).await
                        }
                        Err(e) => Err(e),
                    };
                    let finished = tokio::task::spawn_blocking(move || session.finish())
                        .await
                        .unwrap_or_else(|e| Err(format!("profiling task: {e}")));
                    match (run, finished) {
                        (Ok(run), Ok((samples, summary))) => {
                            let ratio = if result.req_per_s > 0.0 { run.wrk.req_per_s / result.req_per_s } else { 0.0 };
                            progress.done(&format!(
                                "{test}: profiled {:.0} req/s ({:.3} of unprofiled), {samples} samples",
                                run.wrk.req_per_s, ratio
                            ));
                            result.failed_requests += run.wrk.failed();
                            result.profiled =
                                Some(ProfiledRun { run, throughput_ratio: ratio, dir: test.name().to_string(), samples, summary });
                        }
                        (Err(e), _) => return Err(e),
                        (Ok(_), Err(e)) => {
                            progress.done(&format!("{test}: profiling failed: {e}"));
                            result.profile_error = Some(e);
                        }
                    }
                    if result.profiled.is_some() {
                        result.failed_requests += count_calls(env, opts, hook, test, &dir, &token, scratch.path(), progress).await?;
                    }
                }
                Err(e) => {
                    progress.done(&format!("{test}: could not attach: {e}"));
                    result.profile_error = Some(e);
                }
            }
        }
        let mut r = results.lock().unwrap_or_else(|e| e.into_inner());
        r.unfinished = None;
        r.tests.push(result);
    }

    if opts.drift {
        if let Some(&first) = opts.tests.first() {
            progress.step(&format!("drift check: {first} again"), opts.duration);
            let run = measured_run(env, opts, first, opts.duration, &token, scratch.path()).await?;
            let mut r = results.lock().unwrap_or_else(|e| e.into_inner());
            let first_rps = r.tests.first().map_or(0.0, |t| t.req_per_s);
            let change = if first_rps > 0.0 { (run.wrk.req_per_s - first_rps) / first_rps * 100.0 } else { 0.0 };
            r.drift = Some(Drift { test: first, first_req_per_s: first_rps, repeat_req_per_s: run.wrk.req_per_s, change_pct: change });
            drop(r);
            progress.done(&format!("drift: {change:+.1}%"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The holder is in the cgroup while it lives, and gone when dropped, or when the thread
    /// that started it ends without dropping it (a bench killed half-way).
    #[test]
    fn the_cgroup_holder_never_outlives_its_owner() {
        let cgroup = cgroup2_mount().unwrap().join(format!("profiler-test-holder-{}", std::process::id()));
        std::fs::create_dir(&cgroup).unwrap();
        let procs = || std::fs::read_to_string(cgroup.join("cgroup.procs")).unwrap();
        let holder = CgroupHolder::start(&cgroup).expect("a holder (root, cgroup v2)");
        let pid = holder.0.id();
        assert_eq!(procs().trim(), pid.to_string());
        drop(holder);
        assert_eq!(procs(), "", "dropped holder {pid} still in the cgroup");

        // Leaked by a thread that then ends: the kernel kills it (PR_SET_PDEATHSIG).
        let pid = std::thread::spawn({
            let cgroup = cgroup.clone();
            move || {
                let holder = CgroupHolder::start(&cgroup).unwrap();
                let pid = holder.0.id();
                std::mem::forget(holder);
                pid
            }
        })
        .join()
        .unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while !procs().is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(procs(), "", "leaked holder {pid} outlived its thread");
        // Reap the killed child (it is ours), then remove the cgroup.
        // SAFETY: waitpid on our own child's pid.
        unsafe { libc::waitpid(pid as i32, std::ptr::null_mut(), 0) };
        std::fs::remove_dir(&cgroup).unwrap();
    }

    #[test]
    fn finds_the_cgroup2_mount() {
        let m = cgroup2_mount().expect("this machine has a cgroup2 mount");
        assert!(m.join("cgroup.procs").exists(), "{}", m.display());
    }

    #[test]
    fn database_ports_from_urls() {
        assert_eq!(db_port_of("postgres://crm:crm@127.0.0.1:40799/crm"), Some(40799));
        assert_eq!(db_port_of("postgres://crm@localhost/crm"), Some(5432));
        assert_eq!(db_port_of("postgres://[::1]/crm"), Some(5432));
        assert_eq!(db_port_of("postgres://u:p@[::1]:6543/crm"), Some(6543));
        assert_eq!(db_port_of("nonsense"), None);
    }

    #[test]
    fn a_busy_preferred_port_is_avoided() {
        let held = TcpListener::bind(("127.0.0.1", 0)).unwrap();
        let busy = held.local_addr().unwrap().port();
        let got = free_port(busy).unwrap();
        assert_ne!(got, busy);
    }
}
