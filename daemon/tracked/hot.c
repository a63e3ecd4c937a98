// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* A process's figures, its procs entry with every CPU's part added (hot.h). */
#include "tracked/hot.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <errno.h>
#include <stdbool.h>
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
