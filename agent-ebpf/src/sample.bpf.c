// SPDX-License-Identifier: GPL-2.0 OR Apache-2.0
/*
 * On-CPU sampling: runs on every tick of the software CPU clock perf event (one per online
 * CPU, at the agent's frequency), keeps the samples of the target and counts them per
 * (thread, user stack, kernel stack) in the kernel; the agent drains the counts at the end.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "profiler.h"
#include "filter.bpf.h"
#include "stacks.bpf.h"


char LICENSE[] SEC("license") = "GPL";

/* Samples per (thread, user stack, kernel stack). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_STACK_COUNTS);
	__type(key, struct stack_key);
	__type(value, __u64);
} stack_counts SEC(".maps");

SEC("perf_event")
int on_cpu_sample(struct bpf_perf_event_data *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32;
	__u32 pid = id;
	struct stack_key key = {};
	__u64 one = 1, *count;

	if (pid == 0) /* the idle task */
		return 0;
	if (!current_is_target(tgid))
		return 0;

	key.tgid = tgid;
	key.pid = pid;
	bpf_get_current_comm(&key.comm, sizeof(key.comm));
	key.user_stack_id = bpf_get_stackid(ctx, &stack_traces, BPF_F_USER_STACK);
	key.kernel_stack_id = bpf_get_stackid(ctx, &stack_traces, 0);
	count_stack_error(key.user_stack_id, true);
	count_stack_error(key.kernel_stack_id, false);

	count = bpf_map_lookup_elem(&stack_counts, &key);
	if (count) {
		__sync_fetch_and_add(count, 1);
		return 0;
	}
	if (bpf_map_update_elem(&stack_counts, &key, &one, BPF_NOEXIST)) {
		/* -EEXIST: another CPU inserted it meanwhile; otherwise the map is full. */
		count = bpf_map_lookup_elem(&stack_counts, &key);
		if (count)
			__sync_fetch_and_add(count, 1);
		else
			count_lost(LOST_SAMPLES_DROPPED);
	}
	return 0;
}
