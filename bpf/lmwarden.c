//go:build ignore

// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * LM Warden's kernel data path (docs/kernel.md explains the design):
 *   lmw_dispatch  sk_lookup: frontend {addr, port} -> the shim's listening
 *                 socket; no socket in the slot -> SK_PASS (fail-open).
 *   lmw_verdict   sk_skb stream verdict: carries a request body and a whole
 *                 response socket to socket, finds where each response ends.
 */
#include "lmwarden.h"

char _license[] SEC("license") = "Dual BSD/GPL";

/* Kernel types read through BTF (CO-RE against the running kernel): the
 * TCP sequence number of a segment and the socket's read position, so the
 * verdict can tell the bytes of a segment userspace already read. */
struct sk_buff {
	char cb[48];
} __attribute__((preserve_access_index));

struct tcp_sock {
	__u32 copied_seq;
} __attribute__((preserve_access_index));

extern void *bpf_cast_to_kern_ctx(void *obj) __ksym;

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, LMW_MAX_FRONTENDS);
	__type(key, struct frontend_key);
	__type(value, struct frontend_value);
} lmw_frontends SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_SOCKMAP);
	__uint(max_entries, LMW_MAX_FRONTENDS);
	__type(key, __u32);
	__type(value, __u64);
} lmw_listeners SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, LMW_MAX_OWN_CONNS);
	__type(key, struct conn_key);
	__type(value, struct own_conn);
} lmw_own_conns SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct dispatch_stats);
} lmw_dispatch_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, LMW_MAX_SESSIONS);
	__type(key, __u64);
	__type(value, struct session);
} lmw_sessions SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_SOCKHASH);
	__uint(max_entries, LMW_MAX_SOCKETS);
	__type(key, __u64);
	__type(value, __u64);
} lmw_socks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, LMW_MAX_SOCKETS);
	__type(key, __u64);
	__type(value, struct sock_ctl);
} lmw_sock_ctls SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, LMW_MAX_SOCKETS);
	__type(key, __u64);
	__type(value, struct sock_state);
} lmw_sock_states SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, LMW_MAX_REPLICAS);
	__type(key, __u32);
	__type(value, struct replica_stats);
} lmw_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 18);
	__type(value, struct response_end);
} lmw_response_ends SEC(".maps");

SEC("sk_lookup")
int lmw_dispatch(struct bpf_sk_lookup *ctx)
{
	struct frontend_key key = {};
	struct conn_key own = {};
	struct frontend_value *fe;
	struct dispatch_stats *ds;
	struct bpf_sock *sk;
	__u32 zero = 0;

	if (ctx->protocol != IPPROTO_TCP)
		return SK_PASS;
	ds = bpf_map_lookup_elem(&lmw_dispatch_stats, &zero);
	if (ds)
		ds->lookups++;

	/* The warden's own connections (to a replica, or polling one) go
	 * where the kernel would send them: never back into the shim. */
	own.family = ctx->family;
	own.sport = bpf_ntohs(ctx->remote_port);
	own.dport = ctx->local_port;
	if (ctx->family == AF_INET) {
		own.src[0] = ctx->remote_ip4;
		own.dst[0] = ctx->local_ip4;
	} else {
		__u32 i;

		for (i = 0; i < 4; i++) {
			own.src[i] = ctx->remote_ip6[i];
			own.dst[i] = ctx->local_ip6[i];
		}
	}
	if (bpf_map_lookup_elem(&lmw_own_conns, &own)) {
		if (ds)
			ds->own++;
		return SK_PASS;
	}

	key.family = ctx->family;
	key.port = ctx->local_port;
	if (ctx->family == AF_INET) {
		key.addr[0] = ctx->local_ip4;
	} else {
		key.addr[0] = ctx->local_ip6[0];
		key.addr[1] = ctx->local_ip6[1];
		key.addr[2] = ctx->local_ip6[2];
		key.addr[3] = ctx->local_ip6[3];
	}
	fe = bpf_map_lookup_elem(&lmw_frontends, &key);
	if (!fe) {
		key.addr[0] = key.addr[1] = key.addr[2] = key.addr[3] = 0;
		fe = bpf_map_lookup_elem(&lmw_frontends, &key);
	}
	if (!fe) {
		if (ds)
			ds->misses++;
		return SK_PASS;
	}
	sk = bpf_map_lookup_elem(&lmw_listeners, &fe->slot);
	if (!sk) {
		/* the shim is gone: the port's own listener answers */
		if (ds)
			ds->no_listener++;
		return SK_PASS;
	}
	if (bpf_sk_assign(ctx, sk, 0)) {
		if (ds)
			ds->failed_assigns++; /* fail open as well */
	} else if (ds) {
		ds->assigned++;
	}
	bpf_sk_release(sk);
	return SK_PASS;
}

