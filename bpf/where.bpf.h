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

/* Frames walked by call frame information per classification, before the scan takes
 * over from the last one reached: an op is two to five frames above its kernels. */
#define LP_UNWIND_FRAMES 16

enum uw_state {
	UW_WALKING,
	UW_DONE,   /* the walk settled it: an op, a barrier, or none in the frames */
	UW_FAILED, /* no rule at this frame: scan the stack from it */
};

struct scan_ctx {
	const struct lp_ranges *rg;
	const __u64 *words;
	__u32 nwords;
	__s32 kernel_op; /* the first matmul kernel found, for when no op function is */
	struct where w;
	bool done;
	/* the frame being unwound */
	__u64 ip, sp, bp;
	bool bp_ok;
	__u32 uw_state; /* enum uw_state */
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

/* The object with unwind rows whose mapping holds addr, or -1. */
static __always_inline int uw_obj(const struct lp_ranges *rg, __u64 addr)
{
	for (__u32 i = 0; i < LP_MAX_UNWIND; i++) {
		if (i >= rg->nuw)
			break;
		if (addr >= rg->uw[i].start && addr < rg->uw[i].end)
			return (int)i;
	}
	return -1;
}

/* The row covering file offset off of object o: the last one at or below it. */
static __always_inline const struct lp_unwind_row *uw_row(const struct lp_unwind_obj *o, __u64 off)
{
	__u32 lo = 0, hi = o->n, mid, idx;
	const struct lp_unwind_row *r;

	if (off > 0xffffffffULL)
		return NULL;
	/* 19 halvings cover the whole pool (LP_UNWIND_ROWS = 2^18 rows). */
	for (int i = 0; i < 19 && lo < hi; i++) {
		mid = lo + (hi - lo) / 2;
		idx = o->first + mid;
		r = bpf_map_lookup_elem(&unwind_rows, &idx);
		if (!r)
			return NULL;
		if (r->off <= off)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == 0 || lo < hi)
		return NULL;
	idx = o->first + lo - 1;
	return bpf_map_lookup_elem(&unwind_rows, &idx);
}

/* One frame: from c->ip/sp/bp to its caller's, and the caller's return address classified
 * as the scan classifies a word (a return address points after its call: the call is at
 * ip - 1). */
static long unwind_step(__u64 i, void *data)
{
	struct scan_ctx *c = data;
	const struct lp_unwind_row *row;
	const struct lp_unwind_obj *o;
	__u64 cfa, ra = 0, bp = 0;
	int k;

	k = uw_obj(c->rg, c->ip);
	if (k < 0) {
		/* The first frame outside the objects with rows: a libc or libm leaf (memcpy,
		 * expf) has its caller's return address on top of the stack. Deeper, the walk
		 * has left ggml's code with no op found. */
		if (i == 0 && !bpf_probe_read_user(&ra, sizeof(ra), (void *)c->sp) &&
		    uw_obj(c->rg, ra) >= 0) {
			c->sp += 8;
			c->ip = ra;
			goto caller;
		}
		c->uw_state = i == 0 ? UW_FAILED : UW_DONE;
		return 1;
	}
	o = &c->rg->uw[k & (LP_MAX_UNWIND - 1)];
	row = uw_row(o, c->ip - o->bias - (i ? 1 : 0));
	if (!row || row->cfa_reg == LP_UW_NONE || (row->cfa_reg == LP_UW_RBP && !c->bp_ok)) {
		c->uw_state = UW_FAILED;
		return 1;
	}
	cfa = (row->cfa_reg == LP_UW_RSP ? c->sp : c->bp) + row->cfa_off;
	if (bpf_probe_read_user(&ra, sizeof(ra), (void *)(cfa - 8))) {
		c->uw_state = UW_FAILED;
		return 1;
	}
	if (row->rbp == LP_UW_RBP_LOST)
		c->bp_ok = false;
	else if (row->rbp && bpf_probe_read_user(&bp, sizeof(bp), (void *)(cfa + 8 * row->rbp)))
		c->bp_ok = false;
	else if (row->rbp)
		c->bp = bp;
	c->sp = cfa;
	c->ip = ra;
caller:
	if (!ra) {
		c->uw_state = UW_DONE; /* the outermost frame */
		return 1;
	}
	if (ra - 1 >= c->rg->lo && ra - 1 < c->rg->hi &&
	    take(c, range_find(c->rg, ra - 1), false)) {
		c->uw_state = UW_DONE;
		return 1;
	}
	return 0;
}

/* Where a thread is, from its user registers: the range holding the instruction pointer;
 * else the innermost op or barrier function among its callers, found by walking its
 * frames by call frame information where the code has it; where it has none, the
 * innermost return address in the first nwords words of the stack that lies in an op or
 * barrier function (a matmul kernel's if there is neither). */
static __always_inline struct where classify(const struct lp_ranges *rg, __u64 ip, __u64 sp,
					     __u64 bp, __u32 nwords)
{
	struct scan_ctx c = {.rg = rg, .kernel_op = -1, .w = {LP_R_OTHER, -1}};
	__u32 zero = 0;
	__u64 *buf;

	if (take(&c, range_find(rg, ip), true) || !nwords || !stack_scan)
		goto out;
	c.uw_state = UW_FAILED;
	if (unwind_cfi && rg->nuw) {
		c.ip = ip;
		c.sp = sp;
		c.bp = bp;
		c.bp_ok = true;
		c.uw_state = UW_WALKING;
		bpf_loop(LP_UNWIND_FRAMES, unwind_step, &c, 0);
		if (c.uw_state == UW_WALKING)
			c.uw_state = UW_FAILED;
		sp = c.sp;
	}
	if (c.uw_state == UW_DONE)
		goto out;
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
out:
	if (c.w.region == LP_R_OTHER && c.w.op < 0)
		c.w.op = c.kernel_op;
	if (c.w.op >= 0 && rg->op_matmul[c.w.op & (LP_MAX_OPS - 1)])
		c.w.region = LP_R_MATMUL;
	return c.w;
}

#endif /* LP_WHERE_BPF_H */
