// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* The scheduler collector: on-CPU time, run-queue delay, off-CPU time (preempted or
 * blocked, and in a barrier or not), context switches and migrations of tracked threads,
 * and who preempted them, from sched_switch, sched_wakeup and sched_wakeup_new. Each exists as a tp_btf and a
 * raw_tp program with the same body; user space autoloads one set after probing. Untracked tasks cost one
 * array load by tgid per task involved (maybe_ours). */
#include "acct.bpf.h"
#include "offcpu.bpf.h"
#include "where.bpf.h"

/* Before 5.14 the field was "state". */
struct task_struct___o {
	volatile long state;
} __attribute__((preserve_access_index));

/* The task's state, 0 when runnable: a plain load where the task is trusted, no probe read
 * (its cost against a tracked switch's: bench/progab.py, bench/RESULTS.md). */
static __always_inline long task_state(struct task_struct *t, bool trusted)
{
	if (bpf_core_field_exists(t->__state))
		return TASK_READ(trusted, t, __state);
	return TASK_READ(trusted, (struct task_struct___o *)t, state);
}

/* Counts w preemptions of a thread of tgid by next, of process by_tgid. */
static __always_inline void preemptor_count(__u32 tgid, struct task_struct *next, __u32 by_tgid,
					    __u32 w)
{
	struct lp_preempt_key k = {.tgid = tgid, .by_tgid = by_tgid};
	struct lp_preempt_val *v = bpf_map_lookup_elem(&preemptors, &k), init = {};

	if (v) {
		__sync_fetch_and_add(&v->count, w);
		return;
	}
	init.count = w;
	bpf_probe_read_kernel_str(init.comm, sizeof(init.comm), &next->comm);
	/* Two CPUs may insert the same key at once: one count is lost, not the entry. */
	if (bpf_map_update_elem(&preemptors, &k, &init, BPF_NOEXIST) &&
	    !bpf_map_lookup_elem(&preemptors, &k))
		drop(LP_D_PREEMPTORS_FULL);
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

/* Stretches taken as a sample. A thread that switches thousands of times a second (an
 * OpenMP barrier's threads sleep and wake at every op) would have the program take every
 * stretch at every switch, a share of its CPU that grows with its switch rate (bench/
 * RESULTS.md). Its totals need no switch at all:
 * the kernel keeps them (acct.bpf.h), and any look at the thread takes them exactly. Only
 * the figures of each stretch (off-CPU time, preempted or blocked and by whom, the wait
 * in a barrier or on which futex word, the run-queue wait before it ran again) need the
 * stretch seen whole. So of a busy thread's switch-outs one in N (stretch_sample) on
 * average is taken, at the end of a gap drawn at random in [1, 2N - 1] (no period to
 * fall in step with the thread's own), and counted as the gap's switch-outs: the counts
 * stay exact, and since where a gap ends is decided before its last stretch begins,
 * whatever that stretch turns out to be (a 20 us barrier sleep, a second's idle wait) it
 * is taken as often as any other, and every figure is an estimate without bias. Only
 * the switches busy threads repeat are sampled: preempted or yielding (still runnable),
 * or asleep in FUTEX_WAIT or FUTEX_WAIT_BITSET (a barrier, a condition variable, a
 * mutex), by a thread that has switched out SAMPLE_AFTER times and whose switch-outs
 * come less than BUSY_PACE_NS apart on average (its pace: a mean of the intervals that
 * weighs each one 1/8 and those before it 7/8, each taken up to PACE_CAP_NS). A thread
 * that sleeps for long between short bursts is not busy, however close two of its
 * switch-outs come (a preemption just before a wait, on a busy host): its every stretch
 * is seen, and so counted exactly. Every other stretch is taken and counted once:
 * the first switches of every thread, all those of a thread that switches less often,
 * every other kind of wait (LOCK_PI, futex_waitv, a sleep, I/O), and every thread's
 * while any process is recorded or in a precise window, whose events and probes need
 * each one. The sampled ones cost a task-storage lookup and a few loads. What a busy
 * thread's open gap holds is not counted until the gap ends, and never if the thread
 * stops being busy for good: at most 2N - 2 stretches a thread. So a process's figures
 * are estimates from its first thread's first gap on (LP_C_SAMPLED_THREADS), before any
 * stretch is taken as a sample. */
#define BUSY_PACE_NS 1000000ULL
#define PACE_CAP_NS 64000000ULL
#define SAMPLE_AFTER 64

/* The totals are taken at every look, so between looks they lag: a switch-out that finds
 * the thread's on-CPU time or run-queue delay grown by LOOK_LAG_NS since the last look
 * looks again. A thread that goes to sleep for good keeps its totals within that of the
 * kernel's, and its switch counts within those since its last look. */
#define LOOK_LAG_NS 500000ULL

/* Whether prev's switch-out is of the kinds a busy thread repeats (sampled): still
 * runnable (preempted, sched_yield), or asleep in FUTEX_WAIT or FUTEX_WAIT_BITSET. */
static __always_inline bool churn(bool preempt, struct task_struct *prev, __u32 tgid)
{
	struct pt_regs *regs;
	__u64 op;

	if (preempt || task_state(prev, true) == 0)
		return true;
	regs = (struct pt_regs *)bpf_task_pt_regs(prev);
	if ((long)LP_SYSCALL_NR(regs) != LP_NR_FUTEX)
		return false;
	op = LP_SYSCALL_PARM2(regs) & FUTEX_CMD_MASK;
	/* A wait for CPython's GIL is taken every time: its per-thread time is a figure of
	 * its own (and a finding's), exact rather than estimated. */
	return (op == 0 /* FUTEX_WAIT */ || op == 9 /* FUTEX_WAIT_BITSET */) &&
	       !lp_py_gil(tgid, LP_SYSCALL_PARM1(regs));
}

/* Draws the next gap, uniform in [1, 2N - 1], by xorshift32 (seeded at the thread's
 * first gap): no helper call. */
static __always_inline void new_gap(struct lp_switch_fast *fs)
{
	__u32 x = fs->rng ?: bpf_get_prandom_u32() | 1;

	x ^= x << 13;
	x ^= x >> 17;
	x ^= x << 5;
	fs->rng = x;
	fs->gap = 1 + x % (2 * stretch_sample - 1);
	fs->countdown = fs->gap;
}

static __always_inline bool sampling_possible(struct task_struct *task, bool with_regs)
{
	/* Task storage takes a trusted task; exact totals take the kernel's account. */
	return with_regs && stretch_sample > 1 && kernel_accounting(task);
}

/* A thread past its exit tracepoint switches out (exit_tail, left only where the kernel
 * keeps its account): the account has grown by what it ran since, up to date at a switch
 * (update_curr before the tracepoint). Its last switch-out (TASK_DEAD) ends the entry. */
static __always_inline void exit_tail_take(struct lp_proc_stats *p, struct task_struct *prev,
					   __u32 tgid, bool with_regs)
{
	__u32 tid = TASK_TID(with_regs, prev);
	struct lp_exit_tail *e = bpf_map_lookup_elem(&exit_tail, &tid);
	__u64 sum;

	if (!e)
		return;
	if (e->tgid == tgid) {
		sum = TASK_READ(with_regs, prev, se.sum_exec_runtime);
		if (sum > e->counted) {
			__sync_fetch_and_add(&p->ctr[LP_C_ONCPU_NS], sum - e->counted);
			e->counted = sum;
		}
	}
	if (task_state(prev, with_regs) == TASK_DEAD)
		bpf_map_delete_elem(&exit_tail, &tid);
}

/* prev (of tgid, tracked) switches out, to next. with_regs: the program may read prev's
 * user registers (tp_btf: a trusted task). Returns the clock if it read it, else 0. */
static __always_inline __u64 switch_out(bool preempt, struct task_struct *prev,
					struct task_struct *next, __u32 tgid, __u32 next_tgid,
					bool with_regs)
{
	bool every = recordings || precise_procs, take = true, first_gap = false;
	struct lp_switch_fast *fs = NULL;
	struct pt_regs *prev_regs = NULL;
	__u8 *open = NULL;
	struct lp_proc_stats *p, *hp;
	__u64 now, runq, slice, d, at;
	struct lp_rec_ev *e;
	struct lp_thread *t;
	__u32 tid, w = 1;

	if (sampling_possible(prev, with_regs)) {
		open = id_byte(&tid_open, TASK_TID(true, prev));
		fs = bpf_task_storage_get(&switch_fast, prev, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
		if (fs) {
			at = prev->se.exec_start;
			d = at - fs->prev_out;
			d = d < PACE_CAP_NS ? d : PACE_CAP_NS;
			fs->pace = fs->seen ? fs->pace - (fs->pace >> 3) + (d >> 3) : d;
			if (every || fs->seen < SAMPLE_AFTER || fs->pace >= BUSY_PACE_NS ||
			    !churn(preempt, prev, tgid)) {
				fs->seen += fs->seen < SAMPLE_AFTER;
			} else {
				if (!fs->gap) {
					new_gap(fs);
					first_gap = true;
				}
				if (--fs->countdown) {
					take = false;
				} else {
					w = fs->gap;
					new_gap(fs);
				}
			}
			fs->prev_out = at;
			/* Nothing to take, nothing open (a switch-in not seen), the totals
			 * near enough: the fast way out. */
			if (!take && !first_gap && !(open && *open) &&
			    prev->se.sum_exec_runtime - fs->sum_at < LOOK_LAG_NS &&
			    prev->sched_info.run_delay - fs->rd_at < LOOK_LAG_NS)
				return 0;
		}
		if (open)
			*open = 0;
	}
	p = proc_of(tgid);
	if (!p)
		return 0;
	/* From now on this thread's stretches are a sample: its process's figures are
	 * estimates, whether or not a gap has ended yet. */
	if (first_gap)
		__sync_fetch_and_add(&p->ctr[LP_C_SAMPLED_THREADS], 1);
	/* An exiting thread's entry is gone already; do not create it again. What it ran
	 * since its exit tracepoint is counted here. */
	if (TASK_READ(with_regs, prev, flags) & PF_EXITING) {
		exit_tail_take(p, prev, tgid, with_regs);
		return 0;
	}
	now = bpf_ktime_get_ns();
	tid = TASK_TID(with_regs, prev);
	t = thread_get(tid, tgid);
	if (!t)
		return now;
	hp = hot_of(p, tgid);
	slice = t->oncpu_ns;
	/* The kernel's totals since the last look. Where the run queue's clock cannot be
	 * read, the run-queue wait before this slice is the one run_delay grew by since the
	 * switch-in (it adds the wait after that tracepoint), when every switch-in is seen. */
	runq = acct_take(p, hp, t, prev, !fs && !rq_reachable(prev), with_regs);
	if (!kernel_accounting(prev) && t->on_since) {
		d = now - t->on_since;
		t->oncpu_ns += d;
		__sync_fetch_and_add(&hp->ctr[LP_C_ONCPU_NS], d);
	}
	slice = t->oncpu_ns - slice;
	/* Switched out twice with no switch-in between (off_end_unseen). The kernel's own
	 * account says how long it ran: the stretch off the CPU ended that long before now. */
	if (t->off_since)
		off_end_unseen(p, hp, t, tgid, slice ? now - slice : 0);
	t->on_since = 0;
	t->off_since = 0;
	t->last_cpu = bpf_get_smp_processor_id() + 1;
	if (fs) {
		fs->sum_at = t->sum_last;
		fs->rd_at = t->rd_last;
	}
	if (!take)
		return now;
	/* This stretch is taken, and stands for w. */
	if (w > 1)
		__sync_fetch_and_add(&hp->ctr[LP_C_STRETCHES_SAMPLED], 1);
	/* Its switch-in is taken in full (the byte was looked up at the top). */
	if (open)
		*open = 1;
	t->stretch_w = w;
	t->off_since = now;
	/* Where a precise probe may have to end this stretch itself (precise.bpf.c). */
	t->off_clock = precise_procs ? rq_clock_of(prev) : 0;
	t->off_region = LP_R_OTHER;
	/* Where in user code it stopped: a barrier's sleeping is estimated from this without
	 * per-call probes. Current is still prev here. */
	if (with_regs) {
		const struct lp_ranges *rg = bpf_map_lookup_elem(&ranges, &tgid);
		struct uregs u;

		prev_regs = (struct pt_regs *)bpf_task_pt_regs(prev);
		if (rg) {
			u.ip = PT_REGS_IP_CORE(prev_regs);
			u.sp = PT_REGS_SP_CORE(prev_regs);
			u.bp = PT_REGS_FP_CORE(prev_regs);
			u.r10 = BPF_CORE_READ(prev_regs, r10);
			u.r13 = BPF_CORE_READ(prev_regs, r13);
			t->off_region = classify(rg, &u, SWITCH_WORDS, 0).region;
		}
	}
	/* Same split as the kernel's nvcsw/nivcsw in __schedule(). */
	if (preempt || task_state(prev, with_regs) == 0) {
		t->off_preempted = 1;
		t->preempted_by = next_tgid;
		t->runnable_since = now;
		preemptor_count(tgid, next, t->preempted_by, w);
	} else {
		t->off_preempted = 0;
		t->runnable_since = 0;
		if (futex_from_sched && prev_regs)
			futex_sleep(p, t, prev_regs, now);
	}
	/* A timeline being recorded: why it stopped, and who took the CPU. */
	if ((e = rec_reserve(tgid, tid, LP_REC_OFF))) {
		e->runq = runq;
		e->oncpu = slice;
		if (t->off_preempted) {
			e->reason = LP_OFF_PREEMPTED;
			e->other = TASK_TID(with_regs, next);
			bpf_probe_read_kernel_str(e->comm, sizeof(e->comm), &next->comm);
		} else if (t->futex_since) {
			e->reason = LP_OFF_FUTEX;
			e->a = t->futex_uaddr;
		} else {
			e->reason = LP_OFF_BLOCKED;
		}
		rec_submit(e);
	}
	return now;
}

/* next (of tgid, tracked) switches in; now: the clock if switch_out read it, else 0. */
static __always_inline void switch_in(struct task_struct *next, __u32 tgid, __u64 now,
				      bool with_regs)
{
	struct lp_proc_stats *p, *hp;
	__u64 runq, d, queued, clk, waited = 0;
	struct lp_rec_ev *e;
	struct lp_thread *t;
	__u32 tid;

	/* Only the switch-in of a stretch taken is: an array load says which. */
	if (sampling_possible(next, with_regs)) {
		__u8 *open = id_byte(&tid_open, TASK_TID(with_regs, next));

		if (open) {
			if (!*open)
				return;
			*open = 0;
		}
	}
	p = proc_of(tgid);
	/* A thread past its exit hook can still block and run again on its way out: its
	 * entry is gone and must not come back. */
	if (!p || (TASK_READ(with_regs, next, flags) & PF_EXITING))
		return;
	tid = TASK_TID(with_regs, next);
	t = thread_get(tid, tgid);
	if (!t)
		return;
	if (!now)
		now = bpf_ktime_get_ns();
	hp = hot_of(p, tgid);
	/* Updates the kernel made after the last switch-out are counted here. */
	runq = acct_take(p, hp, t, next, 0, with_regs);
	if (kernel_accounting(next)) {
		/* The wait for this CPU that ends now, as the kernel adds it to run_delay
		 * right after this tracepoint: its run queue's clock less when the thread
		 * was queued (woken, or preempted while runnable). */
		queued = TASK_READ(with_regs, next, sched_info.last_queued);
		clk = rq_clock_of(next);
		if (queued && clk > queued) {
			waited = clk - queued;
			hist_addw(&hp->hist[LP_H_RUNQ], waited, t->stretch_w ?: 1);
		}
	} else if (t->runnable_since) {
		d = now - t->runnable_since;
		t->runq_ns += d;
		__sync_fetch_and_add(&hp->ctr[LP_C_RUNQ_NS], d);
		runq = waited = d;
		hist_add(&hp->hist[LP_H_RUNQ], d);
	}
	if (t->off_since)
		off_end(hp, t, tgid, now - t->off_since);
	/* a wait in futex(2) the scheduler saw: its wakeup queued it, waited ago */
	if (futex_from_sched && t->futex_since)
		futex_wait_done(p, hp, t, now, 0, t->stretch_w, waited);
	t->last_cpu = bpf_get_smp_processor_id() + 1;
	if ((e = rec_reserve(tgid, tid, LP_REC_ON))) {
		e->runq = runq;
		rec_submit(e);
	}
	t->on_since = now;
	t->off_since = 0;
	t->runnable_since = 0;
}

/* A switch from or to a tracked task (in: the process switched in), noted for the samples
 * not taken across it (sample.bpf.c, lp_cpu_switches). A global
 * function: the verifier checks it once, not on each way the switch's program goes (the
 * program is near its limit). */
__noinline int lp_note_switch(__u32 in)
{
	struct lp_cpu_switches *s = bpf_map_lookup_elem(&cpu_switch, &(__u32){0});
	struct lp_switch_note *n;

	if (!s)
		return 0;
	n = &s->n[s->seq & (LP_SWITCH_NOTES - 1)];
	n->ns = bpf_ktime_get_ns();
	n->tgid = maybe_ours(in) ? in : 0;
	s->seq++;
	return 0;
}

static __always_inline void on_switch(bool preempt, struct task_struct *prev,
				      struct task_struct *next, bool with_regs)
{
	/* Read once: the preemptor of prev, and whose next is. */
	__u32 next_tgid = TASK_TGID(with_regs, next), tgid = TASK_TGID(with_regs, prev);
	/* The clock is read once, and only when a tracked thread is taken: most switches on
	 * a host are not ours, and most of a busy tracked thread's are not taken. */
	__u64 now = 0;

	if (maybe_ours(tgid)) {
		lp_note_switch(next_tgid);
		now = switch_out(preempt, prev, next, tgid, next_tgid, with_regs);
	}
	if (maybe_ours(next_tgid)) {
		lp_note_switch(next_tgid);
		switch_in(next, next_tgid, now, with_regs);
	}
}

/* trusted: tp_btf, where the task's tgid is a plain load: an untracked wakeup then costs
 * that load and the tgid_marks lookup, no helper call. Loaded only where the kernel keeps
 * no sched_info: the run-queue wait is timed from it. */
static __always_inline void on_wakeup(struct task_struct *task, bool trusted)
{
	__u32 tgid = TASK_TGID(trusted, task);
	__u32 tid;
	struct lp_thread *t;

	if (!proc_of(tgid) || (TASK_READ(trusted, task, flags) & PF_EXITING))
		return;
	tid = TASK_TID(trusted, task);
	t = thread_get(tid, tgid);
	if (t && !t->runnable_since)
		t->runnable_since = bpf_ktime_get_ns();
}

/* A thread is born (its first wakeup; always loaded, as rare as threads are made). Its
 * first switch-in is taken: a thread that runs and exits in one slice, none of its switches
 * looked at, has that slice counted whole at its exit, where the kernel's account lags by
 * whatever it ran since its last update (1.4 ms on average for the threads a ggml build
 * starts per token: 5 % of the process's CPU lost without this). */
static __always_inline void on_born(struct task_struct *task, bool trusted)
{
	__u8 *open;

	if (!kernel_accounting(task)) {
		on_wakeup(task, trusted);
		return;
	}
	if (maybe_ours(TASK_TGID(trusted, task)) &&
	    (open = id_byte(&tid_open, TASK_TID(trusted, task))))
		*open = 1;
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
	on_born(p, true);
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
	on_born(p, false);
	return 0;
}
