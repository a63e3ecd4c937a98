/* JSON rendering of reports: processes with counters, histograms with percentiles,
 * futex addresses and threads, plus collector state, map fill and every loss counter. */
#include "render.h"

#include <inttypes.h>
#include <stdio.h>

#include "hist.h"

#ifndef LLMPROF_VERSION
#define LLMPROF_VERSION "0"
#endif

const char *const lp_hist_names[LP_H_NR] = {
	[LP_H_RUNQ] = "runqueue_latency",
	[LP_H_OFF_BLOCKED] = "offcpu_blocked",
	[LP_H_OFF_PREEMPTED] = "offcpu_preempted",
	[LP_H_FUTEX] = "futex_wait",
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
};

static void num(cJSON *o, const char *k, uint64_t v)
{
	cJSON_AddNumberToObject(o, k, (double)v);
}

cJSON *lp_render_hist(const struct lp_hist *h)
{
	cJSON *o = cJSON_CreateObject(), *b;

	cJSON_AddStringToObject(o, "unit", "ns");
	num(o, "count", lp_hist_total(h));
	num(o, "sum", h->sum_ns);
	num(o, "max", h->max_ns);
	num(o, "p50", lp_hist_quantile(h, 0.50));
	num(o, "p90", lp_hist_quantile(h, 0.90));
	num(o, "p99", lp_hist_quantile(h, 0.99));
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

	num(o, "addresses", f->naddrs);
	a = cJSON_AddArrayToObject(o, "top");
	for (size_t i = 0; i < f->ntop; i++) {
		const struct lp_futex_view *v = &f->top[i];
		cJSON *e = cJSON_CreateObject();
		char addr[32];

		snprintf(addr, sizeof(addr), "0x%" PRIx64, v->uaddr);
		cJSON_AddStringToObject(e, "uaddr", addr);
		num(e, "waits", v->v.waits);
		num(e, "wait_ns", v->v.wait_ns);
		num(e, "max_ns", v->v.max_ns);
		cJSON_AddItemToArray(a, e);
	}
	return o;
}

static cJSON *render_thread(const struct lp_thread_view *tv)
{
	cJSON *o = cJSON_CreateObject();
	const struct lp_thread *t = &tv->t;

	num(o, "tid", tv->tid);
	cJSON_AddStringToObject(o, "comm", tv->comm);
	num(o, "oncpu_ns", t->oncpu_ns);
	num(o, "runqueue_ns", t->runq_ns);
	num(o, "offcpu_blocked_ns", t->off_blocked_ns);
	num(o, "offcpu_preempted_ns", t->off_preempted_ns);
	num(o, "voluntary_switches", t->nvcsw);
	num(o, "involuntary_switches", t->nivcsw);
	num(o, "migrations", t->migrations);
	num(o, "futex_waits", t->futex_waits);
	num(o, "futex_wait_ns", t->futex_ns);
	num(o, "page_faults_minor", t->faults_min);
	num(o, "page_faults_major", t->faults_maj);
	return o;
}

