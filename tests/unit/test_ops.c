// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* Unit tests of ggml op names from symbols: upstream's plain and mangled op functions and
 * their helpers fold into their op, forks' fused ops keep their names, other functions are
 * no ops; groups; the per-process op table. The mangled names are real ones, read from
 * llama.cpp's static llama-simple (tests/workload/build-llama.sh). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "engine/ops.h"

static const char *op(const char *sym)
{
	static char out[LP_OP_NAME_MAX];

	return lp_op_name(sym, out, sizeof(out)) == 0 ? out : NULL;
}

#define OP_IS(sym, want)                                                                      \
	do {                                                                                  \
		const char *got = op(sym);                                                    \
		CHECK(got && !strcmp(got, want), "%s -> %s, not %s", sym, got ? got : "none", \
		      want);                                                                  \
	} while (0)

int main(void)
{
	struct lp_op_table t = {0};
	char small[4];

	OP_IS("ggml_compute_forward_mul_mat", "mul_mat");
	OP_IS("ggml_compute_forward_mul_mat_id", "mul_mat_id");
	OP_IS("ggml_compute_forward_mul_mat_one_chunk", "mul_mat");
	OP_IS("ggml_compute_forward_add_non_quantized", "add");
	OP_IS("ggml_compute_forward_add_q_f32", "add");
	OP_IS("ggml_compute_forward_rms_norm_f32", "rms_norm");
	OP_IS("ggml_compute_forward_flash_attn_ext_f16_one_chunk", "flash_attn_ext");
	OP_IS("ggml_compute_forward_get_rows_back", "get_rows_back");
	OP_IS("ggml_compute_forward_add1", "add1");
	/* forks' fused ops */
	OP_IS("ggml_compute_forward_mul_mat_up_gate", "mul_mat_up_gate");
	OP_IS("ggml_compute_forward_rms_norm_mul_fused", "rms_norm_mul_fused");
	/* C++: templates, static functions, lambdas inside an op, GCC's clones */
	OP_IS("_Z28ggml_compute_forward_dup_fltIt11ggml_bf16_tEvPK19ggml_compute_paramsP11ggml_"
	      "tensor",
	      "dup");
	OP_IS("_Z29ggml_compute_forward_rope_fltIfEvPK19ggml_compute_paramsP11ggml_tensorb",
	      "rope");
	OP_IS("_ZL30ggml_compute_forward_dup_bytesPK19ggml_compute_paramsP11ggml_tensor", "dup");
	OP_IS("_ZL41ggml_compute_forward_flash_attn_ext_tiledPK19ggml_compute_paramsP11ggml_"
	      "tensorii",
	      "flash_attn_ext");
	OP_IS("_ZZL28ggml_compute_forward_tri_f32PK19ggml_compute_paramsP11ggml_tensorENUliiE0_4_"
	      "FUNEii",
	      "tri");
	OP_IS("ggml_compute_forward_soft_max_f32.isra.0", "soft_max");
	OP_IS("_ZN4ggml3cpu6repack13tensor_traitsI10block_q4_0Ll8ELl8EL9ggml_type8EE15compute_"
	      "forwardEP19ggml_compute_paramsP11ggml_tensor",
	      "mul_mat_repack");
	/* not op functions */
	CHECK(!op("ggml_compute_forward"), "the dispatcher is no op");
	CHECK(!op("ggml_compute_forward_"), "an empty op name is none");
	CHECK(!op("ggml_vec_dot_q8_0_q8_0"), "a kernel is no op by name");
	CHECK(!op("ggml_graph_compute_thread.isra.0"), "the graph loop is no op");
	CHECK(!op("ggml_cpu_extra_compute_forward"), "the extra-buffer dispatcher is no op");
	/* a length prefix past the end is not trusted: the identifier's characters are */
	OP_IS("_Z99ggml_compute_forward_x", "x");
	/* nor one that covers what no identifier has: the identifier's characters are taken */
	OP_IS("_Z26ggml_compute_forward_a\x1b[2J", "a");
	CHECK(lp_op_name("ggml_compute_forward_mul_mat", small, sizeof(small)) == -ENOENT,
	      "a name longer than the buffer is refused, not cut");

	CHECK(lp_op_group_of("mul_mat") == LP_G_MATMUL &&
		      lp_op_group_of("mul_mat_id") == LP_G_MATMUL &&
		      lp_op_group_of("mul_mat_up_gate") == LP_G_MATMUL &&
		      lp_op_group_of("out_prod") == LP_G_MATMUL &&
		      lp_op_group_of("mul_mat_repack") == LP_G_MATMUL,
	      "matmul: every *mul_mat* and out_prod");
	CHECK(lp_op_group_of("flash_attn_ext") == LP_G_ATTENTION &&
		      lp_op_group_of("soft_max") == LP_G_ATTENTION,
	      "attention");
	CHECK(lp_op_group_of("rms_norm") == LP_G_NORM &&
		      lp_op_group_of("rms_norm_mul_fused") == LP_G_NORM &&
		      lp_op_group_of("group_norm") == LP_G_NORM,
	      "norm");
	CHECK(lp_op_group_of("rope") == LP_G_ROPE && lp_op_group_of("rope_back") == LP_G_ROPE,
	      "rope");
	CHECK(lp_op_group_of("get_rows") == LP_G_COPY && lp_op_group_of("cpy") == LP_G_COPY &&
		      lp_op_group_of("set_rows") == LP_G_COPY && lp_op_group_of("dup") == LP_G_COPY,
	      "copy");
	CHECK(lp_op_group_of("mul") == LP_G_ELEMENTWISE &&
		      lp_op_group_of("add") == LP_G_ELEMENTWISE &&
		      lp_op_group_of("glu") == LP_G_ELEMENTWISE &&
		      lp_op_group_of("scale") == LP_G_ELEMENTWISE,
	      "elementwise, mul apart from mul_mat");
	CHECK(lp_op_group_of("argsort") == LP_G_OTHER && lp_op_group_of("ssm_scan") == LP_G_OTHER,
	      "other");
	CHECK(!strcmp(lp_op_group_name(LP_G_COPY), "copy") &&
		      !strcmp(lp_op_group_name(LP_G_NR), "other"),
	      "group names");

	CHECK(lp_op_table_index(&t, "mul_mat", LP_G_MATMUL, 2) == 0 &&
		      lp_op_table_index(&t, "rope", LP_G_ROPE, 2) == 1 &&
		      lp_op_table_index(&t, "mul_mat", LP_G_MATMUL, 2) == 0,
	      "indices are stable and shared by name");
	CHECK(lp_op_table_index(&t, "add", LP_G_ELEMENTWISE, 2) == -ENOSPC && t.n == 2,
	      "past the table's room: -ENOSPC, nothing added");
	lp_op_table_free(&t);
	return check_done();
}
