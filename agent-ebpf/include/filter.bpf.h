/* SPDX-License-Identifier: GPL-2.0 OR Apache-2.0 */
/*
 * The target filter shared by every program family: "does the current task belong to the
 * target?". Included by each BPF source in src/ (each object gets its own copy of the knobs and of
 * `target_pids`; the agent sets them all the same way).
 */
#ifndef FILTER_BPF_H
#define FILTER_BPF_H

#include "profiler.h"

/* Knobs, set by the agent before load (libbpf-tools convention). */
const volatile __u32 filter_mode = 0;         /* enum filter_mode; 0 matches nothing */
const volatile __u64 target_cgroup_id = 0;    /* FILTER_CGROUP: cgroup v2 id (inode) */
const volatile __u32 target_cgroup_level = 0; /* FILTER_CGROUP: depth of that cgroup, root = 0 */

/* FILTER_PIDS: the target's processes (tgid -> unused byte), kept current by the agent. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_TARGET_PIDS);
	__type(key, __u32);
	__type(value, __u8);
} target_pids SEC(".maps");

/* Per-CPU loss counters, indexed by enum lost_index. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, LOST_COUNTERS);
	__type(key, __u32);
	__type(value, __u64);
} lost SEC(".maps");

static __always_inline void count_lost(__u32 index)
{
	__u64 *value = bpf_map_lookup_elem(&lost, &index);
	if (value)
		*value += 1; /* per-CPU slot: no other writer */
}

/* True when the current task belongs to the target. The cgroup test costs one helper
 * call and no map lookup, so it comes first wherever the program runs host-wide. */
static __always_inline bool current_is_target(__u32 tgid)
{
	if (filter_mode == FILTER_CGROUP)
		return bpf_get_current_ancestor_cgroup_id(target_cgroup_level) == target_cgroup_id;
	if (filter_mode == FILTER_PIDS)
		return bpf_map_lookup_elem(&target_pids, &tgid) != NULL;
	return false;
}

#endif /* FILTER_BPF_H */
