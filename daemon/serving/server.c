// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* evhttp serving the API: each connection gets a deadline, peers are known by SO_PEERCRED,
 * and the HTML error pages evhttp writes by itself (malformed or oversized requests) are
 * replaced with JSON errors before they reach the socket. */
#include "serving/server.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <event2/listener.h>
#include <grp.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/queue.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <openssl/ssl.h>
#include <unistd.h>

#include "serving/admit.h"
#include "llmprof/protocol.h"
#include "base/log.h"
#include "serving/peer.h"
#include "serving/webconfig.h"

struct lp_server;

/* Connections a listener accepts before the loop turns (see on_new_connection()). */
#define LP_SERVER_ACCEPT_BATCH 32

/* Each listener has a budget of its own: a flood on the TCP /metrics port leaves the Unix
 * socket alone, and the other way round. */
struct listener {
	struct lp_server *s;
	struct evhttp *http;
	struct evconnlistener *lev;
	bool unix_socket;
	bool paused;	      /* at twice its budget: see listener_pause() */
	bool resting;	      /* took its batch this turn of the loop: see on_new_connection() */
	uint64_t connections; /* open now */
	/* Admitted connections of unprivileged peers, counted against their shares. */
	struct conn *unpriv;
	uint64_t nunpriv;
	unsigned batch;	      /* accepted this turn of the loop */
	struct event *resume; /* the next turn: accepting again */
};

/* What a new connection is granted once its peer is known (admit()). */
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
	 * on_input(). */
	char last_line[24];
	unsigned eol_run;  /* line ends drained since last_line */
	size_t mirror_len; /* bytes of the input mirrored in mirror[] */
	char mirror[64];
	/* Bytes of the input so far, added and drained by evhttp, and where its first NUL
	 * was (UINT64_MAX: none): see on_input(). */
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

static const char *method_name(enum evhttp_cmd_type t)
{
	switch (t) {
	case EVHTTP_REQ_GET:
		return "GET";
	case EVHTTP_REQ_POST:
		return "POST";
	case EVHTTP_REQ_HEAD:
		return "HEAD";
	case EVHTTP_REQ_PUT:
		return "PUT";
	case EVHTTP_REQ_DELETE:
		return "DELETE";
	case EVHTTP_REQ_OPTIONS:
		return "OPTIONS";
	case EVHTTP_REQ_TRACE:
		return "TRACE";
	case EVHTTP_REQ_CONNECT:
		return "CONNECT";
	case EVHTTP_REQ_PATCH:
		return "PATCH";
	}
	return "?";
}

static void read_peer(struct conn *c)
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

static void on_resume(evutil_socket_t fd, short what, void *arg)
{
	struct listener *l = arg;

	(void)fd;
	(void)what;
	l->resting = false;
	l->batch = 0;
	if (!l->paused)
		evconnlistener_enable(l->lev);
}

static void conn_free(struct conn *c)
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
	conn_free(arg);
}

/* A new connection has until its first request is complete: a short header timeout, so that
 * peers that never finish one do not hold their share long. Then, after each reply, the whole
 * --http-timeout to write it and read the next request. */
static void deadline_arm(struct conn *c, bool first)
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
		evhttp_connection_free(c->evcon); /* conn_free() in its close callback */
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
		read_peer(c);
		c->admission = admit(c);
		if (c->admission == REFUSED) {
			refuse(c);
			return;
		}
		deadline_arm(c, true);
		return;
	}
	c->l->s->st.timed_out++;
	log_debug("connection dropped: no complete request within %u s", c->l->s->timeout_s);
	shutdown(bufferevent_getfd(c->bev), SHUT_RDWR);
}

/* The chains of buf, in v (16) or, when there are more, in an array to free(): evbuffer_peek()
 * over the whole buffer. The positioned read (evbuffer_ptr_set + evbuffer_copyout_from)
 * missed the tail of a second response on a keep-alive connection (libevent 2.1.12; found
 * by tests/fuzz/fuzz_http.c). Returns how many, 0 when empty, -1 out of memory. */