static cJSON *render_proc(const struct lp_proc_view *v, uint64_t now_ns)
{
	const struct lp_target *t = v->target;
	const struct lp_proc_stats *s = &v->stats;
	uint64_t until = t->exited && s->exit_ns ? s->exit_ns : now_ns;
	cJSON *o = cJSON_CreateObject(), *c, *h, *th;

	num(o, "pid", (uint64_t)t->pid);
	cJSON_AddStringToObject(o, "comm", t->comm);
	if (t->exe)
		cJSON_AddStringToObject(o, "exe", t->exe);
	else
		cJSON_AddNullToObject(o, "exe");
	cJSON_AddStringToObject(o, "matched_by", t->matched_by);
	cJSON_AddStringToObject(o, "state", t->exited ? "exited" : "running");
	cJSON_AddBoolToObject(o, "data_lost", t->exit_lost);
	cJSON_AddNumberToObject(
		o, "tracked_seconds",
		until > t->tracked_since_ns ? (double)(until - t->tracked_since_ns) / 1e9 : 0);

	c = cJSON_AddObjectToObject(o, "counters");
	for (int i = 0; i < LP_C_NR; i++)
		num(c, lp_counter_names[i], s->ctr[i]);
	num(c, "futex_waits", lp_hist_total(&s->hist[LP_H_FUTEX]));

	h = cJSON_AddObjectToObject(o, "histograms");
	for (int i = 0; i < LP_H_NR; i++)
		cJSON_AddItemToObject(h, lp_hist_names[i], lp_render_hist(&s->hist[i]));

	cJSON_AddItemToObject(o, "futex", render_futex(&v->futex));
	th = cJSON_AddArrayToObject(o, "threads");
	for (size_t i = 0; i < v->nthreads; i++)
		cJSON_AddItemToArray(th, render_thread(&v->threads[i]));
	return o;
}

static cJSON *render_features(const struct lp_features *f)
{
	cJSON *o = cJSON_CreateObject();

	cJSON_AddBoolToObject(o, "btf", f->btf);
	cJSON_AddBoolToObject(o, "tp_btf", f->tp_btf);
	cJSON_AddBoolToObject(o, "raw_tp", f->raw_tp);
	cJSON_AddBoolToObject(o, "fentry", f->fentry);
	cJSON_AddBoolToObject(o, "kprobes", f->kprobes);
	cJSON_AddBoolToObject(o, "tracefs", f->tracefs);
	cJSON_AddBoolToObject(o, "perf_software_events", f->perf_sw);
	cJSON_AddBoolToObject(o, "hardware_pmu", f->pmu);
	cJSON_AddBoolToObject(o, "ring_buffer", f->ringbuf);
	return o;
}

cJSON *lp_render_report(const struct lp_report *r)
{
	cJSON *root = cJSON_CreateObject(), *col, *maps, *lost, *procs;
	uint64_t memlock = 0;

	cJSON_AddStringToObject(root, "version", LLMPROF_VERSION);
	num(root, "abi", LP_ABI_VERSION);
	if (r->features)
		cJSON_AddItemToObject(root, "features", render_features(r->features));

	col = cJSON_AddObjectToObject(root, "collectors");
	cJSON_AddStringToObject(col, "scheduler", r->sched_variant ? r->sched_variant : "off");
	cJSON_AddStringToObject(col, "futex", r->futex_source ? r->futex_source : "off");
	cJSON_AddStringToObject(col, "page_faults", r->fault_cpus ? "perf software events" : "off");

	maps = cJSON_AddArrayToObject(root, "maps");
	for (size_t i = 0; i < r->nmaps; i++) {
		const struct lp_map_usage *m = &r->maps[i];
		cJSON *e = cJSON_CreateObject();

		cJSON_AddStringToObject(e, "name", m->name);
		num(e, "max_entries", m->max_entries);
		num(e, "entries", m->entries);
		num(e, "value_size", m->value_size);
		num(e, "memlock_bytes", m->memlock);
		memlock += m->memlock;
		cJSON_AddItemToArray(maps, e);
	}
	num(root, "kernel_memory_bytes", memlock);

	lost = cJSON_AddObjectToObject(root, "lost");
	num(lost, "threads_map_full", r->drops[LP_D_THREADS_FULL]);
	num(lost, "futex_addrs_map_full", r->drops[LP_D_FUTEX_ADDRS_FULL]);
	num(lost, "ring_buffer_full", r->drops[LP_D_EVENTS_LOST]);
	num(lost, "procs_map_full", r->procs_full);
	num(lost, "exited_evicted", r->exited_evicted);

	procs = cJSON_AddArrayToObject(root, "processes");
	for (size_t i = 0; i < r->nprocs; i++)
		cJSON_AddItemToArray(procs, render_proc(&r->procs[i], r->now_ns));
	return root;
}
