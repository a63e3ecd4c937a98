// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* A tracked thread's off-CPU stretch, from the switch-out that opened it to the switch-in
 * that ends it: shared by the scheduler collector (sched.bpf.c), which sees both, and the
 * precise probes (precise.bpf.c), which end a stretch whose switch-in the kernel did not
 * trace. */
#ifndef LP_OFFCPU_BPF_H
#define LP_OFFCPU_BPF_H

#include "acct.bpf.h"
#include "futex.bpf.h"

/* Whether the run queue of a task can be found from it: through its CFS run queue, which
 * points back to it where the kernel groups tasks (CONFIG_FAIR_GROUP_SCHED, the cpu
 * controller). The per-CPU "runqueues" cannot serve: a kernel without KALLSYMS_ALL does
 * not give a program its address (seen here). */
static __always_inline bool rq_reachable(struct task_struct *task)
{
	return bpf_core_field_exists(task->se.cfs_rq);
}

/* The clock of the run queue task is on, as the kernel's sched_info reads it. */
static __always_inline __u64 rq_clock_of(struct task_struct *task)
{
	struct cfs_rq *cfs;

	if (!rq_reachable(task))
		return 0;
	cfs = BPF_CORE_READ(task, se.cfs_rq);
	return cfs ? BPF_CORE_READ(cfs, rq, clock) : 0;
}

/* Adds a preempted thread's wait until it ran again to the one that preempted it. */
static __always_inline void preemptor_wait(__u32 tgid, struct lp_thread *t, __u64 d)
{
	struct lp_preempt_key k = {.tgid = tgid, .by_tgid = t->preempted_by};
	struct lp_preempt_val *v = bpf_map_lookup_elem(&preemptors, &k);

	if (v)
		__sync_fetch_and_add(&v->wait_ns, d);
}

/* A thread's off-CPU stretch of d ns is over: as preempted or blocked, by what its
 * switch-out recorded, standing for t->stretch_w stretches; counted in hp, this CPU's
 * part of its process's figures. */
static __always_inline void off_end(struct lp_proc_stats *hp, struct lp_thread *t, __u32 tgid,
				    __u64 d)
{
	__u32 w = t->stretch_w;

	if (t->off_preempted) {
		t->off_preempted_ns += d * w;
		hist_addw(&hp->hist[LP_H_OFF_PREEMPTED], d, w);
		preemptor_wait(tgid, t, d * w);
	} else {
		t->off_blocked_ns += d * w;
		hist_addw(&hp->hist[LP_H_OFF_BLOCKED], d, w);
	}
	if (t->off_region == LP_R_BARRIER)
		__sync_fetch_and_add(&hp->ctr[LP_C_BARRIER_OFF_EST_NS], d * w);
	/* Precise mode (every stretch taken, w = 1): off-CPU time inside the innermost
	 * probed call. */
	if (t->bar.depth) {
		t->bar.off_ns += d;
	} else {
		if (t->mm.depth)
			t->mm.off_ns += d;
		if (t->op.depth)
			t->op.off_ns += d;
	}
}

/* The stretch that t's last switch-out opened ended at "at" (0: unknown), with no
 * sched_switch naming t as next. Seen on 6.18 in a VM whose agent's threads never appear
 * as a switch's prev (perf record -e sched:sched_switch shows the same): the switch from
 * one of them to a tracked thread is not traced, about one in 300 switch-ins of a thread
 * sharing its CPU with the agent. */
static __always_inline void off_end_unseen(struct lp_proc_stats *p, struct lp_proc_stats *hp,
					   struct lp_thread *t, __u32 tgid, __u64 at)
{
	if (at > t->off_since)
		off_end(hp, t, tgid, at - t->off_since);
	if (futex_from_sched && t->futex_since) {
		if (at > t->futex_since)
			futex_wait_done(p, hp, t, at, 0, t->stretch_w, 0);
		t->futex_since = 0;
	}
	__sync_fetch_and_add(&hp->ctr[LP_C_SWITCH_IN_UNSEEN], t->stretch_w);
	t->off_since = 0;
}

#endif
