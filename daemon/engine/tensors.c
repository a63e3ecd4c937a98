// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* ggml tensor layouts, checked on real tensors, and nodes' blocks (tensors.h). */
#include "engine/tensors.h"

#include <stdio.h>
#include <string.h>

#include "formats/gguf.h"

/* x86-64 and arm64 user space: canonical addresses below 2^47 (2^48 with 52-bit VAs
 * disabled); tensors are at least 8-byte aligned (GGML_MEM_ALIGN is 16). */
#define USER_TOP (1ULL << 48)

struct lp_tensor_layout lp_tensor_candidate(int i)
{
	unsigned src = (i & 1) ? 160 : 152, n = (i & 2) ? 16 : 10;
	struct lp_tensor_layout l = {.src = (__u16)src};

	l.view_src = (__u16)(src + 8 * n);
	l.name = (__u16)(l.view_src + 24);
	return l;
}

void lp_tensor_describe(const struct lp_tensor_layout *lay, char *out, size_t size)
{
	snprintf(out, size, "src[] at %u, view_src at %u, name at %u", lay->src, lay->view_src,
		 lay->name);
}

void lp_tensor_state_init(struct lp_tensor_state *ts)
{
	memset(ts, 0, sizeof(*ts));
	ts->fits = (1U << LP_TLAYOUTS) - 1;
	ts->chosen = -1;
}

static uint64_t u64_at(const uint8_t *raw, size_t off)
{
	uint64_t v;

	memcpy(&v, raw + off, sizeof(v));
	return v;
}

static int32_t i32_at(const uint8_t *raw, size_t off)
{
	int32_t v;

	memcpy(&v, raw + off, sizeof(v));
	return v;
}

static bool user_ptr(uint64_t p)
{
	return p && p < USER_TOP && (p & 7) == 0;
}

/* Whether raw holds a tensor of this layout that an op function computes: a type and an
 * opcode in range, at least one element per dimension, strides of a real layout
 * (contiguous unless it is a view), a first source, data, and a printable name. */
static bool fits(const uint8_t *raw, const struct lp_tensor_layout *l)
{
	int32_t type = i32_at(raw, LP_T_TYPE), op = i32_at(raw, LP_T_OP);
	uint64_t ne[4], nb[4], vsrc, voffs, data;

	if ((size_t)l->name + 64 > LP_TSNIFF_BYTES)
		return false;
	if (type < 0 || type >= LP_NODE_NO_TYPE || op <= 0 || op >= 1024)
		return false;
	for (int i = 0; i < 4; i++) {
		ne[i] = u64_at(raw, LP_T_NE + 8 * i);
		nb[i] = u64_at(raw, LP_T_NB + 8 * i);
		if (ne[i] < 1 || ne[i] >= (1ULL << 40) || nb[i] < 1 || nb[i] >= (1ULL << 48))
			return false;
	}
	if (!user_ptr(u64_at(raw, l->src)))
		return false;
	vsrc = u64_at(raw, l->view_src);
	voffs = u64_at(raw, l->view_src + 8);
	data = u64_at(raw, l->view_src + 16);
	if ((vsrc && !user_ptr(vsrc)) || (!vsrc && voffs) || !data || data >= USER_TOP)
		return false;
	/* ggml_new_tensor: nb[i] = nb[i-1] * ne[i-1] past the first row. */
	if (!vsrc && (nb[2] != nb[1] * ne[1] || nb[3] != nb[2] * ne[2] || nb[1] < nb[0]))
		return false;
	for (int i = 0; i < 64; i++) {
		uint8_t c = raw[l->name + i];

		if (c == 0)
			return true;
		if (c < 0x20 || c > 0x7e)
			return false;
	}
	return false;
}

