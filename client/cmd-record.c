// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* llmprofctl record: a timeline of one process, written as a Chrome trace for Perfetto. */
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

static const struct option opts[] = {{"pid", required_argument, NULL, 'p'},
				     {"seconds", required_argument, NULL, 's'},
				     {"output", required_argument, NULL, 'o'},
				     {"no-ops", no_argument, NULL, 'n'},
				     {"summary", no_argument, NULL, 'S'},
				     {"format", required_argument, NULL, 'f'},
				     CTL_COMMON_OPTS};

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

static void summary(const cJSON *doc)
{
	const cJSON *e, *ev = cJSON_GetObjectItemCaseSensitive(doc, "traceEvents");
	int n = cJSON_GetArraySize(ev), ntok = 0, nsp = 0;
	struct sp *tok = calloc((size_t)n + 1, sizeof(*tok)),
		  *sp = calloc((size_t)n + 1, sizeof(*sp)),
		  *off = calloc((size_t)n + 1, sizeof(*off));
	int noff = 0;
	double total[K_NR] = {0}, longest = 0;

	if (!tok || !sp || !off)
		goto out;
	cJSON_ArrayForEach(e, ev)
	{
		double ts = ctl_num(e, "ts", 0), end = ts + ctl_num(e, "dur", 0);
		int k = -1;

		if (strcmp(ctl_str(e, "ph", ""), "X"))
			continue;
		double tid = ctl_num(e, "tid", 0);

		if (!strcmp(ctl_str(e, "name", ""), "llama_decode: generation"))
			tok[ntok++] = (struct sp){ts, end, -1, tid};
		else if ((k = kind_of(e)) >= 0)
			sp[nsp++] =
				(struct sp){ts, end, k, tid >= CPU_TRACK ? tid - CPU_TRACK : tid};
		if (k > K_BARRIER)
			off[noff++] = sp[nsp - 1];
	}
	qsort(off, (size_t)noff, sizeof(*off), by_tid_ts);
	qsort(tok, (size_t)ntok, sizeof(*tok), by_ts);
	qsort(sp, (size_t)nsp, sizeof(*sp), by_ts);
	/* Which columns have anything, over the whole window. */
	for (int i = 0; i < nsp; i++) {
		total[sp[i].kind] += sp[i].end - sp[i].ts;
		longest = fmax(longest, sp[i].end - sp[i].ts);
	}
	printf("\nper generated token (ms; CPU and off-CPU time summed over threads, within the "
	       "token's llama_decode)\n%6s %8s",
	       "TOKEN", "MS");
	for (int k = 0; k < K_NR; k++)
		if (total[k] > 0)
			printf(" %8s", kind_heads[k]);
	printf("\n");
	for (int t = 0, first = 0; t < ntok; t++) {
		double in[K_NR] = {0};

		/* Spans are sorted by start: those that start a longest span's length before
		 * this token cannot reach it. */
		while (first < nsp && sp[first].ts + longest < tok[t].ts)
			first++;
		for (int i = first; i < nsp && sp[i].ts < tok[t].end; i++) {
			double a = fmax(sp[i].ts, tok[t].ts), b = fmin(sp[i].end, tok[t].end);

			/* An op's or a barrier's own CPU time: less its thread's time off CPU. */
			if (b > a)
				in[sp[i].kind] += b - a -
						  (sp[i].kind <= K_BARRIER
							   ? off_within(off, noff, sp[i].tid, a, b)
							   : 0);
		}
		printf("%6d %8.2f", t + 1, (tok[t].end - tok[t].ts) / 1e3);
		for (int k = 0; k < K_NR; k++)
			if (total[k] > 0)
				printf(" %8.2f", in[k] / 1e3);
		printf("\n");
	}
	if (!ntok)
		printf("(no generated token in the window)\n");
out:
	free(tok);
	free(sp);
	free(off);
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

/* The record as Perfetto's protobuf trace, written as it comes. */
static int record_streamed(struct ctl *c, const char *path, int pid, double seconds, bool ops,
			   const char *out)
{
	struct streamed o = {
		.c = c, .path = out, .pid = pid, .seconds = seconds, .tty = isatty(STDERR_FILENO)};
	struct ctl_stream sink = {streamed_write, streamed_tick, &o};
	char body[128];
	bool complete = false;
	int status, closed;
	cJSON *doc = NULL;

	if (ends_with(out, ".gz"))
		o.g = gzopen(out, "wb6");
	else
		o.f = fopen(out, "we");
	if (!o.g && !o.f) {
		fprintf(stderr, "%s: cannot write %s: %s\n", c->prog, out, strerror(errno));
		return CTL_DAEMON;
	}
	snprintf(body, sizeof(body), "{\"seconds\":%.17g,\"ops\":%s,\"format\":\"perfetto\"}",
		 seconds, ops ? "true" : "false");
	fprintf(stderr,
		"pid %d: recording a timeline for %g s%s into %s as it comes (Ctrl-C ends it "
		"early)...\n",
		pid, seconds, ops ? " with op spans (precise mode, for the window)" : "", out);
	ctl_catch_interrupt();
	o.start = ctl_now_s();
	status = ctl_request_stream(c, "POST", path, body, &sink, &complete);
	closed = o.g ? gzclose(o.g) == Z_OK : fclose(o.f) == 0;
	if (o.tty && o.shown > 0)
		fprintf(stderr, "\n");
	if (status) {
		if (!o.bytes)
			unlink(out);
		return status;
	}
	if (!closed) {
		fprintf(stderr, "%s: cannot write %s: %s\n", c->prog, out, strerror(errno));
		return CTL_DAEMON;
	}
	if (!complete) {
		fprintf(stderr,
			"%s: llmprofd's answer ended before the trace did; %s holds the %llu bytes "
			"that came\n",
			c->prog, out, (unsigned long long)o.bytes);
		return CTL_DAEMON;
	}
	/* What the window held, as the daemon counted it. */
	status = ctl_request(c, "GET", path, NULL, &doc, NULL);
	printf("wrote %s: %.0f kernel events (%.0f lost, %.0f dropped) in %.1f s, %llu bytes of "
	       "Perfetto's protobuf trace; open it at https://ui.perfetto.dev (Open trace file)\n",
	       out, ctl_num(doc, "events", 0), ctl_num(doc, "events_lost", 0),
	       ctl_num(doc, "events_dropped", 0), ctl_num(doc, "window_seconds", 0),
	       (unsigned long long)o.bytes);
	cJSON_Delete(doc);
	return status;
}

static int exec(struct ctl *c, int argc, char **argv)
{
	char path[96], body[96], out_default[64];
	double seconds = LP_RECORD_DEFAULT_SECONDS, left;
	const char *out = NULL;
	int pid = 0, opt, status = CTL_OK;
	struct ctl_response raw;
	bool ops = true, table = false;
	const char *format = NULL;
	const cJSON *o;
	cJSON *doc;

	while ((opt = ctl_getopt(c, &ctl_cmd_record, argc, argv, &status)) != -1) {
		if (opt == -2)
			return status;
		if (opt == 'p' && ctl_parse_pid(c, &ctl_cmd_record, optarg, &pid))
			return CTL_USAGE;
		if (opt == 's' && ctl_parse_seconds_above(c, &ctl_cmd_record, "--seconds", optarg,
							  0, LP_RECORD_MAX_SECONDS, &seconds))
			return CTL_USAGE;
		if (opt == 'o')
			out = optarg;
		if (opt == 'n')
			ops = false;
		if (opt == 'S')
			table = true;
		if (opt == 'f' && strcmp(optarg, "json") && strcmp(optarg, "perfetto"))
			return ctl_usage_error(c, &ctl_cmd_record,
					       "--format: json or perfetto, not '%s'", optarg);
		if (opt == 'f')
			format = optarg;
	}
	if (ctl_process_path(c, &ctl_cmd_record, pid, LP_ROUTE_RECORD, path, sizeof(path)))
		return CTL_USAGE;
	/* Perfetto's protobuf, streamed, unless JSON is asked for: by name, by a FILE that
	 * ends in .json or .json.gz, or for --summary, which reads the JSON. */
	if (!format)
		format = table || (out && (ends_with(out, ".json") || ends_with(out, ".json.gz")))
				 ? "json"
				 : "perfetto";
	if (table && !strcmp(format, "perfetto"))
		return ctl_usage_error(
			c, &ctl_cmd_record,
			"--summary reads the JSON trace: not with --format perfetto");
	if (!out) {
		snprintf(out_default, sizeof(out_default),
			 !strcmp(format, "json") ? "llmprof-%d.json.gz"
						 : "llmprof-%d.perfetto-trace",
			 pid);
		out = out_default;
	}
	if (!strcmp(format, "perfetto"))
		return record_streamed(c, path, pid, seconds, ops, out);
	/* The record is this command's: it asks for it every second (at most), and if it
	 * dies (killed, its terminal closed) the daemon cancels the record a lease later. */
	snprintf(body, sizeof(body), "{\"seconds\":%.17g,\"ops\":%s,\"lease\":%d}", seconds,
		 ops ? "true" : "false", CTL_RECORD_LEASE);
	status = ctl_request(c, "POST", path, body, &doc, NULL);
	if (status)
		return status;
	cJSON_Delete(doc);
	fprintf(stderr, "pid %d: recording a timeline for %g s%s (Ctrl-C ends it early)...\n", pid,
		seconds, ops ? " with op spans (precise mode, for the window)" : "");
	/* Ctrl-C, as with perf record: the window ends now, and what it recorded is written. */
	ctl_catch_interrupt();
	for (bool stopped = false;;) {
		if (ctl_interrupted && !stopped) {
			char msg[512];

			stopped = true;
			/* An error here (it ended meanwhile: 409) still leaves a trace to fetch;
			 * the fetch below says what is wrong otherwise. */
			if (ctl_request_quiet(c, "POST", path, "{\"stop\":true}", &doc, NULL, msg,
					      sizeof(msg)) == CTL_OK)
				fprintf(stderr, "pid %d: recording stopped; fetching it...\n", pid);
			cJSON_Delete(doc);
		}
		status = ctl_request(c, "GET", path, NULL, &doc, &raw);
		if (status)
			return status;
		if (raw.status == 200)
			break;
		left = ctl_num(doc, "remaining_seconds", 0);
		cJSON_Delete(doc);
		ctl_response_free(&raw);
		ctl_nap(fmax(0.2, fmin(left, 1)));
	}
	o = cJSON_GetObjectItemCaseSensitive(doc, "otherData");
	if (write_trace(out, raw.body, raw.len) < 0) {
		fprintf(stderr, "%s: cannot write %s: %s\n", c->prog, out, strerror(errno));
		status = CTL_DAEMON;
	} else {
		/* The trace's events (a slice is one, from two kernel events) and the kernel's. */
		printf("wrote %s: %d trace events from %.0f kernel events (%.0f lost, %.0f "
		       "dropped), %zu bytes of JSON; open it at https://ui.perfetto.dev (Open "
		       "trace "
		       "file) or chrome://tracing\n",
		       out,
		       cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(doc, "traceEvents")),
		       ctl_num(o, "events", 0), ctl_num(o, "events_lost", 0),
		       ctl_num(o, "events_dropped", 0), raw.len);
		if (table)
			summary(doc);
	}
	cJSON_Delete(doc);
	ctl_response_free(&raw);
	return status;
}

