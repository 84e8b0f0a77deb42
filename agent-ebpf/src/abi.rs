//! `#[repr(C)]` mirror of `include/profiler.h`, plus every map, program and global name of
//! the BPF objects, so that no name is spelled twice on the Rust side.
//!
//! The layouts are checked at compile time against the sizes and offsets that
//! `profiler.h` asserts with `_Static_assert`.

use core::mem::{offset_of, size_of};

/// Length of a task's `comm` (the kernel's `TASK_COMM_LEN`), bytes.
pub const COMM_LEN: usize = 16;
/// Frames kept per stack (`MAX_STACK_DEPTH`).
pub const MAX_STACK_DEPTH: u32 = 127;
/// Entries of each `stack_traces` map (`MAX_STACK_TRACES`).
pub const MAX_STACK_TRACES: u32 = 16384;
/// Entries of `offcpu_stats` (`MAX_STACK_COUNTS`).
pub const MAX_STACK_COUNTS: u32 = 65536;
/// Processes the `target_pids` hash can hold (`MAX_TARGET_PIDS`).
pub const MAX_TARGET_PIDS: u32 = 8192;
/// Threads that can be switched out at once in off-CPU tracking (`MAX_OFFCPU_THREADS`).
pub const MAX_OFFCPU_THREADS: u32 = 32768;
/// Syscall numbers tracked; indices of `syscall_stats` (`MAX_SYSCALLS`).
pub const MAX_SYSCALLS: u32 = 512;
/// Buckets of the log2 latency histogram (`LATENCY_BUCKETS`): bucket `i` counts
/// latencies in `[2^i, 2^(i+1))` ns.
pub const LATENCY_BUCKETS: usize = 32;

/// `enum filter_mode`: how the programs decide that the current task is the target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u32)]
pub enum FilterMode {
    /// `FILTER_CGROUP`: the task's cgroup v2 ancestor at `target_cgroup_level` has id
    /// `target_cgroup_id` (that cgroup or any descendant).
    Cgroup = 1,
    /// `FILTER_PIDS`: the task's tgid is a key of `target_pids`.
    Pids = 2,
}

/// `enum lost_index`: indices of the per-CPU `lost` array of every object.
pub mod lost_index {
    /// An aggregation hash was full: a sample or wait was not stored.
    pub const SAMPLES_DROPPED: u32 = 0;
    /// `bpf_get_stackid` returned `-EEXIST` (stack map bucket taken by another stack).
    pub const STACK_COLLISIONS: u32 = 1;
    /// `bpf_get_stackid` failed otherwise on a user stack (`-EFAULT`, ...).
    pub const STACK_WALK_FAILURES: u32 = 2;
    /// Off-CPU: `offcpu_starts` was full at a switch-out.
    pub const OFFCPU_DROPPED: u32 = 3;
    /// Syscalls: no task storage could be created for the entry timestamp.
    pub const SYSCALL_NO_STORAGE: u32 = 4;
    /// Syscalls: a syscall number was `>= MAX_SYSCALLS`.
    pub const SYSCALL_NR_RANGE: u32 = 5;
    /// Stack copy: the `stack_samples` ring buffer was full; the sample was lost.
    pub const RINGBUF_FULL: u32 = 6;
    /// Stack copy: not even the first chunk of the user stack was readable (the sample was
    /// still sent, with registers and no stack bytes).
    pub const STACK_COPY_FAILURES: u32 = 7;
    /// Off-CPU: a thread blocked again, or exited, with its last wait still open (the
    /// `sched_switch` tracepoint did not fire for its switch-in); the wait was closed from
    /// the CPU time the thread ran since.
    pub const OFFCPU_SWITCH_IN_UNSEEN: u32 = 8;
    /// Number of counters (`LOST_COUNTERS`).
    pub const COUNT: u32 = 9;
}

/// Most bytes of user stack one [`StackSample`] can carry (`STACK_COPY_MAX_BYTES`).
pub const STACK_COPY_MAX_BYTES: usize = 65536;
/// The BPF program reads the user stack in chunks of at most this many bytes that never
/// cross a page boundary (`STACK_COPY_CHUNK`, the x86_64 page size).
pub const STACK_COPY_CHUNK: usize = 4096;

