// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* llmprofctl record: a timeline of one process for Perfetto: its protobuf trace, streamed,
 * or the Chrome Trace Event Format's JSON. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <zlib.h>

#include "llmprof/protocol.h"
#include "llmprofctl.h"

static const struct option opts[] = {
	{"pid", required_argument, NULL, 'p'},	  {"seconds", required_argument, NULL, 's'},
	{"output", required_argument, NULL, 'o'}, {"no-ops", no_argument, NULL, 'n'},
	{"summary", no_argument, NULL, 'S'},	  {"format", required_argument, NULL, 'f'},
	{"json", no_argument, NULL, 'j'},	  CTL_COMMON_OPTS};

static bool ends_with(const char *s, const char *suffix)
{
	size_t n = strlen(s), k = strlen(suffix);

	return n >= k && strcmp(s + n - k, suffix) == 0;
}

/* The trace into path, gzip'ed when it ends in .gz (Perfetto opens both). */
static int write_trace(const char *path, const char *body, size_t len)
{
	if (ends_with(path, ".gz")) {
		gzFile g = gzopen(path, "wb9");
		int ok = g && gzwrite(g, body, (unsigned)len) == (int)len;

		if (g && gzclose(g) != Z_OK)
			ok = 0;
		return ok ? 0 : -EIO;
	}
	FILE *f = fopen(path, "we");
	int ok = f && fwrite(body, 1, len, f) == len;

	if (f && fclose(f) != 0)
		ok = 0;
	return ok ? 0 : -errno;
}

/* The per-token table: for each generation llama_decode in the trace, its wall time and,
 * summed over the process's threads within it, CPU time in each op group (op spans,
 * precise mode), in barriers, and time off CPU by reason. */
enum { K_BARRIER = 7, K_PREEMPTED, K_FUTEX, K_BLOCKED, K_RUNNABLE, K_NR };
static const char *const kind_names[K_NR] = {"matmul",	    "attention", "norm",      "rope",
					     "elementwise", "copy",	 "other_ops", "barrier",
					     "preempted",   "futex",	 "blocked",   "runnable"};
static const char *const kind_heads[K_NR] = {"MATMUL",	"ATTN",	 "NORM",    "ROPE",
					     "ELEM",	"COPY",	 "OTHER",   "BARRIER",
					     "PREEMPT", "FUTEX", "BLOCKED", "RUNQ"};

struct sp {
	double ts, end;
	int kind;
	double tid; /* the thread (its CPU track's slices: the thread's) */
};

#define CPU_TRACK 1e9 /* the CPU track of thread tid is tid + this (daemon/timeline/trace.h) */
/* Seconds the daemon keeps a record this command no longer asks for (it asks every second). */
#define CTL_RECORD_LEASE 5

static int kind_of(const cJSON *e)
{
	const char *cat = ctl_str(e, "cat", ""), *name = ctl_str(e, "name", "");

	if (!strcmp(cat, "op")) {
		const char *g = ctl_str(cJSON_GetObjectItemCaseSensitive(e, "args"), "group", "");

		for (int k = 0; k < K_BARRIER; k++)
			if (!strcmp(g, kind_names[k]))
				return k;
		return K_BARRIER - 1;
	}
	if (!strcmp(cat, "barrier"))
		return K_BARRIER;
	if (strcmp(cat, "sched"))
		return -1;
	if (!strncmp(name, "preempted", 9))
		return K_PREEMPTED;
	if (!strncmp(name, "futex wait", 10))
		return K_FUTEX;
	if (!strcmp(name, "blocked"))
		return K_BLOCKED;
	if (!strcmp(name, "runnable"))
		return K_RUNNABLE;
	return -1;
}

static int by_ts(const void *a, const void *b)
{
	const struct sp *x = a, *y = b;

	return x->ts < y->ts ? -1 : x->ts > y->ts;
}

static int by_tid_ts(const void *a, const void *b)
{
	const struct sp *x = a, *y = b;

	if (x->tid != y->tid)
		return x->tid < y->tid ? -1 : 1;
	return by_ts(a, b);
}

/* Time thread tid spent off CPU within [a, b): off holds each thread's off-CPU slices,
 * sorted by thread and time (a thread's do not overlap). */
