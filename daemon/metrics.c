// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* Prometheus text exposition of a report: one family per histogram kind and per counter,
 * labelled by process; then the daemon's own health (losses, map fill, features). */
#include "metrics.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hist.h"
#include "render.h"

#ifndef LLMPROF_VERSION
#define LLMPROF_VERSION "0"
#endif

static const char *const hist_help[LP_H_NR] = {
	[LP_H_RUNQ] = "Time threads waited runnable for a CPU (run-queue latency)",
	[LP_H_OFF_BLOCKED] = "Off-CPU time of threads that blocked (slept)",
	[LP_H_OFF_PREEMPTED] = "Off-CPU time of threads that were preempted while runnable",
	[LP_H_FUTEX] = "Futex wait syscalls, entry to return",
	[LP_H_DECODE_PROMPT] = "llama_decode calls given more than one token (prompt processing)",
	[LP_H_DECODE_GEN] = "llama_decode calls given one token (generation)",
	[LP_H_MATMUL] = "Outermost ggml matmul calls, entry to return (precise mode only)",
	[LP_H_BARRIER] = "Outermost ggml barrier calls, entry to return (precise mode only)",
};

/* Histograms that stay empty unless the process runs ggml are left out until they count. */
static bool hist_always(int kind)
{
	return kind <= LP_H_FUTEX;
}

/* A counter family: several rows may share a name and differ in one extra label. */
struct counter_row {
	const char *name; /* without _total */
	const char *help;
	const char *label; /* extra label name, or NULL */
	const char *value;
	int ctr;      /* enum lp_counter; -1 for samples outside matmul and barrier */
	double scale; /* to base units: 1e-9 for nanoseconds */
};

static const struct counter_row counters[] = {
	{"llmprof_oncpu_seconds", "CPU time of the process's threads", NULL, NULL, LP_C_ONCPU_NS,
	 1e-9},
	{"llmprof_context_switches",
	 "Context switches: voluntary (blocked) or involuntary "
	 "(preempted)",
	 "kind", "voluntary", LP_C_NVCSW, 1},
	{"llmprof_context_switches", NULL, "kind", "involuntary", LP_C_NIVCSW, 1},
	{"llmprof_migrations", "Threads switched in on another CPU than they last ran on", NULL,
	 NULL, LP_C_MIGRATIONS, 1},
	{"llmprof_futex_wait_results",
	 "Futex waits that timed out or returned at once because "
	 "the value had changed",
	 "result", "timedout", LP_C_FUTEX_TIMEDOUT, 1},
	{"llmprof_futex_wait_results", NULL, "result", "eagain", LP_C_FUTEX_EAGAIN, 1},
	{"llmprof_futex_wait_kinds", "Futex waits by operation beyond plain FUTEX_WAIT", "kind",
	 "lock_pi", LP_C_FUTEX_LOCK_PI, 1},
	{"llmprof_futex_wait_kinds", NULL, "kind", "waitv", LP_C_FUTEX_WAITV, 1},
	{"llmprof_page_faults", "User page faults: minor (no I/O) or major (I/O)", "kind", "minor",
	 LP_C_FAULTS_MIN, 1},
	{"llmprof_page_faults", NULL, "kind", "major", LP_C_FAULTS_MAJ, 1},
	{"llmprof_decode_calls", "llama_decode calls, by phase", "phase", "prompt",
	 LP_C_DECODE_PROMPT_CALLS, 1},
	{"llmprof_decode_calls", NULL, "phase", "generation", LP_C_DECODE_GEN_CALLS, 1},
	{"llmprof_decode_tokens", "Tokens given to llama_decode, by phase", "phase", "prompt",
	 LP_C_DECODE_PROMPT_TOKENS, 1},
	{"llmprof_decode_tokens", NULL, "phase", "generation", LP_C_DECODE_GEN_CALLS, 1},
	{"llmprof_decode_seconds", "Wall time inside llama_decode, by phase", "phase", "prompt",
	 LP_C_DECODE_PROMPT_NS, 1e-9},
	{"llmprof_decode_seconds", NULL, "phase", "generation", LP_C_DECODE_GEN_NS, 1e-9},
	{"llmprof_decode_errors", "llama_decode calls that returned non-zero", NULL, NULL,
	 LP_C_DECODE_ERRORS, 1},
	{"llmprof_cpu_samples", "cpu-clock samples of the process by where its thread was",
	 "region", "matmul", LP_C_SAMPLES_MATMUL, 1},
	{"llmprof_cpu_samples", NULL, "region", "barrier", LP_C_SAMPLES_BARRIER, 1},
	{"llmprof_cpu_samples", NULL, "region", "other", -1, 1},
	{"llmprof_barrier_offcpu_estimate_seconds",
	 "Off-CPU time of threads switched out inside "
	 "a barrier (always on)",
	 NULL, NULL, LP_C_BARRIER_OFF_EST_NS, 1e-9},
	{"llmprof_precise_calls", "Outermost matmul and barrier calls (precise mode)", "function",
	 "matmul", LP_C_MATMUL_CALLS, 1},
	{"llmprof_precise_calls", NULL, "function", "barrier", LP_C_BARRIER_CALLS, 1},
	{"llmprof_precise_seconds", "Wall time in matmul and barrier calls (precise mode)",
	 "function", "matmul", LP_C_MATMUL_NS, 1e-9},
	{"llmprof_precise_seconds", NULL, "function", "barrier", LP_C_BARRIER_NS, 1e-9},
	{"llmprof_precise_matmul_exclusive_oncpu_seconds",
	 "On-CPU time in matmul calls less the "
	 "barriers called from inside (precise mode)",
	 NULL, NULL, LP_C_MATMUL_EXCL_ONCPU_NS, 1e-9},
	{"llmprof_precise_barrier_offcpu_seconds",
	 "Off-CPU (sleeping) time inside barrier calls "
	 "(precise mode); the rest of the barrier time is spinning",
	 NULL, NULL, LP_C_BARRIER_OFF_NS, 1e-9},
};

