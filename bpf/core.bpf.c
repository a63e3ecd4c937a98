// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* In-kernel collectors for tracked processes: run-queue latency and off-CPU time from the
 * scheduler tracepoints, futex waits from the futex syscalls, page faults from perf software
 * events, and the process lifecycle (exec for discovery, exit for cleanup).
 *
 * Every hook begins with one hash lookup by tgid in "procs", so untracked tasks cost one
 * lookup. Scheduler and lifecycle hooks exist as tp_btf and raw_tp programs with the same
 * body; user space autoloads one set after probing. Futex waits come from the classic
 * syscalls:sys_*_futex tracepoints (need tracefs) or, as a fallback, raw_syscalls.
 */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "llmprof/abi.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

#define PF_EXITING 0x00000004
#define ETIMEDOUT 110
#define EAGAIN 11
#define FUTEX_CMD_MASK 0x7f

#if defined(__TARGET_ARCH_x86)
#define LP_NR_FUTEX 202
#elif defined(__TARGET_ARCH_arm64)
#define LP_NR_FUTEX 98
#endif
#define LP_NR_FUTEX_WAITV 449
#if defined(__TARGET_ARCH_x86)
#define LP_NR_MMAP 9
#elif defined(__TARGET_ARCH_arm64)
#define LP_NR_MMAP 222
#endif
#define PROT_EXEC 0x4

/* Set by user space before load. */
const volatile bool want_exec_events = false;
/* Classify samples by return addresses on the user stack as well as by the instruction
 * pointer, so that time in callees (ggml_vec_dot_*, sgemm kernels) counts for the matmul
 * function that called them. */
const volatile bool stack_scan = true;

/* User stack scanned per sample: up to 8 KiB, for kernels with large frames (tinyBLAS
 * tiles, a fork's GEMMs) between the instruction pointer and their op's return address. */
#define LP_STACK_WORDS 1024
/* At a switch-out only whether it stopped in a barrier matters: the instruction pointer in
 * a runtime or ggml_barrier, or a libc call (sched_yield, futex) just below one. Switches
 * are frequent (OpenMP threads sleep and wake thousands of times a second): 512 bytes. */
#define SWITCH_WORDS 64

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256); /* resized by user space */
	__type(key, __u32);
	__type(value, struct lp_proc_stats);
} procs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384); /* resized by user space */
	__type(key, __u32);
	__type(value, struct lp_thread);
} threads SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192); /* resized by user space */
	__type(key, struct lp_futex_key);
	__type(value, struct lp_futex_val);
} futex_addrs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256); /* resized by user space */
	__type(key, __u32);
	__type(value, struct lp_ranges);
} ranges SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256); /* resized by user space */
	__type(key, __u32);
	__type(value, struct lp_op_samples);
} op_samples SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256); /* resized by user space */
	__type(key, __u32);
	__type(value, struct lp_precise);
} precise SEC(".maps");

/* Entries are made as probed ops return, at most LP_PRECISE_OPS per process in precise
 * mode: not preallocated. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192); /* resized by user space */
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct lp_op_key);
	__type(value, struct lp_op_precise);
} op_precise SEC(".maps");

/* A zeroed op_precise value to insert from: too large for the BPF stack. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct lp_op_precise);
} op_precise_init SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, struct lp_obj_key);
	__type(value, struct lp_obj_val);
} objs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64[LP_STACK_WORDS]);
} stack_buf SEC(".maps");

/* The --comm names, filled by user space before attach: a process that execs under one is
 * tracked from the exec itself; the daemon adopts the entry when the event reaches it
 * (before, the faults of its first milliseconds were lost). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, LP_MAX_COMMS);
	__type(key, char[LP_COMM_LEN]);
	__type(value, __u8);
} comms SEC(".maps");

/* A zeroed record to insert from: too large for the BPF stack. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct lp_proc_stats);
} proc_init SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, LP_D_NR);
	__type(key, __u32);
	__type(value, __u64);
} drops SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20); /* resized by user space */
} events SEC(".maps");

/* Kernels before 5.14 call it "state" (commit 2f064a59a11f renamed it to __state). */
struct task_struct___o {
	volatile long state;
} __attribute__((preserve_access_index));

