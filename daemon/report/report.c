// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* Reading the kernel maps into a report: process stats, per-thread state, futex addresses,
 * map fill and loss counters. */
#include "report/report.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core.skel.h"
#include "base/hist.h"
#include "engine/nodes.h"
#include "kernel/mapwalk.h"
#include "base/procfs.h"
#include "tracked/sweep.h"
#include "tracked/hot.h"

static void read_maps(struct lp_report *r, const struct lp_core *c)
{
	r->nmaps = lp_core_map_usage(c, r->maps, sizeof(r->maps) / sizeof(r->maps[0]));
	for (__u32 k = 0; k < LP_D_NR; k++)
		bpf_map_lookup_elem(bpf_map__fd(c->skel->maps.drops), &k, &r->drops[k]);
}

/* The live view of process tgid, or NULL. */
static struct lp_proc_view *live_view(struct lp_report *r, __u32 tgid)
{
	for (size_t i = 0; i < r->nprocs; i++)
		if (r->procs[i].live && (__u32)r->procs[i].target->pid == tgid)
			return &r->procs[i];
	return NULL;
}

static int add_thread(struct lp_proc_view *v, __u32 tid, const struct lp_thread *t)
{
	struct lp_thread_view *a = realloc(v->threads, (v->nthreads + 1) * sizeof(*a)), *tv;

	if (!a)
		return -ENOMEM;
	v->threads = a;
	tv = &a[v->nthreads++];
	tv->tid = tid;
	tv->t = *t;
	if (lp_proc_read_comm(v->target->pid, (pid_t)tid, tv->comm, sizeof(tv->comm)) < 0)
		strcpy(tv->comm, "?");
	return 0;
}

static int read_thread(void *ctx, const void *key, const void *value)
{
	struct lp_report *r = ctx;
	const struct lp_thread *t = value;
	struct lp_proc_view *v = live_view(r, t->tgid);
	__u32 tid;

	memcpy(&tid, key, sizeof(tid));
	return v ? add_thread(v, tid, t) : 0;
}

/* Hands each live view the threads of its process, from one pass over "threads". */
static int read_threads(struct lp_report *r, const struct lp_core *c)
{
	return lp_map_walk(bpf_map__fd(c->skel->maps.threads), sizeof(__u32),
			   sizeof(struct lp_thread), read_thread, r);
}

struct threads_of {
	struct lp_proc_view *v;
	int fd; /* the threads map */
};

static int read_thread_of(void *ctx, pid_t tid)
{
	struct threads_of *x = ctx;
	struct lp_thread t;
	__u32 key = (__u32)tid;

	if (bpf_map_lookup_elem(x->fd, &key, &t) == 0 && t.tgid == (__u32)x->v->target->pid)
		return add_thread(x->v, key, &t);
	return 0;
}

/* One live process's threads, looked up by the tids in /proc/PID/task: the cost of a
 * one-process report grows with its threads, not with every tracked thread. */
static int read_threads_of(struct lp_proc_view *v, const struct lp_core *c)
{
	struct threads_of x = {v, bpf_map__fd(c->skel->maps.threads)};
	int r = lp_proc_each_task("/proc", v->target->pid, read_thread_of, &x);

	return r == -ENOMEM ? r : 0; /* else gone: its threads left the map with it */
}

struct futex_read {
	struct lp_report *r;
	struct lp_futex_list *lists; /* one per view */
};

static int read_futex_one(void *ctx, const void *key, const void *value)
{
	struct futex_read *x = ctx;
	const struct lp_futex_key *k = key;
	struct lp_proc_view *v = live_view(x->r, k->tgid);

	return v ? lp_futex_list_push(&x->lists[v - x->r->procs], k->uaddr, value) : 0;
}

/* Ranks the futex addresses of each live view, from one pass over "futex_addrs". */
static int read_futex(struct lp_report *r, const struct lp_core *c)
{
	struct futex_read x = {r, calloc(r->nprocs ? r->nprocs : 1, sizeof(*x.lists))};
	int ret;

	if (!x.lists)
		return -ENOMEM;
	ret = lp_map_walk(bpf_map__fd(c->skel->maps.futex_addrs), sizeof(struct lp_futex_key),
			  sizeof(struct lp_futex_val), read_futex_one, &x);
	for (size_t i = 0; i < r->nprocs; i++)
		if (r->procs[i].live)
			lp_futex_list_top(&x.lists[i], &r->procs[i].futex);
		else
			free(x.lists[i].v);
	free(x.lists);
	return ret;
}

/* Hands each view its preemptors still in the kernel map, from one pass over
 * "preemptors": a live process's, and one that exited since the last sweep moved them to
 * its final record (lp_tracker_find_missed_exits). */
static int read_preempt_one(void *ctx, const void *key, const void *value)
{
	struct lp_report *r = ctx;
	const struct lp_preempt_key *k = key;
	struct lp_proc_view *v = live_view(r, k->tgid);

	for (size_t i = 0; !v && i < r->nprocs; i++)
		if (!r->procs[i].live && !r->procs[i].target->final_preempt &&
		    (__u32)r->procs[i].target->pid == k->tgid)
			v = &r->procs[i];
	if (v)
		lp_preempt_top_add(&v->preempt, k->by_tgid, value);
	return 0;
}

static void read_preempt(struct lp_report *r, int fd)
{
	if (fd >= 0)
		lp_map_walk(fd, sizeof(struct lp_preempt_key), sizeof(struct lp_preempt_val),
			    read_preempt_one, r);
}

