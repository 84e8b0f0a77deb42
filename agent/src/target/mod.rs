//! What to profile: a process, a cgroup or a Docker container, resolved to what the BPF
//! filter needs (a cgroup v2 id and depth, or a set of process ids), the processes of the
//! target, a CPU-time counter and a way to read files as the target sees them.
//!
//! Resolution on this kind of host (Docker 20.10, cgroup v1 hybrid, cgroupfs driver):
//! a container's process has a `0::/docker/<id>` line in `/proc/PID/cgroup`, and
//! `<cgroup2 mount>/docker/<id>` exists, so the kernel-side filter is the cgroup v2 id
//! (the inode of that directory, which is what `bpf_get_current_cgroup_id()` returns).
//! Where the `0::` line is `/` (a pure cgroup v1 host), the filter falls back to the set
//! of the container's processes, read from its cgroup v1 `cgroup.procs` and refreshed
//! during the run ([`ResolvedTarget::refresh_pids`]).

use std::collections::BTreeSet;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::path::{Component, Path, PathBuf};

/// Errors of target resolution.
#[derive(Debug, thiserror::Error)]
pub enum TargetError {
    /// No process with this pid.
    #[error("no process with pid {0}")]
    NoSuchPid(u32),
    /// The pid is a thread of another process (its thread id, as `top -H` or a stack shows).
    #[error("pid {pid} is a thread of process {process}: pass --pid {process}")]
    ThreadOfProcess {
        /// The pid as given (a thread id).
        pid: u32,
        /// Its process (`Tgid` of `/proc/PID/status`).
        process: u32,
    },
    /// The pid is a kernel thread: no user code to profile.
    #[error("pid {0} is a kernel thread: it runs no user code to profile")]
    KernelThread(u32),
    /// The cgroup directory does not exist or is not a cgroup2 directory.
    #[error("{path} is not a cgroup v2 directory (cgroup2 is mounted at {mount})")]
    NotACgroup {
        /// The path as given.
        path: PathBuf,
        /// Where cgroup2 is mounted.
        mount: PathBuf,
    },
    /// No cgroup2 file system in `/proc/self/mountinfo`.
    #[error("no cgroup2 file system is mounted (looked in /proc/self/mountinfo)")]
    NoCgroup2,
    /// No container of that name or id; lists the running ones.
    #[error("no container named {name:?}; running containers: {}", if running.is_empty() { "none".to_string() } else { running.join(", ") })]
    ContainerNotFound {
        /// The name asked for.
        name: String,
        /// Names of the running containers.
        running: Vec<String>,
    },
    /// The container exists but has no running process.
    #[error("container {0:?} is not running")]
    ContainerNotRunning(String),
    /// No Docker engine answered on its socket (`DOCKER_HOST`, else `/var/run/docker.sock`).
    #[error("cannot reach the Docker engine ({0}); is dockerd running? (--pid or --cgroup need no engine)")]
    DockerUnreachable(String),
    /// The Docker engine answered with an error.
    #[error("docker: {0}")]
    Docker(#[from] bollard::errors::Error),
    /// A path inside the target was refused (absolute escape, `..`).
    #[error("refusing path {0:?}: it must be absolute and free of `..`")]
    BadPath(String),
    /// Reading a file of /proc or /sys failed.
    #[error("reading {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> TargetError + '_ {
    move |source| TargetError::Io { path: path.to_path_buf(), source }
}

/// A target as the user names it on the command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// One process, all of its threads (host pid).
    Pid(u32),
    /// A cgroup v2 directory, absolute (`/sys/fs/cgroup/unified/system.slice/x.service`) or
    /// relative to the cgroup2 mount (`/system.slice/x.service`); its descendants included.
    Cgroup(PathBuf),
    /// A Docker container, by name or id.
    Container(String),
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Target::Pid(pid) => write!(f, "pid {pid}"),
            Target::Cgroup(path) => write!(f, "cgroup {}", path.display()),
            Target::Container(name) => write!(f, "container {name}"),
        }
    }
}

