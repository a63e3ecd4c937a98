// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* Requests from llama_decode's batches (requests.h). */
#include "engine/requests.h"

#include <stdlib.h>
#include <string.h>

const char *const lp_req_end_names[LP_REQ_END_NR] = {"open", "absent", "restart", "idle", "exit"};

/* gen_ai.server.time_to_first_token, gen_ai.server.time_per_output_token and
 * gen_ai.server.request.duration's explicit_bucket_boundaries advisory. */
const struct lp_req_bounds lp_req_bounds[LP_RH_NR] = {
	[LP_RH_TTFT] = {16,
			{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5,
			 5.0, 7.5, 10.0}},
	[LP_RH_TPOT] = {13,
			{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5}},
	[LP_RH_E2E] = {14,
		       {0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48,
			40.96, 81.92}},
};

static void observe(struct lp_req_metrics *m, enum lp_req_hist k, uint64_t ns)
{
	struct lp_hist *h = &m->h[k];

	h->buckets[lp_hist_index(ns)]++;
	h->sum_ns += ns;
	if (ns > h->max_ns)
		h->max_ns = ns;
	for (size_t i = 0; i < lp_req_bounds[k].n; i++)
		m->le[k][i] += (double)ns <= lp_req_bounds[k].le[i] * 1e9;
}

void lp_req_metrics_add(struct lp_req_metrics *to, const struct lp_req_metrics *from)
{
	for (int k = 0; k < LP_RH_NR; k++) {
		for (size_t b = 0; b < LP_HIST_NBUCKETS; b++)
			to->h[k].buckets[b] += from->h[k].buckets[b];
		to->h[k].sum_ns += from->h[k].sum_ns;
		if (from->h[k].max_ns > to->h[k].max_ns)
			to->h[k].max_ns = from->h[k].max_ns;
		for (size_t i = 0; i < LP_REQ_BOUNDS_MAX; i++)
			to->le[k][i] += from->le[k][i];
	}
	to->requests += from->requests;
	to->prompt_tokens += from->prompt_tokens;
	to->output_tokens += from->output_tokens;
	to->reused_tokens += from->reused_tokens;
}

uint64_t lp_request_ttft_ns(const struct lp_request *q)
{
	return q->first_ns > q->start_ns ? q->first_ns - q->start_ns : 0;
}

uint64_t lp_request_decode_ns(const struct lp_request *q)
{
	return q->first_ns && q->last_ns > q->first_ns ? q->last_ns - q->first_ns : 0;
}

uint64_t lp_request_tpot_ns(const struct lp_request *q)
{
	return q->output_tokens > 1 ? lp_request_decode_ns(q) / (q->output_tokens - 1) : 0;
}

uint64_t lp_requests_kept(const struct lp_requests *rq)
{
	return !rq ? 0 : rq->ndone < rq->cap ? rq->ndone : rq->cap;
}

const struct lp_request *lp_requests_done(const struct lp_requests *rq, uint64_t i)
{
	return &rq->done[(rq->ndone - 1 - i) % rq->cap];
}

void lp_requests_clear(struct lp_requests *rq)
{
	free(rq->done);
	memset(rq, 0, sizeof(*rq));
}

void lp_requests_free(struct lp_requests *rq)
{
	if (rq)
		lp_requests_clear(rq);
	free(rq);
}

/* Room for one more finished request: the ring doubles until LP_REQ_KEEP, then the oldest
 * goes. False out of memory (the request is counted, not kept). */
static bool room(struct lp_requests *rq)
{
	uint32_t cap = rq->cap ? 2 * rq->cap : 8;
	struct lp_request *v;

	if (rq->ndone < rq->cap || rq->cap >= LP_REQ_KEEP)
		return true;
	if (cap > LP_REQ_KEEP)
		cap = LP_REQ_KEEP;
	v = realloc(rq->done, cap * sizeof(*v));
	if (!v)
		return false;
	rq->done = v;
	rq->cap = cap;
	return true;
}

/* Moves active request k to the finished ones. */
static void finish(struct lp_requests *rq, uint32_t k, enum lp_req_end why)
{
	struct lp_request *q = &rq->active[k];

	q->end = why;
	rq->m.requests++;
	rq->m.prompt_tokens += q->prompt_tokens;
	rq->m.output_tokens += q->output_tokens;
	rq->m.reused_tokens += q->reused > 0 ? (uint64_t)q->reused : 0;
	if (q->first_ns)
		observe(&rq->m, LP_RH_TTFT, lp_request_ttft_ns(q));
	if (q->output_tokens > 1)
		observe(&rq->m, LP_RH_TPOT, lp_request_tpot_ns(q));
	observe(&rq->m, LP_RH_E2E, q->last_ns > q->start_ns ? q->last_ns - q->start_ns : 0);
	if (room(rq))
		rq->done[rq->ndone++ % rq->cap] = *q;
	rq->active[k] = rq->active[--rq->nactive];
}

static struct lp_request *active_of(struct lp_requests *rq, int32_t seq)
{
	for (uint32_t k = 0; k < rq->nactive; k++)
		if (rq->active[k].seq == seq)
			return &rq->active[k];
	return NULL;
}

