// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* llmprofctl dump: everything llmprofd knows about one process, readable in a terminal. */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llmprof/protocol.h"
#include "llmprofctl.h"

static const struct option opts[] = {{"pid", required_argument, NULL, 'p'},
				     {"json", no_argument, NULL, 'j'},
				     {"fine", no_argument, NULL, 'f'},
				     CTL_COMMON_OPTS};

#define BAR_WIDTH 40

/* What each histogram measures, for the reader who did not write the BPF programs. */
static const struct {
	const char *name, *what;
} hist_what[] = {
	{"runqueue_latency", "runnable until running: after a wakeup, or after being preempted"},
	{"offcpu_blocked", "off CPU while sleeping (futex, I/O, sleep), until switched in again"},
	{"offcpu_preempted", "off CPU while still runnable, until switched in again"},
	{"futex_wait", "futex waits: asleep in the call (or the call, entry to return)"},
	{"futex_wait_generation", "of those, the waits that began and ended inside one "
				  "generation decode (what a token waited for)"},
	/* the engine's steps (its "step"), worded by print_step_what */
	{"decode_prompt", "calls given more than one token a sequence (prompt processing)"},
	{"decode_generation", "calls given one token a sequence: time per generation step"},
	{"matmul", "precise mode: outermost matmul calls, entry to return"},
	{"barrier", "precise mode: outermost barrier calls, entry to return"},
};

static const char *what_of(const char *name)
{
	for (size_t i = 0; i < sizeof(hist_what) / sizeof(hist_what[0]); i++)
		if (!strcmp(hist_what[i].name, name))
			return hist_what[i].what;
	return NULL;
}

static void print_bar(uint64_t count, uint64_t max)
{
	int n = max ? (int)((double)count * BAR_WIDTH / (double)max + 0.5) : 0;

	if (count && !n)
		n = 1;
	printf(" |%.*s%*s|\n", n, "########################################", BAR_WIDTH - n, "");
}

static void print_row(uint64_t lo, uint64_t hi, uint64_t count, uint64_t max)
{
	char a[32], b[32];

	ctl_fmt_dur(a, sizeof(a), (double)lo);
	if (hi == UINT64_MAX)
		snprintf(b, sizeof(b), "inf");
	else
		ctl_fmt_dur(b, sizeof(b), (double)hi);
	printf("  %9s -> %-9s %10llu", a, b, (unsigned long long)count);
	print_bar(count, max);
}

/* Power-of-two rows [2^k, 2^(k+1)) from the first non-empty to the last, like the bcc tools;
 * 2^k ns is always a bucket boundary, so each row is an exact sum of buckets. */
static int group_of(uint64_t lo)
{
	int k = -1;

	while (lo) {
		lo >>= 1;
		k++;
	}
	return k; /* -1 for the bucket of 0 ns */
}

static void print_grouped(const struct ctl_hist *h)
{
	int first = group_of(h->b[0].lo), last = group_of(h->b[h->n - 1].lo);
	uint64_t *sum = calloc((size_t)(last - first + 1), sizeof(*sum)), max = 0;
	bool open = h->b[h->n - 1].hi == UINT64_MAX;

	if (!sum)
		return;
	for (size_t i = 0; i < h->n; i++)
		sum[group_of(h->b[i].lo) - first] += h->b[i].count;
	for (int k = first; k <= last; k++)
		max = sum[k - first] > max ? sum[k - first] : max;
	for (int k = first; k <= last; k++) {
		uint64_t lo = k < 0 ? 0 : 1ULL << k, hi = k < 0 ? 1 : 1ULL << (k + 1);

		print_row(lo, open && k == last ? UINT64_MAX : hi, sum[k - first], max);
	}
	free(sum);
}

static void print_fine(const struct ctl_hist *h)
{
	uint64_t max = 0;

	for (size_t i = 0; i < h->n; i++)
		max = h->b[i].count > max ? h->b[i].count : max;
	for (size_t i = 0; i < h->n; i++)
		print_row(h->b[i].lo, h->b[i].hi, h->b[i].count, max);
}

/* The histograms the scheduler's program fills from the off-CPU stretches it takes: where
 * it took a sample of a busy thread's, they are estimates. */
static bool from_stretches(const char *name)
{
	static const char *const v[] = {"runqueue_latency", "offcpu_blocked", "offcpu_preempted",
					"futex_wait", "futex_wait_generation"};

	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++)
		if (!strcmp(v[i], name))
			return true;
	return false;
}