/// How the BPF programs recognise the target's tasks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Filter {
    /// Tasks whose cgroup v2 ancestor at depth `level` has id `id`.
    Cgroup {
        /// cgroup v2 id: inode number of the cgroup directory.
        id: u64,
        /// Depth of the directory below the cgroup2 root (root = 0).
        level: u32,
    },
    /// Tasks whose tgid is in the set (kept current by the collector).
    Pids(BTreeSet<u32>),
}

/// Where the current list of the target's processes comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
enum PidSource {
    /// A single process (gone when `/proc/PID` is gone).
    Process(u32),
    /// `cgroup.procs` of this directory and of all its descendants (v2 or v1).
    CgroupTree(PathBuf),
}

/// A target resolved against the running system.
#[derive(Debug, Clone)]
pub struct ResolvedTarget {
    /// The target as the user named it, e.g. `container navree` (goes to `Meta::target`).
    pub description: String,
    /// The kernel-side filter.
    pub filter: Filter,
    /// The cgroup v2 directory of the target, when it has one of its own.
    pub cgroup_dir: Option<PathBuf>,
    /// A process of the target whose root file system is the target's (container init,
    /// the pid itself); see [`ResolvedTarget::path_in_root`].
    pub main_pid: u32,
    source: PidSource,
}

impl Target {
    /// Resolves the target. Blocking; for a container it talks to the Docker engine on its
    /// local socket (negotiating the API version: Debian's engine speaks 1.41) on a
    /// private single-threaded runtime, so it must not be called from inside an async
    /// runtime.
    ///
    /// Errors: [`TargetError::NoSuchPid`], [`TargetError::NotACgroup`],
    /// [`TargetError::ContainerNotFound`] (listing the running containers), ...
    pub fn resolve(&self) -> Result<ResolvedTarget, TargetError> {
        let description = self.to_string();
        match self {
            Target::Pid(pid) => {
                let pid = *pid;
                let stat = (pid != 0).then(|| crate::sys::stat::read(pid)).flatten().filter(|s| s.is_live()).ok_or(TargetError::NoSuchPid(pid))?;
                if stat.is_kernel_thread() {
                    return Err(TargetError::KernelThread(pid));
                }
                // /proc/TID exists for every thread too (hidden from listings): a thread id
                // would filter on that one thread and read its process's CPU.
                if let Some(process) = thread_group(pid).filter(|&t| t != pid) {
                    return Err(TargetError::ThreadOfProcess { pid, process });
                }
                Ok(ResolvedTarget {
                    description,
                    filter: Filter::Pids(BTreeSet::from([pid])),
                    cgroup_dir: None,
                    main_pid: pid,
                    source: PidSource::Process(pid),
                })
            }
            Target::Cgroup(path) => {
                let mount = cgroup2_mount()?;
                let dir = if path.starts_with(&mount) { path.clone() } else { join_inside(&mount, path)? };
                let not_a_cgroup = || TargetError::NotACgroup { path: path.clone(), mount: mount.clone() };
                if !dir.join("cgroup.procs").is_file() {
                    return Err(not_a_cgroup());
                }
                let level = cgroup_level(&mount, &dir).ok_or_else(not_a_cgroup)?;
                let id = fs::metadata(&dir).map_err(io_err(&dir))?.ino();
                let source = PidSource::CgroupTree(dir.clone());
                let main_pid = source.pids()?.into_iter().next().unwrap_or(0);
                Ok(ResolvedTarget { description, filter: Filter::Cgroup { id, level }, cgroup_dir: Some(dir), main_pid, source })
            }
            Target::Container(name) => {
                let pid = container_pid(name)?;
                resolve_process_cgroup(description, pid)
            }
        }
    }
}

