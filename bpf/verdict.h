/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * verdict.h: lmw_verdict, the sk_skb stream verdict of the sk_skb
 * datapath (the fallback where sk_msg cannot run). Both sockets of an
 * exchange sit in lmw_socks: it carries a response body from the upstream
 * socket to the client one, following the body's framing (frame.h) to
 * tell the shim where it ends. Its SOCK_REQUEST arm (a request body the
 * other way) is one the shim no longer sets: relayed in userspace, the
 * body does not queue behind the psock worker (docs/kernel.md).
 */
#ifndef LMW_VERDICT_H
#define LMW_VERDICT_H

#include "frame.h"

#define SF_BROKEN 1 /* request socket: a trim failed, the stream is cut */

/* The socket's read position, read through BTF (CO-RE against the
 * running kernel), so the verdict can tell the bytes of a segment
 * userspace already read. The segment's own TCP sequence number is the
 * first word of its control block, which an sk_skb program reads as
 * __sk_buff.cb[0] (the kernel maps it to the start of skb->cb, where
 * TCP_SKB_CB(skb)->seq is): no kfunc, so it loads where
 * bpf_cast_to_kern_ctx does not exist (6.1). */
struct tcp_sock {
	__u32 copied_seq;
} __attribute__((preserve_access_index));

/* skb_frame: the parser's walk over one segment. */
struct skb_frame {
	struct __sk_buff *skb;
	struct frame f;
	__u32 off;
	__u32 len;
	__u32 ended; /* the body's last byte is in this segment */
	__u32 bad;   /* a byte of this segment breaks the framing */
};

/* skb_frame_step: one bpf_loop step, a data run or one framing byte. */
static long skb_frame_step(__u64 i, void *data)
{
	struct skb_frame *c = data;
	__u8 ch;
	int r;

	if (c->off >= c->len || c->f.phase == FR_UNTIL_CLOSE)
		return 1;
	if (c->f.phase == FR_DONE) {
		c->ended = 1;
		return 1;
	}
	if (frame_data(&c->f)) {
		c->off += frame_skip(&c->f, c->len - c->off);
		if (c->f.phase == FR_DONE) {
			c->ended = 1;
			return 1;
		}
		return 0;
	}
	if (bpf_skb_load_bytes(c->skb, c->off, &ch, 1)) {
		c->bad = 1;
		return 1;
	}
	c->off++;
	r = frame_byte(&c->f, ch);
	if (r == F_END)
		c->ended = 1;
	else if (r == F_BAD)
		c->bad = 1;
	return r != F_MORE;
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
		struct bpf_sock *bsk = skb->sk;
		struct tcp_sock *tp;
		__u32 seq = 0;
		__s32 done;

		if (bsk && len > 0) { /* never a bare FIN */
			tp = bpf_skc_to_tcp_sock(bsk);
			seq = skb->cb[0];
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
			st->fr = ctl->start;
			if (rs && !(ctl->flags & CTL_REARM))
				rs->requests++;
		}
	}

	/* A segment of no bytes is a bare FIN (a client that half-closed after
	 * its request, a replica that closed). Never redirect it: the psock
	 * worker's send of nothing returns 0, which sk_psock_backlog reports as
	 * EPIPE on the target, breaking a socket whose answer is still to come.
	 * Passed, the shim reads it as the end of that side's stream. */
	if (len == 0)
		return SK_PASS;

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
	if (ctl->mode != SOCK_RESPONSE || !st->armed || st->halt_gen == st->gen)
		return pass(st, rs, len);
	/* Past the end of this gen's response: the bytes belong to the next
	 * response on a pooled upstream connection (its head is the shim's,
	 * and the previous client may be gone), or are stray; either way the
	 * shim reads them. */
	if (st->done_gen == st->gen)
		return pass(st, rs, len);

	{
		struct skb_frame c = { .skb = skb, .f = st->fr, .len = len };

		bpf_loop(len + 1, skb_frame_step, &c, 0);
		if (c.bad) {
			/* Malformed framing: the shim gets this segment and the
			 * rest, and its parser (from the state before it) fails
			 * the exchange where the kernel would have. */
			st->halt_gen = st->gen;
			st->halt_why = HALT_FRAMING;
			return pass(st, rs, len);
		}
		st->fr = c.f;
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

#endif /* LMW_VERDICT_H */