static int chains(struct evbuffer *buf, struct evbuffer_iovec v[16], struct evbuffer_iovec **vec)
{
	int nvec = evbuffer_peek(buf, -1, NULL, NULL, 0);

	*vec = v;
	if (nvec <= 0)
		return 0;
	if (nvec > 16 && !(*vec = malloc((size_t)nvec * sizeof(**vec))))
		return -1;
	return evbuffer_peek(buf, -1, NULL, *vec, nvec);
}

/* Copies n bytes at offset off out of buf. Returns the bytes copied. */
static size_t copy_at(struct evbuffer *buf, size_t off, char *out, size_t n)
{
	struct evbuffer_iovec v[16], *vec;
	int nvec = chains(buf, v, &vec);
	size_t got = 0, pos = 0;

	for (int i = 0; i < nvec && got < n; i++) {
		size_t l = vec[i].iov_len, skip = off > pos ? off - pos : 0;

		if (skip < l) {
			size_t take = l - skip < n - got ? l - skip : n - got;

			memcpy(out + got, (char *)vec[i].iov_base + skip, take);
			got += take;
		}
		pos += l;
	}
	if (vec != v)
		free(vec);
	return got;
}

static bool tail_is(struct evbuffer *buf, size_t from, const char *s)
{
	size_t len = evbuffer_get_length(buf), n = strlen(s);
	char tmp[64];

	if (len < from + n || n > sizeof(tmp))
		return false;
	return copy_at(buf, len - n, tmp, n) == n && strncasecmp(tmp, s, n) == 0;
}

/* The status of the response that starts at offset from. */
static int status_at(struct evbuffer *buf, size_t from)
{
	char line[32] = "";
	int status = 0;

	copy_at(buf, from, line, sizeof(line) - 1);
	return sscanf(line, "HTTP/%*d.%*d %d", &status) == 1 ? status : 400;
}

/* A chunk-size line as RFC 9112 7.1 has it: hex digits, then optional extensions. */
static bool chunk_size_valid(const char *line)
{
	size_t n = strspn(line, "0123456789abcdefABCDEF");

	return n > 0 && n <= 16 && (line[n] == '\0' || line[n] == ';' || line[n] == ' ');
}

/* Where the first NUL among the last n bytes of buf is, counted from the connection's first
 * byte (the tail starts at rx), or UINT64_MAX. */
static uint64_t nul_in_tail(struct evbuffer *buf, size_t n, uint64_t rx)
{
	struct evbuffer_iovec v[16], *vec;
	int nvec = chains(buf, v, &vec);
	size_t len = evbuffer_get_length(buf), from = n < len ? len - n : 0, pos = 0;
	uint64_t at = UINT64_MAX;

	if (nvec < 0)
		return rx; /* out of memory: refused rather than let through unread */
	for (int i = 0; i < nvec && at == UINT64_MAX; i++) {
		size_t l = vec[i].iov_len, skip = from > pos ? from - pos : 0;
		const char *z =
			skip < l ? memchr((char *)vec[i].iov_base + skip, 0, l - skip) : NULL;

		if (z)
			at = rx + (pos + (size_t)(z - (char *)vec[i].iov_base) - from);
		pos += l;
	}
	if (vec != v)
		free(vec);
	return at;
}

/* Mirrors the front of the input, so that what evhttp drains is still known afterwards.
 * evhttp reads a line as two drains (evbuffer_readln: the text, then its line end); a
 * chunk-size line it fails on is the last text drained, followed by one line end, where a
 * body over the limit follows a header line and the empty line after it (two). Callbacks on
 * a bufferevent's buffers run as the buffer changes. */
static void on_input(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg)
{
	struct conn *c = arg;

	if (info->n_deleted) {
		size_t d = info->n_deleted < c->mirror_len ? info->n_deleted : c->mirror_len;
		size_t n = d;

		while (n && (c->mirror[n - 1] == '\n' || c->mirror[n - 1] == '\r'))
			n--;
		if (n == 0) {
			c->eol_run++;
		} else {
			n = n < sizeof(c->last_line) - 1 ? n : sizeof(c->last_line) - 1;
			memcpy(c->last_line, c->mirror, n);
			c->last_line[n] = '\0';
			c->eol_run = d > n;
		}
	}
	c->mirror_len = copy_at(buf, 0, c->mirror, sizeof(c->mirror));
	c->drained += info->n_deleted;
	if (info->n_added && c->nul_at == UINT64_MAX)
		c->nul_at = nul_in_tail(buf, info->n_added, c->rx);
	c->rx += info->n_added;
}

