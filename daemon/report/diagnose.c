// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* Windows, context and bandwidth for the findings (diagnose.h). */
#include "report/diagnose.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "engine/tensors.h"
#include "tracked/track.h"

static uint64_t sub(uint64_t a, uint64_t b)
{
	return a > b ? a - b : 0;
}

/* The host's CPUs change rarely (hotplug, a governor switched): read again each minute. */
#define HOST_REFRESH_NS (60ULL * 1000000000ULL)

void lp_diagnose_init(struct lp_diagnose *dg, const char *state_dir)
{
	memset(dg, 0, sizeof(*dg));
	lp_membw_init(&dg->membw, state_dir);
}

static void snap_free(struct lp_snap *s)
{
	free(s->threads);
	memset(s, 0, sizeof(*s));
}

void lp_diagnose_free(struct lp_diagnose *dg)
{
	for (size_t i = 0; i < dg->n; i++)
		for (unsigned k = 0; k < dg->w[i].nsnap; k++)
			snap_free(&dg->w[i].s[k]);
	free(dg->w);
	free(dg->host);
	lp_membw_free(&dg->membw);
	memset(dg, 0, sizeof(*dg));
}

static const struct lp_host_cpus *host(struct lp_diagnose *dg, uint64_t now)
{
	if (!dg->host && !(dg->host = calloc(1, sizeof(*dg->host))))
		return NULL;
	if (!dg->host_read_ns || now - dg->host_read_ns >= HOST_REFRESH_NS) {
		if (lp_host_cpus_read(dg->host, "/sys") < 0)
			return NULL;
		dg->host_read_ns = now;
	}
	return dg->host;
}

static int by_pid(const void *a, const void *b)
{
	const struct lp_watch *x = a, *y = b;

	return x->pid < y->pid ? -1 : x->pid > y->pid;
}

/* The watch of t among the first n (kept sorted by pid), or NULL. */
static struct lp_watch *watch_in(struct lp_diagnose *dg, size_t n, const struct lp_target *t)
{
	struct lp_watch key = {.pid = t->pid};

	return n ? bsearch(&key, dg->w, n, sizeof(*dg->w), by_pid) : NULL;
}

static struct lp_watch *watch_of(struct lp_diagnose *dg, const struct lp_target *t)
{
	return watch_in(dg, dg->n, t);
}

/* w, emptied, watches t. */
static void watch_start(struct lp_watch *w, const struct lp_target *t)
{
	memset(w, 0, sizeof(*w));
	w->pid = t->pid;
	w->tracked_since_ns = t->tracked_since_ns;
	(void)lp_host_cpu_ticks("/proc", &w->host_spare0, &w->host_total0);
}

/* A new watch of t, after the others (the caller sorts them again); NULL out of memory. */
static struct lp_watch *watch_add(struct lp_diagnose *dg, const struct lp_target *t)
{
	struct lp_watch *w;

	if (dg->n == dg->cap) {
		size_t cap = dg->cap ? 2 * dg->cap : 16;
		struct lp_watch *a = realloc(dg->w, cap * sizeof(*a));

		if (!a)
			return NULL;
		dg->w = a;
		dg->cap = cap;
	}
	w = &dg->w[dg->n++];
	watch_start(w, t);
	return w;
}

const struct lp_context *lp_diagnose_context(struct lp_diagnose *dg, const struct lp_target *t)
{
	const struct lp_watch *w = watch_of(dg, t);

	return w && w->ctx_ns && w->tracked_since_ns == t->tracked_since_ns ? &w->ctx : NULL;
}

/* Whether any thread of the process ran since snapshot s (none: since it was tracked). */
static bool ran_since(const struct lp_proc_view *v, const struct lp_snap *s)
{
	static const int moved[] = {LP_C_ONCPU_NS, LP_C_NVCSW, LP_C_NIVCSW, LP_C_SAMPLES};

	for (size_t i = 0; i < sizeof(moved) / sizeof(moved[0]); i++)
		if (!s || v->stats.ctr[moved[i]] != s->ctr[moved[i]])
			return true;
	return false;
}

/* The process's context: kept for LP_DIAGNOSE_CONTEXT_NS in its watch, its throttling and
 * its CPUs read anew when it ran (a context read while OpenMP bound its threads had said one
 * CPU for 30 s, and 'oversubscribed' fired on two threads bound to two CPUs). A process that
 * did not run can be neither throttled nor short of CPUs: reading every thread's status of
 * 1,000 idle processes was a sixth of a scrape. fresh: read all of it now (a window with
 * major faults: the weights' residency of 30 s ago is no evidence). NULL when it cannot be
 * read (gone). */
