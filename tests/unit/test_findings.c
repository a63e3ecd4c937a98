// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* Unit tests of daemon/report/findings.c: each rule on figures made to provoke it, and on the same
 * figures one step short of it; a clean process fires nothing; an exited one says which
 * rules it cannot judge. The e2e tier (test_findings.py) provokes them for real. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "check.h"
#include "report/findings.h"

#define S 1000000000ULL /* a second in ns */

struct fx {
	uint64_t ctr[LP_C_NR];
	struct lp_find_thread th[8];
	struct lp_preempt_view pre[4];
	struct lp_context ctx;
	struct lp_host_cpus *host;
	struct lp_find_input in;
};

/* A clean process: two threads on two CPUs, busy 95 % of a 10 s window, sync 10 %. */
static void clean(struct fx *f)
{
	static struct lp_host_cpus host;

	memset(f, 0, sizeof(*f));
	memset(&host, 0, sizeof(host));
	host.nnodes = 1;
	host.online.w[0] = 0xf;
	for (int c = 0; c < 4; c++)
		host.core[c] = (int16_t)c;
	f->host = &host;
	f->ctx.allowed.w[0] = 3;
	f->ctx.ncpus = 2;
	f->ctx.ncores = 2;
	f->ctx.env_read = true;
	for (int i = 0; i < 2; i++) {
		f->th[i] = (struct lp_find_thread){.tid = 100 + (uint32_t)i,
						   .oncpu_ns = 95 * S / 10,
						   .runq_ns = S / 100,
						   .samples = 500,
						   .sync = 50,
						   .ggml = 480,
						   .cpu = (uint32_t)i};
		strcpy(f->th[i].comm, "llama");
	}
	f->ctr[LP_C_ONCPU_NS] = 19 * S;
	f->ctr[LP_C_DECODE_GEN_CALLS] = 200;
	f->ctr[LP_C_GEN_INTERVALS] = 200;
	f->ctr[LP_C_GEN_INTERVAL_NS] = 10 * S;
	f->ctr[LP_C_DECODE_GEN_NS] = 9 * S; /* and 1 s between the decodes: 20 tokens/s */
	f->ctr[LP_C_GEN_GAP_NS] = S;
	f->ctr[LP_C_NVCSW] = 50;
	f->in = (struct lp_find_input){.pid = 42,
				       .window_s = 10,
				       .ctr = f->ctr,
				       .runq_ns = 2 * S / 100,
				       .samples = 1000,
				       .sync = 100,
				       .threads = f->th,
				       .nthreads = 2,
				       .preempt = f->pre,
				       .npreempt = 0,
				       .ctx = &f->ctx,
				       .host = f->host};
}

/* n threads like the first, each with this on-CPU and run-queue time. */
static void threads(struct fx *f, int n, uint64_t on, uint64_t rq)
{
	for (int i = 0; i < n; i++) {
		f->th[i] = f->th[0];
		f->th[i].tid = 100 + (uint32_t)i;
		f->th[i].oncpu_ns = on;
		f->th[i].runq_ns = rq;
	}
	f->in.nthreads = (size_t)n;
}

static const struct lp_finding *fired(const struct lp_findings *o, enum lp_rule r)
{
	for (size_t i = 0; i < o->n; i++)
		if (o->f[i].rule == r)
			return &o->f[i];
	return NULL;
}