static __always_inline long task_state(struct task_struct *t)
{
	if (bpf_core_field_exists(t->__state))
		return BPF_CORE_READ(t, __state);
	return BPF_CORE_READ((struct task_struct___o *)t, state);
}

static __always_inline void drop(__u32 what)
{
	__u64 *c = bpf_map_lookup_elem(&drops, &what);

	if (c)
		__sync_fetch_and_add(c, 1);
}

static __always_inline void hist_add(struct lp_hist *h, __u64 v)
{
	__u32 idx = lp_hist_index(v);

	if (idx >= LP_HIST_NBUCKETS)
		return;
	__sync_fetch_and_add(&h->buckets[idx], 1);
	__sync_fetch_and_add(&h->sum_ns, v);
	/* No atomic max in BPF: a lost race under-reports max by one concurrent sample. */
	if (v > h->max_ns)
		h->max_ns = v;
}

/* The thread's state, created on first sight. Only called for tracked processes. */
static __always_inline struct lp_thread *thread_get(__u32 tid, __u32 tgid)
{
	struct lp_thread *t = bpf_map_lookup_elem(&threads, &tid);
	struct lp_thread zero = {};

	if (t && t->tgid == tgid)
		return t;
	/* Absent, or left over from an earlier thread with a reused tid: start afresh. */
	zero.tgid = tgid;
	if (bpf_map_update_elem(&threads, &tid, &zero, BPF_ANY)) {
		drop(LP_D_THREADS_FULL);
		return NULL;
	}
	return bpf_map_lookup_elem(&threads, &tid);
}

static __always_inline bool gen_depth_add(__u32 tgid, int d)
{
	struct lp_op_samples *os = bpf_map_lookup_elem(&op_samples, &tgid);

	if (!os)
		return false;
	__sync_fetch_and_add(&os->gen_depth, d);
	return true;
}

/* Index of the range holding addr, or -1: binary search over at most 512 ranges. */
static __always_inline int range_find(const struct lp_ranges *rg, __u64 addr)
{
	__u32 lo = 0, hi = rg->n, mid;

	if (addr < rg->lo || addr >= rg->hi)
		return -1;
	for (int i = 0; i < 10 && lo < hi; i++) {
		mid = ((lo + hi) / 2) & (LP_MAX_RANGES - 1);
		if (addr < rg->r[mid].start)
			hi = mid;
		else if (addr >= rg->r[mid].end)
			lo = mid + 1;
		else
			return (int)mid;
	}
	return -1;
}

/* Where a sample is: sync, an op (by index), or outside ops. */
struct where {
	__u32 region; /* enum lp_region */
	__s32 op;     /* op index, or -1 */
};

struct scan_ctx {
	const struct lp_ranges *rg;
	const __u64 *words;
	__u32 nwords;
	__s32 kernel_op; /* the first matmul kernel found, for when no op function is */
	struct where w;
	bool done;
};

static __always_inline bool take(struct scan_ctx *c, int i, bool is_ip)
{
	__u32 k;

	if (i < 0)
		return false;
	k = c->rg->kind[i & (LP_MAX_RANGES - 1)];
	if (k == LP_K_BARRIER || (k == LP_K_RUNTIME && is_ip)) {
		c->w.region = LP_R_BARRIER;
		return true;
	}
	if (k == LP_K_OP) {
		c->w.op = c->rg->op[i & (LP_MAX_RANGES - 1)];
		return true;
	}
	if (k == LP_K_KERNEL && c->kernel_op < 0)
		c->kernel_op = c->rg->op[i & (LP_MAX_RANGES - 1)];
	return false;
}

static long scan_word(__u64 i, void *data)
{
	struct scan_ctx *c = data;
	__u64 w;

	if (i >= c->nwords || i >= LP_STACK_WORDS)
		return 1;
	w = c->words[i];
	if (w < c->rg->lo || w >= c->rg->hi)
		return 0;
	c->done = take(c, range_find(c->rg, w), false);
	return c->done;
}

/* Where a thread is, from its user registers: the range holding the instruction pointer,
 * else the innermost return address in the first nwords words of its stack that lies in an
 * op or barrier function (a matmul kernel's if there is neither). */
