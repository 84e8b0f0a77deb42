//! The canonical profile: the one in-memory type between collection and every renderer.
//!
//! `profile.json` is this type serialized with serde (schema [`SCHEMA_VERSION`]); the
//! flamegraphs, folded stacks, pprof file, ranking and `profiler diff` are all derived
//! from it, so a profile recorded today can be re-rendered or compared later.
//!
//! Two stages share these types:
//! - [`RawProfile`]: what `collect` drained from the kernel maps: addresses, counts,
//!   per-syscall statistics and loss counters, no names.
//! - [`Profile`]: the same after `symbolize`: interned [`Frame`]s and [`Stack`]s with names.

use serde::{Deserialize, Serialize};

pub mod folded;
pub mod json;
pub mod pprof;

/// Version of the `profile.json` schema. Bump it on any change a reader must know about;
/// readers refuse versions newer than theirs with one clear line.
///
/// History: 1, the first; 2, syscall statistics may cover only part of the run
/// ([`Meta::syscall_windows`]): a reader of version 1 would take their counts for the
/// whole run's.
pub const SCHEMA_VERSION: u32 = 2;

/// What was profiled, when, how, and whether the run ended early.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Meta {
    /// The target as the user named it, e.g. `container navree`, `pid 1234`, `cgroup /sys/fs/cgroup/unified/x`.
    pub target: String,
    /// cgroup v2 id (inode of the cgroup directory) the kernel filtered on, when filtering by cgroup.
    pub cgroup_id: Option<u64>,
    /// Start of the collection, RFC 3339 UTC.
    pub started_at: String,
    /// Wall-clock length of the collection, ns.
    pub duration_ns: u64,
    /// On-CPU sampling frequency per CPU, Hz.
    pub frequency_hz: u64,
    /// Off-CPU waits shorter than this were not recorded, ns.
    pub offcpu_min_block_ns: u64,
    /// Number of online CPUs sampled.
    pub cpus: u32,
    /// `uname -r` of the host.
    pub kernel: String,
    /// Version of the agent that recorded the profile.
    pub agent_version: String,
    /// `Some(reason)` when the run ended early (Ctrl-C, target exited, error); what was
    /// collected up to then is still complete and valid.
    pub partial: Option<String>,
    /// CPU time the target used during the run, ns (from its cgroup's `cpuacct.usage` or
    /// `/proc/PID/stat` utime+stime), when it could be read.
    pub target_cpu_ns: Option<u64>,
    /// How on-CPU user stacks were unwound when the stack-copy (DWARF) path was used
    /// (`--unwind dwarf|auto`); `None` for frame-pointer stacks unwound in the kernel.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unwind: Option<UnwindReport>,
    /// What the wire capture (`collect::Options::wire`) did in the kernel: knobs, chunks,
    /// losses; `None` when it was off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wire: Option<WireCaptureReport>,
    /// The agent's own cost during this run (measured by the agent on its own process);
    /// `None` in profiles recorded before it was measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub footprint: Option<Footprint>,
    /// When the syscall programs were attached (`collect::Options::syscalls_duty_pct`);
    /// `None` when syscalls were not counted, and in profiles of schema 1, whose counts cover
    /// the whole run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub syscall_windows: Option<SyscallWindows>,
    /// CPUs the target could use during the run ([`crate::target::ResolvedTarget::cpu_capacity`]:
    /// its cgroup's quota or cpuset, or its main process's affinity), when known: what
    /// [`Meta::target_cpu_ns`] over the run is a share of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_cpu_capacity: Option<f64>,
    /// CPU time all the host's CPUs ([`Meta::cpus`]) spent busy during the run, ns
    /// ([`crate::sys::stat::host_busy_ns`] at the end less at the start): the app, the
    /// database, the load generator and everything else on the host. `None` in profiles
    /// written before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_busy_ns: Option<u64>,
    /// CPU time each CPU of the host spent busy during the run, ns, by CPU number
    /// ([`crate::sys::stat::cpu_busy_ns`] at the end less at the start); empty when not
    /// read (and in profiles written before it).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub cpu_busy_ns: std::collections::BTreeMap<u32, u64>,
    /// The CPUs the target's main process may run on at the start of the run
    /// (`sched_getaffinity(2)`), ascending; empty when not known.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub target_cpus: Vec<u32>,
    /// The database servers on this host behind the target's PostgreSQL connections, with
    /// the CPU they used during the run ([`crate::collect::db_server`]); empty when the wire
    /// was off, saw no PostgreSQL connection, or found no server of its ports on this host.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub db_servers: Vec<DbServer>,
    /// The processes on this host connected to the target's listening ports at the end of
    /// the run (its HTTP clients: a load generator, a test harness), with the CPU they used
    /// during it ([`crate::collect::clients`]); empty when the wire was off or no client was
    /// found here (clients on other hosts, or gone before the end).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub http_clients: Vec<HttpClient>,
    /// The servers on this host that the target was connected to at the end of the run,
    /// other than its databases (an upstream service it calls, a cache), with the CPU they
    /// used during it ([`crate::collect::upstreams`]); empty when the wire was off or none
    /// was found here.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub upstream_servers: Vec<UpstreamServer>,
}

/// A server on the target's host that the target calls, and the CPU its process tree used
/// during a run ([`crate::collect::upstreams`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UpstreamServer {
    /// The TCP port it listens on, the remote port of the target's connection.
    pub port: u16,
    /// Host pid of the root of its process tree.
    pub pid: u32,
    /// Its command name (`/proc/PID/comm`).
    pub command: String,
    /// CPU time of its process tree during the run, ns (10 ms clock ticks).
    pub cpu_ns: u64,
}

