// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* Numbers for people: durations, rates, ages and sizes in a few characters. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llmprofctl.h"

/* v in the first of the units where it prints below 1000: "%.3g" for sig 3; for sig 2, one
 * decimal below 10 (whole nanoseconds stay whole), none above. */
static char *scaled(char *buf, size_t n, double v, const double *div, const char *const *unit,
		    int nunits, int sig)
{
	if (isnan(v)) {
		snprintf(buf, n, "-");
		return buf;
	}
	for (int i = 0;; i++) {
		double x = v / div[i];
		bool last = i + 1 == nunits;
		size_t len;

		if (!last && x >= 1000)
			continue;
		if (sig == 2)
			snprintf(buf, n, x < 9.95 && i > 0 ? "%.1f" : "%.0f", x);
		else
			snprintf(buf, n, "%.3g", x);
		if (!last && strtod(buf, NULL) >= 1000)
			continue; /* rounding carried it over: 999.7ns is 1us */
		len = strlen(buf);
		snprintf(buf + len, n - len, "%s", unit[i]);
		return buf;
	}
}

static const double dur_div[] = {1, 1e3, 1e6, 1e9};
static const char *const dur_unit[] = {"ns", "us", "ms", "s"};

char *ctl_fmt_dur(char *buf, size_t n, double ns)
{
	if (!isnan(ns) && ns >= 999.5e9) /* no exponents: "1234s" */
		return snprintf(buf, n, "%.0fs", ns / 1e9), buf;
	return scaled(buf, n, ns, dur_div, dur_unit, 4, 3);
}

char *ctl_fmt_dur5(char *buf, size_t n, double ns)
{
	return scaled(buf, n, ns, dur_div, dur_unit, 4, 2);
}

char *ctl_fmt_num5(char *buf, size_t n, double v)
{
	if (isnan(v))
		snprintf(buf, n, "-");
	else if (v < 9.995)
		snprintf(buf, n, "%.2f", v);
	else if (v < 99.95)
		snprintf(buf, n, "%.1f", v);
	else if (v < 99999.5)
		snprintf(buf, n, "%.0f", v);
	else if (v < 9999.5e3)
		snprintf(buf, n, "%.0fk", v / 1e3);
	else
		snprintf(buf, n, "%.0fM", v / 1e6);
	return buf;
}

char *ctl_fmt_age(char *buf, size_t n, double s)
{
	long long t = (long long)s;

	if (isnan(s) || s < 0)
		snprintf(buf, n, "-");
	else if (s < 60)
		snprintf(buf, n, "%.1fs", s);
	else if (t < 3600)
		snprintf(buf, n, "%lldm%02llds", t / 60, t % 60);
	else if (t < 86400)
		snprintf(buf, n, "%lldh%02lldm", t / 3600, t % 3600 / 60);
	else
		snprintf(buf, n, "%lldd%02lldh", t / 86400, t % 86400 / 3600);
	return buf;
}

char *ctl_fmt_bytes(char *buf, size_t n, double b)
{
	if (b < 1024)
		snprintf(buf, n, "%.0fB", b);
	else if (b < 1024 * 1024)
		snprintf(buf, n, "%.1fKiB", b / 1024);
	else if (b < 1024.0 * 1024 * 1024)
		snprintf(buf, n, "%.1fMiB", b / (1024 * 1024));
	else
		snprintf(buf, n, "%.1fGiB", b / (1024.0 * 1024 * 1024));
	return buf;
}
