// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* The major page-fault collector: a perf software event counted where the kernel counts
 * maj_flt, for each fault's time (a timeline's mark, a fault while generating). Minor
 * faults, thousands a second where a process allocates as it runs, are the kernel's own
 * per-thread count (acct.bpf.h). */
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
	t->faults_maj++;
	rec_emit(tgid, tid, LP_REC_FAULT_MAJ, 0);
}

SEC("perf_event")
int lp_fault_maj(struct bpf_perf_event_data *ctx)
{
	fault(LP_C_FAULTS_MAJ);
	return 0;
}
