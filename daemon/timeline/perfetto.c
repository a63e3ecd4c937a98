// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* A timeline in Perfetto's protobuf trace format (perfetto.h). */
#include "timeline/perfetto.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "escape.h"

/* Wire types. */

/* Field numbers of perfetto_trace.proto. */
enum {
	TRACE_PACKET = 1,
	/* TracePacket */
	PKT_CLOCK_SNAPSHOT = 6,
	PKT_TIMESTAMP = 8,
	PKT_SEQUENCE_ID = 10, /* trusted_packet_sequence_id */
	PKT_TRACK_EVENT = 11,
	PKT_INTERNED_DATA = 12,
	PKT_SEQUENCE_FLAGS = 13,
	PKT_DEFAULTS = 59, /* trace_packet_defaults */
	PKT_TRACK_DESCRIPTOR = 60,
	/* TracePacketDefaults, ClockSnapshot, ClockSnapshot.Clock */
	DEFAULTS_CLOCK_ID = 58,
	SNAPSHOT_CLOCKS = 1,
	SNAPSHOT_PRIMARY = 2,
	CLOCK_ID = 1,
	CLOCK_TIMESTAMP = 2,
	/* TrackEvent */
	EV_DEBUG_ANNOTATIONS = 4,
	EV_CATEGORY_IIDS = 3,
	EV_TYPE = 9,
	EV_NAME_IID = 10,
	EV_TRACK_UUID = 11,
	EV_NAME = 23,
	EV_COUNTER_VALUE = 30,
	EV_DOUBLE_COUNTER_VALUE = 44,
	/* DebugAnnotation */
	ANN_NAME_IID = 1,
	ANN_UINT = 3,
	ANN_INT = 4,
	ANN_STRING = 6,
	ANN_DOUBLE = 5,
	/* InternedData; EventCategory, EventName and DebugAnnotationName alike */
	INT_CATEGORIES = 1,
	INT_EVENT_NAMES = 2,
	INT_ANNOTATION_NAMES = 3,
	IID = 1,
	IID_NAME = 2,
	/* TrackDescriptor, ProcessDescriptor, ThreadDescriptor, CounterDescriptor */
	TRACK_UUID = 1,
	TRACK_NAME = 2,
	TRACK_PROCESS = 3,
	TRACK_THREAD = 4,
	TRACK_PARENT = 5,
	TRACK_COUNTER = 8,
	PROCESS_PID = 1,
	PROCESS_NAME = 6,
	THREAD_PID = 1,
	THREAD_TID = 2,
	THREAD_NAME = 5,
	COUNTER_UNIT = 3,
	COUNTER_UNIT_NAME = 6,
};

enum { SLICE_BEGIN = 1, SLICE_END = 2, INSTANT = 3, COUNTER = 4 };
enum { SEQ_INCREMENTAL_STATE_CLEARED = 1, SEQ_NEEDS_INCREMENTAL_STATE = 2 };
enum { CLOCK_REALTIME_ = 1, CLOCK_MONOTONIC_ = 3, CLOCK_BOOTTIME_ = 6 };
enum { UNIT_COUNT = 2 };
#define SEQUENCE 1

/* Tracks: the process, its counters, each thread's own track and its CPU track. */
#define UUID_PROCESS 1
#define UUID_COUNTER(c) (2 + (uint64_t)(c))
#define UUID_THREAD(tid) (1ULL << 32 | (uint64_t)(tid) << 1)
#define UUID_CPU(tid) (UUID_THREAD(tid) | 1)
#define UUID_REQUESTS(seq) (2ULL << 32 | (uint32_t)(seq))

/* Interned strings: categories, static event names, annotation names by iid. */
static const char *const categories[] = {NULL,	    "sched", "decode", "op",
					 "barrier", "fault", "request"};
