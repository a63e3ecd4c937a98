/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* The one histogram layout of llmprofd: log-linear buckets over nanoseconds, shared by the
 * BPF programs (which index into it) and user space (which reads bounds and percentiles).
 *
 * Values below LP_HIST_SUB are exact. Above, each power of two [2^e, 2^(e+1)) is split into
 * LP_HIST_SUB equal sub-buckets, so a bucket is at most 1/LP_HIST_SUB of its lower bound wide:
 * reporting a bucket's midpoint is off by at most 1/(2*LP_HIST_SUB) = 6.25% of the true value.
 * The last bucket also takes everything above 2^(LP_HIST_MAX_EXP+1) ns (about 275 s).
 *
 * No includes, only __u32/__u64, and no loops: the BPF verifier must see straight-line code.
 */
#ifndef LLMPROF_HIST_H
#define LLMPROF_HIST_H

#define LP_HIST_SUB_BITS 3
#define LP_HIST_SUB (1U << LP_HIST_SUB_BITS)
#define LP_HIST_MAX_EXP 37
#define LP_HIST_NBUCKETS ((LP_HIST_MAX_EXP - LP_HIST_SUB_BITS + 2) * LP_HIST_SUB)

/* No count field: the total is the sum of the buckets (one atomic add less per event). */
struct lp_hist {
	__u64 sum_ns;
	__u64 max_ns;
	__u64 buckets[LP_HIST_NBUCKETS];
};

/* floor(log2(v)) for v > 0, branch-free enough for the verifier. */
static inline __u32 lp_log2(__u64 v)
{
	__u32 r = 0, s;

	s = (v > 0xFFFFFFFFULL) << 5;
	v >>= s;
	r |= s;
	s = (v > 0xFFFF) << 4;
	v >>= s;
	r |= s;
	s = (v > 0xFF) << 3;
	v >>= s;
	r |= s;
	s = (v > 0xF) << 2;
	v >>= s;
	r |= s;
	s = (v > 0x3) << 1;
	v >>= s;
	r |= s;
	r |= (__u32)(v >> 1);
	return r;
}

static inline __u32 lp_hist_index(__u64 v)
{
	__u32 e;

	if (v < LP_HIST_SUB)
		return (__u32)v;
	e = lp_log2(v);
	if (e > LP_HIST_MAX_EXP)
		return LP_HIST_NBUCKETS - 1;
	return (e - LP_HIST_SUB_BITS + 1) * LP_HIST_SUB +
	       (__u32)((v >> (e - LP_HIST_SUB_BITS)) & (LP_HIST_SUB - 1));
}

/* Smallest value that lands in bucket idx. */
static inline __u64 lp_hist_lower(__u32 idx)
{
	__u32 g, e;

	if (idx < LP_HIST_SUB)
		return idx;
	g = idx / LP_HIST_SUB;
	e = g + LP_HIST_SUB_BITS - 1;
	return (1ULL << e) + (__u64)(idx % LP_HIST_SUB) * (1ULL << (e - LP_HIST_SUB_BITS));
}

/* One past the largest value of bucket idx; the last bucket is open (returns ~0). */
static inline __u64 lp_hist_upper(__u32 idx)
{
	if (idx >= LP_HIST_NBUCKETS - 1)
		return ~0ULL;
	return lp_hist_lower(idx + 1);
}

#ifndef __bpf__
/* The percentile rule, one for the daemon (daemon/base/hist.c) and the client's intervals
 * (client/hist.c), so that a percentile over all the data is the API's own: the rank of
 * the sample wanted among total (1-based, the q-th share rounded up)... */
static inline __u64 lp_quantile_rank(double q, __u64 total)
{
	double x;
	__u64 r;

	q = q <= 0 ? 1e-12 : q > 1 ? 1 : q;
	x = q * (double)total;
	r = (__u64)x;
	r += (double)r < x;
	return r < 1 ? 1 : r;
}

/* ... and the estimate of the bucket [lo, hi) it is in, with the maximum seen: an exact
 * bucket's value (width one), else the midpoint, or the maximum where that is lower; the
 * open last bucket (hi ~0) has no midpoint, the maximum is its best estimate. */
static inline __u64 lp_quantile_estimate(__u64 lo, __u64 hi, __u64 max)
{
	__u64 est;

	if (hi - lo <= 1)
		return lo;
	if (hi == ~0ULL)
		return max > lo ? max : lo;
	est = lo + (hi - lo) / 2;
	return max >= lo && max < est ? max : est;
}
#endif

#endif
