// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* The rules behind `llmprofctl doctor` (findings.h). Thresholds are chosen so that an idle
 * machine running one inference process with as many threads as CPUs fires none: each is
 * named here with the reason for its value. */
#include "report/findings.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "escape.h"
#include "engine/ops.h"

const char *const lp_rule_names[LP_RULE_NR] = {
#define NAME(id, name, needs) [LP_RULE_##id] = #name,
	LP_RULES(NAME)
#undef NAME
};

const char *const lp_severity_names[3] = {"info", "warning", "critical"};

/* A thread that wants a CPU for a tenth of the window computes; one that wants less is the
 * application's own (an HTTP loop, a logger), whatever its count. */
#define COMPUTE_SHARE 0.10
/* Waiting for a CPU a tenth of the time costs a tenth of the throughput at a barrier per
 * op; an idle machine's kernel threads take well under 1 %. */
#define RUNQ_SHARE 0.10
/* Behind other processes for 5 % of the time: the usual noise of an idle host is < 1 %. */
#define OTHERS_SHARE 0.05
/* Sync (barrier) share of the samples above which a late thread matters. */
#define SYNC_SHARE 0.15
/* A thread that ran 20 % less than the median of its peers holds them at barriers. */
/* Samples a thread needs in the window for its own sync share to count. */
#define THREAD_SAMPLES 10
#define LATE_RATIO 0.80
/* Decode that streams the weights at 60 % of the measured peak is memory-bound: reads by
 * one process's matmul rarely get closer to the peak of a bandwidth test. */
#define MEMBOUND_FRACTION 0.60
/* Rules wait for this much of a window. */
#define MIN_WINDOW_S 3.0
/* batch_interference: of the generating requests' decode time, the share in decodes that
 * also carried other requests' prompts; over at least this much of it, and 2 requests. */
#define INTERFERED_SHARE 0.25
#define INTERFERED_MIN_NS 1000000000ULL

struct ctx {
	const struct lp_find_input *in;
	struct lp_findings *out;
	double T; /* the window, ns */
	uint64_t oncpu, runq;
	unsigned nactive; /* threads that wanted a CPU for COMPUTE_SHARE of the window */
	/* CPUs wanted on average: on-CPU plus run-queue time over the window. Work that moves
	 * between the threads of a pool (node's libuv workers) is counted once. */
	double demand;
	double cpus; /* CPUs it may use: affinity, online, quota */
	bool oversubscribed;
};

static struct lp_finding *add(struct ctx *c, enum lp_rule rule, enum lp_severity sev)
{
	struct lp_finding *f = &c->out->f[c->out->n++];

	memset(f, 0, sizeof(*f));
	f->rule = rule;
	f->severity = sev;
	f->evidence = cJSON_CreateObject();
	/* A rule that fires was evaluated, whatever an earlier step said of it. */
	c->out->not_evaluated[rule] = NULL;
	return f;
}

/* Titles and actions may quote names others chose (a process's, a file's): the text is
 * escaped once, as a whole, so that every answer is UTF-8 and no terminal obeys it. */
static void text(char *out, size_t size, const char *fmt, va_list ap)
{
	char raw[LP_FINDING_TEXT];
	int n = vsnprintf(raw, sizeof(raw), fmt, ap);

	if (n < 0)
		n = 0;
	lp_escape(out, size, raw, (size_t)n < sizeof(raw) ? (size_t)n : sizeof(raw) - 1);
}

static void title(struct lp_finding *f, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void title(struct lp_finding *f, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	text(f->title, sizeof(f->title), fmt, ap);
	va_end(ap);
}

static void action(struct lp_finding *f, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));
static void action(struct lp_finding *f, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	text(f->action, sizeof(f->action), fmt, ap);
	va_end(ap);
}

static void ev(struct lp_finding *f, const char *key, double v)
{
	cJSON_AddNumberToObject(f->evidence, key, v);
}

/* A text of evidence, escaped once: names and environment values come from others. */
static void ev_str(struct lp_finding *f, const char *key, const char *v)
{
	lp_json_add_escaped(f->evidence, key, v);
}

static double share(double part, double whole)
{
	return whole > 0 ? part / whole : 0;
}

static void not_evaluated(struct ctx *c, enum lp_rule r, const char *why)
{
	if (!c->out->not_evaluated[r])
		c->out->not_evaluated[r] = why;
}

static void comm_of(const struct lp_preempt_view *p, char out[LP_COMM_LEN + 1])
{
	memcpy(out, p->v.comm, LP_COMM_LEN);
	out[LP_COMM_LEN] = '\0';
}

/* Preemption wait behind other processes, and the largest of them. */
static uint64_t others_wait(const struct lp_find_input *in, const struct lp_preempt_view **top)
{
	uint64_t w = 0;

	*top = NULL;
	for (size_t i = 0; i < in->npreempt; i++) {
		const struct lp_preempt_view *p = &in->preempt[i];

		/* Its own threads; or the idle task: a throttled group's threads leave the CPU
		 * runnable, to nobody (the quota, judged by rule_oversubscribed). */
		if ((pid_t)p->by_tgid == in->pid || !p->by_tgid)
			continue;
		w += p->v.wait_ns;
		if (!*top || p->v.wait_ns > (*top)->v.wait_ns)
			*top = p;
	}
	return w;
}

static uint64_t own_wait(const struct lp_find_input *in)
{
	for (size_t i = 0; i < in->npreempt; i++)
		if ((pid_t)in->preempt[i].by_tgid == in->pid)
			return in->preempt[i].v.wait_ns;
	return 0;
}

static void rule_oversubscribed(struct ctx *c)
{
	const struct lp_find_input *in = c->in;
	const struct lp_context *x = in->ctx;
	double rq = share((double)c->runq, (double)(c->oncpu + c->runq));
	/* The cgroup's throttled time adds up its CPUs' run queues: a share of its CPUs' time. */
	double thr = share((double)in->throttled_usec * 1e3, c->T * (x->ncpus ? x->ncpus : 1));
	bool quota = x->quota_cpus > 0 && x->quota_cpus < x->ncpus;
	uint64_t own = own_wait(in), all = 0;
	struct lp_finding *f;

	if (!in->threads) {
		not_evaluated(c, LP_RULE_OVERSUBSCRIBED, "its threads are not known");
		return;
	}
	/* More CPU wanted than there is, and the threads wait for it: a thread pool larger
	 * than the CPUs whose threads take turns is not oversubscribed. */
	if (!(c->demand > c->cpus + 0.05 && c->nactive > c->cpus &&
	      (rq >= RUNQ_SHARE || thr >= RUNQ_SHARE)))
		return;
	c->oversubscribed = true;
	f = add(c, LP_RULE_OVERSUBSCRIBED,
		rq >= 0.3 || thr >= 0.3 ? LP_SEV_CRITICAL : LP_SEV_WARNING);
	for (size_t i = 0; i < in->npreempt; i++)
		all += in->preempt[i].v.wait_ns;
	if (quota)
		title(f,
		      "%u compute threads want %.1f CPUs under a CPU quota of %.2f (cgroup): "
		      "throttled %.0f%% of its CPUs' time, %u times; each thread waits for a CPU "
		      "%.0f%% of its time",
		      c->nactive, c->demand, x->quota_cpus, 100 * thr, (unsigned)in->nr_throttled,
		      100 * rq);
	else
		title(f,
		      "%u compute threads want %.1f CPUs of the %u it may use: each waits for a "
		      "CPU %.0f%% of its time%s",
		      c->nactive, c->demand, x->ncpus, 100 * rq,
		      share((double)own, (double)all) >= 0.5 ? ", mostly behind its own threads"
							     : "");
	ev(f, "compute_threads", c->nactive);
	ev(f, "cpus_wanted", c->demand);
	ev(f, "cpus_allowed", x->ncpus);
	ev(f, "cores_allowed", x->ncores);
	if (quota)
		ev(f, "quota_cpus", x->quota_cpus);
	ev(f, "runqueue_share", rq);
	ev(f, "own_preemption_share", share((double)own, (double)all));
	if (x->cgroup_read) {
		ev(f, "throttled_share", thr);
		ev(f, "throttled_periods", (double)in->nr_throttled);
	}
	action(f, "run at most %u threads (-t %u), or give it more CPUs (%s)",
	       (unsigned)(c->cpus >= 1 ? c->cpus : 1), (unsigned)(c->cpus >= 1 ? c->cpus : 1),
	       quota ? "raise the cgroup's cpu.max" : "its CPU affinity, cpuset or the host");
}

