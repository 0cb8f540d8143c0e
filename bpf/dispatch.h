/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * dispatch.h: lmw_dispatch, the sk_lookup program. A connection to a
 * frontend {address, port} goes to the shim's listening socket; the
 * warden's own connections, and every connection while the shim is gone,
 * go where the kernel would send them (fail-open: vLLM's own listener).
 */
#ifndef LMW_DISPATCH_H
#define LMW_DISPATCH_H

SEC("sk_lookup")
int lmw_dispatch(struct bpf_sk_lookup *ctx)
{
	struct frontend_key key = {};
	struct conn_key own = {};
	struct frontend_value *fe;
	struct bpf_sock *sk;
	long err;

	if (ctx->protocol != IPPROTO_TCP)
		return SK_PASS;
	count(&lmw_dispatch_stats, DISPATCH_LOOKUPS);

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
		count(&lmw_dispatch_stats, DISPATCH_OWN);
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
	fe = frontend_of(&key);
	if (!fe) {
		count(&lmw_dispatch_stats, DISPATCH_MISS);
		return SK_PASS;
	}
	sk = bpf_map_lookup_elem(&lmw_listeners, &fe->slot);
	if (!sk) {
		/* the shim is gone: the port's own listener answers */
		count(&lmw_dispatch_stats, DISPATCH_NO_LISTENER);
		return SK_PASS;
	}
	err = bpf_sk_assign(ctx, sk, 0); /* on error, fail open as well */
	bpf_sk_release(sk);
	count(&lmw_dispatch_stats, err ? DISPATCH_FAILED_ASSIGN : DISPATCH_ASSIGNED);
	return SK_PASS;
}

#endif /* LMW_DISPATCH_H */