/// A process on the target's host with connections to the target's listening ports, and the
/// CPU its process tree used during a run ([`crate::collect::clients`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HttpClient {
    /// Host pid.
    pub pid: u32,
    /// Its `comm` (`wrk`, ...).
    pub command: String,
    /// CPU time of its process tree during the run, ns (10 ms clock ticks).
    pub cpu_ns: u64,
}

/// A database server process on the target's host and the CPU its process tree used during a
/// run ([`crate::collect::db_server`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DbServer {
    /// The TCP port it listens on, which the target's connections had as peer port.
    pub port: u16,
    /// Host pid of the root of its process tree (PostgreSQL's postmaster).
    pub pid: u32,
    /// Its command name (`/proc/PID/comm`), e.g. `postgres`.
    pub command: String,
    /// CPU time of its process tree during the run (backends that exited included), ns, to
    /// the 10 ms clock ticks of `/proc/PID/stat`.
    pub cpu_ns: u64,
    /// The part of `cpu_ns` that the root process did itself (PostgreSQL's postmaster: its
    /// accepts and forks) or that its children which exited during the run did (the root's
    /// `cutime + cstime` grew by it when it reaped them), ns: the server's CPU of connections
    /// set up and closed during the run, everything each of them served included. Over the
    /// connections the wire saw set up it bounds a set-up's server CPU from above: the
    /// server's other short-lived processes (PostgreSQL's autovacuum and parallel query
    /// workers) are in it too. 0 in profiles written
    /// before it existed.
    #[serde(default)]
    pub exited_cpu_ns: u64,
    /// CPUs it may use ([`crate::target::process_cpu_capacity`]), when known.
    pub capacity_cpus: Option<f64>,
}

impl Meta {
    /// Factor from the syscall counts of the profile ([`SyscallStat`], counted while the
    /// syscall programs were attached) to estimates for the whole run: `1 / request_share`
    /// when the wire saw the requests served inside the windows
    /// ([`SyscallWindows::request_share`]: calls per request inside the windows, which the
    /// windows' own slowdown does not bias), else `duration_ns / traced_ns`; 1.0 when they
    /// were attached all along (or the profile does not say). Multiply counts, errors and
    /// `-EAGAIN` returns by it; latency percentiles and means need no scaling.
    pub fn syscall_scale(&self) -> f64 {
        match &self.syscall_windows {
            _ if let Some(share) = self.syscall_request_share() => 1.0 / share,
            Some(w) if w.traced_ns > 0 && w.traced_ns < self.duration_ns => self.duration_ns as f64 / w.traced_ns as f64,
            _ => 1.0,
        }
    }

    /// What [`Meta::syscall_scale`] scales by: `"requests"` (the share of the requests completed
    /// inside the windows) or `"time"` (the share of the run); `None` when every call was
    /// counted.
    pub fn syscall_scale_basis(&self) -> Option<&'static str> {
        if self.syscall_scale() <= 1.0 {
            None
        } else if self.syscall_request_share().is_some() {
            Some("requests")
        } else {
            Some("time")
        }
    }

    /// [`SyscallWindows::request_share`] when the counts were taken in windows and it is a
    /// share (0, 1].
    fn syscall_request_share(&self) -> Option<f64> {
        self.syscall_windows.as_ref().filter(|w| w.duty_pct < 100).and_then(|w| w.request_share).filter(|&s| s > 0.0 && s <= 1.0)
    }
}

/// The windows in which syscalls were counted (`collect::Collector`): the syscall programs
/// were attached during the first `duty_pct`% of every `period_ns` of the run.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SyscallWindows {
    /// Requested share of the run, percent (100: attached all along).
    pub duty_pct: u32,
    /// Length of one on/off cycle, ns.
    pub period_ns: u64,
    /// Windows opened.
    pub windows: u32,
    /// Time the programs were attached, summed over the windows, ns (at most the run's
    /// `duration_ns`).
    pub traced_ns: u64,
    /// Share (0..=1] of the HTTP requests' work the wire capture saw done inside the windows:
    /// a request of 1 ms or longer weighs its time inside at the windows' fitted slow-down, a
    /// shorter one 1 at its response, an unanswered one 1 at its request line
    /// ([`crate::wire::spread`] says why). `None` when every call was
    /// counted, without a wire capture or with fewer than
    /// [`crate::wire::spread::SPREAD_MIN_REQUESTS`] requests, and in profiles written before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_share: Option<f64>,
    /// What one syscall costs its task more while the programs are attached, ns: the
    /// `raw_syscalls` tracepoints take every task of the host off the syscall fast path and
    /// run the programs' filter. Calibrated when the programs are loaded, before the run, on the agent's
    /// own `getppid(2)` (a call that does nothing else): in [`crate::collect::CALIBRATION_PAIRS`]
    /// pairs, the least mean time per call over [`crate::collect::CALIBRATION_ROUNDS`] rounds of
    /// [`crate::collect::CALIBRATION_CALLS`] calls with the programs detached, then attached;
    /// the median difference. The target's calls pay it, plus the programs' counting (their
    /// run time). `None` in profiles written before it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tracepoint_tax_ns: Option<f64>,
    /// Length of each closed window, ns, in the order they were open; each syscall's
    /// [`SyscallStat::window_counts`] follows it. Empty with a duty of 100% (one window) and in
    /// profiles written before it was kept.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub window_ns: Vec<u64>,
    /// Share (0..=1) of the HTTP requests' work the wire saw done inside each closed window,
    /// in the order of [`SyscallWindows::window_ns`] ([`crate::wire::spread::RequestSpread::shares_within`]);
    /// their sum is [`SyscallWindows::request_share`]. Empty when that is `None` or
    /// `window_ns` is empty.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub window_request_share: Vec<f64>,
}

