// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* Events made into a timeline's tracks and counters (timeline.h). */
#include "timeline/timeline.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* An off-CPU stretch, closed at the switch-in; its run-queue wait is known at the next
 * switch-out. */
struct pending {
	uint64_t from, to;
	uint64_t runq; /* run-queue wait the kernel had accounted at the switch-in */
	bool fault;    /* a major fault ended as it ran again: it was paging in */
};

struct lp_tl_thread {
	uint32_t tid;
	enum { UNKNOWN, ON, OFF } state;
	uint64_t since;
	int cpu;
	bool have_off, have_pending;
	struct lp_rec_ev off; /* the last switch-out: what the pending stretch was */
	struct pending pending;
	struct lp_tl_span stack[LP_TL_MAX_DEPTH];
	unsigned depth;
	unsigned orphans; /* spans begun before the window, seen ending */
};

/* Timestamps a generation step pushes to the tokens/s counter at most: its batch's tokens */
#define LP_TL_BATCH_MAX 1024

/* A generation step's beginning: by its phase where its engine said it, else one token. */
static bool rec_generation(const struct lp_rec_ev *e)
{
	return e->reason ? e->reason == LP_PHASE_GENERATION : e->a == 1;
}

void lp_tl_init(struct lp_tl *tl, uint64_t start_ns, uint64_t end_ns, const struct lp_tl_sink *sink)
{
	memset(tl, 0, sizeof(*tl));
	tl->start_ns = start_ns;
	tl->end_ns = end_ns;
	tl->sink = *sink;
}

void lp_tl_free(struct lp_tl *tl)
{
	for (size_t i = 0; i < tl->nt; i++)
		free(tl->t[i]);
	free(tl->t);
	for (int c = 0; c < LP_TL_NCOUNTERS; c++)
		free(tl->steps[c].v);
	memset(tl, 0, sizeof(*tl));
}

static void push(struct lp_tl *tl, enum lp_tl_counter c, uint64_t v)
{
	struct lp_tl_vec *x = &tl->steps[c];

	if (tl->err)
		return;
	if (x->n == x->cap) {
		size_t cap = x->cap ? 2 * x->cap : 1024;
		uint64_t *p = realloc(x->v, cap * sizeof(*p));

		if (!p) {
			tl->err = -ENOMEM;
			return;
		}
		x->v = p;
		x->cap = cap;
	}
	x->v[x->n++] = v;
}

static void step(struct lp_tl *tl, enum lp_tl_counter c, uint64_t ts, bool up)
{
	push(tl, c, ts << 1 | up);
}

/* A thread on CPU from ts, or off it: both counters. */
static void on_cpu(struct lp_tl *tl, uint64_t ts, bool up)
{
	step(tl, LP_TL_ON_CPU, ts, up);
	step(tl, LP_TL_RUNNABLE_, ts, up);
}

static struct lp_tl_thread *thread(struct lp_tl *tl, uint32_t tid)
{
	size_t lo = 0, hi = tl->nt;
	struct lp_tl_thread *t;

	if (tl->last && tl->last->tid == tid)
		return tl->last;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;

		if (tl->t[mid]->tid == tid)
			return tl->last = tl->t[mid];
		if (tl->t[mid]->tid < tid)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (tl->nt == tl->capt) {
		size_t cap = tl->capt ? 2 * tl->capt : 16;
		struct lp_tl_thread **v = realloc(tl->t, cap * sizeof(*v));

		if (!v)
			return NULL;
		tl->t = v;
		tl->capt = cap;
	}
	t = calloc(1, sizeof(*t));
	if (!t)
		return NULL;
	t->tid = tid;
	t->since = tl->start_ns;
	t->cpu = -1;
	memmove(tl->t + lo + 1, tl->t + lo, (tl->nt - lo) * sizeof(*tl->t));
	tl->t[lo] = t;
	tl->nt++;
	if (tl->sink.thread)
		tl->sink.thread(tl->sink.ctx, tid);
	return tl->last = t;
}

static void stretch(struct lp_tl *tl, const struct lp_tl_thread *t, enum lp_tl_state state,
		    uint64_t from, uint64_t to)
{
	struct lp_tl_stretch s = {
		.tid = t->tid,
		.state = state,
		.from = from,
		.to = to < from ? from : to,
		.cpu = state == LP_TL_RUNNING ? t->cpu : -1,
		.off = &t->off,
	};

	tl->sink.stretch(tl->sink.ctx, &s);
}

