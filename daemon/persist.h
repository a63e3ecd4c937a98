/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* The totals kept across restarts (report/state.h): saved at SIGTERM and every
 * --checkpoint-interval, so that a crash loses at most that much; the state directory
 * checked at start, so that one that cannot take them is found now. */
#ifndef LLMPROF_PERSIST_H
#define LLMPROF_PERSIST_H

#include "daemon.h"

/* Saves the totals of every process; at_exit says which loss a failure means. 0 or
 * -errno (logged, counted in the status). */
int lp_persist_save(struct daemon *d, bool at_exit);

/* (Re)arms the checkpoint timer with the configured interval; 0 stops it. */
void lp_persist_arm(struct daemon *d);

/* The checkpoint timer's callback (arg: the daemon). */
void lp_persist_on_checkpoint(evutil_socket_t fd, short what, void *arg);

/* dir is (or becomes) a directory only llmprofd's user can write: 0 or -errno (logged). */
int lp_persist_check_dir(const char *dir);

#endif
