// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* The futex collector: each wait of a tracked thread, its time, result and address, from
 * the classic syscalls:sys_*_futex tracepoints (need tracefs) or, as a fallback, the raw
 * syscall tracepoints (which also carry mmap for discovery then). */
#include "lp.bpf.h"

#define ETIMEDOUT 110
#define EAGAIN 11
#define FUTEX_CMD_MASK 0x7f

static __always_inline void futex_enter(__u64 uaddr, __u32 kind)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32;
	struct lp_thread *t;

	if (!proc_of(tgid))
		return;
	t = thread_get((__u32)id, tgid);
	if (!t)
		return;
	t->futex_since = bpf_ktime_get_ns();
	t->futex_uaddr = uaddr;
	t->futex_kind = kind;
}

static __always_inline void futex_enter_op(__u64 uaddr, __u64 op)
{
	switch (op & FUTEX_CMD_MASK) {
	case 0:	 /* FUTEX_WAIT */
	case 9:	 /* FUTEX_WAIT_BITSET */
	case 11: /* FUTEX_WAIT_REQUEUE_PI */
		futex_enter(uaddr, LP_FUTEX_WAIT);
		break;
	case 6:	 /* FUTEX_LOCK_PI */
	case 13: /* FUTEX_LOCK_PI2 */
		futex_enter(uaddr, LP_FUTEX_LOCK_PI);
		break;
	}
}

static __always_inline void futex_waitv_enter(const void *waiters)
{
	__u64 uaddr = 0;

	/* struct futex_waitv { __u64 val; __u64 uaddr; ... }: key by the first waiter. */
	bpf_probe_read_user(&uaddr, sizeof(uaddr), (const char *)waiters + 8);
	futex_enter(uaddr, LP_FUTEX_WAITV);
}

static __always_inline void futex_exit(long ret)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)id;
	struct lp_futex_key key = {};
	struct lp_proc_stats *p;
	struct lp_futex_val *v, zero = {};
	struct lp_thread *t;
	__u64 d;

	/* Every futex call on the host returns here: FUTEX_WAKE and others' waits leave at
	 * the first load. */
	if (!maybe_ours(id >> 32))
		return;
	t = bpf_map_lookup_elem(&threads, &tid);
	if (!t || !t->futex_since)
		return;
	d = bpf_ktime_get_ns() - t->futex_since;
	t->futex_since = 0;
	t->futex_ns += d;
	t->futex_waits++;
	key.tgid = t->tgid;
	key.uaddr = t->futex_uaddr;
	p = bpf_map_lookup_elem(&procs, &key.tgid);
	if (!p)
		return;
	hist_add(&p->hist[LP_H_FUTEX], d);
	if (ret == -ETIMEDOUT)
		__sync_fetch_and_add(&p->ctr[LP_C_FUTEX_TIMEDOUT], 1);
	else if (ret == -EAGAIN)
		__sync_fetch_and_add(&p->ctr[LP_C_FUTEX_EAGAIN], 1);
	if (t->futex_kind == LP_FUTEX_LOCK_PI)
		__sync_fetch_and_add(&p->ctr[LP_C_FUTEX_LOCK_PI], 1);
	else if (t->futex_kind == LP_FUTEX_WAITV)
		__sync_fetch_and_add(&p->ctr[LP_C_FUTEX_WAITV], 1);

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
	__sync_fetch_and_add(&v->waits, 1);
	__sync_fetch_and_add(&v->wait_ns, d);
	if (d > v->max_ns)
		v->max_ns = d;
}

SEC("tracepoint/syscalls/sys_enter_futex")
int lp_futex_enter_tp(struct trace_event_raw_sys_enter *ctx)
{
	futex_enter_op(ctx->args[0], ctx->args[1]);
	return 0;
}

SEC("tracepoint/syscalls/sys_exit_futex")
int lp_futex_exit_tp(struct trace_event_raw_sys_exit *ctx)
{
	futex_exit(ctx->ret);
	return 0;
}

SEC("tracepoint/syscalls/sys_enter_futex_waitv")
int lp_futex_waitv_enter_tp(struct trace_event_raw_sys_enter *ctx)
{
	futex_waitv_enter((const void *)ctx->args[0]);
	return 0;
}

SEC("tracepoint/syscalls/sys_exit_futex_waitv")
int lp_futex_waitv_exit_tp(struct trace_event_raw_sys_exit *ctx)
{
	futex_exit(ctx->ret);
	return 0;
}

/* Fallback without tracefs: every syscall passes here, so filter on the number first. */
SEC("raw_tp/sys_enter")
int BPF_PROG(lp_sys_enter_raw, struct pt_regs *regs, long id)
{
	if (id == LP_NR_FUTEX)
		futex_enter_op(PT_REGS_PARM1_CORE_SYSCALL(regs), PT_REGS_PARM2_CORE_SYSCALL(regs));
	else if (id == LP_NR_FUTEX_WAITV)
		futex_waitv_enter((const void *)PT_REGS_PARM1_CORE_SYSCALL(regs));
	else if (id == LP_NR_MMAP)
		lp_mmap_exec(PT_REGS_PARM3_CORE_SYSCALL(regs),
			     (__s64)PT_REGS_PARM5_CORE_SYSCALL(regs));
	return 0;
}

SEC("raw_tp/sys_exit")
int BPF_PROG(lp_sys_exit_raw, struct pt_regs *regs, long ret)
{
	futex_exit(ret);
	return 0;
}
