// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* Uprobes on a process's object files: where they go, arrays of BPF links, and the
 * kernel's multi-uprobe links. */
#include "kernel/uprobe.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <errno.h>
#include <linux/bpf.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <unistd.h>

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

void lp_probes_free(struct lp_probes *p)
{
	lp_links_destroy(&p->links, &p->nlinks);
	for (size_t i = 0; i < p->nfds; i++)
		close(p->fds[i]);
	free(p->fds);
	memset(p, 0, sizeof(*p));
}

static int fds_push(struct lp_probes *p, int fd)
{
	int *v = realloc(p->fds, (p->nfds + 1) * sizeof(*v));

	if (!v)
		return -ENOMEM;
	v[p->nfds++] = fd;
	p->fds = v;
	return 0;
}

/* BPF_LINK_CREATE's attributes for a multi-uprobe link, as the uapi lays them out since
 * Linux 6.6 (libbpf 1.1's union bpf_attr predates them). */
struct uprobe_multi_attr {
	uint32_t prog_fd;
	uint32_t target_fd;
	uint32_t attach_type;
	uint32_t flags;
	uint64_t path;
	uint64_t offsets;
	uint64_t ref_ctr_offsets;
	uint64_t cookies;
	uint32_t cnt;
	uint32_t umflags;
	uint32_t pid;
	uint32_t path_fd;
};

#define LP_UPROBE_MULTI_RETURN 1u /* BPF_F_UPROBE_MULTI_RETURN */

static int uprobe_multi_link(int prog_fd, const char *path, const unsigned long *offsets, size_t n,
			     bool retprobe, pid_t pid)
{
	struct uprobe_multi_attr a;
	int fd;

	memset(&a, 0, sizeof(a));
	a.prog_fd = (uint32_t)prog_fd;
	a.attach_type = LP_TRACE_UPROBE_MULTI;
	a.path = (uint64_t)(uintptr_t)path;
	a.offsets = (uint64_t)(uintptr_t)offsets;
	a.cnt = (uint32_t)n;
	a.umflags = retprobe ? LP_UPROBE_MULTI_RETURN : 0;
	a.pid = (uint32_t)pid;
	fd = (int)syscall(__NR_bpf, BPF_LINK_CREATE, &a, sizeof(a));
	return fd < 0 ? -errno : fd;
}

int lp_uprobe_multi_probe(void)
{
	LIBBPF_OPTS(bpf_prog_load_opts, opts, .expected_attach_type = LP_TRACE_UPROBE_MULTI);
	struct bpf_insn insns[2] = {
		{.code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = BPF_REG_0},
		{.code = BPF_JMP | BPF_EXIT},
	};
	unsigned long off = 0;
	int prog, r;

	prog = bpf_prog_load(BPF_PROG_TYPE_KPROBE, NULL, "GPL", insns, 2, &opts);
	if (prog < 0)
		return -errno;
	/* Where the kernel has them, a link on a directory fails on the file: EBADF. */
	r = uprobe_multi_link(prog, "/", &off, 1, false, 0);
	/* Where the pid filter covers the process, pid -1 fails first: EINVAL. */
	if (r == -EBADF)
		r = uprobe_multi_link(prog, "/", &off, 1, false, -1) == -EINVAL ? 0 : -EOPNOTSUPP;
	else {
		if (r >= 0) /* on "/": cannot be */
			close(r);
		r = r == -EPERM ? r : -EOPNOTSUPP;
	}
	close(prog);
	return r;
}

int lp_uprobe_multi_attach(struct lp_probes *out, const struct bpf_program *prog, bool retprobe,
			   pid_t pid, const char *path, const unsigned long *offsets, size_t n)
{
	int fd = uprobe_multi_link(bpf_program__fd(prog), path, offsets, n, retprobe, pid);

	if (fd < 0)
		return fd;
	if (fds_push(out, fd) < 0) {
		close(fd);
		return -ENOMEM;
	}
	out->n += n;
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
