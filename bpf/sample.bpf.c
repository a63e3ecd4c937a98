// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* The sampler: cpu-clock samples of tracked processes, each classified once by where.bpf.h
 * into sync, an op, or outside ops, counted per process and per op. */
#include "lp.bpf.h"
#include "where.bpf.h"

/* The phase of a sample of a process with these op counts: a decode in flight (llama_decode
 * is probed at entry and return); for an engine whose step has no return (torch), the last
 * forward's until it is over (torch.bpf.c). */
static __always_inline __u32 phase_of(const struct lp_op_samples *os, __u64 now)
{
	if (!os)
		return LP_PHASE_OUTSIDE;
	if (os->gen_depth > 0)
		return LP_PHASE_GENERATION;
	if (os->decode_depth > 0)
		return LP_PHASE_PROMPT;
	if (os->fwd_until_ns > now)
		return os->fwd_phase % LP_PHASE_NR;
	return LP_PHASE_OUTSIDE;
}

/* The sample's call stack to "stacks", with what it was (a profile window is open). Kernel
 * frames where it was taken in the kernel, the user frames walked whole; sent without a
 * wake-up: the daemon reads the ring on its own clock. */
static __always_inline void send_stack(struct bpf_perf_event_data *ctx, const struct lp_ranges *rg,
				       const struct uregs *u, const struct lp_op_samples *os,
				       struct where w, __u64 id, bool in_kernel, __u32 phase)
{
	struct lp_stack_rec *rec;
	__u32 zero = 0, flags = 0, nu, nk = 0, n, py, npy;
	long got;

	rec = bpf_map_lookup_elem(&stack_rec, &zero);
	if (!rec)
		return;
	rec->ts = bpf_ktime_get_ns();
	rec->tgid = id >> 32;
	rec->tid = (__u32)id;
	rec->op = (__s16)w.op;
	rec->aop = w.aop;
	rec->region = (__u8)w.region;
	rec->phase = (__u8)phase;
	if (in_kernel) {
		got = bpf_get_stack(ctx, rec->ip, LP_STACK_KERNEL_MAX * 8, 0);
		nk = got > 0 ? (__u32)got / 8 : 0;
	}
	if (nk > LP_STACK_KERNEL_MAX)
		nk = LP_STACK_KERNEL_MAX;
	nu = walk_stack(rg, u, &rec->ip[nk & (LP_STACK_SLOTS / 2 - 1)], &flags);
	if (nu > LP_STACK_USER_MAX)
		nu = LP_STACK_USER_MAX;
	rec->nkernel = (__u8)nk;
	rec->nuser = (__u8)nu;
	n = nk + nu;
	if (n > LP_STACK_KERNEL_MAX + LP_STACK_USER_MAX)
		n = LP_STACK_KERNEL_MAX + LP_STACK_USER_MAX;
	/* A thread running CPython: its interpreter's frames after the native ones. */
	py = lp_py_frames(rec, n);
	npy = py & (LP_PY_MORE - 1);
	if (npy > LP_STACK_PY_MAX)
		npy = LP_STACK_PY_MAX;
	if (npy)
		flags |= LP_SF_PY;
	if (py & LP_PY_MORE)
		flags |= LP_SF_PY_TRUNCATED;
	rec->npy = (__u8)npy;
	rec->flags = (__u8)flags;
	n += 2 * npy;
	if (bpf_ringbuf_output(&stacks, rec, LP_STACK_REC_HDR + (__u64)n * 8, BPF_RB_NO_WAKEUP))
		__sync_fetch_and_add(&stacks_lost, 1);
}

/* n samples not taken counted for tgid's process, where tracked (0: no one's of ours). */
static __always_inline void add_skipped(__u32 tgid, __u64 n)
{
	struct lp_proc_stats *p;

	if (n && tgid && (p = bpf_map_lookup_elem(&procs, &tgid))) {
		__sync_fetch_and_add(&p->ctr[LP_C_SAMPLES_SKIPPED], n);
		__sync_fetch_and_add(&samples_skipped, n);
	}
}