enum { CAT_SCHED = 1, CAT_DECODE, CAT_OP, CAT_BARRIER, CAT_FAULT, CAT_REQUEST };
static const char *const static_names[] = {
	NULL,
	"running",
	"runnable",
	"blocked",
	"blocked: major fault",
	"barrier",
	"llama_decode",
	"llama_decode: generation",
	"major fault",
};
#define OP_IID_BASE 1000 /* an op's name: this plus its index */
static const char *const annotations[] = {
	NULL,	  "cpu",    "by_pid",  "uaddr", "object",	 "tokens",	  "group",
	"events", "lost",   "dropped", "seq",	"prompt_tokens", "output_tokens", "began",
	"over",	  "tensor", "shape",   "layer", "block",	 "bytes",	  "flops",
};
enum {
	ANN_CPU = 1,
	ANN_BY_PID,
	ANN_UADDR,
	ANN_OBJECT,
	ANN_TOKENS,
	ANN_GROUP,
	ANN_EVENTS,
	ANN_LOST,
	ANN_DROPPED,
	ANN_SEQ,
	ANN_PROMPT_TOKENS,
	ANN_OUTPUT_TOKENS,
	ANN_BEGAN,
	ANN_OVER,
	ANN_TENSOR,
	ANN_SHAPE,
	ANN_LAYER,
	ANN_BLOCK,
	ANN_BYTES,
	ANN_FLOPS,
};

/* A string from other users (a comm, a file name): escaped, so valid UTF-8. */
static void field_name(struct lp_pb *b, unsigned field, const char *s, size_t max)
{
	char small[LP_ESCAPE_SIZE(256)];
	size_t len;
	char *e = lp_escape_into(small, sizeof(small), s, strnlen(s, max), &len);

	if (!e) {
		b->err = -ENOMEM;
		return;
	}
	lp_pb_bytes(b, field, e, len);
	if (e != small)
		free(e);
}

/* A nested message: its length is written at close, in one byte if it fits (a packet
 * mostly does), else the body moves up to make room. */
static size_t open_msg(struct lp_pb *b, unsigned field)
{
	lp_pb_tag(b, field, LP_PB_LEN);
	if (!lp_pb_reserve(b, 1))
		return 0;
	b->p[b->len] = 0;
	return b->len++;
}

static void close_msg(struct lp_pb *b, size_t at)
{
	size_t len, n;
	uint8_t v[10];

	if (b->err)
		return;
	len = b->len - at - 1;
	n = lp_pb_varint_at(v, len);
	if (n > 1) {
		if (!lp_pb_reserve(b, n - 1))
			return;
		memmove(b->p + at + n, b->p + at + 1, len);
		b->len += n - 1;
	}
	memcpy(b->p + at, v, n);
}

static size_t packet(struct lp_pf *w, uint64_t ts, unsigned flags)
{
	size_t at = open_msg(&w->out, TRACE_PACKET);

	if (ts)
		lp_pb_uint(&w->out, PKT_TIMESTAMP, ts);
	lp_pb_uint(&w->out, PKT_SEQUENCE_ID, SEQUENCE);
	if (flags)
		lp_pb_uint(&w->out, PKT_SEQUENCE_FLAGS, flags);
	return at;
}

static void interned_entry(struct lp_pb *b, unsigned field, uint64_t iid, const char *name,
			   bool escape)
{
	size_t at = open_msg(b, field);

	lp_pb_uint(b, IID, iid);
	if (escape)
		field_name(b, IID_NAME, name, 256);
	else
		lp_pb_bytes(b, IID_NAME, name, strlen(name));
	close_msg(b, at);
}

/* A track event's packet: its name interned (name_iid, with op, the op's index) or given
 * (name); the caller adds annotations and closes the event, then the packet. */
struct event {
	size_t packet, ev;
};

