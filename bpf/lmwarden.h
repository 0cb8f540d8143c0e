/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * lmwarden.h: the one place that defines every map key and value shared by
 * the BPF programs (lmwarden.c) and Go (bpf2go -type, never retyped).
 *
 * Who writes what (so nobody races on a value); every map's name starts
 * with lmw_, as the programs' do, so that `bpftool map` shows them together:
 *   lmw_frontends, lmw_listeners  the loader (maps/), read by sk_lookup
 *   lmw_own_conns          the warden, before each connection of its own
 *                          connects; read by sk_lookup (never steered back)
 *   lmw_dispatch_stats     sk_lookup (per CPU), read and summed by Go
 *   lmw_sessions           the agent, through maps/; the kernel never reads it
 *   lmw_sock_ctls          the shim only (arms a socket for one request/response)
 *   lmw_sock_states        the kernel programs only (the shim creates it zeroed)
 *   lmw_socks              sk_skb datapath: the shim inserts client and
 *                          upstream sockets, the kernel removes closed ones
 *   lmw_client_socks       sk_msg datapath: the shim inserts client sockets
 *                          (no program: only a redirect target)
 *   lmw_replica_socks      sk_msg datapath: sock_ops inserts the replica's
 *                          accepted sockets, keyed by the warden's peer cookie
 *   lmw_paired             sk_msg datapath: per replica socket (sk storage),
 *                          the cookie of the warden's socket at its other end
 *   lmw_stats, lmw_pair_stats  the programs (per CPU), read and summed by Go
 *   lmw_response_ends      the programs, read by the shim (ring buffer)
 */
#ifndef LMWARDEN_H
#define LMWARDEN_H

#include "include/lmw_uapi.h"

#define LMW_MAX_FRONTENDS 256
#define LMW_MAX_REPLICAS 256
#define LMW_MAX_SESSIONS 262144
#define LMW_MAX_SOCKETS 65536
#define LMW_MAX_OWN_CONNS 65536

/* frontend_key: the address a client connects to. family is AF_INET or
 * AF_INET6; an IPv4 address sits in addr[0] (network order), the rest zero;
 * port is in host order (as bpf_sk_lookup.local_port). An all-zero addr is
 * the wildcard for that port. */
struct frontend_key {
	__u32 addr[4];
	__u16 port;
	__u16 family;
};

#define FRONTEND_OWN_ADDR 1 /* the warden added addr to lo; unload removes it */

struct frontend_value {
	__u32 slot;  /* index into the listeners SOCKMAP */
	__u32 flags; /* FRONTEND_* */
};

/* conn_key: a TCP connection the warden opens itself (to a replica, or to
 * poll its metrics), as the packets name it: source = the warden's end,
 * destination = the replica's. Addresses in network order (IPv4 in
 * [0], rest zero; an IPv4-mapped IPv6 address is stored as IPv4), ports in
 * host order. The warden binds the socket, registers this key, and only
 * then connects, so no packet of it can ever meet sk_lookup unregistered:
 * sk_lookup never steers a registered connection, which makes a loop back
 * into the shim impossible even when a frontend is the replica's own
 * {address, port} (the fail-open layout). */
struct conn_key {
	__u32 src[4];
	__u32 dst[4];
	__u16 sport;
	__u16 dport;
	__u16 family;
	__u16 pad;
};

/* OWN_PAIR: a connection to a replica of the sk_msg datapath: sock_ops
 * puts the replica's accepted end into lmw_replica_socks. */
#define OWN_PAIR 1

struct own_conn {
	__u64 cookie; /* the warden's socket */
	__u64 flags;  /* OWN_* */
};

/* lmw_pair_stats: per CPU, one counter per outcome of lmw_pair (the key,
 * as for lmw_dispatch_stats). */
