// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* Prometheus text exposition of a report: one family per histogram kind and per counter,
 * labelled by process; then the daemon's own health (losses, map fill, features). */
#include "metrics.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hist.h"
#include "identity.h"
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

/* One set of series: a process (pid, comm, exe), or with by_workload every process of a
 * workload running a model, summed. */
struct series {
	char *labels; /* the label pairs, escaped, without braces */
	const struct lp_proc_stats *stats;
	struct lp_proc_stats *sum;    /* owned, by workload only */
	const struct lp_proc_view *v; /* by process only */
	size_t nthreads, running, processes, precise;
};

static char *label_text(const char *const *kv, size_t n)
{
	char *out = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&out, &len);

	if (!f)
		return NULL;
	for (size_t i = 0; i < n; i += 2) {
		fprintf(f, "%s%s=\"", i ? "," : "", kv[i]);
		put_escaped(f, kv[i + 1]);
		fputc('"', f);
	}
	if (fclose(f) != 0) {
		free(out);
		return NULL;
	}
	return out;
}

static char *process_labels(const struct lp_target *t)
{
	char pid[16];
	const char *kv[] = {"pid", pid, "comm", t->comm, "exe", t->exe ? t->exe : ""};

	snprintf(pid, sizeof(pid), "%d", (int)t->pid);
	return label_text(kv, sizeof(kv) / sizeof(kv[0]));
}

static void workload_key(const struct lp_target *t, char *out, size_t size)
{
	lp_identity_workload(&t->ident, t->comm, out, size);
}

static char *workload_labels(const struct lp_target *t)
{
	char w[160];
	const char *kv[] = {"workload", w, "model", lp_identity_model_name(&t->ident)};

	workload_key(t, w, sizeof(w));
	return label_text(kv, sizeof(kv) / sizeof(kv[0]));
}

