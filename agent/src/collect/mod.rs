//! The kernel-facing half of the agent: loads the BPF objects of `agent-ebpf` with aya 0.14,
//! sets their knobs, attaches them, keeps the target filter current and drains the maps
//! into a [`RawProfile`].
//!
//! - On-CPU: a software CPU-clock perf event per online CPU, at [`Options::frequency_hz`]
//!   (samples per second per CPU), with `on_cpu_sample_stack_copy` ([`Unwind::Auto`] and
//!   [`Unwind::Dwarf`], unwound in user space) or `on_cpu_sample` ([`Unwind::Fp`], stacks
//!   walked in the kernel); both send one record per sample through a ring buffer that a
//!   thread of the agent drains during the run.
//! - Off-CPU: `on_sched_switch` on `tp_btf/sched_switch`, waits of at least
//!   [`Options::offcpu_min_block_ns`].
//! - Syscalls ([`syscalls`](self::syscalls)): `on_sys_enter` / `on_sys_exit` on the raw
//!   tracepoints of the same names, attached [`Options::syscalls_duty_pct`] percent of the
//!   time.
//! - Wire capture ([`wire`]): `on_sock_send` / `on_sock_recv` on the BTF tracepoints
//!   `sock_send_length` / `sock_recv_length` (no syscall hook of its own).
//!
//! "Nothing collected is lost": [`Collector::finish`] detaches the programs first and then
//! drains every map, whatever ended the run (deadline, Ctrl-C, target gone, error); the
//! reason goes to [`Meta::partial`]. Off-CPU waits still open at that moment are counted up
//! to the end of the run.

pub mod clients;
pub mod db_server;
pub mod upstreams;
mod dwarf;
mod fp;
pub mod pg_activity;
mod syscall_names;
mod syscalls;
pub mod wire;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use agent_ebpf::abi::{self, lost_index, names, offcpu_wait, FilterMode, OffcpuKey, OffcpuStart, OffcpuValue};
use aya::maps::{HashMap as BpfHashMap, MapData, PerCpuArray, RingBuf, StackTraceMap};
use aya::programs::perf_event::{PerfEventConfig, PerfEventScope, SamplePolicy, SoftwareEvent};
use aya::programs::{BtfTracePoint, PerfEvent, ProgramError};
use aya::{Btf, Ebpf, EbpfError, EbpfLoader};

pub use dwarf::{Unwind, DEFAULT_STACK_COPY_BYTES};
pub use syscall_names::{syscall_name, SYSCALL_NAMES_X86_64};
pub use syscalls::{CALIBRATION_CALLS, CALIBRATION_PAIRS, CALIBRATION_ROUNDS, DEFAULT_SYSCALL_DUTY_PCT, WINDOW_PERIOD as SYSCALL_WINDOW_PERIOD};
pub(crate) use syscalls::{least_mean_ns, median_cost_ns};

use crate::profile::{EndpointSamples, Footprint, LostCounters, Meta, OffCpuWait, Process, ProgramCost, RawProfile, RawStack, StackLost};
use crate::wire::serving::{Served, Serving};
use crate::target::{Filter, ResolvedTarget};

/// Errors of loading, attaching and draining.
#[derive(Debug, thiserror::Error)]
pub enum CollectError {
    /// The agent lacks the privileges to load tracing BPF programs.
    #[error("loading BPF programs needs root, or CAP_BPF and CAP_PERFMON (or CAP_SYS_ADMIN); effective capabilities are {effective:#x}")]
    NotRoot {
        /// `CapEff` of `/proc/self/status`.
        effective: u64,
    },
    /// The kernel has no BTF (`/sys/kernel/btf/vmlinux`), which CO-RE and `tp_btf` need.
    #[error("the kernel exposes no BTF at /sys/kernel/btf/vmlinux (needs CONFIG_DEBUG_INFO_BTF=y)")]
    NoBtf,
    /// The kernel refused a program type or attach point (e.g. no perf events).
    #[error("{program}: not supported by this kernel: {source}")]
    Unsupported {
        /// Program name.
        program: &'static str,
        /// What aya reported.
        #[source]
        source: ProgramError,
    },
    /// The verifier rejected a program; carries the last lines of its log.
    #[error("{program}: the verifier rejected the program: {error}\n{log_tail}")]
    Verifier {
        /// Program name.
        program: &'static str,
        /// The `BPF_PROG_LOAD` error.
        error: std::io::Error,
        /// The last lines of the verifier log.
        log_tail: String,
    },
    /// Creating the maps or relocating an object failed.
    #[error("loading BPF object {object}: {source}")]
    Object {
        /// Object name (`sample`, `offcpu`, `syscalls`).
        object: &'static str,
        /// What aya reported.
        #[source]
        source: EbpfError,
    },
    /// A program failed to attach.
    #[error("attaching {program}: {source}")]
    Attach {
        /// Program name.
        program: &'static str,
        /// What aya reported.
        #[source]
        source: ProgramError,
    },
    /// An [`Options`] value out of its range (the CLI checks them first).
    #[error("{option}: {message}")]
    InvalidOption {
        /// The option, as the CLI spells it (`--frequency`).
        option: &'static str,
        /// What is wrong with its value.
        message: String,
    },
    /// A map was missing or could not be read.
    #[error("map {map}: {message}")]
    Map {
        /// Map name.
        map: &'static str,
        /// What went wrong.
        message: String,
    },
    /// The target could not be read.
    #[error(transparent)]
    Target(#[from] crate::target::TargetError),
    /// `--db-url` could not be used (see [`pg_activity::ActivityPoller::start`]).
    #[error("{0}")]
    DbUrl(String),
}

/// A switch that holds the syscall windows closed until the caller raises it
/// ([`Options::syscalls_gate`]). Clones share the switch; two gates are equal when they are the
/// same switch.
#[derive(Debug, Clone, Default)]
pub struct Gate(std::sync::Arc<AtomicBool>);

impl Gate {
    /// A closed gate.
    pub fn closed() -> Gate {
        Gate::default()
    }

    /// Raises it, for good.
    pub fn open(&self) {
        self.0.store(true, Ordering::Relaxed);
    }