static double ev(const struct lp_finding *f, const char *key)
{
	const cJSON *v = f ? cJSON_GetObjectItemCaseSensitive(f->evidence, key) : NULL;

	return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static const char *ev_str(const struct lp_finding *f, const char *key)
{
	const cJSON *v = f ? cJSON_GetObjectItemCaseSensitive(f->evidence, key) : NULL;

	return cJSON_IsString(v) ? v->valuestring : "";
}

static void set_preempt(struct fx *f, size_t i, uint32_t by, const char *comm, uint64_t wait)
{
	f->pre[i].by_tgid = by;
	f->pre[i].v.count = 100;
	f->pre[i].v.wait_ns = wait;
	strncpy(f->pre[i].v.comm, comm, sizeof(f->pre[i].v.comm));
	if (f->in.npreempt <= i)
		f->in.npreempt = i + 1;
}

static void test_clean(void)
{
	struct lp_findings o;
	struct fx f;

	clean(&f);
	f.in.window_s = 2;
	lp_findings_eval(&f.in, &o);
	CHECK(o.n == 0 && o.not_evaluated[LP_RULE_PREEMPTED], "2 s of figures judge nothing");
	lp_findings_clear(&o);
	f.in.window_s = 10;
	lp_findings_eval(&f.in, &o);
	CHECK(o.n == 0, "a clean process fires nothing, got %zu (%s)", o.n,
	      o.n ? o.f[0].title : "");
	CHECK(o.not_evaluated[LP_RULE_MEMORY_BOUND] && !o.not_evaluated[LP_RULE_OVERSUBSCRIBED],
	      "without mapped weights, memory-bound is not judged, the rest is");
	lp_findings_clear(&o);
}

static void test_oversubscribed(void)
{
	const struct lp_finding *x;
	struct lp_findings o;
	struct fx f;

	/* Four threads on two CPUs, each waiting 40 % of its time behind the others. */
	clean(&f);
	threads(&f, 4, 5 * S, 4 * S);
	f.ctr[LP_C_ONCPU_NS] = 20 * S;
	f.in.runq_ns = 16 * S;
	set_preempt(&f, 0, 42, "llama", 15 * S);
	lp_findings_eval(&f.in, &o);
	x = fired(&o, LP_RULE_OVERSUBSCRIBED);
	CHECK(x && x->severity == LP_SEV_CRITICAL && ev(x, "compute_threads") == 4 &&
		      ev(x, "cpus_allowed") == 2 &&
		      fabs(ev(x, "runqueue_share") - 16.0 / 36) < 1e-9 &&
		      ev(x, "own_preemption_share") == 1 && strstr(x->title, "its own threads"),
	      "4 threads on 2 CPUs: %s", x ? x->title : "(none)");
	CHECK(!fired(&o, LP_RULE_PREEMPTED), "its own threads are not other processes");
	CHECK(o.n && o.f[0].severity == LP_SEV_CRITICAL, "the most severe comes first");
	lp_findings_clear(&o);

	/* A pool of four threads taking turns: they want 1.2 CPUs of 2. */
	f.ctr[LP_C_ONCPU_NS] = 10 * S;
	f.in.runq_ns = 2 * S;
	lp_findings_eval(&f.in, &o);
	CHECK(!fired(&o, LP_RULE_OVERSUBSCRIBED), "threads taking turns want 1.2 CPUs of 2");
	lp_findings_clear(&o);

	/* The same threads, waiting 5 %: more threads than CPUs, but they hardly wait. */
	f.ctr[LP_C_ONCPU_NS] = 20 * S;
	f.in.runq_ns = S;
	lp_findings_eval(&f.in, &o);
	CHECK(!fired(&o, LP_RULE_OVERSUBSCRIBED), "a run-queue share of 5 %% does not fire");
	lp_findings_clear(&o);

	/* Two threads under a quota of one CPU: throttled half of its CPUs' time. */
	clean(&f);
	f.ctx.quota_cpus = 1;
	f.th[0].oncpu_ns = f.th[1].oncpu_ns = 5 * S;
	f.th[0].runq_ns = f.th[1].runq_ns = 4 * S;
	f.ctr[LP_C_ONCPU_NS] = 10 * S;
	f.in.runq_ns = 8 * S;
	f.ctx.cgroup_read = true;
	f.in.throttled_usec = 10 * 1000000;
	f.in.nr_throttled = 90;
	lp_findings_eval(&f.in, &o);
	x = fired(&o, LP_RULE_OVERSUBSCRIBED);
	CHECK(x && ev(x, "quota_cpus") == 1 && fabs(ev(x, "throttled_share") - 0.5) < 1e-9 &&
		      ev(x, "throttled_periods") == 90 && strstr(x->title, "quota of 1.00"),
	      "a quota of 1 CPU for 2 threads: %s", x ? x->title : "(none)");
	lp_findings_clear(&o);
}

static void test_preempted_and_late(void)
{
	const struct lp_finding *x;
	struct lp_findings o;
	struct fx f;

	/* A hog on CPU 1: thread 101 runs half the time, waiting behind it; the other spins
	 * at barriers for it (sync 40 %). */
	clean(&f);
	f.th[1].oncpu_ns = 5 * S;
	f.th[1].runq_ns = 45 * S / 10;
	f.in.runq_ns = 46 * S / 10;
	f.in.sync = 400;
	f.th[0].sync = 390; /* the one that waits */
	f.th[1].samples = 250;
	f.th[1].ggml = 240;
	f.th[1].sync = 10; /* the one it waits for */
	set_preempt(&f, 0, 999, "lphog", 45 * S / 10);
	set_preempt(&f, 1, 0, "swapper/1", S);
	lp_findings_eval(&f.in, &o);
	x = fired(&o, LP_RULE_PREEMPTED);
	CHECK(x && strstr(x->title, "lphog (pid 999") &&
		      fabs(ev(x, "waited_behind_others_share") - 4.5 / (19 + 4.6)) < 1e-9,
	      "preempted by the hog: %s", x ? x->title : "(none)");
	CHECK(x && cJSON_GetArraySize(
			   cJSON_GetObjectItemCaseSensitive(x->evidence, "preemptors")) == 1,
	      "the idle task (a throttled quota) is not listed as a preemptor");
	x = fired(&o, LP_RULE_LATE_THREAD);
	CHECK(x && ev(x, "tid") == 101 && !strcmp(ev_str(x, "cause"), "preempted") &&
		      !strcmp(ev_str(x, "preempted_by"), "lphog") && ev(x, "cpu") == 1 &&
		      strstr(x->action, "CPU 1"),
	      "the late thread is 101, preempted by lphog on CPU 1: %s", x ? x->title : "(none)");
	lp_findings_clear(&o);

	/* The same figures where the stack scan placed 5 % of the samples: its sync share
	 * is not taken as measured, and the document says why. */
	f.in.scanned = f.in.samples / 20;
	lp_findings_eval(&f.in, &o);
	CHECK(!fired(&o, LP_RULE_LATE_THREAD) && !o.shares_trusted &&
		      o.not_evaluated[LP_RULE_LATE_THREAD] &&
		      strstr(o.not_evaluated[LP_RULE_LATE_THREAD], "stack scan"),
	      "shares resting on the scan: late_thread not evaluated: %s",
	      o.not_evaluated[LP_RULE_LATE_THREAD] ? o.not_evaluated[LP_RULE_LATE_THREAD] : "-");
	cJSON *doc = lp_findings_render(&o);
	CHECK(!cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(
		      cJSON_GetObjectItemCaseSensitive(doc, "op_shares"), "trustworthy")),
	      "the document's op_shares say so");
	cJSON_Delete(doc);
	lp_findings_clear(&o);
	f.in.scanned = f.in.samples / 50; /* 2 %: within LP_SCAN_TRUST */
	lp_findings_eval(&f.in, &o);
	CHECK(fired(&o, LP_RULE_LATE_THREAD) && o.shares_trusted, "2 %% scanned: evaluated");
	lp_findings_clear(&o);
	f.in.scanned = 0;

	/* The same imbalance, but the threads sample in barriers alike: threads of a pool
	 * that take turns, none of them waited for. */
	f.th[1].sync = 180; /* 72 %, its peer 78 % */
	lp_findings_eval(&f.in, &o);
	CHECK(!fired(&o, LP_RULE_LATE_THREAD), "no late thread among threads that wait alike");
	lp_findings_clear(&o);
	f.th[1].sync = 10;

	/* Bound OpenMP threads, one beside a hog, as measured on this host: its peer samples in
	 * barriers 45 % of 500 samples, it 30 % of 250. More than three standard errors of
	 * the difference (0.09): waited for. */
	f.th[0].sync = 225;
	f.th[1].sync = 75;
	lp_findings_eval(&f.in, &o);
	x = fired(&o, LP_RULE_LATE_THREAD);
	CHECK(x && fabs(ev(x, "sync_share_noise") - 3 * sqrt(0.3 * 0.7 / 250 + 0.45 * 0.55 / 500)) <
			      1e-9,
	      "0.45 against 0.30 of 500 and 250 samples: waited for (noise %.3f)",
	      x ? ev(x, "sync_share_noise") : -1);
	lp_findings_clear(&o);
	/* The same shares of 40 samples each: what sampling alone could make. */
	f.th[0].samples = 40;
	f.th[0].ggml = 40;
	f.th[0].sync = 18;
	f.th[1].samples = 40;
	f.th[1].ggml = 40;
	f.th[1].sync = 12;
	lp_findings_eval(&f.in, &o);
	CHECK(!fired(&o, LP_RULE_LATE_THREAD), "the same shares of 40 samples each: not shown");
	lp_findings_clear(&o);
	f.th[0].samples = 500;
	f.th[0].ggml = 480;
	f.th[0].sync = 390;
	f.th[1].samples = 250;
	f.th[1].ggml = 240;
	f.th[1].sync = 10;

	/* The same imbalance with sync at 10 %: nobody waits for it. */
	f.in.sync = 100;
	lp_findings_eval(&f.in, &o);
	CHECK(!fired(&o, LP_RULE_LATE_THREAD), "no late thread while sync is low");
	lp_findings_clear(&o);

	/* The thread with less CPU is the application's own (node's event loop): outside
	 * ggml, whatever its migrations. */
	f.th[1].ggml = 20;
	f.th[1].migrations = 500;
	lp_findings_eval(&f.in, &o);
	CHECK(!fired(&o, LP_RULE_LATE_THREAD), "a thread outside ggml is no late thread");
	lp_findings_clear(&o);
	f.th[1].ggml = 240;
	f.th[1].migrations = 0;

	/* The late thread faults instead: major faults, no run-queue wait. */
	clean(&f);
	f.in.sync = 400;
	f.th[0].sync = 390;
	f.th[1].sync = 10;
	f.th[1].oncpu_ns = 5 * S;
	f.th[1].faults_maj = 300;
	lp_findings_eval(&f.in, &o);
	x = fired(&o, LP_RULE_LATE_THREAD);
	CHECK(x && !strcmp(ev_str(x, "cause"), "faulting"), "a faulting late thread");
	lp_findings_clear(&o);

	/* Less CPU and no cause to name: not a finding. */
	f.th[1].faults_maj = 0;
	lp_findings_eval(&f.in, &o);
	CHECK(!fired(&o, LP_RULE_LATE_THREAD), "an imbalance without a cause is not named");
	lp_findings_clear(&o);

	/* Only the idle task "preempted" it: throttling, not another process. */
	clean(&f);
	set_preempt(&f, 0, 0, "swapper/0", 5 * S);
	lp_findings_eval(&f.in, &o);
	CHECK(!fired(&o, LP_RULE_PREEMPTED), "the idle task is nobody");
	lp_findings_clear(&o);

	/* Throttled by a quota, a thread's wait is charged to whatever ran next on its CPU: the
	 * cgroup's throttled time is not another process's doing. */
	clean(&f);
	set_preempt(&f, 0, 777, "python3", 5 * S);
	f.in.throttled_usec = 5 * S / 1000;
	lp_findings_eval(&f.in, &o);
	CHECK(!fired(&o, LP_RULE_PREEMPTED), "a throttled stretch is the quota's, not python3's");
	lp_findings_clear(&o);
	f.in.throttled_usec = 0;
	lp_findings_eval(&f.in, &o);
	CHECK(fired(&o, LP_RULE_PREEMPTED), "the same wait unthrottled is python3's");
	lp_findings_clear(&o);
}

