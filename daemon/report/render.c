// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* JSON rendering of reports: processes with counters, histograms with percentiles,
 * futex addresses and threads, plus collector state, map fill and every loss counter. */
#include "report/render.h"

#include "llmprof/protocol.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "formats/cfi.h"
#include "escape.h"
#include "base/hist.h"
#include "report/graph.h"
#include "report/requests_doc.h"
#include "tracked/identity.h"

#ifndef LLMPROF_VERSION
#define LLMPROF_VERSION "0"
#endif

const char *const lp_hist_names[LP_H_NR] = {
	[LP_H_RUNQ] = "runqueue_latency",
	[LP_H_OFF_BLOCKED] = "offcpu_blocked",
	[LP_H_OFF_PREEMPTED] = "offcpu_preempted",
	[LP_H_FUTEX] = "futex_wait",
	[LP_H_DECODE_PROMPT] = "decode_prompt",
	[LP_H_DECODE_GEN] = "decode_generation",
	[LP_H_MATMUL] = "matmul",
	[LP_H_BARRIER] = "barrier",
	[LP_H_FUTEX_GEN] = "futex_wait_generation",
};

const char *const lp_counter_names[LP_C_NR] = {
	[LP_C_ONCPU_NS] = "oncpu_ns",
	[LP_C_NVCSW] = "voluntary_switches",
	[LP_C_NIVCSW] = "involuntary_switches",
	[LP_C_MIGRATIONS] = "migrations",
	[LP_C_FUTEX_TIMEDOUT] = "futex_timedout",
	[LP_C_FUTEX_EAGAIN] = "futex_eagain",
	[LP_C_FUTEX_LOCK_PI] = "futex_lock_pi",
	[LP_C_FUTEX_WAITV] = "futex_waitv",
	[LP_C_FAULTS_MIN] = "page_faults_minor",
	[LP_C_FAULTS_MAJ] = "page_faults_major",
	[LP_C_DECODE_PROMPT_CALLS] = "decode_prompt_calls",
	[LP_C_DECODE_PROMPT_TOKENS] = "decode_prompt_tokens",
	[LP_C_DECODE_PROMPT_NS] = "decode_prompt_ns",
	[LP_C_DECODE_GEN_CALLS] = "decode_generation_tokens",
	[LP_C_DECODE_GEN_NS] = "decode_generation_ns",
	[LP_C_DECODE_ERRORS] = "decode_errors",
	[LP_C_SAMPLES] = "samples",
	[LP_C_SAMPLES_MATMUL] = "samples_matmul",
	[LP_C_SAMPLES_BARRIER] = "samples_barrier",
	[LP_C_BARRIER_OFF_EST_NS] = "barrier_offcpu_estimate_ns",
	[LP_C_BARRIER_GEN_CALLS] = "precise_barrier_generation_calls",
	[LP_C_MATMUL_CALLS] = "precise_matmul_calls",
	[LP_C_MATMUL_NS] = "precise_matmul_ns",
	[LP_C_MATMUL_EXCL_ONCPU_NS] = "precise_matmul_exclusive_oncpu_ns",
	[LP_C_BARRIER_CALLS] = "precise_barrier_calls",
	[LP_C_GEN_INTERVALS] = "generation_intervals",
	[LP_C_GEN_INTERVAL_NS] = "generation_interval_ns",
	[LP_C_BARRIER_GEN_ONCPU_NS] = "barrier_generation_oncpu_ns",
	[LP_C_GEN_GAP_NS] = "generation_gap_ns",
	[LP_C_SWITCH_IN_UNSEEN] = "switch_ins_unseen",
	[LP_C_BARRIER_NS] = "precise_barrier_ns",
	[LP_C_BARRIER_OFF_NS] = "precise_barrier_offcpu_ns",
	[LP_C_STRETCHES_SAMPLED] = "offcpu_stretches_sampled",
	[LP_C_SAMPLED_THREADS] = "offcpu_sampled_threads",
	[LP_C_SAMPLES_SKIPPED] = "samples_skipped",
	[LP_C_PROMPT_TIMED_TOKENS] = "decode_prompt_timed_tokens",
	[LP_C_GEN_TIMED_TOKENS] = "decode_generation_timed_tokens",
	[LP_C_GEN_STEPS] = "decode_generation_steps",
	[LP_C_OMP_REGIONS] = "openmp_regions",
	[LP_C_OMP_REGION_NS] = "openmp_region_ns",
	[LP_C_GIL_WAITS] = "gil_waits",
	[LP_C_GIL_WAIT_NS] = "gil_wait_ns",
	[LP_C_RUNQ_NS] = "runqueue_ns",
};

static const char *const sym_class_names[LP_SYM_NR] = {
	"matmul", "barrier", "decode", NULL, "forward", "aten", "fork", "blas", "python"};

cJSON *lp_render_hist(const struct lp_hist *h)
{
	cJSON *o = cJSON_CreateObject(), *b;

	cJSON_AddStringToObject(o, "unit", "ns");
	lp_json_add_u64(o, "count", lp_hist_total(h));
	lp_json_add_u64(o, "sum", h->sum_ns);
	lp_json_add_u64(o, "max", h->max_ns);
	lp_json_add_u64(o, "p50", lp_hist_quantile(h, 0.50));
	lp_json_add_u64(o, "p90", lp_hist_quantile(h, 0.90));
	lp_json_add_u64(o, "p99", lp_hist_quantile(h, 0.99));
	/* Non-empty buckets only, as [lower, upper, count]: lower <= v < upper. */
	b = cJSON_AddArrayToObject(o, "buckets");
	for (unsigned i = 0; i < LP_HIST_NBUCKETS; i++) {
		cJSON *e;

		if (!h->buckets[i])
			continue;
		e = cJSON_CreateArray();
		cJSON_AddItemToArray(e, cJSON_CreateNumber((double)lp_hist_lower(i)));
		if (lp_hist_upper(i) == ~0ULL)
			cJSON_AddItemToArray(e, cJSON_CreateNull());
		else
			cJSON_AddItemToArray(e, cJSON_CreateNumber((double)lp_hist_upper(i)));
		cJSON_AddItemToArray(e, cJSON_CreateNumber((double)h->buckets[i]));
		cJSON_AddItemToArray(b, e);
	}
	return o;
}

static cJSON *render_futex(const struct lp_futex_top *f)
{
	cJSON *o = cJSON_CreateObject(), *a;

	lp_json_add_u64(o, "addresses", f->naddrs);
	a = cJSON_AddArrayToObject(o, "top");
	for (size_t i = 0; i < f->ntop; i++) {
		const struct lp_futex_view *v = &f->top[i];
		cJSON *e = cJSON_CreateObject();
		char addr[32];

		snprintf(addr, sizeof(addr), "0x%" PRIx64, v->uaddr);
		cJSON_AddStringToObject(e, "uaddr", addr);
		lp_json_add_u64(e, "waits", v->v.waits);
		lp_json_add_u64(e, "wait_ns", v->v.wait_ns);
		lp_json_add_u64(e, "max_ns", v->v.max_ns);
		cJSON_AddItemToArray(a, e);
	}
	return o;
}

/* Who took the CPU from the process's threads while they could run; "own": one of its
 * own threads (more threads than CPUs). */
