// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* Exited processes' totals packed and unpacked: every byte back as it was, whatever the
 * histograms hold (none, sparse, runs at both ends, every bucket), in a fraction of the
 * whole struct's size when the histograms are sparse, as real ones are. */
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "tracked/packed.h"

static struct lp_proc_stats s, back;

static void fill(unsigned seed, unsigned every)
{
	memset(&s, 0, sizeof(s));
	srand(seed);
	s.tracked_since_ns = 123456789;
	s.exit_ns = 987654321;
	s.gen_last_ns = 5;
	s.gen_end_ns = 6;
	s.tgid = 4242;
	for (int i = 0; i < LP_C_NR; i++)
		s.ctr[i] = (__u64)rand() << 20 | (__u64)i;
	for (int h = 0; h < LP_H_NR; h++) {
		s.hist[h].sum_ns = (__u64)rand() * 1000;
		s.hist[h].max_ns = (__u64)rand();
		for (size_t b = 0; every && b < LP_HIST_NBUCKETS; b++)
			if (rand() % every == 0)
				s.hist[h].buckets[b] = (__u64)rand() + 1;
	}
}

static bool round_trip(const char *what, size_t *size)
{
	struct lp_packed *p = lp_stats_pack(&s);
	bool same;

	memset(&back, 0xa5, sizeof(back));
	if (!p) {
		CHECK(p, "%s: packed", what);
		return false;
	}
	lp_stats_unpack(p, &back);
	same = memcmp(&s, &back, sizeof(s)) == 0;
	CHECK(same, "%s: unpacked as it was", what);
	*size = lp_packed_size(p);
	free(p);
	return same;
}

int main(void)
{
	size_t size;

	fill(1, 0);
	round_trip("no bucket counted", &size);
	CHECK(size < sizeof(s) / 10, "empty histograms: %zu bytes of %zu", size, sizeof(s));
	fill(2, 40);
	round_trip("sparse buckets", &size);
	CHECK(size < sizeof(s) / 4, "sparse: %zu bytes of %zu", size, sizeof(s));
	fill(3, 1);
	round_trip("every bucket", &size);
	CHECK(size > sizeof(s), "every bucket: a little more than whole (%zu)", size);
	fill(4, 0);
	for (int h = 0; h < LP_H_NR; h++) {
		s.hist[h].buckets[0] = 1;
		s.hist[h].buckets[LP_HIST_NBUCKETS - 1] = 2;
		s.hist[h].buckets[LP_HIST_NBUCKETS - 2] = 3;
	}
	round_trip("runs at both ends", &size);
	for (unsigned seed = 10; seed < 200; seed++) {
		fill(seed, 1 + seed % 17);
		if (!round_trip("random", &size))
			break;
	}
	return check_done();
}
