/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* Recording a timeline of one process for a window (llmprofctl record): its entry in the
 * "recording" map switches its events on in the kernel, the "rec_ring" ring buffer brings
 * them, precise mode gives op and barrier spans for the window (unless asked not to, and
 * left as it was after). At the window's end the events become a Chrome trace (trace.h),
 * kept until fetched again or replaced. One record per process at a time. */
#ifndef LLMPROF_RECORD_H
#define LLMPROF_RECORD_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/body.h"
#include "kernel/core.h"
#include "llmprof/protocol.h"
#include "engine/engine.h"
#include "timeline/perfetto.h"
#include "base/stream.h"
#include "timeline/trace.h"
#include "tracked/track.h"

/* Events kept per record: 56 bytes each, 56 MiB at most; more are counted as dropped. */
#define LP_RECORD_MAX_EVENTS (1u << 20)
/* A streamed trace's bytes not yet sent to its client past which events are dropped (a
 * client that does not read): 64 MiB, about 20 s of op spans of a 4-thread engine. */
#define LP_RECORD_MAX_BACKLOG (64u << 20)
/* A streamed trace's counters are written after its window, at most this many points a
 * turn of the loop (about 25 bytes each), while its client has less than this unread. */
#define LP_RECORD_CLOSE_POINTS 200000
#define LP_RECORD_CLOSE_BACKLOG (8u << 20)
/* A finished trace is kept this long for its client to fetch. */
#define LP_RECORD_KEEP_NS (600ULL * 1000000000ULL)

struct lp_record {
	pid_t pid;
	uint64_t start_ns, until_ns; /* CLOCK_MONOTONIC */
	uint64_t lease_ns, asked_ns; /* 0: no lease; when its client last asked for it */
	bool fetched;
	bool ops, precise_ours;
	/* Then: finished (the window is over, the kernel stopped), rendered (the trace is
	 * written), done (what rendering took is freed: the trace can be fetched). The trace
	 * is rendered by a thread of its own (threaded), so that the daemon keeps serving (a
	 * 3 s record of the OpenMP build is 500,000 events); until it sets rendered the
	 * thread owns everything below. */
	bool finished, threaded, done;
	atomic_bool rendered;
	pthread_t thread;
	char comm[16];
	const char *step;	/* static (lp_engine_step_of); NULL: llama_decode */
	char **op_names;	/* copies: the op table may grow meanwhile */
	const char **op_groups; /* static names (lp_op_group_key) */
	size_t nops;
	const char *version;
	uint64_t done_ns;
	struct lp_rec_ev *ev;
	size_t n, cap;
	uint64_t dropped; /* past LP_RECORD_MAX_EVENTS */
	uint64_t lost;	  /* the kernel's ring buffer was full */
	struct lp_trace_thread *threads;
	size_t nthreads;
	struct lp_trace_map *maps; /* its mappings, for what futex words lie in */
	size_t nmaps;
	struct lp_tl_request *requests; /* its requests over the window, read at its end */
	size_t nrequests;
	/* Its graph nodes, for op spans' args: read at the end, or as a streamed trace
	 * meets a node it does not know (at most once a second) */
	struct lp_tl_node *nodes;
	size_t nnodes;
	uint64_t nodes_read_ns;
	char *trace;
	size_t len;
	struct lp_body *shared; /* the trace once fetched (then trace is NULL) */
	int error;		/* rendering failed */
	/* Streamed (Perfetto's format): written as the events come, to the client's answer;
	 * what is kept once done is a summary (trace, len). */
	struct lp_stream *stream;
	struct lp_pf *pf;
	struct lp_recorder *owner;
	uint64_t maps_read_ns;
};

/* Timeline events read per call of ring_buffer__consume (lp_record_on_event then stops it). */
#define LP_RECORD_BUDGET 65536

struct lp_recorder {
	struct lp_record *v[LP_MAX_RECORDINGS];
	size_t n;
	size_t budget; /* events still to read in this call */
	struct lp_core *core;
	struct lp_engines *g;
	struct lp_tracker *tr;
	const char *version;
};

void lp_recorder_init(struct lp_recorder *r, struct lp_core *core, struct lp_engines *g,
		      struct lp_tracker *tr, const char *version);
void lp_recorder_free(struct lp_recorder *r);

/* Starts recording process pid for seconds, with op spans if ops. With a lease (seconds, 0:
 * none), the record belongs to a client that asks for it at least that often: one that
 * went away (a killed llmprofctl) cancels it, probes off and nothing kept, once a lease
 * passes with no fetch, before its trace was fetched. With stream, the trace is written
 * as it is recorded, in Perfetto's format, to *stream (the caller's reference; its
 * transport going away cancels the record at once), and what GET gives after is a
 * summary. Returns 0, -ESRCH (not tracked), -ENODATA (exited), -EBUSY (a record of it is
 * running), -ENOSPC (as many records as the kernel side holds are running), or -errno. */
int lp_record_start(struct lp_recorder *r, pid_t pid, double seconds, bool ops, double lease,
		    struct lp_stream **stream);

/* Ends pid's running record now (Ctrl-C in llmprofctl record): its window ends here and the
 * trace is rendered as at its planned end. Returns 0, or -ENOENT: none is running. */
int lp_record_stop(struct lp_recorder *r, pid_t pid);

/* The finished trace of pid: 0 and a reference to it in *body (api.h: the answer shares it,
 * not copies it); 1 while it records (*remaining seconds left); -ENOENT: no record of it;
 * or the rendering's error. */
int lp_record_fetch(struct lp_recorder *r, pid_t pid, struct lp_body **body, double *remaining);

/* Whether a record is running (its events want reading). */
bool lp_record_running(const struct lp_recorder *r);

/* The "rec_ring" ring buffer's callback (ctx: the recorder). */
int lp_record_on_event(void *ctx, void *data, size_t size);

/* Finishes the records whose window has passed (call after consuming the ring buffer),
 * cancels those whose client's lease ran out, and forgets traces kept past
 * LP_RECORD_KEEP_NS. */
void lp_record_tick(struct lp_recorder *r);

#endif
