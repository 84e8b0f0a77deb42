// SPDX-License-Identifier: GPL-2.0 OR Apache-2.0
/*
 * Off-CPU time: at every context switch, a target thread that blocks (its state is not
 * TASK_RUNNING: sleep, I/O, lock, futex) is remembered with its time and stacks; when it
 * is switched in again, the time it spent off the CPU is added to its (thread, stacks)
 * entry of `offcpu_stats`. A thread preempted while runnable is not counted: that is CPU
 * contention, not a wait of the program. Nor is a thread's last switch-out as it exits
 * (TASK_DEAD): it never comes back, and would count as a wait up to the end of the run.
 * Waits shorter than `min_block_ns` are ignored.
 *
 * Switch-ins the tracepoint does not show: on the 6.18 kernel of our machines, sched_switch
 * now and then does not fire for a switch-in (`perf record -e sched:sched_switch` alone shows
 * it too: 1 of 3,000 5 ms epoll waits, the thread switched out twice with no switch-in
 * between). The thread's entry in `offcpu_starts` then stays open until its next blocking
 * switch-out, which would overwrite it (the wait lost), or for good if it exits (the wait
 * counted up to the end of the run). So a blocking or final switch-out that finds the
 * thread's previous wait still open closes it first, ending it where the thread must have
 * come back: now minus the CPU time it ran since (`se.sum_exec_runtime`, which the
 * scheduler updates before the tracepoint), and counts it in LOST_OFFCPU_SWITCH_IN_UNSEEN.
 * As with libbpf-tools offcputime, the time runs until the thread is back on a CPU, so it
 * includes the run-queue delay after its wake-up.
 *
 * Event-loop waits: a thread that blocks in epoll_wait, epoll_pwait or epoll_pwait2 (an
 * event loop going idle: tokio's I/O driver, mio, libuv, ...) does so thousands of times a
 * second from the same place, and walking its two stacks each time is most of this program's
 * cost (about 1.5 of 2.2 µs per wait, by the kernel's run-time statistics on target-app). Its
 * stack ids are kept per thread in `offcpu_loop_stacks` with where the syscall was entered:
 * the user registers ip, sp and bp, and the 16 bytes at bp (with frame pointers, the caller's
 * saved bp and the return address into it). The next event-loop wait of that thread entered
 * from the same place reuses them; any other wait, a change of any of the five, or every
 * `loop_rewalk_every`-th wait walks again. Equal values mean the same instruction, at the
 * same stack depth, called from the same return address: the walk would start from the same
 * frames. Two callers further up at equal depths are not told apart until the next walk.
 *
 * Lock waits: a thread switched out in a futex wait on a word holding 2 (the "locked, with
 * waiters" state of glibc's and Rust std's mutexes) or in FUTEX_LOCK_PI is marked
 * OFFCPU_WAIT_CONTENDED_LOCK in its key, from the syscall's arguments. Code built without frame
 * pointers leaves the user walk stopped in libc's `syscall` wrapper, where a contended lock and
 * a condition variable's wait look alike; the mark tells them apart without user frames. A
 * condition variable's futex word is a counter that holds 2 only between its second and third
 * notification.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "profiler.h"
#include "filter.bpf.h"
#include "stacks.bpf.h"

#define TASK_RUNNING 0
/* __state of a task switched out for the last time, in do_task_dead (include/linux/sched.h). */
#define TASK_DEAD 0x00000080
/* x86_64 syscall numbers of the event-loop waits (arch/x86/entry/syscalls/syscall_64.tbl). */
#define NR_EPOLL_WAIT 232
#define NR_EPOLL_PWAIT 281
#define NR_EPOLL_PWAIT2 441
#define NR_FUTEX 202
/* futex operations (include/uapi/linux/futex.h), without FUTEX_PRIVATE_FLAG (128) and
 * FUTEX_CLOCK_REALTIME (256). */
#define FUTEX_CMD_MASK (~(128 | 256))
#define FUTEX_WAIT 0
#define FUTEX_LOCK_PI 6
#define FUTEX_WAIT_BITSET 9
#define FUTEX_LOCK_PI2 13
/* The futex word of a lock with waiters: glibc's lll_lock and Rust std's futex Mutex both
 * wait for it to change from 2 (Drepper, "Futexes Are Tricky", mutex3). */
#define FUTEX_LOCKED_WITH_WAITERS 2
/* task_struct.flags (include/linux/sched.h): no user registers of their own. */
#define PF_IO_WORKER 0x00000010
#define PF_KTHREAD 0x00200000

char LICENSE[] SEC("license") = "GPL";

