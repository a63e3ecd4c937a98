/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* protobuf's wire format, written into a buffer that grows: what the /metrics protobuf
 * exposition (expo.c) and Perfetto's trace (perfetto.c) are made of. Once an allocation
 * fails, err is -ENOMEM and everything after it is dropped. */
#ifndef LLMPROF_PROTOBUF_H
#define LLMPROF_PROTOBUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct lp_pb {
	uint8_t *p;
	size_t len, cap;
	int err;
};

/* Wire types. */
enum { LP_PB_VARINT = 0, LP_PB_I64 = 1, LP_PB_LEN = 2 };

/* Room for extra more bytes at p + len; false when there is none (err set). */
bool lp_pb_reserve(struct lp_pb *b, size_t extra);
void lp_pb_put(struct lp_pb *b, const void *x, size_t n);
/* v as a varint at p (10 bytes at most); returns its length. */
size_t lp_pb_varint_at(uint8_t *p, uint64_t v);
void lp_pb_varint(struct lp_pb *b, uint64_t v);
void lp_pb_tag(struct lp_pb *b, unsigned field, unsigned wire);
void lp_pb_uint(struct lp_pb *b, unsigned field, uint64_t v);
void lp_pb_double(struct lp_pb *b, unsigned field, double v);
void lp_pb_bytes(struct lp_pb *b, unsigned field, const void *p, size_t n);
/* Frees the bytes; b is empty again. */
void lp_pb_free(struct lp_pb *b);

#endif
