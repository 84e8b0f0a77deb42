// SPDX-License-Identifier: GPL-2.0 OR Apache-2.0
/*
 * Wire capture: the head (and, for PostgreSQL, the tail) of every send and receive of the
 * target on its classified TCP sockets, one `struct wire_chunk` per syscall that moved bytes,
 * through the `wire_chunks` ring buffer. The agent decodes them (agent/src/wire/).
 *
 * Hooks: none of their own. The programs are raw_tracepoint programs that `on_sys_enter` /
 * `on_sys_exit` (syscalls.bpf.c, on raw_syscalls:sys_enter/sys_exit) reach by a BPF tail call
 * through the program arrays `wire_enter_programs` / `wire_exit_programs`, indexed by syscall
 * number, for X in sendto, recvfrom, write, read, writev, readv, sendmsg, recvmsg, after the
 * target filter (filter.bpf.h) passed: so these programs do not filter again. Their context is
 * the raw tracepoint's: ctx[0] the `struct pt_regs *` of the user registers at syscall entry
 * (the arguments are in di, si, dx, r10, r8, r9 on x86_64: arch/x86/include/asm/syscall.h,
 * syscall_get_arguments), ctx[1] the syscall number (enter) or the return value (exit).
 *
 * On enter: classify the socket from the fd, in the kernel
 * (current->files->fdt->fd[fd]->private_data is the struct socket of a socket file, whose
 * ->file points back to that file; its ->sk gives family, type, protocol and ports; CO-RE
 * reads through vmlinux.h): only AF_INET/AF_INET6 TCP stream sockets, PostgreSQL when the
 * peer port is the `db_port` knob, HTTP when the local port is in `http_ports` (filled by the
 * agent with the target's listening ports). Anything else is ignored here. The buffer (or the
 * iovec array) is kept in task-local storage. On exit: the return value is what was really
 * moved; > 0 gives a chunk, -EAGAIN and other errors are only counted (`wire_stats`).
 *
 * What leaves the kernel: for PostgreSQL sockets, the first `head_bytes` (<= 256; for vectored
 * calls, of the first iovec with data) and the last
 * `tail_bytes` (<= 64, contiguous buffers only) bytes of each call. For HTTP sockets, only
 * the start line: the head is read up to `http_head_bytes` (<= 128) and cut after the first
 * '\n'; unless it begins with a request line (`TOKEN SP` then '/', '*' or a letter) on the
 * receive side or with `HTTP/` on the send side, no byte is sent at all (only the length).
 * Header fields and bodies never leave the kernel.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>
#include "profiler.h"
#include "filter.bpf.h"

#define EAGAIN 11
#define AF_INET 2
#define AF_INET6 10
#define SOCK_STREAM 1
#define IPPROTO_TCP 6

char LICENSE[] SEC("license") = "GPL";

/* Size of the `wire_chunks` ring buffer, bytes (about 23,000 chunks). */
#define WIRE_RINGBUF_BYTES (8 * 1024 * 1024)

/* Knobs (u64, like every knob the agent sets). */
const volatile __u64 db_port = 5432;        /* peer port of PostgreSQL connections */
const volatile __u64 head_bytes = WIRE_HEAD_MAX;      /* <= WIRE_HEAD_MAX */
const volatile __u64 tail_bytes = WIRE_TAIL_MAX;      /* <= WIRE_TAIL_MAX; 0 = no tails */
const volatile __u64 http_head_bytes = WIRE_HTTP_HEAD_MAX; /* <= WIRE_HTTP_HEAD_MAX */

/* The target's listening TCP ports (host byte order -> unused byte), filled by the agent. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_HTTP_PORTS);
	__type(key, __u16);
	__type(value, __u8);
} http_ports SEC(".maps");

/* The open send/receive call of each thread. */
struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct wire_pending);
} wire_pendings SEC(".maps");

/* Chunks for the agent. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, WIRE_RINGBUF_BYTES);
} wire_chunks SEC(".maps");

/* Classified sockets by `struct file *` (see classify()). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, WIRE_SOCKET_CLASSES);
	__type(key, __u64);
	__type(value, struct wire_socket_class);
} socket_classes SEC(".maps");

/* Counters per CPU, indexed by enum wire_stat_index. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, WIRE_STAT_COUNTERS);
	__type(key, __u32);
	__type(value, __u64);
} wire_stats SEC(".maps");

/* The first three syscall arguments, in x86_64 pt_regs order (dx, si, di are adjacent). */
struct syscall_args3 {
	__u64 dx; /* argument 2 */
	__u64 si; /* argument 1 */
	__u64 di; /* argument 0 */
};