/// Resolves the cgroup of process `pid` (a container's init): cgroup v2 filter when its
/// `0::` line names a cgroup of its own, else the pid set of its cgroup v1 tree.
fn resolve_process_cgroup(description: String, pid: u32) -> Result<ResolvedTarget, TargetError> {
    let cgroup_file = PathBuf::from(format!("/proc/{pid}/cgroup"));
    let text = fs::read_to_string(&cgroup_file).map_err(io_err(&cgroup_file))?;
    let v2_path = text.lines().find_map(|l| l.strip_prefix("0::")).map(str::to_owned);
    if let Some(rel) = v2_path.filter(|p| p != "/") {
        let mount = cgroup2_mount()?;
        let dir = join_inside(&mount, Path::new(&rel))?;
        let level = cgroup_level(&mount, &dir)
            .ok_or_else(|| TargetError::NotACgroup { path: dir.clone(), mount: mount.clone() })?;
        let id = fs::metadata(&dir).map_err(io_err(&dir))?.ino();
        return Ok(ResolvedTarget {
            description,
            filter: Filter::Cgroup { id, level },
            cgroup_dir: Some(dir.clone()),
            main_pid: pid,
            source: PidSource::CgroupTree(dir),
        });
    }
    // cgroup v1 only: the `pids` (or any named) hierarchy lists the container's processes.
    let v1 = text
        .lines()
        .filter_map(|l| {
            let mut parts = l.splitn(3, ':');
            let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
            Some((controllers.to_owned(), path.to_owned()))
        })
        .find(|(c, p)| c.split(',').any(|c| c == "pids" || c == "cpuacct" || c == "memory") && p != "/");
    let source = match v1 {
        Some((controllers, rel)) => {
            let controller = controllers.split(',').next().unwrap_or_default().to_owned();
            let dir = join_inside(&PathBuf::from("/sys/fs/cgroup").join(controller), Path::new(&rel))?;
            PidSource::CgroupTree(dir)
        }
        None => PidSource::Process(pid),
    };
    let pids = source.pids()?;
    Ok(ResolvedTarget { description, filter: Filter::Pids(pids), cgroup_dir: None, main_pid: pid, source })
}

impl ResolvedTarget {
    /// The target's processes right now (host pids). Empty when the target is gone.
    pub fn pids(&self) -> Result<BTreeSet<u32>, TargetError> {
        self.source.pids()
    }

    /// For a [`Filter::Pids`] target: re-reads the process set and returns it when it
    /// changed (the collector then updates `target_pids`). `None` for a cgroup filter, which
    /// follows new processes by itself.
    pub fn refresh_pids(&mut self) -> Result<Option<BTreeSet<u32>>, TargetError> {
        let Filter::Pids(current) = &mut self.filter else { return Ok(None) };
        let fresh = self.source.pids()?;
        if &fresh == current {
            return Ok(None);
        }
        *current = fresh.clone();
        Ok(Some(fresh))
    }

    /// True while the target has at least one live process.
    pub fn is_alive(&self) -> bool {
        self.source.pids().map(|p| !p.is_empty()).unwrap_or(false)
    }

    /// CPU time the target has used so far, ns: `usage_usec` of its cgroup v2 `cpu.stat`
    /// (all its processes, exited ones included), or for a process `utime + stime` of
    /// `/proc/PID/stat` (all threads; clock ticks converted with `_SC_CLK_TCK`).
    /// `None` when it cannot be read (the process is gone).
    pub fn cpu_time_ns(&self) -> Option<u64> {
        if let Some(dir) = &self.cgroup_dir {
            let text = fs::read_to_string(dir.join("cpu.stat")).ok()?;
            let usec: u64 = text.lines().find_map(|l| l.strip_prefix("usage_usec "))?.trim().parse().ok()?;
            return Some(usec * 1000);
        }
        let pids = self.source.pids().ok()?;
        if pids.is_empty() {
            return None; // gone: no reading, rather than 0
        }
        let mut total = 0;
        for pid in pids {
            total += process_cpu_ns(pid)?;
        }
        Some(total)
    }

    /// CPUs the target may use, a fraction where a quota says so: the smallest of its cgroup's
    /// `cpu.max` (quota / period), its cgroup's `cpuset.cpus.effective`, and its main
    /// process's affinity (`sched_getaffinity(2)`). `None` when none can be read. The
    /// capacity its measured CPU use is a share of (the bound of an attach).
    pub fn cpu_capacity(&self) -> Option<f64> {
        cpu_capacity_of(self.cgroup_dir.as_deref(), self.main_pid)
    }