bool lp_tensor_decide(struct lp_tensor_state *ts, int op, enum lp_tensor_args args,
		      const struct lp_tensor_sniff *s)
{
	bool plain = args == LP_READ_PLAIN;
	uint32_t fit = (1U << LP_TLAYOUTS) - 1;
	int32_t opcode = 0;
	int nth = 0;
	bool changed = false;

	if (op < 0 || op >= LP_MAX_OPS || ts->targs[op] != LP_TA_UNKNOWN || ts->op_fits[op] ||
	    ts->refused)
		return false;
	for (int k = 0; k < LP_TSNIFF_N; k++) {
		int32_t ith = (int32_t)(uint32_t)s->params[k], n = (int32_t)(s->params[k] >> 32);
		int32_t code = i32_at(s->raw[k], LP_T_OP);

		if (ith < 0 || n < 1 || n > 4096 || ith >= n || (nth && n != nth) ||
		    (plain && k > 0 && code != opcode)) {
			fit = 0;
			break;
		}
		nth = n;
		opcode = code;
		for (int c = 0; c < LP_TLAYOUTS; c++) {
			struct lp_tensor_layout l = lp_tensor_candidate(c);

			if (!fits(s->raw[k], &l))
				fit &= ~(1U << c);
		}
	}
	if (!(fit & ts->fits)) {
		ts->targs[op] = LP_TA_NO;
		snprintf(ts->why, sizeof(ts->why),
			 "its calls' arguments are not (params, tensor) of a known layout");
		return true;
	}
	if (!plain) /* an extra buffer type's: any op it is given */
		opcode = -1;
	else
		for (int o = 0; o < LP_MAX_OPS && !ts->refused; o++)
			if (o != op && ts->op_fits[o] && ts->opcode[o] == opcode) {
				ts->refused = true;
				snprintf(ts->why, sizeof(ts->why),
					 "two ops' functions computed tensors of one opcode (%d)",
					 (int)opcode);
			}
	ts->opcode[op] = opcode;
	ts->op_fits[op] = fit;
	ts->fits &= fit;
	if (!ts->nth)
		ts->nth = nth;
	if (ts->refused) {
		for (int o = 0; o < LP_MAX_OPS; o++)
			if (ts->targs[o] != LP_TA_NO) {
				ts->targs[o] = LP_TA_NO;
				changed = true;
			}
		return true;
	}
	if (ts->fits & (ts->fits - 1)) /* more than one left: more ops must tell */
		return changed;
	ts->chosen = __builtin_ctz(ts->fits);
	for (int o = 0; o < LP_MAX_OPS; o++)
		if (ts->op_fits[o] & ts->fits && ts->targs[o] == LP_TA_UNKNOWN) {
			ts->targs[o] = LP_TA_READ;
			changed = true;
		}
	return changed;
}

static bool starts(const char *s, const char *p)
{
	return strncmp(s, p, strlen(p)) == 0;
}

const char *const lp_block_names[LP_B_NR] = {
	[LP_B_ATTENTION] = "attention", [LP_B_FFN] = "ffn",	[LP_B_NORM] = "norm",
	[LP_B_OUTPUT] = "output",	[LP_B_INPUT] = "input", [LP_B_OTHER] = "other",
};

char *lp_node_stem(const struct lp_node_key *k, char out[LP_NODE_STEM + 1])
{
	memcpy(out, k->stem, LP_NODE_STEM);
	out[LP_NODE_STEM] = '\0';
	return out;
}

/* One tensor: "[1024,2816]q8_0". */
static size_t shape_of(const struct lp_node_key *k, int i, char *out, size_t n)
{
	const char *type = lp_gguf_type_name(k->type[i]);
	int dims = 2, d;
	size_t at;

	for (d = 2; d < 4; d++)
		if (k->ne[i][d] != 1)
			dims = d + 1;
	at = (size_t)snprintf(out, n, "[");
	for (d = 0; d < dims && at < n; d++)
		at += (size_t)snprintf(out + at, n - at, "%s%u", d ? "," : "", k->ne[i][d]);
	if (at < n)
		at += type ? (size_t)snprintf(out + at, n - at, "]%s", type)
			   : (size_t)snprintf(out + at, n - at, "]type_%u", k->type[i]);
	return at < n ? at : n;
}

char *lp_node_shape(const struct lp_node_key *k, char out[LP_NODE_SHAPE_MAX])
{
	size_t at = 0, n = LP_NODE_SHAPE_MAX;

	out[0] = '\0';
	for (int i = 1; i <= LP_NODE_SRCS && at < n; i++) {
		if (k->type[i] == LP_NODE_NO_TYPE)
			continue;
		if (at)
			at += (size_t)snprintf(out + at, n - at, " x ");
		if (at < n)
			at += shape_of(k, i, out + at, n - at);
	}
	if (at < n)
		at += (size_t)snprintf(out + at, n - at, "%s", at ? " -> " : "");
	if (at < n)
		shape_of(k, 0, out + at, n - at);
	return out;
}

void lp_node_name(const struct lp_node_key *k, char out[LP_NODE_NAME_MAX])
{
	char stem[LP_NODE_STEM + 1];

	lp_node_stem(k, stem);
	/* ggml's names: "node_N", and a view's "X (view)", "X (permuted)" (maybe cut) */
	if (k->layer >= 0 && !(starts(stem, "node_") && stem[5] >= '0' && stem[5] <= '9') &&
	    !strstr(stem, " ("))
		snprintf(out, LP_NODE_NAME_MAX, "%s-%d", stem, k->layer);
	else
		snprintf(out, LP_NODE_NAME_MAX, "%s", stem);
}

enum lp_block lp_node_block(const char *op, const char *stem)
{
	static const char *const attn[] = {"attn", "Qcur", "Kcur", "Vcur", "kq",    "kqv",
					   "q",	   "k",	   "v",	   "wo",   "fattn", NULL};

