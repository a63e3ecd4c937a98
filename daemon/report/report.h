/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* A consistent read of everything collected, for one process or all: kernel maps for the
 * live ones, the stored final records for the exited ones. */
#ifndef LLMPROF_REPORT_H
#define LLMPROF_REPORT_H

#include "tracked/context.h"
#include "kernel/core.h"
#include "report/findings.h"
#include "engine/engine.h"
#include "engine/precise.h"
#include "tracked/track.h"

struct lp_thread_view {
	uint32_t tid;
	char comm[16];
	struct lp_thread t;
};

struct lp_proc_view {
	const struct lp_target *target;
	bool live;
	struct lp_proc_stats stats;
	struct lp_futex_top futex;
	struct lp_preempt_top preempt;
	struct lp_thread_view *threads;
	size_t nthreads;
	struct lp_precise_totals precise; /* precise-mode windows, the open one included */
	struct lp_op_samples *ops;	  /* NULL: no op counts (yet) */
	struct lp_op_precise *op_precise; /* [ggml->ops.n]; NULL: no op probed */
	struct lp_node *nodes;		  /* precise mode's graph nodes (tensors.h) */
	size_t nnodes;
	struct lp_findings *findings;	    /* NULL: not evaluated (diagnose.h) */
	const struct lp_requests *requests; /* NULL: no decode's batch seen (requests.h) */
	/* CPython: samples outside ops by Python function (engine/python.h), most first; and
	 * those of threads running no Python */
	struct lp_py_outside {
		char *name, *file;
		uint32_t firstline;
		uint64_t all, gen;
	} * py;
	size_t npy;
	uint64_t py_none, py_none_gen, py_unnamed, py_unnamed_gen;
	bool has_context; /* context below was read */
	struct lp_context context;
};

struct lp_report {
	const struct lp_features *features;
	const char *sched_variant;
	bool wakeups; /* run-queue delay timed from sched_wakeup, not the kernel's */
	const char *futex_source;
	/* The futex programs attach only while a process is tracked (futex_on_demand); whether
	 * they are now. */
	bool futex_on_demand, futex_attached;
	bool futex_results; /* the futex source sees results: timeouts and EAGAIN are counted */
	const char *mmap_source;
	bool uprobe_multi;
	uint32_t sample_hz;
	uint32_t stretch_sample;
	const struct lp_config *cfg;
	int fault_cpus; /* 0: page faults are not collected */
	struct lp_map_usage maps[LP_MAPS_MAX];
	size_t nmaps;
	uint64_t drops[LP_D_NR];
	/* profiles' samples lost: the stacks ring buffer full, the stacks' memory bound */
	uint64_t profile_lost_ring, profile_lost_table;
	/* samples the kernel did not take, host-wide, and of those the ones whose process is
	 * not known (sample.bpf.c, "Samples not taken") */
	uint64_t samples_skipped, samples_skipped_unknown;
	uint64_t recursion_misses; /* the programs' skipped runs (core.h) */
	uint64_t procs_full;
	uint64_t exited_evicted;
	uint64_t exited_untracked;   /* found, but gone before they could be tracked */
	uint64_t state_saves_failed; /* saves of the totals that failed (disk full, ...) */
	uint64_t exits_recovered;    /* exits the kernel hook missed, found in /proc */
	size_t waiting;		     /* refused for want of room, tracked when room appears */
	uint64_t now_ns;	     /* CLOCK_MONOTONIC at the read */
	struct lp_proc_view *procs;
	size_t nprocs;
};

/* Reads the maps; pid 0 means every tracked process. fill: the maps' fill and the drops
 * too (maps, nmaps, drops: status and /metrics), which counts the entries of every hash map
 * and reads a file per map; only with pid 0. A one-process report reads only that process's
 * threads. Returns 0 or -errno. */
int lp_report_build(struct lp_report *r, const struct lp_core *c, struct lp_tracker *tr, pid_t pid,
		    bool fill);
void lp_report_free(struct lp_report *r);
/* Whether counter ctr (enum lp_counter) is collected by this daemon's sources: futex
 * results are not where waits are seen from the scheduler. */
static inline bool lp_report_counter_known(const struct lp_report *r, int ctr)
{
	if (ctr == LP_C_FUTEX_TIMEDOUT || ctr == LP_C_FUTEX_EAGAIN)
		return r->futex_results;
	return true;
}

#endif