static void test_smt(void)
{
	const struct lp_finding *x;
	struct lp_findings o;
	struct fx f;

	/* Four threads on four hardware threads of two cores. */
	clean(&f);
	threads(&f, 4, 95 * S / 10, S / 100);
	f.ctr[LP_C_ONCPU_NS] = 38 * S;
	f.ctx.allowed.w[0] = 0xf;
	f.ctx.ncpus = 4;
	f.ctx.ncores = 2;
	lp_findings_eval(&f.in, &o);
	x = fired(&o, LP_RULE_SMT);
	CHECK(x && ev(x, "cores_allowed") == 2 && strstr(x->action, "-t 2"), "SMT: %s",
	      x ? x->title : "(none)");
	CHECK(!fired(&o, LP_RULE_OVERSUBSCRIBED), "not oversubscribed: 4 threads, 4 CPUs");
	lp_findings_clear(&o);
	f.in.nthreads = 2;
	f.ctr[LP_C_ONCPU_NS] = 19 * S;
	lp_findings_eval(&f.in, &o);
	CHECK(!fired(&o, LP_RULE_SMT), "two threads on two cores: no SMT finding");
	lp_findings_clear(&o);
}

static void test_omp(void)
{
	const struct lp_finding *x;
	struct lp_findings o;
	struct fx f;

	clean(&f);
	f.in.openmp = true;
	strcpy(f.ctx.omp_wait_policy, "PASSIVE");
	f.ctr[LP_C_NVCSW] = 20000;
	f.ctr[LP_C_BARRIER_OFF_EST_NS] = 3 * S;
	lp_findings_eval(&f.in, &o);
	x = fired(&o, LP_RULE_OMP_WAIT_POLICY);
	CHECK(x && ev(x, "sleeps_per_s") == 2000 &&
		      fabs(ev(x, "barrier_asleep_share") - 0.15) < 1e-9 &&
		      strstr(x->title, "OMP_WAIT_POLICY=passive"),
	      "passive: %s", x ? x->title : "(none)");
	lp_findings_clear(&o);

	f.in.openmp = false;
	lp_findings_eval(&f.in, &o);
	CHECK(!fired(&o, LP_RULE_OMP_WAIT_POLICY), "no OpenMP runtime, no OpenMP finding");
	lp_findings_clear(&o);

	f.in.openmp = true;
	f.ctx.omp_wait_policy[0] = '\0';
	lp_findings_eval(&f.in, &o);
	CHECK(!fired(&o, LP_RULE_OMP_WAIT_POLICY), "the default policy on free CPUs is fine");
	lp_findings_clear(&o);

	strcpy(f.ctx.gomp_spincount, "0");
	lp_findings_eval(&f.in, &o);
	CHECK(fired(&o, LP_RULE_OMP_WAIT_POLICY), "GOMP_SPINCOUNT=0 is passive too");
	lp_findings_clear(&o);

	/* Active with more threads than CPUs: critical. */
	clean(&f);
	f.in.openmp = true;
	strcpy(f.ctx.omp_wait_policy, "active");
	f.ctx.ncpus = 1;
	f.th[0].oncpu_ns = f.th[1].oncpu_ns = 5 * S;
	f.th[0].runq_ns = f.th[1].runq_ns = 5 * S;
	f.in.runq_ns = 10 * S;
	f.ctr[LP_C_ONCPU_NS] = 10 * S;
	lp_findings_eval(&f.in, &o);
	x = fired(&o, LP_RULE_OMP_WAIT_POLICY);
	CHECK(x && x->severity == LP_SEV_CRITICAL && fired(&o, LP_RULE_OVERSUBSCRIBED),
	      "active and oversubscribed: %s", x ? x->title : "(none)");
	lp_findings_clear(&o);

	f.ctx.env_read = false;
	lp_findings_eval(&f.in, &o);
	CHECK(o.not_evaluated[LP_RULE_OMP_WAIT_POLICY] && !fired(&o, LP_RULE_OMP_WAIT_POLICY),
	      "an unreadable environment is said, not guessed");
	lp_findings_clear(&o);
}

