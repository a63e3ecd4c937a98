// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* The page-fault collector: perf software events counted where the kernel counts
 * min_flt/maj_flt. */
#include "lp.bpf.h"

static __always_inline void fault(__u32 ctr)
{
	__u64 id = current_ids();
	__u32 tgid = id >> 32, tid = (__u32)id;
	struct lp_proc_stats *p = proc_of(tgid);
	struct lp_thread *t;

	if (!p)
		return;
	__sync_fetch_and_add(&p->ctr[ctr], 1);
	t = bpf_map_lookup_elem(&threads, &tid);
	if (!t || t->tgid != tgid)
		return;
	if (ctr == LP_C_FAULTS_MAJ) {
		t->faults_maj++;
		rec_emit(tgid, tid, LP_REC_FAULT_MAJ, 0);
	} else {
		t->faults_min++;
	}
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
