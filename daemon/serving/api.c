// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* API routing: one table of routes (method, path pattern, who may call it, whether it takes
 * a query, its handler in figures.c or actions.c). Matching, the 404 with the routes, the
 * 405 with Allow and the 400 for a bad pid or an unexpected query all follow from it; every
 * request ends in a JSON document or a JSON error with a fitting status (answer.c). */
#include "serving/api.h"

#include <stdio.h>
#include <string.h>

#include "base/procfs.h"
#include "llmprof/protocol.h"
#include "report/render.h"
#include "serving/actions.h"
#include "serving/figures.h"
#include "serving/profiles.h"

/* What a route's handler gets: the request and the {pid} of its path. */
struct route_call {
	const struct lp_api_backend *b;
	const struct lp_api_request *req;
	const char *query; /* NULL: none */
	pid_t pid;	   /* the path's {pid}; 0: the pattern has none */
};

static void version(const struct route_call *c, struct lp_api_response *res)
{
	(void)c;
	lp_api_get_version(res);
}

static void status(const struct route_call *c, struct lp_api_response *res)
{
	lp_api_get_status(c->b, c->req->peer, res);
}

static void bandwidth_get(const struct route_call *c, struct lp_api_response *res)
{
	lp_api_bandwidth(c->b, c->req, c->req->peer, false, res);
}

static void bandwidth_post(const struct route_call *c, struct lp_api_response *res)
{
	lp_api_bandwidth(c->b, c->req, c->req->peer, true, res);
}

static void processes(const struct route_call *c, struct lp_api_response *res)
{
	lp_api_get_processes(c->b, c->req->peer, c->query, res);
}

static void process(const struct route_call *c, struct lp_api_response *res)
{
	lp_api_get_process(c->b, c->req->peer, c->pid, res, lp_render_proc);
}

static void findings(const struct route_call *c, struct lp_api_response *res)
{
	lp_api_get_process(c->b, c->req->peer, c->pid, res, lp_render_proc_findings);
}

static void requests(const struct route_call *c, struct lp_api_response *res)
{
	lp_api_get_process(c->b, c->req->peer, c->pid, res, lp_render_proc_requests);
}

static void reset(const struct route_call *c, struct lp_api_response *res)
{
	lp_api_post_reset(c->b, c->req, c->req->peer, c->pid, res);
}

static void precise(const struct route_call *c, struct lp_api_response *res)
{
	lp_api_post_precise(c->b, c->req, c->pid, res);
}

static void record_post(const struct route_call *c, struct lp_api_response *res)
{
	lp_api_post_record(c->b, c->req, c->pid, res);
}

static void record_get(const struct route_call *c, struct lp_api_response *res)
{
	lp_api_get_record(c->b, c->req->peer, c->pid, res);
}

static void metrics(const struct route_call *c, struct lp_api_response *res)
{
	lp_api_get_metrics(c->b, c->req, res);
}

static void pprof(const struct route_call *c, struct lp_api_response *res)
{
	lp_api_get_profile(c->b, c->req, c->query, LP_PROFILE_PPROF, res);
}

static void folded(const struct route_call *c, struct lp_api_response *res)
{
	lp_api_get_profile(c->b, c->req, c->query, LP_PROFILE_FOLDED, res);
}

enum route_flags {
	ROUTE_TCP = 1 << 0,	      /* on the TCP listener too (its access rules: server.c) */
	ROUTE_QUERY = 1 << 1,	      /* takes a query */
	ROUTE_QUERY_IGNORED = 1 << 2, /* a scraper's params, ignored as exporters do */
};

/* Every route; a path with several methods has an entry for each, next to each other. */
static const struct lp_route {
	const char *method; /* GET answers HEAD too */
	const char *path;   /* {pid}: a decimal process id */
	unsigned flags;
	void (*fn)(const struct route_call *c, struct lp_api_response *res);
} routes[] = {
	{"GET", LP_ROUTE_VERSION, 0, version},
	{"GET", LP_ROUTE_STATUS, 0, status},
	{"GET", LP_ROUTE_PROCESSES, ROUTE_QUERY, processes},
	{"GET", LP_ROUTE_PROCESSES "/{pid}", 0, process},
	{"GET", LP_ROUTE_PROCESSES "/{pid}/" LP_ROUTE_FINDINGS, 0, findings},
	{"GET", LP_ROUTE_PROCESSES "/{pid}/" LP_ROUTE_REQUESTS, 0, requests},
	{"GET", LP_ROUTE_BANDWIDTH, 0, bandwidth_get},
	{"POST", LP_ROUTE_BANDWIDTH, 0, bandwidth_post},
	{"POST", LP_ROUTE_PROCESSES "/{pid}/" LP_ROUTE_RESET, 0, reset},
	{"POST", LP_ROUTE_PROCESSES "/{pid}/" LP_ROUTE_PRECISE, 0, precise},
	{"POST", LP_ROUTE_PROCESSES "/{pid}/" LP_ROUTE_RECORD, 0, record_post},
	{"GET", LP_ROUTE_PROCESSES "/{pid}/" LP_ROUTE_RECORD, 0, record_get},
	{"GET", LP_ROUTE_METRICS, ROUTE_TCP | ROUTE_QUERY_IGNORED, metrics},
	{"GET", LP_ROUTE_PPROF, ROUTE_TCP | ROUTE_QUERY, pprof},
	{"GET", LP_ROUTE_FOLDED, ROUTE_TCP | ROUTE_QUERY, folded},
};