static cJSON *render_preempt(const struct lp_preempt_top *p, pid_t self)
{
	cJSON *o = cJSON_CreateObject(), *a;

	lp_json_add_u64(o, "processes", p->npreemptors);
	a = cJSON_AddArrayToObject(o, "top");
	for (size_t i = 0; i < p->ntop; i++) {
		const struct lp_preempt_view *v = &p->top[i];
		cJSON *e = cJSON_CreateObject();
		char comm[LP_COMM_LEN + 1];

		memcpy(comm, v->v.comm, LP_COMM_LEN);
		comm[LP_COMM_LEN] = '\0';
		lp_json_add_u64(e, "pid", v->by_tgid);
		lp_json_add_escaped(e, "comm", comm);
		cJSON_AddBoolToObject(e, "own", (pid_t)v->by_tgid == self);
		lp_json_add_u64(e, "preemptions", v->v.count);
		lp_json_add_u64(e, "wait_ns", v->v.wait_ns);
		cJSON_AddItemToArray(a, e);
	}
	return o;
}

static cJSON *render_thread(const struct lp_thread_view *tv)
{
	cJSON *o = cJSON_CreateObject();
	const struct lp_thread *t = &tv->t;

	lp_json_add_u64(o, "tid", tv->tid);
	lp_json_add_escaped(o, "comm", tv->comm);
	lp_json_add_u64(o, "oncpu_ns", t->oncpu_ns);
	lp_json_add_u64(o, "runqueue_ns", t->runq_ns);
	lp_json_add_u64(o, "offcpu_blocked_ns", t->off_blocked_ns);
	lp_json_add_u64(o, "offcpu_preempted_ns", t->off_preempted_ns);
	lp_json_add_u64(o, "samples", t->samples);
	lp_json_add_u64(o, "samples_sync", t->samples_sync);
	lp_json_add_u64(o, "samples_ggml", t->samples_ggml);
	lp_json_add_u64(o, "voluntary_switches", t->nvcsw);
	lp_json_add_u64(o, "involuntary_switches", t->nivcsw);
	lp_json_add_u64(o, "migrations", t->migrations);
	lp_json_add_u64(o, "futex_waits", t->futex_waits);
	lp_json_add_u64(o, "futex_wait_ns", t->futex_ns);
	/* CPython: of its futex waits, those for the GIL */
	lp_json_add_u64(o, "gil_waits", t->gil_waits);
	lp_json_add_u64(o, "gil_wait_ns", t->gil_ns);
	lp_json_add_u64(o, "page_faults_minor", t->faults_min);
	lp_json_add_u64(o, "page_faults_major", t->faults_maj);
	return o;
}

static double ratio(uint64_t a, uint64_t b)
{
	return b ? (double)a / (double)b : 0;
}

/* {matmul, barrier, other} as fractions of total, other being the rest. */
static cJSON *render_share(uint64_t matmul, uint64_t barrier, uint64_t total)
{
	cJSON *o = cJSON_CreateObject();

	if (matmul + barrier > total)
		total = matmul + barrier;
	cJSON_AddNumberToObject(o, "matmul", ratio(matmul, total));
	cJSON_AddNumberToObject(o, "barrier", ratio(barrier, total));
	cJSON_AddNumberToObject(o, "other", total ? ratio(total - matmul - barrier, total) : 0);
	return o;
}

/* One phase of decoding (prompt processing or generation) with its rates: over the steps
 * whose time is known (timed: their tokens), every llama_decode call's, a torch forward's
 * where the next one follows it (abi.h). */
static void render_phase(cJSON *parent, const char *name, uint64_t calls, uint64_t tokens,
			 uint64_t timed, uint64_t ns)
{
	cJSON *x = cJSON_AddObjectToObject(parent, name);

	lp_json_add_u64(x, "calls", calls);
	lp_json_add_u64(x, "tokens", tokens);
	lp_json_add_u64(x, "timed_tokens", timed);
	lp_json_add_u64(x, "ns", ns);
	cJSON_AddNumberToObject(x, "tokens_per_s", ratio(timed * 1000000000ULL, ns));
	cJSON_AddNumberToObject(x, "ms_per_token", ratio(ns, timed) / 1e6);
}

static cJSON *render_objects(const struct lp_eproc *gp, const struct lp_op_samples *os)
{
	cJSON *a = cJSON_CreateArray();

	for (size_t i = 0; i < gp->nobjs; i++) {
		const struct lp_obj *ob = gp->objs[i];
		cJSON *e = cJSON_CreateObject(), *lists[LP_SYM_NR], *sites;

		lp_json_add_escaped(e, "path", ob->path);
		cJSON_AddBoolToObject(e, "stripped", !ob->syms.has_symtab);
		cJSON_AddBoolToObject(e, "openmp_runtime", ob->omp_runtime);
		size_t nops = lp_obj_op_functions(ob);

		/* Every class's names but the op functions' (counted below); torch's classes
		 * only where the object has some. */
		for (int c = 0; c < LP_SYM_NR; c++)
			lists[c] = c < LP_SYM_OP ? cJSON_AddArrayToObject(e, sym_class_names[c])
				   : c > LP_SYM_OP && c != LP_SYM_ATEN && lp_obj_has(ob, c)
					   ? cJSON_AddArrayToObject(e, sym_class_names[c])
					   : NULL;
		for (size_t k = 0; k < ob->syms.nsyms; k++) {
			int c = ob->syms.syms[k].cls;

			if (c >= 0 && c < LP_SYM_NR && lists[c])
				cJSON_AddItemToArray(lists[c],
						     cJSON_CreateString(ob->syms.syms[k].name));
		}
		/* Op functions are many (upstream has 130+): counted, not listed. Matmul
		 * functions named ggml_compute_forward_* are ops too. */
		lp_json_add_u64(e, "op_functions", nops);
		cJSON_AddStringToObject(e, "op_attribution",
					ob->omp_runtime ? "sync: an OpenMP runtime"
					: nops && lp_obj_walked_by_rows(ob)
						? "unwind: instruction pointer, else innermost op "
						  "among the callers, frames walked by .eh_frame"
					: nops ? "stack scan: instruction pointer, else innermost "
						 "op return address in 8 KiB"
					: ob->verdict == LP_OBJ_MATMUL
						? "unknown: no op functions in its symbols"
						: "none");
		/* How samples in its code find their callers, and why not by .eh_frame. */
		cJSON_AddStringToObject(e, "unwind", lp_obj_unwind(ob));
		/* The rows it was walked by; those the kernel holds now (0 once no running
		 * process maps it: they were given back). */
		lp_json_add_u64(e, "unwind_rows", ob->uw_rows_read);
		lp_json_add_u64(e, "unwind_rows_held", ob->uw_n);
		/* Its rows the walk cannot follow, by why; and samples whose walk stopped in
		 * its code and went to the stack scan. */
		sites = cJSON_AddObjectToObject(e, "unwind_rows_lost");
		for (unsigned k = 1; k < LP_UW_WHY_NR; k++)
			lp_json_add_u64(sites, lp_unwind_why_key(k), ob->uw_lost[k]);
		uint64_t fell = 0;

		for (size_t k = 0; os && k < LP_MAX_UNWIND; k++)
			if (gp->uw_objs[k] == ob)
				fell += os->uw_fail_obj[k];
		lp_json_add_u64(e, "unwind_fallback_samples", fell);
		/* Where each function's uprobes go: bytes past its start, and the instruction. */
		sites = cJSON_AddArrayToObject(e, "probe_sites");
		for (size_t k = 0; k < ob->syms.nsyms; k++) {
			const struct lp_elf_sym *s = &ob->syms.syms[k];
			cJSON *x;

			/* op functions and aten entry points are thousands: counted above;
			 * CPython's symbols are read, not probed */
			if (s->cls == LP_SYM_OP || s->cls == LP_SYM_ATEN || s->cls == LP_SYM_PYTHON)
				continue;
			x = cJSON_CreateObject();

			lp_json_add_escaped(x, "function", s->name);
			lp_json_add_u64(x, "offset", s->entry_skip);
			cJSON_AddStringToObject(x, "instruction", lp_x86_site_names[s->site]);
			cJSON_AddItemToArray(sites, x);
		}
		if (ob->step_error)
			cJSON_AddStringToObject(e, "decode_probes", "failed");
		else
			cJSON_AddStringToObject(e, "decode_probes",
						ob->step.n ? "attached" : "none");
		cJSON_AddItemToArray(a, e);
	}
	return a;
}