static void rule_preempted(struct ctx *c)
{
	const struct lp_find_input *in = c->in;
	const struct lp_preempt_view *top;
	uint64_t others = others_wait(in, &top), thr = in->throttled_usec * 1000;
	double sh;
	char comm[LP_COMM_LEN + 1];
	struct lp_finding *f;
	cJSON *a;

	/* A throttled group's thread waits for its quota, and whatever ran next on its CPU
	 * (a kworker, a shell) is charged the whole throttled stretch: that much of the wait
	 * behind others is the quota's (rule_oversubscribed), not theirs. */
	others = others > thr ? others - thr : 0;
	sh = share((double)others, (double)(c->oncpu + c->runq));

	if (sh < OTHERS_SHARE || !top)
		return;
	f = add(c, LP_RULE_PREEMPTED, sh >= 0.25 ? LP_SEV_CRITICAL : LP_SEV_WARNING);
	comm_of(top, comm);
	title(f,
	      "other processes took its CPUs: its threads waited %.0f%% of their time behind "
	      "them, most behind %s (pid %u, %.0f ms over %.0f s)",
	      100 * sh, comm, top->by_tgid, (double)top->v.wait_ns / 1e6, in->window_s);
	ev(f, "waited_behind_others_share", sh);
	ev(f, "runqueue_share", share((double)c->runq, (double)(c->oncpu + c->runq)));
	a = cJSON_AddArrayToObject(f->evidence, "preemptors");
	for (size_t i = 0; i < in->npreempt; i++) {
		const struct lp_preempt_view *p = &in->preempt[i];
		cJSON *e;

		if ((pid_t)p->by_tgid == in->pid || !p->by_tgid || p->v.wait_ns * 100 < others)
			continue;
		e = cJSON_CreateObject();
		comm_of(p, comm);
		cJSON_AddNumberToObject(e, "pid", p->by_tgid);
		lp_json_add_escaped(e, "comm", comm);
		cJSON_AddNumberToObject(e, "preemptions", (double)p->v.count);
		cJSON_AddNumberToObject(e, "wait_ns", (double)p->v.wait_ns);
		cJSON_AddItemToArray(a, e);
	}
	action(f, "keep other work off the CPUs it uses (taskset, cpusets, isolcpus), or lower "
		  "the other work's priority (nice) below the inference's");
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static uint64_t median(uint64_t *v, size_t n)
{
	qsort(v, n, sizeof(*v), cmp_u64);
	return n ? v[n / 2] : 0;
}

/* A thread of ggml's compute: busy in the window, and sampled mostly in ops and barriers
 * (not the application's own threads: node's event loop, an HTTP server). */
static bool ggml_thread(const struct ctx *c, const struct lp_find_thread *t)
{
	return (double)(t->oncpu_ns + t->runq_ns) >= COMPUTE_SHARE * c->T &&
	       t->samples >= THREAD_SAMPLES && 2 * t->ggml >= t->samples;
}

/* Whether late_thread can be judged, and why not (said) when it cannot. */
static bool late_thread_evaluable(struct ctx *c)
{
	if (!c->in->threads)
		not_evaluated(c, LP_RULE_LATE_THREAD, "its threads are not known");
	else if (c->in->samples < 50)
		not_evaluated(c, LP_RULE_LATE_THREAD, "too few samples of its ops in the window");
	else if (!c->out->shares_trusted)
		not_evaluated(c, LP_RULE_LATE_THREAD,
			      "its sync shares rest on the stack scan, which can take a stale "
			      "return address for a live frame");
	else
		return true;
	return false;
}

/* The ggml thread that ran least, and the medians of the others. */
struct peers {
	size_t n;
	uint64_t on, rq, maj, mig, samples;
	double sync; /* their sync share */
};

static const struct lp_find_thread *late_and_peers(struct ctx *c, struct peers *p)
{
	const struct lp_find_input *in = c->in;
	const struct lp_find_thread *late = NULL, *t;
	uint64_t on[64], rq[64], maj[64], mig[64], ts[64], sm[64];
	size_t n = 0;

	for (size_t i = 0; i < in->nthreads; i++) {
		t = &in->threads[i];
		if (ggml_thread(c, t) && (!late || t->oncpu_ns < late->oncpu_ns))
			late = t;
	}
	for (size_t i = 0; i < in->nthreads && n < 64; i++) {
		t = &in->threads[i];
		if (t == late || !ggml_thread(c, t))
			continue;
		on[n] = t->oncpu_ns;
		rq[n] = t->runq_ns;
		maj[n] = t->faults_maj;
		mig[n] = t->migrations;
		ts[n] = t->sync * 1000 / t->samples; /* per mille, for the median */
		sm[n] = t->samples;
		n++;
	}
	if (!late || !n)
		return NULL;
	*p = (struct peers){.n = n,
			    .on = median(on, n),
			    .rq = median(rq, n),
			    .maj = median(maj, n),
			    .mig = median(mig, n),
			    .samples = median(sm, n),
			    .sync = (double)median(ts, n) / 1000};
	return late;
}

/* What accounts for at least half of what the late thread lacks, or NULL. */
static const char *late_cause(const struct lp_find_thread *late, const struct peers *p)
{
	if (late->runq_ns > p->rq && late->runq_ns - p->rq >= (p->on - late->oncpu_ns) / 2)
		return "preempted";
	if (late->faults_maj >= 10 && late->faults_maj >= 3 * p->maj)
		return "faulting";
	if (late->migrations >= 3 * p->mig + 10)
		return "migrated";
	return NULL;
}

static void late_thread_finding(struct ctx *c, const struct lp_find_thread *late,
				const struct peers *p, const char *cause, double noise)
{
	double sync = share((double)c->in->sync, (double)c->in->samples);
	struct lp_finding *f = add(c, LP_RULE_LATE_THREAD, LP_SEV_WARNING);
	bool preempted = !strcmp(cause, "preempted");
	const struct lp_preempt_view *top;
	char comm[LP_COMM_LEN + 1];

	others_wait(c->in, &top);
	if (preempted && top)
		comm_of(top, comm);
	else
		snprintf(comm, sizeof(comm), "its own threads");
	title(f,
	      "thread %u (%s) ran %.0f%% less than its peers, which wait for it at barriers (sync "
	      "is %.0f%% of the samples): %s",
	      late->tid, late->comm, 100 * (1 - share((double)late->oncpu_ns, (double)p->on)),
	      100 * sync,
	      preempted			   ? "it waits for a CPU more than they do"
	      : !strcmp(cause, "faulting") ? "it takes major page faults"
					   : "it moves between CPUs");
	ev(f, "tid", late->tid);
	ev_str(f, "comm", late->comm);
	ev_str(f, "cause", cause);
	ev(f, "cpu", late->cpu);
	ev(f, "oncpu_ns", (double)late->oncpu_ns);
	ev(f, "peers_median_oncpu_ns", (double)p->on);
	ev(f, "runqueue_ns", (double)late->runq_ns);
	ev(f, "peers_median_runqueue_ns", (double)p->rq);
	ev(f, "major_faults", (double)late->faults_maj);
	ev(f, "migrations", (double)late->migrations);
	ev(f, "sync_share", sync);
	ev(f, "thread_sync_share", share((double)late->sync, (double)late->samples));
	ev(f, "peers_median_sync_share", p->sync);
	ev(f, "sync_share_noise", noise);
	if (preempted) {
		ev_str(f, "preempted_by", comm);
		if (top)
			ev(f, "preempted_by_pid", top->by_tgid);
		action(f,
		       "free CPU %u for it: move %s elsewhere, or pin the threads one per "
		       "free CPU",
		       late->cpu, comm);
	} else if (!strcmp(cause, "faulting")) {
		action(f, "keep the weights in memory (--mlock, more memory)");
	} else {
		action(f, "pin the threads (OMP_PROC_BIND=true, or llama.cpp's --cpu-mask with "
			  "--cpu-strict 1)");
	}
}

static void rule_late_thread(struct ctx *c)
{
	const struct lp_find_thread *late;
	const char *cause;
	double late_sync, noise;
	struct peers p;

	if (!late_thread_evaluable(c) ||
	    share((double)c->in->sync, (double)c->in->samples) < SYNC_SHARE || c->nactive < 2 ||
	    !(late = late_and_peers(c, &p)))
		return;
	/* The others wait for it: they sample in barriers more than it does, by more than the
	 * sampling could make up (three standard errors of the difference of two shares, the
	 * peers' taken at their median count). A pool whose threads take turns (node's libuv
	 * workers) has threads of one kind, not a late one. How much more depends on how the
	 * runtime waits: an OpenMP barrier that spins shows, one that sleeps does not (two
	 * bound threads, one beside a hog: 0.45 against 0.30 here, on a quiet host as on a
	 * busy one). */
	late_sync = share((double)late->sync, (double)late->samples);
	noise = 3 * sqrt(late_sync * (1 - late_sync) / (double)late->samples +
			 p.sync * (1 - p.sync) / (double)p.samples);
	if (p.sync - late_sync <= noise || (double)late->oncpu_ns >= LATE_RATIO * (double)p.on)
		return;
	/* The cause must account for at least half of what it lacks. */
	if ((cause = late_cause(late, &p)))
		late_thread_finding(c, late, &p, cause, noise);
}

static void rule_smt(struct ctx *c)
{
	const struct lp_context *x = c->in->ctx;
	struct lp_finding *f;

	if (c->oversubscribed || x->ncores >= x->ncpus || c->nactive <= x->ncores ||
	    c->demand <= x->ncores + 0.05 || !c->in->threads)
		return;
	f = add(c, LP_RULE_SMT, LP_SEV_WARNING);
	title(f,
	      "%u compute threads on %u cores (%u hardware threads): SMT siblings share a core's "
	      "execution units and caches, which matmul keeps busy from one thread",
	      c->nactive, x->ncores, x->ncpus);
	ev(f, "compute_threads", c->nactive);
	ev(f, "cpus_wanted", c->demand);
	ev(f, "cores_allowed", x->ncores);
	ev(f, "cpus_allowed", x->ncpus);
	action(f, "try one thread per core (-t %u) and compare tokens/s", x->ncores);
}

static bool env_is(const char *v, const char *what)
{
	return !strcasecmp(v, what);
}

static void rule_omp_wait_policy(struct ctx *c)
{
	const struct lp_find_input *in = c->in;
	const struct lp_context *x = in->ctx;
	bool passive = env_is(x->omp_wait_policy, "passive") || !strcmp(x->gomp_spincount, "0");
	bool active = env_is(x->omp_wait_policy, "active");
	double sleeps = in->window_s > 0 ? (double)in->ctr[LP_C_NVCSW] / in->window_s : 0;
	double asleep = share((double)in->ctr[LP_C_BARRIER_OFF_EST_NS],
			      (double)(c->nactive ? c->nactive : 1) * c->T);
	struct lp_finding *f;

	if (!in->openmp)
		return;
	if (!x->env_read) {
		not_evaluated(c, LP_RULE_OMP_WAIT_POLICY, "its environment is not readable");
		return;
	}
	if (passive && (sleeps >= 500 || asleep >= 0.05)) {
		f = add(c, LP_RULE_OMP_WAIT_POLICY, LP_SEV_WARNING);
		title(f,
		      "%s: its threads sleep at barriers instead of spinning (%.0f sleeps/s; "
		      "%.0f%% "
		      "of their time asleep in barriers), and each wake-up costs every op its "
		      "latency",
		      x->omp_wait_policy[0] ? "OMP_WAIT_POLICY=passive" : "GOMP_SPINCOUNT=0",
		      sleeps, 100 * asleep);
		action(f, "unset OMP_WAIT_POLICY and GOMP_SPINCOUNT (libgomp then spins before it "
			  "sleeps) or set OMP_WAIT_POLICY=active, where these CPUs serve inference "
			  "only");
	} else if ((active || !x->omp_wait_policy[0]) && c->oversubscribed) {
		f = add(c, LP_RULE_OMP_WAIT_POLICY, active ? LP_SEV_CRITICAL : LP_SEV_WARNING);
		title(f,
		      "%s with more threads than CPUs: threads spin at barriers on the CPUs the "
		      "threads they wait for need",
		      active ? "OMP_WAIT_POLICY=active" : "OpenMP's default spinning");
		if (x->quota_cpus > 0 && x->quota_cpus < x->ncpus)
			snprintf(f->title + strlen(f->title), sizeof(f->title) - strlen(f->title),
				 "; under a CPU quota, spinning spends the quota too");
		action(f, "use as many threads as CPUs%s",
		       active ? ", or unset OMP_WAIT_POLICY" : "");
	} else {
		return;
	}
	ev_str(f, "OMP_WAIT_POLICY", x->omp_wait_policy);
	ev_str(f, "GOMP_SPINCOUNT", x->gomp_spincount);
	ev_str(f, "OMP_NUM_THREADS", x->omp_num_threads);
	ev_str(f, "OMP_THREAD_LIMIT", x->omp_thread_limit);
	ev(f, "sleeps_per_s", sleeps);
	ev(f, "barrier_asleep_share", asleep);
	ev(f, "sync_share", share((double)in->sync, (double)in->samples));
}

static void rule_weights_not_resident(struct ctx *c)
{
	const struct lp_find_input *in = c->in;
	const struct lp_context *x = in->ctx;
	uint64_t maj = in->ctr[LP_C_FAULTS_MAJ], tok = in->ctr[LP_C_DECODE_GEN_CALLS];
	double per_s = in->window_s > 0 ? (double)maj / in->window_s : 0;
	struct lp_finding *f;

	/* A handful of major faults is a library page read once; 16 in a window of
	 * generation is the weights being read again. */
	if (maj < 16 || !tok)
		return;
	f = add(c, LP_RULE_WEIGHTS_NOT_RESIDENT,
		(double)maj >= (double)tok ? LP_SEV_CRITICAL : LP_SEV_WARNING);
	title(f,
	      "%.0f major page faults/s while generating (%.1f per token): the weights are read "
	      "from disk again%s",
	      per_s, (double)maj / (double)tok,
	      x && x->weights_bytes ? "" : " (no mapped GGUF file found)");
	ev(f, "major_faults", (double)maj);
	ev(f, "major_faults_per_s", per_s);
	ev(f, "major_faults_per_token", (double)maj / (double)tok);
	if (x && x->weights_bytes) {
		ev(f, "weights_bytes", (double)x->weights_bytes);
		ev(f, "weights_resident_share",
		   share((double)x->weights_rss, (double)x->weights_bytes));
		ev(f, "weights_huge_page_bytes", (double)x->weights_huge);
		ev_str(f, "weights_file", x->weights_path);
	}
	if (in->host && in->host->thp[0])
		ev_str(f, "transparent_hugepage", in->host->thp);
	action(f,
	       "keep the model in memory: --mlock, or more memory (or a higher cgroup memory "
	       "limit) than its %.1f GiB plus what else runs; find what evicts the page cache",
	       x ? (double)x->weights_bytes / (1 << 30) : 0.0);
}

static void rule_numa(struct ctx *c)
{
	const struct lp_find_input *in = c->in;
	const struct lp_context *x = in->ctx;
	const struct lp_host_cpus *h = in->host;
	bool used[LP_CTX_MAX_NODES] = {false};
	uint64_t total = 0, remote = 0;
	char nodes[64] = "";
	struct lp_finding *f;

	if (!h || h->nnodes < 2 || !in->threads)
		return;
	for (size_t i = 0; i < in->nthreads; i++) {
		int nd = in->threads[i].cpu < LP_CTX_MAX_CPUS ? h->node[in->threads[i].cpu] : -1;

		if ((double)(in->threads[i].oncpu_ns + in->threads[i].runq_ns) >=
			    COMPUTE_SHARE * c->T &&
		    nd >= 0 && nd < LP_CTX_MAX_NODES)
			used[nd] = true;
	}
	for (unsigned nd = 0; nd < LP_CTX_MAX_NODES; nd++) {
		total += x->weights_node_pages[nd];
		if (!used[nd])
			remote += x->weights_node_pages[nd];
		else
			snprintf(nodes + strlen(nodes), sizeof(nodes) - strlen(nodes), "%s%u",
				 nodes[0] ? "," : "", nd);
	}
	if (!total || !nodes[0] || share((double)remote, (double)total) < 0.3)
		return;
	f = add(c, LP_RULE_NUMA, LP_SEV_WARNING);
	title(f,
	      "its compute threads run on NUMA node %s, but %.0f%% of the weights' pages are on "
	      "other nodes: each token reads them across the interconnect",
	      nodes, 100 * share((double)remote, (double)total));
	ev_str(f, "thread_nodes", nodes);
	ev(f, "weights_pages", (double)total);
	ev(f, "remote_share", share((double)remote, (double)total));
	action(f, "bind threads and memory to one node (numactl --cpunodebind=N --membind=N) or "
		  "spread both (llama.cpp --numa distribute), after dropping the page cache");
}

static bool governor_slow(const struct lp_host_cpus *h, unsigned cpu)
{
	/* intel_pstate and amd-pstate in active mode call their dynamic policy "powersave";
	 * with acpi-cpufreq it holds the lowest frequency. */
	bool pstate = !strcmp(h->driver, "intel_pstate") || !strncmp(h->driver, "amd-pstate", 10);

	return !strcmp(h->governor[cpu], "powersave") && !pstate;
}

static void rule_cpu_frequency(struct ctx *c)
{
	const struct lp_context *x = c->in->ctx;
	const struct lp_host_cpus *h = c->in->host;
	unsigned slow = 0, capped = 0, epp = 0, with = 0, first = LP_CTX_MAX_CPUS;
	uint32_t max = 0, hw = 0;
	struct lp_finding *f;

	if (!h)
		return;
	for (unsigned cpu = 0; cpu < LP_CTX_MAX_CPUS; cpu++) {
		bool bad = false;

		if (!lp_cpuset_has(&x->allowed, cpu) || !h->freq[cpu])
			continue;
		with++;
		if (governor_slow(h, cpu))
			slow++, bad = true;
		if (h->max_khz[cpu] && h->cpuinfo_max_khz[cpu] &&
		    h->max_khz[cpu] < 0.9 * h->cpuinfo_max_khz[cpu]) {
			capped++, bad = true;
			max = h->max_khz[cpu];
			hw = h->cpuinfo_max_khz[cpu];
		}
		if (!strcmp(h->epp[cpu], "power") || !strcmp(h->epp[cpu], "balance_power"))
			epp++, bad = true;
		if (bad && first == LP_CTX_MAX_CPUS)
			first = cpu;
	}
	if (first == LP_CTX_MAX_CPUS)
		return;
	f = add(c, LP_RULE_CPU_FREQUENCY, LP_SEV_WARNING);
	title(f,
	      "the frequency policy holds back %u of the %u CPUs it may use: governor %s (driver "
	      "%s)%s%s",
	      slow > capped && slow > epp ? slow
	      : capped > epp		  ? capped
					  : epp,
	      with, h->governor[first], h->driver[0] ? h->driver : "unknown",
	      capped ? ", maximum frequency capped below the hardware's" : "",
	      epp ? ", energy preference for power" : "");
	ev_str(f, "governor", h->governor[first]);
	ev_str(f, "driver", h->driver);
	ev_str(f, "energy_performance_preference", h->epp[first]);
	ev(f, "cpus_powersave", slow);
	ev(f, "cpus_capped", capped);
	ev(f, "cpus_power_preference", epp);
	if (capped) {
		ev(f, "scaling_max_khz", max);
		ev(f, "cpuinfo_max_khz", hw);
	}
	action(f, "cpupower frequency-set -g performance (or energy preference performance), and "
		  "raise scaling_max_freq to cpuinfo_max_freq");
}

static void rule_memory_bound(struct ctx *c)
{
	const struct lp_find_input *in = c->in;
	struct lp_findings *o = c->out;
	struct lp_finding *f;
	double frac;

	/* The wall rate as the API gives it (render.c): decode time and the gaps between. */
	if (in->ctr[LP_C_DECODE_GEN_NS] + in->ctr[LP_C_GEN_GAP_NS])
		o->gen_tokens_per_s =
			(double)lp_timed_tokens(in->ctr, 0) * 1e9 /
			(double)(in->ctr[LP_C_DECODE_GEN_NS] + in->ctr[LP_C_GEN_GAP_NS]);
	o->weights_bytes = in->ctx ? in->ctx->weights_bytes : 0;
	/* What a token reads, from the model's header; the whole mapping when it is unknown. */
	o->per_token_bytes = in->ctx ? in->ctx->weights_per_token : 0;
	if (!o->per_token_bytes)
		o->per_token_bytes = o->weights_bytes;
	o->stream_bytes_per_s = (double)o->per_token_bytes * o->gen_tokens_per_s;
	if (!o->weights_bytes || !o->gen_tokens_per_s) {
		not_evaluated(c, LP_RULE_MEMORY_BOUND,
			      !in->ctx		  ? "its mappings are not readable"
			      : !o->weights_bytes ? "no mapped GGUF file (weights read into memory)"
						  : "no generation in the window");
		return;
	}
	/* A token that reads no more than the last-level caches of its CPUs hold reads the
	 * weights from them, token after token: the memory's bandwidth is not what bounds it,
	 * however its rate compares. One byte more and a cyclic read through an LRU-like
	 * cache misses nearly always. */
	o->llc_bytes = in->ctx->llc_bytes;
	if (o->llc_bytes && o->per_token_bytes <= o->llc_bytes) {
		o->fits_llc = true;
		snprintf(o->why[LP_RULE_MEMORY_BOUND], sizeof(o->why[0]),
			 "the weights a token reads (%.1f MiB) fit in the last-level caches of its "
			 "CPUs (%.1f MiB in %u): they stream from the cache, not from memory",
			 (double)o->per_token_bytes / 1048576, (double)o->llc_bytes / 1048576,
			 in->ctx->nllc);
		not_evaluated(c, LP_RULE_MEMORY_BOUND, o->why[LP_RULE_MEMORY_BOUND]);
		return;
	}
	if (!in->membw) {
		not_evaluated(c, LP_RULE_MEMORY_BOUND,
			      in->membw_why ? in->membw_why
					    : "the host's bandwidth is being measured");
		return;
	}
	frac = o->stream_bytes_per_s / in->membw;
	if (frac < MEMBOUND_FRACTION)
		return;
	f = add(c, LP_RULE_MEMORY_BOUND, LP_SEV_INFO);
	title(f,
	      "decode streams %.1f GB/s of weights of a measured %.1f GB/s (%.0f%%): memory-bound; "
	      "more threads won't help",
	      o->stream_bytes_per_s / 1e9, in->membw / 1e9, 100 * frac);
	ev(f, "weights_bytes", (double)o->weights_bytes);
	ev(f, "bytes_per_token", (double)o->per_token_bytes);
	ev(f, "tokens_per_s", o->gen_tokens_per_s);
	ev(f, "stream_bytes_per_s", o->stream_bytes_per_s);
	ev(f, "peak_bytes_per_s", in->membw);
	ev(f, "fraction", frac);
	ev(f, "llc_bytes", (double)o->llc_bytes);
	action(f, "fewer bytes per token raise tokens/s: a smaller quantisation or model, or "
		  "faster memory; threads beyond those that saturate it only spin");
}

/* The i-th of a process's requests: the kept finished ones (kept of them), then those in
 * flight. */
static const struct lp_request *request_at(const struct lp_requests *rq, uint64_t kept, uint64_t i)
{
	return i < kept ? lp_requests_done(rq, i) : &rq->active[i - kept];
}

/* Continuous batching: a prompt that joins a decode makes every generating request in it
 * wait for the prompt's tokens. Over the requests that decoded in the window (over or in
 * flight), their generation decodes' time and the part of it in decodes that carried
 * other sequences' prompt tokens. */
static void rule_batch_interference(struct ctx *c)
{
	const struct lp_requests *rq = c->in->requests;
	uint64_t gen = 0, hit = 0, tpot[LP_REQ_KEEP + LP_REQ_ACTIVE];
	uint64_t kept = lp_requests_kept(rq);
	size_t n = 0, reqs = 0;
	struct lp_finding *f;

	for (uint64_t i = 0; i < kept + (rq ? rq->nactive : 0); i++) {
		const struct lp_request *q = request_at(rq, kept, i);

		if (q->last_ns < c->in->since_ns || !q->gen_decode_ns)
			continue;
		reqs++;
		gen += q->gen_decode_ns;
		hit += q->interfered_ns;
		if (q->output_tokens > 1)
			tpot[n++] = lp_request_tpot_ns(q);
	}
	if (reqs < 2 || gen < INTERFERED_MIN_NS || (double)hit < INTERFERED_SHARE * (double)gen)
		return;
	qsort(tpot, n, sizeof(*tpot), cmp_u64);
	f = add(c, LP_RULE_BATCH_INTERFERENCE, LP_SEV_WARNING);
	title(f,
	      "generating requests spent %.0f%% of their decode time in decodes that also "
	      "processed other requests' prompts: each prompt that joins stalls every request "
	      "in flight (time per output token p50 %.1f ms, max %.1f ms over %zu requests)",
	      100 * share((double)hit, (double)gen), n ? (double)tpot[n / 2] / 1e6 : 0,
	      n ? (double)tpot[n - 1] / 1e6 : 0, reqs);
	ev(f, "interfered_share", share((double)hit, (double)gen));
	ev(f, "generation_decode_ns", (double)gen);
	ev(f, "interfered_ns", (double)hit);
	ev(f, "requests", (double)reqs);
	if (n) {
		ev(f, "tpot_p50_ns", (double)tpot[n / 2]);
		ev(f, "tpot_max_ns", (double)tpot[n - 1]);
	}
	action(f, "bound a decode's prompt work: llama-server's --batch-size (-b) splits prompts "
		  "into smaller chunks (shorter stalls, a longer time to first token), or fewer "
		  "slots (-np); or serve long prompts on another instance");
}

/* Prompts that arrive together share their decodes: each request's first token then waits
 * for the others' prompts too. Over the requests whose prefill was in the window, the
 * share of the prompt tokens in their prefill decodes that were other sequences'. */
static void rule_prefill_contention(struct ctx *c)
{
	const struct lp_requests *rq = c->in->requests;
	uint64_t own = 0, peer = 0, prefill = 0, ttft[LP_REQ_KEEP + LP_REQ_ACTIVE];
	uint64_t kept = lp_requests_kept(rq);
	size_t reqs = 0;
	struct lp_finding *f;

	for (uint64_t i = 0; i < kept + (rq ? rq->nactive : 0); i++) {
		const struct lp_request *q = request_at(rq, kept, i);

		if (q->first_ns < c->in->since_ns || !q->prompt_tokens)
			continue;
		own += q->prompt_tokens;
		peer += q->prefill_peer_tokens;
		prefill += q->prefill_ns;
		ttft[reqs++] = lp_request_ttft_ns(q);
	}
	if (reqs < 2 || prefill < INTERFERED_MIN_NS ||
	    (double)peer < INTERFERED_SHARE * (double)(own + peer))
		return;
	qsort(ttft, reqs, sizeof(*ttft), cmp_u64);
	f = add(c, LP_RULE_PREFILL_CONTENTION, LP_SEV_WARNING);
	title(f,
	      "requests' prompts shared their decodes with other requests' prompts: %.0f%% of "
	      "the prompt tokens their first token waited for were others' (time to first token "
	      "p50 %.1f ms, max %.1f ms over %zu requests)",
	      100 * share((double)peer, (double)(own + peer)), (double)ttft[reqs / 2] / 1e6,
	      (double)ttft[reqs - 1] / 1e6, reqs);
	ev(f, "peer_prompt_share", share((double)peer, (double)(own + peer)));
	ev(f, "prompt_tokens", (double)own);
	ev(f, "peer_prompt_tokens", (double)peer);
	ev(f, "prefill_ns", (double)prefill);
	ev(f, "requests", (double)reqs);
	ev(f, "ttft_p50_ns", (double)ttft[reqs / 2]);
	ev(f, "ttft_max_ns", (double)ttft[reqs - 1]);
	action(f, "prompts arrive faster than they are processed one at a time: fewer slots "
		  "(-np) let the first ones finish sooner; more CPUs or a smaller model shorten "
		  "them all");
}

static int by_severity(const void *a, const void *b)
{
	const struct lp_finding *x = a, *y = b;

	return (int)y->severity - (int)x->severity;
}

static int by_op_oncpu(const void *a, const void *b)
{
	const struct lp_find_op *x = a, *y = b;

	return x->oncpu_ns < y->oncpu_ns ? 1 : x->oncpu_ns > y->oncpu_ns ? -1 : 0;
}

/* The roofline, answered whenever precise mode read nodes: the ops with the most own CPU
 * time, each one's rate against the host's (rendered). */
static void op_roofline(const struct lp_find_input *in, struct lp_findings *out)
{
	struct lp_find_op *v;

	if (!in->ops || !in->nops || !(v = malloc(in->nops * sizeof(*v))))
		return;
	memcpy(v, in->ops, in->nops * sizeof(*v));
	qsort(v, in->nops, sizeof(*v), by_op_oncpu);
	for (size_t i = 0; i < in->nops; i++) {
		out->ops_oncpu_ns += v[i].oncpu_ns;
		if (out->nops < LP_FIND_OPS && v[i].oncpu_ns > 0)
			out->ops[out->nops++] = v[i];
	}
	free(v);
}

const char *const lp_blas_names[5] = {"none", "reference", "OpenBLAS", "MKL", "BLIS"};

/* torch's rules judge processes of the torch engine only (others' are not listed as not
 * evaluated: they do not apply). */
static bool torch_rule(struct ctx *c, enum lp_rule r)
{
	(void)r;
	return c->in->torch.torch;
}

/* Threads that compute: a tenth of the window on a CPU or waiting for one, and at least
 * half of their samples in ops or sync (the engine's work, not an HTTP loop's). */
static unsigned compute_threads(const struct ctx *c);

/* intra_op_threads: fewer compute threads than the CPUs it may use while the spare ones
 * idle (or run niced work, which yields to it): PyTorch sets its intra-op threads from
 * what it sees at its start (1 on Debian's 1.13 on a 2-CPU VM). A spare CPU is half of
 * one's time idle over the window, for each thread it could add. */
#define SPARE_CPU 0.5
static void rule_intra_op_threads(struct ctx *c)
{
	const struct lp_find_input *in = c->in;
	unsigned n = compute_threads(c), usable = (unsigned)c->cpus;
	double spare = in->torch.host_spare_cpus;
	struct lp_finding *f;

	if (!torch_rule(c, LP_RULE_INTRA_OP_THREADS))
		return;
	if (!in->threads || spare < 0) {
		not_evaluated(c, LP_RULE_INTRA_OP_THREADS,
			      "its threads or the host's CPU time are "
			      "not known");
		return;
	}
	if (!n || n >= usable || spare < SPARE_CPU * (usable - n) || c->oversubscribed)
		return;
	f = add(c, LP_RULE_INTRA_OP_THREADS, LP_SEV_WARNING);
	title(f,
	      "%u compute thread%s of the %u CPUs it may use, while %.1f CPUs' time went idle: "
	      "its intra-op threads are fewer than its CPUs",
	      n, n == 1 ? "" : "s", usable, spare);
	ev(f, "compute_threads", n);
	ev(f, "cpus_allowed", usable);
	ev(f, "spare_cpus", spare);
	action(f,
	       "torch.set_num_threads(%u) at its start (or OMP_NUM_THREADS=%u in its "
	       "environment): PyTorch takes its intra-op threads from what it sees when it "
	       "starts",
	       usable, usable);
}

/* reference_blas: a tenth of its samples are in the reference BLAS's code (the BLAS its
 * samples were most in): an optimised BLAS does the same GEMMs several times faster
 * (bench/RESULTS.md: the test decoder here). */
#define REFERENCE_BLAS_MATMUL 0.10
static void rule_reference_blas(struct ctx *c)
{
	const struct lp_find_input *in = c->in;
	double mm = in->torch.blas_share;
	struct lp_finding *f;

	if (!torch_rule(c, LP_RULE_REFERENCE_BLAS))
		return;
	if (in->torch.blas != LP_BLAS_REFERENCE || mm < REFERENCE_BLAS_MATMUL)
		return;
	f = add(c, LP_RULE_REFERENCE_BLAS, LP_SEV_WARNING);
	title(f, "%.0f%% of its CPU time is in the reference BLAS's code (%s)", 100 * mm,
	      in->torch.blas_path ? in->torch.blas_path : "?");
	ev(f, "matmul_share", mm);
	ev_str(f, "blas", in->torch.blas_path ? in->torch.blas_path : "");
	action(f,
	       "use an optimised BLAS: OpenBLAS (Debian: libopenblas0-openmp, which "
	       "update-alternatives makes libblas.so.3, or its folder on LD_LIBRARY_PATH for one "
	       "process) or MKL");
}

/* thread_pools: two thread pools that do not know of each other (pytorch#98836,
 * #146603): two OpenMP runtimes, or an OpenBLAS with its own pool beside OpenMP. Each
 * sizes itself to the CPUs, so together they ask for twice as many. */
static void rule_thread_pools(struct ctx *c)
{
	const struct lp_find_input *in = c->in;
	const struct lp_find_torch *x = &in->torch;
	struct lp_finding *f;

	if (!torch_rule(c, LP_RULE_THREAD_POOLS))
		return;
	if (x->nomp >= 2) {
		f = add(c, LP_RULE_THREAD_POOLS, LP_SEV_WARNING);
		title(f, "two OpenMP runtimes in one process: %s and %s", x->omp[0], x->omp[1]);
		ev_str(f, "runtime", x->omp[0]);
		ev_str(f, "other_runtime", x->omp[1]);
		action(f,
		       "load one OpenMP runtime: build or install its libraries against the same "
		       "one (PyTorch's and its BLAS's), or preload the one PyTorch uses");
	} else if (x->blas_own_pool && x->nomp == 1) {
		f = add(c, LP_RULE_THREAD_POOLS, LP_SEV_WARNING);
		title(f,
		      "OpenBLAS's own thread pool (%s, built without OpenMP) beside PyTorch's "
		      "OpenMP threads (%s)",
		      x->blas_path ? x->blas_path : "?", x->omp[0]);
		ev_str(f, "blas", x->blas_path ? x->blas_path : "");
		ev_str(f, "runtime", x->omp[0]);
		action(f, "use OpenBLAS's OpenMP build (Debian: libopenblas0-openmp), or "
			  "OPENBLAS_NUM_THREADS=1");
	}
}

/* interpreter_bound: of its samples while generating, a third outside ops: the Python
 * around the model (the generate loop, sampling, its ops' dispatch from Python) takes the
 * time of tokens. Samples enough to tell (a share's sigma under 0.05). */
#define INTERPRETER_SHARE 0.33
#define INTERPRETER_SAMPLES 100
static void rule_interpreter_bound(struct ctx *c)
{
	const struct lp_find_torch *x = &c->in->torch;
	double out = share((double)x->gen_outside, (double)x->gen_samples);
	struct lp_finding *f;

	if (!torch_rule(c, LP_RULE_INTERPRETER_BOUND))
		return;
	if (x->gen_samples < INTERPRETER_SAMPLES) {
		not_evaluated(c, LP_RULE_INTERPRETER_BOUND, "too few samples while generating");
		return;
	}
	if (out < INTERPRETER_SHARE)
		return;
	f = add(c, LP_RULE_INTERPRETER_BOUND, out >= 0.5 ? LP_SEV_CRITICAL : LP_SEV_WARNING);
	title(f,
	      "%.0f%% of its CPU time while generating is outside aten ops: the Python around "
	      "the model",
	      100 * out);
	ev(f, "outside_share", out);
	ev(f, "generation_samples", (double)x->gen_samples);
	action(f,
	       "see where in `llmprofctl flame --pid %d --phase generation`; batch more "
	       "sequences per forward, or compile the model (torch.compile) so that fewer "
	       "Python calls run per token",
	       (int)c->in->pid);
}

/* gil_contention: a thread of a CPython process waited for the GIL a fifth of the window
 * or more (its futex waits on the GIL's words, each one timed: python.bpf.c): another
 * thread runs Python meanwhile, and this one's Python (a generate loop, a request's
 * handler) cannot. The thread that waited most is named. */
#define GIL_SHARE 0.2
static void rule_gil_contention(struct ctx *c)
{
	const struct lp_find_thread *worst = NULL, *busiest = NULL;
	double window_ns = c->in->window_s * 1e9, s;
	struct lp_finding *f;

	if (!c->in->ctr[LP_C_GIL_WAITS] || !c->in->threads || window_ns <= 0)
		return;
	for (size_t i = 0; i < c->in->nthreads; i++) {
		const struct lp_find_thread *t = &c->in->threads[i];

		if (!worst || t->gil_ns > worst->gil_ns)
			worst = t;
		if (!busiest || t->oncpu_ns > busiest->oncpu_ns)
			busiest = t;
	}
	s = (double)worst->gil_ns / window_ns;
	if (s < GIL_SHARE)
		return;
	f = add(c, LP_RULE_GIL_CONTENTION, s >= 0.5 ? LP_SEV_CRITICAL : LP_SEV_WARNING);
	title(f,
	      "thread %u (%s) waited for the GIL %.0f%% of the time, %.0f times: other threads "
	      "ran Python meanwhile",
	      worst->tid, worst->comm, 100 * s, (double)worst->gil_waits);
	ev(f, "tid", (double)worst->tid);
	ev_str(f, "comm", worst->comm);
	ev(f, "gil_wait_share", s);
	ev(f, "gil_waits", (double)worst->gil_waits);
	if (busiest && busiest != worst) {
		ev(f, "busiest_tid", (double)busiest->tid);
		ev_str(f, "busiest_comm", busiest->comm);
	}
	action(f,
	       "see what holds it in `llmprofctl flame --pid %d`; move the other threads' work "
	       "(tokenizing, pre- and post-processing) to a process of its own, or into calls "
	       "that release the GIL",
	       (int)c->in->pid);
}

static unsigned compute_threads(const struct ctx *c)
{
	unsigned n = 0;

	for (size_t i = 0; c->in->threads && i < c->in->nthreads; i++)
		n += ggml_thread(c, &c->in->threads[i]);
	return n;
}

/* The rules in LP_RULES' order, each with its judge. */
static const struct {
	enum lp_rule_needs needs;
	void (*judge)(struct ctx *c);
} rules[LP_RULE_NR] = {
#define RULE(id, name, needs) [LP_RULE_##id] = {needs, rule_##name},
	LP_RULES(RULE)
#undef RULE
};

void lp_findings_eval(const struct lp_find_input *in, struct lp_findings *out)
{
	struct ctx c = {.in = in, .out = out, .T = in->window_s * 1e9};

	memset(out, 0, sizeof(*out));
	out->window_s = in->window_s;
	out->scan_share = in->samples ? (double)in->scanned / (double)in->samples : 0;
	out->shares_trusted = out->scan_share <= LP_SCAN_TRUST;
	out->membw = in->membw;
	op_roofline(in, out);
	c.oncpu = in->ctr[LP_C_ONCPU_NS];
	c.runq = in->runq_ns;
	for (size_t i = 0; in->threads && i < in->nthreads; i++)
		if ((double)(in->threads[i].oncpu_ns + in->threads[i].runq_ns) >=
		    COMPUTE_SHARE * c.T)
			c.nactive++;
	c.demand = c.T > 0 ? (double)(c.oncpu + c.runq) / c.T : 0;
	/* A few seconds of figures say nothing of a steady state: the first reads after a
	 * process is found (or reset) wait for MIN_WINDOW_S of them. */
	if (in->window_s < MIN_WINDOW_S) {
		for (int r = 0; r < LP_RULE_NR; r++)
			not_evaluated(&c, (enum lp_rule)r, "less than 3 s of figures");
		return;
	}
	if (in->ctx) {
		c.cpus = in->ctx->ncpus;
		if (in->ctx->quota_cpus > 0 && in->ctx->quota_cpus < c.cpus)
			c.cpus = in->ctx->quota_cpus;
	}
	for (size_t r = 0; r < LP_RULE_NR; r++) {
		if (rules[r].needs == LP_RULE_CONTEXT && !in->ctx)
			not_evaluated(
				&c, (enum lp_rule)r,
				"the process is gone: its CPUs and mappings are not readable");
		else
			rules[r].judge(&c);
	}
	/* Stable: rules of one severity keep the order above, causes before consequences. */
	for (size_t i = 1; i < out->n; i++)
		for (size_t j = i; j > 0 && by_severity(&out->f[j - 1], &out->f[j]) > 0; j--) {
			struct lp_finding tmp = out->f[j];

			out->f[j] = out->f[j - 1];
			out->f[j - 1] = tmp;
		}
}

void lp_findings_clear(struct lp_findings *f)
{
	for (size_t i = 0; i < f->n; i++)
		cJSON_Delete(f->f[i].evidence);
	f->n = 0;
}

int lp_findings_worst(const struct lp_findings *f)
{
	int w = f->n ? (int)f->f[0].severity : -1;

	return f->nrecent && (int)f->recent[0].severity > w ? (int)f->recent[0].severity : w;
}

static int recent_by_severity(const void *a, const void *b)
{
	const struct lp_recent_finding *x = a, *y = b;

	return (int)y->severity - (int)x->severity;
}

void lp_findings_hold(struct lp_findings *f, struct lp_recent_finding *held, uint64_t now)
{
	bool fired[LP_RULE_NR] = {false};

	f->now_ns = now;
	for (size_t i = 0; i < f->n; i++) {
		struct lp_recent_finding *h = &held[f->f[i].rule];

		fired[f->f[i].rule] = true;
		h->rule = f->f[i].rule;
		h->severity = f->f[i].severity;
		h->at_ns = now;
		memcpy(h->title, f->f[i].title, sizeof(h->title));
	}
	f->nrecent = 0;
	for (int r = 0; r < LP_RULE_NR; r++)
		if (!fired[r] && held[r].at_ns && now - held[r].at_ns < LP_FINDINGS_RECENT_NS)
			f->recent[f->nrecent++] = held[r];
	qsort(f->recent, f->nrecent, sizeof(f->recent[0]), recent_by_severity);
}

cJSON *lp_findings_render(const struct lp_findings *f)
{
	cJSON *o = cJSON_CreateObject(), *a, *ne, *bw, *x;

	cJSON_AddNumberToObject(o, "window_seconds", f->window_s);
	a = cJSON_AddArrayToObject(o, "findings");
	for (size_t i = 0; i < f->n; i++) {
		const struct lp_finding *x = &f->f[i];
		cJSON *e = cJSON_CreateObject();

		cJSON_AddStringToObject(e, "rule", lp_rule_names[x->rule]);
		cJSON_AddStringToObject(e, "severity", lp_severity_names[x->severity]);
		cJSON_AddStringToObject(e, "title", x->title);
		cJSON_AddItemToObject(e, "evidence", cJSON_Duplicate(x->evidence, true));
		cJSON_AddStringToObject(e, "action", x->action);
		cJSON_AddItemToArray(a, e);
	}
	a = cJSON_AddArrayToObject(o, "recent");
	for (size_t i = 0; i < f->nrecent; i++) {
		const struct lp_recent_finding *r = &f->recent[i];
		cJSON *e = cJSON_CreateObject();

		cJSON_AddStringToObject(e, "rule", lp_rule_names[r->rule]);
		cJSON_AddStringToObject(e, "severity", lp_severity_names[r->severity]);
		cJSON_AddStringToObject(e, "title", r->title);
		cJSON_AddNumberToObject(e, "seconds_ago", (double)(f->now_ns - r->at_ns) / 1e9);
		cJSON_AddItemToArray(a, e);
	}
	/* Whether the op and sync shares of the window are measured or rest on the scan. */
	x = cJSON_AddObjectToObject(o, "op_shares");
	cJSON_AddNumberToObject(x, "scan_share", f->scan_share);
	cJSON_AddBoolToObject(x, "trustworthy", f->shares_trusted);
	ne = cJSON_AddObjectToObject(o, "not_evaluated");
	for (int r = 0; r < LP_RULE_NR; r++)
		if (f->not_evaluated[r])
			cJSON_AddStringToObject(ne, lp_rule_names[r], f->not_evaluated[r]);
	bw = cJSON_AddObjectToObject(o, "bandwidth");
	cJSON_AddNumberToObject(bw, "weights_bytes", (double)f->weights_bytes);
	cJSON_AddNumberToObject(bw, "bytes_per_token", (double)f->per_token_bytes);
	cJSON_AddNumberToObject(bw, "tokens_per_s", f->gen_tokens_per_s);
	cJSON_AddNumberToObject(bw, "stream_bytes_per_s", f->stream_bytes_per_s);
	cJSON_AddNumberToObject(bw, "llc_bytes", (double)f->llc_bytes);
	cJSON_AddBoolToObject(bw, "fits_llc", f->fits_llc);
	if (f->membw > 0) {
		cJSON_AddNumberToObject(bw, "peak_bytes_per_s", f->membw);
		cJSON_AddNumberToObject(bw, "fraction", f->stream_bytes_per_s / f->membw);
	} else {
		cJSON_AddNullToObject(bw, "peak_bytes_per_s");
		cJSON_AddNullToObject(bw, "fraction");
	}
	/* Each op against the host's bandwidth: memory-bound at MEMBOUND_FRACTION of it. */
	bw = cJSON_AddObjectToObject(o, "op_roofline");
	if (f->membw > 0)
		cJSON_AddNumberToObject(bw, "peak_bytes_per_s", f->membw);
	else
		cJSON_AddNullToObject(bw, "peak_bytes_per_s");
	a = cJSON_AddArrayToObject(bw, "ops");
	for (size_t i = 0; i < f->nops; i++) {
		const struct lp_find_op *p = &f->ops[i];
		double rate = p->busy_ns > 0 ? p->bytes * 1e9 / p->busy_ns : 0;
		cJSON *e = cJSON_CreateObject();

		lp_json_add_escaped(e, "op", p->op);
		cJSON_AddNumberToObject(e, "cpu_share", share(p->oncpu_ns, f->ops_oncpu_ns));
		if (rate > 0) {
			cJSON_AddNumberToObject(e, "bytes_per_s", rate);
		} else {
			cJSON_AddNullToObject(e, "bytes_per_s");
		}
		if (rate > 0 && f->membw > 0) {
			cJSON_AddNumberToObject(e, "fraction", rate / f->membw);
			/* From the caches, an op is not bound by the memory */
			if (f->fits_llc)
				cJSON_AddNullToObject(e, "memory_bound");
			else
				cJSON_AddBoolToObject(e, "memory_bound",
						      rate / f->membw >= MEMBOUND_FRACTION);
		} else {
			cJSON_AddNullToObject(e, "fraction");
			cJSON_AddNullToObject(e, "memory_bound");
		}
		cJSON_AddItemToArray(a, e);
	}
	return o;
}
