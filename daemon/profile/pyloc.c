// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#include "profile/pyloc.h"

#include <stdlib.h>
#include <string.h>

static uint64_t hash_of(const char *name, const char *file, uint32_t line)
{
	uint64_t h = 1469598103934665603ULL;

	for (const char *s = name; *s; s++)
		h = (h ^ (uint8_t)*s) * 1099511628211ULL;
	h = (h ^ 0xff) * 1099511628211ULL;
	for (const char *s = file; *s; s++)
		h = (h ^ (uint8_t)*s) * 1099511628211ULL;
	return (h ^ line) * 1099511628211ULL;
}

static int grow(struct lp_pylocs *t)
{
	size_t cap = t->cap ? 2 * t->cap : 1024;
	uint32_t *idx = calloc(cap, sizeof(*idx));

	if (!idx)
		return -1;
	for (size_t i = 0; i < t->n; i++) {
		size_t k = t->v[i].hash & (cap - 1);

		while (idx[k])
			k = (k + 1) & (cap - 1);
		idx[k] = (uint32_t)i + 1;
	}
	free(t->idx);
	t->idx = idx;
	t->cap = cap;
	return 0;
}

uint32_t lp_pylocs_get(struct lp_pylocs *t, const char *name, const char *file, uint32_t line,
		       uint32_t firstline)
{
	uint64_t h = hash_of(name, file, line);
	struct lp_pyloc *v;
	size_t k;

	for (k = t->cap ? h & (t->cap - 1) : 0; t->cap && t->idx[k]; k = (k + 1) & (t->cap - 1)) {
		const struct lp_pyloc *l = &t->v[t->idx[k] - 1];

		if (l->hash == h && l->line == line && !strcmp(l->name, name) &&
		    !strcmp(l->file, file))
			return t->idx[k];
	}
	if (t->n >= LP_PYLOCS_MAX || ((t->n + 1) * 2 > t->cap && grow(t) < 0) ||
	    !(v = realloc(t->v, (t->n + 1) * sizeof(*v)))) {
		t->full++;
		return 0;
	}
	t->v = v;
	v = &t->v[t->n];
	*v = (struct lp_pyloc){strdup(name), strdup(file), line, firstline, h};
	if (!v->name || !v->file) {
		free(v->name);
		free(v->file);
		t->full++;
		return 0;
	}
	t->bytes += sizeof(*v) + strlen(name) + strlen(file) + 2;
	for (k = h & (t->cap - 1); t->idx[k]; k = (k + 1) & (t->cap - 1))
		;
	t->idx[k] = (uint32_t)++t->n;
	return (uint32_t)t->n;
}

const struct lp_pyloc *lp_pylocs_at(const struct lp_pylocs *t, uint32_t id)
{
	return id && id <= t->n ? &t->v[id - 1] : NULL;
}

void lp_pylocs_clear(struct lp_pylocs *t)
{
	for (size_t i = 0; i < t->n; i++) {
		free(t->v[i].name);
		free(t->v[i].file);
	}
	free(t->v);
	free(t->idx);
	memset(t, 0, sizeof(*t));
}