/* Response head parser flags (sock_state.flags). */
#define PF_HEADERS 1   /* past the status line */
#define PF_CL_NAME 2   /* this line still matches "content-length:" */
#define PF_TE_NAME 4   /* this line still matches "transfer-encoding:" */
#define PF_CL_VALUE 8  /* inside a Content-Length value */
#define PF_TE_VALUE 16 /* inside a Transfer-Encoding value */
#define PF_HAVE_CL 32
#define PF_CHUNKED 64
#define SF_BROKEN 128 /* request socket: a trim failed, the stream is cut */

const volatile char lmw_cl_name[16] = "content-length:";    /* 15 */
const volatile char lmw_te_name[19] = "transfer-encoding:"; /* 18 */
const volatile char lmw_chunked[8] = "chunked";            /* 7 */

struct parse_ctx {
	struct __sk_buff *skb;
	struct sock_state *st;
	struct sock_ctl *ctl;
	__u32 off;
	__u32 len;
	__u32 ended;
};

static __always_inline void start_head(struct sock_state *st)
{
	st->phase = PH_HEAD;
	st->flags = 0;
	st->line_pos = 0;
	st->status = 0;
	st->acc = 0;
	st->match = 0;
	st->remaining = 0;
}

static __always_inline void finish(struct parse_ctx *c)
{
	c->st->phase = PH_DONE;
	c->ended = 1;
}

/* head_end decides the body framing once the empty line is found (RFC 9112
 * section 6.3, the cases a streaming LLM server uses). */
static __always_inline void head_end(struct parse_ctx *c)
{
	struct sock_state *st = c->st;
	__u32 s = st->status;

	if (s >= 100 && s < 200 && s != 101) {
		start_head(st); /* 100 Continue & co: the real head follows */
		return;
	}
	if ((c->ctl->flags & CTL_NO_BODY) || s == 204 || s == 304) {
		finish(c);
		return;
	}
	if (st->flags & PF_CHUNKED) {
		st->phase = PH_CHUNK_SIZE;
		st->acc = 0;
		return;
	}
	if (st->flags & PF_HAVE_CL) {
		if (st->acc == 0) {
			finish(c);
			return;
		}
		st->remaining = st->acc;
		st->phase = PH_CL_BODY;
		return;
	}
	st->phase = PH_UNTIL_CLOSE;
}

static __always_inline void head_byte(struct parse_ctx *c, __u8 ch)
{
	struct sock_state *st = c->st;
	__u32 pos = st->line_pos;
	__u8 lc;

	if (ch == '\r')
		return;
	if (ch == '\n') {
		if (pos == 0 && (st->flags & PF_HEADERS)) {
			head_end(c);
			return;
		}
		st->flags &= ~(PF_CL_NAME | PF_TE_NAME | PF_CL_VALUE | PF_TE_VALUE);
		st->flags |= PF_HEADERS | PF_CL_NAME | PF_TE_NAME;
		st->line_pos = 0;
		return;
	}
	st->line_pos = pos + 1;
	if (!(st->flags & PF_HEADERS)) {
		/* "HTTP/1.1 200 OK": the code is at 9..11 */
		if (pos >= 9 && pos <= 11 && ch >= '0' && ch <= '9')
			st->status = st->status * 10 + (ch - '0');
		return;
	}
	lc = (ch >= 'A' && ch <= 'Z') ? ch + 32 : ch;
	if (st->flags & PF_CL_VALUE) {
		if (ch >= '0' && ch <= '9' && st->acc < (1ULL << 50)) {
			st->acc = st->acc * 10 + (ch - '0');
			st->flags |= PF_HAVE_CL;
		}
		return;
	}
	if (st->flags & PF_TE_VALUE) {
		__u32 m = st->match;

		if (m < 7 && lc == lmw_chunked[m])
			m++;
		else
			m = (lc == 'c') ? 1 : 0;
		st->match = m;
		if (m == 7)
			st->flags |= PF_CHUNKED;
		return;
	}
	if (st->flags & PF_CL_NAME) {
		if (pos < 15 && lc == lmw_cl_name[pos]) {
			if (pos == 14) {
				st->flags |= PF_CL_VALUE;
				st->acc = 0;
			}
		} else {
			st->flags &= ~PF_CL_NAME;
		}
	}
	if (st->flags & PF_TE_NAME) {
		if (pos < 18 && lc == lmw_te_name[pos]) {
			if (pos == 17) {
				st->flags |= PF_TE_VALUE;
				st->match = 0;
			}
		} else {
			st->flags &= ~PF_TE_NAME;
		}
	}
}