static __always_inline struct where classify(const struct lp_ranges *rg, __u64 ip, __u64 sp,
					     __u32 nwords)
{
	struct scan_ctx c = {.rg = rg, .kernel_op = -1, .w = {LP_R_OTHER, -1}};
	__u32 zero = 0;
	__u64 *buf;

	if (!take(&c, range_find(rg, ip), true) && nwords && stack_scan) {
		buf = bpf_map_lookup_elem(&stack_buf, &zero);
		if (buf) {
			/* The stack's top page is present; the rest may not be: read less. */
			if (nwords > SWITCH_WORDS &&
			    !bpf_probe_read_user(buf, LP_STACK_WORDS * 8, (void *)sp))
				c.nwords = LP_STACK_WORDS;
			else if (!bpf_probe_read_user(buf, SWITCH_WORDS * 8, (void *)sp))
				c.nwords = SWITCH_WORDS;
			c.words = buf;
			if (c.nwords)
				bpf_loop(c.nwords, scan_word, &c, 0);
		}
	}
	if (c.w.region == LP_R_OTHER && c.w.op < 0)
		c.w.op = c.kernel_op;
	if (c.w.op >= 0 && rg->op_matmul[c.w.op & (LP_MAX_OPS - 1)])
		c.w.region = LP_R_MATMUL;
	return c.w;
}

/* On-CPU time and run-queue delay by the kernel's own account, the figures of
 * /proc/PID/task/TID/schedstat, where the kernel keeps sched_info (CONFIG_SCHED_INFO).
 * Timed from the tracepoints instead, a thread that blocks and wakes thousands of times a
 * second read 40 % low on CPU and 6 times high on the run queue on a VM: the same boundary
 * falls microseconds apart in the two accounts, every slice. */
static __always_inline bool kernel_accounting(struct task_struct *task)
{
	return bpf_core_field_exists(task->sched_info.run_delay);
}

/* Adds what the kernel's account grew by since the last look at this thread: on-CPU time,
 * run-queue delay (a histogram sample per slice, at its switch-out). The first look only
 * takes the starting point. Looking at both ends of every slice means an update the
 * kernel makes late (after the switch-out tracepoint) still counts, at the next one. */
static __always_inline void acct_take(struct lp_proc_stats *p, struct lp_thread *t,
				      struct task_struct *task, bool out)
{
	__u64 sum = BPF_CORE_READ(task, se.sum_exec_runtime);
	__u64 rd = BPF_CORE_READ(task, sched_info.run_delay);
	__u64 d;

	if (t->acct_seen) {
		d = sum - t->sum_last;
		t->oncpu_ns += d;
		__sync_fetch_and_add(&p->ctr[LP_C_ONCPU_NS], d);
		d = rd - t->rd_last;
		t->runq_ns += d;
		if (out)
			hist_add(&p->hist[LP_H_RUNQ], d);
	}
	t->sum_last = sum;
	t->rd_last = rd;
	t->acct_seen = 1;
}

static __always_inline void on_switch(bool preempt, struct task_struct *prev,
				      struct task_struct *next, struct pt_regs *prev_regs)
{
	const struct lp_ranges *rg;
	__u64 now = bpf_ktime_get_ns();
	__u32 tgid, tid, cpu1;
	struct lp_proc_stats *p;
	struct lp_thread *t;
	__u64 d;

	tgid = BPF_CORE_READ(prev, tgid);
	p = bpf_map_lookup_elem(&procs, &tgid);
	/* An exiting thread's entry is gone already; do not create it again. */
	if (p && !(BPF_CORE_READ(prev, flags) & PF_EXITING)) {
		tid = BPF_CORE_READ(prev, pid);
		t = thread_get(tid, tgid);
		if (t) {
			if (kernel_accounting(prev)) {
				/* The kernel's totals since the last look: this slice, and the
				 * run-queue wait that preceded it (run_delay takes it after the
				 * switch-in tracepoint). */
				acct_take(p, t, prev, true);
			} else if (t->on_since) {
				d = now - t->on_since;
				t->oncpu_ns += d;
				__sync_fetch_and_add(&p->ctr[LP_C_ONCPU_NS], d);
			}
			t->on_since = 0;
			t->off_since = now;
			t->off_region = LP_R_OTHER;
			/* Where in user code it stopped: a barrier's sleeping is estimated
			 * from this without per-call probes. Current is still prev here. */
			if (prev_regs) {
				rg = bpf_map_lookup_elem(&ranges, &tgid);
				if (rg)
					t->off_region =
						classify(rg, PT_REGS_IP_CORE(prev_regs),
							 PT_REGS_SP_CORE(prev_regs), SWITCH_WORDS)
							.region;
			}
			/* Same split as the kernel's nvcsw/nivcsw in __schedule(). */
			if (preempt || task_state(prev) == 0) {
				t->off_preempted = 1;
				t->runnable_since = now;
				t->nivcsw++;
				__sync_fetch_and_add(&p->ctr[LP_C_NIVCSW], 1);
			} else {
				t->off_preempted = 0;
				t->runnable_since = 0;
				t->nvcsw++;
				__sync_fetch_and_add(&p->ctr[LP_C_NVCSW], 1);
			}
		}
	}

