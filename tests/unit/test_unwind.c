// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* daemon/kernel/unwind.c: an object's rows in a BPF array of their own, in a slot of an array of
 * maps made as the daemon's is. Rows as the BPF side reads them (read back with the
 * bpf(2) lookup, not through the daemon's mapping), against cfi.h's rows of the same file;
 * slots given out, given back and taken again; every slot taken says so. Needs CAP_BPF:
 * skipped (77) without it.
 *
 *   test_unwind FILE   (an x86-64 ELF file with .eh_frame) */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <stdlib.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <linux/types.h>

#include "formats/cfi.h"
#include "check.h"
#include "llmprof/abi.h"
#include "kernel/unwind.h"

/* An array of maps as bpf/lp.bpf.h declares "unwind_rows", with nslots slots. */
static int outer_map(uint32_t nslots)
{
	LIBBPF_OPTS(bpf_map_create_opts, inner_opts, .map_flags = BPF_F_MMAPABLE | BPF_F_INNER_MAP);
	LIBBPF_OPTS(bpf_map_create_opts, opts);
	int inner = bpf_map_create(BPF_MAP_TYPE_ARRAY, "tmpl", 4, sizeof(struct lp_unwind_row), 1,
				   &inner_opts),
	    outer;

	if (inner < 0)
		return -errno;
	opts.inner_map_fd = inner;
	outer = bpf_map_create(BPF_MAP_TYPE_ARRAY_OF_MAPS, "outer", 4, 4, nslots, &opts);
	close(inner);
	return outer < 0 ? -errno : outer;
}

/* The generations' array, as bpf/lp.bpf.h declares "unwind_gen". */
static int gen_map(void)
{
	int fd = bpf_map_create(BPF_MAP_TYPE_ARRAY, "gen", 4, 4, LP_UNWIND_OBJS, NULL);

	return fd < 0 ? -errno : fd;
}

static uint32_t gen_of(int gen, uint32_t slot)
{
	__u32 g = 0xdead;

	bpf_map_lookup_elem(gen, &slot, &g);
	return g;
}

/* The first n elements in slot of the array of maps (its rows, then their index), read back
 * by lookups. */
static struct lp_unwind_row *rows_of(int outer, uint32_t slot, uint32_t n)
{
	struct lp_unwind_row *v = calloc(n ? n : 1, sizeof(*v));
	uint32_t id;
	int fd;

	if (!v || bpf_map_lookup_elem(outer, &slot, &id) || (fd = bpf_map_get_fd_by_id(id)) < 0) {
		free(v);
		return NULL;
	}
	for (uint32_t i = 0; i < n; i++)
		if (bpf_map_lookup_elem(fd, &i, &v[i])) {
			free(v);
			v = NULL;
			break;
		}
	close(fd);
	return v;
}

/* Every row the slot holds for the file is the cfi row at that offset, converted. */
static void rows_match(int outer, uint32_t slot, uint32_t n, const struct lp_cfi *c)
{
	struct lp_unwind_row *v = rows_of(outer, slot, n);
	size_t bad = 0, forms[LP_UW_END + 1] = {0};

	CHECK(v != NULL, "the rows read back from slot %u", slot);
	if (!v)
		return;
	CHECK(n == c->n, "%u rows in the slot, cfi has %zu", n, c->n);
	for (uint32_t i = 0; i < n && i < c->n; i++) {
		const struct lp_unwind_row *r = &v[i];
		const struct lp_cfi_row *x = &c->rows[i];
		/* abi.h's forms, from cfi.h's: the register ones by name, offsets as such. */
		uint8_t cfa = LP_UW_NONE;
		int rbp = 0;

		if (x->cfa == LP_CFI_REG)
			cfa = x->cfa_reg == 7	 ? LP_UW_RSP
			      : x->cfa_reg == 6	 ? LP_UW_RBP
			      : x->cfa_reg == 10 ? LP_UW_R10
			      : x->cfa_reg == 13 ? LP_UW_R13
						 : LP_UW_NONE;
		else if (x->cfa == LP_CFI_DEREF)
			cfa = x->cfa_reg == 7	? LP_UW_RSP_DEREF
			      : x->cfa_reg == 6 ? LP_UW_RBP_DEREF
						: LP_UW_NONE;
		else if (x->cfa == LP_CFI_PLT)
			cfa = LP_UW_PLT;
		else if (x->cfa == LP_CFI_SIGNAL)
			cfa = LP_UW_SIGNAL;
		else if (x->cfa == LP_CFI_END)
			cfa = LP_UW_END;
		if (x->cfa == LP_CFI_SIGNAL)
			rbp = (int)(x->rbp_off / 8);
		else if (x->rbp == LP_CFI_RBP_SAVED)
			rbp = (int)(x->rbp_off / 8);
		else if (x->rbp == LP_CFI_RBP_AT_RBP)
			rbp = (int)(x->rbp_off / 8) + 1;
		else if (x->rbp == LP_CFI_RBP_LOST)
			rbp = LP_UW_RBP_LOST;
		forms[cfa]++;
		int64_t off = cfa == LP_UW_PLT ? x->cfa_off : x->cfa_off / 8;

		if (r->off != x->addr || r->cfa != cfa ||
		    (cfa == LP_UW_NONE && x->cfa == LP_CFI_NONE && r->cfa_off != x->why) ||
		    (cfa != LP_UW_NONE && cfa != LP_UW_END && (r->cfa_off != off || r->rbp != rbp)))
			bad++;
	}
	CHECK(bad == 0, "%zu rows differ from cfi's", bad);
	CHECK(forms[LP_UW_RSP] && forms[LP_UW_RBP_DEREF] && forms[LP_UW_R10],
	      "the fixture's rows as the walk reads them: rsp %zu, rbp %zu, rbp deref %zu, r10 "
	      "%zu, none %zu",
	      forms[LP_UW_RSP], forms[LP_UW_RBP], forms[LP_UW_RBP_DEREF], forms[LP_UW_R10],
	      forms[LP_UW_NONE]);
	free(v);
}

