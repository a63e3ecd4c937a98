/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* Precise mode's graph nodes in the kernel: the calls sniffed to check an op function's
 * arguments (tensors.h decides), what the process's window is told to read, and the
 * "nodes" map's entries of a process. */
#ifndef LLMPROF_NODES_H
#define LLMPROF_NODES_H

#include <stdbool.h>
#include <stddef.h>

#include "engine/engine.h"

/* Puts what is decided of the process's tensors into its "precise" map value; on = false
 * (--no-precise-tensors): nothing is read or sniffed. */
void lp_nodes_fill(const struct lp_eproc *gp, bool on, struct lp_precise *pr);

/* Checks the ops whose calls are all sniffed (once a second in a window, and with fast every
 * 100 ms until the first decision, which then only a whole decode makes); when that
 * decides anything, the window's "precise" value is rewritten and the decision logged.
 * True when nodes begin to be read now: the layout was just chosen. */
bool lp_nodes_check(struct lp_core *c, struct lp_target *t, bool fast);

/* The process's nodes ([*n], malloc'ed; NULL with *n = 0 when none): the kernel's, or
 * those kept at its exit. */
struct lp_node *lp_nodes_read(const struct lp_core *c, const struct lp_target *t, size_t *n);

/* Deletes the process's entries (nodes, sniffs), after keeping its nodes if asked. */
void lp_nodes_take(struct lp_core *c, struct lp_target *t, bool keep);

#endif
