// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* llmprofctl diff: two saved reports compared, for a CI step that fails when a change makes
 * inference slower. Reads files only; talks to no daemon. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llmprof/protocol.h"
#include "llmprofctl.h"

enum { DIFF_SAME = 0, DIFF_REGRESSION = 1 };

/* A report is a few MB at most; a larger file is not one. */
#define DIFF_MAX_BYTES (64 << 20)

static const struct option opts[] = {{"threshold", required_argument, NULL, 't'},
				     {"json", no_argument, NULL, 'j'},
				     CTL_COMMON_OPTS};

/* How a figure is read from a process's document and judged. */
struct figure {
	const char *name;
	const char *id;		       /* its name in --json */
	const char *unit;	       /* of base and current in --json; "share": a fraction of 1 */
	double (*get)(const cJSON *p); /* NULL: the share of op group share */
	const char *share;
	int better;  /* +1 higher is better, -1 lower is better */
	bool points; /* a share: changes in percentage points */
	bool gate;   /* a change beyond the threshold is a regression (exit 1) */
	const char *fmt;
};

/* o's a.b.c; a is "engine": the figures of the process's engine (ctl_engine_doc) */
static const cJSON *at(const cJSON *o, const char *a, const char *b, const char *c)
{
	o = strcmp(a, "engine") ? cJSON_GetObjectItemCaseSensitive(o, a) : ctl_engine_doc(o);
	if (b)
		o = cJSON_GetObjectItemCaseSensitive(o, b);
	if (c)
		o = cJSON_GetObjectItemCaseSensitive(o, c);
	return o;
}

static double num(const cJSON *o)
{
	return cJSON_IsNumber(o) ? o->valuedouble : NAN;
}

static const cJSON *generation(const cJSON *p)
{
	return at(p, "engine", "tokens", "generation");
}

/* Tokens the process generated: its generation decodes', or its requests' output where
 * more (a server whose every decode carried several sequences decoded no batch of one
 * token, which is what a generation decode is). */
static double generated(const cJSON *p)
{
	/* fmax leaves out a figure the document lacks (NaN) */
	return fmax(num(cJSON_GetObjectItemCaseSensitive(generation(p), "tokens")),
		    num(at(p, "requests", "output_tokens", NULL)));
}

static double tokens_per_s(const cJSON *p)
{
	return num(cJSON_GetObjectItemCaseSensitive(generation(p), "wall_tokens_per_s"));
}

static double ms_per_token(const cJSON *p)
{
	return num(cJSON_GetObjectItemCaseSensitive(generation(p), "ms_per_token"));
}

static double hist_ms(const cJSON *p, const char *h, const char *q)
{
	return num(at(p, "histograms", h, q)) / 1e6;
}

static double p50(const cJSON *p)
{
	return hist_ms(p, "decode_generation", "p50");
}

static double p99(const cJSON *p)
{
	return hist_ms(p, "decode_generation", "p99");
}

static double runq_p99(const cJSON *p)
{
	return hist_ms(p, "runqueue_latency", "p99");
}

/* The kernel's run_delay (runqueue_ns); a report from a daemon before that counter has
 * only the histogram's sum, an estimate where a busy thread's waits were sampled. */
static double runq_share(const cJSON *p)
{
	double rq = num(at(p, "counters", "runqueue_ns", NULL));
	double on = num(at(p, "counters", "oncpu_ns", NULL));

	if (!(rq > 0))
		rq = num(at(p, "histograms", "runqueue_latency", "sum"));

	return rq + on > 0 ? rq / (rq + on) : NAN;
}

/* Of its requests (read from llama_decode's batches): NAN where it has none. */
static double req_ms(const cJSON *p, const char *h, const char *q)
{
	const cJSON *hist = at(p, "requests", "histograms", h);

	return num(cJSON_GetObjectItemCaseSensitive(hist, "count")) > 0
		       ? num(cJSON_GetObjectItemCaseSensitive(hist, q)) / 1e6
		       : NAN;
}

static double ttft_p50(const cJSON *p)
{
	return req_ms(p, "ttft", "p50");
}

static double ttft_p99(const cJSON *p)
{
	return req_ms(p, "ttft", "p99");
}