/// `enum stack_sample_flags`: bits of [`StackSample::flags`].
pub mod stack_sample_flags {
    /// The sample interrupted kernel mode: the registers are the task's user registers
    /// saved at kernel entry (`bpf_task_pt_regs`).
    pub const KERNEL_MODE: u32 = 1;
    /// The stack read stopped at a fault before the `stack_copy_bytes` knob (normally the
    /// top of the stack mapping).
    pub const COPY_SHORT: u32 = 2;
}

/// Header of `struct stack_sample` (everything but the stack bytes): one on-CPU sample sent
/// through `stack_samples` by `on_cpu_sample_stack_copy`. The record in the ring buffer is
/// the header and the `stack_len` bytes copied (at most [`STACK_SAMPLE_SIZE`] bytes); the
/// stack bytes follow the header at [`STACK_SAMPLE_HEADER_SIZE`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C)]
pub struct StackSampleHeader {
    /// Process id (host pid namespace).
    pub tgid: u32,
    /// Thread id (host pid namespace).
    pub pid: u32,
    /// User instruction pointer.
    pub ip: u64,
    /// User stack pointer: the first stack byte is the one at this address.
    pub sp: u64,
    /// User `rbp`.
    pub bp: u64,
    /// `bpf_ktime_get_ns()` at the sample (`CLOCK_MONOTONIC`, the clock of
    /// [`wire::WireChunkHeader::ts_ns`]), ns.
    pub ts_ns: u64,
    /// Bytes of `kernel_stack` that `bpf_get_stack` filled (8 a frame), or the negative
    /// errno: no kernel stack (the sample interrupted user mode).
    pub kernel_stack_bytes: i32,
    /// Stack bytes copied, `<= STACK_COPY_MAX_BYTES`.
    pub stack_len: u32,
    /// Bits of [`stack_sample_flags`].
    pub flags: u32,
    /// Padding.
    pub _pad: u32,
    /// Thread name, NUL-padded.
    pub comm: [u8; COMM_LEN],
    /// Kernel return addresses, leaf first; the first `kernel_stack_bytes / 8` are valid.
    pub kernel_stack: [u64; MAX_STACK_DEPTH as usize],
}

impl StackSampleHeader {
    /// The valid part of `kernel_stack`, leaf first (empty when the sample interrupted user
    /// mode).
    pub fn kernel_frames(&self) -> &[u64] {
        valid_frames(&self.kernel_stack, self.kernel_stack_bytes)
    }
}

impl Default for StackSampleHeader {
    fn default() -> Self {
        StackSampleHeader { tgid: 0, pid: 0, ip: 0, sp: 0, bp: 0, ts_ns: 0, kernel_stack_bytes: 0, stack_len: 0, flags: 0, _pad: 0, comm: [0; COMM_LEN], kernel_stack: [0; MAX_STACK_DEPTH as usize] }
    }
}

/// Bytes of the header of `struct stack_sample` (offset of its `stack` field).
pub const STACK_SAMPLE_HEADER_SIZE: usize = 72 + 8 * MAX_STACK_DEPTH as usize;
/// Bytes of one `struct stack_sample` record (header, stack, slack chunk).
pub const STACK_SAMPLE_SIZE: usize = STACK_SAMPLE_HEADER_SIZE + STACK_COPY_MAX_BYTES + STACK_COPY_CHUNK;

/// `struct fp_sample`: one on-CPU sample of the frame-pointer sampler (`on_cpu_sample`), sent
/// through `fp_samples` with both stacks in the record (`bpf_get_stack`), [`FP_SAMPLE_SIZE`]
/// bytes. Nothing is interned in a stack-trace map, so no stack is lost to a hash collision.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C)]
pub struct FpSample {
    /// Process id (host pid namespace).
    pub tgid: u32,
    /// Thread id (host pid namespace).
    pub pid: u32,
    /// Bytes of `user_stack` that `bpf_get_stack(BPF_F_USER_STACK)` filled (8 a frame), or
    /// the negative errno of a failed walk.
    pub user_stack_bytes: i32,
    /// Bytes of `kernel_stack` that `bpf_get_stack` filled, or the negative errno: no
    /// kernel stack (the sample interrupted user mode).
    pub kernel_stack_bytes: i32,
    /// `bpf_ktime_get_ns()` at the sample (`CLOCK_MONOTONIC`, the clock of
    /// [`wire::WireChunkHeader::ts_ns`]), ns.
    pub ts_ns: u64,
    /// Thread name, NUL-padded.
    pub comm: [u8; COMM_LEN],
    /// User return addresses (frame-pointer walk), leaf first.
    pub user_stack: [u64; MAX_STACK_DEPTH as usize],
    /// Kernel return addresses, leaf first.
    pub kernel_stack: [u64; MAX_STACK_DEPTH as usize],
}