/* Reads arguments 0-2 of the syscall from the pt_regs in ctx[0] (one kernel read when dx,
 * si, di are adjacent, as in every x86_64 kernel; three CO-RE reads otherwise). Returns 0
 * on success. */
static __always_inline int read_args(__u64 *ctx, struct syscall_args3 *a)
{
	struct pt_regs *regs = (struct pt_regs *)ctx[0];

	if (bpf_core_field_offset(struct pt_regs, si) == bpf_core_field_offset(struct pt_regs, dx) + 8 &&
	    bpf_core_field_offset(struct pt_regs, di) == bpf_core_field_offset(struct pt_regs, dx) + 16)
		return bpf_probe_read_kernel(a, sizeof(*a), &regs->dx);
	a->dx = BPF_CORE_READ(regs, dx);
	a->si = BPF_CORE_READ(regs, si);
	a->di = BPF_CORE_READ(regs, di);
	return 0;
}

struct wire_iovec {
	__u64 base;
	__u64 len;
};

static __always_inline void count_stat(__u32 index)
{
	__u64 *value = bpf_map_lookup_elem(&wire_stats, &index);
	if (value)
		*value += 1; /* per-CPU slot: no other writer */
}

/* `struct socket`'s file and sk pointers, adjacent in every kernel (include/linux/net.h). */
struct socket_file_sk {
	struct file *file;
	struct sock *sk;
};

/* The class of the target's socket `fd` (0 = not a classified TCP socket), and its id.
 *
 * The file: current->files->fdt->fd[fd] (5 kernel reads). Its private_data is a struct
 * socket only when that socket's ->file points back (1 read, then file and sk in 1 read).
 * A socket classified before is in `socket_classes` under the file pointer; the entry is
 * used when the socket still has the same sk with the same port pair (1 more read): a file
 * or sock freed and reused for another connection fails that check and is classified again,
 * as is a socket that was not connected yet when it was first seen. That is 8 kernel reads
 * and one hash lookup per call instead of 13 reads and the `http_ports` lookup. A full
 * classification: AF_INET/AF_INET6, SOCK_STREAM, IPPROTO_TCP only; PostgreSQL when the
 * peer port is `db_port`, HTTP when the local port is in `http_ports`. Sockets of neither
 * class are not kept (a listening port added later by the agent still applies to them).
 * A full classification is 11 reads (the port pair gives both ports). */
static __always_inline __u8 classify(__s64 fd, __u64 *socket)
{
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	struct fdtable *fdt = BPF_CORE_READ(task, files, fdt);
	struct file **fds;
	struct file *file = NULL;
	struct socket *sock;
	struct socket_file_sk fs;
	struct sock *sk;
	struct wire_socket_class *cached, fresh = {};
	__u64 key;
	__u32 portpair;
	__u16 family, protocol, type, lport, dport;

	if (!fdt || fd < 0)
		return 0;
	if ((__u64)fd >= BPF_CORE_READ(fdt, max_fds))
		return 0;
	fds = BPF_CORE_READ(fdt, fd);
	if (!fds || bpf_probe_read_kernel(&file, sizeof(file), &fds[fd]) || !file)
		return 0;
	/* A socket file's private_data is its struct socket, whose ->file points back. */
	sock = BPF_CORE_READ(file, private_data);
	if (!sock)
		return 0;
	if (bpf_core_field_offset(struct socket, sk) == bpf_core_field_offset(struct socket, file) + 8) {
		if (bpf_probe_read_kernel(&fs, sizeof(fs), &sock->file))
			return 0;
	} else {
		fs.file = BPF_CORE_READ(sock, file);
		fs.sk = BPF_CORE_READ(sock, sk);
	}
	if (fs.file != file || !fs.sk)
		return 0;
	sk = fs.sk;
	portpair = BPF_CORE_READ(sk, __sk_common.skc_portpair);
	key = (__u64)file;
	cached = bpf_map_lookup_elem(&socket_classes, &key);
	if (cached && cached->sk == (__u64)sk && cached->portpair == portpair) {
		count_stat(WIRE_STAT_CLASS_HITS);
		*socket = (__u64)sk;
		return cached->class;
	}
	count_stat(WIRE_STAT_CLASS_MISSES);
	family = BPF_CORE_READ(sk, __sk_common.skc_family);
	if (family != AF_INET && family != AF_INET6)
		return 0;
	protocol = BPF_CORE_READ(sk, sk_protocol);
	type = BPF_CORE_READ(sk, sk_type);
	if (protocol != IPPROTO_TCP || type != SOCK_STREAM)
		return 0;
	/* skc_portpair is skc_dport (network order) in its first two bytes, skc_num (host
	 * order) in the next two (include/net/sock.h); x86_64 is little-endian. */
	dport = bpf_ntohs((__u16)portpair);
	lport = portpair >> 16;
	*socket = (__u64)sk;
	if (dport == db_port)
		fresh.class = WIRE_CLASS_POSTGRES;
	else if (bpf_map_lookup_elem(&http_ports, &lport))
		fresh.class = WIRE_CLASS_HTTP;
	else
		return 0;
	fresh.sk = (__u64)sk;
	fresh.portpair = portpair;
	bpf_map_update_elem(&socket_classes, &key, &fresh, BPF_ANY);
	return fresh.class;
}

