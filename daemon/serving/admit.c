// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* Loads bpf/admit.bpf.c and attaches it at the root of the unified cgroup hierarchy (every
 * process of the host, or of the container, is at or below it). */
#include "serving/admit.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "admit.skel.h"
#include "base/procfs.h"

struct lp_admit {
	struct admit_bpf *skel;
	struct bpf_link *links[2];
};

/* As bpf/admit.bpf.c has it. */
struct admit_addr {
	uint32_t family;
	uint32_t port;
	uint32_t addr[4];
};

struct admit_credit {
	uint64_t at, credit, refused;
};

static int key_of(const struct sockaddr *sa, socklen_t len, struct admit_addr *k)
{
	memset(k, 0, sizeof(*k));
	if (sa->sa_family == AF_INET && len >= (socklen_t)sizeof(struct sockaddr_in)) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)sa;

		k->family = AF_INET;
		k->port = in->sin_port;
		memcpy(k->addr, &in->sin_addr, 4);
		return 0;
	}
	if (sa->sa_family == AF_INET6 && len >= (socklen_t)sizeof(struct sockaddr_in6)) {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;

		k->family = AF_INET6;
		k->port = in6->sin6_port;
		memcpy(k->addr, &in6->sin6_addr, 16);
		return 0;
	}
	return -EAFNOSUPPORT;
}

int lp_admit_start(struct lp_admit **out, const struct sockaddr *addr, socklen_t len, uint32_t rate,
		   uint32_t burst, const char **why)
{
	struct lp_admit *a = calloc(1, sizeof(*a));
	struct admit_addr key;
	char root[4096];
	uint8_t one = 1;
	int cg = -1, r;

	*out = NULL;
	*why = "out of memory";
	if (!a)
		return -ENOMEM;
	if ((r = key_of(addr, len, &key)) < 0) {
		*why = "the listener is neither IPv4 nor IPv6";
		goto fail;
	}
	if ((r = lp_cgroup2_mount(root, sizeof(root))) < 0) {
		*why = "no unified (v2) cgroup hierarchy is mounted";
		goto fail;
	}
	cg = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (cg < 0) {
		r = -errno;
		*why = "the unified cgroup hierarchy's root cannot be opened";
		goto fail;
	}
	a->skel = admit_bpf__open();
	if (!a->skel) {
		r = -errno;
		*why = "the admission programs do not open";
		goto fail;
	}
	if ((r = admit_bpf__load(a->skel)) < 0) {
		*why = "the kernel does not load cgroup connect programs";
		goto fail;
	}
	if (bpf_map_update_elem(bpf_map__fd(a->skel->maps.lp_admit_listeners), &key, &one,
				BPF_ANY) < 0) {
		r = -errno;
		*why = "the listener's address does not go in the map";
		goto fail;
	}
	a->links[0] = bpf_program__attach_cgroup(a->skel->progs.lp_admit_connect4, cg);
	a->links[1] = bpf_program__attach_cgroup(a->skel->progs.lp_admit_connect6, cg);
	if (!a->links[0] || !a->links[1]) {
		r = -errno;
		*why = "the kernel does not attach cgroup connect programs at the hierarchy's root";
		goto fail;
	}
	close(cg);
	lp_admit_set(a, rate, burst);
	*why = NULL;
	*out = a;
	return 0;
fail:
	if (cg >= 0)
		close(cg);
	lp_admit_free(a);
	return r < 0 ? r : -EINVAL;
}

void lp_admit_set(struct lp_admit *a, uint32_t rate, uint32_t burst)
{
	if (!a)
		return;
	a->skel->data->lp_admit_rate = rate;
	a->skel->data->lp_admit_burst = burst;
}

uint64_t lp_admit_refused(const struct lp_admit *a)
{
	uint32_t key, next, *prev = NULL;
	struct admit_credit c;
	uint64_t n = 0;
	int fd;

	if (!a)
		return 0;
	fd = bpf_map__fd(a->skel->maps.lp_admit_uids);
	while (bpf_map_get_next_key(fd, prev, &next) == 0) {
		if (bpf_map_lookup_elem(fd, &next, &c) == 0)
			n += c.refused;
		key = next;
		prev = &key;
	}
	return n;
}

void lp_admit_free(struct lp_admit *a)
{
	if (!a)
		return;
	for (int i = 0; i < 2; i++)
		bpf_link__destroy(a->links[i]);
	admit_bpf__destroy(a->skel);
	free(a);
}