/* Whose off-CPU stretches were taken as a sample: the figures built from them are
 * estimates where threads is not 0, whether or not one of its gaps has ended. */
struct sampling {
	double stretches, threads;
};

/* The engine's step (its document's "step"): its name and how one is timed. */
struct step {
	const char *name, *timed, *errors;
};

static void print_histograms(const cJSON *hists, const struct sampling *sm, const struct step *st,
			     bool fine)
{
	const cJSON *e;

	printf("\nhistograms (%s)\n",
	       fine ? "every non-empty bucket of the kernel's log-linear layout"
		    : "rows per power of two; --fine for every bucket");
	cJSON_ArrayForEach(e, hists)
	{
		char s[6][32];
		struct ctl_hist h;
		const char *what = what_of(e->string);

		if (ctl_hist_parse(e, &h) < 0)
			continue;
		if (!h.n) {
			printf("%s: no values%s\n", e->string,
			       !strcmp(e->string, "matmul") || !strcmp(e->string, "barrier")
				       ? " (precise mode has not run)"
				       : "");
			ctl_hist_free(&h);
			continue;
		}
		printf("%s: count %llu  sum %s  max %s  p50 %s  p90 %s  p99 %s\n", e->string,
		       (unsigned long long)h.count, ctl_fmt_dur(s[0], 32, (double)h.sum),
		       ctl_fmt_dur(s[1], 32, (double)h.max),
		       ctl_fmt_dur(s[2], 32, ctl_num(e, "p50", NAN)),
		       ctl_fmt_dur(s[3], 32, ctl_num(e, "p90", NAN)),
		       ctl_fmt_dur(s[4], 32, ctl_num(e, "p99", NAN)));
		if (what && !strncmp(e->string, "decode_", 7))
			printf("  %s %s; timed %s\n", st->name, what, st->timed);
		else if (what)
			printf("  %s\n", what);
		if (sm->threads > 0 && from_stretches(e->string))
			printf("  estimated: from %.0f stretches of %.0f busy threads taken as a "
			       "sample, each counted as the switches it stands for, less those "
			       "since each thread's last (--stretch-sample)\n",
			       sm->stretches, sm->threads);
		printf("  %9s    %-9s %10s  distribution\n", "from", "to", "count");
		if (fine)
			print_fine(&h);
		else
			print_grouped(&h);
		ctl_hist_free(&h);
	}
}

static void print_counters(const cJSON *ctr)
{
	const cJSON *e;
	char s[32];

	printf("\ncounters (since tracked or reset)\n");
	cJSON_ArrayForEach(e, ctr)
	{
		size_t len = strlen(e->string);
		bool ns = len > 3 && !strcmp(e->string + len - 3, "_ns");

		/* null: a figure this daemon's sources do not see (futex results where waits
		 * come from the scheduler). */
		if (cJSON_IsNull(e))
			printf("  %-36s %20s  not collected\n", e->string, "-");
		if (!cJSON_IsNumber(e))
			continue;
		printf("  %-36s %20.0f%s%s\n", e->string, e->valuedouble, ns ? "  " : "",
		       ns ? ctl_fmt_dur(s, sizeof(s), e->valuedouble) : "");
	}
}

static void print_names(const char *label, const cJSON *a)
{
	const cJSON *s;

	if (!cJSON_GetArraySize(a))
		return;
	printf("      %-8s", label);
	cJSON_ArrayForEach(s, a)
	{
		if (cJSON_IsString(s))
			printf(" %s", s->valuestring);
	}
	printf("\n");
}

static void print_share(const char *label, const cJSON *share)
{
	printf("%s matmul %.1f%%, barrier %.1f%%, other %.1f%%", label,
	       100 * ctl_num(share, "matmul", 0), 100 * ctl_num(share, "barrier", 0),
	       100 * ctl_num(share, "other", 0));
}

/* "probe sites  ggml_barrier +14 (jcc), ...": where the uprobes go in each function. */
static void print_sites(const cJSON *sites)
{
	const cJSON *x;
	bool first = true;

	cJSON_ArrayForEach(x, sites)
	{
		printf("%s%s +%.0f (%s)", first ? "      probe sites " : ", ",
		       ctl_str(x, "function", "?"), ctl_num(x, "offset", 0),
		       ctl_str(x, "instruction", "?"));
		first = false;
	}
	if (!first)
		printf("\n");
}