static double tpot_p50(const cJSON *p)
{
	return req_ms(p, "tpot", "p50");
}

static double tpot_p99(const cJSON *p)
{
	return req_ms(p, "tpot", "p99");
}

static double faults_per_token(const cJSON *p)
{
	double t = num(cJSON_GetObjectItemCaseSensitive(generation(p), "tokens"));

	return t > 0 ? num(at(p, "counters", "page_faults_major", NULL)) / t : NAN;
}

static const struct figure figures[] = {
	{"tokens/s (wall)", "wall_tokens_per_s", "tokens/s", tokens_per_s, NULL, +1, false, true,
	 "%.1f"},
	{"ms/token (decode, mean)", "ms_per_token", "ms", ms_per_token, NULL, -1, false, true,
	 "%.2f"},
	{"ms/token p50", "ms_per_token_p50", "ms", p50, NULL, -1, false, false, "%.2f"},
	{"ms/token p99", "ms_per_token_p99", "ms", p99, NULL, -1, false, false, "%.2f"},
	{"TTFT p50 (ms)", "time_to_first_token_p50", "ms", ttft_p50, NULL, -1, false, false,
	 "%.2f"},
	{"TTFT p99 (ms)", "time_to_first_token_p99", "ms", ttft_p99, NULL, -1, false, false,
	 "%.2f"},
	{"TPOT p50 (ms)", "time_per_output_token_p50", "ms", tpot_p50, NULL, -1, false, false,
	 "%.2f"},
	{"TPOT p99 (ms)", "time_per_output_token_p99", "ms", tpot_p99, NULL, -1, false, false,
	 "%.2f"},
	{"run-queue p99 (ms)", "runqueue_latency_p99", "ms", runq_p99, NULL, -1, false, false,
	 "%.3f"},
	{"run-queue share", "runqueue_share", "share", runq_share, NULL, -1, true, false, NULL},
	{"major faults/token", "major_faults_per_token", "faults/token", faults_per_token, NULL, -1,
	 false, false, "%.2f"},
	{"share matmul", "share_matmul", "share", NULL, "matmul", 0, true, false, NULL},
	{"share attention", "share_attention", "share", NULL, "attention", 0, true, false, NULL},
	{"share norm", "share_norm", "share", NULL, "norm", 0, true, false, NULL},
	{"share rope", "share_rope", "share", NULL, "rope", 0, true, false, NULL},
	{"share elementwise", "share_elementwise", "share", NULL, "elementwise", 0, true, false,
	 NULL},
	{"share copy", "share_copy", "share", NULL, "copy", 0, true, false, NULL},
	{"share other ops", "share_other_ops", "share", NULL, "other_ops", 0, true, false, NULL},
	{"share sync", "share_sync", "share", NULL, "sync", -1, true, false, NULL},
	{"share outside ops", "share_outside_ops", "share", NULL, "outside_ops", 0, true, false,
	 NULL},
};
#define NFIGURES (sizeof(figures) / sizeof(figures[0]))

static double value(const struct figure *f, const cJSON *p)
{
	if (f->get)
		return f->get(p);
	return num(
		cJSON_GetObjectItemCaseSensitive(at(p, "engine", "op_groups", "share"), f->share));
}

/* The file's document, or NULL with the reason printed. */
static cJSON *load(const struct ctl *c, const char *path)
{
	FILE *f = strcmp(path, "-") ? fopen(path, "re") : stdin;
	char *buf = NULL;
	size_t len = 0, cap = 0, n;
	cJSON *doc = NULL;

	if (!f) {
		fprintf(stderr, "%s: cannot read %s: %s\n", c->prog, path, strerror(errno));
		return NULL;
	}
	do {
		if (len + 65536 + 1 > cap) {
			char *b = realloc(buf, cap = cap ? 2 * cap : 1 << 20);

			if (!b)
				break;
			buf = b;
		}
		n = fread(buf + len, 1, cap - len - 1, f);
		len += n;
	} while (n && len <= DIFF_MAX_BYTES);
	if (f != stdin)
		fclose(f);
	if (len > DIFF_MAX_BYTES)
		fprintf(stderr, "%s: %s: over %d MiB: not a report of llmprofd\n", c->prog, path,
			DIFF_MAX_BYTES >> 20);
	else if (buf && !(buf[len] = '\0', doc = cJSON_ParseWithLength(buf, len)))
		fprintf(stderr, "%s: %s: not JSON (near byte %zu)\n", c->prog, path,
			(size_t)(cJSON_GetErrorPtr() ? cJSON_GetErrorPtr() - buf : 0));
	free(buf);
	if (doc)
		ctl_sanitize(doc);
	return doc;
}

