// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* llmprofctl's pure parts against the daemon's own: histograms the daemon renders are parsed
 * by the client, whose percentiles (over all the data, and over the difference of two
 * reads) must equal the daemon's; top's rows over an interval; number formats; 80 columns. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "base/hist.h"
#include "report/render.h"
#include "top.h"

static uint64_t rnd(void)
{
	static uint64_t s = 88172645463325252ULL;

	s ^= s << 13;
	s ^= s >> 7;
	s ^= s << 17;
	return s;
}

static void add(struct lp_hist *h, uint64_t v, uint64_t n)
{
	h->buckets[lp_hist_index(v)] += n;
	h->sum_ns += v * n;
	if (v > h->max_ns)
		h->max_ns = v;
}

/* A histogram of n values spread over many magnitudes, as the BPF side would fill it. */
static void fill_random(struct lp_hist *h, int n)
{
	for (int i = 0; i < n; i++) {
		int e = (int)(rnd() % 40);

		add(h, e ? (rnd() % (1ULL << e)) : 0, 1 + rnd() % 3);
	}
}

static struct ctl_hist parsed(const struct lp_hist *h)
{
	cJSON *doc = lp_render_hist(h);
	struct ctl_hist out;

	CHECK(ctl_hist_parse(doc, &out) == 0, "parse the daemon's histogram");
	cJSON_Delete(doc);
	return out;
}

static void test_quantiles(void)
{
	static const double qs[] = {0.01, 0.5, 0.9, 0.99, 0.999, 1};

	for (int round = 0; round < 200; round++) {
		struct lp_hist a = {0}, b, d = {0};
		struct ctl_hist ha, hb, hd;

		fill_random(&a, 1 + round % 50);
		b = a;
		fill_random(&b, 1 + round % 7); /* b: a plus more values, as a later read */
		ha = parsed(&a);
		hb = parsed(&b);
		for (size_t q = 0; q < sizeof(qs) / sizeof(qs[0]); q++)
			CHECK(ctl_hist_quantile(&ha, qs[q]) == (double)lp_hist_quantile(&a, qs[q]),
			      "round %d q %g: client %g, daemon %llu", round, qs[q],
			      ctl_hist_quantile(&ha, qs[q]),
			      (unsigned long long)lp_hist_quantile(&a, qs[q]));
		/* The interval's histogram is b - a, with b's maximum as the bound. */
		for (unsigned i = 0; i < LP_HIST_NBUCKETS; i++)
			d.buckets[i] = b.buckets[i] - a.buckets[i];
		d.max_ns = b.max_ns;
		CHECK(ctl_hist_delta(&hb, &ha, &hd) == 0, "delta");
		CHECK(hd.count == lp_hist_total(&d), "delta count %llu",
		      (unsigned long long)hd.count);
		for (size_t q = 0; q < sizeof(qs) / sizeof(qs[0]); q++)
			CHECK(ctl_hist_quantile(&hd, qs[q]) == (double)lp_hist_quantile(&d, qs[q]),
			      "round %d interval q %g: client %g, daemon %llu", round, qs[q],
			      ctl_hist_quantile(&hd, qs[q]),
			      (unsigned long long)lp_hist_quantile(&d, qs[q]));
		ctl_hist_free(&hd);
		/* Backwards (a reset in between) is refused, not turned into nonsense. */
		CHECK(lp_hist_total(&d) == 0 || ctl_hist_delta(&ha, &hb, &hd) == -ESTALE,
		      "reset seen");
		ctl_hist_free(&ha);
		ctl_hist_free(&hb);
	}
	{
		struct ctl_hist e;
		cJSON *bad = cJSON_Parse("{\"count\":1,\"buckets\":[[1,\"x\",1]]}");

		CHECK(ctl_hist_parse(NULL, &e) == 0 && isnan(ctl_hist_quantile(&e, 0.5)),
		      "absent histogram is empty");
		CHECK(ctl_hist_parse(bad, &e) == -EINVAL, "malformed bucket refused");
		cJSON_Delete(bad);
	}
}

