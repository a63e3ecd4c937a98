// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* Requests to the daemon whose every failure ends in one line a user can act on, and the
 * exit status llmprofctl(1) documents for it. */
#include <errno.h>
#include <grp.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "llmprof/protocol.h"
#include "llmprofctl.h"

static int say(char *msg, size_t n, int status, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static int say(char *msg, size_t n, int status, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, n, fmt, ap);
	va_end(ap);
	return status;
}

/* The group that owns the socket, which is the one that grants access. */
static void socket_group(const char *path, char *out, size_t n)
{
	struct stat st;
	struct group *g;

	if (stat(path, &st) == 0 && (g = getgrgid(st.st_gid)) && st.st_gid != 0)
		snprintf(out, n, "%s", g->gr_name);
	else
		snprintf(out, n, "%s", LP_GROUP);
}

static int transport_error(const struct ctl *c, int err, char *msg, size_t n)
{
	/* How to start it depends on the init system: systemd when it runs (sd_booted's test). */
	const char *start =
		access("/run/systemd/system", F_OK) == 0
			? "is llmprofd running? Start it with 'systemctl start "
			  "llmprofd', or point --socket or $" LP_SOCKET_ENV " at its socket"
			: "is llmprofd running? As root, apart from this shell (no systemd here): "
			  "'setsid -f llmprofd --foreground </dev/null >>/var/log/llmprofd.log "
			  "2>&1'; or point --socket or $" LP_SOCKET_ENV " at its socket";
	char group[64];

	switch (err) {
	case ENOENT:
	case ENOTDIR:
		return say(msg, n, CTL_UNREACHABLE,
			   "cannot connect to llmprofd at %s: no such socket; %s", c->socket,
			   start);
	case ECONNREFUSED:
		return say(msg, n, CTL_UNREACHABLE,
			   "cannot connect to llmprofd at %s: connection refused (nothing listens "
			   "there); %s",
			   c->socket, start);
	case EACCES:
	case EPERM:
		socket_group(c->socket, group, sizeof(group));
		return say(
			msg, n, CTL_DENIED,
			"permission denied on %s: root and members of group '%s' may use llmprofd "
			"(sudo usermod -aG %s $USER, then log in again)",
			c->socket, group, group);
	case ETIMEDOUT:
		return say(msg, n, CTL_UNREACHABLE,
			   "llmprofd at %s did not answer within %g s (--timeout sets the limit)",
			   c->socket, c->timeout);
	case ENAMETOOLONG:
		return say(msg, n, CTL_USAGE, "socket path too long: %s", c->socket);
	case EPROTO:
		return say(msg, n, CTL_DAEMON,
			   "%s answered something that is not HTTP: is it llmprofd's socket?",
			   c->socket);
	case EFBIG:
		return say(msg, n, CTL_DAEMON, "llmprofd's answer is too large (over 256 MiB)");
	case ECONNRESET:
	case EPIPE:
		return say(msg, n, CTL_DAEMON,
			   "llmprofd at %s closed the connection without answering (see its log: "
			   "journalctl -u llmprofd)",
			   c->socket);
	default:
		return say(msg, n, CTL_UNREACHABLE, "cannot talk to llmprofd at %s: %s", c->socket,
			   strerror(err));
	}
}

/* The daemon's JSON error, in its own words, with the exit status for its code. */
static int api_error(const struct ctl_response *res, char *msg, size_t n)
{
	cJSON *doc = cJSON_Parse(res->body), *e;
	const char *code, *text;
	int status = CTL_DAEMON;

	ctl_sanitize(doc);
	e = cJSON_GetObjectItemCaseSensitive(doc, "error");
	code = ctl_str(e, "code", "");
	text = ctl_str(e, "message", NULL);

	if (res->status == 403)
		status = CTL_DENIED;
	else if (!strcmp(code, LP_ERR_NO_SUCH_PROCESS) || !strcmp(code, LP_ERR_NOT_LLM) ||
		 !strcmp(code, LP_ERR_EXITED))
		status = CTL_NOT_TRACKED;
	if (text && status != CTL_DAEMON)
		say(msg, n, status, "%s", text);
	else if (text)
		say(msg, n, status, "llmprofd answered %d %s: %s", res->status, code, text);
	else
		say(msg, n, status, "llmprofd answered %d without an error document", res->status);
	cJSON_Delete(doc);
	return status;
}

