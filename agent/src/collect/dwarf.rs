//! On-CPU sampling with DWARF unwinding in user space (the "stack copy" path).
//!
//! `on_cpu_sample_stack_copy` (agent-ebpf `stackcopy.bpf.c`) runs on a software CPU-clock perf
//! event per online CPU, with the same target filter as `on_cpu_sample`, and sends per sample
//! the user registers, the kernel stack id and up to [`DEFAULT_STACK_COPY_BYTES`] bytes of user stack
//! through the `stack_samples` ring buffer. A thread of the agent drains the ring buffer
//! continuously during the run, unwinds each sample with [`crate::unwind::Unwinder`] (framehop
//! on the binaries' `.eh_frame`) and aggregates the samples per (thread, user stack, kernel
//! stack) into the same [`RawStack`]s as the frame-pointer path.
//!
//! Bound on the copy: a stack deeper than the copy loses its outer frames (the walk ends with
//! "copy end", counted in [`UnwindReport::truncated_copy_end`] and, once symbolized, in
//! `truncated_stacks`). Losses in the kernel (ring buffer full, unreadable stack) go to
//! [`LostCounters::ringbuf_dropped`] and [`LostCounters::stack_walk_failures`].
//!
//! Off-CPU stacks are still frame-pointer stacks (`offcpu.bpf.c`): copying stacks at every
//! context switch is a different cost.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use agent_ebpf::abi::{self, names, StackSampleHeader};
use aya::maps::{MapData, RingBuf};
use aya::programs::PerfEvent;
use aya::Ebpf;

use super::{attach_cpu_clock, drain_ring, load_error, load_object_sized, map_error, program, raw_stacks, set_target_pids, CollectError, SampleCounts, SampleKey};
use crate::profile::{LostCounters, ModuleUnwind, RawStack, UnwindReport};
use crate::target::Filter;
use crate::unwind::{self, Sample, StackEnd, Unwinder};

/// How on-CPU user stacks are unwound (`--unwind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Unwind {
    /// Stack copy + CFI where the code has it (every binary with `.eh_frame`: Rust, C/C++ by
    /// default, glibc), frame pointers for code without CFI (JIT, stripped tables). Works on
    /// binaries built with or without frame pointers. Default.
    #[default]
    Auto,
    /// Frame pointers, walked in the kernel (`bpf_get_stack`): cheapest, but stacks stop at
    /// code built without frame pointers (Debian's glibc, Rust release defaults).
    Fp,
    /// Stack copy + CFI only: a walk stops at code without CFI instead of guessing.
    Dwarf,
}

impl Unwind {
    /// `auto`, `fp` or `dwarf`.
    pub fn as_str(self) -> &'static str {
        match self {
            Unwind::Auto => "auto",
            Unwind::Fp => "fp",
            Unwind::Dwarf => "dwarf",
        }
    }
}

impl std::str::FromStr for Unwind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(Unwind::Auto),
            "fp" => Ok(Unwind::Fp),
            "dwarf" => Ok(Unwind::Dwarf),
            other => Err(format!("unknown unwinding `{other}` (expected auto, fp or dwarf)")),
        }
    }
}

/// Bytes of user stack copied per sample by default: the most a sample can carry
/// (`STACK_COPY_MAX_BYTES`, 64 KiB). Measured on target-app under `/db` load (tokio workers,
/// 10 s at 99 Hz): the deepest complete stack needed 20 KiB on a quiet machine and more than
/// 31 KiB under heavy CPU contention, where a 16 KiB copy left 70-80 % of the stacks
/// truncated and a 32 KiB copy 7-10 %. The kernel copies only up to the top of the stack, so
/// shallow stacks cost what they use (about 19 KiB per sample for those workers).
pub const DEFAULT_STACK_COPY_BYTES: u64 = abi::STACK_COPY_MAX_BYTES as u64;

/// What the drain thread hands back.
struct Drained {
    counts: SampleCounts,
    report: UnwindReport,
    modules: Vec<unwind::ModuleStats>,
}

/// The loaded (and, after [`StackCopy::attach`], running) stack-copy sampler.
pub(super) struct StackCopy {
    ebpf: Ebpf,
    mode: Unwind,
    stack_copy_bytes: u64,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<Drained>>,
}

