/* SPDX-License-Identifier: GPL-2.0 OR Apache-2.0 */
/*
 * THE definition of every struct, key, value and limit shared between the BPF programs
 * (the src/ *.bpf.c files) and the agent. `src/abi.rs` mirrors this file with #[repr(C)] types;
 * change both together: tests/abi_btf.rs checks the structs against the compiled objects' BTF,
 * tests/abi_constants.rs every #define and enum value against this file as libclang reads it.
 *
 * Only fixed-width types; every struct is padded explicitly so that the C and Rust
 * layouts cannot drift.
 */
#ifndef PROFILER_H
#define PROFILER_H

/* Length of a task's comm, as the kernel's TASK_COMM_LEN. */
#define COMM_LEN 16

/* Frames kept per stack (the kernel's sysctl kernel.perf_event_max_stack default). */
#define MAX_STACK_DEPTH 127

/* Entries of each stack-trace map (distinct stacks). */
#define MAX_STACK_TRACES 16384

/* Entries of the off-CPU aggregation hash (offcpu_stats). */
#define MAX_STACK_COUNTS 65536

/* Processes (tgids) a pid-set filter can hold. */
#define MAX_TARGET_PIDS 8192

/* Threads that can be switched out at the same time in off-CPU tracking. */
#define MAX_OFFCPU_THREADS 32768

/* Syscall numbers tracked (x86_64 numbers are below 512). */
#define MAX_SYSCALLS 512

/* Buckets of the log2 latency histogram: bucket i counts latencies in [2^i, 2^(i+1)) ns. */
#define LATENCY_BUCKETS 32

/* How the programs decide that the current task belongs to the target. */
enum filter_mode {
	/* The current task's cgroup v2 ancestor at `target_cgroup_level` has id
	 * `target_cgroup_id` (the cgroup itself or any descendant). */
	FILTER_CGROUP = 1,
	/* The current task's tgid is a key of the `target_pids` hash. */
	FILTER_PIDS = 2,
};

/* Indices of the per-CPU `lost` array: what a program could not record. */
enum lost_index {
	/* A sample or wait could not be stored: the aggregation hash was full. */
	LOST_SAMPLES_DROPPED = 0,
	/* bpf_get_stackid returned -EEXIST: another stack occupies the hash bucket. */
	LOST_STACK_COLLISIONS = 1,
	/* bpf_get_stackid failed for another reason (-EFAULT on a user stack, ...). */
	LOST_STACK_WALK_FAILURES = 2,
	/* Off-CPU: a switch-out could not be remembered (offcpu_starts full). */
	LOST_OFFCPU_DROPPED = 3,
	/* Syscalls: the task storage for the entry timestamp could not be created. */
	LOST_SYSCALL_NO_STORAGE = 4,
	/* Syscalls: the syscall number was >= MAX_SYSCALLS. */
	LOST_SYSCALL_NR_RANGE = 5,
	/* Stack copy: bpf_ringbuf_reserve failed (the ring buffer was full): sample lost. */
	LOST_RINGBUF_FULL = 6,
	/* Stack copy: not even the first chunk of the user stack could be read (sp not mapped);
	 * the sample is still sent, with its registers and no stack bytes. */
	LOST_STACK_COPY_FAILURES = 7,
	/* Off-CPU: a thread blocked again, or exited, while its last wait was still open: the
	 * sched_switch tracepoint did not fire for its switch-in. The wait was closed from the
	 * CPU time the thread ran since (not lost, but its end is an estimate). */
	LOST_OFFCPU_SWITCH_IN_UNSEEN = 8,
	LOST_COUNTERS = 9,
};

/* One thread on one (user, kernel) stack pair (the off-CPU key's stacks).
 * Stack ids index `stack_traces`; a negative id is the error bpf_get_stackid returned
 * (no stack of that kind). */
struct stack_key {
	__u32 tgid;            /* process id (host pid namespace) */
	__u32 pid;             /* thread id (host pid namespace) */
	__s32 user_stack_id;   /* id in stack_traces, or -errno */
	__s32 kernel_stack_id; /* id in stack_traces, or -errno */
	char comm[COMM_LEN];   /* thread name at sample time */
};
_Static_assert(sizeof(struct stack_key) == 32, "stack_key is 32 bytes");

/* What an off-CPU wait was, from the system call the thread was switched out in
 * (`offcpu_key.wait`). */