/* Replaces the HTML error page evhttp queued after our own bytes with a JSON error of the
 * same status. evhttp closes the connection after such a page, so it is the last thing
 * written. The output's front is frozen while the bufferevent owns it: thawed for this. */
static void rewrite_error(struct conn *c, struct evbuffer *buf)
{
	struct lp_api_response res = {};
	int status = status_at(buf, c->owned);
	struct evbuffer *keep = evbuffer_new();
	char head[256];

	/* evhttp fails a malformed chunk-size line as "too long" too (libevent 2.1.12,
	 * evhttp_handle_chunked_read: DATA_CORRUPTED and DATA_TOO_LONG share one path). */
	if (status == 413 && c->eol_run == 1 && !chunk_size_valid(c->last_line))
		lp_api_error(&res, 400, LP_ERR_BAD_REQUEST,
			     "malformed chunk size '%.16s' in a chunked body", c->last_line);
	else if (status == 413 && c->eol_run == 1 && strpbrk(c->last_line, "; "))
		lp_api_error(&res, 400, LP_ERR_BAD_REQUEST,
			     "a chunk extension ('%.16s'): not supported here; send the chunk "
			     "size alone",
			     c->last_line);
	else if (status == 413)
		lp_api_error(&res, 413, LP_ERR_TOO_LARGE,
			     "request too large: at most %d bytes of headers and %d of body",
			     LP_MAX_HEADERS_BYTES, LP_MAX_BODY_BYTES);
	/* evhttp refuses only methods it does not know (every one it knows reaches the router,
	 * which answers 405 with Allow): RFC 9110 15.6.2 says 501 for those. */
	else if (status == 405 || status == 501)
		lp_api_error(&res, 501, LP_ERR_NOT_IMPLEMENTED,
			     "method not implemented: GET, HEAD and POST are this API's");
	else
		lp_api_error(&res, status, LP_ERR_BAD_REQUEST,
			     "malformed HTTP request, or headers over %d bytes; see docs/API.md",
			     LP_MAX_HEADERS_BYTES);
	if (!keep || !res.body) {
		evbuffer_free(keep);
		lp_api_response_free(&res);
		return;
	}
	evbuffer_cb_clear_flags(buf, c->out_cb, EVBUFFER_CB_ENABLED);
	evbuffer_unfreeze(buf, 1);
	evbuffer_remove_buffer(buf, keep, c->owned);
	evbuffer_drain(buf, evbuffer_get_length(buf));
	evbuffer_add_buffer(buf, keep);
	snprintf(head, sizeof(head),
		 "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nConnection: close\r\n"
		 "Content-Length: %zu\r\n\r\n",
		 res.status, res.reason, res.content_type, res.len);
	evbuffer_add(buf, head, strlen(head));
	evbuffer_add(buf, res.body, res.len);
	c->owned = evbuffer_get_length(buf);
	evbuffer_freeze(buf, 1);
	evbuffer_cb_set_flags(buf, c->out_cb, EVBUFFER_CB_ENABLED);
	evbuffer_free(keep);
	lp_api_response_free(&res);
	c->l->s->st.rewritten++;
}

static void on_output(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg)
{
	struct conn *c = arg;
	size_t len = evbuffer_get_length(buf);

	/* Written bytes leave from the front; ours are the first ones. */
	c->owned = info->n_deleted >= c->owned ? 0 : c->owned - info->n_deleted;
	if (c->stream)
		c->stream->queued = len;
	if (c->replying || len <= c->owned) {
		c->owned = len;
		return;
	}
	/* evhttp's own interim reply to "Expect: 100-continue" passes. */
	if (len - c->owned <= 32 && (tail_is(buf, c->owned, " 100 Continue\r\n\r\n"))) {
		c->owned = len;
		return;
	}
	/* The page is complete once its last line is in. */
	if (tail_is(buf, c->owned, "</html>\n"))
		rewrite_error(c, buf);
}

static struct bufferevent *on_new_connection(struct event_base *base, void *arg)
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
	c->out_cb = c->bev ? evbuffer_add_cb(bufferevent_get_output(c->bev), on_output, c) : NULL;
	c->in_cb = c->bev ? evbuffer_add_cb(bufferevent_get_input(c->bev), on_input, c) : NULL;
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

