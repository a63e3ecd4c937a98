// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* Where a thread is in user code, from its registers and the sampling table (ranges):
 * shared by the sampler (sample.bpf.c) and the switch-out (sched.bpf.c). */
#ifndef LP_WHERE_BPF_H
#define LP_WHERE_BPF_H

#include "lp.bpf.h"

/* Where a sample is: sync, an op (by index in the sampling table's op table, or from an
 * op functions' table: aop), or outside ops. */
struct where {
	__u32 region; /* enum lp_region */
	__s32 op;     /* op index, or -1 */
	__u32 aop;    /* slot << 16 | name of an op functions' table (abi.h), or LP_AOP_NONE */
	__u32 via;    /* enum lp_where_via: how a worker's op was found */
};

/* A thread that runs an OpenMP parallel region's work (its walk came through the
 * runtime's thread start and found no op): its op is the one whose frames lie above the
 * region's entry on the master's stack: found from the worker's own thread data (GCC's
 * runtime: region_team), else from the region's probed entry (torch.bpf.c's
 * lp_omp_region). */
enum lp_where_via {
	LP_VIA_OWN = 0,	 /* its own frames */
	LP_VIA_REGION,	 /* the master's frames above the region's entry */
	LP_VIA_REGIONS,	 /* more than one region open in the process, or (team path) the
			  * master's frames not found below the region's data: no op */
	LP_VIA_NOREGION, /* under the runtime, no op: no region open, or (team path) a
			  * worker's first region, its thread data holding none yet */
	LP_VIA_UNTAKEN,	 /* the one open region's master not classified yet: region_take */
	LP_VIA_TEAM,	 /* GCC's runtime: the master to be found from the team (region_team) */
};

/* A thread's user registers, as far as the walk reads them: %r10 and %r13 only in the
 * innermost frame, in the prologue or epilogue of a function that realigns its stack.
 * Plain numbers: a global function takes them (lp_classify). */
struct uregs {
	__u64 ip, sp, bp, r10, r13;
};

/* Frames walked by call frame information per classification, before the scan takes
 * over from the last one reached: a ggml op is two to five frames above its kernels, an
 * aten op five to fifteen (its dispatcher's frames and its BLAS's between them). */
#define LP_UNWIND_FRAMES 32

enum uw_state {
	UW_WALKING,
	UW_DONE,    /* the walk settled it: an op, a barrier, or none in the frames */
	UW_FAILED,  /* no rule at this frame: scan the stack from it */
	UW_OUTSIDE, /* the walk left the objects with rows (frame_up) */
};