impl FpSample {
    /// The valid part of `user_stack`, leaf first (empty after a failed walk).
    pub fn user_frames(&self) -> &[u64] {
        valid_frames(&self.user_stack, self.user_stack_bytes)
    }

    /// The valid part of `kernel_stack`, leaf first (empty when the sample interrupted user
    /// mode).
    pub fn kernel_frames(&self) -> &[u64] {
        valid_frames(&self.kernel_stack, self.kernel_stack_bytes)
    }

    /// Reads one record of the `fp_samples` ring buffer; `None` when `data` is shorter than
    /// [`FP_SAMPLE_SIZE`].
    pub fn read(data: &[u8]) -> Option<FpSample> {
        if data.len() < FP_SAMPLE_SIZE {
            return None;
        }
        // SAFETY: at least FP_SAMPLE_SIZE bytes; FpSample is plain integers and byte arrays
        // (every bit pattern valid); read_unaligned has no alignment requirement.
        Some(unsafe { std::ptr::read_unaligned(data.as_ptr().cast()) })
    }
}

/// The first `bytes / 8` addresses of `stack` (none for a negative `bytes`).
fn valid_frames(stack: &[u64], bytes: i32) -> &[u64] {
    let n = usize::try_from(bytes).unwrap_or(0) / 8;
    &stack[..n.min(stack.len())]
}

/// Bytes of one `struct fp_sample` record.
pub const FP_SAMPLE_SIZE: usize = 40 + 16 * MAX_STACK_DEPTH as usize;

/// `struct stack_key`: one thread on one (user, kernel) stack pair (the stacks of an
/// [`OffcpuKey`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(C)]
pub struct StackKey {
    /// Process id (host pid namespace).
    pub tgid: u32,
    /// Thread id (host pid namespace).
    pub pid: u32,
    /// Id in the object's `stack_traces`, or the negative errno `bpf_get_stackid` returned.
    pub user_stack_id: i32,
    /// Id in the object's `stack_traces`, or the negative errno (`-EFAULT` when the sample
    /// interrupted user mode: no kernel stack).
    pub kernel_stack_id: i32,
    /// Thread name, NUL-padded.
    pub comm: [u8; COMM_LEN],
}

/// `enum offcpu_wait`, [`OffcpuKey::wait`]: what an off-CPU wait was, from the arguments of
/// the system call the thread was switched out in.
pub mod offcpu_wait {
    /// Any other wait.
    pub const OTHER: u32 = 0;
    /// A lock's slow path: `FUTEX_WAIT`/`FUTEX_WAIT_BITSET` on a futex word holding 2 (the
    /// "locked, with waiters" state of glibc's low-level lock and of Rust std's futex
    /// `Mutex`), or `FUTEX_LOCK_PI`/`FUTEX_LOCK_PI2`.
    pub const CONTENDED_LOCK: u32 = 1;
}

/// `struct offcpu_key`: key of `offcpu_stats`, one thread on one stack pair and what it
/// waited in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(C)]
pub struct OffcpuKey {
    /// Thread and stacks.
    pub stack: StackKey,
    /// One of [`offcpu_wait`].
    pub wait: u32,
    /// Padding.
    pub _pad: u32,
}

/// `struct offcpu_value`: value of `offcpu_stats`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(C)]
pub struct OffcpuValue {
    /// Number of waits.
    pub count: u64,
    /// Sum of the waits, ns.
    pub total_ns: u64,
}

/// `struct offcpu_start`: value of `offcpu_starts` (thread id -> switch-out).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(C)]
pub struct OffcpuStart {
    /// `bpf_ktime_get_ns()` at switch-out, ns.
    pub start_ns: u64,
    /// The thread's CPU time at switch-out (`se.sum_exec_runtime`), ns.
    pub ran_ns: u64,
    /// Thread, stacks and wait at switch-out.
    pub key: OffcpuKey,
}

