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
 * FDEs, which cfi.c marks with a row of its own. */
__noinline __u64 lp_uw_row(__u32 slot, __u32 n, __u64 off)
{
	__u32 lo = 0, hi = n, mid;
	const struct lp_unwind_row *r;
	__u64 v;
	void *rows;

	if (off > 0xffffffffULL)
		return LP_UW_NO_ROW;
	rows = bpf_map_lookup_elem(&unwind_rows, &slot);
	if (!rows)
		return LP_UW_NO_ROW;
	/* 22 halvings cover an object's rows (LP_UNWIND_MAX_ROWS). */
	for (int i = 0; i < 22 && lo < hi; i++) {
		mid = lo + (hi - lo) / 2;
		r = bpf_map_lookup_elem(rows, &mid);
		if (!r)
			return LP_UW_NO_ROW;
		if (r->off <= off)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == 0 || lo < hi)
		return LP_UW_NO_ROW;
	lo--;
	r = bpf_map_lookup_elem(rows, &lo);
	if (!r || (r->cfa == LP_UW_NONE && r->cfa_off == LP_UW_WHY_NO_FDE))
		return LP_UW_NO_ROW;
	__builtin_memcpy(&v, r, sizeof(v));
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
