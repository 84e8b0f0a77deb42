//! The kernel side of the profiler: embedded BPF objects and the `#[repr(C)]` mirror of
//! `include/profiler.h` ([`abi`]).
//!
//! The objects are built by `build.rs` from `src/*.bpf.c` with clang-19 (BTF-defined maps,
//! CO-RE, `const volatile` knobs) and are loaded by the agent with aya 0.14.

pub mod abi;

/// `sample.bpf.o`: `on_cpu_sample` (perf_event), on-CPU stack counts.
pub static SAMPLE_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/sample.bpf.o"));

/// `offcpu.bpf.o`: `on_sched_switch` (`tp_btf/sched_switch`), off-CPU time per stack.
pub static OFFCPU_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/offcpu.bpf.o"));

/// `syscalls.bpf.o`: `on_sys_enter` / `on_sys_exit` (raw tracepoints), per-syscall statistics.
pub static SYSCALLS_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/syscalls.bpf.o"));

/// `stackcopy.bpf.o`: `on_cpu_sample_stack_copy` (perf_event), samples with a copy of the user
/// stack for DWARF unwinding in the agent.
pub static STACKCOPY_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/stackcopy.bpf.o"));

/// `wire.bpf.o`: `on_sock_send` / `on_sock_recv` (BTF tracepoints `sock_send_length` /
/// `sock_recv_length`), payload heads of the target's sends and receives (sendto, recvfrom,
/// write, read, writev, readv, sendmsg, recvmsg) on its classified TCP sockets through the
/// `wire_chunks` ring buffer.
pub static WIRE_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/wire.bpf.o"));
