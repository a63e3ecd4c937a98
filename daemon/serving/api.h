/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* The HTTP API's routing: method and path to a route (figures.h reads, actions.h changes),
 * access control by the peer's credentials, every outcome a JSON document or a JSON error
 * (answer.h). Transport-free: server.c feeds it requests, tests/fuzz feeds it bytes. */
#ifndef LLMPROF_API_H
#define LLMPROF_API_H

#include "serving/answer.h"

/* The routes' methods and paths ({pid} for a process id), in the table's order, up to cap;
 * returns how many there are. For the documentation's check. */
size_t lp_api_routes(const char **methods, const char **paths, size_t cap);

void lp_api_handle(const struct lp_api_backend *b, const struct lp_api_request *req,
		   struct lp_api_response *res);

#endif
