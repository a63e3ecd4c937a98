// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* GET /debug/pprof/profile and /debug/pprof/folded: a profile window opened for the asker,
 * answered when it ends (profiles.h). */
#include "serving/profiles.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/procfs.h"
#include "llmprof/protocol.h"

/* Windows one user other than root and the group may hold, and all such users together:
 * the rest stay for root, the group and the scrapers. */
#define PER_UID 2
#define UNPRIVILEGED (LP_PROFILE_MAX_WINDOWS / 2)

static bool visible(const void *who, const struct lp_target *t)
{
	return lp_api_visible(who, t);
}

static bool parse(const char *query, struct lp_profile_query *q, struct lp_api_response *res)
{
	char buf[LP_MAX_HEADERS_BYTES + 1], *save = NULL, *kv, *end;

	if (!query)
		return true;
	if (strlen(query) >= sizeof(buf)) {
		lp_api_error(res, 400, LP_ERR_BAD_REQUEST, "the query is longer than %zu bytes",
			     sizeof(buf) - 1);
		return false;
	}
	strcpy(buf, query);
	for (kv = strtok_r(buf, "&", &save); kv; kv = strtok_r(NULL, "&", &save)) {
		char *v = strchr(kv, '=');

		if (!v || !lp_api_url_decode(v + 1)) {
			lp_api_error(res, 400, LP_ERR_BAD_REQUEST,
				     "the query wants key=value pairs (seconds=S, pid=N, "
				     "phase=prompt|generation|outside, by=op_group)");
			return false;
		}
		*v++ = '\0';
		if (!strcmp(kv, "seconds")) {
			q->seconds = strtod(v, &end);
			if (end == v || *end || !(q->seconds >= 1) ||
			    !(q->seconds <= LP_PROFILE_MAX_SECONDS)) {
				lp_api_error(res, 400, LP_ERR_BAD_REQUEST,
					     "seconds= wants a number from 1 to %d",
					     LP_PROFILE_MAX_SECONDS);
				return false;
			}
		} else if (!strcmp(kv, "pid")) {
			if (lp_parse_pid(v, &q->pid) < 0) {
				lp_api_error(res, 400, LP_ERR_BAD_REQUEST,
					     "pid= wants a process id");
				return false;
			}
		} else if (!strcmp(kv, "phase")) {
			q->phase = !strcmp(v, "prompt")	      ? LP_PHASE_PROMPT
				   : !strcmp(v, "generation") ? LP_PHASE_GENERATION
				   : !strcmp(v, "outside")    ? LP_PHASE_OUTSIDE
							      : -2;
			if (q->phase == -2) {
				lp_api_error(res, 400, LP_ERR_BAD_REQUEST,
					     "phase= wants prompt, generation or outside");
				return false;
			}
		} else if (!strcmp(kv, "by")) {
			if (strcmp(v, "op_group")) {
				lp_api_error(res, 400, LP_ERR_BAD_REQUEST, "by= wants op_group");
				return false;
			}
			q->by_group = true;
		}
		/* Other parameters are ignored, as Go's net/http/pprof ignores them (a
		 * scraper's own). */
	}
	return true;
}

void lp_api_get_profile(const struct lp_api_backend *b, const struct lp_api_request *req,
			const char *query, enum lp_profile_format format,
			struct lp_api_response *res)
{
	struct lp_profile_query q = {
		.seconds = LP_PROFILE_DEFAULT_SECONDS,
		.phase = -1,
		.format = format,
		.visible = visible,
		.who = req->peer,
		.who_size = sizeof(*req->peer),
		.privileged = req->peer->privileged,
		.uid = req->peer->known ? req->peer->uid : (uid_t)-1,
		.max_per_uid = PER_UID,
		.max_unprivileged = UNPRIVILEGED,
	};
	struct lp_stream *out = NULL;
	int r;

	if (!parse(query, &q, res))
		return;
	if (!b->profile_start) {
		lp_api_error(res, 503, LP_ERR_INTERNAL, "this daemon makes no profiles");
		return;
	}
	r = b->profile_start(b->ctx, &q, &out);
	if (r == -ESRCH) {
		lp_api_not_tracked(res, q.pid);
	} else if (r == -EBUSY) {
		lp_api_error(res, 503, LP_ERR_TOO_MANY_PROFILES,
			     "as many profiles are being collected as may be (%d at once; %d for "
			     "one user other than root and group '%s', %d for all such users): "
			     "try again when one ends",
			     LP_PROFILE_MAX_WINDOWS, PER_UID, b->group, UNPRIVILEGED);
	} else if (r == -ENOTSUP) {
		lp_api_error(res, 503, LP_ERR_NO_SAMPLING,
			     "profiles need the sampler: this daemon runs with --sample-hz 0, or "
			     "its cpu-clock events do not run BPF (llmprofctl status)");
	} else if (r < 0) {
		lp_api_error(res, 500, LP_ERR_INTERNAL, "no profile: %s", strerror(-r));
	} else {
		res->status = 200;
		res->content_type = out->content_type;
		res->stream = out;
	}
}
