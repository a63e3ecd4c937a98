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

/* What lp_membw_get says of the figure in use. */
enum lp_membw_state {
	LP_MEMBW_NONE = 0,  /* not measured yet, nor wanted */
	LP_MEMBW_WAITING,   /* wanted: waiting for quiet CPUs */
	LP_MEMBW_MEASURING, /* a first measurement runs */
	LP_MEMBW_DONE,	    /* measured on quiet CPUs */
	LP_MEMBW_CONTENDED, /* only measured while other work ran: a lower bound */
	LP_MEMBW_FAILED,
};

/* Other work may take this share of the CPUs while the host's bandwidth is measured. */
#define LP_MEMBW_QUIET 0.05
#define LP_MEMBW_RETRY_NS (300ULL * 1000000000ULL)
/* ... and must have been quiet for this long before it measures by itself. */
#define LP_MEMBW_QUIET_NS (30ULL * 1000000000ULL)

struct lp_membw_figure {
	double bytes_per_s;
	double measured_at;  /* Unix time */
	double others_share; /* CPU time other work took meanwhile, of all CPUs' */
	bool contended;	     /* others_share above LP_MEMBW_QUIET */
};

struct lp_membw {
	pthread_mutex_t lock;
	bool have;   /* use: the figure in use (a contended one only while there is no other) */
	bool cached; /* use was read from the state directory */
	struct lp_membw_figure use;
	bool tried; /* last: the latest measurement's, kept or not */
	struct lp_membw_figure last;
	bool running; /* a measurement thread runs */
	bool failed;
	bool wanted; /* a finding needs the figure */
	unsigned threads;
	uint64_t buffer_bytes; /* read by all threads together */
	uint64_t attempted_ns; /* CLOCK_MONOTONIC of the last measurement's end */
	char error[128];
	char host[192]; /* what the figure is of: CPU model, CPUs, memory */
	char *dir;	/* the state directory; NULL: none */
	char *cache_path;
	double tick_busy, tick_all; /* /proc/stat at the last lp_membw_tick */
	uint64_t quiet_since_ns;    /* CLOCK_MONOTONIC; 0: busy at the last tick */
	pthread_t thread;
	bool joinable;
};

/* Reads the cached figure when it is of this machine; never measures. */
void lp_membw_init(struct lp_membw *m, const char *state_dir);
/* Asks for a measurement: lp_membw_tick starts it once the CPUs are quiet. */
void lp_membw_want(struct lp_membw *m);
/* Called every few seconds: measures a wanted figure, or again one taken under load
 * (LP_MEMBW_RETRY_NS after), once the host's CPUs were quiet for LP_MEMBW_QUIET_NS. */
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
