// SPDX-License-Identifier: GPL-2.0 OR Apache-2.0
/*
 * Off-CPU time: at every context switch, a target thread that blocks (its state is not
 * TASK_RUNNING: sleep, I/O, lock, futex) is remembered with its time and stacks; when it
 * is switched in again, the time it spent off the CPU is added to its (thread, stacks)
 * entry of `offcpu_stats`. A thread preempted while runnable is not counted: that is CPU
 * contention, not a wait of the program. Waits shorter than `min_block_ns` are ignored.
 * As with libbpf-tools offcputime, the time runs until the thread is back on a CPU, so it
 * includes the run-queue delay after its wake-up.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "profiler.h"
#include "filter.bpf.h"
#include "stacks.bpf.h"

#define TASK_RUNNING 0

char LICENSE[] SEC("license") = "GPL";

/* Knob: waits shorter than this are not recorded, ns. */
const volatile __u64 min_block_ns = 1000;

/* Target threads switched out right now: thread id -> time and stacks at switch-out. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_OFFCPU_THREADS);
	__type(key, __u32);
	__type(value, struct offcpu_start);
} offcpu_starts SEC(".maps");

/* Waits and their total per (thread, user stack, kernel stack). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_STACK_COUNTS);
	__type(key, struct stack_key);
	__type(value, struct offcpu_value);
} offcpu_stats SEC(".maps");

SEC("tp_btf/sched_switch")
int BPF_PROG(on_sched_switch, bool preempt, struct task_struct *prev, struct task_struct *next,
	     unsigned int prev_state)
{
	struct offcpu_start *start;
	struct offcpu_value *value;
	__u32 next_pid = next->pid;

	/* Switch-out: `prev` is the current task, so the filter and the stack walks apply
	 * to it. */
	if (prev->pid != 0 && prev_state != TASK_RUNNING && current_is_target(prev->tgid)) {
		struct offcpu_start s = {};
		__u32 prev_pid = prev->pid;

		/* The clock is read only for target threads: this program runs at every
		 * context switch of the host. */
		s.start_ns = bpf_ktime_get_ns();
		s.key.tgid = prev->tgid;
		s.key.pid = prev_pid;
		bpf_get_current_comm(&s.key.comm, sizeof(s.key.comm));
		s.key.user_stack_id = bpf_get_stackid(ctx, &stack_traces, BPF_F_USER_STACK);
		s.key.kernel_stack_id = bpf_get_stackid(ctx, &stack_traces, 0);
		count_stack_error(s.key.user_stack_id, true);
		count_stack_error(s.key.kernel_stack_id, false);
		if (bpf_map_update_elem(&offcpu_starts, &prev_pid, &s, BPF_ANY))
			count_lost(LOST_OFFCPU_DROPPED);
	}

	/* Switch-in: only target threads are in offcpu_starts. */
	start = bpf_map_lookup_elem(&offcpu_starts, &next_pid);
	if (!start)
		return 0;
	__u64 now = bpf_ktime_get_ns();
	if (now > start->start_ns && now - start->start_ns >= min_block_ns) {
		__u64 delta = now - start->start_ns;

		value = bpf_map_lookup_elem(&offcpu_stats, &start->key);
		if (value) {
			__sync_fetch_and_add(&value->count, 1);
			__sync_fetch_and_add(&value->total_ns, delta);
		} else {
			struct offcpu_value v = { .count = 1, .total_ns = delta };

			if (bpf_map_update_elem(&offcpu_stats, &start->key, &v, BPF_NOEXIST)) {
				value = bpf_map_lookup_elem(&offcpu_stats, &start->key);
				if (value) {
					__sync_fetch_and_add(&value->count, 1);
					__sync_fetch_and_add(&value->total_ns, delta);
				} else {
					count_lost(LOST_SAMPLES_DROPPED);
				}
			}
		}
	}
	bpf_map_delete_elem(&offcpu_starts, &next_pid);
	return 0;
}