/* The groups in the API's order, with the names a user reads. */
static const char *const groups[][2] = {
	{"matmul", "matmul"},
	{"attention", "attention"},
	{"norm", "norm"},
	{"rope", "rope"},
	{"elementwise", "elementwise"},
	{"copy", "copy"},
	{"other_ops", "other ops"},
	{"sync", "sync"},
	{"outside_ops", "outside ops"},
};

#define TOP_OPS 15

/* The rest of a line: each group's milliseconds, those above zero. */
static void print_group_ms(const cJSON *ms)
{
	char a[32];

	for (size_t i = 0, k = 0; i < sizeof(groups) / sizeof(groups[0]); i++)
		if (ctl_num(ms, groups[i][0], 0) > 0)
			printf("%s %s %s", k++ ? "," : "", groups[i][1],
			       ctl_fmt_dur(a, sizeof(a), ctl_num(ms, groups[i][0], 0) * 1e6));
	printf("\n");
}

/* "top operators": where the sampled CPU time goes, per op and per group, with the CPU
 * time per generated token (summed over threads, so it can exceed the wall time). */
static void print_ops(const cJSON *g, const cJSON *sm)
{
	const cJSON *og = cJSON_GetObjectItemCaseSensitive(g, "op_groups"),
		    *sh = cJSON_GetObjectItemCaseSensitive(og, "share"),
		    *pt = cJSON_GetObjectItemCaseSensitive(g, "per_token"),
		    *cm = cJSON_GetObjectItemCaseSensitive(pt, "cpu_ms"), *o;
	double hz = ctl_num(sm, "hz", 0), gen = ctl_num(pt, "generated", 0);
	int n = 0, total = cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(g, "ops"));
	const cJSON *pr;
	char a[32], b[32], c[32];

	printf("  top operators (%.0f samples; PER TOKEN: CPU time per generated token, %.0f "
	       "tokens)\n    %-28s %-11s %6s %8s %9s\n",
	       ctl_num(og, "samples", 0), gen, "OP", "GROUP", "SHARE", "SAMPLES", "PER TOKEN");
	cJSON_ArrayForEach(o, cJSON_GetObjectItemCaseSensitive(g, "ops"))
	{
		if (n++ == TOP_OPS)
			break;
		printf("    %-28.28s %-11s %5.1f%% %8.0f %9s\n", ctl_str(o, "op", "?"),
		       ctl_str(o, "group", "?"), 100 * ctl_num(o, "share", 0),
		       ctl_num(o, "samples", 0),
		       gen > 0 && hz > 0
			       ? ctl_fmt_dur(a, sizeof(a),
					     ctl_num(o, "generation_samples", 0) * 1e9 / hz / gen)
			       : "-");
		pr = cJSON_GetObjectItemCaseSensitive(o, "precise");
		if (cJSON_IsObject(pr)) {
			const cJSON *h = cJSON_GetObjectItemCaseSensitive(pr, "histogram");
			double calls = ctl_num(pr, "calls", 0);

			printf("      precise: %.0f calls, %s per call (p99 %s), own on-CPU %s\n",
			       calls,
			       ctl_fmt_dur(a, sizeof(a),
					   calls > 0 ? ctl_num(pr, "ns", 0) / calls : 0),
			       ctl_fmt_dur(b, sizeof(b), ctl_num(h, "p99", 0)),
			       ctl_fmt_dur(c, sizeof(c), ctl_num(pr, "oncpu_ns", 0)));
		}
	}
	if (total > TOP_OPS)
		printf("    (%d more ops; dump --json has them all)\n", total - TOP_OPS);
	/* Groups with no samples are left out. */
	printf("  groups     ");
	for (size_t i = 0, k = 0; i < sizeof(groups) / sizeof(groups[0]); i++)
		if (ctl_num(sh, groups[i][0], 0) > 0)
			printf("%s %s %.1f%%", k++ ? "," : "", groups[i][1],
			       100 * ctl_num(sh, groups[i][0], 0));
	printf("\n");
	if (gen > 0) {
		printf("  per token   %s wall; CPU:",
		       ctl_fmt_dur(a, sizeof(a), ctl_num(pt, "wall_ms", 0) * 1e6));
		print_group_ms(cm);
	}
	pr = cJSON_GetObjectItemCaseSensitive(pt, "precise");
	if (cJSON_IsObject(pr)) {
		printf("  per token, precise (%.0f tokens, %.0f ops probed; exact own CPU, in the "
		       "windows, probes' cost included):",
		       ctl_num(pr, "generated", 0), ctl_num(pr, "ops_probed", 0));
		print_group_ms(cJSON_GetObjectItemCaseSensitive(pr, "cpu_ms"));
	}
}

