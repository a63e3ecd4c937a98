// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* libFuzzer target: raw bytes from a client into the real HTTP stack (evhttp, the error-page
 * rewrite of server.c, routing and body parsing of api.c, JSON and Prometheus rendering),
 * over a real Unix socket. The backend holds a fixed report of two processes.
 *
 * Invariants checked on every input, beyond the sanitizers' own: the daemon answers with
 * complete HTTP responses only, and every response body that is not /metrics is a JSON
 * document (an error has "error.code"). */
#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "serving/api.h"
#include "base/log.h"
#include "serving/server.h"

static struct event_base *base;
static struct lp_server *server;
static struct lp_api_backend backend;
static struct lp_config cfg = {.metrics_max_processes = 1};
static char sock_path[108];
static struct lp_target targets[2];

static int fake_report(void *ctx, pid_t pid, struct lp_report *r)
{
	(void)ctx;
	memset(r, 0, sizeof(*r));
	r->now_ns = 5000000000ULL;
	r->sample_hz = 199;
	r->procs = calloc(2, sizeof(*r->procs));
	if (!r->procs)
		return -ENOMEM;
	for (int i = 0; i < 2; i++) {
		struct lp_proc_view *v = &r->procs[r->nprocs];

		if (pid && targets[i].pid != pid)
			continue;
		v->target = &targets[i];
		v->live = !targets[i].exited;
		v->stats.ctr[LP_C_ONCPU_NS] = 123456789;
		v->stats.hist[LP_H_RUNQ].buckets[100] = 3;
		v->stats.hist[LP_H_RUNQ].sum_ns = 3000;
		r->nprocs++;
	}
	return 0;
}

static void fake_report_free(void *ctx, struct lp_report *r)
{
	(void)ctx;
	free(r->procs);
	r->procs = NULL;
}

static void fake_status(void *ctx, cJSON *o)
{
	(void)ctx;
	cJSON_AddNumberToObject(o, "uptime_seconds", 1);
}

static int fake_reset(void *ctx, pid_t pid)
{
	(void)ctx;
	return pid == 100 || pid == 200 ? 0 : -ESRCH;
}

/* pid 100 records (202), then has a trace; 200 has exited; others are not tracked. */
static int fake_record_start(void *ctx, pid_t pid, double seconds, bool ops, double lease,
			     struct lp_stream **stream)
{
	(void)ctx;
	(void)seconds;
	(void)ops;
	(void)lease;
	/* Streamed: a few bytes before the transport takes it, and the end. */
	if (pid == 100 && stream) {
		*stream = lp_stream_new("application/x-protobuf");
		if (!*stream)
			return -ENOMEM;
		lp_stream_write(*stream, "\x0a\x02\x50\x01", 4);
		lp_stream_end(*stream);
	}
	return pid == 100 ? 0 : pid == 200 ? -ENODATA : -ESRCH;
}

static int fake_record_stop(void *ctx, pid_t pid)
{
	(void)ctx;
	return pid == 100 ? 0 : -ENOENT;
}

static int fake_record_fetch(void *ctx, pid_t pid, struct lp_body **body, double *remaining)
{
	char *text;

	(void)ctx;
	*remaining = 1;
	if (pid != 100)
		return -ENOENT;
	text = strdup("{\"traceEvents\":[]}");
	*body = text ? lp_body_wrap(text, strlen(text)) : NULL;
	return *body ? 0 : -ENOMEM;
}

static int fake_precise(void *ctx, pid_t pid, bool on, double seconds, cJSON *o)
{
	(void)ctx;
	if (pid == 200)
		return -ENODATA;
	if (pid != 100)
		return -ESRCH;
	cJSON_AddBoolToObject(o, "active", on);
	cJSON_AddNumberToObject(o, "seconds", seconds);
	return 0;
}

static void remove_socket(void)
{
	unlink(sock_path);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	struct lp_server_opts o = {.activated_fd = -1,
				   .socket_mode = 0600,
				   .socket_group = "",
				   .metrics_address = "",
				   .max_connections = 64,
				   .max_per_uid = 64,
				   .timeout_s = 5};

	(void)argc;
	(void)argv;
	lp_log_init("fuzz_http");
	lp_log_set_level(LOG_CRIT);
	targets[0] = (struct lp_target){.pid = 100,
					.comm = "llama-server",
					.uid = 0,
					.matched_by = "ggml",
					.tracked_since_ns = 1000000000ULL};
	targets[0].exe = "/usr/bin/llama-\"server\"\n";
	targets[1] = (struct lp_target){.pid = 200,
					.comm = "gone",
					.uid = 1000,
					.exited = true,
					.exited_at_ns = 2000000000ULL,
					.matched_by = "pid"};
	backend = (struct lp_api_backend){.report = fake_report,
					  .report_free = fake_report_free,
					  .status = fake_status,
					  .reset = fake_reset,
					  .precise = fake_precise,
					  .record_start = fake_record_start,
					  .record_fetch = fake_record_fetch,
					  .record_stop = fake_record_stop,
					  .cfg = &cfg};
	snprintf(sock_path, sizeof(sock_path), "/tmp/fuzz_http.%d.sock", (int)getpid());
	atexit(remove_socket);
	o.socket_path = sock_path;
	base = event_base_new();
	if (!base || lp_server_start(&server, base, &o, &backend) < 0)
		abort();
	return 0;
}

