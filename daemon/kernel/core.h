/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* Loading and attaching the core BPF object: variant choice, map sizes, per-CPU perf events. */
#ifndef LLMPROF_CORE_H
#define LLMPROF_CORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/config.h"
#include "kernel/feature.h"

struct core_bpf;
struct bpf_link;
struct lp_op_samples;
struct lp_prober;

struct lp_core {
	struct core_bpf *skel;
	struct bpf_link **links;
	size_t nlinks;
	const char *sched_variant; /* "tp_btf" or "raw_tp" */
	bool wakeups;		   /* sched_wakeup programs attached: no sched_info */
	/* a busy thread's off-CPU stretches taken 1 in this many (1: all) */
	uint32_t stretch_sample;
	/* "scheduler", "syscall tracepoints", "raw_syscalls" or NULL (off) */
	const char *futex_source;
	bool futex_raw;	      /* the futex source is raw_syscalls */
	bool futex_results;   /* the source sees each wait's result: timeouts, EAGAIN */
	bool futex_on_demand; /* attached only while a process is tracked */
	bool futex_attached;
	/* An attach or detach on its way (prober.h: each waits for the kernel); a process
	 * wanted them meanwhile (attach once a detach is done). */
	bool futex_busy, futex_busy_on, futex_rewant;
	uint64_t futex_idle_since_ns; /* attached, and no process tracked since; 0 otherwise */
	/* Where the futex programs' attach and detach run (NULL: at once), and who hears that
	 * an attach asked for by lp_core_futex_want() is done, on the loop. */
	struct lp_prober *prober;
	void (*futex_ready)(void *arg);
	void *futex_ready_arg;
	bool faults; /* page fault perf events attached */
	int nfault_cpus;
	/* "mmap lock tracepoint", "syscall tracepoint", "raw_syscalls" or NULL: no dlopen */
	const char *mmap_source;
	bool uprobe_multi;  /* precise programs loaded for multi-uprobe links */
	uint32_t sample_hz; /* 0: no sampling */
	/* The PID namespace of the pids the daemon reads (its /proc's), by inode; 0: the
	 * host's. The programs keep pids as that namespace numbers them. */
	uint32_t pidns_ino;
	bool sample_per_thread; /* each LLM process's threads, else every CPU */
	int nsample_cpus;
	int *sample_fds;  /* the per-CPU sampling events, nsample_cpus of them */
	int *sample_cpus; /* the CPU of each */
	uint64_t rng;	  /* their rates' random state */
	/* The tgid_marks map, mapped: a byte per tgid below ntgid_marks (lp.bpf.h) */
	volatile uint8_t *tgid_marks;
	size_t ntgid_marks;
	/* The tid_open map, mapped where stretches are sampled (a byte per tid below
	 * ntgid_marks); else NULL */
	volatile uint8_t *tid_open;
};

/* Opens, sizes, loads and attaches. Scheduler and lifecycle programs are required; futex
 * and page-fault collection degrade with a logged reason. Returns 0 or -errno (logged). */
int lp_core_load(struct lp_core *c, const struct lp_config *cfg, const struct lp_features *f);

/* How long the futex programs stay attached once no process is tracked: a process that
 * is found again soon (a restarted server) does not attach them anew each time. */
#define LP_FUTEX_LINGER_NS (10ULL * 1000000000ULL)

/* A process is about to be tracked: whether the futex programs are on, or never will be
 * (not on demand, or their attach failed), so that none of its waits is missed once it
 * enters procs. If not, their attach is on its way (on the prober's thread) and
 * futex_ready is called once it is done: the caller tracks the process then. */
bool lp_core_futex_want(struct lp_core *c);

/* Called periodically with whether any process is tracked: attaches the futex programs if
 * one is (a process the daemon did not insert itself), detaches them once none has been for
 * LP_FUTEX_LINGER_NS. */
void lp_core_futex_tick(struct lp_core *c, bool tracking, uint64_t now_ns);

/* Restarts each CPU's sampling timer at a rate drawn at random near the configured one,
 * if tracking (a process is tracked; with none, how the timers fire matters to no share,
 * and each CPU is spared the call); returns when to do it again, in microseconds (50 to
 * 150 ms). A timer that fires at a fixed period aliases with work that repeats at a
 * steady pace, as a decode runs one graph per token: four such samplers of one OpenMP
 * decode read its sync share 0.249-0.338, restarted at random 0.254-0.262 (README,
 * "Which sampler"). */
unsigned lp_core_sample_rephase(struct lp_core *c, bool tracking);

/* The runs the kernel skipped of the loaded programs, as it counts them (bpf_prog_info's
 * recursion_misses: a tracepoint program that fired inside itself, or inside another of
 * the same kind; perf_event programs skipped so are counted nowhere: sample.bpf.c counts
 * the sampler's), summed; *worst names the program with most, NULL for none. */
uint64_t lp_core_recursion_misses(const struct lp_core *c, const char **worst);

/* Detaches and frees everything; accepts a zeroed or partly loaded lp_core. */
void lp_core_destroy(struct lp_core *c);

/* At least the maps the BPF object makes (24 today). */
#define LP_MAPS_MAX 64
struct lp_map_usage {
	const char *name;
	uint32_t max_entries;
	uint32_t value_size;
	uint64_t memlock; /* bytes the kernel charges for the map */
	uint64_t entries; /* entries in use; 0 for maps that are not hashes */
};

/* The kernel's op counts of process pid into *out; 0, or -errno (-ENOENT: none). */
int lp_core_op_samples(const struct lp_core *c, pid_t pid, struct lp_op_samples *out);

/* Fills up to n entries describing the core maps; returns how many. */
size_t lp_core_map_usage(const struct lp_core *c, struct lp_map_usage *out, size_t n);

#endif
