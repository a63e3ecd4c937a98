// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* A process's requests as JSON (requests.h): totals, percentiles over the requests kept,
 * each of them, and those in flight. */
#include "report/requests_doc.h"

#include "escape.h"

#include <stdlib.h>

static cJSON *request(const struct lp_request *q)
{
	cJSON *o = cJSON_CreateObject();

	lp_json_add_u64(o, "id", q->id);
	cJSON_AddNumberToObject(o, "seq", q->seq);
	lp_json_add_u64(o, "start_ns", q->start_ns);
	lp_json_add_u64(o, "prompt_tokens", q->prompt_tokens);
	lp_json_add_u64(o, "output_tokens", q->output_tokens);
	if (q->reused >= 0)
		cJSON_AddNumberToObject(o, "reused_tokens", q->reused);
	else
		cJSON_AddNullToObject(o, "reused_tokens");
	if (q->first_ns)
		lp_json_add_u64(o, "ttft_ns", lp_request_ttft_ns(q));
	else
		cJSON_AddNullToObject(o, "ttft_ns");
	lp_json_add_u64(o, "prefill_ns", q->prefill_ns);
	lp_json_add_u64(o, "decode_ns", lp_request_decode_ns(q));
	lp_json_add_u64(o, "generation_decode_ns", q->gen_decode_ns);
	lp_json_add_u64(o, "interfered_ns", q->interfered_ns);
	lp_json_add_u64(o, "prefill_peer_tokens", q->prefill_peer_tokens);
	if (q->output_tokens > 1)
		lp_json_add_u64(o, "tpot_ns", lp_request_tpot_ns(q));
	else
		cJSON_AddNullToObject(o, "tpot_ns");
	lp_json_add_u64(o, "e2e_ns", q->last_ns > q->start_ns ? q->last_ns - q->start_ns : 0);
	lp_json_add_u64(o, "decodes", q->decodes);
	cJSON_AddNumberToObject(o, "mean_occupancy",
				q->decodes ? (double)q->peers_sum / q->decodes : 0);
	cJSON_AddStringToObject(o, "ended_by", lp_req_end_names[q->end]);
	return o;
}

static int by_value(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* p50, p90, p99 and max of v[0..n) (sorted here), nearest rank; null when n is 0. */
static void quantiles(cJSON *o, const char *k, uint64_t *v, size_t n)
{
	static const struct {
		const char *name;
		double q;
	} at[] = {{"p50", 0.50}, {"p90", 0.90}, {"p99", 0.99}, {"max", 1.0}};
	cJSON *e;

	if (!n) {
		cJSON_AddNullToObject(o, k);
		return;
	}
	qsort(v, n, sizeof(*v), by_value);
	e = cJSON_AddObjectToObject(o, k);
	for (size_t i = 0; i < sizeof(at) / sizeof(at[0]); i++) {
		size_t rank = (size_t)(at[i].q * (double)n + 0.999999);

		lp_json_add_u64(e, at[i].name, v[(rank ? rank : 1) - 1]);
	}
}

static void percentiles(cJSON *o, const struct lp_requests *rq, uint64_t kept)
{
	uint64_t *v = calloc(kept ? kept : 1, sizeof(*v));
	size_t n;

	lp_json_add_u64(o, "requests", kept);
	if (!v)
		return;
	n = 0;
	for (uint64_t i = 0; i < kept; i++)
		if (lp_requests_done(rq, i)->first_ns)
			v[n++] = lp_request_ttft_ns(lp_requests_done(rq, i));
	quantiles(o, "ttft_ns", v, n);
	n = 0;
	for (uint64_t i = 0; i < kept; i++)
		if (lp_requests_done(rq, i)->output_tokens > 1)
			v[n++] = lp_request_tpot_ns(lp_requests_done(rq, i));
	quantiles(o, "tpot_ns", v, n);
	n = 0;
	for (uint64_t i = 0; i < kept; i++) {
		const struct lp_request *q = lp_requests_done(rq, i);

		v[n++] = q->last_ns > q->start_ns ? q->last_ns - q->start_ns : 0;
	}
	quantiles(o, "e2e_ns", v, n);
	free(v);
}

static const char *const flag_names[] = {"unread", "truncated", "sequences_full", "no_positions",
					 "shared_tokens"};

cJSON *lp_render_requests(const struct lp_requests *rq, bool batch_reader)
{
	cJSON *o = cJSON_CreateObject(), *a;
	uint64_t kept = lp_requests_kept(rq);

	cJSON_AddStringToObject(o, "source", "llama_decode's batches");
	if (!batch_reader)
		cJSON_AddStringToObject(o, "unavailable",
					"the kernel lacks the bpf_loop helper (Linux 5.17): "
					"batches are not read");
	else if (!rq)
		cJSON_AddStringToObject(o, "unavailable",
					"no llama_decode of this process was seen yet");
	/* What the batches cannot say: a request's arrival is in the server's code, not in
	 * llama_decode's arguments. Said, not guessed. */
	cJSON_AddStringToObject(
		cJSON_AddObjectToObject(o, "not_measured"), "queue_wait",
		"the time from a request's arrival to its first decode (tokenizing, "
		"waiting for a slot) is not in llama_decode's batches; ttft_ns "
		"starts at the first decode");
	if (!rq)
		return o;
	lp_json_add_u64(o, "requests", rq->ndone);
	lp_json_add_u64(o, "in_flight_now", rq->nactive);
	lp_json_add_u64(o, "prompt_tokens", rq->prompt_tokens);
	lp_json_add_u64(o, "output_tokens", rq->output_tokens);
	lp_json_add_u64(o, "reused_tokens", rq->reused_tokens);
	lp_json_add_u64(o, "decodes", rq->decodes);
	lp_json_add_u64(o, "decodes_failed", rq->decodes_failed);
	lp_json_add_u64(o, "decodes_unread", rq->decodes_unread);
	lp_json_add_u64(o, "sequences_not_followed", rq->active_full);
	a = cJSON_AddArrayToObject(o, "flags");
	for (size_t i = 0; i < sizeof(flag_names) / sizeof(flag_names[0]); i++)
		if (rq->flags & (1u << i))
			cJSON_AddItemToArray(a, cJSON_CreateString(flag_names[i]));
	a = cJSON_AddArrayToObject(o, "occupancy");
	for (int i = 1; i <= LP_BATCH_SEQS; i++)
		if (rq->occupancy[i]) {
			cJSON *e = cJSON_CreateObject();

			lp_json_add_u64(e, "sequences", (uint64_t)i);
			cJSON_AddBoolToObject(e, "or_more", i == LP_BATCH_SEQS);
			lp_json_add_u64(e, "decodes", rq->occupancy[i]);
			cJSON_AddItemToArray(a, e);
		}
	percentiles(cJSON_AddObjectToObject(o, "kept"), rq, kept);
	a = cJSON_AddArrayToObject(o, "last");
	for (uint64_t i = 0; i < kept; i++)
		cJSON_AddItemToArray(a, request(lp_requests_done(rq, i)));
	a = cJSON_AddArrayToObject(o, "in_flight");
	for (uint32_t i = 0; i < rq->nactive; i++)
		cJSON_AddItemToArray(a, request(&rq->active[i]));
	return o;
}
