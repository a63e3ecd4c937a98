// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* PyTorch's aten ops from libtorch's symbols and schema strings (aten.h). */
#include "engine/aten.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OPS_PREFIX "_ZN2at4_ops"

static bool ident_char(char c)
{
	return isalnum((unsigned char)c) || c == '_';
}

/* "name" or "name.overload" at s, ended by '(': its lengths, or false. */
static bool schema_head(const char *s, size_t len, size_t *name_len, size_t *total)
{
	size_t i = 0, dot = 0;

	if (!len || !(isalpha((unsigned char)s[0]) || s[0] == '_'))
		return false;
	for (; i < len && s[i] != '('; i++) {
		if (s[i] == '.' && !dot && i)
			dot = i;
		else if (!ident_char(s[i]))
			return false;
	}
	if (i == len || (dot && dot + 1 == i))
		return false;
	*name_len = dot ? dot : i;
	*total = i;
	return true;
}

static int by_st(const void *a, const void *b)
{
	return strcmp(((const struct lp_aten_schema *)a)->st,
		      ((const struct lp_aten_schema *)b)->st);
}

static int by_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int add_schema(struct lp_aten_names *o, size_t *cap, const char *s, size_t name_len,
		      size_t total)
{
	struct lp_aten_schema *v;
	char *st, *name;

	if (o->nschemas == *cap) {
		*cap = *cap ? *cap * 2 : 1024;
		if (!(v = realloc(o->schemas, *cap * sizeof(*v))))
			return -ENOMEM;
		o->schemas = v;
	}
	st = strndup(s, total);
	name = strndup(s, name_len);
	if (!st || !name) {
		free(st);
		free(name);
		return -ENOMEM;
	}
	/* The struct: '.' becomes '_' ("add.Tensor": add_Tensor). */
	if (name_len < total)
		st[name_len] = '_';
	o->schemas[o->nschemas++] = (struct lp_aten_schema){st, name};
	return 0;
}

static int add_name(struct lp_aten_names *o, size_t *cap, const char *s)
{
	char **v;

	if (o->nnames == *cap) {
		*cap = *cap ? *cap * 2 : 1024;
		if (!(v = realloc(o->names, *cap * sizeof(*v))))
			return -ENOMEM;
		o->names = v;
	}
	if (!(o->names[o->nnames] = strdup(s)))
		return -ENOMEM;
	o->nnames++;
	return 0;
}

int lp_aten_names_read(const char *rodata, size_t size, struct lp_aten_names *out)
{
	size_t cap_s = 0, cap_n = 0, k;
	const char *p = rodata, *end = rodata + size;

	memset(out, 0, sizeof(*out));
	while (p < end) {
		const char *z = memchr(p, '\0', (size_t)(end - p));
		size_t len = z ? (size_t)(z - p) : (size_t)(end - p), nl, total;
		int r = 0;

		/* A schema: "name[.overload](...) -> ...", a line of its own. */
		if (len > 6 && memmem(p, len, ") -> ", 5) && schema_head(p, len, &nl, &total))
			r = add_schema(out, &cap_s, p, nl, total);
		else if (len > 6 && len < 128 && !memcmp(p, "aten::", 6)) {
			bool plain = true;

			for (size_t i = 6; i < len && plain; i++)
				plain = ident_char(p[i]);
			if (plain && z)
				r = add_name(out, &cap_n, p + 6);
		}
		if (r < 0) {
			lp_aten_names_free(out);
			return r;
		}
		p += len + 1;
	}
	qsort(out->schemas, out->nschemas, sizeof(*out->schemas), by_st);
	qsort(out->names, out->nnames, sizeof(*out->names), by_str);
	/* Duplicates out: the same schema registered twice is one struct. */
	for (size_t i = k = 0; i < out->nschemas; i++) {
		if (k && !strcmp(out->schemas[k - 1].st, out->schemas[i].st)) {
			free(out->schemas[i].st);
			free(out->schemas[i].name);
			continue;
		}
		out->schemas[k++] = out->schemas[i];
	}
	out->nschemas = k;
	return 0;
}

void lp_aten_names_free(struct lp_aten_names *n)
{
	for (size_t i = 0; i < n->nschemas; i++) {
		free(n->schemas[i].st);
		free(n->schemas[i].name);
	}
	for (size_t i = 0; i < n->nnames; i++)
		free(n->names[i]);
	free(n->schemas);
	free(n->names);
	memset(n, 0, sizeof(*n));
}

int lp_aten_struct(const char *sym, char *out, size_t size)
{
	const char *p;
	char *end;
	unsigned long len;

	if (strncmp(sym, OPS_PREFIX, strlen(OPS_PREFIX)))
		return -ENOENT;
	p = sym + strlen(OPS_PREFIX);
	if (!isdigit((unsigned char)*p))
		return -ENOENT;
	len = strtoul(p, &end, 10);
	if (!len || len >= size || strlen(end) < len + 5)
		return -ENOENT;
	for (size_t i = 0; i < len; i++)
		if (!ident_char(end[i]))
			return -ENOENT;
	/* Only the dispatcher's entry points: call and redispatch. */
	if (strncmp(end + len, "4callE", 6) && strncmp(end + len, "10redispatchE", 13))
		return -ENOENT;
	memcpy(out, end, len);
	out[len] = '\0';
	return 0;
}