struct op_row {
	size_t i;
	uint64_t n;
};

static int compare_row(const void *a, const void *b)
{
	const struct op_row *x = a, *y = b;

	return x->n > y->n ? -1 : x->n < y->n;
}

/* per_token.precise: the exact split over precise windows, from the probed ops' own on-CPU
 * time and the barriers' spinning in calls that returned while a generation decode was in
 * flight, over the tokens generated in the windows. Ops not probed are not in it. */
static void render_precise_per_token(cJSON *o, const struct lp_eproc *gp,
				     const struct lp_op_precise *pr,
				     const struct lp_precise_totals *w)
{
	uint64_t tokens = w->ctr[LP_W_GEN_TOKENS], ns[LP_G_KEYS] = {0};
	size_t probed = 0;
	cJSON *x, *y;

	for (size_t i = 0; i < gp->ops.n && i < LP_MAX_OPS; i++) {
		ns[gp->ops.v[i].group] += pr[i].gen_oncpu_ns;
		probed += pr[i].gen_calls > 0;
	}
	ns[LP_G_SYNC] = w->ctr[LP_W_BARRIER_GEN_ONCPU_NS];
	x = cJSON_AddObjectToObject(o, "precise");
	lp_json_add_u64(x, "generated", tokens);
	lp_json_add_u64(x, "ops_probed", probed);
	y = cJSON_AddObjectToObject(x, "cpu_ms");
	for (int i = 0; i < LP_G_KEYS; i++)
		if (i != LP_G_OUTSIDE)
			cJSON_AddNumberToObject(y, lp_op_group_key(i),
						(double)ns[i] / 1e6 / tokens);
}

static void rate_or_null(cJSON *o, const char *key, uint64_t tokens, uint64_t ns)
{
	if (tokens && ns)
		cJSON_AddNumberToObject(o, key, (double)tokens * 1e9 / (double)ns);
	else
		cJSON_AddNullToObject(o, key);
}

/* precise.generation: what the probes cost the engine, by its own decode rate inside the
 * windows and outside them (every uprobe hit traps into the kernel; a window slows what
 * it measures, and the exact figures are of the slowed engine). */
static void render_observer(cJSON *x, const struct lp_precise_totals *w, const __u64 *ctr)
{
	uint64_t in_tok = w->ctr[LP_W_GEN_TOKENS], in_ns = w->ctr[LP_W_GEN_NS];
	uint64_t all_tok = ctr[LP_C_DECODE_GEN_CALLS], all_ns = ctr[LP_C_DECODE_GEN_NS];
	cJSON *y = cJSON_AddObjectToObject(x, "generation");

	lp_json_add_u64(y, "tokens_inside", in_tok);
	rate_or_null(y, "tokens_per_s_inside", in_tok, in_ns);
	rate_or_null(y, "tokens_per_s_outside", all_tok > in_tok ? all_tok - in_tok : 0,
		     all_ns > in_ns ? all_ns - in_ns : 0);
}

/* ggml.unwind: how each sample's place was found, and where the walk by rows gave way to
 * the stack scan and why. The scan can take a stale return address for a live frame, so
 * shares that rest on it for more than LP_SCAN_TRUST of the samples (ops.h) are marked. */
static void render_unwind(cJSON *o, const struct lp_eproc *gp, const struct lp_op_samples *os)
{
	static const char *const how[LP_HOW_NR] = {"ip", "cfi", "scan", "none"};
	cJSON *x = cJSON_AddObjectToObject(o, "unwind"), *y;
	uint64_t lost;

	lp_json_add_u64(x, "samples", os->total);
	y = cJSON_AddObjectToObject(x, "by");
	for (int i = 0; i < LP_HOW_NR; i++)
		lp_json_add_u64(y, how[i], os->how[i]);
	cJSON_AddNumberToObject(x, "unwound_share",
				ratio(os->how[LP_HOW_IP] + os->how[LP_HOW_CFI], os->total));
	cJSON_AddNumberToObject(x, "scan_share", ratio(os->how[LP_HOW_SCAN], os->total));
	y = cJSON_AddObjectToObject(x, "fallbacks");
	for (unsigned i = 0; i < LP_UF_NR; i++)
		lp_json_add_u64(y, lp_unwind_why_key(i), os->uw_fail[i]);
	lp_json_add_u64(x, "fallbacks_outside_objects", os->uw_fail_obj[LP_MAX_UNWIND]);
	/* OpenMP workers' samples in a region's work (their stacks hold no op): given the op
	 * of the one region open (its master's), or not, more than one being open, or none */
	y = cJSON_AddObjectToObject(x, "openmp_workers");
	lp_json_add_u64(y, "region_op", os->via[1]);
	lp_json_add_u64(y, "regions_open", os->via[2]);
	lp_json_add_u64(y, "none_open", os->via[3]);
	cJSON_AddBoolToObject(x, "trustworthy", lp_op_samples_trustworthy(os));
	/* The objects with no ops whose rows the walk follows (the C and C++ runtimes): not
	 * among ggml.objects, which lists those with symbols of interest. */
	y = cJSON_AddArrayToObject(x, "walked_through");
	for (size_t k = 0; k < LP_MAX_UNWIND; k++) {
		const struct lp_obj *ob = gp->uw_objs[k];
		uint64_t fell = 0;
		size_t j;
		cJSON *e;

		/* once per object, however many of its mappings */
		for (j = 0; j < k && gp->uw_objs[j] != ob; j++)
			;
		if (!ob || ob->verdict != LP_OBJ_NONE || j < k)
			continue;
		for (j = k; j < LP_MAX_UNWIND; j++)
			if (gp->uw_objs[j] == ob)
				fell += os->uw_fail_obj[j];
		e = cJSON_CreateObject();
		lp_json_add_escaped(e, "path", ob->path);
		lp_json_add_u64(e, "unwind_rows", ob->uw_rows_read);
		lost = 0;
		for (unsigned i = 1; i < LP_UW_WHY_NR; i++)
			lost += ob->uw_lost[i];
		lp_json_add_u64(e, "unwind_rows_lost", lost);
		lp_json_add_u64(e, "unwind_fallback_samples", fell);
		cJSON_AddItemToArray(y, e);
	}
}

/* ggml.ops, ggml.op_groups and ggml.per_token: where the sampled CPU time goes by operator,
 * over the process's life and per generated token. */