/* How the samples' ops were found (ggml.unwind), and a warning where the stack scan
 * decided enough of them that the shares are not to be trusted. */
static void print_unwind(const cJSON *g)
{
	const cJSON *u = cJSON_GetObjectItemCaseSensitive(g, "unwind"),
		    *by = cJSON_GetObjectItemCaseSensitive(u, "by"),
		    *fb = cJSON_GetObjectItemCaseSensitive(u, "fallbacks"), *x, *ow;
	double n = ctl_num(u, "samples", 0), op, many;
	const char *why = NULL;
	double most = 0;

	if (!cJSON_IsObject(u) || n <= 0)
		return;
	printf("  unwound     %.1f%% of the samples by the instruction pointer or .eh_frame; "
	       "stack scan %.1f%%, neither %.1f%%\n",
	       100 * ctl_num(u, "unwound_share", 0), 100 * ctl_num(by, "scan", 0) / n,
	       100 * ctl_num(by, "none", 0) / n);
	cJSON_ArrayForEach(x, fb)
	{
		if (cJSON_IsNumber(x) && x->valuedouble > most) {
			most = x->valuedouble;
			why = x->string;
		}
	}
	if (why)
		printf("              walks given up: %.0f, most for %s\n",
		       ctl_num(by, "scan", 0) + ctl_num(by, "none", 0), why);
	if (!ctl_true(u, "trustworthy"))
		printf("              NOT TRUSTWORTHY: the stack scan placed %.1f%% of the "
		       "samples, and it can take a stale return address for a live frame; the "
		       "shares below may be wrong by as much\n",
		       100 * ctl_num(u, "scan_share", 0));
	/* torch: the OpenMP workers' samples, whose own stacks hold no op */
	ow = cJSON_GetObjectItemCaseSensitive(u, "openmp_workers");
	op = ctl_num(ow, "region_op", 0);
	many = ctl_num(ow, "regions_open", 0) + ctl_num(ow, "none_open", 0);
	if (op + many > 0)
		printf("  workers     %.0f samples of OpenMP workers given the op that opened "
		       "their region; %.0f (%.1f%%) whose region's opener was not found, no "
		       "op: counted outside ops\n",
		       op, many, 100 * many / n);
}

/* What precise windows measured, each figure saying what it counts: calls and wall time
 * inside them (every thread's, asleep or not), shares of the CPU time in the windows
 * (exact from the probes, beside the samples of the same windows), and what the probes
 * cost the engine (its decode rate inside and outside the windows). */
static void print_windows(const cJSON *pr, const cJSON *pm, const cJSON *pb, const struct step *st)
{
	const cJSON *gen = cJSON_GetObjectItemCaseSensitive(pr, "generation");
	double in = ctl_num(gen, "tokens_per_s_inside", 0),
	       out = ctl_num(gen, "tokens_per_s_outside", 0);
	char s[3][32];

	if (in > 0) {
		printf("              generation in %s %s tokens/s inside the windows "
		       "(%.0f tokens)",
		       st->name, ctl_fmt_num5(s[0], 32, in), ctl_num(gen, "tokens_inside", 0));
		if (out > 0)
			printf(", %s outside: the probes %s it %.0f%%", ctl_fmt_num5(s[1], 32, out),
			       in < out ? "slowed" : "sped", 100 * fabs(1 - in / out));
		printf("\n");
	}
	printf("              matmul %.0f calls, %s inside them (wall, all threads), %s on CPU "
	       "outside barriers\n",
	       ctl_num(pm, "calls", 0), ctl_fmt_dur(s[0], 32, ctl_num(pm, "ns", 0)),
	       ctl_fmt_dur(s[1], 32, ctl_num(pm, "exclusive_oncpu_ns", 0)));
	printf("              barrier %.0f calls, %s inside them (wall, all threads): spin %s, "
	       "sleep %s\n",
	       ctl_num(pb, "calls", 0), ctl_fmt_dur(s[0], 32, ctl_num(pb, "ns", 0)),
	       ctl_fmt_dur(s[1], 32, ctl_num(pb, "spin_ns", 0)),
	       ctl_fmt_dur(s[2], 32, ctl_num(pb, "sleep_ns", 0)));
	printf("              shares of its CPU time in the windows:\n");
	print_share("                exact (each call timed): ",
		    cJSON_GetObjectItemCaseSensitive(pr, "share"));
	printf("\n                sampled (%6.0f samples):", ctl_num(pr, "samples", 0));
	print_share("", cJSON_GetObjectItemCaseSensitive(pr, "sampled_share"));
	printf("\n              (the probes' own time is in both: a return probe's trap is "
	       "timed inside the call it ends,\n               and sampled outside it, on the "
	       "kernel's return trampoline: other)\n");
}

