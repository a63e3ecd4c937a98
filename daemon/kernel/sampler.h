/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* cpu-clock sampling of one tracked process, one perf event per thread. */
#ifndef LLMPROF_SAMPLER_H
#define LLMPROF_SAMPLER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct bpf_link;
struct bpf_program;

struct lp_sampler {
	struct bpf_link **links; /* one per thread that was there at the start */
	size_t n;
	size_t opened;	     /* events ever opened: the threads there at each start */
	uint64_t started_ns; /* CLOCK_MONOTONIC when sampling first started */
	int error;	     /* -errno of a thread that could not be sampled, else 0 */
	bool inherit_thread;
};

/* Opens a cpu-clock event of period 1/hz on every thread of pid, each running prog and
 * inherited by the threads it creates, as `perf record -p` samples. Threads that exit
 * meanwhile are skipped. Returns the number of events (0 when hz is 0), or -errno (logged;
 * nothing stays open). */
int lp_sampler_start(struct lp_sampler *s, struct bpf_program *prog, uint32_t hz, pid_t pid);

/* Closes the events; the kernel drops the inherited ones with them. */
void lp_sampler_stop(struct lp_sampler *s);

/* Whether this kernel lets the sampling program run on a thread's cpu-clock event: tried
 * on the calling thread. Returns 0 or -errno. */
int lp_sampler_probe(struct bpf_program *prog, uint32_t hz);

#endif
