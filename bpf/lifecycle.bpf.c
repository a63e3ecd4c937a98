// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* The lifecycle collector: a process's exec (discovery by executable and by --comm), its
 * executable mappings (discovery of ggml objects dlopen'ed late: mmap with PROT_EXEC), and
 * its threads' exits (the final record to user space, and cleanup). */
#include "acct.bpf.h"

#define PROT_EXEC 0x4

static __always_inline void on_exit(struct task_struct *task)
{
	__u32 tgid = TASK_TGID(false, task);
	__u32 tid = TASK_TID(false, task);
	struct lp_proc_stats *p;
	struct lp_ev_exit *e;
	struct lp_thread *t;
	bool group_dead;

	p = bpf_map_lookup_elem(&procs, &tgid);
	if (!p) {
		/* Its process's entry may have been taken by the daemon's sweep (an exit it saw
		 * in /proc first): the thread's entry goes all the same. */
		bpf_map_delete_elem(&threads, &tid);
		return;
	}
	/* do_exit() decrements signal->live before this tracepoint: 0 means the group is dead,
	 * and its final record goes now. Read once: this thread leaves either a tail below or
	 * that record. */
	group_dead = BPF_CORE_READ(task, signal, live.counter) == 0;
	/* The thread is on CPU now: its totals to here, by the kernel's account (the
	 * scheduler's program may not have looked at its last switches), and what the kernel
	 * has not added yet. A thread with no entry yet (born, run in one slice
	 * and gone: none of its switches looked at, its exit's own comes after this) gets one
	 * here, and with it all its account if it was born while its process was tracked. */
	t = thread_get(tid, tgid);
	if (t) {
		__u64 before = t->oncpu_ns, now = bpf_ktime_get_ns();
		/* The switch-in that set on_since is this slice's only if the thread has
		 * not switched since (switches not looked at leave it as it was). */
		bool in_slice = t->on_since && t->acct_seen &&
				BPF_CORE_READ(task, nvcsw) == t->nvcsw_last &&
				BPF_CORE_READ(task, nivcsw) == t->nivcsw_last;
		/* Unless it is the last of its process, what it runs from its last update on,
		 * this slice's rest and its way out, is counted at its last switch-out, by the
		 * kernel's own account (sched.bpf.c, exit_tail_take). */
		bool tail = t->acct_seen && kernel_accounting(task) && !group_dead;

		acct_take(p, p, t, task, 0, false);
		before = t->oncpu_ns - before;
		if (tail) {
			struct lp_exit_tail counted = {.tgid = tgid, .counted = t->sum_last};

			tail = !bpf_map_update_elem(&exit_tail, &tid, &counted, BPF_ANY);
		}
		/* Else the slice in flight on the monotonic clock, which also holds the
		 * interrupts' and a hypervisor's time that the kernel's account leaves out. */
		if (!tail && in_slice && now - t->on_since > before)
			__sync_fetch_and_add(&p->ctr[LP_C_ONCPU_NS], now - t->on_since - before);
	}
	if (t && t->gen_in)
		gen_depth_add(tgid, -1, 0);
	if (t && t->dec_in)
		decode_depth_add(tgid, -1);
	/* An OpenMP region it opened whose return was not seen (torch.bpf.c): a thread that
	 * is gone has none open. */
	if (t && t->omp_sp) {
		struct lp_omp_region *r = bpf_map_lookup_elem(&omp_region, &tgid);

		if (r && r->open > 0)
			__sync_fetch_and_add(&r->open, -1);
	}
	bpf_map_delete_elem(&threads, &tid);
	if (!group_dead)
		return;
	e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (e) {
		e->type = LP_EV_EXIT;
		e->pad = 0;
		bpf_probe_read_kernel(&e->stats, sizeof(e->stats), p);
		e->stats.exit_ns = bpf_ktime_get_ns();
		bpf_ringbuf_submit(e, BPF_RB_FORCE_WAKEUP);
	} else {
		drop(LP_D_EVENTS_LOST);
	}
	bpf_map_delete_elem(&procs, &tgid);
	mark_ours(tgid, 0);
	bpf_map_delete_elem(&ranges, &tgid);
	bpf_map_delete_elem(&precise, &tgid);
}

/* inode->i_mtime moved twice: __i_mtime in 6.7, i_mtime_sec/_nsec in 6.11. */
struct inode___v611 {
	time64_t i_mtime_sec;
	u32 i_mtime_nsec;
} __attribute__((preserve_access_index));

struct inode___v67 {
	struct timespec64 __i_mtime;
} __attribute__((preserve_access_index));

struct inode___old {
	struct timespec64 i_mtime;
} __attribute__((preserve_access_index));

static __always_inline __u64 inode_mtime_ns(struct inode *inode)
{
	struct inode___v611 *n = (void *)inode;
	struct inode___v67 *m = (void *)inode;
	struct inode___old *o = (void *)inode;

	if (bpf_core_field_exists(n->i_mtime_sec))
		return BPF_CORE_READ(n, i_mtime_sec) * 1000000000ULL +
		       BPF_CORE_READ(n, i_mtime_nsec);
	if (bpf_core_field_exists(m->__i_mtime))
		return BPF_CORE_READ(m, __i_mtime.tv_sec) * 1000000000ULL +
		       BPF_CORE_READ(m, __i_mtime.tv_nsec);
	return BPF_CORE_READ(o, i_mtime.tv_sec) * 1000000000ULL + BPF_CORE_READ(o, i_mtime.tv_nsec);
}

/* A process is mapping an executable file: tell user space unless it has read that file
 * (same inode and mtime) and found nothing that matters for this process. For a tracked
 * process every object matters: a runtime with no ggml in it (libc, libstdc++) still has
 * the call frame rows its samples are unwound through, read when the process maps it. */
static __always_inline void exec_mapping(__u32 tgid, struct file *f)
{
	struct lp_obj_key key = {};
	struct lp_obj_val *v;
	struct lp_ev_map *e;
	struct inode *inode;
	__u64 mtime;

	inode = BPF_CORE_READ(f, f_inode);
	if (!inode)
		return;
	key.dev = BPF_CORE_READ(inode, i_sb, s_dev);
	key.ino = BPF_CORE_READ(inode, i_ino);
	mtime = inode_mtime_ns(inode);
	v = bpf_map_lookup_elem(&objs, &key);
	if (v && v->mtime_ns == mtime &&
	    (v->verdict == LP_OBJ_NONE || v->verdict == LP_OBJ_HELPER ||
	     v->verdict == LP_OBJ_CANDIDATE) &&
	    !bpf_map_lookup_elem(&procs, &tgid))
		return;
	e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		drop(LP_D_EVENTS_LOST);
		return;
	}
	e->type = LP_EV_MAP;
	e->tgid = tgid;
	e->obj = key;
	e->mtime_ns = mtime;
	bpf_ringbuf_submit(e, BPF_RB_FORCE_WAKEUP);
}

