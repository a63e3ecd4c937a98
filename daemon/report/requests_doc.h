/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* A process's requests (engine/requests.h) as the API's JSON. */
#ifndef LLMPROF_REPORT_REQUESTS_H
#define LLMPROF_REPORT_REQUESTS_H

#include <cjson/cJSON.h>
#include <stdbool.h>

#include "engine/requests.h"

/* rq NULL: no decode seen yet; batch_reader false: the kernel cannot read batches. */
cJSON *lp_render_requests(const struct lp_requests *rq, bool batch_reader);

#endif