static double off_within(const struct sp *off, int noff, double tid, double a, double b)
{
	int lo = 0, hi = noff;
	double sum = 0;

	/* The first slice of the thread that ends after a. */
	while (lo < hi) {
		int mid = lo + (hi - lo) / 2;

		if (off[mid].tid < tid || (off[mid].tid == tid && off[mid].end <= a))
			lo = mid + 1;
		else
			hi = mid;
	}
	for (int i = lo; i < noff && off[i].tid == tid && off[i].ts < b; i++)
		sum += fmin(off[i].end, b) - fmax(off[i].ts, a);
	return sum;
}

/* A generated token: its llama_decode's wall time and, within it, each kind's time summed
 * over the threads, in microseconds (the trace's unit). */
struct token_row {
	double us;
	double in[K_NR];
};

/* The spans of a JSON trace by kind: tok (generation decodes), sp (op, barrier and sched
 * slices, by start) and off (the off-CPU ones, by thread and start). */
struct spans {
	struct sp *tok, *sp, *off;
	int ntok, nsp, noff;
	double total[K_NR], longest;
	char step[64]; /* the step function's name, from its spans */
};

static void spans_free(struct spans *x)
{
	free(x->tok);
	free(x->sp);
	free(x->off);
}

/* A generation step's span: "<step>: generation" (llama_decode, forward), its name kept. */
static bool generation_step(const cJSON *e, struct spans *x)
{
	const char *name = ctl_str(e, "name", ""), *colon = strrchr(name, ':');

	if (strcmp(ctl_str(e, "cat", ""), "decode") || !colon || strcmp(colon, ": generation"))
		return false;
	/* printed as it is: a C identifier's characters only, else "step" */
	if (colon - name < (ptrdiff_t)sizeof(x->step) &&
	    strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") ==
		    (size_t)(colon - name))
		snprintf(x->step, sizeof(x->step), "%.*s", (int)(colon - name), name);
	else
		snprintf(x->step, sizeof(x->step), "step");
	return true;
}

static int by_tid_outer(const void *a, const void *b)
{
	const struct sp *x = a, *y = b;
	int r = by_tid_ts(a, b);

	return r ? r : x->end > y->end ? -1 : x->end < y->end;
}

/* One piece of a flattened span: [from, to) of s, where it was the innermost. */
static void piece(struct sp *out, int *n, const struct sp *s, double from, double to)
{
	if (to > from)
		out[(*n)++] = (struct sp){from, to, s->kind, s->tid};
}

/* Op and barrier spans nest where ops call ops (torch's aten::matmul calls aten::bmm): each
 * becomes the pieces where it is a thread's innermost, so that a time is counted once, for
 * the op that ran it. Off-CPU slices stay as they are. At most one piece more per span. */
static int flatten(struct spans *x)
{
	struct sp *in = calloc((size_t)x->nsp + 1, sizeof(*in)), *stack[32];
	int nin = 0, nout = 0, depth = 0;
	double at = 0;

	if (!in)
		return -ENOMEM;
	for (int i = 0; i < x->nsp; i++)
		if (x->sp[i].kind <= K_BARRIER)
			in[nin++] = x->sp[i];
		else
			x->sp[nout++] = x->sp[i];
	qsort(in, (size_t)nin, sizeof(*in), by_tid_outer);
	for (int i = 0; i <= nin; i++) {
		const struct sp *s = i < nin ? &in[i] : NULL;

		/* those that ended before it (or on another thread) end their pieces */
		while (depth &&
		       (!s || s->tid != stack[depth - 1]->tid || stack[depth - 1]->end <= s->ts)) {
			piece(x->sp, &nout, stack[depth - 1], at, stack[depth - 1]->end);
			at = fmax(at, stack[--depth]->end);
		}
		if (!s)
			break;
		/* deeper than the stack holds: left in its parent's piece */
		if (depth == (int)(sizeof(stack) / sizeof(stack[0])))
			continue;
		if (depth)
			piece(x->sp, &nout, stack[depth - 1], at, s->ts);
		stack[depth++] = &in[i];
		at = s->ts;
	}
	x->nsp = nout;
	free(in);
	return 0;
}