/* The row covering off by a search of all n rows: the last at or below it, or -1. */
static int64_t row_full(const struct lp_unwind_row *v, uint32_t n, uint64_t off)
{
	int64_t lo = 0, hi = n;

	while (lo < hi) {
		int64_t mid = (lo + hi) / 2;

		if (v[mid].off <= off)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo - 1;
}

/* The same by the page index as bpf/maps.bpf.c's lp_uw_row searches it; *span: the rows
 * it halved. */
static int64_t row_paged(const struct lp_unwind_row *v, uint32_t n, uint64_t off, uint32_t *span)
{
	struct lp_rows_head h;
	struct lp_rows_page pg;
	uint32_t shift, lo, hi, base;
	uint64_t page;

	memcpy(&h, &v[n], sizeof(h));
	shift = h.pages_shift & 63;
	page = off >> shift;
	*span = 0;
	if (page < h.first)
		return -1;
	page -= h.first;
	if (page >= h.pages_shift >> 8) {
		lo = n - 1;
		hi = n;
	} else {
		memcpy(&pg, &v[n + 1 + page], sizeof(pg));
		if (pg.lo > pg.hi || pg.hi >= n)
			return -2;
		lo = pg.lo;
		hi = pg.hi + 1;
	}
	*span = hi - lo;
	base = lo;
	while (lo < hi) {
		uint32_t mid = lo + (hi - lo) / 2;

		if (v[mid].off <= off)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo == base ? -1 : (int64_t)lo - 1;
}

/* n rows in slot (an array of n + 1 + pages): the index finds the row a search of all of
 * them finds, for every row's offset, the bytes either side of it and every page's
 * bounds; its pages are at most one per LP_ROWS_PER_PAGE rows. */
static void index_match(int outer, uint32_t slot, const struct lp_unwind_row *rows, uint32_t n,
			const char *what)
{
	struct lp_rows_head h;
	size_t pages = lp_rows_index(rows, n, &h, NULL);
	struct lp_unwind_row *v = rows_of(outer, slot, n + 1 + (uint32_t)pages);
	size_t bad = 0, tried = 0, widest = 0, spans = 0;
	uint32_t span, shift = h.pages_shift & 63;

	CHECK(v != NULL, "%s: rows and index read back", what);
	if (!v)
		return;
	CHECK(pages == (h.pages_shift >> 8) && pages >= 1 &&
		      (pages <= n / LP_ROWS_PER_PAGE || pages == 1),
	      "%s: %zu pages of 2^%u bytes for %u rows", what, pages, shift, n);
	for (uint32_t i = 0; i < n; i++)
		for (int64_t d = -1; d <= 1; d++) {
			uint64_t off = (uint64_t)v[i].off + (uint64_t)d;

			if (v[i].off == 0 && d < 0)
				continue;
			tried++;
			bad += row_full(v, n, off) != row_paged(v, n, off, &span);
			widest = span > widest ? span : widest;
			spans += span;
		}
	for (uint64_t p = 0; p <= pages; p++) {
		uint64_t start = ((uint64_t)h.first + p) << shift;

		for (int64_t d = -1; d <= 0; d++) {
			uint64_t off = start + (uint64_t)d;

			if (!start && d < 0)
				continue;
			tried++;
			bad += row_full(v, n, off) != row_paged(v, n, off, &span);
		}
	}
	CHECK(bad == 0, "%s: %zu of %zu offsets found another row by the index", what, bad, tried);
	printf("  %s: %u rows, %zu pages, rows halved per search %.1f on average, %zu at most\n",
	       what, n, pages, (double)spans / (3.0 * n), widest);
	free(v);
}

/* Rows as an object's could be: clustered, with long gaps and repeated offsets. */
static void index_synthetic(int outer, struct lp_unwind *u)
{
	uint32_t n = 20000, slot, x = 2463534242u;
	struct lp_unwind_row *r = calloc(n, sizeof(*r));
	uint64_t off = 4096;

	if (!r)
		return;
	for (uint32_t i = 0; i < n; i++) {
		x ^= x << 13;
		x ^= x >> 17;
		x ^= x << 5;
		/* mostly dense code, now and then a gap of up to 16 MiB, and some repeats */
		off += x % 100 == 0 ? x % (16u << 20) : x % 7 == 0 ? 0 : x % 64;
		r[i].off = (uint32_t)off;
		r[i].cfa = LP_UW_RSP;
		r[i].cfa_off = 1;
	}
	CHECK(lp_unwind_load_rows(u, r, n, &slot) == 0, "synthetic rows loaded");
	index_match(outer, slot, r, n, "synthetic");
	lp_unwind_release(u, slot, n);
	/* one row: one page */
	CHECK(lp_unwind_load_rows(u, r, 1, &slot) == 0, "one row loaded");
	index_match(outer, slot, r, 1, "one row");
	lp_unwind_release(u, slot, 1);
	free(r);
}

int main(int argc, char **argv)
{
	uint32_t a, an, b, bn, x, xn, lost[LP_UW_WHY_NR];
	struct lp_unwind u;
	struct lp_cfi c;
	int fd, outer, gen = -1, r;

	if (argc < 2)
		return 2;
	outer = outer_map(LP_UNWIND_OBJS);
	if (outer == -EPERM) {
		printf("skipped: creating BPF maps needs CAP_BPF\n");
		return 77;
	}
	CHECK(outer >= 0, "an array of maps as the daemon's: %d", outer);
	fd = open(argv[1], O_RDONLY | O_CLOEXEC);
	CHECK(fd >= 0 && lp_cfi_read(fd, &c) == 0 && c.n > 10, "%s: cfi rows", argv[1]);
	if (fd < 0 || !c.n || outer < 0)
		return check_done();

	gen = gen_map();
	CHECK(gen >= 0, "a generations' array: %d", gen);
	lp_unwind_init(&u, outer, gen);
	CHECK(lp_unwind_load(&u, fd, &a, &an, lost) == 0 && a == 0, "first load in slot 0: %u", a);
	/* Moved to odd before the array went in, past it after: the walks' kept rows of the
	 * slot's earlier array are not its rows. */
	CHECK(gen_of(gen, a) == 2, "slot 0's generation after its load: %u", gen_of(gen, a));
	rows_match(outer, a, an, &c);
	{
		struct lp_unwind_row *rows = rows_of(outer, a, an);

		if (rows)
			index_match(outer, a, rows, an, argv[1]);
		free(rows);
	}
	CHECK(lp_unwind_load(&u, fd, &b, &bn, lost) == 0 && b == 1, "second in slot 1: %u", b);
	rows_match(outer, b, bn, &c);
	CHECK(u.used == 2 * c.n && u.objs == 2 && u.bytes >= 2 * c.n * 8,
	      "%zu rows, %zu objects, %zu bytes", u.used, u.objs, u.bytes);

	/* Given back, the slot is empty and taken again first. */
	lp_unwind_release(&u, a, an);
	CHECK(bpf_map_lookup_elem(outer, &a, &x) && errno == ENOENT, "slot 0 is empty again");
	CHECK(gen_of(gen, a) == 4 && gen_of(gen, b) == 2, "generations after a release: %u, %u",
	      gen_of(gen, a), gen_of(gen, b));
	CHECK(lp_unwind_load(&u, fd, &x, &xn, lost) == 0 && x == 0, "slot 0 reused: %u", x);
	lp_unwind_release(&u, b, bn);
	lp_unwind_release(&u, x, xn);
	CHECK(u.used == 0 && u.objs == 0 && u.bytes == 0, "all given back: %zu rows, %zu bytes",
	      u.used, u.bytes);
	index_synthetic(outer, &u);
	CHECK(u.used == 0 && u.bytes == 0, "synthetic rows given back: %zu bytes", u.bytes);
	lp_unwind_free(&u);
	close(outer);
	close(gen);

	/* Every slot taken; then /dev/null. No generations' array: none kept. */
	outer = outer_map(LP_UNWIND_OBJS);
	lp_unwind_init(&u, outer, -1);
	for (int i = 0; i < LP_UNWIND_OBJS; i++)
		u.used_slot[i] = true;
	r = lp_unwind_load(&u, fd, &x, &xn, lost);
	CHECK(r == -ENOSPC, "no slot: -ENOSPC: %d", r);
	memset(u.used_slot, 0, sizeof(u.used_slot));
	close(fd);
	fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	CHECK(lp_unwind_load(&u, fd, &x, &xn, lost) == -ENOEXEC, "not ELF: -ENOEXEC");
	close(fd);
	lp_unwind_free(&u);
	close(outer);
	lp_cfi_free(&c);
	return check_done();
}