/* CPython in the process: its version, its samples outside ops by Python function (the
 * first ten), its GIL waits. */
static void print_python(const cJSON *py)
{
	const cJSON *out = cJSON_GetObjectItemCaseSensitive(py, "outside_ops"),
		    *gil = cJSON_GetObjectItemCaseSensitive(py, "gil"), *f;
	char s[32];
	int n = 0;

	if (!cJSON_IsObject(py))
		return;
	printf("\npython: CPython %s, frames %s\n",
	       ctl_str(py, "version", "of a version not stated"), ctl_str(py, "frames", "?"));
	printf("  outside ops by Python function (%.0f samples; %.0f in threads running no "
	       "Python):\n",
	       ctl_num(out, "samples", 0), ctl_num(out, "no_python_samples", 0));
	cJSON_ArrayForEach(f, cJSON_GetObjectItemCaseSensitive(out, "functions"))
	{
		const char *file = ctl_str(f, "file", "?"), *base = strrchr(file, '/');

		if (n++ == 10)
			break;
		printf("    %-50s %5.1f%%  %s:%.0f\n", ctl_str(f, "function", "?"),
		       100 * ctl_num(f, "share", 0), base ? base + 1 : file, ctl_num(f, "line", 0));
	}
	printf("  GIL: %.0f waits, %s waiting\n", ctl_num(gil, "waits", 0),
	       ctl_fmt_dur(s, sizeof(s), ctl_num(gil, "wait_ns", 0)));
}

/* torch's OpenMP regions: how many opened, and the wall time from each opening to its
 * close, on the thread that opened it. */
static void print_openmp(const cJSON *omp)
{
	char s[32];

	if (!cJSON_IsObject(omp))
		return;
	if (ctl_str(omp, "error", NULL)) {
		printf("  openmp      regions not probed: %s\n", ctl_str(omp, "error", ""));
		return;
	}
	if (!strcmp(ctl_str(omp, "workers_by", ""), "thread_data")) {
		printf("  openmp      workers' regions found from their thread data (GCC's "
		       "runtime): no probes\n");
		return;
	}
	printf("  openmp      %.0f parallel regions, %s from their opening to their close "
	       "(%.0f probes)\n",
	       ctl_num(omp, "regions", 0), ctl_fmt_dur(s, sizeof(s), ctl_num(omp, "region_ns", 0)),
	       ctl_num(omp, "region_probes", 0));
}