static const struct lp_context *context_of(struct lp_watch *w, const struct lp_target *t,
					   const struct lp_host_cpus *h, uint64_t now, bool fresh,
					   bool ran, struct lp_context *buf)
{
	if (!h)
		return NULL;
	/* A ggml process without a model file mapped yet is read again after
	 * LP_DIAGNOSE_EAGER_NS: it maps its model after it starts. The mappings read are GGUF
	 * files, ggml's format alone: another engine's process (torch reads its weights into
	 * memory) never maps one, and its context is read as seldom as the rest (a read opens
	 * each read-only file mapping of 1 MiB or more, some 40 of a torch decoder's). */
	uint64_t keep = t->eng && t->eng->engine == LP_ENGINE_GGML && w && !w->ctx.weights_mappings
				? LP_DIAGNOSE_EAGER_NS
				: LP_DIAGNOSE_CONTEXT_NS;

	if (!fresh && w && w->ctx_ns && now - w->ctx_ns < keep) {
		if (ran) {
			lp_context_read_throttled(&w->ctx);
			lp_context_read_cpus(&w->ctx, t->pid, h, "/proc");
		}
		return &w->ctx;
	}
	if (lp_context_read(buf, t->pid, h, "/proc", "/sys") < 0)
		return NULL;
	if (w) {
		w->ctx = *buf;
		w->ctx_ns = now;
	}
	return buf;
}

/* Samples while generating that were in no op and not sync. */
static uint64_t gen_outside(const struct lp_op_samples *os)
{
	uint64_t in = os->gen_sync;

	for (size_t i = 0; i < LP_MAX_OPS; i++)
		in += os->gen[i];
	return os->gen_total > in ? os->gen_total - in : 0;
}

static void snap_take(struct lp_snap *s, const struct lp_proc_view *v, uint64_t now,
		      const struct lp_context *ctx)
{
	memset(s, 0, sizeof(*s));
	s->at_ns = now;
	memcpy(s->ctr, v->stats.ctr, sizeof(s->ctr));
	if (v->ops) {
		s->samples = v->ops->total;
		s->sync = v->ops->sync;
		s->scanned = v->ops->how[LP_HOW_SCAN];
		s->gen_samples = v->ops->gen_total;
		s->gen_outside = gen_outside(v->ops);
		memcpy(s->lib, v->ops->lib, sizeof(s->lib));
	}
	(void)lp_host_cpu_ticks("/proc", &s->host_spare, &s->host_total);
	s->preempt = v->preempt;
	s->threads = calloc(v->nthreads ? v->nthreads : 1, sizeof(*s->threads));
	for (size_t i = 0; s->threads && i < v->nthreads; i++) {
		const struct lp_thread *t = &v->threads[i].t;

		s->threads[i] = (struct lp_snap_thread){
			v->threads[i].tid, t->oncpu_ns, t->runq_ns,	 t->faults_maj,
			t->migrations,	   t->samples,	t->samples_sync, t->samples_ggml,
			t->gil_ns,	   t->gil_waits};
		s->nthreads++;
	}
	if (ctx) {
		s->throttled_usec = ctx->throttled_usec;
		s->nr_throttled = ctx->nr_throttled;
	}
}

void lp_diagnose_tick(struct lp_diagnose *dg, const struct lp_report *r)
{
	const struct lp_host_cpus *h = host(dg, r->now_ns);
	size_t keep = 0, sorted;
	struct lp_watch *w;

	/* Forget the watches of processes gone from the report, or exited, or reset: each live
	 * process marks its own, by a binary search of the watches, sorted by pid. */
	for (size_t i = 0; i < dg->n; i++)
		dg->w[i].seen = false;
	for (size_t k = 0; k < r->nprocs; k++)
		if (r->procs[k].live && (w = watch_of(dg, r->procs[k].target)) &&
		    w->tracked_since_ns == r->procs[k].target->tracked_since_ns)
			w->seen = true;
	for (size_t i = 0; i < dg->n; i++) {
		w = &dg->w[i];
		if (!w->seen) {
			for (unsigned k = 0; k < w->nsnap; k++)
				snap_free(&w->s[k]);
			continue;
		}
		dg->w[keep++] = *w;
	}
	dg->n = sorted = keep;
	for (size_t k = 0; k < r->nprocs; k++) {
		const struct lp_proc_view *v = &r->procs[k];
		struct lp_context ctx;
		bool ran;

		if (!v->live)
			continue;
		/* New watches go after the sorted ones until the end of the tick. */
		w = watch_in(dg, sorted, v->target);
		if (!w && !(w = watch_add(dg, v->target)))
			return;
		if (w->nsnap && r->now_ns - w->s[w->nsnap - 1].at_ns < LP_DIAGNOSE_WINDOW_NS)
			continue;
		ran = ran_since(v, w->nsnap ? &w->s[w->nsnap - 1] : NULL);
		if (w->nsnap == 2) {
			snap_free(&w->s[0]);
			w->s[0] = w->s[1];
			w->nsnap = 1;
		}
		snap_take(&w->s[w->nsnap++], v, r->now_ns,
			  context_of(w, v->target, h, r->now_ns, false, ran, &ctx));
	}
	qsort(dg->w, dg->n, sizeof(*dg->w), by_pid);
}