static struct lp_request *start(struct lp_requests *rq, const struct lp_ev_decode *e,
				const struct lp_batch_seq *b)
{
	struct lp_request *q;

	if (rq->nactive == LP_REQ_ACTIVE) {
		rq->active_full++;
		return NULL;
	}
	q = &rq->active[rq->nactive++];
	memset(q, 0, sizeof(*q));
	q->id = ++rq->next_id;
	q->seq = b->seq;
	q->reused = b->pos_min;
	q->pos_max = -1;
	q->start_ns = e->begin_ns;
	if (b->pos_min > 0)
		rq->reused_tokens += (uint64_t)b->pos_min;
	return q;
}

/* Whether b, of a sequence with request q in flight, begins another one: its positions
 * start again, or jump past the next one (a request carries on at pos_max + 1; a gap
 * means the KV cache was given another sequence's state: llama-server restores a cached
 * prompt into the slot and decodes only its last token). */
static bool starts_again(const struct lp_request *q, const struct lp_batch_seq *b)
{
	if (b->pos_min >= 0 && q->pos_max >= 0 &&
	    (b->pos_min <= q->pos_max || b->pos_min > q->pos_max + 1))
		return true;
	return q->output_tokens > 0 && b->tokens > b->outputs;
}

void lp_requests_decode(struct lp_requests *rq, const struct lp_ev_decode *e)
{
	uint32_t nseq = e->nseq < LP_BATCH_SEQS ? e->nseq : LP_BATCH_SEQS, prompts = 0;
	uint64_t prompt_tokens = 0; /* of the sequences given prompt tokens */
	uint64_t took = e->end_ns > e->begin_ns ? e->end_ns - e->begin_ns : 0;

	rq->decodes++;
	if (e->ret != 0) {
		/* Nothing came of it: a server tries again, often with a smaller batch. */
		rq->decodes_failed++;
		return;
	}
	if (e->flags & LP_BATCH_UNREAD) {
		rq->decodes_unread++;
		return;
	}
	rq->flags |= e->flags;
	rq->occupancy[e->flags & LP_BATCH_SEQS_FULL ? LP_BATCH_SEQS : nseq]++;
	lp_requests_settle(rq, e->begin_ns, false);
	/* A generating sequence that decodes went on without, more of them in a row than
	 * there are sequences in flight, is over: a server puts every generating slot into
	 * every decode, an app may take its sequences in turns (node-llama-cpp: 0, 1, 0, 1).
	 * Its end is its last decode's, whenever it is seen. Unknowable when the batch had
	 * more sequences than were read. */
	for (uint32_t k = 0, inflight = rq->nactive;
	     k < rq->nactive && !(e->flags & LP_BATCH_SEQS_FULL);) {
		struct lp_request *q = &rq->active[k];
		bool carried = false;

		for (uint32_t i = 0; i < nseq && !carried; i++)
			carried = e->seq[i].seq == q->seq;
		q->missed = carried ? 0 : q->missed + 1;
		if (q->output_tokens > 0 && q->missed > inflight)
			finish(rq, k, LP_REQ_END_ABSENT);
		else
			k++;
	}
	for (uint32_t i = 0; i < nseq; i++)
		if (e->seq[i].tokens > e->seq[i].outputs) {
			prompts++;
			prompt_tokens += e->seq[i].tokens;
		}
	for (uint32_t i = 0; i < nseq; i++) {
		const struct lp_batch_seq *b = &e->seq[i];
		struct lp_request *q = active_of(rq, b->seq);

		if (q && starts_again(q, b)) {
			finish(rq, (uint32_t)(q - rq->active), LP_REQ_END_RESTART);
			q = NULL;
		}
		if (!q && !(q = start(rq, e, b)))
			continue;
		q->decodes++;
		q->peers_sum += nseq;
		q->flags |= e->flags;
		if (!q->first_ns) {
			q->prompt_tokens += b->tokens;
			q->prefill_ns += took;
			q->prefill_peer_tokens +=
				prompt_tokens - (b->tokens > b->outputs ? b->tokens : 0);
			rq->prompt_tokens += b->tokens;
			if (b->outputs)
				q->first_ns = e->end_ns;
		} else {
			q->gen_decode_ns += took;
			if (prompts > (b->tokens > b->outputs))
				q->interfered_ns += took;
		}
		q->output_tokens += b->outputs;
		rq->output_tokens += b->outputs;
		q->last_ns = e->end_ns;
		if (b->pos_max > q->pos_max)
			q->pos_max = b->pos_max;
	}
}

void lp_requests_settle(struct lp_requests *rq, uint64_t now, bool exited)
{
	for (uint32_t k = 0; k < rq->nactive;) {
		const struct lp_request *q = &rq->active[k];
		uint64_t quiet = now > q->last_ns ? now - q->last_ns : 0;

		if (exited)
			finish(rq, k, LP_REQ_END_EXIT);
		else if (quiet >= (q->output_tokens ? LP_REQ_IDLE_NS : LP_REQ_STALE_NS))
			finish(rq, k, LP_REQ_END_IDLE);
		else
			k++;
	}
}
