// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* Unit tests of the ggml_tensor layout check: tensors laid out as upstream ggml's and
 * ik_llama.cpp's headers declare them (the structs below, copied field for field from
 * ggml/include/ggml.h of each) are recognised as theirs and no other; arguments that are
 * not (params, tensor), bytes that are no tensor, and two ops claiming one opcode are
 * refused; blocks by name and op; FLOPs of a matrix multiplication. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "engine/tensors.h"

/* upstream ggml since the grad went (2024): GGML_MAX_SRC 10 */
struct up_tensor {
	int32_t type;
	void *buffer;
	int64_t ne[4];
	size_t nb[4];
	int32_t op;
	int32_t op_params[16];
	int32_t flags;
	void *src[10];
	void *view_src;
	size_t view_offs;
	void *data;
	char name[64];
	void *extra;
	char padding[8];
};

/* ik_llama.cpp: a backend, a grad, GGML_MAX_SRC 16 */
struct ik_tensor {
	int32_t type;
	int32_t backend;
	void *buffer;
	int64_t ne[4];
	size_t nb[4];
	int32_t op;
	int32_t op_params[16];
	int32_t flags;
	void *grad;
	void *src[16];
	void *view_src;
	size_t view_offs;
	void *data;
	char name[64];
	void *extra;
};

_Static_assert(offsetof(struct up_tensor, src) == 152 && offsetof(struct up_tensor, name) == 256,
	       "upstream's layout");
_Static_assert(offsetof(struct ik_tensor, src) == 160 && offsetof(struct ik_tensor, name) == 312,
	       "ik_llama.cpp's layout");

#define FILL(t, op_, name_, view)                                                          \
	do {                                                                               \
		memset(&(t), 0, sizeof(t));                                                \
		(t).type = 0;                                                              \
		(t).ne[0] = 4096, (t).ne[1] = 7, (t).ne[2] = (t).ne[3] = 1;                \
		(t).nb[0] = 4, (t).nb[1] = 4 * 4096, (t).nb[2] = (t).nb[3] = 4 * 4096 * 7; \
		(t).op = (op_);                                                            \
		(t).src[0] = (void *)0x7f0000001000;                                       \
		(t).data = (void *)0x7f0000100000;                                         \
		if (view) {                                                                \
			(t).view_src = (void *)0x7f0000002000;                             \
			(t).view_offs = 64;                                                \
			(t).nb[1] *= 2; /* every other row */                              \
		}                                                                          \
		snprintf((t).name, sizeof((t).name), "%s", (name_));                       \
	} while (0)

/* A sniff of an op's calls on tensors t (each call by thread ith of nth). */
static void sniff_of(struct lp_tensor_sniff *s, const void *t, size_t size, int ith, int nth)
{
	memset(s, 0, sizeof(*s));
	s->n = LP_TSNIFF_N;
	for (int k = 0; k < LP_TSNIFF_N; k++) {
		s->params[k] = (uint64_t)(uint32_t)((ith + k) % nth) | (uint64_t)nth << 32;
		s->dst[k] = 0x7f0000003000;
		memcpy(s->raw[k], t, size);
	}
}

/* Calls of upstream's mul_mat (opcode 29) on ffn_up-3, by 4 threads. */
static void sniff_matmul(struct lp_tensor_sniff *s)
{
	struct up_tensor t;

	FILL(t, 29, "ffn_up-3", false);
	t.src[1] = (void *)0x7f0000004000;
	sniff_of(s, &t, sizeof(t), 0, 4);
}

static void upstream(void)
{
	struct lp_tensor_state ts;
	struct lp_tensor_sniff s;
	struct lp_tensor_layout l;
	struct up_tensor t;

	lp_tensor_state_init(&ts);
	sniff_matmul(&s);
	CHECK(lp_tensor_decide(&ts, 7, LP_READ_PLAIN, &s), "a decision");
	CHECK(ts.chosen >= 0 && !ts.refused, "chosen %d", ts.chosen);
	l = lp_tensor_candidate(ts.chosen);
	CHECK(l.src == 152 && l.view_src == 232 && l.name == 256, "upstream's: %u %u %u", l.src,
	      l.view_src, l.name);
	CHECK(ts.targs[7] == LP_TA_READ && ts.nth == 4, "read, 4 threads");
	/* a view, of one source: fits the same */
	FILL(t, 12, "kq-3 (view)", true);
	sniff_of(&s, &t, sizeof(t), 1, 4);
	lp_tensor_decide(&ts, 9, LP_READ_PLAIN, &s);
	CHECK(ts.targs[9] == LP_TA_READ, "a view is read");
	/* a third op whose tensors say the same opcode as the first: not one ggml */
	FILL(t, 29, "x", false);
	sniff_of(&s, &t, sizeof(t), 0, 4);
	lp_tensor_decide(&ts, 11, LP_READ_PLAIN, &s);
	CHECK(ts.refused && ts.targs[7] == LP_TA_NO && ts.targs[9] == LP_TA_NO,
	      "two ops of one opcode refuse all");
}

