/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* The HTTP transport: evhttp on the Unix socket (bound here or handed over by systemd) and
 * on the optional TCP /metrics listener; peer credentials, connection cap, per-connection
 * deadline, and JSON for every error evhttp raises by itself. */
#ifndef LLMPROF_SERVER_H
#define LLMPROF_SERVER_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "serving/api.h"
#include "serving/listener.h"

struct event_base;
struct lp_server;
struct lp_webconfig;

struct lp_server_opts {
	const char *socket_path; /* bound here unless activated_fd >= 0 */
	int activated_fd;	 /* a listening socket from systemd, or -1 */
	mode_t socket_mode;
	const char *socket_group;    /* group owner of the socket; its members are privileged */
	const char *metrics_address; /* "host:port" for TCP /metrics, NULL or "" for none */
	uint32_t max_connections;
	/* Each listener's budget, apart: connections one unprivileged uid (or, on TCP, one
	 * address of another host) may hold; unprivileged peers together stay below
	 * max_connections less LP_SERVER_PRIVILEGED_ROOM, so root and the group always get in. */
	uint32_t max_per_uid;
	uint32_t timeout_s; /* a connection gets this long per request, slow or not */
	/* --web-config-file for the TCP listener (TLS, basic auth, headers), or NULL; the
	 * server owns it from here on. */
	struct lp_webconfig *web;
};

/* Listens; returns 0 or -errno (logged). The backend must outlive the server. */
int lp_server_start(struct lp_server **out, struct event_base *base, const struct lp_server_opts *o,
		    const struct lp_api_backend *b);

/* SIGHUP: the connection caps and the deadline (of o) apply to new connections. */
void lp_server_set_limits(struct lp_server *s, const struct lp_server_opts *o);

/* SIGHUP: a web configuration read again (NULL: none) replaces the current one for new
 * connections and requests; the server owns it. Returns 0, or -errno when its TLS settings
 * do not load (logged; the current one stays and w is freed). */
int lp_server_set_webconfig(struct lp_server *s, struct lp_webconfig *w);

void lp_server_stats(const struct lp_server *s, struct lp_server_stats *out);

/* Closes the listeners and connections; removes a socket file it created. NULL is fine. */
void lp_server_free(struct lp_server *s);

#endif