/// `struct offcpu_loop_stack`: value of `offcpu_loop_stacks` (keyed by `u32` thread id), the
/// stacks of a thread's last walked event-loop wait (`epoll_wait`, `epoll_pwait`,
/// `epoll_pwait2`) and where that syscall was entered (user registers, frame record); the next
/// such wait entered from the same place reuses the stacks (see `offcpu.bpf.c`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(C)]
pub struct OffcpuLoopStack {
    /// User instruction pointer at syscall entry.
    pub ip: u64,
    /// User stack pointer at syscall entry.
    pub sp: u64,
    /// User frame pointer register at syscall entry.
    pub bp: u64,
    /// The 16 bytes of user memory at `bp` (with frame pointers, the caller's saved bp and the
    /// return address); zeros when unreadable.
    pub frame: [u64; 2],
    /// As [`StackKey::user_stack_id`].
    pub user_stack_id: i32,
    /// As [`StackKey::kernel_stack_id`].
    pub kernel_stack_id: i32,
    /// Waits that took these stacks since they were walked, the walk included.
    pub uses: u32,
    /// Padding.
    pub _pad: u32,
}

/// `struct syscall_stat`: value of the per-CPU `syscall_stats` array (index = x86_64
/// syscall number).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(C)]
pub struct SyscallStat {
    /// Completed calls.
    pub count: u64,
    /// Calls that returned a negative value (`-EAGAIN` included).
    pub errors: u64,
    /// Calls that returned `-EAGAIN` or `-EINPROGRESS` (not ready yet: nonblocking I/O, a
    /// nonblocking connect under way).
    pub eagain: u64,
    /// Sum of entry-to-exit latencies, ns.
    pub total_ns: u64,
    /// `latency_log2_ns[i]`: calls with latency in `[2^i, 2^(i+1))` ns.
    pub latency_log2_ns: [u64; LATENCY_BUCKETS],
    /// Sum of the positive return values: for the read and write families, bytes moved.
    pub bytes: u64,
}

/// `struct syscall_entry`: task-local storage of the syscall programs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(C)]
pub struct SyscallEntry {
    /// `bpf_ktime_get_ns()` at sys_enter; 0 when no syscall is open, ns.
    pub start_ns: u64,
    /// Syscall number at sys_enter.
    pub nr: u32,
    /// Tracing window of that sys_enter (`MAP_SYSCALL_WINDOW`), from 1.
    pub window: u32,
}

const _: () = assert!(size_of::<StackKey>() == 32);
const _: () = assert!(offset_of!(StackKey, tgid) == 0);
const _: () = assert!(offset_of!(StackKey, pid) == 4);
const _: () = assert!(offset_of!(StackKey, user_stack_id) == 8);
const _: () = assert!(offset_of!(StackKey, kernel_stack_id) == 12);
const _: () = assert!(offset_of!(StackKey, comm) == 16);
const _: () = assert!(size_of::<OffcpuValue>() == 16);
const _: () = assert!(offset_of!(OffcpuValue, total_ns) == 8);
const _: () = assert!(size_of::<OffcpuKey>() == 40);
const _: () = assert!(offset_of!(OffcpuKey, wait) == 32);
const _: () = assert!(size_of::<OffcpuStart>() == 56);
const _: () = assert!(offset_of!(OffcpuStart, ran_ns) == 8);
const _: () = assert!(offset_of!(OffcpuStart, key) == 16);
const _: () = assert!(size_of::<OffcpuLoopStack>() == 56);
const _: () = assert!(offset_of!(OffcpuLoopStack, user_stack_id) == 40);
const _: () = assert!(offset_of!(OffcpuLoopStack, uses) == 48);
const _: () = assert!(size_of::<SyscallStat>() == 40 + 8 * LATENCY_BUCKETS);
const _: () = assert!(offset_of!(SyscallStat, total_ns) == 24);
const _: () = assert!(offset_of!(SyscallStat, latency_log2_ns) == 32);
const _: () = assert!(size_of::<SyscallEntry>() == 16);
const _: () = assert!(size_of::<FpSample>() == FP_SAMPLE_SIZE);
const _: () = assert!(offset_of!(FpSample, kernel_stack_bytes) == 12);
const _: () = assert!(offset_of!(FpSample, ts_ns) == 16);
const _: () = assert!(offset_of!(FpSample, comm) == 24);
const _: () = assert!(offset_of!(FpSample, user_stack) == 40);
const _: () = assert!(offset_of!(FpSample, kernel_stack) == 40 + 8 * MAX_STACK_DEPTH as usize);
const _: () = assert!(size_of::<StackSampleHeader>() == STACK_SAMPLE_HEADER_SIZE);
const _: () = assert!(offset_of!(StackSampleHeader, ip) == 8);
const _: () = assert!(offset_of!(StackSampleHeader, ts_ns) == 32);
const _: () = assert!(offset_of!(StackSampleHeader, kernel_stack_bytes) == 40);
const _: () = assert!(offset_of!(StackSampleHeader, kernel_stack) == 72);
const _: () = assert!(offset_of!(StackSampleHeader, stack_len) == 44);
const _: () = assert!(offset_of!(StackSampleHeader, flags) == 48);
const _: () = assert!(offset_of!(StackSampleHeader, comm) == 56);