/* Knob: waits shorter than this are not recorded, ns. */
const volatile __u64 min_block_ns = 1000;
/* Knob: an event-loop wait walks its stacks at least once in this many waits of its thread
 * (see above); 1 walks every wait. */
const volatile __u64 loop_rewalk_every = 64;

/* Target threads switched out right now: thread id -> time and stacks at switch-out. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_OFFCPU_THREADS);
	__type(key, __u32);
	__type(value, struct offcpu_start);
} offcpu_starts SEC(".maps");

/* Event-loop threads: the stacks of their last walked event-loop wait. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, MAX_OFFCPU_THREADS);
	__type(key, __u32);
	__type(value, struct offcpu_loop_stack);
} offcpu_loop_stacks SEC(".maps");

/* Waits and their total per (thread, user stack, kernel stack, wait). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_STACK_COUNTS);
	__type(key, struct offcpu_key);
	__type(value, struct offcpu_value);
} offcpu_stats SEC(".maps");

/* The current task's user registers (at syscall entry when it is in a system call), or NULL
 * for a kernel thread or an io_uring worker (no user registers of their own). */
static __always_inline struct pt_regs *user_regs(void)
{
	struct task_struct *task = bpf_get_current_task_btf();

	if (task->flags & (PF_KTHREAD | PF_IO_WORKER))
		return NULL;
	return (struct pt_regs *)bpf_task_pt_regs(task);
}

/* Whether the user registers `regs` are those of an event-loop wait (epoll_wait,
 * epoll_pwait, epoll_pwait2) whose stacks may be reused. */
static __always_inline bool event_loop_wait(const struct pt_regs *regs)
{
	__u64 nr = regs->orig_ax;

	return loop_rewalk_every > 1 && (nr == NR_EPOLL_WAIT || nr == NR_EPOLL_PWAIT || nr == NR_EPOLL_PWAIT2);
}

/* The wait (enum offcpu_wait) of a task switched out with the user registers `regs`. */
static __always_inline __u32 wait_of(const struct pt_regs *regs)
{
	__u32 cmd;

	if (regs->orig_ax != NR_FUTEX)
		return OFFCPU_WAIT_OTHER;
	/* futex(uaddr, op, val, ...): op in rsi, val in rdx (x86_64 syscall convention). */
	cmd = (__u32)regs->si & FUTEX_CMD_MASK;
	if (cmd == FUTEX_LOCK_PI || cmd == FUTEX_LOCK_PI2)
		return OFFCPU_WAIT_CONTENDED_LOCK;
	if ((cmd == FUTEX_WAIT || cmd == FUTEX_WAIT_BITSET) && (__u32)regs->dx == FUTEX_LOCKED_WITH_WAITERS)
		return OFFCPU_WAIT_CONTENDED_LOCK;
	return OFFCPU_WAIT_OTHER;
}

/* Where an event-loop wait entered with the user registers `regs` was entered: `c`'s ip, sp,
 * bp and frame. */
static __always_inline void loop_site(struct offcpu_loop_stack *c, const struct pt_regs *regs)
{
	c->ip = regs->ip;
	c->sp = regs->sp;
	c->bp = regs->bp;
	if (bpf_probe_read_user(c->frame, sizeof(c->frame), (void *)regs->bp)) {
		c->frame[0] = 0;
		c->frame[1] = 0;
	}
}

/* Fills `key`'s stack ids from `offcpu_loop_stacks` when thread `tid`, in an event-loop wait
 * entered from `site`, last walked one entered from the same site and that walk is not due
 * again; returns whether it did. */
static __always_inline bool loop_stacks(struct stack_key *key, __u32 tid, const struct offcpu_loop_stack *site)
{
	struct offcpu_loop_stack *c;

	c = bpf_map_lookup_elem(&offcpu_loop_stacks, &tid);
	if (!c || c->uses >= loop_rewalk_every || c->ip != site->ip || c->sp != site->sp || c->bp != site->bp ||
	    c->frame[0] != site->frame[0] || c->frame[1] != site->frame[1])
		return false;
	c->uses += 1; /* only this thread's switch-outs touch its entry */
	key->user_stack_id = c->user_stack_id;
	key->kernel_stack_id = c->kernel_stack_id;
	return true;
}

/* After a walk of an event-loop wait entered from `site`: keeps `key`'s stacks for the next
 * event-loop waits of thread `tid` when both walks succeeded. */
