/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* What the server knows of its listeners and their connections, their limits and its
 * counts: shared by the connection budget (conn.h), the HTTP checks (hygiene.h) and the
 * server (server.h). */
#ifndef LLMPROF_LISTENER_H
#define LLMPROF_LISTENER_H

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/listener.h>
#include <openssl/ssl.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/stream.h"
#include "serving/admit.h"
#include "serving/api.h"
#include "serving/webconfig.h"

#define LP_SERVER_PRIVILEGED_ROOM 16
/* Seconds a new connection has to send its first complete request (when --http-timeout is
 * longer): what a client sends at once, a peer that holds a partial request does not. */
#define LP_SERVER_HEADER_TIMEOUT_S 5

struct lp_server_stats {
	uint64_t connections; /* open now */
	uint64_t accepted;
	uint64_t over_cap;     /* over a budget: too many connections */
	uint64_t over_uid_cap; /* of those, because one uid (or remote address) held too many */
	uint64_t refused;      /* of those, closed at once (all but root's and the group's) */
	/* TCP: connections whose connect(2) the kernel refused (admit.h), and whether it
	 * does: NULL when it does, else why not; "" without a TCP listener. */
	uint64_t refused_in_kernel;
	const char *kernel_admission;
	uint64_t timed_out; /* dropped at the deadline */
	uint64_t requests;
	uint64_t rewritten;    /* evhttp's own error pages turned into JSON */
	uint64_t unauthorized; /* TCP requests refused 401 or 403 */
};

struct lp_server;
/* Connections a listener accepts before the loop turns (see lp_conn_new()). */
#define LP_SERVER_ACCEPT_BATCH 32
/* Each listener has a budget of its own: a flood on the TCP /metrics port leaves the Unix
 * socket alone, and the other way round. */
struct listener {
	struct lp_server *s;
	struct evhttp *http;
	struct evconnlistener *lev;
	bool unix_socket;
	bool paused;	      /* at twice its budget: see listener_pause() */
	bool resting;	      /* took its batch this turn of the loop: see lp_conn_new() */
	uint64_t connections; /* open now */
	/* Admitted connections of unprivileged peers, counted against their shares. */
	struct conn *unpriv;
	uint64_t nunpriv;
	unsigned batch;	      /* accepted this turn of the loop */
	struct event *resume; /* the next turn: accepting again */
};
/* What a new connection is granted once its peer is known (admit() in conn.c). */
enum admission {
	ADMITTED,
	ANSWER_503, /* root or the group over the whole budget: told so, then closed */
	REFUSED,    /* anyone else over their share: closed at once, before any work */
};
struct conn {
	struct conn *prev, *next;
	struct conn *uprev, *unext; /* in l->unpriv */
	struct listener *l;
	struct bufferevent *bev;
	struct evhttp_connection *evcon; /* known from the first turn of the loop on */
	struct evbuffer_cb_entry *out_cb, *in_cb;
	struct event *deadline;
	size_t owned; /* bytes at the head of the output written by our own replies */
	/* The line evhttp read last (a chunk-size line when it fails a chunked body): see
	 * lp_http_on_input(). */
	char last_line[24];
	unsigned eol_run;  /* line ends drained since last_line */
	size_t mirror_len; /* bytes of the input mirrored in mirror[] */
	char mirror[64];
	/* Bytes of the input so far, added and drained by evhttp, and where its first NUL
	 * was (UINT64_MAX: none): see lp_http_on_input(). */
	uint64_t rx, drained, nul_at;
	bool replying; /* inside evhttp_send_reply() for one of our replies */
	/* An answer being streamed (stream.h): its request, until its end is sent. */
	struct lp_stream *stream;
	struct evhttp_request *stream_req;
	enum admission admission;
	bool peer_known;
	struct lp_peer peer;
	/* An unknown TCP peer (not on this host) is counted by its address: family, then
	 * the IPv4 or IPv6 bytes. */
	unsigned char source[17];
};
struct lp_server {
	struct event_base *base;
	const struct lp_api_backend *backend;
	struct listener l[2];
	int nl;
	char *created_path; /* the socket file we bound, removed at the end */
	struct conn *conns;
	uint32_t max_connections, max_per_uid;
	uint32_t timeout_s;
	gid_t group;
	bool have_group;
	struct lp_webconfig *web;
	SSL_CTX *tls;
	struct lp_admit *admit;
	const char *admit_why; /* NULL: admit is on; "": no TCP listener */
	struct lp_server_stats st;
};

#endif
