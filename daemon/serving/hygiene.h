/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* HTTP as RFC 9110 and 9112 have it, where evhttp (libevent 2.1) is more lenient: the input
 * watched as it arrives (NULs, the line a chunked body failed on), evhttp's own HTML error
 * pages replaced with JSON errors of the same status before they reach the socket, and
 * framing checked before a request is routed. */
#ifndef LLMPROF_HYGIENE_H
#define LLMPROF_HYGIENE_H

#include "serving/listener.h"

/* Callbacks on a connection's input and output buffers (arg: its struct conn). */
void lp_http_on_input(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg);
void lp_http_on_output(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg);

/* What makes req unfit to route (a NUL in its bytes, a header name that is not a token,
 * framing RFC 9112 6.3 refuses): true when res holds the error; the connection then closes
 * after it. c may be NULL (not one of ours). */
bool lp_http_refused(struct conn *c, struct evhttp_request *req, struct lp_api_response *res);

#endif