	tgid = BPF_CORE_READ(next, tgid);
	p = bpf_map_lookup_elem(&procs, &tgid);
	/* A thread past its exit hook can still block and run again on its way out: its
	 * entry is gone and must not come back. */
	if (!p || (BPF_CORE_READ(next, flags) & PF_EXITING))
		return;
	tid = BPF_CORE_READ(next, pid);
	t = thread_get(tid, tgid);
	if (!t)
		return;
	if (kernel_accounting(next)) {
		/* Updates the kernel made after the last switch-out are counted here. */
		acct_take(p, t, next, false);
	} else if (t->runnable_since) {
		d = now - t->runnable_since;
		t->runq_ns += d;
		hist_add(&p->hist[LP_H_RUNQ], d);
	}
	if (t->off_since) {
		d = now - t->off_since;
		if (t->off_preempted) {
			t->off_preempted_ns += d;
			hist_add(&p->hist[LP_H_OFF_PREEMPTED], d);
		} else {
			t->off_blocked_ns += d;
			hist_add(&p->hist[LP_H_OFF_BLOCKED], d);
		}
		if (t->off_region == LP_R_BARRIER)
			__sync_fetch_and_add(&p->ctr[LP_C_BARRIER_OFF_EST_NS], d);
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
	cpu1 = bpf_get_smp_processor_id() + 1;
	if (t->last_cpu && t->last_cpu != cpu1) {
		t->migrations++;
		__sync_fetch_and_add(&p->ctr[LP_C_MIGRATIONS], 1);
	}
	t->last_cpu = cpu1;
	t->on_since = now;
	t->off_since = 0;
	t->runnable_since = 0;
}

static __always_inline void on_wakeup(struct task_struct *task)
{
	__u32 tgid = BPF_CORE_READ(task, tgid);
	__u32 tid;
	struct lp_thread *t;

	if (!bpf_map_lookup_elem(&procs, &tgid) || (BPF_CORE_READ(task, flags) & PF_EXITING))
		return;
	tid = BPF_CORE_READ(task, pid);
	t = thread_get(tid, tgid);
	if (t && !t->runnable_since)
		t->runnable_since = bpf_ktime_get_ns();
}

static __always_inline void on_exit(struct task_struct *task)
{
	__u32 tgid = BPF_CORE_READ(task, tgid);
	__u32 tid = BPF_CORE_READ(task, pid);
	struct lp_proc_stats *p;
	struct lp_ev_exit *e;
	struct lp_thread *t;

	p = bpf_map_lookup_elem(&procs, &tgid);
	if (!p) {
		/* Its process's entry may have been taken by the daemon's sweep (an exit it saw
		 * in /proc first): the thread's entry goes all the same. */
		bpf_map_delete_elem(&threads, &tid);
		return;
	}
	/* The thread is on CPU now and no switch-out will be seen for it: count to here. */
	t = bpf_map_lookup_elem(&threads, &tid);
	if (t && t->tgid == tgid && t->on_since)
		__sync_fetch_and_add(&p->ctr[LP_C_ONCPU_NS], bpf_ktime_get_ns() - t->on_since);
	if (t && t->tgid == tgid && t->gen_in)
		gen_depth_add(tgid, -1);
	bpf_map_delete_elem(&threads, &tid);
	/* do_exit() decrements signal->live before this tracepoint: 0 means the group is dead. */
	if (BPF_CORE_READ(task, signal, live.counter) != 0)
		return;
	e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (e) {
		e->type = LP_EV_EXIT;
		e->pad = 0;
		bpf_probe_read_kernel(&e->stats, sizeof(e->stats), p);
		e->stats.exit_ns = bpf_ktime_get_ns();
		bpf_ringbuf_submit(e, 0);
	} else {
		drop(LP_D_EVENTS_LOST);
	}
	bpf_map_delete_elem(&procs, &tgid);
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
 * (same inode and mtime) and found nothing that matters for this process. */
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
	if (v && v->mtime_ns == mtime) {
		if (v->verdict == LP_OBJ_NONE)
			return;
		if (v->verdict == LP_OBJ_HELPER && !bpf_map_lookup_elem(&procs, &tgid))
			return;
	}
	e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		drop(LP_D_EVENTS_LOST);
		return;
	}
	e->type = LP_EV_MAP;
	e->tgid = tgid;
	e->obj = key;
	e->mtime_ns = mtime;
	bpf_ringbuf_submit(e, 0);
}

