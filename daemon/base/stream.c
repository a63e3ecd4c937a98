// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* Answers written as they are made (stream.h). */
#include "base/stream.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

struct lp_stream *lp_stream_new(const char *content_type)
{
	struct lp_stream *s = calloc(1, sizeof(*s));

	if (s) {
		s->refs = 1;
		s->content_type = content_type;
	}
	return s;
}

struct lp_stream *lp_stream_get(struct lp_stream *s)
{
	s->refs++;
	return s;
}

void lp_stream_put(struct lp_stream *s)
{
	if (!s || --s->refs)
		return;
	free(s->p);
	free(s);
}

static void notify(struct lp_stream *s)
{
	if (s->notify)
		s->notify(s->arg);
}

int lp_stream_write(struct lp_stream *s, const void *p, size_t n)
{
	if (s->gone)
		return -EPIPE;
	if (!n)
		return 0;
	if (s->cap - s->len < n) {
		size_t cap = s->cap ? s->cap : 1 << 16;
		uint8_t *v;

		while (cap - s->len < n)
			cap *= 2;
		if (!(v = realloc(s->p, cap)))
			return -ENOMEM;
		s->p = v;
		s->cap = cap;
	}
	memcpy(s->p + s->len, p, n);
	s->len += n;
	s->written += n;
	notify(s);
	return 0;
}

void lp_stream_end(struct lp_stream *s)
{
	s->ended = true;
	notify(s);
}

size_t lp_stream_backlog(const struct lp_stream *s)
{
	return s->len + s->queued;
}

void lp_stream_taken(struct lp_stream *s)
{
	s->len = 0;
}

void lp_stream_gone(struct lp_stream *s)
{
	s->gone = true;
	s->notify = NULL;
	s->arg = NULL;
}