static void test_weights(void)
{
	const struct lp_finding *x;
	struct lp_findings o;
	struct fx f;

	clean(&f);
	f.ctx.weights_bytes = 1 << 30;
	f.ctx.weights_rss = 1 << 29;
	f.ctr[LP_C_FAULTS_MAJ] = 100;
	lp_findings_eval(&f.in, &o);
	x = fired(&o, LP_RULE_WEIGHTS_NOT_RESIDENT);
	CHECK(x && x->severity == LP_SEV_WARNING && ev(x, "major_faults_per_s") == 10 &&
		      ev(x, "major_faults_per_token") == 0.5 &&
		      ev(x, "weights_resident_share") == 0.5,
	      "100 major faults in 200 tokens: %s", x ? x->title : "(none)");
	lp_findings_clear(&o);
	f.ctr[LP_C_FAULTS_MAJ] = 400;
	lp_findings_eval(&f.in, &o);
	x = fired(&o, LP_RULE_WEIGHTS_NOT_RESIDENT);
	CHECK(x && x->severity == LP_SEV_CRITICAL, "2 per token is critical");
	lp_findings_clear(&o);
	f.ctr[LP_C_FAULTS_MAJ] = 15;
	lp_findings_eval(&f.in, &o);
	CHECK(!fired(&o, LP_RULE_WEIGHTS_NOT_RESIDENT), "15 faults are a library read once");
	lp_findings_clear(&o);
	f.ctr[LP_C_FAULTS_MAJ] = 400;
	f.ctr[LP_C_DECODE_GEN_CALLS] = 0;
	lp_findings_eval(&f.in, &o);
	CHECK(!fired(&o, LP_RULE_WEIGHTS_NOT_RESIDENT), "faults while loading, no generation");
	lp_findings_clear(&o);
}

static void test_numa_and_frequency(void)
{
	const struct lp_finding *x;
	struct lp_findings o;
	struct fx f;

	/* Two nodes; both threads on node 0; 90 % of the weights on node 1. */
	clean(&f);
	f.host->nnodes = 2;
	f.host->node[0] = 0;
	f.host->node[1] = 0;
	f.host->node[2] = 1;
	f.host->node[3] = 1;
	f.ctx.weights_node_pages[0] = 100;
	f.ctx.weights_node_pages[1] = 900;
	lp_findings_eval(&f.in, &o);
	x = fired(&o, LP_RULE_NUMA);
	CHECK(x && !strcmp(ev_str(x, "thread_nodes"), "0") && ev(x, "remote_share") == 0.9,
	      "weights on the other node: %s", x ? x->title : "(none)");
	lp_findings_clear(&o);
	f.ctx.weights_node_pages[0] = 900;
	f.ctx.weights_node_pages[1] = 100;
	lp_findings_eval(&f.in, &o);
	CHECK(!fired(&o, LP_RULE_NUMA), "weights local to the threads");
	lp_findings_clear(&o);

	/* powersave under acpi-cpufreq holds the lowest frequency; under intel_pstate it is
	 * the dynamic policy. */
	clean(&f);
	for (int c = 0; c < 2; c++) {
		f.host->freq[c] = true;
		strcpy(f.host->governor[c], "powersave");
	}
	strcpy(f.host->driver, "acpi-cpufreq");
	lp_findings_eval(&f.in, &o);
	x = fired(&o, LP_RULE_CPU_FREQUENCY);
	CHECK(x && ev(x, "cpus_powersave") == 2, "powersave: %s", x ? x->title : "(none)");
	lp_findings_clear(&o);
	strcpy(f.host->driver, "intel_pstate");
	lp_findings_eval(&f.in, &o);
	CHECK(!fired(&o, LP_RULE_CPU_FREQUENCY), "intel_pstate's powersave is dynamic");
	lp_findings_clear(&o);
	f.host->max_khz[1] = 2000000;
	f.host->cpuinfo_max_khz[1] = 3500000;
	lp_findings_eval(&f.in, &o);
	x = fired(&o, LP_RULE_CPU_FREQUENCY);
	CHECK(x && ev(x, "cpus_capped") == 1 && ev(x, "scaling_max_khz") == 2000000,
	      "a capped maximum: %s", x ? x->title : "(none)");
	lp_findings_clear(&o);
	f.host->max_khz[1] = 0;
	strcpy(f.host->epp[0], "power");
	lp_findings_eval(&f.in, &o);
	CHECK(fired(&o, LP_RULE_CPU_FREQUENCY), "an energy preference for power");
	lp_findings_clear(&o);
}