static int spans_read(const cJSON *doc, struct spans *x)
{
	const cJSON *e, *ev = cJSON_GetObjectItemCaseSensitive(doc, "traceEvents");
	size_t n = (size_t)cJSON_GetArraySize(ev) + 1;

	memset(x, 0, sizeof(*x));
	x->tok = calloc(n, sizeof(*x->tok));
	x->sp = calloc(2 * n, sizeof(*x->sp)); /* flatten() may split each span in two */
	x->off = calloc(n, sizeof(*x->off));
	if (!x->tok || !x->sp || !x->off) {
		spans_free(x);
		return -ENOMEM;
	}
	cJSON_ArrayForEach(e, ev)
	{
		double ts = ctl_num(e, "ts", 0), end = ts + ctl_num(e, "dur", 0),
		       tid = ctl_num(e, "tid", 0);
		int k = -1;

		if (strcmp(ctl_str(e, "ph", ""), "X"))
			continue;
		if (generation_step(e, x))
			x->tok[x->ntok++] = (struct sp){ts, end, -1, tid};
		else if ((k = kind_of(e)) >= 0)
			x->sp[x->nsp++] =
				(struct sp){ts, end, k, tid >= CPU_TRACK ? tid - CPU_TRACK : tid};
		if (k > K_BARRIER)
			x->off[x->noff++] = x->sp[x->nsp - 1];
	}
	qsort(x->off, (size_t)x->noff, sizeof(*x->off), by_tid_ts);
	qsort(x->tok, (size_t)x->ntok, sizeof(*x->tok), by_ts);
	if (flatten(x) < 0) {
		spans_free(x);
		return -ENOMEM;
	}
	qsort(x->sp, (size_t)x->nsp, sizeof(*x->sp), by_ts);
	/* Which kinds have anything, over the whole window. */
	for (int i = 0; i < x->nsp; i++) {
		x->total[x->sp[i].kind] += x->sp[i].end - x->sp[i].ts;
		x->longest = fmax(x->longest, x->sp[i].end - x->sp[i].ts);
	}
	return 0;
}

/* The per-token table of a JSON trace: *rows malloc'ed (x->ntok of them), 0 or -ENOMEM. */
static int per_token(const cJSON *doc, struct spans *x, struct token_row **rows)
{
	if (spans_read(doc, x) < 0 || !(*rows = calloc((size_t)x->ntok + 1, sizeof(**rows)))) {
		spans_free(x);
		return -ENOMEM;
	}
	for (int t = 0, first = 0; t < x->ntok; t++) {
		const struct sp *tok = &x->tok[t];
		struct token_row *r = &(*rows)[t];

		/* Spans are sorted by start: those that start a longest span's length before
		 * this token cannot reach it. */
		while (first < x->nsp && x->sp[first].ts + x->longest < tok->ts)
			first++;
		for (int i = first; i < x->nsp && x->sp[i].ts < tok->end; i++) {
			const struct sp *p = &x->sp[i];
			double a = fmax(p->ts, tok->ts), b = fmin(p->end, tok->end);

			/* An op's or a barrier's own CPU time: less its thread's time off CPU. */
			if (b > a)
				r->in[p->kind] +=
					b - a -
					(p->kind <= K_BARRIER
						 ? off_within(x->off, x->noff, p->tid, a, b)
						 : 0);
		}
		r->us = tok->end - tok->ts;
	}
	return 0;
}

static void summary_text(const struct spans *x, const struct token_row *rows)
{
	printf("\nper generation step (ms; CPU and off-CPU time summed over threads, within the "
	       "step's %s)\n%6s %8s",
	       x->step[0] ? x->step : "llama_decode", "TOKEN", "MS");
	for (int k = 0; k < K_NR; k++)
		if (x->total[k] > 0)
			printf(" %8s", kind_heads[k]);
	printf("\n");
	for (int t = 0; t < x->ntok; t++) {
		printf("%6d %8.2f", t + 1, rows[t].us / 1e3);
		for (int k = 0; k < K_NR; k++)
			if (x->total[k] > 0)
				printf(" %8.2f", rows[t].in[k] / 1e3);
		printf("\n");
	}
	if (!x->ntok)
		printf("(no generated token in the window)\n");
}

