// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* The scheduler collector: on-CPU time, run-queue delay, off-CPU time (preempted or
 * blocked, and in a barrier or not), context switches and migrations of tracked threads,
 * and who preempted them, from sched_switch, sched_wakeup and sched_wakeup_new. Each exists as a tp_btf and a
 * raw_tp program with the same body; user space autoloads one set after probing. Untracked tasks cost one
 * array load by tgid per task involved (maybe_ours). */
#include "futex.bpf.h"
#include "where.bpf.h"

/* On-CPU time and run-queue delay by the kernel's own account, the figures of
 * /proc/PID/task/TID/schedstat, where the kernel keeps sched_info (CONFIG_SCHED_INFO).
 * Timed from the tracepoints instead, a thread that blocks and wakes thousands of times a
 * second read 40 % low on CPU and 6 times high on the run queue on a VM: the same boundary
 * falls microseconds apart in the two accounts, every slice. */
static __always_inline bool kernel_accounting(struct task_struct *task)
{
	return bpf_core_field_exists(task->sched_info.run_delay);
}

/* A field of a task: a plain load where the task is trusted (tp_btf), else a probe read (a
 * helper call, which for an untracked task would be most of what a switch costs us; on the
 * tracked path the probe reads were a third of a pipe round trip's program time, 823 ns
 * against 563 with plain loads: bench/progcost.py). */
#define TASK_READ(trusted, task, field) ((trusted) ? (task)->field : BPF_CORE_READ(task, field))
#define TASK_TGID(trusted, task) TASK_READ(trusted, task, tgid)

/* Before 5.14 the field was "state". */
struct task_struct___o {
	volatile long state;
} __attribute__((preserve_access_index));

/* The task's state, 0 when runnable: a plain load where the task is trusted (the probe read
 * it replaced was 20-37 ns of a tracked switch's 235-620: bench/progab.py, RESULTS.md). */
static __always_inline long task_state(struct task_struct *t, bool trusted)
{
	if (bpf_core_field_exists(t->__state))
		return TASK_READ(trusted, t, __state);
	return TASK_READ(trusted, (struct task_struct___o *)t, state);
}

/* Adds what the kernel's account grew by since the last look at this thread: on-CPU time,
 * run-queue delay (a histogram sample per slice, at its switch-out), to hp, this CPU's
 * part of p (hot_of). The first look only takes the starting point. Looking at both ends
 * of every slice means an update the kernel makes late (after the switch-out tracepoint)
 * still counts, at the next one. Returns the run-queue delay it added. */
static __always_inline __u64 acct_take(const struct lp_proc_stats *p, struct lp_proc_stats *hp,
				       struct lp_thread *t, struct task_struct *task, bool out,
				       bool trusted)
{
	__u64 sum = TASK_READ(trusted, task, se.sum_exec_runtime);
	__u64 rd = TASK_READ(trusted, task, sched_info.run_delay);
	__u64 d, runq = 0;

	/* A thread born while its process was tracked: its whole account is ours, from zero,
	 * the wait before its first run included (taken as the starting point, it was lost:
	 * 0.6 ms of a spinner's 9.6 beside a busy host's load). Both clocks are monotonic. */
	if (!t->acct_seen && p->tracked_since_ns &&
	    TASK_READ(trusted, task, start_time) >= p->tracked_since_ns) {
		t->sum_last = 0;
		t->rd_last = 0;
		t->acct_seen = 1;
	}
	if (t->acct_seen) {
		d = sum - t->sum_last;
		t->oncpu_ns += d;
		__sync_fetch_and_add(&hp->ctr[LP_C_ONCPU_NS], d);
		runq = rd - t->rd_last;
		t->runq_ns += runq;
		if (out)
			hist_add(&hp->hist[LP_H_RUNQ], runq);
	}
	t->sum_last = sum;
	t->rd_last = rd;
	t->acct_seen = 1;
	return runq;
}

