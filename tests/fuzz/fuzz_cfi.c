// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* libFuzzer target: bytes as an .eh_frame section into daemon/formats/cfi.c (the file is another
 * user's). Seeds: the .eh_frame of the fixtures and of libc (tests/run-all.sh extracts
 * them with objcopy).
 *
 * Invariants checked on every input, beyond the sanitizers' own: rows come sorted by
 * address, no row repeats the rule of the one before, and lp_cfi_find returns the row
 * holding each row's address. */
#include <stdint.h>
#include <stdlib.h>

#include "formats/cfi.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct lp_cfi c;

	if (lp_cfi_parse(data, size, 0x401000, &c) != 0)
		return 0;
	for (size_t i = 0; i < c.n; i++) {
		if (i && (c.rows[i].addr <= c.rows[i - 1].addr ||
			  lp_cfi_same_rule(&c.rows[i], &c.rows[i - 1])))
			abort();
		if (lp_cfi_find(&c, c.rows[i].addr) != &c.rows[i])
			abort();
	}
	lp_cfi_free(&c);
	return 0;
}
