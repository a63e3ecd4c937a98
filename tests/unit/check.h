/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* A minimal assertion harness for the unit tests: count failures, print each one, and
 * end with the "N passed, N failed" line that CI reads. */
#ifndef LLMPROF_CHECK_H
#define LLMPROF_CHECK_H

#include <stdio.h>

static int check_passed, check_failed;

#define CHECK(cond, ...)                                                                   \
	do {                                                                               \
		if (cond) {                                                                \
			check_passed++;                                                    \
		} else {                                                                   \
			check_failed++;                                                    \
			fprintf(stderr, "%s:%d: FAILED: %s: ", __FILE__, __LINE__, #cond); \
			fprintf(stderr, __VA_ARGS__);                                      \
			fputc('\n', stderr);                                               \
		}                                                                          \
	} while (0)

static inline int check_done(void)
{
	printf("%d passed, %d failed\n", check_passed, check_failed);
	return check_failed ? 1 : 0;
}

#endif