    /// Whether it was raised.
    pub fn is_open(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

impl PartialEq for Gate {
    fn eq(&self, other: &Gate) -> bool {
        std::sync::Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Eq for Gate {}

/// [`Options::offcpu_loop_rewalk_every`]'s default: 64. On target-app's `deals-create`, 99.9%
/// of the app's off-CPU waits were its tokio worker parking in `epoll_wait` (113,101 of
/// 113,222 in a smoke bench), and walking their two stacks took about 1.5 of the 2.2 µs the
/// off-CPU program spent per wait (run time by the kernel's BPF statistics with each walk
/// left out in turn: 377.8 ns per run with both, 277.4 without the kernel stack, 200.7
/// without the user stack).
pub const DEFAULT_LOOP_REWALK_EVERY: u64 = 64;

/// What to collect and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// On-CPU samples per second per CPU, Hz. Default is 99 (off the beat of 100 Hz timers).
    pub frequency_hz: u64,
    /// Record off-CPU waits. Default is true.
    pub offcpu: bool,
    /// Off-CPU waits shorter than this are not recorded, ns. Default is 1,000 (1 µs).
    pub offcpu_min_block_ns: u64,
    /// An event-loop wait (`epoll_wait`, `epoll_pwait`, `epoll_pwait2`) walks its stacks at
    /// least once in this many waits of its thread; in between, a wait entered from the same
    /// user registers (ip, sp, bp) takes the stacks of the last walked one (`offcpu.bpf.c`).
    /// 1 walks every wait. Default is [`DEFAULT_LOOP_REWALK_EVERY`].
    pub offcpu_loop_rewalk_every: u64,
    /// Count syscalls and their latency. Default is true.
    pub syscalls: bool,
    /// Share of the run the syscall programs are attached, percent (1..=100), in windows at
    /// the start of each second; counts are scaled to the run (see [`syscalls`](self::syscalls)).
    /// Default is [`DEFAULT_SYSCALL_DUTY_PCT`]; 100 counts every call.
    pub syscalls_duty_pct: u32,
    /// No syscall window opens before this gate is raised, so that the counts leave out a
    /// part of the run the caller knows is not the steady state (`profiler bench` raises it
    /// when the warm-up after the app's restart ends: the restart's one-off bursts, such as
    /// the dynamic loader's `newfstatat`s, would fall in a window or not). The counts are
    /// scaled by the requests served inside the windows, which the gate leaves right. Default
    /// is `None`: windows from the start.
    pub syscalls_gate: Option<Gate>,
    /// How on-CPU user stacks are unwound: see [`Unwind`] and [`dwarf`](self::dwarf).
    /// Default is [`Unwind::Auto`] (stack copy + `.eh_frame` CFI, frame pointers where a
    /// binary has no CFI).
    pub unwind: Unwind,
    /// Bytes of user stack copied per sample for [`Unwind::Auto`] and [`Unwind::Dwarf`]
    /// (at most 65536, `STACK_COPY_MAX_BYTES`). Default is [`DEFAULT_STACK_COPY_BYTES`].
    pub stack_copy_bytes: u64,
    /// Capture the heads of the target's TCP sends and receives on PostgreSQL and HTTP
    /// sockets and decode them into [`RawProfile::wire`] (see [`wire`]). Default is true.
    pub wire: bool,
    /// Peer port that makes a TCP socket a PostgreSQL connection for the wire capture.
    /// Default is 5432. Connections on other ports are recognised by their first bytes.
    pub db_port: u16,
    /// A PostgreSQL connection string of the target's database: `pg_stat_activity` is polled
    /// during the run so that statements prepared before it get their text
    /// ([`pg_activity`]). Default is `None`.
    pub db_url: Option<String>,
    /// Turn on the kernel's BPF run statistics ([`enable_run_stats`]) while attached, so
    /// that [`Footprint::programs`] holds each program's run time. They are the host's
    /// switch (every BPF program of the host is timed while it is on, as with the
    /// `kernel.bpf_stats_enabled` sysctl) and cost two `sched_clock` reads per program run,
    /// which the target pays in every traced syscall: on a KVM guest that clock is a
    /// paravirtual read (`pvclock_clocksource_read_nowd`, 5.3% of the target's samples by
    /// perf on a route that makes 15 syscalls per request). Default is false; a kernel that
    /// refuses them leaves the run without them.
    pub bpf_run_stats: bool,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            frequency_hz: 99,
            offcpu: true,
            offcpu_min_block_ns: 1_000,
            offcpu_loop_rewalk_every: DEFAULT_LOOP_REWALK_EVERY,
            syscalls: true,
            syscalls_duty_pct: DEFAULT_SYSCALL_DUTY_PCT,
            syscalls_gate: None,
            unwind: Unwind::Auto,
            stack_copy_bytes: DEFAULT_STACK_COPY_BYTES,
            wire: true,
            db_port: 5432,
            db_url: None,
            bpf_run_stats: false,
        }
    }
}

/// Why a [`run`] ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopReason {
    /// The requested duration elapsed: the profile is complete.
    Deadline,
    /// The stop flag was raised (Ctrl-C).
    Interrupted,
    /// The target has no process left.
    TargetGone,
}

/// Loaded and attached BPF objects for one target. Dropping it detaches everything;
/// [`Collector::finish`] detaches and drains.
pub struct Collector {
    /// `None` only inside [`Collector::finish`], after the sampler was finished.
    on_cpu: Option<OnCpu>,
    offcpu: Option<Ebpf>,
    syscalls: Option<syscalls::SyscallTracer>,
    options: Options,
    description: String,
    cgroup_id: Option<u64>,
    started: Instant,
    started_at: String,
    cpu_at_start: Option<u64>,
    /// [`crate::sys::stat::host_busy_ns`] when the run started.
    host_busy_at_start: Option<u64>,
    cpu_busy_at_start: std::collections::BTreeMap<u32, u64>,
    target_cpus: Vec<u32>,
    /// CPUs the target could use, read at the start.
    cpu_capacity: Option<f64>,
    /// Time from the start of [`Collector::start`] until everything was attached.
    attach_time: Duration,
    /// The agent's own CPU time (user + system) when the run started (`started`, just before
    /// the programs were attached), ns: from the same instant as the run's duration, so that
    /// the process's CPU and the run's wall time cover the same stretch.
    self_cpu_at_start: u64,
    /// The thread that attached (it runs the collection in [`run`]) and its CPU time at
    /// `started`, ns.
    loop_thread: (std::thread::ThreadId, u64),
    /// Latest CPU-time reading while the target was alive ([`Collector::note_cpu_time`]),
    /// used when the target is gone at the end.
    cpu_last_seen: Option<u64>,
    cpus: u32,
    processes: BTreeMap<u32, Process>,
    /// Executable mappings of the processes of `processes`, recorded while they run.
    maps: crate::sys::process_maps::ProcessMaps,
    /// Wire capture ([`Options::wire`]).
    wire: Option<wire::WireCapture>,
    /// `pg_stat_activity` poller ([`Options::db_url`]).
    activity: Option<pg_activity::ActivityPoller>,
    /// Every process's CPU at the start, when the wire capture runs: the database server's
    /// share of it is found at the end ([`db_server`]).
    processes_at_start: Option<db_server::Snapshot>,
    /// Keeps the kernel's BPF run statistics on while it is open ([`Options::bpf_run_stats`]).
    _run_stats: Option<std::os::fd::OwnedFd>,
}

/// The on-CPU sampler of a run ([`Options::unwind`]).
enum OnCpu {
    /// [`Unwind::Fp`]: stacks walked in the kernel with frame pointers.
    Fp(fp::FpSampler),
    /// [`Unwind::Auto`] / [`Unwind::Dwarf`]: stack copies unwound in user space.
    StackCopy(dwarf::StackCopy),
}

/// Aggregation key of the on-CPU samplers' records: one thread on one (user, kernel) stack
/// pair, addresses leaf first.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct SampleKey {
    tgid: u32,
    tid: u32,
    comm: [u8; abi::COMM_LEN],
    user: Vec<u64>,
    kernel: Vec<u64>,
}