/* The same table as an array: {"ms", "<kind>_ms"...} per token, every kind. */
static cJSON *summary_json(const struct spans *x, const struct token_row *rows)
{
	cJSON *a = cJSON_CreateArray();

	for (int t = 0; a && t < x->ntok; t++) {
		cJSON *o = cJSON_CreateObject();
		char key[32];

		if (!o || !cJSON_AddItemToArray(a, o))
			break;
		cJSON_AddNumberToObject(o, "ms", rows[t].us / 1e3);
		for (int k = 0; k < K_NR; k++) {
			snprintf(key, sizeof(key), "%s_ms", kind_names[k]);
			cJSON_AddNumberToObject(o, key, rows[t].in[k] / 1e3);
		}
	}
	return a;
}

/* What record wrote, for --json (docs/API.md, "llmprofctl --json"). */
struct written {
	const char *file, *format;
	double bytes, seconds, kernel_events, lost, dropped;
	int trace_events; /* -1: not counted (Perfetto's protobuf) */
};

/* counts: the daemon's record document, or a JSON trace's otherData (the same names). */
static struct written written_of(const char *file, const char *format, double bytes,
				 const cJSON *counts, int trace_events)
{
	return (struct written){file,
				format,
				bytes,
				ctl_num(counts, "window_seconds", 0),
				ctl_num(counts, "events", 0),
				ctl_num(counts, "events_lost", 0),
				ctl_num(counts, "events_dropped", 0),
				trace_events};
}

static int print_written_json(const struct written *w, cJSON *tokens)
{
	cJSON *o = cJSON_CreateObject();
	int status;

	if (!o) {
		cJSON_Delete(tokens);
		return CTL_DAEMON;
	}
	cJSON_AddStringToObject(o, "file", w->file);
	cJSON_AddStringToObject(o, "format", w->format);
	cJSON_AddNumberToObject(o, "bytes", w->bytes);
	cJSON_AddNumberToObject(o, "window_seconds", w->seconds);
	cJSON_AddNumberToObject(o, "kernel_events", w->kernel_events);
	cJSON_AddNumberToObject(o, "events_lost", w->lost);
	cJSON_AddNumberToObject(o, "events_dropped", w->dropped);
	if (w->trace_events >= 0)
		cJSON_AddNumberToObject(o, "trace_events", w->trace_events);
	else
		cJSON_AddNullToObject(o, "trace_events");
	if (tokens)
		cJSON_AddItemToObject(o, "tokens", tokens);
	status = ctl_print_json(o, false); /* FILE is the user's: any bytes */
	cJSON_Delete(o);
	return status;
}

/* A trace streamed as it is recorded, into its file. */
struct streamed {
	const struct ctl *c;
	const char *path;
	FILE *f;
	gzFile g;
	uint64_t bytes;
	double start, seconds, shown;
	int pid;
	bool stopped, tty;
};

static int streamed_write(void *arg, const void *p, size_t n)
{
	struct streamed *o = arg;
	/* A plain file is flushed as each piece comes: it is written as it is recorded. */
	bool ok = o->g ? gzwrite(o->g, p, (unsigned)n) == (int)n
		       : fwrite(p, 1, n, o->f) == n && fflush(o->f) == 0;

	if (!ok)
		return errno ? -errno : -EIO;
	o->bytes += n;
	return 0;
}

/* Ctrl-C ends the window early (the daemon then sends the rest and ends the answer); on a
 * terminal, how far it is. */
static void streamed_tick(void *arg)
{
	struct streamed *o = arg;
	double t = ctl_now_s() - o->start;

	if (ctl_interrupted && !o->stopped) {
		char path[96], msg[512];
		cJSON *doc = NULL;

		o->stopped = true;
		ctl_process_path(o->c, &ctl_cmd_record, o->pid, LP_ROUTE_RECORD, path,
				 sizeof(path));
		if (ctl_request_quiet(o->c, "POST", path, "{\"stop\":true}", &doc, NULL, msg,
				      sizeof(msg)) == CTL_OK)
			fprintf(stderr,
				"%spid %d: recording stopped at %.1f s; writing the rest...\n",
				o->tty ? "\n" : "", o->pid, t);
		cJSON_Delete(doc);
	}
	if (o->tty && t - o->shown >= 1) {
		o->shown = t;
		fprintf(stderr, "\r%6.1f s of %g s, %.1f MB written", fmin(t, o->seconds),
			o->seconds, (double)o->bytes / 1e6);
	}
}

