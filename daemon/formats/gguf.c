// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* The GGUF header reader (gguf.h): the format of ggml's docs/gguf.md, versions 2 and 3. */
#include "formats/gguf.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

enum {
	T_U8 = 0,
	T_I8,
	T_U16,
	T_I16,
	T_U32,
	T_I32,
	T_F32,
	T_BOOL,
	T_STRING,
	T_ARRAY,
	T_U64,
	T_I64,
	T_F64,
	T_NR,
};
static const uint8_t scalar_size[T_NR] = {1, 1, 2, 2, 4, 4, 4, 1, 0, 0, 8, 8, 8};

#define MAX_TENSORS (1U << 20)
#define MAX_DIMS 4

struct rd {
	const uint8_t *p;
	size_t len, off;
	bool short_read; /* ran past len: the header is longer than what was given */
};

static bool take(struct rd *r, void *out, size_t n)
{
	if (n > r->len - r->off) {
		r->short_read = true;
		return false;
	}
	if (out)
		memcpy(out, r->p + r->off, n);
	r->off += n;
	return true;
}

static bool u32(struct rd *r, uint32_t *v)
{
	return take(r, v, 4);
}

static bool u64(struct rd *r, uint64_t *v)
{
	return take(r, v, 8);
}

/* A string: its length, and where it is (not terminated). */
static bool str(struct rd *r, const char **s, uint64_t *n)
{
	if (!u64(r, n))
		return false;
	if (*n > r->len - r->off) {
		r->short_read = true;
		return false;
	}
	*s = (const char *)r->p + r->off;
	r->off += *n;
	return true;
}

static bool str_is(const char *s, uint64_t n, const char *what)
{
	return n == strlen(what) && !memcmp(s, what, n);
}

static bool ends_with(const char *s, uint64_t n, const char *what)
{
	size_t w = strlen(what);

	return n >= w && !memcmp(s + n - w, what, w);
}

/* Skips a value of type t; a u32 value is kept in *v (for the expert counts). */
static bool skip_value(struct rd *r, uint32_t t, uint64_t *v, bool in_array)
{
	const char *s;
	uint64_t n, count;
	uint32_t et;

	*v = 0;
	if (t < T_NR && scalar_size[t]) {
		if (t == T_U32 || t == T_I32) {
			uint32_t x;

			if (!u32(r, &x))
				return false;
			*v = x;
			return true;
		}
		return take(r, NULL, scalar_size[t]);
	}
	if (t == T_STRING)
		return str(r, &s, &n);
	if (t != T_ARRAY || in_array) /* arrays of arrays: not written by ggml */
		return false;
	if (!u32(r, &et) || !u64(r, &count))
		return false;
	if (et < T_NR && scalar_size[et]) {
		if (count > (r->len - r->off) / scalar_size[et]) {
			r->short_read = true;
			return false;
		}
		return take(r, NULL, count * scalar_size[et]);
	}
	if (et != T_STRING)
		return false;
	for (uint64_t i = 0; i < count; i++)
		if (!str(r, &s, &n))
			return false;
	return true;
}

/* A name from the file, kept only as letters, digits, '_', '-' and '.': it is another user's
 * text, shown in terminals and used as a label. Anything else ends it. */
static void copy_name(char *out, size_t size, const uint8_t *s, size_t n)
{
	size_t i = 0;

	for (; i < n && i + 1 < size; i++) {
		char c = (char)s[i];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '_' || c == '-' || c == '.'))
			break;
		out[i] = c;
	}
	out[i] = '\0';
}

/* llama.cpp's enum llama_ftype: what most of the weights are stored as. */
static const char *const file_types[] = {
	[0] = "F32",	  [1] = "F16",	    [2] = "Q4_0",    [3] = "Q4_1",    [7] = "Q8_0",
	[8] = "Q5_0",	  [9] = "Q5_1",	    [10] = "Q2_K",   [11] = "Q3_K_S", [12] = "Q3_K_M",
	[13] = "Q3_K_L",  [14] = "Q4_K_S",  [15] = "Q4_K_M", [16] = "Q5_K_S", [17] = "Q5_K_M",
	[18] = "Q6_K",	  [19] = "IQ2_XXS", [20] = "IQ2_XS", [21] = "Q2_K_S", [22] = "IQ3_XS",
	[23] = "IQ3_XXS", [24] = "IQ1_S",   [25] = "IQ4_NL", [26] = "IQ3_S",  [27] = "IQ3_M",
	[28] = "IQ2_S",	  [29] = "IQ2_M",   [30] = "IQ4_XS", [31] = "IQ1_M",  [32] = "BF16",
	[36] = "TQ1_0",	  [37] = "TQ2_0",
};

