/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * pair.h: lmw_pair, the sock_ops program of the sk_msg datapath, attached
 * to the root of the cgroup v2 hierarchy (so it sees the replicas' sockets
 * whatever their network namespace). When a replica accepts a connection
 * the warden registered in lmw_own_conns with OWN_PAIR, the accepted
 * socket joins lmw_replica_socks (where lmw_reply runs on every send),
 * keyed by the cookie of the warden's socket at the other end, and its sk
 * storage remembers that cookie. And when the shim accepts a client's
 * connection to a frontend (lmw_dispatch gave it the shim's listener),
 * the accepted socket joins lmw_client_socks under its own cookie, so
 * that lmw_reply can redirect into it: here, during the handshake, the
 * join costs the client's first request nothing (from the shim, a
 * SOCKHASH insert is a syscall and a psock set up before the request may
 * go out). Nothing else is touched.
 */
#ifndef LMW_PAIR_H
#define LMW_PAIR_H

/* v4mapped reports whether a (network-order) IPv6 address is ::ffff:a.b.c.d. */
static __always_inline int v4mapped(const __u32 *a)
{
	return a[0] == 0 && a[1] == 0 && a[2] == __builtin_bswap32(0xffff);
}

/* join_client puts a socket accepted for a client of a frontend (k: the
 * connection, source = the client) into lmw_client_socks. While the shim
 * runs, lmw_dispatch gave the connection to the shim's listener. With the
 * shim gone (fail-open) it is the replica's own, and joins all the same:
 * which listener accepted it cannot be told here (a SOCKMAP lookup needs
 * bpf_sk_release, which sock_ops may not call). A socket in that map
 * only gets a psock with no program (the kernel's own TCP paths) and
 * leaves the map when it closes; nothing redirects into it but an arm
 * the shim makes for its own client. */
static __always_inline void join_client(struct bpf_sock_ops *skops, const struct conn_key *k)
{
	struct frontend_key fk = {};
	struct frontend_value *fe;
	__u64 cookie;

	fk.family = k->family;
	fk.port = k->dport;
	fk.addr[0] = k->dst[0];
	fk.addr[1] = k->dst[1];
	fk.addr[2] = k->dst[2];
	fk.addr[3] = k->dst[3];
	fe = frontend_of(&fk);
	if (!fe)
		return;
	cookie = bpf_get_socket_cookie(skops);
	if (bpf_sock_hash_update(skops, &lmw_client_socks, &cookie, BPF_NOEXIST))
		count(&lmw_pair_stats, PAIR_CLIENT_FAILED);
	else
		count(&lmw_pair_stats, PAIR_CLIENT);
}

SEC("sockops")
int lmw_pair(struct bpf_sock_ops *skops)
{
	struct conn_key k = {};
	struct own_conn *own;
	struct bpf_sock *sk;
	__u32 i;
	__u64 cookie, *paired;

	if (skops->op != BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB)
		return 1;
	/* The connection as the warden registered it: source = its end. */
	k.sport = bpf_ntohs(skops->remote_port >> 16);
	k.dport = skops->local_port;
	if (skops->family == AF_INET) {
		k.family = AF_INET;
		k.src[0] = skops->remote_ip4;
		k.dst[0] = skops->local_ip4;
	} else if (skops->family == AF_INET6) {
		__u32 r[4], l[4];

		for (i = 0; i < 4; i++) {
			r[i] = skops->remote_ip6[i];
			l[i] = skops->local_ip6[i];
		}
		if (v4mapped(r) && v4mapped(l)) { /* a dual-stack listener */
			k.family = AF_INET;
			k.src[0] = r[3];
			k.dst[0] = l[3];
		} else {
			k.family = AF_INET6;
			for (i = 0; i < 4; i++) {
				k.src[i] = r[i];
				k.dst[i] = l[i];
			}
		}
	} else {
		return 1;
	}
	sk = skops->sk;
	if (!sk)
		return 1;
	/* own is tested once. Where the verifier follows a branch whose
	 * outcome it knows speculatively (a loader without CAP_PERFMON, on
	 * 6.12 but not 6.18), a second test of a pointer it knows to be
	 * NULL sends it down the dereference with a scalar, and it refuses
	 * the program ("R0 invalid mem access 'scalar'"). */
	own = bpf_map_lookup_elem(&lmw_own_conns, &k);
	if (!own) {
		join_client(skops, &k);
		return 1;
	}
	if (!(own->flags & OWN_PAIR))
		return 1;
	cookie = own->cookie;
	/* The cookie first: from the map update on, lmw_reply runs on this
	 * socket's sends (none yet: the replica has not accepted it). */
	paired = bpf_sk_storage_get(&lmw_paired, sk, 0, BPF_SK_STORAGE_GET_F_CREATE);
	if (paired)
		*paired = cookie;
	if (!paired || bpf_sock_hash_update(skops, &lmw_replica_socks, &cookie, BPF_ANY)) {
		count(&lmw_pair_stats, PAIR_FAILED);
		return 1;
	}
	count(&lmw_pair_stats, PAIR_PAIRED);
	return 1;
}

#endif /* LMW_PAIR_H */
