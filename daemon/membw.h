/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* The host's peak memory read bandwidth, measured by llmprofd itself: once, on first need,
 * in a thread of its own, bounded in time and memory, and kept in the state directory for
 * the next start on the same machine. Without a PMU it is what tells a memory-bound decode
 * (weights streamed near this rate) from one that is not. It waits for quiet CPUs: taken
 * under load the figure would be low, and would slow the inference it is to judge. */
#ifndef LLMPROF_MEMBW_H
#define LLMPROF_MEMBW_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

enum lp_membw_state {
	LP_MEMBW_NONE = 0,  /* not measured yet */
	LP_MEMBW_MEASURING, /* a thread measures now */
	LP_MEMBW_DONE,
	LP_MEMBW_FAILED,
	LP_MEMBW_CONTENDED, /* lp_membw_get only: measured while other work ran */
	LP_MEMBW_WAITING,   /* lp_membw_get only: wanted, waiting for quiet CPUs */
};

/* Other work may take this share of the CPUs while the host's bandwidth is measured. */
#define LP_MEMBW_QUIET 0.05
#define LP_MEMBW_RETRY_NS (300ULL * 1000000000ULL)

struct lp_membw {
	pthread_mutex_t lock;
	enum lp_membw_state state;
	double bytes_per_s;
	double measured_at; /* Unix time */
	unsigned threads;
	uint64_t buffer_bytes; /* read by all threads together */
	bool cached;	       /* read from the state directory, not measured by this run */
	bool contended;	       /* other work took more than LP_MEMBW_QUIET of the CPUs */
	double others_share;
	uint64_t attempted_ns;	    /* CLOCK_MONOTONIC of the last measurement's end */
	double tick_busy, tick_all; /* /proc/stat at the last lp_membw_tick */
	char error[128];
	char host[192]; /* what the figure is of: CPU model, CPUs, memory */
	char *dir;	/* the state directory; NULL: none */
	char *cache_path;
	pthread_t thread;
	bool joinable;
	bool wanted; /* a finding needs the figure */
};

/* Reads the cached figure when it is of this machine; never measures. */
void lp_membw_init(struct lp_membw *m, const char *state_dir);
/* Asks for a measurement: lp_membw_tick starts it once the CPUs are quiet. */
void lp_membw_want(struct lp_membw *m);
/* Called every few seconds: measures a wanted figure, or again one taken under load
 * (LP_MEMBW_RETRY_NS after), once the host's CPUs were quiet since the last call. */
void lp_membw_tick(struct lp_membw *m);
/* Starts a measurement unless one is running, replacing the figure when it ends. */
void lp_membw_again(struct lp_membw *m);
/* Adds "state", "bytes_per_s", "measured_at", "cached", "threads", "buffer_bytes" and
 * "host" to o. */
struct cJSON;
void lp_membw_render(struct lp_membw *m, struct cJSON *o);
/* The state and, when DONE, the figure. */
enum lp_membw_state lp_membw_get(struct lp_membw *m, double *bytes_per_s);
void lp_membw_free(struct lp_membw *m);

/* Reads bytes of memory with threads threads, as fast as they can, for at least seconds
 * per round, best of rounds: bytes per second, or a negative -errno. */
double lp_membw_measure(unsigned threads, uint64_t bytes, double seconds, int rounds);

#endif
