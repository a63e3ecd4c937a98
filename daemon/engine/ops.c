// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* ggml operators from symbol names. Upstream ggml-cpu names each op's function
 * ggml_compute_forward_<op> and splits it by type and chunk into helpers named the same
 * way with a suffix; forks add fused ops under the same prefix. */
#include "engine/ops.h"

#include <ctype.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <linux/types.h>
#include <string.h>

#include "llmprof/abi.h"

#define PREFIX "ggml_compute_forward_"

/* Suffixes of type variants and helpers, stripped from the end until none is left. */
static const char *const variant_suffixes[] = {
	"_f32",	      "_f16",	    "_bf16",	      "_i32",	"_flt",	 "_q", "_bytes",
	"_same_cont", "_one_chunk", "_non_quantized", "_tiled", "_impl", NULL,
};

static void strip_variants(char *op)
{
	bool again = true;

	while (again) {
		size_t n = strlen(op);

		again = false;
		for (const char *const *s = variant_suffixes; *s; s++) {
			size_t k = strlen(*s);

			if (n > k && strcmp(op + n - k, *s) == 0) {
				op[n - k] = '\0';
				again = true;
				break;
			}
		}
	}
}

/* The identifier starting at p inside sym: its length from an Itanium-mangled <source-name>
 * (the decimal count right before it), else up to the first character that cannot be in a
 * C identifier. */
static size_t ident_len(const char *sym, const char *p)
{
	const char *d = p;
	size_t len = 0, max = strlen(p);

	while (d > sym && isdigit((unsigned char)d[-1]))
		d--;
	if (d < p) {
		size_t k;

		len = strtoul(d, NULL, 10);
		/* Trusted only if all of it could be a C identifier: names reach terminals. */
		for (k = 0; k < len && k < max && (isalnum((unsigned char)p[k]) || p[k] == '_');
		     k++)
			;
		if (len > 0 && len <= max && k == len)
			return len;
	}
	for (len = 0; p[len] && (isalnum((unsigned char)p[len]) || p[len] == '_'); len++)
		;
	return len;
}

static int put(char *out, size_t size, const char *s, size_t n)
{
	if (n == 0 || n >= size)
		return -ENOENT;
	memcpy(out, s, n);
	out[n] = '\0';
	return 0;
}

int lp_op_name(const char *sym, char *out, size_t size)
{
	const char *p = strstr(sym, PREFIX);
	size_t n;

	if (p) {
		n = ident_len(sym, p);
		if (n <= strlen(PREFIX) || put(out, size, p + strlen(PREFIX), n - strlen(PREFIX)))
			return -ENOENT;
		strip_variants(out);
		return 0;
	}
	/* ggml::cpu::<ns>::...::compute_forward: extra buffer types (repack, AMX, KleidiAI)
	 * that compute MUL_MAT and MUL_MAT_ID themselves. */
	if (strncmp(sym, "_ZN4ggml3cpu", 12) == 0 && strstr(sym, "15compute_forward")) {
		const char *ns = sym + 12;
		char *end;
		unsigned long k = strtoul(ns, &end, 10);

		if (end == ns || k == 0 || k > strlen(end) || strlen("mul_mat_") + k >= size)
			return -ENOENT;
		memcpy(out, "mul_mat_", 8);
		memcpy(out + 8, end, k);
		out[8 + k] = '\0';
		return 0;
	}
	return -ENOENT;
}

static bool in(const char *op, const char *const *list)
{
	for (; *list; list++)
		if (strcmp(op, *list) == 0)
			return true;
	return false;
}

static bool starts(const char *op, const char *prefix)
{
	return strncmp(op, prefix, strlen(prefix)) == 0;
}