/// Fewest windows for a [`SyscallWindows::dispersion`]: 4 (3 degrees of freedom).
pub const DISPERSION_MIN_WINDOWS: usize = 4;

impl SyscallWindows {
    /// The dispersion index of one syscall's calls over the windows (the quasi-Poisson scale's
    /// moment estimate, McCullagh & Nelder, *Generalized Linear Models*, 2nd ed., 1989):
    /// Pearson's `X² = Σ (cᵢ - eᵢ)² / eᵢ` over `n - 1` degrees of freedom, where `cᵢ` is
    /// `counts[i]` and `eᵢ` the calls window `i` would hold if they followed its exposure: the
    /// requests' work done in it ([`SyscallWindows::window_request_share`]), else its time
    /// ([`SyscallWindows::window_ns`]). Calls made by each request (its reads and writes) give
    /// about 1 (the load's ups and downs between windows are in the exposure); calls that come
    /// in bursts (wrk's 64 connections accepted and registered with `epoll_ctl` at once) give
    /// about the burst's size. The variance of a count is this index times the count, so the
    /// standard error of a count `n` is `sqrt(index × n)` rather than Poisson's `sqrt(n)`.
    /// Between 1 and the calls counted (all of them one burst); the calls counted when some
    /// fall in a window of no exposure. `None` when there are fewer than
    /// [`DISPERSION_MIN_WINDOWS`] windows, when `counts` does not have one entry per window,
    /// or when no call was counted.
    pub fn dispersion(&self, counts: &[u64]) -> Option<f64> {
        let exposure: Vec<f64> = if self.window_request_share.len() == self.window_ns.len() {
            self.window_request_share.clone()
        } else {
            self.window_ns.iter().map(|&ns| ns as f64).collect()
        };
        if exposure.len() < DISPERSION_MIN_WINDOWS || counts.len() != exposure.len() {
            return None;
        }
        let calls: u64 = counts.iter().sum();
        let total: f64 = exposure.iter().sum();
        if calls == 0 || total <= 0.0 {
            return None;
        }
        let rate = calls as f64 / total;
        let mut x2 = 0.0;
        for (&c, &t) in counts.iter().zip(&exposure) {
            let e = rate * t;
            if e > 0.0 {
                x2 += (c as f64 - e).powi(2) / e;
            } else if c > 0 {
                return Some(calls as f64);
            }
        }
        Some((x2 / (counts.len() - 1) as f64).clamp(1.0, (calls as f64).max(1.0)))
    }
}

/// The agent's own cost during a run (`collect::Collector`), measured on its own process.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Footprint {
    /// From the start of loading the BPF objects until every program was attached, ns.
    pub attach_ns: u64,
    /// CPU time (user + system, `getrusage(RUSAGE_SELF)`) of the agent's whole process from
    /// the run's start (attaching the programs included) to its end, ns. Excludes the BPF programs themselves (they run in the
    /// context of the traced tasks) and the symbolization and rendering after the run.
    pub cpu_ns: u64,
    /// CPU time of the agent's own threads while attached, ns: the collection's thread and
    /// the drain threads that read the ring buffers (stack unwinding, wire decoding), each
    /// from its `pthread_getcpuclockid(3)` clock. The part of [`Footprint::cpu_ns`] that is
    /// the agent's, without the other threads of its process (`profiler bench`'s harness runs
    /// wrk and reads `/proc` in the same process). `None` in profiles written before it was
    /// recorded, or when the run was finished from another thread than it was started on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub threads_cpu_ns: Option<u64>,
    /// Peak resident memory of the agent's process (`VmHWM` of `/proc/self/status`) when the
    /// collection ended, bytes (symbolization and rendering come after; `profiler attach`
    /// prints the peak at exit too).
    pub peak_rss_bytes: u64,
    /// Run time of the agent's BPF programs while attached (sum of the kernel's per-program
    /// `run_time_ns`), ns, when BPF run statistics were on (`sysctl kernel.bpf_stats_enabled=1`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bpf_run_ns: Option<u64>,
    /// Runs of the agent's BPF programs while attached (sum of `run_cnt`), when run
    /// statistics were on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bpf_run_count: Option<u64>,
    /// Each attached BPF program's runs and run time while attached (the kernel's
    /// `bpf_prog_info.run_cnt` / `run_time_ns`), most run time first, when run statistics
    /// were on. Empty in profiles written before it was recorded.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub programs: Vec<ProgramCost>,
}

/// One BPF program's cost during a run, from the kernel's run statistics
/// (`BPF_ENABLE_STATS` with `BPF_STATS_RUN_TIME`). The programs run in the context of
/// whatever task hits their hook, on every process of the host for tracepoints, so
/// `run_time_ns` is an upper bound of what the target paid.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProgramCost {
    /// Program name (`on_cpu_sample`, `on_sys_enter`, ...).
    pub program: String,
    /// Times the program ran.
    pub runs: u64,
    /// Time spent in the program over all its runs, ns.
    pub run_time_ns: u64,
}

