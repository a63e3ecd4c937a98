/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* The rules that say why tokens/s is low: each reads a process's figures over a recent
 * window with its context (context.h) and the host's measured memory bandwidth, and when
 * it fires gives a severity, a sentence with the numbers, the evidence and an action.
 * Pure: no I/O, so that every rule is unit-tested on figures made to provoke it. */
#ifndef LLMPROF_FINDINGS_H
#define LLMPROF_FINDINGS_H

#include <cjson/cJSON.h>
#include <linux/types.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "engine/ops.h"
#include "tracked/context.h"
#include "llmprof/abi.h"
#include "tracked/track.h"
#include "engine/requests.h"

enum lp_severity {
	LP_SEV_INFO = 0,
	LP_SEV_WARNING,
	LP_SEV_CRITICAL,
};

/* Every rule, once: X(ID, name, needs) with needs LP_RULE_PROCESS (its figures alone) or
 * LP_RULE_CONTEXT (also its context from /proc and /sys: not readable once it exited).
 * Each is judged by rule_<name>() in findings.c, in this order (causes before
 * consequences); the enum, the names and the evaluation all come from this list. */
#define LP_RULES(X)                                                    \
	X(OVERSUBSCRIBED, oversubscribed, LP_RULE_CONTEXT)             \
	X(PREEMPTED, preempted, LP_RULE_PROCESS)                       \
	X(LATE_THREAD, late_thread, LP_RULE_PROCESS)                   \
	X(SMT, smt, LP_RULE_CONTEXT)                                   \
	X(OMP_WAIT_POLICY, omp_wait_policy, LP_RULE_CONTEXT)           \
	X(NUMA, numa, LP_RULE_CONTEXT)                                 \
	X(CPU_FREQUENCY, cpu_frequency, LP_RULE_CONTEXT)               \
	X(WEIGHTS_NOT_RESIDENT, weights_not_resident, LP_RULE_PROCESS) \
	X(BATCH_INTERFERENCE, batch_interference, LP_RULE_PROCESS)     \
	X(PREFILL_CONTENTION, prefill_contention, LP_RULE_PROCESS)     \
	X(MEMORY_BOUND, memory_bound, LP_RULE_CONTEXT)                 \
	X(INTRA_OP_THREADS, intra_op_threads, LP_RULE_CONTEXT)         \
	X(REFERENCE_BLAS, reference_blas, LP_RULE_PROCESS)             \
	X(THREAD_POOLS, thread_pools, LP_RULE_PROCESS)                 \
	X(INTERPRETER_BOUND, interpreter_bound, LP_RULE_PROCESS)       \
	X(GIL_CONTENTION, gil_contention, LP_RULE_PROCESS)

enum lp_rule_needs {
	LP_RULE_PROCESS,
	LP_RULE_CONTEXT,
};

enum lp_rule {
#define LP_RULE_ENUM(id, name, needs) LP_RULE_##id,
	LP_RULES(LP_RULE_ENUM)
#undef LP_RULE_ENUM
		LP_RULE_NR,
};

extern const char *const lp_rule_names[LP_RULE_NR];
extern const char *const lp_severity_names[3];

/* One thread's figures over the window. */
struct lp_find_thread {
	uint32_t tid;
	char comm[16];
	uint64_t oncpu_ns, runq_ns, faults_maj, migrations;
	uint64_t samples, sync, ggml; /* its cpu-clock samples: all, in a barrier, in ggml */
	uint32_t cpu;		      /* where it last ran */
	uint64_t gil_ns, gil_waits;   /* CPython: its waits for the GIL */
};

/* An op's traffic over the graph nodes precise mode read (engine/nodes.h), for the
 * roofline: the bytes its nodes read and wrote over the time they took (each node's mean
 * call, its threads side by side, times its evaluations), where the bytes are known. */
#define LP_FIND_OPS 8
struct lp_find_op {
	char op[LP_OP_NAME_MAX];
	double bytes, busy_ns; /* of its nodes whose bytes are known */
	double oncpu_ns;       /* of all its nodes */
};

/* The BLAS a process's GEMMs run in, from the symbols of what it maps: an optimised one
 * (OpenBLAS, MKL, BLIS) where one is mapped, else the reference BLAS (a sgemm_ and nothing
 * of the others'). */
enum lp_blas_kind {
	LP_BLAS_NONE = 0,
	LP_BLAS_REFERENCE,
	LP_BLAS_OPENBLAS,
	LP_BLAS_MKL,
	LP_BLAS_BLIS,
};
extern const char *const lp_blas_names[5];