struct scan_ctx {
	const struct lp_ranges *rg;
	const __u64 *words;
	__u32 nwords;
	__s32 kernel_op; /* the first matmul kernel found, for when no op function is */
	struct where w;
	/* the frame being unwound */
	__u64 ip, sp, bp, r10, r13;
	/* 1: ip is a return address (its call is at ip - 1); 0: an interrupted instruction.
	 * Subtracted, not branched on: the verifier's states stay as many as before. */
	__u64 ra_adj;
	/* 1 while every frame walked is in the C library: code an OpenMP runtime called to
	 * wait, so a return address into the runtime is sync as its instruction pointer
	 * would be (abi.h's lp_unwind_obj.libc) */
	__u64 plain;
	struct lp_walk_note *note; /* how the sample was placed (lp.bpf.h) */
	__u32 uw_state;		   /* enum uw_state */
	bool done;
	bool bp_ok;
	/* Packed, no hole: the walk's callers and callees share the program's 512 bytes of
	 * stack (the switch's program, lp_classify, a step and lp_uw_row use them all). */
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
	if (k == LP_K_RUNTIME && !c->note->via_runtime)
		c->note->via_runtime = LP_RT_STARTED;
	if (k == LP_K_LIBRARY && is_ip)
		c->note->lib = 1 + c->rg->op[i & (LP_MAX_RANGES - 1)];
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

/* The object with unwind rows whose mapping holds addr, or -1 (maps.bpf.c). */
int lp_uw_obj(const struct lp_ranges *rg, __u64 addr);

/* The row covering file offset off of the object whose rows are in slot (n of them), as
 * its 8 bytes; LP_UW_NO_ROW before the first and in a gap between FDEs (maps.bpf.c). */
#define LP_UW_NO_ROW (~0ULL)
__u64 lp_uw_row(__u32 slot, __u32 n, __u64 off);

static __always_inline int uw_obj(const struct lp_ranges *rg, __u64 addr)
{
	return lp_uw_obj(rg, addr);
}

/* The op of an op functions' table whose function holds addr (slot << 16 | name), or
 * LP_AOP_NONE. */
static __always_inline __u32 aop_at(const struct lp_ranges *rg, __u64 addr)
{
	const struct lp_unwind_obj *o;
	struct lp_opfn_row r;
	int k = uw_obj(rg, addr);
	__u64 v;

	if (k < 0)
		return LP_AOP_NONE;
	o = &rg->uw[k & (LP_MAX_UNWIND - 1)];
	if (!o->opfn_n || (v = lp_uw_row(o->opfn_slot, o->opfn_n, addr - o->bias)) == LP_UW_NO_ROW)
		return LP_AOP_NONE;
	__builtin_memcpy(&r, &v, sizeof(r));
	return r.name ? (__u32)o->opfn_slot << 16 | r.name : LP_AOP_NONE;
}

/* addr (a call's or an interrupted instruction's) in a function of an op functions'
 * table: its op taken (where.aop), a matmul's region with it. */
static __always_inline bool opfn_take(struct scan_ctx *c, __u64 addr)
{
	const struct lp_unwind_obj *o;
	struct lp_opfn_row r;
	int k = uw_obj(c->rg, addr);
	__u64 v;

	if (k < 0)
		return false;
	o = &c->rg->uw[k & (LP_MAX_UNWIND - 1)];
	if (!o->opfn_n)
		return false;
	v = lp_uw_row(o->opfn_slot, o->opfn_n, addr - o->bias);
	if (v == LP_UW_NO_ROW)
		return false;
	__builtin_memcpy(&r, &v, sizeof(r));
	if (!r.name)
		return false;
	/* In the note, not the walk's state: the verifier follows no value of it through
	 * the loop. */
	c->note->aop = (__u32)o->opfn_slot << 16 | r.name;
	if (r.group == 0 /* ops.h's LP_G_MATMUL */)
		c->w.region = LP_R_MATMUL;
	return true;
}

static __always_inline bool uw_row(const struct lp_unwind_obj *o, __u64 off,
				   struct lp_unwind_row *r)
{
	__u64 v = lp_uw_row(o->slot, o->n, off);

	if (v == LP_UW_NO_ROW)
		return false;
	__builtin_memcpy(r, &v, sizeof(*r));
	return true;
}

/* The walk gives way to the scan at a frame in object obj (-1: in none), for why (enum
 * lp_uw_fail). */
static __always_inline long uw_fail(struct scan_ctx *c, __u32 why, int obj)
{
	c->uw_state = UW_FAILED;
	c->note->fail = why;
	c->note->obj = obj < 0 ? LP_MAX_UNWIND : (__u32)obj;
	return 1;
}

/* A return address a uretprobe took: while a probed function runs (llama_decode always,
 * precise mode's ops), the kernel has put its trampoline (the "[uprobes]" page) where the
 * return address was, and keeps the original in the task's return instances, each with
 * the stack address it replaced (its sp at the function's entry). ra read at slot is that
 * original where an instance replaced slot; else ra. */
static __always_inline __u64 uretprobe_ra(__u64 slot, __u64 ra)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct return_instance *ri;
	struct uprobe_task *ut;

	if (!bpf_core_field_exists(task->utask))
		return ra;
	ut = BPF_CORE_READ(task, utask);
	if (!ut)
		return ra;
	ri = BPF_CORE_READ(ut, return_instances);
	for (int i = 0; i < 8 && ri; i++) {
		if (BPF_CORE_READ(ri, stack) == slot)
			return BPF_CORE_READ(ri, orig_ret_vaddr);
		ri = BPF_CORE_READ(ri, next);
	}
	return ra;
}

/* One frame up: c->ip/sp/bp to its caller's, by the row covering ip (abi.h's forms); c->ip
 * is then the caller's return address (0: none, the outermost frame), ra_adj 1. Returns 0
 * when it moved; 1 when it stopped, uw_state saying why: UW_DONE at a frame the rows mark
 * outermost, UW_OUTSIDE having left the objects with rows, UW_FAILED with no rule. */