int ctl_request_quiet(const struct ctl *c, const char *method, const char *path, const char *body,
		      cJSON **doc, struct ctl_response *raw, char *msg, size_t msglen)
{
	struct ctl_response res;
	int r = ctl_http(c->socket, c->timeout, method, path, body, &res), status;

	*doc = NULL;
	if (r < 0)
		return transport_error(c, -r, msg, msglen);
	/* 202: accepted, still at work (a timeline being recorded). */
	if (res.status != 200 && res.status != 202) {
		status = api_error(&res, msg, msglen);
		ctl_response_free(&res);
		return status;
	}
	*doc = cJSON_ParseWithLength(res.body, res.len);
	if (!*doc || !cJSON_IsObject(*doc)) {
		cJSON_Delete(*doc);
		*doc = NULL;
		ctl_response_free(&res);
		return say(msg, msglen, CTL_DAEMON,
			   "llmprofd's answer to %s %s is not a JSON object", method, path);
	}
	ctl_sanitize(*doc);
	/* Documents that carry the API version must carry ours: fields may have changed. */
	if (ctl_num(*doc, "api", LP_API_VERSION) != LP_API_VERSION) {
		status = say(msg, msglen, CTL_DAEMON,
			     "llmprofd speaks API version %g, this llmprofctl version %d: install "
			     "matching versions",
			     ctl_num(*doc, "api", 0), LP_API_VERSION);
		cJSON_Delete(*doc);
		*doc = NULL;
		ctl_response_free(&res);
		return status;
	}
	if (raw)
		*raw = res;
	else
		ctl_response_free(&res);
	return CTL_OK;
}

int ctl_request_stream(const struct ctl *c, const char *method, const char *path, const char *body,
		       const struct ctl_stream *sink, bool *complete)
{
	struct ctl_response res;
	int r = ctl_http_stream(c->socket, c->timeout, method, path, body, &res, sink), status;
	char msg[1024];

	*complete = false;
	if (r < 0 && !res.streamed)
		status = transport_error(c, -r, msg, sizeof(msg));
	else if (!res.streamed)
		status = api_error(&res, msg, sizeof(msg));
	else if (r < 0)
		status = say(msg, sizeof(msg), CTL_DAEMON, "reading llmprofd's answer: %s",
			     strerror(-r));
	else
		status = CTL_OK;
	*complete = res.complete;
	ctl_response_free(&res);
	if (status != CTL_OK)
		fprintf(stderr, "%s: %s\n", c->prog, msg);
	return status;
}

int ctl_request_raw(const struct ctl *c, const char *path, double timeout, struct ctl_response *res)
{
	char msg[1024];
	int r = ctl_http(c->socket, timeout, "GET", path, NULL, res), status;

	if (r < 0) {
		status = transport_error(c, -r, msg, sizeof(msg));
	} else if (res->status != 200) {
		status = api_error(res, msg, sizeof(msg));
		ctl_response_free(res);
	} else {
		return CTL_OK;
	}
	fprintf(stderr, "%s: %s\n", c->prog, msg);
	return status;
}

int ctl_request(const struct ctl *c, const char *method, const char *path, const char *body,
		cJSON **doc, struct ctl_response *raw)
{
	char msg[1024];
	int status = ctl_request_quiet(c, method, path, body, doc, raw, msg, sizeof(msg));

	if (status != CTL_OK)
		fprintf(stderr, "%s: %s\n", c->prog, msg);
	return status;
}

int ctl_show(const struct ctl *c, const char *path, bool json,
	     void (*print)(const struct ctl *c, const cJSON *doc, void *arg), void *arg)
{
	struct ctl_response raw;
	cJSON *doc;
	int status = ctl_request(c, "GET", path, NULL, &doc, &raw);

	if (status)
		return status;
	if (json)
		ctl_write_json(stdout, raw.body, raw.len);
	else
		print(c, doc, arg);
	ctl_response_free(&raw);
	cJSON_Delete(doc);
	return CTL_OK;
}
