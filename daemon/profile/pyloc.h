/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* The Python frames of profiles' stacks: each function and line met is a location, by id,
 * named when its sample came (engine/python.h reads the code object then, while its process
 * is there to read it from). A stack holds a Python frame as its id tagged with
 * LP_PYLOC_TAG, among its user frames. Kept while any window is open; bounded. */
#ifndef LLMPROF_PROFILE_PYLOC_H
#define LLMPROF_PROFILE_PYLOC_H

#include <stddef.h>
#include <stdint.h>

#define LP_PYLOC_TAG (1ULL << 63)
#define LP_PYLOCS_MAX 65536

struct lp_pyloc {
	char *name, *file; /* as the code object has them, not escaped */
	uint32_t line, firstline;
	uint64_t hash;
};

struct lp_pylocs {
	struct lp_pyloc *v;
	size_t n;
	uint32_t *idx; /* open addressing by hash: id + 1, 0 empty */
	size_t cap;
	uint64_t bytes;
	uint64_t full; /* frames met once the table was full: named by their interpreter */
};

/* The id (1-based) of function name in file at line, added if new; 0 once full. */
uint32_t lp_pylocs_get(struct lp_pylocs *t, const char *name, const char *file, uint32_t line,
		       uint32_t firstline);
const struct lp_pyloc *lp_pylocs_at(const struct lp_pylocs *t, uint32_t id);
void lp_pylocs_clear(struct lp_pylocs *t);

#endif
