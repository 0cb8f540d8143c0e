/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * reply.h: lmw_reply, the sk_msg program of the sk_msg datapath. It runs
 * in the replica's own sendmsg on every socket lmw_pair put into
 * lmw_replica_socks, and moves what the replica sends straight to the
 * client socket's egress (no loopback TCP, no kernel worker, no shim
 * wake-up), head included, while it follows the framing to find the
 * response's end. The shim learns of that end from the response's last
 * byte, which the program passes to it (the shim relays it).
 *
 * It carries a response only when nothing about it needs the shim: a head
 * of "HTTP/1.1 <status>" with status 200 or more, well-formed fields, no
 * hop-by-hop field but "Connection: keep-alive" (what an HTTP/1.1 client
 * that keeps its connection, the only kind armed, assumes anyway; vLLM's
 * server and many others send it), Content-Length (digits) or
 * Transfer-Encoding: chunked
 * or neither (the end is the replica's close), whole in the response's
 * first message and at most LMW_MAX_HEAD bytes; and only as many bytes as
 * the client's socket can take (sock_ctl.credit). Otherwise it stops
 * carrying that response (a halt) and every byte of it from there on goes
 * the ordinary way, through the warden's upstream socket, to the shim.
 */
#ifndef LMW_REPLY_H
#define LMW_REPLY_H

#include "frame.h"

#define HALT_PULL 5 /* the program could not read the message */

/* sock_state.flags of a replica's socket: the last run carried all of its
 * message but the response's last byte, which the kernel runs this
 * program on again, in the same send (see lmw_reply's end). */
#define SF_TAIL_SPLIT 2

/* Head parser states. */
#define HS_STATUS 0    /* "HTTP/1.1 ddd", by position */
#define HS_REASON 1    /* the reason phrase, up to CR */
#define HS_STATUS_LF 2
#define HS_LINE 3      /* start of a field line, or of the final CRLF */
#define HS_NAME 4      /* a field name, up to its colon */
#define HS_VALUE 5     /* a field value, up to CR */
#define HS_LF 6
#define HS_END_LF 7

/* The fields the head parser cares about. */
#define FIELD_OTHER 0
#define FIELD_LENGTH 1
#define FIELD_CHUNKED 2
#define FIELD_CONNECTION 3 /* only "keep-alive" is carried */

#define LMW_MAX_FIELDS 100 /* http1.MaxHeaderLines */

/* The walk's state is in the socket's sock_state (a map value), not on
 * the stack: the verifier then checks reply_step once for every state
 * instead of once per combination of known values (which it refuses as
 * too complex). The socket's lock is held while the program runs. */
struct reply_ctx {
	struct sk_msg_md *msg;
	struct reply_walk *w;
};


/* reply_byte makes the message byte at off readable and returns it (-1:
 * it cannot). One byte at a time, at the start of what msg->data points
 * to: a variable offset into the message is pointer arithmetic on a
 * packet pointer, which the verifier allows only with CAP_PERFMON, and
 * this program runs without it. A pull inside one scatterlist element
 * only moves the pointers. */
static __always_inline int reply_byte(struct reply_ctx *rc, __u32 off)
{
	__u8 *p, *end;

	if (off >= rc->w->len || bpf_msg_pull_data(rc->msg, off, off + 1, 0))
		return -1;
	p = (void *)(long)rc->msg->data;
	end = (void *)(long)rc->msg->data_end;
	if ((void *)(p + 1) > (void *)end)
		return -1;
	return *p;
}

static __always_inline __u8 lower(__u8 c)
{
	return (c >= 'A' && c <= 'Z') ? c + 32 : c;
}

/* name_is compares the field name at w->name_off with the lowercase name
 * whose bytes are w0, w1, w2 (little-endian, zero-padded). */
static __always_inline int name_is(struct reply_ctx *rc, __u64 w0, __u64 w1, __u64 w2)
{
	struct reply_walk *w = rc->w;
	__u32 j;

	for (j = 0; j < 24; j++) {
		__u64 word = j < 8 ? w0 : (j < 16 ? w1 : w2);
		__u8 want = (word >> ((j & 7) * 8)) & 0xff;
		int c;

		if (j == w->name_len)
			return want == 0;
		c = reply_byte(rc, w->name_off + j);
		if (c < 0 || lower(c) != want)
			return 0;
	}
	return 0;
}

/* field_of says what the field whose name ends here is; -1: one the shim
 * must see (hop-by-hop, and anything that could be one). */
static __always_inline int field_of(struct reply_ctx *rc)
{
	struct reply_walk *w = rc->w;
	int c = reply_byte(rc, w->name_off);

	if (c < 0)
		return -1;
	c = lower(c);
	switch (w->name_len) {
	case 14: /* content-length */
		if (c == 'c' && name_is(rc, 0x2d746e65746e6f63ULL, 0x6874676e656cULL, 0))
			return FIELD_LENGTH;
		break;
	case 17: /* transfer-encoding */
		if (c == 't' && name_is(rc, 0x726566736e617274ULL, 0x6e69646f636e652dULL, 0x67))
			return FIELD_CHUNKED;
		break;
	case 10: /* connection, keep-alive */
		if (c == 'c' && name_is(rc, 0x697463656e6e6f63ULL, 0x6e6fULL, 0))
			return FIELD_CONNECTION;
		if (c == 'c' || c == 'k')
			return -1;
		break;
	case 16: /* proxy-connection */
		if (c == 'p')
			return -1;
		break;
	case 2: /* te */
		if (c == 't')
			return -1;
		break;
	case 7: /* upgrade */
		if (c == 'u')
			return -1;
		break;
	case 6: /* expect */
		if (c == 'e')
			return -1;
		break;
	}
	return FIELD_OTHER;
}

/* head_end decides the body's framing (RFC 9112 section 6.3, as
 * l7.parseResponseHead does). */
static __always_inline void head_end(struct reply_walk *w)
{
	__u32 s = w->status;

	w->head_len = w->off;
	if ((w->hflags & HF_LENGTH) && (w->hflags & HF_CHUNKED)) {
		w->halt = HALT_HEAD;
		return;
	}
	if (w->no_body || s == 204 || s == 304) {
		w->f.phase = FR_DONE;
	} else if (w->hflags & HF_CHUNKED) {
		w->f.phase = FR_CHUNK_SIZE;
	} else if (w->hflags & HF_LENGTH) {
		w->f.phase = w->cl ? FR_LENGTH : FR_DONE;
		w->f.remaining = w->cl;
	} else {
		w->f.phase = FR_UNTIL_CLOSE;
	}
	if (w->f.phase == FR_DONE)
		w->ended = 1;
}

/* head_value moves a Content-Length or Transfer-Encoding value on by c. */
static __always_inline int head_value(struct reply_walk *w, __u8 c)
{
	int blank = c == ' ' || c == '\t';

	if (w->vs == 2) /* after the value: blanks only */
		return blank;
	if (blank) {
		if (w->vs == 1)
			w->vs = 2;
		return 1;
	}
	w->vs = 1;
	if (w->field == FIELD_LENGTH) {
		if (c < '0' || c > '9' || w->vpos == 18)
			return 0;
		w->cl = w->cl * 10 + (c - '0');
		w->vpos++;
		return 1;
	}
	if (w->field == FIELD_CONNECTION) {
		/* "keep-alive", any case: "keep-ali", then "ve" */
		__u64 want = w->vpos < 8 ? 0x696c612d7065656bULL : 0x6576ULL;

		if (w->vpos >= 10 || lower(c) != ((want >> ((w->vpos & 7) * 8)) & 0xff))
			return 0;
		w->vpos++;
		return 1;
	}
	/* "chunked", any case */
	if (w->vpos >= 7 || lower(c) != ((0x64656b6e756863ULL >> (w->vpos * 8)) & 0xff))
		return 0;
	w->vpos++;
	return 1;
}

/* head_byte moves the head parser on by one byte. */
static __always_inline void head_byte(struct reply_ctx *rc, __u8 c)
{
	struct reply_walk *w = rc->w;
	int f;

	switch (w->hs) {
	case HS_STATUS:
		if (w->pos < 8) { /* "HTTP/1.1" */
			if (c != ((0x312e312f50545448ULL >> (w->pos * 8)) & 0xff))
				goto halt;
		} else if (w->pos == 8) {
			if (c != ' ')
				goto halt;
		} else if (w->pos < 12) {
			if (c < '0' || c > '9')
				goto halt;
			w->status = w->status * 10 + (c - '0');
		} else if (c == ' ') {
			w->hs = HS_REASON;
		} else if (c == '\r') {
			w->hs = HS_STATUS_LF;
		} else {
			goto halt;
		}
		w->pos++;
		return;
	case HS_REASON:
		if (c == '\r')
			w->hs = HS_STATUS_LF;
		else if (frame_ctl(c))
			goto halt;
		return;
	case HS_STATUS_LF:
		/* 1xx: the shim relays (or drops) interim responses */
		if (c != '\n' || w->status < 200)
			goto halt;
		w->hs = HS_LINE;
		return;
	case HS_LINE:
		if (c == '\r') {
			w->hs = HS_END_LF;
		} else if (frame_tchar(c)) {
			w->hs = HS_NAME;
			w->name_off = w->off - 1;
			w->name_len = 1;
		} else {
			goto halt; /* obs-fold, an empty name */
		}
		return;
	case HS_NAME:
		if (frame_tchar(c)) {
			w->name_len++;
			return;
		}
		if (c != ':')
			goto halt;
		f = field_of(rc);
		if (f < 0)
			goto halt;
		if ((f == FIELD_LENGTH && (w->hflags & HF_LENGTH)) ||
		    (f == FIELD_CHUNKED && (w->hflags & HF_CHUNKED)))
			goto halt; /* a repeated framing field */
		w->field = f;
		w->vs = 0;
		w->vpos = 0;
		w->hs = HS_VALUE;
		return;
	case HS_VALUE:
		if (c == '\r') {
			if (w->field == FIELD_LENGTH) {
				if (w->vpos == 0)
					goto halt;
				w->hflags |= HF_LENGTH;
			} else if (w->field == FIELD_CHUNKED) {
				if (w->vpos != 7)
					goto halt;
				w->hflags |= HF_CHUNKED;
			} else if (w->field == FIELD_CONNECTION) {
				if (w->vpos != 10 || (w->hflags & HF_CONNECTION))
					goto halt;
				w->hflags |= HF_CONNECTION;
			}
			w->hs = HS_LF;
			return;
		}
		if (frame_ctl(c))
			goto halt;
		if (w->field != FIELD_OTHER && !head_value(w, c))
			goto halt;
		return;
	case HS_LF:
		if (c != '\n' || ++w->fields > LMW_MAX_FIELDS)
			goto halt;
		w->hs = HS_LINE;
		return;
	case HS_END_LF:
		if (c != '\n')
			goto halt;
		head_end(w);
		return;
	}
halt:
	w->halt = HALT_HEAD;
}

/* reply_step: one bpf_loop step, a data run or one byte. */
static long reply_step(__u64 i, void *data)
{
	struct reply_ctx *rc = data;
	struct reply_walk *w = rc->w;
	int c, r;

	if (w->off >= w->len || w->halt || w->ended)
		return 1;
	if (w->f.phase == FR_UNTIL_CLOSE) {
		w->off = w->len;
		return 1;
	}
	if (frame_data(&w->f)) {
		w->off += frame_skip(&w->f, w->len - w->off);
		w->ended = w->f.phase == FR_DONE;
		return 0;
	}
	if (w->f.phase == FR_HEAD && w->off >= LMW_MAX_HEAD) {
		w->halt = HALT_HEAD; /* a head longer than the kernel carries */
		return 1;
	}
	c = reply_byte(rc, w->off);
	if (c < 0) {
		w->halt = w->f.phase == FR_HEAD ? HALT_HEAD : HALT_PULL;
		return 1;
	}
	w->off++;
	if (w->f.phase == FR_HEAD) {
		head_byte(rc, c);
		return 0;
	}
	r = frame_byte(&w->f, c);
	if (r == F_END)
		w->ended = 1;
	else if (r == F_BAD)
		w->halt = HALT_FRAMING;
	return 0;
}

SEC("sk_msg")
int lmw_reply(struct sk_msg_md *msg)
{
	struct reply_ctx rc = { .msg = msg };
	struct replica_stats *rs;
	struct reply_walk *w;
	struct sock_state *st;
	struct sock_ctl *ctl;
	__u64 key, o, e, *paired;
	__u32 replica, len = msg->size, halt = 0, tail = 0;

	/* The kernel keeps what a run set with bpf_msg_apply_bytes for the
	 * next run on the same message (the rest, after the bytes it
	 * applied to), and turns what is left of it after that run into a
	 * verdict for the replica's next send, which then skips this program
	 * (measured on 6.18): every run that does not want it clears it. */
	bpf_msg_apply_bytes(msg, 0);
	if (!msg->sk)
		return SK_PASS;
	paired = bpf_sk_storage_get(&lmw_paired, msg->sk, 0, 0);
	if (!paired)
		return SK_PASS;
	key = *paired;
	st = bpf_map_lookup_elem(&lmw_sock_states, &key);
	if (!st)
		return SK_PASS; /* the shim arms before the first request */
	o = st->seen;
	ctl = bpf_map_lookup_elem(&lmw_sock_ctls, &key);
	if (!ctl || ctl->mode != SOCK_REPLY) {
		st->seen = o + len;
		st->passed += len;
		return SK_PASS;
	}
	replica = ctl->replica;
	rs = bpf_map_lookup_elem(&lmw_stats, &replica);
	if (ctl->gen != st->gen) {
		/* the first bytes since the shim armed this socket again */
		st->gen = ctl->gen;
		st->redirected = 0;
		st->armed = (o == ctl->arm_at);
		st->fr.phase = FR_HEAD;
		st->fr.remaining = 0;
		st->fr.size = 0;
		st->fr.line = 0;
		st->fr.count = 0;
		st->status = 0;
		st->head_len = 0;
		st->head_flags = 0;
		st->content_length = 0;
		st->first_ns = 0;
		if (rs)
			rs->requests++;
	}
	if (st->flags & SF_TAIL_SPLIT) {
		/* The re-run over the last byte, which must reach the warden's
		 * socket. A plain SK_PASS does not do that everywhere: the
		 * kernel maps SK_PASS to a redirect while the message still
		 * names a redirect target (sk_psock_map_verd() with
		 * msg->sk_redir, which the first run set and 6.1 and 6.12 keep
		 * for the re-run over the rest of the same message), and the
		 * byte went to the client, the shim never had it and the
		 * exchange stalled. A redirect to this very socket's egress
		 * is what a pass does, on every kernel. */
		st->flags &= ~SF_TAIL_SPLIT;
		if (st->done_gen == st->gen) {
			bpf_msg_redirect_hash(msg, &lmw_replica_socks, &key, 0);
			goto pass;
		}
	}
	if (!st->armed || st->done_gen == st->gen || st->halt_gen == st->gen)
		goto pass;
	if ((ctl->flags & CTL_HANDOFF) && st->redirected == 0) {
		halt = HALT_HANDOFF;
		goto halt;
	}

	w = &st->walk;
	__builtin_memset(w, 0, sizeof(*w));
	w->f = st->fr;
	w->len = len;
	w->no_body = ctl->flags & CTL_NO_BODY;
	rc.w = w;
	bpf_loop(len + 1, reply_step, &rc, 0);
	halt = w->halt;
	if (!halt && w->f.phase == FR_HEAD)
		halt = HALT_HEAD; /* the head did not end in its first message */
	if (halt)
		goto halt;
	e = w->ended ? w->off : len;
	if (w->ended)
		st->end_at = o + e;
	if (e < len) {
		halt = HALT_TRAILING;
		goto halt;
	}
	if (st->redirected + e > ctl->credit) {
		halt = HALT_CREDIT;
		goto halt;
	}
	/* The response's last byte goes to the shim: the client cannot send
	 * its next request before it has that byte, so the shim, which
	 * relays it, has counted the response done before then (a
	 * ring-buffer record raced the client's next request, and lost it
	 * on a busy machine). The rest of the message is carried
	 * (bpf_msg_apply_bytes); the last byte meets this program again
	 * (SF_TAIL_SPLIT), which sends it on to the warden's socket. */
	if (w->ended && !(ctl->flags & CTL_FAULT_CARRY_END))
		tail = 1;
	if (len > tail) {
		if (bpf_msg_redirect_hash(msg, &lmw_client_socks, &ctl->peer, 0) != SK_PASS) {
			halt = HALT_PEER;
			goto halt;
		}
		if (tail) {
			bpf_msg_apply_bytes(msg, len - tail);
			st->flags |= SF_TAIL_SPLIT;
		}
	}
	if (st->fr.phase == FR_HEAD) {
		st->status = w->status;
		st->head_len = w->head_len;
		st->head_flags = w->hflags;
		st->content_length = w->cl;
	}
	/* The first body byte's time (a stream's first event: what the
	 * client feels as time to first token), not the head's, which a
	 * replica may send on its own first. */
	if (!st->first_ns && (st->fr.phase != FR_HEAD || len - tail > w->head_len))
		st->first_ns = bpf_ktime_get_ns();
	st->fr = w->f;
	st->seen = o + len - tail;
	st->redirected += len - tail;
	st->carried += len - tail;
	if (rs)
		rs->bytes_kernel += len - tail;
	if (w->ended) {
		st->done_gen = st->gen;
		if (rs)
			rs->responses++;
		if (len == tail) {
			/* Nothing to carry: the message is the last byte. */
			o = st->seen;
			goto pass;
		}
	}
	return SK_PASS;

halt:
	/* From here on this gen is the shim's; the framing stays where the
	 * carried bytes ended (st->fr), which is where the shim's parser
	 * starts. */
	st->halt_gen = st->gen;
	st->halt_why = halt;
pass:
	st->seen = o + len;
	st->passed += len;
	if (rs)
		rs->bytes_user += len;
	return SK_PASS;
}

#endif /* LMW_REPLY_H */
