// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* The unwind rows (unwind.h): an array per object, written through a mapping of it. */
#include "kernel/unwind.h"

#include <bpf/bpf.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "formats/cfi.h"

/* The map's elements are 8-byte aligned: its mapping is an array of these only if so. */
_Static_assert(sizeof(struct lp_unwind_row) == 8, "an unwind row is 8 bytes");

static size_t rows_bytes(size_t n)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);

	return (n * sizeof(struct lp_unwind_row) + page - 1) / page * page;
}

void lp_unwind_init(struct lp_unwind *u, int outer_fd, int gen_fd)
{
	memset(u, 0, sizeof(*u));
	pthread_mutex_init(&u->lock, NULL);
	u->outer_fd = outer_fd;
	u->gen_fd = gen_fd;
}

/* Slot i's generation moved on by one: odd before its array changes, even after. Its owner
 * (the loader that took it, or the release) is its only writer. */
static void gen_step(struct lp_unwind *u, uint32_t i)
{
	__u32 g = 0;

	if (u->gen_fd < 0)
		return;
	bpf_map_lookup_elem(u->gen_fd, &i, &g);
	g++;
	bpf_map_update_elem(u->gen_fd, &i, &g, BPF_ANY);
}

/* Slot i's array put (map >= 0) or taken out (map < 0), inside its generation's odd
 * stretch. Returns 0 or -errno. */
static int slot_set(struct lp_unwind *u, uint32_t i, int map)
{
	int r;

	gen_step(u, i);
	r = map >= 0 ? bpf_map_update_elem(u->outer_fd, &i, &map, BPF_ANY)
		     : bpf_map_delete_elem(u->outer_fd, &i);
	r = r ? -errno : 0;
	gen_step(u, i);
	return r;
}

/* After the prober's threads have stopped: nothing else holds the lock. */
void lp_unwind_free(struct lp_unwind *u)
{
	for (uint32_t i = 0; u->outer_fd >= 0 && i < LP_UNWIND_OBJS; i++)
		if (u->used_slot[i])
			slot_set(u, i, -1);
	pthread_mutex_destroy(&u->lock);
	memset(u, 0, sizeof(*u));
	u->outer_fd = -1;
	u->gen_fd = -1;
}

struct lp_unwind_use lp_unwind_use(struct lp_unwind *u)
{
	struct lp_unwind_use r;

	pthread_mutex_lock(&u->lock);
	r = (struct lp_unwind_use){u->objs, u->used, u->bytes};
	pthread_mutex_unlock(&u->lock);
	return r;
}

/* A free slot, taken (under the lock), or LP_UNWIND_OBJS. */
static uint32_t slot_take(struct lp_unwind *u)
{
	uint32_t i;

	pthread_mutex_lock(&u->lock);
	for (i = 0; i < LP_UNWIND_OBJS && u->used_slot[i]; i++)
		;
	if (i < LP_UNWIND_OBJS)
		u->used_slot[i] = true;
	pthread_mutex_unlock(&u->lock);
	return i;
}

static void slot_give(struct lp_unwind *u, uint32_t i)
{
	pthread_mutex_lock(&u->lock);
	u->used_slot[i] = false;
	pthread_mutex_unlock(&u->lock);
}

/* One row as the BPF side reads it: LP_UW_NONE, with the reason, for a rule it cannot
 * follow there. Returns the reason, or -1 for a row it can follow. */
