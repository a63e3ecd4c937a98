// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* The connection budget (conn.h). */
#include "serving/conn.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent_ssl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <netinet/in.h>

#include "base/log.h"
#include "llmprof/protocol.h"
#include "serving/hygiene.h"
#include "serving/peer.h"

void lp_conn_read_peer(struct conn *c)
{
	struct lp_server *s = c->l->s;
	int fd = bufferevent_getfd(c->bev), r;

	c->peer_known = true;
	c->peer.unix_socket = c->l->unix_socket;
	c->peer.uid = (uid_t)-1;
	if (fd < 0)
		return;
	if (c->l->unix_socket) {
		r = lp_peer_unix(fd, s->have_group, s->group, &c->peer);
		if (r < 0)
			log_warning_errno(r, "read peer credentials: %m; treating the peer as "
					     "unprivileged");
		return;
	}
	r = lp_peer_tcp(fd, s->have_group, s->group, &c->peer);
	if (r < 0 && r != -EADDRNOTAVAIL)
		log_warning_errno(r, "find the local owner of a /metrics connection: %m; it sees "
				     "no process");
	if (!c->peer.known) {
		struct sockaddr_storage ss;
		socklen_t len = sizeof(ss);

		if (getpeername(fd, (struct sockaddr *)&ss, &len) < 0)
			return;
		c->source[0] = (unsigned char)ss.ss_family;
		if (ss.ss_family == AF_INET)
			memcpy(c->source + 1, &((struct sockaddr_in *)&ss)->sin_addr, 4);
		else if (ss.ss_family == AF_INET6)
			memcpy(c->source + 1, &((struct sockaddr_in6 *)&ss)->sin6_addr, 16);
	}
}

static bool same_source(const struct conn *a, const struct conn *b)
{
	if (a->peer.known != b->peer.known)
		return false;
	return a->peer.known ? a->peer.uid == b->peer.uid
			     : memcmp(a->source, b->source, sizeof(a->source)) == 0;
}

/* What a new connection gets, on its listener's budget alone. Root and the group are held
 * to the whole budget; the others leave LP_SERVER_PRIVILEGED_ROOM of it free, and one
 * source (a uid, or the address of a peer on another host) may hold max_per_uid, so that no
 * local user can starve root, the group or another user (a Prometheus server). */
static enum admission admit(struct conn *c)
{
	struct listener *l = c->l;
	struct lp_server *s = l->s;
	uint64_t unpriv = 0, same = 0;
	uint32_t room = s->max_connections > 2 * LP_SERVER_PRIVILEGED_ROOM
				? s->max_connections - LP_SERVER_PRIVILEGED_ROOM
				: (s->max_connections + 1) / 2;

	if (c->peer.privileged) {
		if (l->connections <= s->max_connections)
			return ADMITTED;
		s->st.over_cap++;
		return ANSWER_503;
	}
	unpriv = l->nunpriv;
	for (struct conn *o = l->unpriv; o; o = o->unext)
		same += same_source(o, c);
	if (same >= s->max_per_uid) {
		s->st.over_cap++;
		s->st.over_uid_cap++;
		return REFUSED;
	}
	if (unpriv >= room || l->connections > s->max_connections) {
		s->st.over_cap++;
		return REFUSED;
	}
	c->unext = l->unpriv;
	if (l->unpriv)
		l->unpriv->uprev = c;
	l->unpriv = c;
	l->nunpriv++;
	return ADMITTED;
}

/* The hard stop: a listener with twice its budget open accepts no more (the kernel's backlog
 * holds them) until some close. Connections over the budget are closed at their first turn,
 * so only a burst faster than the loop reaches it. */
static void listener_pause(struct listener *l, bool pause)
{
	if (pause == l->paused)
		return;
	l->paused = pause;
	if (pause)
		evconnlistener_disable(l->lev);
	else if (!l->resting)
		evconnlistener_enable(l->lev);
	if (pause)
		log_warning("%" PRIu64 " connections open on the %s, twice the cap: not accepting "
			    "more there until some close",
			    l->connections, l->unix_socket ? "socket" : "TCP listener");
}