const char *lp_gguf_file_type_name(int32_t t)
{
	if (t < 0 || (size_t)t >= sizeof(file_types) / sizeof(file_types[0]) || !file_types[t])
		return NULL;
	return file_types[t];
}

/* ggml's enum ggml_type as GGUF files store it: the numbers every ggml fork shares (a fork's
 * own types come after them, under numbers that differ between forks). */
static const char *const tensor_types[] = {
	[0] = "f32",	 [1] = "f16",	   [2] = "q4_0",   [3] = "q4_1",    [6] = "q5_0",
	[7] = "q5_1",	 [8] = "q8_0",	   [9] = "q8_1",   [10] = "q2_K",   [11] = "q3_K",
	[12] = "q4_K",	 [13] = "q5_K",	   [14] = "q6_K",  [15] = "q8_K",   [16] = "iq2_xxs",
	[17] = "iq2_xs", [18] = "iq3_xxs", [19] = "iq1_s", [20] = "iq4_nl", [21] = "iq3_s",
	[22] = "iq2_s",	 [23] = "iq4_xs",  [24] = "i8",	   [25] = "i16",    [26] = "i32",
	[27] = "i64",	 [28] = "f64",	   [29] = "iq1_m", [30] = "bf16",
};

const char *lp_gguf_type_name(int32_t t)
{
	if (t < 0 || (size_t)t >= sizeof(tensor_types) / sizeof(tensor_types[0]))
		return NULL;
	return tensor_types[t];
}

/* {bytes, values} per block (ggml-common.h's block_* structs: QK4_0 32, QK_K 256). */
static const uint16_t type_sizes[][2] = {
	[0] = {4, 1},	   [1] = {2, 1},      [2] = {18, 32},	 [3] = {20, 32},
	[6] = {22, 32},	   [7] = {24, 32},    [8] = {34, 32},	 [9] = {36, 32},
	[10] = {84, 256},  [11] = {110, 256}, [12] = {144, 256}, [13] = {176, 256},
	[14] = {210, 256}, [15] = {292, 256}, [16] = {66, 256},	 [17] = {74, 256},
	[18] = {98, 256},  [19] = {50, 256},  [20] = {18, 32},	 [21] = {110, 256},
	[22] = {82, 256},  [23] = {136, 256}, [24] = {1, 1},	 [25] = {2, 1},
	[26] = {4, 1},	   [27] = {8, 1},     [28] = {8, 1},	 [29] = {56, 256},
	[30] = {2, 1},
};

bool lp_gguf_type_size(int32_t t, uint32_t *block_bytes, uint32_t *block_values)
{
	if (t < 0 || (size_t)t >= sizeof(type_sizes) / sizeof(type_sizes[0]) || !type_sizes[t][1])
		return false;
	*block_bytes = type_sizes[t][0];
	*block_values = type_sizes[t][1];
	return true;
}

struct tinfo {
	uint64_t off;
	uint8_t kind; /* 0 other, 1 token_embd, 2 expert */
};

static int by_off(const void *a, const void *b)
{
	const struct tinfo *x = a, *y = b;

	return x->off < y->off ? -1 : x->off > y->off;
}

