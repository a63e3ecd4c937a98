/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* The pool of unwind rows the sampler reads (the "unwind_rows" BPF array, mapped into
 * the daemon): each object with ops gets its .eh_frame rows (cfi.h) once, in one extent,
 * shared by every process that maps it, and gives them back when no process needs them. */
#ifndef LLMPROF_UNWIND_H
#define LLMPROF_UNWIND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct lp_unwind {
	struct lp_unwind_row *rows; /* the map, mmap'ed; NULL: unwinding is off */
	size_t cap;
	struct lp_unwind_extent {
		uint32_t first, n;
	} * free; /* free extents, by first */
	size_t nfree;
	size_t used;
};

/* Maps the pool (map_fd: a BPF_F_MMAPABLE array of cap rows). Returns 0 or -errno. */
int lp_unwind_init(struct lp_unwind *u, int map_fd, size_t cap);
void lp_unwind_free(struct lp_unwind *u);

/* Reads the ELF file at fd and puts its rows in the pool: *first and *n say where.
 * Returns 0, -ENOSPC (the pool is full), or what lp_cfi_read returns. */
int lp_unwind_load(struct lp_unwind *u, int fd, uint32_t *first, uint32_t *n);

/* Gives an extent back. */
void lp_unwind_release(struct lp_unwind *u, uint32_t first, uint32_t n);

#endif