static void test_formats(void)
{
	static const struct {
		char *(*fn)(char *, size_t, double);
		double v;
		const char *want;
	} cases[] = {
		{ctl_fmt_dur, 0, "0ns"},	  {ctl_fmt_dur, 812, "812ns"},
		{ctl_fmt_dur, 999.7, "1us"},	  {ctl_fmt_dur, 5888, "5.89us"},
		{ctl_fmt_dur, 6029312, "6.03ms"}, {ctl_fmt_dur, 999.6e6, "1s"},
		{ctl_fmt_dur, 1.5e9, "1.5s"},	  {ctl_fmt_dur, 1234e9, "1234s"},
		{ctl_fmt_dur, NAN, "-"},	  {ctl_fmt_dur5, 7, "7ns"},
		{ctl_fmt_dur5, 5888, "5.9us"},	  {ctl_fmt_dur5, 59000, "59us"},
		{ctl_fmt_dur5, 590000, "590us"},  {ctl_fmt_dur5, 999600, "1.0ms"},
		{ctl_fmt_dur5, 6029312, "6.0ms"}, {ctl_fmt_dur5, 4e9, "4.0s"},
		{ctl_fmt_dur5, 1234e9, "1234s"},  {ctl_fmt_num5, 0, "0.00"},
		{ctl_fmt_num5, 0.25, "0.25"},	  {ctl_fmt_num5, 23.41, "23.4"},
		{ctl_fmt_num5, 99.96, "100"},	  {ctl_fmt_num5, 1234.4, "1234"},
		{ctl_fmt_num5, 123456, "123k"},	  {ctl_fmt_num5, 12345678, "12M"},
		{ctl_fmt_num5, NAN, "-"},
	};
	char buf[32];

	for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		cases[i].fn(buf, sizeof(buf), cases[i].v);
		CHECK(!strcmp(buf, cases[i].want), "%g: got '%s', want '%s'", cases[i].v, buf,
		      cases[i].want);
	}
	CHECK(!strcmp(ctl_fmt_age(buf, sizeof(buf), 3723), "1h02m"), "age %s", buf);
}

/* A process document as GET /v1/processes/{pid} has it, with the given figures. */
static cJSON *doc(int pid, double now_s, double tracked, double oncpu_ns, double tokens,
		  double gen_ns, double futex, const struct lp_hist *rq, int threads)
{
	cJSON *d = cJSON_CreateObject(), *c, *h, *t;

	cJSON_AddNumberToObject(d, "pid", pid);
	cJSON_AddStringToObject(d, "comm", "llama-server-with-a-long-name");
	cJSON_AddStringToObject(d, "state", "running");
	cJSON_AddNumberToObject(d, "now_ns", now_s * 1e9);
	cJSON_AddNumberToObject(d, "tracked_seconds", tracked);
	c = cJSON_AddObjectToObject(d, "counters");
	cJSON_AddNumberToObject(c, "oncpu_ns", oncpu_ns);
	cJSON_AddNumberToObject(c, "decode_generation_tokens", tokens);
	cJSON_AddNumberToObject(c, "decode_generation_ns", gen_ns);
	cJSON_AddNumberToObject(c, "futex_waits", futex);
	cJSON_AddNumberToObject(c, "samples", 100);
	cJSON_AddNumberToObject(c, "samples_matmul", 75);
	cJSON_AddNumberToObject(c, "samples_barrier", 20);
	h = cJSON_AddObjectToObject(d, "histograms");
	cJSON_AddItemToObject(h, "runqueue_latency", lp_render_hist(rq));
	cJSON_AddObjectToObject(d, "ggml");
	t = cJSON_AddArrayToObject(d, "threads");
	for (int i = 0; i < threads; i++) {
		cJSON *o = cJSON_CreateObject();

		cJSON_AddNumberToObject(o, "tid", pid + i);
		cJSON_AddStringToObject(o, "comm", "worker");
		cJSON_AddNumberToObject(o, "oncpu_ns", oncpu_ns / threads);
		cJSON_AddNumberToObject(o, "futex_waits", futex / threads);
		cJSON_AddItemToArray(t, o);
	}
	return d;
}

