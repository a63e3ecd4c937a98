/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* Persistence across restarts: at exit the totals of every tracked process go to
 * STATE_DIR/state.json; at start they come back, as exited records or, for processes that
 * still run (same pid, start time and boot), as a base the new kernel counts add to. */
#ifndef LLMPROF_STATE_H
#define LLMPROF_STATE_H

#include <cjson/cJSON.h>

#include "report/report.h"
#include "tracked/track.h"

#define LP_STATE_FILE "state.json"
#define LP_STATE_FORMAT 1
/* Limits on what is read back: no saved value above 2^62 (146 years in ns; the kernel's
 * counters do not get there), pids up to the kernel's PID_MAX_LIMIT, and a file no larger
 * than twice --max-processes records (running and exited) of a generous size each. */
#define LP_STATE_MAX_VALUE (1ULL << 62)
#define LP_PID_MAX 4194304
#define LP_STATE_BASE_BYTES (1U << 20)
#define LP_STATE_RECORD_BYTES (32U << 10)

size_t lp_state_max_bytes(uint32_t max_processes);

/* The report's processes as a state document (pure). boot_id may be NULL. */
cJSON *lp_state_render(const struct lp_report *r, const char *boot_id, double realtime_s);

/* Writes the document to dir/state.json atomically (temporary file, fsync, rename). */
int lp_state_write(const char *dir, const cJSON *doc);
/* Writes doc to dir/name at once (a temporary file renamed over it), mode 0600. */
int lp_state_write_file(const char *dir, const char *name, const cJSON *doc);

/* Reads dir/state.json into the tracker. Returns how many processes came back, 0 when there
 * is no file, -errno on a file that cannot be read (logged; the daemon starts empty). */
int lp_state_restore(const char *dir, struct lp_tracker *tr, const char *boot_id,
		     double realtime_s);

/* The boot's id (/proc/sys/kernel/random/boot_id) into buf of at least 40 bytes. */
int lp_boot_id(char *buf, size_t size);

#endif
