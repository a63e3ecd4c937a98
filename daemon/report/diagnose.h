/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* Feeding the findings (findings.h): a snapshot of every live process's figures each
 * window, so that rules judge the last 10-20 seconds rather than a process's whole life;
 * its context read from /proc and /sys; the host's CPUs and memory bandwidth. */
#ifndef LLMPROF_DIAGNOSE_H
#define LLMPROF_DIAGNOSE_H

#include <stdint.h>

#include "tracked/context.h"
#include "report/findings.h"
#include "report/membw.h"
#include "report/report.h"

#define LP_DIAGNOSE_WINDOW_NS (10ULL * 1000000000ULL)

struct lp_snap_thread {
	uint32_t tid;
	uint64_t oncpu_ns, runq_ns, faults_maj, migrations, samples, sync, ggml;
	uint64_t gil_ns, gil_waits;
};

struct lp_snap {
	uint64_t at_ns;
	uint64_t ctr[LP_C_NR];
	uint64_t samples, sync, scanned;
	uint64_t gen_samples, gen_outside; /* while generating: all, outside ops */
	uint64_t host_spare, host_total;   /* the host's CPU ticks (context.h) */
	uint64_t lib[LP_MAX_LIBS];	   /* samples in its libraries (torch's BLAS) */
	struct lp_snap_thread *threads;
	size_t nthreads;
	struct lp_preempt_top preempt;
	uint64_t throttled_usec, nr_throttled;
};

/* Rules judge the figures since a snapshot at least LP_DIAGNOSE_WINDOW_NS old; a process's
 * context is read again after LP_DIAGNOSE_CONTEXT_NS (affinity, environment and mappings
 * rarely change; the cgroup's throttling is read at each use). */
#define LP_DIAGNOSE_CONTEXT_NS (30ULL * 1000000000ULL)
/* A ggml process with no model file mapped yet: read again after LP_DIAGNOSE_EAGER_NS.
 * llama.cpp maps its model some 0.1-1 s after it maps libggml (when it is found), so a
 * context read in between would say "no mapped GGUF file" of a window of generation from
 * the mapped weights; a rule needs 3 s of figures (findings.c's MIN_WINDOW_S). */
#define LP_DIAGNOSE_EAGER_NS (1ULL * 1000000000ULL)

struct lp_watch {
	pid_t pid;
	uint64_t tracked_since_ns; /* tells a reset or a reused pid apart */
	struct lp_snap s[2];	   /* s[0] the older */
	unsigned nsnap;
	struct lp_context ctx; /* read at ctx_ns; 0: never */
	uint64_t ctx_ns;
	struct lp_recent_finding held[LP_RULE_NR]; /* by rule: when each last fired */
	uint64_t host_spare0, host_total0;	   /* the host's CPU ticks when the watch began */
	bool seen; /* lp_diagnose_tick: its process is still in the report */
};

struct lp_diagnose {
	struct lp_watch *w;
	size_t n, cap;
	struct lp_host_cpus *host;
	uint64_t host_read_ns;
	struct lp_membw membw;
};

void lp_diagnose_init(struct lp_diagnose *dg, const char *state_dir);
void lp_diagnose_free(struct lp_diagnose *dg);
/* Takes a snapshot of each live process of r whose last one is a window old; forgets the
 * processes r no longer has. */
void lp_diagnose_tick(struct lp_diagnose *dg, const struct lp_report *r);
/* The context last read of a live process, NULL when none was. */
const struct lp_context *lp_diagnose_context(struct lp_diagnose *dg, const struct lp_target *t);
/* Evaluates the findings of every process of r into its view (v->findings). */
void lp_diagnose_report(struct lp_diagnose *dg, struct lp_report *r);

#endif