int lp_aten_op(const struct lp_aten_names *n, const char *sym, char *out, size_t size)
{
	char st[LP_OP_NAME_MAX * 2];
	struct lp_aten_schema key = {.st = st}, *hit;
	const char *name = st;
	size_t best = 0;

	if (lp_aten_struct(sym, st, sizeof(st)) < 0)
		return -ENOENT;
	hit = n ? bsearch(&key, n->schemas, n->nschemas, sizeof(*n->schemas), by_st) : NULL;
	if (hit) {
		name = hit->name;
	} else {
		/* The longest name the struct is, or starts with before an overload. */
		for (size_t i = 0; n && i < n->nnames; i++) {
			size_t k = strlen(n->names[i]);

			if (k > best && !strncmp(st, n->names[i], k) && (!st[k] || st[k] == '_')) {
				best = k;
				name = n->names[i];
			}
		}
	}
	if (snprintf(out, size, "aten::%s", name) >= (int)size)
		return -ENOENT;
	return 0;
}

static bool in(const char *op, const char *const *list)
{
	for (; *list; list++)
		if (!strcmp(op, *list))
			return true;
	return false;
}

/* Its in-place form ("add_") as the op. */
static void base_of(const char *op, char *out, size_t size)
{
	size_t n = strlen(op);

	snprintf(out, size, "%s", op);
	if (n > 1 && n < size && out[n - 1] == '_' && out[n - 2] != '_')
		out[n - 1] = '\0';
}

enum lp_op_group lp_aten_group(const char *op)
{
	static const char *const matmul[] = {"mm",
					     "addmm",
					     "bmm",
					     "baddbmm",
					     "addbmm",
					     "matmul",
					     "linear",
					     "mv",
					     "addmv",
					     "dot",
					     "vdot",
					     "outer",
					     "ger",
					     "einsum",
					     "_int_mm",
					     "tensordot",
					     "_addmm_activation",
					     "mkldnn_linear",
					     NULL};
	static const char *const attention[] = {"_softmax",
						"softmax",
						"_log_softmax",
						"log_softmax",
						"scaled_dot_product_attention",
						NULL};
	static const char *const activation[] = {
		"silu",	      "gelu",	   "relu",     "relu6", "sigmoid",     "tanh",
		"softplus",   "hardswish", "mish",     "elu",	"selu",	       "celu",
		"leaky_relu", "glu",	   "hardtanh", "prelu", "hardsigmoid", "logsigmoid",
		"softsign",   "threshold", NULL};
	static const char *const embedding[] = {"embedding",	    "embedding_bag",
						"_embedding_bag",   "index_select",
						"embedding_renorm", NULL};
	static const char *const copy[] = {"copy",
					   "clone",
					   "contiguous",
					   "cat",
					   "_cat",
					   "stack",
					   "to",
					   "_to_copy",
					   "index",
					   "index_put",
					   "_index_put_impl",
					   "gather",
					   "scatter",
					   "flip",
					   "roll",
					   "repeat",
					   "expand",
					   "view",
					   "reshape",
					   "_reshape_alias",
					   "transpose",
					   "permute",
					   "t",
					   "slice",
					   "select",
					   "split",
					   "split_with_sizes",
					   "chunk",
					   "narrow",
					   "squeeze",
					   "unsqueeze",
					   "as_strided",
					   "unbind",
					   "alias",
					   "detach",
					   "_unsafe_view",
					   "unfold",
					   "pad",
					   "constant_pad_nd",
					   "masked_select",
					   NULL};
	static const char *const elementwise[] = {
		"add",	       "sub",	      "rsub",	      "mul",	    "div",
		"pow",	       "rsqrt",	      "sqrt",	      "exp",	    "log",
		"neg",	       "abs",	      "reciprocal",   "sin",	    "cos",
		"where",       "masked_fill", "clamp",	      "clamp_min",  "clamp_max",
		"triu",	       "tril",	      "fill",	      "zero",	    "full",
		"ones",	       "zeros",	      "full_like",    "ones_like",  "zeros_like",
		"erf",	       "square",      "floor_divide", "remainder",  "lerp",
		"addcmul",     "addcdiv",     "sign",	      "round",	    "floor",
		"ceil",	       "trunc",	      "exp2",	      "log2",	    "log1p",
		"expm1",       "maximum",     "minimum",      "eq",	    "ne",
		"lt",	       "le",	      "gt",	      "ge",	    "logical_not",
		"logical_and", "logical_or",  "bitwise_and",  "bitwise_or", "bitwise_not",
		NULL};
	char b[LP_OP_NAME_MAX];
	const char *name = strncmp(op, "aten::", 6) ? op : op + 6;

	base_of(name, b, sizeof(b));
	if (in(b, matmul) || strstr(b, "gemm") || strstr(b, "_linear") || strstr(b, "pack_mm"))
		return LP_G_MATMUL;
	if (in(b, attention) || strstr(b, "attention"))
		return LP_G_ATTENTION;
	if (strstr(b, "norm"))
		return LP_G_NORM;
	if (in(b, activation))
		return LP_G_ACTIVATION;
	if (in(b, embedding))
		return LP_G_EMBEDDING;
	if (in(b, copy))
		return LP_G_COPY;
	if (in(b, elementwise))
		return LP_G_ELEMENTWISE;
	return LP_G_OTHER;
}
