//go:build ignore

// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * LM Warden's kernel data path (docs/kernel.md explains the design): the
 * maps, then one header per program.
 *   lmw_dispatch  sk_lookup (dispatch.h): frontend {addr, port} -> the
 *                 shim's listening socket; the warden's own connections and
 *                 a gone shim -> the ordinary lookup (fail-open).
 *   lmw_pair      sock_ops (pair.h): a replica's end of the warden's own
 *                 upstream connection joins lmw_replica_socks.
 *   lmw_reply     sk_msg (reply.h): the replica's sends go straight to the
 *                 client socket, their framing followed to the end.
 *   lmw_verdict   sk_skb stream verdict (verdict.h), the fallback: carries
 *                 request and response bodies between sockets in lmw_socks.
 */
#include "lmwarden.h"

char _license[] SEC("license") = "Dual BSD/GPL";

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
	__uint(max_entries, DISPATCH_OUTCOMES);
	__type(key, __u32);
	__type(value, __u64);
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
	__uint(type, BPF_MAP_TYPE_SOCKHASH);
	__uint(max_entries, LMW_MAX_SOCKETS);
	__type(key, __u64);
	__type(value, __u64);
} lmw_client_socks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_SOCKHASH);
	__uint(max_entries, LMW_MAX_SOCKETS);
	__type(key, __u64);
	__type(value, __u64);
} lmw_replica_socks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_SK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, __u64);
} lmw_paired SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, PAIR_OUTCOMES);
	__type(key, __u32);
	__type(value, __u64);
} lmw_pair_stats SEC(".maps");

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

/* count adds one to a per-CPU counter, the entry key of a counters map. */
static __always_inline void count(void *counters, __u32 key)
{
	__u64 *v = bpf_map_lookup_elem(counters, &key);

	if (v)
		(*v)++;
}

/* frontend_of looks key up in lmw_frontends, then the wildcard address
 * for its port (key's address is zeroed for that). */
static __always_inline struct frontend_value *frontend_of(struct frontend_key *key)
{
	struct frontend_value *fe = bpf_map_lookup_elem(&lmw_frontends, key);

	if (!fe) {
		key->addr[0] = key->addr[1] = key->addr[2] = key->addr[3] = 0;
		fe = bpf_map_lookup_elem(&lmw_frontends, key);
	}
	return fe;
}

#include "dispatch.h"
#include "pair.h"
#include "reply.h"
#include "verdict.h"

/* Referenced so that BTF keeps the enums for bpf2go -type. */
const volatile enum sock_mode lmw_btf_sock_mode = SOCK_PASS;
const volatile enum frame_phase lmw_btf_frame_phase = FR_HEAD;
const volatile enum dispatch_outcome lmw_btf_dispatch_outcome = DISPATCH_LOOKUPS;
const volatile enum pair_outcome lmw_btf_pair_outcome = PAIR_PAIRED;
const volatile enum conversation_kind lmw_btf_conversation_kind = CONV_SESSION;
