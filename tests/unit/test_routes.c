// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* Unit tests of daemon/serving/api.c's route table: docs/API.md's route list is the table;
 * an unknown path's 404 names every route; a known path with another method gets 405 and
 * Allow with the path's methods; the TCP listener answers only its own routes; a bad pid
 * is 400. No route's handler runs here (no backend): those are the e2e tier's. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "serving/api.h"

#define MAXR 64

static struct lp_api_response call(const char *method, const char *uri, bool unix_socket)
{
	struct lp_peer p = {.unix_socket = unix_socket, .known = true, .privileged = true};
	struct lp_api_request req = {.method = method, .uri = uri, .peer = &p};
	struct lp_api_response res;

	lp_api_handle(NULL, &req, &res);
	return res;
}

/* The path with {pid} as 42. */
static void concrete(const char *path, char *out, size_t size)
{
	const char *at = strstr(path, "{pid}");

	if (at)
		snprintf(out, size, "%.*s42%s", (int)(at - path), path, at + 5);
	else
		snprintf(out, size, "%s", path);
}

static void docs(const char *root)
{
	const char *methods[MAXR], *paths[MAXR];
	size_t n = lp_api_routes(methods, paths, MAXR);
	bool seen[MAXR] = {false};
	char file[4096], line[2048];
	bool in = false, rows = false;
	FILE *f;

	snprintf(file, sizeof(file), "%s/docs/API.md", root);
	f = fopen(file, "r");
	CHECK(f, "%s opens", file);
	while (f && fgets(line, sizeof(line), f)) {
		char *p = line, method[8], path[256];

		/* The first table under "## Routes" */
		if (!strncmp(line, "## ", 3)) {
			in = !strncmp(line, "## Routes", 9);
			continue;
		}
		if (in && rows && line[0] != '|')
			in = false;
		if (!in || strncmp(line, "| `", 3))
			continue;
		rows = true;
		/* the first cell: `GET /a`, `POST /a` */
		p[strcspn(p + 1, "|") + 1] = '\0';
		while ((p = strchr(p, '`')) && sscanf(p, "`%7s %255[^`]`", method, path) == 2) {
			size_t k;

			for (k = 0; k < n; k++)
				if (!strcmp(methods[k], method) && !strcmp(paths[k], path))
					break;
			CHECK(k < n, "docs/API.md's route %s %s is in the table", method, path);
			if (k < n)
				seen[k] = true;
			p = strchr(p + 1, '`') + 1;
		}
	}
	if (f)
		fclose(f);
	for (size_t i = 0; i < n; i++)
		CHECK(seen[i], "docs/API.md's route list has %s %s", methods[i], paths[i]);
}

static void answers(void)
{
	const char *methods[MAXR], *paths[MAXR];
	size_t n = lp_api_routes(methods, paths, MAXR);
	struct lp_api_response r;
	char uri[512];

	r = call("GET", "/v1/nope", true);
	CHECK(r.status == 404, "an unknown path: 404");
	for (size_t i = 0; i < n; i++)
		CHECK(r.body && strstr(r.body, paths[i]), "the 404 names %s", paths[i]);
	lp_api_response_free(&r);
	for (size_t i = 0; i < n; i++) {
		char allow[64] = "";
		bool tcp;

		/* The path's methods, from the table */
		for (size_t k = 0; k < n; k++)
			if (!strcmp(paths[k], paths[i]))
				snprintf(allow + strlen(allow), sizeof(allow) - strlen(allow),
					 "%s%s", allow[0] ? ", " : "", methods[k]);
		concrete(paths[i], uri, sizeof(uri));
		r = call("PUT", uri, true);
		CHECK(r.status == 405 && !strcmp(r.allow, allow),
		      "PUT %s: 405, Allow: %s (got %d, %s)", uri, allow, r.status, r.allow);
		lp_api_response_free(&r);
		r = call("PUT", uri, false);
		tcp = r.status == 405;
		CHECK(tcp || r.status == 404, "PUT %s on TCP: 405 if it is served there, else 404",
		      uri);
		lp_api_response_free(&r);
		if (!tcp)
			continue;
		r = call("GET", "/v1/nope", false);
		CHECK(r.status == 404 && strstr(r.body, paths[i]),
		      "the TCP listener's 404 names its route %s", paths[i]);
		lp_api_response_free(&r);
	}
	r = call("GET", "/v1/status", false);
	CHECK(r.status == 404, "the API is not on the TCP listener");
	lp_api_response_free(&r);
	r = call("GET", "/v1/processes/x1/findings", true);
	CHECK(r.status == 400 && strstr(r.body, "x1"), "a pid that is not one: 400");
	lp_api_response_free(&r);
	r = call("GET", "/v1/processes/42/nope", true);
	CHECK(r.status == 404, "an unknown route of a process: 404");
	lp_api_response_free(&r);
	r = call("GET", "/v1/status?x=1", true);
	CHECK(r.status == 400, "a query where none is taken: 400");
	lp_api_response_free(&r);
}

int main(int argc, char **argv)
{
	answers();
	if (argc > 1)
		docs(argv[1]);
	return check_done();
}