__noinline __hidden int lp_mmap_exec(__u64 prot, __s64 fd)
{
	struct task_struct *task;
	struct file **fds, *f = NULL;

	if (!(prot & PROT_EXEC) || fd < 0)
		return 0;
	task = (struct task_struct *)bpf_get_current_task();
	if (fd >= BPF_CORE_READ(task, files, fdt, max_fds))
		return 0;
	fds = BPF_CORE_READ(task, files, fdt, fd);
	if (bpf_probe_read_kernel(&f, sizeof(f), &fds[fd]) || !f)
		return 0;
	exec_mapping(current_ids() >> 32, f);
	return 0;
}

static __always_inline void on_exec(struct task_struct *task)
{
	struct lp_ev_exec *e;
	struct file *exe;

	exe = BPF_CORE_READ(task, mm, exe_file);
	if (exe)
		exec_mapping(TASK_TGID(false, task), exe);
	if (!want_exec_events)
		return;
	e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		drop(LP_D_EVENTS_LOST);
		return;
	}
	e->type = LP_EV_EXEC;
	e->tgid = TASK_TGID(false, task);
	e->inserted = 0;
	e->pad = 0;
	bpf_get_current_comm(e->comm, sizeof(e->comm));
	if (bpf_map_lookup_elem(&comms, e->comm)) {
		__u32 zero = 0, tgid = e->tgid;
		struct lp_proc_stats *init = bpf_map_lookup_elem(&proc_init, &zero);

		if (init) {
			init->tgid = tgid;
			init->tracked_since_ns = bpf_ktime_get_ns();
			mark_ours(tgid, 1);
			e->inserted = !bpf_map_update_elem(&procs, &tgid, init, BPF_NOEXIST);
		}
		/* Counted from the exec: the kernel's totals of the exec'ing thread (its minor
		 * faults loading the program among them) from here, not from its first
		 * switch looked at. */
		if (e->inserted) {
			struct lp_proc_stats *p = bpf_map_lookup_elem(&procs, &tgid);
			struct lp_thread *t = thread_get((__u32)current_ids(), tgid);

			if (p && t)
				acct_take(p, p, t, task, 0, false);
		}
	}
	bpf_ringbuf_submit(e, BPF_RB_FORCE_WAKEUP);
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(lp_exit_btf, struct task_struct *p)
{
	on_exit(p);
	return 0;
}

SEC("tp_btf/sched_process_exec")
int BPF_PROG(lp_exec_btf, struct task_struct *p)
{
	on_exec(p);
	return 0;
}

SEC("raw_tp/sched_process_exit")
int BPF_PROG(lp_exit_raw, struct task_struct *p)
{
	on_exit(p);
	return 0;
}

SEC("raw_tp/sched_process_exec")
int BPF_PROG(lp_exec_raw, struct task_struct *p)
{
	on_exec(p);
	return 0;
}

/* The mmap lock released by a task inside mmap(2): the mapping is in place, the file still
 * open. Everything else that takes the lock for writing (munmap, mprotect, brk, exec) leaves
 * at the syscall number, and page faults take it for reading. */
static __always_inline void mmap_lock_released(bool write)
{
	struct pt_regs *regs;

	if (!write)
		return;
	/* A trusted pointer: plain loads, no probe-read calls (every munmap runs this). */
	regs = (struct pt_regs *)bpf_task_pt_regs(bpf_get_current_task_btf());
	if (LP_SYSCALL_NR(regs) != LP_NR_MMAP || !(LP_SYSCALL_PARM3(regs) & PROT_EXEC))
		return;
	lp_mmap_exec(LP_SYSCALL_PARM3(regs), (__s64)LP_SYSCALL_PARM5(regs));
}

SEC("tp_btf/mmap_lock_released")
int BPF_PROG(lp_mmap_lock_btf, struct mm_struct *mm, bool write)
{
	mmap_lock_released(write);
	return 0;
}

SEC("raw_tp/mmap_lock_released")
int BPF_PROG(lp_mmap_lock_raw, struct mm_struct *mm, bool write)
{
	mmap_lock_released(write);
	return 0;
}

SEC("tracepoint/syscalls/sys_enter_mmap")
int lp_mmap_enter_tp(struct trace_event_raw_sys_enter *ctx)
{
	lp_mmap_exec(ctx->args[2], (__s64)ctx->args[4]);
	return 0;
}