    /// The host path under which `path` (absolute, as the target's process sees it) can be
    /// read: `/proc/<main_pid>/root/<path>`. The kernel resolves it in the process's mount
    /// namespace, so no host path is built from container-controlled strings.
    /// Errors: [`TargetError::BadPath`] when `path` is relative or contains `..`.
    pub fn path_in_root(&self, path: &str) -> Result<PathBuf, TargetError> {
        join_inside(&PathBuf::from(format!("/proc/{}/root", self.main_pid)), Path::new(path))
            .map_err(|_| TargetError::BadPath(path.to_owned()))
    }
}

impl PidSource {
    fn pids(&self) -> Result<BTreeSet<u32>, TargetError> {
        match self {
            PidSource::Process(pid) => Ok(if process_is_live(*pid) { BTreeSet::from([*pid]) } else { BTreeSet::new() }),
            PidSource::CgroupTree(dir) => {
                let mut pids = BTreeSet::new();
                collect_cgroup_procs(dir, &mut pids)?;
                Ok(pids)
            }
        }
    }
}

fn collect_cgroup_procs(dir: &Path, pids: &mut BTreeSet<u32>) -> Result<(), TargetError> {
    let procs = dir.join("cgroup.procs");
    match fs::read_to_string(&procs) {
        Ok(text) => pids.extend(text.lines().filter_map(|l| l.trim().parse::<u32>().ok())),
        // The cgroup was removed (container stopped): no processes.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(TargetError::Io { path: procs, source: e }),
    }
    let Ok(entries) = fs::read_dir(dir) else { return Ok(()) };
    for entry in entries.flatten() {
        if entry.file_type().map(|t| t.is_dir()).unwrap_or(false) {
            collect_cgroup_procs(&entry.path(), pids)?;
        }
    }
    Ok(())
}

/// CPUs a process may use, a fraction where a quota says so: the smallest of `cgroup_dir`'s
/// `cpu.max` (quota / period) and `cpuset.cpus.effective`, when a directory is given, of the
/// quota of `pid`'s cgroup v1 `cpu` hierarchy (`cpu.cfs_quota_us / cpu.cfs_period_us`: where
/// Docker puts `--cpus` on a hybrid host), and of `pid`'s affinity (`sched_getaffinity(2)`,
/// which a cpuset of either version also narrows). `None` when none can be read.
pub fn cpu_capacity_of(cgroup_dir: Option<&Path>, pid: u32) -> Option<f64> {
    let mut cap: Option<f64> = None;
    let mut take = |c: f64| cap = Some(cap.map_or(c, |m: f64| m.min(c)));
    if let Some(dir) = crate::sys::cgroup::cgroup1_dir_of(pid, "cpu") {
        let read = |f: &str| fs::read_to_string(dir.join(f)).ok().and_then(|t| t.trim().parse::<f64>().ok());
        if let (Some(quota), Some(period)) = (read("cpu.cfs_quota_us"), read("cpu.cfs_period_us")) {
            if quota > 0.0 && period > 0.0 {
                take(quota / period);
            }
        }
    }
    if let Some(dir) = cgroup_dir {
        if let Some(q) = fs::read_to_string(dir.join("cpu.max")).ok().as_deref().and_then(quota_cpus) {
            take(q);
        }
        if let Some(n) = fs::read_to_string(dir.join("cpuset.cpus.effective")).ok().and_then(|l| crate::sys::cpus::parse_list(l.trim())) {
            if !n.is_empty() {
                take(n.len() as f64);
            }
        }
    }
    let n = crate::sys::cpus::allowed_of(pid).len();
    if n > 0 {
        take(n as f64);
    }
    cap
}

/// [`cpu_capacity_of`] process `pid` with its own cgroup v2 directory (its `0::` line of
/// `/proc/PID/cgroup`, unless that is the root), e.g. a database server's.
pub fn process_cpu_capacity(pid: u32) -> Option<f64> {
    let text = fs::read_to_string(format!("/proc/{pid}/cgroup")).ok()?;
    let dir = text
        .lines()
        .find_map(|l| l.strip_prefix("0::"))
        .filter(|p| *p != "/")
        .and_then(|rel| join_inside(&cgroup2_mount().ok()?, Path::new(rel)).ok());
    cpu_capacity_of(dir.as_deref(), pid)
}

