// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* API routing: method and path to a route of figures.c or actions.c; every request ends in
 * a JSON document or a JSON error with a fitting status (answer.c). */
#include "serving/api.h"

#include <stdio.h>
#include <string.h>

#include "base/procfs.h"
#include "llmprof/protocol.h"
#include "report/render.h"
#include "serving/actions.h"
#include "serving/figures.h"

static bool method_is(const char *m, const char *want)
{
	/* HEAD is GET without a body; the transport drops the body. */
	return strcmp(m, want) == 0 || (strcmp(want, "GET") == 0 && strcmp(m, "HEAD") == 0);
}

static void wrong_method(struct lp_api_response *res, const char *method, const char *allow,
			 const char *path)
{
	lp_api_error(res, 405, LP_ERR_METHOD, "%s is not allowed on %s; use %s", method, path,
		     allow);
	res->allow = allow;
}

void lp_api_handle(const struct lp_api_backend *b, const struct lp_api_request *req,
		   struct lp_api_response *res)
{
	const struct lp_peer *p = req->peer;
	const char *m = req->method ? req->method : "";
	/* Any target that fits the request's headers (a long ?model= filter): evhttp refuses
	 * a longer request line before it comes here. */
	char path[LP_MAX_HEADERS_BYTES + 1], *rest, *q, *query = NULL;
	size_t n;
	pid_t pid;

	memset(res, 0, sizeof(*res));
	if (!req->uri || req->uri[0] != '/' || strlen(req->uri) >= sizeof(path)) {
		lp_api_error(res, req->uri && req->uri[0] == '/' ? 404 : 400,
			     req->uri && req->uri[0] == '/' ? LP_ERR_NOT_FOUND : LP_ERR_BAD_REQUEST,
			     "the request target must be a path such as %s", LP_ROUTE_STATUS);
		return;
	}
	strcpy(path, req->uri);
	q = strpbrk(path, "?#");
	if (q) {
		/* The query: its own string (a fragment never reaches a server, but cut it). */
		query = *q == '?' && q[1] ? q + 1 : NULL;
		*q = '\0';
		if (query)
			query[strcspn(query, "#")] = '\0';
	}
	n = strlen(path);
	if (n > 1 && path[n - 1] == '/')
		path[n - 1] = '\0';

