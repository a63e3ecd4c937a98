// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* top's table: rates and percentiles over the interval between two reads of the API (or
 * since tracking began, on the first), sorted and formatted into 79 columns. */
#include "top.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

const struct top_column top_columns[TC_NR] = {
	[TC_PID] = {"PID", "pid", "pid", 7, 'p', "process id (thread id in thread rows)"},
	[TC_COMM] = {"COMMAND", "comm", "comm", -9, 'n',
		     "command name; [name] once exited (with -a)"},
	[TC_THR] = {"THR", "thr", "live_threads", 3, 0, "live threads"},
	[TC_CPU] = {"CPU%", "cpu", "cpu_percent", 5, 'c', "CPU time, % of one CPU"},
	[TC_TOKS] = {"TOK/S", "toks", "decode_tokens_per_s", 5, 't',
		     "decode tokens/s: generated tokens per second inside llama_decode"},
	[TC_MS50] = {"MS50", "ms50", "ms_per_token_p50", 5, 0,
		     "milliseconds per generated token, median"},
	[TC_MS99] = {"MS99", "ms99", "ms_per_token_p99", 5, 'l',
		     "milliseconds per generated token, 99th percentile"},
	[TC_MM] = {"MM%", "mm", "matmul_percent", 3, 'm',
		   "CPU samples in matmul functions, % of the process's ('?': placed by the "
		   "stack scan, not to be trusted: see dump)"},
	[TC_SPIN] = {"SPIN%", "spin", "spin_percent", 5, 'b',
		     "CPU samples in barrier functions (spinning), %; threads: in sync"},
	[TC_FTXS] = {"FTX/S", "ftxs", "futex_waits_per_s", 5, 'f', "futex waits per second"},
	[TC_FTX99] = {"FTX99", "ftx99", "futex_wait_p99_ns", 5, 0,
		      "futex wait time, p99; generating tokens: of the waits inside decodes"},
	[TC_RQ99] = {"RQ99", "rq99", "runqueue_latency_p99_ns", 5, 'r',
		     "run-queue latency (runnable until running), p99"},
	[TC_MAJS] = {"MAJ/S", "majs", "major_faults_per_s", 5, 'g',
		     "major page faults (read from disk) per second"},
	[TC_WTOKS] = {"WTOK/S", "wtoks", "wall_tokens_per_s", 6, 'w',
		      "wall tokens/s: generated tokens per second of elapsed time"},
	[TC_MODEL] = {"MODEL", "model", "model", -24, 'M', "the model file it maps"},
	[TC_WORKLOAD] = {"WORKLOAD", "workload", "workload", -24, 'W',
			 "its service unit or container, else its command name"},
	[TC_REQS] = {"REQ/S", "reqs", "requests_per_s", 5, 'e',
		     "requests over per second, read from llama_decode's batches (any llama.cpp "
		     "server or app: llmprofctl requests)"},
	[TC_TTFT99] = {"TTFT99", "ttft99", "time_to_first_token_p99_ns", 6, 0,
		       "time to first token of the requests over, p99"},
	[TC_TPOT99] = {"TPOT99", "tpot99", "time_per_output_token_p99_ns", 6, 0,
		       "time per output token of the requests over, p99"},
	[TC_OCC] = {"OCC", "occ", "sequences_per_decode", 4, 0,
		    "sequences a decode carried, mean (continuous batching)"},
	[TC_ENGINE] = {"ENGINE", "engine", "engine", -6, 0,
		       "the engine it runs: ggml, torch (with -o only)"},
};

#define TOP_COMM_MAX 15 /* a task's name: TASK_COMM_LEN less its NUL */

static void layout_widths(struct top_layout *l)
{
	for (int c = 0; c < TC_NR; c++)
		l->width[c] = abs(top_columns[c].width);
}