/* A thread waiting for a CPU over [from, to). */
static void waiting(struct lp_tl *tl, uint64_t from, uint64_t to)
{
	step(tl, LP_TL_RUNNABLE_, from, true);
	step(tl, LP_TL_RUNNABLE_, to, false);
}

/* The pending off-CPU stretch, with the run-queue wait that ended it: preempted is runnable
 * throughout; a blocked wait ends runnable. */
static void off_stretch(struct lp_tl *tl, struct lp_tl_thread *t, uint64_t runq)
{
	const struct pending *o = &t->pending;
	uint64_t woke = o->to - (runq < o->to - o->from ? runq : o->to - o->from);

	t->have_pending = false;
	if (t->off.reason == LP_OFF_PREEMPTED) {
		stretch(tl, t, LP_TL_PREEMPTED, o->from, o->to);
		waiting(tl, o->from, o->to);
		return;
	}
	stretch(tl, t,
		t->off.reason == LP_OFF_FUTEX ? LP_TL_FUTEX
		: o->fault		      ? LP_TL_PAGING
					      : LP_TL_BLOCKED,
		o->from, woke);
	if (woke >= o->to)
		return;
	stretch(tl, t, LP_TL_RUNNABLE, woke, o->to);
	waiting(tl, woke, o->to);
}

static void span_end(struct lp_tl *tl, struct lp_tl_thread *t, const struct lp_rec_ev *e)
{
	uint8_t type = e->type - 1; /* each END follows its BEGIN in the enum */
	struct lp_tl_span s;

	if (t->depth && t->stack[t->depth - 1].type == type) {
		s = t->stack[--t->depth];
		s.to = e->ts;
	} else if (!t->depth) {
		/* Begun before the window: each one seen this way encloses those before. */
		s = (struct lp_tl_span){.tid = t->tid,
					.type = type,
					.step = tl->step,
					.from = tl->start_ns - t->orphans,
					.to = e->ts,
					.a = e->a};
		t->orphans++;
	} else {
		return;
	}
	if (e->type == LP_REC_OP_END)
		s.node = e->node;
	tl->sink.span_end(tl->sink.ctx, &s);
}

/* A switch-out: the stretch on the CPU ends, one off it begins. */
static void switch_out(struct lp_tl *tl, struct lp_tl_thread *t, const struct lp_rec_ev *e)
{
	/* Off the CPU already: the kernel ran the thread without a switch-in the tracepoint
	 * showed. Its slice, by the kernel's account, began e->oncpu before this switch-out:
	 * the stretch off the CPU ended there. */
	if (t->state == OFF && t->have_off && e->oncpu && e->ts - e->oncpu > t->since) {
		struct lp_rec_ev on = {.ts = e->ts - e->oncpu,
				       .tgid = e->tgid,
				       .tid = e->tid,
				       .type = LP_REC_ON,
				       .cpu = e->cpu};

		if (lp_tl_feed(tl, &on))
			return;
	}
	if (t->have_pending)
		off_stretch(tl, t, t->pending.runq + e->runq);
	if (t->state == UNKNOWN)
		on_cpu(tl, tl->start_ns, true);
	if (t->state != OFF) {
		t->cpu = e->cpu;
		stretch(tl, t, LP_TL_RUNNING, t->since, e->ts);
		on_cpu(tl, e->ts, false);
	}
	t->state = OFF;
	t->since = e->ts;
	t->off = *e;
	t->have_off = true;
}