static struct conn *conn_of(struct lp_server *s, struct evhttp_request *req)
{
	struct evhttp_connection *evcon = evhttp_request_get_connection(req);
	struct bufferevent *bev = evcon ? evhttp_connection_get_bufferevent(evcon) : NULL;

	for (struct conn *c = s->conns; c; c = c->next)
		if (c->bev == bev)
			return c;
	return NULL;
}

/* What evhttp 2.1 lets through but RFC 9112 6.3 does not: Content-Length given twice with
 * different values, both Content-Length and Transfer-Encoding, or a transfer coding other
 * than chunked alone. Each leaves the body's end unknown, so the connection closes after the
 * error. Returns true when res holds one. */
static bool framing_error(struct evhttp_request *req, struct lp_api_response *res)
{
	struct evkeyvalq *in = evhttp_request_get_input_headers(req);
	const char *cl = NULL, *te = NULL;
	struct evkeyval *h;
	int ncl = 0, nte = 0;

	TAILQ_FOREACH(h, in, next)
	{
		/* A field name is a token (RFC 9110 5.1): "Foo : bar" or ": bar" is refused,
		 * as a request a proxy might read another way. */
		if (!h->key[0] || h->key[strspn(h->key, "!#$%&'*+-.^_`|~0123456789"
							"abcdefghijklmnopqrstuvwxyz"
							"ABCDEFGHIJKLMNOPQRSTUVWXYZ")]) {
			lp_api_error(res, 400, LP_ERR_BAD_REQUEST,
				     "malformed header name '%.40s': a token, with no white "
				     "space before the colon",
				     h->key);
			return true;
		}
		if (strcasecmp(h->key, "Content-Length") == 0 &&
		    (!h->value[0] || h->value[strspn(h->value, "0123456789")])) {
			lp_api_error(res, 400, LP_ERR_BAD_REQUEST,
				     "Content-Length '%.20s' is not a decimal number", h->value);
			return true;
		}
		if (strcasecmp(h->key, "Content-Length") == 0) {
			if (cl && strcmp(cl, h->value) != 0) {
				lp_api_error(res, 400, LP_ERR_BAD_REQUEST,
					     "Content-Length given twice with different values");
				return true;
			}
			cl = h->value;
			ncl++;
		} else if (strcasecmp(h->key, "Transfer-Encoding") == 0) {
			te = h->value;
			nte++;
		}
	}
	if (te && (nte > 1 || strcasecmp(te, "chunked") != 0)) {
		lp_api_error(res, 501, LP_ERR_NOT_IMPLEMENTED,
			     "Transfer-Encoding '%.40s': only 'chunked' alone is supported", te);
		return true;
	}
	if (te && ncl) {
		lp_api_error(res, 400, LP_ERR_BAD_REQUEST,
			     "both Content-Length and Transfer-Encoding: send one");
		return true;
	}
	return false;
}

/* Whether a verified client certificate came with this TLS connection. */
static bool client_verified(struct conn *c)
{
	SSL *ssl = c ? bufferevent_openssl_get_ssl(c->bev) : NULL;
	X509 *cert = ssl ? SSL_get1_peer_certificate(ssl) : NULL;
	bool ok = cert && SSL_get_verify_result(ssl) == X509_V_OK &&
		  c->l->s->web->client_auth >= LP_CLIENT_VERIFY_IF_GIVEN;

	X509_free(cert);
	return ok;
}

/* Who a TCP request is from, for the API's rule: with users in the web configuration,
 * whoever gives their credentials (and nobody else: 401); else a verified client
 * certificate; else the local owner of the socket (peer.c). A peer that is none of these
 * is refused (403) rather than shown an empty host. Returns false when res holds the
 * refusal. */
static bool tcp_access(struct lp_server *s, struct conn *c, struct evhttp_request *req,
		       struct lp_peer *p, struct lp_api_response *res)
{
	const char *auth =
		evhttp_find_header(evhttp_request_get_input_headers(req), "Authorization");

