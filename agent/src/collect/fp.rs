//! On-CPU sampling with frame-pointer stacks (`--unwind fp`).
//!
//! `on_cpu_sample` (agent-ebpf `sample.bpf.c`) runs on a software CPU-clock perf event per
//! online CPU and sends, per sample of the target, the thread and both stacks as the kernel
//! walked them (`bpf_get_stack`; the user walk follows frame pointers) through the
//! `fp_samples` ring buffer ([`abi::FpSample`], 2,072 bytes). A thread of the agent drains it
//! every 50 ms and aggregates the samples per (thread, user stack, kernel stack).
//!
//! The stacks are copied into each record instead of interned with `bpf_get_stackid`: a
//! stack-trace map keeps one stack per hash bucket, and the colliding ones (`-EEXIST`) were
//! lost: 4.9-5.2% of the user stacks and 2.2-2.3% of the kernel stacks of target-app under
//! `deals-list` at 999 Hz with 16,384 entries. Losses left: a full ring buffer
//! ([`LostCounters::ringbuf_dropped`]) and failed user walks
//! ([`LostCounters::stack_walk_failures`]).

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use agent_ebpf::abi::{self, names};
use aya::maps::{MapData, RingBuf};
use aya::programs::PerfEvent;
use aya::Ebpf;

use super::{attach_cpu_clock, drain_ring, load_error, load_object, map_error, program, raw_stacks, set_target_pids, CollectError, SampleCounts, SampleKey};
use crate::profile::{LostCounters, RawStack};
use crate::target::Filter;

/// The loaded (and, after [`FpSampler::attach`], running) frame-pointer sampler.
pub(super) struct FpSampler {
    ebpf: Ebpf,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<SampleCounts>>,
}

impl FpSampler {
    /// Loads `sample` with the target filter and verifies the program; nothing runs yet.
    pub(super) fn load(filter: &Filter) -> Result<Self, CollectError> {
        let mut ebpf = load_object("sample", agent_ebpf::SAMPLE_OBJECT, filter, &[])?;
        let prog: &mut PerfEvent = program(&mut ebpf, names::PROG_ON_CPU_SAMPLE)?;
        prog.load().map_err(|e| load_error(names::PROG_ON_CPU_SAMPLE, e))?;
        Ok(FpSampler { ebpf, stop: Arc::new(AtomicBool::new(false)), thread: None })
    }

    /// Starts the drain thread, then attaches the program to a CPU-clock perf event on each
    /// of `cpus` at `frequency_hz` samples per second per CPU.
    pub(super) fn attach(&mut self, cpus: &[u32], frequency_hz: u64) -> Result<(), CollectError> {
        let map = self.ebpf.take_map(names::MAP_FP_SAMPLES).ok_or_else(|| map_error(names::MAP_FP_SAMPLES, "missing"))?;
        let ring: RingBuf<MapData> = RingBuf::try_from(map).map_err(|e| map_error(names::MAP_FP_SAMPLES, e))?;
        let stop = self.stop.clone();
        let thread = std::thread::Builder::new()
            .name("profiler-fp".to_owned())
            .spawn(move || {
                let mut counts = SampleCounts::default();
                drain_ring(ring, &stop, |data| {
                    if let Some(s) = abi::FpSample::read(data) {
                        let key = SampleKey { tgid: s.tgid, tid: s.pid, comm: s.comm, user: s.user_frames().to_vec(), kernel: s.kernel_frames().to_vec() };
                        counts.add(key, s.ts_ns);
                    }
                });
                counts
            })
            .map_err(|e| map_error(names::MAP_FP_SAMPLES, format!("spawning the drain thread: {e}")))?;
        self.thread = Some(thread);
        attach_cpu_clock(&mut self.ebpf, names::PROG_ON_CPU_SAMPLE, cpus, frequency_hz)
    }

    /// Makes the pid-set filter of this object equal to `pids` (`old` is what it holds now).
    pub(super) fn update_pids(&mut self, pids: &BTreeSet<u32>, old: &BTreeSet<u32>) -> Result<(), CollectError> {
        set_target_pids(&mut self.ebpf, pids, old)
    }

    /// The program's object, for run statistics.
    pub(super) fn ebpf(&self) -> &Ebpf {
        &self.ebpf
    }

    /// CPU time of the drain thread so far, ns (0 before it starts or after it was joined).
    pub(super) fn drain_cpu_ns(&self) -> u64 {
        self.thread.as_ref().map_or(0, super::thread_cpu_ns)
    }

    /// Detaches the program, lets the drain thread take what is left in the ring buffer, and
    /// returns the aggregated stacks (most samples first); adds this object's losses to `lost`.
    pub(super) fn finish(mut self, lost: &mut LostCounters) -> Result<Vec<RawStack>, CollectError> {
        {
            let prog: &mut PerfEvent = program(&mut self.ebpf, names::PROG_ON_CPU_SAMPLE)?;
            prog.unload().map_err(|source| CollectError::Attach { program: names::PROG_ON_CPU_SAMPLE, source })?;
        }
        self.stop.store(true, Ordering::Release);
        let counts = match self.thread.take() {
            Some(t) => t.join().map_err(|_| map_error(names::MAP_FP_SAMPLES, "the drain thread panicked"))?,
            None => SampleCounts::default(),
        };
        super::add_lost(&self.ebpf, lost)?;
        Ok(raw_stacks(counts))
    }
}