int lp_tl_feed(struct lp_tl *tl, const struct lp_rec_ev *e)
{
	struct lp_tl_thread *t;

	if (tl->err)
		return tl->err;
	if (e->ts < tl->start_ns || e->ts > tl->end_ns)
		return 0;
	if (!(t = thread(tl, e->tid)))
		return tl->err = -ENOMEM;
	switch (e->type) {
	case LP_REC_OFF:
		switch_out(tl, t, e);
		break;
	case LP_REC_ON:
		if (t->state == OFF && t->have_off) {
			t->pending = (struct pending){t->since, e->ts, e->runq, false};
			t->have_pending = true;
		}
		if (t->state != ON)
			on_cpu(tl, e->ts, true);
		t->state = ON;
		t->since = e->ts;
		break;
	case LP_REC_DECODE_BEGIN:
	case LP_REC_OP_BEGIN:
	case LP_REC_BARRIER_BEGIN:
		/* A generation step's time, once per token it generates (a batch's sequences) */
		for (uint64_t k = 0; e->type == LP_REC_DECODE_BEGIN && rec_generation(e) &&
				     k < e->a && k < LP_TL_BATCH_MAX;
		     k++)
			push(tl, LP_TL_TOKENS, e->ts);
		if (t->depth < LP_TL_MAX_DEPTH) {
			struct lp_tl_span *s = &t->stack[t->depth];

			*s = (struct lp_tl_span){.tid = t->tid,
						 .type = e->type,
						 .step = tl->step,
						 .from = e->ts,
						 .a = e->a,
						 .phase = e->reason,
						 .began = true,
						 .depth = t->depth};
			t->depth++;
			if (tl->sink.span_begin)
				tl->sink.span_begin(tl->sink.ctx, s);
		}
		break;
	case LP_REC_DECODE_END:
	case LP_REC_OP_END:
	case LP_REC_BARRIER_END:
		span_end(tl, t, e);
		break;
	case LP_REC_FAULT_MAJ:
		tl->sink.fault(tl->sink.ctx, t->tid, e->ts);
		push(tl, LP_TL_FAULTS, e->ts);
		/* Counted as the faulting thread runs again: the stretch it was blocked just
		 * before was the page coming in. */
		if (t->have_pending && t->off.reason == LP_OFF_BLOCKED &&
		    e->ts - t->pending.to < 1000000)
			t->pending.fault = true;
		break;
	}
	return tl->err;
}

static int by_u64(const void *x, const void *y)
{
	uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;

	return a < b ? -1 : a > b;
}

int lp_tl_end(struct lp_tl *tl, uint64_t end_ns)
{
	if (end_ns < tl->end_ns)
		tl->end_ns = end_ns;
	end_ns = tl->end_ns;
	for (size_t i = 0; i < tl->nt && !tl->err; i++) {
		struct lp_tl_thread *t = tl->t[i];

		if (t->have_pending)
			off_stretch(tl, t, t->pending.runq);
		if (t->state == ON) {
			t->cpu = -1; /* the switch-in's CPU is not kept */
			stretch(tl, t, LP_TL_RUNNING, t->since, end_ns);
		} else if (t->state == OFF && t->have_off) {
			t->pending = (struct pending){t->since, end_ns, 0, false};
			off_stretch(tl, t, 0);
		}
		while (t->depth) {
			struct lp_tl_span s = t->stack[--t->depth];

			s.to = end_ns;
			tl->sink.span_end(tl->sink.ctx, &s);
		}
	}
	for (int c = 0; c < LP_TL_NCOUNTERS && !tl->err; c++)
		if (tl->steps[c].n)
			qsort(tl->steps[c].v, tl->steps[c].n, sizeof(uint64_t), by_u64);
	return tl->err;
}

bool lp_tl_counters(struct lp_tl *tl, size_t max)
{
	for (; tl->cur < LP_TL_NCOUNTERS; tl->cur++, tl->at = 0, tl->level = 0) {
		struct lp_tl_vec *x = &tl->steps[tl->cur];

		for (; tl->at < x->n; tl->at++) {
			uint64_t v = x->v[tl->at], ts = v >> 1;

			if (!max)
				return false;
			if (tl->cur == LP_TL_TOKENS) {
				/* Between one generation step's start and the next: the tokens of
				 * the first (its time is there once per token) over the interval,
				 * at the last of the second's. */
				size_t n = 1, m = 1;

				if (tl->at + 1 < x->n && x->v[tl->at + 1] == v)
					continue;
				while (n <= tl->at && x->v[tl->at - n] == v)
					n++;
				while (n + m <= tl->at && x->v[tl->at - n - m] == x->v[tl->at - n])
					m++;
				if (n <= tl->at)
					tl->sink.counter(tl->sink.ctx, LP_TL_TOKENS, v,
							 1e9 * (double)m /
								 (double)(v - x->v[tl->at - n]));
				max--;
				continue;
			}
			if (tl->cur == LP_TL_FAULTS) {
				tl->sink.counter(tl->sink.ctx, LP_TL_FAULTS, v,
						 (double)(tl->at + 1));
				max--;
				continue;
			}
			/* Steps: one point per distinct time. */
			tl->level += v & 1 ? 1 : -1;
			if (tl->at + 1 < x->n && x->v[tl->at + 1] >> 1 == ts)
				continue;
			tl->sink.counter(tl->sink.ctx, tl->cur, ts, tl->level < 0 ? 0 : tl->level);
			max--;
		}
	}
	return true;
}

