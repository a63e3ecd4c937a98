// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* Unit tests of the JSON report: what the tests and the client read must be what the
 * kernel maps held. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "base/hist.h"
#include "report/render.h"

static double getnum(const cJSON *o, const char *path)
{
	char buf[256], *save = NULL;
	const cJSON *cur = o;

	strcpy(buf, path);
	for (char *k = strtok_r(buf, ".", &save); k && cur; k = strtok_r(NULL, ".", &save))
		cur = cJSON_GetObjectItemCaseSensitive(cur, k);
	return cur && cJSON_IsNumber(cur) ? cur->valuedouble : -1;
}

int main(void)
{
	static struct lp_proc_view views[2];
	static struct lp_thread_view th[1];
	struct lp_target live = {.pid = 100,
				 .comm = "llama-cli",
				 .matched_by = "comm",
				 .tracked_since_ns = 1000000000ULL};
	struct lp_target dead = {.pid = 200,
				 .comm = "gone",
				 .matched_by = "pid",
				 .exited = true,
				 .exited_at_ns = 2000000000ULL,
				 .tracked_since_ns = 1000000000ULL};
	struct lp_features f = {.btf = true, .tp_btf = true};
	struct lp_report r = {.features = &f,
			      .sched_variant = "tp_btf",
			      .futex_source = "raw_syscalls",
			      .fault_cpus = 2,
			      .now_ns = 3000000000ULL,
			      .procs = views,
			      .nprocs = 2};
	const cJSON *procs, *p0, *p1, *hist, *buckets, *first, *top;
	struct lp_hist *h;
	cJSON *doc;
	char *text;

	live.exe = "/usr/bin/llama-cli";
	views[0].target = &live;
	views[0].live = true;
	views[0].stats.ctr[LP_C_NVCSW] = 7;
	views[0].stats.ctr[LP_C_FAULTS_MAJ] = 3;
	h = &views[0].stats.hist[LP_H_FUTEX];
	for (int i = 0; i < 10; i++) {
		h->buckets[lp_hist_index(5000000)]++;
		h->sum_ns += 5000000;
	}
	h->max_ns = 5000000;
	views[0].futex.naddrs = 1;
	views[0].futex.ntop = 1;
	views[0].futex.top[0].uaddr = 0x7f00deadbeef;
	views[0].futex.top[0].v.waits = 10;
	views[0].threads = th;
	views[0].nthreads = 1;
	th[0].tid = 101;
	strcpy(th[0].comm, "worker");
	th[0].t.runq_ns = 42;
	views[1].target = &dead;
	views[1].stats.exit_ns = 2000000000ULL;
	r.maps[0] = (struct lp_map_usage){
		.name = "procs", .max_entries = 256, .memlock = 100, .entries = 1};
	r.maps[1] = (struct lp_map_usage){.name = "threads", .max_entries = 9, .memlock = 23};
	r.nmaps = 2;
	r.drops[LP_D_EVENTS_LOST] = 5;
	r.procs_full = 2;

	doc = lp_render_report(&r);
	text = cJSON_PrintUnformatted(doc);
	cJSON_Delete(doc);
	/* Round-trip through text, as a reader would. */
	doc = cJSON_Parse(text);
	free(text);
	CHECK(doc != NULL, "output parses");
	procs = cJSON_GetObjectItem(doc, "processes");
	CHECK(cJSON_GetArraySize(procs) == 2, "two processes");
	p0 = cJSON_GetArrayItem(procs, 0);
	p1 = cJSON_GetArrayItem(procs, 1);
	CHECK(getnum(p0, "pid") == 100, "pid");
	CHECK(strcmp(cJSON_GetObjectItem(p0, "state")->valuestring, "running") == 0, "running");
	CHECK(strcmp(cJSON_GetObjectItem(p1, "state")->valuestring, "exited") == 0, "exited");
	CHECK(getnum(p0, "counters.voluntary_switches") == 7, "nvcsw");
	CHECK(getnum(p0, "counters.page_faults_major") == 3, "majflt");
	CHECK(getnum(p0, "counters.futex_waits") == 10, "futex waits from the histogram");
	CHECK(getnum(p0, "tracked_seconds") == 2.0, "live: tracked until now");
	CHECK(getnum(p1, "tracked_seconds") == 1.0, "exited: tracked until exit");
	hist = cJSON_GetObjectItem(cJSON_GetObjectItem(p0, "histograms"), "futex_wait");
	CHECK(getnum(hist, "count") == 10, "hist count");
	CHECK(getnum(hist, "p50") == (double)lp_hist_quantile(h, 0.5), "p50 as computed");
	CHECK(getnum(hist, "p99") >= 5000000 * (1 - LP_HIST_QUANTILE_REL_ERROR) &&
		      getnum(hist, "p99") <= 5000000,
	      "p99 near 5 ms: %f", getnum(hist, "p99"));
	buckets = cJSON_GetObjectItem(hist, "buckets");
	CHECK(cJSON_GetArraySize(buckets) == 1, "only non-empty buckets");
	first = cJSON_GetArrayItem(buckets, 0);
	CHECK(cJSON_GetArrayItem(first, 0)->valuedouble <= 5000000 &&
		      cJSON_GetArrayItem(first, 1)->valuedouble > 5000000 &&
		      cJSON_GetArrayItem(first, 2)->valuedouble == 10,
	      "bucket [lo, hi, count]");
	top = cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetObjectItem(p0, "futex"), "top"), 0);
	CHECK(strcmp(cJSON_GetObjectItem(top, "uaddr")->valuestring, "0x7f00deadbeef") == 0,
	      "futex address in hex");
	CHECK(getnum(cJSON_GetArrayItem(cJSON_GetObjectItem(p0, "threads"), 0), "runqueue_ns") ==
		      42,
	      "thread detail");
	CHECK(getnum(doc, "kernel_memory_bytes") == 123, "memory summed over maps");
	CHECK(getnum(doc, "lost.ring_buffer_full") == 5, "ring buffer losses visible");
	CHECK(getnum(doc, "lost.procs_map_full") == 2, "procs map losses visible");
	CHECK(strcmp(cJSON_GetObjectItem(cJSON_GetObjectItem(doc, "collectors"), "futex")
			     ->valuestring,
		     "raw_syscalls") == 0,
	      "collector shown");
	cJSON_Delete(doc);
	return check_done();
}