/* A streamed answer's body (the fake record's 4 bytes): well-formed chunks to the last
 * one. Returns its length on the wire, or 0 when it was cut short by our own close. */
static size_t check_chunked(const char *p, size_t len)
{
	size_t off = 0, payload = 0;

	for (;;) {
		const char *eol = memmem(p + off, len - off, "\r\n", 2);
		char *end;
		unsigned long n;

		if (!eol)
			return 0;
		n = strtoul(p + off, &end, 16);
		if (end == p + off || end != eol)
			abort();
		off = (size_t)(eol - p) + 2;
		if (len - off < n + 2)
			return 0;
		if (memcmp(p + off + n, "\r\n", 2) != 0)
			abort();
		off += n + 2;
		payload += n;
		if (!n)
			break;
	}
	if (payload != 4)
		abort();
	return off;
}

/* Every response in out must be a whole one, with a JSON body unless it is the metrics or a
 * streamed record. */
static void check_responses(const char *out, size_t len)
{
	while (len > 0) {
		const char *end = memmem(out, len, "\r\n\r\n", 4), *cl;
		size_t head, body;
		int status;

		if (strncmp(out, "HTTP/", 5) != 0 || !end ||
		    sscanf(out, "HTTP/%*d.%*d %d", &status) != 1)
			abort();
		head = (size_t)(end - out) + 4;
		cl = memmem(out, head, "Content-Length: ", 16);
		/* Without a length (answers to HTTP/1.0), the close ends the body. An answer to
		 * HEAD has GET's length and no body: the next answer, or the end, follows its
		 * head at once (a JSON body never starts with "HTTP/"). */
		body = cl ? strtoul(cl + 16, NULL, 10) : len - head;
		if (cl && (len == head || (len - head >= 5 && memcmp(end + 4, "HTTP/", 5) == 0)))
			body = 0;
		if (memmem(out, head, "application/x-protobuf", 22)) {
			if (!memmem(out, head, "Transfer-Encoding: chunked", 26))
				return; /* HTTP/1.0: the close ends it */
			if (!(body = check_chunked(out + head, len - head)))
				return;
			out += head + body;
			len -= head + body;
			continue;
		}
		if (head + body > len)
			return; /* cut short by our own close of the client side */
		if (status != 100 && !memmem(out, head, "text/plain; version=0.0.4", 25)) {
			cJSON *doc = cJSON_ParseWithLength(out + head, body);

			/* HEAD replies carry no body. */
			if (body && !doc)
				abort();
			if (doc && status >= 400 &&
			    !cJSON_IsString(
				    cJSON_GetObjectItem(cJSON_GetObjectItem(doc, "error"), "code")))
				abort();
			cJSON_Delete(doc);
		}
		out += head + body;
		len -= head + body;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	char out[1 << 16];
	size_t got = 0;
	int fd;

	strcpy(sa.sun_path, sock_path);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		abort();
	fcntl(fd, F_SETFL, O_NONBLOCK);
	if (size && send(fd, data, size, MSG_NOSIGNAL) < 0 && errno != EAGAIN)
		abort();
	/* Turn the daemon's loop until it has answered and closed, or gone quiet (an
	 * incomplete request: the daemon waits for the rest). No half-close: evhttp drops
	 * what it has not written yet when it reads EOF. */
	for (int idle = 0; idle < 20 && got < sizeof(out);) {
		ssize_t n;

		event_base_loop(base, EVLOOP_NONBLOCK);
		n = recv(fd, out + got, sizeof(out) - got, 0);
		if (n == 0)
			break;
		if (n > 0) {
			got += (size_t)n;
			idle = 0;
		} else {
			idle++;
			usleep(100);
		}
	}
	close(fd);
	/* Let the server see the close. */
	for (int i = 0; i < 3; i++)
		event_base_loop(base, EVLOOP_NONBLOCK);
	check_responses(out, got);
	return 0;
}
