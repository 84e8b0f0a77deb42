// SPDX-License-Identifier: GPL-2.0 OR Apache-2.0
/*
 * Syscall counts, errors, -EAGAIN, total time and a log2 latency histogram per syscall
 * number, for the target only.
 *
 * Designed to be cheap, because raw_syscalls run for every syscall of every task on the
 * host: the target filter comes first (for a cgroup target: one helper call, no map
 * lookup); the entry timestamp lives in task-local storage (no hash update per call); the
 * statistics are a per-CPU array indexed by syscall number (no hash, no atomics).
 *
 * The agent may attach the pair only part of the time (`--syscalls-duty`: while no
 * raw_syscalls program is attached, the kernel takes its fast syscall path again). Each
 * attachment is a window with a number of its own (`syscall_window`, set by the agent
 * before it attaches); a sys_exit counts only when its sys_enter was seen in the same
 * window, so a call that began in an earlier window, whose exit was never seen, never
 * lends its start time and number to a later call.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "profiler.h"
#include "filter.bpf.h"

#define EAGAIN 11
#define EINPROGRESS 115

char LICENSE[] SEC("license") = "GPL";

/* The syscall a thread is in, with its entry time. */
struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct syscall_entry);
} syscall_entries SEC(".maps");

/* The current tracing window's number (key 0), from 1 (0 before the first window, while the
 * agent calibrates the tracepoints' cost: nothing is counted); written by the agent only
 * while the programs are detached. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} syscall_window SEC(".maps");

static __always_inline __u32 current_window(void)
{
	__u32 zero = 0;
	__u32 *window = bpf_map_lookup_elem(&syscall_window, &zero);

	return window ? *window : 0;
}

/* Statistics per syscall number, per CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, MAX_SYSCALLS);
	__type(key, __u32);
	__type(value, struct syscall_stat);
} syscall_stats SEC(".maps");

/* raw_syscalls:sys_enter(struct pt_regs *regs, long id). aya rejects CO-RE on
 * struct bpf_raw_tracepoint_args, so the arguments are read as ctx[i]. */
SEC("raw_tracepoint/sys_enter")
int on_sys_enter(__u64 *ctx)
{
	struct syscall_entry *entry;
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;

	if (!current_is_target(tgid))
		return 0;
	/* Window 0: the agent calibrating the tracepoints' cost before the first window. */
	if (current_window() == 0)
		return 0;
	entry = bpf_task_storage_get(&syscall_entries, bpf_get_current_task_btf(), 0,
				     BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!entry) {
		count_lost(LOST_SYSCALL_NO_STORAGE);
		return 0;
	}
	entry->nr = ctx[1];
	entry->window = current_window();
	entry->start_ns = bpf_ktime_get_ns();
	return 0;
}

static __always_inline __u32 log2_bucket(__u64 v)
{
	__u32 r = 0;

	/* floor(log2(v)) for v >= 1, 0 for v == 0; bounded by LATENCY_BUCKETS - 1. */
	if (v >> 32) { v >>= 32; r += 32; }
	if (v >> 16) { v >>= 16; r += 16; }
	if (v >> 8)  { v >>= 8;  r += 8; }
	if (v >> 4)  { v >>= 4;  r += 4; }
	if (v >> 2)  { v >>= 2;  r += 2; }
	if (v >> 1)  { r += 1; }
	return r < LATENCY_BUCKETS ? r : LATENCY_BUCKETS - 1;
}

/* raw_syscalls:sys_exit(struct pt_regs *regs, long ret). */
SEC("raw_tracepoint/sys_exit")
int on_sys_exit(__u64 *ctx)
{
	struct syscall_entry *entry;
	struct syscall_stat *stat;
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	__u64 now, delta;
	__u32 nr;
	long ret;

	if (!current_is_target(tgid))
		return 0;
	entry = bpf_task_storage_get(&syscall_entries, bpf_get_current_task_btf(), 0, 0);
	if (!entry)
		return 0; /* no sys_enter seen since the programs were attached */
	if (entry->start_ns == 0)
		return 0; /* entered before the programs were attached */
	if (entry->window != current_window()) {
		entry->start_ns = 0;
		return 0; /* entered in an earlier window: its exit there was not seen */
	}
	nr = entry->nr;
	now = bpf_ktime_get_ns();
	delta = now - entry->start_ns;
	entry->start_ns = 0;
	if (nr >= MAX_SYSCALLS) {
		count_lost(LOST_SYSCALL_NR_RANGE);
		return 0;
	}
	stat = bpf_map_lookup_elem(&syscall_stats, &nr);
	if (stat) {
		ret = (long)ctx[1];
		stat->count += 1;
		stat->total_ns += delta;
		if (ret < 0) {
			stat->errors += 1;
			/* Not ready yet: nonblocking I/O, or a nonblocking connect under way. */
			if (ret == -EAGAIN || ret == -EINPROGRESS)
				stat->eagain += 1;
		} else {
			stat->bytes += ret;
		}
		stat->latency_log2_ns[log2_bucket(delta)] += 1;
	}
	return 0;
}
