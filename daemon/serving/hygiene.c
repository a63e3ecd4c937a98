// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* HTTP checks beyond evhttp's (hygiene.h). */
#include "serving/hygiene.h"

#include <event2/buffer.h>
#include <event2/keyvalq_struct.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/queue.h>

#include "llmprof/protocol.h"

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
void lp_http_on_input(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg)
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

void lp_http_on_output(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg)
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

bool lp_http_refused(struct conn *c, struct evhttp_request *req, struct lp_api_response *res)
{
	/* evhttp ends a header value at a NUL; RFC 9110 5.5 wants the request refused (or the
	 * NUL replaced), and a body here is JSON, which holds none. The bytes evhttp drained
	 * so far are this request's, and those before it. */
	if (c && c->nul_at < c->drained) {
		lp_api_error(res, 400, LP_ERR_BAD_REQUEST,
			     "a NUL byte in the request: no header value or body here holds one");
		return true;
	}
	return framing_error(req, res);
}
