// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* Prometheus exposition: text 0.0.4 lines, or length-delimited MetricFamily messages (the
 * protobuf wire format, protobuf.h). */
#include "serving/expo.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "escape.h"
#include "base/protobuf.h"

struct lp_expo {
	enum lp_expo_format fmt;
	struct lp_pb out;
	struct lp_pb fam; /* protobuf: the family being written, without its length */
	bool in_family;
	char name[128];
	enum lp_expo_type type;
	struct lp_pb set; /* text: the current series' labels, a="x",b="y", reused */
	bool coarse;	  /* classic bounds at powers of two only */
};

/* --- protobuf --- */

/* io.prometheus.client.MetricType */
enum { PB_COUNTER = 0, PB_GAUGE = 1, PB_HISTOGRAM = 4 };

static uint64_t zigzag(int64_t v)
{
	return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
}

static void pb_string(struct lp_pb *b, unsigned field, const char *s)
{
	lp_pb_bytes(b, field, s, strlen(s));
}

/* A nested message, then emptied for reuse. */
static void pb_message(struct lp_pb *b, unsigned field, struct lp_pb *sub)
{
	if (sub->err)
		b->err = sub->err;
	lp_pb_bytes(b, field, sub->p, sub->len);
	sub->len = 0;
}

/* --- shared --- */

enum lp_expo_format lp_expo_negotiate(const char *accept)
{
	if (accept && strstr(accept, "application/vnd.google.protobuf") &&
	    strstr(accept, "proto=io.prometheus.client.MetricFamily") &&
	    strstr(accept, "encoding=delimited"))
		return LP_EXPO_PROTOBUF;
	return LP_EXPO_TEXT;
}

struct lp_expo *lp_expo_open(enum lp_expo_format fmt)
{
	struct lp_expo *e = calloc(1, sizeof(*e));

	if (e)
		e->fmt = fmt;
	return e;
}

void lp_expo_coarse(struct lp_expo *e)
{
	e->coarse = true;
}

/* A label value: as it is when printable UTF-8, else escaped (a scraper refuses invalid
 * UTF-8, a terminal obeys escapes). Returns v or buf. */
static const char *safe(const char *v, char *buf, size_t size)
{
	if (lp_escape_clean(v, strlen(v)))
		return v;
	lp_escape(buf, size, v, strlen(v));
	return buf;
}

/* The histogram's classic bounds, exact at ns resolution: bucket b of the kernel's layout
 * starts at lp_hist_lower(b). Calls fn(bound_ns, count below it) in increasing order. */
static void classic_bounds(const struct lp_hist *h, bool coarse,
			   void (*fn)(void *, uint64_t, uint64_t), void *arg)
{
	unsigned lo = lp_hist_index(1ULL << LP_EXPO_LE_MIN_EXP);
	unsigned hi = lp_hist_index(1ULL << LP_EXPO_LE_MAX_EXP);
	uint64_t cum = 0;

	for (unsigned b = 0; b < lo; b++)
		cum += h->buckets[b];
	for (unsigned b = lo; b <= hi; b++) {
		uint64_t bound = lp_hist_lower(b);

		/* A power of two always; unless coarse, the bound between two kernel buckets
		 * once either has counted. Counts only grow, so a bound that appeared stays. */
		if (!(bound & (bound - 1)) || (!coarse && (h->buckets[b] || h->buckets[b - 1])))
			fn(arg, bound, cum);
		cum += h->buckets[b];
	}
}

/* --- text --- */

static void text_put(struct lp_expo *e, const char *s)
{
	lp_pb_put(&e->out, s, strlen(s));
}

static void text_printf(struct lp_expo *e, const char *fmt, ...)
	__attribute__((format(printf, 2, 3)));

static void text_printf(struct lp_expo *e, const char *fmt, ...)
{
	char buf[512];
	va_list ap;
	int n;

	va_start(ap, fmt);
	n = vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	if (n >= 0)
		lp_pb_put(&e->out, buf, (size_t)n < sizeof(buf) ? (size_t)n : sizeof(buf) - 1);
}

/* The series' labels, a="x",b="y", into e->set (kept from series to series, so no
 * allocation each); label values with \, " and newline escaped (the exposition format's
 * three), each run between them put whole. */
static void text_label_set(struct lp_expo *e, const struct lp_label *l, size_t n)
{
	char buf[LP_ESCAPE_SIZE(1024)];
	struct lp_pb *out = &e->set;

	out->len = 0;
	for (size_t i = 0; i < n && l[i].name; i++) {
		const char *v = safe(l[i].value, buf, sizeof(buf));

		if (i)
			lp_pb_put(out, ",", 1);
		lp_pb_put(out, l[i].name, strlen(l[i].name));
		lp_pb_put(out, "=\"", 2);
		for (size_t run; *v; v += run) {
			run = strcspn(v, "\\\"\n");
			lp_pb_put(out, v, run);
			if (!v[run])
				break;
			lp_pb_put(out, v[run] == '\\' ? "\\\\" : v[run] == '"' ? "\\\"" : "\\n", 2);
			run++;
		}
		lp_pb_put(out, "\"", 1);
	}
}