static void render_ops(cJSON *o, const struct lp_eproc *gp, const struct lp_op_samples *os,
		       const struct lp_op_precise *pr, const struct lp_precise_totals *w,
		       uint64_t gen_tokens, uint64_t gen_timed, uint64_t gen_ns, uint32_t hz)
{
	static const struct lp_op_samples none;
	struct op_row *rows = calloc(gp->ops.n ? gp->ops.n : 1, sizeof(*rows));
	uint64_t g[LP_G_KEYS];
	cJSON *a, *x, *y;
	size_t n = 0;

	if (!os)
		os = &none;
	a = cJSON_AddArrayToObject(o, "ops");
	for (size_t i = 0; rows && i < gp->ops.n && i < LP_MAX_OPS; i++)
		if (os->all[i] || (pr && pr[i].calls))
			rows[n++] = (struct op_row){i, os->all[i]};
	if (rows)
		qsort(rows, n, sizeof(*rows), compare_row);
	for (size_t k = 0; k < n; k++) {
		const struct lp_op_entry *e = &gp->ops.v[rows[k].i];
		const struct lp_op_precise *p = pr ? &pr[rows[k].i] : NULL;

		x = cJSON_CreateObject();
		lp_json_add_escaped(x, "op", e->name);
		cJSON_AddStringToObject(x, "group", lp_op_group_name(e->group));
		lp_json_add_u64(x, "samples", rows[k].n);
		cJSON_AddNumberToObject(x, "share", ratio(rows[k].n, os->total));
		lp_json_add_u64(x, "generation_samples", os->gen[rows[k].i]);
		/* of its samples, its OpenMP workers' (their stacks hold no op: the master's) */
		lp_json_add_u64(x, "region_samples", os->region[rows[k].i]);
		/* Precise mode's figures, over its windows, for ops it probed. */
		if (p && p->calls) {
			y = cJSON_AddObjectToObject(x, "precise");
			lp_json_add_u64(y, "calls", p->calls);
			lp_json_add_u64(y, "ns", p->ns);
			lp_json_add_u64(y, "oncpu_ns", p->oncpu_ns);
			/* Over the same windows: its own on-CPU time over the process's, and its
			 * samples over the process's. */
			cJSON_AddNumberToObject(y, "share", ratio(p->oncpu_ns, w->oncpu_ns));
			cJSON_AddNumberToObject(y, "sampled_share",
						ratio(w->op_samples[rows[k].i], w->op_total));
			cJSON_AddItemToObject(y, "histogram", lp_render_hist(&p->hist));
		}
		cJSON_AddItemToArray(a, x);
	}
	free(rows);
	lp_json_add_u64(o, "ops_dropped", gp->ops_dropped);

	x = cJSON_AddObjectToObject(o, "op_groups");
	lp_json_add_u64(x, "samples", os->total);
	y = cJSON_AddObjectToObject(x, "share");
	lp_op_group_counts(&gp->ops, os, false, g);
	for (int i = 0; i < LP_G_KEYS; i++)
		cJSON_AddNumberToObject(y, lp_op_group_key(i), ratio(g[i], os->total));

	render_unwind(o, gp, os);

	/* CPU time is summed over threads, so per token it can exceed the wall time. */
	x = cJSON_AddObjectToObject(o, "per_token");
	lp_json_add_u64(x, "generated", gen_tokens);
	cJSON_AddNumberToObject(x, "wall_ms", gen_timed ? (double)gen_ns / 1e6 / gen_timed : 0);
	lp_json_add_u64(x, "samples", os->gen_total);
	y = cJSON_AddObjectToObject(x, "cpu_ms");
	lp_op_group_counts(&gp->ops, os, true, g);
	for (int i = 0; i < LP_G_KEYS; i++)
		cJSON_AddNumberToObject(y, lp_op_group_key(i),
					gen_tokens && hz ? (double)g[i] * 1e3 / hz / gen_tokens
							 : 0);
	if (pr && w->ctr[LP_W_GEN_TOKENS])
		render_precise_per_token(x, gp, pr, w);
}

/* Configured names (not globs) that none of the process's objects holds. */
static cJSON *render_missing(const struct lp_config *cfg, const struct lp_eproc *gp)
{
	cJSON *a = cJSON_CreateArray();

	/* ggml's settings name what its processes may hold; another engine's processes are
	 * found by their own step function, which they hold */
	for (int c = 0; cfg && gp->engine == LP_ENGINE_GGML && c < LP_SYM_CONFIG_NR; c++)
		for (const char *const *p = cfg->symbols[c]; p && *p; p++)
			if (!lp_eproc_has(gp, *p))
				cJSON_AddItemToArray(a, cJSON_CreateString(*p));
	return a;
}
void lp_render_precise_state(cJSON *x, const struct lp_eproc *gp, uint64_t now)
{
	cJSON_AddStringToObject(x, "state",
				gp->precise_on		? "on"
				: gp->precise_attaching ? "attaching"
							: "off");
	cJSON_AddBoolToObject(x, "active", gp->precise_on || gp->precise_attaching);
	if (gp->precise_on && gp->window_until_ns)
		cJSON_AddNumberToObject(x, "seconds_left",
					gp->window_until_ns > now
						? (double)(gp->window_until_ns - now) / 1e9
						: 0.0);
	else if (gp->precise_attaching && gp->attach_seconds > 0)
		cJSON_AddNumberToObject(x, "seconds_left", gp->attach_seconds);
	else
		cJSON_AddNullToObject(x, "seconds_left");
	cJSON_AddNumberToObject(x, "attach_ms", (double)gp->attach_ns / 1e6);
}

/* The Python functions with most samples outside ops, named in the process document */
#define PY_OUTSIDE_LISTED 20

/* CPython in the process: its version, whether its frames are read, its samples outside
 * ops by Python function (over all its samples), its GIL waits. */
static void render_python(cJSON *o, const struct lp_proc_view *v)
{
	const struct lp_py_state *py = v->target->eng ? &v->target->eng->py : NULL;
	uint64_t total = v->ops ? v->ops->total : 0, sum = v->py_none + v->py_unnamed;
	char ver[32];
	cJSON *x, *y, *a;

	if (!py || !py->state) {
		cJSON_AddNullToObject(o, "python");
		return;
	}
	x = cJSON_AddObjectToObject(o, "python");
	snprintf(ver, sizeof(ver), "%u.%u.%u", (py->version >> 24) & 0xff,
		 (py->version >> 16) & 0xff, (py->version >> 8) & 0xff);
	if (py->version) /* 0: not known (before 3.11, or unreadable) */
		cJSON_AddStringToObject(x, "version", ver);
	else
		cJSON_AddNullToObject(x, "version");
	if (py->state == 1) {
		cJSON_AddStringToObject(x, "frames", "read");
	} else {
		char why[256];

		snprintf(why, sizeof(why), "not read: %s; its stacks keep their native frames",
			 py->why_not ? py->why_not : "its structures could not be read");
		cJSON_AddStringToObject(x, "frames", why);
	}
	lp_json_add_u64(x, "functions_named", py->nfuncs);
	lp_json_add_u64(x, "code_objects_unreadable", py->read_errors);
	y = cJSON_AddObjectToObject(x, "outside_ops");
	a = cJSON_AddArrayToObject(y, "functions");
	for (size_t i = 0; i < v->npy; i++) {
		cJSON *f;

		sum += v->py[i].all;
		if (i >= PY_OUTSIDE_LISTED)
			continue;
		f = cJSON_CreateObject();
		lp_json_add_escaped(f, "function", v->py[i].name);
		lp_json_add_escaped(f, "file", v->py[i].file);
		lp_json_add_u64(f, "line", v->py[i].firstline);
		lp_json_add_u64(f, "samples", v->py[i].all);
		cJSON_AddNumberToObject(f, "share", ratio(v->py[i].all, total));
		lp_json_add_u64(f, "generation_samples", v->py[i].gen);
		cJSON_AddItemToArray(a, f);
	}
	lp_json_add_u64(y, "functions_more",
			v->npy > PY_OUTSIDE_LISTED ? v->npy - PY_OUTSIDE_LISTED : 0);
	lp_json_add_u64(y, "samples", sum);
	lp_json_add_u64(y, "no_python_samples", v->py_none);
	lp_json_add_u64(y, "unread_samples", v->py_unnamed);
	y = cJSON_AddObjectToObject(x, "gil");
	lp_json_add_u64(y, "waits", v->stats.ctr[LP_C_GIL_WAITS]);
	lp_json_add_u64(y, "wait_ns", v->stats.ctr[LP_C_GIL_WAIT_NS]);
}

