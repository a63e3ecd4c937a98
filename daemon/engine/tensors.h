/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* ggml tensors as precise mode reads them: which ggml_tensor layout a process's build has,
 * checked on tensors its op functions were called with, and the model block a graph node
 * belongs to by its name. Pure: the maps are nodes.c's. */
#ifndef LLMPROF_TENSORS_H
#define LLMPROF_TENSORS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <linux/types.h>

#include "llmprof/abi.h"

/* Layouts of ggml_tensor past its common head (abi.h: type, ne, nb, op) in the ggml whose
 * compute functions take (params, dst): the sources at 152 (flags, then src[]: upstream
 * since the grad went in 2024) or at 160 (flags, grad, src[]: upstream before, and
 * ik_llama.cpp), 10 of them (upstream's GGML_MAX_SRC) or 16 (ik_llama.cpp's); then
 * view_src, view_offs, data, name. Any other is refused, never guessed. */
#define LP_TLAYOUTS 4

/* The layout of candidate i, and a description of it for the log. */
struct lp_tensor_layout lp_tensor_candidate(int i);
void lp_tensor_describe(const struct lp_tensor_layout *lay, char *out, size_t size);

/* What is known of a process's tensors, decided on sniffed calls (lp_tensor_decide). */
struct lp_tensor_state {
	uint32_t fits;		    /* candidates every checked call fits */
	int chosen;		    /* the one left; -1: none yet */
	bool refused;		    /* none fits, or two ops claimed one opcode */
	int nth;		    /* the thread count calls were made with; 0: none seen */
	uint8_t targs[LP_MAX_OPS];  /* enum lp_targ */
	int32_t opcode[LP_MAX_OPS]; /* ggml's enum ggml_op value of each checked op */
	uint32_t op_fits[LP_MAX_OPS];
	char why[160]; /* why refused, or why an op was, for the log */
};

void lp_tensor_state_init(struct lp_tensor_state *ts);

/* How an op's probed functions get (params, dst), as precise.c tells by their names:
 * first (ggml_compute_forward_<op>), or after a C++ object (an extra buffer type's
 * compute_forward, which computes whichever op of the node it is given: MUL_MAT and
 * MUL_MAT_ID, ops that ggml_compute_forward_mul_mat* compute too); or not read. */
enum lp_tensor_args { LP_READ_NOT = 0, LP_READ_PLAIN, LP_READ_MEMBER };

/* Checks op's LP_TSNIFF_N sniffed calls (params and dst at the positions args says): params
 * must point at a thread index below a thread count, dst at a tensor that fits a
 * candidate; and, for a plain function, of one opcode that no other op's computes. An op
 * whose calls fit none is not read (LP_TA_NO); the candidates left are those all checked
 * ops fit. Once one is left, every op that fits it is read (LP_TA_READ). Returns true when
 * any of targs changed. */
bool lp_tensor_decide(struct lp_tensor_state *ts, int op, enum lp_tensor_args args,
		      const struct lp_tensor_sniff *s);

/* A graph node shape of a process, as the "nodes" map holds it. */
struct lp_node {
	struct lp_node_key key;
	struct lp_node_val val;
};

/* The blocks of a model, as graph nodes are told apart by lp_node_block(). */
enum lp_block {
	LP_B_ATTENTION,
	LP_B_FFN,
	LP_B_NORM,
	LP_B_OUTPUT,
	LP_B_INPUT,
	LP_B_OTHER,
	LP_B_NR,
};
extern const char *const lp_block_names[LP_B_NR];

/* The block of a model a node belongs to: by its op for attention's own ops, else by the
 * name llama.cpp's graph gives it (llama-graph.cpp's cb(): "attn_norm-3", "Qcur-3", "kq-3",
 * "ffn_up-3", "result_output"; the KV cache's "cache_k_l3"). */
enum lp_block lp_node_block(const char *op, const char *stem);

/* A node key's name stem as a string. Returns out. */
char *lp_node_stem(const struct lp_node_key *k, char out[LP_NODE_STEM + 1]);

/* Its name as the process gave it, the stem and its layer ("ffn_up-3"); one ggml made
 * ("node_N" for a node the graph's builder left unnamed, "cache_k_l3 (view)") has its
 * layer from a source's name (bpf/precise.bpf.c), not its own: its stem alone. */
#define LP_NODE_NAME_MAX (LP_NODE_STEM + 8)
void lp_node_name(const struct lp_node_key *k, char out[LP_NODE_NAME_MAX]);

/* The shapes of a node's sources and destination, as llmprofctl ops shows them:
 * "[1024,2816]q8_0 x [1024,1]f32 -> [2816,1]f32" (trailing dimensions of one left out, two
 * kept). Returns out. */
#define LP_NODE_SHAPE_MAX 256
char *lp_node_shape(const struct lp_node_key *k, char out[LP_NODE_SHAPE_MAX]);

/* Bytes the node's instances read and wrote, over all of them (false: not known). The
 * kernel sums its tensors' sizes; an op that moves only the rows an index names moves
 * those rows instead: get_rows reads as many rows of its source as it writes, set_rows
 * writes as many rows as its source has, a row's bytes by the type's block size
 * (lp_gguf_type_size); a mul_mat_id of one token reads the U' experts its ids name of the
 * E it has. Not known: a view whose extent needed its type's block size, an indexed op's
 * type of no known size, a mul_mat_id of more tokens (the experts their routes share). */
bool lp_node_bytes(const char *op, const struct lp_node *n, uint64_t *rd, uint64_t *wr);

/* FLOPs of one evaluation of a matrix multiplication node (an op named mul_mat*: ggml's
 * own, an extra buffer type's, a fork's fused one): two per multiply-add, by the shapes
 * ggml gives each kind (mul_mat, mul_mat_id, ik_llama.cpp's fused up and gate, which
 * multiplies by two weights); 0 for other ops and shapes none of these has. */
uint64_t lp_node_flops(const char *op, const struct lp_node_key *k);

#endif
