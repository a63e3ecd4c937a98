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
	rank = lp_quantile_rank(q, total);
	for (unsigned i = 0; i < LP_HIST_NBUCKETS; i++) {
		cum += h->buckets[i];
		if (cum >= rank)
			return lp_quantile_estimate(lp_hist_lower(i), lp_hist_upper(i), h->max_ns);
	}
	return h->max_ns;
}