	if (s->web && s->web->nusers) {
		if (lp_webconfig_authorized(s->web, auth)) {
			p->known = p->privileged = true;
			return true;
		}
		s->st.unauthorized++;
		lp_api_error(res, 401, LP_ERR_UNAUTHORIZED,
			     "%s: this listener needs a user and password of its web "
			     "configuration file",
			     auth ? "wrong user or password" : "no credentials");
		evhttp_add_header(evhttp_request_get_output_headers(req), "WWW-Authenticate",
				  "Basic realm=\"llmprofd\", charset=\"UTF-8\"");
		return false;
	}
	if (s->web && s->web->tls && client_verified(c)) {
		p->known = p->privileged = true;
		return true;
	}
	if (p->known)
		return true;
	s->st.unauthorized++;
	lp_api_error(res, 403, LP_ERR_FORBIDDEN,
		     "this peer is not on this host and gave no credentials: scrapers on other "
		     "hosts need basic_auth_users or client certificates in llmprofd's "
		     "--web-config-file");
	return false;
}

/* Lets go of a body evbuffer_add_reference() was given, once it is written or dropped:
 * arg is its shared holder, or NULL for a body of the answer's own. */
static void free_body(const void *data, size_t len, void *arg)
{
	(void)len;
	if (arg)
		lp_body_put(arg);
	else
		free((void *)data);
}

/* A streamed answer's producer wrote more, or its end: it goes out as chunks. */
static void stream_notify(void *arg)
{
	struct conn *c = arg;
	struct lp_stream *s = c->stream;
	struct evbuffer *b;

	if (s->len && (b = evbuffer_new())) {
		if (evbuffer_add(b, s->p, s->len) == 0) {
			c->replying = true;
			evhttp_send_reply_chunk(c->stream_req, b);
			c->replying = false;
		}
		evbuffer_free(b);
	}
	lp_stream_taken(s);
	s->queued = evbuffer_get_length(bufferevent_get_output(c->bev));
	if (!s->ended)
		return;
	c->replying = true;
	evhttp_send_reply_end(c->stream_req);
	c->replying = false;
	s->notify = NULL;
	c->stream = NULL;
	c->stream_req = NULL;
	lp_stream_put(s);
	/* Then as after any answer: a deadline for the next request. */
	deadline_arm(c, false);
}

/* An answer written as it is made: no deadline while it lasts (a record's window is at
 * most a minute); it ends when its producer ends it, or the peer goes away. */
static void stream_start(struct conn *c, struct evhttp_request *req, struct lp_api_response *res)
{
	struct evkeyvalq *hdr = evhttp_request_get_output_headers(req);
	evhttp_add_header(hdr, "Content-Type", res->content_type);
	evhttp_add_header(hdr, "Cache-Control", "no-store");
	c->stream = res->stream;
	res->stream = NULL;
	c->stream_req = req;
	c->stream->notify = stream_notify;
	c->stream->arg = c;
	struct timeval write_tv = {.tv_sec = c->l->s->timeout_s};

	event_del(c->deadline);
	c->replying = true;
	evhttp_send_reply_start(req, res->status, res->reason);
	c->replying = false;
	/* evhttp's own timeout would end it after the deadline with no word from the peer
	 * (it reads only to see it close); a peer that stops reading for that long is gone. */
	bufferevent_set_timeouts(c->bev, NULL, &write_tv);
	stream_notify(c); /* what was written before */
}

