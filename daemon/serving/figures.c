// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* The routes that read figures: the daemon's status and version, the list of processes
 * (with its filters), one process's document or findings, and /metrics. */
#include "serving/figures.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "escape.h"
#include "llmprof/protocol.h"
#include "serving/metrics.h"
#include "base/procfs.h"
#include "report/render.h"

#ifndef LLMPROF_VERSION
#define LLMPROF_VERSION "0"
#endif

void lp_api_get_status(const struct lp_api_backend *b, const struct lp_peer *p,
		       struct lp_api_response *res)
{
	struct lp_report r;
	size_t nprocs, running = 0, visible_n = 0;
	cJSON *doc, *o, *peer;
	int ret = b->report(b->ctx, 0, &r);

	if (ret < 0) {
		b->report_free(b->ctx, &r);
		lp_api_error(res, 500, LP_ERR_INTERNAL, "read the kernel maps: %s", strerror(-ret));
		return;
	}
	/* What an unprivileged peer is told counts its own processes only. */
	for (size_t i = 0; i < r.nprocs; i++) {
		bool v = lp_api_visible(p, r.procs[i].target);

		running += (p->privileged || v) && !r.procs[i].target->exited;
		visible_n += v;
	}
	nprocs = r.nprocs;
	r.nprocs = 0; /* the header only: the list is /v1/processes */
	doc = lp_render_report(&r);
	r.nprocs = nprocs;
	b->report_free(b->ctx, &r);
	if (!doc) {
		lp_api_error(res, 500, LP_ERR_INTERNAL, "out of memory");
		return;
	}
	cJSON_DeleteItemFromObject(doc, "processes");
	cJSON_AddNumberToObject(doc, "api", LP_API_VERSION);
	o = cJSON_AddObjectToObject(doc, "processes");
	cJSON_AddNumberToObject(o, "running", (double)running);
	cJSON_AddNumberToObject(o, "exited",
				(double)(p->privileged ? nprocs - running : visible_n - running));
	cJSON_AddNumberToObject(o, "visible", (double)visible_n);
	b->status(b->ctx, doc);
	if (!p->privileged) {
		cJSON *m;

		/* Map fill and probe counts grow with every user's processes and libraries. */
		cJSON_ArrayForEach(m, cJSON_GetObjectItemCaseSensitive(doc, "maps"))
			cJSON_DeleteItemFromObjectCaseSensitive(m, "entries");
		cJSON_DeleteItemFromObjectCaseSensitive(doc, "probes");
		/* and name other users' files */
		cJSON_DeleteItemFromObjectCaseSensitive(doc, "pending");
		m = cJSON_GetObjectItemCaseSensitive(doc, "unwind");
		cJSON_DeleteItemFromObjectCaseSensitive(m, "rows_used");
		cJSON_DeleteItemFromObjectCaseSensitive(m, "objects");
		cJSON_DeleteItemFromObjectCaseSensitive(m, "bytes");
	}
	peer = cJSON_AddObjectToObject(doc, "peer");
	cJSON_AddNumberToObject(peer, "uid", p->uid);
	cJSON_AddBoolToObject(peer, "privileged", p->privileged);
	lp_api_respond_json(res, 200, doc);
}

/* What GET /v1/processes?... selects: every given key must match (pid and state may
 * repeat: any of them). */
#define LP_FILTER_MAX 16

struct proc_filter {
	pid_t pid[LP_FILTER_MAX];
	size_t npid;
	const char *state, *comm, *model, *workload;
	char buf[LP_MAX_HEADERS_BYTES + 1]; /* the decoded values: any query that fits */
};