// SAFETY: plain #[repr(C)] integers and byte arrays with no padding (asserted above):
// every bit pattern is a valid value.
unsafe impl aya::Pod for StackKey {}
// SAFETY: as above.
unsafe impl aya::Pod for OffcpuValue {}
// SAFETY: repr(C) plain data, no padding (asserted above).
unsafe impl aya::Pod for OffcpuKey {}
// SAFETY: as above.
unsafe impl aya::Pod for OffcpuStart {}
// SAFETY: as above.
unsafe impl aya::Pod for SyscallStat {}

/// Names in the BPF objects: maps, programs, knobs (`const volatile` globals) and hooks.
pub mod names {
    /// Stack-trace map of `offcpu`.
    pub const MAP_STACK_TRACES: &str = "stack_traces";
    /// Ring buffer of `sample`: one `FpSample` per record.
    pub const MAP_FP_SAMPLES: &str = "fp_samples";
    /// Off-CPU totals (`offcpu`): `OffcpuKey` -> `OffcpuValue`.
    pub const MAP_OFFCPU_STATS: &str = "offcpu_stats";
    /// Threads switched out right now (`offcpu`): `u32` tid -> `OffcpuStart`.
    pub const MAP_OFFCPU_STARTS: &str = "offcpu_starts";
    /// Event-loop threads' last walked stacks (`offcpu`): LRU hash, `u32` tid ->
    /// `OffcpuLoopStack`.
    pub const MAP_OFFCPU_LOOP_STACKS: &str = "offcpu_loop_stacks";
    /// Per-syscall statistics (`syscalls`): per-CPU array of `SyscallStat`.
    pub const MAP_SYSCALL_STATS: &str = "syscall_stats";
    /// Task-local entry timestamps (`syscalls`).
    pub const MAP_SYSCALL_ENTRIES: &str = "syscall_entries";
    /// The current tracing window's number (`syscalls`): array of one `u32`, from 1,
    /// written by the agent before each attach of the `raw_syscalls` pair.
    pub const MAP_SYSCALL_WINDOW: &str = "syscall_window";
    /// Target processes for `FilterMode::Pids` (every object): `u32` tgid -> `u8`.
    pub const MAP_TARGET_PIDS: &str = "target_pids";
    /// Loss counters (every object): per-CPU array of `u64`, indices in `lost_index`.
    pub const MAP_LOST: &str = "lost";
    /// Ring buffer of `stackcopy`: `StackSampleHeader` + stack bytes per record.
    pub const MAP_STACK_SAMPLES: &str = "stack_samples";
    /// `stackcopy.bpf.c`: where a sample is built, one `struct stack_sample` per CPU (an
    /// array whose `max_entries` the agent sets to the number of possible CPUs).
    pub const MAP_STACK_SCRATCH: &str = "stack_scratch";

    /// Perf-event program of `sample`.
    pub const PROG_ON_CPU_SAMPLE: &str = "on_cpu_sample";
    /// Perf-event program of `stackcopy`: samples with a copy of the user stack.
    pub const PROG_ON_CPU_SAMPLE_STACK_COPY: &str = "on_cpu_sample_stack_copy";
    /// `tp_btf/sched_switch` program of `offcpu`.
    pub const PROG_ON_SCHED_SWITCH: &str = "on_sched_switch";
    /// `raw_tracepoint/sys_enter` program of `syscalls`.
    pub const PROG_ON_SYS_ENTER: &str = "on_sys_enter";
    /// `raw_tracepoint/sys_exit` program of `syscalls`.
    pub const PROG_ON_SYS_EXIT: &str = "on_sys_exit";

