// SPDX-License-Identifier: GPL-2.0 OR Apache-2.0
/*
 * On-CPU sampling with frame-pointer stacks (`--unwind fp`): runs on every tick of the
 * software CPU clock perf event (one per online CPU, at the agent's frequency), keeps the
 * samples of the target and sends one `struct fp_sample` per sample through the
 * `fp_samples` ring buffer: thread, user stack and kernel stack, both walked by the kernel
 * (bpf_get_stack; the user walk follows frame pointers) and copied into the record. The
 * agent's drain thread aggregates them per (thread, user stack, kernel stack).
 *
 * Why not bpf_get_stackid and in-kernel counts: a stack-trace map keeps one stack per hash
 * bucket and drops a colliding one (-EEXIST); with Rust's deep, varied stacks that lost about
 * 5% of the user stacks at 999 Hz (see struct fp_sample). A record is 2,072 bytes: at 99 Hz on
 * two CPUs, about 400 KB/s through the ring buffer.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "profiler.h"
#include "filter.bpf.h"


char LICENSE[] SEC("license") = "GPL";

/* Samples to aggregate, drained every 50 ms by a thread of the agent. 4 MiB hold about 2,000
 * records: 1 s of samples at 999 Hz on two CPUs. When it is full, samples are counted in
 * lost[LOST_RINGBUF_FULL]. */
#define FP_SAMPLES_BYTES (4 * 1024 * 1024)
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, FP_SAMPLES_BYTES);
} fp_samples SEC(".maps");

/* Puts the record's type into this object's BTF, where tests/abi_btf.rs checks it against the
 * Rust mirror (a ring buffer's records are in no map's BTF). Never read. */
struct fp_sample *const fp_sample_btf __attribute__((unused)) = (void *)0;

SEC("perf_event")
int on_cpu_sample(struct bpf_perf_event_data *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32;
	__u32 pid = id;
	struct fp_sample *s;

	if (pid == 0) /* the idle task */
		return 0;
	if (!current_is_target(tgid))
		return 0;

	s = bpf_ringbuf_reserve(&fp_samples, sizeof(*s), 0);
	if (!s) {
		count_lost(LOST_RINGBUF_FULL);
		return 0;
	}
	s->tgid = tgid;
	s->pid = pid;
	s->ts_ns = bpf_ktime_get_ns();
	bpf_get_current_comm(&s->comm, sizeof(s->comm));
	s->user_stack_bytes = bpf_get_stack(ctx, s->user_stack, sizeof(s->user_stack), BPF_F_USER_STACK);
	/* Empty (-EFAULT or 0) when the tick interrupted user mode. */
	s->kernel_stack_bytes = bpf_get_stack(ctx, s->kernel_stack, sizeof(s->kernel_stack), 0);
	if (s->user_stack_bytes <= 0)
		count_lost(LOST_STACK_WALK_FAILURES);
	/* No wake-up per sample (the drain thread polls every 50 ms); wake it when the buffer
	 * is a quarter full. */
	bpf_ringbuf_submit(s, bpf_ringbuf_query(&fp_samples, BPF_RB_AVAIL_DATA) > FP_SAMPLES_BYTES / 4
				      ? BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP);
	return 0;
}
