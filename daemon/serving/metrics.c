// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* What /metrics says of a report: one family per histogram kind and per counter, labelled
 * by process or by workload; then the daemon's own health (losses, map fill, features).
 * How it is written (text or protobuf) is expo.c's. */
#include "serving/metrics.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serving/expo.h"
#include "base/hist.h"
#include "engine/requests.h"
#include "engine/tensors.h"
#include "tracked/identity.h"
#include "report/render.h"

#ifndef LLMPROF_VERSION
#define LLMPROF_VERSION "0"
#endif

static const char *const hist_help[LP_H_NR] = {
	[LP_H_RUNQ] = "Time threads waited runnable for a CPU (run-queue latency)",
	[LP_H_OFF_BLOCKED] = "Off-CPU time of threads that blocked (slept)",
	[LP_H_OFF_PREEMPTED] = "Off-CPU time of threads that were preempted while runnable",
	[LP_H_FUTEX] = "Futex waits: asleep in the call (default), or syscall entry to return",
	[LP_H_DECODE_PROMPT] = "llama_decode calls given more than one token (prompt processing)",
	[LP_H_DECODE_GEN] = "llama_decode calls given one token (generation)",
	[LP_H_MATMUL] = "Outermost ggml matmul calls, entry to return (precise mode only)",
	[LP_H_BARRIER] = "Outermost ggml barrier calls, entry to return (precise mode only)",
	[LP_H_FUTEX_GEN] = "Futex waits inside one generation decode (the API only)",
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
	{"llmprof_decode_calls", "llama_decode calls (torch: forwards), by phase", "phase",
	 "prompt", LP_C_DECODE_PROMPT_CALLS, 1},
	{"llmprof_decode_calls", NULL, "phase", "generation", LP_C_GEN_STEPS, 1},
	{"llmprof_decode_tokens",
	 "Tokens given to llama_decode (torch: its forwards' positions, a token per sequence "
	 "in generation), by phase",
	 "phase", "prompt", LP_C_DECODE_PROMPT_TOKENS, 1},
	{"llmprof_decode_tokens", NULL, "phase", "generation", LP_C_DECODE_GEN_CALLS, 1},
	{"llmprof_decode_timed_tokens",
	 "Of the tokens, those of steps whose time is in llmprof_decode_seconds (torch: a "
	 "forward is timed where the next one follows it): the rates' numerator",
	 "phase", "prompt", LP_C_PROMPT_TIMED_TOKENS, 1},
	{"llmprof_decode_timed_tokens", NULL, "phase", "generation", LP_C_GEN_TIMED_TOKENS, 1},
	{"llmprof_decode_seconds",
	 "Wall time inside llama_decode (torch: from a forward's start to the next one's), by "
	 "phase",
	 "phase", "prompt", LP_C_DECODE_PROMPT_NS, 1e-9},
	{"llmprof_decode_seconds", NULL, "phase", "generation", LP_C_DECODE_GEN_NS, 1e-9},
	{"llmprof_decode_errors",
	 "llama_decode calls that returned non-zero (torch: forwards whose token ids were not "
	 "read)",
	 NULL, NULL, LP_C_DECODE_ERRORS, 1},
	{"llmprof_cpu_samples", "cpu-clock samples of the process by where its thread was",
	 "region", "matmul", LP_C_SAMPLES_MATMUL, 1},
	{"llmprof_cpu_samples", NULL, "region", "barrier", LP_C_SAMPLES_BARRIER, 1},
	{"llmprof_cpu_samples", NULL, "region", "other", -1, 1},
	{"llmprof_cpu_samples_not_taken",
	 "cpu-clock samples the kernel did not take while a thread of the process ran (another "
	 "BPF program on its CPU, a timer a period late): missing from every share",
	 NULL, NULL, LP_C_SAMPLES_SKIPPED, 1},
	{"llmprof_barrier_offcpu_estimate_seconds",
	 "Off-CPU time of threads switched out inside "
	 "a barrier (always on)",
	 NULL, NULL, LP_C_BARRIER_OFF_EST_NS, 1e-9},
	{"llmprof_gil_waits", "CPython: futex waits on its GIL's words", NULL, NULL, LP_C_GIL_WAITS,
	 1},
	{"llmprof_gil_wait_seconds", "CPython: time in futex waits on its GIL's words", NULL, NULL,
	 LP_C_GIL_WAIT_NS, 1e-9},
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

#define MAX_LABELS 3

/* One set of series: a process (pid, comm, exe), or with by_workload every process of a
 * workload running a model, summed. */
struct series {
	struct lp_label l[MAX_LABELS];
	size_t nl;
	char pid[16], workload[160];
	const struct lp_proc_stats *stats;
	struct lp_proc_stats *sum;    /* owned, by workload only */
	const struct lp_proc_view *v; /* by process only */
	size_t nthreads, running, processes, precise;
	struct lp_req_metrics *req; /* owned: its processes' requests over; NULL: none */
};

static void workload_key(const struct lp_target *t, char *out, size_t size)
{
	lp_identity_workload(&t->ident, t->comm, out, size);
}

/* The series' labels and one more. */
static size_t with(const struct series *s, struct lp_label *l, const char *name, const char *value)
{
	memcpy(l, s->l, s->nl * sizeof(*l));
	l[s->nl] = (struct lp_label){name, value};
	return s->nl + 1;
}

static void value(struct lp_expo *e, const struct series *s, double v)
{
	lp_expo_value(e, s->l, s->nl, v);
}

static void value_with(struct lp_expo *e, const struct series *s, const char *name,
		       const char *label, double v)
{
	struct lp_label l[MAX_LABELS + 1];

	lp_expo_value(e, l, with(s, l, name, label), v);
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
	s->precise += v->target->eng && v->target->eng->precise_on;
	if (v->requests && (s->req || (s->req = calloc(1, sizeof(*s->req)))))
		lp_req_metrics_add(s->req, &v->requests->m);
}

static void series_free(struct series *s, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free(s[i].sum);
		free(s[i].req);
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
		const struct lp_target *t = v[i]->target;
		struct series *x = &s[k];

		if (by_workload && k && !compare_workloads(&v[i], &v[i - 1])) {
			lp_stats_add(s[k - 1].sum, &v[i]->stats);
			series_add(&s[k - 1], v[i]);
			continue;
		}
		k++;
		if (by_workload) {
			workload_key(t, x->workload, sizeof(x->workload));
			x->l[0] = (struct lp_label){"workload", x->workload};
			x->l[1] = (struct lp_label){"model", lp_identity_model_name(&t->ident)};
			x->nl = 2;
			x->sum = malloc(sizeof(*x->sum));
			if (!x->sum) {
				series_free(s, k);
				return NULL;
			}
			*x->sum = v[i]->stats;
			x->stats = x->sum;
		} else {
			snprintf(x->pid, sizeof(x->pid), "%d", (int)t->pid);
			x->l[0] = (struct lp_label){"pid", x->pid};
			x->l[1] = (struct lp_label){"comm", t->comm};
			x->l[2] = (struct lp_label){"exe", t->exe ? t->exe : ""};
			x->nl = 3;
			x->stats = &v[i]->stats;
			x->v = v[i];
		}
		series_add(x, v[i]);
	}
	*count = k;
	return s;
}

