// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* Unit tests of daemon/formats/gguf.c: GGUF headers written here as ggml writes them (key/values of
 * every type, string arrays, tensor infos, aligned data), with a separate output layer,
 * tied embeddings and a mixture of experts; then every truncation and some corruptions
 * of them, which must fail cleanly. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "formats/gguf.h"

struct buf {
	uint8_t *p;
	size_t n, cap;
};

static void put(struct buf *b, const void *x, size_t n)
{
	if (b->n + n > b->cap) {
		b->cap = (b->n + n) * 2 + 256;
		b->p = realloc(b->p, b->cap);
	}
	memcpy(b->p + b->n, x, n);
	b->n += n;
}

static void u32(struct buf *b, uint32_t v)
{
	put(b, &v, 4);
}

static void u64(struct buf *b, uint64_t v)
{
	put(b, &v, 8);
}

static void str(struct buf *b, const char *s)
{
	u64(b, strlen(s));
	put(b, s, strlen(s));
}

struct tensor {
	const char *name;
	uint64_t bytes;
};

/* A model: kvs of each type ggml writes, the tensors' infos, then their data (each padded to
 * 32 bytes), n_experts / used when non-zero. Returns the file's bytes; *data_off where the
 * tensor data begins. */
static size_t header_end; /* of the last model written: where its tensor infos end */

static struct buf model(const struct tensor *t, size_t nt, uint32_t experts, uint32_t used)
{
	struct buf b = {0};
	uint64_t off = 0;
	size_t pad;
	float f = 1.5f;

	put(&b, "GGUF", 4);
	u32(&b, 3);
	u64(&b, nt);
	u64(&b, experts ? 7 : 4);
	str(&b, "general.architecture");
	u32(&b, 8);
	str(&b, experts ? "qwen3moe\033[2J" : "llama"); /* a name with a terminal escape */
	str(&b, "llama.attention.layer_norm_rms_epsilon");
	u32(&b, 6);
	put(&b, &f, 4);
	str(&b, "tokenizer.ggml.tokens"); /* an array of strings */
	u32(&b, 9);
	u32(&b, 8);
	u64(&b, 3);
	str(&b, "<s>");
	str(&b, "</s>");
	str(&b, "hello");
	str(&b, "tokenizer.ggml.scores"); /* an array of floats */
	u32(&b, 9);
	u32(&b, 6);
	u64(&b, 3);
	for (int i = 0; i < 3; i++)
		put(&b, &f, 4);
	if (experts) {
		str(&b, "llama.expert_count");
		u32(&b, 4);
		u32(&b, experts);
		str(&b, "llama.expert_used_count");
		u32(&b, 4);
		u32(&b, used);
		str(&b, "general.file_type");
		u32(&b, 4);
		u32(&b, 15);
	}
	for (size_t i = 0; i < nt; i++) {
		str(&b, t[i].name);
		u32(&b, 2);
		u64(&b, t[i].bytes / 4);
		u64(&b, 1);
		u32(&b, 0); /* F32 */
		u64(&b, off);
		off += (t[i].bytes + 31) / 32 * 32;
	}
	header_end = b.n;
	pad = (32 - b.n % 32) % 32;
	for (size_t i = 0; i < pad; i++)
		put(&b, "", 1);
	for (size_t i = 0; i < nt; i++) {
		size_t n = (t[i].bytes + 31) / 32 * 32;
		uint8_t *z = calloc(1, n);

		put(&b, z, n);
		free(z);
	}
	return b;
}

int main(void)
{
	const struct tensor dense[] = {{"token_embd.weight", 4000},
				       {"output_norm.weight", 64},
				       {"output.weight", 4000},
				       {"blk.0.attn_q.weight", 1024},
				       {"blk.0.ffn_up.weight", 2048}};
	const struct tensor tied[] = {{"token_embd.weight", 4000}, {"blk.0.attn_q.weight", 1024}};
	const struct tensor moe[] = {{"token_embd.weight", 1024},
				     {"output.weight", 1024},
				     {"blk.0.attn_q.weight", 512},
				     {"blk.0.ffn_up_exps.weight", 8192},
				     {"blk.0.ffn_gate_inp.weight", 256}};
	struct lp_gguf g;
	struct buf b;
	int r, bad = 0;

	/* Dense: every tensor but the embeddings, which a token reads one row of. */
	b = model(dense, 5, 0, 0);
	r = lp_gguf_parse(b.p, b.n, b.n, &g);
	CHECK(r == 0 && g.version == 3 && g.tensors == 5, "dense parses: %d", r);
	CHECK(g.tensor_bytes == 4000 + 64 + 4000 + 1024 + 2048 && g.token_embd_bytes == 4000 &&
		      !g.tied && g.per_token_bytes == 64 + 4000 + 1024 + 2048,
	      "dense: %llu bytes, %llu per token", (unsigned long long)g.tensor_bytes,
	      (unsigned long long)g.per_token_bytes);
	CHECK(!strcmp(g.arch, "llama") && g.file_type == -1 && !lp_gguf_file_type_name(-1),
	      "dense: architecture %s, no file type", g.arch);
	/* Every truncation of the header fails as too short, none crashes; once the tensor
	 * infos are whole, the data is not needed. */
	for (size_t n = 0; n < b.n; n++) {
		r = lp_gguf_parse(b.p, n, b.n, &g);
		bad += n < header_end ? r != -ENODATA : r != 0 || g.per_token_bytes != 7136;
	}
	CHECK(bad == 0, "%d truncations of the header parsed or failed oddly", bad);
	/* A file shorter than its header says: the last tensor would end before it starts. */
	CHECK(lp_gguf_parse(b.p, b.n, 100, &g) == -EINVAL, "a file smaller than its tensors");
	b.p[4] = 9; /* version 9 */
	CHECK(lp_gguf_parse(b.p, b.n, b.n, &g) == -EINVAL, "an unknown version is refused");
	b.p[4] = 3;
	b.p[0] = 'X';
	CHECK(lp_gguf_parse(b.p, b.n, b.n, &g) == -EINVAL, "no magic, no model");
	b.p[0] = 'G';
	memset(b.p + 16, 0xff, 8); /* n_kv: 2^64 - 1 */
	r = lp_gguf_parse(b.p, b.n, b.n, &g);
	CHECK(r == -EINVAL || r == -ENODATA, "an absurd key count is refused: %d", r);
	free(b.p);

	/* Tied: the output layer reads the whole embedding table. */
	b = model(tied, 2, 0, 0);
	CHECK(lp_gguf_parse(b.p, b.n, b.n, &g) == 0 && g.tied && g.per_token_bytes == 4000 + 1024,
	      "tied: %llu per token", (unsigned long long)g.per_token_bytes);
	free(b.p);

	/* A mixture of 8 experts, 2 used: a quarter of the experts' bytes. */
	b = model(moe, 5, 8, 2);
	CHECK(lp_gguf_parse(b.p, b.n, b.n, &g) == 0 && g.experts == 8 && g.experts_used == 2 &&
		      g.expert_bytes == 8192 && g.per_token_bytes == 1024 + 512 + 2048 + 256,
	      "moe: %llu per token", (unsigned long long)g.per_token_bytes);
	CHECK(!strcmp(g.arch, "qwen3moe") && g.file_type == 15 &&
		      !strcmp(lp_gguf_file_type_name(g.file_type), "Q4_K_M"),
	      "moe: architecture cut at the escape (%s), file type %d", g.arch, g.file_type);
	free(b.p);
	return check_done();
}
