/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* Persistence across restarts: at exit the totals of every tracked process go to
 * STATE_DIR/state.json; at start they come back, as exited records or, for processes that
 * still run (same pid, start time and boot), as a base the new kernel counts add to. */
#ifndef LLMPROF_STATE_H
#define LLMPROF_STATE_H

#include <cjson/cJSON.h>

#include "snapshot.h"
#include "track.h"

#define LP_STATE_FILE "state.json"
#define LP_STATE_FORMAT 1

/* The report's processes as a state document (pure). boot_id may be NULL. */
cJSON *lp_state_render(const struct lp_report *r, const char *boot_id, double realtime_s);

/* Writes the document to dir/state.json atomically (temporary file, fsync, rename). */
int lp_state_write(const char *dir, const cJSON *doc);

/* Reads dir/state.json into the tracker. Returns how many processes came back, 0 when there
 * is no file, -errno on a file that cannot be read (logged; the daemon starts empty). */
int lp_state_restore(const char *dir, struct lp_tracker *tr, const char *boot_id,
		     double realtime_s);

/* The boot's id (/proc/sys/kernel/random/boot_id) into buf of at least 40 bytes. */
int lp_boot_id(char *buf, size_t size);

#endif
