// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* A thread's totals by the kernel's own account: on-CPU time and run-queue delay (the
 * figures of /proc/PID/task/TID/schedstat, where the kernel keeps sched_info), switches
 * both ways and migrations (those of /proc/PID/task/TID/status and sched), minor page
 * faults (min_flt, /proc/PID/task/TID/stat's: a program on the page-fault event cost
 * 1.0-1.3 us a fault, 6 % of a PyTorch decoder's forward that faults 340 times). The scheduler
 * collector takes them at the switches it looks at, the lifecycle collector at a thread's
 * exit: exact totals however few switches are looked at. */
#ifndef LP_ACCT_BPF_H
#define LP_ACCT_BPF_H

#include "lp.bpf.h"

/* A field of a task: a plain load where the task is trusted (tp_btf), else a probe read: a
 * helper call, which for an untracked task would be most of what a switch costs us, and a
 * large part of a tracked switch's program time (bench/progcost.py; bench/RESULTS.md). */
#define TASK_READ(trusted, task, field) ((trusted) ? (task)->field : BPF_CORE_READ(task, field))
/* A task's ids as the daemon sees them (lp.bpf.h, pidns_ino). */
#define TASK_TGID(trusted, task) (pidns_ino ? ns_tgid(task) : TASK_READ(trusted, task, tgid))
#define TASK_TID(trusted, task) (pidns_ino ? ns_tid(task) : TASK_READ(trusted, task, pid))

/* On-CPU time and run-queue delay by the kernel's own account, where it keeps sched_info
 * (CONFIG_SCHED_INFO). Timed from the tracepoints instead, the same boundary falls
 * microseconds apart in the two accounts, every slice: a thread that blocks and wakes
 * thousands of times a second reads far low on CPU and far high on the run queue. */
static __always_inline bool kernel_accounting(struct task_struct *task)
{
	return bpf_core_field_exists(task->sched_info.run_delay);
}

/* Adds what the kernel's account of task grew by since the last look at it (thread t of
 * process p) to hp, this CPU's part of p (hot_of): on-CPU time, run-queue delay,
 * switches, migrations. The first look only takes the starting point. runq_w: the
 * run-queue delay since the last look is one wait (the last look was its switch-in: the
 * kernel adds a wait to run_delay after the switch-in tracepoint), added to the histogram
 * as that many; 0: it is not. Returns the run-queue delay it added. */
static __always_inline __u64 acct_take(const struct lp_proc_stats *p, struct lp_proc_stats *hp,
				       struct lp_thread *t, struct task_struct *task, __u32 runq_w,
				       bool trusted)
{
	__u64 nv = TASK_READ(trusted, task, nvcsw);
	__u64 niv = TASK_READ(trusted, task, nivcsw);
	__u64 mig = TASK_READ(trusted, task, se.nr_migrations);
	__u64 mf = count_minor_faults ? TASK_READ(trusted, task, min_flt) : 0;
	__u64 sum = 0, rd = 0, d, runq = 0;

	if (kernel_accounting(task)) {
		sum = TASK_READ(trusted, task, se.sum_exec_runtime);
		rd = TASK_READ(trusted, task, sched_info.run_delay);
	}
	/* A thread born while its process was tracked: its whole account is ours, from zero,
	 * the wait before its first run included (taken as the starting point, it was lost:
	 * 0.6 ms of a spinner's 9.6 beside a busy host's load). Both clocks are monotonic. */
	if (!t->acct_seen && p->tracked_since_ns &&
	    TASK_READ(trusted, task, start_time) >= p->tracked_since_ns) {
		t->sum_last = t->rd_last = 0;
		t->nvcsw_last = t->nivcsw_last = t->mig_last = t->minflt_last = 0;
		t->acct_seen = 1;
	}
	if (t->acct_seen) {
		if (kernel_accounting(task)) {
			d = sum - t->sum_last;
			t->oncpu_ns += d;
			__sync_fetch_and_add(&hp->ctr[LP_C_ONCPU_NS], d);
			runq = rd - t->rd_last;
			t->runq_ns += runq;
			__sync_fetch_and_add(&hp->ctr[LP_C_RUNQ_NS], runq);
			if (runq_w)
				hist_addw(&hp->hist[LP_H_RUNQ], runq, runq_w);
		}
		/* The same split as the kernel's in __schedule(): blocked, or preempted or
		 * yielded while runnable. */
		d = nv - t->nvcsw_last;
		t->nvcsw += d;
		__sync_fetch_and_add(&hp->ctr[LP_C_NVCSW], d);
		d = niv - t->nivcsw_last;
		t->nivcsw += d;
		__sync_fetch_and_add(&hp->ctr[LP_C_NIVCSW], d);
		d = mig - t->mig_last;
		t->migrations += d;
		__sync_fetch_and_add(&hp->ctr[LP_C_MIGRATIONS], d);
		d = mf - t->minflt_last;
		t->faults_min += d;
		__sync_fetch_and_add(&hp->ctr[LP_C_FAULTS_MIN], d);
	}
	t->sum_last = sum;
	t->rd_last = rd;
	t->nvcsw_last = nv;
	t->nivcsw_last = niv;
	t->mig_last = mig;
	t->minflt_last = mf;
	t->acct_seen = 1;
	return runq;
}

#endif /* LP_ACCT_BPF_H */
