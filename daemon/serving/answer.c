// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* Every answer of the API: a JSON document, or a JSON error with a fitting status, always
 * valid UTF-8; and the one rule of who sees and changes what. */
#include "serving/answer.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "escape.h"
#include "base/log.h"
#include "llmprof/protocol.h"

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

void lp_api_respond_json(struct lp_api_response *res, int status, cJSON *doc)
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
	lp_api_respond_json(res, status, doc);
	res->allow[0] = 0;
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
bool lp_api_visible(const struct lp_peer *p, const struct lp_target *t)
{
	return p->privileged || (p->known && t->uid != (uid_t)-1 && t->uid == p->uid);
}

/* Drops the views the peer may not see. */
/* Puts the processes p may see first, in their order, and makes them all r holds; returns
 * the whole count, to be set back before r is freed: the others are still r's to free
 * (their threads, ops and findings alike). */
size_t lp_api_filter_visible(struct lp_report *r, const struct lp_peer *p)
{
	size_t n = 0, all = r->nprocs;

	for (size_t i = 0; i < all; i++)
		if (lp_api_visible(p, r->procs[i].target)) {
			struct lp_proc_view v = r->procs[n];

			r->procs[n++] = r->procs[i];
			r->procs[i] = v;
		}
	r->nprocs = n;
	return all;
}

void lp_api_not_tracked(struct lp_api_response *res, pid_t pid)
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

bool lp_api_need_privilege(const struct lp_api_backend *b, const struct lp_peer *p,
			   const char *what, struct lp_api_response *res)
{
	if (p->privileged)
		return true;
	lp_api_error(res, 403, LP_ERR_FORBIDDEN,
		     "%s needs root or membership of group '%s' (you are uid %u)", what,
		     group_of(b), (unsigned)p->uid);
	return false;
}

bool lp_api_url_decode(char *s)
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
