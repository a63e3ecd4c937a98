// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* evhttp serving the API on the Unix socket and the TCP listener: listeners bound and set up,
 * requests checked (hygiene.h), their peers let in or not (conn.h, and the web
 * configuration's credentials on TCP), routed (api.h) and answered, whole or streamed. */
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
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <openssl/ssl.h>
#include <unistd.h>

#include "base/log.h"
#include "llmprof/protocol.h"
#include "serving/conn.h"
#include "serving/hygiene.h"

/* A group given as its number (digits only, below the invalid (gid_t)-1). */
static bool parse_gid(const char *text, gid_t *gid)
{
	unsigned long v;
	char *end;

	if (*text < '0' || *text > '9')
		return false;
	errno = 0;
	v = strtoul(text, &end, 10);
	if (errno || *end || v >= (gid_t)-1)
		return false;
	*gid = (gid_t)v;
	return true;
}

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

/* A deferred answer's producer ended it: the whole of it goes out now, with its status
 * and headers. */
static void deferred_notify(void *arg)
{
	struct conn *c = arg;
	struct lp_stream *s = c->stream;
	struct evkeyvalq *hdr = evhttp_request_get_output_headers(c->stream_req);
	struct evbuffer *b;
	char *line, *save = NULL;

	if (!s->ended)
		return;
	b = evbuffer_new();
	if (b && s->len)
		evbuffer_add(b, s->p, s->len);
	for (line = strtok_r(s->headers, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char *colon = strchr(line, ':');

		if (!colon)
			continue;
		*colon = '\0';
		evhttp_add_header(hdr, line, colon + 1 + strspn(colon + 1, " "));
	}
	evhttp_add_header(hdr, "Content-Type", s->content_type);
	evhttp_add_header(hdr, "Cache-Control", "no-store");
	c->replying = true;
	evhttp_send_reply(c->stream_req, s->status ? s->status : 500, NULL, b);
	c->replying = false;
	if (b)
		evbuffer_free(b);
	s->notify = NULL;
	c->stream = NULL;
	c->stream_req = NULL;
	lp_stream_put(s);
	lp_conn_deadline(c, false);
}

/* A deferred answer: nothing is sent until its producer ends it (a profile's window), and
 * no deadline runs meanwhile; a peer that goes away ends it (lp_conn_free). */
static void deferred_start(struct conn *c, struct evhttp_request *req, struct lp_api_response *res)
{
	c->stream = res->stream;
	res->stream = NULL;
	c->stream_req = req;
	c->stream->notify = deferred_notify;
	c->stream->arg = c;
	event_del(c->deadline);
	deferred_notify(c); /* ended already */
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
	lp_conn_deadline(c, false);
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

/* The answer to req into res: refused (over the budget, unfit to route, no access), or the
 * route's. */
static void answer(struct listener *l, struct conn *c, struct evhttp_request *req,
		   struct lp_api_response *res)
{
	struct lp_server *s = l->s;
	struct evbuffer *in = evhttp_request_get_input_buffer(req);
	struct evkeyvalq *hdr = evhttp_request_get_output_headers(req);
	struct lp_peer anon = {.unix_socket = l->unix_socket, .uid = (uid_t)-1};
	struct lp_api_request ar = {
		.method = method_name(evhttp_request_get_command(req)),
		.uri = evhttp_request_get_uri(req),
		.accept = evhttp_find_header(evhttp_request_get_input_headers(req), "Accept"),
		.body_len = evbuffer_get_length(in),
	};
	struct lp_peer rp;

	if (c && !c->peer_known)
		lp_conn_read_peer(c);
	rp = c ? c->peer : anon;
	ar.peer = &rp;
	ar.body = (const char *)evbuffer_pullup(in, -1);
	memset(res, 0, sizeof(*res));
	if (c && c->admission != ADMITTED) {
		lp_api_error(res, 503, LP_ERR_TOO_MANY_CONNECTIONS,
			     "too many connections are open (at most %u, %u for one user); try "
			     "again",
			     s->max_connections, s->max_per_uid);
		evhttp_add_header(hdr, "Connection", "close");
	} else if (lp_http_refused(c, req, res)) {
		evhttp_add_header(hdr, "Connection", "close");
	} else if (l->unix_socket || tcp_access(s, c, req, &rp, res)) {
		lp_api_handle(s->backend, &ar, res);
	}
	for (size_t i = 0; !l->unix_socket && s->web && i < s->web->nheaders; i++)
		evhttp_add_header(hdr, s->web->headers[i].name, s->web->headers[i].value);
}

/* res as req's reply; res is freed. */
static void reply(struct conn *c, struct evhttp_request *req, struct lp_api_response *res)
{
	struct evkeyvalq *hdr = evhttp_request_get_output_headers(req);
	struct evbuffer *out = evbuffer_new();

	/* HEAD: the headers GET would have, Content-Length included, and no body (evhttp
	 * 2.1.12 writes whatever body it is given, HEAD or not). */
	if (evhttp_request_get_command(req) == EVHTTP_REQ_HEAD) {
		char len[24];

		snprintf(len, sizeof(len), "%zu", res->len);
		evhttp_add_header(hdr, "Content-Length", len);
	} else if (out && res->len) {
		/* Handed over, not copied: a timeline is tens of MB, and a copy of it on the
		 * event loop (its page faults on a busy host) held every other answer. */
		if (evbuffer_add_reference(out, res->body, res->len, free_body, res->shared) < 0) {
			evbuffer_free(out);
			out = NULL;
		} else {
			res->shared = NULL;
			res->body = NULL;
			res->len = 0;
		}
	}
	if (!out) {
		lp_api_response_free(res);
		evhttp_connection_free(evhttp_request_get_connection(req));
		return;
	}
	evhttp_add_header(hdr, "Content-Type", res->content_type);
	evhttp_add_header(hdr, "Cache-Control", "no-store");
	if (res->allow[0])
		evhttp_add_header(hdr, "Allow", res->allow);
	if (c)
		c->replying = true;
	evhttp_send_reply(req, res->status, res->reason, out);
	if (c) {
		c->replying = false;
		/* A fresh deadline for writing this reply and reading the next request. */
		lp_conn_deadline(c, false);
	}
	evbuffer_free(out);
	lp_api_response_free(res);
}

static void on_request(struct evhttp_request *req, void *arg)
{
	struct listener *l = arg;
	struct conn *c = lp_conn_of(l->s, req);
	struct lp_api_response res;

	l->s->st.requests++;
	answer(l, c, req, &res);
	if (res.stream) {
		if (c && res.stream->deferred) {
			deferred_start(c, req, &res);
			lp_api_response_free(&res);
			return;
		}
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
	reply(c, req, &res);
}

static int listener_init(struct lp_server *s, struct listener *l, struct evconnlistener *lev,
			 bool unix_socket)
{
	l->s = s;
	l->unix_socket = unix_socket;
	l->lev = lev;
	l->resume = evtimer_new(s->base, lp_listener_on_resume, l);
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
	evhttp_set_bevcb(l->http, lp_conn_new, l);
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
	} else if (o->socket_group && parse_gid(o->socket_group, &s->group)) {
		/* A number: the host's group, which a container's /etc/group does not know. */
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
		lp_conn_free(s->conns);
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