/* CPU time by op group and by op, estimated from samples (each stands for 1/hz s). Per op:
 * the LP_METRICS_OPS ops chosen once per process (lp_eproc_metrics_ops), the rest summed as
 * op="other"; so at most 11 series per process, each only growing. By process only: ops
 * are named per process. */
static void put_ops(struct lp_expo *e, const struct series *s, size_t n, uint32_t hz)
{
	uint64_t g[LP_G_KEYS];

	if (!hz)
		return;
	lp_expo_family(e, "llmprof_op_group_cpu_seconds_total", LP_EXPO_COUNTER,
		       "Sampled CPU time by ggml op group; sync: in barriers (ggml's, OpenMP's); "
		       "outside_ops: the rest of the process");
	for (size_t i = 0; i < n; i++) {
		const struct lp_proc_view *v = s[i].v;
		const struct lp_eproc *gp = v ? v->target->eng : NULL;

		if (!gp || !v->ops)
			continue;
		lp_op_group_counts(&gp->ops, v->ops, false, g);
		for (int k = 0; k < LP_G_KEYS; k++)
			value_with(e, &s[i], "group", lp_op_group_key(k), (double)g[k] / hz);
	}
	/* How the samples were placed: the shares above are measured where "ip" and "cfi"
	 * hold nearly all of them, and rest on the stack scan where "scan" does not stay
	 * small. */
	lp_expo_family(e, "llmprof_unwind_samples_total", LP_EXPO_COUNTER,
		       "Samples by how their op was found: ip (the instruction pointer), cfi "
		       "(frames walked by .eh_frame), scan (the stack scan, which can take a stale "
		       "return address), none (counted outside ops without evidence)");
	for (size_t i = 0; i < n; i++) {
		static const char *const how[LP_HOW_NR] = {"ip", "cfi", "scan", "none"};
		const struct lp_proc_view *v = s[i].v;

		if (!v || !v->target->eng || !v->ops)
			continue;
		for (int k = 0; k < LP_HOW_NR; k++)
			value_with(e, &s[i], "how", how[k], (double)v->ops->how[k]);
	}
	lp_expo_family(e, "llmprof_op_cpu_seconds_total", LP_EXPO_COUNTER,
		       "Sampled CPU time by ggml op: the 10 leading ops of the process by name, "
		       "chosen once it has 1000 samples, the rest as op=\"other\"");
	for (size_t i = 0; i < n; i++) {
		const struct lp_proc_view *v = s[i].v;
		const struct lp_eproc *gp = v ? v->target->eng : NULL;
		uint64_t rest = 0;

		if (!gp || !v->ops || !gp->metrics_ops_chosen)
			continue;
		for (size_t k = 0; k < gp->ops.n && k < LP_MAX_OPS; k++) {
			if (!gp->metrics_op[k])
				rest += v->ops->all[k];
			else
				value_with(e, &s[i], "op", gp->ops.v[k].name,
					   (double)v->ops->all[k] / hz);
		}
		value_with(e, &s[i], "op", "other", (double)rest / hz);
	}
}