static void on_request(struct evhttp_request *req, void *arg)
{
	struct listener *l = arg;
	struct lp_server *s = l->s;
	struct conn *c = conn_of(s, req);
	struct evbuffer *in = evhttp_request_get_input_buffer(req);
	struct evkeyvalq *hdr = evhttp_request_get_output_headers(req);
	struct lp_peer anon = {.unix_socket = l->unix_socket, .uid = (uid_t)-1};
	struct lp_api_request ar = {
		.method = method_name(evhttp_request_get_command(req)),
		.uri = evhttp_request_get_uri(req),
		.accept = evhttp_find_header(evhttp_request_get_input_headers(req), "Accept"),
		.body_len = evbuffer_get_length(in),
	};
	struct lp_api_response res;
	struct lp_peer rp;
	struct evbuffer *out;

	s->st.requests++;
	if (c && !c->peer_known)
		read_peer(c);
	rp = c ? c->peer : anon;
	ar.peer = &rp;
	ar.body = (const char *)evbuffer_pullup(in, -1);
	memset(&res, 0, sizeof(res));
	if (c && c->admission != ADMITTED) {
		lp_api_error(&res, 503, LP_ERR_TOO_MANY_CONNECTIONS,
			     "too many connections are open (at most %u, %u for one user); try "
			     "again",
			     s->max_connections, s->max_per_uid);
		evhttp_add_header(hdr, "Connection", "close");
	} else if (c && c->nul_at < c->drained) {
		/* evhttp ends a header value at a NUL; RFC 9110 5.5 wants the request refused
		 * (or the NUL replaced), and a body here is JSON, which holds none. The bytes
		 * evhttp drained so far are this request's, and those before it. */
		lp_api_error(&res, 400, LP_ERR_BAD_REQUEST,
			     "a NUL byte in the request: no header value or body here holds one");
		evhttp_add_header(hdr, "Connection", "close");
	} else if (framing_error(req, &res)) {
		evhttp_add_header(hdr, "Connection", "close");
	} else if (l->unix_socket || tcp_access(s, c, req, &rp, &res)) {
		lp_api_handle(s->backend, &ar, &res);
	}
	for (size_t i = 0; !l->unix_socket && s->web && i < s->web->nheaders; i++)
		evhttp_add_header(hdr, s->web->headers[i].name, s->web->headers[i].value);
	if (res.stream) {
		if (c) {
			stream_start(c, req, &res);
			lp_api_response_free(&res);
			return;
		}
		/* Not a connection of ours (out of memory at accept): nobody will read it. */
		lp_stream_gone(res.stream);
		lp_api_response_free(&res);
		lp_api_error(&res, 503, LP_ERR_INTERNAL, "out of memory");
	}
	out = evbuffer_new();
	/* HEAD: the headers GET would have, Content-Length included, and no body (evhttp
	 * 2.1.12 writes whatever body it is given, HEAD or not). */
	if (evhttp_request_get_command(req) == EVHTTP_REQ_HEAD) {
		char len[24];

		snprintf(len, sizeof(len), "%zu", res.len);
		evhttp_add_header(hdr, "Content-Length", len);
	} else if (out && res.len) {
		/* Handed over, not copied: a timeline is tens of MB, and a copy of it on the
		 * event loop (its page faults on a busy host) held every other answer. */
		if (evbuffer_add_reference(out, res.body, res.len, free_body, res.shared) < 0) {
			evbuffer_free(out);
			out = NULL;
		} else {
			res.shared = NULL;
			res.body = NULL;
			res.len = 0;
		}
	}
	if (!out) {
		evbuffer_free(out);
		lp_api_response_free(&res);
		evhttp_connection_free(evhttp_request_get_connection(req));
		return;
	}
	evhttp_add_header(hdr, "Content-Type", res.content_type);
	evhttp_add_header(hdr, "Cache-Control", "no-store");
	if (res.allow)
		evhttp_add_header(hdr, "Allow", res.allow);
	if (c)
		c->replying = true;
	evhttp_send_reply(req, res.status, res.reason, out);
	if (c) {
		c->replying = false;
		/* A fresh deadline for writing this reply and reading the next request. */
		deadline_arm(c, false);
	}
	evbuffer_free(out);
	lp_api_response_free(&res);
}

static int listener_init(struct lp_server *s, struct listener *l, struct evconnlistener *lev,
			 bool unix_socket)
{
	l->s = s;
	l->unix_socket = unix_socket;
	l->lev = lev;
	l->resume = evtimer_new(s->base, on_resume, l);
	l->http = evhttp_new(s->base);
	if (!l->http || !l->resume)
		return -ENOMEM;
	/* Every method reaches the router, which answers 405 in JSON. */
	evhttp_set_allowed_methods(l->http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD |
						    EVHTTP_REQ_PUT | EVHTTP_REQ_DELETE |
						    EVHTTP_REQ_OPTIONS | EVHTTP_REQ_TRACE |
						    EVHTTP_REQ_CONNECT | EVHTTP_REQ_PATCH);
	evhttp_set_max_headers_size(l->http, LP_MAX_HEADERS_BYTES);
	evhttp_set_max_body_size(l->http, LP_MAX_BODY_BYTES);
	evhttp_set_timeout(l->http, (int)s->timeout_s);
	evhttp_set_bevcb(l->http, on_new_connection, l);
	evhttp_set_gencb(l->http, on_request, l);
	if (!evhttp_bind_listener(l->http, lev))
		return -ENOMEM;
	l->lev = lev;
	return 0;
}

