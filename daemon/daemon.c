// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* The daemon's state and its readers' first steps (daemon.h). */
#include "daemon.h"

#include "core.skel.h"

#include <time.h>

#include "engine/requests.h"
#include "tracked/sweep.h"

/* Reads both ring buffers: exit and mapping records, then timeline events, at most
 * LP_RECORD_BUDGET of those per call (a record of a busy process can bring them faster than
 * a slow daemon reads them, and the event loop must go on: the next call reads on). */
void lp_daemon_consume(struct daemon *d)
{
	d->recorder.budget = LP_RECORD_BUDGET;
	ring_buffer__consume(d->rb);
	lp_tracker_take_exited_futexes(&d->tracker);
}

double lp_realtime_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* The collected data of one process or all, read fresh; with findings, judged too. */
int lp_daemon_report(struct daemon *d, pid_t pid, struct lp_report *r, bool findings)
{
	int ret;

	/* Exit records waiting in the ring buffer first: a process that just exited is
	 * reported with its final numbers. */
	lp_daemon_consume(d);
	lp_tracker_find_lost_exits(&d->tracker, pid);
	ret = lp_report_build(r, &d->core, &d->tracker, pid, true);
	r->features = &d->features;
	r->profile_lost_ring = d->core.skel ? d->core.skel->bss->stacks_lost : 0;
	r->profile_lost_table = d->profiler.lost_table;
	r->samples_skipped = d->core.skel ? d->core.skel->bss->samples_skipped : 0;
	r->samples_skipped_unknown = d->core.skel ? d->core.skel->bss->samples_skipped_unknown : 0;
	r->recursion_misses = lp_core_recursion_misses(&d->core, &(const char *){NULL});
	r->state_saves_failed = d->saves_failed;
	/* Requests quiet long enough are over, as of this read. */
	for (size_t i = 0; ret == 0 && i < r->nprocs; i++) {
		const struct lp_target *t = r->procs[i].target;

		if (t->requests)
			lp_requests_settle(t->requests, r->now_ns, t->exited);
	}
	if (ret == 0 && findings)
		lp_diagnose_report(&d->diagnose, r);
	return ret;
}