/* Own CPU time of the graph nodes precise mode read, by model block (tensors.h): six
 * series per process at most, whatever the model's size. */
static void put_blocks(struct lp_expo *e, const struct series *s, size_t n)
{
	bool any = false;

	for (size_t i = 0; i < n && !any; i++)
		any = s[i].v && s[i].v->nnodes;
	if (!any)
		return;
	lp_expo_family(e, "llmprof_block_cpu_seconds_total", LP_EXPO_COUNTER,
		       "Own CPU time of the ggml graph nodes precise mode read the tensors of, by "
		       "model block (from llama.cpp's node names): inside precise windows, for "
		       "the ops read only");
	for (size_t i = 0; i < n; i++) {
		const struct lp_proc_view *v = s[i].v;
		const struct lp_eproc *gp = v ? v->target->eng : NULL;
		double ns[LP_B_NR] = {0};

		if (!gp || !v->nnodes)
			continue;
		for (size_t k = 0; k < v->nnodes; k++) {
			const struct lp_node_key *key = &v->nodes[k].key;
			char stem[LP_NODE_STEM + 1];

			lp_node_stem(key, stem);
			ns[lp_node_block(key->op < gp->ops.n ? gp->ops.v[key->op].name : "?",
					 stem)] += (double)v->nodes[k].val.oncpu_ns;
		}
		for (int j = 0; j < LP_B_NR; j++)
			value_with(e, &s[i], "block", lp_block_names[j], ns[j] / 1e9);
	}
}

/* Requests (engine/requests.h) under the OpenTelemetry GenAI conventions' server metrics,
 * with their advised classic bounds (exact) and native histograms; the tokens of the
 * requests over. Series of processes whose decodes' batches were read. */
