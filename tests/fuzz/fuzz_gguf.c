// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* libFuzzer target: bytes as the header of a model file into daemon/formats/gguf.c (models are other
 * users' files, mapped by their processes). Seeds: models of tests/workload/gen_gguf.py
 * (tests/run-all.sh writes them).
 *
 * Invariants beyond the sanitizers': a header that parses accounts for no more bytes than
 * the file has, and a token reads no more than all of its tensors. */
#include <stdint.h>
#include <stdlib.h>

#include "formats/gguf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct lp_gguf g;

	if (lp_gguf_parse(data, size, size, &g) != 0)
		return 0;
	if (g.tensor_bytes > size || g.per_token_bytes > g.tensor_bytes ||
	    g.token_embd_bytes > g.tensor_bytes || g.expert_bytes > g.tensor_bytes)
		abort();
	return 0;
}
