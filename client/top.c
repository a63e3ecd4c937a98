// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* top's table: rates and percentiles over the interval between two reads of the API (or
 * since tracking began, on the first), sorted and formatted into 79 columns. */
#include "top.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const struct top_column top_columns[TC_NR] = {
	[TC_PID] = {"PID", 7, 'p', "process id"},
	[TC_COMM] = {"COMMAND", 9, 'n', "command name; [name] once exited (with -a)"},
	[TC_THR] = {"THR", 3, 0, "live threads"},
	[TC_CPU] = {"CPU%", 5, 'c', "CPU time, % of one CPU"},
	[TC_TOKS] = {"TOK/S", 5, 't', "generated tokens per second of llama_decode time"},
	[TC_MS50] = {"MS50", 5, 0, "milliseconds per generated token, median"},
	[TC_MS99] = {"MS99", 5, 'l', "milliseconds per generated token, 99th percentile"},
	[TC_MM] = {"MM%", 3, 'm', "CPU samples in matmul functions, % of the process's"},
	[TC_SPIN] = {"SPIN%", 5, 'b', "CPU samples in barrier functions (spinning), %"},
	[TC_FTXS] = {"FTX/S", 5, 'f', "futex waits per second"},
	[TC_FTX99] = {"FTX99", 5, 0, "futex wait time, 99th percentile"},
	[TC_RQ99] = {"RQ99", 5, 'r', "run-queue latency (runnable until running), p99"},
	[TC_MAJS] = {"MAJ/S", 5, 'g', "major page faults (read from disk) per second"},
};

void top_snap_free(struct top_snap *s)
{
	for (size_t i = 0; i < s->n; i++)
		cJSON_Delete(s->docs[i]);
	free(s->docs);
	s->docs = NULL;
	s->n = 0;
}

const cJSON *top_snap_find(const struct top_snap *s, int pid)
{
	for (size_t i = 0; s && i < s->n; i++)
		if ((int)ctl_num(s->docs[i], "pid", 0) == pid)
			return s->docs[i];
	return NULL;
}

static double counter(const cJSON *doc, const char *name)
{
	return ctl_num_path(doc, "counters", name, 0);
}

/* The counter's growth over the interval (the total when there is no previous read). */
static double delta(const struct top_row *r, const char *name)
{
	return counter(r->doc, name) - (r->prev ? counter(r->prev, name) : 0);
}

/* A percentile of the histogram over the interval, in ns; NAN when it is empty. */
static double interval_quantile(const struct top_row *r, const char *name, double q)
{
	const cJSON *hn = cJSON_GetObjectItemCaseSensitive(
		cJSON_GetObjectItemCaseSensitive(r->doc, "histograms"), name);
	struct ctl_hist now, before, d;
	double v = NAN;

	if (ctl_hist_parse(hn, &now) < 0)
		return NAN;
	if (!r->prev) {
		v = ctl_hist_quantile(&now, q);
	} else if (ctl_hist_parse(
			   cJSON_GetObjectItemCaseSensitive(
				   cJSON_GetObjectItemCaseSensitive(r->prev, "histograms"), name),
			   &before) == 0) {
		if (ctl_hist_delta(&now, &before, &d) == 0) {
			v = ctl_hist_quantile(&d, q);
			ctl_hist_free(&d);
		}
		ctl_hist_free(&before);
	}
	ctl_hist_free(&now);
	return v;
}

/* A reset (or a pid reused) between the reads makes counters go back: start afresh. */
static bool comparable(const cJSON *doc, const cJSON *prev)
{
	const cJSON *c;

	if (!prev || ctl_num(doc, "tracked_seconds", 0) < ctl_num(prev, "tracked_seconds", 0) ||
	    ctl_num(doc, "now_ns", 0) <= ctl_num(prev, "now_ns", 0))
		return false;
	cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(prev, "counters"))
	{
		if (cJSON_IsNumber(c) && counter(doc, c->string) < c->valuedouble)
			return false;
	}
	return true;
}

static double per_s(double n, double dt_ns)
{
	return dt_ns > 0 ? n * 1e9 / dt_ns : NAN;
}

static double share(double part, double whole)
{
	return whole > 0 ? 100 * part / whole : NAN;
}

/* The worst finding of a process's document: '!' critical, '*' warning, '+' info. */
static char finding_mark(const cJSON *d)
{
	const cJSON *f = cJSON_GetObjectItemCaseSensitive(d, "findings");
	const cJSON *list = cJSON_GetObjectItemCaseSensitive(f, "findings");
	const char *worst = cJSON_IsArray(list)
				    ? ctl_str(cJSON_GetArrayItem(list, 0), "severity", "")
				    : ctl_str(f, "worst", "");

	return !strcmp(worst, "critical")  ? '!'
	       : !strcmp(worst, "warning") ? '*'
	       : !strcmp(worst, "info")	   ? '+'
					   : ' ';
}