/* The process of a document to compare: itself (a process's document), or the one of a
 * report that generated the most tokens. NULL with the reason printed. */
static const cJSON *pick(const struct ctl *c, const char *path, const cJSON *doc)
{
	const cJSON *fmt = cJSON_GetObjectItemCaseSensitive(doc, "report_format"), *p, *best = NULL;
	const cJSON *procs = cJSON_GetObjectItemCaseSensitive(doc, "processes");

	if (!cJSON_IsObject(doc) || !cJSON_IsNumber(fmt)) {
		fprintf(stderr,
			"%s: %s: not a report of llmprofd (no report_format): save one with "
			"`llmprofctl dump --pid N --json` or `llmprofd --once`\n",
			c->prog, path);
		return NULL;
	}
	if (fmt->valuedouble != LP_REPORT_FORMAT) {
		fprintf(stderr,
			"%s: %s: report format %g, this llmprofctl reads format %d: compare "
			"reports "
			"of the same llmprofd version\n",
			c->prog, path, fmt->valuedouble, LP_REPORT_FORMAT);
		return NULL;
	}
	if (!cJSON_IsArray(procs))
		best = doc;
	cJSON_ArrayForEach(p, procs)
	{
		double t = generated(p);

		if (t > 0 && (!best || t > generated(best)))
			best = p;
	}
	if (!best || !(generated(best) > 0)) {
		fprintf(stderr, "%s: %s: no process generated tokens: nothing to compare\n",
			c->prog, path);
		return NULL;
	}
	return best;
}

static void cell(char *buf, size_t n, const struct figure *f, double v)
{
	if (isnan(v))
		snprintf(buf, n, "-");
	else if (f->points)
		snprintf(buf, n, "%.1f%%", 100 * v);
	else
		snprintf(buf, n, f->fmt, v);
}

/* Compares every figure; prints the table (or JSON) and returns how many gated figures
 * regressed beyond the threshold. */
static int compare(const cJSON *a, const cJSON *b, double threshold, bool json, cJSON *out)
{
	int regressions = 0;

	for (size_t i = 0; i < NFIGURES; i++) {
		const struct figure *f = &figures[i];
		double x = value(f, a), y = value(f, b), change;
		const char *verdict = "";
		char cx[32], cy[32], cc[32];

		if (f->points) {
			change = y - x;
			snprintf(cc, sizeof(cc), isnan(change) ? "-" : "%+.1f pt", 100 * change);
		} else {
			change = x != 0 && !isnan(x) ? (y - x) / fabs(x) : NAN;
			snprintf(cc, sizeof(cc), isnan(change) ? "-" : "%+.1f%%", 100 * change);
		}
		if (!isnan(change) && f->better && fabs(change) > threshold / 100) {
			bool worse = (change > 0) == (f->better < 0);

			verdict = !worse ? "better" : f->gate ? "REGRESSION" : "worse";
			regressions += worse && f->gate;
		}
		cell(cx, sizeof(cx), f, x);
		cell(cy, sizeof(cy), f, y);
		if (json) {
			cJSON *e = cJSON_CreateObject();

			cJSON_AddStringToObject(e, "figure", f->name);
			cJSON_AddStringToObject(e, "id", f->id);
			if (isnan(x))
				cJSON_AddNullToObject(e, "base");
			else
				cJSON_AddNumberToObject(e, "base", x);
			if (isnan(y))
				cJSON_AddNullToObject(e, "current");
			else
				cJSON_AddNumberToObject(e, "current", y);
			if (isnan(change))
				cJSON_AddNullToObject(e, "change");
			else
				cJSON_AddNumberToObject(e, "change", change);
			cJSON_AddStringToObject(e, "unit", f->unit);
			/* A share changes by its difference, any other figure by its ratio. */
			cJSON_AddStringToObject(e, "change_is",
						f->points ? "difference" : "relative");
			cJSON_AddBoolToObject(e, "gate", f->gate);
			cJSON_AddStringToObject(e, "verdict", verdict);
			cJSON_AddItemToArray(out, e);
		} else {
			printf("%c %-24s %10s %10s %10s  %s\n", f->gate ? '*' : ' ', f->name, cx,
			       cy, cc, verdict);
		}
	}
	return regressions;
}

