// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* A record's events as a Chrome Trace Event Format document (trace.h). */
#include "trace.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "escape.h"

#define MAX_DEPTH 16

struct sb {
	char *p;
	size_t len, cap;
	size_t events;
	int err;
};

/* Room for extra more bytes and the NUL; false when there is none. */
static bool sb_reserve(struct sb *b, size_t extra)
{
	size_t cap = b->cap ? b->cap : 1 << 16;
	char *p;

	if (b->err)
		return false;
	if (b->p && b->cap - b->len > extra)
		return true;
	while (cap - b->len <= extra)
		cap *= 2;
	p = realloc(b->p, cap);
	if (!p) {
		b->err = -ENOMEM;
		return false;
	}
	b->p = p;
	b->cap = cap;
	return true;
}

static void sb_vadd(struct sb *b, const char *fmt, va_list ap)
{
	va_list again;
	int n;

	if (b->err)
		return;
	va_copy(again, ap);
	n = vsnprintf(b->p ? b->p + b->len : NULL, b->p ? b->cap - b->len : 0, fmt, ap);
	if (n >= 0 && (size_t)n >= (b->p ? b->cap - b->len : 0))
		n = sb_reserve(b, (size_t)n) ? vsnprintf(b->p + b->len, b->cap - b->len, fmt, again)
					     : -1;
	va_end(again);
	if (n > 0)
		b->len += (size_t)n;
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
	size_t n = strnlen(s ? s : "", max), len;
	char small[LP_ESCAPE_SIZE(256)], *e = n <= 256 ? small : malloc(LP_ESCAPE_SIZE(n));

	if (!e) {
		b->err = -ENOMEM;
		return;
	}
	len = lp_escape(e, n <= 256 ? sizeof(small) : LP_ESCAPE_SIZE(n), s ? s : "", n);
	if (sb_reserve(b, 2 * len + 2)) {
		b->p[b->len++] = '"';
		for (size_t i = 0; i < len; i++) {
			if (e[i] == '"' || e[i] == '\\')
				b->p[b->len++] = '\\';
			b->p[b->len++] = e[i];
		}
		b->p[b->len++] = '"';
		b->p[b->len] = '\0';
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

struct delta {
	uint64_t ts;
	int d;
};

/* A growing array (doubling: a record has up to a million events). */
struct vec {
	void *v;
	size_t n, cap;
};

static void *vec_push(struct vec *x, size_t size)
{
	if (x->n == x->cap) {
		size_t cap = x->cap ? 2 * x->cap : 1024;
		void *v = realloc(x->v, cap * size);

		if (!v)
			return NULL;
		x->v = v;
		x->cap = cap;
	}
	return (char *)x->v + size * x->n++;
}

struct trace_state {
	struct vec on, rq;	/* struct delta: threads on CPU, runnable (on CPU or waiting) */
	struct vec gen, faults; /* uint64_t: generation decode starts, major faults */
};

static int push_u64(struct vec *x, uint64_t v)
{
	uint64_t *p = vec_push(x, sizeof(v));

	if (!p)
		return -ENOMEM;
	*p = v;
	return 0;
}

static int push_delta(struct vec *x, uint64_t ts, int d)
{
	struct delta *p = vec_push(x, sizeof(*p));

	if (!p)
		return -ENOMEM;
	*p = (struct delta){ts, d};
	return 0;
}

/* A thread on CPU from, or off it from: both counters. */
static int on_cpu(struct trace_state *s, uint64_t ts, int d)
{
	int r = push_delta(&s->on, ts, d);

	return r ? r : push_delta(&s->rq, ts, d);
}

/* A thread waiting for a CPU over [from, to). */
static int waiting(struct trace_state *s, uint64_t from, uint64_t to)
{
	int r = push_delta(&s->rq, from, 1);

	return r ? r : push_delta(&s->rq, to, -1);
}

struct off {
	uint64_t from, to;
	const struct lp_rec_ev *ev; /* the switch-out */
	uint64_t runq;		    /* run-queue wait the kernel had accounted at the switch-in */
	bool fault;		    /* a major fault ended as it ran again: it was paging in */
};

/* The mapping holding addr, or NULL. */
static const struct lp_trace_map *map_of(const struct lp_trace_in *in, uint64_t addr)
{
	for (size_t i = 0; i < in->nmaps; i++)
		if (addr >= in->maps[i].start && addr < in->maps[i].end)
			return &in->maps[i];
	return NULL;
}

/* An off-CPU stretch, with the run-queue wait that ended it (known at the next
 * switch-out): preempted is runnable throughout; a blocked wait ends runnable. */
static int off_slices(struct sb *b, const struct lp_trace_in *in, const struct off *o,
		      uint64_t runq, struct trace_state *s)
{
	uint32_t tid = o->ev->tid + LP_TRACE_CPU_TRACK;
	uint64_t woke = o->to - (runq < o->to - o->from ? runq : o->to - o->from);
	char name[96], args[160];

	if (o->ev->reason == LP_OFF_PREEMPTED) {
		/* Raw here: slice() escapes the whole name once. */
		snprintf(name, sizeof(name), "preempted by %.*s %" PRIu32,
			 (int)strnlen(o->ev->comm, LP_COMM_LEN), o->ev->comm, o->ev->other);
		snprintf(args, sizeof(args), "\"cpu\":%u,\"by_pid\":%" PRIu32, o->ev->cpu,
			 o->ev->other);
		slice(b, in, tid, "sched", o->from, o->to, name, args, NULL, NULL);
		return waiting(s, o->from, o->to);
	}
	if (o->ev->reason == LP_OFF_FUTEX) {
		const struct lp_trace_map *m = map_of(in, o->ev->a);

		snprintf(name, sizeof(name), "futex wait 0x%" PRIx64, (uint64_t)o->ev->a);
		snprintf(args, sizeof(args), "\"uaddr\":\"0x%" PRIx64 "\"", (uint64_t)o->ev->a);
		slice(b, in, tid, "sched", o->from, woke, name, args, m ? "object" : NULL,
		      m ? m->name : NULL);
	} else {
		slice(b, in, tid, "sched", o->from, woke,
		      o->fault ? "blocked: major fault" : "blocked", NULL, NULL, NULL);
	}
	if (woke >= o->to)
		return 0;
	slice(b, in, tid, "sched", woke, o->to, "runnable", NULL, NULL, NULL);
	return waiting(s, woke, o->to);
}

struct span {
	uint8_t type;
	uint64_t ts, a;
};

static const char *op_name(const struct lp_trace_in *in, uint64_t op, char *buf, size_t size)
{
	if (op < in->nops && in->op_names && in->op_names[op])
		return in->op_names[op];
	snprintf(buf, size, "op %" PRIu64, op);
	return buf;
}

/* A span of the thread's own track: llama_decode, an op, a barrier. */
static void span(struct sb *b, const struct lp_trace_in *in, uint32_t tid, uint8_t type,
		 uint64_t from, uint64_t to, uint64_t a, bool began)
{
	char name[96], buf[32], args[64];

	if (type == LP_REC_DECODE_BEGIN) {
		if (!began)
			snprintf(name, sizeof(name), "llama_decode");
		else if (a == 1)
			snprintf(name, sizeof(name), "llama_decode: generation");
		else
			snprintf(name, sizeof(name), "llama_decode: prompt (%" PRIu64 " tokens)",
				 a);
		snprintf(args, sizeof(args), "\"tokens\":%" PRIu64, began ? a : 0);
		slice(b, in, tid, "decode", from, to, name, args, NULL, NULL);
	} else if (type == LP_REC_OP_BEGIN) {
		snprintf(args, sizeof(args), "\"group\":\"%s\"",
			 a < in->nops && in->op_groups && in->op_groups[a] ? in->op_groups[a]
									   : "other_ops");
		slice(b, in, tid, "op", from, to, op_name(in, a, buf, sizeof(buf)), args, NULL,
		      NULL);
	} else {
		slice(b, in, tid, "barrier", from, to, "barrier", NULL, NULL, NULL);
	}
}

/* One thread's events, in time order. */
static int thread_events(struct sb *b, const struct lp_trace_in *in,
			 const struct lp_rec_ev *const *ev, size_t n, struct trace_state *s)
{
	enum { UNKNOWN, ON, OFF } state = UNKNOWN;
	uint64_t since = in->start_ns;
	struct span stack[MAX_DEPTH];
	const struct lp_rec_ev *off = NULL;
	struct off pending = {0};
	bool have_pending = false;
	size_t depth = 0;
	uint32_t tid = ev[0]->tid;
	char args[32];
	int r = 0;

	for (size_t i = 0; i < n && !r; i++) {
		const struct lp_rec_ev *e = ev[i];

		switch (e->type) {
		case LP_REC_OFF:
			if (have_pending)
				r = off_slices(b, in, &pending, pending.runq + e->runq, s);
			have_pending = false;
			if (state == UNKNOWN)
				r = r ? r : on_cpu(s, in->start_ns, 1);
			if (state != OFF) {
				snprintf(args, sizeof(args), "\"cpu\":%u", e->cpu);
				slice(b, in, tid + LP_TRACE_CPU_TRACK, "sched", since, e->ts,
				      "running", args, NULL, NULL);
				r = r ? r : on_cpu(s, e->ts, -1);
			}
			state = OFF;
			since = e->ts;
			off = e;
			break;
		case LP_REC_ON:
			if (state == OFF && off) {
				pending = (struct off){since, e->ts, off, e->runq, false};
				have_pending = true;
			}
			if (state != ON)
				r = on_cpu(s, e->ts, 1);
			state = ON;
			since = e->ts;
			break;
		case LP_REC_DECODE_BEGIN:
		case LP_REC_OP_BEGIN:
		case LP_REC_BARRIER_BEGIN:
			if (e->type == LP_REC_DECODE_BEGIN && e->a == 1)
				r = push_u64(&s->gen, e->ts);
			if (depth < MAX_DEPTH)
				stack[depth++] = (struct span){e->type, e->ts, e->a};
			break;
		case LP_REC_DECODE_END:
		case LP_REC_OP_END:
		case LP_REC_BARRIER_END: {
			uint8_t begin = e->type - 1; /* each END follows its BEGIN in the enum */

			if (depth && stack[depth - 1].type == begin) {
				depth--;
				span(b, in, tid, begin, stack[depth].ts, e->ts, stack[depth].a,
				     true);
			} else if (!depth) {
				/* Begun before the window. */
				span(b, in, tid, begin, in->start_ns, e->ts, e->a, false);
			}
			break;
		}
		case LP_REC_FAULT_MAJ:
			sb_event(b);
			sb_add(b,
			       "{\"ph\":\"i\",\"s\":\"t\",\"cat\":\"fault\",\"pid\":%d,\"tid\":"
			       "%" PRIu32 ",\"ts\":%.3f,\"name\":\"major fault\"}",
			       (int)in->pid, tid, us(in, e->ts));
			r = push_u64(&s->faults, e->ts);
			/* Counted as the faulting thread runs again: the stretch it was blocked
			 * just before was the page coming in. */
			if (have_pending && pending.ev->reason == LP_OFF_BLOCKED &&
			    e->ts - pending.to < 1000000)
				pending.fault = true;
			break;
		}
	}
	/* The window's end closes what is open. */
	if (have_pending)
		r = r ? r : off_slices(b, in, &pending, pending.runq, s);
	if (state == ON) {
		slice(b, in, tid + LP_TRACE_CPU_TRACK, "sched", since, in->end_ns, "running", NULL,
		      NULL, NULL);
	} else if (state == OFF && off) {
		pending = (struct off){since, in->end_ns, off, 0, false};
		r = r ? r : off_slices(b, in, &pending, 0, s);
	}
	while (depth) {
		depth--;
		span(b, in, tid, stack[depth].type, stack[depth].ts, in->end_ns, stack[depth].a,
		     true);
	}
	return r;
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

static int by_ts(const void *x, const void *y)
{
	const struct delta *a = x, *b = y;

	return a->ts < b->ts ? -1 : a->ts > b->ts;
}

static int by_u64(const void *x, const void *y)
{
	uint64_t a = *(const uint64_t *)x, b = *(const uint64_t *)y;

	return a < b ? -1 : a > b;
}

static const char *thread_name(const struct lp_trace_in *in, uint32_t tid)
{
	for (size_t i = 0; i < in->nthreads; i++)
		if (in->threads[i].tid == tid)
			return in->threads[i].name;
	return NULL;
}

static void metadata(struct sb *b, const struct lp_trace_in *in, uint32_t tid)
{
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

/* A counter from +1/-1 steps, one point per distinct time. */
static void steps(struct sb *b, const struct lp_trace_in *in, const char *name, struct vec *x)
{
	struct delta *d = x->v;
	int level = 0;

	if (x->n)
		qsort(d, x->n, sizeof(*d), by_ts);
	for (size_t i = 0; i < x->n; i++) {
		level += d[i].d;
		if (i + 1 < x->n && d[i + 1].ts == d[i].ts)
			continue;
		counter(b, in, name, d[i].ts, level < 0 ? 0 : level);
	}
}

static void counters(struct sb *b, const struct lp_trace_in *in, struct trace_state *s)
{
	uint64_t *gen = s->gen.v, *faults = s->faults.v;

	steps(b, in, "threads on CPU", &s->on);
	steps(b, in, "threads runnable", &s->rq);
	if (s->gen.n)
		qsort(gen, s->gen.n, sizeof(*gen), by_u64);
	for (size_t i = 1; i < s->gen.n; i++)
		if (gen[i] > gen[i - 1])
			counter(b, in, "tokens/s", gen[i], 1e9 / (double)(gen[i] - gen[i - 1]));
	if (s->faults.n)
		qsort(faults, s->faults.n, sizeof(*faults), by_u64);
	for (size_t i = 0; i < s->faults.n; i++)
		counter(b, in, "major faults", faults[i], (double)(i + 1));
}

int lp_trace_render(const struct lp_trace_in *in, char **out, size_t *len)
{
	const struct lp_rec_ev **ev = malloc((in->n ? in->n : 1) * sizeof(*ev));
	struct trace_state s = {0};
	struct sb b = {0};
	int r = 0;

	if (!ev)
		return -ENOMEM;
	for (size_t i = 0; i < in->n; i++)
		ev[i] = &in->ev[i];
	qsort(ev, in->n, sizeof(*ev), by_tid_ts);

	sb_add(&b,
	       "{\"displayTimeUnit\":\"ms\",\"otherData\":{\"producer\":\"llmprofd %s\","
	       "\"pid\":%d,\"clock\":\"CLOCK_MONOTONIC; ts in microseconds from the window's "
	       "start\","
	       "\"window_start_ns\":%" PRIu64 ",\"window_seconds\":%.3f,\"events\":%zu,"
	       "\"events_lost\":%" PRIu64 ",\"events_dropped\":%" PRIu64 "},\n\"traceEvents\":[",
	       in->version ? in->version : "?", (int)in->pid, in->start_ns,
	       (double)(in->end_ns - in->start_ns) / 1e9, in->n, in->lost, in->dropped);
	sb_event(&b);
	sb_add(&b, "{\"ph\":\"M\",\"pid\":%d,\"name\":\"process_name\",\"args\":{\"name\":",
	       (int)in->pid);
	sb_str(&b, in->comm ? in->comm : "?", LP_COMM_LEN);
	sb_add(&b, "}}");
	for (size_t i = 0, j; i < in->n && !r; i = j) {
		for (j = i + 1; j < in->n && ev[j]->tid == ev[i]->tid; j++)
			;
		metadata(&b, in, ev[i]->tid);
		r = thread_events(&b, in, ev + i, j - i, &s);
	}
	if (!r)
		counters(&b, in, &s);
	sb_add(&b, "\n]}\n");
	free(ev);
	free(s.on.v);
	free(s.rq.v);
	free(s.gen.v);
	free(s.faults.v);
	if (r || b.err) {
		free(b.p);
		return r ? r : b.err;
	}
	*out = b.p;
	*len = b.len;
	return 0;
}
