/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* The profile routes: their query (seconds, pid, phase, by), the asker's share of the
 * windows, and the deferred answer the window writes at its end (profile/profiler.h). */
#ifndef LLMPROF_PROFILES_H
#define LLMPROF_PROFILES_H

#include "profile/window.h"
#include "serving/answer.h"

void lp_api_get_profile(const struct lp_api_backend *b, const struct lp_api_request *req,
			const char *query, enum lp_profile_format format,
			struct lp_api_response *res);

#endif
