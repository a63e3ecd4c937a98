/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* Who is at the other end of an API connection. On the Unix socket: SO_PEERCRED and
 * SO_PEERGROUPS. On the TCP listener: when the peer is on this host (a loopback address),
 * the uid that owns its socket, asked of the kernel with sock_diag, as identd would; from
 * elsewhere nobody is known until it authenticates (webconfig.h). */
#ifndef LLMPROF_PEER_H
#define LLMPROF_PEER_H

#include <stdbool.h>
#include <sys/types.h>

#include "serving/api.h"

/* Fills p for the Unix socket fd. Privileged: root, or group (when have_group) among the
 * peer's primary and supplementary groups at connect time. Returns 0 or -errno. */
int lp_peer_unix(int fd, bool have_group, gid_t group, struct lp_peer *p);

/* Fills p for the TCP connection fd. A loopback peer is known by its socket's uid, and is
 * privileged when that uid is root or a member of group in the user database (no
 * SO_PEERGROUPS on TCP). -EADDRNOTAVAIL: the peer is not on this host; other -errno: the
 * kernel did not say. In both cases p stays unknown. */
int lp_peer_tcp(int fd, bool have_group, gid_t group, struct lp_peer *p);

#endif