enum pair_outcome {
	PAIR_PAIRED = 0, /* a replica's socket joined lmw_replica_socks */
	PAIR_FAILED,     /* it could not (no sk storage, SOCKHASH full) */
	PAIR_CLIENT,     /* a client socket the shim accepted joined lmw_client_socks */
	PAIR_CLIENT_FAILED, /* it could not (SOCKHASH full) */
	PAIR_OUTCOMES,
};

/* lmw_dispatch_stats: per CPU, one counter per outcome of sk_lookup
 * (the key). One map entry each, not fields of one struct: a field chosen
 * at run time is pointer arithmetic the verifier allows only with
 * CAP_PERFMON, and clang merges per-field increments into just that. */
enum dispatch_outcome {
	DISPATCH_LOOKUPS = 0,    /* TCP connection attempts it saw */
	DISPATCH_OWN,            /* the warden's own connections, left alone */
	DISPATCH_MISS,           /* no frontend at that {address, port} */
	DISPATCH_NO_LISTENER,    /* a frontend whose shim is gone: failed open */
	DISPATCH_ASSIGNED,       /* steered to the shim */
	DISPATCH_FAILED_ASSIGN,  /* bpf_sk_assign refused: failed open */
	DISPATCH_OUTCOMES,
};

/* session: value of the sessions map, keyed by the keyed 64-bit hash of the
 * session id (__u64). Written by the agent; dumped by bpftool and by
 * `lmwarden sessions --from-maps`; survives a warden restart, when it puts
 * every session back into its model on its replica. */
struct session {
	__u32 replica;      /* index in the model's replicas (or the rank) */
	__u32 model;        /* index of the model in the config */
	__u64 last_seen_ns; /* unix nanoseconds, set by the agent */
};

/* frame: where a body's framing parser is. The chunked phases are the
 * Go parser's (http1.ChunkedBody) in the same order, and move on the same
 * bytes (frame.h); a test checks the numbering, and FuzzChunkedSplits
 * that both end every body at the same byte. */
enum frame_phase {
	FR_CHUNK_SIZE = 0,    /* hex digits of a chunk size */
	FR_CHUNK_SIZE_BWS,    /* blanks after it: only an extension may follow */
	FR_CHUNK_EXT,         /* an extension, up to CR */
	FR_CHUNK_SIZE_LF,
	FR_CHUNK_DATA,        /* remaining data bytes */
	FR_CHUNK_DATA_CR,
	FR_CHUNK_DATA_LF,
	FR_TRAILER,           /* start of a trailer line or of the final CRLF */
	FR_TRAILER_NAME,
	FR_TRAILER_VALUE,
	FR_TRAILER_LF,
	FR_FINAL_LF,
	FR_DONE,              /* the body has ended */
	FR_ERROR,             /* malformed framing */
	FR_LENGTH = 16,       /* a Content-Length body: remaining bytes */
	FR_UNTIL_CLOSE = 17,  /* no framing: ends when the replica closes */
	FR_HEAD = 18,         /* sk_msg: the response head */
};

struct frame {
	__u64 remaining; /* FR_LENGTH, FR_CHUNK_DATA: bytes left */
	__u64 size;      /* the chunk size read so far */
	__u32 phase;     /* enum frame_phase */
	__u32 line;      /* bytes of the current line so far */
	__u32 count;     /* FR_CHUNK_SIZE: hex digits; trailers: bytes since the last-chunk line */
	__u32 pad;
};

/* Bounds of the framing both parsers enforce (l7: maxLine, MaxHeadBytes). */
#define LMW_MAX_LINE 4096
#define LMW_MAX_TRAILERS 65536

/* sock_ctl: how the kernel treats the bytes of one socket, keyed by socket
 * cookie (for the sk_msg datapath: the cookie of the warden's upstream
 * socket, whose replica end the program runs on). Written only by the
 * shim, before it lets the bytes flow. */
enum sock_mode {
	SOCK_PASS = 0,     /* everything goes to the shim */
	SOCK_REQUEST = 1,  /* sk_skb, client side: carry [arm_at, body_end) to peer */
	SOCK_RESPONSE = 2, /* sk_skb, upstream side: carry the body to peer, find its end */
	SOCK_REPLY = 3,    /* sk_msg, the replica's socket: carry the whole response
			    * (head included) to the client socket peer */
};