/// The kernel side of the wire capture during a run (`agent-ebpf` `wire.bpf.c`): what was
/// classified, what was sent to the agent and what was lost. Counts are syscalls.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireCaptureReport {
    /// Peer port that made a TCP socket a PostgreSQL connection.
    pub db_port: u16,
    /// The target's listening TCP ports (from `/proc/PID/net/tcp{,6}` LISTEN sockets whose
    /// inode is one of the target's fds): a socket with one of them as local port is HTTP.
    pub http_ports: Vec<u16>,
    /// Head bytes captured per call on PostgreSQL sockets, bytes.
    pub head_bytes: u64,
    /// Tail bytes captured per call on PostgreSQL sockets (contiguous buffers only), bytes.
    pub tail_bytes: u64,
    /// Head bytes read per call on HTTP sockets before the cut after the start line, bytes.
    pub http_head_bytes: u64,
    /// Chunks (calls that moved bytes) sent by the kernel.
    pub chunks: u64,
    /// Chunks received and decoded by the agent.
    pub chunks_decoded: u64,
    /// Chunks lost because the ring buffer was full.
    pub ringbuf_dropped: u64,
    /// Size of the `wire_chunks` ring buffer, bytes (0 in profiles of agents before it).
    #[serde(default)]
    pub ringbuf_bytes: u64,
    /// Longest time between two passes of the agent's drain thread over the ring buffer, µs
    /// (it polls every 50 ms, and is woken when the buffer is a quarter full): how long the
    /// buffer had to hold what the kernel sent. 0 in profiles of agents before it.
    #[serde(default)]
    pub drain_max_gap_us: u64,
    /// Most bytes one pass of the drain thread found in the ring buffer (records and their
    /// 8-byte ring-buffer headers): how near it came to [`WireCaptureReport::ringbuf_bytes`].
    #[serde(default)]
    pub drain_peak_bytes: u64,
    /// Calls on classified sockets made through other syscalls (`sendmmsg`, `sendfile`, ...),
    /// from kernel threads and io_uring workers, or receives with `MSG_PEEK` (their bytes come
    /// again with the next receive): no chunk. 0 in profiles of agents before it.
    #[serde(default)]
    pub other_calls: u64,
    /// Calls on classified sockets that returned `-EAGAIN` (no chunk).
    pub eagain: u64,
    /// Calls on classified sockets that returned another error or 0 (no chunk).
    pub errors: u64,
    /// Chunks whose head could not be read from the target's memory (sent without head).
    pub read_failures: u64,
    /// HTTP chunks that did not begin with a start line: sent without any byte.
    pub http_no_start_line: u64,
    /// Sockets recognised as PostgreSQL by the first bytes the target sent on them (a
    /// start-up message or a frontend message), whatever their port.
    #[serde(default)]
    pub pg_recognised: u64,
    /// The recovery of the text of statements prepared before the capture from
    /// `pg_stat_activity` (`--db-url`); absent without it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub statement_texts: Option<StatementTextReport>,
    /// Chunks per syscall name (`sendto`, `recvfrom`, `writev`, ...).
    pub chunks_by_syscall: std::collections::BTreeMap<String, u64>,
    /// Peer TCP ports of the PostgreSQL connections seen (the servers' listening ports),
    /// ascending; empty in profiles recorded before they were kept.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pg_server_ports: Vec<u16>,
}

/// What polling `pg_stat_activity` recovered (`agent/src/wire/resolve.rs`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StatementTextReport {
    /// Polls of `pg_stat_activity` made.
    pub polls: u64,
    /// Distinct (client port, statement start) rows seen.
    pub observations: u64,
    /// (connection, statement name) pairs that got a text.
    pub names_recovered: u64,
    /// Executions of statements prepared before the capture whose text was recovered.
    pub executions_recovered: u64,
    /// Executions of statements prepared before the capture still without a text.
    pub executions_unrecovered: u64,
    /// Why polling stopped early, when it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// What the stack-copy (DWARF, `.eh_frame`) unwinding did during a run: the bound on the stack
/// copy, how the walks ended, what it cost and, per binary, which unwind tables were used.
/// Counts are on-CPU samples unless said otherwise.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct UnwindReport {
    /// `dwarf` (CFI only; walks stop at code without CFI) or `auto` (CFI where the code has
    /// it, frame pointers where it has not).
    pub mode: String,
    /// Bytes of user stack copied at most per sample (the `stack_copy_bytes` knob), bytes.
    pub stack_copy_bytes: u64,
    /// Samples received from the ring buffer and unwound.
    pub samples: u64,
    /// Walks that reached the end of the stack (the outermost frame's CFI says it has no
    /// caller, as `_start` and `clone3` do).
    pub complete: u64,
    /// Walks that needed stack beyond the copy (stacks deeper than `stack_copy_bytes`).
    pub truncated_copy_end: u64,
    /// Walks stopped at code without CFI (JIT/anonymous memory, binaries without `.eh_frame`).
    pub truncated_no_unwind_info: u64,
    /// Walks stopped because a return address was outside executable memory (dropped).
    pub truncated_bad_address: u64,
    /// Walks stopped by the depth limit, an unwinder error, or a process gone before its
    /// samples were unwound.
    pub truncated_other: u64,
    /// Frames unwound with the frame-pointer fallback (`auto` only).
    pub fp_fallback_frames: u64,
    /// Sum of the stack bytes copied by the kernel over all samples, bytes.
    pub bytes_copied_total: u64,
    /// Most stack bytes copied for one sample, bytes.
    pub bytes_copied_max: u64,
    /// Most stack bytes a complete walk needed (highest address read - sp + 8), bytes: how
    /// deep the deepest complete stack was; compare with `stack_copy_bytes`.
    pub stack_bytes_used_max: u64,
    /// Wall-clock time the agent spent unwinding, ns.
    pub unwind_ns: u64,
    /// Distinct binaries whose unwind tables were read (each once per run).
    pub binaries_loaded: u64,
    /// Per binary that held a frame or ended a walk.
    pub modules: Vec<ModuleUnwind>,
}

