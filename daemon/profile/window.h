/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* A profile window: what it asks (seconds, process, phase, format, who), the distinct
 * stacks it took with their counts and what their samples were, the processes it saw with
 * their mappings. Written by profiler.c, read by render.c. */
#ifndef LLMPROF_PROFILE_WINDOW_H
#define LLMPROF_PROFILE_WINDOW_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/procfs.h"
#include "base/stream.h"
#include "llmprof/protocol.h"
#include "tracked/track.h"

#define LP_PROFILE_MAX_WINDOWS 16
#define LP_PROFILE_DRAIN_MS 100

enum lp_profile_format {
	LP_PROFILE_PPROF,  /* gzip'ed profile.proto */
	LP_PROFILE_FOLDED, /* stackcollapse's lines */
};

struct lp_profile_query {
	double seconds;
	pid_t pid;     /* 0: every tracked process the asker may see */
	int phase;     /* -1: every phase; else enum lp_phase */
	bool by_group; /* folded: each stack rooted at its op group */
	enum lp_profile_format format;
	/* who may see a process: the asker's rule (serving/answer.h), with its argument */
	bool (*visible)(const void *who, const struct lp_target *t);
	const void *who;
	size_t who_size; /* who is copied, this many bytes */
	/* the asker's share of the windows: one who is not privileged may hold max_per_uid
	 * of them, and all such together max_unprivileged (0: no bound) */
	bool privileged;
	uid_t uid;
	unsigned max_per_uid, max_unprivileged;
};

/* One distinct stack of a window, with what its samples were. */
struct lp_profile_stack {
	uint64_t hash;
	uint64_t count;
	uint32_t tgid;
	int16_t op;
	uint8_t region, phase;
	uint8_t nkernel, nuser;
	uint64_t ip[]; /* kernel frames (leaf first), then user frames (leaf first) */
};

/* A process as a window saw it: its executable mappings, read when its first sample came
 * (and again at the end while it lives: a late dlopen). */
struct lp_profile_proc {
	pid_t pid;
	struct lp_proc_mapping *maps;
	size_t nmaps;
};

struct lp_profile_window {
	struct lp_profile_query q;
	void *who;		       /* the asker, copied */
	uint64_t start_ns, end_ns;     /* CLOCK_MONOTONIC: the samples it takes */
	uint64_t start_real_ns;	       /* CLOCK_REALTIME at its start (time_nanos) */
	struct lp_stream *out;	       /* the answer, written at the end */
	struct lp_profile_stack **tab; /* open addressing by hash */
	size_t cap, n;
	struct lp_profile_proc *procs;
	size_t nprocs;
	uint64_t samples;			  /* taken */
	uint64_t lost_table;			  /* new stacks past the memory bound */
	uint64_t complete, fp, truncated, kernel; /* samples so (abi.h's lp_stack_flags) */
	uint64_t bytes;				  /* its stacks' memory */
	uint64_t lost_ring0; /* the kernel's count of stacks lost, at its start */
	/* The samples the kernel did not take (sample.bpf.c), at its start: each tracked
	 * process's (a process tracked later counts from 0), and the host's not attributed. */
	struct lp_profile_skip {
		pid_t pid;
		uint64_t n;
	} * skip0;
	size_t nskip0;
	uint64_t skipped_unknown0;
};

#endif