static void print_engine(const char *engine, const cJSON *g, const struct step *st)
{
	const cJSON *o, *tok = cJSON_GetObjectItemCaseSensitive(g, "tokens"),
			*pt = cJSON_GetObjectItemCaseSensitive(tok, "prompt"),
			*gt = cJSON_GetObjectItemCaseSensitive(tok, "generation"),
			*sm = cJSON_GetObjectItemCaseSensitive(g, "sampled"),
			*pr = cJSON_GetObjectItemCaseSensitive(g, "precise"),
			*pm = cJSON_GetObjectItemCaseSensitive(pr, "matmul"),
			*pb = cJSON_GetObjectItemCaseSensitive(pr, "barrier");
	char s[6][32];

	if (!cJSON_IsObject(g)) {
		printf("\n%s: none mapped (tracked by llmprofd's --pid, --comm or --exe "
		       "setting)\n",
		       engine);
		return;
	}
	printf("\n%s\n  objects and the functions found in them (the probe points)\n", engine);
	cJSON_ArrayForEach(o, cJSON_GetObjectItemCaseSensitive(g, "objects"))
	{
		printf("    %s%s\n", ctl_str(o, "path", "?"),
		       ctl_true(o, "stripped") ? " (stripped: .dynsym only)" : "");
		print_names("matmul", cJSON_GetObjectItemCaseSensitive(o, "matmul"));
		print_names("barrier", cJSON_GetObjectItemCaseSensitive(o, "barrier"));
		print_names("decode", cJSON_GetObjectItemCaseSensitive(o, "decode"));
		print_sites(cJSON_GetObjectItemCaseSensitive(o, "probe_sites"));
		printf("      ops: %.0f op functions; attribution: %s\n",
		       ctl_num(o, "op_functions", 0), ctl_str(o, "op_attribution", "?"));
		if (ctl_str(o, "decode_probes", NULL))
			printf("      %s probes: %s\n", st->name, ctl_str(o, "decode_probes", ""));
	}
	printf("  not found in any object:%s",
	       cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(g, "missing")) ? "" : " none");
	cJSON_ArrayForEach(o, cJSON_GetObjectItemCaseSensitive(g, "missing"))
	{
		if (cJSON_IsString(o))
			printf(" %s", o->valuestring);
	}
	printf("\n  tokens      prompt %.0f in %.0f calls (%s/s), generation %.0f (%s/s, %s per "
	       "token), %.0f %s\n",
	       ctl_num(pt, "tokens", 0), ctl_num(pt, "calls", 0),
	       ctl_fmt_num5(s[0], 32, ctl_num(pt, "tokens_per_s", 0)), ctl_num(gt, "tokens", 0),
	       ctl_fmt_num5(s[1], 32, ctl_num(gt, "tokens_per_s", 0)),
	       ctl_fmt_dur(s[2], 32, ctl_num(gt, "ms_per_token", 0) * 1e6),
	       ctl_num(tok, "decode_errors", 0), st->errors);
	printf("              generation in %s %s/s; by the wall clock, sampling "
	       "included, %s/s (%s per token)\n",
	       st->name, ctl_fmt_num5(s[0], 32, ctl_num(gt, "tokens_per_s", 0)),
	       ctl_fmt_num5(s[1], 32, ctl_num(gt, "wall_tokens_per_s", 0)),
	       ctl_fmt_dur(s[2], 32, ctl_num(gt, "wall_ms_per_token", 0) * 1e6));
	printf("  sampled     %.0f samples at %.0f Hz per %s, since tracked:",
	       ctl_num(sm, "samples", 0), ctl_num(sm, "hz", 0),
	       strcmp(ctl_str(sm, "sampler", ""), "thread") ? "CPU" : "thread");
	print_share("", cJSON_GetObjectItemCaseSensitive(sm, "share"));
	printf("; barrier off-CPU estimate %s\n",
	       ctl_fmt_dur(s[0], 32, ctl_num(sm, "barrier_offcpu_estimate_ns", 0)));
	if (ctl_num(sm, "not_taken", 0) > 0)
		printf("              %.0f more samples the kernel did not take while its threads "
		       "ran (another BPF\n              program on the CPU, a timer a period "
		       "late): "
		       "missing from the shares\n",
		       ctl_num(sm, "not_taken", 0));
	if (cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(sm, "coverage")))
		printf("              the samples cover %.1f%% of its on-CPU time%s\n",
		       100 * ctl_num(sm, "coverage", 0),
		       ctl_num(sm, "coverage", 1) < 0.9
			       ? ": this host's timer skips periods; --sampler thread counts each "
				 "thread's own CPU time"
			       : "");
	print_openmp(cJSON_GetObjectItemCaseSensitive(g, "openmp"));
	print_unwind(g);
	print_ops(g, sm);
	printf("  precise     %s, %.0f functions probed, %.0f windows, %.1f s\n",
	       ctl_true(pr, "active") ? "on" : "off", ctl_num(pr, "functions_probed", 0),
	       ctl_num(pr, "windows", 0), ctl_num(pr, "seconds", 0));
	if (ctl_num(pr, "windows", 0) > 0)
		print_windows(pr, pm, pb, st);
}

static void print_futex(const cJSON *f, const struct sampling *sm)
{
	const cJSON *w;
	char a[32], b[32];

	if (!cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(f, "top")))
		return;
	printf("\nfutex words (the longest-waited of %.0f)\n  %-18s %8s %9s %9s\n",
	       ctl_num(f, "addresses", 0), "ADDRESS", "WAITS", "TOTAL", "MAX");
	if (sm->threads > 0)
		printf("  (waits and totals estimated from a sample of busy threads' waits; max "
		       "of those taken)\n");
	cJSON_ArrayForEach(w, cJSON_GetObjectItemCaseSensitive(f, "top"))
	{
		printf("  %-18s %8.0f %9s %9s\n", ctl_str(w, "uaddr", "?"), ctl_num(w, "waits", 0),
		       ctl_fmt_dur(a, sizeof(a), ctl_num(w, "wait_ns", 0)),
		       ctl_fmt_dur(b, sizeof(b), ctl_num(w, "max_ns", 0)));
	}
}

