// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* Uprobes on a process's object files: where they go; and arrays of BPF links. */
#include "uprobe.h"

#include <bpf/libbpf.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

void lp_links_destroy(struct bpf_link ***links, size_t *n)
{
	for (size_t i = 0; i < *n; i++)
		bpf_link__destroy((*links)[i]);
	free(*links);
	*links = NULL;
	*n = 0;
}

int lp_links_push(struct bpf_link ***links, size_t *n, struct bpf_link *l)
{
	struct bpf_link **v = realloc(*links, (*n + 1) * sizeof(*v));

	if (!v) {
		bpf_link__destroy(l);
		return -ENOMEM;
	}
	v[(*n)++] = l;
	*links = v;
	return 0;
}

static int same_file(const char *path, uint64_t dev, uint64_t ino)
{
	struct stat st;

	return stat(path, &st) == 0 && st.st_ino == ino &&
	       (((uint64_t)major(st.st_dev) << 20) | minor(st.st_dev)) == dev;
}

int lp_uprobe_path(pid_t pid, const char *path, uint64_t dev, uint64_t ino, char *buf, size_t len)
{
	snprintf(buf, len, "%s", path);
	if (same_file(buf, dev, ino))
		return 0;
	snprintf(buf, len, "/proc/%d/root%s", (int)pid, path);
	return same_file(buf, dev, ino) ? 0 : -ENOENT;
}