static struct event event_open(struct lp_pf *w, uint64_t ts, unsigned type, uint64_t track,
			       unsigned cat, unsigned name_iid, const char *name, int64_t op)
{
	struct lp_pb *b = &w->out;
	struct event e = {packet(w, ts, SEQ_NEEDS_INCREMENTAL_STATE), 0};
	uint64_t iid = op >= 0 ? OP_IID_BASE + (uint64_t)op : name_iid;
	bool need_name = false;

	if (op >= 0) {
		if ((size_t)op >= w->nop_interned) {
			size_t n = (size_t)op + 64;
			uint8_t *v = realloc(w->op_interned, n);

			if (!v) {
				b->err = -ENOMEM;
				return e;
			}
			memset(v + w->nop_interned, 0, n - w->nop_interned);
			w->op_interned = v;
			w->nop_interned = n;
		}
		need_name = !w->op_interned[op];
		w->op_interned[op] = 1;
	} else if (name_iid) {
		need_name = !(w->interned & 1u << name_iid);
		w->interned |= 1u << name_iid;
	}
	if (need_name) {
		size_t at = open_msg(b, PKT_INTERNED_DATA);

		interned_entry(b, INT_EVENT_NAMES, iid, op >= 0 ? name : static_names[iid], true);
		close_msg(b, at);
	}
	e.ev = open_msg(b, PKT_TRACK_EVENT);
	lp_pb_uint(b, EV_TYPE, type);
	lp_pb_uint(b, EV_TRACK_UUID, track);
	if (cat)
		lp_pb_uint(b, EV_CATEGORY_IIDS, cat);
	if (iid)
		lp_pb_uint(b, EV_NAME_IID, iid);
	else if (name)
		field_name(b, EV_NAME, name, 256);
	return e;
}

static void event_close(struct lp_pf *w, struct event e)
{
	close_msg(&w->out, e.ev);
	close_msg(&w->out, e.packet);
}

static size_t ann_open(struct lp_pb *b, unsigned name_iid)
{
	size_t at = open_msg(b, EV_DEBUG_ANNOTATIONS);

	lp_pb_uint(b, ANN_NAME_IID, name_iid);
	return at;
}

static void ann_u64(struct lp_pb *b, unsigned name_iid, uint64_t v)
{
	size_t at = ann_open(b, name_iid);

	lp_pb_uint(b, ANN_UINT, v);
	close_msg(b, at);
}

/* A string annotation: s is NUL-terminated within max bytes. */
static void ann_str(struct lp_pb *b, unsigned name_iid, const char *s, size_t max)
{
	size_t at = ann_open(b, name_iid);

	field_name(b, ANN_STRING, s, max);
	close_msg(b, at);
}

static void end_event(struct lp_pf *w, uint64_t ts, uint64_t track)
{
	event_close(w, event_open(w, ts, SLICE_END, track, 0, 0, NULL, -1));
}

static void track(struct lp_pf *w, uint64_t uuid, uint64_t parent, const char *name)
{
	struct lp_pb *b = &w->out;
	size_t p = packet(w, 0, 0), t = open_msg(b, PKT_TRACK_DESCRIPTOR);

	lp_pb_uint(b, TRACK_UUID, uuid);
	if (parent)
		lp_pb_uint(b, TRACK_PARENT, parent);
	if (name)
		field_name(b, TRACK_NAME, name, 256);
	if (uuid >= UUID_COUNTER(0) && uuid < UUID_COUNTER(LP_TL_NCOUNTERS)) {
		size_t c = open_msg(b, TRACK_COUNTER);

		if (uuid == UUID_COUNTER(LP_TL_TOKENS))
			lp_pb_bytes(b, COUNTER_UNIT_NAME, "tokens/s", 8);
		else
			lp_pb_uint(b, COUNTER_UNIT, UNIT_COUNT);
		close_msg(b, c);
	}
	close_msg(b, t);
	close_msg(b, p);
}