/* Binds path, replacing a stale socket file but never a live socket. */
static int bind_unix(struct lp_server *s, const char *path, mode_t mode, int *out)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	char dir[sizeof(sa.sun_path)], *slash;
	int fd, r;

	if (strlen(path) >= sizeof(sa.sun_path))
		return log_error_errno(-ENAMETOOLONG,
				       "socket path '%s' is too long (%zu bytes at most)", path,
				       sizeof(sa.sun_path) - 1);
	strcpy(sa.sun_path, path);
	strcpy(dir, path);
	slash = strrchr(dir, '/');
	if (slash && slash != dir) {
		*slash = '\0';
		if (mkdir(dir, 0755) < 0 && errno != EEXIST)
			return log_error_errno(-errno, "create directory '%s' for the socket: %m",
					       dir);
	}
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return log_error_errno(-errno, "socket: %m");
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
		close(fd);
		return log_error_errno(-EADDRINUSE,
				       "'%s': another llmprofd is listening there; stop it or use "
				       "--socket",
				       path);
	}
	if (errno == ECONNREFUSED)
		unlink(path); /* left by a daemon that did not exit cleanly */
	if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		r = log_error_errno(-errno, "bind '%s': %m", path);
		close(fd);
		return r;
	}
	s->created_path = strdup(path);
	if (chmod(path, mode) < 0)
		log_warning_errno(-errno, "chmod '%s': %m, ignoring", path);
	if (s->have_group && chown(path, (uid_t)-1, s->group) < 0)
		log_warning_errno(-errno, "chown '%s' to group %u: %m, ignoring", path,
				  (unsigned)s->group);
	if (listen(fd, SOMAXCONN) < 0) {
		r = log_error_errno(-errno, "listen on '%s': %m", path);
		close(fd);
		return r;
	}
	*out = fd;
	return 0;
}

/* The kernel's part of the TCP listener's budget (admit.h); without it, logged once with
 * what is missing and what it means, the server's own per-uid share still holds. */
static void admission_start(struct lp_server *s, struct evconnlistener *lev)
{
	struct sockaddr_storage ss;
	socklen_t len = sizeof(ss);
	int r;

	if (getsockname(evconnlistener_get_fd(lev), (struct sockaddr *)&ss, &len) < 0) {
		s->admit_why = "the listener's address is unknown";
		return;
	}
	r = lp_admit_start(&s->admit, (struct sockaddr *)&ss, len, s->max_per_uid, s->max_per_uid,
			   &s->admit_why);
	if (r < 0)
		log_warning_errno(r,
				  "connections to /metrics are not admitted in the kernel: %s "
				  "(%m); a local user opening connections as fast as they can "
				  "will slow scrapes down",
				  s->admit_why);
	else
		log_info("connections to /metrics admitted in the kernel: each user but root "
			 "%u at once, then %u a second",
			 s->max_per_uid, s->max_per_uid);
}

