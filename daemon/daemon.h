/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* The daemon's state, as main.c wires the rooms together, and what every reader of its
 * figures does first: the ring buffers drained, the exits harvested. */
#ifndef LLMPROF_DAEMON_H
#define LLMPROF_DAEMON_H

#include <bpf/libbpf.h>
#include <event2/event.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/config.h"
#include "engine/engine.h"
#include "kernel/core.h"
#include "kernel/feature.h"
#include "kernel/prober.h"
#include "options.h"
#include "profile/profiler.h"
#include "report/diagnose.h"
#include "report/report.h"
#include "serving/server.h"
#include "timeline/record.h"
#include "tracked/track.h"

struct daemon {
	struct lp_config cfg;
	struct lp_config_store store;
	int argc;
	char **argv;
	struct lp_features features;
	struct lp_core core;
	struct lp_tracker tracker;
	struct lp_engines eng;
	struct lp_prober prober;
	struct lp_recorder recorder;
	struct lp_profiler profiler;
	struct lp_diagnose diagnose;
	uint64_t diagnose_ns; /* its last tick */
	struct ring_buffer *rb;
	struct event_base *base;
	struct event *ev_pending;
	struct event *ev_record;  /* reads timeline events every 100 ms while records run */
	struct event *ev_rephase; /* restarts the per-CPU sampling timers (on_rephase) */
	struct event *ev_decide;  /* tensor decisions every 100 ms while any waits for one */
	struct event *ev_profile; /* reads stacks every LP_PROFILE_DRAIN_MS while profiles run */
	struct event *ev_checkpoint;
	char *web_config; /* the live --web-config-file, kept across reloads */
	struct lp_server *server;
	struct lp_api_backend api;
	double start_realtime;
	uint64_t start_ns;
	uint64_t reloads;
	uint64_t saves, saves_failed; /* of the totals to the state directory */
	int save_error;		      /* the last save's: 0 when it worked */
	char boot_id[64];
};

/* Reads both ring buffers: exit and mapping records, then timeline events (a budget of
 * those per call), and harvests the exits' futex words. */
void lp_daemon_consume(struct daemon *d);

/* The collected data of one process (pid) or all (0), read fresh; with findings, judged
 * too. 0 or -errno; r is to be freed either way. */
int lp_daemon_report(struct daemon *d, pid_t pid, struct lp_report *r, bool findings);

/* CLOCK_REALTIME in seconds. */
double lp_realtime_now(void);

#endif