static void on_thread(void *ctx, uint32_t tid)
{
	struct lp_pf *w = ctx;
	struct lp_pb *b = &w->out;
	const char *name = w->names.thread ? w->names.thread(w->names.ctx, tid) : NULL;
	size_t p = packet(w, 0, 0), t = open_msg(b, PKT_TRACK_DESCRIPTOR), th;
	char cpu[LP_COMM_LEN + 32];

	lp_pb_uint(b, TRACK_UUID, UUID_THREAD(tid));
	th = open_msg(b, TRACK_THREAD);
	lp_pb_uint(b, THREAD_PID, (uint64_t)w->pid);
	lp_pb_uint(b, THREAD_TID, tid);
	if (name)
		field_name(b, THREAD_NAME, name, LP_COMM_LEN);
	close_msg(b, th);
	close_msg(b, t);
	close_msg(b, p);
	/* Raw: track() escapes it. */
	if (name)
		snprintf(cpu, sizeof(cpu), "%.16s %" PRIu32 " CPU", name, tid);
	else
		snprintf(cpu, sizeof(cpu), "thread %" PRIu32 " CPU", tid);
	track(w, UUID_CPU(tid), UUID_THREAD(tid), cpu);
}

static void on_stretch(void *ctx, const struct lp_tl_stretch *s)
{
	static const unsigned iids[] = {
		[LP_TL_RUNNING] = 1,
		[LP_TL_RUNNABLE] = 2,
		[LP_TL_BLOCKED] = 3,
		[LP_TL_PAGING] = 4,
	};
	struct lp_pf *w = ctx;
	struct lp_pb *b = &w->out;
	const char *object;
	char buf[96];
	struct event e = event_open(w, s->from, SLICE_BEGIN, UUID_CPU(s->tid), CAT_SCHED,
				    iids[s->state], lp_tl_stretch_name(s, buf, sizeof(buf)), -1);

	if (s->state == LP_TL_RUNNING && s->cpu >= 0) {
		ann_u64(b, ANN_CPU, (uint64_t)s->cpu);
	} else if (s->state == LP_TL_PREEMPTED) {
		ann_u64(b, ANN_CPU, s->off->cpu);
		ann_u64(b, ANN_BY_PID, s->off->other);
	} else if (s->state == LP_TL_FUTEX) {
		snprintf(buf, sizeof(buf), "0x%" PRIx64, (uint64_t)s->off->a);
		ann_str(b, ANN_UADDR, buf, sizeof(buf));
		object = w->names.object ? w->names.object(w->names.ctx, s->off->a) : NULL;
		if (object)
			ann_str(b, ANN_OBJECT, object, 4096);
	}
	event_close(w, e);
	end_event(w, s->to, UUID_CPU(s->tid));
}

static void on_span_begin(void *ctx, const struct lp_tl_span *s)
{
	struct lp_pf *w = ctx;
	struct lp_pb *b = &w->out;
	const char *op = NULL, *group = NULL;
	char buf[96];
	struct event e;

	if (s->type == LP_REC_OP_BEGIN && w->names.op)
		op = w->names.op(w->names.ctx, s->a, &group);
	if (s->type == LP_REC_OP_BEGIN)
		e = event_open(w, s->from, SLICE_BEGIN, UUID_THREAD(s->tid), CAT_OP, 0,
			       lp_tl_span_name(s, op, buf, sizeof(buf)), (int64_t)s->a);
	else if (s->type == LP_REC_BARRIER_BEGIN)
		e = event_open(w, s->from, SLICE_BEGIN, UUID_THREAD(s->tid), CAT_BARRIER, 5, NULL,
			       -1);
	else
		e = event_open(w, s->from, SLICE_BEGIN, UUID_THREAD(s->tid), CAT_DECODE,
			       !s->began   ? 6
			       : s->a == 1 ? 7
					   : 0,
			       lp_tl_span_name(s, NULL, buf, sizeof(buf)), -1);
	if (s->type == LP_REC_DECODE_BEGIN)
		ann_u64(b, ANN_TOKENS, s->began ? s->a : 0);
	else if (s->type == LP_REC_OP_BEGIN)
		ann_str(b, ANN_GROUP, group ? group : "other_ops", 4096);
	event_close(w, e);
}