/* A label value with \, " and newline escaped, as the exposition format wants. */
static void put_escaped(FILE *f, const char *s)
{
	for (; s && *s; s++) {
		if (*s == '\\')
			fputs("\\\\", f);
		else if (*s == '"')
			fputs("\\\"", f);
		else if (*s == '\n')
			fputs("\\n", f);
		else
			fputc(*s, f);
	}
}

static void put_labels(FILE *f, const struct lp_proc_view *v)
{
	const struct lp_target *t = v->target;

	fprintf(f, "pid=\"%d\",comm=\"", (int)t->pid);
	put_escaped(f, t->comm);
	fputs("\",exe=\"", f);
	put_escaped(f, t->exe);
	fputc('"', f);
}

static void put_family(FILE *f, const char *name, const char *type, const char *help)
{
	fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void put_hist(FILE *f, const char *name, const struct lp_proc_view *v,
		     const struct lp_hist *h)
{
	uint64_t cum = 0, total = lp_hist_total(h);
	unsigned b = 0;

	for (int e = LP_METRICS_LE_MIN_EXP; e <= LP_METRICS_LE_MAX_EXP; e++) {
		uint64_t bound = 1ULL << e;

		/* 2^e ns is a bucket boundary: everything below it, exactly. */
		while (b < LP_HIST_NBUCKETS && lp_hist_upper(b) <= bound)
			cum += h->buckets[b++];
		fprintf(f, "%s_bucket{", name);
		put_labels(f, v);
		fprintf(f, ",le=\"%.12g\"} %llu\n", (double)bound * 1e-9, (unsigned long long)cum);
	}
	fprintf(f, "%s_bucket{", name);
	put_labels(f, v);
	fprintf(f, ",le=\"+Inf\"} %llu\n%s_sum{", (unsigned long long)total, name);
	put_labels(f, v);
	fprintf(f, "} %.9g\n%s_count{", (double)h->sum_ns * 1e-9, name);
	put_labels(f, v);
	fprintf(f, "} %llu\n", (unsigned long long)total);
}

static int compare_views(const void *a, const void *b)
{
	const struct lp_proc_view *x = *(const struct lp_proc_view *const *)a;
	const struct lp_proc_view *y = *(const struct lp_proc_view *const *)b;
	uint64_t cx = x->stats.ctr[LP_C_ONCPU_NS], cy = y->stats.ctr[LP_C_ONCPU_NS];

	if (x->target->exited != y->target->exited)
		return x->target->exited ? 1 : -1;
	return cx < cy ? 1 : cx > cy ? -1 : x->target->pid - y->target->pid;
}

static uint64_t counter_value(const struct lp_proc_view *v, int ctr)
{
	const __u64 *c = v->stats.ctr;

	if (ctr >= 0)
		return c[ctr];
	/* Samples outside matmul and barrier. */
	return c[LP_C_SAMPLES] > c[LP_C_SAMPLES_MATMUL] + c[LP_C_SAMPLES_BARRIER]
		       ? c[LP_C_SAMPLES] - c[LP_C_SAMPLES_MATMUL] - c[LP_C_SAMPLES_BARRIER]
		       : 0;
}

/* CPU time by op group and by op, estimated from samples (each stands for 1/hz s). Per op:
 * the LP_METRICS_OPS ops chosen once per process (lp_ggml_metrics_ops), the rest summed as
 * op="other"; so at most 11 series per process, each only growing. */
static void put_ops(FILE *f, const struct lp_proc_view *const *v, size_t n, uint32_t hz)
{
	uint64_t g[LP_G_KEYS];

	if (!hz)
		return;
	put_family(f, "llmprof_op_group_cpu_seconds_total", "counter",
		   "Sampled CPU time by ggml op group; sync: in barriers (ggml's, OpenMP's); "
		   "outside_ops: the rest of the process");
	for (size_t i = 0; i < n; i++) {
		const struct lp_ggml_proc *gp = v[i]->target->ggml;

		if (!gp || !v[i]->ops)
			continue;
		lp_op_group_counts(&gp->ops, v[i]->ops, false, g);
		for (int k = 0; k < LP_G_KEYS; k++) {
			fputs("llmprof_op_group_cpu_seconds_total{", f);
			put_labels(f, v[i]);
			fprintf(f, ",group=\"%s\"} %.9g\n", lp_op_group_key(k), (double)g[k] / hz);
		}
	}
	put_family(f, "llmprof_op_cpu_seconds_total", "counter",
		   "Sampled CPU time by ggml op: the 10 leading ops of the process by name, "
		   "chosen once it has 1000 samples, the rest as op=\"other\"");
	for (size_t i = 0; i < n; i++) {
		const struct lp_ggml_proc *gp = v[i]->target->ggml;
		uint64_t rest = 0;

		if (!gp || !v[i]->ops || !gp->metrics_ops_chosen)
			continue;
		for (size_t k = 0; k < gp->ops.n && k < LP_MAX_OPS; k++) {
			if (!gp->metrics_op[k]) {
				rest += v[i]->ops->all[k];
				continue;
			}
			fputs("llmprof_op_cpu_seconds_total{", f);
			put_labels(f, v[i]);
			fputs(",op=\"", f);
			put_escaped(f, gp->ops.v[k].name);
			fprintf(f, "\"} %.9g\n", (double)v[i]->ops->all[k] / hz);
		}
		fputs("llmprof_op_cpu_seconds_total{", f);
		put_labels(f, v[i]);
		fprintf(f, ",op=\"other\"} %.9g\n", (double)rest / hz);
	}
}

static void put_processes(FILE *f, const struct lp_proc_view *const *v, size_t n)
{
	char name[128];

	put_family(
		f, "llmprof_process_running", "gauge",
		"1 while the process runs, 0 once it has exited (kept for the retention period)");
	for (size_t i = 0; i < n; i++) {
		fputs("llmprof_process_running{", f);
		put_labels(f, v[i]);
		fprintf(f, "} %d\n", !v[i]->target->exited);
	}
	put_family(f, "llmprof_process_threads", "gauge", "Live threads of the process");
	for (size_t i = 0; i < n; i++) {
		fputs("llmprof_process_threads{", f);
		put_labels(f, v[i]);
		fprintf(f, "} %zu\n", v[i]->nthreads);
	}
	put_family(f, "llmprof_precise_active", "gauge",
		   "1 while precise mode probes every matmul and barrier call of the process");
	for (size_t i = 0; i < n; i++) {
		fputs("llmprof_precise_active{", f);
		put_labels(f, v[i]);
		fprintf(f, "} %d\n", v[i]->target->ggml && v[i]->target->ggml->precise_on);
	}

	for (int k = 0; k < LP_H_NR; k++) {
		snprintf(name, sizeof(name), "llmprof_%s_seconds", lp_hist_names[k]);
		put_family(f, name, "histogram", hist_help[k]);
		for (size_t i = 0; i < n; i++) {
			const struct lp_hist *h = &v[i]->stats.hist[k];

			if (hist_always(k) || lp_hist_total(h))
				put_hist(f, name, v[i], h);
		}
	}

	for (size_t c = 0; c < sizeof(counters) / sizeof(counters[0]); c++) {
		const struct counter_row *row = &counters[c];

		snprintf(name, sizeof(name), "%s_total", row->name);
		if (row->help)
			put_family(f, name, "counter", row->help);
		for (size_t i = 0; i < n; i++) {
			fprintf(f, "%s{", name);
			put_labels(f, v[i]);
			if (row->label)
				fprintf(f, ",%s=\"%s\"", row->label, row->value);
			fprintf(f, "} %.9g\n", (double)counter_value(v[i], row->ctr) * row->scale);
		}
	}
}

/* One series per rule, whatever the number of processes: how many running processes it
 * fires for (`llmprofctl doctor` says which and why). */
static void put_findings(FILE *f, const struct lp_report *r)
{
	size_t count[LP_RULE_NR] = {0};

	for (size_t i = 0; i < r->nprocs; i++) {
		const struct lp_findings *x = r->procs[i].findings;

		for (size_t k = 0; x && !r->procs[i].target->exited && k < x->n; k++)
			count[x->f[k].rule]++;
	}
	put_family(f, "llmprofd_finding", "gauge",
		   "Running processes for which a finding's rule fires, by rule");
	for (int k = 0; k < LP_RULE_NR; k++)
		fprintf(f, "llmprofd_finding{rule=\"%s\"} %zu\n", lp_rule_names[k], count[k]);
}

static void put_daemon(FILE *f, const struct lp_report *r, const struct lp_metrics_opts *o,
		       size_t exported)
{
	static const char *const lost_names[] = {"threads_map_full", "futex_addrs_map_full",
						 "ring_buffer_full", "preemptors_map_full"};
	struct lp_feature_flag feat[LP_FEATURE_FLAGS_MAX];
	size_t nfeat = r->features ? lp_feature_flags(r->features, feat) : 0;
	size_t running = 0;

	for (size_t i = 0; i < r->nprocs; i++)
		running += !r->procs[i].target->exited;
	put_family(f, "llmprofd_build_info", "gauge", "Version of llmprofd; always 1");
	fprintf(f, "llmprofd_build_info{version=\"%s\",abi=\"%d\"} 1\n", LLMPROF_VERSION,
		LP_ABI_VERSION);
	put_family(f, "llmprofd_start_time_seconds", "gauge",
		   "When llmprofd started, seconds since the Unix epoch");
	fprintf(f, "llmprofd_start_time_seconds %.3f\n", o->start_time);
	put_family(f, "llmprofd_processes", "gauge",
		   "Processes visible to this scrape, running or exited (within the retention)");
	fprintf(f, "llmprofd_processes{state=\"running\"} %zu\n", running);
	fprintf(f, "llmprofd_processes{state=\"exited\"} %zu\n", r->nprocs - running);
	put_family(f, "llmprofd_processes_omitted", "gauge",
		   "Processes left out of this scrape by the metrics max-processes cap");
	fprintf(f, "llmprofd_processes_omitted %zu\n", r->nprocs - exported);
	put_family(f, "llmprofd_lost_total", "counter",
		   "Data lost, by reason: full maps, full ring buffer, evicted exited processes");
	for (int i = 0; i < LP_D_NR; i++)
		fprintf(f, "llmprofd_lost_total{reason=\"%s\"} %llu\n", lost_names[i],
			(unsigned long long)r->drops[i]);
	fprintf(f, "llmprofd_lost_total{reason=\"procs_map_full\"} %llu\n",
		(unsigned long long)r->procs_full);
	fprintf(f, "llmprofd_lost_total{reason=\"exited_evicted\"} %llu\n",
		(unsigned long long)r->exited_evicted);
	fprintf(f, "llmprofd_lost_total{reason=\"exited_before_tracking\"} %llu\n",
		(unsigned long long)r->exited_untracked);
	put_family(f, "llmprofd_map_entries", "gauge",
		   "Entries in use in each kernel hash map (to root and the group only)");
	for (size_t i = 0; i < r->nmaps && !o->hide_fill; i++)
		if (r->maps[i].value_size)
			fprintf(f, "llmprofd_map_entries{map=\"%s\"} %llu\n", r->maps[i].name,
				(unsigned long long)r->maps[i].entries);
	put_family(f, "llmprofd_map_max_entries", "gauge", "Capacity of each kernel map");
	for (size_t i = 0; i < r->nmaps; i++)
		if (r->maps[i].value_size)
			fprintf(f, "llmprofd_map_max_entries{map=\"%s\"} %u\n", r->maps[i].name,
				r->maps[i].max_entries);
	put_family(f, "llmprofd_kernel_memory_bytes", "gauge",
		   "Memory the kernel charges for llmprofd's maps");
	{
		uint64_t mem = 0;

		for (size_t i = 0; i < r->nmaps; i++)
			mem += r->maps[i].memlock;
		fprintf(f, "llmprofd_kernel_memory_bytes %llu\n", (unsigned long long)mem);
	}
	put_family(f, "llmprofd_kernel_feature", "gauge",
		   "1 when the kernel offers the feature (found by trying at start)");
	for (size_t i = 0; i < nfeat; i++)
		fprintf(f, "llmprofd_kernel_feature{feature=\"%s\"} %d\n", feat[i].name,
			feat[i].on);
	put_family(f, "llmprofd_sample_hz", "gauge",
		   "cpu-clock samples per second and CPU (0: sampling off)");
	fprintf(f, "llmprofd_sample_hz %u\n", r->sample_hz);
	put_findings(f, r);
}

int lp_metrics_render(const struct lp_report *r, const struct lp_metrics_opts *o, char **out,
		      size_t *len)
{
	const struct lp_proc_view **v = calloc(r->nprocs ? r->nprocs : 1, sizeof(*v));
	size_t n = r->nprocs;
	FILE *f;

	*out = NULL;
	*len = 0;
	if (!v)
		return -ENOMEM;
	for (size_t i = 0; i < n; i++)
		v[i] = &r->procs[i];
	/* Over the cap, running processes go first, the busiest first. */
	qsort(v, n, sizeof(*v), compare_views);
	if (o->max_processes && n > o->max_processes)
		n = o->max_processes;
	f = open_memstream(out, len);
	if (!f) {
		free(v);
		return -ENOMEM;
	}
	put_processes(f, v, n);
	put_ops(f, v, n, r->sample_hz);
	put_daemon(f, r, o, n);
	free(v);
	if (fclose(f) != 0 || !*out) {
		free(*out);
		*out = NULL;
		return -ENOMEM;
	}
	return 0;
}
