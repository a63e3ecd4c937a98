/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* Requests from llama_decode's batches (struct lp_ev_decode): which sequence each token
 * belongs to, at which position, and whether its logits are wanted say where a request
 * starts, when its first token came out and when it ended, in any llama.cpp server,
 * binding or app, with no flag of theirs.
 *
 * A request of sequence s starts at a decode carrying s when s has none in flight, or when
 * s's positions start again (a position at or below the last one seen) or jump (past the
 * next one: a cached prompt restored into its cache), or when s, having
 * produced output, is given tokens whose logits are not wanted (a new prompt). It ends
 * when, having produced output, s is left out of more decodes in a row than there are
 * sequences in flight (a server's generating slots are in every decode; an app may take
 * them in turns), when s starts again, when the process exits, or LP_REQ_IDLE_NS after s's
 * last decode. */
#ifndef LLMPROF_REQUESTS_H
#define LLMPROF_REQUESTS_H

#include <linux/types.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "llmprof/abi.h"
#include "llmprof/hist.h"

#define LP_REQ_KEEP 256		       /* finished requests kept per process */
#define LP_REQ_ACTIVE 64	       /* sequences in flight followed at once */
#define LP_REQ_IDLE_NS 2000000000ULL   /* a generating sequence quiet this long is over */
#define LP_REQ_STALE_NS 60000000000ULL /* one still in its prompt, this long */

enum lp_req_end {
	LP_REQ_OPEN = 0,
	LP_REQ_END_ABSENT,  /* a decode went on without it */
	LP_REQ_END_RESTART, /* its sequence started again */
	LP_REQ_END_IDLE,    /* no decode of it for LP_REQ_IDLE_NS */
	LP_REQ_END_EXIT,    /* the process exited */
	LP_REQ_END_NR,
};

extern const char *const lp_req_end_names[LP_REQ_END_NR];

/* The requests over, for /metrics: log-linear histograms (the kernel's layout: native
 * histograms) and exact counts at the OpenTelemetry GenAI conventions' advised bounds
 * (classic buckets) of time to first token, time per output token and duration. */
enum lp_req_hist { LP_RH_TTFT, LP_RH_TPOT, LP_RH_E2E, LP_RH_NR };
#define LP_REQ_BOUNDS_MAX 16

struct lp_req_bounds {
	size_t n;
	double le[LP_REQ_BOUNDS_MAX]; /* seconds */
};

extern const struct lp_req_bounds lp_req_bounds[LP_RH_NR];

struct lp_req_metrics {
	struct lp_hist h[LP_RH_NR];
	uint64_t le[LP_RH_NR][LP_REQ_BOUNDS_MAX]; /* requests at or below each bound */
	uint64_t requests, prompt_tokens, output_tokens, reused_tokens;
};

void lp_req_metrics_add(struct lp_req_metrics *to, const struct lp_req_metrics *from);

struct lp_request {
	uint64_t id;	     /* its number in the process, from 1 */
	int32_t seq;	     /* llama_seq_id */
	int32_t reused;	     /* its first position: tokens kept from before; -1 unknown */
	int32_t pos_max;     /* -1 unknown */
	uint32_t flags;	     /* enum lp_batch_flag of its decodes */
	uint64_t start_ns;   /* the first decode's entry */
	uint64_t first_ns;   /* the return of the decode of its first output; 0 none yet */
	uint64_t last_ns;    /* the return of its last decode */
	uint64_t prefill_ns; /* the decodes that carried its prompt, summed */
	/* the decodes after its first output, summed; of them, those that also carried
	 * other sequences' prompt tokens (tokens whose logits are not wanted) */
	uint64_t gen_decode_ns, interfered_ns;
	/* other sequences' prompt tokens in the decodes that carried its prompt */
	uint64_t prefill_peer_tokens;
	uint32_t prompt_tokens;
	uint32_t output_tokens; /* logits wanted for it: tokens it generated */
	uint32_t decodes;
	uint32_t peers_sum; /* the sequences of its decodes, summed (occupancy) */
	uint32_t missed;    /* decodes in a row that went on without it */
	enum lp_req_end end;
};

/* Derived figures of one request, in ns; 0 where not defined. */
uint64_t lp_request_ttft_ns(const struct lp_request *q);
uint64_t lp_request_decode_ns(const struct lp_request *q); /* first output to the last */
uint64_t lp_request_tpot_ns(const struct lp_request *q);   /* decode_ns per output after */

struct lp_requests {
	struct lp_request active[LP_REQ_ACTIVE];
	uint32_t nactive;
	/* The requests over: a ring of cap (growing to LP_REQ_KEEP, doubling: most processes
	 * have a few), the newest at (ndone - 1) % cap. */
	struct lp_request *done;
	uint32_t cap;
	uint64_t ndone;
	uint64_t next_id;
	/* totals */
	uint64_t decodes, decodes_failed, decodes_unread;
	uint64_t prompt_tokens, output_tokens, reused_tokens;
	uint64_t occupancy[LP_BATCH_SEQS + 1]; /* decodes by sequences carried (16: more) */
	uint64_t active_full;		       /* sequences not followed: LP_REQ_ACTIVE in flight */
	struct lp_req_metrics m;	       /* of the requests over */
	uint32_t flags;			       /* enum lp_batch_flag, of all its decodes */
};

/* Frees what rq holds and zeroes it; lp_requests_free() frees rq too (calloc'd). */
void lp_requests_clear(struct lp_requests *rq);
void lp_requests_free(struct lp_requests *rq);
/* A decode's record of this process. */
void lp_requests_decode(struct lp_requests *rq, const struct lp_ev_decode *e);
/* Ends the requests quiet since before now (or all, exited). */
void lp_requests_settle(struct lp_requests *rq, uint64_t now, bool exited);
/* How many finished requests are kept (NULL: 0), and the i-th newest of them. */
uint64_t lp_requests_kept(const struct lp_requests *rq);
const struct lp_request *lp_requests_done(const struct lp_requests *rq, uint64_t i);

#endif
