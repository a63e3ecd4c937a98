// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* A process's figures, its procs entry with every CPU's part added (hot.h). */
#include "tracked/hot.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <errno.h>
#include <stdlib.h>

#include "base/hist.h"

_Static_assert(sizeof(struct lp_proc_stats) % 8 == 0,
	       "a per-CPU value is laid out every round_up(size, 8) bytes");

/* Adds every CPU's part of tgid to into; false when there is none. */
static bool add_parts(int hot_fd, __u32 tgid, struct lp_proc_stats *into)
{
	int ncpus = libbpf_num_possible_cpus();
	struct lp_proc_stats *v;
	bool found;

	if (hot_fd < 0 || ncpus <= 0 || !(v = calloc((size_t)ncpus, sizeof(*v))))
		return false;
	found = bpf_map_lookup_elem(hot_fd, &tgid, v) == 0;
	for (int i = 0; found && into && i < ncpus; i++)
		lp_stats_add(into, &v[i]);
	free(v);
	return found;
}

int lp_hot_read(int procs_fd, int hot_fd, __u32 tgid, struct lp_proc_stats *out)
{
	if (bpf_map_lookup_elem(procs_fd, &tgid, out) < 0)
		return -errno;
	add_parts(hot_fd, tgid, out);
	return 0;
}

void lp_hot_take(int hot_fd, __u32 tgid, struct lp_proc_stats *into)
{
	if (add_parts(hot_fd, tgid, into))
		bpf_map_delete_elem(hot_fd, &tgid);
}

void lp_hot_gc(int hot_fd, bool (*orphaned)(void *ctx, __u32 tgid), void *ctx)
{
	__u32 key, *gone = NULL;
	size_t n = 0, cap = 0;
	__u32 *prev = NULL;

	if (hot_fd < 0)
		return;
	/* Keys first, deletes after: a walk that deletes as it goes may start over. */
	while (bpf_map_get_next_key(hot_fd, prev, &key) == 0) {
		prev = &key;
		if (!orphaned(ctx, key))
			continue;
		if (n == cap) {
			__u32 *v = realloc(gone, (cap ? cap * 2 : 16) * sizeof(*v));

			if (!v)
				break;
			gone = v;
			cap = cap ? cap * 2 : 16;
		}
		gone[n++] = key;
	}
	for (size_t i = 0; i < n; i++)
		bpf_map_delete_elem(hot_fd, &gone[i]);
	free(gone);
}