/* name{labels[,extra="value"]} with the series' labels made by text_label_set(). */
static void text_series(struct lp_expo *e, const char *suffix, const char *extra,
			const char *extra_value)
{
	text_put(e, e->name);
	text_put(e, suffix);
	if (!e->set.len && !extra)
		return; /* no braces for no labels */
	lp_pb_put(&e->out, "{", 1);
	lp_pb_put(&e->out, e->set.p, e->set.len);
	if (extra)
		text_printf(e, "%s%s=\"%s\"", e->set.len ? "," : "", extra, extra_value);
	lp_pb_put(&e->out, "}", 1);
}

static void text_bound(void *arg, uint64_t bound, uint64_t cum)
{
	struct lp_expo *e = arg;
	char le[32];

	snprintf(le, sizeof(le), "%.12g", (double)bound * 1e-9);
	text_series(e, "_bucket", "le", le);
	text_printf(e, " %llu\n", (unsigned long long)cum);
}

/* --- protobuf --- */

/* The current family into the output, with its length before it. */
static void pb_end_family(struct lp_expo *e)
{
	if (!e->in_family)
		return;
	if (e->fam.err)
		e->out.err = e->fam.err;
	lp_pb_varint(&e->out, e->fam.len);
	lp_pb_put(&e->out, e->fam.p, e->fam.len);
	e->fam.len = 0;
	e->in_family = false;
}

static void pb_labels(struct lp_pb *metric, const struct lp_label *l, size_t n)
{
	char buf[LP_ESCAPE_SIZE(1024)];
	struct lp_pb pair = {0};

	for (size_t i = 0; i < n; i++) {
		pb_string(&pair, 1, l[i].name);
		pb_string(&pair, 2, safe(l[i].value, buf, sizeof(buf)));
		pb_message(metric, 1, &pair);
	}
	lp_pb_free(&pair);
}

struct pb_bucket {
	struct lp_pb *hist, *bucket;
};

static void pb_bound(void *arg, uint64_t bound, uint64_t cum)
{
	struct pb_bucket *pbb = arg;

	lp_pb_uint(pbb->bucket, 1, cum);
	lp_pb_double(pbb->bucket, 2, (double)bound * 1e-9);
	pb_message(pbb->hist, 3, pbb->bucket);
}

int lp_expo_native_index(double ns)
{
	return (int)ceil(log2(ns * 1e-9) * (1 << LP_EXPO_NATIVE_SCHEMA));
}

/* The kernel's buckets as a schema-3 native histogram: each bucket's count goes where its
 * midpoint falls (the open last bucket: at the maximum), 0 ns to the zero bucket. The
 * native bucket that holds a percentile then holds the API's estimate too: the two differ
 * by at most one native bucket, 2^(1/8) - 1 = 9.05 %. */
static void pb_native(struct lp_pb *hist, const struct lp_hist *h)
{
	int idx[LP_HIST_NBUCKETS];
	uint64_t cnt[LP_HIST_NBUCKETS], prev = 0;
	struct lp_pb span = {0}, deltas = {0};
	size_t k = 0, first = 0;

	lp_pb_uint(hist, 5, zigzag(LP_EXPO_NATIVE_SCHEMA));
	/* The Go client's default: below it only exact zeros. */
	lp_pb_double(hist, 6, 2.938735877055719e-39);
	lp_pb_uint(hist, 7, h->buckets[0]);
	for (unsigned b = 1; b < LP_HIST_NBUCKETS; b++) {
		uint64_t lo = lp_hist_lower(b), hi = lp_hist_upper(b);
		double mid;
		int i;

		if (!h->buckets[b])
			continue;
		mid = b < LP_HIST_SUB ? (double)lo
		      : hi == ~0ULL   ? (double)(h->max_ns > lo ? h->max_ns : lo)
				      : (double)lo + (double)(hi - lo) / 2;
		i = lp_expo_native_index(mid);
		if (k && idx[k - 1] == i) {
			cnt[k - 1] += h->buckets[b];
			continue;
		}
		idx[k] = i;
		cnt[k++] = h->buckets[b];
	}
	/* Runs of consecutive indexes are spans: the first at its index, the next ones after
	 * their gap. No observation yet: a no-op span tells it from a classic histogram. */
	for (size_t m = 1; m <= k; m++) {
		if (m < k && idx[m] == idx[m - 1] + 1)
			continue;
		lp_pb_uint(&span, 1, zigzag(first ? idx[first] - idx[first - 1] - 1 : idx[0]));
		lp_pb_uint(&span, 2, m - first);
		pb_message(hist, 12, &span);
		first = m;
	}
	if (!k) {
		lp_pb_uint(&span, 1, 0);
		lp_pb_uint(&span, 2, 0);
		pb_message(hist, 12, &span);
	}
	for (size_t m = 0; m < k; m++) {
		lp_pb_varint(&deltas, zigzag((int64_t)cnt[m] - (int64_t)prev));
		prev = cnt[m];
	}
	if (k)
		lp_pb_bytes(hist, 13, deltas.p, deltas.len); /* packed sint64 */
	if (deltas.err || span.err)
		hist->err = -ENOMEM;
	lp_pb_free(&span);
	lp_pb_free(&deltas);
}

