/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* A recorded timeline as a Chrome Trace Event Format document (JSON), which
 * ui.perfetto.dev and chrome://tracing open as they are. Pure: events in, text out.
 *
 * Per thread two tracks: the thread's own (llama_decode spans, and with precise probes its
 * op and barrier spans, major faults as instants) and "<name> CPU" (running, runnable,
 * preempted by whom, blocked in a futex wait on which word, blocked otherwise: one slice
 * after the other). Counters for the process: threads on CPU, tokens/s between generated
 * tokens, major faults. Timestamps are microseconds from the window's start. */
#ifndef LLMPROF_TRACE_H
#define LLMPROF_TRACE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <linux/types.h>

#include "llmprof/abi.h"
#include "timeline/timeline.h"

/* The CPU track of thread tid is thread tid + this in the document (pids fit in 22 bits);
 * the requests of sequence s are on "thread" LP_TRACE_REQUEST_TRACK + s. */
#define LP_TRACE_CPU_TRACK 1000000000u
#define LP_TRACE_REQUEST_TRACK 2000000000u

struct lp_trace_thread {
	uint32_t tid;
	const char *name; /* its comm; NULL: unknown (it exited) */
};

/* A mapping of the process, to name what a futex word lies in. */
struct lp_trace_map {
	uint64_t start, end;
	const char *name; /* its file, or [heap], [stack], [anon] */
};

struct lp_trace_in {
	pid_t pid;
	const char *comm;
	const char *step;	   /* its engine's step function (lp_tl.step) */
	uint64_t start_ns, end_ns; /* the window, CLOCK_MONOTONIC */
	const struct lp_rec_ev *ev;
	size_t n;
	const struct lp_trace_thread *threads;
	size_t nthreads;
	const char *const *op_names;  /* by op index; NULL entries print as "op N" */
	const char *const *op_groups; /* by op index: the op's group (matmul, ...), or NULL */
	size_t nops;
	const struct lp_tl_node *nodes; /* sorted by id (lp_tl_nodes_sort): op spans' args */
	size_t nnodes;
	const struct lp_trace_map *maps; /* sorted or not; NULL: none known */
	size_t nmaps;
	uint64_t lost;	  /* events the kernel's ring buffer had no room for */
	uint64_t dropped; /* events past the daemon's bound */
	const char *version;
	const struct lp_tl_request *requests; /* by sequence, then start */
	size_t nrequests;
};

/* Renders the document into *out (malloc'd, NUL-terminated), *len bytes. Returns 0 or
 * -ENOMEM. */
int lp_trace_render(const struct lp_trace_in *in, char **out, size_t *len);

#endif