static void test_memory_bound(void)
{
	const struct lp_finding *x;
	struct lp_findings o;
	struct fx f;

	/* 1 GB read per token at 20 tokens/s: 20 GB/s of a measured 25. */
	clean(&f);
	f.ctx.weights_bytes = 1200000000;
	f.ctx.weights_per_token = 1000000000;
	f.in.membw = 25e9;
	lp_findings_eval(&f.in, &o);
	x = fired(&o, LP_RULE_MEMORY_BOUND);
	CHECK(x && x->severity == LP_SEV_INFO && ev(x, "fraction") == 0.8 &&
		      ev(x, "stream_bytes_per_s") == 20e9 && strstr(x->title, "memory-bound"),
	      "memory-bound: %s", x ? x->title : "(none)");
	CHECK(o.stream_bytes_per_s == 20e9 && o.per_token_bytes == 1000000000,
	      "the answer is there for every process");
	lp_findings_clear(&o);
	f.in.membw = 50e9;
	lp_findings_eval(&f.in, &o);
	CHECK(!fired(&o, LP_RULE_MEMORY_BOUND) && o.stream_bytes_per_s == 20e9,
	      "40 %% of the peak is not memory-bound, and says so by its numbers");
	lp_findings_clear(&o);
	f.in.membw = 0;
	f.in.membw_why = "measured while other work ran";
	lp_findings_eval(&f.in, &o);
	CHECK(o.not_evaluated[LP_RULE_MEMORY_BOUND] &&
		      strstr(o.not_evaluated[LP_RULE_MEMORY_BOUND], "other work"),
	      "a bandwidth measured under load is not used");
	lp_findings_clear(&o);
	/* Without a header, the whole mapping counts. */
	f.in.membw = 25e9;
	f.ctx.weights_per_token = 0;
	lp_findings_eval(&f.in, &o);
	CHECK(o.per_token_bytes == 1200000000, "no header: the mapping's size");
	lp_findings_clear(&o);
	/* The weights a token reads fit in the caches of its CPUs: not judged, and said why;
	 * a byte more and they stream from memory. */
	f.in.membw = 25e9;
	f.ctx.weights_per_token = 1000000000;
	f.ctx.llc_bytes = 1000000000;
	f.ctx.nllc = 2;
	lp_findings_eval(&f.in, &o);
	CHECK(!fired(&o, LP_RULE_MEMORY_BOUND) && o.fits_llc &&
		      o.not_evaluated[LP_RULE_MEMORY_BOUND] &&
		      strstr(o.not_evaluated[LP_RULE_MEMORY_BOUND],
			     "fit in the last-level caches") &&
		      strstr(o.not_evaluated[LP_RULE_MEMORY_BOUND], "953.7 MiB in 2"),
	      "weights in the caches: %s", o.not_evaluated[LP_RULE_MEMORY_BOUND]);
	lp_findings_clear(&o);
	f.ctx.llc_bytes = 999999999;
	lp_findings_eval(&f.in, &o);
	CHECK(fired(&o, LP_RULE_MEMORY_BOUND) && !o.fits_llc, "a byte over the caches: judged");
	lp_findings_clear(&o);
}

/* Each op's rate against the host's: 20 GB over 1 s of 25 GB/s is memory-bound, 1 GB over
 * 1 s not; an op with no bytes known has no rate. */
static void test_op_roofline(void)
{
	struct lp_find_op ops[3] = {
		{.op = "flash_attn_ext", .bytes = 1e9, .busy_ns = 1e9, .oncpu_ns = 2e9},
		{.op = "mul_mat", .bytes = 20e9, .busy_ns = 1e9, .oncpu_ns = 6e9},
		{.op = "set_rows", .oncpu_ns = 2e9},
	};
	const cJSON *a, *e;
	struct lp_findings o;
	struct fx f;
	cJSON *doc;

	clean(&f);
	f.in.ops = ops;
	f.in.nops = 3;
	f.in.membw = 25e9;
	lp_findings_eval(&f.in, &o);
	doc = lp_findings_render(&o);
	a = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(doc, "op_roofline"),
					     "ops");
	e = cJSON_GetArrayItem(a, 0);
	CHECK(cJSON_GetArraySize(a) == 3 &&
		      !strcmp(cJSON_GetObjectItemCaseSensitive(e, "op")->valuestring, "mul_mat") &&
		      cJSON_GetObjectItemCaseSensitive(e, "cpu_share")->valuedouble == 0.6 &&
		      cJSON_GetObjectItemCaseSensitive(e, "fraction")->valuedouble == 0.8 &&
		      cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(e, "memory_bound")),
	      "mul_mat first, at 80 %% of the peak: memory-bound");
	e = cJSON_GetArrayItem(a, 1);
	CHECK(cJSON_GetObjectItemCaseSensitive(e, "fraction")->valuedouble == 0.04 &&
		      cJSON_IsFalse(cJSON_GetObjectItemCaseSensitive(e, "memory_bound")),
	      "flash attention at 4 %%: not");
	e = cJSON_GetArrayItem(a, 2);
	CHECK(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(e, "bytes_per_s")) &&
		      cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(e, "memory_bound")),
	      "no bytes, no rate");
	cJSON_Delete(doc);
	lp_findings_clear(&o);
	f.in.membw = 0;
	lp_findings_eval(&f.in, &o);
	doc = lp_findings_render(&o);
	e = cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(
				       cJSON_GetObjectItemCaseSensitive(doc, "op_roofline"), "ops"),
			       0);
	CHECK(cJSON_GetObjectItemCaseSensitive(e, "bytes_per_s")->valuedouble == 20e9 &&
		      cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(e, "fraction")),
	      "the host's figure not known: the rate alone");
	cJSON_Delete(doc);
	lp_findings_clear(&o);
}

