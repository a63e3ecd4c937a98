// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* A futex wait's account, shared by the two ways a wait is seen: from the switch-out that
 * put a thread to sleep inside futex(2) to its switch-in (sched.bpf.c, the default), or
 * from the syscall's entry to its exit (futex.bpf.c, --futex-source tracepoint or raw). */
#ifndef LP_FUTEX_BPF_H
#define LP_FUTEX_BPF_H

#include "lp.bpf.h"

#define FUTEX_CMD_MASK 0x7f

/* The kind of wait a futex(2) op is, 0 for one that does not wait (FUTEX_WAKE, ...). */
static __always_inline __u32 futex_op_kind(__u64 op)
{
	switch (op & FUTEX_CMD_MASK) {
	case 0:	 /* FUTEX_WAIT */
	case 9:	 /* FUTEX_WAIT_BITSET */
	case 11: /* FUTEX_WAIT_REQUEUE_PI */
		return LP_FUTEX_WAIT;
	case 6:	 /* FUTEX_LOCK_PI */
	case 13: /* FUTEX_LOCK_PI2 */
		return LP_FUTEX_LOCK_PI;
	}
	return 0;
}

/* The word a futex_waitv(2) call waits on, keyed by its first waiter: struct futex_waitv
 * { __u64 val; __u64 uaddr; ... }. Read in the caller's own context (current). */
static __always_inline __u64 futex_waitv_word(const void *waiters)
{
	__u64 uaddr = 0;

	bpf_probe_read_user(&uaddr, sizeof(uaddr), (const char *)waiters + 8);
	return uaddr;
}

/* Thread t of process p begins a wait of kind on the word uaddr, now. */
static __always_inline void futex_wait_begin(const struct lp_proc_stats *p, struct lp_thread *t,
					     __u64 now, __u64 uaddr, __u32 kind)
{
	t->futex_since = now;
	t->futex_uaddr = uaddr;
	t->futex_kind = kind;
	t->futex_gen = p->gen_seq;
}

/* Counts the wait of thread t, of process p (NULL: looked up), that t->futex_* describe,
 * ended at end (the clock) with ret (0 where the result is not known: seen from the
 * scheduler), as w waits (a stretch taken as a sample stands for w: sched.bpf.c), and
 * clears it; queued: the run-queue wait between its wakeup and end, where known (seen
 * from the scheduler: the kernel counts it in run_delay). The counts go to hp, this CPU's
 * part of p (hot_of), or p where NULL. */
static __always_inline void futex_wait_done(struct lp_proc_stats *p, struct lp_proc_stats *hp,
					    struct lp_thread *t, __u64 end, long ret, __u32 w,
					    __u64 queued)
{
	struct lp_futex_key key = {.tgid = t->tgid, .uaddr = t->futex_uaddr};
	struct lp_futex_val *v, zero = {};
	__u64 d = end - t->futex_since;

	t->futex_since = 0;
	t->futex_ns += d * w;
	t->futex_waits += w;
	if (!p)
		p = bpf_map_lookup_elem(&procs, &key.tgid);
	if (!p)
		return;
	if (!hp)
		hp = p;
	/* CPython's GIL: a thread waiting to run Python, until it is handed the GIL (its
	 * wakeup); the wait for a CPU after that is the run queue's, as schedstat has it */
	if (lp_py_gil(key.tgid, key.uaddr)) {
		__u64 g = d > queued ? d - queued : 0;

		t->gil_waits += w;
		t->gil_ns += g * w;
		__sync_fetch_and_add(&hp->ctr[LP_C_GIL_WAITS], w);
		__sync_fetch_and_add(&hp->ctr[LP_C_GIL_WAIT_NS], g * w);
	}
	hist_addw(&hp->hist[LP_H_FUTEX], d, w);
	/* Inside one generation decode: a wait the token waited for, not a thread idle between
	 * requests or tokens. The decode it began in may have returned since the wait ended,
	 * where its end is taken late (a switch-in the scheduler's program did not see). */
	if ((t->futex_gen & 1) && (t->futex_gen == p->gen_seq ||
				   (t->futex_gen + 1 == p->gen_seq && end <= p->gen_end_ns)))
		hist_addw(&hp->hist[LP_H_FUTEX_GEN], d, w);
	if (ret == -110 /* ETIMEDOUT */)
		__sync_fetch_and_add(&hp->ctr[LP_C_FUTEX_TIMEDOUT], w);
	else if (ret == -11 /* EAGAIN */)
		__sync_fetch_and_add(&hp->ctr[LP_C_FUTEX_EAGAIN], w);
	if (t->futex_kind == LP_FUTEX_LOCK_PI)
		__sync_fetch_and_add(&hp->ctr[LP_C_FUTEX_LOCK_PI], w);
	else if (t->futex_kind == LP_FUTEX_WAITV)
		__sync_fetch_and_add(&hp->ctr[LP_C_FUTEX_WAITV], w);

	v = bpf_map_lookup_elem(&futex_addrs, &key);
	if (!v) {
		if (bpf_map_update_elem(&futex_addrs, &key, &zero, BPF_NOEXIST) &&
		    !bpf_map_lookup_elem(&futex_addrs, &key)) {
			drop(LP_D_FUTEX_ADDRS_FULL);
			return;
		}
		v = bpf_map_lookup_elem(&futex_addrs, &key);
		if (!v)
			return;
	}
	__sync_fetch_and_add(&v->waits, w);
	__sync_fetch_and_add(&v->wait_ns, d * w);
	if (d > v->max_ns)
		v->max_ns = d;
}

#endif /* LP_FUTEX_BPF_H */