    /// BTF tracepoint of `on_sched_switch`.
    pub const TP_SCHED_SWITCH: &str = "sched_switch";
    /// Raw tracepoint of `on_sys_enter`.
    pub const RAW_TP_SYS_ENTER: &str = "sys_enter";
    /// Raw tracepoint of `on_sys_exit`.
    pub const RAW_TP_SYS_EXIT: &str = "sys_exit";

    /// Knob (`u32`): `FilterMode` (every object; 0 matches nothing).
    pub const GLOBAL_FILTER_MODE: &str = "filter_mode";
    /// Knob (`u64`): cgroup v2 id for `FilterMode::Cgroup`.
    pub const GLOBAL_TARGET_CGROUP_ID: &str = "target_cgroup_id";
    /// Knob (`u32`): depth of that cgroup below the cgroup2 root (root = 0).
    pub const GLOBAL_TARGET_CGROUP_LEVEL: &str = "target_cgroup_level";
    /// Knob (`u64`, `offcpu`): shorter waits are not recorded, ns.
    pub const GLOBAL_MIN_BLOCK_NS: &str = "min_block_ns";
    /// Knob (`u64`, `offcpu`): an event-loop wait walks its stacks at least once in this many
    /// waits of its thread; 1 walks every wait.
    pub const GLOBAL_LOOP_REWALK_EVERY: &str = "loop_rewalk_every";
    /// Knob (`u64`, `stackcopy`): bytes of user stack read per sample, `<= STACK_COPY_MAX_BYTES`.
    pub const GLOBAL_STACK_COPY_BYTES: &str = "stack_copy_bytes";
}

/// Wire capture (`wire.bpf.c`): the mirror of the `WIRE_*` part of `profiler.h`, and the
/// names of that object's maps, programs and knobs.
pub mod wire {
    use core::mem::{offset_of, size_of};

    /// Most head bytes one chunk carries (`WIRE_HEAD_MAX`), bytes.
    pub const HEAD_MAX: usize = 256;
    /// Most tail bytes one chunk carries (`WIRE_TAIL_MAX`), bytes; PostgreSQL sockets and
    /// contiguous buffers only.
    pub const TAIL_MAX: usize = 64;
    /// Most head bytes of an HTTP chunk (`WIRE_HTTP_HEAD_MAX`): the start line only, bytes.
    pub const HTTP_HEAD_MAX: usize = 128;
    /// Iovecs of a vectored call read for the head (`WIRE_MAX_IOVECS`).
    pub const MAX_IOVECS: usize = 8;
    /// Ports the `http_ports` map can hold (`MAX_HTTP_PORTS`).
    pub const MAX_HTTP_PORTS: u32 = 256;

    /// `enum wire_class`: [`WireChunk::class`].
    pub mod class {
        /// Peer port == the `db_port` knob (the target is a PostgreSQL client).
        pub const POSTGRES: u8 = 1;
        /// Local port in `http_ports` (the target is the HTTP server).
        pub const HTTP: u8 = 2;
    }

    /// `enum wire_direction`: [`WireChunk::direction`].
    pub mod direction {
        /// Sent by the target.
        pub const TX: u8 = 0;
        /// Received by the target.
        pub const RX: u8 = 1;
    }

    /// `enum wire_syscall`: [`WireChunk::syscall`], the syscall that moved the bytes.
    pub mod syscall {
        /// `sendto`.
        pub const SENDTO: u8 = 1;
        /// `recvfrom`.
        pub const RECVFROM: u8 = 2;
        /// `write`.
        pub const WRITE: u8 = 3;
        /// `read`.
        pub const READ: u8 = 4;
        /// `writev`.
        pub const WRITEV: u8 = 5;
        /// `readv`.
        pub const READV: u8 = 6;
        /// `sendmsg`.
        pub const SENDMSG: u8 = 7;
        /// `recvmsg`.
        pub const RECVMSG: u8 = 8;
        /// Names by value (index 0 unused).
        pub const NAMES: [&str; 9] = ["?", "sendto", "recvfrom", "write", "read", "writev", "readv", "sendmsg", "recvmsg"];
    }