/* An extra buffer type's compute_forward computes MUL_MAT as ggml_compute_forward_mul_mat
 * does, and MUL_MAT_ID too: neither is held against it. */
static void member(void)
{
	struct lp_tensor_state ts;
	struct lp_tensor_sniff s;

	lp_tensor_state_init(&ts);
	sniff_matmul(&s);
	lp_tensor_decide(&ts, 7, LP_READ_PLAIN, &s);
	((struct up_tensor *)s.raw[2])->op = 30;
	CHECK(lp_tensor_decide(&ts, 8, LP_READ_MEMBER, &s) && ts.targs[8] == LP_TA_READ &&
		      ts.targs[7] == LP_TA_READ && !ts.refused,
	      "the extra buffer's matmul is read beside mul_mat");
	/* ... but as a plain function, that is two opcodes */
	lp_tensor_decide(&ts, 9, LP_READ_PLAIN, &s);
	CHECK(ts.targs[9] == LP_TA_NO && !ts.refused, "one plain function, one opcode");
}

static void ik(void)
{
	struct lp_tensor_state ts;
	struct lp_tensor_sniff s;
	struct lp_tensor_layout l;
	struct ik_tensor t;

	lp_tensor_state_init(&ts);
	FILL(t, 80, "ffn_up_gate-0", false);
	t.src[1] = (void *)0x7f0000004000;
	t.src[2] = (void *)0x7f0000005000;
	sniff_of(&s, &t, sizeof(t), 0, 2);
	lp_tensor_decide(&ts, 3, LP_READ_PLAIN, &s);
	CHECK(ts.chosen >= 0, "chosen");
	l = lp_tensor_candidate(ts.chosen);
	CHECK(l.src == 160 && l.view_src == 288 && l.name == 312, "ik_llama.cpp's: %u %u %u", l.src,
	      l.view_src, l.name);
}

static void refusals(void)
{
	struct lp_tensor_state ts;
	struct lp_tensor_sniff s;
	struct up_tensor t;
	uint8_t noise[LP_TSNIFF_BYTES];

	/* the first argument is no (ith, nth): a compiler changed the arguments */
	lp_tensor_state_init(&ts);
	FILL(t, 29, "ffn_up-3", false);
	sniff_of(&s, &t, sizeof(t), 0, 4);
	for (int k = 0; k < LP_TSNIFF_N; k++)
		s.params[k] = 0x7f0000003000;
	CHECK(lp_tensor_decide(&ts, 1, LP_READ_PLAIN, &s) && ts.targs[1] == LP_TA_NO && !ts.refused,
	      "that op is not read, others may be");
	/* a thread index past the count */
	lp_tensor_state_init(&ts);
	sniff_of(&s, &t, sizeof(t), 0, 4);
	s.params[2] = 5ULL | 4ULL << 32;
	lp_tensor_decide(&ts, 1, LP_READ_PLAIN, &s);
	CHECK(ts.targs[1] == LP_TA_NO, "ith 5 of 4");
	/* calls on tensors of two opcodes are no one op's */
	lp_tensor_state_init(&ts);
	sniff_of(&s, &t, sizeof(t), 0, 4);
	((struct up_tensor *)s.raw[3])->op = 30;
	lp_tensor_decide(&ts, 1, LP_READ_PLAIN, &s);
	CHECK(ts.targs[1] == LP_TA_NO, "two opcodes");
	/* bytes that are no tensor of any layout */
	lp_tensor_state_init(&ts);
	for (size_t i = 0; i < sizeof(noise); i++)
		noise[i] = (uint8_t)(i * 37 + 11);
	sniff_of(&s, noise, sizeof(noise), 0, 4);
	lp_tensor_decide(&ts, 1, LP_READ_PLAIN, &s);
	CHECK(ts.targs[1] == LP_TA_NO && ts.chosen < 0, "noise");
	/* a name that is not text */
	lp_tensor_state_init(&ts);
	FILL(t, 29, "ffn\x01up", false);
	sniff_of(&s, &t, sizeof(t), 0, 4);
	lp_tensor_decide(&ts, 1, LP_READ_PLAIN, &s);
	CHECK(ts.targs[1] == LP_TA_NO, "unprintable name");
	/* strides that no ggml_new_tensor made, on a tensor that is no view */
	lp_tensor_state_init(&ts);
	FILL(t, 29, "ffn_up-3", false);
	t.nb[2] += 4;
	sniff_of(&s, &t, sizeof(t), 0, 4);
	lp_tensor_decide(&ts, 1, LP_READ_PLAIN, &s);
	CHECK(ts.targs[1] == LP_TA_NO, "not contiguous, not a view");
}

