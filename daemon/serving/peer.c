// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* Peer identity for the API's access rule (see peer.h). */
#include "serving/peer.h"

#include <errno.h>
#include <grp.h>
#include <linux/inet_diag.h>
#include <linux/netlink.h>
#include <linux/sock_diag.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pwd.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static bool in_groups(const gid_t *g, size_t n, gid_t group)
{
	for (size_t i = 0; i < n; i++)
		if (g[i] == group)
			return true;
	return false;
}

int lp_peer_unix(int fd, bool have_group, gid_t group, struct lp_peer *p)
{
	gid_t small[64], *groups = small;
	socklen_t len = sizeof(small);
	struct ucred uc;
	socklen_t ulen = sizeof(uc);

	p->unix_socket = true;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &uc, &ulen) < 0)
		return -errno;
	p->known = true;
	p->uid = uc.uid;
	p->pid = uc.pid;
	p->privileged = uc.uid == 0 || (have_group && uc.gid == group);
	if (p->privileged || !have_group)
		return 0;
	if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len) < 0) {
		if (errno != ERANGE || !(groups = malloc(len)))
			return 0;
		if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len) < 0) {
			free(groups);
			return 0;
		}
	}
	p->privileged = in_groups(groups, len / sizeof(gid_t), group);
	if (groups != small)
		free(groups);
	return 0;
}

/* Membership of group for uid, from the user database: primary group or supplementary. */
static bool uid_in_group_now(uid_t uid, gid_t group)
{
	struct passwd pw, *res = NULL;
	gid_t groups[256];
	int n = 256;
	char buf[4096];

	if (getpwuid_r(uid, &pw, buf, sizeof(buf), &res) != 0 || !res)
		return false;
	if (pw.pw_gid == group)
		return true;
	if (getgrouplist(pw.pw_name, pw.pw_gid, groups, &n) < 0)
		return false;
	return in_groups(groups, (size_t)n, group);
}

/* The same, remembered for a few seconds: the user database is read and parsed at each
 * lookup (tens of microseconds), and a user who opens connections as fast as they can
 * must not make each one cost that. A change of membership shows within LIFE_NS. */
static bool uid_in_group(uid_t uid, gid_t group)
{
	enum { SLOTS = 8 };
	static const uint64_t LIFE_NS = 5000000000ULL;
	static struct {
		uid_t uid;
		gid_t group;
		bool in;
		uint64_t at;
	} cache[SLOTS];
	static unsigned next;
	struct timespec ts;
	uint64_t now;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	now = (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
	for (unsigned i = 0; i < SLOTS; i++)
		if (cache[i].at && cache[i].uid == uid && cache[i].group == group &&
		    now - cache[i].at < LIFE_NS)
			return cache[i].in;
	next = (next + 1) % SLOTS;
	cache[next].uid = uid;
	cache[next].group = group;
	cache[next].in = uid_in_group_now(uid, group);
	cache[next].at = now;
	return cache[next].in;
}

static bool loopback(const struct sockaddr_storage *ss)
{
	if (ss->ss_family == AF_INET)
		return (ntohl(((const struct sockaddr_in *)ss)->sin_addr.s_addr) >> 24) == 127;
	if (ss->ss_family == AF_INET6) {
		const struct in6_addr *a = &((const struct sockaddr_in6 *)ss)->sin6_addr;

		return IN6_IS_ADDR_LOOPBACK(a) ||
		       (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
	}
	return false;
}

static void diag_endpoint(const struct sockaddr_storage *ss, __be16 *port, __be32 *addr)
{
	if (ss->ss_family == AF_INET) {
		const struct sockaddr_in *s4 = (const struct sockaddr_in *)ss;

		*port = s4->sin_port;
		memcpy(addr, &s4->sin_addr, 4);
	} else {
		const struct sockaddr_in6 *s6 = (const struct sockaddr_in6 *)ss;

		*port = s6->sin6_port;
		memcpy(addr, &s6->sin6_addr, 16);
	}
}

/* The uid owning the client's end of the connection: the socket whose local address is our
 * peer's and whose remote address is ours (NETLINK_SOCK_DIAG, an exact lookup). */
static int socket_uid(const struct sockaddr_storage *local, const struct sockaddr_storage *peer,
		      uid_t *uid)
{
	struct {
		struct nlmsghdr nlh;
		struct inet_diag_req_v2 req;
	} msg = {
		.nlh = {.nlmsg_len = sizeof(msg),
			.nlmsg_type = SOCK_DIAG_BY_FAMILY,
			.nlmsg_flags = NLM_F_REQUEST},
		.req = {.sdiag_family = (__u8)peer->ss_family,
			.sdiag_protocol = IPPROTO_TCP,
			.idiag_states = ~0U,
			.id = {.idiag_cookie = {INET_DIAG_NOCOOKIE, INET_DIAG_NOCOOKIE}}},
	};
	struct sockaddr_nl kernel = {.nl_family = AF_NETLINK};
	char buf[1024];
	ssize_t n;
	int fd, r = -ENOENT;

	diag_endpoint(peer, &msg.req.id.idiag_sport, msg.req.id.idiag_src);
	diag_endpoint(local, &msg.req.id.idiag_dport, msg.req.id.idiag_dst);
	fd = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
	if (fd < 0)
		return -errno;
	if (sendto(fd, &msg, sizeof(msg), 0, (struct sockaddr *)&kernel, sizeof(kernel)) < 0) {
		r = -errno;
		goto out;
	}
	n = recv(fd, buf, sizeof(buf), 0);
	if (n < 0) {
		r = -errno;
		goto out;
	}
	for (struct nlmsghdr *h = (struct nlmsghdr *)buf; NLMSG_OK(h, (size_t)n);
	     h = NLMSG_NEXT(h, n)) {
		if (h->nlmsg_type == NLMSG_ERROR) {
			const struct nlmsgerr *e = NLMSG_DATA(h);

			r = e->error ? e->error : -ENOENT;
			break;
		}
		if (h->nlmsg_type == SOCK_DIAG_BY_FAMILY &&
		    h->nlmsg_len >= NLMSG_LENGTH(sizeof(struct inet_diag_msg))) {
			*uid = ((const struct inet_diag_msg *)NLMSG_DATA(h))->idiag_uid;
			r = 0;
			break;
		}
	}
out:
	close(fd);
	return r;
}

int lp_peer_tcp(int fd, bool have_group, gid_t group, struct lp_peer *p)
{
	struct sockaddr_storage local, peer;
	socklen_t llen = sizeof(local), plen = sizeof(peer);
	uid_t uid = (uid_t)-1;
	int r;

	p->unix_socket = false;
	if (getsockname(fd, (struct sockaddr *)&local, &llen) < 0 ||
	    getpeername(fd, (struct sockaddr *)&peer, &plen) < 0)
		return -errno;
	if (!loopback(&peer))
		return -EADDRNOTAVAIL;
	r = socket_uid(&local, &peer, &uid);
	if (r < 0)
		return r;
	p->known = true;
	p->uid = uid;
	p->privileged = uid == 0 || (have_group && uid_in_group(uid, group));
	return 0;
}
