/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* The API's routes that change something or start work, for root and the group: a reset,
 * precise mode, a timeline record and its fetch, a bandwidth measurement. Their bodies are
 * read strictly: one JSON object, each key once, nothing after it. */
#ifndef LLMPROF_ACTIONS_H
#define LLMPROF_ACTIONS_H

#include "serving/answer.h"

/* GET reads the host's bandwidth (measure false), POST measures it again (202). */
void lp_api_bandwidth(const struct lp_api_backend *b, const struct lp_api_request *req,
		      const struct lp_peer *p, bool measure, struct lp_api_response *res);
void lp_api_post_reset(const struct lp_api_backend *b, const struct lp_api_request *req,
		       const struct lp_peer *p, pid_t pid, struct lp_api_response *res);
void lp_api_post_precise(const struct lp_api_backend *b, const struct lp_api_request *req,
			 pid_t pid, struct lp_api_response *res);
void lp_api_post_record(const struct lp_api_backend *b, const struct lp_api_request *req, pid_t pid,
			struct lp_api_response *res);
void lp_api_get_record(const struct lp_api_backend *b, const struct lp_peer *p, pid_t pid,
		       struct lp_api_response *res);

#endif