static void describe(const char *what, const char *path, const cJSON *p)
{
	printf("%s pid %.0f (%s) of %s: %.0f tokens generated\n", what,
	       num(cJSON_GetObjectItemCaseSensitive(p, "pid")), ctl_str(p, "comm", "?"), path,
	       generated(p));
}

static int exec(struct ctl *c, int argc, char **argv)
{
	int opt, status = CTL_OK, regressions;
	double threshold = 10;
	bool json = false;
	const cJSON *a, *b;
	cJSON *da = NULL, *db = NULL, *out = NULL;

	while ((opt = ctl_getopt(c, &ctl_cmd_diff, argc, argv, &status)) != -1) {
		if (opt == -2)
			return status;
		if (opt == 't' &&
		    ctl_parse_percent(c, &ctl_cmd_diff, "--threshold", optarg, 0, 1000, &threshold))
			return CTL_USAGE;
		json |= opt == 'j';
	}
	if (argc - optind != 2)
		return ctl_usage_error(c, &ctl_cmd_diff, "give two reports: BASE and CURRENT");
	if (!(da = load(c, argv[optind])) || !(db = load(c, argv[optind + 1])) ||
	    !(a = pick(c, argv[optind], da)) || !(b = pick(c, argv[optind + 1], db))) {
		cJSON_Delete(da);
		cJSON_Delete(db);
		return CTL_USAGE;
	}
	if (json) {
		out = cJSON_CreateObject();
		cJSON_AddNumberToObject(out, "threshold_percent", threshold);
	} else {
		describe("base:   ", argv[optind], a);
		describe("current:", argv[optind + 1], b);
		printf("\n  %-24s %10s %10s %10s\n", "", "base", "current", "change");
	}
	regressions =
		compare(a, b, threshold, json, out ? cJSON_AddArrayToObject(out, "figures") : NULL);
	if (json) {
		cJSON_AddBoolToObject(out, "regression", regressions > 0);
		ctl_print_json(out, false);
		cJSON_Delete(out);
	} else {
		printf("\n%s (threshold %g%%; * marks the figures that decide)\n",
		       regressions ? "REGRESSION" : "no regression", threshold);
	}
	cJSON_Delete(da);
	cJSON_Delete(db);
	return regressions ? DIFF_REGRESSION : DIFF_SAME;
}

const struct ctl_cmd ctl_cmd_diff = {
	.name = "diff",
	.usage = "BASE CURRENT [--threshold P] [--json]",
	.summary = "compare two saved reports; exit 1 when the current one is slower",
	.help = "Compares two reports saved with `llmprofctl dump --pid N --json > FILE` or "
		"`llmprofd --once > FILE`\n(of a report with several processes, the one that "
		"generated the most tokens): tokens/s,\nms/token (mean, p50, p99), its requests' "
		"time to first token and per output token\n(p50, p99), run-queue latency and "
		"share, major faults per token, and the share of each\nop group and of sync. '-' "
		"reads standard input.\n\n"
		"The exit status is 1 when tokens/s fell, or the mean ms/token rose, by more than "
		"the\nthreshold (the figures marked *); other changes beyond it are marked better "
		"or worse but\ndo not fail (percentiles come from histogram buckets an eighth of "
		"a power of two wide).\n2 means a file could not be read or is not a report of "
		"this format.\n\n"
		"Options:\n"
		"  -t, --threshold P   percent (default 10)\n"
		"  -j, --json          the comparison as JSON\n\n"
		"Examples:\n"
		"  llmprofctl dump --pid $(pgrep llama-server) --json > base.json\n"
		"  llmprofctl diff base.json current.json --threshold 5 || echo slower\n",
	.shortopt = "t:j",
	.longopts = opts,
	.operands = 2,
	.exec = exec,
};
