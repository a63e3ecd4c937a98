// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* Exited processes' totals, packed (packed.h). */
#include "tracked/packed.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

/* Everything before the histograms is kept as it is: a field added there is kept too. */
#define HEAD offsetof(struct lp_proc_stats, hist)
_Static_assert(HEAD + sizeof(((struct lp_proc_stats *)0)->hist) == sizeof(struct lp_proc_stats),
	       "the histograms end struct lp_proc_stats");

/* The header's bytes, each histogram's sum and maximum, then for each histogram its runs:
 * a start, a length and that many counts, ended by a run of length 0. */
struct lp_packed {
	size_t size; /* of the whole, in bytes */
	unsigned char head[HEAD];
	__u64 sum_ns[LP_H_NR], max_ns[LP_H_NR];
	__u64 runs[];
};

/* The next run of non-zero counts in b from *i on: its start and length, *i past it; false
 * when there is none. */
static bool next_run(const __u64 *b, size_t *i, size_t *start, size_t *len)
{
	while (*i < LP_HIST_NBUCKETS && !b[*i])
		(*i)++;
	if (*i == LP_HIST_NBUCKETS)
		return false;
	*start = *i;
	while (*i < LP_HIST_NBUCKETS && b[*i])
		(*i)++;
	*len = *i - *start;
	return true;
}

struct lp_packed *lp_stats_pack(const struct lp_proc_stats *s)
{
	size_t words = 0, size, w = 0, i, start, len;
	struct lp_packed *p;

	for (int h = 0; h < LP_H_NR; h++) {
		for (i = 0; next_run(s->hist[h].buckets, &i, &start, &len);)
			words += 2 + len;
		words += 2;
	}
	size = sizeof(*p) + words * sizeof(__u64);
	if (!(p = malloc(size)))
		return NULL;
	p->size = size;
	memcpy(p->head, s, HEAD);
	for (int h = 0; h < LP_H_NR; h++) {
		const __u64 *b = s->hist[h].buckets;

		p->sum_ns[h] = s->hist[h].sum_ns;
		p->max_ns[h] = s->hist[h].max_ns;
		for (i = 0; next_run(b, &i, &start, &len);) {
			p->runs[w++] = start;
			p->runs[w++] = len;
			memcpy(&p->runs[w], &b[start], len * sizeof(__u64));
			w += len;
		}
		p->runs[w++] = 0;
		p->runs[w++] = 0;
	}
	return p;
}

void lp_stats_unpack(const struct lp_packed *p, struct lp_proc_stats *out)
{
	size_t w = 0;

	memset(out, 0, sizeof(*out));
	memcpy(out, p->head, HEAD);
	for (int h = 0; h < LP_H_NR; h++) {
		out->hist[h].sum_ns = p->sum_ns[h];
		out->hist[h].max_ns = p->max_ns[h];
		for (;;) {
			__u64 start = p->runs[w++], len = p->runs[w++];

			if (!len)
				break;
			memcpy(&out->hist[h].buckets[start], &p->runs[w], len * sizeof(__u64));
			w += len;
		}
	}
}

size_t lp_packed_size(const struct lp_packed *p)
{
	return p->size;
}