/* The target filter passed in the caller (on_sys_enter). */
static __always_inline int on_enter(__u32 nr, __u8 direction, __s64 fd, __u64 ptr, __u64 iovcnt)
{
	struct wire_pending *p;
	__u64 socket = 0;
	__u8 class;

	class = classify(fd, &socket);
	p = bpf_task_storage_get(&wire_pendings, bpf_get_current_task_btf(), 0,
				 class ? BPF_LOCAL_STORAGE_GET_F_CREATE : 0);
	if (!p) {
		if (class)
			count_stat(WIRE_STAT_NO_STORAGE);
		return 0;
	}
	if (!class) {
		p->nr = 0; /* forget any call left open (e.g. entered before attach) */
		return 0;
	}
	p->ptr = ptr;
	p->iovcnt = iovcnt;
	p->socket = socket;
	p->class = class;
	p->direction = direction;
	p->nr = nr;
	return 0;
}

/* Copies up to `limit` (<= WIRE_HEAD_MAX) bytes of a contiguous user buffer to head[];
 * returns the bytes copied (0 on a fault). */
static __always_inline __u32 copy_contiguous(struct wire_chunk *c, __u64 buf, __u64 limit)
{
	__u32 n = limit;

	if (n > WIRE_HEAD_MAX)
		n = WIRE_HEAD_MAX;
	barrier_var(n);
	if (n == 0 || n > WIRE_HEAD_MAX)
		return 0;
	if (bpf_probe_read_user(c->head, n, (void *)buf))
		return 0;
	return n;
}

/* The first iovec with data of the `iovcnt` iovecs at `iov`: its buffer and length (0 when
 * none could be read). Vectored heads are taken from that iovec alone: a variable offset into
 * head[] would cost the verifier more than it is worth; the decoders handle the rest of the
 * call as uncaptured bytes (total_len is exact). */
static __always_inline __u64 first_iovec(__u64 iov, __u64 iovcnt, __u64 *len)
{
	for (int i = 0; i < WIRE_MAX_IOVECS; i++) {
		struct wire_iovec v;

		if (i >= iovcnt)
			break;
		if (bpf_probe_read_user(&v, sizeof(v), (void *)(iov + i * sizeof(v))))
			break;
		if (v.len) {
			*len = v.len;
			return v.base;
		}
	}
	*len = 0;
	return 0;
}

static __always_inline bool is_upper(__u8 c)
{
	return c >= 'A' && c <= 'Z';
}

/* HTTP: the length of the head to send: through the first '\n', and 0 unless the head starts
 * with a start line (request line on receive, status line on send). Every byte of head[]
 * after that first '\n' is zeroed in place. head[] must hold `len` bytes read after
 * zeroing all of it (so bytes at `len` and beyond are 0). */