const char *lp_tl_stretch_name(const struct lp_tl_stretch *s, char *buf, size_t size)
{
	switch (s->state) {
	case LP_TL_RUNNING:
		return "running";
	case LP_TL_PREEMPTED:
		snprintf(buf, size, "preempted by %.*s %" PRIu32,
			 (int)strnlen(s->off->comm, LP_COMM_LEN), s->off->comm, s->off->other);
		return buf;
	case LP_TL_FUTEX:
		snprintf(buf, size, "futex wait 0x%" PRIx64, (uint64_t)s->off->a);
		return buf;
	case LP_TL_PAGING:
		return "blocked: major fault";
	case LP_TL_RUNNABLE:
		return "runnable";
	case LP_TL_BLOCKED:
		break;
	}
	return "blocked";
}

const char *lp_tl_span_name(const struct lp_tl_span *s, const char *op, char *buf, size_t size)
{
	const char *step = s->step ? s->step : "llama_decode";

	switch (s->type) {
	case LP_REC_DECODE_BEGIN:
		if (!s->began)
			return step;
		if (s->phase ? s->phase == LP_PHASE_GENERATION : s->a == 1)
			snprintf(buf, size, "%s: generation", step);
		else
			snprintf(buf, size, "%s: prompt (%" PRIu64 " tokens)", step, s->a);
		return buf;
	case LP_REC_OP_BEGIN:
		if (op)
			return op;
		snprintf(buf, size, "op %" PRIu64, s->a);
		return buf;
	}
	return "barrier";
}

void lp_tl_node_make(struct lp_tl_node *out, const struct lp_node *n, const char *op)
{
	const struct lp_node_val *v = &n->val;
	char stem[LP_NODE_STEM + 1];
	uint64_t rd, wr;

	memset(out, 0, sizeof(*out));
	out->id = v->id;
	lp_node_name(&n->key, out->tensor);
	out->layer = n->key.layer;
	out->block = lp_block_names[lp_node_block(op, lp_node_stem(&n->key, stem))];
	lp_node_shape(&n->key, out->shape);
	if (v->instances && lp_node_bytes(op, n, &rd, &wr))
		out->bytes = (rd + wr) / v->instances;
	out->flops = lp_node_flops(op, &n->key);
}

static int by_id(const void *x, const void *y)
{
	const struct lp_tl_node *a = x, *b = y;

	return a->id < b->id ? -1 : a->id > b->id;
}

void lp_tl_nodes_sort(struct lp_tl_node *v, size_t n)
{
	if (n)
		qsort(v, n, sizeof(*v), by_id);
}

const struct lp_tl_node *lp_tl_node_find(const struct lp_tl_node *v, size_t n, uint64_t id)
{
	struct lp_tl_node key = {.id = id};

	return id && n ? bsearch(&key, v, n, sizeof(*v), by_id) : NULL;
}

const char *lp_tl_span_category(const struct lp_tl_span *s)
{
	return s->type == LP_REC_DECODE_BEGIN ? "decode"
	       : s->type == LP_REC_OP_BEGIN   ? "op"
					      : "barrier";
}

const char *lp_tl_counter_name(enum lp_tl_counter c)
{
	static const char *const names[] = {
		[LP_TL_ON_CPU] = "threads on CPU",
		[LP_TL_RUNNABLE_] = "threads runnable",
		[LP_TL_TOKENS] = "tokens/s",
		[LP_TL_FAULTS] = "major faults",
	};

	return c < LP_TL_NCOUNTERS ? names[c] : "?";
}

const char *lp_tl_request_track_name(int32_t seq, char *buf, size_t size)
{
	snprintf(buf, size, "requests, sequence %" PRId32, seq);
	return buf;
}

const char *lp_tl_request_name(const struct lp_tl_request *r, char *buf, size_t size)
{
	snprintf(buf, size, "request %" PRIu64, r->id);
	return buf;
}