static int convert(const struct lp_cfi_row *c, struct lp_unwind_row *r)
{
	int why = c->why;

	memset(r, 0, sizeof(*r));
	r->off = (uint32_t)c->addr;
	switch (c->cfa) {
	case LP_CFI_REG:
		r->cfa = c->cfa_reg == LP_DW_RSP   ? LP_UW_RSP
			 : c->cfa_reg == LP_DW_RBP ? LP_UW_RBP
			 : c->cfa_reg == LP_DW_R10 ? LP_UW_R10
			 : c->cfa_reg == LP_DW_R13 ? LP_UW_R13
						   : LP_UW_NONE;
		why = LP_UW_WHY_REG;
		break;
	case LP_CFI_DEREF:
		r->cfa = c->cfa_reg == LP_DW_RSP   ? LP_UW_RSP_DEREF
			 : c->cfa_reg == LP_DW_RBP ? LP_UW_RBP_DEREF
						   : LP_UW_NONE;
		why = LP_UW_WHY_REG;
		break;
	case LP_CFI_PLT:
		r->cfa = LP_UW_PLT;
		break;
	case LP_CFI_SIGNAL:
		r->cfa = LP_UW_SIGNAL;
		break;
	case LP_CFI_END:
		r->cfa = LP_UW_END;
		return -1;
	default:
		break;
	}
	if (r->cfa == LP_UW_PLT && c->cfa_off >= 0 && c->cfa_off <= 15) {
		r->cfa_off = (int16_t)c->cfa_off;
	} else if (r->cfa != LP_UW_NONE && r->cfa != LP_UW_PLT && c->cfa_off % 8 == 0 &&
		   c->cfa_off / 8 >= INT16_MIN && c->cfa_off / 8 <= INT16_MAX) {
		r->cfa_off = (int16_t)(c->cfa_off / 8);
	} else {
		if (r->cfa != LP_UW_NONE)
			why = LP_UW_WHY_RANGE;
		r->cfa = LP_UW_NONE;
		r->cfa_off = (int16_t)why;
		return why;
	}
	if (c->cfa == LP_CFI_SIGNAL)
		r->rbp = c->rbp_off >= 0 && c->rbp_off % 8 == 0 && c->rbp_off / 8 <= INT8_MAX
				 ? (int8_t)(c->rbp_off / 8)
				 : LP_UW_RBP_LOST;
	else if (c->rbp == LP_CFI_RBP_SAME)
		r->rbp = 0;
	else if (c->rbp == LP_CFI_RBP_SAVED && c->rbp_off < 0 && c->rbp_off % 8 == 0 &&
		 c->rbp_off / 8 > LP_UW_RBP_LOST)
		r->rbp = (int8_t)(c->rbp_off / 8);
	else if (c->rbp == LP_CFI_RBP_AT_RBP && c->rbp_off >= 0 && c->rbp_off % 8 == 0 &&
		 c->rbp_off / 8 < INT8_MAX)
		r->rbp = (int8_t)(c->rbp_off / 8 + 1);
	else
		r->rbp = LP_UW_RBP_LOST;
	return -1;
}

/* The shift of the pages: the fewest bytes a page that leave at least LP_ROWS_PER_PAGE rows
 * a page on average; at 32, one page for them all. */
static uint32_t index_shift(uint64_t first, uint64_t last, size_t n, uint32_t *pages)
{
	uint64_t want = n / LP_ROWS_PER_PAGE ? n / LP_ROWS_PER_PAGE : 1;
	uint32_t s = 0;

	while (s < 32 && (last >> s) - (first >> s) + 1 > want)
		s++;
	*pages = (uint32_t)((last >> s) - (first >> s) + 1);
	return s;
}

size_t lp_rows_index(const struct lp_unwind_row *rows, size_t n, struct lp_rows_head *h,
		     struct lp_rows_page *page)
{
	uint32_t pages, shift = index_shift(rows[0].off, rows[n - 1].off, n, &pages);
	size_t j = 0, k = 0;

	h->first = (uint32_t)((uint64_t)rows[0].off >> shift);
	h->pages_shift = pages << 8 | shift;
	for (uint32_t p = 0; page && p < pages; p++) {
		uint64_t start = (uint64_t)(h->first + p) << shift, end = start + (1ULL << shift);

		/* the last row at or below the page's first byte, and its last byte's */
		while (j < n && rows[j].off <= start)
			j++;
		while (k < n && rows[k].off < end)
			k++;
		page[p].lo = j ? (uint32_t)(j - 1) : 0;
		page[p].hi = k ? (uint32_t)(k - 1) : 0;
	}
	return pages;
}

/* Puts n rows, sorted by offset, and their page index in a new array in slot i (taken by
 * the caller, given back here on failure). */