static void put_family(FILE *f, const char *name, const char *type, const char *help)
{
	fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* The le bounds: every power of two from 2^LP_METRICS_LE_MIN_EXP ns, and the bound between
 * two kernel buckets (8 per doubling) once either has counted. So the bucket that holds a percentile always has both its bounds,
 * and histogram_quantile() lands in the same kernel bucket as the API's percentile. */
static void put_hist(FILE *f, const char *name, const struct series *s, const struct lp_hist *h)
{
	unsigned lo = lp_hist_index(1ULL << LP_METRICS_LE_MIN_EXP);
	unsigned hi = lp_hist_index(1ULL << LP_METRICS_LE_MAX_EXP);
	uint64_t cum = 0, total = lp_hist_total(h);

	for (unsigned b = 0; b < lo; b++)
		cum += h->buckets[b];
	for (unsigned b = lo; b <= hi; b++) {
		uint64_t bound = lp_hist_lower(b);

		/* cum: everything below bound, exactly (bound is a bucket boundary). */
		if (!(bound & (bound - 1)) || h->buckets[b] || h->buckets[b - 1])
			fprintf(f, "%s_bucket{%s,le=\"%.12g\"} %llu\n", name, s->labels,
				(double)bound * 1e-9, (unsigned long long)cum);
		cum += h->buckets[b];
	}
	fprintf(f, "%s_bucket{%s,le=\"+Inf\"} %llu\n", name, s->labels, (unsigned long long)total);
	fprintf(f, "%s_sum{%s} %.9g\n", name, s->labels, (double)h->sum_ns * 1e-9);
	fprintf(f, "%s_count{%s} %llu\n", name, s->labels, (unsigned long long)total);
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

static int compare_workloads(const void *a, const void *b)
{
	const struct lp_target *x = (*(const struct lp_proc_view *const *)a)->target;
	const struct lp_target *y = (*(const struct lp_proc_view *const *)b)->target;
	char kx[160], ky[160];
	int c;

	workload_key(x, kx, sizeof(kx));
	workload_key(y, ky, sizeof(ky));
	c = strcmp(kx, ky);
	return c ? c : strcmp(lp_identity_model_name(&x->ident), lp_identity_model_name(&y->ident));
}

static uint64_t counter_value(const struct lp_proc_stats *st, int ctr)
{
	const __u64 *c = st->ctr;

	if (ctr >= 0)
		return c[ctr];
	/* Samples outside matmul and barrier. */
	return c[LP_C_SAMPLES] > c[LP_C_SAMPLES_MATMUL] + c[LP_C_SAMPLES_BARRIER]
		       ? c[LP_C_SAMPLES] - c[LP_C_SAMPLES_MATMUL] - c[LP_C_SAMPLES_BARRIER]
		       : 0;
}

static void series_add(struct series *s, const struct lp_proc_view *v)
{
	s->nthreads += v->nthreads;
	s->running += !v->target->exited;
	s->processes++;
	s->precise += v->target->ggml && v->target->ggml->precise_on;
}

static void series_free(struct series *s, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free(s[i].labels);
		free(s[i].sum);
	}
	free(s);
}

/* The series of the views v[0..n): one per process, or one per workload and model. */
static struct series *series_of(const struct lp_proc_view **v, size_t n, bool by_workload,
				size_t *count)
{
	struct series *s = calloc(n ? n : 1, sizeof(*s));
	size_t k = 0;

	if (!s)
		return NULL;
	if (by_workload)
		qsort(v, n, sizeof(*v), compare_workloads);
	for (size_t i = 0; i < n; i++) {
		struct series *x = &s[k];

		if (by_workload && k && !compare_workloads(&v[i], &v[i - 1])) {
			lp_stats_add(s[k - 1].sum, &v[i]->stats);
			series_add(&s[k - 1], v[i]);
			continue;
		}
		k++;
		if (by_workload) {
			x->labels = workload_labels(v[i]->target);
			x->sum = malloc(sizeof(*x->sum));
			if (x->sum)
				*x->sum = v[i]->stats;
			x->stats = x->sum;
		} else {
			x->labels = process_labels(v[i]->target);
			x->stats = &v[i]->stats;
			x->v = v[i];
		}
		series_add(x, v[i]);
		if (!x->labels || !x->stats) {
			series_free(s, k);
			return NULL;
		}
	}
	*count = k;
	return s;
}

/* CPU time by op group and by op, estimated from samples (each stands for 1/hz s). Per op:
 * the LP_METRICS_OPS ops chosen once per process (lp_ggml_metrics_ops), the rest summed as
 * op="other"; so at most 11 series per process, each only growing. By process only: ops
 * are named per process. */
static void put_ops(FILE *f, const struct series *s, size_t n, uint32_t hz)
{
	uint64_t g[LP_G_KEYS];

	if (!hz)
		return;
	put_family(f, "llmprof_op_group_cpu_seconds_total", "counter",
		   "Sampled CPU time by ggml op group; sync: in barriers (ggml's, OpenMP's); "
		   "outside_ops: the rest of the process");
	for (size_t i = 0; i < n; i++) {
		const struct lp_proc_view *v = s[i].v;
		const struct lp_ggml_proc *gp = v ? v->target->ggml : NULL;

		if (!gp || !v->ops)
			continue;
		lp_op_group_counts(&gp->ops, v->ops, false, g);
		for (int k = 0; k < LP_G_KEYS; k++)
			fprintf(f, "llmprof_op_group_cpu_seconds_total{%s,group=\"%s\"} %.9g\n",
				s[i].labels, lp_op_group_key(k), (double)g[k] / hz);
	}
	put_family(f, "llmprof_op_cpu_seconds_total", "counter",
		   "Sampled CPU time by ggml op: the 10 leading ops of the process by name, "
		   "chosen once it has 1000 samples, the rest as op=\"other\"");
	for (size_t i = 0; i < n; i++) {
		const struct lp_proc_view *v = s[i].v;
		const struct lp_ggml_proc *gp = v ? v->target->ggml : NULL;
		uint64_t rest = 0;

		if (!gp || !v->ops || !gp->metrics_ops_chosen)
			continue;
		for (size_t k = 0; k < gp->ops.n && k < LP_MAX_OPS; k++) {
			if (!gp->metrics_op[k]) {
				rest += v->ops->all[k];
				continue;
			}
			fprintf(f, "llmprof_op_cpu_seconds_total{%s,op=\"", s[i].labels);
			put_escaped(f, gp->ops.v[k].name);
			fprintf(f, "\"} %.9g\n", (double)v->ops->all[k] / hz);
		}
		fprintf(f, "llmprof_op_cpu_seconds_total{%s,op=\"other\"} %.9g\n", s[i].labels,
			(double)rest / hz);
	}
}

/* Who each process is, as labels of a series of value 1 to join on pid (by process), or how
 * many processes each workload has (by workload). */
static void put_info(FILE *f, const struct lp_proc_view *const *v, size_t nv,
		     const struct series *s, size_t n, bool by_workload)
{
	if (by_workload) {
		put_family(f, "llmprof_workload_processes", "gauge",
			   "Running processes of the workload with the model");
		for (size_t i = 0; i < n; i++)
			fprintf(f, "llmprof_workload_processes{%s} %zu\n", s[i].labels,
				s[i].running);
		return;
	}
	put_family(f, "llmprof_process_info", "gauge",
		   "Who the process is: command line, cgroup, systemd unit, container, pod and "
		   "model; always 1 (join on pid)");
	for (size_t i = 0; i < nv; i++) {
		const struct lp_target *t = v[i]->target;
		const struct lp_identity *id = &t->ident;
		char w[160];
		const char *kv[] = {"workload",	  w,
				    "model",	  lp_identity_model_name(id),
				    "model_type", id->model_type,
				    "model_arch", id->model_arch,
				    "unit",	  id->unit,
				    "container",  id->container,
				    "pod",	  id->pod,
				    "cmdline",	  id->cmdline};
		char *extra;

		workload_key(t, w, sizeof(w));
		extra = label_text(kv, sizeof(kv) / sizeof(kv[0]));
		if (extra)
			fprintf(f, "llmprof_process_info{%s,%s} 1\n", s[i].labels, extra);
		free(extra);
	}
}

static void put_processes(FILE *f, const struct series *s, size_t n, bool by_workload)
{
	char name[128];

	if (!by_workload) {
		put_family(f, "llmprof_process_running", "gauge",
			   "1 while the process runs, 0 once it has exited (kept for the "
			   "retention period)");
		for (size_t i = 0; i < n; i++)
			fprintf(f, "llmprof_process_running{%s} %zu\n", s[i].labels, s[i].running);
	}
	put_family(f, "llmprof_process_threads", "gauge", "Live threads of the process");
	for (size_t i = 0; i < n; i++)
		fprintf(f, "llmprof_process_threads{%s} %zu\n", s[i].labels, s[i].nthreads);
	put_family(f, "llmprof_precise_active", "gauge",
		   "1 while precise mode probes every matmul and barrier call of the process");
	for (size_t i = 0; i < n; i++)
		fprintf(f, "llmprof_precise_active{%s} %d\n", s[i].labels, s[i].precise > 0);

	for (int k = 0; k < LP_H_NR; k++) {
		snprintf(name, sizeof(name), "llmprof_%s_seconds", lp_hist_names[k]);
		put_family(f, name, "histogram", hist_help[k]);
		for (size_t i = 0; i < n; i++) {
			const struct lp_hist *h = &s[i].stats->hist[k];

			if (hist_always(k) || lp_hist_total(h))
				put_hist(f, name, &s[i], h);
		}
	}

	for (size_t c = 0; c < sizeof(counters) / sizeof(counters[0]); c++) {
		const struct counter_row *row = &counters[c];

		snprintf(name, sizeof(name), "%s_total", row->name);
		if (row->help)
			put_family(f, name, "counter", row->help);
		for (size_t i = 0; i < n; i++) {
			fprintf(f, "%s{%s", name, s[i].labels);
			if (row->label)
				fprintf(f, ",%s=\"%s\"", row->label, row->value);
			fprintf(f, "} %.9g\n",
				(double)counter_value(s[i].stats, row->ctr) * row->scale);
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
	put_family(f, "llmprofd_sample_hertz", "gauge",
		   "cpu-clock samples per second and CPU (0: sampling off)");
	fprintf(f, "llmprofd_sample_hertz %u\n", r->sample_hz);
	put_findings(f, r);
}

int lp_metrics_render(const struct lp_report *r, const struct lp_metrics_opts *o, char **out,
		      size_t *len)
{
	const struct lp_proc_view **v = calloc(r->nprocs ? r->nprocs : 1, sizeof(*v));
	struct series *s = NULL;
	size_t n = r->nprocs, ns = 0;
	FILE *f = NULL;

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
	if (!o->by_workload)
		s = series_of(v, n, false, &ns);
	f = s || o->by_workload ? open_memstream(out, len) : NULL;
	if (f && !o->by_workload)
		put_info(f, v, n, s, ns, false);
	/* By workload: the cap's processes, regrouped (series_of sorts them). */
	if (f && o->by_workload && (s = series_of(v, n, true, &ns)))
		put_info(f, v, n, s, ns, true);
	if (f && s) {
		put_processes(f, s, ns, o->by_workload);
		put_ops(f, s, ns, r->sample_hz);
		put_daemon(f, r, o, n);
	}
	if (s)
		series_free(s, ns);
	free(v);
	if (!f || fclose(f) != 0 || !*out || !s) {
		free(*out);
		*out = NULL;
		return -ENOMEM;
	}
	return 0;
}
