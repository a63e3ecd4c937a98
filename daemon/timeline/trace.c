// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* A record's events as a Chrome Trace Event Format document (trace.h). */
#include "timeline/trace.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "escape.h"
#include "base/protobuf.h"
#include "timeline/timeline.h"

/* The document as it is written: lp_pb's growing buffer (protobuf.h), holding text. */
struct sb {
	struct lp_pb pb;
	size_t events;
};

static char *sb_end(struct sb *b)
{
	return (char *)b->pb.p + b->pb.len;
}

/* Room for extra more bytes and the NUL; false when there is none. */
static bool sb_reserve(struct sb *b, size_t extra)
{
	return lp_pb_reserve(&b->pb, extra + 1);
}

static void sb_vadd(struct sb *b, const char *fmt, va_list ap)
{
	va_list again;
	int n;

	if (b->pb.err)
		return;
	va_copy(again, ap);
	n = vsnprintf(b->pb.p ? sb_end(b) : NULL, b->pb.cap - b->pb.len, fmt, ap);
	if (n >= 0 && (size_t)n >= b->pb.cap - b->pb.len)
		n = sb_reserve(b, (size_t)n)
			    ? vsnprintf(sb_end(b), b->pb.cap - b->pb.len, fmt, again)
			    : -1;
	va_end(again);
	if (n > 0)
		b->pb.len += (size_t)n;
}

static __attribute__((format(printf, 2, 3))) void sb_add(struct sb *b, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	sb_vadd(b, fmt, ap);
	va_end(ap);
}

/* A JSON string: the text escaped as for a terminal first (other users' names: no control
 * character, valid UTF-8 only), then its quotes and backslashes for JSON. */
static void sb_str(struct sb *b, const char *s, size_t max)
{
	char small[LP_ESCAPE_SIZE(256)];
	size_t len;
	char *e = lp_escape_into(small, sizeof(small), s ? s : "", strnlen(s ? s : "", max), &len);

	if (!e) {
		b->pb.err = -ENOMEM;
		return;
	}
	if (sb_reserve(b, 2 * len + 2)) {
		char *o = sb_end(b), *start = o;

		*o++ = '"';
		for (size_t i = 0; i < len; i++) {
			if (e[i] == '"' || e[i] == '\\')
				*o++ = '\\';
			*o++ = e[i];
		}
		*o++ = '"';
		*o = '\0';
		b->pb.len += (size_t)(o - start);
	}
	if (e != small)
		free(e);
}

static void sb_event(struct sb *b)
{
	sb_add(b, b->events++ ? ",\n" : "\n");
}

static double us(const struct lp_trace_in *in, uint64_t ts)
{
	if (ts < in->start_ns)
		return 0;
	if (ts > in->end_ns)
		ts = in->end_ns;
	return (double)(ts - in->start_ns) / 1e3;
}

/* A complete event ("X"); args is a JSON object's members, or NULL, and key/text one more,
 * text escaped (another user's name), or NULL. */
static void slice(struct sb *b, const struct lp_trace_in *in, uint32_t tid, const char *cat,
		  uint64_t from, uint64_t to, const char *name, const char *args, const char *key,
		  const char *text)
{
	if (to < from)
		to = from;
	sb_event(b);
	sb_add(b,
	       "{\"ph\":\"X\",\"cat\":\"%s\",\"pid\":%d,\"tid\":%" PRIu32
	       ",\"ts\":%.3f,\"dur\":%.3f,\"name\":",
	       cat, (int)in->pid, tid, us(in, from), us(in, to) - us(in, from));
	sb_str(b, name, 256);
	if (args || key) {
		sb_add(b, ",\"args\":{%s", args ? args : "");
		if (key) {
			sb_add(b, "%s\"%s\":", args ? "," : "", key);
			sb_str(b, text, 4096);
		}
		sb_add(b, "}");
	}
	sb_add(b, "}");
}

