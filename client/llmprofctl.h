/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* llmprofctl: the thin client of llmprofd. It talks to the daemon's API only
 * (include/llmprof/protocol.h); each command lives in its own client/cmd-*.c. */
#ifndef LLMPROFCTL_H
#define LLMPROFCTL_H

#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stddef.h>
#include <stdint.h>

#include <cjson/cJSON.h>

/* Exit statuses; llmprofctl(1) and `llmprofctl --help` list them. */
enum {
	CTL_OK = 0,
	CTL_NOT_TRACKED = 1, /* the pid is not tracked, has exited, or is not an LLM process */
	CTL_USAGE = 2,	     /* bad command line */
	CTL_UNREACHABLE = 3, /* no daemon at the socket, or no answer in time */
	CTL_DENIED = 4,	     /* the socket or the daemon refused: not root nor in the group */
	CTL_DAEMON = 5,	     /* the daemon answered with an error, or with something unexpected */
	/* doctor: the worst finding of the processes examined, where no error came first */
	CTL_FINDING_WARNING = 6,
	CTL_FINDING_CRITICAL = 7,
};

struct ctl {
	const char *prog;   /* "llmprofctl", for messages */
	const char *socket; /* --socket, else $LLMPROF_SOCKET, else LP_SOCKET_PATH */
	double timeout;	    /* seconds for each request */
};

struct ctl_cmd {
	const char *name;
	const char *usage;    /* after "llmprofctl NAME" */
	const char *summary;  /* one line, for `llmprofctl --help` */
	const char *help;     /* options and examples, for `llmprofctl NAME --help` */
	const char *shortopt; /* getopt short options besides the common ones */
	const void *longopts; /* struct option[], ending with the common ones (CTL_COMMON_OPTS) */
	int operands;	      /* arguments after the options it takes at most (diff: 2) */
	int (*exec)(struct ctl *c, int argc, char **argv);
};

extern const struct ctl_cmd ctl_cmd_top, ctl_cmd_dump, ctl_cmd_list, ctl_cmd_status, ctl_cmd_reset,
	ctl_cmd_precise, ctl_cmd_record, ctl_cmd_doctor, ctl_cmd_diff, ctl_cmd_requests,
	ctl_cmd_ops, ctl_cmd_flame;

/* Options every command takes; their getopt values are above the printable range. */
enum { CTL_OPT_SOCKET = 0x100, CTL_OPT_TIMEOUT, CTL_OPT_HELP };
#define CTL_COMMON_OPTS                                                \
	{"socket", required_argument, NULL, CTL_OPT_SOCKET},           \
		{"timeout", required_argument, NULL, CTL_OPT_TIMEOUT}, \
		{"help", no_argument, NULL, CTL_OPT_HELP},             \
	{                                                              \
		NULL, 0, NULL, 0                                       \
	}

/* The next option of a command (getopt_long over cmd's options); the common ones are applied
 * here. Returns the option, -1 at the end, or -2 with *status set when the command is to
 * stop: after --help (CTL_OK) or a usage error (CTL_USAGE, already reported). */