static void blocks(void)
{
	struct lp_node_key k = {0};

	CHECK(!strcmp(lp_block_names[lp_node_block("mul_mat", "ffn_up")], "ffn"), "ffn");
	CHECK(!strcmp(lp_block_names[lp_node_block("mul_mat", "Qcur")], "attention"), "Qcur");
	CHECK(!strcmp(lp_block_names[lp_node_block("mul_mat", "kq")], "attention"), "kq");
	CHECK(!strcmp(lp_block_names[lp_node_block("flash_attn_ext", "node_238")], "attention"),
	      "by op");
	CHECK(!strcmp(lp_block_names[lp_node_block("rms_norm", "attn_norm")], "norm"),
	      "norm first");
	CHECK(!strcmp(lp_block_names[lp_node_block("mul_mat", "result_output")], "output"),
	      "output");
	CHECK(!strcmp(lp_block_names[lp_node_block("get_rows", "inp_embd")], "input"), "input");
	CHECK(!strcmp(lp_block_names[lp_node_block("add", "l_out")], "other"), "the residual");
	CHECK(!strcmp(lp_block_names[lp_node_block("mul", "quant")], "other"), "q only as a word");
	{
		/* get_rows: 7 rows of a q8_0 [1024, 8192] by i32 indices into f32 [1024, 7];
		 * set_rows: an f32 row [256] into an f16 [256, 256] by an i64 index. Twice each. */
		struct lp_node g = {
			.key = {.type = {0, 8, 26, LP_NODE_NO_TYPE},
				.ne = {{1024, 7, 1, 1}, {1024, 8192, 1, 1}, {7, 1, 1, 1}}},
			.val = {.instances = 2, .rd_bytes = 1, .wr_bytes = 1}};
		struct lp_node st = {
			.key = {.type = {1, 0, 27, LP_NODE_NO_TYPE},
				.ne = {{256, 256, 1, 1}, {256, 1, 1, 1}, {1, 1, 1, 1}}},
			.val = {.instances = 2}};
		uint64_t rd, wr;

		CHECK(lp_node_bytes("get_rows", &g, &rd, &wr) &&
			      rd == 2 * (7 * (1024 / 32 * 34) + 7 * 4) && wr == 2 * 7 * 1024 * 4,
		      "get_rows: the rows it reads and writes, %llu and %llu",
		      (unsigned long long)rd, (unsigned long long)wr);
		CHECK(lp_node_bytes("set_rows", &st, &rd, &wr) && rd == 2 * (256 * 4 + 8) &&
			      wr == 2 * 256 * 2,
		      "set_rows: its source's rows, into the destination's type: %llu and %llu",
		      (unsigned long long)rd, (unsigned long long)wr);
		CHECK(lp_node_bytes("mul_mat", &g, &rd, &wr) && rd == 1 && wr == 1,
		      "other ops: the kernel's sums");
		g.val.bytes_unknown = 1;
		CHECK(!lp_node_bytes("mul_mat", &g, &rd, &wr), "a view's extent not known");
		g.key.type[1] = 40;
		CHECK(!lp_node_bytes("get_rows", &g, &rd, &wr), "a type of no known size");
	}
	{
		/* Names: the builder's with its layer; ggml's (node_N, a view's) alone, their
		 * layer from a source's name. */
		static const struct {
			const char *stem;
			int layer;
			const char *want;
		} names[] = {{"ffn_up", 3, "ffn_up-3"},
			     {"result_norm", -1, "result_norm"},
			     {"node_21", 0, "node_21"},
			     {"cache_k_l3 (view)", 3, "cache_k_l3 (view)"},
			     {"cache_k_l10 (view) (per", 10, "cache_k_l10 (view) (per"},
			     {"node_x", 2, "node_x-2"}};
		char out[LP_NODE_NAME_MAX];

		for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
			struct lp_node_key n = {.layer = (int16_t)names[i].layer};

			memcpy(n.stem, names[i].stem, strlen(names[i].stem));
			lp_node_name(&n, out);
			CHECK(!strcmp(out, names[i].want), "name %s, layer %d: %s", names[i].stem,
			      names[i].layer, out);
		}
	}
	/* [4096, 11008] x [4096, 7] -> [11008, 7]: 2 * 4096 * 11008 * 7 */
	k.type[1] = 8, k.type[2] = 0, k.type[3] = LP_NODE_NO_TYPE;
	k.ne[0][0] = 11008, k.ne[0][1] = 7, k.ne[0][2] = k.ne[0][3] = 1;
	k.ne[1][0] = 4096, k.ne[1][1] = 11008, k.ne[1][2] = k.ne[1][3] = 1;
	k.ne[2][0] = 4096, k.ne[2][1] = 7, k.ne[2][2] = k.ne[2][3] = 1;
	CHECK(lp_node_flops("mul_mat", &k) == 2ULL * 4096 * 11008 * 7, "flops");
	CHECK(lp_node_flops("mul_mat_repack", &k) == 2ULL * 4096 * 11008 * 7, "extra buffer's");
	CHECK(lp_node_flops("add", &k) == 0, "no flops for others");
	/* [4096, 11008] x [4096, 8] -> [11008, 7]: no mul_mat */
	k.ne[2][0] = 4096, k.ne[2][1] = 8, k.ne[2][2] = k.ne[2][3] = 1;
	CHECK(lp_node_flops("mul_mat", &k) == 0, "shapes of no matmul");
	/* ik_llama.cpp's up and gate [4096, 11008] each, x [4096, 7] */
	k.type[3] = 0;
	k.ne[2][1] = 11008;
	k.ne[3][0] = 4096, k.ne[3][1] = 7, k.ne[3][2] = k.ne[3][3] = 1;
	CHECK(lp_node_flops("mul_mat_up_gate", &k) == 4ULL * 4096 * 11008 * 7, "fused: two");
	/* mul_mat_id: 8 experts [4096, 11008, 8], x [4096, 2, 7] by ids [2, 7] -> [11008, 2, 7] */
	k.ne[1][2] = 8;
	k.ne[2][1] = 2, k.ne[2][2] = 7;
	k.ne[3][0] = 2, k.ne[3][1] = 7, k.ne[3][2] = 1;
	k.ne[0][1] = 2, k.ne[0][2] = 7;
	CHECK(lp_node_flops("mul_mat_id", &k) == 2ULL * 4096 * 11008 * 2 * 7, "experts");
	{
		/* Its bytes: of one token, the 2 experts its ids name of the 8 (q8_0, 4096 /
		 * 32 * 34 bytes a row, 11008 rows each); of 7, not known. */
		struct lp_node m = {.key = k, .val = {.instances = 3}};
		uint64_t expert = 4096 / 32 * 34 * 11008ULL, rest = 1000, rd, wr;

		m.val.rd_bytes = 3 * (8 * expert + rest);
		CHECK(!lp_node_bytes("mul_mat_id", &m, &rd, &wr),
		      "mul_mat_id of 7 tokens: not known");
		m.key.ne[2][2] = m.key.ne[3][1] = m.key.ne[0][2] = 1;
		CHECK(lp_node_bytes("mul_mat_id", &m, &rd, &wr) && rd == 3 * (2 * expert + rest),
		      "mul_mat_id of a token: 2 experts read, %llu", (unsigned long long)rd);
		CHECK(lp_node_bytes("mul_mat_repack", &m, &rd, &wr) &&
			      rd == 3 * (2 * expert + rest),
		      "an extra buffer type's, computing MUL_MAT_ID");
	}
}

int main(void)
{
	upstream();
	member();
	ik();
	refusals();
	blocks();
	return check_done();
}
