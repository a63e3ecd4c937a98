// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* The unwind row pool (unwind.h): first-fit extents in a mapped BPF array. */
#include "unwind.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <linux/types.h>

#include "cfi.h"
#include "llmprof/abi.h"

static size_t pool_bytes(size_t cap)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);

	return (cap * sizeof(struct lp_unwind_row) + page - 1) / page * page;
}

int lp_unwind_init(struct lp_unwind *u, int map_fd, size_t cap)
{
	void *p;

	memset(u, 0, sizeof(*u));
	u->free = malloc(sizeof(*u->free));
	if (!u->free)
		return -ENOMEM;
	p = mmap(NULL, pool_bytes(cap), PROT_READ | PROT_WRITE, MAP_SHARED, map_fd, 0);
	if (p == MAP_FAILED) {
		free(u->free);
		u->free = NULL;
		return -errno;
	}
	u->rows = p;
	u->cap = cap;
	u->free[0] = (struct lp_unwind_extent){0, (uint32_t)cap};
	u->nfree = 1;
	return 0;
}

void lp_unwind_free(struct lp_unwind *u)
{
	if (u->rows)
		munmap(u->rows, pool_bytes(u->cap));
	free(u->free);
	memset(u, 0, sizeof(*u));
}

/* One row as the BPF side reads it: LP_UW_NONE for a rule it cannot follow there. */
static void convert(const struct lp_cfi_row *c, struct lp_unwind_row *r)
{
	memset(r, 0, sizeof(*r));
	r->off = (uint32_t)c->addr;
	if (c->cfa_reg == LP_CFI_NONE || c->cfa_off < 0 || c->cfa_off > UINT16_MAX)
		return;
	r->cfa_reg = c->cfa_reg == LP_CFI_RSP ? LP_UW_RSP : LP_UW_RBP;
	r->cfa_off = (uint16_t)c->cfa_off;
	if (c->rbp == LP_CFI_RBP_SAME)
		r->rbp = 0;
	else if (c->rbp == LP_CFI_RBP_SAVED && c->rbp_off < 0 && c->rbp_off % 8 == 0 &&
		 c->rbp_off / 8 > LP_UW_RBP_LOST)
		r->rbp = (int8_t)(c->rbp_off / 8);
	else
		r->rbp = LP_UW_RBP_LOST;
}

int lp_unwind_load(struct lp_unwind *u, int fd, uint32_t *first, uint32_t *n)
{
	struct lp_cfi c;
	size_t k = 0, i;
	int r;

	if (!u->rows)
		return -EOPNOTSUPP;
	r = lp_cfi_read(fd, &c);
	if (r < 0)
		return r;
	/* File offsets past 4 GiB do not fit a row. */
	while (k < c.n && c.rows[k].addr <= UINT32_MAX)
		k++;
	for (i = 0; i < u->nfree && u->free[i].n < k; i++)
		;
	if (!k || i == u->nfree) {
		lp_cfi_free(&c);
		return k ? -ENOSPC : -ENOENT;
	}
	*first = u->free[i].first;
	*n = (uint32_t)k;
	for (size_t j = 0; j < k; j++)
		convert(&c.rows[j], &u->rows[*first + j]);
	lp_cfi_free(&c);
	u->free[i].first += (uint32_t)k;
	u->free[i].n -= (uint32_t)k;
	if (!u->free[i].n) {
		memmove(&u->free[i], &u->free[i + 1], (u->nfree - i - 1) * sizeof(*u->free));
		u->nfree--;
	}
	u->used += k;
	return 0;
}

void lp_unwind_release(struct lp_unwind *u, uint32_t first, uint32_t n)
{
	struct lp_unwind_extent *v;
	size_t i = 0;

	if (!u->rows || !n)
		return;
	while (i < u->nfree && u->free[i].first < first)
		i++;
	v = realloc(u->free, (u->nfree + 1) * sizeof(*v));
	if (!v)
		return; /* the extent stays used: a leak, not a fault */
	u->free = v;
	memmove(&v[i + 1], &v[i], (u->nfree - i) * sizeof(*v));
	v[i] = (struct lp_unwind_extent){first, n};
	u->nfree++;
	u->used -= n;
	/* Merge with the neighbours it touches. */
	if (i + 1 < u->nfree && v[i].first + v[i].n == v[i + 1].first) {
		v[i].n += v[i + 1].n;
		memmove(&v[i + 1], &v[i + 2], (u->nfree - i - 2) * sizeof(*v));
		u->nfree--;
	}
	if (i > 0 && v[i - 1].first + v[i - 1].n == v[i].first) {
		v[i - 1].n += v[i].n;
		memmove(&v[i], &v[i + 1], (u->nfree - i - 1) * sizeof(*v));
		u->nfree--;
	}
}