	/* by the op where it has one block whatever its name (ggml names an unnamed node
	 * "node_N") */
	if (starts(op, "flash_attn") || starts(op, "soft_max"))
		return LP_B_ATTENTION;
	if (strstr(stem, "norm"))
		return LP_B_NORM;
	if (starts(stem, "cache_k") || starts(stem, "cache_v"))
		return LP_B_ATTENTION;
	if (starts(stem, "ffn") || starts(stem, "moe"))
		return LP_B_FFN;
	if (starts(stem, "result_output") || starts(stem, "output"))
		return LP_B_OUTPUT;
	if (starts(stem, "inp_") || !strcmp(stem, "embd"))
		return LP_B_INPUT;
	for (const char *const *a = attn; *a; a++) {
		size_t n = strlen(*a);

		/* a whole word: "kq", "kq_soft_max", "kqv_out", "q-", not "quant" */
		if (strncmp(stem, *a, n) == 0 &&
		    (stem[n] == '\0' || stem[n] == '_' || stem[n] == ' ' || stem[n] == '-'))
			return LP_B_ATTENTION;
	}
	return LP_B_OTHER;
}

static bool same(const __u32 *x, const __u32 *y, int from, int to)
{
	for (int i = from; i < to; i++)
		if (x[i] != y[i])
			return false;
	return true;
}

/* ggml_mul_mat_id's shapes: experts a [K, N, E], b [K, U, T], ids c [U', T] -> [N, U', T]
 * (not ik_llama.cpp's fused up and gate: two weights of one shape). */
static bool mul_mat_id(const struct lp_node_key *k)
{
	const __u32 *d = k->ne[0], *a = k->ne[1], *b = k->ne[2], *c = k->ne[3];

	return k->type[3] != LP_NODE_NO_TYPE && a[0] == b[0] && !same(a, b, 0, 2) && d[0] == a[1] &&
	       d[1] == c[0] && d[2] == c[1] && d[2] == b[2];
}

uint64_t lp_node_flops(const char *op, const struct lp_node_key *k)
{
	const __u32 *d = k->ne[0], *a = k->ne[1], *b = k->ne[2], *c = k->ne[3];
	bool three = k->type[3] != LP_NODE_NO_TYPE;

	if (strncmp(op, "mul_mat", 7) != 0 || k->type[1] == LP_NODE_NO_TYPE ||
	    k->type[2] == LP_NODE_NO_TYPE || a[0] != b[0])
		return 0;
	/* ggml_mul_mat: a [K, N] x b [K, T, b2, b3] -> [N, T, b2, b3] */
	if (!three)
		return d[0] == a[1] && same(d, b, 1, 4) ? 2ULL * a[0] * a[1] * b[1] * b[2] * b[3]
							: 0;
	/* ik_llama.cpp's fused up and gate: two weights a and b [K, N], x c [K, T, ...] */
	if (same(a, b, 0, 2) && c[0] == a[0] && d[0] == a[1] && same(d, c, 1, 4))
		return 4ULL * a[0] * a[1] * c[1] * c[2] * c[3];
	if (mul_mat_id(k))
		return 2ULL * a[0] * a[1] * d[1] * d[2];
	return 0;
}

/* Bytes of i's tensor's rows (ne[0] values each, whole blocks): *row, and their count. */
static bool rows_of(const struct lp_node_key *k, int i, uint64_t *row, uint64_t *rows)
{
	uint32_t bb, bv;

	if (!lp_gguf_type_size(k->type[i], &bb, &bv) || k->ne[i][0] % bv)
		return false;
	*row = (uint64_t)k->ne[i][0] / bv * bb;
	*rows = (uint64_t)k->ne[i][1] * k->ne[i][2] * k->ne[i][3];
	return true;
}

bool lp_node_bytes(const char *op, const struct lp_node *n, uint64_t *rd, uint64_t *wr)
{
	const struct lp_node_key *k = &n->key;
	uint64_t inst = n->val.instances, row[3], rows[3];
	bool get = !strcmp(op, "get_rows"), set = !strcmp(op, "set_rows");

	if (!get && !set) {
		*rd = n->val.rd_bytes;
		*wr = n->val.wr_bytes;
		if (n->val.bytes_unknown || !strcmp(op, "get_rows_back"))
			return false;
		if (strncmp(op, "mul_mat", 7) || !mul_mat_id(k))
			return true;
		/* Of its experts it reads those the ids name: for one token, U' of them (a
		 * top-k, each once); for more, as many as the tokens' routes share, not known. */
		if (k->ne[3][1] != 1 || !rows_of(k, 1, &row[1], &rows[1]) ||
		    *rd < inst * row[1] * rows[1])
			return false;
		*rd -= inst * row[1] * k->ne[1][1] * (k->ne[1][2] - k->ne[3][0]);
		return true;
	}
	/* dst, its rows' source and the index (src[0], src[1]) */
	for (int i = 0; i < 3; i++)
		if (!rows_of(k, i, &row[i], &rows[i]))
			return false;
	if (get) { /* dst's rows, each one of src[0]'s */
		*rd = inst * (rows[0] * row[1] + rows[2] * row[2]);
		*wr = inst * rows[0] * row[0];
	} else { /* src[0]'s rows, each into one of dst's */
		*rd = inst * (rows[1] * row[1] + rows[2] * row[2]);
		*wr = inst * rows[1] * row[0];
	}
	return true;
}
