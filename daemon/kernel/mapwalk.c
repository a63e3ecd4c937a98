// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* Bulk reads and deletes of kernel hash maps (see mapwalk.h). A pass of get_next_key and
 * lookup costs two system calls per entry: thousands of short-lived processes exiting while
 * their maps held thousands of entries made the daemon fall behind its ring buffer. */
#include "kernel/mapwalk.h"

#include <bpf/bpf.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Errors of a kernel without batch operations for this map (or a filter refusing them). */
static bool batch_missing(int err)
{
	return err == -EINVAL || err == -EOPNOTSUPP || err == -ENOTSUP || err == -ENOSYS ||
	       err == -EPERM || err == -524 /* ENOTSUPP */;
}

/* The entry-per-call walk: get_next_key, then lookup (an entry deleted between the two is
 * skipped). */
static int walk_each(int fd, size_t key_size, size_t value_size, lp_map_visit_fn visit, void *ctx)
{
	unsigned char *buf = malloc(2 * key_size + value_size + 1);
	unsigned char *key, *next, *value;
	void *prev = NULL;
	int r = 0;

	if (!buf)
		return -ENOMEM;
	key = buf;
	next = buf + key_size;
	value = buf + 2 * key_size;
	while (r == 0 && bpf_map_get_next_key(fd, prev, next) == 0) {
		memcpy(key, next, key_size);
		prev = key;
		if (value_size && bpf_map_lookup_elem(fd, key, value) < 0)
			continue;
		r = visit(ctx, key, value_size ? value : NULL);
	}
	free(buf);
	return r;
}

int lp_map_walk(int fd, size_t key_size, size_t value_size, lp_map_visit_fn visit, void *ctx)
{
	/* A hash map's batch token is a bucket index (u32); 8 bytes leave room. */
	uint64_t in = 0, out = 0;
	size_t cap = LP_MAP_BATCH;
	unsigned char *keys = NULL, *values = NULL;
	bool first = true;
	int r = 0;

	if (fd < 0)
		return -EBADF;
	if (!value_size) /* a batch reads values: keys alone come one per call */
		return walk_each(fd, key_size, 0, visit, ctx);
	/* Large values (a process's histograms) in fewer per call: 256 KiB of them at most. */
	while (cap > 16 && cap * value_size > (256u << 10))
		cap /= 2;
	for (;;) {
		__u32 count = (__u32)cap;
		int err;

		if (!keys) {
			keys = malloc(cap * key_size);
			values = malloc(cap * value_size);
			if (!keys || !values) {
				r = -ENOMEM;
				break;
			}
		}
		err = bpf_map_lookup_batch(fd, first ? NULL : &in, &out, keys, values, &count,
					   NULL);
		if (err < 0 && err != -ENOENT) {
			if (err == -ENOSPC && cap < (1u << 20)) {
				/* One bucket holds more than cap entries: read it with more room. */
				cap *= 2;
				free(keys);
				free(values);
				keys = values = NULL;
				continue;
			}
			if (first && batch_missing(err)) {
				free(keys);
				free(values);
				return walk_each(fd, key_size, value_size, visit, ctx);
			}
			r = err;
			break;
		}
		for (__u32 i = 0; r == 0 && i < count; i++)
			r = visit(ctx, keys + i * key_size, values + i * value_size);
		if (r || err == -ENOENT)
			break;
		in = out;
		first = false;
	}
	free(keys);
	free(values);
	return r;
}

int lp_keys_add(struct lp_keys *keys, const void *key)
{
	if (keys->n == keys->cap) {
		size_t cap = keys->cap ? 2 * keys->cap : 64;
		unsigned char *v = realloc(keys->v, cap * keys->size);

		if (!v)
			return -ENOMEM;
		keys->v = v;
		keys->cap = cap;
	}
	memcpy(keys->v + keys->n * keys->size, key, keys->size);
	keys->n++;
	return 0;
}

void lp_map_delete(int fd, struct lp_keys *keys)
{
	size_t done = 0;

	while (fd >= 0 && done < keys->n) {
		__u32 count = (__u32)(keys->n - done);
		int err = bpf_map_delete_batch(fd, keys->v + done * keys->size, &count, NULL);

		if (err == 0)
			break;
		if (count == 0 && batch_missing(err)) {
			for (; done < keys->n; done++)
				bpf_map_delete_elem(fd, keys->v + done * keys->size);
			break;
		}
		/* Stopped at a key that is gone (the kernel deleted it meanwhile): skip it. */
		done += count + 1;
	}
	free(keys->v);
	keys->v = NULL;
	keys->n = keys->cap = 0;
}
