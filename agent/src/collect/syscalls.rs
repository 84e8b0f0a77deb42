//! Syscall statistics (`syscalls.bpf.c`): `on_sys_enter` / `on_sys_exit` on the raw
//! tracepoints `sys_enter` / `sys_exit`, attached all the time or in windows.
//!
//! Why windows: while any `raw_syscalls` program is attached, every syscall of every task on
//! the host takes the kernel's slow path (`syscall_trace_enter`, `syscall_exit_work`) and
//! runs the filter, whatever the target. Measured on target-app's `/json` (about 400,000
//! syscalls a second): 15-20 points of throughput (PERFORMANCE.md). fentry, which
//! would avoid the slow path, is refused on the machines this agent was built on. So by
//! default the pair is attached [`DEFAULT_SYSCALL_DUTY_PCT`] percent of the time: a window of
//! `duty × WINDOW_PERIOD` at the start of every [`WINDOW_PERIOD`] of the run, and detached
//! (fast path again) in between.
//!
//! The kernel counts calls that began and ended inside one window (a call that began in an
//! earlier window is skipped by its window number, `MAP_SYSCALL_WINDOW`). The agent keeps each
//! window's span in `CLOCK_MONOTONIC` (the wire's clock) and their summed time
//! ([`SyscallWindows::traced_ns`]); counts stay as counted in [`SyscallStat`] and readers scale
//! them with [`Meta::syscall_scale`] into estimates for the whole run: by the share of the HTTP
//! requests' work the wire saw done inside the windows ([`SyscallWindows::request_share`]), else by
//! run time over traced time. The windows slow a syscall-heavy target while they count (every
//! call takes the slow path), and its requests slow with it: calls per request inside the
//! windows stay true where calls per second do not. Latency percentiles need no scaling. Calls
//! blocked for longer than a window (an idle `epoll_wait`) are under-counted.
//! `--syscalls-duty 100` counts every call.
//!
//! [`Meta::syscall_scale`]: crate::profile::Meta::syscall_scale

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use agent_ebpf::abi::{self, names, SyscallStat as AbiSyscallStat};
use aya::maps::{Array, MapData, PerCpuArray};
use aya::programs::raw_trace_point::RawTracePointLinkId;
use aya::programs::RawTracePoint;
use aya::Ebpf;

use super::{load_error, load_object, map_error, program, set_target_pids, syscall_name, CollectError};
use crate::profile::{SyscallStat, SyscallWindows};
use crate::target::Filter;

/// Default share of the run the syscall programs are attached, percent (`--syscalls-duty`).
pub const DEFAULT_SYSCALL_DUTY_PCT: u32 = 25;

/// Length of one on/off cycle of the syscall programs: each starts with a window of
/// `duty × WINDOW_PERIOD`, 250 ms at the default duty.
pub const WINDOW_PERIOD: Duration = Duration::from_secs(1);

/// The loaded syscall programs and their windows.
pub(super) struct SyscallTracer {
    ebpf: Ebpf,
    duty_pct: u32,
    /// The links of the open window (`sys_enter`, `sys_exit`).
    links: Option<[RawTracePointLinkId; 2]>,
    /// Number of the latest window, from 1 (0 before the first).
    window: u32,
    /// When the open window began, and then in ns of `CLOCK_MONOTONIC`.
    opened: Option<(Instant, u64)>,
    /// Time of the closed windows.
    traced: Duration,
    /// [`SyscallWindows::tracepoint_tax_ns`], calibrated when the programs were loaded.
    tax_ns: Option<f64>,
    /// The closed windows, `[start, end)` in ns of `CLOCK_MONOTONIC` (the wire's clock): from
    /// the attach of both programs to the start of their detach.
    spans: Vec<(u64, u64)>,
    /// Calls counted per syscall number at the close of the latest window (the map's running
    /// totals), and each closed window's calls: `(number, calls)` of the numbers it counted.
    totals: Vec<u64>,
    window_counts: Vec<Vec<(u32, u64)>>,
    /// [`super::Options::syscalls_gate`].
    gate: Option<super::Gate>,
    /// A tick found the gate closed: the windows do not cover the whole run.
    held: bool,
}

