/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* Profiles of the always-on samples, as Go's net/http/pprof answers them: a window opens
 * when asked (seconds, a process or all the peer may see, a phase), gathers the call stacks
 * the sampler sends while it is open (bpf/sample.bpf.c, the "stacks" ring buffer, read here
 * every LP_PROFILE_DRAIN_MS), and at its end is named (symbols.h) and answered as pprof or
 * folded stacks (render.h) on the stream its request waits on. Several windows may be open
 * at once, each with its own counts: none takes another's samples. While none is open the
 * sampler sends no stacks.
 *
 * Bounded: at most LP_PROFILE_MAX_WINDOWS windows, and the distinct stacks all of them hold
 * take at most --profile-memory-mib; a sample whose stack is new past that is counted as
 * lost in its window, which says so. */
#ifndef LLMPROF_PROFILER_H
#define LLMPROF_PROFILER_H

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/stream.h"
#include "engine/engine.h"
#include "kernel/core.h"
#include "profile/pyloc.h"
#include "profile/symbols.h"
#include "profile/window.h"
#include "tracked/track.h"

struct lp_profiler {
	struct lp_core *core;
	struct lp_tracker *tr;
	struct lp_engines *g;
	struct ring_buffer *rb;
	struct lp_profile_window *w[LP_PROFILE_MAX_WINDOWS];
	size_t nw;
	struct lp_symbols syms;
	uint64_t max_bytes; /* the stacks all windows hold */
	uint64_t bytes;
	uint32_t hz;
	uint64_t windows_done, windows_cancelled, samples_read, lost_table;
	/* Python frames: the locations met, a stack being merged with its native frames,
	 * samples with Python frames and frames no code object named */
	struct lp_pylocs py;
	struct lp_stack_rec merged;
	uint64_t py_samples, py_unnamed;
	int error; /* why there are no profiles (no sampler, no ring buffer): -errno */
};

/* max_mib: --profile-memory-mib. Profiles need the sampler; without it every start says
 * so. */
int lp_profiler_init(struct lp_profiler *p, struct lp_core *core, struct lp_tracker *tr,
		     struct lp_engines *g, uint32_t sample_hz, uint32_t max_mib);
void lp_profiler_free(struct lp_profiler *p);

/* Opens a window for q; *out is the answer's stream (deferred: written at the end).
 * -EINVAL: bad query; -ESRCH: q->pid is not tracked (or not the asker's to see); -EBUSY:
 * LP_PROFILE_MAX_WINDOWS are open, or the asker's share; -ENOTSUP: no sampling (p->error
 * says why). */
int lp_profile_start(struct lp_profiler *p, const struct lp_profile_query *q,
		     struct lp_stream **out);

/* Every LP_PROFILE_DRAIN_MS while windows are open: reads the ring buffer, ends the windows
 * whose time is up (answering them) and those whose asker went away. */
void lp_profiler_tick(struct lp_profiler *p);
bool lp_profiler_running(const struct lp_profiler *p);

/* {"windows_open", "windows_done", "windows_cancelled", "samples_read", "lost_ring",
 *  "lost_table", "memory_bytes", "memory_limit_bytes", "symbol_objects", "symbol_bytes"} */
void lp_profiler_status(const struct lp_profiler *p, cJSON *o);

#endif