static cJSON *render_ggml(const struct lp_proc_view *v, const struct lp_config *cfg,
			  uint32_t sample_hz, uint64_t now)
{
	const struct lp_eproc *gp = v->target->eng;
	const __u64 *ctr = v->stats.ctr;
	const struct lp_precise_totals *w = &v->precise;
	cJSON *o = cJSON_CreateObject(), *tk, *x, *y;
	uint64_t spin, wall_ns;

	cJSON_AddItemToObject(o, "objects", render_objects(gp, v->ops));
	cJSON_AddItemToObject(o, "missing", render_missing(cfg, gp));
	x = cJSON_AddObjectToObject(o, "step");
	cJSON_AddStringToObject(x, "name", lp_engine_step_of(gp->engine).name);
	cJSON_AddStringToObject(x, "timed", lp_engine_step_of(gp->engine).timed);
	cJSON_AddStringToObject(x, "errors", lp_engine_step_of(gp->engine).errors);
	lp_json_add_u64(o, "sampling_table_functions", gp->nranges);
	lp_json_add_u64(o, "sampling_table_dropped", gp->ranges_dropped);

	tk = cJSON_AddObjectToObject(o, "tokens");
	lp_json_add_u64(tk, "decoded", ctr[LP_C_DECODE_PROMPT_TOKENS] + ctr[LP_C_DECODE_GEN_CALLS]);
	lp_json_add_u64(tk, "decode_errors", ctr[LP_C_DECODE_ERRORS]);
	/* CLOCK_MONOTONIC when this daemon began to count its decodes; 0: not yet */
	lp_json_add_u64(tk, "since_ns", gp->decode_since_ns);
	render_phase(tk, "prompt", ctr[LP_C_DECODE_PROMPT_CALLS], ctr[LP_C_DECODE_PROMPT_TOKENS],
		     lp_timed_tokens(ctr, 1), ctr[LP_C_DECODE_PROMPT_NS]);
	/* A token per sequence a step: one a llama_decode call, the batch's a torch forward. */
	render_phase(tk, "generation", ctr[LP_C_GEN_STEPS], ctr[LP_C_DECODE_GEN_CALLS],
		     lp_timed_tokens(ctr, 0), ctr[LP_C_DECODE_GEN_NS]);
	/* tokens_per_s above is inside llama_decode; this is the wall clock, what the engine's
	 * own rate counts: each generation decode and the gap to the next one's start when it
	 * follows within LP_GEN_GAP_NS (sampling, the application's work). Over the same calls
	 * as the time inside, so never faster than it: timed from one decode's start to the
	 * next, a slow last call (outside every interval) once read faster (30.68 tokens/s
	 * against 30.33 inside, beside a busy host). */
	x = cJSON_GetObjectItemCaseSensitive(tk, "generation");
	wall_ns = ctr[LP_C_DECODE_GEN_NS] + ctr[LP_C_GEN_GAP_NS];
	cJSON_AddNumberToObject(x, "wall_tokens_per_s",
				ratio(lp_timed_tokens(ctr, 0) * 1000000000ULL, wall_ns));
	cJSON_AddNumberToObject(x, "wall_ms_per_token",
				ratio(wall_ns, lp_timed_tokens(ctr, 0)) / 1e6);
	/* Sequences a generation step carried: 1 for llama_decode's (a decode of one token),
	 * the batch for a torch forward's. */
	cJSON_AddNumberToObject(x, "batch", ratio(ctr[LP_C_DECODE_GEN_CALLS], ctr[LP_C_GEN_STEPS]));

	/* Each sample stands for 1/hz seconds of CPU time. */
	render_ops(o, gp, v->ops, v->op_precise, w, ctr[LP_C_DECODE_GEN_CALLS],
		   lp_timed_tokens(ctr, 0), ctr[LP_C_DECODE_GEN_NS], sample_hz);
	lp_render_graph(o, gp, v->nodes, v->nnodes, w->ctr[LP_W_GEN_TOKENS],
			v->ops ? v->ops->nodes_gen_tokens : 0, ctr[LP_C_BARRIER_GEN_CALLS]);
	/* torch: its OpenMP regions, whose entries are probed in its processes */
	if (gp->engine == LP_ENGINE_TORCH) {
		x = cJSON_AddObjectToObject(o, "openmp");
		lp_json_add_u64(x, "regions", ctr[LP_C_OMP_REGIONS]);
		lp_json_add_u64(x, "region_ns", ctr[LP_C_OMP_REGION_NS]);
		lp_json_add_u64(x, "region_probes", gp->region.n);
		/* how a worker's sample finds its region's op */
		cJSON_AddStringToObject(x, "workers_by",
					gp->omp_team	      ? "thread_data"
					: gp->region_attached ? "region_probes"
							      : "none");
		if (gp->region_error)
			cJSON_AddStringToObject(x, "error", strerror(-gp->region_error));
		else
			cJSON_AddNullToObject(x, "error");
	}
	x = cJSON_AddObjectToObject(o, "sampled");
	lp_json_add_u64(x, "hz", sample_hz);
	/* one per thread there when sampling started; later threads inherit theirs */
	cJSON_AddStringToObject(x, "sampler",
				cfg && cfg->sampler == LP_SAMPLER_THREAD ? "thread" : "cpu");
	lp_json_add_u64(x, "thread_events", gp->sampler.opened);
	/* CLOCK_MONOTONIC when this process's samples began to count; 0: not yet */
	lp_json_add_u64(x, "since_ns",
			gp->sampler.started_ns ? gp->sampler.started_ns : gp->table_ns);
	if (gp->sampler.error)
		cJSON_AddStringToObject(x, "error", strerror(-gp->sampler.error));
	lp_json_add_u64(x, "samples", ctr[LP_C_SAMPLES]);
	/* Samples the kernel did not take while its threads ran on (sample.bpf.c): missing
	 * from the samples and from every share. */
	lp_json_add_u64(x, "not_taken", ctr[LP_C_SAMPLES_SKIPPED]);
	/* Sampled CPU time over the on-CPU time the scheduler hook measured since sampling
	 * began: 1 where the timer fires every period; lower where the host skips periods. */
	if (sample_hz && !v->target->base && ctr[LP_C_ONCPU_NS] > gp->oncpu_at_table_ns)
		cJSON_AddNumberToObject(
			x, "coverage",
			(double)ctr[LP_C_SAMPLES] * 1e9 / sample_hz /
				(double)(ctr[LP_C_ONCPU_NS] - gp->oncpu_at_table_ns));
	else
		cJSON_AddNullToObject(x, "coverage");
	lp_json_add_u64(x, "matmul", ctr[LP_C_SAMPLES_MATMUL]);
	lp_json_add_u64(x, "barrier", ctr[LP_C_SAMPLES_BARRIER]);
	cJSON_AddItemToObject(x, "share",
			      render_share(ctr[LP_C_SAMPLES_MATMUL], ctr[LP_C_SAMPLES_BARRIER],
					   ctr[LP_C_SAMPLES]));
	lp_json_add_u64(x, "barrier_offcpu_estimate_ns", ctr[LP_C_BARRIER_OFF_EST_NS]);

	x = cJSON_AddObjectToObject(o, "precise");
	lp_render_precise_state(x, gp, now);
	lp_json_add_u64(x, "windows", w->windows);
	cJSON_AddNumberToObject(x, "seconds", (double)w->ns / 1e9);
	lp_json_add_u64(x, "oncpu_ns", w->oncpu_ns);
	lp_json_add_u64(x, "functions_probed", gp->nprobed);
	lp_json_add_u64(x, "op_functions_probed", gp->nops_probed);
	/* the ops whose functions a window probed (their "precise" figures, in "ops") */
	y = cJSON_AddArrayToObject(x, "ops_probed");
	for (size_t i = 0; i < gp->ops.n && i < LP_MAX_OPS; i++)
		if (gp->op_probed[i])
			cJSON_AddItemToArray(y, lp_json_escaped(gp->ops.v[i].name));
	if (gp->precise_ops_missing)
		cJSON_AddStringToObject(x, "ops_not_found", gp->precise_ops_missing);
	if (gp->precise_error)
		cJSON_AddStringToObject(x, "error", strerror(-gp->precise_error));
	y = cJSON_AddObjectToObject(x, "matmul");
	lp_json_add_u64(y, "calls", ctr[LP_C_MATMUL_CALLS]);
	lp_json_add_u64(y, "ns", ctr[LP_C_MATMUL_NS]);
	lp_json_add_u64(y, "exclusive_oncpu_ns", ctr[LP_C_MATMUL_EXCL_ONCPU_NS]);
	spin = ctr[LP_C_BARRIER_NS] > ctr[LP_C_BARRIER_OFF_NS]
		       ? ctr[LP_C_BARRIER_NS] - ctr[LP_C_BARRIER_OFF_NS]
		       : 0;
	y = cJSON_AddObjectToObject(x, "barrier");
	lp_json_add_u64(y, "calls", ctr[LP_C_BARRIER_CALLS]);
	lp_json_add_u64(y, "ns", ctr[LP_C_BARRIER_NS]);
	lp_json_add_u64(y, "spin_ns", spin);
	lp_json_add_u64(y, "sleep_ns", ctr[LP_C_BARRIER_NS] - spin);
	cJSON_AddItemToObject(x, "share",
			      render_share(ctr[LP_C_MATMUL_EXCL_ONCPU_NS], spin, w->oncpu_ns));
	/* The estimate over the same windows, to judge it by. */
	cJSON_AddItemToObject(x, "sampled_share",
			      render_share(w->ctr[LP_W_SAMPLES_MATMUL],
					   w->ctr[LP_W_SAMPLES_BARRIER], w->ctr[LP_W_SAMPLES]));
	lp_json_add_u64(x, "samples", w->ctr[LP_W_SAMPLES]);
	render_observer(x, w, ctr);
	return o;
}

