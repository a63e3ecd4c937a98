/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* Uprobes attached and detached off the event loop. The kernel waits for an RCU grace
 * period for each uprobe it takes off (perf_trace_event_unreg -> synchronize_srcu), tens of
 * milliseconds on a busy host: a window's hundreds of probes held the loop, and with it every
 * API answer and scrape, for up to 34 s. Threads of their own do that work, one attaching
 * and one detaching (a window's probes do not wait behind the last window's going off); the
 * loop hands it over and hears back through an eventfd. Without a running prober (--once, --check, the
 * tests of one room), each call does its work at once, as before. */
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
	bool started, busy;
};

struct lp_prober {
	pthread_mutex_t lock;
	struct lp_probe_lane lane[2]; /* LP_LANE_ATTACH, LP_LANE_RELEASE */
	struct lp_probe_job *done;
	int efd;
	struct event *ev;
	bool running, stopping;
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

#endif
