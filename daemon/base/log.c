// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* Logging to stderr, with journald priority prefixes when stderr is the journal. */
#include "base/log.h"

#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

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

/* "2026-11-25T17:40:01.123Z ", UTC, into b (at least 26 bytes, not terminated); returns its
 * length. Written out by hand, from calls a signal handler may make: the fatal-signal line
 * carries it too. */
#define STAMP_LEN 25
static size_t stamp(char *b)
{
	struct timespec ts;
	long long days, secs, z, era, doe, yoe, doy, mp, y, m, d;
	int ms;

	clock_gettime(CLOCK_REALTIME, &ts);
	days = (long long)ts.tv_sec / 86400;
	secs = (long long)ts.tv_sec % 86400;
	ms = (int)(ts.tv_nsec / 1000000);
	/* Days since 1970-01-01 to a civil date (H. Hinnant's days_from_civil, inverted). */
	z = days + 719468;
	era = z / 146097;
	doe = z - era * 146097;
	yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
	doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
	mp = (5 * doy + 2) / 153;
	d = doy - (153 * mp + 2) / 5 + 1;
	m = mp < 10 ? mp + 3 : mp - 9;
	y = yoe + era * 400 + (m <= 2);
	{
		long long v[] = {y, m, d, secs / 3600, secs / 60 % 60, secs % 60, ms};
		const int width[] = {4, 2, 2, 2, 2, 2, 3};
		const char after[] = "--T::.Z";
		size_t n = 0;

		for (int i = 0; i < 7; i++) {
			for (int k = width[i] - 1; k >= 0; k--, v[i] /= 10)
				b[n + (size_t)k] = (char)('0' + v[i] % 10);
			n += (size_t)width[i];
			b[n++] = after[i];
		}
		b[n++] = ' ';
		return n;
	}
}

static void vlog(int priority, const char *fmt, va_list ap)
{
	char buf[2048], safe[LP_ESCAPE_SIZE(sizeof(buf))], when[STAMP_LEN + 1];
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
		fprintf(stderr, "%.*s%s: %s\n", (int)stamp(when), when, log_prog, safe);
}

/* A fatal signal is said in the log before the process ends, from calls a handler may make
 * (write, sigaction, raise). The action that was there before (the default's core dump, or
 * a sanitizer's report) then runs: a fault is taken again when the handler returns, at the
 * same instruction; a signal that was sent (abort(), kill) is raised again. */
static const int fatal_signals[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};
static struct sigaction fatal_prev[sizeof(fatal_signals) / sizeof(fatal_signals[0])];

/* Appends s to b at *n, within cap. */
static void put(char *b, size_t *n, size_t cap, const char *s)
{
	for (; *s && *n < cap; s++)
		b[(*n)++] = *s;
}

static void on_fatal(int sig, siginfo_t *info, void *uctx)
{
	char line[192], num[16];
	const char *name = sigabbrev_np(sig);
	size_t n = 0, k = sizeof(num), i;
	/* Sent (abort(), kill): nothing would take it again. */
	bool sent = info->si_code <= 0;
	unsigned v = sent && info->si_pid > 0 ? (unsigned)info->si_pid : 0;

	(void)uctx;
	if (log_journal) {
		put(line, &n, 160, "<2>");
	} else {
		n = stamp(line);
		put(line, &n, 160, log_prog);
		put(line, &n, 160, ": ");
	}
	put(line, &n, 160, sent ? "killed by SIG" : "crashed with SIG");
	put(line, &n, 160, name ? name : "?");
	if (sent && v) {
		num[--k] = '\0';
		do
			num[--k] = (char)('0' + v % 10);
		while ((v /= 10) && k > 0);
		put(line, &n, 160, " from pid ");
		put(line, &n, 160, num + k);
	}
	if (!sent)
		put(line, &n, 160, ", a bug: please report it with this log");
	line[n++] = '\n';
	if (write(STDERR_FILENO, line, n) < 0) {
		/* Nothing else can be done with the log from here. */
	}
	for (i = 0; i < sizeof(fatal_signals) / sizeof(fatal_signals[0]); i++)
		if (fatal_signals[i] == sig)
			sigaction(sig, &fatal_prev[i], NULL);
	if (sent)
		raise(sig);
}

void lp_log_fatal_signals(void)
{
	struct sigaction sa = {.sa_sigaction = on_fatal, .sa_flags = SA_SIGINFO | SA_NODEFER};

	sigemptyset(&sa.sa_mask);
	for (size_t i = 0; i < sizeof(fatal_signals) / sizeof(fatal_signals[0]); i++)
		sigaction(fatal_signals[i], &sa, &fatal_prev[i]);
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
