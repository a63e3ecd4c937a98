/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* The connection budget: each listener accepts in batches and pauses at twice its cap;
 * each connection, once its peer is known, is admitted, told 503 (root and the group over
 * the whole budget) or refused before it costs anything (anyone else over their share);
 * a deadline for its first request, then for each reply and the next request. */
#ifndef LLMPROF_CONN_H
#define LLMPROF_CONN_H

#include "serving/listener.h"

/* evhttp's bufferevent callback (evhttp_set_bevcb): a new connection of the listener arg. */
struct bufferevent *lp_conn_new(struct event_base *base, void *arg);

/* The next turn of the loop after a batch: the listener arg accepts again. */
void lp_listener_on_resume(evutil_socket_t fd, short what, void *arg);

/* Who is at the other end (peer.h), and, for an unknown TCP peer, its address. */
void lp_conn_read_peer(struct conn *c);

/* A deadline: the header timeout for the first request, else --http-timeout. */
void lp_conn_deadline(struct conn *c, bool first);

/* The connection a request came on; NULL when it is not one of ours. */
struct conn *lp_conn_of(struct lp_server *s, struct evhttp_request *req);

void lp_conn_free(struct conn *c);

#endif