static __always_inline long frame_up(struct scan_ctx *c, __u64 i)
{
	struct lp_unwind_row rw, *row;
	const struct lp_unwind_obj *o;
	__u64 cfa = 0, ra = 0, bp = 0, at;
	__s64 off;
	int k;

	k = uw_obj(c->rg, c->ip);
	row = NULL;
	if (k >= 0) {
		o = &c->rg->uw[k & (LP_MAX_UNWIND - 1)];
		if (!o->libc)
			c->plain = 0;
		if (uw_row(o, c->ip - o->bias - c->ra_adj, &rw))
			row = &rw;
	}
	if (!row) {
		/* The innermost frame outside the objects with rows (a libc or libm leaf:
		 * memcpy, expf), or in code that has no CFI (hand-written assembly): a leaf,
		 * its caller's return address on top of the stack, taken where it returns into
		 * code with rows. Deeper, the walk has left the objects with rows. */
		if (i == 0 && !bpf_probe_read_user(&ra, sizeof(ra), (void *)c->sp) &&
		    uw_obj(c->rg, ra) >= 0) {
			c->sp += 8;
			c->ip = ra;
			c->ra_adj = 1;
			return 0;
		}
		if (k >= 0)
			return uw_fail(c, LP_UW_WHY_NO_FDE, k);
		if (i == 0)
			return uw_fail(c, LP_UF_OUTSIDE, -1);
		c->uw_state = UW_OUTSIDE;
		return 1;
	}
	off = (__s64)row->cfa_off * 8;
	switch (row->cfa) {
	case LP_UW_RSP:
		cfa = c->sp + off;
		break;
	case LP_UW_RBP:
	case LP_UW_RBP_DEREF:
		if (!c->bp_ok)
			return uw_fail(c, LP_UF_RBP, k);
		cfa = c->bp + off;
		if (row->cfa == LP_UW_RBP_DEREF &&
		    bpf_probe_read_user(&cfa, sizeof(cfa), (void *)(c->bp + off)))
			return uw_fail(c, LP_UF_READ, k);
		break;
	case LP_UW_RSP_DEREF:
		if (bpf_probe_read_user(&cfa, sizeof(cfa), (void *)(c->sp + off)))
			return uw_fail(c, LP_UF_READ, k);
		break;
	case LP_UW_R10:
	case LP_UW_R13:
		/* Only the innermost frame's registers are known. */
		if (i)
			return uw_fail(c, LP_UW_WHY_REG, k);
		cfa = row->cfa == LP_UW_R10 ? c->r10 : c->r13;
		cfa += off;
		break;
	case LP_UW_PLT:
		cfa = c->sp + 8 + ((__s64)(c->ip & 15) >= row->cfa_off ? 8 : 0);
		break;
	case LP_UW_SIGNAL:
		/* The interrupted thread's registers, saved by the kernel at fixed offsets. */
		at = c->sp;
		if (bpf_probe_read_user(&cfa, sizeof(cfa), (void *)(at + off)) ||
		    bpf_probe_read_user(&ra, sizeof(ra), (void *)(at + off + 8)))
			return uw_fail(c, LP_UF_READ, k);
		c->bp_ok = row->rbp != LP_UW_RBP_LOST &&
			   !bpf_probe_read_user(&bp, sizeof(bp), (void *)(at + 8 * row->rbp));
		c->bp = bp;
		c->sp = cfa;
		c->ip = ra;
		c->ra_adj = 0;
		return 0;
	case LP_UW_END:
		c->uw_state = UW_DONE; /* the outermost frame */
		return 1;
	default:
		return uw_fail(c, (__u32)row->cfa_off, k);
	}
	if (bpf_probe_read_user(&ra, sizeof(ra), (void *)(cfa - 8)))
		return uw_fail(c, LP_UF_READ, k);
	/* No code of ours is there: a uretprobe's trampoline, perhaps. */
	if (uw_obj(c->rg, ra) < 0)
		ra = uretprobe_ra(cfa - 8, ra);
	if (row->rbp == LP_UW_RBP_LOST) {
		c->bp_ok = false;
	} else if (row->rbp) {
		/* Saved below the CFA, or (a realigned frame) at the frame's own %rbp. */
		if (row->rbp > 0 && !c->bp_ok)
			at = 0;
		else
			at = row->rbp < 0 ? cfa + 8 * row->rbp : c->bp + 8 * (row->rbp - 1);
		c->bp_ok = at && !bpf_probe_read_user(&bp, sizeof(bp), (void *)at);
		c->bp = bp;
	}
	c->sp = cfa;
	c->ip = ra;
	c->ra_adj = 1;
	return 0;
}