static cJSON *render_context(const struct lp_context *x)
{
	cJSON *o = cJSON_CreateObject(), *w;

	lp_json_add_u64(o, "cpus_allowed", x->ncpus);
	lp_json_add_u64(o, "cores_allowed", x->ncores);
	/* the last-level caches of those CPUs, each instance once */
	lp_json_add_u64(o, "llc_bytes", x->llc_bytes);
	lp_json_add_u64(o, "llc_instances", x->nllc);
	if (x->quota_cpus > 0)
		cJSON_AddNumberToObject(o, "quota_cpus", x->quota_cpus);
	else
		cJSON_AddNullToObject(o, "quota_cpus");
	if (x->env_read) {
		cJSON *e = cJSON_AddObjectToObject(o, "openmp_environment");

		lp_json_add_escaped(e, "OMP_WAIT_POLICY", x->omp_wait_policy);
		lp_json_add_escaped(e, "GOMP_SPINCOUNT", x->gomp_spincount);
		lp_json_add_escaped(e, "OMP_NUM_THREADS", x->omp_num_threads);
		lp_json_add_escaped(e, "OMP_THREAD_LIMIT", x->omp_thread_limit);
	} else {
		cJSON_AddNullToObject(o, "openmp_environment");
	}
	w = cJSON_AddObjectToObject(o, "weights");
	lp_json_add_u64(w, "mappings", x->weights_mappings);
	lp_json_add_u64(w, "bytes", x->weights_bytes);
	lp_json_add_u64(w, "resident_bytes", x->weights_rss);
	lp_json_add_u64(w, "huge_page_bytes", x->weights_huge);
	/* read per generated token, from the model's header: 0 when it is not readable */
	lp_json_add_u64(w, "per_token_bytes", x->weights_per_token);
	lp_json_add_u64(w, "experts", x->experts);
	lp_json_add_u64(w, "experts_used", x->experts_used);
	if (x->weights_mappings)
		lp_json_add_escaped(w, "file", x->weights_path);
	return o;
}

/* GET /v1/processes/{pid}/findings, and "findings" in the process's document. */
cJSON *lp_render_findings(const struct lp_proc_view *v)
{
	cJSON *o;

	if (!v->findings)
		return cJSON_CreateNull();
	o = lp_findings_render(v->findings);
	if (v->has_context)
		cJSON_AddItemToObject(o, "context", render_context(&v->context));
	else
		cJSON_AddNullToObject(o, "context");
	return o;
}

static cJSON *render_identity(const struct lp_report *r, const struct lp_proc_view *v);

cJSON *lp_render_proc_findings(const struct lp_report *r, const struct lp_proc_view *v)
{
	cJSON *o = render_identity(r, v), *f = lp_render_findings(v), *e;

	/* The findings' fields after the identity's, as one object. */
	while (f && f->child) {
		e = cJSON_DetachItemViaPointer(f, f->child);
		cJSON_AddItemToObject(o, e->string, e);
	}
	cJSON_Delete(f);
	return o;
}

cJSON *lp_render_proc_requests(const struct lp_report *r, const struct lp_proc_view *v)
{
	cJSON *o = render_identity(r, v);

	cJSON_AddItemToObject(
		o, "requests",
		lp_render_requests(v->requests, !r->features || r->features->bpf_loop));
	return o;
}

static void str_or_null(cJSON *o, const char *k, const char *v)
{
	if (v && *v)
		cJSON_AddStringToObject(o, k, v);
	else
		cJSON_AddNullToObject(o, k);
}

