// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* Commands that wait on a window (precise, record): naps that Ctrl-C ends early. */
#include <math.h>
#include <signal.h>
#include <time.h>

#include "llmprofctl.h"

volatile sig_atomic_t ctl_interrupted;

static void on_interrupt(int sig)
{
	(void)sig;
	ctl_interrupted = 1;
}

void ctl_catch_interrupt(void)
{
	/* Once: the second Ctrl-C ends the command as usual. */
	struct sigaction sa = {.sa_handler = on_interrupt, .sa_flags = SA_RESETHAND};

	sigemptyset(&sa.sa_mask);
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
}

void ctl_nap(double s)
{
	struct timespec ts = {.tv_sec = (time_t)s, .tv_nsec = (long)((s - floor(s)) * 1e9)};

	if (!ctl_interrupted)
		nanosleep(&ts, NULL); /* a signal ends it early: that is what it is for */
}
