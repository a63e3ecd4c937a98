// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* llmprofctl precise: exact matmul and barrier accounting for one process, for a while. Like
 * `perf stat -p PID -- sleep S`, it waits for the window, shows its progress on a terminal,
 * and prints what the window measured; Ctrl-C ends the window early and prints that. */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "llmprof/protocol.h"
#include "llmprofctl.h"

static const struct option opts[] = {
	{"pid", required_argument, NULL, 'p'}, {"seconds", required_argument, NULL, 's'},
	{"off", no_argument, NULL, 'o'},       {"no-wait", no_argument, NULL, 'n'},
	{"json", no_argument, NULL, 'j'},      CTL_COMMON_OPTS};

/* The precise totals a process document holds (ggml.precise), or NULL. */
static const cJSON *precise_of(const cJSON *doc)
{
	return cJSON_GetObjectItemCaseSensitive(ctl_engine_doc(doc), "precise");
}

/* The totals' growth from a to b, for one member of an object member (or the top level). */
static double grew(const cJSON *a, const cJSON *b, const char *obj, const char *key)
{
	if (obj) {
		a = cJSON_GetObjectItemCaseSensitive(a, obj);
		b = cJSON_GetObjectItemCaseSensitive(b, obj);
	}
	return ctl_num(b, key, 0) - ctl_num(a, key, 0);
}

/* What the window measured: the growth of the process's precise totals across it. */
struct window {
	double s, cpu, attach_ms, probed;
	double mc, mns, mex; /* matmul: calls, wall ns inside, ns on CPU outside barriers */
	double bc, bns, spin, sleep;
};

static struct window window_of(const cJSON *a, const cJSON *b, double probed)
{
	return (struct window){
		.s = grew(a, b, NULL, "seconds"),
		.cpu = grew(a, b, NULL, "oncpu_ns"),
		.attach_ms = ctl_num(b, "attach_ms", 0),
		.probed = probed,
		.mc = grew(a, b, "matmul", "calls"),
		.mns = grew(a, b, "matmul", "ns"),
		.mex = grew(a, b, "matmul", "exclusive_oncpu_ns"),
		.bc = grew(a, b, "barrier", "calls"),
		.bns = grew(a, b, "barrier", "ns"),
		.spin = grew(a, b, "barrier", "spin_ns"),
		.sleep = grew(a, b, "barrier", "sleep_ns"),
	};
}

static void print_window(int pid, const struct window *w)
{
	char x[4][32];

	printf("pid %d: precise window of %.2f s, probes on %.0f functions (on in %s)\n", pid, w->s,
	       w->probed, ctl_fmt_dur(x[0], 32, w->attach_ms * 1e6));
	printf("  its CPU time      %s (%.2f CPUs)\n", ctl_fmt_dur(x[0], 32, w->cpu),
	       w->s > 0 ? w->cpu / 1e9 / w->s : 0);
	printf("  matmul   %9.0f calls, %s inside them (wall, all threads), %s per call;\n"
	       "                    %s on CPU outside barriers, %.1f%% of its CPU time\n",
	       w->mc, ctl_fmt_dur(x[0], 32, w->mns),
	       ctl_fmt_dur(x[1], 32, w->mc > 0 ? w->mns / w->mc : 0), ctl_fmt_dur(x[2], 32, w->mex),
	       w->cpu > 0 ? 100 * w->mex / w->cpu : 0);
	printf("  barrier  %9.0f calls, %s inside them (wall, all threads): spinning %s, "
	       "asleep %s\n",
	       w->bc, ctl_fmt_dur(x[0], 32, w->bns), ctl_fmt_dur(x[1], 32, w->spin),
	       ctl_fmt_dur(x[2], 32, w->sleep));
	printf("  (wall time inside calls counts every thread's calls, asleep or not; the "
	       "CPU share counts\n   only time on CPU: 'llmprofctl dump --pid %d' has the ops "
	       "and the totals of all windows)\n",
	       pid);
}