/* Whether addr is an OpenMP runtime's code (its whole text is one range of the table). */
static __always_inline bool in_runtime(const struct lp_ranges *rg, __u64 addr)
{
	int i = range_find(rg, addr);

	return i >= 0 && rg->kind[i & (LP_MAX_RANGES - 1)] == LP_K_RUNTIME;
}

/* A frame above a return address into an OpenMP runtime, at: one of neither the runtime
 * nor the C library (in an object with rows) is user code that called the runtime, an
 * opener's; a thread the runtime started (a worker) has only the C library's thread start
 * above it. */
static __always_inline void runtime_caller(struct scan_ctx *c, __u64 at)
{
	int k;

	if (in_runtime(c->rg, at))
		return;
	k = uw_obj(c->rg, at);
	if (k >= 0 && !c->rg->uw[k & (LP_MAX_UNWIND - 1)].libc)
		c->note->via_runtime = LP_RT_CALLED;
}

/* One frame of the classification's walk: up, then the caller's return address classified
 * as the scan classifies a word (a return address points after its call: the call is at
 * ip - 1). */
static long unwind_step(__u64 i, void *data)
{
	struct scan_ctx *c = data;
	__u64 at;

	if (frame_up(c, i)) {
		/* Past the objects with rows, no op was found in the frames. */
		if (c->uw_state == UW_OUTSIDE)
			c->uw_state = UW_DONE;
		return 1;
	}
	if (!c->ip) {
		c->uw_state = UW_DONE; /* the outermost frame */
		return 1;
	}
	at = c->ip - c->ra_adj;
	if (c->note->via_runtime == LP_RT_STARTED)
		runtime_caller(c, at);
	if (at >= c->rg->lo && at < c->rg->hi && take(c, range_find(c->rg, at), c->plain)) {
		c->uw_state = UW_DONE;
		return 1;
	}
	if (c->rg->opfn && opfn_take(c, at)) {
		c->uw_state = UW_DONE;
		return 1;
	}
	return 0;
}

/* A whole user stack, for profiles: every frame's address from the interrupted
 * instruction up to the outermost frame, by the rows where the code has them, else by the
 * frame pointer chain (marked: a frame compiled without one gives a wrong caller or none). */
struct stack_walk {
	struct scan_ctx c;
	__u64 *ip;   /* LP_STACK_USER_MAX of them */
	__u32 n;     /* frames taken */
	__u32 flags; /* enum lp_stack_flags */
};

/* The caller by the frame pointer chain: [rbp] the caller's rbp, [rbp + 8] the return
 * address; rbp above the stack pointer and within 8 MiB of it, aligned. */
static __always_inline bool fp_up(struct scan_ctx *c)
{
	__u64 fr[2];

	if (!c->bp_ok || c->bp < c->sp || c->bp - c->sp > (8ULL << 20) || (c->bp & 7) ||
	    bpf_probe_read_user(fr, sizeof(fr), (void *)c->bp))
		return false;
	c->sp = c->bp + 16;
	c->bp = fr[0];
	c->ip = fr[1];
	c->ra_adj = 1;
	return true;
}

static long stack_step(__u64 i, void *data)
{
	struct stack_walk *s = data;

	/* By the loop's index, which the verifier does not know, not by a count it would
	 * follow from 0 up through every call it checks. */
	if (i >= LP_STACK_USER_MAX) {
		s->flags |= LP_SF_TRUNCATED;
		return 1;
	}
	s->ip[i & (LP_STACK_USER_MAX - 1)] = s->c.ip;
	s->n = i + 1;
	if (frame_up(&s->c, i)) {
		if (s->c.uw_state == UW_DONE) {
			s->flags |= LP_SF_COMPLETE;
			return 1;
		}
		if (!fp_up(&s->c))
			return 1;
		s->flags |= LP_SF_FP;
	}
	if (!s->c.ip) {
		s->flags |= LP_SF_COMPLETE;
		return 1;
	}
	return 0;
}

/* Walks the user stack of u into ip[] (LP_STACK_USER_MAX); returns the frames taken, and
 * the walk's flags in *flags. */