static void put_requests(struct lp_expo *e, const struct series *s, size_t n)
{
	static const struct {
		const char *name, *help;
	} fam[LP_RH_NR] = {
		[LP_RH_TTFT] =
			{"gen_ai_server_time_to_first_token_seconds",
			 "Time to first token of the requests over: from the entry of a "
			 "sequence's first llama_decode to the return of the one that produced "
			 "its first output"},
		[LP_RH_TPOT] = {"gen_ai_server_time_per_output_token_seconds",
				"Time per output token after the first, of the requests over"},
		[LP_RH_E2E] = {"gen_ai_server_request_duration_seconds",
			       "Requests over, from their first decode's entry to their last "
			       "decode's return"},
	};
	static const char *const types[] = {"input", "output", "cached_input"};
	struct lp_label l[MAX_LABELS + 2];
	size_t nl;

	for (int k = 0; k < LP_RH_NR; k++) {
		lp_expo_family(e, fam[k].name, LP_EXPO_HISTOGRAM, fam[k].help);
		for (size_t i = 0; i < n; i++) {
			if (!s[i].req)
				continue;
			nl = with(&s[i], l, "gen_ai_operation_name", "text_completion");
			l[nl++] = (struct lp_label){"gen_ai_provider_name", "llama.cpp"};
			lp_expo_hist_at(e, l, nl, &s[i].req->h[k], lp_req_bounds[k].le,
					s[i].req->le[k], lp_req_bounds[k].n);
		}
	}
	lp_expo_family(e, "llmprof_requests_total", LP_EXPO_COUNTER,
		       "Requests over, read from llama_decode's batches (llmprofctl requests)");
	for (size_t i = 0; i < n; i++)
		if (s[i].req)
			value(e, &s[i], (double)s[i].req->requests);
	lp_expo_family(e, "llmprof_request_tokens_total", LP_EXPO_COUNTER,
		       "Tokens of the requests over: input (prompt tokens decoded), output "
		       "(generated), cached_input (kept in the cache from before)");
	for (size_t i = 0; i < n; i++) {
		const struct lp_req_metrics *m = s[i].req;

		if (!m)
			continue;
		value_with(e, &s[i], "gen_ai_token_type", types[0], (double)m->prompt_tokens);
		value_with(e, &s[i], "gen_ai_token_type", types[1], (double)m->output_tokens);
		value_with(e, &s[i], "gen_ai_token_type", types[2], (double)m->reused_tokens);
	}
}

/* Who each process is, as labels of a series of value 1 to join on pid (by process), or how
 * many processes each workload has (by workload). */
static void put_info(struct lp_expo *e, const struct series *s, size_t n, bool by_workload,
		     bool cmdline)
{
	if (by_workload) {
		lp_expo_family(e, "llmprof_workload_processes", LP_EXPO_GAUGE,
			       "Running processes of the workload with the model");
		for (size_t i = 0; i < n; i++)
			value(e, &s[i], (double)s[i].running);
		return;
	}
	lp_expo_family(e, "llmprof_process_info", LP_EXPO_GAUGE,
		       "Who the process is: systemd unit, container, pod and model (and its "
		       "command line with --metrics-cmdline); always 1 (join on pid)");
	for (size_t i = 0; i < n; i++) {
		const struct lp_target *t = s[i].v->target;
		const struct lp_identity *id = &t->ident;
		char w[160], cmd[LP_IDENT_CMDLINE];
		struct lp_label l[MAX_LABELS + 9];
		size_t nl = s[i].nl;

		workload_key(t, w, sizeof(w));
		memcpy(l, s[i].l, nl * sizeof(*l));
		l[nl++] = (struct lp_label){"workload", w};
		l[nl++] = (struct lp_label){"model", lp_identity_model_name(id)};
		l[nl++] = (struct lp_label){"model_type", id->model_type};
		l[nl++] = (struct lp_label){"model_arch", id->model_arch};
		l[nl++] = (struct lp_label){"unit", id->unit};
		l[nl++] = (struct lp_label){"container", id->container};
		l[nl++] = (struct lp_label){"pod", id->pod};
		/* Command lines carry secrets (--api-key, tokens in URLs) and go to a
		 * TSDB from here: only when asked, and redacted. */
		if (cmdline) {
			lp_identity_cmdline_redacted(cmd, sizeof(cmd), id->cmdline);
			l[nl++] = (struct lp_label){"cmdline", cmd};
		}
		lp_expo_value(e, l, nl, 1);
	}
	/* A family of its own, so that process_info's label set stays as dashboards join it. */
	lp_expo_family(e, "llmprof_process_engine", LP_EXPO_GAUGE,
		       "The engine the process runs (ggml, torch), for processes found to run "
		       "one; always 1 (join on pid)");
	for (size_t i = 0; i < n; i++) {
		const struct lp_target *t = s[i].v->target;
		struct lp_label l[MAX_LABELS + 1];
		size_t nl = s[i].nl;

		if (!t->eng || !t->eng->found_ns)
			continue;
		memcpy(l, s[i].l, nl * sizeof(*l));
		l[nl++] = (struct lp_label){"engine", lp_engine_name(t->eng->engine)};
		lp_expo_value(e, l, nl, 1);
	}
}