static __always_inline int hexval(__u8 ch)
{
	if (ch >= '0' && ch <= '9')
		return ch - '0';
	if (ch >= 'a' && ch <= 'f')
		return ch - 'a' + 10;
	if (ch >= 'A' && ch <= 'F')
		return ch - 'A' + 10;
	return -1;
}

static __always_inline void size_line_end(struct parse_ctx *c)
{
	struct sock_state *st = c->st;

	if (st->acc == 0) {
		st->phase = PH_TRAILER;
		st->line_pos = 0;
		return;
	}
	st->remaining = st->acc + 2; /* data and its CRLF */
	st->phase = PH_CHUNK_DATA;
}

/* parse_step advances the response parser by one byte, or by a whole run
 * of body bytes it does not need to look at. Called from bpf_loop. */
static long parse_step(__u64 i, void *data)
{
	struct parse_ctx *c = data;
	struct sock_state *st = c->st;
	__u32 phase = st->phase;
	__u8 ch;
	int h;

	if (c->off >= c->len || c->ended)
		return 1;
	if (phase == PH_CL_BODY || phase == PH_CHUNK_DATA) {
		__u64 rest = c->len - c->off;
		__u64 n = st->remaining < rest ? st->remaining : rest;

		c->off += n;
		st->remaining -= n;
		if (st->remaining == 0) {
			if (phase == PH_CL_BODY) {
				finish(c);
				return 1;
			}
			st->phase = PH_CHUNK_SIZE;
			st->acc = 0;
		}
		return 0;
	}
	if (phase == PH_UNTIL_CLOSE || phase == PH_DONE)
		return 1;
	if (bpf_skb_load_bytes(c->skb, c->off, &ch, 1))
		return 1;
	c->off++;
	switch (phase) {
	case PH_HEAD:
		head_byte(c, ch);
		break;
	case PH_CHUNK_SIZE:
		h = hexval(ch);
		if (h >= 0) {
			if (st->acc < (1ULL << 40))
				st->acc = st->acc * 16 + h;
		} else if (ch == '\n') {
			size_line_end(c);
		} else if (ch != '\r') {
			st->phase = PH_CHUNK_EXT;
		}
		break;
	case PH_CHUNK_EXT:
		if (ch == '\n')
			size_line_end(c);
		break;
	case PH_TRAILER:
		if (ch == '\n') {
			if (st->line_pos == 0) {
				finish(c);
				return 1;
			}
			st->line_pos = 0;
		} else if (ch != '\r') {
			st->line_pos++;
		}
		break;
	}
	return 0;
}

static __always_inline int carry(struct __sk_buff *skb, struct sock_ctl *ctl,
				 struct sock_state *st, struct replica_stats *rs, __u32 len)
{
	st->redirected += len;
	st->carried += len;
	if (rs)
		rs->bytes_kernel += len;
	return bpf_sk_redirect_hash(skb, &lmw_socks, &ctl->peer, 0);
}

static __always_inline int pass(struct sock_state *st, struct replica_stats *rs, __u32 len)
{
	st->passed += len;
	if (rs)
		rs->bytes_user += len;
	return SK_PASS;
}

