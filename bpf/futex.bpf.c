// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* The futex collector's syscall sources (--futex-source tracepoint or raw): each wait
 * of a tracked thread, its time, result and address, from the classic
 * syscalls:sys_*_futex tracepoints (need tracefs) or the raw syscall tracepoints (which
 * also carry mmap for discovery then). They cost every syscall on the host the kernel's
 * slow path while attached; the default sees waits from the scheduler (sched.bpf.c). */
#include "futex.bpf.h"

static __always_inline void futex_enter(__u64 uaddr, __u32 kind)
{
	__u64 id = current_ids();
	__u32 tgid = id >> 32;
	struct lp_proc_stats *p = proc_of(tgid);
	struct lp_thread *t;

	if (!p)
		return;
	t = thread_get((__u32)id, tgid);
	if (!t)
		return;
	futex_wait_begin(p, t, bpf_ktime_get_ns(), uaddr, kind);
}

static __always_inline void futex_enter_op(__u64 uaddr, __u64 op)
{
	__u32 kind = futex_op_kind(op);

	if (kind)
		futex_enter(uaddr, kind);
}

static __always_inline void futex_waitv_enter(const void *waiters)
{
	futex_enter(futex_waitv_word(waiters), LP_FUTEX_WAITV);
}

static __always_inline void futex_exit(long ret)
{
	__u64 id = current_ids();
	__u32 tid = (__u32)id;
	struct lp_thread *t;

	/* Every futex call on the host returns here: FUTEX_WAKE and others' waits leave at
	 * the first load. */
	if (!maybe_ours(id >> 32))
		return;
	t = bpf_map_lookup_elem(&threads, &tid);
	if (!t || !t->futex_since)
		return;
	futex_wait_done(NULL, NULL, t, bpf_ktime_get_ns(), ret, 1, 0);
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