static void put_processes(struct lp_expo *e, const struct lp_report *r, const struct series *s,
			  size_t n, bool by_workload)
{
	char name[128];

	if (!by_workload) {
		lp_expo_family(e, "llmprof_process_running", LP_EXPO_GAUGE,
			       "1 while the process runs, 0 once it has exited (kept for the "
			       "retention period)");
		for (size_t i = 0; i < n; i++)
			value(e, &s[i], (double)s[i].running);
	}
	lp_expo_family(e, "llmprof_process_threads", LP_EXPO_GAUGE, "Live threads of the process");
	for (size_t i = 0; i < n; i++)
		value(e, &s[i], (double)s[i].nthreads);
	lp_expo_family(e, "llmprof_precise_active", LP_EXPO_GAUGE,
		       "1 while precise mode probes every matmul and barrier call of the process");
	for (size_t i = 0; i < n; i++)
		value(e, &s[i], s[i].precise > 0);

	/* The futex waits inside generation decodes are a subset of llmprof_futex_wait_seconds:
	 * in the API (top's FTX99), not in the series budget. */
	for (int k = 0; k < LP_H_NR; k++) {
		if (k == LP_H_FUTEX_GEN)
			continue;
		snprintf(name, sizeof(name), "llmprof_%s_seconds", lp_hist_names[k]);
		lp_expo_family(e, name, LP_EXPO_HISTOGRAM, hist_help[k]);
		for (size_t i = 0; i < n; i++) {
			const struct lp_hist *h = &s[i].stats->hist[k];

			if (hist_always(k) || lp_hist_total(h))
				lp_expo_hist(e, s[i].l, s[i].nl, h);
		}
	}

	for (size_t c = 0; c < sizeof(counters) / sizeof(counters[0]); c++) {
		const struct counter_row *row = &counters[c];

		if (!lp_report_counter_known(r, row->ctr))
			continue;
		snprintf(name, sizeof(name), "%s_total", row->name);
		if (row->help)
			lp_expo_family(e, name, LP_EXPO_COUNTER, row->help);
		for (size_t i = 0; i < n; i++) {
			double v = (double)counter_value(s[i].stats, row->ctr) * row->scale;

			if (row->label)
				value_with(e, &s[i], row->label, row->value, v);
			else
				value(e, &s[i], v);
		}
	}
}

/* One series per rule, whatever the number of processes: how many running processes it
 * fires for (`llmprofctl doctor` says which and why). */
static void put_findings(struct lp_expo *e, const struct lp_report *r)
{
	size_t count[LP_RULE_NR] = {0};

	for (size_t i = 0; i < r->nprocs; i++) {
		const struct lp_findings *x = r->procs[i].findings;

		for (size_t k = 0; x && !r->procs[i].target->exited && k < x->n; k++)
			count[x->f[k].rule]++;
	}
	lp_expo_family(e, "llmprofd_finding", LP_EXPO_GAUGE,
		       "Running processes for which a finding's rule fires, by rule");
	for (int k = 0; k < LP_RULE_NR; k++)
		lp_expo_value(e, &(struct lp_label){"rule", lp_rule_names[k]}, 1, (double)count[k]);
}

/* A daemon-wide value, with one label or none (name NULL). */
static void one(struct lp_expo *e, const char *name, const char *label, double x)
{
	lp_expo_value(e, &(struct lp_label){name, label}, name ? 1 : 0, x);
}

/* The process_* metrics every exporter has (Prometheus' client libraries' process
 * collector): the daemon's own CPU, memory and descriptors. */