static __always_inline void mmap_enter(__u64 prot, __s64 fd)
{
	struct task_struct *task;
	struct file **fds, *f = NULL;

	if (!(prot & PROT_EXEC) || fd < 0)
		return;
	task = (struct task_struct *)bpf_get_current_task();
	if (fd >= BPF_CORE_READ(task, files, fdt, max_fds))
		return;
	fds = BPF_CORE_READ(task, files, fdt, fd);
	if (bpf_probe_read_kernel(&f, sizeof(f), &fds[fd]) || !f)
		return;
	exec_mapping(bpf_get_current_pid_tgid() >> 32, f);
}

static __always_inline void on_exec(struct task_struct *task)
{
	struct lp_ev_exec *e;
	struct file *exe;

	exe = BPF_CORE_READ(task, mm, exe_file);
	if (exe)
		exec_mapping(BPF_CORE_READ(task, tgid), exe);
	if (!want_exec_events)
		return;
	e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		drop(LP_D_EVENTS_LOST);
		return;
	}
	e->type = LP_EV_EXEC;
	e->tgid = BPF_CORE_READ(task, tgid);
	bpf_get_current_comm(e->comm, sizeof(e->comm));
	if (bpf_map_lookup_elem(&comms, e->comm)) {
		__u32 zero = 0, tgid = e->tgid;
		struct lp_proc_stats *init = bpf_map_lookup_elem(&proc_init, &zero);

		if (init) {
			init->tgid = tgid;
			init->tracked_since_ns = bpf_ktime_get_ns();
			bpf_map_update_elem(&procs, &tgid, init, BPF_NOEXIST);
		}
	}
	bpf_ringbuf_submit(e, 0);
}

/* --- scheduler and lifecycle: tp_btf variants --- */

SEC("tp_btf/sched_switch")
int BPF_PROG(lp_switch_btf, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	on_switch(preempt, prev, next, (struct pt_regs *)bpf_task_pt_regs(prev));
	return 0;
}

SEC("tp_btf/sched_wakeup")
int BPF_PROG(lp_wakeup_btf, struct task_struct *p)
{
	on_wakeup(p);
	return 0;
}

