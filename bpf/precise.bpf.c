// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* Precise mode: every matmul, barrier and op call of a process while user space has it
 * switched on (uprobes attached by daemon/engine/precise.c). */
#include "lp.bpf.h"

/* The calling thread's state if its process is in precise mode, reset when a new window
 * began since the thread was last seen: calls in flight then were half-observed. */
static __always_inline struct lp_thread *precise_thread(__u32 *tgid_out)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32;
	struct lp_precise *pr;
	struct lp_thread *t;

	pr = bpf_map_lookup_elem(&precise, &tgid);
	if (!pr)
		return NULL;
	t = thread_get((__u32)id, tgid);
	if (!t)
		return NULL;
	if (t->pgen != pr->gen) {
		t->pgen = pr->gen;
		t->mm.depth = 0;
		t->bar.depth = 0;
		t->op.depth = 0;
	}
	*tgid_out = tgid;
	return t;
}

/* Whether a generation decode (one token) is in flight in the process: the calls that
 * return then make the exact per-token split. */
static __always_inline bool generating(__u32 tgid)
{
	struct lp_op_samples *os = bpf_map_lookup_elem(&op_samples, &tgid);

	return os && os->gen_depth > 0;
}

static __always_inline void call_enter(struct lp_call *c)
{
	if (c->depth++ == 0) {
		c->since = bpf_ktime_get_ns();
		c->inner_ns = 0;
		c->off_ns = 0;
	}
}

/* Wall time of the call when the outermost one returns, else 0. */
static __always_inline __u64 call_exit(struct lp_call *c)
{
	if (!c->depth || --c->depth)
		return 0;
	return bpf_ktime_get_ns() - c->since;
}

SEC("uprobe")
int BPF_KPROBE(lp_matmul_enter)
{
	struct lp_thread *t;
	__u32 tgid;

	t = precise_thread(&tgid);
	if (t)
		call_enter(&t->mm);
	return 0;
}

SEC("uretprobe")
int BPF_KRETPROBE(lp_matmul_exit)
{
	struct lp_proc_stats *p;
	struct lp_thread *t;
	__u64 d, excl;
	__u32 tgid;

	t = precise_thread(&tgid);
	if (!t || !(d = call_exit(&t->mm)) || !(p = bpf_map_lookup_elem(&procs, &tgid)))
		return 0;
	excl = d > t->mm.inner_ns + t->mm.off_ns ? d - t->mm.inner_ns - t->mm.off_ns : 0;
	__sync_fetch_and_add(&p->ctr[LP_C_MATMUL_CALLS], 1);
	__sync_fetch_and_add(&p->ctr[LP_C_MATMUL_NS], d);
	__sync_fetch_and_add(&p->ctr[LP_C_MATMUL_EXCL_ONCPU_NS], excl);
	hist_add(&p->hist[LP_H_MATMUL], d);
	return 0;
}

SEC("uprobe")
int BPF_KPROBE(lp_barrier_enter)
{
	struct lp_thread *t;
	__u32 tgid;

	t = precise_thread(&tgid);
	if (!t)
		return 0;
	call_enter(&t->bar);
	if (t->bar.depth == 1)
		rec_emit(tgid, (__u32)bpf_get_current_pid_tgid(), LP_REC_BARRIER_BEGIN, 0);
	return 0;
}

SEC("uretprobe")
int BPF_KRETPROBE(lp_barrier_exit)
{
	struct lp_proc_stats *p;
	struct lp_thread *t;
	__u64 d, off;
	__u32 tgid;

	t = precise_thread(&tgid);
	if (!t || !(d = call_exit(&t->bar)) || !(p = bpf_map_lookup_elem(&procs, &tgid)))
		return 0;
	off = t->bar.off_ns < d ? t->bar.off_ns : d;
	rec_emit(tgid, (__u32)bpf_get_current_pid_tgid(), LP_REC_BARRIER_END, 0);
	__sync_fetch_and_add(&p->ctr[LP_C_BARRIER_CALLS], 1);
	__sync_fetch_and_add(&p->ctr[LP_C_BARRIER_NS], d);
	__sync_fetch_and_add(&p->ctr[LP_C_BARRIER_OFF_NS], off);
	if (generating(tgid))
		__sync_fetch_and_add(&p->ctr[LP_C_BARRIER_GEN_ONCPU_NS], d - off);
	hist_add(&p->hist[LP_H_BARRIER], d);
	if (t->mm.depth)
		t->mm.inner_ns += d;
	if (t->op.depth)
		t->op.inner_ns += d;
	return 0;
}

/* An op function: which op comes from the sampling table, by the probe's address. */
SEC("uprobe")
int BPF_KPROBE(lp_op_enter)
{
	const struct lp_ranges *rg;
	struct lp_thread *t;
	__u32 tgid;
	int i;

	t = precise_thread(&tgid);
	if (!t)
		return 0;
	if (t->op.depth == 0) {
		rg = bpf_map_lookup_elem(&ranges, &tgid);
		i = rg ? range_find(rg, PT_REGS_IP(ctx)) : -1;
		if (i < 0 || rg->kind[i & (LP_MAX_RANGES - 1)] != LP_K_OP)
			return 0;
		t->op_idx = rg->op[i & (LP_MAX_RANGES - 1)];
	}
	call_enter(&t->op);
	if (t->op.depth == 1)
		rec_emit(tgid, (__u32)bpf_get_current_pid_tgid(), LP_REC_OP_BEGIN, t->op_idx);
	return 0;
}

SEC("uretprobe")
int BPF_KRETPROBE(lp_op_exit)
{
	struct lp_op_key key = {};
	struct lp_op_precise *s;
	struct lp_thread *t;
	__u32 zero = 0;
	__u64 d, own;

	t = precise_thread(&key.tgid);
	if (!t || !(d = call_exit(&t->op)))
		return 0;
	key.op = t->op_idx;
	rec_emit(key.tgid, (__u32)bpf_get_current_pid_tgid(), LP_REC_OP_END, key.op);
	s = bpf_map_lookup_elem(&op_precise, &key);
	if (!s) {
		s = bpf_map_lookup_elem(&op_precise_init, &zero);
		if (!s)
			return 0;
		/* Another thread may have made it meanwhile: either way, look it up. */
		bpf_map_update_elem(&op_precise, &key, s, BPF_NOEXIST);
		s = bpf_map_lookup_elem(&op_precise, &key);
		if (!s)
			return 0;
	}
	own = d > t->op.inner_ns + t->op.off_ns ? d - t->op.inner_ns - t->op.off_ns : 0;
	__sync_fetch_and_add(&s->calls, 1);
	__sync_fetch_and_add(&s->ns, d);
	__sync_fetch_and_add(&s->oncpu_ns, own);
	hist_add(&s->hist, d);
	if (generating(key.tgid)) {
		__sync_fetch_and_add(&s->gen_calls, 1);
		__sync_fetch_and_add(&s->gen_oncpu_ns, own);
	}
	return 0;
}
