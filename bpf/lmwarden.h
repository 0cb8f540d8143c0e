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
 *   lmw_sock_states        the verdict program only (the shim creates it zeroed)
 *   lmw_socks              the shim inserts, the kernel removes closed sockets
 *   lmw_stats              the verdict program (per CPU), read and summed by Go
 *   lmw_response_ends      the verdict program, read by the shim (ring buffer)
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

struct own_conn {
	__u64 cookie; /* the warden's socket */
	__u64 flags;  /* none defined yet */
};

/* dispatch_stats: per CPU, one entry; what sk_lookup decided. */
struct dispatch_stats {
	__u64 lookups;        /* TCP connection attempts it saw */
	__u64 own;            /* the warden's own connections, left alone */
	__u64 misses;         /* no frontend at that {address, port} */
	__u64 no_listener;    /* a frontend whose shim is gone: failed open */
	__u64 assigned;       /* steered to the shim */
	__u64 failed_assigns; /* bpf_sk_assign refused: failed open */
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

/* sock_ctl: how the verdict treats the bytes arriving on one socket, keyed by
 * socket cookie. Written only by the shim, before it lets the bytes flow. */
enum sock_mode {
	SOCK_PASS = 0,     /* everything goes to the shim */
	SOCK_REQUEST = 1,  /* client side: carry [arm_at, body_end) to peer */
	SOCK_RESPONSE = 2, /* upstream side: carry everything to peer, find the end */
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

struct sock_ctl {
	__u64 peer;     /* cookie of the socket redirected bytes go to */
	__u64 arm_at;   /* REQUEST: stream offset of the first byte the kernel may carry */
	__u64 body_end; /* REQUEST: stream offset one past the request body */
	/* arm_at, RESPONSE: stream offset of the first byte the shim has not
	 * got; the kernel carries only if its next segment starts there. */
	__u32 gen;      /* bumped by the shim at every arm */
	__u32 mode;     /* enum sock_mode */
	__u32 replica;  /* index into stats */
	__u32 flags;    /* CTL_* */
	/* RESPONSE: where the parser starts. Zero (PH_HEAD) when the kernel
	 * sees the response from its first byte; a body phase when the shim
	 * read the head and some body bytes itself (the state after them). */
	__u32 start_phase;
	__u32 start_line_pos;
	__u64 start_remaining;
	__u64 start_acc;
};

/* sock_state: the verdict's own bookkeeping for one socket, keyed by socket
 * cookie. Written only by the verdict program; the shim creates it with
 * seen = the bytes it already read itself, then only reads it. */
enum parse_phase {
	PH_HEAD = 0,       /* response status line and headers */
	PH_CL_BODY = 1,    /* Content-Length body: remaining bytes */
	PH_CHUNK_SIZE = 2, /* chunk-size line */
	PH_CHUNK_EXT = 3,  /* chunk extension up to LF */
	PH_CHUNK_DATA = 4, /* chunk data + CRLF: remaining bytes */
	PH_TRAILER = 5,    /* trailer lines up to the empty line */
	PH_UNTIL_CLOSE = 6,/* no framing: the body ends when upstream closes */
	PH_DONE = 7,       /* response complete */
};

struct sock_state {
	__u64 seen;       /* stream offset of the next byte the verdict sees */
	__u64 redirected; /* bytes of the current gen carried to the peer */
	__u64 passed;     /* bytes handed to the shim, all gens */
	__u64 carried;    /* bytes carried to the peer, all gens */
	__u64 remaining;  /* response: bytes left in the CL body or chunk */
	__u64 acc;        /* response: content-length or chunk-size being parsed */
	__u32 gen;        /* the sock_ctl gen these counters belong to */
	__u32 armed;      /* REQUEST: the arm found no unread passed bytes */
	__u32 phase;      /* enum parse_phase */
	__u32 line_pos;   /* response head: position in the current line */
	__u32 flags;      /* response head: PF_* */
	__u32 match;      /* response head: chars of "chunked" matched */
	__u32 status;     /* response status code */
	__u32 done_gen;   /* last gen whose response ended */
};

/* replica_stats: per CPU, per replica (index = replica, array map). */
struct replica_stats {
	__u64 requests;     /* responses begun (one per request carried) */
	__u64 responses;    /* responses whose end the kernel found */
	__u64 bytes_kernel; /* bytes redirected socket to socket */
	__u64 bytes_user;   /* bytes passed to the shim */
};

/* response_end: a ring-buffer record per response whose end the kernel
 * carried (no CTL_TAIL_PASS: the shim learns of a passed tail by reading
 * it), and per request body carried to its end that the shim waits for
 * (CTL_NOTIFY). Only records somebody waits for are written: one nobody
 * reads would still wake the reader. */
#define END_FRAMED 1 /* response: Content-Length or chunked end found */
#define END_BODY 2   /* request: the last body byte was carried (cookie = client) */
#define END_TAIL 4   /* no longer written (kept for the value's meaning: with
		      * END_FRAMED, the last segment was passed) */

struct response_end {
	__u64 cookie; /* upstream socket cookie */
	__u64 bytes;  /* bytes of this response carried in the kernel */
	__u32 gen;
	__u32 replica;
	__u32 status;
	__u32 how; /* END_* */
};

#endif /* LMWARDEN_H */
