// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* Unit tests of daemon/engine/requests.c: requests from decode records as a server, an app
 * with one sequence and broken batches give them. The e2e tier (test_requests.py) holds
 * the same rules to llama-server's own timings. */
#include <string.h>

#include "check.h"
#include "engine/requests.h"

#define MS 1000000ULL

static struct lp_requests rq; /* each test clears it first */

/* A decode record: n sequences, each {seq, tokens, outputs, pos_min, pos_max}. */
static struct lp_ev_decode dec(uint64_t begin_ms, uint64_t end_ms, unsigned n,
			       const struct lp_batch_seq *s)
{
	struct lp_ev_decode e = {
		.type = LP_EV_DECODE, .begin_ns = begin_ms * MS, .end_ns = end_ms * MS, .nseq = n};

	for (unsigned i = 0; i < n; i++) {
		e.seq[i] = s[i];
		e.n_tokens += (int32_t)s[i].tokens;
	}
	return e;
}

static void feed(struct lp_requests *rq, uint64_t b, uint64_t e, unsigned n,
		 const struct lp_batch_seq *s)
{
	struct lp_ev_decode ev = dec(b, e, n, s);

	lp_requests_decode(rq, &ev);
}

/* llama-server restores a cached prompt of 40 tokens into a generating slot and decodes
 * only its last: the positions jump from 6 to 39, another request, 39 tokens kept. */
static void test_restored(void)
{
	lp_requests_clear(&rq);
	feed(&rq, 0, 5, 1, (struct lp_batch_seq[]){{1, 5, 1, 0, 4}});
	feed(&rq, 6, 7, 1, (struct lp_batch_seq[]){{1, 1, 1, 5, 5}});
	feed(&rq, 8, 9, 1, (struct lp_batch_seq[]){{1, 1, 1, 39, 39}});
	CHECK(rq.ndone == 1 && lp_requests_done(&rq, 0)->end == LP_REQ_END_RESTART &&
		      lp_requests_done(&rq, 0)->output_tokens == 2 && rq.nactive == 1 &&
		      rq.active[0].reused == 39,
	      "a jump forward in positions is a new request, 39 tokens kept");
}

/* A server's two slots: continuous batching, one prompt joining another's generation. */
static void test_server(void)
{
	const struct lp_request *q;

	lp_requests_clear(&rq);
	/* Slot 0: a prompt of 10 tokens at 0-9, its last token's logits wanted. */
	feed(&rq, 0, 10, 1, (struct lp_batch_seq[]){{0, 10, 1, 0, 9}});
	/* Slot 0 generates; slot 1's prompt of 5 joins at 12. */
	feed(&rq, 12, 20, 2, (struct lp_batch_seq[]){{0, 1, 1, 10, 10}, {1, 5, 1, 0, 4}});
	feed(&rq, 21, 23, 2, (struct lp_batch_seq[]){{0, 1, 1, 11, 11}, {1, 1, 1, 5, 5}});
	CHECK(rq.nactive == 2 && rq.ndone == 0, "two in flight: %u, %llu over", rq.nactive,
	      (unsigned long long)rq.ndone);
	/* Slot 0 stopped: the next decodes carry slot 1 only. Two in a row could be an app
	 * taking its two sequences in turns; the third ends it, at its own last decode. */
	feed(&rq, 24, 26, 1, (struct lp_batch_seq[]){{1, 1, 1, 6, 6}});
	feed(&rq, 27, 28, 1, (struct lp_batch_seq[]){{1, 1, 1, 7, 7}});
	CHECK(rq.ndone == 0, "slot 0 still in flight, left out of 2 decodes with 2 in flight");
	feed(&rq, 29, 30, 1, (struct lp_batch_seq[]){{1, 1, 1, 8, 8}});
	CHECK(rq.ndone == 1, "slot 0 over once 3 decodes in a row went on without it");
	q = lp_requests_done(&rq, 0);
	CHECK(q->seq == 0 && q->end == LP_REQ_END_ABSENT && q->prompt_tokens == 10 &&
		      q->output_tokens == 3 && q->reused == 0,
	      "slot 0: seq %d, end %d, in %u, out %u, reused %d", q->seq, q->end, q->prompt_tokens,
	      q->output_tokens, q->reused);
	CHECK(lp_request_ttft_ns(q) == 10 * MS && lp_request_decode_ns(q) == 13 * MS &&
		      lp_request_tpot_ns(q) == 13 * MS / 2 && q->prefill_ns == 10 * MS,
	      "slot 0's times: ttft %llu, decode %llu, tpot %llu",
	      (unsigned long long)lp_request_ttft_ns(q),
	      (unsigned long long)lp_request_decode_ns(q),
	      (unsigned long long)lp_request_tpot_ns(q));
	CHECK(q->decodes == 3 && q->peers_sum == 5, "slot 0 shared 2 of its 3 decodes");
	/* Slot 1's client sends its prompt again: 4 of its tokens come from the cache, the
	 * positions start again at 4. */
	feed(&rq, 31, 33, 1, (struct lp_batch_seq[]){{1, 2, 1, 4, 5}});
	CHECK(rq.ndone == 2, "slot 1's positions started again: a new request");
	q = lp_requests_done(&rq, 0);
	CHECK(q->seq == 1 && q->end == LP_REQ_END_RESTART && q->prompt_tokens == 5 &&
		      q->output_tokens == 5 && lp_request_ttft_ns(q) == 8 * MS,
	      "slot 1's first: in %u, out %u, ttft %llu", q->prompt_tokens, q->output_tokens,
	      (unsigned long long)lp_request_ttft_ns(q));
	CHECK(rq.active[0].reused == 4 && rq.reused_tokens == 4, "4 tokens reused");
	/* Nothing for 2 s: over, at the next read. */
	lp_requests_settle(&rq, 33 * MS + LP_REQ_IDLE_NS - 1, false);
	CHECK(rq.nactive == 1, "in flight until 2 s after its last decode");
	lp_requests_settle(&rq, 33 * MS + LP_REQ_IDLE_NS, false);
	CHECK(rq.nactive == 0 && lp_requests_done(&rq, 0)->end == LP_REQ_END_IDLE,
	      "then over, idle");
	CHECK(rq.prompt_tokens == 17 && rq.output_tokens == 9 && rq.decodes == 7,
	      "totals: prompt %llu, output %llu, decodes %llu",
	      (unsigned long long)rq.prompt_tokens, (unsigned long long)rq.output_tokens,
	      (unsigned long long)rq.decodes);
	CHECK(rq.occupancy[1] == 5 && rq.occupancy[2] == 2, "occupancy by decode");
}