impl SyscallTracer {
    /// Loads both programs (verified, not attached) and calibrates
    /// [`SyscallWindows::tracepoint_tax_ns`] (window number 0: the programs count nothing
    /// meanwhile). `duty_pct` must be 1..=100; no window opens before `gate` is raised.
    pub(super) fn load(filter: &Filter, duty_pct: u32, gate: Option<super::Gate>) -> Result<Self, CollectError> {
        if !(1..=100).contains(&duty_pct) {
            return Err(CollectError::InvalidOption { option: "--syscalls-duty", message: format!("{duty_pct}% is not in 1..=100") });
        }
        let mut ebpf = load_object("syscalls", agent_ebpf::SYSCALLS_OBJECT, filter, &[])?;
        for name in [names::PROG_ON_SYS_ENTER, names::PROG_ON_SYS_EXIT] {
            let prog: &mut RawTracePoint = program(&mut ebpf, name)?;
            prog.load().map_err(|e| load_error(name, e))?;
        }
        let mut tracer = SyscallTracer { ebpf, duty_pct, links: None, window: 0, opened: None, traced: Duration::ZERO, spans: Vec::new(), tax_ns: None, totals: vec![0; abi::MAX_SYSCALLS as usize], window_counts: Vec::new(), gate, held: false };
        // Here rather than at the first window, whose length the calibration would shorten.
        tracer.tax_ns = Some(tracer.calibrate()?);
        Ok(tracer)
    }

    /// The object (maps, run statistics).
    pub(super) fn ebpf(&self) -> &Ebpf {
        &self.ebpf
    }

    /// Whether the gate held the windows closed for a while ([`super::Options::syscalls_gate`]).
    pub(super) fn held(&self) -> bool {
        self.held
    }

    /// Requested share of the run, percent.
    pub(super) fn duty_pct(&self) -> u32 {
        self.duty_pct
    }

    /// The closed windows, `[start, end)` in ns of `CLOCK_MONOTONIC`; with a duty of 100%,
    /// one window over the run once closed.
    pub(super) fn spans(&self) -> &[(u64, u64)] {
        &self.spans
    }

    /// See [`super::Collector::update_pids`].
    pub(super) fn update_pids(&mut self, pids: &BTreeSet<u32>, old: &BTreeSet<u32>) -> Result<(), CollectError> {
        set_target_pids(&mut self.ebpf, pids, old)
    }

    /// Opens a window: a new window number, then both programs attached. A `sys_exit`
    /// without its `sys_enter` in this window is skipped by the program, so the attach
    /// order of the pair does not matter.
    pub(super) fn open(&mut self) -> Result<(), CollectError> {
        if self.links.is_some() {
            return Ok(());
        }
        self.window += 1;
        let map = self.ebpf.map_mut(names::MAP_SYSCALL_WINDOW).ok_or_else(|| map_error(names::MAP_SYSCALL_WINDOW, "missing"))?;
        let mut array: Array<&mut MapData, u32> = Array::try_from(map).map_err(|e| map_error(names::MAP_SYSCALL_WINDOW, e))?;
        array.set(0, self.window, 0).map_err(|e| map_error(names::MAP_SYSCALL_WINDOW, e))?;
        self.links = Some(self.attach_pair()?);
        self.opened = Some((Instant::now(), super::monotonic_ns()));
        Ok(())
    }

    fn attach_pair(&mut self) -> Result<[RawTracePointLinkId; 2], CollectError> {
        let mut links = Vec::with_capacity(2);
        for (name, tp) in [(names::PROG_ON_SYS_ENTER, names::RAW_TP_SYS_ENTER), (names::PROG_ON_SYS_EXIT, names::RAW_TP_SYS_EXIT)] {
            let prog: &mut RawTracePoint = program(&mut self.ebpf, name)?;
            links.push(prog.attach(tp).map_err(|source| CollectError::Attach { program: name, source })?);
        }
        let exit = links.pop().expect("two links");
        let enter = links.pop().expect("two links");
        Ok([enter, exit])
    }

    fn detach_pair(&mut self, [enter, exit]: [RawTracePointLinkId; 2]) -> Result<(), CollectError> {
        for (name, link) in [(names::PROG_ON_SYS_ENTER, enter), (names::PROG_ON_SYS_EXIT, exit)] {
            let prog: &mut RawTracePoint = program(&mut self.ebpf, name)?;
            prog.detach(link).map_err(|source| CollectError::Attach { program: name, source })?;
        }
        Ok(())
    }