static const struct lp_snap_thread *snap_thread(const struct lp_snap *s, uint32_t tid)
{
	for (size_t i = 0; s && i < s->nthreads; i++)
		if (s->threads[i].tid == tid)
			return &s->threads[i];
	return NULL;
}

static const struct lp_preempt_view *snap_preempt(const struct lp_snap *s, uint32_t by)
{
	for (size_t i = 0; s && i < s->preempt.ntop; i++)
		if (s->preempt.top[i].by_tgid == by)
			return &s->preempt.top[i];
	return NULL;
}

/* The base of the window: the older of two snapshots, or none (since tracked) while there
 * is one only: the process is younger than two windows. A counter that went back (reset)
 * makes the snapshot useless. */
static const struct lp_snap *base_of(const struct lp_watch *w, const struct lp_proc_view *v)
{
	const struct lp_snap *s = w && w->nsnap == 2 ? &w->s[0] : NULL;

	for (int i = 0; s && i < LP_C_NR; i++)
		if (v->stats.ctr[i] < s->ctr[i])
			return NULL;
	return s;
}

/* Per op, its nodes' bytes and time (findings.h's struct lp_find_op); NULL: none read. */
static struct lp_find_op *ops_of(const struct lp_proc_view *v, size_t *n)
{
	const struct lp_eproc *gp = v->target->eng;
	struct lp_find_op *ops;

	*n = 0;
	if (!gp || !v->nnodes || !(ops = calloc(gp->ops.n, sizeof(*ops))))
		return NULL;
	for (size_t i = 0; i < v->nnodes; i++) {
		const struct lp_node *x = &v->nodes[i];
		struct lp_find_op *o;
		uint64_t rd, wr;

		if (x->key.op >= gp->ops.n)
			continue;
		o = &ops[x->key.op];
		snprintf(o->op, sizeof(o->op), "%s", gp->ops.v[x->key.op].name);
		o->oncpu_ns += (double)x->val.oncpu_ns;
		if (!x->val.calls || !lp_node_bytes(o->op, x, &rd, &wr))
			continue;
		o->bytes += (double)(rd + wr);
		o->busy_ns += (double)x->val.ns / (double)x->val.calls * (double)x->val.instances;
	}
	*n = gp->ops.n;
	return ops;
}

/* What a BLAS object is, by the symbols it has (engine/torch.c's blas class). */
static enum lp_blas_kind blas_of(const struct lp_obj *o)
{
	enum lp_blas_kind k = LP_BLAS_NONE;

	for (size_t i = 0; i < o->syms.nsyms; i++) {
		const char *n = o->syms.syms[i].name;

		if (o->syms.syms[i].cls != LP_SYM_BLAS)
			continue;
		if (!strcmp(n, "openblas_get_config"))
			return LP_BLAS_OPENBLAS;
		if (!strncmp(n, "MKL_", 4) || !strncmp(n, "mkl_", 4))
			return LP_BLAS_MKL;
		if (!strncmp(n, "bli_", 4))
			return LP_BLAS_BLIS;
		if (!strcmp(n, "sgemm_"))
			k = LP_BLAS_REFERENCE;
	}
	return k;
}

/* The torch rules' figures (findings.h): its BLAS, its OpenMP runtimes, its samples while
 * generating and the host's spare CPUs over the window since s. */