/* Who the process is beyond pid and comm (identity.h); text escaped already. */
static void render_who(cJSON *o, const struct lp_target *t)
{
	const struct lp_identity *id = &t->ident;
	char workload[160];
	cJSON *m;

	str_or_null(o, "cmdline", id->cmdline);
	lp_identity_workload(id, t->comm, workload, sizeof(workload));
	cJSON_AddStringToObject(o, "workload", workload);
	str_or_null(o, "cgroup", id->cgroup);
	str_or_null(o, "unit", id->unit);
	str_or_null(o, "container", id->container);
	str_or_null(o, "pod", id->pod);
	if (!id->model[0]) {
		cJSON_AddNullToObject(o, "model");
		return;
	}
	m = cJSON_AddObjectToObject(o, "model");
	cJSON_AddStringToObject(m, "name", lp_identity_model_name(id));
	cJSON_AddStringToObject(m, "path", id->model);
	lp_json_add_u64(m, "bytes", id->model_bytes);
	str_or_null(m, "architecture", id->model_arch);
	str_or_null(m, "type", id->model_type);
}

/* What both the summary and the full document start with. */
static cJSON *render_identity(const struct lp_report *r, const struct lp_proc_view *v)
{
	const struct lp_target *t = v->target;
	uint64_t until = t->exited && t->exited_at_ns ? t->exited_at_ns : r->now_ns;
	cJSON *o = cJSON_CreateObject();

	lp_json_add_u64(o, "pid", (uint64_t)t->pid);
	lp_json_add_escaped(o, "comm", t->comm);
	if (t->exe)
		lp_json_add_escaped(o, "exe", t->exe);
	else
		cJSON_AddNullToObject(o, "exe");
	if (t->uid == (uid_t)-1)
		cJSON_AddNullToObject(o, "uid");
	else
		lp_json_add_u64(o, "uid", t->uid);
	cJSON_AddStringToObject(o, "matched_by", t->matched_by);
	/* the engine it runs; null before it is found to run one */
	if (t->eng && t->eng->found_ns)
		cJSON_AddStringToObject(o, "engine", lp_engine_name(t->eng->engine));
	else
		cJSON_AddNullToObject(o, "engine");
	render_who(o, t);
	cJSON_AddStringToObject(o, "state", t->exited ? "exited" : "running");
	cJSON_AddBoolToObject(o, "data_lost", t->exit_lost);
	cJSON_AddNumberToObject(
		o, "tracked_seconds",
		until > t->tracked_since_ns ? (double)(until - t->tracked_since_ns) / 1e9 : 0);
	if (t->exited)
		cJSON_AddNumberToObject(o, "exited_seconds_ago",
					r->now_ns > t->exited_at_ns
						? (double)(r->now_ns - t->exited_at_ns) / 1e9
						: 0);
	return o;
}

/* count, sum and the percentiles of a histogram, without its buckets. */
static cJSON *render_hist_brief(const struct lp_hist *h)
{
	cJSON *o = cJSON_CreateObject();

	lp_json_add_u64(o, "count", lp_hist_total(h));
	lp_json_add_u64(o, "sum", h->sum_ns);
	lp_json_add_u64(o, "p50", lp_hist_quantile(h, 0.50));
	lp_json_add_u64(o, "p99", lp_hist_quantile(h, 0.99));
	return o;
}

/* The counters, null where this daemon's sources do not collect one. */
static void render_counters(cJSON *c, const struct lp_report *r, const __u64 *ctr)
{
	for (int i = 0; i < LP_C_NR; i++) {
		if (lp_report_counter_known(r, i))
			lp_json_add_u64(c, lp_counter_names[i], ctr[i]);
		else
			cJSON_AddNullToObject(c, lp_counter_names[i]);
	}
}

cJSON *lp_render_summary(const struct lp_report *r, const struct lp_proc_view *v)
{
	const __u64 *ctr = v->stats.ctr;
	const struct lp_hist *hist = v->stats.hist;
	cJSON *o = render_identity(r, v), *c, *h;
	int worst;

	lp_json_add_u64(o, "threads", v->nthreads);
	/* whether it runs ggml: the key the list had before there were other engines */
	cJSON_AddBoolToObject(o, "ggml",
			      v->target->eng && v->target->eng->found_ns &&
				      v->target->eng->engine == LP_ENGINE_GGML);
	c = cJSON_AddObjectToObject(o, "counters");
	render_counters(c, r, ctr);
	lp_json_add_u64(c, "futex_waits", lp_hist_total(&hist[LP_H_FUTEX]));
	h = cJSON_AddObjectToObject(o, "histograms");
	for (int i = 0; i < LP_H_NR; i++)
		cJSON_AddItemToObject(h, lp_hist_names[i], render_hist_brief(&hist[i]));
	cJSON_AddItemToObject(o, "sampled_share",
			      render_share(ctr[LP_C_SAMPLES_MATMUL], ctr[LP_C_SAMPLES_BARRIER],
					   ctr[LP_C_SAMPLES]));
	cJSON_AddBoolToObject(o, "precise_active",
			      v->target->eng && (v->target->eng->precise_on ||
						 v->target->eng->precise_attaching));
	/* How many rules fired and the worst severity (of them and the recent ones), for a
	 * table to mark the process. */
	c = cJSON_AddObjectToObject(o, "findings");
	lp_json_add_u64(c, "count", v->findings ? v->findings->n : 0);
	worst = v->findings ? lp_findings_worst(v->findings) : -1;
	if (worst >= 0)
		cJSON_AddStringToObject(c, "worst", lp_severity_names[worst]);
	else
		cJSON_AddNullToObject(c, "worst");
	return o;
}

/* Its requests in brief, as counters and histograms that two reads can subtract (top's
 * columns, dump's line); null before a decode's batch was read. */
static cJSON *render_requests_brief(const struct lp_requests *rq)
{
	static const char *const names[LP_RH_NR] = {"ttft", "tpot", "e2e"};
	uint64_t seqs = 0, decodes = 0;
	cJSON *o, *h;

	if (!rq)
		return cJSON_CreateNull();
	o = cJSON_CreateObject();
	for (int i = 1; i <= LP_BATCH_SEQS; i++) {
		seqs += (uint64_t)i * rq->occupancy[i];
		decodes += rq->occupancy[i];
	}
	lp_json_add_u64(o, "requests", rq->ndone);
	lp_json_add_u64(o, "in_flight", rq->nactive);
	lp_json_add_u64(o, "prompt_tokens", rq->m.prompt_tokens);
	lp_json_add_u64(o, "output_tokens", rq->m.output_tokens);
	lp_json_add_u64(o, "reused_tokens", rq->m.reused_tokens);
	/* decodes read, and the sequences they carried: their ratio is the occupancy */
	lp_json_add_u64(o, "decodes", decodes);
	lp_json_add_u64(o, "sequences", seqs);
	h = cJSON_AddObjectToObject(o, "histograms");
	for (int k = 0; k < LP_RH_NR; k++)
		cJSON_AddItemToObject(h, names[k], lp_render_hist(&rq->m.h[k]));
	return o;
}