enum offcpu_wait {
	/* Any other wait. */
	OFFCPU_WAIT_OTHER = 0,
	/* A lock's slow path: FUTEX_WAIT or FUTEX_WAIT_BITSET on a futex word holding 2, the
	 * "locked, with waiters" state of glibc's low-level lock (__lll_lock_wait) and of Rust std's
	 * futex Mutex (lock_contended), or FUTEX_LOCK_PI / FUTEX_LOCK_PI2 (a priority-inheritance
	 * mutex). Told from the syscall's arguments, so without any user frame. */
	OFFCPU_WAIT_CONTENDED_LOCK = 1,
};

/* Key of `offcpu_stats`: one thread on one stack pair, and what it waited in. */
struct offcpu_key {
	struct stack_key stack;
	__u32 wait;  /* enum offcpu_wait */
	__u32 _pad;
};
_Static_assert(sizeof(struct offcpu_key) == 40, "offcpu_key is 40 bytes");

/* Value of `offcpu_stats`. */
struct offcpu_value {
	__u64 count;    /* waits */
	__u64 total_ns; /* sum of the waits, ns */
};
_Static_assert(sizeof(struct offcpu_value) == 16, "offcpu_value is 16 bytes");

/* Value of `offcpu_starts` (keyed by thread id): what was seen at switch-out. */
struct offcpu_start {
	__u64 start_ns;        /* bpf_ktime_get_ns() at switch-out */
	__u64 ran_ns;          /* the thread's CPU time at switch-out (se.sum_exec_runtime), ns */
	struct offcpu_key key; /* thread, stacks and wait at switch-out */
};
_Static_assert(sizeof(struct offcpu_start) == 56, "offcpu_start is 56 bytes");

/* Value of `offcpu_loop_stacks` (keyed by thread id): the stacks a thread's last walked
 * event-loop wait (epoll_wait, epoll_pwait, epoll_pwait2) had, and where in user space that
 * wait was entered (the syscall's user registers and the frame record at bp). The next
 * event-loop wait of the thread entered from the same place reuses them instead of walking
 * again. */
struct offcpu_loop_stack {
	__u64 ip;             /* user instruction pointer at syscall entry (pt_regs ip) */
	__u64 sp;             /* user stack pointer at syscall entry */
	__u64 bp;             /* user frame pointer register at syscall entry */
	__u64 frame[2];       /* the 16 bytes of user memory at bp: the caller's saved bp and the
	                       * return address of a frame-pointer frame (0, 0 when unreadable) */
	__s32 user_stack_id;  /* as stack_key */
	__s32 kernel_stack_id;
	__u32 uses;           /* waits that took these stacks since they were walked, the walk included */
	__u32 _pad;
};
_Static_assert(sizeof(struct offcpu_loop_stack) == 56, "offcpu_loop_stack is 56 bytes");

/* Value of the per-CPU `syscall_stats` array, indexed by x86_64 syscall number. */
struct syscall_stat {
	__u64 count;     /* completed calls */
	__u64 errors;    /* calls that returned a negative value (-EAGAIN included) */
	__u64 eagain;    /* calls that returned -EAGAIN or -EINPROGRESS (not ready yet) */
	__u64 total_ns;  /* sum of entry-to-exit latencies, ns */
	__u64 latency_log2_ns[LATENCY_BUCKETS];
	__u64 bytes;     /* sum of the positive return values: the bytes moved by read/write-like calls */
};
_Static_assert(sizeof(struct syscall_stat) == 40 + 8 * LATENCY_BUCKETS, "syscall_stat size");

/* Task-local storage of the syscall programs: the open syscall of the thread. */
struct syscall_entry {
	__u64 start_ns; /* bpf_ktime_get_ns() at sys_enter; 0 when no syscall is open */
	__u32 nr;       /* syscall number at sys_enter */
	__u32 window;   /* tracing window of that sys_enter (`syscall_window`), from 1 */
};
_Static_assert(sizeof(struct syscall_entry) == 16, "syscall_entry is 16 bytes");

/* Stack copy (stackcopy.bpf.c): the most bytes of user stack one sample can carry, from the
 * interrupted user sp upward. The `stack_copy_bytes` knob picks how many of them are read. */
#define STACK_COPY_MAX_BYTES 65536

/* Stack copy: the stack is read in chunks that never cross a page boundary (4 KiB pages on
 * x86_64), so a read fails only at the first page past the top of the stack mapping. */
#define STACK_COPY_CHUNK 4096

