// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#include "base/protobuf.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

bool lp_pb_reserve(struct lp_pb *b, size_t extra)
{
	size_t cap = b->cap ? b->cap : 4096;
	uint8_t *p;

	if (b->err)
		return false;
	if (b->cap - b->len >= extra)
		return true;
	while (cap - b->len < extra)
		cap *= 2;
	p = realloc(b->p, cap);
	if (!p) {
		b->err = -ENOMEM;
		return false;
	}
	b->p = p;
	b->cap = cap;
	return true;
}

void lp_pb_put(struct lp_pb *b, const void *x, size_t n)
{
	if (n && lp_pb_reserve(b, n)) {
		memcpy(b->p + b->len, x, n);
		b->len += n;
	}
}

size_t lp_pb_varint_at(uint8_t *p, uint64_t v)
{
	size_t n = 0;

	do {
		p[n++] = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
		v >>= 7;
	} while (v);
	return n;
}

void lp_pb_varint(struct lp_pb *b, uint64_t v)
{
	if (lp_pb_reserve(b, 10))
		b->len += lp_pb_varint_at(b->p + b->len, v);
}

void lp_pb_tag(struct lp_pb *b, unsigned field, unsigned wire)
{
	lp_pb_varint(b, (uint64_t)field << 3 | wire);
}

void lp_pb_uint(struct lp_pb *b, unsigned field, uint64_t v)
{
	lp_pb_tag(b, field, LP_PB_VARINT);
	lp_pb_varint(b, v);
}

void lp_pb_double(struct lp_pb *b, unsigned field, double v)
{
	uint64_t bits;
	uint8_t le[8];

	memcpy(&bits, &v, 8);
	for (int i = 0; i < 8; i++)
		le[i] = (uint8_t)(bits >> (8 * i));
	lp_pb_tag(b, field, LP_PB_I64);
	lp_pb_put(b, le, 8);
}

void lp_pb_bytes(struct lp_pb *b, unsigned field, const void *p, size_t n)
{
	lp_pb_tag(b, field, LP_PB_LEN);
	lp_pb_varint(b, n);
	lp_pb_put(b, p, n);
}

void lp_pb_free(struct lp_pb *b)
{
	free(b->p);
	memset(b, 0, sizeof(*b));
}