impl StackCopy {
    /// Loads `stackcopy` with the target filter and verifies the program; nothing runs yet.
    pub(super) fn load(filter: &Filter, mode: Unwind, stack_copy_bytes: u64) -> Result<Self, CollectError> {
        let stack_copy_bytes = stack_copy_bytes.clamp(8, abi::STACK_COPY_MAX_BYTES as u64);
        let cpus = aya::util::nr_cpus().map_err(|(what, e)| map_error(names::MAP_STACK_SCRATCH, format!("{what}: {e}")))?;
        let mut ebpf = load_object_sized(
            "stackcopy",
            agent_ebpf::STACKCOPY_OBJECT,
            filter,
            &[(names::GLOBAL_STACK_COPY_BYTES, &stack_copy_bytes)],
            &[(names::MAP_STACK_SCRATCH, u32::try_from(cpus).unwrap_or(u32::MAX))],
        )?;
        let prog: &mut PerfEvent = program(&mut ebpf, names::PROG_ON_CPU_SAMPLE_STACK_COPY)?;
        prog.load().map_err(|e| load_error(names::PROG_ON_CPU_SAMPLE_STACK_COPY, e))?;
        Ok(StackCopy { ebpf, mode, stack_copy_bytes, stop: Arc::new(AtomicBool::new(false)), thread: None })
    }

    /// Starts the drain thread, then attaches the program to a CPU-clock perf event on each
    /// of `cpus` at `frequency_hz` samples per second per CPU.
    pub(super) fn attach(&mut self, cpus: &[u32], frequency_hz: u64) -> Result<(), CollectError> {
        let map = self.ebpf.take_map(names::MAP_STACK_SAMPLES).ok_or_else(|| map_error(names::MAP_STACK_SAMPLES, "missing"))?;
        let ring: RingBuf<MapData> = RingBuf::try_from(map).map_err(|e| map_error(names::MAP_STACK_SAMPLES, e))?;
        let stop = self.stop.clone();
        let mode = match self.mode {
            Unwind::Dwarf => unwind::Mode::Dwarf,
            Unwind::Auto | Unwind::Fp => unwind::Mode::Auto,
        };
        let report = UnwindReport { mode: self.mode.as_str().to_owned(), stack_copy_bytes: self.stack_copy_bytes, ..Default::default() };
        let thread = std::thread::Builder::new()
            .name("profiler-unwind".to_owned())
            .spawn(move || drain(ring, stop, mode, report))
            .map_err(|e| map_error(names::MAP_STACK_SAMPLES, format!("spawning the drain thread: {e}")))?;
        self.thread = Some(thread);

        attach_cpu_clock(&mut self.ebpf, names::PROG_ON_CPU_SAMPLE_STACK_COPY, cpus, frequency_hz)
    }

    /// Makes the pid-set filter of this object equal to `pids` (`old` is what it holds now).
    pub(super) fn update_pids(&mut self, pids: &BTreeSet<u32>, old: &BTreeSet<u32>) -> Result<(), CollectError> {
        set_target_pids(&mut self.ebpf, pids, old)
    }

    /// The attached program, for run statistics.
    pub(super) fn ebpf(&self) -> &Ebpf {
        &self.ebpf
    }

    /// CPU time of the drain thread so far, ns (0 before it starts or after it was joined).
    pub(super) fn drain_cpu_ns(&self) -> u64 {
        self.thread.as_ref().map_or(0, super::thread_cpu_ns)
    }

