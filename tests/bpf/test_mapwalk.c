// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* Bulk walks and deletes of real kernel hash maps (daemon/kernel/mapwalk.c): every entry visited
 * once with its value, in batches and in the entry-per-call fallback; an early stop; large
 * values; deletes that skip keys already gone. Needs root (it creates BPF maps). */
#include <bpf/bpf.h>
#include <errno.h>
#include <linux/bpf.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../unit/check.h"
#include "kernel/mapwalk.h"

struct key {
	uint32_t tgid;
	uint32_t pad;
	uint64_t uaddr;
};

struct val {
	uint64_t a, b, c;
};

#define N 5000

struct seen {
	unsigned char count[N];
	int bad_values;
	size_t visits, stop_after;
};

static int visit(void *ctx, const void *k, const void *v)
{
	struct seen *s = ctx;
	const struct key *key = k;
	const struct val *val = v;

	if (key->tgid < N)
		s->count[key->tgid]++;
	if (val && (val->a != key->tgid || val->b != key->uaddr || val->c != 7))
		s->bad_values++;
	s->visits++;
	return s->stop_after && s->visits == s->stop_after ? 42 : 0;
}

static int count_ok(const struct seen *s, int expect_present(uint32_t))
{
	for (uint32_t i = 0; i < N; i++)
		if (s->count[i] != (expect_present(i) ? 1 : 0))
			return 0;
	return 1;
}

static int all(uint32_t i)
{
	(void)i;
	return 1;
}

/* Keys deleted below: those with i % 5 < 3. */
static int kept(uint32_t i)
{
	return i % 5 >= 3;
}

static int big_visit(void *ctx, const void *k, const void *v)
{
	const unsigned char *b = v;
	uint32_t key;

	memcpy(&key, k, sizeof(key));
	*(size_t *)ctx += b[0] == (unsigned char)key && b[16383] == (unsigned char)(key + 1);
	return 0;
}

int main(void)
{
	struct seen *s = calloc(1, sizeof(*s));
	struct lp_keys del = {.size = sizeof(struct key)};
	int fd, big, r;

	if (geteuid() != 0) {
		fprintf(stderr, "test_mapwalk: needs root (creates BPF maps), skipped\n");
		return 77;
	}
	fd = bpf_map_create(BPF_MAP_TYPE_HASH, "lp_test_walk", sizeof(struct key),
			    sizeof(struct val), 8192, NULL);
	CHECK(fd >= 0, "create a hash map: %s", strerror(errno));
	if (fd < 0 || !s)
		return check_done();
	for (uint32_t i = 0; i < N; i++) {
		struct key k = {i, 0, 0x7f0000000000ull + 64 * i};
		struct val v = {i, k.uaddr, 7};

		bpf_map_update_elem(fd, &k, &v, BPF_NOEXIST);
	}

	r = lp_map_walk(fd, sizeof(struct key), sizeof(struct val), visit, s);
	CHECK(r == 0, "walk returned %d", r);
	CHECK(count_ok(s, all), "every one of %d entries visited once (visits %zu)", N, s->visits);
	CHECK(s->bad_values == 0, "%d entries read with another entry's value", s->bad_values);

	memset(s, 0, sizeof(*s));
	r = lp_map_walk(fd, sizeof(struct key), 0, visit, s);
	CHECK(r == 0 && count_ok(s, all), "keys only (an entry per call): every key once");

	memset(s, 0, sizeof(*s));
	s->stop_after = 300;
	r = lp_map_walk(fd, sizeof(struct key), sizeof(struct val), visit, s);
	CHECK(r == 42 && s->visits == 300, "a visit's nonzero value stops the walk: %d after %zu",
	      r, s->visits);

	/* Three in five deleted, with keys that are not there among them (deleted by the
	 * kernel meanwhile, as an exit hook does): those are skipped, the rest still go. */
	for (uint32_t i = 0; i < N; i++) {
		struct key k = {i, 0, 0x7f0000000000ull + 64 * i};

		if (i % 5 < 3)
			lp_keys_add(&del, &k);
		if (i % 97 == 0) {
			struct key gone = {N + i, 0, 1};

			lp_keys_add(&del, &gone);
		}
	}
	lp_map_delete(fd, &del);
	CHECK(del.n == 0 && del.v == NULL, "the key list is emptied");
	memset(s, 0, sizeof(*s));
	lp_map_walk(fd, sizeof(struct key), sizeof(struct val), visit, s);
	CHECK(count_ok(s, kept), "exactly the undeleted keys remain (%zu visited)", s->visits);
	close(fd);

	/* Values of 16 KiB (a process's histograms are 9 KiB): fewer per batch, all read. */
	big = bpf_map_create(BPF_MAP_TYPE_HASH, "lp_test_big", sizeof(uint32_t), 16384, 256, NULL);
	CHECK(big >= 0, "create a map of large values: %s", strerror(errno));
	if (big >= 0) {
		unsigned char *v = calloc(1, 16384);
		size_t good = 0;

		for (uint32_t i = 0; v && i < 200; i++) {
			v[0] = (unsigned char)i;
			v[16383] = (unsigned char)(i + 1);
			bpf_map_update_elem(big, &i, v, BPF_NOEXIST);
		}
		r = lp_map_walk(big, sizeof(uint32_t), 16384, big_visit, &good);
		CHECK(r == 0 && good == 200, "200 large values read whole: %zu", good);
		free(v);
		close(big);
	}
	free(s);
	return check_done();
}
