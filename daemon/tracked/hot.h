/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* A tracked process's counters and histograms as the kernel keeps them: its "procs" entry
 * plus each CPU's part in "procs_hot", where the scheduler's programs add what they count
 * at every switch (lp.bpf.h). Every reader of a process's figures reads them here; the
 * per-CPU part is taken into the final record at the exit and removed with the process. */
#ifndef LLMPROF_HOT_H
#define LLMPROF_HOT_H

#include <linux/types.h>

#include "llmprof/abi.h"

/* tgid's entry in procs_fd into out, every CPU's part in hot_fd (-1: none) added to its
 * counters and histograms. 0, or -errno of the procs lookup (-ENOENT: not there). */
int lp_hot_read(int procs_fd, int hot_fd, __u32 tgid, struct lp_proc_stats *out);

/* Adds every CPU's part of tgid in hot_fd to into (NULL: drops it) and deletes it. */
void lp_hot_take(int hot_fd, __u32 tgid, struct lp_proc_stats *into);

#endif