SEC("tp_btf/sched_wakeup_new")
int BPF_PROG(lp_wakeup_new_btf, struct task_struct *p)
{
	on_wakeup(p);
	return 0;
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

/* --- the same as raw_tp, for kernels where tp_btf does not load --- */

SEC("raw_tp/sched_switch")
int BPF_PROG(lp_switch_raw, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	on_switch(preempt, prev, next, NULL);
	return 0;
}

SEC("raw_tp/sched_wakeup")
int BPF_PROG(lp_wakeup_raw, struct task_struct *p)
{
	on_wakeup(p);
	return 0;
}

SEC("raw_tp/sched_wakeup_new")
int BPF_PROG(lp_wakeup_new_raw, struct task_struct *p)
{
	on_wakeup(p);
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

/* --- futex waits --- */

static __always_inline void futex_enter(__u64 uaddr, __u32 kind)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32;
	struct lp_thread *t;

	if (!bpf_map_lookup_elem(&procs, &tgid))
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
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct lp_futex_key key = {};
	struct lp_proc_stats *p;
	struct lp_futex_val *v, zero = {};
	struct lp_thread *t;
	__u64 d;

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

SEC("tracepoint/syscalls/sys_enter_mmap")
int lp_mmap_enter_tp(struct trace_event_raw_sys_enter *ctx)
{
	mmap_enter(ctx->args[2], (__s64)ctx->args[4]);
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
		mmap_enter(PT_REGS_PARM3_CORE_SYSCALL(regs),
			   (__s64)PT_REGS_PARM5_CORE_SYSCALL(regs));
	return 0;
}

SEC("raw_tp/sys_exit")
int BPF_PROG(lp_sys_exit_raw, struct pt_regs *regs, long ret)
{
	futex_exit(ret);
	return 0;
}

/* --- page faults: perf software events counted where the kernel counts min_flt/maj_flt --- */

static __always_inline void fault(__u32 ctr)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32, tid = (__u32)id;
	struct lp_proc_stats *p = bpf_map_lookup_elem(&procs, &tgid);
	struct lp_thread *t;

	if (!p)
		return;
	__sync_fetch_and_add(&p->ctr[ctr], 1);
	t = bpf_map_lookup_elem(&threads, &tid);
	if (!t || t->tgid != tgid)
		return;
	if (ctr == LP_C_FAULTS_MAJ)
		t->faults_maj++;
	else
		t->faults_min++;
}

SEC("perf_event")
int lp_fault_min(struct bpf_perf_event_data *ctx)
{
	fault(LP_C_FAULTS_MIN);
	return 0;
}

SEC("perf_event")
int lp_fault_maj(struct bpf_perf_event_data *ctx)
{
	fault(LP_C_FAULTS_MAJ);
	return 0;
}

/* --- cpu-clock sampling: the always-on estimate of where LLM threads spend their time --- */

SEC("perf_event")
int lp_sample(struct bpf_perf_event_data *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32;
	const struct lp_ranges *rg;
	struct lp_op_samples *os;
	struct lp_proc_stats *p;
	struct pt_regs *regs;
	struct where w;
	__u64 ip, sp;
	bool gen;

	rg = bpf_map_lookup_elem(&ranges, &tgid);
	if (!rg)
		return 0;
	p = bpf_map_lookup_elem(&procs, &tgid);
	if (!p)
		return 0;
	/* In the kernel (a syscall, a fault): classify where it entered from user space. */
	ip = PT_REGS_IP(&ctx->regs);
	sp = PT_REGS_SP(&ctx->regs);
	if ((__s64)ip < 0) {
		regs = (struct pt_regs *)bpf_task_pt_regs(bpf_get_current_task_btf());
		ip = PT_REGS_IP_CORE(regs);
		sp = PT_REGS_SP_CORE(regs);
	}
	__sync_fetch_and_add(&p->ctr[LP_C_SAMPLES], 1);
	w = classify(rg, ip, sp, LP_STACK_WORDS);
	if (w.region == LP_R_MATMUL)
		__sync_fetch_and_add(&p->ctr[LP_C_SAMPLES_MATMUL], 1);
	else if (w.region == LP_R_BARRIER)
		__sync_fetch_and_add(&p->ctr[LP_C_SAMPLES_BARRIER], 1);
	os = bpf_map_lookup_elem(&op_samples, &tgid);
	if (!os)
		return 0;
	gen = os->gen_depth > 0;
	__sync_fetch_and_add(&os->total, 1);
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

/* --- llama_decode: once per batch, so probed always --- */

SEC("uprobe")
int BPF_KPROBE(lp_decode_enter)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32;
	struct lp_proc_stats *p;
	struct lp_thread *t;
	__s32 n_tokens = 0;
	__u64 now, last;
	void *batch;

	p = bpf_map_lookup_elem(&procs, &tgid);
	if (!p)
		return 0;
	t = thread_get((__u32)id, tgid);
	if (!t)
		return 0;
		/* llama_decode(ctx, struct llama_batch batch): n_tokens is the batch's first field.
	 * The 56-byte struct is passed in memory: on the stack above the return address on
	 * x86-64, by reference in x1 on arm64. */
#if defined(__TARGET_ARCH_x86)
	batch = (void *)(PT_REGS_SP(ctx) + 8);
#else
	batch = (void *)PT_REGS_PARM2(ctx);
#endif
	bpf_probe_read_user(&n_tokens, sizeof(n_tokens), batch);
	/* The wall clock per generated token, from one generation decode to the next. */
	now = bpf_ktime_get_ns();
	last = p->gen_last_ns;
	if (n_tokens == 1 && last && now - last < LP_GEN_GAP_NS) {
		__sync_fetch_and_add(&p->ctr[LP_C_GEN_INTERVALS], 1);
		__sync_fetch_and_add(&p->ctr[LP_C_GEN_INTERVAL_NS], now - last);
	}
	p->gen_last_ns = n_tokens == 1 ? now : 0;
	/* A generation decode is in flight for the process's samples, once per thread. */
	if (n_tokens == 1 && !t->gen_in)
		t->gen_in = gen_depth_add(tgid, 1);
	t->decode_tokens = n_tokens > 0 ? n_tokens : 0;
	t->decode_since = now;
	return 0;
}

SEC("uretprobe")
int BPF_KRETPROBE(lp_decode_exit, int ret)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32, tid = (__u32)id;
	struct lp_proc_stats *p;
	struct lp_thread *t;
	__u64 d;

	t = bpf_map_lookup_elem(&threads, &tid);
	if (!t || t->tgid != tgid || !t->decode_since)
		return 0;
	d = bpf_ktime_get_ns() - t->decode_since;
	t->decode_since = 0;
	if (t->gen_in)
		t->gen_in = !gen_depth_add(tgid, -1);
	p = bpf_map_lookup_elem(&procs, &tgid);
	if (!p)
		return 0;
	if (ret != 0) {
		__sync_fetch_and_add(&p->ctr[LP_C_DECODE_ERRORS], 1);
		return 0;
	}
	if (t->decode_tokens == 1) {
		__sync_fetch_and_add(&p->ctr[LP_C_DECODE_GEN_CALLS], 1);
		__sync_fetch_and_add(&p->ctr[LP_C_DECODE_GEN_NS], d);
		hist_add(&p->hist[LP_H_DECODE_GEN], d);
	} else if (t->decode_tokens > 1) {
		__sync_fetch_and_add(&p->ctr[LP_C_DECODE_PROMPT_CALLS], 1);
		__sync_fetch_and_add(&p->ctr[LP_C_DECODE_PROMPT_TOKENS], t->decode_tokens);
		__sync_fetch_and_add(&p->ctr[LP_C_DECODE_PROMPT_NS], d);
		hist_add(&p->hist[LP_H_DECODE_PROMPT], d);
	}
	return 0;
}