#define CTL_NO_BODY 1 /* the request was HEAD: the response has no body */
/* RESPONSE: pass the segment holding the response's last byte to the shim
 * instead of carrying it. The client cannot send its next request before
 * it has that byte, so the shim can take the client out of the SOCKHASH
 * first, safely; the next head then arrives in a plain socket, is peeked,
 * and its body is carried like a first request's (docs/kernel.md). */
#define CTL_TAIL_PASS 2
/* RESPONSE: a re-arm of the same response (the previous arm found bytes
 * passed that the shim had not read yet; it forwarded them and tries
 * again from the offset after them): not a new request in the stats. */
#define CTL_REARM 4
/* REQUEST: the shim waits for END_BODY (the body was not complete when it
 * looked), so write the record. Without it there is none: a body that was
 * already queued when the socket was armed is carried inside the arm, and
 * the shim sees that in sock_state without waiting (a record would only
 * wake the ring buffer's reader for nothing). */
#define CTL_NOTIFY 8
/* REPLY: the shim is about to write to the client itself (an error
 * answer, a 100 Continue probe, a shutdown's Connection: close): hand it
 * the whole response, unless the kernel began carrying it (then go on). */
#define CTL_HANDOFF 16
/* REPLY, fault injection for tests only: carry the response's last byte to
 * the client too, so that it never reaches the shim. It is what a kernel
 * that ignores the tail's pass does (6.12 did, before lmw_reply sent the
 * tail on itself): the shim must notice the missing end, finish the
 * exchange and stop arming (kernel/msg_fallback.go). */
#define CTL_FAULT_CARRY_END 32

struct sock_ctl {
	__u64 peer;     /* cookie of the socket carried bytes go to */
	/* REQUEST: stream offset of the first byte the kernel may carry;
	 * RESPONSE, REPLY: stream offset of the first byte the shim has not
	 * got; the kernel carries only if its next bytes start there. */
	__u64 arm_at;
	__u64 body_end; /* REQUEST: stream offset one past the request body */
	/* REPLY: the most response bytes the kernel may carry to the client:
	 * what its socket's send buffer can still take. A redirect into a
	 * full socket loses the bytes while the sender is told they were
	 * sent (measured on 6.18), so past the credit the response goes to
	 * the shim, which relays it with TCP's own flow control. */
	__u64 credit;
	__u32 gen;      /* bumped by the shim at every arm */
	__u32 mode;     /* enum sock_mode */
	__u32 replica;  /* index into lmw_stats */
	__u32 flags;    /* CTL_* */
	struct frame start; /* RESPONSE: the framing at arm_at (after the head the shim read) */
};

/* Why the kernel stopped carrying a gen (sock_state.halt_why); from then
 * on every byte of it goes to the shim, and the parser state stays where
 * the carried bytes ended. */
#define HALT_HEAD 1    /* REPLY: a head the shim must rewrite or judge (1xx,
			* hop-by-hop fields, unusual framing, longer than one
			* message or than LMW_MAX_HEAD) */
#define HALT_CREDIT 2  /* REPLY: the client's send buffer is full */
#define HALT_FRAMING 3 /* malformed body framing: the shim's parser fails it */
#define HALT_PEER 4    /* the client socket left the map (closed) */
#define HALT_HANDOFF 6 /* REPLY: CTL_HANDOFF before the first byte */
#define HALT_TRAILING 7 /* REPLY: bytes after the response's end in the
			 * message holding it (a replica that writes past its
			 * answer): that message goes to the shim, which finishes
			 * the response and sees the rest. (A redirect of part of a
			 * message, bpf_msg_apply_bytes, would leave the program's
			 * verdict applied to bytes it never sees: measured on 6.18,
			 * the rerun over the rest keeps the redirect.) */

