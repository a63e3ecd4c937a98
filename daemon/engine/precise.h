/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* Precise mode: exact calls and times of matmul, barrier and op functions, one process at a
 * time, in windows. */
#ifndef LLMPROF_PRECISE_H
#define LLMPROF_PRECISE_H

#include <stdbool.h>
#include <stdint.h>

#include "engine/engine.h"

/* On for seconds (0 = until switched off), or off. The probes go on off the event loop
 * (prober.h): the window opens when they are all on (precise_attaching until then) and
 * lasts seconds from there; switched off, the window ends at once and the probes come off
 * on the prober's time. Returns 0, -ESRCH when it is not a live ggml process, or -errno
 * from preparing the probes (or attaching them, without a prober). */
int lp_precise_set(struct lp_engines *g, struct lp_target *t, bool on, double seconds);

/* Precise mode follows each process's life from ggml.c's hooks (found: the duty cycle,
 * --precise-duty, phased from then; mapped: a dlopen under an open window ends it and
 * opens one with probes on everything mapped now, for what was left of it; exited: an open
 * window closes, the probes go, the ops' last figures stay; reset: the completed windows
 * and the ops' figures are forgotten, an open window restarts). */
void lp_precise_hook(struct lp_engines *g);

/* Once a second: opens and closes windows (duty cycle, timed windows). */
void lp_precise_tick(struct lp_engines *g);

/* Between the ticks, every 100 ms: the tensor decision of processes in a window that have
 * none yet, as soon as a whole decode has called their ops (nodes.h), so that reading
 * begins tokens, not seconds, into a run. True while any still waits for it. */
bool lp_precise_decide(struct lp_engines *g);

/* Before the event loop and the prober go: windows end at the tick, probes on the calling
 * thread, from here on. */
void lp_precise_stop(struct lp_engines *g);

/* Ops probed per window without --precise-ops: those with most samples. */
#define LP_PRECISE_OPS 32

/* Precise figures per op index ([ops.n], malloc'ed), or NULL when no op was probed. */
struct lp_op_precise *lp_precise_ops(const struct lp_core *c, const struct lp_target *t);

/* Precise-window totals including an open window, for reports. */
struct lp_precise_totals {
	uint64_t windows;
	uint64_t ns;
	uint64_t oncpu_ns;
	uint64_t ctr[LP_W_NR];			   /* enum lp_window_ctr, inside the windows */
	uint64_t op_samples[LP_MAX_OPS], op_total; /* per op, and in all, inside the windows */
};

void lp_precise_totals(const struct lp_target *t, const struct lp_proc_stats *now,
		       const struct lp_op_samples *ops_now, struct lp_precise_totals *out);

#endif