enum lp_op_group lp_op_group_of(const char *op)
{
	static const char *const copy[] = {"cpy", "dup", "cont", "concat", "set_rows", NULL};
	static const char *const elementwise[] = {
		"add",	     "add1",  "add_id",	   "acc",	  "sub",   "mul",	 "div",
		"sqr",	     "sqrt",  "log",	   "sin",	  "cos",   "exp",	 "expm1",
		"abs",	     "neg",   "scale",	   "clamp",	  "unary", "glu",	 "silu",
		"silu_back", "gelu",  "gelu_erf",  "gelu_quick",  "relu",  "leaky_relu", "elu",
		"sigmoid",   "tanh",  "hardswish", "hardsigmoid", "step",  "sgn",	 "floor",
		"ceil",	     "round", "trunc",	   "softplus",	  "fill",  "set",	 NULL};

	if (strstr(op, "mul_mat") || strstr(op, "out_prod"))
		return LP_G_MATMUL;
	if (starts(op, "flash_attn") || starts(op, "soft_max"))
		return LP_G_ATTENTION;
	if (strstr(op, "norm"))
		return LP_G_NORM;
	if (starts(op, "rope"))
		return LP_G_ROPE;
	if (starts(op, "get_rows") || in(op, copy))
		return LP_G_COPY;
	if (in(op, elementwise))
		return LP_G_ELEMENTWISE;
	return LP_G_OTHER;
}

const char *lp_op_group_name(enum lp_op_group g)
{
	static const char *const names[LP_G_NR] = {"matmul",	 "attention",	"norm",
						   "rope",	 "elementwise", "copy",
						   "activation", "embedding",	"other"};

	return (unsigned)g < LP_G_NR ? names[g] : "other";
}

int lp_op_table_find(const struct lp_op_table *t, const char *name)
{
	for (size_t i = 0; i < t->n; i++)
		if (strcmp(t->v[i].name, name) == 0)
			return (int)i;
	return -1;
}

int lp_op_table_index(struct lp_op_table *t, const char *name, enum lp_op_group g, size_t max)
{
	struct lp_op_entry *v;
	int i = lp_op_table_find(t, name);

	if (i >= 0)
		return i;
	if (t->n >= max)
		return -ENOSPC;
	v = realloc(t->v, (t->n + 1) * sizeof(*v));
	if (!v)
		return -ENOMEM;
	t->v = v;
	snprintf(v[t->n].name, sizeof(v[t->n].name), "%s", name);
	v[t->n].group = g;
	return (int)t->n++;
}

void lp_op_table_free(struct lp_op_table *t)
{
	free(t->v);
	t->v = NULL;
	t->n = 0;
}

const char *lp_op_group_key(int key)
{
	return key == LP_G_OTHER     ? "other_ops"
	       : key == LP_G_SYNC    ? "sync"
	       : key == LP_G_OUTSIDE ? "outside_ops"
				     : lp_op_group_name((enum lp_op_group)key);
}

void lp_op_group_counts(const struct lp_op_table *t, const struct lp_op_samples *os, bool gen,
			uint64_t out[LP_G_KEYS])
{
	const __u64 *per = gen ? os->gen : os->all;
	uint64_t total = gen ? os->gen_total : os->total, sync = gen ? os->gen_sync : os->sync;
	uint64_t in_ops = 0;

	memset(out, 0, sizeof(uint64_t) * LP_G_KEYS);
	for (size_t i = 0; i < t->n && i < LP_MAX_OPS; i++) {
		out[t->v[i].group] += per[i];
		in_ops += per[i];
	}
	out[LP_G_SYNC] = sync;
	out[LP_G_OUTSIDE] = total > sync + in_ops ? total - sync - in_ops : 0;
}

size_t lp_op_mark_top(const struct lp_op_table *t, const __u64 *samples, size_t k, uint8_t *mark)
{
	size_t n = 0;

	for (; n < k; n++) {
		size_t best = LP_MAX_OPS;

		for (size_t i = 0; i < t->n && i < LP_MAX_OPS; i++)
			if (!mark[i] && samples[i] &&
			    (best == LP_MAX_OPS || samples[i] > samples[best]))
				best = i;
		if (best == LP_MAX_OPS)
			break;
		mark[best] = 1;
	}
	return n;
}

bool lp_op_samples_trustworthy(const struct lp_op_samples *os)
{
	return !os->total || (double)os->how[LP_HOW_SCAN] <= LP_SCAN_TRUST * (double)os->total;
}