/// True when `/proc/PID/stat` exists and the state is not zombie or dead
/// ([`crate::sys::stat::ProcStat::is_live`]).
/// `Tgid` of `/proc/PID/status`: the process a thread id belongs to (the pid itself for a
/// process's main thread); `None` when unreadable.
fn thread_group(pid: u32) -> Option<u32> {
    let text = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    text.lines().find_map(|l| l.strip_prefix("Tgid:")).and_then(|v| v.trim().parse().ok())
}

fn process_is_live(pid: u32) -> bool {
    crate::sys::stat::read(pid).is_some_and(|s| s.is_live())
}

/// `utime + stime` of `/proc/PID/stat`, in ns.
fn process_cpu_ns(pid: u32) -> Option<u64> {
    crate::sys::stat::read(pid).map(|s| s.cpu_ns())
}

/// Mount point of the cgroup2 file system ([`crate::sys::cgroup::cgroup2_mount`]).
///
/// # Errors
/// `/proc/self/mountinfo` unreadable, or no cgroup2 file system in it.
pub fn cgroup2_mount() -> Result<PathBuf, TargetError> {
    let path = Path::new(crate::sys::cgroup::MOUNTINFO);
    crate::sys::cgroup::cgroup2_mount().map_err(io_err(path))?.ok_or(TargetError::NoCgroup2)
}

/// Depth of `dir` below the cgroup2 root `mount` (the root is level 0).
fn cgroup_level(mount: &Path, dir: &Path) -> Option<u32> {
    let rel = dir.strip_prefix(mount).ok()?;
    Some(rel.components().filter(|c| matches!(c, Component::Normal(_))).count() as u32)
}

/// `base` joined with `inner` (absolute or relative), refusing `..` and other
/// non-normal components so the result cannot leave `base` lexically.
fn join_inside(base: &Path, inner: &Path) -> Result<PathBuf, TargetError> {
    let mut out = base.to_path_buf();
    for component in inner.components() {
        match component {
            Component::RootDir | Component::CurDir => {}
            Component::Normal(part) => out.push(part),
            Component::ParentDir | Component::Prefix(_) => {
                return Err(TargetError::BadPath(inner.display().to_string()))
            }
        }
    }
    Ok(out)
}

/// CPUs of a cgroup v2 `cpu.max` (`QUOTA PERIOD` in µs, or `max PERIOD`): quota / period,
/// `None` without a quota.
fn quota_cpus(text: &str) -> Option<f64> {
    let mut w = text.split_whitespace();
    let (quota, period) = (w.next()?, w.next()?);
    let (quota, period): (f64, f64) = (quota.parse().ok()?, period.parse().ok()?);
    (quota > 0.0 && period > 0.0).then(|| quota / period)
}

