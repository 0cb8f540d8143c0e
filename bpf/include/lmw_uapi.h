/* SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause) */
/*
 * lmw_uapi.h: the part of the kernel's BPF interface that LM Warden's
 * programs use, declared here so that building them needs no kernel or
 * libbpf headers from the host (`go generate ./bpf` gives the same object
 * on every machine with the same clang). Every layout and number below is
 * the kernel's UAPI (include/uapi/linux/bpf.h): context structs in their
 * exact field order, map types, flags, and helper IDs. Only what the
 * programs use is declared.
 */
#ifndef LMW_UAPI_H
#define LMW_UAPI_H

typedef unsigned char __u8;
typedef unsigned short __u16;
typedef unsigned int __u32;
typedef unsigned long long __u64;
typedef signed char __s8;
typedef short __s16;
typedef int __s32;
typedef long long __s64;
typedef __u16 __be16;
typedef __u32 __be32;

#define AF_INET 2
#define AF_INET6 10
#define IPPROTO_TCP 6

/* Program return codes of socket programs. */
enum sk_action {
	SK_DROP = 0,
	SK_PASS,
};

/* Map types (enum bpf_map_type). */
#define BPF_MAP_TYPE_HASH 1
#define BPF_MAP_TYPE_ARRAY 2
#define BPF_MAP_TYPE_PERCPU_ARRAY 6
#define BPF_MAP_TYPE_SOCKMAP 15
#define BPF_MAP_TYPE_SOCKHASH 18
#define BPF_MAP_TYPE_SK_STORAGE 24
#define BPF_MAP_TYPE_RINGBUF 27

/* Map update and creation flags. */
#define BPF_ANY 0
#define BPF_NOEXIST 1
#define BPF_F_NO_PREALLOC 1
#define BPF_SK_STORAGE_GET_F_CREATE 1
#define BPF_F_INGRESS 1

/* sock_ops callbacks (the op field). */
#define BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB 4
#define BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB 5

#define __bpf_md_ptr(type, name) \
	union {                  \
		type name;       \
		__u64 : 64;      \
	} __attribute__((aligned(8)))

struct bpf_sock {
	__u32 bound_dev_if;
	__u32 family;
	__u32 type;
	__u32 protocol;
	__u32 mark;
	__u32 priority;
	__u32 src_ip4;
	__u32 src_ip6[4];
	__u32 src_port;
	__be16 dst_port;
	__u16 : 16;
	__u32 dst_ip4;
	__u32 dst_ip6[4];
	__u32 state;
	__s32 rx_queue_mapping;
};

struct __sk_buff {
	__u32 len;
	__u32 pkt_type;
	__u32 mark;
	__u32 queue_mapping;
	__u32 protocol;
	__u32 vlan_present;
	__u32 vlan_tci;
	__u32 vlan_proto;
	__u32 priority;
	__u32 ingress_ifindex;
	__u32 ifindex;
	__u32 tc_index;
	__u32 cb[5];
	__u32 hash;
	__u32 tc_classid;
	__u32 data;
	__u32 data_end;
	__u32 napi_id;
	__u32 family;
	__u32 remote_ip4;
	__u32 local_ip4;
	__u32 remote_ip6[4];
	__u32 local_ip6[4];
	__u32 remote_port;
	__u32 local_port;
	__u32 data_meta;
	__bpf_md_ptr(void *, flow_keys);
	__u64 tstamp;
	__u32 wire_len;
	__u32 gso_segs;
	__bpf_md_ptr(struct bpf_sock *, sk);
	__u32 gso_size;
	__u8 tstamp_type;
	__u32 : 24;
	__u64 hwtstamp;
};

struct sk_msg_md {
	__bpf_md_ptr(void *, data);
	__bpf_md_ptr(void *, data_end);
	__u32 family;
	__u32 remote_ip4;    /* network order */
	__u32 local_ip4;     /* network order */
	__u32 remote_ip6[4]; /* network order */
	__u32 local_ip6[4];  /* network order */
	__u32 remote_port;   /* network order */
	__u32 local_port;    /* host order */
	__u32 size;          /* bytes of this message */
	__bpf_md_ptr(struct bpf_sock *, sk);
};