static void on_span_end(void *ctx, const struct lp_tl_span *s)
{
	struct lp_pf *w = ctx;
	const struct lp_tl_node *n = NULL;
	struct lp_pb *b = &w->out;
	struct event e;

	/* Begun before the window: its beginning is written now (see timeline.h). */
	if (!s->began)
		on_span_begin(ctx, s);
	if (s->type == LP_REC_OP_BEGIN && s->node && w->names.node)
		n = w->names.node(w->names.ctx, s->node);
	e = event_open(w, s->to, SLICE_END, UUID_THREAD(s->tid), 0, 0, NULL, -1);
	/* The node is known once the op returned: its args come with the end, which
	 * trace_processor adds to the slice's. */
	if (n) {
		ann_str(b, ANN_TENSOR, n->tensor, sizeof(n->tensor));
		ann_str(b, ANN_SHAPE, n->shape, sizeof(n->shape));
		if (n->layer >= 0)
			ann_u64(b, ANN_LAYER, (uint64_t)n->layer);
		ann_str(b, ANN_BLOCK, n->block, 64);
		if (n->bytes)
			ann_u64(b, ANN_BYTES, n->bytes);
		if (n->flops)
			ann_u64(b, ANN_FLOPS, n->flops);
	}
	event_close(w, e);
}

static void on_fault(void *ctx, uint32_t tid, uint64_t ts)
{
	struct lp_pf *w = ctx;

	event_close(w, event_open(w, ts, INSTANT, UUID_THREAD(tid), CAT_FAULT, 8, NULL, -1));
}

static void on_counter(void *ctx, enum lp_tl_counter c, uint64_t ts, double v)
{
	struct lp_pf *w = ctx;
	struct event e = event_open(w, ts, COUNTER, UUID_COUNTER(c), 0, 0, NULL, -1);

	if (c == LP_TL_TOKENS)
		lp_pb_double(&w->out, EV_DOUBLE_COUNTER_VALUE, v);
	else
		lp_pb_uint(&w->out, EV_COUNTER_VALUE, (uint64_t)(int64_t)v);
	event_close(w, e);
}

static void clock(struct lp_pb *b, unsigned id, uint64_t ts)
{
	size_t at = open_msg(b, SNAPSHOT_CLOCKS);

	lp_pb_uint(b, CLOCK_ID, id);
	lp_pb_uint(b, CLOCK_TIMESTAMP, ts);
	close_msg(b, at);
}

int lp_pf_begin(struct lp_pf *w, const struct lp_pf_info *in, const struct lp_pf_names *names)
{
	struct lp_tl_sink sink = {
		.ctx = w,
		.thread = on_thread,
		.stretch = on_stretch,
		.span_begin = on_span_begin,
		.span_end = on_span_end,
		.fault = on_fault,
		.counter = on_counter,
	};
	struct lp_pb *b = &w->out;
	size_t p, m, d;

	memset(w, 0, sizeof(*w));
	w->names = *names;
	w->pid = in->pid;
	lp_tl_init(&w->tl, in->start_ns, in->end_ns, &sink);
	w->tl.step = in->step;
	/* The clocks, MONOTONIC the trace's own. */
	p = packet(w, 0, 0);
	m = open_msg(b, PKT_CLOCK_SNAPSHOT);
	clock(b, CLOCK_MONOTONIC_, in->monotonic_ns);
	clock(b, CLOCK_BOOTTIME_, in->boottime_ns);
	clock(b, CLOCK_REALTIME_, in->realtime_ns);
	lp_pb_uint(b, SNAPSHOT_PRIMARY, CLOCK_MONOTONIC_);
	close_msg(b, m);
	close_msg(b, p);
	/* Then the sequence's state: timestamps in MONOTONIC, names interned from here on. */
	p = packet(w, 0, SEQ_INCREMENTAL_STATE_CLEARED);
	d = open_msg(b, PKT_DEFAULTS);
	lp_pb_uint(b, DEFAULTS_CLOCK_ID, CLOCK_MONOTONIC_);
	close_msg(b, d);
	m = open_msg(b, PKT_INTERNED_DATA);
	for (size_t i = 1; i < sizeof(categories) / sizeof(*categories); i++)
		interned_entry(b, INT_CATEGORIES, i, categories[i], false);
	for (size_t i = 1; i < sizeof(annotations) / sizeof(*annotations); i++)
		interned_entry(b, INT_ANNOTATION_NAMES, i, annotations[i], false);
	close_msg(b, m);
	close_msg(b, p);
	/* The process, and its counters. */
	p = packet(w, 0, 0);
	m = open_msg(b, PKT_TRACK_DESCRIPTOR);
	lp_pb_uint(b, TRACK_UUID, UUID_PROCESS);
	d = open_msg(b, TRACK_PROCESS);
	lp_pb_uint(b, PROCESS_PID, (uint64_t)in->pid);
	field_name(b, PROCESS_NAME, in->comm ? in->comm : "?", LP_COMM_LEN);
	close_msg(b, d);
	close_msg(b, m);
	close_msg(b, p);
	for (int c = 0; c < LP_TL_NCOUNTERS; c++)
		track(w, UUID_COUNTER(c), UUID_PROCESS, lp_tl_counter_name(c));
	/* The window, on the process's track: what it held is said at its end. */
	event_close(w, event_open(w, in->start_ns, SLICE_BEGIN, UUID_PROCESS, 0, 0,
				  "llmprofd record", -1));
	return b->err;
}