/* What the command line asked for. */
struct record_opts {
	int pid;
	double seconds;
	const char *out, *format;
	bool ops, table, json;
	char path[96];	      /* the route */
	char out_default[64]; /* llmprof-PID.* */
};

/* The record as Perfetto's protobuf trace, written as it comes. */
static int record_streamed(struct ctl *c, const struct record_opts *ro)
{
	struct streamed o = {.c = c,
			     .path = ro->out,
			     .pid = ro->pid,
			     .seconds = ro->seconds,
			     .tty = isatty(STDERR_FILENO)};
	struct ctl_stream sink = {streamed_write, streamed_tick, &o};
	char body[128];
	bool complete = false;
	int status, closed;
	cJSON *doc = NULL;

	if (ends_with(ro->out, ".gz"))
		o.g = gzopen(ro->out, "wb6");
	else
		o.f = fopen(ro->out, "we");
	if (!o.g && !o.f) {
		fprintf(stderr, "%s: cannot write %s: %s\n", c->prog, ro->out, strerror(errno));
		return CTL_DAEMON;
	}
	snprintf(body, sizeof(body), "{\"seconds\":%.17g,\"ops\":%s,\"format\":\"perfetto\"}",
		 ro->seconds, ro->ops ? "true" : "false");
	fprintf(stderr,
		"pid %d: recording a timeline for %g s%s into %s as it comes (Ctrl-C ends it "
		"early)...\n",
		ro->pid, ro->seconds,
		ro->ops ? " with op spans (precise mode, for the window)" : "", ro->out);
	ctl_catch_interrupt();
	o.start = ctl_now_s();
	status = ctl_request_stream(c, "POST", ro->path, body, &sink, &complete);
	closed = o.g ? gzclose(o.g) == Z_OK : fclose(o.f) == 0;
	if (o.tty && o.shown > 0)
		fprintf(stderr, "\n");
	if (status) {
		if (!o.bytes)
			unlink(ro->out);
		return status;
	}
	if (!closed) {
		fprintf(stderr, "%s: cannot write %s: %s\n", c->prog, ro->out, strerror(errno));
		return CTL_DAEMON;
	}
	if (!complete) {
		fprintf(stderr,
			"%s: llmprofd's answer ended before the trace did; %s holds the %llu bytes "
			"that came\n",
			c->prog, ro->out, (unsigned long long)o.bytes);
		return CTL_DAEMON;
	}
	/* What the window held, as the daemon counted it. */
	status = ctl_request(c, "GET", ro->path, NULL, &doc, NULL);
	struct written w = written_of(ro->out, "perfetto", (double)o.bytes, doc, -1);
	cJSON_Delete(doc);
	if (status)
		return status;
	if (ro->json)
		return print_written_json(&w, NULL);
	printf("wrote %s: %.0f kernel events (%.0f lost, %.0f dropped) in %.1f s, %.0f bytes of "
	       "Perfetto's protobuf trace; open it at https://ui.perfetto.dev (Open trace file)\n",
	       w.file, w.kernel_events, w.lost, w.dropped, w.seconds, w.bytes);
	return CTL_OK;
}

/* Starts a JSON record and waits for it (Ctrl-C, as with perf record: the window ends now,
 * and what it recorded is fetched): CTL_OK with *doc and *raw the trace. */
static int record_wait(struct ctl *c, const struct record_opts *ro, cJSON **doc,
		       struct ctl_response *raw)
{
	char body[96];
	int status;