/// `State.Pid` of a running container, via the Docker engine API.
fn container_pid(name: &str) -> Result<u32, TargetError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| TargetError::Io { path: PathBuf::from("tokio runtime"), source: e })?;
    runtime.block_on(async {
        let unreachable = |e: bollard::errors::Error| TargetError::DockerUnreachable(e.to_string());
        let docker = bollard::Docker::connect_with_local_defaults()
            .map_err(unreachable)?
            .negotiate_version()
            .await
            .map_err(unreachable)?;
        let inspect = match docker.inspect_container(name, None::<bollard::query_parameters::InspectContainerOptions>).await {
            Ok(inspect) => inspect,
            Err(bollard::errors::Error::DockerResponseServerError { status_code: 404, .. }) => {
                let running = docker
                    .list_containers(None::<bollard::query_parameters::ListContainersOptions>)
                    .await?
                    .into_iter()
                    .filter_map(|c| c.names.and_then(|n| n.first().cloned()))
                    .map(|n| n.trim_start_matches('/').to_owned())
                    .collect();
                return Err(TargetError::ContainerNotFound { name: name.to_owned(), running });
            }
            Err(e) => return Err(e.into()),
        };
        let state = inspect.state.unwrap_or_default();
        match state.pid {
            Some(pid) if pid > 0 && state.running == Some(true) => Ok(pid as u32),
            _ => Err(TargetError::ContainerNotRunning(name.to_owned())),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_max_quota() {
        assert_eq!(quota_cpus("150000 100000\n"), Some(1.5));
        assert_eq!(quota_cpus("max 100000\n"), None);
        assert_eq!(quota_cpus(""), None);
    }

    #[test]
    fn join_inside_refuses_parent_components() {
        assert_eq!(join_inside(Path::new("/proc/1/root"), Path::new("/etc/passwd")).unwrap(), PathBuf::from("/proc/1/root/etc/passwd"));
        assert!(join_inside(Path::new("/proc/1/root"), Path::new("/../../etc/shadow")).is_err());
        assert!(join_inside(Path::new("/sys/fs/cgroup"), Path::new("a/../../b")).is_err());
    }

    #[test]
    fn cgroup_level_counts_components() {
        assert_eq!(cgroup_level(Path::new("/sys/fs/cgroup/unified"), Path::new("/sys/fs/cgroup/unified")), Some(0));
        assert_eq!(cgroup_level(Path::new("/sys/fs/cgroup/unified"), Path::new("/sys/fs/cgroup/unified/docker/abc")), Some(2));
        assert_eq!(cgroup_level(Path::new("/sys/fs/cgroup/unified"), Path::new("/tmp")), None);
    }

    /// A thread id is not a process (a fresh user passed a worker's id from `top -H` and got
    /// an empty profile with exit 0), and a kernel thread has no user code: each is one line.
    #[test]
    fn a_thread_id_or_a_kernel_thread_is_not_a_target() {
        let (tx, rx) = std::sync::mpsc::channel();
        let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
        let t = std::thread::spawn(move || {
            // SAFETY: gettid has no preconditions.
            tx.send(unsafe { libc::gettid() } as u32).unwrap();
            done_rx.recv().ok();
        });
        let tid = rx.recv().unwrap();
        let me = std::process::id();
        let e = Target::Pid(tid).resolve().err().expect("a thread id refused");
        assert!(matches!(e, TargetError::ThreadOfProcess { pid, process } if pid == tid && process == me), "{e}");
        assert_eq!(e.to_string(), format!("pid {tid} is a thread of process {me}: pass --pid {me}"));
        done_tx.send(()).unwrap();
        t.join().unwrap();
        assert!(Target::Pid(me).resolve().is_ok());
        // kthreadd is pid 2 in the host's pid namespace.
        if crate::sys::stat::read(2).is_some_and(|s| s.is_kernel_thread()) {
            assert!(matches!(Target::Pid(2).resolve(), Err(TargetError::KernelThread(2))));
        }
    }

    #[test]
    fn own_process_cpu_time_matches_getrusage() {
        // Burn 200 ms of this thread's own CPU (not of wall time: a busy machine gives the
        // thread less than that in 200 ms) so the counters move, then compare with the
        // kernel's getrusage.
        let thread_cpu_ns = crate::collect::current_thread_cpu_ns;
        let start = thread_cpu_ns();
        let mut x = 0u64;
        while thread_cpu_ns() - start < 200_000_000 {
            for _ in 0..1000 {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            }
        }
        std::hint::black_box(x);
        let rusage_ns = || {
            let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
            // SAFETY: usage is a valid out pointer.
            assert_eq!(unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) }, 0);
            let tv = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1000;
            tv(usage.ru_utime) + tv(usage.ru_stime)
        };
        // The other tests of this binary run on other threads of the process and burn CPU
        // meanwhile: the reading must fall between the kernel's figures just before and just
        // after it, give or take /proc/PID/stat's clock-tick resolution (10 ms; 30 allowed).
        let before = rusage_ns();
        let ours = process_cpu_ns(std::process::id()).unwrap();
        let after = rusage_ns();
        assert!(ours + 30_000_000 >= before && ours <= after + 30_000_000, "stat {ours} ns, getrusage {before}..{after} ns");
        assert!(ours >= 150_000_000, "burned 200 ms but stat says {ours} ns");
    }
}
