/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* A record's events made into what a timeline shows, for any format (trace.h writes JSON,
 * perfetto.h protobuf). Pure: events in, calls to a sink out.
 *
 * Events are fed one at a time, each thread's in time order (the order the ring buffer
 * brings them in: a thread's events are written one after the other); threads may
 * interleave. Per thread two tracks: its own (llama_decode, op and barrier spans; major
 * faults) and its CPU track (running, preempted, blocked in a futex wait or otherwise,
 * runnable: one stretch after the other). Counters for the process (threads on CPU and
 * runnable, tokens/s, major faults) are kept as steps and given at the end, in time order:
 * a thread's run-queue wait is known only at its next switch-out. */
#ifndef LLMPROF_TIMELINE_H
#define LLMPROF_TIMELINE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <linux/types.h>

#include "engine/tensors.h"
#include "llmprof/abi.h"

/* Spans nested deeper than this on a thread's track are left out. */
#define LP_TL_MAX_DEPTH 16

enum lp_tl_state {
	LP_TL_RUNNING,
	LP_TL_PREEMPTED, /* off: the switch-out's other and comm took the CPU */
	LP_TL_FUTEX,	 /* off: waiting on the futex word at the switch-out's a */
	LP_TL_BLOCKED,
	LP_TL_PAGING, /* blocked, and a major fault ended as it ran again */
	LP_TL_RUNNABLE,
};

/* A stretch of a thread's CPU track. */
struct lp_tl_stretch {
	uint32_t tid;
	enum lp_tl_state state;
	uint64_t from, to;
	int cpu;		     /* running: the CPU it ran on; -1 when unknown */
	const struct lp_rec_ev *off; /* off-CPU states: the switch-out */
};

/* A span of a thread's own track: type is LP_REC_DECODE_BEGIN, LP_REC_OP_BEGIN or
 * LP_REC_BARRIER_BEGIN. */
struct lp_tl_span {
	uint32_t tid;
	uint8_t type;
	uint64_t from, to; /* to: 0 at its beginning */
	uint64_t a;	   /* the tokens of a decode, the index of an op */
	/* false: begun before the window, first seen at its end; then the first of a thread's
	 * spans like it is the innermost, and each later one began 1 ns before the last, so
	 * that they nest as they did */
	bool began;
	uint8_t phase;	  /* a decode's phase where its engine said it (lp_rec_ev.reason) */
	unsigned depth;	  /* spans open around it */
	const char *step; /* a decode's: its engine's step function (lp_tl.step) */
	/* An op's, at its end: the graph node it computed part of (lp_node_val's id), 0 where
	 * its tensors were not read */
	uint64_t node;
};

enum lp_tl_counter {
	LP_TL_ON_CPU,	 /* threads on CPU */
	LP_TL_RUNNABLE_, /* threads runnable: on CPU or waiting for one */
	LP_TL_TOKENS,	 /* tokens/s between generation decodes' starts */
	LP_TL_FAULTS,	 /* major faults so far */
	LP_TL_NCOUNTERS,
};

struct lp_tl_sink {
	void *ctx;
	/* A thread seen for the first time. */
	void (*thread)(void *ctx, uint32_t tid);
	void (*stretch)(void *ctx, const struct lp_tl_stretch *s);
	/* A span's beginning (s->to 0; only for spans that began in the window) and its end. */
	void (*span_begin)(void *ctx, const struct lp_tl_span *s);
	void (*span_end)(void *ctx, const struct lp_tl_span *s);
	void (*fault)(void *ctx, uint32_t tid, uint64_t ts);
	/* At the end, each counter's points in time order. */
	void (*counter)(void *ctx, enum lp_tl_counter c, uint64_t ts, double v);
};

/* A request of the process (engine/requests.h) that overlaps the window, for a track per
 * sequence: a span from its first decode's entry to its last decode's return, and under it
 * its prefill (to its first output) and its generation. Clipped to the window: began and
 * over say whether its own ends are in it. */
struct lp_tl_request {
	uint64_t id;
	int32_t seq;
	uint32_t prompt_tokens, output_tokens;
	uint64_t from, first, to; /* first: 0 when its first output is outside the window */
	bool began, over;
};

/* The graph node an op span computed part of, for the span's args: what the node's
 * figures say of one evaluation of it, all its threads' parts together. */
struct lp_tl_node {
	uint64_t id;		       /* lp_node_val's */
	char tensor[LP_NODE_NAME_MAX]; /* raw, the process's: lp_node_name() */
	int layer;		       /* -1: none in its name */
	const char *block;	       /* lp_block_names' */
	char shape[LP_NODE_SHAPE_MAX];
	uint64_t bytes; /* read and written; 0: not known (lp_node_bytes) */
	uint64_t flops; /* 0: not a matrix multiplication */
};

/* Node n of op (its name) as a span's args. */
void lp_tl_node_make(struct lp_tl_node *out, const struct lp_node *n, const char *op);
/* Sorts v by id; then finds id in it (NULL: none). */
void lp_tl_nodes_sort(struct lp_tl_node *v, size_t n);
const struct lp_tl_node *lp_tl_node_find(const struct lp_tl_node *v, size_t n, uint64_t id);

struct lp_tl_thread;

struct lp_tl {
	uint64_t start_ns, end_ns;
	/* The engine's step function, its decode spans' name (llama_decode, forward); NULL:
	 * llama_decode */
	const char *step;
	struct lp_tl_sink sink;
	struct lp_tl_thread **t; /* sorted by tid */
	size_t nt, capt;
	struct lp_tl_thread *last;
	/* Steps, as ts << 1 | up: threads on CPU, runnable; and times: tokens, faults. */
	struct lp_tl_vec {
		uint64_t *v;
		size_t n, cap;
	} steps[LP_TL_NCOUNTERS];
	/* Where lp_tl_counters() is: the counter, its step, the level so far. */
	int cur;
	size_t at;
	int level;
	int err;
};

void lp_tl_init(struct lp_tl *tl, uint64_t start_ns, uint64_t end_ns,
		const struct lp_tl_sink *sink);

/* One event; those outside the window are ignored. Returns 0 or -ENOMEM (then the timeline
 * stops taking events). */
int lp_tl_feed(struct lp_tl *tl, const struct lp_rec_ev *e);

/* The window ended at end_ns (at most the planned end): what is open is closed there, and
 * the counters' steps are put in time order. Returns 0 or the first error. */
int lp_tl_end(struct lp_tl *tl, uint64_t end_ns);

/* After lp_tl_end: the counters' next points, at most max of them (a writer that streams
 * gives them a piece at a time: a minute of an OpenMP engine is millions). Returns whether
 * all are given. */
bool lp_tl_counters(struct lp_tl *tl, size_t max);

void lp_tl_free(struct lp_tl *tl);

/* What a stretch or a span is called on its track, in buf (raw: a preemptor's comm is
 * another user's, to be escaped by the writer); op is the op's name (NULL: "op N"). */
const char *lp_tl_stretch_name(const struct lp_tl_stretch *s, char *buf, size_t size);
const char *lp_tl_span_name(const struct lp_tl_span *s, const char *op, char *buf, size_t size);
/* A span's category: "decode", "op" or "barrier"; a counter's name. */
const char *lp_tl_span_category(const struct lp_tl_span *s);
const char *lp_tl_counter_name(enum lp_tl_counter c);
/* "requests, sequence S" and "request ID". */
const char *lp_tl_request_track_name(int32_t seq, char *buf, size_t size);
const char *lp_tl_request_name(const struct lp_tl_request *r, char *buf, size_t size);

#endif
