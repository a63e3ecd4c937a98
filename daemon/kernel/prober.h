/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* The kernel calls that can wait, off the event loop. The kernel waits for an RCU grace
 * period for each uprobe it takes off (perf_trace_event_unreg -> synchronize_srcu), for each
 * update of an array of maps (maybe_wait_bpf_programs -> synchronize_rcu) and for each
 * syscall tracepoint program it attaches or detaches: tens of milliseconds on a busy host,
 * and 20 s and more on one whose RCU kthread starves (PREEMPT_RCU without RCU_BOOST). A
 * window's hundreds of probes held the loop, and with it every API answer and scrape, for up
 * to 34 s; a new engine's objects, read and published, for 100 ms each. Threads of their own
 * do that work, one attaching (and reading objects) and one detaching (a window's probes do
 * not wait behind the last window's going off); the loop hands it over and hears back
 * through an eventfd. Without a running prober (--check, startup's first scan, the tests of
 * one room), each call does its work at once, as before.
 *
 * Fault injection, for the tests of a host whose RCU starves (tests/e2e/test_loop.py):
 * with LLMPROF_FAULT_KERNEL_DELAY_MS=N in its environment, each job waits N ms first. */
#ifndef LLMPROF_PROBER_H
#define LLMPROF_PROBER_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct bpf_program;
struct lp_probes;
struct event;
struct event_base;

/* One uprobe to attach: prog at offset in the file at path (copied), for pid. */
struct lp_probe_spec {
	struct bpf_program *prog;
	bool retprobe;
	pid_t pid;
	size_t offset;
	char *path;
};

/* Called on the loop with what an attach made: the probes (the callee takes them over by
 * copying and emptying *probes, or leaves them to be taken off), 0 or the first error
 * (then probes holds what was attached before it), and how long it took. */
typedef void (*lp_probe_done_fn)(void *ctx, uint64_t cookie, struct lp_probes *probes, int err,
				 uint64_t ns);

struct lp_probe_job;
struct lp_prober;

/* A queue and the thread that works it: attaches, or releases. */
struct lp_probe_lane {
	struct lp_prober *p;
	pthread_t thread;
	pthread_cond_t wake;
	struct lp_probe_job *todo, **todo_tail;
	struct lp_probe_job *current; /* in progress (owned by the thread) */
	uint64_t current_since_ns;
	size_t queued;
	bool started, busy;
};

struct lp_prober {
	pthread_mutex_t lock;
	struct lp_probe_lane lane[2]; /* LP_LANE_ATTACH, LP_LANE_RELEASE */
	struct lp_probe_job *done;
	int efd;
	struct event *ev;
	bool running, stopping;
	unsigned delay_ms;	   /* LLMPROF_FAULT_KERNEL_DELAY_MS */
	uint64_t jobs, longest_ns; /* under lock */
	char longest_what[64];
};

/* A call's steps (lp_prober_call). */
typedef void (*lp_call_fn)(void *ctx);

/* What is on its way, for the status: each lane's job in progress and its queue. */
struct lp_prober_lane_status {
	char what[64];	    /* the job in progress, "" for none */
	uint64_t since_ns;  /* when it began (CLOCK_MONOTONIC) */
	size_t queued;	    /* jobs behind it */
	uint64_t oldest_ns; /* when the oldest of those was queued */
};
struct lp_prober_status {
	bool running;			      /* false: every call runs on the loop */
	struct lp_prober_lane_status lane[2]; /* attach (and read), release */
	uint64_t jobs;			      /* done since the start */
	uint64_t longest_ns;		      /* the longest of them */
	char longest_what[64];
};

/* Starts the threads. Returns 0 or a negative errno (the calls then work at once). */
int lp_prober_start(struct lp_prober *p, struct event_base *base);
/* Ends the threads: links queued to be taken off are, attaches not yet made are dropped,
 * and links made for callbacks not yet run are taken off. */
void lp_prober_stop(struct lp_prober *p);

/* Spec array specs[n] to attach (taken over, freed here); done runs on the loop (at once
 * without a running prober). Returns 0 or -ENOMEM (specs freed, done not called). */
int lp_prober_attach(struct lp_prober *p, struct lp_probe_spec *specs, size_t n,
		     lp_probe_done_fn done, void *ctx, uint64_t cookie);
/* Takes the probes off (taken over, *probes emptied). With what (a label, copied), how
 * long that took is logged. */
void lp_prober_release(struct lp_prober *p, struct lp_probes *probes, const char *what);
void lp_probe_specs_free(struct lp_probe_spec *specs, size_t n);

/* Any work that may wait for the kernel: work(ctx) on the attach lane's thread (release:
 * on the release lane's, which still runs while the prober stops: for what frees the
 * kernel's resources), then fin(ctx) on the loop, which owns ctx from then on; drop(ctx)
 * frees it where fin will not run (fin NULL, or the prober stopped first). work must touch
 * nothing the loop does without a lock. what (copied) names it in the status. Without a
 * running prober, work and fin run before the call returns. Returns 0 or -ENOMEM (drop
 * called). */
int lp_prober_call(struct lp_prober *p, const char *what, bool release, lp_call_fn work,
		   lp_call_fn fin, lp_call_fn drop, void *ctx);

/* Whether calls go to the threads (else they run at once). */
static inline bool lp_prober_async(const struct lp_prober *p)
{
	return p && p->running;
}

void lp_prober_get_status(struct lp_prober *p, struct lp_prober_status *out);

#endif