/* The grid's firings in (c->last_ns, x): the old grid's up to a restart at restart (0:
 * none in the gap), the new one's after it. */
static __always_inline __u64 firings_to(const struct lp_sample_clock *c, __u64 x, __u64 period,
					__u64 restart)
{
	if (x <= c->last_ns || !c->period_ns || !period)
		return 0;
	if (!restart || x <= restart)
		return (x - c->last_ns) / c->period_ns;
	return (restart - c->last_ns) / c->period_ns + (x - restart) / period;
}

/* n samples not taken between the run c remembers and this one (see above), each given to
 * the task that ran when it was due: the CPU's switches from and to tracked tasks in the
 * gap are noted (lp_note_switch), and a switch not noted is between two others; so each
 * stretch between notes is its task's, the first the last run's. Where more switches
 * came than the notes hold, no one's for certain. */
static __always_inline void skipped_to(const struct lp_sample_clock *c, __u64 n, __u64 period,
				       __u64 restart, __u32 tgid)
{
	const struct lp_cpu_switches *sw = bpf_map_lookup_elem(&cpu_switch, &(__u32){0});
	__u64 notes, from = 0;
	__u32 owner = c->tgid;

	if (!sw)
		return;
	notes = sw->seq - c->notes;
	if (notes > LP_SWITCH_NOTES) {
		__sync_fetch_and_add(&samples_skipped, n);
		__sync_fetch_and_add(&samples_skipped_unknown, n);
		return;
	}
	for (__u32 i = 0; i < LP_SWITCH_NOTES && i < notes; i++) {
		const struct lp_switch_note *e = &sw->n[(c->notes + i) & (LP_SWITCH_NOTES - 1)];
		__u64 to = firings_to(c, e->ns, period, restart);

		if (to > n)
			to = n;
		if (to > from) {
			add_skipped(owner, to - from);
			from = to;
		}
		owner = e->tgid;
	}
	if (n > from && owner == tgid)
		add_skipped(owner, n - from);
}

/* Samples not taken. The kernel runs no BPF program on a CPU where a kprobe or a classic
 * tracepoint program runs already (bpf_prog_active: syscall tracepoints' programs, ours with
 * --futex-source tracepoint and any other tool's; and the bpf(2) map calls; not uprobes'):
 * a cpu-clock timer that fires then takes no sample, and counts that nowhere. Nor does a
 * timer that fired a period late or more (interrupts off that long, the vCPU not running):
 * hrtimer_forward skips the periods it missed. Each CPU's timer fires on its own grid,
 * start + n * period, a few microseconds late at most: a gap of k periods (to the nearest)
 * between two runs here is k - 1 samples not taken. A timer that came more than half a
 * period late counts one more. User space restarts the timers at random rates (core.c),
 * each on a new grid from the restart on: it makes the CPU's epoch odd around each and
 * says when it was; across one restart the gap is the old grid's firings before it and the
 * new one's after it (a gap across more is not counted). Each firing missed is the
 * process's whose task ran when it was due: the CPU's switches from or to a tracked task
 * are noted (sched.bpf.c's lp_note_switch), and one not noted is between two untracked
 * tasks, so each stretch between notes is one task's, the first the last run's. Only the
 * tracked processes' are
 * counted (an idle CPU's timer need not fire: 68,000 "missing" in a quiet minute); where
 * more tracked switches came in a gap than the notes hold, its firings are no one's for
 * certain (samples_skipped_unknown). */