int top_layout_parse(const char *list, struct top_layout *l, char *err, size_t errlen)
{
	const char *p = list;

	l->n = 0;
	layout_widths(l);
	while (*p) {
		size_t len = strcspn(p, ",");
		int c;

		for (c = 0; c < TC_NR; c++)
			if (strlen(top_columns[c].id) == len &&
			    !strncasecmp(p, top_columns[c].id, len))
				break;
		if (c == TC_NR || l->n == TC_NR) {
			snprintf(err, errlen, "%.*s", (int)(len < 32 ? len : 32), p);
			return -EINVAL;
		}
		l->col[l->n++] = (enum top_col)c;
		p += len + (p[len] == ',');
	}
	if (!l->n) {
		snprintf(err, errlen, "(empty list)");
		return -EINVAL;
	}
	return 0;
}

void top_layout_fit(struct top_layout *l, int width)
{
	int len = -1, grow;

	l->n = 0;
	layout_widths(l);
	for (int c = 0; c < TC_DEFAULT_NR; c++) {
		l->col[l->n++] = (enum top_col)c;
		len += 1 + l->width[c];
	}
	/* A whole command name first, then the wider columns while they fit. */
	grow = width - 1 - len;
	grow = grow < 0					 ? 0
	       : grow > TOP_COMM_MAX - l->width[TC_COMM] ? TOP_COMM_MAX - l->width[TC_COMM]
							 : grow;
	l->width[TC_COMM] += grow;
	len += grow;
	for (int c = TC_DEFAULT_NR; c < TC_FIT_NR && len + 1 + l->width[c] < width; c++) {
		l->col[l->n++] = (enum top_col)c;
		len += 1 + l->width[c];
	}
}

