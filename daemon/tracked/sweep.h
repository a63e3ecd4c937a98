/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* The kernel's maps kept in step with the tracked processes' lives: futex words and
 * preemptors read and ranked, moved into a process's final record when it exits
 * (take_exited_futexes), exits the hook missed (find_missed_exits) or whose record the
 * ring buffer lost (find_lost_exits) found, entries of no tracked process collected,
 * counters reset. */
#ifndef LLMPROF_SWEEP_H
#define LLMPROF_SWEEP_H

#include "tracked/track.h"

/* The preemptors of tgid from the "preemptors" map into top; with take, their entries are
 * deleted (the process exited or was reset). 0 or -errno. */
int lp_preempt_read(int fd, uint32_t tgid, bool take, struct lp_preempt_top *top);
/* Counts one more preemptor into top, which keeps the LP_PREEMPT_TOP longest waited for. */
void lp_preempt_top_add(struct lp_preempt_top *top, uint32_t by_tgid,
			const struct lp_preempt_val *v);

/* Marks exited every tracked process that /proc no longer shows alive but whose kernel
 * entry is still there, with that entry as its final record. Returns how many. */
int lp_tracker_find_missed_exits(struct lp_tracker *tr);

/* Moves the futex addresses of the processes that exited since the last call out of the
 * kernel map into their final records: one pass over the map for all of them, however many
 * exited (a pass per exit costs the map's size each: a burst of exits would outrun the
 * daemon). */
void lp_tracker_take_exited_futexes(struct lp_tracker *tr);

/* Marks live targets whose kernel entry is gone as exited with their data lost: the exit
 * record did not reach us. Call after draining the ring buffer. pid 0 checks every target
 * (one map lookup each), another pid only its own. Returns how many. */
int lp_tracker_find_lost_exits(struct lp_tracker *tr, pid_t pid);

/* Zeroes a target's counters and histograms, in the kernel and in user space. */
int lp_tracker_reset(struct lp_tracker *tr, struct lp_target *t);

/* Futex addresses gathered from the map, before they are ranked into an lp_futex_top. */
struct lp_futex_list {
	struct lp_futex_view *v;
	size_t n, cap;
};

int lp_futex_list_push(struct lp_futex_list *l, uint64_t uaddr, const struct lp_futex_val *val);

/* Ranks the list by wait time into top (the LP_FUTEX_TOP longest) and frees the list. */
void lp_futex_list_top(struct lp_futex_list *l, struct lp_futex_top *top);

#endif
