// SPDX-License-Identifier: GPL-2.0 OR Apache-2.0
/*
 * Wire capture: the head (and, for PostgreSQL, the tail) of every send and receive of the
 * target on its classified TCP sockets, one record per syscall that moved bytes, through the
 * `wire_chunks` ring buffer: the filled part of a `struct wire_chunk`, a 40-byte header and
 * the head bytes kept (for HTTP, the start line only), or all 360 bytes when a PostgreSQL call
 * has a tail. The agent decodes them (agent/src/wire/).
 *
 * Hooks: the BTF tracepoints `sock_send_length` and `sock_recv_length` (include/trace/events/
 * sock.h), which the kernel fires in sock_sendmsg_nosec / sock_recvmsg_nosec (net/socket.c)
 * after every send or receive on a socket, with the `struct sock *` and the return value.
 * They run only for sockets (not for the eventfd, pipe and file calls of the same syscalls)
 * and hand over the socket itself, so nothing has to find it from an fd: classification is
 * a few direct (BTF) loads from `sk`, no `bpf_probe_read_kernel`, no cache, no task storage,
 * no program at syscall entry or exit. The user buffer comes from the syscall's own
 * arguments: the program runs inside the syscall, whose user registers (`bpf_task_pt_regs`:
 * orig_ax = the x86_64 syscall number, di, si, dx = arguments 0-2; arch/x86/include/asm/
 * syscall.h) are still those of its entry. Only the eight wire syscalls (sendto, recvfrom,
 * write, read, writev, readv, sendmsg, recvmsg) give a chunk; socket calls of the target
 * through other syscalls (sendmmsg, sendfile, ...) or from kernel threads and io_uring
 * workers are only counted (`WIRE_STAT_OTHER_CALLS`).
 *
 * Classification: only AF_INET/AF_INET6 TCP stream sockets; PostgreSQL when the peer port is
 * the `db_port` knob, HTTP when the local port is in `http_ports` (filled by the agent with
 * the target's listening ports), and PostgreSQL on any other port when the first bytes the
 * target sends on the socket are a PostgreSQL frontend message (`looks_like_pg`: a
 * StartupMessage, an SSLRequest or GSSENCRequest, or a typed message whose length field is
 * consistent with the call; the recognised sockets are kept in `pg_sockets`, the sockets that
 * failed the test `PG_SNIFF_TRIES` times are not tested again). The return value is what was
 * really moved; > 0 gives a chunk, -EAGAIN and other errors are only counted (`wire_stats`).
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
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>
#include "profiler.h"
#include "filter.bpf.h"

#define EAGAIN 11
#define AF_INET 2
#define AF_INET6 10
#define SOCK_STREAM 1
#define IPPROTO_TCP 6
#define MSG_PEEK 2 /* include/linux/socket.h */
/* task_struct.flags (include/linux/sched.h): no user registers of their own. */
#define PF_IO_WORKER 0x00000010
#define PF_KTHREAD 0x00200000

/* x86_64 syscall numbers (arch/x86/entry/syscalls/syscall_64.tbl). */
#define NR_READ 0
#define NR_WRITE 1
#define NR_READV 19
#define NR_WRITEV 20
#define NR_SENDTO 44
#define NR_RECVFROM 45
#define NR_SENDMSG 46
#define NR_RECVMSG 47

char LICENSE[] SEC("license") = "GPL";

/* Size of the `wire_chunks` ring buffer, bytes. A record is its filled part plus the ring
 * buffer's own 8-byte header: about 70 bytes for an HTTP start line, 100-200 for a typical
 * PostgreSQL call (a Bind/Execute/Sync or its results), 368 for a call with a tail. A
 * database-bound route with 40 round trips per request (target-app's /queries at ~1,100
 * req/s) sends ~90,000 PostgreSQL chunks/s: 8 MiB are more than half a second of headroom
 * over the drain thread's 50 ms poll, for when the agent is starved of CPU on a saturated
 * host. Every MiB here is two of the agent's RSS (the kernel maps a ring buffer's data pages
 * twice). */
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

/* Sockets whose class was decided by their first bytes (`looks_like_pg`): key the struct sock
 * address, value PG_SNIFF_IS_PG, or the number of sends that did not look like PostgreSQL
 * (testing stops at PG_SNIFF_TRIES). LRU: closed sockets age out; a new socket at a recycled
 * address inherits its verdict until evicted, which the decoder survives (it resynchronises
 * and counts what it could not decode). */
#define PG_SNIFF_IS_PG 0xff
/* classify(): a TCP socket of neither class whose first sends are still being tested. Never
 * in a record. */
#define WIRE_CLASS_UNKNOWN 0xfe
#define PG_SNIFF_TRIES 4
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 8192);
	__type(key, __u64);
	__type(value, __u8);
} pg_sockets SEC(".maps");

