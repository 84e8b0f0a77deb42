// SPDX-License-Identifier: GPL-2.0 OR Apache-2.0
/*
 * The stack map and its loss accounting, for the programs that take stack ids (offcpu.bpf.c;
 * the on-CPU samplers copy their stacks into ring-buffer records instead). Each BPF object
 * that includes it gets its own instance of the map; the agent reads it by the name
 * `stack_traces` (abi.rs).
 * Include after filter.bpf.h (for count_lost).
 */
#ifndef PROFILER_STACKS_BPF_H
#define PROFILER_STACKS_BPF_H

#define EEXIST 17

/* Stack id -> up to MAX_STACK_DEPTH return addresses (bpf_get_stackid). */
struct {
	__uint(type, BPF_MAP_TYPE_STACK_TRACE);
	__uint(max_entries, MAX_STACK_TRACES);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, MAX_STACK_DEPTH * sizeof(__u64));
} stack_traces SEC(".maps");

/* Counts a failed bpf_get_stackid: -EEXIST is a hash collision in stack_traces (the stack is
 * dropped); any other error on a user stack is a failed walk. -EFAULT on the kernel stack is
 * normal: the sample interrupted user mode. */
static __always_inline void count_stack_error(__s32 id, bool is_user)
{
	if (id == -EEXIST)
		count_lost(LOST_STACK_COLLISIONS);
	else if (id < 0 && is_user)
		count_lost(LOST_STACK_WALK_FAILURES);
}

#endif