/* Flags of `struct stack_sample`. */
enum stack_sample_flags {
	/* The sample interrupted kernel mode: ip/sp/bp are the task's user registers saved
	 * at kernel entry (bpf_task_pt_regs), and kernel_stack[] holds the kernel stack. */
	STACK_SAMPLE_KERNEL_MODE = 1,
	/* Reading the user stack stopped at a fault before `stack_copy_bytes` (normally the
	 * top of the stack mapping; stack_len says how far it got). */
	STACK_SAMPLE_COPY_SHORT = 2,
};

/* One on-CPU sample of the frame-pointer sampler (`on_cpu_sample`, sample.bpf.c), sent
 * through the `fp_samples` ring buffer with both stacks in the record (bpf_get_stack): no
 * stack is interned in a stack-trace map, so no hash collision (-EEXIST) can lose one. The
 * interning design lost 4.9-5.2% of the user stacks and 2.2-2.3% of the kernel stacks of
 * target-app under `deals-list` at 999 Hz (16,384-entry map). */
struct fp_sample {
	__u32 tgid;               /* process id (host pid namespace) */
	__u32 pid;                /* thread id (host pid namespace) */
	__s32 user_stack_bytes;   /* bytes of user_stack[] filled (8 a frame), or -errno */
	__s32 kernel_stack_bytes; /* bytes of kernel_stack[] filled, or -errno (user mode) */
	__u64 ts_ns;              /* bpf_ktime_get_ns() at the sample (the wire chunks' clock) */
	char comm[COMM_LEN];      /* thread name at sample time */
	__u64 user_stack[MAX_STACK_DEPTH];   /* user return addresses (frame-pointer walk), leaf first */
	__u64 kernel_stack[MAX_STACK_DEPTH]; /* kernel return addresses, leaf first */
};
_Static_assert(sizeof(struct fp_sample) == 40 + 16 * MAX_STACK_DEPTH, "fp_sample size");

/* One on-CPU sample with a copy of the user stack, sent through the `stack_samples` ring
 * buffer by `on_cpu_sample_stack_copy`; the agent unwinds it with .eh_frame CFI. */
struct stack_sample {
	__u32 tgid;            /* process id (host pid namespace) */
	__u32 pid;             /* thread id (host pid namespace) */
	__u64 ip;              /* user instruction pointer */
	__u64 sp;              /* user stack pointer; stack[0] is the byte at this address */
	__u64 bp;              /* user rbp */
	__u64 ts_ns;           /* bpf_ktime_get_ns() at the sample (the wire chunks' clock) */
	/* Bytes of kernel_stack[] that bpf_get_stack filled (8 a frame), or -errno: no kernel
	 * stack (the sample interrupted user mode). Copied into the record, not interned in a
	 * stack-trace map: a map's hash collisions (-EEXIST) lost 1.5% of the kernel stacks of a
	 * 4,999 Hz bench run, and a lost kernel stack moved its sample to the user layer. */
	__s32 kernel_stack_bytes;
	__u32 stack_len;       /* bytes of stack[] filled, <= STACK_COPY_MAX_BYTES */
	__u32 flags;           /* enum stack_sample_flags */
	__u32 _pad;
	char comm[COMM_LEN];   /* thread name at sample time */
	__u64 kernel_stack[MAX_STACK_DEPTH]; /* kernel return addresses, leaf first */
	/* User memory [sp, sp + stack_len). The last STACK_COPY_CHUNK bytes are never filled:
	 * slack that lets the verifier prove every chunk write in bounds. */
	__u8 stack[STACK_COPY_MAX_BYTES + STACK_COPY_CHUNK];
};
_Static_assert(sizeof(struct stack_sample) == 72 + 8 * MAX_STACK_DEPTH + STACK_COPY_MAX_BYTES + STACK_COPY_CHUNK,
	       "stack_sample size");


/* ---- Wire capture (wire.bpf.c): payload heads of the target's classified TCP sockets ---- */

/* Most bytes of the head (the first bytes a send/receive syscall moved) one chunk carries;
 * the `head_bytes` knob picks how many of them are read. */
#define WIRE_HEAD_MAX 256

/* Most bytes of the tail (the last bytes moved) one chunk carries: PostgreSQL sockets and
 * contiguous buffers only (sendto/recvfrom/read/write); the `tail_bytes` knob. */
#define WIRE_TAIL_MAX 64

/* Most bytes of an HTTP socket's head (the request or status line): the kernel cuts the head
 * after the first '\n' and sends nothing unless it starts with a start line, so header fields
 * and bodies never leave the kernel; the `http_head_bytes` knob. */
#define WIRE_HTTP_HEAD_MAX 128

/* Iovecs of a vectored call (readv/writev/sendmsg/recvmsg) read for the head. */
#define WIRE_MAX_IOVECS 8

