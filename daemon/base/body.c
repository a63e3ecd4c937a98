// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* Shared answer bodies (body.h). */
#include "base/body.h"

#include <stdlib.h>

struct lp_body *lp_body_wrap(char *data, size_t len)
{
	struct lp_body *b = malloc(sizeof(*b));

	if (!b) {
		free(data);
		return NULL;
	}
	*b = (struct lp_body){.refs = 1, .len = len, .data = data};
	return b;
}

struct lp_body *lp_body_get(struct lp_body *b)
{
	b->refs++;
	return b;
}

void lp_body_put(struct lp_body *b)
{
	if (b && --b->refs == 0) {
		free(b->data);
		free(b);
	}
}
