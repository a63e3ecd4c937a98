/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* The unwind rows the sampler reads: each object with ops gets its .eh_frame rows (cfi.h)
 * once, in a BPF array of its own sized to them, in a slot of the "unwind_rows" array of
 * maps, shared by every process that maps it; the slot is given back when no process
 * needs them. Loads and releases may run on the prober's threads (prober.h: each update of
 * the array of maps waits for an RCU grace period): the slots and the sums are under lock. */
#ifndef LLMPROF_UNWIND_H
#define LLMPROF_UNWIND_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <linux/types.h>

#include "llmprof/abi.h"

struct lp_unwind {
	pthread_mutex_t lock; /* the fields below */
	int outer_fd;	      /* the "unwind_rows" array of maps; -1: unwinding is off */
	int gen_fd;	      /* "unwind_gen": each slot's generation (abi.h, lp_row_cached) */
	bool used_slot[LP_UNWIND_OBJS];
	size_t slot_bytes[LP_UNWIND_OBJS]; /* what each slot's array takes */
	size_t objs;			   /* slots in use */
	size_t used;			   /* rows in them */
	size_t bytes;			   /* what their arrays take */
};

/* Starts with no object (outer_fd: BPF_MAP_TYPE_ARRAY_OF_MAPS of LP_UNWIND_OBJS arrays of
 * struct lp_unwind_row made with BPF_F_MMAPABLE | BPF_F_INNER_MAP; gen_fd: an array of
 * LP_UNWIND_OBJS __u32, each slot's generation, moved to odd and past it around each change
 * of the slot, where the walks keep rows they found by it; -1: none kept). */
void lp_unwind_init(struct lp_unwind *u, int outer_fd, int gen_fd);
/* Gives every slot back. */
void lp_unwind_free(struct lp_unwind *u);

/* Reads the ELF file at fd and puts its rows in a free slot: *slot and *n say where, and
 * lost[why] counts its rows the walk cannot follow, by enum lp_unwind_why (code without
 * CFI not counted). Returns 0, -ENOSPC (every slot taken), -EFBIG (more rows than
 * LP_UNWIND_MAX_ROWS), what creating the array returns, or what lp_cfi_read returns. */
int lp_unwind_load(struct lp_unwind *u, int fd, uint32_t *slot, uint32_t *n, uint32_t *lost);

/* Puts n rows of 8 bytes made elsewhere (an op functions' table, abi.h's struct
 * lp_opfn_row) in a free slot, where the walk looks them up as it does unwind rows. Returns
 * 0 with *slot, -ENOSPC, -EFBIG (more than LP_UNWIND_MAX_ROWS) or -errno. */
int lp_unwind_load_rows(struct lp_unwind *u, const void *rows, size_t n, uint32_t *slot);

/* The page index of n > 0 rows sorted by offset (abi.h, struct lp_rows_head): its head in
 * *h, and its pages in page[] where page is not NULL. Returns the number of pages. */
size_t lp_rows_index(const struct lp_unwind_row *rows, size_t n, struct lp_rows_head *h,
		     struct lp_rows_page *page);

/* Gives a slot back (n: its rows). */
void lp_unwind_release(struct lp_unwind *u, uint32_t slot, uint32_t n);

/* The pool's use, read under its lock. */
struct lp_unwind_use {
	size_t objs, used, bytes;
};
struct lp_unwind_use lp_unwind_use(struct lp_unwind *u);

#endif