/* A prompt longer than a batch, in two decodes; a server prefilling one slot while another
 * waits (not carried, no output yet: still in flight). */
static void test_chunked_prompt(void)
{
	const struct lp_request *q;

	lp_requests_clear(&rq);
	feed(&rq, 0, 50, 2, (struct lp_batch_seq[]){{0, 512, 0, 0, 511}, {1, 10, 0, 0, 9}});
	feed(&rq, 51, 60, 1, (struct lp_batch_seq[]){{0, 100, 1, 512, 611}});
	CHECK(rq.nactive == 2, "slot 1, its prompt begun and no output, is not over");
	feed(&rq, 61, 70, 2, (struct lp_batch_seq[]){{0, 1, 1, 612, 612}, {1, 3, 1, 10, 12}});
	q = &rq.active[0];
	CHECK(q->seq == 0 && q->prompt_tokens == 612 && q->first_ns == 60 * MS &&
		      q->prefill_ns == 59 * MS && q->output_tokens == 2,
	      "slot 0: prompt %u over two decodes, first output at the second's end",
	      q->prompt_tokens);
	CHECK(rq.active[1].prompt_tokens == 13, "slot 1: 13 prompt tokens over two decodes");
}

/* node-llama-cpp with two sequences of one context: their prompts in one decode, then
 * their tokens in turns, one sequence a decode. Two requests of 20 outputs, not forty. */
static void test_turns(void)
{
	lp_requests_clear(&rq);
	feed(&rq, 0, 10, 2, (struct lp_batch_seq[]){{0, 16, 1, 0, 15}, {1, 16, 1, 0, 15}});
	for (int32_t i = 0; i < 38; i++)
		feed(&rq, 11 + 2 * (uint64_t)i, 12 + 2 * (uint64_t)i, 1,
		     (struct lp_batch_seq[]){{i % 2, 1, 1, 16 + i / 2, 16 + i / 2}});
	lp_requests_settle(&rq, 100 * MS, true);
	CHECK(rq.ndone == 2 && lp_requests_done(&rq, 0)->output_tokens == 20 &&
		      lp_requests_done(&rq, 1)->output_tokens == 20 &&
		      lp_requests_done(&rq, 0)->prompt_tokens == 16,
	      "two requests of 20 outputs: %llu over, %u and %u", (unsigned long long)rq.ndone,
	      rq.ndone ? lp_requests_done(&rq, 0)->output_tokens : 0,
	      rq.ndone > 1 ? lp_requests_done(&rq, 1)->output_tokens : 0);
}