/* What a REPLY head said (sock_state.head_flags). */
#define HF_LENGTH 1  /* Content-Length */
#define HF_CHUNKED 2 /* Transfer-Encoding: chunked */
#define HF_CONNECTION 4 /* Connection: keep-alive */

#define LMW_MAX_HEAD 4096 /* REPLY: longest response head the kernel carries */

/* reply_walk: lmw_reply's working state within one message of the
 * replica's (it means nothing between messages): where it is in the
 * message and in the response head. */
struct reply_walk {
	struct frame f;
	__u64 cl;         /* Content-Length value being read */
	__u64 head_len;
	__u32 off;        /* next byte of the message */
	__u32 len;
	__u32 ended;      /* the response's last byte is at off - 1 */
	__u32 halt;       /* HALT_* */
	__u32 no_body;
	__u32 hs;         /* head parser state */
	__u32 pos;        /* the status line's bytes so far */
	__u32 name_off;   /* a field name's first byte */
	__u32 name_len;
	__u32 field;      /* what the current field is */
	__u32 vs;         /* its value: 0 before, 1 in, 2 after */
	__u32 vpos;       /* digits, or chars of "chunked" matched */
	__u32 fields;
	__u32 status;
	__u32 hflags;     /* HF_* */
};

/* sock_state: the kernel's own bookkeeping for one socket, keyed like its
 * sock_ctl. Written only by the programs; the shim creates it zeroed (or
 * with seen = the bytes it already read itself), then only reads it. */
struct sock_state {
	__u64 seen;       /* stream offset of the next byte the program sees */
	__u64 redirected; /* bytes of the current gen carried to the peer */
	__u64 passed;     /* bytes handed to the shim, all gens */
	__u64 carried;    /* bytes carried to the peer, all gens */
	struct frame fr;  /* the body's framing at seen (frozen at a halt) */
	__u64 head_len;   /* REPLY: bytes of the response head */
	__u64 content_length; /* REPLY: its Content-Length (HF_LENGTH) */
	__u64 first_ns;   /* REPLY: CLOCK_MONOTONIC of the gen's first body byte carried */
	__u64 end_at;     /* REPLY: stream offset one past the response's last
			   * byte, once the kernel found it */
	__u32 gen;        /* the sock_ctl gen these counters belong to */
	__u32 armed;      /* the arm found no byte the shim had not read */
	__u32 status;     /* REPLY: the response status */
	__u32 done_gen;   /* last gen whose response ended */
	__u32 halt_gen;   /* last gen whose carrying stopped (HALT_*) */
	__u32 halt_why;   /* HALT_* */
	__u32 head_flags; /* REPLY: HF_* */
	__u32 flags;      /* SF_* */
	struct reply_walk walk; /* REPLY: lmw_reply's scratch */
};

/* replica_stats: per CPU, per replica (index = replica, array map). */
struct replica_stats {
	__u64 requests;     /* responses begun (one per request carried) */
	__u64 responses;    /* responses whose end the kernel found */
	__u64 bytes_kernel; /* bytes redirected socket to socket */
	__u64 bytes_user;   /* bytes passed to the shim */
};

/* response_end: a ring-buffer record per response whose end lmw_verdict
 * carried (no CTL_TAIL_PASS: the shim learns of a passed tail by reading
 * it; lmw_reply always passes the tail), and per request body carried to its end that the shim waits for
 * (CTL_NOTIFY). Only records somebody waits for are written: one nobody
 * reads would still wake the reader. */
#define END_FRAMED 1 /* response: Content-Length or chunked end found */
#define END_BODY 2   /* request: the last body byte was carried (cookie = client) */

struct response_end {
	__u64 cookie; /* upstream socket cookie */
	__u64 bytes;  /* bytes of this response carried in the kernel */
	__u32 gen;
	__u32 replica;
	__u32 status;
	__u32 how; /* END_* */
};

#endif /* LMWARDEN_H */
