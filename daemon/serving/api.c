// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* API routing: every request ends in a JSON document or a JSON error with a fitting status;
 * peers that are neither root nor in LP_GROUP see their own uid's processes only. */
#include "serving/api.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "escape.h"
#include "base/log.h"
#include "llmprof/protocol.h"
#include "serving/metrics.h"
#include "base/procfs.h"
#include "report/render.h"

#ifndef LLMPROF_VERSION
#define LLMPROF_VERSION "0"
#endif

static const char *reason_of(int status)
{
	switch (status) {
	case 200:
		return "OK";
	case 202:
		return "Accepted";
	case 400:
		return "Bad Request";
	case 401:
		return "Unauthorized";
	case 403:
		return "Forbidden";
	case 404:
		return "Not Found";
	case 405:
		return "Method Not Allowed";
	case 409:
		return "Conflict";
	case 413:
		return "Payload Too Large";
	case 431:
		return "Request Header Fields Too Large";
	case 501:
		return "Not Implemented";
	case 503:
		return "Service Unavailable";
	default:
		return status >= 500 ? "Internal Server Error" : "Error";
	}
}

static void set_body(struct lp_api_response *res, int status, char *text, size_t len)
{
	free(res->body);
	res->status = status;
	res->reason = reason_of(status);
	res->content_type = "application/json";
	res->body = text;
	res->len = len;
}

/* Out of memory: a fixed document still says what happened. */
static void respond_oom(struct lp_api_response *res)
{
	static const char oom[] = "{\"error\":{\"code\":\"" LP_ERR_INTERNAL
				  "\",\"message\":\"out of memory\",\"status\":500}}\n";
	char *text = strdup(oom);

	set_body(res, 500, text, text ? strlen(text) : 0);
}

static void respond_json(struct lp_api_response *res, int status, cJSON *doc)
{
	char *text = doc ? cJSON_PrintUnformatted(doc) : NULL, *t;
	size_t len;

	cJSON_Delete(doc);
	if (!text) {
		respond_oom(res);
		return;
	}
	len = strlen(text);
	/* Names others chose are escaped where they enter a document; this holds the promise
	 * that every answer is UTF-8 should one ever slip through unescaped. */
	if (!lp_utf8_valid(text, len)) {
		static bool said;

		if (!said)
			log_warning("an answer held bytes that are not UTF-8; they are sent as "
				    "U+FFFD (a bug: please report it)");
		said = true;
		t = lp_utf8_repair(text, len, &len);
		free(text);
		if (!t) {
			respond_oom(res);
			return;
		}
		text = t;
	}
	/* A newline at the end, for curl users. */
	t = realloc(text, len + 2);
	if (!t) {
		free(text);
		respond_oom(res);
		return;
	}
	t[len++] = '\n';
	t[len] = '\0';
	set_body(res, status, t, len);
}

void lp_api_error(struct lp_api_response *res, int status, const char *code, const char *fmt, ...)
{
	cJSON *doc = cJSON_CreateObject(), *e;
	char msg[512], safe[LP_ESCAPE_SIZE(sizeof(msg))];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	/* A message may quote the request (its target, a header): escaped once, so that the
	 * answer is UTF-8 and no terminal obeys a byte of it. */
	lp_escape(safe, sizeof(safe), msg,
		  n < 0			    ? 0
		  : (size_t)n < sizeof(msg) ? (size_t)n
					    : sizeof(msg) - 1);
	e = cJSON_AddObjectToObject(doc, "error");
	cJSON_AddStringToObject(e, "code", code);
	cJSON_AddStringToObject(e, "message", safe);
	cJSON_AddNumberToObject(e, "status", status);
	respond_json(res, status, doc);
	res->allow = NULL;
}

void lp_api_response_free(struct lp_api_response *res)
{
	lp_stream_put(res->stream);
	res->stream = NULL;
	if (res->shared)
		lp_body_put(res->shared);
	else
		free(res->body);
	res->shared = NULL;
	res->body = NULL;
	res->len = 0;
}

/* One rule on both listeners: root and members of the group see every process; any other
 * peer whose uid is known sees that uid's processes; a peer nobody knows sees none. */
static bool visible(const struct lp_peer *p, const struct lp_target *t)
{
	return p->privileged || (p->known && t->uid != (uid_t)-1 && t->uid == p->uid);
}

