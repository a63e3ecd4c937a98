// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* Histograms as the API returns them, their difference between two reads, and percentiles
 * by the daemon's rule, so that a percentile over all the data equals the API's own. */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <linux/types.h>

#include "llmprof/hist.h"
#include "llmprofctl.h"

static uint64_t u64(const cJSON *v)
{
	return cJSON_IsNumber(v) && v->valuedouble > 0 ? (uint64_t)v->valuedouble : 0;
}

int ctl_hist_parse(const cJSON *doc, struct ctl_hist *h)
{
	const cJSON *buckets = cJSON_GetObjectItemCaseSensitive(doc, "buckets"), *b;
	size_t n = 0;

	memset(h, 0, sizeof(*h));
	if (!doc)
		return 0;
	if (!cJSON_IsObject(doc) || (buckets && !cJSON_IsArray(buckets)))
		return -EINVAL;
	h->count = u64(cJSON_GetObjectItemCaseSensitive(doc, "count"));
	h->sum = u64(cJSON_GetObjectItemCaseSensitive(doc, "sum"));
	h->max = u64(cJSON_GetObjectItemCaseSensitive(doc, "max"));
	if (!buckets)
		return 0;
	h->b = calloc((size_t)cJSON_GetArraySize(buckets) + 1, sizeof(*h->b));
	if (!h->b)
		return -ENOMEM;
	cJSON_ArrayForEach(b, buckets)
	{
		const cJSON *lo = cJSON_GetArrayItem(b, 0), *hi = cJSON_GetArrayItem(b, 1);

		if (!cJSON_IsArray(b) || cJSON_GetArraySize(b) != 3 || !cJSON_IsNumber(lo) ||
		    !(cJSON_IsNumber(hi) || cJSON_IsNull(hi))) {
			ctl_hist_free(h);
			return -EINVAL;
		}
		h->b[n].lo = u64(lo);
		h->b[n].hi = cJSON_IsNull(hi) ? UINT64_MAX : u64(hi);
		h->b[n].count = u64(cJSON_GetArrayItem(b, 2));
		n++;
	}
	h->n = n;
	return 0;
}

int ctl_hist_delta(const struct ctl_hist *now, const struct ctl_hist *before, struct ctl_hist *out)
{
	size_t j = 0;

	memset(out, 0, sizeof(*out));
	out->b = calloc(now->n + 1, sizeof(*out->b));
	if (!out->b)
		return -ENOMEM;
	/* Both lists ascend by lower bound and hold non-empty buckets only. */
	for (size_t i = 0; i < now->n; i++) {
		struct ctl_bucket d = now->b[i];

		while (j < before->n && before->b[j].lo < d.lo) {
			if (before->b[j].count)
				goto stale;
			j++;
		}
		if (j < before->n && before->b[j].lo == d.lo) {
			if (before->b[j].count > d.count)
				goto stale;
			d.count -= before->b[j++].count;
		}
		if (d.count)
			out->b[out->n++] = d;
		out->count += d.count;
	}
	for (; j < before->n; j++)
		if (before->b[j].count)
			goto stale;
	out->sum = now->sum >= before->sum ? now->sum - before->sum : 0;
	/* The interval's maximum is unknown; the all-time one still bounds it. */
	out->max = now->max;
	return 0;
stale:
	ctl_hist_free(out);
	return -ESTALE;
}

double ctl_hist_quantile(const struct ctl_hist *h, double q)
{
	uint64_t total = 0, rank, cum = 0;

	for (size_t i = 0; i < h->n; i++)
		total += h->b[i].count;
	if (!total)
		return NAN;
	rank = lp_quantile_rank(q, total);
	for (size_t i = 0; i < h->n; i++) {
		cum += h->b[i].count;
		if (cum >= rank)
			return (double)lp_quantile_estimate(h->b[i].lo, h->b[i].hi, h->max);
	}
	return (double)h->max;
}

void ctl_hist_free(struct ctl_hist *h)
{
	free(h->b);
	memset(h, 0, sizeof(*h));
}