	/* A scraper's params (Prometheus' params:) are ignored, as exporters do. */
	if (strcmp(path, LP_ROUTE_METRICS) == 0) {
		if (!method_is(m, "GET"))
			wrong_method(res, m, "GET", path);
		else
			lp_api_get_metrics(b, req, res);
		return;
	}
	if (!p->unix_socket) {
		lp_api_error(res, 404, LP_ERR_NOT_FOUND,
			     "this listener serves %s only; the API is on the Unix socket",
			     LP_ROUTE_METRICS);
		return;
	}
	/* Only the list takes a query: elsewhere one would be silently ignored. */
	if (query && strcmp(path, LP_ROUTE_PROCESSES) != 0) {
		lp_api_error(res, 400, LP_ERR_BAD_REQUEST,
			     "%s takes no query parameters (only %s does: pid=, state=, comm=, "
			     "model=, workload=)",
			     path, LP_ROUTE_PROCESSES);
		return;
	}
	if (strcmp(path, LP_ROUTE_VERSION) == 0) {
		if (!method_is(m, "GET"))
			wrong_method(res, m, "GET", path);
		else
			lp_api_get_version(res);
		return;
	}
	if (strcmp(path, LP_ROUTE_STATUS) == 0) {
		if (!method_is(m, "GET"))
			wrong_method(res, m, "GET", path);
		else
			lp_api_get_status(b, p, res);
		return;
	}
	if (strcmp(path, LP_ROUTE_BANDWIDTH) == 0) {
		if (method_is(m, "GET"))
			lp_api_bandwidth(b, req, p, false, res);
		else if (strcmp(m, "POST") == 0)
			lp_api_bandwidth(b, req, p, true, res);
		else
			wrong_method(res, m, "GET, POST", path);
		return;
	}
	if (strcmp(path, LP_ROUTE_PROCESSES) == 0) {
		if (!method_is(m, "GET"))
			wrong_method(res, m, "GET", path);
		else
			lp_api_get_processes(b, p, query, res);
		return;
	}
	n = strlen(LP_ROUTE_PROCESSES);
	if (strncmp(path, LP_ROUTE_PROCESSES "/", n + 1) != 0) {
		lp_api_error(res, 404, LP_ERR_NOT_FOUND,
			     "no route %s; the routes are %s, %s, %s, %s, %s/{pid}, %s/{pid}/%s, "
			     "%s/{pid}/%s, %s/{pid}/%s, %s/{pid}/%s and %s",
			     path, LP_ROUTE_VERSION, LP_ROUTE_STATUS, LP_ROUTE_BANDWIDTH,
			     LP_ROUTE_PROCESSES, LP_ROUTE_PROCESSES, LP_ROUTE_PROCESSES,
			     LP_ROUTE_FINDINGS, LP_ROUTE_PROCESSES, LP_ROUTE_RESET,
			     LP_ROUTE_PROCESSES, LP_ROUTE_PRECISE, LP_ROUTE_PROCESSES,
			     LP_ROUTE_RECORD, LP_ROUTE_METRICS);
		return;
	}
	rest = strchr(path + n + 1, '/');
	if (rest)
		*rest++ = '\0';
	if (lp_parse_pid(path + n + 1, &pid) < 0) {
		lp_api_error(res, 400, LP_ERR_BAD_REQUEST, "'%s' is not a process id",
			     path + n + 1);
		return;
	}
	if (!rest) {
		if (!method_is(m, "GET"))
			wrong_method(res, m, "GET", req->uri);
		else
			lp_api_get_process(b, p, pid, res, lp_render_proc);
	} else if (strcmp(rest, LP_ROUTE_FINDINGS) == 0) {
		if (!method_is(m, "GET"))
			wrong_method(res, m, "GET", req->uri);
		else
			lp_api_get_process(b, p, pid, res, lp_render_proc_findings);
	} else if (strcmp(rest, LP_ROUTE_REQUESTS) == 0) {
		if (!method_is(m, "GET"))
			wrong_method(res, m, "GET", req->uri);
		else
			lp_api_get_process(b, p, pid, res, lp_render_proc_requests);
	} else if (strcmp(rest, LP_ROUTE_RESET) == 0) {
		if (strcmp(m, "POST") != 0)
			wrong_method(res, m, "POST", req->uri);
		else
			lp_api_post_reset(b, req, p, pid, res);
	} else if (strcmp(rest, LP_ROUTE_PRECISE) == 0) {
		if (strcmp(m, "POST") != 0)
			wrong_method(res, m, "POST", req->uri);
		else
			lp_api_post_precise(b, req, pid, res);
	} else if (strcmp(rest, LP_ROUTE_RECORD) == 0) {
		if (strcmp(m, "POST") == 0)
			lp_api_post_record(b, req, pid, res);
		else if (method_is(m, "GET"))
			lp_api_get_record(b, p, pid, res);
		else
			wrong_method(res, m, "GET, POST", req->uri);
	} else {
		lp_api_error(res, 404, LP_ERR_NOT_FOUND,
			     "no route %s; a process has %s/{pid}/%s, %s/{pid}/%s, %s/{pid}/%s, "
			     "%s/{pid}/%s and %s/{pid}/%s",
			     req->uri, LP_ROUTE_PROCESSES, LP_ROUTE_FINDINGS, LP_ROUTE_PROCESSES,
			     LP_ROUTE_REQUESTS, LP_ROUTE_PROCESSES, LP_ROUTE_RESET,
			     LP_ROUTE_PROCESSES, LP_ROUTE_PRECISE, LP_ROUTE_PROCESSES,
			     LP_ROUTE_RECORD);
	}
}