static void test_exited(void)
{
	struct lp_findings o;
	struct fx f;
	cJSON *doc;

	clean(&f);
	f.in.ctx = NULL;
	f.in.host = NULL;
	f.in.threads = NULL;
	f.ctr[LP_C_FAULTS_MAJ] = 400;
	lp_findings_eval(&f.in, &o);
	CHECK(o.not_evaluated[LP_RULE_OVERSUBSCRIBED] && o.not_evaluated[LP_RULE_LATE_THREAD] &&
		      o.not_evaluated[LP_RULE_NUMA] && !o.not_evaluated[LP_RULE_PREEMPTED] &&
		      fired(&o, LP_RULE_WEIGHTS_NOT_RESIDENT),
	      "an exited process: the rules that need /proc say so; its counts still judge");
	doc = lp_findings_render(&o);
	CHECK(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(doc, "findings")) == 1 &&
		      cJSON_IsObject(cJSON_GetObjectItemCaseSensitive(doc, "not_evaluated")) &&
		      cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(
			      cJSON_GetObjectItemCaseSensitive(doc, "bandwidth"),
			      "peak_bytes_per_s")),
	      "rendered");
	cJSON_Delete(doc);
	lp_findings_clear(&o);
}

/* A rule near its threshold: fired, then not, then again. It stays as recent for
 * LP_FINDINGS_RECENT_NS after the last evaluation it fired in, with its severity in the
 * worst, and never beside itself in the findings. */
static void test_recent(void)
{
	struct lp_recent_finding held[LP_RULE_NR] = {0};
	struct lp_findings o;
	struct fx f;
	uint64_t t0 = 1000 * S;

	clean(&f);
	threads(&f, 4, 5 * S, 4 * S);
	f.ctr[LP_C_ONCPU_NS] = 20 * S;
	f.in.runq_ns = 16 * S;
	lp_findings_eval(&f.in, &o);
	lp_findings_hold(&o, held, t0);
	CHECK(fired(&o, LP_RULE_OVERSUBSCRIBED) && o.nrecent == 0,
	      "fired: a finding, nothing recent (%zu)", o.nrecent);
	lp_findings_clear(&o);

	f.in.runq_ns = S; /* 5 %: below the threshold */
	lp_findings_eval(&f.in, &o);
	lp_findings_hold(&o, held, t0 + 4 * S);
	CHECK(!fired(&o, LP_RULE_OVERSUBSCRIBED) && o.nrecent == 1 &&
		      o.recent[0].rule == LP_RULE_OVERSUBSCRIBED &&
		      o.recent[0].severity == LP_SEV_CRITICAL && o.recent[0].at_ns == t0 &&
		      strstr(o.recent[0].title, "compute threads") &&
		      lp_findings_worst(&o) == LP_SEV_CRITICAL,
	      "4 s later, below the threshold: recent, critical, the worst (%zu, %d)", o.nrecent,
	      lp_findings_worst(&o));
	lp_findings_clear(&o);

	f.in.runq_ns = 16 * S; /* fires again: the finding, not the recent one */
	lp_findings_eval(&f.in, &o);
	lp_findings_hold(&o, held, t0 + 8 * S);
	CHECK(fired(&o, LP_RULE_OVERSUBSCRIBED) && o.nrecent == 0,
	      "firing again: a finding only (%zu recent)", o.nrecent);
	lp_findings_clear(&o);

	f.in.runq_ns = S;
	lp_findings_eval(&f.in, &o);
	lp_findings_hold(&o, held, t0 + 8 * S + LP_FINDINGS_RECENT_NS - 1);
	CHECK(o.nrecent == 1, "recent until %llu ns after it last fired",
	      (unsigned long long)LP_FINDINGS_RECENT_NS);
	lp_findings_clear(&o);
	lp_findings_eval(&f.in, &o);
	lp_findings_hold(&o, held, t0 + 8 * S + LP_FINDINGS_RECENT_NS);
	CHECK(o.nrecent == 0 && lp_findings_worst(&o) == -1,
	      "and then gone: nothing recent, no worst (%zu, %d)", o.nrecent,
	      lp_findings_worst(&o));
	lp_findings_clear(&o);
}

/* Two slots of a server: sequence 0 generates 100 tokens a decode of 10 ms each; sequence
 * 1's prompts (60 ms decodes, tokens without logits) join k of those decodes. */
static void serve(struct lp_requests *rq, int k)
{
	uint64_t t = 0;

	lp_requests_clear(rq);
	for (int r = 0; r < 2; r++) {
		struct lp_ev_decode e = {
			.type = LP_EV_DECODE, .begin_ns = t, .end_ns = t + 50000000, .nseq = 1};

		/* A request of sequence 0: its prompt, then 100 tokens. */
		e.seq[0] = (struct lp_batch_seq){0, 20, 1, 0, 19};
		lp_requests_decode(rq, &e);
		t = e.end_ns + 1000;
		for (int i = 0; i < 100; i++) {
			bool joined = i < k;

			e = (struct lp_ev_decode){.type = LP_EV_DECODE,
						  .begin_ns = t,
						  .end_ns = t + (joined ? 60 : 10) * 1000000ULL,
						  .nseq = joined ? 2 : 1};
			e.seq[0] = (struct lp_batch_seq){0, 1, 1, 20 + i, 20 + i};
			if (joined)
				e.seq[1] = (struct lp_batch_seq){1, 300, 1, 0, 299};
			lp_requests_decode(rq, &e);
			t = e.end_ns + 1000;
		}
		/* ... and its next prompt starts the next request of sequence 0. */
	}
	lp_requests_settle(rq, t + LP_REQ_IDLE_NS, false);
}

