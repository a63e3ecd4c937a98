/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* A recorded timeline in Perfetto's own trace format: a stream of TracePacket messages
 * (protobuf), written as the events come, that ui.perfetto.dev and trace_processor open as
 * they are. Pure: events in, bytes out (in out, for the caller to take as it goes).
 *
 * One packet sequence. Its first packets say the clocks (CLOCK_MONOTONIC, which every
 * timestamp is in, beside BOOTTIME and REALTIME read at the same moment), the process and
 * its counter tracks; each thread gets a track (its llama_decode, op and barrier spans,
 * begun and ended as they happen; major faults) and a child track for its CPU states (a
 * slice per stretch, written when it ends). Names and categories are interned. The
 * counters come at the window's end (timeline.h). A slice on the process's track spans the
 * window; its end says how many events it held, and lost. Field numbers are those of Perfetto's protos/perfetto/trace/
 * perfetto_trace.proto; tests/e2e decodes the output with protoc against them. */
#ifndef LLMPROF_PERFETTO_H
#define LLMPROF_PERFETTO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/protobuf.h"
#include "timeline/timeline.h"

/* What the writer asks as it goes; each may return NULL (unknown). Names are raw: the
 * writer escapes them. */
struct lp_pf_names {
	void *ctx;
	const char *(*thread)(void *ctx, uint32_t tid);
	/* An op's name, and its group in *group (NULL: other_ops). */
	const char *(*op)(void *ctx, uint64_t op, const char **group);
	/* The file or region the address lies in. */
	const char *(*object)(void *ctx, uint64_t addr);
	/* The graph node of that id (lp_tl_span's node). */
	const struct lp_tl_node *(*node)(void *ctx, uint64_t id);
};

struct lp_pf_info {
	pid_t pid;
	const char *comm;
	const char *step;	   /* its engine's step function (lp_tl.step) */
	uint64_t start_ns, end_ns; /* the window planned, CLOCK_MONOTONIC */
	/* The clocks read together at the start. */
	uint64_t monotonic_ns, boottime_ns, realtime_ns;
};

struct lp_pf {
	struct lp_pb out; /* written and not yet taken */
	struct lp_pf_names names;
	pid_t pid;
	struct lp_tl tl;
	uint8_t *op_interned; /* by op index: its name was interned */
	size_t nop_interned;
	uint32_t interned; /* bit per static name */
	uint64_t events;
};

/* Writes the first packets into w->out. Returns 0 or -ENOMEM. */
int lp_pf_begin(struct lp_pf *w, const struct lp_pf_info *info, const struct lp_pf_names *names);

/* One event (timeline.h's order). Returns 0 or -ENOMEM. */
int lp_pf_feed(struct lp_pf *w, const struct lp_rec_ev *e);

/* The window ended at end_ns: the open slices are closed. Returns 0 or -ENOMEM. */
int lp_pf_end(struct lp_pf *w, uint64_t end_ns);

/* The process's requests over the window (timeline.h), a track per sequence; after
 * lp_pf_end(). Returns 0 or -ENOMEM. */
int lp_pf_requests(struct lp_pf *w, const struct lp_tl_request *r, size_t n);

/* Then the counters, at most max points a call, and once they are all written the window's
 * slice ends, saying how many events were written, lost by the kernel's ring buffer and
 * dropped by the daemon. Returns 1 when done, 0 when more is to come, or -ENOMEM. */
int lp_pf_finish(struct lp_pf *w, size_t max, uint64_t lost, uint64_t dropped);

/* Forgets what out holds (the caller took it). */
void lp_pf_taken(struct lp_pf *w);

void lp_pf_free(struct lp_pf *w);

#endif