static void torch_input(struct lp_find_torch *x, const struct lp_proc_view *v,
			const struct lp_watch *w, const struct lp_snap *s,
			const struct lp_host_cpus *h)
{
	const struct lp_eproc *gp = v->target->eng;
	uint64_t spare = 0, total = 0;
	/* the host's ticks at the window's start: its snapshot's, else the watch's first */
	uint64_t spare0 = s ? s->host_spare : w ? w->host_spare0 : 0;
	uint64_t total0 = s ? s->host_total : w ? w->host_total0 : 0;

	memset(x, 0, sizeof(*x));
	x->host_spare_cpus = -1;
	if (!gp || gp->engine != LP_ENGINE_TORCH)
		return;
	x->torch = true;
	for (size_t i = 0; i < gp->nobjs; i++) {
		const struct lp_obj *o = gp->objs[i];

		if (blas_of(o) == LP_BLAS_OPENBLAS && !o->imports_omp)
			x->blas_own_pool = true, x->blas_path = o->path;
		if (o->omp_runtime && x->nomp < sizeof(x->omp) / sizeof(x->omp[0]))
			x->omp[x->nomp++] = o->path;
	}
	/* The BLAS its GEMMs run in: the one its samples were in over the window, not the
	 * one it maps first (numpy's LAPACK maps OpenBLAS where torch's GEMMs resolve to
	 * the reference BLAS). */
	for (int i = 0; v->ops && i < LP_MAX_LIBS && gp->libs[i]; i++) {
		uint64_t n = sub(v->ops->lib[i], s ? s->lib[i] : 0);
		double sh = v->ops->total
				    ? (double)n / (double)sub(v->ops->total, s ? s->samples : 0)
				    : 0;

		if (sh > x->blas_share) {
			x->blas_share = sh;
			x->blas = blas_of(gp->libs[i]);
			if (!x->blas_own_pool)
				x->blas_path = gp->libs[i]->path;
		}
	}
	if (v->ops) {
		x->gen_samples = sub(v->ops->gen_total, s ? s->gen_samples : 0);
		x->gen_outside = sub(gen_outside(v->ops), s ? s->gen_outside : 0);
	}
	if (h && total0 && lp_host_cpu_ticks("/proc", &spare, &total) == 0 && total > total0)
		x->host_spare_cpus = (double)sub(spare, spare0) / (double)(total - total0) *
				     lp_cpuset_count(&h->online);
}