const struct ctl_cmd ctl_cmd_record = {
	.name = "record",
	.usage = "--pid PID [--seconds S] [-o FILE] [--no-ops] [--format perfetto|json] "
		 "[--summary]",
	.summary = "a timeline of one process, for Perfetto",
	.help = "Records what every thread of the process did for S seconds: running, runnable, "
		"preempted (by\nwhom, on which CPU), blocked in a futex wait (on which word) or "
		"otherwise, llama_decode\ncalls (prompt or generation, tokens), major faults, and "
		"with precise mode's probes each op\nand barrier call; counters of threads on CPU "
		"and tokens/s. Written as it is recorded, in\nPerfetto's protobuf trace format "
		"(gzip'ed when FILE ends in .gz), which ui.perfetto.dev\nand trace_processor open "
		"as it is; or, with --format json, at the end in the Chrome\nTrace Event Format, "
		"which chrome://tracing opens too. Ctrl-C ends the window early and\nwrites what "
		"it recorded. Precise mode is switched on for the window (about 1.6 us per\nprobed "
		"call) unless --no-ops, and left as it was after. Needs root or group '" LP_GROUP
		"'.\n\n"
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
		"                     op group and in barriers, time off CPU by reason (JSON)\n\n"
		"Examples:\n"
		"  llmprofctl record --pid 4242 --seconds 30\n"
		"  llmprofctl record --pid 4242 -o decode.json --no-ops\n"
		"  llmprofctl record --pid 4242 --seconds 2 --summary\n",
	.shortopt = "p:s:o:nSf:",
	.longopts = opts,
	.exec = exec,
};