    /// `enum wire_stat_index`: indices of the per-CPU `wire_stats` array.
    pub mod stat_index {
        /// Chunks sent to the ring buffer.
        pub const CHUNKS: u32 = 0;
        /// Chunks lost because `wire_chunks` was full.
        pub const RINGBUF_FULL: u32 = 1;
        /// Calls on classified sockets through other syscalls (`sendmmsg`, `sendfile`, ...)
        /// or from kernel threads and io_uring workers: no chunk.
        pub const OTHER_CALLS: u32 = 2;
        /// Calls on classified sockets that returned `-EAGAIN`.
        pub const EAGAIN: u32 = 3;
        /// Calls on classified sockets that returned another error, or 0.
        pub const ERRORS: u32 = 4;
        /// Chunks whose head could not be read from user memory.
        pub const READ_FAILURES: u32 = 5;
        /// HTTP chunks that did not start with a start line (sent without head).
        pub const HTTP_NO_START_LINE: u32 = 6;
        /// Sockets recognised as PostgreSQL by the first bytes the target sent on them
        /// (any peer port).
        pub const PG_RECOGNISED: u32 = 7;
        /// Number of counters (`WIRE_STAT_COUNTERS`).
        pub const COUNT: u32 = 8;
    }

    /// The 40-byte header every wire record starts with (the first fields of
    /// `struct wire_chunk`); [`WireChunkHeader::class`] tells the protocol.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    #[repr(C)]
    pub struct WireChunkHeader {
        /// `bpf_ktime_get_ns()` when the socket call returned, inside the syscall (`CLOCK_MONOTONIC`), ns.
        pub ts_ns: u64,
        /// Process id (tgid, host pid namespace).
        pub pid: u32,
        /// Thread id.
        pub tid: u32,
        /// Socket id: the kernel's `struct sock` address.
        pub socket: u64,
        /// Bytes the syscall moved (its return value, an `int`).
        pub total_len: u32,
        /// The socket's local TCP port, host order.
        pub local_port: u16,
        /// The socket's peer TCP port, host order.
        pub peer_port: u16,
        /// Bytes of `head` filled, `<= HEAD_MAX` (`<= HTTP_HEAD_MAX` for HTTP).
        pub head_len: u16,
        /// Bytes of `tail` filled, `<= TAIL_MAX` (always 0 for HTTP).
        pub tail_len: u16,
        /// [`direction`].
        pub direction: u8,
        /// [`class`].
        pub class: u8,
        /// [`syscall`].
        pub syscall: u8,
        /// Padding.
        pub _pad: u8,
    }

    /// Bytes of [`WireChunkHeader`] (`WIRE_CHUNK_HEADER_BYTES`): where `head` starts, and the
    /// shortest record.
    pub const CHUNK_HEADER_SIZE: usize = 40;
    const _: () = assert!(size_of::<WireChunkHeader>() == CHUNK_HEADER_SIZE);
    const _: () = assert!(offset_of!(WireChunkHeader, total_len) == 24);
    const _: () = assert!(offset_of!(WireChunkHeader, local_port) == 28);
    const _: () = assert!(offset_of!(WireChunkHeader, head_len) == 32);
    const _: () = assert!(offset_of!(WireChunkHeader, direction) == 36);
    const _: () = assert!(offset_of!(WireChunkHeader, class) == 37);

    /// `struct wire_chunk`: one send or receive on a classified socket that moved bytes, as
    /// built in the kernel ([`CHUNK_SIZE`] bytes). A ring-buffer record is its filled part
    /// only: the header and `head_len` head bytes, or all [`CHUNK_SIZE`] bytes when it has a
    /// tail (`tail_len > 0`, PostgreSQL only; `head` zero-padded after `head_len`).
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    #[repr(C)]
    pub struct WireChunk {
        /// The common header.
        pub header: WireChunkHeader,
        /// The first bytes moved.
        pub head: [u8; HEAD_MAX],
        /// The last `tail_len` bytes moved.
        pub tail: [u8; TAIL_MAX],
    }

    /// Bytes of one whole `struct wire_chunk`: the longest record.
    pub const CHUNK_SIZE: usize = CHUNK_HEADER_SIZE + HEAD_MAX + TAIL_MAX;
    const _: () = assert!(size_of::<WireChunk>() == CHUNK_SIZE);
    const _: () = assert!(offset_of!(WireChunk, head) == CHUNK_HEADER_SIZE);
    const _: () = assert!(offset_of!(WireChunk, tail) == CHUNK_HEADER_SIZE + HEAD_MAX);