static __always_inline void remember_loop_stacks(const struct stack_key *key, __u32 tid, const struct offcpu_loop_stack *site)
{
	struct offcpu_loop_stack c = *site;

	if (key->user_stack_id < 0 || key->kernel_stack_id < 0)
		return;
	c.user_stack_id = key->user_stack_id;
	c.kernel_stack_id = key->kernel_stack_id;
	c.uses = 1;
	bpf_map_update_elem(&offcpu_loop_stacks, &tid, &c, BPF_ANY);
}

/* Adds a wait of `delta` ns to `key`'s entry of `offcpu_stats`. */
static __always_inline void add_wait(const struct offcpu_key *key, __u64 delta)
{
	struct offcpu_value *value = bpf_map_lookup_elem(&offcpu_stats, key);

	if (value) {
		__sync_fetch_and_add(&value->count, 1);
		__sync_fetch_and_add(&value->total_ns, delta);
		return;
	}
	struct offcpu_value v = { .count = 1, .total_ns = delta };

	if (bpf_map_update_elem(&offcpu_stats, key, &v, BPF_NOEXIST)) {
		value = bpf_map_lookup_elem(&offcpu_stats, key);
		if (value) {
			__sync_fetch_and_add(&value->count, 1);
			__sync_fetch_and_add(&value->total_ns, delta);
		} else {
			count_lost(LOST_SAMPLES_DROPPED);
		}
	}
}

/* Closes the wait `open` of a thread whose switch-in the tracepoint did not show, at a
 * switch-out `now` of the same thread, which has `ran_ns` of CPU time now (see above). */
static __always_inline void close_unseen(const struct offcpu_start *open, __u64 now, __u64 ran_ns)
{
	__u64 ran = ran_ns > open->ran_ns ? ran_ns - open->ran_ns : 0;

	count_lost(LOST_OFFCPU_SWITCH_IN_UNSEEN);
	if (now > ran && now - ran > open->start_ns && now - ran - open->start_ns >= min_block_ns)
		add_wait(&open->key, now - ran - open->start_ns);
}

SEC("tp_btf/sched_switch")
int BPF_PROG(on_sched_switch, bool preempt, struct task_struct *prev, struct task_struct *next,
	     unsigned int prev_state)
{
	struct offcpu_start *start;
	__u32 next_pid = next->pid;

	/* Switch-out: `prev` is the current task, so the filter and the stack walks apply
	 * to it. */
	if (prev->pid != 0 && prev_state != TASK_RUNNING && current_is_target(prev->tgid)) {
		__u32 prev_pid = prev->pid;
		/* The clock is read only for target threads: this program runs at every
		 * context switch of the host. */
		__u64 now = bpf_ktime_get_ns();
		__u64 ran_ns = prev->se.sum_exec_runtime;

		start = bpf_map_lookup_elem(&offcpu_starts, &prev_pid);
		if (start)
			close_unseen(start, now, ran_ns);
		if (prev_state & TASK_DEAD) {
			if (start)
				bpf_map_delete_elem(&offcpu_starts, &prev_pid);
		} else {
			struct offcpu_start s = { .start_ns = now, .ran_ns = ran_ns };
			struct stack_key *key = &s.key.stack;
			struct pt_regs *regs = user_regs();
			struct offcpu_loop_stack site = {};
			bool loop = false;

			if (regs) {
				s.key.wait = wait_of(regs);
				loop = event_loop_wait(regs);
			}
			if (loop)
				loop_site(&site, regs);

			key->tgid = prev->tgid;
			key->pid = prev_pid;
			bpf_get_current_comm(&key->comm, sizeof(key->comm));
			if (!loop || !loop_stacks(key, prev_pid, &site)) {
				key->user_stack_id = bpf_get_stackid(ctx, &stack_traces, BPF_F_USER_STACK);
				key->kernel_stack_id = bpf_get_stackid(ctx, &stack_traces, 0);
				count_stack_error(key->user_stack_id, true);
				count_stack_error(key->kernel_stack_id, false);
				if (loop)
					remember_loop_stacks(key, prev_pid, &site);
			}
			if (bpf_map_update_elem(&offcpu_starts, &prev_pid, &s, BPF_ANY))
				count_lost(LOST_OFFCPU_DROPPED);
		}
	}

	/* Switch-in: only target threads are in offcpu_starts. */
	start = bpf_map_lookup_elem(&offcpu_starts, &next_pid);
	if (!start)
		return 0;
	__u64 now = bpf_ktime_get_ns();
	if (now > start->start_ns && now - start->start_ns >= min_block_ns)
		add_wait(&start->key, now - start->start_ns);
	bpf_map_delete_elem(&offcpu_starts, &next_pid);
	return 0;
}
