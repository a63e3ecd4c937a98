// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* Where a thread is in user code, from its registers and the sampling table (ranges):
 * shared by the sampler (sample.bpf.c) and the switch-out (sched.bpf.c). */
#ifndef LP_WHERE_BPF_H
#define LP_WHERE_BPF_H

#include "lp.bpf.h"

/* Where a sample is: sync, an op (by index), or outside ops. */
struct where {
	__u32 region; /* enum lp_region */
	__s32 op;     /* op index, or -1 */
};

struct scan_ctx {
	const struct lp_ranges *rg;
	const __u64 *words;
	__u32 nwords;
	__s32 kernel_op; /* the first matmul kernel found, for when no op function is */
	struct where w;
	bool done;
};

static __always_inline bool take(struct scan_ctx *c, int i, bool is_ip)
{
	__u32 k;

	if (i < 0)
		return false;
	k = c->rg->kind[i & (LP_MAX_RANGES - 1)];
	if (k == LP_K_BARRIER || (k == LP_K_RUNTIME && is_ip)) {
		c->w.region = LP_R_BARRIER;
		return true;
	}
	if (k == LP_K_OP) {
		c->w.op = c->rg->op[i & (LP_MAX_RANGES - 1)];
		return true;
	}
	if (k == LP_K_KERNEL && c->kernel_op < 0)
		c->kernel_op = c->rg->op[i & (LP_MAX_RANGES - 1)];
	return false;
}

static long scan_word(__u64 i, void *data)
{
	struct scan_ctx *c = data;
	__u64 w;

	if (i >= c->nwords || i >= LP_STACK_WORDS)
		return 1;
	w = c->words[i];
	if (w < c->rg->lo || w >= c->rg->hi)
		return 0;
	c->done = take(c, range_find(c->rg, w), false);
	return c->done;
}

/* Where a thread is, from its user registers: the range holding the instruction pointer,
 * else the innermost return address in the first nwords words of its stack that lies in an
 * op or barrier function (a matmul kernel's if there is neither). */
static __always_inline struct where classify(const struct lp_ranges *rg, __u64 ip, __u64 sp,
					     __u32 nwords)
{
	struct scan_ctx c = {.rg = rg, .kernel_op = -1, .w = {LP_R_OTHER, -1}};
	__u32 zero = 0;
	__u64 *buf;

	if (!take(&c, range_find(rg, ip), true) && nwords && stack_scan) {
		buf = bpf_map_lookup_elem(&stack_buf, &zero);
		if (buf) {
			/* The stack's top page is present; the rest may not be: read less. */
			if (nwords > SWITCH_WORDS &&
			    !bpf_probe_read_user(buf, LP_STACK_WORDS * 8, (void *)sp))
				c.nwords = LP_STACK_WORDS;
			else if (!bpf_probe_read_user(buf, SWITCH_WORDS * 8, (void *)sp))
				c.nwords = SWITCH_WORDS;
			c.words = buf;
			if (c.nwords)
				bpf_loop(c.nwords, scan_word, &c, 0);
		}
	}
	if (c.w.region == LP_R_OTHER && c.w.op < 0)
		c.w.op = c.kernel_op;
	if (c.w.op >= 0 && rg->op_matmul[c.w.op & (LP_MAX_OPS - 1)])
		c.w.region = LP_R_MATMUL;
	return c.w;
}
#endif /* LP_WHERE_BPF_H */
