// SPDX-License-Identifier: GPL-2.0 OR Apache-2.0
/*
 * On-CPU sampling with a copy of the user stack, for unwinding in user space with the
 * binaries' .eh_frame CFI (code built without frame pointers, glibc's syscall wrappers).
 *
 * Runs on every tick of the software CPU clock perf event (one per online CPU, at the agent's
 * frequency), with the same target filter as sample.bpf.c (filter.bpf.h), and sends one
 * `struct stack_sample` per sample through the `stack_samples` ring buffer: thread, the user
 * registers ip/sp/bp, the kernel stack (bpf_get_stack) and up to `stack_copy_bytes` bytes of user stack
 * from sp upward (what perf calls PERF_SAMPLE_STACK_USER).
 *
 * When the tick interrupted kernel mode (a syscall, a page fault), the user registers are the
 * ones the task saved at kernel entry: bpf_task_pt_regs(bpf_get_current_task_btf())
 * (Documentation/bpf/ and include/uapi/linux/bpf.h: "bpf_task_pt_regs: Get the struct
 * pt_regs associated with task").
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "profiler.h"
#include "filter.bpf.h"


char LICENSE[] SEC("license") = "GPL";

/* Knob: bytes of user stack to read per sample, <= STACK_COPY_MAX_BYTES. */
const volatile __u64 stack_copy_bytes = 65536;

/* Samples to unwind, drained continuously by a thread of the agent. A record is the header
 * and the stack bytes copied, not the whole struct (bpf_ringbuf_output with the length):
 * 19-20 KiB for target-app's threads, at most about 69 KiB. 8 MiB hold 400 records of
 * 20 KiB (2 s of samples at 99 Hz on 2 CPUs) or 120 of the largest. When it is full, samples
 * are counted in lost[LOST_RINGBUF_FULL]. The agent maps the ring's data pages twice (the
 * kernel's wrap-around mapping), so its RSS grows by twice what the records touched. */
#define STACK_SAMPLES_BYTES (8 * 1024 * 1024)
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, STACK_SAMPLES_BYTES);
} stack_samples SEC(".maps");

/* Where a sample is built before it goes to the ring buffer: one struct per CPU, indexed by
 * bpf_get_smp_processor_id() (a perf-event program does not nest on its CPU). An array, not
 * a per-CPU array, whose values are limited to 32 KiB; the agent sets max_entries to the
 * number of possible CPUs at load. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct stack_sample);
} stack_scratch SEC(".maps");

SEC("perf_event")
int on_cpu_sample_stack_copy(struct bpf_perf_event_data *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32;
	__u32 pid = id;
	struct stack_sample *s;
	__u64 ip, sp, bp;
	__u32 flags = 0, len = 0, chunk;
	__u64 limit;

	if (pid == 0) /* the idle task */
		return 0;
	if (!current_is_target(tgid))
		return 0;

	if ((ctx->regs.csx & 3) == 3) {
		/* Interrupted user mode: the perf event's registers are the user's. */
		ip = ctx->regs.ip;
		sp = ctx->regs.sp;
		bp = ctx->regs.bp;
	} else {
		struct pt_regs *uregs = (struct pt_regs *)bpf_task_pt_regs(bpf_get_current_task_btf());
		struct pt_regs r = {};

		if (!uregs || bpf_probe_read_kernel(&r, sizeof(r), uregs))
			return 0; /* a kernel thread cannot be a target; nothing to unwind */
		ip = r.ip;
		sp = r.sp;
		bp = r.bp;
		flags |= STACK_SAMPLE_KERNEL_MODE;
	}

	{
		__u32 cpu = bpf_get_smp_processor_id();

		s = bpf_map_lookup_elem(&stack_scratch, &cpu);
		if (!s) {
			count_lost(LOST_RINGBUF_FULL);
			return 0;
		}
	}
	s->tgid = tgid;
	s->pid = pid;
	s->ip = ip;
	s->sp = sp;
	s->bp = bp;
	s->ts_ns = bpf_ktime_get_ns();
	s->_pad = 0;
	bpf_get_current_comm(&s->comm, sizeof(s->comm));
	/* The kernel stack goes into the record itself (bpf_get_stack), so no hash collision
	 * can lose it; empty (-EFAULT or 0) when the tick interrupted user mode. */
	s->kernel_stack_bytes = bpf_get_stack(ctx, s->kernel_stack, sizeof(s->kernel_stack), 0);

	/* Copy [sp, sp + limit) chunk by chunk, no chunk crossing a page boundary: the first
	 * chunk runs to the end of sp's page, the others are whole pages. A chunk fails only
	 * when its page is not mapped, i.e. past the top of the stack mapping. */
	limit = stack_copy_bytes;
	if (limit > STACK_COPY_MAX_BYTES)
		limit = STACK_COPY_MAX_BYTES;
	chunk = STACK_COPY_CHUNK - (sp & (STACK_COPY_CHUNK - 1));
	for (int i = 0; i < STACK_COPY_MAX_BYTES / STACK_COPY_CHUNK + 1; i++) {
		if (len >= limit)
			break;
		if (chunk > limit - len)
			chunk = limit - len;
		/* Bounds the verifier can follow: offset < STACK_COPY_MAX_BYTES and chunk <=
		 * STACK_COPY_CHUNK, inside stack[] thanks to its slack (really, len + chunk <= limit). */
		if (len > STACK_COPY_MAX_BYTES - 1 || chunk > STACK_COPY_CHUNK || chunk == 0)
			break;
		if (bpf_probe_read_user(&s->stack[len & (STACK_COPY_MAX_BYTES - 1)], chunk, (void *)(sp + len))) {
			flags |= STACK_SAMPLE_COPY_SHORT;
			break;
		}
		len += chunk;
		chunk = STACK_COPY_CHUNK;
	}
	if (len == 0)
		count_lost(LOST_STACK_COPY_FAILURES);
	s->stack_len = len;
	s->flags = flags;
	if (len > STACK_COPY_MAX_BYTES)
		len = STACK_COPY_MAX_BYTES;
	/* The header and the bytes copied only. No wake-up per sample (the agent's drain thread
	 * polls every 50 ms); wake it when the buffer is a quarter full. */
	if (bpf_ringbuf_output(&stack_samples, s, offsetof(struct stack_sample, stack) + len,
			       bpf_ringbuf_query(&stack_samples, BPF_RB_AVAIL_DATA) > STACK_SAMPLES_BYTES / 4
			       ? BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP))
		count_lost(LOST_RINGBUF_FULL);
	return 0;
}
