/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* An exited process's last totals, kept packed: the header and counters whole, each
 * histogram's sum and maximum, and its buckets as runs of non-zero counts. A whole
 * struct lp_proc_stats is 18 KiB, nearly all of it buckets that never counted; kept for
 * every exited process of the retention (up to --max-processes of them), packed. */
#ifndef LLMPROF_PACKED_H
#define LLMPROF_PACKED_H

#include <linux/types.h>
#include <stddef.h>

#include "llmprof/abi.h"

struct lp_packed;

/* s packed (malloc'ed: free() it), or NULL when out of memory. */
struct lp_packed *lp_stats_pack(const struct lp_proc_stats *s);

/* What p holds, whole, into out. */
void lp_stats_unpack(const struct lp_packed *p, struct lp_proc_stats *out);

/* The bytes p takes. */
size_t lp_packed_size(const struct lp_packed *p);

#endif
