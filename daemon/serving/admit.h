/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* Admission of connections to the TCP listener in the kernel (bpf/admit.bpf.c): a cgroup
 * connect hook on the unified hierarchy's root gives each uid but root a burst and a rate
 * of connections to the listener's address; past them connect(2) fails in the caller.
 * Where the kernel or the host cannot (no cgroup v2, no cgroup programs), the server's own
 * per-uid share still holds, at the daemon's cost. */
#ifndef LLMPROF_ADMIT_H
#define LLMPROF_ADMIT_H

#include <stdint.h>
#include <sys/socket.h>

struct lp_admit;

/* Loads and attaches the hook for the listener bound at addr. 0, or -errno with *why
 * saying what is missing (for the log and status). */
int lp_admit_start(struct lp_admit **out, const struct sockaddr *addr, socklen_t len, uint32_t rate,
		   uint32_t burst, const char **why);

/* New limits (a reload); the program reads them at each connect. NULL is fine. */
void lp_admit_set(struct lp_admit *a, uint32_t rate, uint32_t burst);

/* Connections refused in the kernel so far, over all uids still remembered. */
uint64_t lp_admit_refused(const struct lp_admit *a);

/* Detaches it. NULL is fine. */
void lp_admit_free(struct lp_admit *a);

#endif