static void counter(struct sb *b, const struct lp_trace_in *in, const char *name, uint64_t ts,
		    double v)
{
	sb_event(b);
	sb_add(b, "{\"ph\":\"C\",\"pid\":%d,\"ts\":%.3f,\"name\":\"%s\",\"args\":{\"value\":%.3f}}",
	       (int)in->pid, us(in, ts), name, v);
}

/* The mapping holding addr, or NULL. */
static const struct lp_trace_map *map_of(const struct lp_trace_in *in, uint64_t addr)
{
	for (size_t i = 0; i < in->nmaps; i++)
		if (addr >= in->maps[i].start && addr < in->maps[i].end)
			return &in->maps[i];
	return NULL;
}

struct json {
	struct sb b;
	const struct lp_trace_in *in;
};

/* A stretch of a thread's CPU track. */
static void on_stretch(void *ctx, const struct lp_tl_stretch *s)
{
	struct json *j = ctx;
	const struct lp_trace_in *in = j->in;
	const struct lp_trace_map *m = s->state == LP_TL_FUTEX ? map_of(in, s->off->a) : NULL;
	char buf[96], args[160];

	args[0] = '\0';
	if (s->state == LP_TL_RUNNING && s->cpu >= 0)
		snprintf(args, sizeof(args), "\"cpu\":%d", s->cpu);
	else if (s->state == LP_TL_PREEMPTED)
		snprintf(args, sizeof(args), "\"cpu\":%u,\"by_pid\":%" PRIu32, s->off->cpu,
			 s->off->other);
	else if (s->state == LP_TL_FUTEX)
		snprintf(args, sizeof(args), "\"uaddr\":\"0x%" PRIx64 "\"", (uint64_t)s->off->a);
	/* The name raw here: slice() escapes it whole, once. */
	slice(&j->b, in, s->tid + LP_TRACE_CPU_TRACK, "sched", s->from, s->to,
	      lp_tl_stretch_name(s, buf, sizeof(buf)), args[0] ? args : NULL, m ? "object" : NULL,
	      m ? m->name : NULL);
}

/* A span of the thread's own track: llama_decode, an op, a barrier. */
static void on_span(void *ctx, const struct lp_tl_span *s)
{
	struct json *j = ctx;
	const struct lp_trace_in *in = j->in;
	const char *op = s->a < in->nops && in->op_names ? in->op_names[s->a] : NULL;
	const struct lp_tl_node *n = NULL;
	char name[96], args[512];
	size_t at = 0;

	args[0] = '\0';
	if (s->type == LP_REC_DECODE_BEGIN)
		snprintf(args, sizeof(args), "\"tokens\":%" PRIu64, s->began ? s->a : 0);
	else if (s->type == LP_REC_OP_BEGIN)
		at = (size_t)snprintf(args, sizeof(args), "\"group\":\"%s\"",
				      s->a < in->nops && in->op_groups && in->op_groups[s->a]
					      ? in->op_groups[s->a]
					      : "other_ops");
	if (s->type == LP_REC_OP_BEGIN)
		n = lp_tl_node_find(in->nodes, in->nnodes, s->node);
	if (n) {
		/* The shape's text is ours (numbers, type names): only the name is escaped. */
		at += (size_t)snprintf(args + at, sizeof(args) - at, ",\"shape\":\"%s\"", n->shape);
		if (at < sizeof(args) && n->layer >= 0)
			at += (size_t)snprintf(args + at, sizeof(args) - at, ",\"layer\":%d",
					       n->layer);
		if (at < sizeof(args))
			at += (size_t)snprintf(args + at, sizeof(args) - at, ",\"block\":\"%s\"",
					       n->block);
		if (at < sizeof(args) && n->bytes)
			at += (size_t)snprintf(args + at, sizeof(args) - at, ",\"bytes\":%" PRIu64,
					       n->bytes);
		if (at < sizeof(args) && n->flops)
			snprintf(args + at, sizeof(args) - at, ",\"flops\":%" PRIu64, n->flops);
	}
	slice(&j->b, in, s->tid, lp_tl_span_category(s), s->from, s->to,
	      lp_tl_span_name(s, s->type == LP_REC_OP_BEGIN ? op : NULL, name, sizeof(name)),
	      args[0] ? args : NULL, n ? "tensor" : NULL, n ? n->tensor : NULL);
}

