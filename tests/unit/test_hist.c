// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* Unit tests of the shared histogram layout: bucket index and bounds, and percentile
 * estimation against exact quantiles of known distributions. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "base/hist.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;

static uint64_t rnd(void)
{
	/* xorshift64*: deterministic, so a failure reproduces. */
	rng_state ^= rng_state >> 12;
	rng_state ^= rng_state << 25;
	rng_state ^= rng_state >> 27;
	return rng_state * 0x2545F4914F6CDD1DULL;
}

static double unif(void)
{
	return ((double)(rnd() >> 11) + 0.5) / 9007199254740992.0;
}

static void test_log2(void)
{
	for (int e = 0; e < 64; e++) {
		uint64_t v = 1ULL << e;

		CHECK(lp_log2(v) == (uint32_t)e, "log2(2^%d) = %u", e, lp_log2(v));
		if (e > 0)
			CHECK(lp_log2(v - 1) == (uint32_t)(e - 1), "log2(2^%d-1)", e);
	}
	for (int i = 0; i < 100000; i++) {
		uint64_t v = rnd() >> (rnd() % 64);

		if (v)
			CHECK(lp_log2(v) == (uint32_t)(63 - __builtin_clzll(v)), "log2(%lu)",
			      (unsigned long)v);
	}
}

static void test_bounds(void)
{
	/* Buckets tile the line: each starts where the previous ends. */
	for (uint32_t i = 0; i + 1 < LP_HIST_NBUCKETS; i++) {
		CHECK(lp_hist_upper(i) == lp_hist_lower(i + 1), "bucket %u upper", i);
		CHECK(lp_hist_index(lp_hist_lower(i)) == i, "index(lower(%u))", i);
		CHECK(lp_hist_index(lp_hist_upper(i) - 1) == i, "index(upper(%u)-1)", i);
		if (i >= LP_HIST_SUB)
			CHECK((lp_hist_upper(i) - lp_hist_lower(i)) * LP_HIST_SUB <=
				      lp_hist_lower(i),
			      "bucket %u wider than 1/%u of its lower bound", i, LP_HIST_SUB);
	}
	CHECK(lp_hist_index(0) == 0, "index(0)");
	CHECK(lp_hist_index(~0ULL) == LP_HIST_NBUCKETS - 1, "huge values land in the last bucket");
	/* The range: resolution below 1 us, and at least 100 s before the open end. */
	CHECK(lp_hist_upper(lp_hist_index(1000)) - lp_hist_lower(lp_hist_index(1000)) <= 128,
	      "1 us resolution");
	CHECK(lp_hist_lower(LP_HIST_NBUCKETS - 1) >= 100000000000ULL, "range reaches 100 s");
	for (int i = 0; i < 200000; i++) {
		uint64_t v = rnd() >> (rnd() % 64);
		uint32_t idx = lp_hist_index(v);

		CHECK(idx < LP_HIST_NBUCKETS, "index in range");
		CHECK((lp_hist_lower(idx) <= v && v < lp_hist_upper(idx)) ||
			      idx == LP_HIST_NBUCKETS - 1,
		      "%lu inside its bucket %u", (unsigned long)v, idx);
	}
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* Fills a histogram from samples and compares p50/p90/p99/p100 with the exact values. */
static void check_quantiles(const char *name, uint64_t *s, size_t n)
{
	static struct lp_hist h;
	const double qs[] = {0.5, 0.9, 0.99, 0.999, 1.0};

	memset(&h, 0, sizeof(h));
	for (size_t i = 0; i < n; i++) {
		h.buckets[lp_hist_index(s[i])]++;
		h.sum_ns += s[i];
		if (s[i] > h.max_ns)
			h.max_ns = s[i];
	}
	qsort(s, n, sizeof(*s), cmp_u64);
	CHECK(lp_hist_total(&h) == n, "%s total", name);
	for (size_t k = 0; k < sizeof(qs) / sizeof(qs[0]); k++) {
		size_t rank = (size_t)ceil(qs[k] * (double)n);
		uint64_t exact = s[rank - 1], est = lp_hist_quantile(&h, qs[k]);
		double err =
			exact ? fabs((double)est - (double)exact) / (double)exact : (double)est;

		CHECK(err <= LP_HIST_QUANTILE_REL_ERROR + 1e-12,
		      "%s q%.3f: estimate %lu, exact %lu, error %.4f > %.4f", name, qs[k],
		      (unsigned long)est, (unsigned long)exact, err, LP_HIST_QUANTILE_REL_ERROR);
	}
}

static void test_quantiles(void)
{
	enum { N = 200000 };
	static uint64_t s[N];

	for (size_t i = 0; i < N; i++) /* uniform 1 us .. 10 ms */
		s[i] = 1000 + (uint64_t)(unif() * 9999000.0);
	check_quantiles("uniform", s, N);
	for (size_t i = 0; i < N; i++) /* log-normal around 50 us, heavy tail */
		s[i] = (uint64_t)exp(log(50000.0) +
				     1.5 * sqrt(-2 * log(unif())) * cos(6.283185307 * unif()));
	check_quantiles("lognormal", s, N);
	for (size_t i = 0; i < N; i++) /* bimodal: spin-fast and sleep-slow barrier waits */
		s[i] = (i % 10) ? 2000 + rnd() % 500 : 4000000 + rnd() % 1000000;
	check_quantiles("bimodal", s, N);
	for (size_t i = 0; i < N; i++)
		s[i] = 5000000;
	check_quantiles("constant", s, N);
	for (size_t i = 0; i < N; i++) /* tiny values are exact */
		s[i] = rnd() % LP_HIST_SUB;
	check_quantiles("tiny", s, N);
	s[0] = 200000000000ULL; /* 200 s, in the open last bucket */
	check_quantiles("single huge", s, 1);
}

static void test_empty(void)
{
	static struct lp_hist h;

	CHECK(lp_hist_quantile(&h, 0.5) == 0, "empty histogram");
}

int main(void)
{
	test_log2();
	test_bounds();
	test_quantiles();
	test_empty();
	return check_done();
}