/* Drops the views the peer may not see. */
/* Puts the processes p may see first, in their order, and makes them all r holds; returns
 * the whole count, to be set back before r is freed: the others are still r's to free
 * (their threads, ops and findings alike). */
static size_t filter_visible(struct lp_report *r, const struct lp_peer *p)
{
	size_t n = 0, all = r->nprocs;

	for (size_t i = 0; i < all; i++)
		if (visible(p, r->procs[i].target)) {
			struct lp_proc_view v = r->procs[n];

			r->procs[n++] = r->procs[i];
			r->procs[i] = v;
		}
	r->nprocs = n;
	return all;
}

static void get_status(const struct lp_api_backend *b, const struct lp_peer *p,
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
		bool v = visible(p, r.procs[i].target);

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
		m = cJSON_GetObjectItemCaseSensitive(doc, "unwind");
		cJSON_DeleteItemFromObjectCaseSensitive(m, "rows_used");
		cJSON_DeleteItemFromObjectCaseSensitive(m, "objects");
		cJSON_DeleteItemFromObjectCaseSensitive(m, "bytes");
	}
	peer = cJSON_AddObjectToObject(doc, "peer");
	cJSON_AddNumberToObject(peer, "uid", p->uid);
	cJSON_AddBoolToObject(peer, "privileged", p->privileged);
	respond_json(res, 200, doc);
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