static void test_batch_interference(void)
{
	static struct lp_requests rq;
	const struct lp_finding *x;
	struct lp_findings o;
	struct fx f;

	clean(&f);
	f.in.requests = &rq;
	serve(&rq, 10); /* 600 ms of 1,500 in each request of sequence 0 */
	lp_findings_eval(&f.in, &o);
	x = fired(&o, LP_RULE_BATCH_INTERFERENCE);
	CHECK(x && x->severity == LP_SEV_WARNING && fabs(ev(x, "interfered_share") - 0.4) < 1e-9,
	      "10 prompts in 100 decodes of 10 ms, at 60 ms each: %s", x ? x->title : "(none)");
	lp_findings_clear(&o);
	/* Exited: the rule needs only its requests, so it is judged, and fires once. */
	f.in.ctx = NULL;
	f.in.host = NULL;
	f.in.threads = NULL;
	lp_findings_eval(&f.in, &o);
	CHECK(fired(&o, LP_RULE_BATCH_INTERFERENCE) &&
		      !o.not_evaluated[LP_RULE_BATCH_INTERFERENCE] && o.not_evaluated[LP_RULE_SMT],
	      "an exited process's requests are judged, and the rule is not also not evaluated");
	lp_findings_clear(&o);
	clean(&f);
	f.in.requests = &rq;
	serve(&rq, 3); /* 180 ms of 1,150: 0.157 */
	lp_findings_eval(&f.in, &o);
	CHECK(!fired(&o, LP_RULE_BATCH_INTERFERENCE), "3 prompts: under a quarter of the time");
	lp_findings_clear(&o);
	serve(&rq, 10);
	f.in.since_ns = UINT64_MAX;
	lp_findings_eval(&f.in, &o);
	CHECK(!fired(&o, LP_RULE_BATCH_INTERFERENCE), "requests before the window are not judged");
	lp_findings_clear(&o);
	lp_requests_clear(&rq);
}

/* Two prompts of 300 tokens: in one decode of 600 ms (shared), or one after the other. */
static void prompts(struct lp_requests *rq, bool shared)
{
	struct lp_ev_decode e = {.type = LP_EV_DECODE, .begin_ns = 0, .end_ns = 600000000};

	lp_requests_clear(rq);
	if (shared) {
		e.nseq = 2;
		e.seq[0] = (struct lp_batch_seq){0, 300, 1, 0, 299};
		e.seq[1] = (struct lp_batch_seq){1, 300, 1, 0, 299};
		lp_requests_decode(rq, &e);
	} else {
		for (int32_t s = 0; s < 2; s++) {
			e.nseq = 1;
			e.seq[0] = (struct lp_batch_seq){s, 300, 1, 0, 299};
			lp_requests_decode(rq, &e);
			e.begin_ns = e.end_ns + 1000;
			e.end_ns = e.begin_ns + 600000000;
		}
	}
	lp_requests_settle(rq, 10ULL * S, true);
}

static void test_prefill_contention(void)
{
	static struct lp_requests rq;
	const struct lp_finding *x;
	struct lp_findings o;
	struct fx f;

	clean(&f);
	f.in.requests = &rq;
	prompts(&rq, true);
	lp_findings_eval(&f.in, &o);
	x = fired(&o, LP_RULE_PREFILL_CONTENTION);
	CHECK(x && fabs(ev(x, "peer_prompt_share") - 0.5) < 1e-9 && ev(x, "requests") == 2,
	      "two prompts in one decode: half the tokens each waited for were the other's: %s",
	      x ? x->title : "(none)");
	lp_findings_clear(&o);
	prompts(&rq, false);
	lp_findings_eval(&f.in, &o);
	CHECK(!fired(&o, LP_RULE_PREFILL_CONTENTION), "one after the other: nothing shared");
	lp_findings_clear(&o);
	lp_requests_clear(&rq);
}

/* The README's and docs/API.md's rule tables list every rule of LP_RULES, and no other;
 * wherever the docs count the rules, the count is theirs. */
static void test_docs(const char *root)
{
	static const char *const files[] = {"README.md", "docs/API.md", "daemon/report/README.md"};
	static const char *const words[] = {"zero",    "one",	 "two",	   "three",    "four",
					    "five",    "six",	 "seven",  "eight",    "nine",
					    "ten",     "eleven", "twelve", "thirteen", "fourteen",
					    "fifteen", "sixteen"};
	char path[4096], line[8192], name[64], want[32];

	for (size_t k = 0; k < sizeof(files) / sizeof(*files); k++) {
		bool listed[LP_RULE_NR] = {false};
		FILE *f;

		snprintf(path, sizeof(path), "%s/%s", root, files[k]);
		f = fopen(path, "r");
		CHECK(f, "%s opens", path);
		while (f && fgets(line, sizeof(line), f)) {
			char *p;

			if (sscanf(line, "| `%63[a-z_]`", name) == 1)
				for (int r = 0; r < LP_RULE_NR; r++)
					listed[r] |= !strcmp(name, lp_rule_names[r]);
			for (p = line; (p = strstr(p, " rules")); p++) {
				char *w = p;

				while (w > line && w[-1] != ' ')
					w--;
				snprintf(name, sizeof(name), "%.*s", (int)(p - w), w);
				for (size_t i = 0; i < sizeof(words) / sizeof(*words); i++)
					if (!strcasecmp(name, words[i]) ||
					    (name[0] &&
					     strspn(name, "0123456789") == strlen(name) &&
					     atoi(name) == (int)i)) {
						snprintf(want, sizeof(want), "%s",
							 words[LP_RULE_NR]);
						CHECK((int)i == LP_RULE_NR,
						      "%s counts %s rules; there are %s (%d)",
						      files[k], name, want, LP_RULE_NR);
						break;
					}
			}
		}
		if (f)
			fclose(f);
		if (k == 2)
			continue; /* the room's README counts them only */
		for (int r = 0; r < LP_RULE_NR; r++)
			CHECK(listed[r], "%s's table lists the rule %s", files[k],
			      lp_rule_names[r]);
	}
}

/* torch's rules: a torch process like the clean one (two compute threads on two CPUs, its
 * GEMMs in OpenBLAS's OpenMP build), each rule on figures made to provoke it and one step
 * short of them; a ggml process with the same figures fires none of them. */