/* Chunks for the agent. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, WIRE_RINGBUF_BYTES);
} wire_chunks SEC(".maps");

/* Where a record is built before bpf_ringbuf_output sends its filled part: one per CPU (the
 * tracepoints run with preemption off, and a BPF program does not nest on its CPU). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct wire_chunk);
} wire_scratch SEC(".maps");

/* Counters per CPU, indexed by enum wire_stat_index. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, WIRE_STAT_COUNTERS);
	__type(key, __u32);
	__type(value, __u64);
} wire_stats SEC(".maps");

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

/* The class of socket `sk` (0 = neither PostgreSQL nor HTTP): direct loads through BTF. */
static __always_inline __u8 classify(struct sock *sk)
{
	__u32 portpair = sk->__sk_common.skc_portpair;
	__u16 family = sk->__sk_common.skc_family;
	__u16 lport, dport;

	if (family != AF_INET && family != AF_INET6)
		return 0;
	if (sk->sk_protocol != IPPROTO_TCP || sk->sk_type != SOCK_STREAM)
		return 0;
	/* skc_portpair is skc_dport (network order) in its first two bytes, skc_num (host
	 * order) in the next two (include/net/sock.h); x86_64 is little-endian. */
	dport = bpf_ntohs((__u16)portpair);
	lport = portpair >> 16;
	if (dport == db_port)
		return WIRE_CLASS_POSTGRES;
	if (bpf_map_lookup_elem(&http_ports, &lport))
		return WIRE_CLASS_HTTP;
	/* Any other socket: recognised as PostgreSQL by its first bytes (pg_sockets). */
	{
		__u64 key = (__u64)sk;
		__u8 *verdict = bpf_map_lookup_elem(&pg_sockets, &key);

		if (verdict && *verdict == PG_SNIFF_IS_PG)
			return WIRE_CLASS_POSTGRES;
		if (!verdict || *verdict < PG_SNIFF_TRIES)
			return WIRE_CLASS_UNKNOWN;
	}
	return 0;
}

static __always_inline __u32 be32(const __u8 *b)
{
	return ((__u32)b[0] << 24) | ((__u32)b[1] << 16) | ((__u32)b[2] << 8) | b[3];
}

/* A frontend message type that can begin what a client sends (PostgreSQL documentation,
 * "Message Formats"): Query, Parse, Bind, Execute, Sync, Describe, Close, Flush, Terminate,
 * FunctionCall. */
static __always_inline bool pg_frontend_type(__u8 c)
{
	return c == 'Q' || c == 'P' || c == 'B' || c == 'E' || c == 'S' || c == 'D' || c == 'C' ||
	       c == 'H' || c == 'X' || c == 'F';
}

/* Whether the `len` bytes at user address `buf` (the start of what one send moved) begin
 * with a PostgreSQL frontend message: a StartupMessage (length, then protocol 3.0), an
 * SSLRequest or GSSENCRequest (length 8, then their codes), or a typed message whose length
 * (4 .. 1 GiB, the server's limit) fits in the call and, when the call holds more, is followed
 * by another frontend type. Text protocols fail: "POST", "PUT ", "DELETE", "HEAD" give lengths
 * above 1 GiB. */
static __always_inline bool looks_like_pg(__u64 buf, __u64 len)
{
	__u8 b[8] = {};
	__u32 n, code;

	if (!buf || len < 5)
		return false;
	if (bpf_probe_read_user(b, len >= 8 ? 8 : 5, (void *)buf))
		return false;
	if (len >= 8) {
		n = be32(b);
		code = be32(b + 4);
		if (n == len && n >= 8 && n <= 10000 && code == 196608)  /* StartupMessage 3.0 */
			return true;
		if (n == 8 && len == 8 && (code == 80877103 || code == 80877104))  /* SSL, GSSENC */
			return true;
	}
	if (!pg_frontend_type(b[0]))
		return false;
	n = be32(b + 1);
	if (n < 4 || n >= 0x40000000 || (__u64)n + 1 > len)
		return false;
	if ((__u64)n + 1 < len) {
		__u8 next = 0;

		if (bpf_probe_read_user(&next, 1, (void *)(buf + n + 1)) || !pg_frontend_type(next))
			return false;
	}
	return true;
}

/* Copies up to `limit` bytes of a contiguous user buffer to `head`, which has room for
 * `head_max` (a constant once inlined); returns the bytes copied (0 on a fault). */