/* Counts a preemption of a thread of tgid by next, of process by_tgid. */
static __always_inline void preemptor_count(__u32 tgid, struct task_struct *next, __u32 by_tgid)
{
	struct lp_preempt_key k = {.tgid = tgid, .by_tgid = by_tgid};
	struct lp_preempt_val *v = bpf_map_lookup_elem(&preemptors, &k), init = {};

	if (v) {
		__sync_fetch_and_add(&v->count, 1);
		return;
	}
	init.count = 1;
	bpf_probe_read_kernel_str(init.comm, sizeof(init.comm), &next->comm);
	/* Two CPUs may insert the same key at once: one count is lost, not the entry. */
	if (bpf_map_update_elem(&preemptors, &k, &init, BPF_NOEXIST) &&
	    !bpf_map_lookup_elem(&preemptors, &k))
		drop(LP_D_PREEMPTORS_FULL);
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
 * switch-out recorded; counted in hp, this CPU's part of its process's figures. */
static __always_inline void off_end(struct lp_proc_stats *hp, struct lp_thread *t, __u32 tgid,
				    __u64 d)
{
	if (t->off_preempted) {
		t->off_preempted_ns += d;
		hist_add(&hp->hist[LP_H_OFF_PREEMPTED], d);
		preemptor_wait(tgid, t, d);
	} else {
		t->off_blocked_ns += d;
		hist_add(&hp->hist[LP_H_OFF_BLOCKED], d);
	}
	if (t->off_region == LP_R_BARRIER)
		__sync_fetch_and_add(&hp->ctr[LP_C_BARRIER_OFF_EST_NS], d);
	/* Precise mode: off-CPU time inside the innermost probed call. */
	if (t->bar.depth) {
		t->bar.off_ns += d;
	} else {
		if (t->mm.depth)
			t->mm.off_ns += d;
		if (t->op.depth)
			t->op.off_ns += d;
	}
}

/* A tracked thread switched out asleep: if it sleeps inside a futex wait, the wait
 * starts now, on the word its registers name (futex_from_sched). A wait that returns at
 * once (EAGAIN) never sleeps and is not seen; nor is a wait's result. */
static __always_inline void futex_sleep(const struct lp_proc_stats *p, struct lp_thread *t,
					const struct pt_regs *regs, __u64 now)
{
	long nr = (long)LP_SYSCALL_NR(regs);
	__u64 uaddr = 0;
	__u32 kind = 0;

	if (nr == LP_NR_FUTEX) {
		kind = futex_op_kind(LP_SYSCALL_PARM2(regs));
		uaddr = LP_SYSCALL_PARM1(regs);
	} else if (nr == LP_NR_FUTEX_WAITV) {
		kind = LP_FUTEX_WAITV;
		uaddr = futex_waitv_word((const void *)LP_SYSCALL_PARM1(regs));
	}
	if (kind)
		futex_wait_begin(p, t, now, uaddr, kind);
}

/* with_regs: the program may read prev's user registers (tp_btf: a trusted task). */
static __always_inline void on_switch(bool preempt, struct task_struct *prev,
				      struct task_struct *next, bool with_regs)
{
	struct pt_regs *prev_regs = NULL;
	const struct lp_ranges *rg;
	/* The clock is read once, and only when a tracked thread is involved: most switches on
	 * a host are not ours. */
	__u64 now = 0, runq = 0, slice = 0;
	__u32 tgid, tid, cpu1, next_tgid;
	struct lp_proc_stats *p, *hp;
	struct lp_rec_ev *e;
	struct lp_thread *t;
	__u64 d;

	/* Read once: the preemptor of prev, and whose next is. */
	next_tgid = TASK_TGID(with_regs, next);
	tgid = TASK_TGID(with_regs, prev);
	p = proc_of(tgid);
	/* An exiting thread's entry is gone already; do not create it again. */
	if (p && !(TASK_READ(with_regs, prev, flags) & PF_EXITING)) {
		now = bpf_ktime_get_ns();
		tid = TASK_READ(with_regs, prev, pid);
		t = thread_get(tid, tgid);
		if (t) {
			hp = hot_of(p, tgid);
			slice = t->oncpu_ns;
			if (kernel_accounting(prev)) {
				/* The kernel's totals since the last look: this slice, and the
				 * run-queue wait that preceded it (run_delay takes it after the
				 * switch-in tracepoint). */
				runq = acct_take(p, hp, t, prev, true, with_regs);
			} else if (t->on_since) {
				d = now - t->on_since;
				t->oncpu_ns += d;
				__sync_fetch_and_add(&hp->ctr[LP_C_ONCPU_NS], d);
			}
			slice = t->oncpu_ns - slice;
			/* Switched out twice with no switch-in between: the kernel ran the
			 * thread without a sched_switch naming it as next (seen on 6.18, as
			 * often as one in 200 wakeups of a thread sharing its CPU; bpftrace
			 * misses the same ones). Its own account says how long it ran: the
			 * stretch off the CPU ended that long before now. */
			if (t->off_since) {
				if (slice && now - slice > t->off_since)
					off_end(hp, t, tgid, now - slice - t->off_since);
				if (futex_from_sched && t->futex_since) {
					if (slice && now - slice > t->futex_since)
						futex_wait_done(p, hp, t,
								now - slice - t->futex_since, 0);
					t->futex_since = 0;
				}
				__sync_fetch_and_add(&hp->ctr[LP_C_SWITCH_IN_UNSEEN], 1);
			}
			t->on_since = 0;
			t->off_since = now;
			t->off_region = LP_R_OTHER;
			/* Where in user code it stopped: a barrier's sleeping is estimated
			 * from this without per-call probes. Current is still prev here. */
			if (with_regs) {
				prev_regs = (struct pt_regs *)bpf_task_pt_regs(prev);
				rg = bpf_map_lookup_elem(&ranges, &tgid);
				if (rg) {
					struct uregs u = {.ip = PT_REGS_IP_CORE(prev_regs),
							  .sp = PT_REGS_SP_CORE(prev_regs),
							  .bp = PT_REGS_FP_CORE(prev_regs),
							  .regs = prev_regs};

					t->off_region = classify(rg, &u, SWITCH_WORDS).region;
				}
			}
			/* Same split as the kernel's nvcsw/nivcsw in __schedule(). */
			if (preempt || task_state(prev, with_regs) == 0) {
				t->off_preempted = 1;
				t->preempted_by = next_tgid;
				t->runnable_since = now;
				preemptor_count(tgid, next, t->preempted_by);
				t->nivcsw++;
				__sync_fetch_and_add(&hp->ctr[LP_C_NIVCSW], 1);
			} else {
				t->off_preempted = 0;
				t->runnable_since = 0;
				t->nvcsw++;
				__sync_fetch_and_add(&hp->ctr[LP_C_NVCSW], 1);
				if (futex_from_sched && prev_regs)
					futex_sleep(p, t, prev_regs, now);
			}
			/* A timeline being recorded: why it stopped, and who took the CPU. */
			if ((e = rec_reserve(tgid, tid, LP_REC_OFF))) {
				e->runq = runq;
				e->oncpu = slice;
				if (t->off_preempted) {
					e->reason = LP_OFF_PREEMPTED;
					e->other = TASK_READ(with_regs, next, pid);
					bpf_probe_read_kernel_str(e->comm, sizeof(e->comm),
								  &next->comm);
				} else if (t->futex_since) {
					e->reason = LP_OFF_FUTEX;
					e->a = t->futex_uaddr;
				} else {
					e->reason = LP_OFF_BLOCKED;
				}
				rec_submit(e);
			}
		}
	}

	runq = 0;
	tgid = next_tgid;
	p = proc_of(tgid);
	/* A thread past its exit hook can still block and run again on its way out: its
	 * entry is gone and must not come back. */
	if (!p || (TASK_READ(with_regs, next, flags) & PF_EXITING))
		return;
	tid = TASK_READ(with_regs, next, pid);
	t = thread_get(tid, tgid);
	if (!t)
		return;
	if (!now)
		now = bpf_ktime_get_ns();
	hp = hot_of(p, tgid);
	if (kernel_accounting(next)) {
		/* Updates the kernel made after the last switch-out are counted here. */
		runq = acct_take(p, hp, t, next, false, with_regs);
	} else if (t->runnable_since) {
		d = now - t->runnable_since;
		t->runq_ns += d;
		hist_add(&hp->hist[LP_H_RUNQ], d);
	}
	if (t->off_since)
		off_end(hp, t, tgid, now - t->off_since);
	if (futex_from_sched && t->futex_since)
		futex_wait_done(p, hp, t, now - t->futex_since, 0);
	cpu1 = bpf_get_smp_processor_id() + 1;
	if (t->last_cpu && t->last_cpu != cpu1) {
		t->migrations++;
		__sync_fetch_and_add(&hp->ctr[LP_C_MIGRATIONS], 1);
	}
	t->last_cpu = cpu1;
	if ((e = rec_reserve(tgid, tid, LP_REC_ON))) {
		e->runq = runq;
		rec_submit(e);
	}
	t->on_since = now;
	t->off_since = 0;
	t->runnable_since = 0;
}

/* trusted: tp_btf, where the task's tgid is a plain load: an untracked wakeup then costs
 * that load and the tgid_marks lookup, no helper call. */
static __always_inline void on_wakeup(struct task_struct *task, bool trusted)
{
	__u32 tgid = TASK_TGID(trusted, task);
	__u32 tid;
	struct lp_thread *t;

	if (!proc_of(tgid) || (TASK_READ(trusted, task, flags) & PF_EXITING))
		return;
	tid = TASK_READ(trusted, task, pid);
	t = thread_get(tid, tgid);
	if (t && !t->runnable_since)
		t->runnable_since = bpf_ktime_get_ns();
}

/* --- tp_btf --- */

SEC("tp_btf/sched_switch")
int BPF_PROG(lp_switch_btf, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	on_switch(preempt, prev, next, true);
	return 0;
}

SEC("tp_btf/sched_wakeup")
int BPF_PROG(lp_wakeup_btf, struct task_struct *p)
{
	on_wakeup(p, true);
	return 0;
}

SEC("tp_btf/sched_wakeup_new")
int BPF_PROG(lp_wakeup_new_btf, struct task_struct *p)
{
	on_wakeup(p, true);
	return 0;
}

/* --- the same as raw_tp, for kernels where tp_btf does not load --- */

SEC("raw_tp/sched_switch")
int BPF_PROG(lp_switch_raw, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	on_switch(preempt, prev, next, false);
	return 0;
}

SEC("raw_tp/sched_wakeup")
int BPF_PROG(lp_wakeup_raw, struct task_struct *p)
{
	on_wakeup(p, false);
	return 0;
}

SEC("raw_tp/sched_wakeup_new")
int BPF_PROG(lp_wakeup_new_raw, struct task_struct *p)
{
	on_wakeup(p, false);
	return 0;
}