static void fill(struct top_row *r)
{
	double *v = r->v, samples = delta(r, "samples"), gen = delta(r, "decode_generation_tokens");
	bool ggml = cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(r->doc, "ggml"));

	r->dt_ns = r->prev ? ctl_num(r->doc, "now_ns", 0) - ctl_num(r->prev, "now_ns", 0)
			   : ctl_num(r->doc, "tracked_seconds", 0) * 1e9;
	v[TC_PID] = r->pid;
	v[TC_COMM] = NAN;
	v[TC_THR] = cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(r->doc, "threads"));
	v[TC_CPU] = share(delta(r, "oncpu_ns"), r->dt_ns);
	v[TC_TOKS] = gen > 0 ? per_s(gen, delta(r, "decode_generation_ns")) : NAN;
	v[TC_MS50] = interval_quantile(r, "decode_generation", 0.5) / 1e6;
	v[TC_MS99] = interval_quantile(r, "decode_generation", 0.99) / 1e6;
	v[TC_MM] = ggml ? share(delta(r, "samples_matmul"), samples) : NAN;
	v[TC_SPIN] = ggml ? share(delta(r, "samples_barrier"), samples) : NAN;
	v[TC_FTXS] = per_s(delta(r, "futex_waits"), r->dt_ns);
	v[TC_FTX99] = interval_quantile(r, "futex_wait", 0.99);
	v[TC_RQ99] = interval_quantile(r, "runqueue_latency", 0.99);
	v[TC_MAJS] = per_s(delta(r, "page_faults_major"), r->dt_ns);
}

int top_rows(const struct top_snap *cur, const struct top_snap *prev, bool all,
	     struct top_row **rows, size_t *n)
{
	struct top_row *out = calloc(cur->n + 1, sizeof(*out));

	if (!out)
		return -ENOMEM;
	*n = 0;
	for (size_t i = 0; i < cur->n; i++) {
		struct top_row *r = &out[*n];
		const cJSON *d = cur->docs[i];

		r->exited = !strcmp(ctl_str(d, "state", ""), "exited");
		if (r->exited && !all)
			continue;
		r->pid = (int)ctl_num(d, "pid", 0);
		snprintf(r->comm, sizeof(r->comm), r->exited ? "[%s]" : "%s",
			 ctl_str(d, "comm", "?"));
		r->mark = finding_mark(d);
		r->doc = d;
		r->prev = top_snap_find(prev, r->pid);
		if (!comparable(d, r->prev))
			r->prev = NULL;
		fill(r);
		(*n)++;
	}
	*rows = out;
	return 0;
}

struct sort_by {
	enum top_col col;
	int sign;
};

static int cmp_rows(const void *a, const void *b, void *arg)
{
	const struct top_row *x = a, *y = b;
	const struct sort_by *by = arg;
	double vx = x->v[by->col], vy = y->v[by->col];
	int c = 0;

	if (by->col == TC_COMM)
		c = strcmp(x->comm + x->exited, y->comm + y->exited);
	else if (by->col == TC_PID)
		c = (x->pid > y->pid) - (x->pid < y->pid);
	else if (isnan(vx) || isnan(vy))
		c = isnan(vx) - isnan(vy); /* nothing to show sorts last */
	else
		c = (vx < vy) - (vx > vy); /* busiest first */
	if (!c)
		return (x->pid > y->pid) - (x->pid < y->pid);
	return by->sign * c;
}

void top_sort(struct top_row *rows, size_t n, enum top_col col, bool reverse)
{
	struct sort_by by = {.col = col, .sign = reverse ? -1 : 1};

	qsort_r(rows, n, sizeof(*rows), cmp_rows, &by);
}

static int cmp_threads(const void *a, const void *b)
{
	const struct top_thread_row *x = a, *y = b;

	if (x->cpu != y->cpu)
		return isnan(x->cpu) ? 1 : isnan(y->cpu) ? -1 : x->cpu < y->cpu ? 1 : -1;
	return (x->tid > y->tid) - (x->tid < y->tid);
}

static const cJSON *thread_of(const cJSON *doc, int tid)
{
	const cJSON *t;

	cJSON_ArrayForEach(t, cJSON_GetObjectItemCaseSensitive(doc, "threads"))
	{
		if ((int)ctl_num(t, "tid", 0) == tid)
			return t;
	}
	return NULL;
}

int top_threads(const struct top_row *r, struct top_thread_row **out)
{
	const cJSON *ts = cJSON_GetObjectItemCaseSensitive(r->doc, "threads"), *t;
	int n = 0;

	*out = calloc((size_t)cJSON_GetArraySize(ts) + 1, sizeof(**out));
	if (!*out)
		return -ENOMEM;
	cJSON_ArrayForEach(t, ts)
	{
		struct top_thread_row *o = &(*out)[n++];
		const cJSON *p;

		o->tid = (int)ctl_num(t, "tid", 0);
		p = r->prev ? thread_of(r->prev, o->tid) : NULL;
		snprintf(o->comm, sizeof(o->comm), "%s", ctl_str(t, "comm", "?"));
		/* A thread born in the interval counts from zero. */
		o->cpu = share(ctl_num(t, "oncpu_ns", 0) - ctl_num(p, "oncpu_ns", 0), r->dt_ns);
		o->ftxs = per_s(ctl_num(t, "futex_waits", 0) - ctl_num(p, "futex_waits", 0),
				r->dt_ns);
		o->majs = per_s(ctl_num(t, "page_faults_major", 0) -
					ctl_num(p, "page_faults_major", 0),
				r->dt_ns);
	}
	qsort(*out, (size_t)n, sizeof(**out), cmp_threads);
	return n;
}

