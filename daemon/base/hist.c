// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* Percentile estimation over the shared log-linear histogram layout. */
#include "base/hist.h"

#include <math.h>

void lp_hist_add(struct lp_hist *dst, const struct lp_hist *src)
{
	dst->sum_ns += src->sum_ns;
	if (src->max_ns > dst->max_ns)
		dst->max_ns = src->max_ns;
	for (unsigned b = 0; b < LP_HIST_NBUCKETS; b++)
		dst->buckets[b] += src->buckets[b];
}

void lp_stats_add(struct lp_proc_stats *dst, const struct lp_proc_stats *src)
{
	for (int i = 0; i < LP_C_NR; i++)
		dst->ctr[i] += src->ctr[i];
	for (int i = 0; i < LP_H_NR; i++)
		lp_hist_add(&dst->hist[i], &src->hist[i]);
}

uint64_t lp_hist_total(const struct lp_hist *h)
{
	uint64_t n = 0;

	for (unsigned i = 0; i < LP_HIST_NBUCKETS; i++)
		n += h->buckets[i];
	return n;
}

uint64_t lp_hist_quantile(const struct lp_hist *h, double q)
{
	uint64_t total = lp_hist_total(h), rank, cum = 0;

	if (total == 0)
		return 0;
	if (q <= 0)
		q = 1e-12;
	if (q > 1)
		q = 1;
	rank = (uint64_t)ceil(q * (double)total);
	if (rank < 1)
		rank = 1;
	for (unsigned i = 0; i < LP_HIST_NBUCKETS; i++) {
		uint64_t lo, hi, est;

		cum += h->buckets[i];
		if (cum < rank)
			continue;
		lo = lp_hist_lower(i);
		if (i < LP_HIST_SUB)
			return lo;
		hi = lp_hist_upper(i);
		/* The open last bucket has no midpoint: its best estimate is the maximum. */
		if (hi == ~0ULL)
			return h->max_ns > lo ? h->max_ns : lo;
		est = lo + (hi - lo) / 2;
		if (h->max_ns >= lo && h->max_ns < est)
			est = h->max_ns;
		return est;
	}
	return h->max_ns;
}
