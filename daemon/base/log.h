/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* Logging for the daemon: one line per event on stderr, with a syslog priority prefix that
 * journald understands when stderr is the journal (JOURNAL_STREAM set), otherwise with the
 * time in UTC (a container's log, a file, a terminal). */
#ifndef LLMPROF_LOG_H
#define LLMPROF_LOG_H

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <syslog.h>

/* A bounded line built piece by piece for one log message; what does not fit is cut. */
struct lp_line {
	char buf[1024];
	size_t len;
};

void lp_line_add(struct lp_line *l, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

void lp_log_init(const char *prog);
void lp_log_set_level(int max_priority);
/* Fatal signals (a fault, an abort) are logged before they end the process. */
void lp_log_fatal_signals(void);
void lp_log(int priority, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Logs with errno set to -r (so "%m" names r) and returns r, so that callers can write
 * "return log_error_errno(r, ...)". r is a negative errno. */
int lp_log_errno(int priority, int r, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

#define log_debug(...) lp_log(LOG_DEBUG, __VA_ARGS__)
#define log_info(...) lp_log(LOG_INFO, __VA_ARGS__)
#define log_notice(...) lp_log(LOG_NOTICE, __VA_ARGS__)
#define log_warning(...) lp_log(LOG_WARNING, __VA_ARGS__)
#define log_error(...) lp_log(LOG_ERR, __VA_ARGS__)
#define log_info_errno(r, ...) lp_log_errno(LOG_INFO, (r), __VA_ARGS__)
#define log_warning_errno(r, ...) lp_log_errno(LOG_WARNING, (r), __VA_ARGS__)
#define log_error_errno(r, ...) lp_log_errno(LOG_ERR, (r), __VA_ARGS__)

#endif