	/* The record is this command's: it asks for it every second (at most), and if it
	 * dies (killed, its terminal closed) the daemon cancels the record a lease later. */
	snprintf(body, sizeof(body), "{\"seconds\":%.17g,\"ops\":%s,\"lease\":%d}", ro->seconds,
		 ro->ops ? "true" : "false", CTL_RECORD_LEASE);
	status = ctl_request(c, "POST", ro->path, body, doc, NULL);
	if (status)
		return status;
	cJSON_Delete(*doc);
	fprintf(stderr, "pid %d: recording a timeline for %g s%s (Ctrl-C ends it early)...\n",
		ro->pid, ro->seconds,
		ro->ops ? " with op spans (precise mode, for the window)" : "");
	ctl_catch_interrupt();
	for (bool stopped = false;;) {
		if (ctl_interrupted && !stopped) {
			char msg[512];

			stopped = true;
			/* An error here (it ended meanwhile: 409) still leaves a trace to fetch;
			 * the fetch below says what is wrong otherwise. */
			if (ctl_request_quiet(c, "POST", ro->path, "{\"stop\":true}", doc, NULL,
					      msg, sizeof(msg)) == CTL_OK)
				fprintf(stderr, "pid %d: recording stopped; fetching it...\n",
					ro->pid);
			cJSON_Delete(*doc);
		}
		status = ctl_request(c, "GET", ro->path, NULL, doc, raw);
		if (status || raw->status == 200)
			return status;
		double left = ctl_num(*doc, "remaining_seconds", 0);

		cJSON_Delete(*doc);
		ctl_response_free(raw);
		ctl_nap(fmax(0.2, fmin(left, 1)));
	}
}

/* The JSON record, fetched at its end, written, and with --summary its table. */
static int record_fetched(struct ctl *c, const struct record_opts *ro)
{
	struct ctl_response raw;
	struct token_row *rows = NULL;
	struct spans x;
	cJSON *doc;
	int status = record_wait(c, ro, &doc, &raw);

	if (status)
		return status;
	const cJSON *o = cJSON_GetObjectItemCaseSensitive(doc, "otherData");
	struct written w = written_of(
		ro->out, "json", (double)raw.len, o,
		cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(doc, "traceEvents")));

	if (write_trace(ro->out, raw.body, raw.len) < 0) {
		fprintf(stderr, "%s: cannot write %s: %s\n", c->prog, ro->out, strerror(errno));
		status = CTL_DAEMON;
	} else if (ro->table && per_token(doc, &x, &rows) < 0) {
		fprintf(stderr, "%s: out of memory for the summary\n", c->prog);
		status = CTL_DAEMON;
	} else if (ro->json) {
		status = print_written_json(&w, rows ? summary_json(&x, rows) : NULL);
	} else {
		/* The trace's events (a slice is one, from two kernel events) and the kernel's. */
		printf("wrote %s: %d trace events from %.0f kernel events (%.0f lost, %.0f "
		       "dropped), %.0f bytes of JSON; open it at https://ui.perfetto.dev (Open "
		       "trace file) or chrome://tracing\n",
		       w.file, w.trace_events, w.kernel_events, w.lost, w.dropped, w.bytes);
		if (rows)
			summary_text(&x, rows);
	}
	if (rows) {
		free(rows);
		spans_free(&x);
	}
	cJSON_Delete(doc);
	ctl_response_free(&raw);
	return status;
}