/// Most sample times a sampler keeps (8 bytes each, 16 MB: 17 minutes at 999 Hz on 2 CPUs);
/// later samples are counted without their time ([`RawStack::sample_times_ns`]).
const MAX_SAMPLE_TIMES: usize = 2_000_000;

/// The on-CPU samplers' aggregation: samples per [`SampleKey`] with their times.
#[derive(Debug, Default)]
struct SampleCounts {
    counts: HashMap<SampleKey, (u64, Vec<u64>)>,
    times: usize,
}

impl SampleCounts {
    /// One sample of `key` at `ts_ns` (`bpf_ktime_get_ns`).
    fn add(&mut self, key: SampleKey, ts_ns: u64) {
        let slot = self.counts.entry(key).or_default();
        slot.0 += 1;
        if self.times < MAX_SAMPLE_TIMES {
            slot.1.push(ts_ns);
            self.times += 1;
        }
    }
}

/// Aggregated samples as [`RawStack`]s, most samples first (ties by thread id).
fn raw_stacks(counts: SampleCounts) -> Vec<RawStack> {
    let mut out: Vec<RawStack> = counts
        .counts
        .into_iter()
        .map(|(key, (count, times))| RawStack {
            pid: key.tgid,
            tid: key.tid,
            thread: comm_string(&key.comm),
            kernel: key.kernel,
            user: key.user,
            count,
            total_ns: 0,
            lost: StackLost::default(),
            sample_times_ns: times,
            endpoints: Vec::new(),
            wait: OffCpuWait::Other,
        })
        .collect();
    out.sort_by(|a, b| b.count.cmp(&a.count).then(a.tid.cmp(&b.tid)));
    out
}

/// Joins on-CPU samples to the requests their threads were serving ([`Serving::at`]): fills
/// each stack's [`RawStack::endpoints`] and drops its sample times.
fn join_endpoints(on_cpu: &mut [RawStack], serving: &Serving) -> EndpointSamples {
    let mut out = EndpointSamples {
        endpoints: serving.endpoints.clone(),
        db: serving.db.clone(),
        db_unattributed: serving.db_unattributed.clone(),
        ..EndpointSamples::default()
    };
    for s in on_cpu.iter_mut() {
        let mut by: HashMap<u32, u64> = HashMap::new();
        for &ts in &s.sample_times_ns {
            match serving.at(s.tid, ts) {
                Served::Endpoint(e) => *by.entry(e).or_default() += 1,
                Served::Nothing => out.unattributed += 1,
                Served::NotRecorded => out.not_recorded += 1,
            }
        }
        out.not_recorded += s.count.saturating_sub(s.sample_times_ns.len() as u64);
        let mut v: Vec<(u32, u64)> = by.into_iter().collect();
        v.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        out.attributed += v.iter().map(|e| e.1).sum::<u64>();
        s.endpoints = v;
        s.sample_times_ns = Vec::new();
    }
    out
}

/// How long a drain thread waits for its ring buffer before checking the stop flag, ms.
const POLL_TIMEOUT_MS: i32 = 50;