static __always_inline void count_skipped(void)
{
	__u32 cpu = bpf_get_smp_processor_id(), zero = 0, epoch;
	struct lp_sample_clock *c = bpf_map_lookup_elem(&sample_clock, &zero);
	const struct lp_cpu_switches *sw;
	__u64 now, period, restart, k = 0;
	__u32 tgid;

	if (!c || cpu >= LP_SAMPLE_CPUS)
		return;
	epoch = sample_epoch[cpu];
	period = sample_period_ns[cpu];
	restart = sample_restart_ns[cpu];
	if (sample_epoch[cpu] != epoch) /* a restart meanwhile: both read again next time */
		epoch = 1;
	now = bpf_ktime_get_ns();
	tgid = (__u32)(current_ids() >> 32);
	if (!maybe_ours(tgid))
		tgid = 0;
	if (!period || !c->last_ns || !c->period_ns || (epoch & 1) || now <= c->last_ns)
		k = 0;		    /* not counted */
	else if (epoch == c->epoch) /* runs on the same grid: k periods apart */
		k = (now - c->last_ns + period / 2) / period;
	else if (epoch == c->epoch + 2 && restart > c->last_ns && restart < now)
		/* the old grid's firings before the restart, the new one's after it */
		k = (restart - c->last_ns) / c->period_ns + (now - restart + period / 2) / period;
	if (k > 1)
		skipped_to(c, k - 1, period, epoch == c->epoch ? 0 : restart, tgid);
	sw = bpf_map_lookup_elem(&cpu_switch, &zero);
	c->last_ns = now;
	c->period_ns = period;
	c->epoch = epoch;
	c->tgid = tgid;
	c->notes = sw ? sw->seq : 0;
}

/* A sample of op aop (an op functions' table's) of tgid: its entry made on first use. */
static __always_inline void aop_count(__u32 tgid, __u32 aop, bool gen, bool region)
{
	struct lp_aop_key k = {.tgid = tgid, .aop = aop};
	struct lp_aop_val *v = bpf_map_lookup_elem(&aop_samples, &k), zero = {};

	if (!v) {
		/* Two CPUs may insert the same key at once: the loser looks it up. */
		bpf_map_update_elem(&aop_samples, &k, &zero, BPF_NOEXIST);
		v = bpf_map_lookup_elem(&aop_samples, &k);
		if (!v) {
			drop(LP_D_AOP_FULL);
			return;
		}
	}
	__sync_fetch_and_add(&v->all, 1);
	if (gen)
		__sync_fetch_and_add(&v->gen, 1);
	if (region)
		__sync_fetch_and_add(&v->region, 1);
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
	__u32 phase;

	count_skipped();
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
	w = classify(rg, &u, LP_STACK_WORDS, id);
	if (w.via == LP_VIA_TEAM)
		region_team(rg, &w);
	if (w.via == LP_VIA_UNTAKEN)
		region_take(rg, &w, tgid);
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
		if (w.region == LP_R_BARRIER || w.op >= 0 || w.aop != LP_AOP_NONE)
			t->samples_ggml++;
	}
	os = bpf_map_lookup_elem(&op_samples, &tgid);
	phase = phase_of(os, bpf_ktime_get_ns());
	if (profiles)
		send_stack(ctx, rg, &u, os, w, id, in_kernel, phase);
	if (!os)
		return 0;
	gen = phase == LP_PHASE_GENERATION;
	__sync_fetch_and_add(&os->total, 1);
	/* How it was placed: the unwind's quality (abi.h). */
	note = bpf_map_lookup_elem(&walk_note, &zero);
	if (note) {
		__sync_fetch_and_add(&os->how[note->how & (LP_HOW_NR - 1)], 1);
		if (note->lib)
			__sync_fetch_and_add(&os->lib[(note->lib - 1) & (LP_MAX_LIBS - 1)], 1);
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
		if (w.via == LP_VIA_REGION)
			__sync_fetch_and_add(&os->region[w.op & (LP_MAX_OPS - 1)], 1);
	} else if (w.aop != LP_AOP_NONE) {
		aop_count(tgid, w.aop, gen, w.via == LP_VIA_REGION);
	} else {
		/* outside ops: by the Python function it ran, in a process running CPython */
		lp_py_count(tgid, gen);
	}
	if (w.via)
		__sync_fetch_and_add(&os->via[w.via & 3], 1);
	return 0;
}
