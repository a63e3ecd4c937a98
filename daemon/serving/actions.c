// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* The routes that change something or start work, each for root and the group only: a
 * reset, precise mode, a timeline record (and fetching it), a bandwidth measurement; and the
 * strict reading of their JSON bodies. */
#include "serving/actions.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llmprof/protocol.h"

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
void lp_api_bandwidth(const struct lp_api_backend *b, const struct lp_api_request *req,
		      const struct lp_peer *p, bool measure, struct lp_api_response *res)
{
	cJSON *doc;

	if (measure && (!lp_api_need_privilege(b, p, "measuring the memory bandwidth", res) ||
			!no_body(req, LP_ROUTE_BANDWIDTH, res)))
		return;
	if (!b->bandwidth) {
		lp_api_error(res, 404, LP_ERR_NOT_FOUND, "this daemon does not measure bandwidth");
		return;
	}
	doc = cJSON_CreateObject();
	b->bandwidth(b->ctx, measure, doc);
	lp_api_respond_json(res, measure ? 202 : 200, doc);
}

void lp_api_post_reset(const struct lp_api_backend *b, const struct lp_api_request *req,
		       const struct lp_peer *p, pid_t pid, struct lp_api_response *res)
{
	cJSON *doc;
	int ret;

	if (!lp_api_need_privilege(b, p, "reset", res) ||
	    !no_body(req, LP_ROUTE_PROCESSES "/PID/" LP_ROUTE_RESET, res))
		return;
	ret = b->reset(b->ctx, pid);
	if (ret == -ESRCH) {
		lp_api_not_tracked(res, pid);
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
	lp_api_respond_json(res, 200, doc);
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

void lp_api_post_precise(const struct lp_api_backend *b, const struct lp_api_request *req,
			 pid_t pid, struct lp_api_response *res)
{
	double seconds;
	cJSON *doc;
	bool on;
	int ret;

	on = true;
	seconds = 60;
	if (!lp_api_need_privilege(b, req->peer, "precise mode", res) ||
	    parse_flag_seconds(req, "enable", &on, &seconds, LP_PRECISE_MAX_SECONDS, true, NULL,
			       NULL, res) < 0)
		return;
	doc = cJSON_CreateObject();
	cJSON_AddNumberToObject(doc, "pid", pid);
	ret = b->precise(b->ctx, pid, on, seconds, doc);
	if (ret == 0) {
		lp_api_respond_json(res, 200, doc);
		return;
	}
	cJSON_Delete(doc);
	if (ret == -ESRCH)
		lp_api_not_tracked(res, pid);
	else if (ret == -ENODATA)
		lp_api_error(res, 409, LP_ERR_EXITED, "pid %d has exited", (int)pid);
	else if (ret == -ENOEXEC)
		lp_api_error(res, 409, LP_ERR_NOT_LLM,
			     "pid %d runs no engine llmprofd knows (ggml, torch): precise mode "
			     "probes an engine's functions",
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

void lp_api_post_record(const struct lp_api_backend *b, const struct lp_api_request *req, pid_t pid,
			struct lp_api_response *res)
{
	double seconds = LP_RECORD_DEFAULT_SECONDS, lease = 0;
	bool ops = true, perfetto = false;
	struct lp_stream *stream = NULL;
	cJSON *doc;
	int ret;

	if (!lp_api_need_privilege(b, req->peer, "recording a timeline", res))
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
			lp_api_respond_json(res, 202, doc);
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
		lp_api_respond_json(res, 202, doc);
	} else if (ret == -ESRCH) {
		lp_api_not_tracked(res, pid);
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

void lp_api_get_record(const struct lp_api_backend *b, const struct lp_peer *p, pid_t pid,
		       struct lp_api_response *res)
{
	double remaining = 0;
	struct lp_body *body = NULL;
	cJSON *doc;
	int ret;

	if (!lp_api_need_privilege(b, p, "recording a timeline", res))
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
		lp_api_respond_json(res, 202, doc);
	} else if (ret == -ENOENT) {
		lp_api_error(res, 404, LP_ERR_NOT_FOUND,
			     "no timeline of pid %d: start one with POST %s/%d/%s", (int)pid,
			     LP_ROUTE_PROCESSES, (int)pid, LP_ROUTE_RECORD);
	} else {
		lp_api_error(res, 500, LP_ERR_INTERNAL, "the timeline of pid %d: %s", (int)pid,
			     strerror(-ret));
	}
}
