// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* The one definition of every map and setting the collectors share (lp.bpf.h). */
#define LP_MAPS_HERE
#include "lp.bpf.h"
#include "where.bpf.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

const volatile __u32 pidns_ino = 0;
const volatile bool want_exec_events = false;
const volatile bool stack_scan = true;
const volatile bool unwind_cfi = true;
const volatile bool futex_from_sched = false;
const volatile bool step_discover = true;
const volatile bool discover_in_cgroup = false;
const volatile bool count_minor_faults = false;
volatile __u32 recordings = 0;
volatile __u32 precise_procs = 0;
volatile __u32 profiles = 0;
volatile __u64 stacks_lost = 0;
const volatile __u32 stretch_sample = 1;

/* The number of a pid in the daemon's namespace (lp.bpf.h, pidns_nr). */
__noinline __u32 lp_pidns_nr(__u64 pid_addr)
{
	struct pid *p = (struct pid *)pid_addr;
	unsigned int level = BPF_CORE_READ(p, level);
	__u64 base = pid_addr + bpf_core_field_offset(struct pid, numbers);

	for (unsigned int i = 1; i < LP_PIDNS_LEVELS && i <= level; i++) {
		struct upid u = {};

		bpf_probe_read_kernel(&u, sizeof(u), (void *)(base + i * sizeof(struct upid)));
		if (u.ns && BPF_CORE_READ(u.ns, ns.inum) == pidns_ino)
			return (__u32)u.nr;
	}
	return 0;
}

/* The object with unwind rows whose mapping holds addr, or -1: a binary search of the
 * mappings, sorted by start and disjoint (where.bpf.h). Global functions, as the two below:
 * the verifier checks each loop once, not once per path of every walk that calls it
 * (bpf_loop's callbacks are checked as if called any number of times). */
