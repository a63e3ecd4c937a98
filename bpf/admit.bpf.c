// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* Admission of TCP connections to llmprofd's own listener, in the connecting process's
 * connect(2): each uid but root may open LP_ADMIT_BURST connections at once and
 * LP_ADMIT_RATE a second after that; past it, connect(2) fails with EPERM in the caller, at
 * the caller's cost. A user who opens connections as fast as they can cannot fill the
 * listener's backlog, where root's and a Prometheus server's connections wait their turn:
 * in the daemon's loop, refusing each one would cost more than the user spends making it
 * (daemon/serving/admit.c loads this; server.c then holds each uid to its share of open ones). */
#include "vmlinux.h"
#include <bpf/bpf_endian.h>
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#define LP_AF_INET 2
#define LP_AF_INET6 10
#define LP_SOCK_STREAM 1

/* The listener's address: family, port (network order), and the address (zero: any). */
struct lp_admit_addr {
	__u32 family;
	__u32 port;
	__u32 addr[4];
};

/* A uid's credit, in nanoseconds of refill: LP_ADMIT_BURST connections' worth at most. */
struct lp_admit_credit {
	__u64 at;     /* when the credit was last brought up to date */
	__u64 credit; /* ns; a connection costs NSEC_PER_SEC / rate */
	__u64 refused;
};

/* Set by the loader, and again at a reload (SIGHUP). */
volatile __u32 lp_admit_rate = 64;  /* a second, after the burst */
volatile __u32 lp_admit_burst = 64; /* at once */

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4);
	__type(key, struct lp_admit_addr);
	__type(value, __u8);
} lp_admit_listeners SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct lp_admit_credit);
} lp_admit_uids SEC(".maps");

static bool ours(struct lp_admit_addr *a)
{
	if (bpf_map_lookup_elem(&lp_admit_listeners, a))
		return true;
	/* A listener on the wildcard address takes connections to any of the host's. */
	a->addr[0] = a->addr[1] = a->addr[2] = a->addr[3] = 0;
	return bpf_map_lookup_elem(&lp_admit_listeners, a) != NULL;
}

static int admit(void)
{
	__u32 uid = (__u32)bpf_get_current_uid_gid();
	__u64 now = bpf_ktime_get_ns(), cost = 1000000000ULL / (lp_admit_rate ? lp_admit_rate : 1);
	__u64 full = cost * lp_admit_burst;
	struct lp_admit_credit *c, fresh = {.at = now, .credit = full - cost};

	if (uid == 0)
		return 1;
	c = bpf_map_lookup_elem(&lp_admit_uids, &uid);
	if (!c) {
		bpf_map_update_elem(&lp_admit_uids, &uid, &fresh, BPF_NOEXIST);
		return 1;
	}
	/* Racy between CPUs by a connection or two: a bound, not an account. */
	c->credit += now - c->at;
	if (c->credit > full)
		c->credit = full;
	c->at = now;
	if (c->credit < cost) {
		__sync_fetch_and_add(&c->refused, 1);
		return 0;
	}
	c->credit -= cost;
	return 1;
}

SEC("cgroup/connect4")
int lp_admit_connect4(struct bpf_sock_addr *ctx)
{
	struct lp_admit_addr a = {.family = LP_AF_INET};

	if (ctx->type != LP_SOCK_STREAM)
		return 1;
	a.port = ctx->user_port;
	a.addr[0] = ctx->user_ip4;
	return ours(&a) ? admit() : 1;
}

SEC("cgroup/connect6")
int lp_admit_connect6(struct bpf_sock_addr *ctx)
{
	struct lp_admit_addr a = {.family = LP_AF_INET6};

	if (ctx->type != LP_SOCK_STREAM)
		return 1;
	a.port = ctx->user_port;
	a.addr[0] = ctx->user_ip6[0];
	a.addr[1] = ctx->user_ip6[1];
	a.addr[2] = ctx->user_ip6[2];
	a.addr[3] = ctx->user_ip6[3];
	return ours(&a) ? admit() : 1;
}