    /// Detaches the program, lets the drain thread unwind what is left in the ring buffer,
    /// and returns the aggregated stacks and the report; adds this object's losses to `lost`.
    pub(super) fn finish(mut self, lost: &mut LostCounters) -> Result<(Vec<RawStack>, UnwindReport), CollectError> {
        {
            let prog: &mut PerfEvent = program(&mut self.ebpf, names::PROG_ON_CPU_SAMPLE_STACK_COPY)?;
            prog.unload().map_err(|source| CollectError::Attach { program: names::PROG_ON_CPU_SAMPLE_STACK_COPY, source })?;
        }
        self.stop.store(true, Ordering::Release);
        let drained = match self.thread.take() {
            Some(t) => t.join().map_err(|_| map_error(names::MAP_STACK_SAMPLES, "the drain thread panicked"))?,
            None => Drained { counts: SampleCounts::default(), report: UnwindReport::default(), modules: Vec::new() },
        };
        // `add_lost` covers this object's ring-buffer and stack-copy losses.
        super::add_lost(&self.ebpf, lost)?;
        let out = raw_stacks(drained.counts);

        let mut report = drained.report;
        report.modules = drained
            .modules
            .into_iter()
            .map(|m| {
                let complete = m.ends.get(&StackEnd::Complete).copied().unwrap_or(0);
                let all: u64 = m.ends.values().sum();
                ModuleUnwind {
                    module: m.name,
                    build_id: m.build_id,
                    unwind_info: m.unwind_info.to_owned(),
                    error: m.error,
                    cfi_frames: m.cfi_frames,
                    fp_fallback_frames: m.fp_fallback_frames,
                    ended_complete: complete,
                    ended_truncated: all - complete,
                    samples: m.samples,
                    samples_complete: m.samples_complete,
                    bytes_copied: m.bytes_copied,
                    replaced: m.replaced,
                }
            })
            .filter(|m| m.cfi_frames + m.fp_fallback_frames + m.ended_complete + m.ended_truncated > 0)
            .collect();
        Ok((out, report))
    }
}

/// The drain thread: waits on the ring buffer, unwinds and aggregates every sample, until
/// `stop` is raised (after the program was detached) and the buffer is empty.
fn drain(ring: RingBuf<MapData>, stop: Arc<AtomicBool>, mode: unwind::Mode, mut report: UnwindReport) -> Drained {
    let mut unwinder = Unwinder::new(mode);
    let mut counts = SampleCounts::default();
    drain_ring(ring, &stop, |data| handle(data, &mut unwinder, &mut counts, &mut report));
    report.binaries_loaded = unwinder.binaries_loaded() as u64;
    Drained { counts, report, modules: unwinder.module_stats() }
}

fn handle(data: &[u8], unwinder: &mut Unwinder, counts: &mut SampleCounts, report: &mut UnwindReport) {
    if data.len() < abi::STACK_SAMPLE_HEADER_SIZE {
        return;
    }
    // SAFETY: at least STACK_SAMPLE_HEADER_SIZE bytes; StackSampleHeader is plain integers
    // (every bit pattern valid); read_unaligned has no alignment requirement.
    let h: StackSampleHeader = unsafe { std::ptr::read_unaligned(data.as_ptr().cast()) };
    let len = (h.stack_len as usize).min(abi::STACK_COPY_MAX_BYTES).min(data.len() - abi::STACK_SAMPLE_HEADER_SIZE);
    let stack = &data[abi::STACK_SAMPLE_HEADER_SIZE..abi::STACK_SAMPLE_HEADER_SIZE + len];
    let started = Instant::now();
    let stack_top_reached = h.flags & abi::stack_sample_flags::COPY_SHORT != 0;
    let u = unwinder.unwind(&Sample { pid: h.tgid, ip: h.ip, sp: h.sp, bp: h.bp, stack, stack_top_reached });
    report.unwind_ns += started.elapsed().as_nanos() as u64;
    report.samples += 1;
    report.bytes_copied_total += len as u64;
    report.bytes_copied_max = report.bytes_copied_max.max(len as u64);
    report.fp_fallback_frames += u64::from(u.fp_fallback_frames);
    match u.end {
        StackEnd::Complete => {
            report.complete += 1;
            report.stack_bytes_used_max = report.stack_bytes_used_max.max(u.stack_bytes_used);
        }
        StackEnd::CopyEnd => report.truncated_copy_end += 1,
        StackEnd::NoUnwindInfo => report.truncated_no_unwind_info += 1,
        StackEnd::BadAddress => report.truncated_bad_address += 1,
        StackEnd::DepthLimit | StackEnd::Error | StackEnd::ProcessGone => report.truncated_other += 1,
    }
    let key = SampleKey { tgid: h.tgid, tid: h.pid, comm: h.comm, user: u.frames, kernel: h.kernel_frames().to_vec() };
    counts.add(key, h.ts_ns);
}