struct bpf_sock_ops {
	__u32 op;
	union {
		__u32 args[4];
		__u32 reply;
		__u32 replylong[4];
	};
	__u32 family;
	__u32 remote_ip4;    /* network order */
	__u32 local_ip4;     /* network order */
	__u32 remote_ip6[4]; /* network order */
	__u32 local_ip6[4];  /* network order */
	__u32 remote_port;   /* network order, in the upper 16 bits */
	__u32 local_port;    /* host order */
	__u32 is_fullsock;
	__u32 snd_cwnd;
	__u32 srtt_us;
	__u32 bpf_sock_ops_cb_flags;
	__u32 state;
	__u32 rtt_min;
	__u32 snd_ssthresh;
	__u32 rcv_nxt;
	__u32 snd_nxt;
	__u32 snd_una;
	__u32 mss_cache;
	__u32 ecn_flags;
	__u32 rate_delivered;
	__u32 rate_interval_us;
	__u32 packets_out;
	__u32 retrans_out;
	__u32 total_retrans;
	__u32 segs_in;
	__u32 data_segs_in;
	__u32 segs_out;
	__u32 data_segs_out;
	__u32 lost_out;
	__u32 sacked_out;
	__u32 sk_txhash;
	__u64 bytes_received;
	__u64 bytes_acked;
	__bpf_md_ptr(struct bpf_sock *, sk);
	__bpf_md_ptr(void *, skb_data);
	__bpf_md_ptr(void *, skb_data_end);
	__u32 skb_len;
	__u32 skb_tcp_flags;
};

struct bpf_sk_lookup {
	union {
		__bpf_md_ptr(struct bpf_sock *, sk);
		__u64 cookie;
	};
	__u32 family;
	__u32 protocol;
	__u32 remote_ip4;    /* network order */
	__u32 remote_ip6[4]; /* network order */
	__be16 remote_port;  /* network order */
	__u16 : 16;
	__u32 local_ip4;     /* network order */
	__u32 local_ip6[4];  /* network order */
	__u32 local_port;    /* host order */
	__u32 ingress_ifindex;
};

/* Section and map-definition macros, as libbpf and cilium/ebpf read them. */
#define SEC(name) __attribute__((section(name), used))
#define __uint(name, val) int (*name)[val]
#define __type(name, val) typeof(val) *name
#ifndef __always_inline
#define __always_inline inline __attribute__((always_inline))
#endif
#define __ksym __attribute__((section(".ksyms")))

#define bpf_ntohs(x) __builtin_bswap16(x)

/* Helpers, by their number in enum bpf_func_id. */
static void *(*bpf_map_lookup_elem)(void *map, const void *key) = (void *)1;
static long (*bpf_map_update_elem)(void *map, const void *key, const void *value, __u64 flags) = (void *)2;
static long (*bpf_map_delete_elem)(void *map, const void *key) = (void *)3;
static __u64 (*bpf_ktime_get_ns)(void) = (void *)5;
static long (*bpf_skb_load_bytes)(const void *skb, __u32 offset, void *to, __u32 len) = (void *)26;
static __u64 (*bpf_get_socket_cookie)(void *ctx) = (void *)46;
static long (*bpf_skb_adjust_room)(struct __sk_buff *skb, __s32 len_diff, __u32 mode, __u64 flags) = (void *)50;
static long (*bpf_msg_apply_bytes)(struct sk_msg_md *msg, __u32 bytes) = (void *)61;
static long (*bpf_msg_pull_data)(struct sk_msg_md *msg, __u32 start, __u32 end, __u64 flags) = (void *)63;
static long (*bpf_sock_hash_update)(struct bpf_sock_ops *skops, void *map, void *key, __u64 flags) = (void *)70;
static long (*bpf_msg_redirect_hash)(struct sk_msg_md *msg, void *map, void *key, __u64 flags) = (void *)71;
static long (*bpf_sk_redirect_hash)(struct __sk_buff *skb, void *map, void *key, __u64 flags) = (void *)72;
static long (*bpf_sk_release)(void *sock) = (void *)86;
static void *(*bpf_sk_storage_get)(void *map, void *sk, void *value, __u64 flags) = (void *)107;
static long (*bpf_probe_read_kernel)(void *dst, __u32 size, const void *unsafe_ptr) = (void *)113;
static long (*bpf_sk_assign)(void *ctx, void *sk, __u64 flags) = (void *)124;
static long (*bpf_ringbuf_output)(void *ringbuf, void *data, __u64 size, __u64 flags) = (void *)130;
static struct tcp_sock *(*bpf_skc_to_tcp_sock)(void *sk) = (void *)137;
static long (*bpf_loop)(__u32 nr_loops, void *callback_fn, void *callback_ctx, __u64 flags) = (void *)181;

#endif /* LMW_UAPI_H */
