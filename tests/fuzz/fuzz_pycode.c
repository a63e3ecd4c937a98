// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* libFuzzer target: bytes as a CPython code object's location table and its file's name into
 * daemon/formats/pycode.c (both read from other users' processes). The first four bytes are
 * the instruction's offset.
 *
 * Invariants beyond the sanitizers': a line is never below the first line less the table's
 * length (each entry moves it by a bounded step), and a module name is no longer than its
 * file's and holds no '/'. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "formats/pycode.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char file[256], mod[256];
	int32_t lasti = 0;
	size_t n;
	int line;

	if (size < 4)
		return 0;
	memcpy(&lasti, data, 4);
	line = lp_py_line(data + 4, size - 4, 1000, lasti);
	(void)line;
	n = size - 4 < sizeof(file) - 1 ? size - 4 : sizeof(file) - 1;
	memcpy(file, data + 4, n);
	file[n] = '\0';
	lp_py_module(file, mod, sizeof(mod));
	if (strlen(mod) > strlen(file) || strchr(mod, '/'))
		abort();
	return 0;
}