static void put_self(struct lp_expo *e, const struct lp_self_stats *s, double start_time)
{
	lp_expo_family(e, "process_cpu_seconds_total", LP_EXPO_COUNTER,
		       "Total user and system CPU time spent in seconds");
	one(e, NULL, NULL, s->cpu_seconds);
	lp_expo_family(e, "process_resident_memory_bytes", LP_EXPO_GAUGE,
		       "Resident memory size in bytes");
	one(e, NULL, NULL, (double)s->resident_bytes);
	lp_expo_family(e, "process_virtual_memory_bytes", LP_EXPO_GAUGE,
		       "Virtual memory size in bytes");
	one(e, NULL, NULL, (double)s->virtual_bytes);
	lp_expo_family(e, "process_open_fds", LP_EXPO_GAUGE, "Number of open file descriptors");
	one(e, NULL, NULL, (double)s->open_fds);
	lp_expo_family(e, "process_max_fds", LP_EXPO_GAUGE,
		       "Maximum number of open file descriptors");
	one(e, NULL, NULL, (double)s->max_fds);
	lp_expo_family(e, "process_start_time_seconds", LP_EXPO_GAUGE,
		       "Start time of the process since unix epoch in seconds");
	one(e, NULL, NULL, start_time);
}

static void put_daemon(struct lp_expo *e, const struct lp_report *r,
		       const struct lp_metrics_opts *o, size_t omitted)
{
	static const char *const lost_names[] = {"threads_map_full",
						 "futex_addrs_map_full",
						 "ring_buffer_full",
						 "preemptors_map_full",
						 "decodes_ring_buffer_half_full",
						 "nodes_map_full",
						 "aop_samples_map_full",
						 "py_samples_map_full"};
	struct lp_feature_flag feat[LP_FEATURE_FLAGS_MAX];
	size_t nfeat = r->features ? lp_feature_flags(r->features, feat) : 0;
	size_t running = 0;
	uint64_t mem = 0;
	char abi[16];

	for (size_t i = 0; i < r->nprocs; i++)
		running += !r->procs[i].target->exited;
	snprintf(abi, sizeof(abi), "%d", LP_ABI_VERSION);
	lp_expo_family(e, "llmprofd_build_info", LP_EXPO_GAUGE, "Version of llmprofd; always 1");
	lp_expo_value(e, (struct lp_label[]){{"version", LLMPROF_VERSION}, {"abi", abi}}, 2, 1);
	lp_expo_family(e, "llmprofd_start_time_seconds", LP_EXPO_GAUGE,
		       "When llmprofd started, seconds since the Unix epoch");
	one(e, NULL, NULL, o->start_time);
	lp_expo_family(e, "llmprofd_processes", LP_EXPO_GAUGE,
		       "Processes visible to this scrape, running or exited (within the "
		       "retention)");
	one(e, "state", "running", (double)running);
	one(e, "state", "exited", (double)(r->nprocs - running));
	lp_expo_family(e, "llmprofd_processes_omitted", LP_EXPO_GAUGE,
		       "Processes left out of this scrape by the metrics max-processes cap");
	one(e, NULL, NULL, (double)omitted);
	lp_expo_family(e, "llmprofd_lost_total", LP_EXPO_COUNTER,
		       "Data lost, by reason: full maps, full ring buffer, evicted exited "
		       "processes");
	_Static_assert(sizeof(lost_names) / sizeof(lost_names[0]) == LP_D_NR, "a name per drop");
	for (int i = 0; i < LP_D_NR; i++)
		one(e, "reason", lost_names[i], (double)r->drops[i]);
	one(e, "reason", "procs_map_full", (double)r->procs_full);
	one(e, "reason", "exited_evicted", (double)r->exited_evicted);
	one(e, "reason", "exited_before_tracking", (double)r->exited_untracked);
	one(e, "reason", "profile_ring_buffer_full", (double)r->profile_lost_ring);
	one(e, "reason", "profile_memory_bound", (double)r->profile_lost_table);
	lp_expo_family(e, "llmprofd_samples_not_taken_total", LP_EXPO_COUNTER,
		       "cpu-clock samples the kernel did not take of the tracked processes "
		       "(another BPF program on the CPU, a timer a period late): given to the "
		       "process that ran, or not known (more switches than noted)");
	one(e, "attributed", "yes", (double)(r->samples_skipped - r->samples_skipped_unknown));
	one(e, "attributed", "no", (double)r->samples_skipped_unknown);
	lp_expo_family(e, "llmprofd_bpf_recursion_misses_total", LP_EXPO_COUNTER,
		       "Runs of the daemon's BPF programs the kernel skipped, as it counts them");
	one(e, NULL, NULL, (double)r->recursion_misses);
	lp_expo_family(e, "llmprofd_state_saves_failed_total", LP_EXPO_COUNTER,
		       "Saves of the totals to the state directory that failed (the totals since "
		       "the last good one are at risk)");
	one(e, NULL, NULL, (double)r->state_saves_failed);
	lp_expo_family(e, "llmprofd_map_entries", LP_EXPO_GAUGE,
		       "Entries in use in each kernel hash map (to root and the group only)");
	for (size_t i = 0; i < r->nmaps && !o->hide_fill; i++)
		if (r->maps[i].value_size)
			one(e, "map", r->maps[i].name, (double)r->maps[i].entries);
	lp_expo_family(e, "llmprofd_map_max_entries", LP_EXPO_GAUGE, "Capacity of each kernel map");
	for (size_t i = 0; i < r->nmaps; i++)
		if (r->maps[i].value_size)
			one(e, "map", r->maps[i].name, r->maps[i].max_entries);
	lp_expo_family(e, "llmprofd_kernel_memory_bytes", LP_EXPO_GAUGE,
		       "Memory the kernel charges for llmprofd's maps");
	for (size_t i = 0; i < r->nmaps; i++)
		mem += r->maps[i].memlock;
	one(e, NULL, NULL, (double)mem);
	lp_expo_family(e, "llmprofd_kernel_feature", LP_EXPO_GAUGE,
		       "1 when the kernel offers the feature (found by trying at start)");
	for (size_t i = 0; i < nfeat; i++)
		one(e, "feature", feat[i].name, feat[i].on);
	lp_expo_family(e, "llmprofd_sample_hertz", LP_EXPO_GAUGE,
		       "cpu-clock samples per second and CPU (0: sampling off)");
	one(e, NULL, NULL, r->sample_hz);
	put_findings(e, r);
	if (o->self)
		put_self(e, o->self, o->start_time);
}