static void on_fault(void *ctx, uint32_t tid, uint64_t ts)
{
	struct json *j = ctx;

	sb_event(&j->b);
	sb_add(&j->b,
	       "{\"ph\":\"i\",\"s\":\"t\",\"cat\":\"fault\",\"pid\":%d,\"tid\":%" PRIu32
	       ",\"ts\":%.3f,\"name\":\"major fault\"}",
	       (int)j->in->pid, tid, us(j->in, ts));
}

static void on_counter(void *ctx, enum lp_tl_counter c, uint64_t ts, double v)
{
	struct json *j = ctx;

	counter(&j->b, j->in, lp_tl_counter_name(c), ts, v);
}

static int by_tid_ts(const void *x, const void *y)
{
	const struct lp_rec_ev *a = *(const struct lp_rec_ev *const *)x,
			       *b = *(const struct lp_rec_ev *const *)y;

	if (a->tid != b->tid)
		return a->tid < b->tid ? -1 : 1;
	if (a->ts != b->ts)
		return a->ts < b->ts ? -1 : 1;
	return a < b ? -1 : a > b; /* arrival order for equal times */
}

static const char *thread_name(const struct lp_trace_in *in, uint32_t tid)
{
	for (size_t i = 0; i < in->nthreads; i++)
		if (in->threads[i].tid == tid)
			return in->threads[i].name;
	return NULL;
}

static void on_thread(void *ctx, uint32_t tid)
{
	struct json *j = ctx;
	struct sb *b = &j->b;
	const struct lp_trace_in *in = j->in;
	const char *name = thread_name(in, tid);
	char own[64];

	for (int cpu = 0; cpu < 2; cpu++) {
		sb_event(b);
		sb_add(b,
		       "{\"ph\":\"M\",\"pid\":%d,\"tid\":%" PRIu32
		       ",\"name\":\"thread_name\",\"args\":{\"name\":",
		       (int)in->pid, tid + (cpu ? LP_TRACE_CPU_TRACK : 0));
		if (name) {
			char full[LP_COMM_LEN + 32];

			snprintf(full, sizeof(full), "%.16s %" PRIu32 "%s", name, tid,
				 cpu ? " CPU" : "");
			sb_str(b, full, sizeof(full));
		} else {
			snprintf(own, sizeof(own), "thread %" PRIu32 "%s", tid, cpu ? " CPU" : "");
			sb_str(b, own, sizeof(own));
		}
		sb_add(b, "}}");
		/* Each thread's CPU track right below its own. */
		sb_event(b);
		sb_add(b,
		       "{\"ph\":\"M\",\"pid\":%d,\"tid\":%" PRIu32
		       ",\"name\":\"thread_sort_index\",\"args\":{\"sort_index\":%" PRIu64 "}}",
		       (int)in->pid, tid + (cpu ? LP_TRACE_CPU_TRACK : 0),
		       (uint64_t)tid * 2 + (unsigned)cpu);
	}
}

/* Each sequence's requests on a track of their own, below the threads: a span each, its
 * prefill and generation under it. */