static void test_top_rows(void)
{
	struct lp_hist rq0 = {0}, rq1;
	struct top_snap a = {calloc(2, sizeof(cJSON *)), 2}, b = {calloc(2, sizeof(cJSON *)), 2};
	struct top_thread_row *th;
	struct top_row *rows;
	struct top_layout layout;
	char line[TOP_LINE], bad[40];
	size_t n;

	add(&rq0, 5000, 99); /* before: fast */
	rq1 = rq0;
	add(&rq1, 3000000, 10); /* the interval: 10 slow wakeups */
	a.docs[0] = doc(100, 10, 10, 5e9, 100, 2e9, 50, &rq0, 2);
	a.docs[1] = doc(200, 10, 10, 1e9, 0, 0, 0, &rq0, 1);
	b.docs[0] = doc(100, 12, 12, 7e9, 120, 2.5e9, 70, &rq1, 2);
	/* pid 200 was reset in between: its counters went back */
	b.docs[1] = doc(200, 12, 1, 0.5e9, 0, 0, 0, &rq0, 1);

	CHECK(top_rows(&a, NULL, false, &rows, &n) == 0 && n == 2, "first read");
	CHECK(fabs(rows[0].v[TC_CPU] - 50) < 1e-9, "since tracked: 5 s of 10: %g",
	      rows[0].v[TC_CPU]);
	CHECK(fabs(rows[0].v[TC_TOKS] - 50) < 1e-9, "100 tokens in 2 s: %g", rows[0].v[TC_TOKS]);
	CHECK(isnan(rows[1].v[TC_TOKS]), "no tokens: nothing to show");
	CHECK(rows[0].v[TC_RQ99] == (double)lp_hist_quantile(&rq0, 0.99), "p99 since tracked");
	free(rows);

	CHECK(top_rows(&b, &a, false, &rows, &n) == 0 && n == 2, "second read");
	CHECK(fabs(rows[0].v[TC_CPU] - 100) < 1e-9, "2 s on CPU in 2 s: %g", rows[0].v[TC_CPU]);
	CHECK(fabs(rows[0].v[TC_TOKS] - 40) < 1e-9, "20 tokens in 0.5 s: %g", rows[0].v[TC_TOKS]);
	CHECK(fabs(rows[0].v[TC_FTXS] - 10) < 1e-9, "20 waits in 2 s: %g", rows[0].v[TC_FTXS]);
	CHECK(rows[0].v[TC_RQ99] > 2.9e6,
	      "the interval's p99 is the slow wakeups: %g (all-time "
	      "%llu)",
	      rows[0].v[TC_RQ99], (unsigned long long)lp_hist_quantile(&rq1, 0.99));
	CHECK(isnan(rows[0].v[TC_MM]) && isnan(rows[0].v[TC_SPIN]),
	      "no samples in the interval: no shares (%g %g)", rows[0].v[TC_MM],
	      rows[0].v[TC_SPIN]);
	CHECK(rows[1].prev == NULL && fabs(rows[1].v[TC_CPU] - 50) < 1e-9,
	      "after a reset: since the reset (%g)", rows[1].v[TC_CPU]);

	top_sort(rows, n, TC_CPU, false);
	CHECK(rows[0].pid == 100, "busiest first");
	top_sort(rows, n, TC_CPU, true);
	CHECK(rows[0].pid == 200, "reversed");
	top_sort(rows, n, TC_PID, false);
	CHECK(rows[0].pid == 100, "pid ascending");
	top_sort(rows, n, TC_TOKS, false);
	CHECK(rows[0].pid == 100, "nothing to show sorts last");

	top_layout_fit(&layout, 80);
	top_format_header(line, &layout);
	CHECK(strlen(line) <= 79 && layout.n == TC_DEFAULT_NR, "header fits 80 columns: %zu",
	      strlen(line));
	CHECK(!strncmp(line, "    PID COMMAND ", 16) && strstr(line, " MAJ/S"), "header '%s'",
	      line);
	for (size_t i = 0; i < n; i++) {
		top_format_row(line, &rows[i], &layout);
		CHECK(strlen(line) <= 79, "row fits 80 columns: '%s'", line);
	}
	/* A finding: the mark leads the PID cell, apart from COMMAND; its figure's column is
	 * flagged with its severity. */
	{
		cJSON *f = cJSON_AddObjectToObject(b.docs[0], "findings"),
		      *e = cJSON_CreateObject();
		struct top_row *marked;
		size_t nm;

		cJSON_AddStringToObject(e, "rule", "preempted");
		cJSON_AddStringToObject(e, "severity", "warning");
		cJSON_AddItemToArray(cJSON_AddArrayToObject(f, "findings"), e);
		CHECK(top_rows(&b, &a, false, &marked, &nm) == 0 && marked[0].pid == 100, "marked");
		top_layout_fit(&layout, 80);
		top_format_row(line, &marked[0], &layout);
		CHECK(marked[0].mark == '*' && marked[0].flag[TC_RQ99] == TOP_FLAG_WARNING &&
			      marked[0].flag[TC_CPU] == TOP_FLAG_NONE,
		      "preempted: a warning, flagged on RQ99");
		CHECK(!strncmp(line, "*   100 llama-ser", 17), "the mark before the PID: '%s'",
		      line);
		free(marked);
		cJSON_DeleteItemFromObject(b.docs[0], "findings");
	}
	top_layout_fit(&layout, 86);
	top_format_header(line, &layout);
	CHECK(layout.width[TC_COMM] == 15 && layout.n == TC_DEFAULT_NR && strlen(line) < 86,
	      "86 columns: COMMAND widened to a whole name first: '%s'", line);
	top_layout_fit(&layout, 150);
	top_format_header(line, &layout);
	CHECK(strlen(line) < 150 && strstr(line, " WTOK/S MODEL") && strstr(line, " WORKLOAD"),
	      "150 columns add WTOK/S, MODEL, WORKLOAD: '%s'", line);
	{
		int x, w;

		CHECK(top_layout_find(&layout, TC_WORKLOAD, &x, &w) && w == 24 &&
			      !strncmp(line + x, "WORKLOAD", 8),
		      "a column's place in the line: %d", x);
		top_layout_fit(&layout, 80);
		CHECK(!top_layout_find(&layout, TC_WORKLOAD, &x, &w), "not shown at 80");
	}
	CHECK(top_layout_parse("pid,model,WTOKS,cpu", &layout, bad, sizeof(bad)) == 0 &&
		      layout.n == 4 && layout.col[1] == TC_MODEL && layout.col[2] == TC_WTOKS,
	      "-o picks and orders columns");
	top_format_header(line, &layout);
	CHECK(!strcmp(line, "    PID MODEL                    WTOK/S  CPU%"), "-o header '%s'",
	      line);
	CHECK(top_layout_parse("pid,bogus", &layout, bad, sizeof(bad)) == -EINVAL &&
		      !strcmp(bad, "bogus") && top_layout_parse("", &layout, bad, 40) == -EINVAL,
	      "-o refuses an unknown column: %s", bad);
	CHECK(fabs(rows[0].v[TC_WTOKS] - 10) < 1e-9, "wall tokens/s: 20 tokens in 2 s: %g",
	      rows[0].v[TC_WTOKS]);
	top_layout_fit(&layout, 80);
	CHECK(top_threads(&rows[0], &th) == 2 && fabs(th[0].v[TC_CPU] - 50) < 1e-9, "threads");
	top_format_thread(line, &th[0], &layout);
	CHECK(strlen(line) <= 79 && strstr(line, "worker"), "thread row '%s'", line);
	free(th);
	free(rows);
	/* A thread exits in the interval: its CPU time shows in the "(exited)" row. */
	cJSON_DeleteItemFromArray(cJSON_GetObjectItemCaseSensitive(b.docs[0], "threads"), 1);
	CHECK(top_rows(&b, &a, false, &rows, &n) == 0, "rows again");
	top_sort(rows, n, TC_PID, false);
	CHECK(top_threads(&rows[0], &th) == 2 && th[0].tid == 100 && th[1].tid == 0 &&
		      fabs(th[0].v[TC_CPU] - 50) < 1e-9 && fabs(th[1].v[TC_CPU] - 50) < 1e-9 &&
		      fabs(th[0].v[TC_CPU] + th[1].v[TC_CPU] - rows[0].v[TC_CPU]) < 1e-9,
	      "the live thread and the exited ones add up to the process: %g + %g = %g",
	      th[0].v[TC_CPU], th[1].v[TC_CPU], rows[0].v[TC_CPU]);
	top_format_thread(line, &th[1], &layout);
	CHECK(!strncmp(line, "      - (exited)", 16), "exited row '%s'", line);
	free(th);
	free(rows);
	top_snap_free(&a);
	top_snap_free(&b);
}