static __always_inline __u32 walk_stack(const struct lp_ranges *rg, const struct uregs *u,
					__u64 *ip, __u32 *flags)
{
	__u32 one = 1;
	struct stack_walk s = {.c = {.rg = rg,
				     .kernel_op = -1,
				     .ip = u->ip,
				     .sp = u->sp,
				     .bp = u->bp,
				     .r10 = u->r10,
				     .r13 = u->r13,
				     .bp_ok = true,
				     .plain = 1,
				     .uw_state = UW_WALKING},
			       .ip = ip};

	/* Its own note: the classification's is read after it. */
	s.c.note = bpf_map_lookup_elem(&walk_note, &one);
	if (!s.c.note)
		return 0;
	bpf_loop(LP_STACK_USER_MAX + 1, stack_step, &s, 0);
	*flags = s.flags;
	return s.n;
}

/* The classification's walk by rows from c's frame (c->ip, sp, bp set): UW_DONE where it
 * settled the sample (an op, a barrier, or none in the frames). */
static __always_inline void cfi_walk(struct scan_ctx *c)
{
	c->bp_ok = true;
	c->plain = 1;
	c->uw_state = UW_WALKING;
	bpf_loop(LP_UNWIND_FRAMES, unwind_step, c, 0);
	if (c->uw_state == UW_WALKING)
		uw_fail(c, LP_UF_DEPTH, -1);
}

/* A worker's sample given its region's master's classification m: its op; the master's
 * barrier is its own wait, not this worker's work. */
static __always_inline void master_op(struct where *w, const struct where *m)
{
	w->op = m->op;
	w->aop = m->aop;
	w->region = m->region == LP_R_BARRIER ? LP_R_OTHER : m->region;
	w->via = LP_VIA_REGION;
}

/* A worker's sample in an OpenMP region's work (its walk came through the runtime and
 * found no op): the op of the process's one open region, which its master was in when it
 * opened it (torch.bpf.c). Not for the master itself, whose own frames hold the op. */
static __always_inline void region_op(struct where *w, __u64 ids)
{
	__u32 tgid = ids >> 32, tid = (__u32)ids;
	const struct lp_omp_region *r = bpf_map_lookup_elem(&omp_region, &tgid);

	if (!r || r->open <= 0 || r->master == tid) {
		w->via = LP_VIA_NOREGION;
		return;
	}
	if (r->open > 1) {
		w->via = LP_VIA_REGIONS;
		return;
	}
	if (!r->taken) {
		w->via = LP_VIA_UNTAKEN;
		return;
	}
	master_op(w, &(struct where){.op = r->op, .aop = r->aop, .region = r->region});
}

/* Where a thread is, from its user registers: the range holding the instruction pointer;
 * else the innermost op or barrier function among its callers, found by walking its
 * frames by call frame information where the code has it (an op functions' table's op
 * too); where it has none, the innermost return address in the first nwords words of the
 * stack that lies in an op or barrier function (a matmul kernel's if there is neither). A
 * thread in an OpenMP region's work gets the region's op (region_op) where ids names it
 * (0: not looked for). */
static __always_inline struct where classify_inline(const struct lp_ranges *rg,
						    const struct uregs *u, __u32 nwords, __u64 ids)
{
	struct scan_ctx c = {.rg = rg,
			     .kernel_op = -1,
			     .w = {.region = LP_R_OTHER, .op = -1, .aop = LP_AOP_NONE}};
	__u64 sp = u->sp;
	__u32 zero = 0;
	__u64 *buf;

	c.note = bpf_map_lookup_elem(&walk_note, &zero);
	if (!c.note)
		return c.w;
	c.note->walked = 0;
	c.note->aop = LP_AOP_NONE;
	c.note->via_runtime = 0;
	c.note->lib = 0;
	if (take(&c, range_find(rg, u->ip), true) || (rg->opfn && opfn_take(&c, u->ip))) {
		c.note->how = LP_HOW_IP;
		goto out;
	}
	c.note->how = LP_HOW_NONE;
	if (!nwords || !stack_scan)
		goto out;
	c.uw_state = UW_FAILED;
	if (unwind_cfi && rg->nuw) {
		c.ip = u->ip;
		c.sp = u->sp;
		c.bp = u->bp;
		c.r10 = u->r10;
		c.r13 = u->r13;
		c.note->walked = 1;
		cfi_walk(&c);
		sp = c.sp;
	}
	if (c.uw_state == UW_DONE) {
		c.note->how = LP_HOW_CFI;
		if (ids && c.note->via_runtime == LP_RT_STARTED && c.w.region == LP_R_OTHER &&
		    c.w.op < 0 && c.note->aop == LP_AOP_NONE) {
			/* GCC's runtime: the team's data says (the sampler's region_team) */
			if (rg->omp_team_got)
				c.w.via = LP_VIA_TEAM;
			else
				region_op(&c.w, ids);
			return c.w;
		}
		goto out;
	}
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
	if (c.done || c.kernel_op >= 0)
		c.note->how = LP_HOW_SCAN;
out:
	if (c.w.region == LP_R_OTHER && c.w.op < 0)
		c.w.op = c.kernel_op;
	if (c.w.op >= 0 && rg->op_matmul[c.w.op & (LP_MAX_OPS - 1)])
		c.w.region = LP_R_MATMUL;
	c.w.aop = c.note->aop;
	return c.w;
}

