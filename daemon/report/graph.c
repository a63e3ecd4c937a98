// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* ggml.graph: what each graph node shape did in precise mode (graph.h). */
#include "report/graph.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "escape.h"
#include "formats/gguf.h"

static cJSON *tensor(const struct lp_node_key *k, int i)
{
	const char *name = lp_gguf_type_name(k->type[i]);
	cJSON *o = cJSON_CreateObject(), *ne = cJSON_AddArrayToObject(o, "ne");
	char buf[16];

	if (!name) {
		snprintf(buf, sizeof(buf), "type_%u", k->type[i]);
		name = buf;
	}
	cJSON_AddStringToObject(o, "type", name);
	for (int d = 0; d < 4; d++)
		cJSON_AddItemToArray(ne, cJSON_CreateNumber(k->ne[i][d]));
	return o;
}

/* Nodes by own on-CPU time, longest first. */
static int by_oncpu(const void *a, const void *b)
{
	const struct lp_node *x = a, *y = b;

	return x->val.oncpu_ns < y->val.oncpu_ns ? 1 : x->val.oncpu_ns > y->val.oncpu_ns ? -1 : 0;
}

static const char *state_of(const struct lp_tensor_state *ts)
{
	if (ts->refused)
		return "refused";
	return ts->chosen >= 0 ? "read" : "checking";
}

void lp_render_graph(cJSON *o, const struct lp_eproc *gp, struct lp_node *nodes, size_t n,
		     uint64_t gen_tokens, uint64_t whole_tokens, uint64_t barrier_gen_calls)
{
	const struct lp_tensor_state *ts = &gp->tensors;
	cJSON *g = cJSON_AddObjectToObject(o, "graph"), *a, *x, *s;
	uint64_t gen_instances = 0, gen_read;
	char lay[96];

	cJSON_AddStringToObject(g, "tensors", state_of(ts));
	if (ts->chosen >= 0 && !ts->refused) {
		struct lp_tensor_layout l = lp_tensor_candidate(ts->chosen);

		lp_tensor_describe(&l, lay, sizeof(lay));
		cJSON_AddStringToObject(g, "layout", lay);
	}
	if (ts->why[0])
		lp_json_add_escaped(g, "not_read_because", ts->why);
	lp_json_add_u64(g, "threads", (uint64_t)(ts->nth > 0 ? ts->nth : 0));
	/* CLOCK_MONOTONIC when nodes began to be read (the calls they count began after it);
	 * 0: not yet */
	lp_json_add_u64(g, "since_ns", gp->nodes_from_ns);
	/* The probed ops whose tensors are read, and those that are not: probed by a function
	 * of other arguments (a helper, a clone), or calls that did not fit. */
	a = cJSON_AddArrayToObject(g, "ops_read");
	s = cJSON_AddArrayToObject(g, "ops_not_read");
	for (size_t i = 0; i < gp->ops.n && i < LP_MAX_OPS; i++) {
		if (!gp->op_probed[i])
			continue;
		if (gp->op_readable[i] && ts->targs[i] == LP_TA_READ)
			cJSON_AddItemToArray(a, lp_json_escaped(gp->ops.v[i].name));
		else if (!gp->op_readable[i] || ts->targs[i] == LP_TA_NO)
			cJSON_AddItemToArray(s, lp_json_escaped(gp->ops.v[i].name));
	}
	if (nodes && n)
		qsort(nodes, n, sizeof(*nodes), by_oncpu);
	a = cJSON_AddArrayToObject(g, "nodes");
	for (size_t i = 0; i < n; i++) {
		const struct lp_node_key *k = &nodes[i].key;
		const struct lp_node_val *v = &nodes[i].val;
		const char *op = k->op < gp->ops.n ? gp->ops.v[k->op].name : "?";
		char stem[LP_NODE_STEM + 1], name[LP_NODE_NAME_MAX], shape[LP_NODE_SHAPE_MAX];
		uint64_t rd, wr;

		lp_node_stem(k, stem);
		lp_node_name(k, name);
		x = cJSON_CreateObject();
		lp_json_add_escaped(x, "op", op);
		lp_json_add_escaped(x, "name", stem);
		lp_json_add_escaped(x, "tensor", name);
		if (k->layer >= 0)
			lp_json_add_u64(x, "layer", (uint64_t)k->layer);
		else
			cJSON_AddNullToObject(x, "layer");
		cJSON_AddStringToObject(x, "block", lp_block_names[lp_node_block(op, stem)]);
		cJSON_AddStringToObject(x, "shape", lp_node_shape(k, shape));
		cJSON_AddItemToObject(x, "dst", tensor(k, 0));
		s = cJSON_AddArrayToObject(x, "src");
		for (int j = 1; j <= LP_NODE_SRCS; j++)
			if (k->type[j] != LP_NODE_NO_TYPE)
				cJSON_AddItemToArray(s, tensor(k, j));
		lp_json_add_u64(x, "instances", v->instances);
		lp_json_add_u64(x, "calls", v->calls);
		lp_json_add_u64(x, "ns", v->ns);
		lp_json_add_u64(x, "oncpu_ns", v->oncpu_ns);
		lp_json_add_u64(x, "max_ns", v->max_ns);
		lp_json_add_u64(x, "generation_instances", v->gen_instances);
		lp_json_add_u64(x, "generation_oncpu_ns", v->gen_oncpu_ns);
		/* Bytes over every instance (lp_node_bytes); null where not known. */
		if (lp_node_bytes(op, &nodes[i], &rd, &wr)) {
			lp_json_add_u64(x, "bytes_read", rd);
			lp_json_add_u64(x, "bytes_written", wr);
		} else {
			cJSON_AddNullToObject(x, "bytes_read");
			cJSON_AddNullToObject(x, "bytes_written");
		}
		lp_json_add_u64(x, "flops", lp_node_flops(op, k) * v->instances);
		cJSON_AddItemToArray(a, x);
		gen_instances += v->gen_instances;
	}
	/* Per generated token: nodes of the ops read evaluated, over the generation decodes
	 * that began once nodes were read (whole tokens, on both sides); barriers passed
	 * (calls over threads), over every window's. */
	x = cJSON_AddObjectToObject(g, "per_token");
	gen_read = whole_tokens;
	lp_json_add_u64(x, "generated", gen_read);
	cJSON_AddNumberToObject(x, "probed_nodes", gen_read ? (double)gen_instances / gen_read : 0);
	cJSON_AddNumberToObject(
		x, "barriers",
		gen_tokens && ts->nth > 0 ? (double)barrier_gen_calls / ts->nth / gen_tokens : 0);
}
