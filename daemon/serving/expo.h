/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* The Prometheus exposition formats: the text format 0.0.4, and the delimited protobuf of
 * io.prometheus.client.MetricFamily, which alone carries native histograms (Prometheus
 * 2.40+ with --enable-feature=native-histograms asks for it). What is said is the caller's
 * (metrics.c); how it is written is this room's. Pure: writes to memory. */
#ifndef LLMPROF_EXPO_H
#define LLMPROF_EXPO_H

#include <stdbool.h>
#include <stddef.h>

#include "base/hist.h"

enum lp_expo_format { LP_EXPO_TEXT, LP_EXPO_PROTOBUF };
enum lp_expo_type { LP_EXPO_COUNTER, LP_EXPO_GAUGE, LP_EXPO_HISTOGRAM };

#define LP_EXPO_TEXT_TYPE "text/plain; version=0.0.4; charset=utf-8"
#define LP_EXPO_PROTOBUF_TYPE                                                        \
	"application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; " \
	"encoding=delimited"

/* The format an Accept header asks for: protobuf when it names the delimited
 * MetricFamily encoding, else text. */
enum lp_expo_format lp_expo_negotiate(const char *accept);

/* Histogram bounds in seconds: every power of two from 2^LP_EXPO_LE_MIN_EXP ns to
 * 2^LP_EXPO_LE_MAX_EXP ns, and the kernel's bounds between them next to buckets that
 * counted; native histograms use schema 3 (8 buckets per doubling). */
#define LP_EXPO_LE_MIN_EXP 10 /* 1.024 us */
#define LP_EXPO_LE_MAX_EXP 36 /* 68.7 s */
#define LP_EXPO_NATIVE_SCHEMA 3

struct lp_label {
	const char *name;
	const char *value; /* another user's text is escaped (escape.h) unless clean */
};

struct lp_expo;

struct lp_expo *lp_expo_open(enum lp_expo_format fmt);
/* Classic bounds at the powers of two only: 30 series a histogram, whatever counted, and
 * histogram_quantile() within a factor of two (native histograms are unchanged). */
void lp_expo_coarse(struct lp_expo *e);
/* Starts a family; name is the whole name (counters with _total, histograms without
 * _bucket). Every sample until the next family belongs to it. */
void lp_expo_family(struct lp_expo *e, const char *name, enum lp_expo_type type, const char *help);
/* A counter's or gauge's value. */
void lp_expo_value(struct lp_expo *e, const struct lp_label *l, size_t n, double value);
/* A histogram of nanoseconds, written in seconds. */
void lp_expo_hist(struct lp_expo *e, const struct lp_label *l, size_t n, const struct lp_hist *h);
/* The same with classic buckets at the bounds le[0..nle) (seconds, increasing), cum[i]
 * observations at or below le[i]: exact where the caller kept them (the native buckets and
 * the sum still come from h). */
void lp_expo_hist_at(struct lp_expo *e, const struct lp_label *l, size_t n, const struct lp_hist *h,
		     const double *le, const uint64_t *cum, size_t nle);
/* The whole exposition, malloc'd: 0, or -ENOMEM (nothing to free then). Frees e. */
int lp_expo_close(struct lp_expo *e, char **out, size_t *len);

/* The native (schema 3) bucket a value of ns nanoseconds falls in, for the tests: bucket i
 * holds (2^((i-1)/8), 2^(i/8)] seconds. */
int lp_expo_native_index(double ns);

#endif