int lp_pf_feed(struct lp_pf *w, const struct lp_rec_ev *e)
{
	int r = lp_tl_feed(&w->tl, e);

	w->events++;
	return r ? r : w->out.err;
}

int lp_pf_end(struct lp_pf *w, uint64_t end_ns)
{
	int r = lp_tl_end(&w->tl, end_ns);

	return r ? r : w->out.err;
}

int lp_pf_requests(struct lp_pf *w, const struct lp_tl_request *r, size_t n)
{
	char name[64];

	for (size_t i = 0; i < n; i++) {
		uint64_t tr = UUID_REQUESTS(r[i].seq);
		struct event e;

		if (!i || r[i].seq != r[i - 1].seq)
			track(w, tr, UUID_PROCESS,
			      lp_tl_request_track_name(r[i].seq, name, sizeof(name)));
		e = event_open(w, r[i].from, SLICE_BEGIN, tr, CAT_REQUEST, 0,
			       lp_tl_request_name(&r[i], name, sizeof(name)), -1);
		ann_u64(&w->out, ANN_SEQ, (uint64_t)(int64_t)r[i].seq);
		ann_u64(&w->out, ANN_PROMPT_TOKENS, r[i].prompt_tokens);
		ann_u64(&w->out, ANN_OUTPUT_TOKENS, r[i].output_tokens);
		ann_u64(&w->out, ANN_BEGAN, r[i].began);
		ann_u64(&w->out, ANN_OVER, r[i].over);
		event_close(w, e);
		if (r[i].first) {
			event_close(w, event_open(w, r[i].from, SLICE_BEGIN, tr, CAT_REQUEST, 0,
						  "prefill", -1));
			end_event(w, r[i].first, tr);
			event_close(w, event_open(w, r[i].first, SLICE_BEGIN, tr, CAT_REQUEST, 0,
						  "generation", -1));
			end_event(w, r[i].to, tr);
		}
		end_event(w, r[i].to, tr);
	}
	return w->out.err;
}

int lp_pf_finish(struct lp_pf *w, size_t max, uint64_t lost, uint64_t dropped)
{
	struct event e;

	if (!lp_tl_counters(&w->tl, max))
		return w->out.err ? w->out.err : 0;
	e = event_open(w, w->tl.end_ns, SLICE_END, UUID_PROCESS, 0, 0, NULL, -1);
	ann_u64(&w->out, ANN_EVENTS, w->events);
	ann_u64(&w->out, ANN_LOST, lost);
	ann_u64(&w->out, ANN_DROPPED, dropped);
	event_close(w, e);
	return w->out.err ? w->out.err : 1;
}

void lp_pf_taken(struct lp_pf *w)
{
	w->out.len = 0;
}

void lp_pf_free(struct lp_pf *w)
{
	lp_tl_free(&w->tl);
	lp_pb_free(&w->out);
	free(w->op_interned);
	memset(w, 0, sizeof(*w));
}