/// How one binary's frames were unwound (part of [`UnwindReport`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModuleUnwind {
    /// File name (`libc.so.6`, `target-app`, `[vdso]`, `[anonymous]`).
    pub module: String,
    /// GNU build id, hex, when the binary has one.
    pub build_id: Option<String>,
    /// Unwind tables found: `eh_frame_hdr`, `eh_frame`, `debug_frame` or `none`.
    pub unwind_info: String,
    /// Why the binary could not be read, if it could not.
    pub error: Option<String>,
    /// Frames in this binary unwound with CFI.
    pub cfi_frames: u64,
    /// Frames in this binary unwound with frame pointers (no CFI, `auto` mode).
    pub fp_fallback_frames: u64,
    /// Walks that ended in this binary, complete.
    pub ended_complete: u64,
    /// Walks that ended in this binary, truncated (any reason).
    pub ended_truncated: u64,
    /// Samples with at least one frame in this binary.
    #[serde(default)]
    pub samples: u64,
    /// Of `samples`, those whose walk was complete.
    #[serde(default)]
    pub samples_complete: u64,
    /// Stack bytes copied by the kernel for `samples`, summed, bytes.
    #[serde(default)]
    pub bytes_copied: u64,
    /// Times this binary was replaced during the run (a process mapped another file under
    /// its name; the new file's tables were read). Samples taken before the replacement are
    /// symbolized against the file mapped at the end of the run.
    #[serde(default)]
    pub replaced: u64,
}

/// Everything the agent knows it lost. Shown in every report, never hidden.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LostCounters {
    /// Samples the BPF program could not record (counts map full, ...).
    pub samples_dropped: u64,
    /// `bpf_get_stackid` returned -EEXIST: a hash collision in the stack map dropped a stack.
    pub stack_collisions: u64,
    /// Stack walks that failed for another reason (-EFAULT, ...).
    pub stack_walk_failures: u64,
    /// Samples whose user stack did not reach the thread's start (see [`Stack::truncated`]).
    pub truncated_stacks: u64,
    /// Off-CPU intervals dropped (start map full).
    pub offcpu_dropped: u64,
    /// Events dropped because a ring buffer was full.
    pub ringbuf_dropped: u64,
    /// Off-CPU waits whose switch-in the kernel's `sched_switch` tracepoint did not show: the
    /// thread blocked again or exited with the wait still open. Not lost: each was ended where
    /// the thread must have come back (its next switch-out minus the CPU time it ran since),
    /// so their ends are estimates. A wait still open at the end of the run whose thread is
    /// gone is counted here too, and not counted as a wait. 0 in profiles written before it
    /// was counted.
    #[serde(default)]
    pub offcpu_switch_ins_unseen: u64,
}

/// Per-syscall statistics of the target, aggregated in the kernel.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SyscallStat {
    /// x86_64 syscall number.
    pub nr: u32,
    /// Name from the kernel's syscall table, e.g. `sendto`.
    pub name: String,
    /// Completed calls.
    pub count: u64,
    /// Calls that returned an error (negative return value), `-EAGAIN` included.
    pub errors: u64,
    /// Calls that returned `-EAGAIN` (nonblocking I/O with nothing ready) or `-EINPROGRESS`
    /// (a nonblocking connect under way, as every async runtime's connect returns), counted
    /// apart: not failures.
    pub eagain: u64,
    /// Sum of latencies from entry to exit, ns.
    pub total_ns: u64,
    /// Latency histogram: `latency_log2_ns[i]` counts calls with latency in `[2^i, 2^(i+1))` ns.
    pub latency_log2_ns: Vec<u64>,
    /// Sum of the positive return values. For the read and write families (`read`, `recvfrom`,
    /// `write`, `sendto`, ...) the bytes they moved, so `bytes / (count - errors)` is the mean
    /// bytes per successful call ([`SyscallStat::bytes_per_call`]); meaningless for others. 0 in
    /// profiles written before it was counted.
    #[serde(default)]
    pub bytes: u64,
    /// Calls counted in each closed window, in the order of [`SyscallWindows::window_ns`]
    /// (their sum is `count`, less any call a program finished counting after its window's
    /// detach). Empty when the calls were counted in one window and in profiles
    /// written before it was kept.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub window_counts: Vec<u64>,
}

/// The syscalls whose positive return value is the bytes they moved (their man pages'
/// RETURN VALUE): the read and write families, sockets included.
pub const BYTE_SYSCALLS: &[&str] = &[
    "read", "write", "readv", "writev", "pread64", "pwrite64", "preadv", "pwritev", "preadv2", "pwritev2", "recvfrom",
    "sendto", "recvmsg", "sendmsg", "sendfile", "splice", "copy_file_range",
];

impl SyscallStat {
    /// Mean bytes moved per successful call (`bytes / (count - errors)`) of a syscall of
    /// [`BYTE_SYSCALLS`]; `None` for other syscalls, without a successful call, or without a
    /// byte count (profiles written before it was counted).
    pub fn bytes_per_call(&self) -> Option<f64> {
        let ok = self.count.saturating_sub(self.errors);
        (BYTE_SYSCALLS.contains(&self.name.as_str()) && ok > 0 && self.bytes > 0).then(|| self.bytes as f64 / ok as f64)
    }
}

