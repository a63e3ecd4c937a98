// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* Logging to stderr, with journald priority prefixes when stderr is the journal. */
#include "log.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "escape.h"

static const char *log_prog = "llmprofd";
static int log_max = LOG_INFO;
static bool log_journal;

void lp_log_init(const char *prog)
{
	log_prog = prog;
	/* systemd sets JOURNAL_STREAM when stderr is connected to journald. */
	log_journal = getenv("JOURNAL_STREAM") != NULL;
}

void lp_log_set_level(int max_priority)
{
	log_max = max_priority;
}

static void vlog(int priority, const char *fmt, va_list ap)
{
	char buf[2048], safe[LP_ESCAPE_SIZE(sizeof(buf))];
	int n;

	if (priority > log_max)
		return;
	n = vsnprintf(buf, sizeof(buf), fmt, ap);
	if (n < 0)
		return;
	/* Names of processes, files and settings come from other users: a newline or an
	 * escape sequence in one must not forge a line or reach a terminal (escape.h). */
	lp_escape(safe, sizeof(safe), buf, (size_t)n < sizeof(buf) ? (size_t)n : sizeof(buf) - 1);
	if (log_journal)
		fprintf(stderr, "<%d>%s\n", priority, safe);
	else
		fprintf(stderr, "%s: %s\n", log_prog, safe);
}

void lp_log(int priority, const char *fmt, ...)
{
	va_list ap;
	int saved = errno;

	va_start(ap, fmt);
	vlog(priority, fmt, ap);
	va_end(ap);
	errno = saved;
}

int lp_log_errno(int priority, int r, const char *fmt, ...)
{
	va_list ap;

	errno = r < 0 ? -r : r;
	va_start(ap, fmt);
	vlog(priority, fmt, ap);
	va_end(ap);
	return r;
}

void lp_line_add(struct lp_line *l, const char *fmt, ...)
{
	va_list ap;
	int n;

	if (l->len >= sizeof(l->buf) - 1)
		return;
	va_start(ap, fmt);
	n = vsnprintf(l->buf + l->len, sizeof(l->buf) - l->len, fmt, ap);
	va_end(ap);
	if (n > 0)
		l->len += (size_t)n < sizeof(l->buf) - l->len ? (size_t)n
							      : sizeof(l->buf) - l->len - 1;
}