cJSON *lp_render_proc(const struct lp_report *r, const struct lp_proc_view *v)
{
	const struct lp_target *t = v->target;
	const struct lp_proc_stats *s = &v->stats;
	cJSON *o = render_identity(r, v), *c, *h, *th;

	lp_json_add_u64(o, "report_format", LP_REPORT_FORMAT);
	c = cJSON_AddObjectToObject(o, "counters");
	render_counters(c, r, s->ctr);
	lp_json_add_u64(c, "futex_waits", lp_hist_total(&s->hist[LP_H_FUTEX]));

	h = cJSON_AddObjectToObject(o, "histograms");
	for (int i = 0; i < LP_H_NR; i++)
		cJSON_AddItemToObject(h, lp_hist_names[i], lp_render_hist(&s->hist[i]));

	cJSON_AddItemToObject(o, "futex", render_futex(&v->futex));
	cJSON_AddItemToObject(o, "preemptors", render_preempt(&v->preempt, t->pid));
	cJSON_AddItemToObject(o, "findings", lp_render_findings(v));
	cJSON_AddItemToObject(o, "requests", render_requests_brief(v->requests));
	/* The engine's figures under its name; "ggml" is null for a process of another
	 * engine, as for one of none (a reader of "ggml" keeps what it read). */
	if (t->eng && t->eng->found_ns)
		cJSON_AddItemToObject(o, lp_engine_name(t->eng->engine),
				      render_ggml(v, r->cfg, r->sample_hz, r->now_ns));
	if (!cJSON_HasObjectItem(o, "ggml"))
		cJSON_AddNullToObject(o, "ggml");
	/* CPython in it, whatever its engine */
	render_python(o, v);
	th = cJSON_AddArrayToObject(o, "threads");
	for (size_t i = 0; i < v->nthreads; i++)
		cJSON_AddItemToArray(th, render_thread(&v->threads[i]));
	return o;
}

size_t lp_feature_flags(const struct lp_features *f, struct lp_feature_flag *out)
{
	const struct lp_feature_flag v[] = {
		{"btf", f->btf},
		{"tp_btf", f->tp_btf},
		{"raw_tp", f->raw_tp},
		{"fentry", f->fentry},
		{"kprobes", f->kprobes},
		{"tracefs", f->tracefs},
		{"perf_software_events", f->perf_sw},
		{"hardware_pmu", f->pmu},
		{"ring_buffer", f->ringbuf},
		{"sched_info", f->sched_info},
		{"uprobe_multi", f->uprobe_multi},
		{"bpf_loop", f->bpf_loop},
		{"task_storage", f->task_storage},
	};

	memcpy(out, v, sizeof(v));
	return sizeof(v) / sizeof(v[0]);
}

static cJSON *render_features(const struct lp_features *f)
{
	struct lp_feature_flag v[LP_FEATURE_FLAGS_MAX];
	size_t n = lp_feature_flags(f, v);
	cJSON *o = cJSON_CreateObject();

	for (size_t i = 0; i < n; i++)
		cJSON_AddBoolToObject(o, v[i].name, v[i].on);
	return o;
}

cJSON *lp_render_report(const struct lp_report *r)
{
	cJSON *root = cJSON_CreateObject(), *col, *maps, *lost, *procs;
	uint64_t memlock = 0;

	cJSON_AddStringToObject(root, "version", LLMPROF_VERSION);
	lp_json_add_u64(root, "report_format", LP_REPORT_FORMAT);
	lp_json_add_u64(root, "abi", LP_ABI_VERSION);
	if (r->features)
		cJSON_AddItemToObject(root, "features", render_features(r->features));

	col = cJSON_AddObjectToObject(root, "collectors");
	cJSON_AddStringToObject(col, "scheduler", r->sched_variant ? r->sched_variant : "off");
	cJSON_AddStringToObject(col, "runqueue", r->wakeups ? "sched_wakeup" : "sched_info");
	cJSON_AddStringToObject(col, "futex", r->futex_source ? r->futex_source : "off");
	cJSON_AddStringToObject(col, "futex_attached",
				!r->futex_source      ? "never"
				: !r->futex_on_demand ? "always"
				: r->futex_attached   ? "while a process is tracked: now"
						      : "while a process is tracked: not now");
	/* minor faults from the kernel's per-thread counts; major ones by an event each */
	cJSON_AddStringToObject(col, "page_faults",
				!r->cfg || !r->cfg->faults ? "off"
				: r->fault_cpus
					? "minor: the kernel's counts; major: perf software "
					  "events"
					: "minor: the kernel's counts; major: off");
	cJSON_AddStringToObject(col, "new_mappings", r->mmap_source ? r->mmap_source : "off");
	cJSON_AddStringToObject(col, "precise_probes",
				r->uprobe_multi ? "multi-uprobe links" : "a link per probe");
	lp_json_add_u64(col, "sample_hz", r->sample_hz);
	lp_json_add_u64(col, "stretch_sample", r->stretch_sample);

	maps = cJSON_AddArrayToObject(root, "maps");
	for (size_t i = 0; i < r->nmaps; i++) {
		const struct lp_map_usage *m = &r->maps[i];
		cJSON *e = cJSON_CreateObject();

		cJSON_AddStringToObject(e, "name", m->name);
		lp_json_add_u64(e, "max_entries", m->max_entries);
		lp_json_add_u64(e, "entries", m->entries);
		lp_json_add_u64(e, "value_size", m->value_size);
		lp_json_add_u64(e, "memlock_bytes", m->memlock);
		memlock += m->memlock;
		cJSON_AddItemToArray(maps, e);
	}
	lp_json_add_u64(root, "kernel_memory_bytes", memlock);

	lost = cJSON_AddObjectToObject(root, "lost");
	lp_json_add_u64(lost, "threads_map_full", r->drops[LP_D_THREADS_FULL]);
	lp_json_add_u64(lost, "futex_addrs_map_full", r->drops[LP_D_FUTEX_ADDRS_FULL]);
	lp_json_add_u64(lost, "ring_buffer_full", r->drops[LP_D_EVENTS_LOST]);
	lp_json_add_u64(lost, "preemptors_map_full", r->drops[LP_D_PREEMPTORS_FULL]);
	lp_json_add_u64(lost, "decodes_ring_buffer_half_full", r->drops[LP_D_DECODES_LOST]);
	lp_json_add_u64(lost, "nodes_map_full", r->drops[LP_D_NODES_FULL]);
	lp_json_add_u64(lost, "aop_samples_map_full", r->drops[LP_D_AOP_FULL]);
	lp_json_add_u64(lost, "py_samples_map_full", r->drops[LP_D_PY_FULL]);
	lp_json_add_u64(lost, "procs_map_full", r->procs_full);
	lp_json_add_u64(lost, "exited_evicted", r->exited_evicted);
	lp_json_add_u64(lost, "exited_before_tracking", r->exited_untracked);
	lp_json_add_u64(lost, "profile_ring_buffer_full", r->profile_lost_ring);
	lp_json_add_u64(lost, "profile_memory_bound", r->profile_lost_table);

	/* What the kernel did not run our programs for: not data the daemon lost, but
	 * figures short by it (sample.bpf.c, "Samples not taken"; core.h). */
	lost = cJSON_AddObjectToObject(root, "kernel_skipped");
	lp_json_add_u64(lost, "samples_not_taken", r->samples_skipped);
	lp_json_add_u64(lost, "samples_not_taken_unattributed", r->samples_skipped_unknown);
	lp_json_add_u64(lost, "bpf_recursion_misses", r->recursion_misses);
	lp_json_add_u64(root, "exits_recovered", r->exits_recovered);
	lp_json_add_u64(root, "waiting_for_room", r->waiting);

	procs = cJSON_AddArrayToObject(root, "processes");
	for (size_t i = 0; i < r->nprocs; i++)
		cJSON_AddItemToArray(procs, lp_render_proc(r, &r->procs[i]));
	return root;
}
