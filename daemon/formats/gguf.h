/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* Reading a GGUF model's header: how many bytes of weights one generated token reads. Every
 * tensor is read once per token but the token embeddings (one row each, unless the output
 * layer shares them) and the experts a mixture of experts leaves out. The file is another
 * user's: every length is checked against the bytes given. Pure: parses a buffer. */
#ifndef LLMPROF_GGUF_H
#define LLMPROF_GGUF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct lp_gguf {
	uint32_t version;
	uint64_t tensors;
	uint64_t tensor_bytes;	   /* all tensor data: its extent in the file */
	uint64_t token_embd_bytes; /* token_embd.weight */
	uint64_t expert_bytes;	   /* tensors of experts (*_exps) */
	uint32_t experts, experts_used;
	int tied;		  /* no output.weight: the output layer reads token_embd */
	uint64_t per_token_bytes; /* what generating one token reads */
	char arch[32];		  /* general.architecture ("llama"); "" when absent */
	int32_t file_type;	  /* general.file_type (llama_ftype); -1 when absent */
};

/* The name of a llama_ftype ("Q8_0"), or NULL when unknown. */
const char *lp_gguf_file_type_name(int32_t t);

/* The name of a tensor type (ggml's enum ggml_type) shared by every ggml, or NULL. */
const char *lp_gguf_type_name(int32_t t);

/* Bytes per block and values per block of a tensor type of that shared numbering (the
 * sizes GGUF files store their tensors in: ggml's type_traits, block_q4_0 and the rest);
 * false for others. */
bool lp_gguf_type_size(int32_t t, uint32_t *block_bytes, uint32_t *block_values);

/* Parses the header in buf (the file's first len bytes; file_size its whole size).
 * 0, -EINVAL (not GGUF, malformed, or a header that does not fit in len: -ENODATA). */
int lp_gguf_parse(const void *buf, size_t len, uint64_t file_size, struct lp_gguf *out);

#endif