    /// [`SyscallWindows::tracepoint_tax_ns`]: [`CALIBRATION_PAIRS`] times, the agent's
    /// `getppid(2)` timed with the pair detached, then attached ([`syscall_ns`]); the median
    /// of the differences, at least 0. Alternating pairs keep the machine's drift (±20 ns
    /// per call between two runs a few seconds apart here) out of the difference.
    fn calibrate(&mut self) -> Result<f64, CollectError> {
        median_cost_ns(syscall_ns, |measure| {
            let links = self.attach_pair()?;
            let on = measure();
            self.detach_pair(links)?;
            Ok(on)
        })
    }

    /// Closes the open window (detaches both programs), adds its time and keeps the calls it
    /// counted per syscall (the map's totals less those at the previous close).
    pub(super) fn close(&mut self) -> Result<(), CollectError> {
        let Some(links) = self.links.take() else {
            return Ok(());
        };
        if let Some((opened, start)) = self.opened.take() {
            self.traced += opened.elapsed();
            self.spans.push((start, super::monotonic_ns()));
        }
        self.detach_pair(links)?;
        let totals = counts(&self.ebpf)?;
        let window = totals.iter().zip(&self.totals).enumerate().filter(|(_, (now, before))| now > before).map(|(nr, (now, before))| (nr as u32, now - before)).collect();
        self.window_counts.push(window);
        self.totals = totals;
        Ok(())
    }

    /// Opens or closes the window for `elapsed` time since the run started (a window is open
    /// during the first `duty × WINDOW_PERIOD` of each period) and returns the time until
    /// the next change.
    pub(super) fn tick(&mut self, elapsed: Duration) -> Result<Duration, CollectError> {
        if self.gate.as_ref().is_some_and(|g| !g.is_open()) {
            self.held = true;
            self.close()?;
            return Ok(GATE_POLL);
        }
        if self.duty_pct >= 100 {
            self.open()?;
            return Ok(Duration::MAX);
        }
        let on = WINDOW_PERIOD * self.duty_pct / 100;
        let phase = Duration::from_nanos((elapsed.as_nanos() % WINDOW_PERIOD.as_nanos()) as u64);
        if phase < on {
            self.open()?;
            Ok(on - phase)
        } else {
            self.close()?;
            Ok(WINDOW_PERIOD - phase)
        }
    }

    /// Closes the last window and reads the statistics of a run of length `run`:
    /// `(per syscall, windows)`.
    pub(super) fn finish(mut self, run: Duration) -> Result<(Vec<SyscallStat>, SyscallWindows), CollectError> {
        self.close()?;
        let mut stats = drain(&self.ebpf)?;
        // Per-window counts only where there are windows to compare (not at a duty of 100%).
        let window_ns: Vec<u64> = if self.spans.len() > 1 { self.spans.iter().map(|(start, end)| end.saturating_sub(*start)).collect() } else { Vec::new() };
        if !window_ns.is_empty() && self.window_counts.len() == window_ns.len() {
            for stat in &mut stats {
                stat.window_counts = self.window_counts.iter().map(|w| w.iter().find(|(nr, _)| *nr == stat.nr).map_or(0, |(_, n)| *n)).collect();
            }
        }
        let windows = SyscallWindows {
            duty_pct: self.duty_pct,
            period_ns: WINDOW_PERIOD.as_nanos() as u64,
            windows: self.window,
            traced_ns: (self.traced.as_nanos() as u64).min(run.as_nanos() as u64),
            request_share: None,
            tracepoint_tax_ns: self.tax_ns,
            window_ns: if stats.first().is_some_and(|s| !s.window_counts.is_empty()) { window_ns } else { Vec::new() },
            window_request_share: Vec::new(),
        };
        Ok((stats, windows))
    }
}

/// How often a closed gate is looked at ([`super::Options::syscalls_gate`]): 10 ms, so a
/// window due when it opens starts at most that late.
const GATE_POLL: Duration = Duration::from_millis(10);

/// Detached-then-attached pairs of the calibration of [`SyscallWindows::tracepoint_tax_ns`].
pub const CALIBRATION_PAIRS: usize = 3;
/// Rounds of [`CALIBRATION_CALLS`] `getppid(2)` calls timed on each side of a calibration
/// pair ([`CALIBRATION_PAIRS`]).
pub const CALIBRATION_ROUNDS: u32 = 5;
/// Calls per calibration round: 2,000 (about 0.2-1 ms on this machine's 2 vCPUs).
pub const CALIBRATION_CALLS: u32 = 2_000;