/* --- precise mode: every matmul and barrier call, while user space has it switched on --- */

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
	if (t)
		call_enter(&t->bar);
	return 0;
}

SEC("uretprobe")
int BPF_KRETPROBE(lp_barrier_exit)
{
	struct lp_proc_stats *p;
	struct lp_thread *t;
	__u32 tgid;
	__u64 d;

	t = precise_thread(&tgid);
	if (!t || !(d = call_exit(&t->bar)) || !(p = bpf_map_lookup_elem(&procs, &tgid)))
		return 0;
	__sync_fetch_and_add(&p->ctr[LP_C_BARRIER_CALLS], 1);
	__sync_fetch_and_add(&p->ctr[LP_C_BARRIER_NS], d);
	__sync_fetch_and_add(&p->ctr[LP_C_BARRIER_OFF_NS], t->bar.off_ns < d ? t->bar.off_ns : d);
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
	return 0;
}

SEC("uretprobe")
int BPF_KRETPROBE(lp_op_exit)
{
	struct lp_op_key key = {};
	struct lp_op_precise *s;
	struct lp_thread *t;
	__u32 zero = 0;
	__u64 d;

	t = precise_thread(&key.tgid);
	if (!t || !(d = call_exit(&t->op)))
		return 0;
	key.op = t->op_idx;
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
	__sync_fetch_and_add(&s->calls, 1);
	__sync_fetch_and_add(&s->ns, d);
	__sync_fetch_and_add(&s->oncpu_ns, d > t->op.inner_ns + t->op.off_ns
						   ? d - t->op.inner_ns - t->op.off_ns
						   : 0);
	hist_add(&s->hist, d);
	return 0;
}
