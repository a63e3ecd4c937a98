/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* The report as JSON: the document printed by --once (and later served over the API).
 * Pure: builds a cJSON tree, does no I/O. */
#ifndef LLMPROF_RENDER_H
#define LLMPROF_RENDER_H

#include <cjson/cJSON.h>

#include "report/report.h"

/* Names of histograms and counters as they appear in the JSON document. */
extern const char *const lp_hist_names[LP_H_NR];
extern const char *const lp_counter_names[LP_C_NR];

cJSON *lp_render_report(const struct lp_report *r);

/* One process in full: the element of "processes" in the report. */
cJSON *lp_render_proc(const struct lp_report *r, const struct lp_proc_view *v);

/* One process in brief: identity and the figures a table of processes shows. */
cJSON *lp_render_summary(const struct lp_report *r, const struct lp_proc_view *v);

/* A process's findings, with the context they were judged in. */
cJSON *lp_render_findings(const struct lp_proc_view *v);
/* The process's identity and its findings: GET /v1/processes/{pid}/findings. */
cJSON *lp_render_proc_findings(const struct lp_report *r, const struct lp_proc_view *v);
/* GET /v1/processes/{pid}/requests: its requests (report/requests_doc.h) after its identity. */
cJSON *lp_render_proc_requests(const struct lp_report *r, const struct lp_proc_view *v);

/* Where precise mode is for a process, into x: "state" (off; attaching: its probes on
 * their way; on), "active" (attaching or on), "seconds_left" of a timed window (the whole
 * window while attaching; null when off or until switched off), and "attach_ms", how long
 * the last window's probes took to go on. now: CLOCK_MONOTONIC. */
void lp_render_precise_state(cJSON *x, const struct lp_eproc *gp, uint64_t now);

/* The kernel features by name, as the report, the status and /metrics list them. */
#define LP_FEATURE_FLAGS_MAX 16
struct lp_feature_flag {
	const char *name;
	bool on;
};
size_t lp_feature_flags(const struct lp_features *f, struct lp_feature_flag *out);
cJSON *lp_render_hist(const struct lp_hist *h);

#endif