static int parse_filter(const char *query, struct proc_filter *f, struct lp_api_response *res)
{
	char *save = NULL, *kv;

	memset(f, 0, sizeof(*f));
	if (strlen(query) >= sizeof(f->buf)) {
		lp_api_error(res, 400, LP_ERR_BAD_REQUEST, "the query is longer than %zu bytes",
			     sizeof(f->buf) - 1);
		return -1;
	}
	strcpy(f->buf, query);
	for (kv = strtok_r(f->buf, "&", &save); kv; kv = strtok_r(NULL, "&", &save)) {
		char *v = strchr(kv, '=');

		if (!v || !lp_api_url_decode(v + 1)) {
			lp_api_error(res, 400, LP_ERR_BAD_REQUEST,
				     "the query wants key=value pairs (pid=N, state=running or "
				     "exited, comm=, model=, workload=)");
			return -1;
		}
		*v++ = '\0';
		if (!strcmp(kv, "pid")) {
			if (f->npid == LP_FILTER_MAX || lp_parse_pid(v, &f->pid[f->npid]) < 0) {
				lp_api_error(res, 400, LP_ERR_BAD_REQUEST,
					     "pid= wants a process id (at most %d of them)",
					     LP_FILTER_MAX);
				return -1;
			}
			f->npid++;
		} else if (!strcmp(kv, "state")) {
			if (strcmp(v, "running") && strcmp(v, "exited")) {
				lp_api_error(res, 400, LP_ERR_BAD_REQUEST,
					     "state= wants running or exited");
				return -1;
			}
			f->state = v;
		} else if (!strcmp(kv, "comm")) {
			f->comm = v;
		} else if (!strcmp(kv, "model")) {
			f->model = v;
		} else if (!strcmp(kv, "workload")) {
			f->workload = v;
		} else {
			lp_api_error(res, 400, LP_ERR_BAD_REQUEST,
				     "unknown query parameter '%.32s'; %s takes pid=N, "
				     "state=running|exited, comm=NAME, model=FILE, workload=NAME",
				     kv, LP_ROUTE_PROCESSES);
			return -1;
		}
	}
	return 0;
}

static bool text_is(const cJSON *o, const char *key, const char *want)
{
	const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);

	return !want || (cJSON_IsString(x) && !strcmp(x->valuestring, want));
}

static bool selected(const struct proc_filter *f, const cJSON *s)
{
	const cJSON *model = cJSON_GetObjectItemCaseSensitive(s, "model");
	pid_t pid = (pid_t)cJSON_GetNumberValue(cJSON_GetObjectItemCaseSensitive(s, "pid"));
	bool any = !f->npid;

	for (size_t i = 0; i < f->npid; i++)
		any |= f->pid[i] == pid;
	return any && text_is(s, "state", f->state) && text_is(s, "comm", f->comm) &&
	       text_is(s, "workload", f->workload) &&
	       (!f->model || text_is(model, "name", f->model) || text_is(model, "path", f->model));
}

/* What a client checks first: which API this daemon speaks. Cheap, and open to anyone who
 * may connect (as Docker's /_ping and /version). */
void lp_api_get_version(struct lp_api_response *res)
{
	cJSON *doc = cJSON_CreateObject();

	cJSON_AddNumberToObject(doc, "api", LP_API_VERSION);
	cJSON_AddNumberToObject(doc, "min_api", LP_API_MIN_VERSION);
	cJSON_AddStringToObject(doc, "version", LLMPROF_VERSION);
	cJSON_AddNumberToObject(doc, "abi", LP_ABI_VERSION);
	cJSON_AddNumberToObject(doc, "report_format", LP_REPORT_FORMAT);
	lp_api_respond_json(res, 200, doc);
}

