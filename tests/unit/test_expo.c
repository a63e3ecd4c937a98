// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* Unit tests of daemon/serving/expo.c: content negotiation, the schema-3 bucket of a value, and the
 * protobuf stream's framing (length-delimited MetricFamily messages end to end, with the
 * family names where they belong). A real Prometheus reads it in test_prometheus. */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "serving/expo.h"

static uint64_t varint(const uint8_t *p, size_t n, size_t *at)
{
	uint64_t v = 0;

	for (int s = 0; *at < n && s < 64; s += 7) {
		uint8_t b = p[(*at)++];

		v |= (uint64_t)(b & 0x7f) << s;
		if (!(b & 0x80))
			break;
	}
	return v;
}

int main(void)
{
	struct lp_label l[] = {{"pid", "42"}, {"comm", "x\033y"}};
	struct lp_hist h = {0};
	struct lp_expo *e;
	char *out;
	size_t len, at = 0;
	int families = 0;

	CHECK(lp_expo_negotiate(NULL) == LP_EXPO_TEXT && lp_expo_negotiate("*/*") == LP_EXPO_TEXT &&
		      lp_expo_negotiate("text/plain;version=0.0.4") == LP_EXPO_TEXT,
	      "text unless asked");
	CHECK(lp_expo_negotiate("application/vnd.google.protobuf;proto=io.prometheus.client."
				"MetricFamily;encoding=delimited;q=0.7,text/plain;q=0.3") ==
		      LP_EXPO_PROTOBUF,
	      "Prometheus's Accept with native histograms on: protobuf");
	/* Bucket i holds (2^((i-1)/8), 2^(i/8)] s. */
	CHECK(lp_expo_native_index(1e9) == 0 && lp_expo_native_index(1.05e9) == 1 &&
		      lp_expo_native_index(0.95e9) == 0 && lp_expo_native_index(0.5e9) == -8,
	      "schema 3 indexes: %d %d %d %d", lp_expo_native_index(1e9),
	      lp_expo_native_index(1.05e9), lp_expo_native_index(0.95e9),
	      lp_expo_native_index(0.5e9));

	for (uint64_t v = 1000; v < 100000000; v = v * 3 / 2) {
		h.buckets[lp_hist_index(v)] += 2;
		h.sum_ns += 2 * v;
		h.max_ns = v;
	}
	h.buckets[0] = 1; /* a 0 ns value: the zero bucket */
	e = lp_expo_open(LP_EXPO_PROTOBUF);
	lp_expo_family(e, "a_total", LP_EXPO_COUNTER, "help a");
	lp_expo_value(e, l, 2, 3);
	lp_expo_value(e, l, 1, 4);
	lp_expo_family(e, "b_seconds", LP_EXPO_HISTOGRAM, "help b");
	lp_expo_hist(e, l, 2, &h);
	lp_expo_family(e, "c", LP_EXPO_GAUGE, "help c");
	CHECK(lp_expo_close(e, &out, &len) == 0 && len > 100, "protobuf: %zu bytes", len);
	while (at < len) {
		size_t n = varint((const uint8_t *)out, len, &at), name_len;

		CHECK(at + n <= len && out[at] == 0x0a, "family %d: %zu bytes, name first",
		      families, n);
		name_len = (size_t)out[at + 1];
		CHECK(!memcmp(out + at + 2,
			      families == 0   ? "a_total"
			      : families == 1 ? "b_seconds"
					      : "c",
			      name_len),
		      "family %d's name", families);
		at += n;
		families++;
	}
	CHECK(at == len && families == 3, "%d length-delimited families, end to end", families);
	CHECK(memmem(out, len, "x\\x1by", 6) != NULL, "an escape in a label value is escaped");
	free(out);

	e = lp_expo_open(LP_EXPO_TEXT);
	lp_expo_family(e, "c", LP_EXPO_GAUGE, "help c");
	lp_expo_value(e, NULL, 0, 1.5);
	lp_expo_value(e, l, 2, 2);
	CHECK(lp_expo_close(e, &out, &len) == 0 &&
		      !strcmp(out, "# HELP c help c\n# TYPE c gauge\nc 1.5\n"
				   "c{pid=\"42\",comm=\"x\\\\x1by\"} 2\n"),
	      "text: '%s'", out);
	free(out);
	return check_done();
}
