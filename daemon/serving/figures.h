/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* The API's routes that read figures (GET): status, version, the process list and its
 * filters, one process's document or a part of it, /metrics. */
#ifndef LLMPROF_FIGURES_H
#define LLMPROF_FIGURES_H

#include "serving/answer.h"

void lp_api_get_status(const struct lp_api_backend *b, const struct lp_peer *p,
		       struct lp_api_response *res);
void lp_api_get_version(struct lp_api_response *res);
/* query: the list's filters (pid=, state=, comm=, model=, workload=), or NULL. */
void lp_api_get_processes(const struct lp_api_backend *b, const struct lp_peer *p,
			  const char *query, struct lp_api_response *res);
/* A process's document, or the part render makes of it. */
void lp_api_get_process(const struct lp_api_backend *b, const struct lp_peer *p, pid_t pid,
			struct lp_api_response *res,
			cJSON *(*render)(const struct lp_report *, const struct lp_proc_view *));
void lp_api_get_metrics(const struct lp_api_backend *b, const struct lp_api_request *req,
			struct lp_api_response *res);

#endif