static __always_inline __u32 http_start_line(struct wire_chunk *c, __u32 len, __u8 direction)
{
	__u8 *h = c->head;
	__u32 end = len;

	if (len == 0)
		return 0;
	if (direction == WIRE_TX) {
		if (len < 5 || h[0] != 'H' || h[1] != 'T' || h[2] != 'T' || h[3] != 'P' || h[4] != '/')
			return 0;
	} else {
		/* method token (upper-case letters, RFC 9110 methods), SP, then the target's first
		 * character: '/' (origin form), '*' (asterisk form) or a letter (absolute or
		 * authority form). A header field line has ':' after its name, never SP. */
		__u32 i, sp = 0;

		for (i = 0; i < 17 && i < len && i < WIRE_HTTP_HEAD_MAX; i++) {
			__u8 c = h[i & (WIRE_HTTP_HEAD_MAX - 1)];
			if (c == ' ') {
				sp = i;
				break;
			}
			if (!is_upper(c))
				return 0;
		}
		if (sp == 0 || sp + 1 >= len || sp + 1 >= WIRE_HTTP_HEAD_MAX)
			return 0;
		{
			__u8 c = h[(sp + 1) & (WIRE_HTTP_HEAD_MAX - 1)];
			if (c != '/' && c != '*' && !is_upper(c) && !(c >= 'a' && c <= 'z'))
				return 0;
		}
	}
	/* Eight bytes at a time (head[] is 8-aligned: offset 40 in an 8-aligned record): a word
	 * holds a '\n' when (y - 0x01..) & ~y & 0x80.. is not 0 for y = word ^ 0x0a..; the
	 * lowest flagged byte is exact. Words after the one with the '\n' are zeroed, and the
	 * bytes after the '\n' in its own word are masked off. */
	{
		__u64 *w = (__u64 *)h;
		bool found = false;

		for (__u32 k = 0; k < WIRE_HTTP_HEAD_MAX / 8; k++) {
			__u64 x = w[k], y, t;

			if (found) {
				w[k] = 0;
				continue;
			}
			y = x ^ 0x0a0a0a0a0a0a0a0aULL;
			t = (y - 0x0101010101010101ULL) & ~y & 0x8080808080808080ULL;
			if (!t)
				continue;
			found = true;
			for (__u32 j = 0; j < 8; j++) {
				if (((x >> (8 * j)) & 0xff) == '\n') {
					end = k * 8 + j + 1;
					if (j < 7)
						w[k] = x & ((1ULL << (8 * (j + 1))) - 1);
					break;
				}
			}
		}
	}
	return end < len ? end : len;
}

/* The exit program of every wire syscall (one program in all eight slots of
 * `wire_exit_programs`: the verifier checks this, the largest program, once instead of
 * eight times, about 35-70 ms each here). The target filter passed in the caller
 * (on_sys_exit), which tail-calls the slot of the syscall number its own sys_enter kept for
 * this thread; the wire enter program of that same call set `p->nr` (or cleared it), so
 * `p->nr` says which wire syscall is ending. ctx[1] is the return value. */
SEC("raw_tracepoint/sys_exit")
int on_wire_exit(__u64 *ctx)
{
	struct wire_pending *p;
	struct wire_chunk *c;
	__u32 head_len = 0, tail_len = 0;
	__u64 wakeup;
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32;
	__u32 nr;
	__s64 ret;

	p = bpf_task_storage_get(&wire_pendings, bpf_get_current_task_btf(), 0, 0);
	if (!p || p->nr == 0)
		return 0;
	nr = p->nr;
	p->nr = 0;
	ret = (__s64)ctx[1];
	if (ret <= 0) {
		count_stat(ret == -EAGAIN ? WIRE_STAT_EAGAIN : WIRE_STAT_ERRORS);
		return 0;
	}
	/* The chunk is built in the ring buffer itself (no scratch copy). */
	c = bpf_ringbuf_reserve(&wire_chunks, sizeof(*c), 0);
	if (!c) {
		count_stat(WIRE_STAT_RINGBUF_FULL);
		return 0;
	}
	c->ts_ns = bpf_ktime_get_ns();
	c->pid = tgid;
	c->tid = id;
	c->socket = p->socket;
	c->total_len = ret;
	c->direction = p->direction;
	c->class = p->class;
	c->syscall = nr;
	c->_pad = 0;

	/* A reserved record holds the bytes of an earlier one: clear it all. */
	__builtin_memset(c->head, 0, sizeof(c->head));
	__builtin_memset(c->tail, 0, sizeof(c->tail));
	{
		__u64 src = p->ptr, avail = ret;
		__u64 limit = p->class == WIRE_CLASS_HTTP ? http_head_bytes : head_bytes;

		if (p->iovcnt) {
			__u64 first = 0;

			src = first_iovec(p->ptr, p->iovcnt, &first);
			if (first < avail)
				avail = first;
		}
		if (p->class == WIRE_CLASS_HTTP && limit > WIRE_HTTP_HEAD_MAX)
			limit = WIRE_HTTP_HEAD_MAX;
		if (limit > avail)
			limit = avail;
		head_len = src ? copy_contiguous(c, src, limit) : 0;
		if (head_len == 0)
			count_stat(WIRE_STAT_READ_FAILURES);
		if (p->class == WIRE_CLASS_HTTP) {
			__u32 kept = http_start_line(c, head_len, p->direction);

			/* Nothing past the start line leaves the kernel: http_start_line zeroed
			 * it in place; no start line at all and nothing is kept. */
			if (head_len && !kept) {
				count_stat(WIRE_STAT_HTTP_NO_START_LINE);
				__builtin_memset(c->head, 0, sizeof(c->head));
			}
			head_len = kept;
		} else if (!p->iovcnt && (__u64)ret > head_len && tail_bytes > 0) {
			__u64 t = (__u64)ret - head_len;

			if (t > tail_bytes)
				t = tail_bytes;
			if (t > WIRE_TAIL_MAX)
				t = WIRE_TAIL_MAX;
			tail_len = t;
			barrier_var(tail_len);
			if (tail_len == 0 || tail_len > WIRE_TAIL_MAX ||
			    bpf_probe_read_user(c->tail, tail_len, (void *)(p->ptr + ret - tail_len)))
				tail_len = 0;
		}
	}
	c->head_len = head_len;
	c->tail_len = tail_len;
	/* No wake-up per chunk (the agent's drain thread polls every 50 ms); wake it only when
	 * the buffer is a quarter full, so that a burst cannot fill it between two polls. */
	wakeup = bpf_ringbuf_query(&wire_chunks, BPF_RB_AVAIL_DATA) > WIRE_RINGBUF_BYTES / 4
		 ? BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP;
	bpf_ringbuf_submit(c, wakeup);
	count_stat(WIRE_STAT_CHUNKS);
	return 0;
}

