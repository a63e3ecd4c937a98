/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* ggml.graph of a process's document: precise mode's graph nodes by shape (tensors.h),
 * with their tensors, layer, block, bytes and FLOPs, and per generated token the nodes
 * evaluated and barriers passed. */
#ifndef LLMPROF_GRAPH_H
#define LLMPROF_GRAPH_H

#include <cjson/cJSON.h>

#include "engine/engine.h"

/* Adds "graph" to o; sorts nodes (longest own CPU time first). gen_tokens: generated inside
 * the precise windows; barrier_gen_calls: barrier calls then, by every thread. */
void lp_render_graph(cJSON *o, const struct lp_eproc *gp, struct lp_node *nodes, size_t n,
		     uint64_t gen_tokens, uint64_t whole_tokens, uint64_t barrier_gen_calls);

#endif
