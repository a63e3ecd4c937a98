// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* The sampler: cpu-clock samples of tracked processes, each classified once by where.bpf.h
 * into sync, an op, or outside ops, counted per process and per op. */
#include "lp.bpf.h"
#include "where.bpf.h"

/* The sample's call stack to "stacks", with what it was (a profile window is open). Kernel
 * frames where it was taken in the kernel, the user frames walked whole; sent without a
 * wake-up: the daemon reads the ring on its own clock. */
static __always_inline void send_stack(struct bpf_perf_event_data *ctx, const struct lp_ranges *rg,
				       const struct uregs *u, const struct lp_op_samples *os,
				       struct where w, __u64 id, bool in_kernel)
{
	struct lp_stack_rec *rec;
	__u32 zero = 0, flags = 0, nu, nk = 0, n;
	long got;

	rec = bpf_map_lookup_elem(&stack_rec, &zero);
	if (!rec)
		return;
	rec->ts = bpf_ktime_get_ns();
	rec->tgid = id >> 32;
	rec->tid = (__u32)id;
	rec->op = (__s16)w.op;
	rec->region = (__u8)w.region;
	rec->phase = !os		    ? LP_PHASE_OUTSIDE
		     : os->gen_depth > 0    ? LP_PHASE_GENERATION
		     : os->decode_depth > 0 ? LP_PHASE_PROMPT
					    : LP_PHASE_OUTSIDE;
	if (in_kernel) {
		got = bpf_get_stack(ctx, rec->ip, LP_STACK_KERNEL_MAX * 8, 0);
		nk = got > 0 ? (__u32)got / 8 : 0;
	}
	if (nk > LP_STACK_KERNEL_MAX)
		nk = LP_STACK_KERNEL_MAX;
	nu = walk_stack(rg, u, &rec->ip[nk & (LP_STACK_KERNEL_MAX - 1)], &flags);
	if (nu > LP_STACK_USER_MAX)
		nu = LP_STACK_USER_MAX;
	rec->nkernel = (__u8)nk;
	rec->nuser = (__u8)nu;
	rec->flags = (__u8)flags;
	n = nk + nu;
	if (n > LP_STACK_KERNEL_MAX + LP_STACK_USER_MAX)
		n = LP_STACK_KERNEL_MAX + LP_STACK_USER_MAX;
	if (bpf_ringbuf_output(&stacks, rec, LP_STACK_REC_HDR + (__u64)n * 8, BPF_RB_NO_WAKEUP))
		__sync_fetch_and_add(&stacks_lost, 1);
}

SEC("perf_event")
int lp_sample(struct bpf_perf_event_data *ctx)
{
	__u64 id = current_ids();
	__u32 tgid = id >> 32;
	const struct lp_ranges *rg;
	struct lp_op_samples *os;
	struct lp_proc_stats *p;
	struct lp_thread *t;
	struct lp_walk_note *note;
	struct uregs u = {0};
	__u32 zero = 0;
	struct pt_regs *regs;
	struct where w;
	bool gen, in_kernel;

	if (!maybe_ours(tgid))
		return 0;
	/* A thread in do_exit() runs the kernel's exit path, not the program's. And once the
	 * last one has copied the process's counters into its final record (lifecycle), a
	 * sample counted here would reach op_samples and not that record: ops and counters
	 * would disagree by it. Every thread is PF_EXITING before the group is dead. */
	if (bpf_get_current_task_btf()->flags & PF_EXITING)
		return 0;
	rg = bpf_map_lookup_elem(&ranges, &tgid);
	if (!rg)
		return 0;
	p = bpf_map_lookup_elem(&procs, &tgid);
	if (!p)
		return 0;
	/* In the kernel (a syscall, a fault): classify where it entered from user space. */
	u.ip = PT_REGS_IP(&ctx->regs);
	u.sp = PT_REGS_SP(&ctx->regs);
	u.bp = PT_REGS_FP(&ctx->regs);
	u.r10 = ctx->regs.r10;
	u.r13 = ctx->regs.r13;
	in_kernel = (__s64)u.ip < 0;
	if (in_kernel) {
		regs = (struct pt_regs *)bpf_task_pt_regs(bpf_get_current_task_btf());
		u.ip = PT_REGS_IP_CORE(regs);
		u.sp = PT_REGS_SP_CORE(regs);
		u.bp = PT_REGS_FP_CORE(regs);
		u.r10 = BPF_CORE_READ(regs, r10);
		u.r13 = BPF_CORE_READ(regs, r13);
	}
	__sync_fetch_and_add(&p->ctr[LP_C_SAMPLES], 1);
	w = classify(rg, &u, LP_STACK_WORDS);
	if (w.region == LP_R_MATMUL)
		__sync_fetch_and_add(&p->ctr[LP_C_SAMPLES_MATMUL], 1);
	else if (w.region == LP_R_BARRIER)
		__sync_fetch_and_add(&p->ctr[LP_C_SAMPLES_BARRIER], 1);
	/* Per thread: which threads wait at barriers and which one they wait for. Only a
	 * thread the scheduler hook has seen (its entry is made there). */
	t = bpf_map_lookup_elem(&threads, &(__u32){(__u32)id});
	if (t && t->tgid == tgid) {
		t->samples++;
		if (w.region == LP_R_BARRIER)
			t->samples_sync++;
		if (w.region == LP_R_BARRIER || w.op >= 0)
			t->samples_ggml++;
	}
	os = bpf_map_lookup_elem(&op_samples, &tgid);
	if (profiles)
		send_stack(ctx, rg, &u, os, w, id, in_kernel);
	if (!os)
		return 0;
	gen = os->gen_depth > 0;
	__sync_fetch_and_add(&os->total, 1);
	/* How it was placed: the unwind's quality (abi.h). */
	note = bpf_map_lookup_elem(&walk_note, &zero);
	if (note) {
		__sync_fetch_and_add(&os->how[note->how & (LP_HOW_NR - 1)], 1);
		if (note->walked && note->how != LP_HOW_CFI && note->how != LP_HOW_IP) {
			__sync_fetch_and_add(&os->uw_fail[note->fail & 15], 1);
			__sync_fetch_and_add(&os->uw_fail_obj[note->obj & (2 * LP_MAX_UNWIND - 1)],
					     1);
		}
	}
	if (gen)
		__sync_fetch_and_add(&os->gen_total, 1);
	if (w.region == LP_R_BARRIER) {
		__sync_fetch_and_add(&os->sync, 1);
		if (gen)
			__sync_fetch_and_add(&os->gen_sync, 1);
	} else if (w.op >= 0) {
		__sync_fetch_and_add(&os->all[w.op & (LP_MAX_OPS - 1)], 1);
		if (gen)
			__sync_fetch_and_add(&os->gen[w.op & (LP_MAX_OPS - 1)], 1);
	}
	return 0;
}