/* The window as JSON (docs/API.md, "llmprofctl --json"): the same figures, in ns. */
static int print_window_json(int pid, const struct window *w)
{
	cJSON *o = cJSON_CreateObject(), *m, *b;
	int status;

	if (!o)
		return CTL_DAEMON;
	cJSON_AddNumberToObject(o, "pid", pid);
	cJSON_AddNumberToObject(o, "seconds", w->s);
	cJSON_AddNumberToObject(o, "functions_probed", w->probed);
	cJSON_AddNumberToObject(o, "attach_ms", w->attach_ms);
	cJSON_AddNumberToObject(o, "oncpu_ns", w->cpu);
	m = cJSON_AddObjectToObject(o, "matmul");
	cJSON_AddNumberToObject(m, "calls", w->mc);
	cJSON_AddNumberToObject(m, "ns", w->mns);
	cJSON_AddNumberToObject(m, "exclusive_oncpu_ns", w->mex);
	b = cJSON_AddObjectToObject(o, "barrier");
	cJSON_AddNumberToObject(b, "calls", w->bc);
	cJSON_AddNumberToObject(b, "ns", w->bns);
	cJSON_AddNumberToObject(b, "spin_ns", w->spin);
	cJSON_AddNumberToObject(b, "sleep_ns", w->sleep);
	status = ctl_print_json(o, false);
	cJSON_Delete(o);
	return status;
}

/* Waits for the window to open and close (or for Ctrl-C, then closes it), then prints it. */
static int wait_window(struct ctl *c, int pid, const char *path, const char *ppath,
		       const cJSON *before, double seconds, bool json)
{
	bool tty = isatty(STDERR_FILENO), asked_off = false;
	double windows0 = ctl_num(before, "windows", 0), probed = 0;
	cJSON *doc = NULL;
	int status = CTL_OK;

	ctl_catch_interrupt();
	for (;;) {
		const cJSON *p;
		const char *state;

		ctl_nap(0.1);
		if (ctl_interrupted && !asked_off) {
			cJSON *r = NULL;

			asked_off = true;
			status = ctl_request(c, "POST", ppath, "{\"enable\":false}", &r, NULL);
			cJSON_Delete(r);
			if (status)
				break;
		}
		cJSON_Delete(doc);
		doc = NULL;
		status = ctl_request(c, "GET", path, NULL, &doc, NULL);
		if (status)
			break;
		p = precise_of(doc);
		state = ctl_str(p, "state", "off");
		if (!strcmp(state, "on"))
			probed = ctl_num(p, "functions_probed", 0);
		if (tty) {
			if (!strcmp(state, "attaching"))
				fprintf(stderr, "\rprecise: attaching the probes...        ");
			else if (!strcmp(state, "on"))
				fprintf(stderr, "\rprecise: %.1f s%s%.0f s  (Ctrl-C ends it)   ",
					ctl_num(p, "seconds", 0) - ctl_num(before, "seconds", 0),
					seconds > 0 ? " of " : "", seconds > 0 ? seconds : 0);
		}
		if (!strcmp(state, "off") || !strcmp(ctl_str(doc, "state", "running"), "exited")) {
			if (ctl_num(p, "windows", 0) > windows0) {
				struct window w = window_of(before, p, probed);

				if (tty)
					fprintf(stderr, "\r%60s\r", "");
				if (json)
					status = print_window_json(pid, &w);
				else
					print_window(pid, &w);
			} else {
				fprintf(stderr,
					"%sllmprofctl: pid %d: no precise window was "
					"measured%s%s\n",
					tty ? "\n" : "", pid, ctl_str(p, "error", NULL) ? ": " : "",
					ctl_str(p, "error", ""));
				status = CTL_DAEMON;
			}
			break;
		}
	}
	cJSON_Delete(doc);
	return status;
}