/* An exited process whose series have stayed long enough. */
static bool gone(const struct lp_proc_view *v, uint64_t now_ns, uint64_t linger_ns)
{
	const struct lp_target *t = v->target;

	return t->exited && now_ns >= t->exited_at_ns && now_ns - t->exited_at_ns >= linger_ns;
}

int lp_metrics_render(const struct lp_report *r, const struct lp_metrics_opts *o, char **out,
		      size_t *len)
{
	const struct lp_proc_view **v = calloc(r->nprocs ? r->nprocs : 1, sizeof(*v));
	struct lp_expo *e = lp_expo_open(o->format);
	struct series *s = NULL;
	size_t n = 0, ns = 0, eligible = 0;

	*out = NULL;
	*len = 0;
	if (v && e) {
		if (o->coarse)
			lp_expo_coarse(e);
		n = 0;
		for (size_t i = 0; i < r->nprocs; i++)
			if (o->by_workload || !gone(&r->procs[i], r->now_ns, o->exited_ns))
				v[n++] = &r->procs[i];
		/* Over the cap, running processes go first, the busiest first. */
		qsort(v, n, sizeof(*v), compare_views);
		eligible = n;
		if (o->max_processes && n > o->max_processes)
			n = o->max_processes;
		/* By workload, the cap's processes regrouped (series_of sorts them). */
		s = series_of(v, n, o->by_workload, &ns);
	}
	if (s) {
		put_info(e, s, ns, o->by_workload, o->cmdline);
		put_processes(e, r, s, ns, o->by_workload);
		put_ops(e, s, ns, r->sample_hz);
		put_blocks(e, s, ns);
		put_requests(e, s, ns);
		put_daemon(e, r, o, eligible - n);
	}
	series_free(s, ns);
	free(v);
	if (!e)
		return -ENOMEM;
	if (lp_expo_close(e, out, len) < 0 || !s) {
		free(*out);
		*out = NULL;
		*len = 0;
		return -ENOMEM;
	}
	return 0;
}