/* The options into ro: -1 to go on, else the exit status (usage reported, or --help). */
static int parse(struct ctl *c, int argc, char **argv, struct record_opts *ro)
{
	int opt, status = CTL_OK;

	while ((opt = ctl_getopt(c, &ctl_cmd_record, argc, argv, &status)) != -1) {
		if (opt == -2)
			return status;
		if (opt == 'p' && ctl_parse_pid(c, &ctl_cmd_record, optarg, &ro->pid))
			return CTL_USAGE;
		if (opt == 's' && ctl_parse_seconds_above(c, &ctl_cmd_record, "--seconds", optarg,
							  0, LP_RECORD_MAX_SECONDS, &ro->seconds))
			return CTL_USAGE;
		if (opt == 'f' && strcmp(optarg, "json") && strcmp(optarg, "perfetto"))
			return ctl_usage_error(c, &ctl_cmd_record,
					       "--format: json or perfetto, not '%s'", optarg);
		ro->out = opt == 'o' ? optarg : ro->out;
		ro->format = opt == 'f' ? optarg : ro->format;
		ro->ops &= opt != 'n';
		ro->table |= opt == 'S';
		ro->json |= opt == 'j';
	}
	if (ctl_process_path(c, &ctl_cmd_record, ro->pid, LP_ROUTE_RECORD, ro->path,
			     sizeof(ro->path)))
		return CTL_USAGE;
	/* Perfetto's protobuf, streamed, unless JSON is asked for: by name, by a FILE that
	 * ends in .json or .json.gz, or for --summary, which reads the JSON. */
	if (!ro->format)
		ro->format = ro->table || (ro->out && (ends_with(ro->out, ".json") ||
						       ends_with(ro->out, ".json.gz")))
				     ? "json"
				     : "perfetto";
	if (ro->table && !strcmp(ro->format, "perfetto"))
		return ctl_usage_error(
			c, &ctl_cmd_record,
			"--summary reads the JSON trace: not with --format perfetto");
	if (!ro->out) {
		snprintf(ro->out_default, sizeof(ro->out_default),
			 !strcmp(ro->format, "json") ? "llmprof-%d.json.gz"
						     : "llmprof-%d.perfetto-trace",
			 ro->pid);
		ro->out = ro->out_default;
	}
	return -1;
}

static int exec(struct ctl *c, int argc, char **argv)
{
	struct record_opts ro = {.seconds = LP_RECORD_DEFAULT_SECONDS, .ops = true};
	int status = parse(c, argc, argv, &ro);

	if (status >= 0)
		return status;
	if (!strcmp(ro.format, "perfetto"))
		return record_streamed(c, &ro);
	return record_fetched(c, &ro);
}

const struct ctl_cmd ctl_cmd_record = {
	.name = "record",
	.usage = "--pid PID [--seconds S] [-o FILE] [--no-ops] [--format perfetto|json] "
		 "[--summary] [--json]",
	.summary = "a timeline of one process, for Perfetto",
	.help = "Records what every thread of the process did for S seconds: running, runnable, "
		"preempted (by\nwhom, on which CPU), blocked in a futex wait (on which word) or "
		"otherwise, llama_decode\ncalls (prompt or generation, tokens), major faults, and "
		"with precise mode's probes each op\nand barrier call; counters of threads on CPU "
		"and tokens/s. Written as it is recorded, in\nPerfetto's protobuf trace format "
		"(gzip'ed when FILE ends in .gz), which ui.perfetto.dev\nand trace_processor open "
		"as it is; or, with --format json, at the end in the Chrome\nTrace Event Format, "
		"which chrome://tracing opens too: the daemon then holds the\nwhole trace until it "
		"is fetched (its events, at most 1,048,576, and their JSON: about\n200 MB at that "
		"bound, which a 10 s window of an OpenMP build with op spans reaches).\n"
		"Ctrl-C ends the window early and writes what it recorded. Precise mode is "
		"switched on\nfor the window (about 1.6 us per probed call) unless --no-ops, and "
		"left as it was\nafter. Needs root or group '" LP_GROUP "'.\n\n"
		"Options:\n"
		"  -p, --pid PID      the process\n"
		"  -s, --seconds S    for S seconds (default 5, at most 60)\n"
		"  -o, --output FILE  where to write it (default llmprof-PID.perfetto-trace, or\n"
		"                     llmprof-PID.json.gz with --format json)\n"
		"  -n, --no-ops       no op and barrier spans: no probes\n"
		"  -f, --format F     perfetto (the default) or json (the default for a FILE "
		"ending in\n"
		"                     .json or .json.gz, and with --summary)\n"
		"  -S, --summary      then print a table per generated token: its time, CPU time "
		"by\n"
		"                     op group and in barriers, time off CPU by reason (JSON)\n"
		"  -j, --json         say what was written (and the summary) as JSON on stdout\n"
		"                     (docs/API.md, \"llmprofctl --json\")\n\n"
		"Examples:\n"
		"  llmprofctl record --pid 4242 --seconds 30\n"
		"  llmprofctl record --pid 4242 -o decode.json --no-ops\n"
		"  llmprofctl record --pid 4242 --seconds 2 --summary\n",
	.shortopt = "p:s:o:nSf:j",
	.longopts = opts,
	.exec = exec,
};
