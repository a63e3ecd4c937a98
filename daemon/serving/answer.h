/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* What every route of the API works with: who asks, what the daemon does for it, the request
 * and its answer; answers as JSON documents or JSON errors, always valid UTF-8; and the one
 * rule of who sees and changes what. */
#ifndef LLMPROF_ANSWER_H
#define LLMPROF_ANSWER_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <sys/types.h>

#include "base/body.h"
#include "base/config.h"
#include "base/stream.h"
#include "profile/window.h"
#include "report/report.h"

/* Who is asking. */
struct lp_peer {
	bool unix_socket; /* false: the TCP listener, which serves /metrics only */
	bool known;	  /* uid is who it is: Unix credentials, or a loopback socket's owner */
	uid_t uid;
	pid_t pid;
	bool privileged; /* root or a member of LP_GROUP: sees everything, may change state */
	/* TCP: the credentials did not match (401 with a challenge), or nobody can be known
	 * and nothing allows an unknown peer (403): see webconfig.h. */
	bool auth_failed;
	bool denied;
};

/* What the daemon does for the API. Each returns 0 or -errno. */
struct lp_api_backend {
	void *ctx;
	/* A report of every tracked process (pid 0) or of one; freed by report_free. */
	int (*report)(void *ctx, pid_t pid, struct lp_report *r);
	void (*report_free)(void *ctx, struct lp_report *r);
	/* Adds the daemon's own facts (uptime, probes, configuration) to the status object. */
	void (*status)(void *ctx, cJSON *o);
	/* -ESRCH: not tracked. */
	int (*reset)(void *ctx, pid_t pid);
	/* -ESRCH: not tracked; -ENODATA: exited; -ENOEXEC: not a ggml process. On success
	 * (and only then) adds the precise-mode state to o. */
	int (*precise)(void *ctx, pid_t pid, bool on, double seconds, cJSON *o);
	/* A timeline record: lp_record_start's, lp_record_stop's and lp_record_fetch's
	 * returns. With stream, the trace is streamed as it is recorded (Perfetto's format),
	 * and *stream is the answer's. */
	int (*record_start)(void *ctx, pid_t pid, double seconds, bool ops, double lease,
			    struct lp_stream **stream);
	int (*record_stop)(void *ctx, pid_t pid);
	int (*record_fetch)(void *ctx, pid_t pid, struct lp_body **body, double *remaining);
	/* A profile window (profile/profiler.h's lp_profile_start), its deferred answer in
	 * *out. */
	int (*profile_start)(void *ctx, const struct lp_profile_query *q, struct lp_stream **out);
	/* The host's memory bandwidth into o; with measure, a measurement is started first. */
	void (*bandwidth)(void *ctx, bool measure, cJSON *o);
	const char *group; /* the group whose members are privileged, for messages */
	/* The live settings (a reload changes them in place): /metrics reads its own. */
	const struct lp_config *cfg;
	double start_time;
};

struct lp_api_request {
	const char *method; /* "GET", "POST", ... */
	const char *uri;    /* path and query, as sent */
	const char *accept; /* the Accept header, NULL when none */
	const char *body;
	size_t body_len;
	const struct lp_peer *peer;
};

struct lp_api_response {
	int status;
	const char *reason;
	const char *content_type;
	char allow[48]; /* for 405: the methods the path takes */
	char *body;	/* malloc'd, or shared's */
	size_t len;
	struct lp_body *shared; /* a body kept by its owner too: one reference is the answer's */
	/* An answer written as it is made (200, content_type; body NULL): the reference is
	 * the answer's. */
	struct lp_stream *stream;
};

/* A JSON error document: for the transport's own refusals too. */
void lp_api_error(struct lp_api_response *res, int status, const char *code, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));

void lp_api_response_free(struct lp_api_response *res);

/* doc (taken, may be NULL: out of memory) as the answer, with a newline at its end. */
void lp_api_respond_json(struct lp_api_response *res, int status, cJSON *doc);

/* Root and members of the group see every process; any other peer whose uid is known sees
 * that uid's processes; a peer nobody knows sees none. */
bool lp_api_visible(const struct lp_peer *p, const struct lp_target *t);

/* Puts the processes p may see first, in their order, and makes them all r holds; returns
 * the whole count, to be set back before r is freed. */
size_t lp_api_filter_visible(struct lp_report *r, const struct lp_peer *p);

/* A query's value, %XX and + decoded in place; false on a bad escape (or %00). */
bool lp_api_url_decode(char *s);

/* 404: pid is not tracked (or not the peer's to see: a 403 would tell that it is). */
void lp_api_not_tracked(struct lp_api_response *res, pid_t pid);

/* True when p is privileged; else res holds the 403 naming what needed it. */
bool lp_api_need_privilege(const struct lp_api_backend *b, const struct lp_peer *p,
			   const char *what, struct lp_api_response *res);

#endif