__noinline int lp_uw_obj(const struct lp_ranges *rg, __u64 addr)
{
	__u32 lo = 0, hi, mid;

	if (!rg)
		return -1;
	hi = rg->nuw;
	if (hi > LP_MAX_UNWIND)
		return -1;
	/* log2(LP_MAX_UNWIND) + 1 halvings: lo ends at the first start above addr */
	for (int i = 0; i < 6 && lo < hi; i++) {
		mid = (lo + hi) / 2;
		if (rg->uw[mid & (LP_MAX_UNWIND - 1)].start <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == 0 || lo < hi)
		return -1;
	lo--;
	if (addr >= rg->uw[lo & (LP_MAX_UNWIND - 1)].end)
		return -1;
	return (int)lo;
}

/* The row covering file offset off of an object (its rows in slot, n of them), as its 8
 * bytes: the last one at or below it; LP_UW_NO_ROW before the first and in a gap between
 * FDEs, which cfi.c marks with a row of its own. Kept per CPU (abi.h, struct
 * lp_row_cached); else searched, and kept: the rows' page index (abi.h, after them) names
 * the few rows of off's page that it lies between, and those are halved. One key for every
 * lookup: the function is the last of the walk's calls, whose frames share 512 bytes. */
__noinline __u64 lp_uw_row(__u32 slot, __u32 n, __u64 off)
{
	const struct lp_rows_head *h;
	const struct lp_rows_page *pg;
	const struct lp_unwind_row *r;
	struct lp_row_cached *c = NULL;
	__u32 k = slot, g, lo, hi, mid, base, shift;
	__u64 key = 0, v = LP_UW_NO_ROW, page;
	const __u32 *gen;
	void *rows;

	if (slot >= LP_UNWIND_OBJS || off > 0xffffffffULL || !n)
		return LP_UW_NO_ROW;
	gen = bpf_map_lookup_elem(&unwind_gen, &k);
	g = gen ? *(volatile const __u32 *)gen : 1; /* read once: user space moves it */
	if (!(g & 1)) {
		key = off | (__u64)slot << 32 | (__u64)(g & 0x7fffff) << 40 | 1ULL << 63;
		k = ((__u32)off * 0x9E3779B1u ^ slot * 0x85EBCA6Bu) >> (32 - LP_ROW_CACHE_BITS);
		c = bpf_map_lookup_elem(&row_cache, &k);
		/* The row, then its key: a program that interrupts this one on its CPU (the
		 * sampler, inside the switch's) may put another row there in between. */
		if (c) {
			v = c->row;
			asm volatile("" ::: "memory");
			if (c->key == key)
				return v;
			v = LP_UW_NO_ROW;
		}
	}
	k = slot;
	rows = bpf_map_lookup_elem(&unwind_rows, &k);
	if (!rows)
		goto out;
	k = n;
	h = bpf_map_lookup_elem(rows, &k);
	if (!h)
		goto out;
	shift = h->pages_shift & 63;
	page = off >> shift;
	if (page < h->first)
		goto out;
	page -= h->first;
	if (page >= h->pages_shift >> 8) {
		/* past the last row's page: the last row */
		lo = n - 1;
		hi = n;
	} else {
		k = n + 1 + (__u32)page;
		pg = bpf_map_lookup_elem(rows, &k);
		if (!pg || pg->lo > pg->hi || pg->hi >= n)
			goto out;
		lo = pg->lo;
		hi = pg->hi + 1;
	}
	base = lo;
	/* 22 halvings cover an object's rows (LP_UNWIND_MAX_ROWS), a page's few at most. */
	for (int i = 0; i < 22 && lo < hi; i++) {
		mid = lo + (hi - lo) / 2;
		k = mid;
		r = bpf_map_lookup_elem(rows, &k);
		if (!r)
			goto out;
		if (r->off <= off)
			lo = mid + 1;
		else
			hi = mid;
	}
	/* none in the page at or below it (before the first row), or not settled */
	if (lo == base || lo < hi)
		goto out;
	k = lo - 1;
	r = bpf_map_lookup_elem(rows, &k);
	if (r && !(r->cfa == LP_UW_NONE && r->cfa_off == LP_UW_WHY_NO_FDE))
		__builtin_memcpy(&v, r, sizeof(v));
out:
	if (c) {
		/* no key while its row changes (above) */
		c->key = 0;
		asm volatile("" ::: "memory");
		c->row = v;
		asm volatile("" ::: "memory");
		c->key = key;
	}
	return v;
}

/* The sampling table's entry holding addr, or -1: a binary search (lp.bpf.h, range_find). */
__noinline int lp_range_find(const struct lp_ranges *rg, __u64 addr)
{
	__u32 lo = 0, hi, mid;

	if (!rg)
		return -1;
	hi = rg->n;
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

/* Where a thread is (where.bpf.h, classify). */
__noinline int lp_classify(const struct lp_ranges *rg, const struct uregs *u, __u32 nwords,
			   __u64 ids, struct where *w)
{
	if (!rg || !u || !w)
		return 0;
	*w = classify_inline(rg, u, nwords, ids);
	return 0;
}

/* Words of the master's stack read below a region's data: the locals of the frame that
 * holds it under it, the runtime's live frames under them (GOMP_parallel's 48 bytes, or
 * gomp_team_end's 80 and its callees' in the wait at the end). */
#define TEAM_WORDS 64
/* Return addresses into the runtime tried there, lowest first; frames of the runtime
 * walked up from one to its caller's */
#define TEAM_TRIES 4
#define TEAM_STEPS 8

struct team_scan {
	const struct lp_ranges *rg;
	const __u64 *words;
	__u32 n;
	__u32 at[TEAM_TRIES]; /* indices of words that are code of the runtime's */
};

/* From the lowest word up: the runtime's code addresses, TEAM_TRIES at most. */
static long team_word(__u64 i, void *data)
{
	struct team_scan *s = data;
	__u64 w;

	if (i >= TEAM_WORDS || s->n >= TEAM_TRIES)
		return 1;
	w = s->words[i & (TEAM_WORDS - 1)];
	/* most words are data: outside every range, no search */
	if (w >= s->rg->lo && w < s->rg->hi && in_runtime(s->rg, w))
		s->at[s->n++ & (TEAM_TRIES - 1)] = (__u32)i;
	return 0;
}

struct team_walk {
	struct scan_ctx c;
	__u32 done; /* 1: left the runtime's frames */
};

/* One frame up, from the runtime's frames toward their caller's. */
static long team_step(__u64 i, void *data)
{
	struct team_walk *t = data;
	__u64 sp = t->c.sp;

	/* 1: not an innermost frame (its other registers are not known) */
	if (frame_up(&t->c, 1) || !t->c.ip || t->c.sp <= sp)
		return 1;
	if (!in_runtime(t->c.rg, t->c.ip - 1)) {
		t->done = 1;
		return 1;
	}
	return 0;
}

/* The runtime's frames walked up from the return address at slot (ip) to their caller's,
 * which must hold data in its frame: its stack pointer at or below it, its frame's top
 * above it. Returns 0 with the caller's registers in *u. */
__noinline int lp_team_chain(const struct lp_ranges *rg, __u64 slot, __u64 ip, __u64 data,
			     struct uregs *u)
{
	struct team_walk t = {};
	__u32 one = 1;

	if (!rg || !u)
		return 1;
	t.c.rg = rg;
	t.c.kernel_op = -1;
	t.c.ip = ip;
	t.c.sp = slot + 8;
	t.c.ra_adj = 1;
	t.c.uw_state = UW_WALKING;
	/* a scratch note: the sample's is the worker's own */
	t.c.note = bpf_map_lookup_elem(&walk_note, &one);
	if (!t.c.note)
		return 1;
	bpf_loop(TEAM_STEPS, team_step, &t, 0);
	if (!t.done || t.c.sp > data)
		return 1;
	u->ip = t.c.ip - 1;
	u->sp = t.c.sp;
	u->bp = t.c.bp_ok ? t.c.bp : 0;
	u->r10 = 0;
	u->r13 = 0;
	/* the caller's frame holds the data: its top above it */
	if (frame_up(&t.c, 1) || t.c.sp <= data)
		return 1;
	return 0;
}

/* A worker of GCC's OpenMP runtime (libgomp) in a region's work: its master's registers at
 * its call into the runtime, into *u (ip the call's return address less one), as the
 * region's probed entry would read them (where.bpf.h's region_team).
 *
 * The worker's thread data (libgomp's struct gomp_thread, first in the runtime's TLS
 * block: fn, then data, since GCC 4.2) holds the region's data, set by the master as it
 * hands the region out (NULL in a new thread's first region: its start data carries it).
 * The compiler puts the region's shared data in the frame of the function holding the
 * parallel construct, the runtime's caller: the master's. On the x86-64 stack a frame's
 * callees lie below it, so the runtime's live frames (GOMP_parallel's, in the region's work
 * or its start; or gomp_team_end's, which GOMP_parallel tail-calls, in the wait at the
 * end) are right below that frame, and walked up by their rows they lead to it: the
 * function whose frame holds the data. A return address into the runtime there may also
 * be a stale one, in that function's unset locals or below the master's stack pointer
 * (a call made and returned): each is tried, from the lowest up, until its walk ends in
 * a frame that holds the data (one below the live frames is a callee's of theirs, or
 * leads into them). The master's frames above stay as they were until the region ends. */
__noinline int lp_team_opener(const struct lp_ranges *rg, struct uregs *u)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct team_scan s = {.rg = rg};
	__u64 tpoff = 0, data = 0, base;
	__u32 zero = 0;
	__u64 *buf;

	if (!rg || !u || !rg->omp_team_got)
		return LP_TEAM_NO_DATA;
	/* 0 until the loader has relocated the runtime */
	if (bpf_probe_read_user(&tpoff, sizeof(tpoff), (void *)rg->omp_team_got) || !tpoff ||
	    bpf_probe_read_user(&data, sizeof(data),
				(void *)(task->thread.fsbase + tpoff + sizeof(__u64))) ||
	    !data)
		return LP_TEAM_NO_DATA;
	buf = bpf_map_lookup_elem(&stack_buf, &zero);
	if (!buf || data < TEAM_WORDS * 8)
		return LP_TEAM_NOT_FOUND;
	base = data - TEAM_WORDS * 8;
	if (bpf_probe_read_user(buf, TEAM_WORDS * 8, (void *)base))
		return LP_TEAM_NOT_FOUND;
	s.words = buf;
	bpf_loop(TEAM_WORDS, team_word, &s, 0);
	for (__u32 i = 0; i < TEAM_TRIES && i < s.n; i++) {
		__u32 k = s.at[i] & (TEAM_WORDS - 1);

		if (!lp_team_chain(rg, base + (__u64)k * 8, buf[k], data, u))
			return 0;
	}
	return LP_TEAM_NOT_FOUND;
}
