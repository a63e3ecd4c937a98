/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* A body its owner keeps and answers share, not copy (a timeline: tens of MB): each holds a
 * reference, and the last to let go frees it. On the event loop only. */
#ifndef LLMPROF_BODY_H
#define LLMPROF_BODY_H

#include <stddef.h>

struct lp_body {
	unsigned refs;
	size_t len;
	char *data; /* malloc'd, NUL-terminated */
};

/* Takes data (malloc'd, len bytes and a NUL): one reference, the caller's. NULL: no memory
 * (data is freed). */
struct lp_body *lp_body_wrap(char *data, size_t len);
struct lp_body *lp_body_get(struct lp_body *b);
/* Lets go of a reference (NULL: nothing). */
void lp_body_put(struct lp_body *b);

#endif