/// A process of the target, as seen when it was first sampled.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Process {
    /// Host pid namespace pid.
    pub pid: u32,
    /// `comm` of the process (thread-group leader).
    pub comm: String,
    /// Executable path as the process sees it (inside its container), from `/proc/PID/exe`.
    pub exe: String,
}

/// One on-CPU or off-CPU stack as drained from the kernel, not yet symbolized.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RawStack {
    /// Process id (host pid namespace).
    pub pid: u32,
    /// Thread id (host pid namespace).
    pub tid: u32,
    /// Thread name (`comm`) at sample time.
    pub thread: String,
    /// User stack, leaf first, return addresses as the CPU saw them (virtual addresses).
    pub user: Vec<u64>,
    /// Kernel stack, leaf first.
    pub kernel: Vec<u64>,
    /// For on-CPU: the number of samples. For off-CPU: the number of waits.
    pub count: u64,
    /// For off-CPU: total time switched out, ns. 0 for on-CPU.
    pub total_ns: u64,
    /// Which stack the kernel took but could not keep (`bpf_get_stackid` failed, e.g.
    /// `-EEXIST`, a hash collision in the stack-trace map; off-CPU only, the on-CPU samplers
    /// copy their stacks into their records): symbolization puts
    /// [`crate::symbolize::USER_STACK_LOST`] / [`crate::symbolize::KERNEL_STACK_LOST`] in its
    /// place, so that the sample's self time is not given to the frames above.
    #[serde(default)]
    pub lost: StackLost,
    /// On-CPU: the time of each sample, ns of `CLOCK_MONOTONIC` (`bpf_ktime_get_ns`), in the
    /// order they arrived; fewer than `count` when the samplers' cap was reached
    /// ([`crate::collect`]'s `MAX_SAMPLE_TIMES`). Used to join samples to the requests
    /// being served, then dropped; not serialized.
    #[serde(skip)]
    pub sample_times_ns: Vec<u64>,
    /// On-CPU: samples per endpoint served (index into [`EndpointSamples::endpoints`],
    /// samples), from [`crate::wire::serving`]; empty when none was attributed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub endpoints: Vec<(u32, u64)>,
    /// Off-CPU: what the waits were, told by the kernel from the system call's arguments
    /// (symbolization puts [`crate::symbolize::CONTENDED_LOCK_WAIT`] between the user and
    /// kernel frames of a contended lock's wait). [`OffCpuWait::Other`] for on-CPU samples.
    #[serde(default)]
    pub wait: OffCpuWait,
}

/// What an off-CPU wait was, from the arguments of the system call its thread was switched out
/// in (`offcpu.bpf.c`): evidence that needs no user frame, which code built without frame
/// pointers does not give off the CPU.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OffCpuWait {
    /// Any other wait (or an on-CPU sample).
    #[default]
    Other,
    /// A lock's slow path: a futex wait on a word holding 2, the "locked, with waiters" state
    /// of glibc's low-level lock and of Rust std's futex `Mutex` (Drepper, "Futexes Are
    /// Tricky"), or `FUTEX_LOCK_PI` (a priority-inheritance mutex).
    ContendedLock,
}

/// On-CPU samples joined to the HTTP endpoints of the wire capture: a thread's samples go to
/// the request it was serving at the time ([`crate::wire::serving`]).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndpointSamples {
    /// Endpoint names (`METHOD /route`, as in the wire summary); the endpoint indices of
    /// [`StackCount::endpoints`] and [`RawStack::endpoints`] point into it.
    pub endpoints: Vec<String>,
    /// Samples attributed to an endpoint.
    pub attributed: u64,
    /// Samples of threads that had made no socket call of a request before them (blocking
    /// pools, background tasks, start-up).
    pub unattributed: u64,
    /// Samples with no time kept (past the samplers' cap) or past the timeline's cap
    /// ([`crate::wire::serving::MAX_CHANGES`]).
    pub not_recorded: u64,
    /// PostgreSQL round trips and statements per endpoint: the chains of round trips linked to
    /// its requests ([`crate::wire::serving`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub db: Vec<crate::wire::serving::EndpointDb>,
    /// PostgreSQL work linked to no request (background work, requests cut by the capture's
    /// edges).
    #[serde(default)]
    pub db_unattributed: crate::wire::serving::DbCounts,
}

/// Stacks of a [`RawStack`] that were lost in the kernel.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StackLost {
    /// The user stack was lost.
    pub user: bool,
    /// The sample was in kernel mode and its kernel stack was lost.
    pub kernel: bool,
}