int ctl_getopt(struct ctl *c, const struct ctl_cmd *cmd, int argc, char **argv, int *status);
/* Reports a usage error for cmd and returns CTL_USAGE. */
int ctl_usage_error(const struct ctl *c, const struct ctl_cmd *cmd, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Checked parsing: 0, or a usage error reported. */
int ctl_parse_pid(const struct ctl *c, const struct ctl_cmd *cmd, const char *s, int *pid);
/* The API path of a process, /v1/processes/PID[/action], into buf; a usage error when no
 * --pid was given (pid 0). */
int ctl_process_path(const struct ctl *c, const struct ctl_cmd *cmd, int pid, const char *action,
		     char *buf, size_t len);
/* Numbers from min to max (above min: _above), or a usage error naming the range. */
int ctl_parse_seconds(const struct ctl *c, const struct ctl_cmd *cmd, const char *opt,
		      const char *s, double min, double max, double *out);
int ctl_parse_seconds_above(const struct ctl *c, const struct ctl_cmd *cmd, const char *opt,
			    const char *s, double min, double max, double *out);
int ctl_parse_percent(const struct ctl *c, const struct ctl_cmd *cmd, const char *opt,
		      const char *s, double min, double max, double *out);
int ctl_parse_count(const struct ctl *c, const struct ctl_cmd *cmd, const char *opt, const char *s,
		    long min, long max, long *out);

/* http.c: one request on a new connection to the daemon's socket. */
struct ctl_response {
	int status; /* HTTP status */
	char *body; /* NUL-terminated */
	size_t len; /* body bytes */
	/* ctl_http_stream: a 200 answer went to the sink (body NULL), to its end if complete */
	bool streamed, complete;
};

/* Where a streamed answer goes: write takes each piece of the body as it comes (0 or
 * -errno, which ends it); tick, if set, is called at least four times a second. */
struct ctl_stream {
	int (*write)(void *arg, const void *p, size_t n);
	void (*tick)(void *arg);
	void *arg;
};
/* 0 with res filled, or -errno: the connection failed (ENOENT, ECONNREFUSED, EACCES, ...),
 * timed out (ETIMEDOUT), or the answer was not HTTP (EPROTO) or too large (EFBIG). */
int ctl_http(const char *socket_path, double timeout, const char *method, const char *path,
	     const char *body, struct ctl_response *res);
/* Seconds of CLOCK_MONOTONIC: deadlines, progress, refresh intervals. */
double ctl_now_s(void);
void ctl_response_free(struct ctl_response *res);
/* As ctl_http, but a 200 answer's body goes to sink as it comes, with no deadline once its
 * headers are in (other answers are read whole into res). */
int ctl_http_stream(const char *socket_path, double timeout, const char *method, const char *path,
		    const char *body, struct ctl_response *res, const struct ctl_stream *sink);

/* request.c: a request whose failures are reported in words a user can act on. Returns
 * CTL_OK with *doc parsed (and *raw kept when raw is not NULL: the body unchanged), or the
 * exit status after printing why. */
int ctl_request(const struct ctl *c, const char *method, const char *path, const char *body,
		cJSON **doc, struct ctl_response *raw);
/* GET path, whatever its body is (a profile: gzip'ed protobuf, or text), waiting up to
 * timeout seconds; an error reported as ctl_request reports it. */
int ctl_request_raw(const struct ctl *c, const char *path, double timeout,
		    struct ctl_response *res);
/* GET path and print it: the body unchanged with json, else through print. The exit status. */
int ctl_show(const struct ctl *c, const char *path, bool json,
	     void (*print)(const struct ctl *c, const cJSON *doc, void *arg), void *arg);
/* The same, silent: the error message goes to msg instead (for top's status line). */
int ctl_request_quiet(const struct ctl *c, const char *method, const char *path, const char *body,
		      cJSON **doc, struct ctl_response *raw, char *msg, size_t msglen);
/* A request whose 200 answer is streamed to sink (ctl_http_stream); errors printed as
 * ctl_request prints them. *complete: the answer came to its end. */
int ctl_request_stream(const struct ctl *c, const char *method, const char *path, const char *body,
		       const struct ctl_stream *sink, bool *complete);

/* format.c: numbers for people. Each writes into buf (NUL-terminated) and returns buf. */
/* A duration in ns, 3 significant digits and a unit: "812ns", "5.89us", "6.03ms", "1.5s". */
char *ctl_fmt_dur(char *buf, size_t n, double ns);
/* The same in at most 5 characters, 2 significant digits: "5.9us", "59ms", "590ms". */
char *ctl_fmt_dur5(char *buf, size_t n, double ns);
/* A non-negative quantity in at most 5 characters: "0.25", "23.4", "1234", "12k", "1.2M". */
char *ctl_fmt_num5(char *buf, size_t n, double v);
/* Seconds as "59.1s", "12m03s", "3h02m", "4d03h". */
char *ctl_fmt_age(char *buf, size_t n, double seconds);
/* Bytes as "812B", "15.0KiB", "4.6MiB". */
char *ctl_fmt_bytes(char *buf, size_t n, double bytes);

/* JSON accessors: a missing or mistyped member reads as def / NULL. */
double ctl_num(const cJSON *o, const char *key, double def);
double ctl_num_path(const cJSON *o, const char *a, const char *b, double def);
const char *ctl_str(const cJSON *o, const char *key, const char *def);
bool ctl_true(const cJSON *o, const char *key);
/* A process document's figures of its engine: doc[doc.engine] ("ggml": a report written
 * before there were other engines has no "engine"). NULL where it runs none. */
const cJSON *ctl_engine_doc(const cJSON *doc);
/* Every string (and key) of a document from the daemon, escaped in place for the terminal:
 * names of processes, files and symbols come from other users (escape.h). */
void ctl_sanitize(cJSON *o);
/* A JSON document as received, with DEL, C1 controls and bytes that are not UTF-8 written
 * as \u escapes: the same JSON, safe on a terminal. */
void ctl_write_json(FILE *f, const char *s, size_t len);
/* A document of the client's own on stdout (indented, or on one line with compact) and a
 * newline, written as ctl_write_json writes: CTL_OK, or CTL_DAEMON out of memory. */
int ctl_print_json(const cJSON *o, bool compact);

/* wait.c: commands that wait on a window. After ctl_catch_interrupt(), the first Ctrl-C
 * (or SIGTERM) sets ctl_interrupted and ends a ctl_nap() early; the second ends the
 * command as usual. */
extern volatile sig_atomic_t ctl_interrupted;
void ctl_catch_interrupt(void);
void ctl_nap(double seconds);

/* hist.c: the API's histogram documents ({"count","sum","max","p50",...,"buckets":
 * [[lower, upper|null, count], ...]}), and percentiles over them or over the difference of
 * two reads, by the daemon's rule (the midpoint of the bucket, capped at the maximum). */
struct ctl_bucket {
	uint64_t lo, hi; /* hi == UINT64_MAX for the open last bucket */
	uint64_t count;
};
struct ctl_hist {
	struct ctl_bucket *b;
	size_t n;
	uint64_t count, sum, max;
};
/* 0, or -EINVAL for a document that is not a histogram, -ENOMEM. An absent doc is empty. */
int ctl_hist_parse(const cJSON *doc, struct ctl_hist *h);
/* out = now - before, bucket by bucket (before's buckets matched by their lower bound);
 * -ESTALE when before has counts now lacks (a reset in between). */
int ctl_hist_delta(const struct ctl_hist *now, const struct ctl_hist *before, struct ctl_hist *out);
/* The q-quantile in ns; NAN for an empty histogram. */
double ctl_hist_quantile(const struct ctl_hist *h, double q);
void ctl_hist_free(struct ctl_hist *h);

#endif