/* %XX and + decoded in place; false on a bad escape. */
static bool url_decode(char *s)
{
	char *o = s;

	for (; *s; s++) {
		unsigned x;

		if (*s == '+') {
			*o++ = ' ';
		} else if (*s == '%') {
			if (!isxdigit((unsigned char)s[1]) || !isxdigit((unsigned char)s[2]) ||
			    sscanf(s + 1, "%2x", &x) != 1 || !x)
				return false;
			*o++ = (char)x;
			s += 2;
		} else {
			*o++ = *s;
		}
	}
	*o = '\0';
	return true;
}

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

		if (!v || !url_decode(v + 1)) {
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
static void get_version(struct lp_api_response *res)
{
	cJSON *doc = cJSON_CreateObject();

	cJSON_AddNumberToObject(doc, "api", LP_API_VERSION);
	cJSON_AddNumberToObject(doc, "min_api", LP_API_MIN_VERSION);
	cJSON_AddStringToObject(doc, "version", LLMPROF_VERSION);
	cJSON_AddNumberToObject(doc, "abi", LP_ABI_VERSION);
	cJSON_AddNumberToObject(doc, "report_format", LP_REPORT_FORMAT);
	respond_json(res, 200, doc);
}

static void get_processes(const struct lp_api_backend *b, const struct lp_peer *p,
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
	all = filter_visible(&r, p);
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
	respond_json(res, 200, doc);
}

static void not_tracked(struct lp_api_response *res, pid_t pid)
{
	lp_api_error(res, 404, LP_ERR_NO_SUCH_PROCESS,
		     "pid %d is not tracked by llmprofd (not an LLM process, or it exited longer "
		     "ago than the retention period)",
		     (int)pid);
}

static const char *group_of(const struct lp_api_backend *b)
{
	return b->group && *b->group ? b->group : LP_GROUP;
}

/* GET of a process's document, or of a part of it (render). */
static void get_process(const struct lp_api_backend *b, const struct lp_peer *p, pid_t pid,
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
	if (!v || !visible(p, v->target))
		not_tracked(res, pid);
	else {
		cJSON *doc = render(&r, v);

		/* The clock of the counters, for rates between two reads (as in the list), and
		 * the API version every document carries. */
		if (doc) {
			cJSON_AddNumberToObject(doc, "now_ns", (double)r.now_ns);
			cJSON_AddNumberToObject(doc, "api", LP_API_VERSION);
		}
		respond_json(res, 200, doc);
	}
	b->report_free(b->ctx, &r);
}

static bool need_privilege(const struct lp_api_backend *b, const struct lp_peer *p,
			   const char *what, struct lp_api_response *res)
{
	if (p->privileged)
		return true;
	lp_api_error(res, 403, LP_ERR_FORBIDDEN,
		     "%s needs root or membership of group '%s' (you are uid %u)", what,
		     group_of(b), (unsigned)p->uid);
	return false;
}

static cJSON *parse_body(const char *body, size_t len);

/* A POST that takes no parameters: no body, or an empty JSON object. Anything else is a
 * mistake the client should hear of (a body of "garbage" was taken as a yes). */
static bool no_body(const struct lp_api_request *req, const char *route,
		    struct lp_api_response *res)
{
	cJSON *doc;
	bool empty;

	if (req->body_len == 0)
		return true;
	doc = parse_body(req->body, req->body_len);
	empty = cJSON_IsObject(doc) && !doc->child;
	cJSON_Delete(doc);
	if (!empty)
		lp_api_error(res, 400, LP_ERR_BAD_REQUEST,
			     "POST %s takes no body (or {}): nothing to set", route);
	return empty;
}

/* The host's memory bandwidth: GET reads it, POST measures it (again), 202. */
static void bandwidth(const struct lp_api_backend *b, const struct lp_api_request *req,
		      const struct lp_peer *p, bool measure, struct lp_api_response *res)
{
	cJSON *doc;

	if (measure && (!need_privilege(b, p, "measuring the memory bandwidth", res) ||
			!no_body(req, LP_ROUTE_BANDWIDTH, res)))
		return;
	if (!b->bandwidth) {
		lp_api_error(res, 404, LP_ERR_NOT_FOUND, "this daemon does not measure bandwidth");
		return;
	}
	doc = cJSON_CreateObject();
	b->bandwidth(b->ctx, measure, doc);
	respond_json(res, measure ? 202 : 200, doc);
}

static void post_reset(const struct lp_api_backend *b, const struct lp_api_request *req,
		       const struct lp_peer *p, pid_t pid, struct lp_api_response *res)
{
	cJSON *doc;
	int ret;

	if (!need_privilege(b, p, "reset", res) ||
	    !no_body(req, LP_ROUTE_PROCESSES "/PID/" LP_ROUTE_RESET, res))
		return;
	ret = b->reset(b->ctx, pid);
	if (ret == -ESRCH) {
		not_tracked(res, pid);
		return;
	}
	if (ret < 0) {
		lp_api_error(res, 500, LP_ERR_INTERNAL, "reset pid %d: %s", (int)pid,
			     strerror(-ret));
		return;
	}
	doc = cJSON_CreateObject();
	cJSON_AddNumberToObject(doc, "pid", pid);
	cJSON_AddBoolToObject(doc, "reset", true);
	respond_json(res, 200, doc);
}

/* One JSON value and nothing after it but white space; no string holds a NUL (cJSON keeps
 * strings NUL-terminated, so "seconds\u0000x" would read as "seconds"). Outside strings a
 * valid document has no backslash, so every one seen here is an escape. */
static cJSON *parse_body(const char *body, size_t len)
{
	const char *end = NULL;
	cJSON *doc;

	/* A byte order mark, which cJSON skips: RFC 8259 8.1 says a sender MUST NOT add one. */
	if (len >= 3 && memcmp(body, "\xef\xbb\xbf", 3) == 0)
		return NULL;
	doc = cJSON_ParseWithLengthOpts(body, len, &end, false);
	if (!doc)
		return NULL;
	/* strchr() finds the terminator too: a NUL after the document is not white space. */
	for (const char *p = end; p < body + len; p++)
		if (*p == '\0' || !strchr(" \t\r\n", *p)) {
			cJSON_Delete(doc);
			return NULL;
		}
	for (const char *p = body, *prev = ""; p < end; prev = p++) {
		/* A number with a leading zero (05, -01): not JSON (RFC 8259 6), which cJSON
		 * reads as 5. Outside strings, a digit after anything but a digit, '.', 'e',
		 * 'E', '+' or '-' starts a number. */
		if (*p == '0' && p + 1 < end && p[1] >= '0' && p[1] <= '9' &&
		    !(*prev && strchr("0123456789.eE+", *prev))) {
			cJSON_Delete(doc);
			return NULL;
		}
		if (*p == '"') {
			/* Through the string: every backslash in it is an escape. */
			for (p++; p < end && *p != '"'; p++) {
				if (*p != '\\')
					continue;
				if (end - p >= 6 && strncmp(p + 1, "u0000", 5) == 0) {
					cJSON_Delete(doc);
					return NULL;
				}
				p++; /* the escaped character */
			}
		}
	}
	return doc;
}

/* A body of two optional members: a boolean named flag and "seconds" (a number from 0, or
 * above 0 unless zero_ok, to max). *on and *seconds keep their defaults when absent. */
static int parse_flag_seconds(const struct lp_api_request *req, const char *flag, bool *on,
			      double *seconds, double max, bool zero_ok, double *lease,
			      bool *perfetto, struct lp_api_response *res)
{
	cJSON *doc, *item;
	unsigned seen = 0;

	if (req->body_len == 0)
		return 0;
	doc = parse_body(req->body, req->body_len);
	if (!doc || !cJSON_IsObject(doc)) {
		cJSON_Delete(doc);
		lp_api_error(res, 400, LP_ERR_BAD_REQUEST,
			     "the body is not one JSON object (nothing after it, no NUL in a "
			     "string); send {\"seconds\": S} or {\"%s\": true or false}",
			     flag);
		return -EINVAL;
	}
	cJSON_ArrayForEach(item, doc)
	{
		bool is_flag = item->string && strcmp(item->string, flag) == 0;
		bool is_seconds = item->string && strcmp(item->string, "seconds") == 0;
		bool is_lease = lease && item->string && strcmp(item->string, "lease") == 0;
		bool is_format = perfetto && item->string && strcmp(item->string, "format") == 0;
		unsigned bit = is_flag ? 1 : is_seconds ? 2 : is_lease ? 4 : is_format ? 8 : 0;

		if (bit && (seen & bit)) {
			lp_api_error(res, 400, LP_ERR_BAD_REQUEST, "'%s' is given twice",
				     item->string);
			cJSON_Delete(doc);
			return -EINVAL;
		}
		seen |= bit;
		if (is_flag && cJSON_IsBool(item)) {
			*on = cJSON_IsTrue(item);
		} else if (is_seconds && cJSON_IsNumber(item) && item->valuedouble <= max &&
			   (item->valuedouble > 0 || (zero_ok && item->valuedouble == 0))) {
			*seconds = item->valuedouble;
		} else if (is_lease && cJSON_IsNumber(item) && item->valuedouble >= 1 &&
			   item->valuedouble <= LP_RECORD_MAX_SECONDS) {
			*lease = item->valuedouble;
		} else if (is_format && cJSON_IsString(item) &&
			   (!strcmp(item->valuestring, "json") ||
			    !strcmp(item->valuestring, "perfetto"))) {
			*perfetto = !strcmp(item->valuestring, "perfetto");
		} else {
			lp_api_error(res, 400, LP_ERR_BAD_REQUEST,
				     "'%s': expected \"%s\" (true or false)%s \"seconds\" "
				     "(%s to %g%s)%s",
				     item->string ? item->string : "?", flag, lease ? "," : " or",
				     zero_ok ? "0" : "above 0", max,
				     zero_ok ? "; 0 = until switched off" : "",
				     lease ? ", \"lease\" (1 to 60) or \"format\" (\"json\" or "
					     "\"perfetto\")"
					   : "");
			cJSON_Delete(doc);
			return -EINVAL;
		}
	}
	cJSON_Delete(doc);
	return 0;
}

static void post_precise(const struct lp_api_backend *b, const struct lp_api_request *req,
			 pid_t pid, struct lp_api_response *res)
{
	double seconds;
	cJSON *doc;
	bool on;
	int ret;

	on = true;
	seconds = 60;
	if (!need_privilege(b, req->peer, "precise mode", res) ||
	    parse_flag_seconds(req, "enable", &on, &seconds, LP_PRECISE_MAX_SECONDS, true, NULL,
			       NULL, res) < 0)
		return;
	doc = cJSON_CreateObject();
	cJSON_AddNumberToObject(doc, "pid", pid);
	ret = b->precise(b->ctx, pid, on, seconds, doc);
	if (ret == 0) {
		respond_json(res, 200, doc);
		return;
	}
	cJSON_Delete(doc);
	if (ret == -ESRCH)
		not_tracked(res, pid);
	else if (ret == -ENODATA)
		lp_api_error(res, 409, LP_ERR_EXITED, "pid %d has exited", (int)pid);
	else if (ret == -ENOEXEC)
		lp_api_error(res, 409, LP_ERR_NOT_LLM,
			     "pid %d maps none of the matmul functions: precise mode probes ggml",
			     (int)pid);
	else
		lp_api_error(res, 500, LP_ERR_INTERNAL, "precise mode for pid %d: %s", (int)pid,
			     strerror(-ret));
}

/* A timeline record: started by POST, fetched by GET (202 while it records). */
/* Whether the body asks to stop a record: 1 for exactly {"stop": true}, -EINVAL for "stop"
 * with anything else, 0 when there is no "stop". */
static int is_stop(const struct lp_api_request *req)
{
	cJSON *doc = req->body_len ? parse_body(req->body, req->body_len) : NULL;
	const cJSON *stop = cJSON_GetObjectItemCaseSensitive(doc, "stop");
	int r = 0;

	if (stop)
		r = cJSON_IsTrue(stop) && cJSON_GetArraySize(doc) == 1 ? 1 : -EINVAL;
	cJSON_Delete(doc);
	return r;
}

static void post_record(const struct lp_api_backend *b, const struct lp_api_request *req, pid_t pid,
			struct lp_api_response *res)
{
	double seconds = LP_RECORD_DEFAULT_SECONDS, lease = 0;
	bool ops = true, perfetto = false;
	struct lp_stream *stream = NULL;
	cJSON *doc;
	int ret;

	if (!need_privilege(b, req->peer, "recording a timeline", res))
		return;
	/* {"stop": true}: the running record ends now. */
	ret = is_stop(req);
	if (ret) {
		ret = ret < 0 ? ret : b->record_stop(b->ctx, pid);
		if (ret == -EINVAL) {
			lp_api_error(res, 400, LP_ERR_BAD_REQUEST,
				     "{\"stop\": true} takes nothing beside it");
		} else if (ret == -ENOENT) {
			lp_api_error(res, 409, LP_ERR_NOT_RECORDING,
				     "no timeline of pid %d is being recorded", (int)pid);
		} else {
			doc = cJSON_CreateObject();
			cJSON_AddNumberToObject(doc, "pid", pid);
			cJSON_AddBoolToObject(doc, "recording", false);
			cJSON_AddBoolToObject(doc, "stopped", true);
			respond_json(res, 202, doc);
		}
		return;
	}
	if (parse_flag_seconds(req, "ops", &ops, &seconds, LP_RECORD_MAX_SECONDS, false, &lease,
			       &perfetto, res) < 0)
		return;
	ret = b->record_start(b->ctx, pid, seconds, ops, lease, perfetto ? &stream : NULL);
	if (ret == 0 && stream) {
		/* The trace itself, as it is recorded. */
		res->status = 200;
		res->reason = "OK";
		res->content_type = stream->content_type;
		res->stream = stream;
	} else if (ret == 0) {
		doc = cJSON_CreateObject();
		cJSON_AddNumberToObject(doc, "pid", pid);
		cJSON_AddBoolToObject(doc, "recording", true);
		cJSON_AddNumberToObject(doc, "seconds", seconds);
		cJSON_AddBoolToObject(doc, "ops", ops);
		if (lease > 0)
			cJSON_AddNumberToObject(doc, "lease", lease);
		respond_json(res, 202, doc);
	} else if (ret == -ESRCH) {
		not_tracked(res, pid);
	} else if (ret == -ENODATA) {
		lp_api_error(res, 409, LP_ERR_EXITED, "pid %d has exited", (int)pid);
	} else if (ret == -EBUSY) {
		lp_api_error(res, 409, LP_ERR_BUSY,
			     "a timeline of pid %d is being recorded; fetch it with GET when done",
			     (int)pid);
	} else if (ret == -ENOSPC) {
		lp_api_error(res, 409, LP_ERR_BUSY,
			     "%d timelines are being recorded, the most at once; try again later",
			     LP_MAX_RECORDINGS);
	} else {
		lp_api_error(res, 500, LP_ERR_INTERNAL, "recording pid %d: %s", (int)pid,
			     strerror(-ret));
	}
}

static void get_record(const struct lp_api_backend *b, const struct lp_peer *p, pid_t pid,
		       struct lp_api_response *res)
{
	double remaining = 0;
	struct lp_body *body = NULL;
	cJSON *doc;
	int ret;

	if (!need_privilege(b, p, "recording a timeline", res))
		return;
	ret = b->record_fetch(b->ctx, pid, &body, &remaining);
	if (ret == 0) {
		res->status = 200;
		res->reason = "OK";
		res->content_type = "application/json";
		res->shared = body;
		res->body = body->data;
		res->len = body->len;
	} else if (ret == 1) {
		doc = cJSON_CreateObject();
		cJSON_AddNumberToObject(doc, "pid", pid);
		cJSON_AddBoolToObject(doc, "recording", true);
		cJSON_AddNumberToObject(doc, "remaining_seconds", remaining);
		respond_json(res, 202, doc);
	} else if (ret == -ENOENT) {
		lp_api_error(res, 404, LP_ERR_NOT_FOUND,
			     "no timeline of pid %d: start one with POST %s/%d/%s", (int)pid,
			     LP_ROUTE_PROCESSES, (int)pid, LP_ROUTE_RECORD);
	} else {
		lp_api_error(res, 500, LP_ERR_INTERNAL, "the timeline of pid %d: %s", (int)pid,
			     strerror(-ret));
	}
}

static void get_metrics(const struct lp_api_backend *b, const struct lp_api_request *req,
			struct lp_api_response *res)
{
	const struct lp_peer *p = req->peer;
	struct lp_metrics_opts o = {.max_processes = b->metrics_max_processes,
				    .by_workload = b->metrics_by_workload,
				    .format = lp_expo_negotiate(req->accept),
				    .start_time = b->start_time,
				    .hide_fill = !p->privileged};
	struct lp_report r;
	char *text;
	size_t len;
	int ret = b->report(b->ctx, 0, &r);

	if (ret == 0) {
		size_t all = filter_visible(&r, p);

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
	res->reason = reason_of(200);
	res->content_type =
		o.format == LP_EXPO_PROTOBUF ? LP_EXPO_PROTOBUF_TYPE : LP_EXPO_TEXT_TYPE;
}

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
			get_metrics(b, req, res);
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
			get_version(res);
		return;
	}
	if (strcmp(path, LP_ROUTE_STATUS) == 0) {
		if (!method_is(m, "GET"))
			wrong_method(res, m, "GET", path);
		else
			get_status(b, p, res);
		return;
	}
	if (strcmp(path, LP_ROUTE_BANDWIDTH) == 0) {
		if (method_is(m, "GET"))
			bandwidth(b, req, p, false, res);
		else if (strcmp(m, "POST") == 0)
			bandwidth(b, req, p, true, res);
		else
			wrong_method(res, m, "GET, POST", path);
		return;
	}
	if (strcmp(path, LP_ROUTE_PROCESSES) == 0) {
		if (!method_is(m, "GET"))
			wrong_method(res, m, "GET", path);
		else
			get_processes(b, p, query, res);
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
			get_process(b, p, pid, res, lp_render_proc);
	} else if (strcmp(rest, LP_ROUTE_FINDINGS) == 0) {
		if (!method_is(m, "GET"))
			wrong_method(res, m, "GET", req->uri);
		else
			get_process(b, p, pid, res, lp_render_proc_findings);
	} else if (strcmp(rest, LP_ROUTE_RESET) == 0) {
		if (strcmp(m, "POST") != 0)
			wrong_method(res, m, "POST", req->uri);
		else
			post_reset(b, req, p, pid, res);
	} else if (strcmp(rest, LP_ROUTE_PRECISE) == 0) {
		if (strcmp(m, "POST") != 0)
			wrong_method(res, m, "POST", req->uri);
		else
			post_precise(b, req, pid, res);
	} else if (strcmp(rest, LP_ROUTE_RECORD) == 0) {
		if (strcmp(m, "POST") == 0)
			post_record(b, req, pid, res);
		else if (method_is(m, "GET"))
			get_record(b, p, pid, res);
		else
			wrong_method(res, m, "GET, POST", req->uri);
	} else {
		lp_api_error(res, 404, LP_ERR_NOT_FOUND,
			     "no route %s; a process has %s/{pid}/%s, %s/{pid}/%s, %s/{pid}/%s "
			     "and %s/{pid}/%s",
			     req->uri, LP_ROUTE_PROCESSES, LP_ROUTE_FINDINGS, LP_ROUTE_PROCESSES,
			     LP_ROUTE_RESET, LP_ROUTE_PROCESSES, LP_ROUTE_PRECISE,
			     LP_ROUTE_PROCESSES, LP_ROUTE_RECORD);
	}
}