/// What `collect` drained from the kernel: addresses, counts and statistics, no names.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RawProfile {
    /// Run description.
    pub meta: Meta,
    /// Processes of the target seen during the run.
    pub processes: Vec<Process>,
    /// On-CPU samples aggregated per (pid, tid, user stack, kernel stack).
    pub on_cpu: Vec<RawStack>,
    /// Off-CPU waits aggregated per (pid, tid, user stack, kernel stack).
    pub off_cpu: Vec<RawStack>,
    /// Syscalls of the target.
    pub syscalls: Vec<SyscallStat>,
    /// Loss counters.
    pub lost: LostCounters,
    /// What the target said on its TCP sockets (HTTP request lines, PostgreSQL round trips,
    /// statement shapes, pings, transactions), decoded from the wire capture; `None` when the
    /// capture was off (`collect::Options::wire`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wire: Option<crate::wire::WireSummary>,
    /// On-CPU samples joined to endpoints (wire capture and on-CPU sampling both on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoints: Option<EndpointSamples>,
    /// Executable mappings of the target's processes, recorded while they ran, with their
    /// files held open: what symbolizes a process that exited before the end. Not
    /// serialized (open file handles of this agent).
    #[serde(skip)]
    pub maps: crate::sys::process_maps::ProcessMaps,
    /// The kernel's symbols of JIT-compiled BPF programs (`[bpf]` lines of `/proc/kallsyms`:
    /// start address, `bpf_prog_<tag>_<name>`), read before the agent's programs were
    /// unloaded: samples taken inside a BPF program (the agent's own wire and syscall
    /// programs run in the target's syscalls) are named after it, not after the last kernel
    /// symbol before the JIT area. Sorted by address.
    #[serde(skip)]
    pub bpf_symbols: Vec<(u64, String)>,
}

/// Where a frame's code lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FrameKind {
    /// User-space code.
    User,
    /// Kernel code (symbolized from kallsyms).
    Kernel,
}

/// One symbolized frame. Inlined functions are frames of their own, as perf shows them.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Frame {
    /// Demangled function name with its full Rust path (`tokio::runtime::task::harness::poll`),
    /// or `[unknown]` when nothing resolved.
    pub function: String,
    /// File name of the binary or library (`target-app`, `libc.so.6`, `[kernel]`).
    pub module: String,
    /// User or kernel.
    pub kind: FrameKind,
    /// True when this frame was inlined into its caller (no address of its own).
    pub inlined: bool,
    /// Source file, when line tables had it.
    pub file: Option<String>,
    /// Source line, when line tables had it.
    pub line: Option<u32>,
}

impl Frame {
    /// The name shown in folded stacks, flamegraphs, pprof and summaries: [`Frame::function`],
    /// or `[unknown] (MODULE)` when nothing resolved but the module is known (perf's
    /// convention of naming the DSO), e.g. `[unknown] (libfoo.so)`.
    pub fn display_name(&self) -> std::borrow::Cow<'_, str> {
        if self.function == "[unknown]" && !self.module.is_empty() {
            std::borrow::Cow::Owned(format!("[unknown] ({})", self.module))
        } else {
            std::borrow::Cow::Borrowed(&self.function)
        }
    }
}

/// An interned stack: indices into [`Profile::frames`], root (thread start) first, leaf last,
/// kernel frames after user frames (the order of folded stacks).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Stack {
    /// Frame indices, root first.
    pub frames: Vec<u32>,
    /// True when the user part did not reach the thread's start (`_start`, `clone3`,
    /// `start_thread`): the walk stopped early (missing frame pointers, depth limit).
    pub truncated: bool,
}

/// Samples or waits of one thread on one stack.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StackCount {
    /// Process id.
    pub pid: u32,
    /// Thread id.
    pub tid: u32,
    /// Thread name.
    pub thread: String,
    /// Index into [`Profile::stacks`].
    pub stack: u32,
    /// On-CPU: samples. Off-CPU: waits.
    pub count: u64,
    /// Off-CPU: total time switched out, ns. 0 for on-CPU.
    pub total_ns: u64,
    /// On-CPU: of `count`, samples per endpoint served (index into
    /// [`EndpointSamples::endpoints`] of [`Profile::endpoints`], samples), most first; empty
    /// when none was attributed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub endpoints: Vec<(u32, u64)>,
}

/// The canonical profile (`profile.json`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Profile {
    /// Always [`SCHEMA_VERSION`] when written by this agent.
    pub schema_version: u32,
    /// Run description.
    pub meta: Meta,
    /// Processes of the target.
    pub processes: Vec<Process>,
    /// Interned frames.
    pub frames: Vec<Frame>,
    /// Interned stacks.
    pub stacks: Vec<Stack>,
    /// On-CPU samples.
    pub on_cpu: Vec<StackCount>,
    /// Off-CPU waits.
    pub off_cpu: Vec<StackCount>,
    /// Syscalls of the target.
    pub syscalls: Vec<SyscallStat>,
    /// Loss counters.
    pub lost: LostCounters,
    /// What the target said on its TCP sockets (HTTP request lines, PostgreSQL round trips,
    /// statement shapes, pings, transactions), decoded from the wire capture; `None` when the
    /// capture was off (`collect::Options::wire`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wire: Option<crate::wire::WireSummary>,
    /// On-CPU samples joined to the endpoints of the wire capture: names and how many
    /// samples could be attributed ([`StackCount::endpoints`] holds the split). `None` without
    /// a wire capture or on-CPU sampling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoints: Option<EndpointSamples>,
}

impl Profile {
    /// The database servers' CPU of the connections set up and closed during the run and the
    /// set-ups the wire saw: `(ns, set-ups)`, the sum of [`DbServer::exited_cpu_ns`] and
    /// [`crate::wire::summary::PgSummary::connections_timed`]. `None` without a server measured
    /// on this host or without a set-up seen.
    pub fn connection_setup_server_cpu(&self) -> Option<(u64, u64)> {
        let setups = self.wire.as_ref().map_or(0, |w| w.pg.connections_timed);
        (setups > 0 && !self.meta.db_servers.is_empty()).then(|| (self.meta.db_servers.iter().map(|s| s.exited_cpu_ns).sum(), setups))
    }