/* What the torch rules read of a process (engine/torch.c's processes). */
struct lp_find_torch {
	bool torch; /* it runs the torch engine */
	/* the BLAS its samples were most in, and the share of its samples there */
	enum lp_blas_kind blas;
	const char *blas_path; /* the object, as the process maps it */
	double blas_share;
	/* an OpenBLAS with a thread pool of its own: built without OpenMP (it imports none) */
	bool blas_own_pool;
	const char *omp[4]; /* the OpenMP runtimes it maps, distinct files */
	size_t nomp;
	/* over the window: samples while generating, of them outside ops */
	uint64_t gen_samples, gen_outside;
	/* CPUs' worth of time the host spent idle or running niced work over the window;
	 * < 0: not known */
	double host_spare_cpus;
};

struct lp_find_input {
	pid_t pid;
	double window_s;	/* what the figures below cover */
	const uint64_t *ctr;	/* [LP_C_NR], over the window */
	uint64_t runq_ns;	/* run-queue time of all its threads, over the window */
	uint64_t samples, sync; /* sampled op counts over the window: all, in sync */
	uint64_t scanned;	/* ... of them, placed by the stack scan (ggml.unwind) */
	const struct lp_find_thread *threads; /* NULL: not known (exited) */
	size_t nthreads;
	const struct lp_preempt_view *preempt; /* over the window */
	size_t npreempt;
	bool openmp;			 /* maps an OpenMP runtime */
	const struct lp_context *ctx;	 /* NULL: not readable (exited) */
	const struct lp_host_cpus *host; /* NULL with ctx */
	uint64_t throttled_usec;	 /* the cgroup's, over the window */
	uint64_t nr_throttled;
	double membw; /* the host's read bandwidth, bytes/s; 0: not known (yet) */
	/* its requests (engine/requests.h), NULL: none read; the window's start, to take those
	 * that decoded in it */
	const struct lp_requests *requests;
	uint64_t since_ns;
	const char *membw_why;	      /* membw 0: why, when not merely measuring now */
	const struct lp_find_op *ops; /* per op, since precise mode read nodes; NULL: none */
	size_t nops;
	struct lp_find_torch torch;
};

#define LP_FINDING_TEXT 384 /* a title or an action, NUL included */

struct lp_finding {
	enum lp_rule rule;
	enum lp_severity severity;
	char title[LP_FINDING_TEXT];
	char action[LP_FINDING_TEXT];
	cJSON *evidence;
};

/* A rule that fired in an earlier evaluation and not in this one, for a short while after
 * (LP_FINDINGS_RECENT_NS): figures near a threshold would otherwise flip a table's mark
 * from one refresh to the next. */
#define LP_FINDINGS_RECENT_NS (10ULL * 1000000000ULL)
struct lp_recent_finding {
	enum lp_rule rule;
	enum lp_severity severity;
	uint64_t at_ns; /* the evaluation it last fired in */
	char title[LP_FINDING_TEXT];
};

struct lp_findings {
	struct lp_finding f[LP_RULE_NR]; /* most severe first */
	size_t n;
	struct lp_recent_finding recent[LP_RULE_NR]; /* rules not in f, most severe first */
	size_t nrecent;
	uint64_t now_ns;		       /* when evaluated: the recent ones' age */
	const char *not_evaluated[LP_RULE_NR]; /* why a rule could not be, or NULL */
	/* memory-bound or not, answered whenever it can be */
	uint64_t weights_bytes;
	uint64_t per_token_bytes; /* of them, what one token reads */
	double gen_tokens_per_s, stream_bytes_per_s, membw;
	/* the last-level caches of its CPUs; the weights a token reads fit in them: they
	 * stream from the cache, and the memory's bandwidth does not bound decode */
	uint64_t llc_bytes;
	bool fits_llc;
	char why[LP_RULE_NR][192]; /* a not_evaluated reason with its figures */
	/* each op's GB/s against membw: the ops with the most own CPU time */
	struct lp_find_op ops[LP_FIND_OPS];
	size_t nops;
	double ops_oncpu_ns; /* of every op read */
	double window_s;
	/* the window's samples placed by the stack scan: over LP_SCAN_TRUST of them, the op
	 * and sync shares are not taken as measured */
	double scan_share;
	bool shares_trusted;
};

/* Evaluates every rule; out holds what fired. Free with lp_findings_clear. */
void lp_findings_eval(const struct lp_find_input *in, struct lp_findings *out);
void lp_findings_clear(struct lp_findings *f);
/* The most severe of the window's findings and the recent ones, or -1. */
int lp_findings_worst(const struct lp_findings *f);
/* Keeps f's findings in held (LP_RULE_NR, by rule) and adds to f those held that fired
 * less than LP_FINDINGS_RECENT_NS before now but not in f. */
void lp_findings_hold(struct lp_findings *f, struct lp_recent_finding *held, uint64_t now);
/* {"window_seconds", "findings": [...], "not_evaluated": {...}, "bandwidth": {...},
 *  "op_roofline": {...}} */
cJSON *lp_findings_render(const struct lp_findings *f);

#endif