void lp_listener_on_resume(evutil_socket_t fd, short what, void *arg)
{
	struct listener *l = arg;

	(void)fd;
	(void)what;
	l->resting = false;
	l->batch = 0;
	if (!l->paused)
		evconnlistener_enable(l->lev);
}

void lp_conn_free(struct conn *c)
{
	struct lp_server *s = c->l->s;

	if (c->evcon)
		evhttp_connection_set_closecb(c->evcon, NULL, NULL);
	/* Its producer stops: nobody reads any more. A connection that failed (the peer went
	 * away) left the request to us, detached from it: ending it frees it. Otherwise it
	 * is still the connection's, which frees it right after this callback. */
	if (c->stream) {
		lp_stream_gone(c->stream);
		lp_stream_put(c->stream);
		if (!evhttp_request_get_connection(c->stream_req))
			evhttp_send_reply_end(c->stream_req);
	}
	if (c->out_cb)
		evbuffer_remove_cb_entry(bufferevent_get_output(c->bev), c->out_cb);
	if (c->in_cb)
		evbuffer_remove_cb_entry(bufferevent_get_input(c->bev), c->in_cb);
	event_free(c->deadline);
	if (c->prev)
		c->prev->next = c->next;
	else
		s->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	if (c->uprev || c->l->unpriv == c) {
		if (c->uprev)
			c->uprev->unext = c->unext;
		else
			c->l->unpriv = c->unext;
		if (c->unext)
			c->unext->uprev = c->uprev;
		c->l->nunpriv--;
	}
	s->st.connections--;
	c->l->connections--;
	if (c->l->connections < 2 * (uint64_t)s->max_connections)
		listener_pause(c->l, false);
	free(c);
}

static void on_conn_close(struct evhttp_connection *evcon, void *arg)
{
	(void)evcon;
	lp_conn_free(arg);
}

/* A new connection has until its first request is complete: a short header timeout, so that
 * peers that never finish one do not hold their share long. Then, after each reply, the whole
 * --http-timeout to write it and read the next request. */
void lp_conn_deadline(struct conn *c, bool first)
{
	uint32_t t = c->l->s->timeout_s;
	struct timeval tv = {.tv_sec = c->admission == ANSWER_503 ? 1
				       : first && t > LP_SERVER_HEADER_TIMEOUT_S
					       ? LP_SERVER_HEADER_TIMEOUT_S
					       : t};

	event_add(c->deadline, &tv);
}

/* Closes a connection over its share at once. What it sent is read first (a request's
 * worth: 8 KiB, the headers' limit), so that closing does not reset the connection, and a
 * 503 goes out when the socket takes it without waiting: a client that sent its request
 * reads why. A peer that sent more is reset: each refusal stays a few system calls. */
static void refuse(struct conn *c)
{
#define REFUSED_BODY                                                                       \
	"{\"error\":{\"code\":\"" LP_ERR_TOO_MANY_CONNECTIONS "\",\"message\":\"too many " \
	"connections from your user or address; try again\",\"status\":503}}\n"
	static const char answer[] = "HTTP/1.1 503 Service Unavailable\r\n"
				     "Content-Type: application/json\r\nConnection: close\r\n"
				     "Content-Length: %zu\r\n\r\n%s";
	int fd = bufferevent_getfd(c->bev), n;
	char buf[512];

	if (fd >= 0) {
		for (int i = 0; i < LP_MAX_HEADERS_BYTES / (int)sizeof(buf) &&
				recv(fd, buf, sizeof(buf), MSG_DONTWAIT) == (ssize_t)sizeof(buf);
		     i++)
			;
		n = snprintf(buf, sizeof(buf), answer, sizeof(REFUSED_BODY) - 1, REFUSED_BODY);
		(void)!send(fd, buf, (size_t)n, MSG_DONTWAIT | MSG_NOSIGNAL);
	}
#undef REFUSED_BODY
	c->l->s->st.refused++;
	if (c->evcon)
		evhttp_connection_free(c->evcon); /* lp_conn_free() in its close callback */
	else if (fd >= 0)
		shutdown(fd, SHUT_RDWR);
}