    /// Ring buffer of chunks.
    pub const MAP_WIRE_CHUNKS: &str = "wire_chunks";
    /// Per-CPU counters, indices in [`stat_index`].
    pub const MAP_WIRE_STATS: &str = "wire_stats";
    /// The target's listening ports: `u16` (host order) -> `u8`.
    pub const MAP_HTTP_PORTS: &str = "http_ports";

    /// Knob (`u64`): peer port of PostgreSQL connections. Default 5432.
    pub const GLOBAL_DB_PORT: &str = "db_port";
    /// Knob (`u64`): head bytes read per chunk, `<= HEAD_MAX`.
    pub const GLOBAL_HEAD_BYTES: &str = "head_bytes";
    /// Knob (`u64`): tail bytes read per chunk, `<= TAIL_MAX` (0 = none).
    pub const GLOBAL_TAIL_BYTES: &str = "tail_bytes";
    /// Knob (`u64`): head bytes read per HTTP chunk before the cut at the first `\n`, `<= HTTP_HEAD_MAX`.
    pub const GLOBAL_HTTP_HEAD_BYTES: &str = "http_head_bytes";

    /// The programs and the BTF tracepoints they are attached to (`tp_btf`, fired by the
    /// kernel after every send or receive on a socket, in `net/socket.c`).
    pub const PROGRAMS: [(&str, &str); 2] = [("on_sock_send", "sock_send_length"), ("on_sock_recv", "sock_recv_length")];
    /// The syscalls that give a chunk: ([`syscall`] value, x86_64 syscall number from
    /// `arch/x86/entry/syscalls/syscall_64.tbl`), as `wire.bpf.c` maps the `orig_ax` of the
    /// current syscall's user registers to [`WireChunk::syscall`].
    pub const SYSCALL_NUMBERS: [(u8, u32); 8] = [
        (syscall::SENDTO, 44),
        (syscall::RECVFROM, 45),
        (syscall::WRITE, 1),
        (syscall::READ, 0),
        (syscall::WRITEV, 20),
        (syscall::READV, 19),
        (syscall::SENDMSG, 46),
        (syscall::RECVMSG, 47),
    ];
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A record laid out by hand as `struct fp_sample` (profiler.h): header at 0..32, user
    /// stack at 32, kernel stack at 32 + 8 * MAX_STACK_DEPTH.
    #[test]
    fn fp_sample_reads_the_valid_frames_only() {
        let mut data = vec![0u8; FP_SAMPLE_SIZE];
        data[0..4].copy_from_slice(&7u32.to_ne_bytes());
        data[4..8].copy_from_slice(&9u32.to_ne_bytes());
        data[8..12].copy_from_slice(&16i32.to_ne_bytes()); // two user frames
        data[12..16].copy_from_slice(&(-14i32).to_ne_bytes()); // -EFAULT: user mode
        data[16..24].copy_from_slice(&123_456_789u64.to_ne_bytes()); // ts_ns
        data[24..29].copy_from_slice(b"tokio");
        for (i, ip) in [0x1000u64, 0x2000, 0x3000].iter().enumerate() {
            data[40 + 8 * i..48 + 8 * i].copy_from_slice(&ip.to_ne_bytes());
        }
        let k = 40 + 8 * MAX_STACK_DEPTH as usize;
        data[k..k + 8].copy_from_slice(&0xffff_ffff_8100_0000u64.to_ne_bytes());
        let s = FpSample::read(&data).unwrap();
        assert_eq!((s.tgid, s.pid, s.ts_ns), (7, 9, 123_456_789));
        assert_eq!(&s.comm[..6], b"tokio\0");
        assert_eq!(s.user_frames(), &[0x1000, 0x2000]);
        assert!(s.kernel_frames().is_empty());
        // A full stack, and a length past the array (never trusted).
        data[8..12].copy_from_slice(&(8 * MAX_STACK_DEPTH as i32).to_ne_bytes());
        data[12..16].copy_from_slice(&i32::MAX.to_ne_bytes());
        let s = FpSample::read(&data).unwrap();
        assert_eq!(s.user_frames().len(), MAX_STACK_DEPTH as usize);
        assert_eq!(s.kernel_frames().len(), MAX_STACK_DEPTH as usize);
        assert_eq!(s.kernel_frames()[0], 0xffff_ffff_8100_0000);
        assert!(FpSample::read(&data[..FP_SAMPLE_SIZE - 1]).is_none());
    }
}