static void py_one(void *ctx, uint64_t code, const struct lp_py_func *f, uint64_t all, uint64_t gen)
{
	struct lp_proc_view *v = ctx;
	struct lp_py_outside *x;
	size_t i;

	if (!code) { /* a thread running no Python */
		v->py_none += all;
		v->py_none_gen += gen;
		return;
	}
	if (!f) { /* a code object that could not be read */
		v->py_unnamed += all;
		v->py_unnamed_gen += gen;
		return;
	}
	for (i = 0; i < v->npy; i++)
		if (!strcmp(v->py[i].name, f->name) && !strcmp(v->py[i].file, f->file))
			break;
	if (i == v->npy) {
		if (!(x = realloc(v->py, (v->npy + 1) * sizeof(*x))))
			return;
		v->py = x;
		x[i] = (struct lp_py_outside){strdup(f->name), strdup(f->file), f->firstline, 0, 0};
		if (!x[i].name || !x[i].file) {
			free(x[i].name);
			free(x[i].file);
			return;
		}
		v->npy++;
	}
	v->py[i].all += all;
	v->py[i].gen += gen;
}

static int by_samples(const void *a, const void *b)
{
	const struct lp_py_outside *x = a, *y = b;

	return x->all > y->all ? -1 : x->all < y->all;
}

/* The op counts: the kernel's for a live process, the last read for an exited one; and
 * the samples outside ops by Python function. */
static void read_ops(struct lp_proc_view *v, struct lp_eproc *gp, const struct lp_core *c)
{
	v->ops = lp_eproc_op_samples(c, gp, v->target->pid);
	if (v->ops)
		lp_eproc_metrics_ops(gp, v->ops);
	if (gp)
		lp_python_outside(c, v->target->pid, &gp->py, py_one, v);
	if (v->npy)
		qsort(v->py, v->npy, sizeof(*v->py), by_samples);
}

int lp_report_build(struct lp_report *r, const struct lp_core *c, struct lp_tracker *tr, pid_t pid,
		    bool fill)
{
	int procs_fd = bpf_map__fd(c->skel->maps.procs);
	size_t n = 0;
	int ret;

	memset(r, 0, sizeof(*r));
	r->now_ns = lp_now_ns();
	r->sched_variant = c->sched_variant;
	r->wakeups = c->wakeups;
	r->futex_source = c->futex_source;
	r->futex_on_demand = c->futex_on_demand;
	r->futex_attached = c->futex_attached;
	r->futex_results = c->futex_results;
	r->mmap_source = c->mmap_source;
	r->uprobe_multi = c->uprobe_multi;
	r->sample_hz = c->sample_hz;
	r->stretch_sample = c->stretch_sample;
	r->cfg = tr->cfg;
	r->fault_cpus = c->faults ? c->nfault_cpus : 0;
	r->procs_full = tr->procs_full;
	r->exited_untracked = tr->exited_untracked;
	r->exits_recovered = tr->exits_recovered;
	r->waiting = tr->nwaiting;
	r->exited_evicted = tr->exited_evicted;
	/* Map fill is for status and /metrics; counting entries walks every map. */
	if (!pid && fill)
		read_maps(r, c);

	r->procs = calloc(tr->n ? tr->n : 1, sizeof(*r->procs));
	if (!r->procs)
		return -ENOMEM;
	for (size_t i = 0; i < tr->n; i++) {
		const struct lp_target *t = tr->v[i];
		struct lp_proc_view *v = &r->procs[n];
		__u32 key = (__u32)t->pid;

		if (pid && t->pid != pid)
			continue;
		v->target = t;
		if (t->exited) {
			lp_target_final(t, &v->stats);
			if (t->final_futex)
				v->futex = *t->final_futex;
			if (t->final_preempt)
				v->preempt = *t->final_preempt;
		} else {
			/* A failed lookup means the process exited after lp_tracker_find_lost_exits(): it is
			 * reported as live with zeroes rather than hidden. */
			lp_hot_read(procs_fd, tr->hot_fd, key, &v->stats);
			v->live = true;
		}
		read_ops(v, t->eng, c);
		v->requests = t->requests;
		v->op_precise = lp_precise_ops(c, t);
		v->nodes = lp_nodes_read(c, t, &v->nnodes);
		/* Window deltas are of the kernel's counts: before the base is added. */
		lp_precise_totals(t, &v->stats, v->ops, &v->precise);
		if (t->base)
			lp_stats_add(&v->stats, t->base);
		n++;
	}
	r->nprocs = n;
	read_preempt(r, tr->preempt_fd);
	ret = read_futex(r, c);
	if (ret < 0 || !pid)
		return ret < 0 ? ret : read_threads(r, c);
	for (size_t i = 0; i < n && ret == 0; i++)
		if (r->procs[i].live)
			ret = read_threads_of(&r->procs[i], c);
	return ret;
}

void lp_report_free(struct lp_report *r)
{
	for (size_t i = 0; i < r->nprocs; i++) {
		free(r->procs[i].threads);
		free(r->procs[i].ops);
		for (size_t k = 0; k < r->procs[i].npy; k++) {
			free(r->procs[i].py[k].name);
			free(r->procs[i].py[k].file);
		}
		free(r->procs[i].py);
		free(r->procs[i].op_precise);
		free(r->procs[i].nodes);
		if (r->procs[i].findings)
			lp_findings_clear(r->procs[i].findings);
		free(r->procs[i].findings);
	}
	free(r->procs);
	r->procs = NULL;
	r->nprocs = 0;
}