static void requests(struct sb *b, const struct lp_trace_in *in)
{
	char name[64], args[160];

	for (size_t i = 0; i < in->nrequests; i++) {
		const struct lp_tl_request *r = &in->requests[i];
		uint32_t tid = LP_TRACE_REQUEST_TRACK + ((uint32_t)r->seq & 0x3fffffffu);

		if (!i || r->seq != in->requests[i - 1].seq) {
			sb_event(b);
			sb_add(b,
			       "{\"ph\":\"M\",\"pid\":%d,\"tid\":%" PRIu32
			       ",\"name\":\"thread_name\",\"args\":{\"name\":\"%s\"}}",
			       (int)in->pid, tid,
			       lp_tl_request_track_name(r->seq, name, sizeof(name)));
			sb_event(b);
			sb_add(b,
			       "{\"ph\":\"M\",\"pid\":%d,\"tid\":%" PRIu32
			       ",\"name\":\"thread_sort_index\",\"args\":{\"sort_index\":%" PRIu64
			       "}}",
			       (int)in->pid, tid, (uint64_t)tid * 2);
		}
		snprintf(args, sizeof(args),
			 "\"seq\":%" PRId32 ",\"prompt_tokens\":%" PRIu32
			 ",\"output_tokens\":%" PRIu32 ",\"began\":%s,\"over\":%s",
			 r->seq, r->prompt_tokens, r->output_tokens, r->began ? "true" : "false",
			 r->over ? "true" : "false");
		slice(b, in, tid, "request", r->from, r->to,
		      lp_tl_request_name(r, name, sizeof(name)), args, NULL, NULL);
		if (r->first) {
			slice(b, in, tid, "request", r->from, r->first, "prefill", NULL, NULL,
			      NULL);
			slice(b, in, tid, "request", r->first, r->to, "generation", NULL, NULL,
			      NULL);
		}
	}
}

int lp_trace_render(const struct lp_trace_in *in, char **out, size_t *len)
{
	const struct lp_rec_ev **ev = malloc((in->n ? in->n : 1) * sizeof(*ev));
	struct json j = {.in = in};
	struct lp_tl_sink sink = {
		.ctx = &j,
		.thread = on_thread,
		.stretch = on_stretch,
		.span_end = on_span,
		.fault = on_fault,
		.counter = on_counter,
	};
	struct sb *b = &j.b;
	struct lp_tl tl;
	int r = 0;

	if (!ev)
		return -ENOMEM;
	for (size_t i = 0; i < in->n; i++)
		ev[i] = &in->ev[i];
	qsort(ev, in->n, sizeof(*ev), by_tid_ts);

	sb_add(b,
	       "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"producer\":\"llmprofd %s\","
	       "\"pid\":%d,\"clock\":\"CLOCK_MONOTONIC; ts in microseconds from the window's "
	       "start\","
	       "\"window_start_ns\":%" PRIu64 ",\"window_seconds\":%.3f,\"events\":%zu,"
	       "\"events_lost\":%" PRIu64 ",\"events_dropped\":%" PRIu64 "},\n\"traceEvents\":[",
	       in->version ? in->version : "?", (int)in->pid, in->start_ns,
	       (double)(in->end_ns - in->start_ns) / 1e9, in->n, in->lost, in->dropped);
	sb_event(b);
	sb_add(b, "{\"ph\":\"M\",\"pid\":%d,\"name\":\"process_name\",\"args\":{\"name\":",
	       (int)in->pid);
	sb_str(b, in->comm ? in->comm : "?", LP_COMM_LEN);
	sb_add(b, "}}");
	requests(b, in);
	lp_tl_init(&tl, in->start_ns, in->end_ns, &sink);
	tl.step = in->step;
	for (size_t i = 0; i < in->n && !r; i++)
		r = lp_tl_feed(&tl, ev[i]);
	r = r ? r : lp_tl_end(&tl, in->end_ns);
	if (!r)
		lp_tl_counters(&tl, SIZE_MAX);
	lp_tl_free(&tl);
	sb_add(b, "\n]}\n");
	free(ev);
	if (r || b->pb.err) {
		free(b->pb.p);
		return r ? r : b->pb.err;
	}
	*out = (char *)b->pb.p;
	*len = b->pb.len;
	return 0;
}