/// The body of a drain thread: hands every record of `ring` to `handle` until `stop` is
/// raised (after the program was detached) and the buffer is empty; waits up to
/// [`POLL_TIMEOUT_MS`] between drains.
fn drain_ring(mut ring: RingBuf<MapData>, stop: &AtomicBool, mut handle: impl FnMut(&[u8])) {
    loop {
        // Read the flag before draining: records submitted before the detach are all in the
        // buffer by the time the flag is seen, so the last drain below gets them.
        let stopping = stop.load(Ordering::Acquire);
        while let Some(item) = ring.next() {
            handle(&item);
        }
        if stopping {
            break;
        }
        let mut pfd = libc::pollfd { fd: ring.as_raw_fd(), events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd; the fd lives as long as `ring`.
        unsafe { libc::poll(&mut pfd, 1, POLL_TIMEOUT_MS) };
    }
}

/// Attaches perf-event program `name` of `ebpf` to a software CPU-clock event on each of
/// `cpus`, at `frequency_hz` samples per second per CPU.
fn attach_cpu_clock(ebpf: &mut Ebpf, name: &'static str, cpus: &[u32], frequency_hz: u64) -> Result<(), CollectError> {
    let prog: &mut PerfEvent = program(ebpf, name)?;
    for &cpu in cpus {
        prog.attach(
            PerfEventConfig::Software(SoftwareEvent::CpuClock),
            PerfEventScope::AllProcessesOneCpu { cpu },
            SamplePolicy::Frequency(frequency_hz),
            false,
        )
        .map_err(|source| CollectError::Attach { program: name, source })?;
    }
    Ok(())
}

/// The footprint's per-program costs: one row per program name (a name attached twice
/// is summed), most run time first, then by name.
fn program_costs(stats: Vec<ProgramCost>) -> Vec<ProgramCost> {
    let mut by_name: BTreeMap<String, ProgramCost> = BTreeMap::new();
    for p in stats {
        let e = by_name.entry(p.program.clone()).or_insert_with(|| ProgramCost { program: p.program, ..Default::default() });
        e.runs += p.runs;
        e.run_time_ns += p.run_time_ns;
    }
    let mut out: Vec<_> = by_name.into_values().collect();
    out.sort_by(|a, b| b.run_time_ns.cmp(&a.run_time_ns).then_with(|| a.program.cmp(&b.program)));
    out
}

/// Turns on the kernel's BPF run statistics (`BPF_ENABLE_STATS`, `BPF_STATS_RUN_TIME`,
/// the same switch as the `kernel.bpf_stats_enabled` sysctl) for as long as the returned
/// file descriptor is open. They cost two clock reads per program run.
pub fn enable_run_stats() -> Result<std::os::fd::OwnedFd, CollectError> {
    aya::sys::enable_stats(aya::sys::Stats::RunTime).map_err(|e| map_error("bpf_enable_stats", e))
}

/// True when the effective capability set allows loading tracing programs.
fn check_privileges() -> Result<(), CollectError> {
    const CAP_SYS_ADMIN: u64 = 21;
    const CAP_PERFMON: u64 = 38;
    const CAP_BPF: u64 = 39;
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let effective = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .unwrap_or(0);
    let has = |cap: u64| effective & (1 << cap) != 0;
    if has(CAP_SYS_ADMIN) || (has(CAP_BPF) && has(CAP_PERFMON)) {
        Ok(())
    } else {
        Err(CollectError::NotRoot { effective })
    }
}

fn load_error(program: &'static str, error: ProgramError) -> CollectError {
    match error {
        ProgramError::LoadError { io_error, verifier_log } => {
            let log = verifier_log.to_string();
            let lines: Vec<&str> = log.lines().collect();
            let tail = lines[lines.len().saturating_sub(12)..].join("\n");
            CollectError::Verifier { program, error: io_error, log_tail: tail }
        }
        other => CollectError::Unsupported { program, source: other },
    }
}

fn map_error(map: &'static str, e: impl std::fmt::Display) -> CollectError {
    CollectError::Map { map, message: e.to_string() }
}

/// Loads one object with the filter knobs (and `extra` knobs) set.
fn load_object(
    object: &'static str,
    bytes: &[u8],
    filter: &Filter,
    extra: &[(&'static str, &u64)],
) -> Result<Ebpf, CollectError> {
    load_object_sized(object, bytes, filter, extra, &[])
}

/// [`load_object`], with the `max_entries` of some maps set at load (`(map, entries)`).
fn load_object_sized(
    object: &'static str,
    bytes: &[u8],
    filter: &Filter,
    extra: &[(&'static str, &u64)],
    max_entries: &[(&'static str, u32)],
) -> Result<Ebpf, CollectError> {
    let (mode, cgroup_id, level) = match filter {
        Filter::Cgroup { id, level } => (FilterMode::Cgroup as u32, *id, *level),
        Filter::Pids(_) => (FilterMode::Pids as u32, 0u64, 0u32),
    };
    let mut loader = EbpfLoader::new();
    // aya 0.14 has no wrapper for BPF_MAP_TYPE_TASK_STORAGE (`syscall_entries`); the map
    // is only used by the programs, so creating it as an "unsupported" map is enough.
    loader.allow_unsupported_maps();
    loader
        .override_global(names::GLOBAL_FILTER_MODE, &mode, true)
        .override_global(names::GLOBAL_TARGET_CGROUP_ID, &cgroup_id, true)
        .override_global(names::GLOBAL_TARGET_CGROUP_LEVEL, &level, true);
    for (name, value) in extra {
        loader.override_global(name, *value, true);
    }
    for &(name, entries) in max_entries {
        loader.map_max_entries(name, entries);
    }
    let mut ebpf = loader.load(bytes).map_err(|source| CollectError::Object { object, source })?;
    if let Filter::Pids(pids) = filter {
        set_target_pids(&mut ebpf, pids, &BTreeSet::new())?;
    }
    Ok(ebpf)
}

/// Makes `target_pids` of one object equal to `pids` (`old` is what it holds now).
fn set_target_pids(ebpf: &mut Ebpf, pids: &BTreeSet<u32>, old: &BTreeSet<u32>) -> Result<(), CollectError> {
    let map = ebpf.map_mut(names::MAP_TARGET_PIDS).ok_or_else(|| map_error(names::MAP_TARGET_PIDS, "missing"))?;
    let mut map: BpfHashMap<&mut MapData, u32, u8> =
        BpfHashMap::try_from(map).map_err(|e| map_error(names::MAP_TARGET_PIDS, e))?;
    for pid in old.difference(pids) {
        let _ = map.remove(pid);
    }
    for pid in pids.difference(old) {
        map.insert(pid, 1, 0).map_err(|e| map_error(names::MAP_TARGET_PIDS, e))?;
    }
    Ok(())
}

impl Collector {
    /// Loads, configures and attaches the programs for `target`. Sampling starts when this
    /// returns.
    ///
    /// Errors: [`CollectError::NotRoot`], [`CollectError::NoBtf`], [`CollectError::Verifier`]
    /// (with the verifier log's last lines), [`CollectError::Unsupported`],
    /// [`CollectError::Attach`].
    pub fn start(target: &ResolvedTarget, options: &Options) -> Result<Self, CollectError> {
        let load_started = Instant::now();
        // Reset this process's peak RSS (VmHWM) so that the footprint is this run's.
        let _ = std::fs::write("/proc/self/clear_refs", "5");
        check_privileges()?;
        if !Path::new("/sys/kernel/btf/vmlinux").exists() {
            return Err(CollectError::NoBtf);
        }
        if options.frequency_hz == 0 {
            return Err(CollectError::InvalidOption { option: "--frequency", message: "0 Hz samples nothing; give 1 or more".into() });
        }
        let filter = &target.filter;
        let cpus = aya::util::online_cpus().map_err(|(what, e)| map_error("online cpus", format!("{what}: {e}")))?;

        // Load everything first, attach after: a verifier error leaves nothing attached.
        let mut on_cpu = match options.unwind {
            Unwind::Fp => OnCpu::Fp(fp::FpSampler::load(filter)?),
            mode => OnCpu::StackCopy(dwarf::StackCopy::load(filter, mode, options.stack_copy_bytes)?),
        };
        let mut offcpu = if options.offcpu {
            let min_block = options.offcpu_min_block_ns;
            let rewalk = options.offcpu_loop_rewalk_every.max(1);
            let mut ebpf = load_object(
                "offcpu",
                agent_ebpf::OFFCPU_OBJECT,
                filter,
                &[(names::GLOBAL_MIN_BLOCK_NS, &min_block), (names::GLOBAL_LOOP_REWALK_EVERY, &rewalk)],
            )?;
            let btf = Btf::from_sys_fs().map_err(|_| CollectError::NoBtf)?;
            let prog: &mut BtfTracePoint = program(&mut ebpf, names::PROG_ON_SCHED_SWITCH)?;
            prog.load(names::TP_SCHED_SWITCH, &btf).map_err(|e| load_error(names::PROG_ON_SCHED_SWITCH, e))?;
            Some(ebpf)
        } else {
            None
        };
        let mut syscalls = if options.syscalls {
            Some(syscalls::SyscallTracer::load(filter, options.syscalls_duty_pct, options.syscalls_gate.clone())?)
        } else {
            None
        };

        let mut wire = if options.wire {
            Some(wire::WireCapture::load(filter, wire::WireOptions { db_port: options.db_port, ..Default::default() })?)
        } else {
            None
        };

        // Before anything is attached, so that every run is timed. Best effort: a kernel
        // that refuses only leaves `Footprint::programs` empty.
        let run_stats = if options.bpf_run_stats { enable_run_stats().ok() } else { None };
        let processes_at_start = wire.is_some().then(db_server::Snapshot::take);
        let cpu_at_start = target.cpu_time_ns();
        let host_busy_at_start = crate::sys::stat::host_busy_ns();
        let cpu_busy_at_start = crate::sys::stat::cpu_busy_ns();
        let target_cpus = crate::sys::cpus::allowed_of(target.main_pid);
        let cpu_capacity = target.cpu_capacity();
        let self_cpu_at_start = self_cpu_ns();
        let loop_thread = (std::thread::current().id(), current_thread_cpu_ns());
        let started = Instant::now();
        let started_at = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Millis, true);

        // The wire capture starts its drain thread before it attaches its programs.
        if let Some(wire) = wire.as_mut() {
            wire.attach(&target.pids()?)?;
        }
        let activity = match (&options.db_url, wire.is_some()) {
            (Some(url), true) => Some(pg_activity::ActivityPoller::start(url).map_err(CollectError::DbUrl)?),
            _ => None,
        };
        // The first window opens now (unless a gate holds it); `Collector::tick` opens and
        // closes the next ones.
        if let Some(tracer) = syscalls.as_mut() {
            tracer.tick(Duration::ZERO)?;
        }
        if let Some(ebpf) = offcpu.as_mut() {
            let prog: &mut BtfTracePoint = program(ebpf, names::PROG_ON_SCHED_SWITCH)?;
            prog.attach().map_err(|source| CollectError::Attach { program: names::PROG_ON_SCHED_SWITCH, source })?;
        }
        match &mut on_cpu {
            OnCpu::Fp(sampler) => sampler.attach(&cpus, options.frequency_hz)?,
            OnCpu::StackCopy(stack_copy) => stack_copy.attach(&cpus, options.frequency_hz)?,
        }

        let mut collector = Collector {
            on_cpu: Some(on_cpu),
            offcpu,
            syscalls,
            options: options.clone(),
            description: target.description.clone(),
            cgroup_id: match target.filter {
                Filter::Cgroup { id, .. } => Some(id),
                Filter::Pids(_) => None,
            },
            started,
            started_at,
            cpu_at_start,
            host_busy_at_start,
            cpu_busy_at_start,
            target_cpus,
            cpu_capacity,
            attach_time: load_started.elapsed(),
            self_cpu_at_start,
            loop_thread,
            cpu_last_seen: cpu_at_start,
            cpus: cpus.len() as u32,
            processes: BTreeMap::new(),
            maps: Default::default(),
            wire,
            activity,
            processes_at_start,
            _run_stats: run_stats,
        };
        collector.note_processes(&target.pids()?);
        Ok(collector)
    }

    /// Replaces the pid set of a [`Filter::Pids`] target in every object (`old` is the set
    /// loaded so far) and remembers the new processes.
    pub fn update_pids(&mut self, pids: &BTreeSet<u32>, old: &BTreeSet<u32>) -> Result<(), CollectError> {
        match &mut self.on_cpu {
            Some(OnCpu::Fp(sampler)) => sampler.update_pids(pids, old)?,
            Some(OnCpu::StackCopy(stack_copy)) => stack_copy.update_pids(pids, old)?,
            None => {}
        }
        if let Some(ebpf) = self.offcpu.as_mut() {
            set_target_pids(ebpf, pids, old)?;
        }
        if let Some(tracer) = self.syscalls.as_mut() {
            tracer.update_pids(pids, old)?;
        }
        if let Some(wire) = self.wire.as_mut() {
            wire.update_pids(pids, old)?;
        }
        self.note_processes(pids);
        Ok(())
    }

    /// Remembers `comm`, executable and executable mappings of processes while they exist,
    /// so that processes that exit before the end still have a name in the profile and
    /// their frames can be symbolized ([`crate::sys::process_maps::ProcessMaps`]).
    pub fn note_processes(&mut self, pids: &BTreeSet<u32>) {
        if let Some(wire) = self.wire.as_mut() {
            // New listening ports of the target (best effort: a failed map update only means
            // that connections on that port are not captured).
            let _ = wire.refresh_ports(pids);
        }
        for &pid in pids {
            self.processes.entry(pid).or_insert_with(|| read_process(pid));
            // Every time (about once a second): a process that execs or loads a library
            // adds mappings.
            self.maps.record(pid);
        }
    }

    /// Run statistics of every attached program, as the kernel counts them while BPF run
    /// statistics are enabled (see [`enable_run_stats`]; both counters stay 0 otherwise).
    pub fn program_stats(&self) -> Vec<ProgramCost> {
        let mut out = Vec::new();
        let mut push = |ebpf: &Ebpf, name: &'static str| {
            if let Some(info) = ebpf.program(name).and_then(|p| p.info().ok()) {
                out.push(ProgramCost { program: name.to_string(), runs: info.run_count(), run_time_ns: info.run_time().as_nanos() as u64 });
            }
        };
        match &self.on_cpu {
            Some(OnCpu::Fp(sampler)) => push(sampler.ebpf(), names::PROG_ON_CPU_SAMPLE),
            Some(OnCpu::StackCopy(stack_copy)) => push(stack_copy.ebpf(), names::PROG_ON_CPU_SAMPLE_STACK_COPY),
            None => {}
        }
        if let Some(ebpf) = &self.offcpu {
            push(ebpf, names::PROG_ON_SCHED_SWITCH);
        }
        if let Some(tracer) = &self.syscalls {
            push(tracer.ebpf(), names::PROG_ON_SYS_ENTER);
            push(tracer.ebpf(), names::PROG_ON_SYS_EXIT);
        }
        if let Some(wire) = &self.wire {
            for (name, _) in agent_ebpf::abi::wire::PROGRAMS {
                push(wire.ebpf(), name);
            }
        }
        out
    }

    /// Reads the target's CPU time now and keeps it, so that a target that exits before
    /// the end still gets a CPU time (called every second by [`run`]).
    pub fn note_cpu_time(&mut self, target: &ResolvedTarget) {
        if let Some(ns) = target.cpu_time_ns() {
            self.cpu_last_seen = Some(ns);
        }
    }

    /// Time since sampling started.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// Opens or closes the syscall programs' window for this moment of the run
    /// ([`Options::syscalls_duty_pct`]) and returns the time until the next change
    /// (`Duration::MAX` when nothing changes). [`run`] calls it; a caller of
    /// [`Collector::start`] that never does keeps the first window open all along, which
    /// [`Meta::syscall_windows`] then records as such.
    pub fn tick(&mut self) -> Result<Duration, CollectError> {
        let elapsed = self.started.elapsed();
        match self.syscalls.as_mut() {
            Some(tracer) => tracer.tick(elapsed),
            None => Ok(Duration::MAX),
        }
    }

    /// CPU time of the agent's own threads since the run started, ns: the drain
    /// threads (on-CPU stacks, wire records) since they started, which is just before, and
    /// the thread that attached, when it is the calling one (`None` otherwise: its clock is
    /// not readable from here). Unlike [`Footprint::cpu_ns`] it leaves out the other threads
    /// of the process (the bench's harness, a progress bar).
    fn threads_cpu_ns(&self) -> Option<u64> {
        let (id, at_start) = self.loop_thread;
        if std::thread::current().id() != id {
            return None;
        }
        let drains = match &self.on_cpu {
            Some(OnCpu::Fp(s)) => s.drain_cpu_ns(),
            Some(OnCpu::StackCopy(s)) => s.drain_cpu_ns(),
            None => 0,
        } + self.wire.as_ref().map_or(0, |w| w.drain_cpu_ns());
        Some(current_thread_cpu_ns().saturating_sub(at_start) + drains)
    }

    /// Detaches every program, then drains all maps into a [`RawProfile`]. `partial` is
    /// the reason when the run ended early. The target's CPU time is measured from
    /// [`Collector::start`] to now.
    pub fn finish(mut self, target: &ResolvedTarget, partial: Option<String>) -> Result<RawProfile, CollectError> {
        // While the programs are still loaded: their kallsyms names, for the samples taken
        // inside them (about 40 ms to scan /proc/kallsyms). Before the footprint is read, so
        // that it counts this work as the agent's (the footprint test's accounting needs
        // no CPU between the footprint's reading and the run's end).
        let bpf_symbols = crate::symbolize::read_bpf_symbols(std::path::Path::new("/proc/kallsyms"));
        // The BPF run statistics need the programs still loaded.
        let stats = self.program_stats();
        let stats_on = std::fs::read_to_string("/proc/sys/kernel/bpf_stats_enabled").is_ok_and(|v| v.trim() == "1")
            || stats.iter().any(|p| p.runs > 0);
        let footprint = Footprint {
            attach_ns: self.attach_time.as_nanos() as u64,
            cpu_ns: self_cpu_ns().saturating_sub(self.self_cpu_at_start),
            threads_cpu_ns: self.threads_cpu_ns(),
            peak_rss_bytes: self_peak_rss_bytes(),
            bpf_run_ns: stats_on.then(|| stats.iter().map(|p| p.run_time_ns).sum()),
            bpf_run_count: stats_on.then(|| stats.iter().map(|p| p.runs).sum()),
            programs: if stats_on { program_costs(stats) } else { Vec::new() },
        };
        // Stop recording before reading, so that the maps are consistent (the on-CPU
        // sampler detaches in its `finish`, below).
        if let Some(ebpf) = self.offcpu.as_mut() {
            let prog: &mut BtfTracePoint = program(ebpf, names::PROG_ON_SCHED_SWITCH)?;
            prog.unload().map_err(|source| CollectError::Attach { program: names::PROG_ON_SCHED_SWITCH, source })?;
        }
        if let Some(tracer) = self.syscalls.as_mut() {
            tracer.close()?;
        }
        let (wire, wire_report, serving, request_spread) = match self.wire.take() {
            Some(capture) => {
                let activity = self.activity.take().map(pg_activity::ActivityPoller::finish);
                let (summary, report, serving, spread) = capture.finish(activity)?;
                (Some(summary), Some(report), Some(serving), Some(spread))
            }
            None => (None, None, None, None),
        };
        let duration = self.started.elapsed();
        let end_ktime = monotonic_ns();
        // A pid target that exited has no /proc/PID/stat any more: its CPU time is then
        // counted up to the last reading of the run loop (at most a second before the end).
        let cpu_at_end = target.cpu_time_ns().or(self.cpu_last_seen);
        let host_busy_at_end = crate::sys::stat::host_busy_ns();
        let cpu_busy_at_end = crate::sys::stat::cpu_busy_ns();
        let db_servers = match (&self.processes_at_start, &wire_report) {
            // The target's processes now (a cgroup's first process may have been a runtime's
            // short-lived helper), then its main one.
            (Some(start), Some(report)) if !report.pg_server_ports.is_empty() => {
                let pids = target.pids().unwrap_or_default();
                db_server::measure(start, pids.into_iter().chain([target.main_pid]), &report.pg_server_ports)
            }
            _ => Vec::new(),
        };
        let http_clients = match (&self.processes_at_start, &wire_report) {
            (Some(start), Some(report)) if !report.http_ports.is_empty() => {
                let pids: Vec<u32> = target.pids().unwrap_or_default().into_iter().chain([target.main_pid]).collect();
                clients::measure(start, &pids, &report.http_ports)
            }
            _ => Vec::new(),
        };

        let upstream_servers = match (&self.processes_at_start, &wire_report) {
            (Some(start), Some(report)) => {
                let pids: Vec<u32> = target.pids().unwrap_or_default().into_iter().chain([target.main_pid]).collect();
                upstreams::measure(start, &pids, &report.pg_server_ports)
            }
            _ => Vec::new(),
        };

        let mut lost = LostCounters::default();
        let (mut on_cpu, unwind) = match self.on_cpu.take() {
            Some(OnCpu::Fp(sampler)) => (sampler.finish(&mut lost)?, None),
            Some(OnCpu::StackCopy(stack_copy)) => {
                let (stacks, report) = stack_copy.finish(&mut lost)?;
                (stacks, Some(report))
            }
            None => (Vec::new(), None),
        };
        let endpoints = match &serving {
            Some(serving) if !on_cpu.is_empty() => Some(join_endpoints(&mut on_cpu, serving)),
            _ => {
                on_cpu.iter_mut().for_each(|s| s.sample_times_ns = Vec::new());
                None
            }
        };
        let off_cpu = match &self.offcpu {
            Some(ebpf) => {
                add_lost(ebpf, &mut lost)?;
                drain_off_cpu(ebpf, end_ktime, self.options.offcpu_min_block_ns, &mut lost)?
            }
            None => Vec::new(),
        };
        let (syscalls, syscall_windows) = match self.syscalls.take() {
            Some(mut tracer) => {
                add_lost(tracer.ebpf(), &mut lost)?;
                // The window open at the end counted calls: its span counts too.
                tracer.close()?;
                // Counted in windows: the share of the requests served inside them, when the
                // wire saw the requests (see Meta::syscall_scale).
                let shares = match &request_spread {
                    Some(spread) if tracer.duty_pct() < 100 || tracer.held() => spread.shares_within(tracer.spans()),
                    _ => None,
                };
                let (stats, mut windows) = tracer.finish(duration)?;
                let request_share = shares.as_ref().map(|s| s.iter().sum::<f64>().clamp(0.0, 1.0));
                windows.request_share = request_share.filter(|&s| s > 0.0);
                if windows.request_share.is_some() && shares.as_ref().is_some_and(|s| s.len() == windows.window_ns.len()) {
                    windows.window_request_share = shares.unwrap_or_default();
                }
                (stats, Some(windows))
            }
            None => (Vec::new(), None),
        };

        let seen: BTreeSet<u32> = on_cpu.iter().chain(&off_cpu).map(|s| s.pid).collect();
        self.note_processes(&seen);
        let processes = self.processes.into_values().collect();

        let meta = Meta {
            target: self.description,
            cgroup_id: self.cgroup_id,
            started_at: self.started_at,
            duration_ns: duration.as_nanos() as u64,
            frequency_hz: self.options.frequency_hz,
            offcpu_min_block_ns: if self.options.offcpu { self.options.offcpu_min_block_ns } else { 0 },
            cpus: self.cpus,
            kernel: kernel_release(),
            agent_version: env!("CARGO_PKG_VERSION").to_owned(),
            partial,
            target_cpu_ns: match (self.cpu_at_start, cpu_at_end) {
                (Some(a), Some(b)) if b >= a => Some(b - a),
                _ => None,
            },
            unwind,
            wire: wire_report,
            footprint: Some(footprint),
            syscall_windows,
            target_cpu_capacity: self.cpu_capacity,
            host_busy_ns: self.host_busy_at_start.zip(host_busy_at_end).map(|(a, b)| b.saturating_sub(a)),
            cpu_busy_ns: cpu_busy_at_end.iter().filter_map(|(cpu, b)| Some((*cpu, b.saturating_sub(*self.cpu_busy_at_start.get(cpu)?)))).collect(),
            target_cpus: self.target_cpus,
            db_servers,
            http_clients,
            upstream_servers,
        };
        Ok(RawProfile { meta, processes, on_cpu, off_cpu, syscalls, lost, wire, endpoints, maps: self.maps, bpf_symbols })
    }
}

fn program<'a, T>(ebpf: &'a mut Ebpf, name: &'static str) -> Result<&'a mut T, CollectError>
where
    &'a mut T: TryFrom<&'a mut aya::programs::Program, Error = ProgramError>,
{
    let prog = ebpf.program_mut(name).ok_or_else(|| map_error(name, "program missing from the object"))?;
    prog.try_into().map_err(|source| CollectError::Unsupported { program: name, source })
}

/// CPU time of the calling thread so far, ns (`clock_gettime(CLOCK_THREAD_CPUTIME_ID)`); 0
/// when it cannot be read.
pub fn current_thread_cpu_ns() -> u64 {
    clock_ns(libc::CLOCK_THREAD_CPUTIME_ID)
}

/// CPU time of the running thread behind `handle` so far, ns (its `pthread_getcpuclockid(3)`
/// clock); 0 when it cannot be read. The thread must not have been joined.
pub fn thread_cpu_ns<T>(handle: &std::thread::JoinHandle<T>) -> u64 {
    use std::os::unix::thread::JoinHandleExt;
    let mut clock: libc::clockid_t = 0;
    // SAFETY: the handle is not joined, so its pthread_t names a live or unjoined thread;
    // valid out pointer.
    if unsafe { libc::pthread_getcpuclockid(handle.as_pthread_t(), &mut clock) } != 0 {
        return 0;
    }
    clock_ns(clock)
}

fn clock_ns(clock: libc::clockid_t) -> u64 {
    // SAFETY: timespec is plain data, clock_gettime fills it.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: valid out pointer.
    if unsafe { libc::clock_gettime(clock, &mut ts) } != 0 {
        return 0;
    }
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// CPU time (user + system) of this whole process so far, ns (`getrusage(RUSAGE_SELF)`).
pub fn self_cpu_ns() -> u64 {
    // SAFETY: rusage is plain data, getrusage fills it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid out pointer.
    if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
        return 0;
    }
    let us = |t: libc::timeval| t.tv_sec as u64 * 1_000_000 + t.tv_usec as u64;
    (us(ru.ru_utime) + us(ru.ru_stime)) * 1_000
}

/// Peak resident memory of this process so far (`VmHWM` in `/proc/self/status`), bytes; 0
/// when it cannot be read.
pub fn self_peak_rss_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find_map(|l| l.strip_prefix("VmHWM:")).and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok()))
        .map_or(0, |kb| kb * 1024)
}

/// CLOCK_MONOTONIC in ns: the clock of `bpf_ktime_get_ns()`.
pub(crate) fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: ts is a valid out pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn kernel_release() -> String {
    // SAFETY: utsname is plain data, uname fills it.
    let mut uts: libc::utsname = unsafe { std::mem::zeroed() };
    // SAFETY: valid out pointer.
    if unsafe { libc::uname(&mut uts) } != 0 {
        return String::new();
    }
    let bytes: Vec<u8> = uts.release.iter().take_while(|&&c| c != 0).map(|&c| c as u8).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

fn read_process(pid: u32) -> Process {
    let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).map(|s| s.trim_end().to_owned()).unwrap_or_default();
    let exe = std::fs::read_link(format!("/proc/{pid}/exe")).map(|p| p.display().to_string()).unwrap_or_default();
    Process { pid, comm, exe }
}

fn comm_string(comm: &[u8; abi::COMM_LEN]) -> String {
    let end = comm.iter().position(|&b| b == 0).unwrap_or(comm.len());
    String::from_utf8_lossy(&comm[..end]).into_owned()
}

/// Addresses of stack `id` (leaf first), empty for a negative id or a missing entry.
fn stack(map: &StackTraceMap<&MapData>, cache: &mut HashMap<i32, Vec<u64>>, id: i32) -> Vec<u64> {
    if id < 0 {
        return Vec::new();
    }
    cache
        .entry(id)
        .or_insert_with(|| map.get(&(id as u32), 0).map(|t| t.frames().iter().map(|f| f.ip).collect()).unwrap_or_default())
        .clone()
}

fn stack_map(ebpf: &Ebpf) -> Result<StackTraceMap<&MapData>, CollectError> {
    let map = ebpf.map(names::MAP_STACK_TRACES).ok_or_else(|| map_error(names::MAP_STACK_TRACES, "missing"))?;
    StackTraceMap::try_from(map).map_err(|e| map_error(names::MAP_STACK_TRACES, e))
}

/// `-EEXIST`: `bpf_get_stackid` found the stack's hash bucket taken by another stack and kept
/// nothing (include/uapi/linux/bpf.h, `BPF_F_REUSE_STACKID` not set).
const EEXIST: i32 = 17;

/// Whether a stack id stands for a stack the kernel took but lost to a hash collision. Other
/// errors are not losses: `-EFAULT` is a kernel stack of a sample in user mode (there is none)
/// or a user walk that found nothing (counted in `stack_walk_failures`).
fn lost(id: i32) -> bool {
    id == -EEXIST
}

fn raw_stack(key: &OffcpuKey, user: Vec<u64>, kernel: Vec<u64>, count: u64, total_ns: u64) -> RawStack {
    let (wait, key) = (key.wait, &key.stack);
    let lost = StackLost { user: lost(key.user_stack_id), kernel: lost(key.kernel_stack_id) };
    let wait = if wait == offcpu_wait::CONTENDED_LOCK { OffCpuWait::ContendedLock } else { OffCpuWait::Other };
    RawStack { pid: key.tgid, tid: key.pid, thread: comm_string(&key.comm), user, kernel, count, total_ns, lost, wait, ..RawStack::default() }
}

/// The off-CPU waits of `ebpf`'s maps, those still open counted up to `end_ktime`. An open
/// wait of a thread that is gone (or a zombie) is not one: its thread exited with no final
/// switch-out seen; it is counted in `lost.offcpu_switch_ins_unseen` instead.
fn drain_off_cpu(ebpf: &Ebpf, end_ktime: u64, min_block_ns: u64, lost: &mut LostCounters) -> Result<Vec<RawStack>, CollectError> {
    let stacks = stack_map(ebpf)?;
    let map = ebpf.map(names::MAP_OFFCPU_STATS).ok_or_else(|| map_error(names::MAP_OFFCPU_STATS, "missing"))?;
    let stats: BpfHashMap<&MapData, OffcpuKey, OffcpuValue> =
        BpfHashMap::try_from(map).map_err(|e| map_error(names::MAP_OFFCPU_STATS, e))?;
    let mut totals: HashMap<OffcpuKey, OffcpuValue> = HashMap::new();
    for entry in stats.iter() {
        let (key, value) = entry.map_err(|e| map_error(names::MAP_OFFCPU_STATS, e))?;
        totals.insert(key, value);
    }
    // Waits still open when the programs were detached count up to the end of the run.
    let map = ebpf.map(names::MAP_OFFCPU_STARTS).ok_or_else(|| map_error(names::MAP_OFFCPU_STARTS, "missing"))?;
    let starts: BpfHashMap<&MapData, u32, OffcpuStart> =
        BpfHashMap::try_from(map).map_err(|e| map_error(names::MAP_OFFCPU_STARTS, e))?;
    for entry in starts.iter() {
        let (_, start) = entry.map_err(|e| map_error(names::MAP_OFFCPU_STARTS, e))?;
        if !crate::sys::stat::read_thread(start.key.stack.tgid, start.key.stack.pid).is_some_and(|s| s.is_live()) {
            lost.offcpu_switch_ins_unseen += 1;
            continue;
        }
        let open = end_ktime.saturating_sub(start.start_ns);
        if open >= min_block_ns.max(1) {
            let total = totals.entry(start.key).or_default();
            total.count += 1;
            total.total_ns += open;
        }
    }
    let mut cache = HashMap::new();
    let mut out: Vec<RawStack> = totals
        .into_iter()
        .map(|(key, v)| {
            let user = stack(&stacks, &mut cache, key.stack.user_stack_id);
            let kernel = stack(&stacks, &mut cache, key.stack.kernel_stack_id);
            raw_stack(&key, user, kernel, v.count, v.total_ns)
        })
        .collect();
    out.sort_by(|a, b| b.total_ns.cmp(&a.total_ns).then(a.tid.cmp(&b.tid)));
    Ok(out)
}

fn add_lost(ebpf: &Ebpf, lost: &mut LostCounters) -> Result<(), CollectError> {
    let map = ebpf.map(names::MAP_LOST).ok_or_else(|| map_error(names::MAP_LOST, "missing"))?;
    let counters: PerCpuArray<&MapData, u64> = PerCpuArray::try_from(map).map_err(|e| map_error(names::MAP_LOST, e))?;
    let mut sums = [0u64; lost_index::COUNT as usize];
    for (index, sum) in sums.iter_mut().enumerate() {
        let per_cpu = counters.get(&(index as u32), 0).map_err(|e| map_error(names::MAP_LOST, e))?;
        *sum = per_cpu.iter().sum();
    }
    lost.samples_dropped += sums[lost_index::SAMPLES_DROPPED as usize]
        + sums[lost_index::SYSCALL_NO_STORAGE as usize]
        + sums[lost_index::SYSCALL_NR_RANGE as usize];
    lost.stack_collisions += sums[lost_index::STACK_COLLISIONS as usize];
    lost.stack_walk_failures += sums[lost_index::STACK_WALK_FAILURES as usize];
    lost.offcpu_dropped += sums[lost_index::OFFCPU_DROPPED as usize];
    lost.offcpu_switch_ins_unseen += sums[lost_index::OFFCPU_SWITCH_IN_UNSEEN as usize];
    lost.ringbuf_dropped += sums[lost_index::RINGBUF_FULL as usize];
    lost.stack_walk_failures += sums[lost_index::STACK_COPY_FAILURES as usize];
    Ok(())
}

/// `Meta::partial` of a collection stopped by its stop flag (Ctrl-C, SIGTERM) with no error;
/// also the error text of an interrupted bench. A caller that stops the collection itself at
/// the planned end (a bench's profiled run, `attach --duration 0`) clears it.
pub const INTERRUPTED: &str = "interrupted (Ctrl-C or SIGTERM)";

/// Collects from `target` until `duration` has passed, `stop` is raised (Ctrl-C) or the
/// target has no process left, then drains everything (see [`Collector::finish`]).
/// Every second it refreshes a pid-set filter and checks that the target is alive;
/// `on_tick` is called about ten times a second with the elapsed time (for a progress bar).
pub fn run(
    target: &mut ResolvedTarget,
    options: &Options,
    duration: Duration,
    stop: &AtomicBool,
    mut on_tick: impl FnMut(Duration),
) -> Result<(RawProfile, StopReason), CollectError> {
    let mut collector = Collector::start(target, options)?;
    let mut last_refresh = Instant::now();
    let mut failure = None;
    let reason = loop {
        if stop.load(Ordering::Relaxed) {
            break StopReason::Interrupted;
        }
        let elapsed = collector.elapsed();
        if elapsed >= duration {
            break StopReason::Deadline;
        }
        on_tick(elapsed);
        let next_window_change = match collector.tick() {
            Ok(d) => d,
            Err(e) => {
                failure = Some(e.to_string());
                break StopReason::Interrupted;
            }
        };
        std::thread::sleep((duration - elapsed).min(Duration::from_millis(100)).min(next_window_change));
        if last_refresh.elapsed() >= Duration::from_secs(1) {
            last_refresh = Instant::now();
            let old = match &target.filter {
                Filter::Pids(p) => p.clone(),
                Filter::Cgroup { .. } => BTreeSet::new(),
            };
            match target.refresh_pids() {
                Ok(Some(new)) => {
                    if let Err(e) = collector.update_pids(&new, &old) {
                        failure = Some(e.to_string());
                        break StopReason::Interrupted;
                    }
                }
                Ok(None) => {
                    if let Ok(pids) = target.pids() {
                        collector.note_processes(&pids);
                    }
                }
                Err(e) => {
                    failure = Some(e.to_string());
                    break StopReason::Interrupted;
                }
            }
            if !target.is_alive() {
                break StopReason::TargetGone;
            }
            collector.note_cpu_time(target);
        }
    };
    let partial = match (&reason, failure) {
        (_, Some(error)) => Some(format!("error: {error}")),
        (StopReason::Deadline, None) => None,
        (StopReason::Interrupted, None) => Some(INTERRUPTED.to_owned()),
        (StopReason::TargetGone, None) => Some("target exited".to_owned()),
    };
    let profile = collector.finish(target, partial)?;
    Ok((profile, reason))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn syscall_table_matches_the_uapi_numbers() {
        // Numbers from arch/x86/entry/syscalls/syscall_64.tbl.
        assert_eq!(syscall_name(0), "read");
        assert_eq!(syscall_name(1), "write");
        assert_eq!(syscall_name(20), "writev");
        assert_eq!(syscall_name(44), "sendto");
        assert_eq!(syscall_name(45), "recvfrom");
        assert_eq!(syscall_name(110), "getppid");
        assert_eq!(syscall_name(232), "epoll_wait");
        assert_eq!(syscall_name(435), "clone3");
        assert_eq!(syscall_name(462), "mseal");
        assert_eq!(syscall_name(600), "syscall_600");
        assert_eq!(syscall_name(libc::SYS_getppid as u32), "getppid");
        assert_eq!(syscall_name(libc::SYS_futex as u32), "futex");
        assert_eq!(syscall_name(libc::SYS_io_uring_setup as u32), "io_uring_setup");
    }

    #[test]
    fn comm_stops_at_nul() {
        let mut comm = [0u8; abi::COMM_LEN];
        comm[..5].copy_from_slice(b"tokio");
        assert_eq!(comm_string(&comm), "tokio");
        assert_eq!(comm_string(&[b'x'; abi::COMM_LEN]), "x".repeat(16));
    }
}
