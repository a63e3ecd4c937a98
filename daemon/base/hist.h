/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* Summaries of lp_hist histograms: counts, percentiles. Pure functions, no I/O. */
#ifndef LLMPROF_DAEMON_HIST_H
#define LLMPROF_DAEMON_HIST_H

#include <linux/types.h>
#include <stdint.h>

#include "llmprof/abi.h"
#include "llmprof/hist.h"

/* Worst-case relative error of lp_hist_quantile() for values >= LP_HIST_SUB ns (exact
 * below): half a bucket's width over its lower bound. */
#define LP_HIST_QUANTILE_REL_ERROR (1.0 / (2.0 * LP_HIST_SUB))

/* dst += src: bucket counts and sums add, the maximum is the larger. */
void lp_hist_add(struct lp_hist *dst, const struct lp_hist *src);

/* dst += src for a process's figures: counters and histograms. */
void lp_stats_add(struct lp_proc_stats *dst, const struct lp_proc_stats *src);

/* Number of samples: the sum of the bucket counts. */
uint64_t lp_hist_total(const struct lp_hist *h);

/* Estimate of the q-quantile (0 < q <= 1): the midpoint of the bucket that holds the
 * ceil(q*n)-th smallest sample, capped at the recorded maximum. 0 for an empty histogram. */
uint64_t lp_hist_quantile(const struct lp_hist *h, double q);

#endif