void lp_api_get_processes(const struct lp_api_backend *b, const struct lp_peer *p,
			  const char *query, struct lp_api_response *res)
{
	struct proc_filter f;
	struct lp_report r;
	cJSON *doc, *a;
	size_t all;
	int ret;

	if (query && parse_filter(query, &f, res) < 0)
		return;
	if (!query)
		memset(&f, 0, sizeof(f));
	ret = b->report(b->ctx, 0, &r);

	if (ret < 0) {
		b->report_free(b->ctx, &r);
		lp_api_error(res, 500, LP_ERR_INTERNAL, "read the kernel maps: %s", strerror(-ret));
		return;
	}
	all = lp_api_filter_visible(&r, p);
	doc = cJSON_CreateObject();
	cJSON_AddNumberToObject(doc, "api", LP_API_VERSION);
	cJSON_AddNumberToObject(doc, "now_ns", (double)r.now_ns);
	cJSON_AddNumberToObject(doc, "sample_hz", r.sample_hz);
	a = cJSON_AddArrayToObject(doc, "processes");
	for (size_t i = 0; i < r.nprocs; i++) {
		cJSON *s = lp_render_summary(&r, &r.procs[i]);

		if (s && selected(&f, s))
			cJSON_AddItemToArray(a, s);
		else
			cJSON_Delete(s);
	}
	r.nprocs = all;
	b->report_free(b->ctx, &r);
	lp_api_respond_json(res, 200, doc);
}

/* GET of a process's document, or of a part of it (render). */
void lp_api_get_process(const struct lp_api_backend *b, const struct lp_peer *p, pid_t pid,
			struct lp_api_response *res,
			cJSON *(*render)(const struct lp_report *, const struct lp_proc_view *))
{
	const struct lp_proc_view *v = NULL;
	struct lp_report r;
	int ret = b->report(b->ctx, pid, &r);

	if (ret < 0) {
		b->report_free(b->ctx, &r);
		lp_api_error(res, 500, LP_ERR_INTERNAL, "read the kernel maps: %s", strerror(-ret));
		return;
	}
	/* A reused pid may have an exited record too: the running one, else the newest. */
	for (size_t i = 0; i < r.nprocs; i++)
		if (!v || !r.procs[i].target->exited || v->target->exited)
			v = &r.procs[i];
	/* Another user's process reads as not tracked: a 403 would tell an unprivileged peer
	 * that the pid is an LLM process. */
	if (!v || !lp_api_visible(p, v->target))
		lp_api_not_tracked(res, pid);
	else {
		cJSON *doc = render(&r, v);

		/* The clock of the counters, for rates between two reads (as in the list), and
		 * the API version every document carries. */
		if (doc) {
			cJSON_AddNumberToObject(doc, "now_ns", (double)r.now_ns);
			cJSON_AddNumberToObject(doc, "api", LP_API_VERSION);
		}
		lp_api_respond_json(res, 200, doc);
	}
	b->report_free(b->ctx, &r);
}

void lp_api_get_metrics(const struct lp_api_backend *b, const struct lp_api_request *req,
			struct lp_api_response *res)
{
	const struct lp_peer *p = req->peer;
	struct lp_metrics_opts o = {.max_processes = b->cfg->metrics_max_processes,
				    .by_workload = b->cfg->metrics_labels == LP_METRICS_BY_WORKLOAD,
				    .cmdline = b->cfg->metrics_cmdline,
				    .coarse = b->cfg->metrics_buckets == LP_METRICS_COARSE,
				    .exited_ns =
					    (uint64_t)b->cfg->metrics_exited_seconds * 1000000000,
				    .format = lp_expo_negotiate(req->accept),
				    .start_time = b->start_time,
				    .hide_fill = !p->privileged};
	struct lp_self_stats self;
	struct lp_report r;
	char *text;
	size_t len;
	int ret = b->report(b->ctx, 0, &r);

	if (lp_self_stats_read(&self) == 0)
		o.self = &self;
	if (ret == 0) {
		size_t all = lp_api_filter_visible(&r, p);

		ret = lp_metrics_render(&r, &o, &text, &len);
		r.nprocs = all;
	}
	b->report_free(b->ctx, &r);
	if (ret < 0) {
		lp_api_error(res, 500, LP_ERR_INTERNAL, "metrics: %s", strerror(-ret));
		return;
	}
	free(res->body);
	res->body = text;
	res->len = len;
	res->status = 200;
	res->reason = "OK";
	res->content_type =
		o.format == LP_EXPO_PROTOBUF ? LP_EXPO_PROTOBUF_TYPE : LP_EXPO_TEXT_TYPE;
}