static void print_threads(const cJSON *threads)
{
	const cJSON *t;
	char s[6][16];

	printf("\nthreads (%d live)\n  %7s %-15s %6s %6s %6s %6s %6s %6s %5s %6s %6s %6s %6s\n",
	       cJSON_GetArraySize(threads), "TID", "COMM", "ONCPU", "RUNQ", "BLOCK", "PREEMP",
	       "VCSW", "IVCSW", "MIGR", "FUTEX", "FUTEXT", "MINFLT", "MAJFLT");
	cJSON_ArrayForEach(t, threads)
	{
		printf("  %7.0f %-15s %6s %6s %6s %6s %6.0f %6.0f %5.0f %6.0f %6s %6.0f %6.0f\n",
		       ctl_num(t, "tid", 0), ctl_str(t, "comm", "?"),
		       ctl_fmt_dur5(s[0], 16, ctl_num(t, "oncpu_ns", 0)),
		       ctl_fmt_dur5(s[1], 16, ctl_num(t, "runqueue_ns", 0)),
		       ctl_fmt_dur5(s[2], 16, ctl_num(t, "offcpu_blocked_ns", 0)),
		       ctl_fmt_dur5(s[3], 16, ctl_num(t, "offcpu_preempted_ns", 0)),
		       ctl_num(t, "voluntary_switches", 0), ctl_num(t, "involuntary_switches", 0),
		       ctl_num(t, "migrations", 0), ctl_num(t, "futex_waits", 0),
		       ctl_fmt_dur5(s[4], 16, ctl_num(t, "futex_wait_ns", 0)),
		       ctl_num(t, "page_faults_minor", 0), ctl_num(t, "page_faults_major", 0));
	}
}

/* Who it is: command line, workload, cgroup and the model it maps. */
static void print_who(const cJSON *d)
{
	const cJSON *m = cJSON_GetObjectItemCaseSensitive(d, "model");

	printf("cmdline %s\nworkload %s", ctl_str(d, "cmdline", "(unknown)"),
	       ctl_str(d, "workload", "?"));
	if (cJSON_IsString(cJSON_GetObjectItemCaseSensitive(d, "unit")))
		printf(", unit %s", ctl_str(d, "unit", ""));
	if (cJSON_IsString(cJSON_GetObjectItemCaseSensitive(d, "container")))
		printf(", container %.12s", ctl_str(d, "container", ""));
	if (cJSON_IsString(cJSON_GetObjectItemCaseSensitive(d, "pod")))
		printf(", pod %s", ctl_str(d, "pod", ""));
	printf(", cgroup %s\n", ctl_str(d, "cgroup", "(unknown)"));
	if (cJSON_IsObject(m))
		printf("model %s (%s, %s, %.0f MB) %s\n", ctl_str(m, "name", "?"),
		       ctl_str(m, "architecture", "?"), ctl_str(m, "type", "?"),
		       ctl_num(m, "bytes", 0) / 1e6, ctl_str(m, "path", ""));
	else
		printf("model none mapped yet\n");
}

/* Its requests in one line: read from llama_decode's batches (llmprofctl requests). */
static void print_requests(const cJSON *rq, double pid)
{
	const cJSON *h = cJSON_GetObjectItemCaseSensitive(rq, "histograms");
	const cJSON *ttft = cJSON_GetObjectItemCaseSensitive(h, "ttft");
	const cJSON *tpot = cJSON_GetObjectItemCaseSensitive(h, "tpot");
	double decodes = ctl_num(rq, "decodes", 0);
	char s[4][32];

	if (!cJSON_IsObject(rq))
		return;
	printf("requests    %.0f over, %.0f in flight; time to first token p50 %s p99 %s, per "
	       "output token p50 %s p99 %s; %.2f sequences a decode (llmprofctl requests --pid "
	       "%.0f)\n",
	       ctl_num(rq, "requests", 0), ctl_num(rq, "in_flight", 0),
	       ctl_num(ttft, "count", 0) ? ctl_fmt_dur(s[0], 32, ctl_num(ttft, "p50", 0)) : "-",
	       ctl_num(ttft, "count", 0) ? ctl_fmt_dur(s[1], 32, ctl_num(ttft, "p99", 0)) : "-",
	       ctl_num(tpot, "count", 0) ? ctl_fmt_dur(s[2], 32, ctl_num(tpot, "p50", 0)) : "-",
	       ctl_num(tpot, "count", 0) ? ctl_fmt_dur(s[3], 32, ctl_num(tpot, "p99", 0)) : "-",
	       decodes ? ctl_num(rq, "sequences", 0) / decodes : 0, pid);
}