static __always_inline __u32 copy_contiguous(__u8 *head, __u32 head_max, __u64 buf, __u64 limit)
{
	__u32 n = limit;

	if (n > head_max)
		n = head_max;
	barrier_var(n);
	if (n == 0 || n > head_max)
		return 0;
	if (bpf_probe_read_user(head, n, (void *)buf))
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
 * with a start line (request line on receive, status line on send). Every byte of the
 * WIRE_HTTP_HEAD_MAX at `h` after that first '\n' is zeroed in place. `h` must hold `len`
 * bytes read after zeroing all of it (so bytes at `len` and beyond are 0). */
static __always_inline __u32 http_start_line(__u8 *h, __u32 len, __u8 direction)
{
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


/* Fills the record of one call that moved `ret` bytes on `sk`, of class `class`, in this
 * CPU's `wire_scratch`, and sends its filled part to `wire_chunks`: the 40-byte header and the
 * head bytes kept, or, when the call has a tail, the whole `struct wire_chunk` (the tail sits
 * at its fixed offset after a head of WIRE_HEAD_MAX bytes). `class` is a constant at each call
 * site, so each inlined copy has only its own class's code. `ptr`, `iovcnt`: the call's buffer
 * (iovcnt 0) or iovec array. */
static __always_inline void emit_chunk(const __u8 class, struct sock *sk, int ret, __u8 direction,
				       __u8 syscall, __u64 ptr, __u64 iovcnt, __u64 id)
{
	const bool http = class == WIRE_CLASS_HTTP;
	const __u32 head_max = http ? WIRE_HTTP_HEAD_MAX : WIRE_HEAD_MAX;
	const __u32 zero = 0;
	struct wire_chunk *c;
	__u32 head_len = 0, tail_len = 0, size;
	__u64 src = ptr, avail = ret, limit = http ? http_head_bytes : head_bytes;
	bool want_tail;

	c = bpf_map_lookup_elem(&wire_scratch, &zero);
	if (!c)
		return;
	c->ts_ns = bpf_ktime_get_ns();
	c->pid = id >> 32;
	c->tid = id;
	c->socket = (__u64)sk;
	c->total_len = ret;
	{
		__u32 portpair = sk->__sk_common.skc_portpair;

		c->local_port = portpair >> 16;
		c->peer_port = bpf_ntohs((__u16)portpair);
	}
	c->direction = direction;
	c->class = class;
	c->syscall = syscall;
	c->_pad = 0;

	if (iovcnt) {
		__u64 first = 0;

		src = first_iovec(ptr, iovcnt, &first);
		if (first < avail)
			avail = first;
	}
	if (limit > head_max)
		limit = head_max;
	if (limit > avail)
		limit = avail;
	/* Only the bytes a record is sent with leave the kernel, and the scratch holds an
	 * earlier call's bytes: a record with a tail is sent whole, so its head is cleared
	 * first (a head shorter than WIRE_HEAD_MAX would otherwise carry stale bytes). */
	want_tail = !http && ptr && !iovcnt && (__u64)ret > limit && tail_bytes > 0;
	if (want_tail)
		__builtin_memset(c->head, 0, WIRE_HEAD_MAX);
	head_len = src ? copy_contiguous(c->head, head_max, src, limit) : 0;
	if (head_len == 0)
		count_stat(WIRE_STAT_READ_FAILURES);
	if (http) {
		__u32 kept = http_start_line(c->head, head_len, direction);

		/* Nothing past the start line leaves the kernel (the record ends after it); no
		 * start line at all and no head byte is sent. */
		if (head_len && !kept)
			count_stat(WIRE_STAT_HTTP_NO_START_LINE);
		head_len = kept;
	} else if (want_tail && (__u64)ret > head_len) {
		__u64 t = (__u64)ret - head_len;

		if (t > tail_bytes)
			t = tail_bytes;
		if (t > WIRE_TAIL_MAX)
			t = WIRE_TAIL_MAX;
		tail_len = t;
		barrier_var(tail_len);
		if (tail_len == 0 || tail_len > WIRE_TAIL_MAX ||
		    bpf_probe_read_user(c->tail, tail_len, (void *)(ptr + ret - tail_len)))
			tail_len = 0;
	}
	c->head_len = head_len;
	c->tail_len = tail_len;
	size = tail_len ? sizeof(struct wire_chunk) : WIRE_CHUNK_HEADER_BYTES + head_len;
	barrier_var(size);
	if (size > sizeof(struct wire_chunk))
		size = sizeof(struct wire_chunk);
	/* No wake-up per chunk (the agent's drain thread polls every 50 ms); wake it only when
	 * the buffer is a quarter full, so that a burst cannot fill it between two polls. */
	if (bpf_ringbuf_output(&wire_chunks, c, size,
			       bpf_ringbuf_query(&wire_chunks, BPF_RB_AVAIL_DATA) > WIRE_RINGBUF_BYTES / 4
			       ? BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP)) {
		count_stat(WIRE_STAT_RINGBUF_FULL);
		return;
	}
	count_stat(WIRE_STAT_CHUNKS);
}

/* One send (`direction` WIRE_TX) or receive (WIRE_RX) of `ret` bytes on `sk`, inside the
 * syscall that made it. */
static __always_inline int on_sock_call(struct sock *sk, int ret, __u8 direction)
{
	struct task_struct *task;
	struct pt_regs *regs;
	__u64 ptr, iovcnt = 0, nr;
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32;
	__u8 class, syscall;

	if (!current_is_target(tgid) || !sk)
		return 0;
	class = classify(sk);
	if (!class)
		return 0;
	task = bpf_get_current_task_btf();
	if (task->flags & (PF_KTHREAD | PF_IO_WORKER)) {
		if (class != WIRE_CLASS_UNKNOWN)
			count_stat(WIRE_STAT_OTHER_CALLS);
		return 0;
	}
	regs = (struct pt_regs *)bpf_task_pt_regs(task);
	nr = regs->orig_ax;
	ptr = regs->si;
	switch (nr) {
	case NR_SENDTO: syscall = WIRE_SYS_SENDTO; break;
	case NR_RECVFROM: syscall = WIRE_SYS_RECVFROM; break;
	case NR_WRITE: syscall = WIRE_SYS_WRITE; break;
	case NR_READ: syscall = WIRE_SYS_READ; break;
	case NR_WRITEV: syscall = WIRE_SYS_WRITEV; iovcnt = regs->dx; break;
	case NR_READV: syscall = WIRE_SYS_READV; iovcnt = regs->dx; break;
	case NR_SENDMSG: syscall = WIRE_SYS_SENDMSG; break;
	case NR_RECVMSG: syscall = WIRE_SYS_RECVMSG; break;
	default:
		if (class != WIRE_CLASS_UNKNOWN)
			count_stat(WIRE_STAT_OTHER_CALLS);
		return 0;
	}
	if (ret <= 0) {
		if (class != WIRE_CLASS_UNKNOWN)
			count_stat(ret == -EAGAIN ? WIRE_STAT_EAGAIN : WIRE_STAT_ERRORS);
		return 0;
	}
	if (syscall == WIRE_SYS_SENDMSG || syscall == WIRE_SYS_RECVMSG) {
		/* sendmsg(fd, msg, flags) / recvmsg(fd, msg, flags): the iovecs of the user msghdr. */
		struct user_msghdr msg = {};

		if (bpf_probe_read_user(&msg, sizeof(msg), (void *)ptr) || msg.msg_iovlen == 0) {
			/* Counted as a read failure below (no head). */
			ptr = 0;
			iovcnt = 0;
		} else {
			ptr = (__u64)msg.msg_iov;
			iovcnt = msg.msg_iovlen;
		}
	}
	if (class == WIRE_CLASS_UNKNOWN) {
		/* Only what the target sends tells: a PostgreSQL client speaks first, and a
		 * connection seen mid-stream starts a request with a frontend message. */
		__u64 key = (__u64)sk, src = ptr, avail = ret;
		__u8 verdict;

		if (direction != WIRE_TX)
			return 0;
		if (iovcnt) {
			__u64 first = 0;

			src = first_iovec(ptr, iovcnt, &first);
			if (first < avail)
				avail = first;
		}
		if (looks_like_pg(src, avail)) {
			verdict = PG_SNIFF_IS_PG;
			count_stat(WIRE_STAT_PG_RECOGNISED);
			bpf_map_update_elem(&pg_sockets, &key, &verdict, BPF_ANY);
		} else {
			__u8 *tries = bpf_map_lookup_elem(&pg_sockets, &key);

			verdict = tries ? *tries + 1 : 1;
			bpf_map_update_elem(&pg_sockets, &key, &verdict, BPF_ANY);
			return 0;
		}
		class = WIRE_CLASS_POSTGRES;
	}
	if (class == WIRE_CLASS_HTTP)
		emit_chunk(WIRE_CLASS_HTTP, sk, ret, direction, syscall, ptr, iovcnt, id);
	else
		emit_chunk(WIRE_CLASS_POSTGRES, sk, ret, direction, syscall, ptr, iovcnt, id);
	return 0;
}

SEC("tp_btf/sock_send_length")
int BPF_PROG(on_sock_send, struct sock *sk, int ret, int flags)
{
	return on_sock_call(sk, ret, WIRE_TX);
}

SEC("tp_btf/sock_recv_length")
int BPF_PROG(on_sock_recv, struct sock *sk, int ret, int flags)
{
	/* A MSG_PEEK receive leaves the bytes in the socket for the next one: a chunk of it
	 * would give the decoder the same bytes twice. */
	if (flags & MSG_PEEK) {
		if (current_is_target(bpf_get_current_pid_tgid() >> 32) && sk) {
			__u8 class = classify(sk);

			if (class && class != WIRE_CLASS_UNKNOWN)
				count_stat(WIRE_STAT_OTHER_CALLS);
		}
		return 0;
	}
	return on_sock_call(sk, ret, WIRE_RX);
}