/* classify_inline() in a global function (maps.bpf.c), into *w: the verifier checks the
 * walk once, not once per path of the program that calls it (the switch's and the
 * sampler's went past its million instructions with it inlined). ids: the thread's
 * tgid << 32 | tid, to find a region's op for a worker; 0: not looked for. */
int lp_classify(const struct lp_ranges *rg, const struct uregs *u, __u32 nwords, __u64 ids,
		struct where *w);

static __always_inline struct where classify(const struct lp_ranges *rg, const struct uregs *u,
					     __u32 nwords, __u64 ids)
{
	struct where w = {.region = LP_R_OTHER, .op = -1, .aop = LP_AOP_NONE};

	lp_classify(rg, u, nwords, ids, &w);
	return w;
}

/* A worker's sample in the work of a region whose master is not classified yet
 * (LP_VIA_UNTAKEN): the master classified now from its registers at the entry, as a sample
 * there would be, kept for the region's other samples and given to this one. Its walk
 * leaves this sample's note (the unwind's quality is the worker's own) as it was. */
static __always_inline void region_take(const struct lp_ranges *rg, struct where *w, __u32 tgid)
{
	struct lp_omp_region *r = bpf_map_lookup_elem(&omp_region, &tgid);
	struct lp_walk_note *n = bpf_map_lookup_elem(&walk_note, &(__u32){0}), keep;
	struct uregs u = {};
	struct where m;
	__u32 seq;

	w->via = LP_VIA_NOREGION;
	if (!r || !n)
		return;
	seq = r->seq;
	u.ip = r->ra - 1;
	u.sp = r->sp + 8;
	u.bp = r->bp;
	if (!r->ra)
		return;
	keep = *n;
	m = classify(rg, &u, LP_STACK_WORDS, 0);
	*n = keep;
	/* the region it was read for, still open: its master's frames were those */
	if (r->seq != seq || r->open != 1) {
		w->via = LP_VIA_REGIONS;
		return;
	}
	r->op = m.op;
	r->aop = m.aop;
	r->region = m.region;
	r->taken = 1;
	master_op(w, &m);
}

/* GCC's runtime (libgomp): a worker's master's registers at its call into the runtime,
 * found from the worker's own thread data (maps.bpf.c); 0, or why not (LP_TEAM_*). */
#define LP_TEAM_NO_DATA 1   /* no region's data in its thread data (a thread's first region) */
#define LP_TEAM_NOT_FOUND 2 /* no frame of the runtime's below the data, or not the opener's */
int lp_team_opener(const struct lp_ranges *rg, struct uregs *u);

/* A worker's sample in the work of a region of GCC's runtime (LP_VIA_TEAM): its master
 * classified from its registers at its call into the runtime, as region_take does from the
 * probed entry's; the sample's note (the unwind's quality is the worker's own) kept. */
static __always_inline void region_team(const struct lp_ranges *rg, struct where *w)
{
	struct lp_walk_note *n = bpf_map_lookup_elem(&walk_note, &(__u32){0}), keep;
	struct uregs u = {};
	struct where m;
	int why;

	w->via = LP_VIA_NOREGION;
	if (!n)
		return;
	keep = *n;
	why = lp_team_opener(rg, &u);
	if (why) {
		*n = keep;
		w->via = why == LP_TEAM_NO_DATA ? LP_VIA_NOREGION : LP_VIA_REGIONS;
		return;
	}
	m = classify(rg, &u, LP_STACK_WORDS, 0);
	*n = keep;
	master_op(w, &m);
}

#endif /* LP_WHERE_BPF_H */