/* Enter programs, one per syscall (raw_tracepoint type, reached only by the tail calls of
 * on_sys_enter; the section name gives aya the program type, nothing attaches them to
 * sys_enter itself). Small: the verifier takes well under a millisecond for each. */
#define WIRE_ENTER(name, nr, direction, vectored)					\
	SEC("raw_tracepoint/sys_enter")						\
	int on_enter_##name(__u64 *ctx)						\
	{									\
		struct syscall_args3 a;						\
										\
		if (read_args(ctx, &a))						\
			return 0;						\
		return on_enter(nr, direction, a.di, a.si, vectored ? a.dx : 0);	\
	}

/* sendto(fd, buff, len, flags, addr, addr_len) */
WIRE_ENTER(sendto, WIRE_SYS_SENDTO, WIRE_TX, 0)
/* recvfrom(fd, ubuf, size, flags, addr, addr_len) */
WIRE_ENTER(recvfrom, WIRE_SYS_RECVFROM, WIRE_RX, 0)
/* write(fd, buf, count) */
WIRE_ENTER(write, WIRE_SYS_WRITE, WIRE_TX, 0)
/* read(fd, buf, count) */
WIRE_ENTER(read, WIRE_SYS_READ, WIRE_RX, 0)
/* writev(fd, vec, vlen) */
WIRE_ENTER(writev, WIRE_SYS_WRITEV, WIRE_TX, 1)
/* readv(fd, vec, vlen) */
WIRE_ENTER(readv, WIRE_SYS_READV, WIRE_RX, 1)

/* sendmsg(fd, msg, flags) / recvmsg(fd, msg, flags): the iovecs of the user msghdr. */
static __always_inline int on_enter_msg(__u32 nr, __u8 direction, __u64 *ctx)
{
	struct user_msghdr msg = {};
	struct syscall_args3 a;

	if (read_args(ctx, &a))
		return 0;
	if (bpf_probe_read_user(&msg, sizeof(msg), (void *)a.si))
		return 0;
	if (msg.msg_iovlen == 0)
		return 0;
	return on_enter(nr, direction, a.di, (__u64)msg.msg_iov, msg.msg_iovlen);
}

SEC("raw_tracepoint/sys_enter")
int on_enter_sendmsg(__u64 *ctx)
{
	return on_enter_msg(WIRE_SYS_SENDMSG, WIRE_TX, ctx);
}


SEC("raw_tracepoint/sys_enter")
int on_enter_recvmsg(__u64 *ctx)
{
	return on_enter_msg(WIRE_SYS_RECVMSG, WIRE_RX, ctx);
}