static void test_top_host(void)
{
	const char *stat0 = "cpu  100 0 100 800 0 0 0 0 0 0\ncpu0 50 0 50 400 0 0 0 0 0 0\n"
			    "cpu1 50 0 50 400 0 0 0 0 0 0\nintr 1\n";
	const char *stat1 = "cpu  250 0 150 900 0 0 0 0 0 0\ncpu0 1 0 0 0 0 0 0 0 0 0\n"
			    "cpu1 1 0 0 0 0 0 0 0 0 0\n";
	struct top_host h0, h1;
	struct top_row row = {.v = {[TC_CPU] = 120}};
	char line[TOP_LINE];

	CHECK(top_host_parse(stat0, "1.50 0.75 0.25 3/200 999\n", &h0) == 0 && h0.cpus == 2 &&
		      h0.load[0] == 1.5,
	      "host parsed: %d CPUs", h0.cpus);
	CHECK(top_host_parse(stat1, "1.50 0.75 0.25 3/200 999\n", &h1) == 0, "again");
	top_format_host(line, &h1, NULL, &row, 1);
	CHECK(!strcmp(line, "host  load 1.50 0.75 0.25  2 CPUs"), "no interval yet: '%s'", line);
	/* 200 of 300 ticks busy on 2 CPUs: 133 % of one CPU, 120 of it LLM. */
	top_format_host(line, &h1, &h0, &row, 1);
	CHECK(!strcmp(line, "host  load 1.50 0.75 0.25  2 CPUs  busy 133% = LLM 120% + other 13%"),
	      "'%s'", line);
	CHECK(top_host_parse("garbage", "1 2 3", &h0) == -EINVAL, "garbage refused");
}

int main(void)
{
	test_quantiles();
	test_top_host();
	test_formats();
	test_top_rows();
	return check_done();
}
