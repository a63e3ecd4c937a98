/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* The report as Prometheus metrics (expo.h's formats): histograms in seconds, counters as
 * _total, HELP and TYPE for every family, labels pid, comm and exe, or workload and model.
 * Pure: writes to memory, does no other I/O. */
#ifndef LLMPROF_METRICS_H
#define LLMPROF_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "serving/expo.h"
#include "base/procfs.h"
#include "report/report.h"

struct lp_metrics_opts {
	uint32_t max_processes; /* processes exported at most; running ones first */
	double start_time;	/* the daemon's start, seconds since the Unix epoch */
	bool hide_fill;	  /* leave out map fill: it counts every user's processes and threads */
	bool by_workload; /* series by workload and model (identity.h), not by process */
	bool cmdline;	  /* the command line among process_info's labels, secrets redacted */
	bool coarse;	  /* classic buckets at powers of two only (expo.h) */
	/* By pid, an exited process's series go once it exited this long ago (by workload
	 * its totals stay in the sums for the retention: leaving would read as a reset). */
	uint64_t exited_ns;
	enum lp_expo_format format;
	const struct lp_self_stats *self; /* the daemon's process_* metrics; NULL: none */
};

/* Renders the report; *out is malloc'd text of *len bytes. Returns 0 or -ENOMEM. */
int lp_metrics_render(const struct lp_report *r, const struct lp_metrics_opts *o, char **out,
		      size_t *len);

#endif