static int exec(struct ctl *c, int argc, char **argv)
{
	char path[96], ppath[112], body[64];
	double seconds = 60, left, probed;
	int pid = 0, opt, status = CTL_OK;
	bool off = false, given = false, no_wait = false, json = false;
	const cJSON *p;
	cJSON *doc, *before = NULL;

	while ((opt = ctl_getopt(c, &ctl_cmd_precise, argc, argv, &status)) != -1) {
		if (opt == -2)
			return status;
		if (opt == 'p' && ctl_parse_pid(c, &ctl_cmd_precise, optarg, &pid))
			return CTL_USAGE;
		if (opt == 's' && ctl_parse_seconds(c, &ctl_cmd_precise, "--seconds", optarg, 0,
						    LP_PRECISE_MAX_SECONDS, &seconds))
			return CTL_USAGE;
		given |= opt == 's';
		off |= opt == 'o';
		no_wait |= opt == 'n';
		json |= opt == 'j';
	}
	if (ctl_process_path(c, &ctl_cmd_precise, pid, LP_ROUTE_PRECISE, ppath, sizeof(ppath)) ||
	    ctl_process_path(c, &ctl_cmd_precise, pid, NULL, path, sizeof(path)))
		return CTL_USAGE;
	if (off && given)
		return ctl_usage_error(c, &ctl_cmd_precise,
				       "--off and --seconds exclude each other");
	if (off)
		snprintf(body, sizeof(body), "{\"enable\":false}");
	else
		snprintf(body, sizeof(body), "{\"seconds\":%.17g}", seconds);
	if (!off && !no_wait) {
		status = ctl_request(c, "GET", path, NULL, &before, NULL);
		if (status)
			return status;
	}
	status = ctl_request(c, "POST", ppath, body, &doc, NULL);
	if (status) {
		cJSON_Delete(before);
		return status;
	}
	p = cJSON_GetObjectItemCaseSensitive(doc, "precise");
	if (!off && !no_wait) {
		/* A window already open is extended, not started: it is measured from here. */
		status = wait_window(c, pid, path, ppath, precise_of(before), seconds, json);
		cJSON_Delete(before);
		cJSON_Delete(doc);
		return status;
	}
	left = ctl_num(p, "seconds_left", NAN);
	probed = ctl_num(p, "functions_probed", 0);
	if (json) /* the daemon's answer: the route's document (docs/API.md) */
		status = ctl_print_json(doc, false);
	else if (!ctl_true(p, "active"))
		printf("pid %d: precise mode off\n", pid);
	else if (!strcmp(ctl_str(p, "state", "on"), "attaching"))
		printf("pid %d: precise mode attaching its probes; %s%.0f s once they are on; then "
		       "see 'llmprofctl dump --pid %d'\n",
		       pid, isnan(left) ? "until --off, not " : "on for ", isnan(left) ? 0 : left,
		       pid);
	else if (isnan(left))
		printf("pid %d: precise mode on, %.0f functions probed, until 'llmprofctl precise "
		       "--pid %d --off'\n",
		       pid, probed, pid);
	else
		printf("pid %d: precise mode on for %.0f s, %.0f functions probed; then see "
		       "'llmprofctl dump --pid %d'\n",
		       pid, left, probed, pid);
	cJSON_Delete(doc);
	return status;
}

const struct ctl_cmd ctl_cmd_precise = {
	.name = "precise",
	.usage = "--pid PID [--seconds S] [--no-wait] [--json] | --pid PID --off [--json]",
	.summary = "exact matmul and barrier times for one process, for a while",
	.help = "Puts a uprobe on every matmul and barrier function of the process, and on the "
		"ops it spends\nits time in: exact calls, times, and barrier spin against sleep, "
		"at "
		"about 1.6 us per call\n(so only for a while). Waits for the window, showing its "
		"progress on a terminal, and\nprints what it measured; Ctrl-C ends it early and "
		"prints that. The totals of all windows\nare in 'llmprofctl dump --pid PID' under "
		"'precise'. Needs root or group '" LP_GROUP "'.\n\n"
		"Options:\n"
		"  -p, --pid PID      the process (it must have ggml mapped)\n"
		"  -s, --seconds S    for S seconds from when the probes are on (default 60; 0: "
		"until\n"
		"                     Ctrl-C, or --off with --no-wait)\n"
		"  -n, --no-wait      switch it on and return at once (for scripts)\n"
		"  -o, --off          switch it off now\n"
		"  -j, --json         the window's figures as JSON; with --no-wait or --off, the\n"
		"                     daemon's answer (docs/API.md)\n\n"
		"Examples:\n"
		"  llmprofctl precise --pid 4242 --seconds 5\n"
		"  llmprofctl precise --pid 4242 --seconds 30 --no-wait\n"
		"  llmprofctl precise --pid 4242 --off\n",
	.shortopt = "p:s:onj",
	.longopts = opts,
	.exec = exec,
};
