/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* The set of tracked processes: which pids the kernel side collects for, how they were
 * matched, and the final data of those that exited. */
#ifndef LLMPROF_TRACK_H
#define LLMPROF_TRACK_H

#include <linux/types.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "base/config.h"
#include "tracked/identity.h"
#include "llmprof/abi.h"

#define LP_FUTEX_TOP 16

struct lp_futex_view {
	uint64_t uaddr;
	struct lp_futex_val v;
};

/* The futex addresses of one process, the LP_FUTEX_TOP longest-waited first. */
struct lp_futex_top {
	struct lp_futex_view top[LP_FUTEX_TOP];
	size_t ntop;
	uint64_t naddrs; /* distinct addresses seen, listed or not */
};

#define LP_PREEMPT_TOP 8
struct lp_preempt_view {
	uint32_t by_tgid;
	struct lp_preempt_val v;
};
/* Who preempted one process's threads, the LP_PREEMPT_TOP longest-waited-for first. */
struct lp_preempt_top {
	struct lp_preempt_view top[LP_PREEMPT_TOP];
	size_t ntop;
	uint64_t npreemptors; /* distinct preempting processes seen, listed or not */
};

struct lp_packed;
struct lp_eproc; /* ggml.h, which owns it: the tracker frees it through free_eng */

struct lp_requests;

struct lp_target {
	pid_t pid;
	uint64_t starttime; /* /proc/PID/stat field 22: tells a reused pid apart */
	char comm[16];
	char *exe;
	uid_t uid;		   /* effective uid; (uid_t)-1 when unknown */
	const char *matched_by;	   /* "pid", "comm", "exe", "ggml", "torch" or "restored" */
	uint64_t tracked_since_ns; /* CLOCK_MONOTONIC, the clock of bpf_ktime_get_ns() */
	bool exited;
	bool exiting;	       /* adopted from its exec record when /proc no longer showed it */
	uint64_t exited_at_ns; /* CLOCK_MONOTONIC; retention counts from here */
	bool exit_lost;	       /* exited, but its final record was lost: data is gone */
	uint64_t exit_seq;     /* order of exit, for evicting the oldest */
	unsigned
		dead_sweeps; /* sweeps in a row that found it gone (lp_tracker_find_missed_exits) */
	/* The kernel's last word, once exited: whole until the exit's hooks ran, then packed
	 * (packed.h); read it with lp_target_final(). */
	struct lp_proc_stats *final;
	struct lp_packed *final_packed;
	struct lp_futex_top *final_futex;
	struct lp_preempt_top *final_preempt;
	struct lp_eproc *eng; /* its engine state: set once it is seen to map an engine's objects */
	/* The engine whose step found it (its first forward: torch), + 1; 0: none */
	uint8_t found_by;
	/* Its requests, from its first decode's batch on (engine/requests.h, which frees them
	 * through free_requests); NULL before. Its decodes may come before ggml is set. */
	struct lp_requests *requests;
	struct lp_identity ident; /* command line, cgroup, model (identity.h) */
	/* Totals from before a restart of the daemon (read from the state file), added to
	 * what the kernel counts now; NULL when none. */
	struct lp_proc_stats *base;
};

struct lp_tracker {
	const struct lp_config *cfg;
	int procs_fd;
	int futex_fd;
	int threads_fd;
	int preempt_fd; /* -1: no preemptor map */
	int hot_fd;	/* procs_hot, each CPU's part of a process's figures (hot.h); -1: none */
	/* A byte per tgid, set before a process enters procs (lp.bpf.h's tgid_marks); NULL
	 * in tests without BPF */
	volatile uint8_t *tgid_marks;
	size_t ntgid_marks;
	/* A byte per tid below ntgid_marks: its next switch-in is taken in full (lp.bpf.h's
	 * tid_open); NULL where stretches are not sampled */
	volatile uint8_t *tid_open;
	struct lp_target **v;
	size_t n, cap;
	size_t nexited;
	uint64_t exit_seq;
	uint64_t procs_full;	   /* processes that matched but found "procs" full */
	uint64_t exited_evicted;   /* exited processes forgotten to stay within max_processes */
	uint64_t exited_untracked; /* found, but exited before they could be tracked */
	/* Refused for want of room in the procs map: tracked once room appears. */
	struct lp_waiting {
		pid_t pid;
		uint64_t starttime;
		const char *matched_by;
	} * waiting;
	size_t nwaiting;
	uint64_t
		exits_recovered; /* exits the hook missed, found by lp_tracker_find_missed_exits() */
	/* Exited processes whose futex addresses are still in the kernel map, moved into
	 * their final records by lp_tracker_take_exited_futexes() in one pass for all of them. */
	struct lp_harvest {
		__u32 tgid;
		uint64_t exit_seq;
	} * harvest;
	size_t nharvest, harvest_cap;
	void (*on_exit)(void *userdata, struct lp_target *t);
	/* Called before a process enters procs (its collectors attached on demand) */
	void (*before_insert)(void *userdata);
	void (*free_eng)(struct lp_eproc *gp);	       /* set by whoever fills target->eng */
	void (*free_requests)(struct lp_requests *rq); /* ... and target->requests */
	void *userdata;
	size_t freed_since_trim; /* bytes packing freed since the heap was last trimmed */
};

/* CLOCK_MONOTONIC in nanoseconds: the clock of bpf_ktime_get_ns(). */
uint64_t lp_now_ns(void);

void lp_tracker_init(struct lp_tracker *tr, const struct lp_config *cfg, int procs_fd, int futex_fd,
		     int threads_fd);
void lp_tracker_free(struct lp_tracker *tr);

/* Tracks the processes refused for want of room, now that there may be some: those still
 * alive (same start time) are added, in the order they were refused, while room lasts; they
 * land at the end of v[]. Returns how many. */
int lp_tracker_retry(struct lp_tracker *tr);

/* Whether the kernel's procs map holds a process: its own entries (--comm at exec) too. */
bool lp_tracker_tracking(const struct lp_tracker *tr);

/* Starts collecting for pid. 0, -EALREADY when tracked, -ESRCH when gone, -ENOSPC when
 * the kernel map is full (counted), other -errno from the map. */
int lp_tracker_add(struct lp_tracker *tr, pid_t pid, const char *matched_by);

/* Tracks every running process that matches --comm/--exe. Returns how many were added. */
int lp_tracker_scan(struct lp_tracker *tr);

/* The ring buffer callback: exec records are matched, exit records stored. Call
 * lp_tracker_take_exited_futexes() (sweep.h) after a drain. */
int lp_tracker_event(void *tracker, void *data, size_t size);

/* Forgets exited targets that exited more than retention_ns ago. Returns how many. */
size_t lp_tracker_expire(struct lp_tracker *tr, uint64_t now_ns, uint64_t retention_ns);

/* Adds a target restored from the state file (exited, or live with base totals); takes
 * ownership of t. */
int lp_tracker_restore(struct lp_tracker *tr, struct lp_target *t);

/* An exited target's last totals into out: false when there are none (lost). */
bool lp_target_final(const struct lp_target *t, struct lp_proc_stats *out);

/* The newest target with this pid, or NULL. */
struct lp_target *lp_tracker_find(struct lp_tracker *tr, pid_t pid);

/* For sweep.c. A target's exit: its time, its place among the exits (the oldest exited are
 * forgotten first past --max-processes), its futex words queued for the harvest. */
void lp_tracker_mark_exited(struct lp_tracker *tr, struct lp_target *t);
/* Clears the mark of a dead process whose procs entry the daemon deleted. */
void lp_tracker_unmark(struct lp_tracker *tr, __u32 tgid);

#endif
