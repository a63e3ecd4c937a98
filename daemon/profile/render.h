/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* A profile window's stacks named and written: pprof's profile.proto (gzip'ed, as Go's
 * net/http/pprof answers: ids from 1 without gaps, string 0 empty, every location a line
 * with a function), or folded stacks (stackcollapse-perf.pl's lines: "comm;root;...;leaf
 * count", ';' in a name written ':', kernel frames ending in "_[k]"). Both from one naming:
 * each user frame by its object's symbols (symbols.h), demangled as perf prints them, else
 * "object+0xoffset"; each kernel frame by kallsyms. Every name another user chose is
 * escaped once (escape.h), so the answer is UTF-8. */
#ifndef LLMPROF_PROFILE_RENDER_H
#define LLMPROF_PROFILE_RENDER_H

#include <stddef.h>
#include <stdint.h>

#include "profile/pyloc.h"
#include "profile/symbols.h"
#include "profile/window.h"

/* A stack's frames at most: kernel, native user and Python ones */
#define LP_PROFILE_FRAMES_MAX (LP_STACK_KERNEL_MAX + LP_STACK_USER_MAX + LP_STACK_PY_MAX)

struct lp_profile_render {
	const struct lp_profile_window *w;
	struct lp_symbols *syms;
	const struct lp_pylocs *py; /* the Python frames' locations (pyloc.h) */
	struct lp_tracker *tr;
	uint32_t hz;
	uint64_t duration_ns; /* the window as it was */
	uint64_t lost_ring;   /* samples the ring buffer had no room for in it */
	/* samples the kernel did not take while the window's processes ran, and those on
	 * any CPU whose process is not known (sample.bpf.c) */
	uint64_t skipped, skipped_unknown;
	uint32_t max_mib; /* --profile-memory-mib, for the comment on losses */
};

/* The answer's body (malloc'ed) into *out, *len. 0 or -ENOMEM. */
int lp_profile_render(const struct lp_profile_render *in, uint8_t **out, size_t *len);

/* The op group key of a sample (engine/ops.h's: "matmul", ..., "sync", "outside_ops"). */
const char *lp_profile_group(const struct lp_target *t, int op, int region);

#endif