SEC("sk_skb/stream_verdict")
int lmw_verdict(struct __sk_buff *skb)
{
	__u64 cookie = bpf_get_socket_cookie(skb);
	struct sock_ctl *ctl = bpf_map_lookup_elem(&lmw_sock_ctls, &cookie);
	struct sock_state *st = bpf_map_lookup_elem(&lmw_sock_states, &cookie);
	struct replica_stats *rs;
	__u32 len = skb->len;
	__u32 replica;
	__u64 o;

	if (!ctl || !st)
		return SK_PASS; /* not armed by the shim: the shim reads it */
	replica = ctl->replica;
	rs = bpf_map_lookup_elem(&lmw_stats, &replica);

	/* A segment userspace read part of before the socket joined is
	 * verdicted again from its start (tcp_read_skb ignores the read
	 * offset). Drop that part: the shim has it. Trimming exactly the read
	 * part also keeps the socket's read position (copied_seq) right, so
	 * the socket reads normally again once it leaves the SOCKHASH. */
	{
		struct sk_buff *k = bpf_cast_to_kern_ctx(skb);
		struct bpf_sock *bsk = skb->sk;
		struct tcp_sock *tp;
		__u32 seq = 0;
		__s32 done;

		if (bsk && len > 0) { /* never a bare FIN */
			tp = bpf_skc_to_tcp_sock(bsk);
			bpf_probe_read_kernel(&seq, sizeof(seq), &k->cb[0]);
			if (tp) {
				done = (__s32)(tp->copied_seq - seq);
				if (done > 0) {
					if ((__u32)done >= len ||
					    bpf_skb_adjust_room(skb, -done, 0, 0)) {
						st->flags |= SF_BROKEN;
						return SK_DROP;
					}
					len -= done;
				}
			}
		}
	}
	o = st->seen;
	st->seen = o + len;

	if (ctl->gen != st->gen) {
		/* first bytes since the shim armed this socket again */
		st->gen = ctl->gen;
		st->redirected = 0;
		if (ctl->mode == SOCK_REQUEST) {
			/* Armed only if no byte at or past arm_at was passed to
			 * the shim before this arm: otherwise the shim holds body
			 * bytes we must not overtake, and it carries this body
			 * itself. (o < arm_at: the shim peeked bytes the kernel
			 * has not seen yet; they are dropped below.) */
			st->armed = (o <= ctl->arm_at);
		} else if (ctl->mode == SOCK_RESPONSE) {
			/* Armed only if the shim has every byte passed so far
			 * (arm_at = the offset after them); else it carries this
			 * response itself from what is passed. */
			st->armed = (o == ctl->arm_at);
			start_head(st);
			st->phase = ctl->start_phase;
			st->line_pos = ctl->start_line_pos;
			st->remaining = ctl->start_remaining;
			st->acc = ctl->start_acc;
			if (rs && !(ctl->flags & CTL_REARM))
				rs->requests++;
		}
	}

	if (ctl->mode == SOCK_REQUEST) {
		__u64 arm = ctl->arm_at;

		if (st->armed && o < arm) {
			/* Bytes the shim already has (it peeked the head without
			 * consuming it): drop them, trimming a segment that runs
			 * on into the body. */
			__u64 cut = arm - o;

			if (cut >= len) {
				st->passed += len;
				if (rs)
					rs->bytes_user += len;
				return SK_DROP;
			}
			if (bpf_skb_adjust_room(skb, -(__s32)cut, 0, 0)) {
				st->flags |= SF_BROKEN;
				return SK_DROP;
			}
			st->passed += cut;
			if (rs)
				rs->bytes_user += cut;
			o = arm;
			len -= cut;
		}
		if (st->armed && o >= arm && o + len <= ctl->body_end) {
			if (o + len == ctl->body_end && (ctl->flags & CTL_NOTIFY)) {
				/* tell the shim, which waits, that the body is complete */
				struct response_end ev = {
					.cookie = cookie,
					.bytes = st->redirected + len,
					.gen = st->gen,
					.replica = replica,
					.how = END_BODY,
				};

				bpf_ringbuf_output(&lmw_response_ends, &ev, sizeof(ev), 0);
			}
			return carry(skb, ctl, st, rs, len);
		}
		return pass(st, rs, len);
	}
	if (ctl->mode != SOCK_RESPONSE || !st->armed)
		return pass(st, rs, len);
	/* Past the end of this gen's response: the bytes belong to the next
	 * response on a pooled upstream connection (its head is the shim's,
	 * and the previous client may be gone), or are stray; either way the
	 * shim reads them. */
	if (st->done_gen == st->gen)
		return pass(st, rs, len);

	if (st->phase != PH_DONE) {
		struct parse_ctx c = {
			.skb = skb, .st = st, .ctl = ctl, .off = 0, .len = len,
		};

		bpf_loop(len + 1, parse_step, &c, 0);
		if (c.ended) {
			struct response_end ev = {
				.cookie = cookie,
				.bytes = st->redirected + len,
				.gen = st->gen,
				.replica = replica,
				.status = st->status,
				.how = END_FRAMED,
			};

			st->done_gen = st->gen;
			if (rs)
				rs->responses++;
			if (ctl->flags & CTL_TAIL_PASS) {
				/* No record: the shim learns of the end from the
				 * passed segment itself (its read of the upstream);
				 * done_gen is set before the segment is queued, so
				 * it knows that what it reads is this tail. */
				return pass(st, rs, len);
			}
			bpf_ringbuf_output(&lmw_response_ends, &ev, sizeof(ev), 0);
		}
	}
	return carry(skb, ctl, st, rs, len);
}

/* Referenced so that BTF keeps both enums for bpf2go -type. */
const volatile enum sock_mode lmw_btf_sock_mode = SOCK_PASS;
const volatile enum parse_phase lmw_btf_parse_phase = PH_HEAD;