/* Listening ports of the target the `http_ports` map can hold. */
#define MAX_HTTP_PORTS 256

/* Class of a socket, decided in the kernel from its addresses. */
enum wire_class {
	/* Peer port == the `db_port` knob: a PostgreSQL client connection of the target. */
	WIRE_CLASS_POSTGRES = 1,
	/* Local port in `http_ports`: a connection the target accepted as HTTP server. */
	WIRE_CLASS_HTTP = 2,
};

/* Which way a chunk's bytes went, seen from the target. */
enum wire_direction {
	WIRE_TX = 0, /* sent by the target */
	WIRE_RX = 1, /* received by the target */
};

/* Which syscall moved a chunk's bytes (`struct wire_chunk.syscall`). */
enum wire_syscall {
	WIRE_SYS_SENDTO = 1,
	WIRE_SYS_RECVFROM = 2,
	WIRE_SYS_WRITE = 3,
	WIRE_SYS_READ = 4,
	WIRE_SYS_WRITEV = 5,
	WIRE_SYS_READV = 6,
	WIRE_SYS_SENDMSG = 7,
	WIRE_SYS_RECVMSG = 8,
};

/* Indices of the per-CPU `wire_stats` array (wire.bpf.c's own counters). */
enum wire_stat_index {
	WIRE_STAT_CHUNKS = 0,        /* chunks sent to the ring buffer */
	WIRE_STAT_RINGBUF_FULL = 1,  /* chunks lost: `wire_chunks` was full */
	WIRE_STAT_OTHER_CALLS = 2,   /* calls on classified sockets through other syscalls
	                              * (sendmmsg, sendfile, ...), from kernel threads, or
	                              * MSG_PEEK receives: no chunk */
	WIRE_STAT_EAGAIN = 3,        /* calls on classified sockets that returned -EAGAIN */
	WIRE_STAT_ERRORS = 4,        /* ... that returned another error, or 0 */
	WIRE_STAT_READ_FAILURES = 5, /* chunks whose head could not be read from user memory */
	WIRE_STAT_HTTP_NO_START_LINE = 6, /* HTTP chunks not starting with a start line: sent without head */
	WIRE_STAT_PG_RECOGNISED = 7, /* sockets recognised as PostgreSQL by their first bytes (any port) */
	WIRE_STAT_COUNTERS = 8,
};

/* One send or receive of the target on a classified socket that moved bytes (return value
 * > 0), as built in the kernel. What the `wire_chunks` ring buffer carries is its filled part
 * only (bpf_ringbuf_output with the length): the 40-byte header and head_len head bytes, or,
 * for a call with a tail (tail_len > 0, PostgreSQL only), the whole 360 bytes, head[]
 * zero-padded after head_len. An HTTP record is the header and the start line (head_len <=
 * WIRE_HTTP_HEAD_MAX), never a tail. */
struct wire_chunk {
	__u64 ts_ns;       /* bpf_ktime_get_ns() when the socket call returned (inside the syscall) */
	__u32 pid;         /* process id (tgid, host pid namespace) */
	__u32 tid;         /* thread id */
	__u64 socket;      /* socket id: the struct sock address (stable while the socket lives) */
	__u32 total_len;   /* bytes the syscall moved (its return value, an int) */
	__u16 local_port;  /* the socket's local TCP port, host order */
	__u16 peer_port;   /* the socket's peer TCP port, host order */
	__u16 head_len;    /* bytes of head[] filled, <= WIRE_HEAD_MAX */
	__u16 tail_len;    /* bytes of tail[] filled, <= WIRE_TAIL_MAX */
	__u8 direction;    /* enum wire_direction */
	__u8 class;        /* enum wire_class */
	__u8 syscall;      /* enum wire_syscall */
	__u8 _pad;
	__u8 head[WIRE_HEAD_MAX]; /* the first bytes moved (HTTP: the start line) */
	__u8 tail[WIRE_TAIL_MAX]; /* the last tail_len bytes moved */
};
_Static_assert(sizeof(struct wire_chunk) == 40 + WIRE_HEAD_MAX + WIRE_TAIL_MAX, "wire_chunk size");

/* Bytes of the header of `struct wire_chunk`: where head[] starts; a record is never shorter. */
#define WIRE_CHUNK_HEADER_BYTES 40
_Static_assert(__builtin_offsetof(struct wire_chunk, head) == WIRE_CHUNK_HEADER_BYTES, "wire_chunk header");

#endif /* PROFILER_H */
