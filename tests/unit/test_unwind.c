// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* daemon/unwind.c: the pool of unwind rows, on a memfd standing in for the BPF array
 * (both are shared memory mapped the same way). Rows as the BPF side reads them, against
 * cfi.h's rows of the same file; extents given out first-fit, given back and merged; a
 * full pool says so.
 *
 *   test_unwind FILE   (an x86-64 ELF file with .eh_frame) */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <linux/types.h>

#include "cfi.h"
#include "check.h"
#include "llmprof/abi.h"
#include "unwind.h"

static int pool_fd(size_t rows)
{
	int fd = memfd_create("unwind-rows", MFD_CLOEXEC);

	if (fd >= 0 && ftruncate(fd, (off_t)(rows * sizeof(struct lp_unwind_row))) < 0) {
		close(fd);
		return -1;
	}
	return fd;
}

/* Every row the pool holds for the file is the cfi row at that offset, converted. */
static void rows_match(const struct lp_unwind *u, uint32_t first, uint32_t n,
		       const struct lp_cfi *c)
{
	size_t bad = 0;

	CHECK(n == c->n, "%u rows in the pool, cfi has %zu", n, c->n);
	for (uint32_t i = 0; i < n && i < c->n; i++) {
		const struct lp_unwind_row *r = &u->rows[first + i];
		const struct lp_cfi_row *x = &c->rows[i];
		uint8_t reg = x->cfa_reg == LP_CFI_RSP	 ? LP_UW_RSP
			      : x->cfa_reg == LP_CFI_RBP ? LP_UW_RBP
							 : LP_UW_NONE;
		int rbp = x->rbp == LP_CFI_RBP_SAVED  ? (int)(x->rbp_off / 8)
			  : x->rbp == LP_CFI_RBP_LOST ? LP_UW_RBP_LOST
						      : 0;

		if (r->off != x->addr || r->cfa_reg != reg ||
		    (reg != LP_UW_NONE && (r->cfa_off != x->cfa_off || r->rbp != rbp)))
			bad++;
	}
	CHECK(bad == 0, "%zu rows differ from cfi's", bad);
}

int main(int argc, char **argv)
{
	struct lp_unwind u;
	struct lp_cfi c;
	uint32_t a, an, b, bn, x, xn;
	int fd, pool, r;

	if (argc < 2)
		return 2;
	fd = open(argv[1], O_RDONLY | O_CLOEXEC);
	CHECK(fd >= 0 && lp_cfi_read(fd, &c) == 0 && c.n > 10, "%s: cfi rows", argv[1]);
	if (fd < 0 || !c.n)
		return check_done();

	/* Room for two copies and a bit. */
	pool = pool_fd(2 * c.n + 10);
	CHECK(lp_unwind_init(&u, pool, 2 * c.n + 10) == 0, "the pool maps");
	CHECK(lp_unwind_load(&u, fd, &a, &an) == 0 && a == 0, "first load at 0: %u", a);
	rows_match(&u, a, an, &c);
	CHECK(lp_unwind_load(&u, fd, &b, &bn) == 0 && b == an, "second load after it: %u", b);
	rows_match(&u, b, bn, &c);
	CHECK(u.used == 2 * c.n, "%zu rows used", u.used);
	r = lp_unwind_load(&u, fd, &x, &xn);
	CHECK(r == -ENOSPC, "a third does not fit: %d", r);

	/* Given back, the first extent is taken again first; both back, one free extent. */
	lp_unwind_release(&u, a, an);
	CHECK(lp_unwind_load(&u, fd, &x, &xn) == 0 && x == 0, "first fit reuses 0: %u", x);
	lp_unwind_release(&u, b, bn);
	lp_unwind_release(&u, x, xn);
	CHECK(u.used == 0 && u.nfree == 1 && u.free[0].first == 0 && u.free[0].n == 2 * c.n + 10,
	      "all given back and merged: %zu used, %zu extents", u.used, u.nfree);
	lp_unwind_free(&u);
	close(pool);

	/* A file without .eh_frame, and /dev/null. */
	pool = pool_fd(16);
	CHECK(lp_unwind_init(&u, pool, 16) == 0, "a small pool maps");
	CHECK(lp_unwind_load(&u, fd, &x, &xn) == -ENOSPC, "too small: -ENOSPC");
	close(fd);
	fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	CHECK(lp_unwind_load(&u, fd, &x, &xn) == -ENOEXEC, "not ELF: -ENOEXEC");
	close(fd);
	lp_unwind_free(&u);
	close(pool);
	lp_cfi_free(&c);
	return check_done();
}