/* llama-simple: llama_batch_get_one, no positions; a new prompt after generation starts a
 * new request; the process exits. */
static void test_one_sequence(void)
{
	struct lp_ev_decode e;

	lp_requests_clear(&rq);
	e = dec(0, 5, 1, (struct lp_batch_seq[]){{0, 8, 1, -1, -1}});
	e.flags = LP_BATCH_NO_POS;
	lp_requests_decode(&rq, &e);
	for (int i = 0; i < 4; i++) {
		e = dec(6 + 2 * (uint64_t)i, 7 + 2 * (uint64_t)i, 1,
			(struct lp_batch_seq[]){{0, 1, 1, -1, -1}});
		e.flags = LP_BATCH_NO_POS;
		lp_requests_decode(&rq, &e);
	}
	CHECK(rq.nactive == 1 && rq.active[0].output_tokens == 5 && rq.active[0].reused == -1,
	      "one request, 5 out, reuse unknown");
	e = dec(20, 25, 1, (struct lp_batch_seq[]){{0, 6, 1, -1, -1}});
	lp_requests_decode(&rq, &e);
	CHECK(rq.ndone == 1 && lp_requests_done(&rq, 0)->end == LP_REQ_END_RESTART &&
		      rq.active[0].prompt_tokens == 6,
	      "a prompt after generation: a new request");
	lp_requests_settle(&rq, 26 * MS, true);
	CHECK(rq.ndone == 2 && lp_requests_done(&rq, 0)->end == LP_REQ_END_EXIT && !rq.nactive,
	      "the exit ends it");
	CHECK(rq.flags & LP_BATCH_NO_POS, "the flag is kept for the document");
}

/* Failed and unreadable decodes count nothing; a batch with more sequences than read ends
 * no request by absence; sequences past LP_REQ_ACTIVE are counted as not followed; the
 * ring keeps the last LP_REQ_KEEP. */
static void test_limits(void)
{
	struct lp_ev_decode e;

	lp_requests_clear(&rq);
	feed(&rq, 0, 5, 1, (struct lp_batch_seq[]){{3, 4, 1, 0, 3}});
	e = dec(6, 7, 1, (struct lp_batch_seq[]){{3, 1, 1, 4, 4}});
	e.ret = 1;
	lp_requests_decode(&rq, &e);
	e = dec(8, 9, 0, NULL);
	e.flags = LP_BATCH_UNREAD;
	lp_requests_decode(&rq, &e);
	CHECK(rq.decodes == 3 && rq.decodes_failed == 1 && rq.decodes_unread == 1 &&
		      rq.active[0].output_tokens == 1 && rq.nactive == 1,
	      "a failed and an unread decode change no request");
	e = dec(10, 11, 1, (struct lp_batch_seq[]){{7, 1, 1, 0, 0}});
	e.flags = LP_BATCH_SEQS_FULL;
	lp_requests_decode(&rq, &e);
	CHECK(rq.nactive == 2 && rq.occupancy[LP_BATCH_SEQS] == 1,
	      "sequence 3 absent from a batch not read whole: still in flight");
	lp_requests_clear(&rq);
	for (int32_t s = 0; s < LP_REQ_ACTIVE + 3; s++)
		feed(&rq, 0, 1, 1, (struct lp_batch_seq[]){{s, 2, 0, 0, 1}});
	CHECK(rq.nactive == LP_REQ_ACTIVE && rq.active_full == 3, "%u followed, %llu not",
	      rq.nactive, (unsigned long long)rq.active_full);
	lp_requests_clear(&rq);
	for (uint64_t i = 0; i < LP_REQ_KEEP + 10; i++)
		feed(&rq, 10 * i, 10 * i + 1, 1, (struct lp_batch_seq[]){{0, 3, 1, 0, 2}});
	CHECK(rq.ndone == LP_REQ_KEEP + 9 && lp_requests_done(&rq, 0)->id == LP_REQ_KEEP + 9 &&
		      lp_requests_done(&rq, LP_REQ_KEEP - 1)->id == 10,
	      "the ring: newest %llu, oldest kept %llu",
	      (unsigned long long)lp_requests_done(&rq, 0)->id,
	      (unsigned long long)lp_requests_done(&rq, LP_REQ_KEEP - 1)->id);
}

int main(void)
{
	test_server();
	test_restored();
	test_chunked_prompt();
	test_turns();
	test_one_sequence();
	test_limits();
	lp_requests_clear(&rq);
	return check_done();
}