bool top_layout_find(const struct top_layout *l, enum top_col c, int *x, int *width)
{
	int at = 0;

	for (int i = 0; i < l->n; i++) {
		if (l->col[i] == c) {
			*x = at;
			*width = l->width[c];
			return true;
		}
		at += l->width[l->col[i]] + 1;
	}
	return false;
}

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
static double interval_quantile_in(const struct top_row *r, const char *in, const char *name,
				   double q)
{
	const cJSON *doc = in ? cJSON_GetObjectItemCaseSensitive(r->doc, in) : r->doc;
	const cJSON *prev = in ? cJSON_GetObjectItemCaseSensitive(r->prev, in) : r->prev;
	const cJSON *hn = cJSON_GetObjectItemCaseSensitive(
		cJSON_GetObjectItemCaseSensitive(doc, "histograms"), name);
	struct ctl_hist now, before, d;
	double v = NAN;

	if (!cJSON_IsObject(hn) || ctl_hist_parse(hn, &now) < 0)
		return NAN;
	if (!r->prev) {
		v = ctl_hist_quantile(&now, q);
	} else if (ctl_hist_parse(
			   cJSON_GetObjectItemCaseSensitive(
				   cJSON_GetObjectItemCaseSensitive(prev, "histograms"), name),
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

static double interval_quantile(const struct top_row *r, const char *name, double q)
{
	return interval_quantile_in(r, NULL, name, q);
}

/* A figure of the process's requests over the interval (NAN before any decode's batch). */
static double req_delta(const struct top_row *r, const char *name)
{
	const cJSON *now = cJSON_GetObjectItemCaseSensitive(r->doc, "requests");

	if (!cJSON_IsObject(now))
		return NAN;
	return ctl_num(now, name, 0) -
	       (r->prev ? ctl_num(cJSON_GetObjectItemCaseSensitive(r->prev, "requests"), name, 0)
			: 0);
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

/* A finding's rule and the column that shows the figure it judged (none: the mark alone). */
static const struct {
	const char *rule;
	enum top_col col;
} rule_cols[] = {
	{"oversubscribed", TC_RQ99},	   {"preempted", TC_RQ99},
	{"late_thread", TC_SPIN},	   {"omp_wait_policy", TC_SPIN},
	{"weights_not_resident", TC_MAJS}, {"memory_bound", TC_MS50},
};

/* enum top_flag's severities as the findings name them, and the marks top shows. */
static const char *const flag_names[] = {
	[TOP_FLAG_INFO] = "info", [TOP_FLAG_WARNING] = "warning", [TOP_FLAG_CRITICAL] = "critical"};
static const char flag_marks[] = " +*!";

static enum top_flag severity_flag(const char *s)
{
	for (int f = TOP_FLAG_CRITICAL; f > TOP_FLAG_NONE; f--)
		if (!strcmp(s, flag_names[f]))
			return (enum top_flag)f;
	return TOP_FLAG_NONE;
}

/* The worst finding of a process's document, or of its recent ones, as its mark ('!'
 * critical, '*' warning, '+' info), and each column's worst. */
static void findings_of(const cJSON *d, struct top_row *r)
{
	const cJSON *f = cJSON_GetObjectItemCaseSensitive(d, "findings");
	const cJSON *list = cJSON_GetObjectItemCaseSensitive(f, "findings"), *e;
	enum top_flag worst = severity_flag(ctl_str(f, "worst", ""));

	memset(r->flag, 0, sizeof(r->flag));
	cJSON_ArrayForEach(e, list)
	{
		enum top_flag sev = severity_flag(ctl_str(e, "severity", ""));
		const char *rule = ctl_str(e, "rule", "");

		worst = sev > worst ? sev : worst;
		for (size_t i = 0; i < sizeof(rule_cols) / sizeof(rule_cols[0]); i++)
			if (!strcmp(rule, rule_cols[i].rule) && sev > r->flag[rule_cols[i].col])
				r->flag[rule_cols[i].col] = (unsigned char)sev;
	}
	/* A rule that fired in the last seconds keeps the mark (not the figure's colour: the
	 * figure shown no longer says it): near a threshold it would flip at each refresh. */
	cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(f, "recent"))
	{
		enum top_flag sev = severity_flag(ctl_str(e, "severity", ""));

		worst = sev > worst ? sev : worst;
	}
	r->mark = flag_marks[worst];
}

static void copy_text(char *dst, size_t size, const char *src)
{
	snprintf(dst, size, "%s", src && *src ? src : "-");
}

static void fill(struct top_row *r)
{
	double *v = r->v, samples = delta(r, "samples"), gen = delta(r, "decode_generation_tokens");
	bool ggml = cJSON_IsObject(ctl_engine_doc(r->doc));

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
	/* A process generating tokens: the p99 of the futex waits inside its generation
	 * decodes, which its tokens waited for. Its threads' waits while idle between requests
	 * (node's libuv workers wait seconds) are no cost of a token. Any other process: of all
	 * its waits. */
	v[TC_FTX99] = interval_quantile(r, gen > 0 ? "futex_wait_generation" : "futex_wait", 0.99);
	v[TC_RQ99] = interval_quantile(r, "runqueue_latency", 0.99);
	v[TC_MAJS] = per_s(delta(r, "page_faults_major"), r->dt_ns);
	v[TC_WTOKS] = gen > 0 ? per_s(gen, r->dt_ns) : NAN;
	v[TC_REQS] = per_s(req_delta(r, "requests"), r->dt_ns);
	v[TC_TTFT99] = interval_quantile_in(r, "requests", "ttft", 0.99);
	v[TC_TPOT99] = interval_quantile_in(r, "requests", "tpot", 0.99);
	v[TC_OCC] = req_delta(r, "decodes") > 0
			    ? req_delta(r, "sequences") / req_delta(r, "decodes")
			    : NAN;
	/* A process whose samples the stack scan placed: its MM% is not to be trusted. */
	const cJSON *uw = cJSON_GetObjectItemCaseSensitive(ctl_engine_doc(r->doc), "unwind");
	r->scanned = cJSON_IsObject(uw) && !ctl_true(uw, "trustworthy");
	copy_text(r->engine, sizeof(r->engine), ctl_str(r->doc, "engine", ""));
	copy_text(r->model, sizeof(r->model),
		  ctl_str(cJSON_GetObjectItemCaseSensitive(r->doc, "model"), "name", ""));
	copy_text(r->workload, sizeof(r->workload), ctl_str(r->doc, "workload", ""));
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
		findings_of(d, r);
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
	else if (by->col == TC_MODEL)
		c = strcmp(x->model, y->model);
	else if (by->col == TC_ENGINE)
		c = strcmp(x->engine, y->engine);
	else if (by->col == TC_WORKLOAD)
		c = strcmp(x->workload, y->workload);
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
	double cx = x->v[TC_CPU], cy = y->v[TC_CPU];

	if (cx != cy)
		return isnan(cx) ? 1 : isnan(cy) ? -1 : cx < cy ? 1 : -1;
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

/* A thread's figures over the interval: grown since the previous read (a thread born in the
 * interval counts from zero). */
static double thread_delta(const cJSON *t, const cJSON *p, const char *name)
{
	return ctl_num(t, name, 0) - ctl_num(p, name, 0);
}

static void thread_empty(struct top_thread_row *o)
{
	for (int c = 0; c < TC_NR; c++)
		o->v[c] = NAN;
}

int top_threads(const struct top_row *r, struct top_thread_row **out)
{
	const cJSON *ts = cJSON_GetObjectItemCaseSensitive(r->doc, "threads"), *t;
	double cpu_ns = 0, waits = 0, majs = 0;
	struct top_thread_row *x;
	int n = 0;

	*out = calloc((size_t)cJSON_GetArraySize(ts) + 2, sizeof(**out));
	if (!*out)
		return -ENOMEM;
	cJSON_ArrayForEach(t, ts)
	{
		struct top_thread_row *o = &(*out)[n++];
		const cJSON *p;
		double samples;

		o->tid = (int)ctl_num(t, "tid", 0);
		p = r->prev ? thread_of(r->prev, o->tid) : NULL;
		snprintf(o->comm, sizeof(o->comm), "%s", ctl_str(t, "comm", "?"));
		thread_empty(o);
		o->v[TC_PID] = o->tid;
		cpu_ns += thread_delta(t, p, "oncpu_ns");
		waits += thread_delta(t, p, "futex_waits");
		majs += thread_delta(t, p, "page_faults_major");
		o->v[TC_CPU] = share(thread_delta(t, p, "oncpu_ns"), r->dt_ns);
		o->v[TC_FTXS] = per_s(thread_delta(t, p, "futex_waits"), r->dt_ns);
		o->v[TC_MAJS] = per_s(thread_delta(t, p, "page_faults_major"), r->dt_ns);
		samples = thread_delta(t, p, "samples");
		if (!isnan(r->v[TC_SPIN]))
			o->v[TC_SPIN] = share(thread_delta(t, p, "samples_sync"), samples);
	}
	qsort(*out, (size_t)n, sizeof(**out), cmp_threads);
	/* What the process did that its live threads did not: threads that exited. */
	if (!r->prev)
		return n;
	cpu_ns = delta(r, "oncpu_ns") - cpu_ns;
	waits = delta(r, "futex_waits") - waits;
	majs = delta(r, "page_faults_major") - majs;
	if (cpu_ns <= 0 && waits <= 0 && majs <= 0)
		return n;
	x = &(*out)[n++];
	x->tid = 0;
	snprintf(x->comm, sizeof(x->comm), "(exited)");
	thread_empty(x);
	x->v[TC_CPU] = share(cpu_ns > 0 ? cpu_ns : 0, r->dt_ns);
	x->v[TC_FTXS] = per_s(waits > 0 ? waits : 0, r->dt_ns);
	x->v[TC_MAJS] = per_s(majs > 0 ? majs : 0, r->dt_ns);
	return n;
}

static int cmp_ops(const void *a, const void *b)
{
	const struct top_op_row *x = a, *y = b;

	return x->share < y->share ? 1 : x->share > y->share ? -1 : strcmp(x->op, y->op);
}

static const cJSON *ggml_item(const cJSON *doc, const char *key)
{
	return cJSON_GetObjectItemCaseSensitive(ctl_engine_doc(doc), key);
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

/* The cells of a line in the layout's order, each cut to its width; the mark, if any, as
 * the first character of the PID cell (a PID too long for it widens the line). */
static void format_line(char *buf, const struct top_layout *l, char cell[TC_NR][64], char mark)
{
	size_t len = 0;

	buf[0] = '\0';
	for (int i = 0; i < l->n && len < TOP_LINE; i++) {
		enum top_col c = l->col[i];
		int w = l->width[c];
		const char *sep = i ? " " : "";

		if (c == TC_PID && mark != ' ')
			len += (size_t)snprintf(buf + len, TOP_LINE - len, "%s%c%*s", sep, mark,
						w - 1, cell[c]);
		else
			len += (size_t)snprintf(buf + len, TOP_LINE - len,
						top_columns[c].width < 0 ? "%s%-*.*s" : "%s%*.*s",
						sep, w, w, cell[c]);
	}
	/* Left-aligned text at the end leaves trailing blanks. */
	while (len && len < TOP_LINE && buf[len - 1] == ' ')
		buf[--len] = '\0';
}

void top_format_header(char *buf, const struct top_layout *l)
{
	char cell[TC_NR][64];

	for (int c = 0; c < TC_NR; c++)
		snprintf(cell[c], sizeof(cell[c]), "%s", top_columns[c].name);
	format_line(buf, l, cell, ' ');
}

/* The figures' cells; text columns are the caller's. */
static void number_cells(char cell[TC_NR][64], const double *v)
{
	pct(cell[TC_CPU], 64, v[TC_CPU], 5);
	ctl_fmt_num5(cell[TC_TOKS], 64, v[TC_TOKS]);
	ctl_fmt_num5(cell[TC_MS50], 64, v[TC_MS50]);
	ctl_fmt_num5(cell[TC_MS99], 64, v[TC_MS99]);
	pct(cell[TC_MM], 64, v[TC_MM], 3);
	pct(cell[TC_SPIN], 64, v[TC_SPIN], 5);
	ctl_fmt_num5(cell[TC_FTXS], 64, v[TC_FTXS]);
	ctl_fmt_dur5(cell[TC_FTX99], 64, v[TC_FTX99]);
	ctl_fmt_dur5(cell[TC_RQ99], 64, v[TC_RQ99]);
	ctl_fmt_num5(cell[TC_MAJS], 64, v[TC_MAJS]);
	ctl_fmt_num5(cell[TC_WTOKS], 64, v[TC_WTOKS]);
	ctl_fmt_num5(cell[TC_REQS], 64, v[TC_REQS]);
	ctl_fmt_dur5(cell[TC_TTFT99], 64, v[TC_TTFT99]);
	ctl_fmt_dur5(cell[TC_TPOT99], 64, v[TC_TPOT99]);
	ctl_fmt_num5(cell[TC_OCC], 64, v[TC_OCC]);
}

void top_format_row(char *buf, const struct top_row *r, const struct top_layout *l)
{
	char cell[TC_NR][64];

	number_cells(cell, r->v);
	if (r->scanned && !isnan(r->v[TC_MM]))
		snprintf(cell[TC_MM], 64, "%.0f?", r->v[TC_MM] > 99 ? 99 : r->v[TC_MM]);
	snprintf(cell[TC_PID], 64, "%d", r->pid);
	snprintf(cell[TC_COMM], 64, "%s", r->comm);
	snprintf(cell[TC_THR], 64, "%.0f", r->v[TC_THR]);
	snprintf(cell[TC_ENGINE], 64, "%s", r->engine);
	snprintf(cell[TC_MODEL], 64, "%s", r->model);
	snprintf(cell[TC_WORKLOAD], 64, "%s", r->workload);
	format_line(buf, l, cell, r->mark ? r->mark : ' ');
}

void top_format_op(char *buf, const struct top_op_row *o)
{
	/* Under COMMAND, and named for what it is: not a figure of the columns above it. */
	snprintf(buf, TOP_LINE, "        op %-40.40s %5.1f%% of its samples", o->op, o->share);
}

void top_format_thread(char *buf, const struct top_thread_row *t, const struct top_layout *l)
{
	char cell[TC_NR][64];

	number_cells(cell, t->v);
	/* A thread shows what it has; blank where only a process has a figure. */
	for (int c = 0; c < TC_NR; c++)
		if (c != TC_PID && c != TC_COMM && isnan(t->v[c]))
			cell[c][0] = '\0';
	if (t->tid)
		snprintf(cell[TC_PID], 64, "%d", t->tid);
	else
		snprintf(cell[TC_PID], 64, "-");
	snprintf(cell[TC_COMM], 64, t->tid ? "  %s" : "%s", t->comm);
	format_line(buf, l, cell, ' ');
}

int top_host_parse(const char *stat, const char *loadavg, struct top_host *h)
{
	unsigned long long f[8] = {0};
	const char *p;

	memset(h, 0, sizeof(*h));
	if (sscanf(stat, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &f[0], &f[1], &f[2], &f[3],
		   &f[4], &f[5], &f[6], &f[7]) < 4 ||
	    sscanf(loadavg, "%lf %lf %lf", &h->load[0], &h->load[1], &h->load[2]) != 3)
		return -EINVAL;
	/* user nice system idle iowait irq softirq steal: busy is all but idle and iowait */
	h->busy = (double)(f[0] + f[1] + f[2] + f[5] + f[6] + f[7]);
	h->total = h->busy + (double)(f[3] + f[4]);
	for (p = stat; (p = strstr(p, "\ncpu")); p++)
		h->cpus += p[4] >= '0' && p[4] <= '9';
	return h->cpus ? 0 : -EINVAL;
}

/* The busy CPU over the interval and the LLM processes' part, in % of one CPU (as the CPU%
 * column): false without a previous read. */
static bool host_split(const struct top_host *now, const struct top_host *prev,
		       const struct top_row *rows, size_t n, double *busy, double *llm)
{
	if (!prev || now->total <= prev->total)
		return false;
	*busy = 100.0 * now->cpus * (now->busy - prev->busy) / (now->total - prev->total);
	*llm = 0;
	for (size_t i = 0; i < n; i++)
		if (!rows[i].exited && !isnan(rows[i].v[TC_CPU]))
			*llm += rows[i].v[TC_CPU];
	return true;
}

void top_format_host(char *buf, const struct top_host *now, const struct top_host *prev,
		     const struct top_row *rows, size_t n)
{
	double busy, llm;
	int len;

	len = snprintf(buf, TOP_LINE, "host  load %.2f %.2f %.2f  %d CPU%s", now->load[0],
		       now->load[1], now->load[2], now->cpus, now->cpus == 1 ? "" : "s");
	if (len < 0 || len >= TOP_LINE || !host_split(now, prev, rows, n, &busy, &llm))
		return;
	snprintf(buf + len, TOP_LINE - (size_t)len, "  busy %.0f%% = LLM %.0f%% + other %.0f%%",
		 busy, llm, busy > llm ? busy - llm : 0);
}

/* --- --json --- */

/* A figure, or null where the table prints '-'. */
static void add_num(cJSON *o, const char *key, double v)
{
	if (isnan(v) || isinf(v))
		cJSON_AddNullToObject(o, key);
	else
		cJSON_AddNumberToObject(o, key, v);
}

/* A text column: null for the table's '-'. */
static void add_text(cJSON *o, const char *key, const char *s)
{
	if (strcmp(s, "-"))
		cJSON_AddStringToObject(o, key, s);
	else
		cJSON_AddNullToObject(o, key);
}

/* The severity a row's mark stands for, or NULL. */
static const char *severity(char mark)
{
	const char *m = mark ? strchr(flag_marks, mark) : NULL;

	return m ? flag_names[m - flag_marks] : NULL;
}

/* The numeric columns a thread row has: the others are the process's alone. */
static const enum top_col thread_cols[] = {TC_CPU, TC_SPIN, TC_FTXS, TC_MAJS};

static cJSON *threads_json(const struct top_row *r)
{
	struct top_thread_row *t;
	int n = top_threads(r, &t);
	cJSON *a = cJSON_CreateArray();

	for (int i = 0; a && i < n; i++) {
		cJSON *o = cJSON_CreateObject();

		if (!o || !cJSON_AddItemToArray(a, o))
			break;
		add_num(o, "tid", t[i].tid ? t[i].tid : NAN);
		if (t[i].tid)
			cJSON_AddStringToObject(o, "comm", t[i].comm);
		else
			cJSON_AddNullToObject(o, "comm");
		for (size_t k = 0; k < sizeof(thread_cols) / sizeof(thread_cols[0]); k++)
			add_num(o, top_columns[thread_cols[k]].json, t[i].v[thread_cols[k]]);
	}
	if (n >= 0)
		free(t);
	return a;
}

static cJSON *ops_json(const struct top_row *r)
{
	struct top_op_row *ops;
	int n = top_ops(r, &ops, TOP_OPS_SHOWN);
	cJSON *a = cJSON_CreateArray();

	for (int i = 0; a && i < n; i++) {
		cJSON *o = cJSON_CreateObject();

		if (!o || !cJSON_AddItemToArray(a, o))
			break;
		cJSON_AddStringToObject(o, "op", ops[i].op);
		add_num(o, "percent", ops[i].share);
	}
	if (n >= 0)
		free(ops);
	return a;
}

cJSON *top_row_json(const struct top_row *r, bool threads, bool ops)
{
	cJSON *o = cJSON_CreateObject();

	if (!o)
		return NULL;
	for (int c = 0; c < TC_NR; c++) {
		if (c == TC_COMM)
			cJSON_AddStringToObject(o, top_columns[c].json,
						ctl_str(r->doc, "comm", "?"));
		else if (c == TC_MODEL)
			add_text(o, top_columns[c].json, r->model);
		else if (c == TC_ENGINE)
			add_text(o, top_columns[c].json, r->engine);
		else if (c == TC_WORKLOAD)
			add_text(o, top_columns[c].json, r->workload);
		else
			add_num(o, top_columns[c].json, r->v[c]);
	}
	cJSON_AddBoolToObject(o, "matmul_from_stack_scan", r->scanned);
	cJSON_AddBoolToObject(o, "exited", r->exited);
	if (severity(r->mark))
		cJSON_AddStringToObject(o, "finding", severity(r->mark));
	else
		cJSON_AddNullToObject(o, "finding");
	add_num(o, "interval_seconds", r->dt_ns / 1e9);
	if (threads)
		cJSON_AddItemToObject(o, "threads", threads_json(r));
	if (ops)
		cJSON_AddItemToObject(o, "ops", ops_json(r));
	return o;
}

cJSON *top_host_json(const struct top_host *now, const struct top_host *prev,
		     const struct top_row *rows, size_t n)
{
	cJSON *o = cJSON_CreateObject();
	double busy = NAN, llm = NAN;

	if (!o)
		return NULL;
	cJSON_AddItemToObject(o, "load", cJSON_CreateDoubleArray(now->load, 3));
	cJSON_AddNumberToObject(o, "cpus", now->cpus);
	host_split(now, prev, rows, n, &busy, &llm);
	add_num(o, "busy_percent", busy);
	add_num(o, "llm_percent", llm);
	add_num(o, "other_percent", isnan(busy) ? NAN : busy > llm ? busy - llm : 0);
	return o;
}
