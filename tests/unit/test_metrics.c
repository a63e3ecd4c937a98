// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* Unit tests of the Prometheus exposition: exact cumulative buckets, label escaping, the
 * exported-process cap, and a HELP and TYPE line for every family that has samples. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "base/hist.h"
#include "serving/metrics.h"

/* The value of the first sample line that starts with prefix, or -1. */
static double sample(const char *text, const char *prefix)
{
	for (const char *p = text; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL)
		if (strncmp(p, prefix, strlen(prefix)) == 0)
			return strtod(strchr(p + strlen(prefix), ' ') + 1, NULL);
	return -1;
}

static int count_lines(const char *text, const char *needle)
{
	int n = 0;

	for (const char *p = text; (p = strstr(p, needle)); p++)
		n++;
	return n;
}

int main(void)
{
	static struct lp_proc_view views[3];
	struct lp_target a = {.pid = 10, .comm = "llama\"cli", .matched_by = "ggml"};
	struct lp_target b = {.pid = 20, .comm = "idle", .matched_by = "pid"};
	struct lp_target c = {.pid = 30,
			      .comm = "gone",
			      .matched_by = "pid",
			      .exited = true,
			      .exited_at_ns = 90000000000ULL};
	struct lp_report r = {
		.procs = views, .nprocs = 3, .sample_hz = 199, .now_ns = 100000000000ULL};
	/* c exited 10 s ago: its series stay for 120. */
	struct lp_metrics_opts o = {
		.max_processes = 2, .start_time = 1700000000, .exited_ns = 120000000000ULL};
	struct lp_hist *h = &views[0].stats.hist[LP_H_RUNQ];
	const __u64 values[] = {500, 1023, 1024, 1025, 2047, 5000, 70000000000ULL};
	const char *bucket =
		"llmprof_runqueue_latency_seconds_bucket{pid=\"10\",comm=\"llama\\\"cli\","
		"exe=\"/opt/llama\\\\\\\\bin/llama-cli\\\\x0ax\",le=\"";
	static const struct {
		const char *le;
		int count;
	} les[] = {{"1.024e-06", 2}, {"2.048e-06", 5}, {"68.719476736", 6}, {"+Inf", 7}};
	char *text, line[512];
	size_t len;

	a.exe = "/opt/llama\\bin/llama-cli\nx";
	for (struct lp_target *t = &a; t != &c; t = t == &a ? &b : &c) {
		strcpy(t->ident.unit, "llama.service");
		strcpy(t->ident.model, "/srv/q.gguf");
		strcpy(t->ident.model_type, "Q8_0");
		strcpy(t->ident.model_arch, "llama");
		strcpy(t->ident.cmdline, "llama -m q.gguf --api-key s3cr3t");
	}
	views[0].target = &a;
	views[1].target = &b;
	views[2].target = &c;
	views[0].stats.ctr[LP_C_ONCPU_NS] = 3000000000ULL;
	views[1].stats.ctr[LP_C_ONCPU_NS] = 1000;
	views[2].stats.ctr[LP_C_ONCPU_NS] = 9000000000ULL; /* busiest, but exited */
	for (size_t i = 0; i < sizeof(values) / sizeof(values[0]); i++) {
		h->buckets[lp_hist_index(values[i])]++;
		h->sum_ns += values[i];
	}
	views[0].stats.ctr[LP_C_SAMPLES] = 10;
	views[0].stats.ctr[LP_C_SAMPLES_MATMUL] = 6;
	views[0].stats.ctr[LP_C_SAMPLES_BARRIER] = 3;

	CHECK(lp_metrics_render(&r, &o, &text, &len) == 0 && len == strlen(text), "rendered");
	CHECK(strstr(text,
		     "comm=\"llama\\\"cli\",exe=\"/opt/llama\\\\\\\\bin/llama-cli\\\\x0ax\"") !=
		      NULL,
	      "quote, backslash and newline escaped in labels");
	/* le bounds at 2^k ns count the values below them exactly. */
	for (size_t i = 0; i < sizeof(les) / sizeof(les[0]); i++) {
		snprintf(line, sizeof(line), "%s%s\"}", bucket, les[i].le);
		CHECK(sample(text, line) == les[i].count, "le=%s: %d values", les[i].le,
		      les[i].count);
	}
	CHECK(sample(text, "llmprof_cpu_samples_total{pid=\"10\",comm=\"llama\\\"cli\",exe=\"/opt/"
			   "llama\\\\\\\\bin/llama-cli\\\\x0ax\",region=\"other\"}") == 1,
	      "samples outside matmul and barrier");
	CHECK(strstr(text, "pid=\"20\"") != NULL && strstr(text, "pid=\"30\"") == NULL,
	      "cap 2: running processes first, the exited one is left out");
	CHECK(sample(text, "llmprofd_processes_omitted") == 1, "the omitted one is counted");
	CHECK(sample(text, "llmprofd_processes{state=\"exited\"}") == 1,
	      "and still counted as there");
	CHECK(count_lines(text, "# TYPE llmprof_runqueue_latency_seconds histogram\n") == 1 &&
		      count_lines(text, "# HELP llmprof_context_switches_total ") == 1,
	      "one HELP and TYPE per family");
	CHECK(strstr(text, "llmprof_decode_prompt_seconds_bucket") == NULL,
	      "ggml histograms stay out until they count");
	/* Between powers of two, the kernel's bounds (8 per doubling) around buckets that
	 * counted: where a percentile falls, Prometheus interpolates in the API's bucket. */
	static const struct {
		const char *le;
		int count;
	} fine[] = {{"1.152e-06", 4}, {"1.92e-06", 4}, {"4.608e-06", 5}, {"5.12e-06", 6}};
	for (size_t i = 0; i < sizeof(fine) / sizeof(fine[0]); i++) {
		snprintf(line, sizeof(line), "%s%s\"}", bucket, fine[i].le);
		CHECK(sample(text, line) == fine[i].count, "fine le=%s: %d values", fine[i].le,
		      fine[i].count);
	}
	CHECK(count_lines(text, bucket) == 27 + 4 + 1, "27 powers of two, 4 fine bounds, +Inf: %d",
	      count_lines(text, bucket));
	CHECK(count_lines(
		      text,
		      "llmprof_process_info{pid=\"10\",comm=\"llama\\\"cli\","
		      "exe=\"/opt/llama\\\\\\\\bin/llama-cli\\\\x0ax\",workload=\"llama.service\","
		      "model=\"q.gguf\",model_type=\"Q8_0\",model_arch=\"llama\","
		      "unit=\"llama.service\",container=\"\",pod=\"\"} 1") == 1,
	      "process_info names its workload and model, not its command line");
	CHECK(sample(text, "llmprofd_sample_hertz") == 199, "sample rate in hertz");
	CHECK(!strstr(text, "s3cr3t"), "no secret in /metrics");
	free(text);
	o.cmdline = true;
	CHECK(lp_metrics_render(&r, &o, &text, &len) == 0, "rendered with command lines");
	CHECK(count_lines(text, "pod=\"\",cmdline=\"llama -m q.gguf --api-key <redacted>\"} 1") ==
		      2,
	      "--metrics-cmdline: the command line, its secret redacted");
	CHECK(!strstr(text, "s3cr3t"), "still no secret in /metrics");
	free(text);
	o.cmdline = false;

	/* Coarse: the powers of two only, the counts at them the same. */
	o.coarse = true;
	CHECK(lp_metrics_render(&r, &o, &text, &len) == 0, "rendered coarse");
	for (size_t i = 0; i < sizeof(les) / sizeof(les[0]); i++) {
		snprintf(line, sizeof(line), "%s%s\"}", bucket, les[i].le);
		CHECK(sample(text, line) == les[i].count, "coarse le=%s: %d values", les[i].le,
		      les[i].count);
	}
	CHECK(count_lines(text, bucket) == 27 + 1, "coarse: 27 powers of two and +Inf: %d",
	      count_lines(text, bucket));
	free(text);
	o.coarse = false;

	/* Once exited longer ago than the setting, a process leaves: not omitted, still there. */
	o.exited_ns = 5000000000ULL;
	o.max_processes = 3;
	CHECK(lp_metrics_render(&r, &o, &text, &len) == 0, "rendered after the exited linger");
	CHECK(strstr(text, "pid=\"30\"") == NULL && strstr(text, "pid=\"20\"") != NULL &&
		      sample(text, "llmprofd_processes_omitted") == 0 &&
		      sample(text, "llmprofd_processes{state=\"exited\"}") == 1,
	      "exited 10 s ago, linger 5 s: its series are gone, it is neither omitted nor "
	      "forgotten");
	free(text);
	o.exited_ns = 120000000000ULL;
	o.max_processes = 2;

	/* By workload: the two processes of llama.service with q.gguf sum into one series. */
	o.by_workload = true;
	views[1].stats.hist[LP_H_RUNQ].buckets[lp_hist_index(1025)] = 2;
	views[1].stats.ctr[LP_C_NVCSW] = 5;
	views[0].stats.ctr[LP_C_NVCSW] = 7;
	CHECK(lp_metrics_render(&r, &o, &text, &len) == 0, "rendered by workload");
	CHECK(sample(text, "llmprof_runqueue_latency_seconds_count{workload=\"llama.service\","
			   "model=\"q.gguf\"}") == 9 &&
		      sample(text, "llmprof_context_switches_total{workload=\"llama.service\","
				   "model=\"q.gguf\",kind=\"voluntary\"}") == 12 &&
		      sample(text, "llmprof_workload_processes{workload=\"llama.service\","
				   "model=\"q.gguf\"}") == 2,
	      "histograms and counters of a workload's processes add up");
	CHECK(strstr(text, "pid=") == NULL, "no pid label by workload");
	free(text);
	return check_done();
}