static void torch(struct fx *f)
{
	clean(f);
	f->in.torch = (struct lp_find_torch){.torch = true,
					     .blas = LP_BLAS_OPENBLAS,
					     .blas_path = "/usr/lib/libopenblasp.so",
					     .omp = {"/usr/lib/libgomp.so.1"},
					     .nomp = 1,
					     .gen_samples = 1000,
					     .gen_outside = 100,
					     .blas_share = 0.6,
					     .host_spare_cpus = 0.1};
	f->ctr[LP_C_SAMPLES_MATMUL] = 600;
}

static void test_torch(void)
{
	const struct lp_finding *x;
	struct lp_findings o;
	struct fx f;

	torch(&f);
	lp_findings_eval(&f.in, &o);
	CHECK(o.n == 0, "a clean torch process fires nothing: %zu (%s)", o.n,
	      o.n ? lp_rule_names[o.f[0].rule] : "");
	lp_findings_clear(&o);

	/* One of its two threads computes, the other CPU idles. */
	torch(&f);
	threads(&f, 1, 95 * S / 10, S / 100);
	f.in.torch.host_spare_cpus = 0.9;
	f.ctr[LP_C_ONCPU_NS] = 95 * S / 10;
	lp_findings_eval(&f.in, &o);
	x = fired(&o, LP_RULE_INTRA_OP_THREADS);
	CHECK(x && ev(x, "compute_threads") == 1 && ev(x, "cpus_allowed") == 2 &&
		      strstr(x->action, "set_num_threads(2)"),
	      "intra_op_threads: %s / %s", x ? x->title : "(none)", x ? x->action : "");
	lp_findings_clear(&o);
	f.in.torch.host_spare_cpus = 0.4;
	lp_findings_eval(&f.in, &o);
	CHECK(!fired(&o, LP_RULE_INTRA_OP_THREADS), "not while the other CPU is busy");
	lp_findings_clear(&o);
	f.in.torch.host_spare_cpus = -1;
	lp_findings_eval(&f.in, &o);
	CHECK(!fired(&o, LP_RULE_INTRA_OP_THREADS) && o.not_evaluated[LP_RULE_INTRA_OP_THREADS],
	      "nor where the host's CPU time is not known, and says so");
	lp_findings_clear(&o);

	torch(&f);
	f.in.torch.blas = LP_BLAS_REFERENCE;
	f.in.torch.blas_path = "/usr/lib/blas/libblas.so.3";
	lp_findings_eval(&f.in, &o);
	x = fired(&o, LP_RULE_REFERENCE_BLAS);
	CHECK(x && ev(x, "matmul_share") == 0.6 &&
		      !strcmp(ev_str(x, "blas"), "/usr/lib/blas/libblas.so.3"),
	      "reference_blas: %s", x ? x->title : "(none)");
	lp_findings_clear(&o);
	f.in.torch.blas_share = 0.09;
	lp_findings_eval(&f.in, &o);
	CHECK(!fired(&o, LP_RULE_REFERENCE_BLAS), "not with 9 %% of its samples in it");
	lp_findings_clear(&o);

	torch(&f);
	f.in.torch.omp[1] = "/usr/lib/libomp.so.5";
	f.in.torch.nomp = 2;
	lp_findings_eval(&f.in, &o);
	x = fired(&o, LP_RULE_THREAD_POOLS);
	CHECK(x && strstr(x->title, "libomp.so.5"), "thread_pools: two runtimes: %s",
	      x ? x->title : "(none)");
	lp_findings_clear(&o);
	torch(&f);
	f.in.torch.blas_own_pool = true;
	lp_findings_eval(&f.in, &o);
	x = fired(&o, LP_RULE_THREAD_POOLS);
	CHECK(x && strstr(x->title, "own thread pool"), "thread_pools: OpenBLAS's own pool: %s",
	      x ? x->title : "(none)");
	lp_findings_clear(&o);

	torch(&f);
	f.in.torch.gen_outside = 400;
	lp_findings_eval(&f.in, &o);
	x = fired(&o, LP_RULE_INTERPRETER_BOUND);
	CHECK(x && x->severity == LP_SEV_WARNING && ev(x, "outside_share") == 0.4,
	      "interpreter_bound: %s", x ? x->title : "(none)");
	lp_findings_clear(&o);
	f.in.torch.gen_outside = 300;
	lp_findings_eval(&f.in, &o);
	CHECK(!fired(&o, LP_RULE_INTERPRETER_BOUND), "not with 30 %% outside ops");
	lp_findings_clear(&o);
	f.in.torch.gen_samples = 50;
	f.in.torch.gen_outside = 40;
	lp_findings_eval(&f.in, &o);
	CHECK(!fired(&o, LP_RULE_INTERPRETER_BOUND), "nor from 50 samples");
	lp_findings_clear(&o);

	/* The same figures of a ggml process: none of them, and not listed as not evaluated. */
	torch(&f);
	f.in.torch.torch = false;
	f.in.torch.blas = LP_BLAS_REFERENCE;
	f.in.torch.gen_outside = 900;
	threads(&f, 1, 95 * S / 10, S / 100);
	f.in.torch.host_spare_cpus = 0.9;
	lp_findings_eval(&f.in, &o);
	CHECK(!fired(&o, LP_RULE_REFERENCE_BLAS) && !fired(&o, LP_RULE_INTERPRETER_BOUND) &&
		      !fired(&o, LP_RULE_INTRA_OP_THREADS) &&
		      !o.not_evaluated[LP_RULE_INTRA_OP_THREADS],
	      "torch's rules judge torch processes only");
	lp_findings_clear(&o);
}

int main(int argc, char **argv)
{
	test_clean();
	test_torch();
	test_oversubscribed();
	test_preempted_and_late();
	test_smt();
	test_omp();
	test_weights();
	test_numa_and_frequency();
	test_memory_bound();
	test_op_roofline();
	test_exited();
	test_recent();
	test_batch_interference();
	test_prefill_contention();
	if (argc > 1)
		test_docs(argv[1]);
	return check_done();
}