static void diagnose_one(struct lp_diagnose *dg, const struct lp_report *r, struct lp_proc_view *v,
			 const struct lp_host_cpus *h)
{
	const struct lp_target *t = v->target;
	struct lp_watch *w = v->live ? watch_of(dg, t) : NULL;
	const struct lp_snap *s = base_of(w, v);
	uint64_t end = t->exited && t->exited_at_ns ? t->exited_at_ns : r->now_ns;
	uint64_t ctr[LP_C_NR];
	struct lp_find_thread *th = NULL;
	struct lp_preempt_view pre[LP_PREEMPT_TOP];
	struct lp_find_input in = {.pid = t->pid, .ctr = ctr};
	const struct lp_context *ctx = NULL;
	struct lp_context buf;
	struct lp_find_op *ops;
	size_t np = 0;

	v->findings = calloc(1, sizeof(*v->findings));
	if (!v->findings)
		return;
	in.window_s = (double)sub(end, s ? s->at_ns : t->tracked_since_ns) / 1e9;
	for (int i = 0; i < LP_C_NR; i++)
		ctr[i] = sub(v->stats.ctr[i], s ? s->ctr[i] : 0);
	in.runq_ns = ctr[LP_C_RUNQ_NS];
	if (v->ops) {
		in.samples = sub(v->ops->total, s ? s->samples : 0);
		in.sync = sub(v->ops->sync, s ? s->sync : 0);
		in.scanned = sub(v->ops->how[LP_HOW_SCAN], s ? s->scanned : 0);
	}
	if (v->live && (th = calloc(v->nthreads ? v->nthreads : 1, sizeof(*th)))) {
		for (size_t i = 0; i < v->nthreads; i++) {
			const struct lp_thread *x = &v->threads[i].t;
			const struct lp_snap_thread *o = snap_thread(s, v->threads[i].tid);

			th[i].tid = v->threads[i].tid;
			memcpy(th[i].comm, v->threads[i].comm, sizeof(th[i].comm));
			th[i].oncpu_ns = sub(x->oncpu_ns, o ? o->oncpu_ns : 0);
			th[i].runq_ns = sub(x->runq_ns, o ? o->runq_ns : 0);
			th[i].faults_maj = sub(x->faults_maj, o ? o->faults_maj : 0);
			th[i].migrations = sub(x->migrations, o ? o->migrations : 0);
			th[i].samples = sub(x->samples, o ? o->samples : 0);
			th[i].sync = sub(x->samples_sync, o ? o->sync : 0);
			th[i].ggml = sub(x->samples_ggml, o ? o->ggml : 0);
			th[i].gil_ns = sub(x->gil_ns, o ? o->gil_ns : 0);
			th[i].gil_waits = sub(x->gil_waits, o ? o->gil_waits : 0);
			th[i].cpu = x->last_cpu ? x->last_cpu - 1 : 0;
		}
		in.threads = th;
		in.nthreads = v->nthreads;
	}
	for (size_t i = 0; i < v->preempt.ntop; i++) {
		const struct lp_preempt_view *p = &v->preempt.top[i];
		const struct lp_preempt_view *o = snap_preempt(s, p->by_tgid);

		pre[np] = *p;
		pre[np].v.count = sub(p->v.count, o ? o->v.count : 0);
		pre[np].v.wait_ns = sub(p->v.wait_ns, o ? o->v.wait_ns : 0);
		if (pre[np].v.count || pre[np].v.wait_ns)
			np++;
	}
	in.preempt = pre;
	in.npreempt = np;
	in.openmp = false;
	for (size_t i = 0; t->eng && i < t->eng->nobjs; i++)
		in.openmp |= t->eng->objs[i]->omp_runtime;
	if (v->live && (ctx = context_of(w, t, h, r->now_ns, ctr[LP_C_FAULTS_MAJ] > 0,
					 ran_since(v, s), &buf))) {
		in.ctx = ctx;
		in.host = h;
		in.throttled_usec = sub(ctx->throttled_usec, s ? s->throttled_usec : 0);
		in.nr_throttled = sub(ctx->nr_throttled, s ? s->nr_throttled : 0);
		/* First need of the host's bandwidth: a process generating from mapped weights. */
		if (ctx->weights_bytes && ctr[LP_C_GEN_INTERVALS])
			lp_membw_want(&dg->membw);
	}
	switch (lp_membw_get(&dg->membw, &in.membw)) {
	case LP_MEMBW_CONTENDED:
		in.membw_why = "the host's bandwidth was measured while other work ran; it is "
			       "measured again when the CPUs are quiet (or POST /v1/bandwidth)";
		break;
	case LP_MEMBW_WAITING:
		in.membw_why = "the host's bandwidth is measured once its CPUs were quiet for 30 s "
			       "(or POST "
			       "/v1/bandwidth, llmprofctl doctor --measure-bandwidth)";
		break;
	case LP_MEMBW_FAILED:
		in.membw_why = "the host's bandwidth could not be measured (see the log)";
		break;
	default:
		break;
	}
	torch_input(&in.torch, v, w, s, h);
	in.requests = v->requests;
	in.since_ns = s ? s->at_ns : t->tracked_since_ns;
	ops = ops_of(v, &in.nops);
	in.ops = ops;
	lp_findings_eval(&in, v->findings);
	free(ops);
	if (w && w->tracked_since_ns == t->tracked_since_ns)
		lp_findings_hold(v->findings, w->held, r->now_ns);
	if (in.ctx)
		v->context = *in.ctx;
	v->has_context = in.ctx != NULL;
	free(th);
}

void lp_diagnose_report(struct lp_diagnose *dg, struct lp_report *r)
{
	const struct lp_host_cpus *h = host(dg, r->now_ns);
	size_t sorted = dg->n;

	/* Every live process has its watch before it is judged: a finding that fires in its
	 * first seconds, before the tick's first snapshot, is held as recent like any other. A
	 * pid used again starts a new watch. */
	for (size_t i = 0; i < r->nprocs; i++) {
		const struct lp_target *t = r->procs[i].target;
		struct lp_watch *w;

		if (!r->procs[i].live)
			continue;
		if (!(w = watch_in(dg, sorted, t)))
			watch_add(dg, t);
		else if (w->tracked_since_ns != t->tracked_since_ns) {
			for (unsigned k = 0; k < w->nsnap; k++)
				snap_free(&w->s[k]);
			watch_start(w, t);
		}
	}
	if (dg->n != sorted)
		qsort(dg->w, dg->n, sizeof(*dg->w), by_pid);
	for (size_t i = 0; i < r->nprocs; i++)
		diagnose_one(dg, r, &r->procs[i], h);
}