static int rows_put(struct lp_unwind *u, uint32_t i, const struct lp_unwind_row *rows, size_t n,
		    const char *name)
{
	LIBBPF_OPTS(bpf_map_create_opts, opts, .map_flags = BPF_F_MMAPABLE | BPF_F_INNER_MAP);
	struct lp_rows_head h;
	size_t pages = lp_rows_index(rows, n, &h, NULL), len = n + 1 + pages;
	struct lp_unwind_row *mem;
	int r, map;

	map = bpf_map_create(BPF_MAP_TYPE_ARRAY, name, sizeof(__u32), sizeof(struct lp_unwind_row),
			     (uint32_t)len, &opts);
	if (map < 0) {
		r = -errno;
		slot_give(u, i);
		return r;
	}
	mem = mmap(NULL, rows_bytes(len), PROT_READ | PROT_WRITE, MAP_SHARED, map, 0);
	if (mem == MAP_FAILED) {
		r = -errno;
		close(map);
		slot_give(u, i);
		return r;
	}
	memcpy(mem, rows, n * sizeof(*rows));
	memcpy(&mem[n], &h, sizeof(h));
	lp_rows_index(rows, n, &h, (struct lp_rows_page *)&mem[n + 1]);
	munmap(mem, rows_bytes(len));
	/* Written before it is put in its slot: the walk never sees a half-written array.
	 * The slot holds it from here; the daemon's descriptor is not needed. */
	r = slot_set(u, i, map);
	close(map);
	if (r < 0) {
		slot_give(u, i);
		return r;
	}
	pthread_mutex_lock(&u->lock);
	u->objs++;
	u->used += n;
	u->slot_bytes[i] = rows_bytes(len);
	u->bytes += u->slot_bytes[i];
	pthread_mutex_unlock(&u->lock);
	return 0;
}

int lp_unwind_load(struct lp_unwind *u, int fd, uint32_t *slot, uint32_t *n, uint32_t *lost)
{
	struct lp_unwind_row *rows;
	struct lp_cfi c;
	size_t k = 0;
	uint32_t i;
	int r;

	if (u->outer_fd < 0)
		return -EOPNOTSUPP;
	/* Taken now, so that two loads on their way never pick the same one. */
	if ((i = slot_take(u)) == LP_UNWIND_OBJS)
		return -ENOSPC;
	r = lp_cfi_read(fd, &c);
	if (r < 0) {
		slot_give(u, i);
		return r;
	}
	/* File offsets past 4 GiB do not fit a row. */
	while (k < c.n && c.rows[k].addr <= UINT32_MAX)
		k++;
	if (!k || k > LP_UNWIND_MAX_ROWS || !(rows = malloc(k * sizeof(*rows)))) {
		r = !k ? -ENOENT : k > LP_UNWIND_MAX_ROWS ? -EFBIG : -ENOMEM;
		lp_cfi_free(&c);
		slot_give(u, i);
		return r;
	}
	memset(lost, 0, LP_UW_WHY_NR * sizeof(*lost));
	for (size_t j = 0; j < k; j++) {
		int why = convert(&c.rows[j], &rows[j]);

		if (why > LP_UW_WHY_NO_FDE && why < LP_UW_WHY_NR)
			lost[why]++;
	}
	/* Rows past 4 GiB into the file do not fit: the code they cover has none. */
	lost[LP_UW_WHY_RANGE] += (uint32_t)(c.n - k);
	lp_cfi_free(&c);
	r = rows_put(u, i, rows, k, "lp_unwind");
	free(rows);
	if (r < 0)
		return r;
	*slot = i;
	*n = (uint32_t)k;
	return 0;
}

int lp_unwind_load_rows(struct lp_unwind *u, const void *rows, size_t n, uint32_t *slot)
{
	uint32_t i;
	int r;

	if (u->outer_fd < 0)
		return -EOPNOTSUPP;
	if (!n || n > LP_UNWIND_MAX_ROWS)
		return n ? -EFBIG : -ENOENT;
	if ((i = slot_take(u)) == LP_UNWIND_OBJS)
		return -ENOSPC;
	r = rows_put(u, i, rows, n, "lp_rows");
	if (r < 0)
		return r;
	*slot = i;
	return 0;
}

/* The slot is free for another load only once the kernel no longer holds the array. */
void lp_unwind_release(struct lp_unwind *u, uint32_t slot, uint32_t n)
{
	bool used;

	if (u->outer_fd < 0 || slot >= LP_UNWIND_OBJS || !n)
		return;
	pthread_mutex_lock(&u->lock);
	used = u->used_slot[slot];
	pthread_mutex_unlock(&u->lock);
	if (!used)
		return;
	slot_set(u, slot, -1);
	pthread_mutex_lock(&u->lock);
	if (u->used_slot[slot]) {
		u->used_slot[slot] = false;
		u->objs--;
		u->used -= n;
		u->bytes -= u->slot_bytes[slot];
		u->slot_bytes[slot] = 0;
	}
	pthread_mutex_unlock(&u->lock);
}