/// What an instrument costs each call it sees, ns: [`CALIBRATION_PAIRS`] times, `measure`
/// (a time per call, ns) without the instrument, then `attached` (which attaches it, calls
/// `measure` and detaches it); the median of the differences, at least 0. Alternating pairs
/// keep the machine's drift out of the difference.
///
/// # Errors
/// The first error of `attached`.
pub(crate) fn median_cost_ns<E>(measure: impl Fn() -> f64, mut attached: impl FnMut(&dyn Fn() -> f64) -> Result<f64, E>) -> Result<f64, E> {
    let mut diffs = Vec::with_capacity(CALIBRATION_PAIRS);
    for _ in 0..CALIBRATION_PAIRS {
        let off = measure();
        let on = attached(&measure)?;
        diffs.push(on - off);
    }
    diffs.sort_by(f64::total_cmp);
    Ok(diffs[diffs.len() / 2].max(0.0))
}

/// The least mean time of one call of `call` over [`CALIBRATION_ROUNDS`] rounds of
/// [`CALIBRATION_CALLS`] calls, ns: the least is the round the fewest interrupts and
/// preemptions fell in.
pub(crate) fn least_mean_ns(call: impl Fn()) -> f64 {
    (0..CALIBRATION_ROUNDS)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..CALIBRATION_CALLS {
                call();
            }
            t.elapsed().as_nanos() as f64 / f64::from(CALIBRATION_CALLS)
        })
        .fold(f64::INFINITY, f64::min)
}

/// The least mean time of one `getppid(2)` call ([`least_mean_ns`]), ns.
fn syscall_ns() -> f64 {
    least_mean_ns(|| {
        // SAFETY: getppid takes no arguments and cannot fail.
        unsafe { libc::syscall(libc::SYS_getppid) };
    })
}

/// The calls counted so far per syscall number (summed over CPUs), indexed by number.
fn counts(ebpf: &Ebpf) -> Result<Vec<u64>, CollectError> {
    let map = ebpf.map(names::MAP_SYSCALL_STATS).ok_or_else(|| map_error(names::MAP_SYSCALL_STATS, "missing"))?;
    let stats: PerCpuArray<&MapData, AbiSyscallStat> =
        PerCpuArray::try_from(map).map_err(|e| map_error(names::MAP_SYSCALL_STATS, e))?;
    (0..abi::MAX_SYSCALLS).map(|nr| Ok(stats.get(&nr, 0).map_err(|e| map_error(names::MAP_SYSCALL_STATS, e))?.iter().map(|cpu| cpu.count).sum())).collect()
}

/// Sums the per-CPU statistics per syscall number; syscalls never seen are left out. Most
/// called first (ties by number).
fn drain(ebpf: &Ebpf) -> Result<Vec<SyscallStat>, CollectError> {
    let map = ebpf.map(names::MAP_SYSCALL_STATS).ok_or_else(|| map_error(names::MAP_SYSCALL_STATS, "missing"))?;
    let stats: PerCpuArray<&MapData, AbiSyscallStat> =
        PerCpuArray::try_from(map).map_err(|e| map_error(names::MAP_SYSCALL_STATS, e))?;
    let mut out = Vec::new();
    for nr in 0..abi::MAX_SYSCALLS {
        let per_cpu = stats.get(&nr, 0).map_err(|e| map_error(names::MAP_SYSCALL_STATS, e))?;
        let mut sum = SyscallStat { nr, name: String::new(), latency_log2_ns: vec![0; abi::LATENCY_BUCKETS], ..Default::default() };
        for cpu in per_cpu.iter() {
            sum.count += cpu.count;
            sum.errors += cpu.errors;
            sum.eagain += cpu.eagain;
            sum.total_ns += cpu.total_ns;
            sum.bytes += cpu.bytes;
            for (total, bucket) in sum.latency_log2_ns.iter_mut().zip(cpu.latency_log2_ns) {
                *total += bucket;
            }
        }
        if sum.count > 0 {
            sum.name = syscall_name(nr);
            out.push(sum);
        }
    }
    out.sort_by(|a, b| b.count.cmp(&a.count).then(a.nr.cmp(&b.nr)));
    Ok(out)
}