/* The key-value section: the architecture, file type, experts and alignment. */
static bool read_kv(struct rd *r, uint64_t nkv, struct lp_gguf *out, uint64_t *align)
{
	for (uint64_t i = 0; i < nkv; i++) {
		const char *k;
		uint64_t kn, v;
		uint32_t t;
		size_t at;

		if (!str(r, &k, &kn) || !u32(r, &t))
			return false;
		at = r->off;
		if (!skip_value(r, t, &v, false))
			return false;
		if (str_is(k, kn, "general.architecture") && t == T_STRING)
			copy_name(out->arch, sizeof(out->arch), r->p + at + 8, r->off - at - 8);
		else if (str_is(k, kn, "general.file_type") && (t == T_U32 || t == T_I32))
			out->file_type = (int32_t)v;
		if (ends_with(k, kn, ".expert_count") && (t == T_U32 || t == T_I32))
			out->experts = (uint32_t)v;
		else if (ends_with(k, kn, ".expert_used_count") && (t == T_U32 || t == T_I32))
			out->experts_used = (uint32_t)v;
		else if (str_is(k, kn, "general.alignment") && t == T_U32 && v && !(v & (v - 1)))
			*align = v;
	}
	return true;
}

/* The tensor infos: each one's offset and kind; *output: an output.weight of its own. */
static bool read_tensors(struct rd *r, const struct lp_gguf *out, uint64_t align, struct tinfo *ti,
			 bool *output)
{
	for (uint64_t i = 0; i < out->tensors; i++) {
		const char *name;
		uint64_t nn, dim;
		uint32_t ndims, t;

		if (!str(r, &name, &nn) || !u32(r, &ndims) || ndims > MAX_DIMS)
			return false;
		for (uint32_t d = 0; d < ndims; d++)
			if (!u64(r, &dim))
				return false;
		if (!u32(r, &t) || !u64(r, &ti[i].off) || ti[i].off % align)
			return false;
		if (str_is(name, nn, "token_embd.weight"))
			ti[i].kind = 1;
		else if (str_is(name, nn, "output.weight"))
			*output = true;
		else if (ends_with(name, nn, "_exps.weight"))
			ti[i].kind = 2;
	}
	return true;
}

/* Each tensor's bytes are its extent: to the next tensor, the last to the file's end (ggml
 * pads to the alignment). No table of types needed, new types included. */
static bool sizes(struct tinfo *ti, uint64_t data, uint64_t file_size, struct lp_gguf *out)
{
	qsort(ti, out->tensors, sizeof(*ti), by_off);
	for (uint64_t i = 0; i < out->tensors; i++) {
		uint64_t end = i + 1 < out->tensors ? ti[i + 1].off : file_size - data;

		if (end < ti[i].off || end > file_size - data)
			return false;
		out->tensor_bytes += end - ti[i].off;
		if (ti[i].kind == 1)
			out->token_embd_bytes += end - ti[i].off;
		else if (ti[i].kind == 2)
			out->expert_bytes += end - ti[i].off;
	}
	return true;
}

int lp_gguf_parse(const void *buf, size_t len, uint64_t file_size, struct lp_gguf *out)
{
	struct rd r = {.p = buf, .len = len};
	uint64_t nkv, align = 32, data;
	struct tinfo *ti = NULL;
	bool output = false;
	uint32_t magic;
	int ret = -EINVAL;

	memset(out, 0, sizeof(*out));
	out->file_type = -1;
	if (!u32(&r, &magic) || memcmp(&magic, "GGUF", 4) || !u32(&r, &out->version) ||
	    out->version < 2 || out->version > 3 || !u64(&r, &out->tensors) || !u64(&r, &nkv) ||
	    out->tensors > MAX_TENSORS || !read_kv(&r, nkv, out, &align))
		goto out;
	ti = calloc(out->tensors ? out->tensors : 1, sizeof(*ti));
	if (!ti) {
		ret = -ENOMEM;
		goto out;
	}
	if (!read_tensors(&r, out, align, ti, &output))
		goto out;
	data = (r.off + align - 1) / align * align;
	if (data > file_size || !sizes(ti, data, file_size, out))
		goto out;
	out->tied = !output;
	out->per_token_bytes = out->tensor_bytes - (output ? out->token_embd_bytes : 0);
	if (out->experts && out->experts_used && out->experts_used < out->experts)
		out->per_token_bytes -=
			out->expert_bytes - out->expert_bytes / out->experts * out->experts_used;
	ret = 0;
out:
	if (ret == -EINVAL && r.short_read)
		ret = -ENODATA;
	free(ti);
	return ret;
}
