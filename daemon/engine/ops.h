/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* Operators: the groups users know them by (every engine's), and ggml's: which functions
 * are op functions and what op each computes. */
#ifndef LLMPROF_OPS_H
#define LLMPROF_OPS_H

#include <stdbool.h>
#include <stddef.h>
#include <linux/types.h>
#include <stdint.h>

enum lp_op_group {
	LP_G_MATMUL = 0, /* every *mul_mat* (fused ones, repacked kernels), out_prod */
	LP_G_ATTENTION,	 /* flash_attn*, soft_max* */
	LP_G_NORM,	 /* *norm* */
	LP_G_ROPE,	 /* rope* */
	LP_G_ELEMENTWISE,
	LP_G_COPY,	 /* cpy, dup, cont, concat, get_rows*, set_rows; torch's copies and cat */
	LP_G_ACTIVATION, /* torch's silu, gelu, relu, ... (ggml's are elementwise: unary, glu) */
	LP_G_EMBEDDING,	 /* torch's embedding and the index_select it runs */
	LP_G_OTHER,
	LP_G_NR,
};

#define LP_OP_NAME_MAX 72 /* "aten::" and the longest op name of PyTorch 1.13 (61) */

/* The op a function symbol computes: "mul_mat" for ggml_compute_forward_mul_mat, and for
 * its helpers and type variants (ggml_compute_forward_mul_mat_one_chunk, C++ mangled
 * _Z28ggml_compute_forward_dup_fltIt..., lambdas inside one); "mul_mat_repack" for a
 * ggml::cpu::repack::tensor_traits<>::compute_forward. Writes it to out (size >= 2) and
 * returns 0, or -ENOENT when sym is no op function. */
int lp_op_name(const char *sym, char *out, size_t size);

enum lp_op_group lp_op_group_of(const char *op);
const char *lp_op_group_name(enum lp_op_group g);

/* The API's and /metrics' keys for a process's samples: the op groups ("other_ops" for
 * LP_G_OTHER), then "sync" (LP_G_SYNC) and "outside_ops" (LP_G_OUTSIDE). */
#define LP_G_SYNC LP_G_NR
#define LP_G_OUTSIDE (LP_G_NR + 1)
#define LP_G_KEYS (LP_G_NR + 2)
const char *lp_op_group_key(int key);

/* One process's ops, by the index its sampling table gives them; append-only, so that the
 * kernel's counts keep their meaning when a library is loaded later. */
struct lp_op_table {
	struct lp_op_entry {
		char name[LP_OP_NAME_MAX];
		enum lp_op_group group;
	} * v;
	size_t n;
};

/* The index of op name (added with group g if new), or -ENOSPC past max, -ENOMEM. */
int lp_op_table_index(struct lp_op_table *t, const char *name, enum lp_op_group g, size_t max);
/* The index of op name, or -1. */
int lp_op_table_find(const struct lp_op_table *t, const char *name);
void lp_op_table_free(struct lp_op_table *t);

struct lp_op_samples;

/* Marks in mark[] (one per op index) the k ops with most samples that are not marked yet;
 * ops without samples never. Returns how many it marked. */
size_t lp_op_mark_top(const struct lp_op_table *t, const __u64 *samples, size_t k, uint8_t *mark);

/* A process's samples by key (LP_G_KEYS): over its life, or while generating (gen). */
/* Whether a process's op shares can be taken as measured: the stack scan, which can take
 * a stale return address for a live frame, decided at most LP_SCAN_TRUST of its samples
 * (beyond that a group's share can be off by more than the 3 points they are checked to
 * against perf). */
#define LP_SCAN_TRUST 0.03
bool lp_op_samples_trustworthy(const struct lp_op_samples *os);

void lp_op_group_counts(const struct lp_op_table *t, const struct lp_op_samples *os, bool gen,
			uint64_t out[LP_G_KEYS]);

#endif