static int cmp_ops(const void *a, const void *b)
{
	const struct top_op_row *x = a, *y = b;

	return x->share < y->share ? 1 : x->share > y->share ? -1 : strcmp(x->op, y->op);
}

static const cJSON *ggml_item(const cJSON *doc, const char *key)
{
	return cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(doc, "ggml"), key);
}

/* The samples of op in a process document's ggml.ops, 0 if absent. */
static double op_samples(const cJSON *doc, const char *op)
{
	const cJSON *o;

	cJSON_ArrayForEach(o, ggml_item(doc, "ops"))
	{
		if (!strcmp(ctl_str(o, "op", ""), op))
			return ctl_num(o, "samples", 0);
	}
	return 0;
}

int top_ops(const struct top_row *r, struct top_op_row **out, int max)
{
	const cJSON *ops = ggml_item(r->doc, "ops"), *op;
	double total = ctl_num(ggml_item(r->doc, "op_groups"), "samples", 0) -
		       ctl_num(ggml_item(r->prev, "op_groups"), "samples", 0);
	int n = 0;

	*out = calloc((size_t)cJSON_GetArraySize(ops) + 1, sizeof(**out));
	if (!*out)
		return -ENOMEM;
	cJSON_ArrayForEach(op, ops)
	{
		const char *name = ctl_str(op, "op", "?");
		double d = ctl_num(op, "samples", 0) - (r->prev ? op_samples(r->prev, name) : 0);

		if (d <= 0 || total <= 0)
			continue;
		snprintf((*out)[n].op, sizeof((*out)[n].op), "%s", name);
		(*out)[n++].share = share(d, total);
	}
	qsort(*out, (size_t)n, sizeof(**out), cmp_ops);
	return n < max ? n : max;
}

static char *pct(char *buf, size_t n, double v, int width)
{
	if (isnan(v))
		snprintf(buf, n, "-");
	else
		snprintf(buf, n, v < 99.95 && width >= 5 ? "%.1f" : "%.0f", v);
	return buf;
}

void top_format_header(char *buf)
{
	size_t len = 0;

	for (int c = 0; c < TC_NR; c++)
		len += (size_t)snprintf(buf + len, TOP_LINE - len,
					c == TC_COMM ? "%s%-*s" : "%s%*s", c ? " " : "",
					top_columns[c].width, top_columns[c].name);
}

/* Columns from TC_THR on, each right-aligned in its width; empty strings stay blank. */
static void format_cells(char *buf, size_t len, char cell[TC_NR][16])
{
	for (int c = TC_THR; c < TC_NR; c++)
		len += (size_t)snprintf(buf + len, TOP_LINE - len, " %*.*s", top_columns[c].width,
					top_columns[c].width, cell[c]);
}

void top_format_row(char *buf, const struct top_row *r)
{
	char cell[TC_NR][16];
	int len;

	snprintf(cell[TC_THR], 16, "%.0f", r->v[TC_THR]);
	pct(cell[TC_CPU], 16, r->v[TC_CPU], 5);
	ctl_fmt_num5(cell[TC_TOKS], 16, r->v[TC_TOKS]);
	ctl_fmt_num5(cell[TC_MS50], 16, r->v[TC_MS50]);
	ctl_fmt_num5(cell[TC_MS99], 16, r->v[TC_MS99]);
	pct(cell[TC_MM], 16, r->v[TC_MM], 3);
	pct(cell[TC_SPIN], 16, r->v[TC_SPIN], 5);
	ctl_fmt_num5(cell[TC_FTXS], 16, r->v[TC_FTXS]);
	ctl_fmt_dur5(cell[TC_FTX99], 16, r->v[TC_FTX99]);
	ctl_fmt_dur5(cell[TC_RQ99], 16, r->v[TC_RQ99]);
	ctl_fmt_num5(cell[TC_MAJS], 16, r->v[TC_MAJS]);
	len = snprintf(buf, TOP_LINE, "%7d%c%-9.9s", r->pid, r->mark ? r->mark : ' ', r->comm);
	format_cells(buf, (size_t)len, cell);
}

void top_format_op(char *buf, const struct top_op_row *o)
{
	snprintf(buf, TOP_LINE, "          op %-40.40s %5.1f%%", o->op, o->share);
}

void top_format_thread(char *buf, const struct top_thread_row *t)
{
	char cell[TC_NR][16] = {{0}};
	int len;

	pct(cell[TC_CPU], 16, t->cpu, 5);
	ctl_fmt_num5(cell[TC_FTXS], 16, t->ftxs);
	ctl_fmt_num5(cell[TC_MAJS], 16, t->majs);
	len = snprintf(buf, TOP_LINE, "%7d   %-7.7s", t->tid, t->comm);
	format_cells(buf, (size_t)len, cell);
}