    /// The database servers' CPU per round trip on the wire, µs: their CPU over the run, less
    /// that of connections set up and closed during it ([`Profile::connection_setup_server_cpu`]),
    /// over all round trips (each alike: an upper bound for a ping, which costs the server less
    /// than a statement). `None` without a server measured on this host or a round trip.
    pub fn db_cpu_us_per_round_trip(&self) -> Option<f64> {
        let round_trips = self.wire.as_ref().map_or(0, |w| w.pg.round_trips);
        (!self.meta.db_servers.is_empty() && round_trips > 0).then(|| {
            let db_ns: u64 = self.meta.db_servers.iter().map(|s| s.cpu_ns).sum();
            let exited = self.connection_setup_server_cpu().map_or(0, |(ns, _)| ns);
            db_ns.saturating_sub(exited) as f64 / 1e3 / round_trips as f64
        })
    }
}

#[cfg(test)]
mod tests {
    use super::{Meta, SyscallWindows};

    fn meta(duty_pct: u32, traced_ns: u64, request_share: Option<f64>) -> Meta {
        Meta { duration_ns: 8_000_000_000, syscall_windows: Some(SyscallWindows { duty_pct, period_ns: 1_000_000_000, windows: 8, traced_ns, request_share, tracepoint_tax_ns: None, window_ns: Vec::new(), window_request_share: Vec::new() }), ..Meta::default() }
    }

    /// By hand: 8 windows of 250 ms, 130 calls. All in one window: each window expects
    /// 16.25, X² = 113.75²/16.25 + 7 × 16.25 = 910, over 7 degrees of freedom 130. Spread
    /// 16 or 17 a window: X² = (6 × 0.25² + 2 × 0.75²)/16.25 = 0.092, so 1 (the floor).
    /// A last window half as long expects half as many calls.
    #[test]
    fn dispersion_is_pearsons_chi_square_over_the_degrees_of_freedom() {
        let windows = |ns: Vec<u64>| SyscallWindows { window_ns: ns, ..SyscallWindows::default() };
        let eight = windows(vec![250_000_000; 8]);
        assert!((eight.dispersion(&[130, 0, 0, 0, 0, 0, 0, 0]).unwrap() - 130.0).abs() < 1e-9);
        assert_eq!(eight.dispersion(&[16, 17, 16, 16, 17, 16, 16, 16]), Some(1.0));
        // 5 windows, the last 125 ms: rate 90 calls / 1.125 s, expected 20 20 20 20 10.
        let short_last = windows(vec![250_000_000, 250_000_000, 250_000_000, 250_000_000, 125_000_000]);
        assert_eq!(short_last.dispersion(&[20, 20, 20, 20, 10]), Some(1.0));
        // (40-20)²/20 + (0-20)²/20 + 0 + 0 + 0 = 40, over 4: 10.
        assert!((short_last.dispersion(&[40, 0, 20, 20, 10]).unwrap() - 10.0).abs() < 1e-9);
        // Exposure by the requests' work when the wire saw it: a window that served twice the
        // requests expects twice the calls (0.4 0.2 0.2 0.2 of 100 calls: 40 20 20 20).
        let by_requests = SyscallWindows { window_ns: vec![250_000_000; 4], window_request_share: vec![0.2, 0.1, 0.1, 0.1], ..SyscallWindows::default() };
        assert_eq!(by_requests.dispersion(&[40, 20, 20, 20]), Some(1.0));
        // The same calls by time: X² = (15² + 3 × 5²)/25 = 12, over 3: 4.
        assert!((windows(vec![250_000_000; 4]).dispersion(&[40, 20, 20, 20]).unwrap() - 4.0).abs() < 1e-9);
        // Calls in a window that served no request (wrk closing its connections after the
        // load): as dispersed as one burst can be, the calls counted.
        let idle_last = SyscallWindows { window_ns: vec![250_000_000; 4], window_request_share: vec![0.3, 0.3, 0.3, 0.0], ..SyscallWindows::default() };
        assert_eq!(idle_last.dispersion(&[0, 1, 0, 64]), Some(65.0));
        // Too few windows, a count per window missing, nothing counted.
        assert_eq!(windows(vec![250_000_000; 3]).dispersion(&[1, 2, 3]), None);
        assert_eq!(eight.dispersion(&[1, 2, 3]), None);
        assert_eq!(eight.dispersion(&[0; 8]), None);
    }

    /// Counts from windows that held a quarter of the requests are multiplied by 4; without a
    /// request share, by the run's length over the windows' (2 s of 8 s: 4); all calls counted
    /// (duty 100, or no windows) are taken as they are, whatever the share says.
    #[test]
    fn windowed_counts_scale_by_the_requests_inside_them_else_by_time() {
        let by_requests = meta(25, 2_000_000_000, Some(0.25));
        assert_eq!((by_requests.syscall_scale(), by_requests.syscall_scale_basis()), (4.0, Some("requests")));
        let by_time = meta(25, 2_000_000_000, None);
        assert_eq!((by_time.syscall_scale(), by_time.syscall_scale_basis()), (4.0, Some("time")));
        let out_of_range = meta(25, 2_000_000_000, Some(1.5));
        assert_eq!((out_of_range.syscall_scale(), out_of_range.syscall_scale_basis()), (4.0, Some("time")));
        let every_call = meta(100, 8_000_000_000, Some(0.25));
        assert_eq!((every_call.syscall_scale(), every_call.syscall_scale_basis()), (1.0, None));
        let no_windows = Meta { duration_ns: 8_000_000_000, ..Meta::default() };
        assert_eq!((no_windows.syscall_scale(), no_windows.syscall_scale_basis()), (1.0, None));
    }
}