#define NROUTES (sizeof(routes) / sizeof(routes[0]))

size_t lp_api_routes(const char **methods, const char **paths, size_t cap)
{
	for (size_t i = 0; i < NROUTES && i < cap; i++) {
		methods[i] = routes[i].method;
		paths[i] = routes[i].path;
	}
	return NROUTES;
}

/* Whether path fits pattern segment by segment; *pid gets the {pid} segment, *bad_pid
 * whether it was not a process id. */
static bool match(const char *pattern, const char *path, pid_t *pid, bool *bad_pid)
{
	char seg[32];

	*pid = 0;
	*bad_pid = false;
	while (*pattern && *path) {
		size_t pn = strcspn(pattern, "/"), n = strcspn(path, "/");

		if (pn == 5 && strncmp(pattern, "{pid}", 5) == 0) {
			if (n == 0)
				return false;
			snprintf(seg, sizeof(seg), "%.*s", (int)n, path);
			if (n >= sizeof(seg) || lp_parse_pid(seg, pid) < 0)
				*bad_pid = true;
		} else if (pn != n || strncmp(pattern, path, n) != 0) {
			return false;
		}
		pattern += pn;
		path += n;
		if (*pattern != *path)
			return false;
		if (*pattern == '/')
			pattern++, path++;
	}
	return !*pattern && !*path;
}

static bool method_is(const char *m, const char *want)
{
	/* HEAD is GET without a body; the transport drops the body. */
	return strcmp(m, want) == 0 || (strcmp(want, "GET") == 0 && strcmp(m, "HEAD") == 0);
}

/* "a, b and c" of the routes' distinct paths (those served on TCP only, with tcp). */
static void route_list(char *out, size_t size, bool tcp)
{
	size_t len = 0, n = 0, k = 0;

	for (size_t i = 0; i < NROUTES; i++)
		n += (!tcp || routes[i].flags & ROUTE_TCP) &&
		     (i == 0 || strcmp(routes[i].path, routes[i - 1].path));
	out[0] = '\0';
	for (size_t i = 0; i < NROUTES && len < size; i++) {
		if ((tcp && !(routes[i].flags & ROUTE_TCP)) ||
		    (i && !strcmp(routes[i].path, routes[i - 1].path)))
			continue;
		k++;
		len += (size_t)snprintf(out + len, size - len, "%s%s",
					k == 1	 ? ""
					: k == n ? " and "
						 : ", ",
					routes[i].path);
	}
}

void lp_api_handle(const struct lp_api_backend *b, const struct lp_api_request *req,
		   struct lp_api_response *res)
{
	const struct lp_peer *p = req->peer;
	const char *m = req->method ? req->method : "";
	/* Any target that fits the request's headers (a long ?model= filter): evhttp refuses
	 * a longer request line before it comes here. */
	char path[LP_MAX_HEADERS_BYTES + 1], list[1024], allow[sizeof(res->allow)] = "", *q,
							 *query = NULL;
	const struct lp_route *found = NULL, *fits = NULL;
	struct route_call call = {.b = b, .req = req};
	bool bad_pid = false;
	size_t n;

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

	/* The path's routes: the first that fits names the pattern; Allow lists the methods
	 * of its entries. */
	for (size_t i = 0; i < NROUTES; i++) {
		pid_t pid;
		bool bad;

		if (fits ? strcmp(routes[i].path, fits->path) != 0
			 : !match(routes[i].path, path, &pid, &bad))
			continue;
		if (!fits) {
			fits = &routes[i];
			call.pid = pid;
			bad_pid = bad;
		}
		if (!found && method_is(m, routes[i].method))
			found = &routes[i];
		n = strlen(allow);
		snprintf(allow + n, sizeof(allow) - n, "%s%s", n ? ", " : "", routes[i].method);
	}
	if (!fits || (!p->unix_socket && !(fits->flags & ROUTE_TCP))) {
		route_list(list, sizeof(list), !p->unix_socket);
		if (p->unix_socket)
			lp_api_error(res, 404, LP_ERR_NOT_FOUND, "no route %s; the routes are %s",
				     path, list);
		else
			lp_api_error(res, 404, LP_ERR_NOT_FOUND,
				     "this listener serves %s only; the API is on the Unix socket",
				     list);
		return;
	}
	if (bad_pid) {
		lp_api_error(res, 400, LP_ERR_BAD_REQUEST, "'%s' is not a process id",
			     path + strlen(LP_ROUTE_PROCESSES "/"));
		return;
	}
	if (!found) {
		lp_api_error(res, 405, LP_ERR_METHOD, "%s is not allowed on %s; use %s", m, path,
			     allow);
		snprintf(res->allow, sizeof(res->allow), "%s", allow);
		return;
	}
	if (query && !(found->flags & (ROUTE_QUERY | ROUTE_QUERY_IGNORED))) {
		lp_api_error(res, 400, LP_ERR_BAD_REQUEST, "%s takes no query parameters", path);
		return;
	}
	call.query = found->flags & ROUTE_QUERY ? query : NULL;
	found->fn(&call, res);
}