static void print_dump(const struct ctl *c, const cJSON *d, void *arg)
{
	bool fine = *(const bool *)arg;

	double uid = ctl_num(d, "uid", -1);
	struct sampling sm = {
		.stretches = ctl_num_path(d, "counters", "offcpu_stretches_sampled", 0),
		.threads = ctl_num_path(d, "counters", "offcpu_sampled_threads", 0),
	};
	const cJSON *g = ctl_engine_doc(d), *step = cJSON_GetObjectItemCaseSensitive(g, "step");
	struct step st = {ctl_str(step, "name", "llama_decode"),
			  ctl_str(step, "timed", "entry to return"),
			  ctl_str(step, "errors", "decode errors")};
	char age[32];

	(void)c;
	printf("pid %.0f %s, %s, uid ", ctl_num(d, "pid", 0), ctl_str(d, "comm", "?"),
	       ctl_str(d, "state", "?"));
	if (uid < 0)
		printf("unknown");
	else
		printf("%.0f", uid);
	printf(", found by %s, tracked %s", ctl_str(d, "matched_by", "?"),
	       ctl_fmt_age(age, sizeof(age), ctl_num(d, "tracked_seconds", -1)));
	if (!strcmp(ctl_str(d, "state", ""), "exited"))
		printf(", exited %s ago",
		       ctl_fmt_age(age, sizeof(age), ctl_num(d, "exited_seconds_ago", -1)));
	printf("%s\nexe %s\n",
	       ctl_true(d, "data_lost") ? ", SOME DATA LOST (its exit record was dropped)" : "",
	       ctl_str(d, "exe", "(unknown)"));
	print_who(d);
	print_engine(ctl_str(d, "engine", "ggml"), g, &st);
	print_python(cJSON_GetObjectItemCaseSensitive(d, "python"));
	print_requests(cJSON_GetObjectItemCaseSensitive(d, "requests"), ctl_num(d, "pid", 0));
	print_counters(cJSON_GetObjectItemCaseSensitive(d, "counters"));
	print_histograms(cJSON_GetObjectItemCaseSensitive(d, "histograms"), &sm, &st, fine);
	print_futex(cJSON_GetObjectItemCaseSensitive(d, "futex"), &sm);
	print_threads(cJSON_GetObjectItemCaseSensitive(d, "threads"));
}

static int exec(struct ctl *c, int argc, char **argv)
{
	int pid = 0, opt, status = CTL_OK;
	bool json = false, fine = false;
	char path[64];

	while ((opt = ctl_getopt(c, &ctl_cmd_dump, argc, argv, &status)) != -1) {
		if (opt == -2)
			return status;
		if (opt == 'p' && ctl_parse_pid(c, &ctl_cmd_dump, optarg, &pid))
			return CTL_USAGE;
		json |= opt == 'j';
		fine |= opt == 'f';
	}
	if (ctl_process_path(c, &ctl_cmd_dump, pid, NULL, path, sizeof(path)))
		return CTL_USAGE;
	return ctl_show(c, path, json, print_dump, &fine);
}

const struct ctl_cmd ctl_cmd_dump = {
	.name = "dump",
	.usage = "--pid PID [--json] [--fine]",
	.summary = "everything llmprofd knows about one process",
	.help = "Prints the process's ggml objects and the functions probed in them, tokens, "
		"sampled and\nprecise matmul/barrier shares, every counter, every histogram as "
		"text bars with bounds,\ncount and percentiles, the longest-waited futex words, "
		"and "
		"per-thread detail. Counters and\nhistograms run since the process was first "
		"tracked (or reset); percentiles are within 6.25%.\n\n"
		"Options:\n"
		"  -p, --pid PID   the process\n"
		"  -j, --json      the API document GET " LP_ROUTE_PROCESSES "/PID unchanged\n"
		"  -f, --fine      every bucket of the histograms instead of one row per power of "
		"two\n\n"
		"Examples:\n"
		"  llmprofctl dump --pid 4242 | less\n"
		"  llmprofctl dump --pid 4242 --json | jq .histograms.runqueue_latency.p99\n",
	.shortopt = "p:jf",
	.longopts = opts,
	.exec = exec,
};