/* --- the interface --- */

void lp_expo_family(struct lp_expo *e, const char *name, enum lp_expo_type type, const char *help)
{
	static const char *const text_type[] = {"counter", "gauge", "histogram"};
	static const int pb_type[] = {PB_COUNTER, PB_GAUGE, PB_HISTOGRAM};

	snprintf(e->name, sizeof(e->name), "%s", name);
	e->type = type;
	if (e->fmt == LP_EXPO_TEXT) {
		text_printf(e, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, text_type[type]);
		return;
	}
	pb_end_family(e);
	pb_string(&e->fam, 1, name);
	pb_string(&e->fam, 2, help);
	lp_pb_uint(&e->fam, 3, (uint64_t)pb_type[type]);
	e->in_family = true;
}

void lp_expo_value(struct lp_expo *e, const struct lp_label *l, size_t n, double value)
{
	struct lp_pb metric = {0}, v = {0};

	if (e->fmt == LP_EXPO_TEXT) {
		text_label_set(e, l, n);
		text_series(e, "", NULL, NULL);
		text_printf(e, " %.9g\n", value);
		return;
	}
	pb_labels(&metric, l, n);
	lp_pb_double(&v, 1, value);
	pb_message(&metric, e->type == LP_EXPO_COUNTER ? 3 : 2, &v);
	pb_message(&e->fam, 4, &metric);
	lp_pb_free(&metric);
	lp_pb_free(&v);
}

/* Classic bounds given with their counts (lp_expo_hist_at), for classic_of. */
struct given {
	const double *le;
	const uint64_t *cum;
	size_t n;
};

/* Calls fn for each classic bound: given ones, else the histogram's own. */
static void classic_of(const struct lp_expo *e, const struct lp_hist *h, const struct given *g,
		       void (*fn)(void *, uint64_t, uint64_t), void *arg)
{
	if (!g) {
		classic_bounds(h, e->coarse, fn, arg);
		return;
	}
	for (size_t i = 0; i < g->n; i++)
		fn(arg, (uint64_t)(g->le[i] * 1e9 + 0.5), g->cum[i]);
}

static void put_hist(struct lp_expo *e, const struct lp_label *l, size_t n, const struct lp_hist *h,
		     const struct given *g)
{
	uint64_t total = lp_hist_total(h);

	if (e->fmt == LP_EXPO_TEXT) {
		text_label_set(e, l, n);
		classic_of(e, h, g, text_bound, e);
		text_series(e, "_bucket", "le", "+Inf");
		text_printf(e, " %llu\n", (unsigned long long)total);
		text_series(e, "_sum", NULL, NULL);
		text_printf(e, " %.9g\n", (double)h->sum_ns * 1e-9);
		text_series(e, "_count", NULL, NULL);
		text_printf(e, " %llu\n", (unsigned long long)total);
		return;
	}
	{
		struct lp_pb metric = {0}, hist = {0}, bucket = {0};
		struct pb_bucket pbb = {&hist, &bucket};

		pb_labels(&metric, l, n);
		lp_pb_uint(&hist, 1, total);
		lp_pb_double(&hist, 2, (double)h->sum_ns * 1e-9);
		classic_of(e, h, g, pb_bound, &pbb);
		pb_native(&hist, h);
		pb_message(&metric, 7, &hist);
		pb_message(&e->fam, 4, &metric);
		lp_pb_free(&metric);
		lp_pb_free(&hist);
		lp_pb_free(&bucket);
	}
}

void lp_expo_hist(struct lp_expo *e, const struct lp_label *l, size_t n, const struct lp_hist *h)
{
	put_hist(e, l, n, h, NULL);
}

void lp_expo_hist_at(struct lp_expo *e, const struct lp_label *l, size_t n, const struct lp_hist *h,
		     const double *le, const uint64_t *cum, size_t nle)
{
	struct given g = {le, cum, nle};

	put_hist(e, l, n, h, &g);
}

int lp_expo_close(struct lp_expo *e, char **out, size_t *len)
{
	pb_end_family(e);
	/* A NUL after the end, not counted: the text can be read as a string. */
	lp_pb_put(&e->out, "", 1);
	*out = NULL;
	*len = 0;
	if (e->set.err)
		e->out.err = e->set.err; /* a series lost its labels */
	lp_pb_free(&e->set);
	if (e->out.err || e->fam.err) {
		lp_pb_free(&e->out);
		lp_pb_free(&e->fam);
		free(e);
		return -ENOMEM;
	}
	*out = (char *)e->out.p;
	*len = e->out.len - 1;
	lp_pb_free(&e->fam);
	free(e);
	return 0;
}