/* The first turn: evhttp has set up the connection by now, so its handle is the argument of
 * the bufferevent's callbacks (checked). Later turns: the deadline has passed, and shutting
 * the socket down makes evhttp see EOF and free the connection the usual way. */
static void on_deadline(evutil_socket_t fd, short what, void *arg)
{
	struct conn *c = arg;
	void *cbarg = NULL;

	(void)fd;
	(void)what;
	if (!c->evcon) {
		bufferevent_getcb(c->bev, NULL, NULL, NULL, &cbarg);
		if (cbarg && evhttp_connection_get_bufferevent(cbarg) == c->bev) {
			c->evcon = cbarg;
			evhttp_connection_set_closecb(c->evcon, on_conn_close, c);
		} else {
			log_error("evhttp connection not found for a new connection, ignoring");
		}
		lp_conn_read_peer(c);
		c->admission = admit(c);
		if (c->admission == REFUSED) {
			refuse(c);
			return;
		}
		lp_conn_deadline(c, true);
		return;
	}
	c->l->s->st.timed_out++;
	log_debug("connection dropped: no complete request within %u s", c->l->s->timeout_s);
	shutdown(bufferevent_getfd(c->bev), SHUT_RDWR);
}

struct bufferevent *lp_conn_new(struct event_base *base, void *arg)
{
	struct listener *l = arg;
	struct lp_server *s = l->s;
	struct conn *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL; /* evhttp makes its own; this connection is not tracked */
	c->l = l;
	c->nul_at = UINT64_MAX;
	if (!l->unix_socket && s->tls) {
		SSL *ssl = SSL_new(s->tls);

		/* evhttp sets the descriptor; the handshake runs before the first request. */
		c->bev = ssl ? bufferevent_openssl_socket_new(base, -1, ssl,
							      BUFFEREVENT_SSL_ACCEPTING,
							      BEV_OPT_CLOSE_ON_FREE)
			     : NULL;
		if (!c->bev)
			SSL_free(ssl);
	} else {
		c->bev = bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE);
	}
	c->deadline = evtimer_new(base, on_deadline, c);
	c->out_cb = c->bev ? evbuffer_add_cb(bufferevent_get_output(c->bev), lp_http_on_output, c)
			   : NULL;
	c->in_cb =
		c->bev ? evbuffer_add_cb(bufferevent_get_input(c->bev), lp_http_on_input, c) : NULL;
	if (!c->bev || !c->deadline || !c->out_cb || !c->in_cb) {
		if (c->bev)
			bufferevent_free(c->bev);
		if (c->deadline)
			event_free(c->deadline);
		free(c);
		return NULL;
	}
	c->next = s->conns;
	if (s->conns)
		s->conns->prev = c;
	s->conns = c;
	s->st.connections++;
	s->st.accepted++;
	if (++l->connections >= 2 * (uint64_t)s->max_connections)
		listener_pause(l, true);
	/* A batch, then a turn of the loop: evconnlistener accepts until the backlog is empty
	 * or the listener is disabled, and a flood would otherwise keep the loop in here while
	 * requests already in wait, and the other listener's connections. The batch is judged
	 * (the flood's closed) before the next one is taken. */
	if (++l->batch >= LP_SERVER_ACCEPT_BATCH && !l->resting) {
		static const struct timeval now = {0, 0};

		l->resting = true;
		evconnlistener_disable(l->lev);
		event_add(l->resume, &now);
	}
	/* Right away, then at the deadline: see on_deadline(). */
	event_active(c->deadline, EV_TIMEOUT, 0);
	return c->bev;
}

struct conn *lp_conn_of(struct lp_server *s, struct evhttp_request *req)
{
	struct evhttp_connection *evcon = evhttp_request_get_connection(req);
	struct bufferevent *bev = evcon ? evhttp_connection_get_bufferevent(evcon) : NULL;

	for (struct conn *c = s->conns; c; c = c->next)
		if (c->bev == bev)
			return c;
	return NULL;
}