int lp_server_start(struct lp_server **out, struct event_base *base, const struct lp_server_opts *o,
		    const struct lp_api_backend *b)
{
	struct lp_server *s = calloc(1, sizeof(*s));
	struct evconnlistener *lev;
	struct group *gr;
	int fd = -1, r;

	*out = NULL;
	if (!s) {
		lp_webconfig_free(o->web);
		return -ENOMEM;
	}
	s->base = base;
	s->backend = b;
	s->admit_why = "";
	lp_server_set_limits(s, o);
	r = lp_server_set_webconfig(s, o->web);
	if (r < 0) {
		free(s);
		return r;
	}
	gr = o->socket_group && *o->socket_group ? getgrnam(o->socket_group) : NULL;
	if (gr) {
		s->group = gr->gr_gid;
		s->have_group = true;
	} else if (o->socket_group && *o->socket_group) {
		log_warning("group '%s' does not exist: only root sees every process; create it "
			    "with 'groupadd --system %s'",
			    o->socket_group, o->socket_group);
	}

	if (o->activated_fd >= 0) {
		fd = o->activated_fd;
		evutil_make_socket_nonblocking(fd);
		log_info("API on the socket systemd passed (fd %d)", fd);
	} else {
		r = bind_unix(s, o->socket_path, o->socket_mode, &fd);
		if (r < 0)
			goto fail;
		log_info("API on %s (mode %04o%s%s)", o->socket_path, (unsigned)o->socket_mode,
			 s->have_group ? ", group " : "", s->have_group ? o->socket_group : "");
	}
	/* Backlog 0: listening already, with SOMAXCONN (bind_unix) or the unit's Backlog=;
	 * libevent's -1 would listen() again with 128, which a flood fills at once. */
	lev = evconnlistener_new(base, NULL, NULL, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC, 0,
				 fd);
	if (!lev) {
		close(fd);
		r = log_error_errno(-ENOMEM, "listen: %m");
		goto fail;
	}
	r = listener_init(s, &s->l[s->nl++], lev, true);
	if (r < 0)
		goto fail;

	if (o->metrics_address && *o->metrics_address) {
		struct sockaddr_storage ss;
		int len = sizeof(ss);

		if (evutil_parse_sockaddr_port(o->metrics_address, (struct sockaddr *)&ss, &len) <
		    0) {
			r = log_error_errno(-EINVAL,
					    "metrics address '%s' is not HOST:PORT (e.g. %s)",
					    o->metrics_address, LP_METRICS_ADDRESS);
			goto fail;
		}
		lev = evconnlistener_new_bind(base, NULL, NULL,
					      LEV_OPT_CLOSE_ON_FREE | LEV_OPT_CLOSE_ON_EXEC |
						      LEV_OPT_REUSEABLE,
					      SOMAXCONN, (struct sockaddr *)&ss, len);
		if (!lev) {
			r = log_error_errno(-errno, "listen on %s for /metrics: %m",
					    o->metrics_address);
			goto fail;
		}
		r = listener_init(s, &s->l[s->nl++], lev, false);
		if (r < 0)
			goto fail;
		admission_start(s, lev);
		log_info("/metrics also on %s://%s/metrics%s", s->tls ? "https" : "http",
			 o->metrics_address,
			 s->web && s->web->nusers ? " (basic authentication)" : "");
	}
	*out = s;
	return 0;
fail:
	lp_server_free(s);
	return r;
}

void lp_server_set_limits(struct lp_server *s, const struct lp_server_opts *o)
{
	s->max_connections = o->max_connections;
	s->max_per_uid = o->max_per_uid;
	s->timeout_s = o->timeout_s;
	for (int i = 0; i < s->nl; i++)
		evhttp_set_timeout(s->l[i].http, (int)o->timeout_s);
	lp_admit_set(s->admit, s->max_per_uid, s->max_per_uid);
}

int lp_server_set_webconfig(struct lp_server *s, struct lp_webconfig *w)
{
	SSL_CTX *tls = NULL;

	if (w && w->tls && !(tls = lp_webconfig_tls_context(w))) {
		lp_webconfig_free(w);
		return -EINVAL;
	}
	/* Connections keep a reference to the context they were made with. */
	SSL_CTX_free(s->tls);
	lp_webconfig_free(s->web);
	s->tls = tls;
	s->web = w;
	return 0;
}

void lp_server_stats(const struct lp_server *s, struct lp_server_stats *out)
{
	*out = s->st;
	out->refused_in_kernel = lp_admit_refused(s->admit);
	out->kernel_admission = s->admit_why;
}

void lp_server_free(struct lp_server *s)
{
	if (!s)
		return;
	/* evhttp_free() frees the connections; their close callbacks free ours. */
	for (int i = 0; i < s->nl; i++)
		if (s->l[i].http)
			evhttp_free(s->l[i].http);
		else if (s->l[i].lev)
			evconnlistener_free(s->l[i].lev);
	while (s->conns)
		conn_free(s->conns);
	for (int i = 0; i < s->nl; i++)
		if (s->l[i].resume)
			event_free(s->l[i].resume);
	lp_admit_free(s->admit);
	if (s->created_path) {
		unlink(s->created_path);
		free(s->created_path);
	}
	SSL_CTX_free(s->tls);
	lp_webconfig_free(s->web);
	free(s);
}
