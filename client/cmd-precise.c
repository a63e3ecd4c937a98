// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* llmprofctl precise: exact matmul and barrier accounting for one process, for a while. */
#include <getopt.h>
#include <math.h>
#include <stdio.h>

#include "llmprof/protocol.h"
#include "llmprofctl.h"

static const struct option opts[] = {{"pid", required_argument, NULL, 'p'},
				     {"seconds", required_argument, NULL, 's'},
				     {"off", no_argument, NULL, 'o'},
				     CTL_COMMON_OPTS};

static int exec(struct ctl *c, int argc, char **argv)
{
	char path[96], body[64];
	double seconds = 60, left, probed;
	int pid = 0, opt, status = CTL_OK;
	bool off = false, given = false;
	const cJSON *p;
	cJSON *doc;

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
	}
	if (ctl_process_path(c, &ctl_cmd_precise, pid, LP_ROUTE_PRECISE, path, sizeof(path)))
		return CTL_USAGE;
	if (off && given)
		return ctl_usage_error(c, &ctl_cmd_precise,
				       "--off and --seconds exclude each other");
	if (off)
		snprintf(body, sizeof(body), "{\"enable\":false}");
	else
		snprintf(body, sizeof(body), "{\"seconds\":%.17g}", seconds);
	status = ctl_request(c, "POST", path, body, &doc, NULL);
	if (status)
		return status;
	p = cJSON_GetObjectItemCaseSensitive(doc, "precise");
	left = ctl_num(p, "seconds_left", NAN);
	probed = ctl_num(p, "functions_probed", 0);
	if (!ctl_true(p, "active"))
		printf("pid %d: precise mode off\n", pid);
	else if (isnan(left))
		printf("pid %d: precise mode on, %.0f functions probed, until 'llmprofctl precise "
		       "--pid %d --off'\n",
		       pid, probed, pid);
	else
		printf("pid %d: precise mode on for %.0f s, %.0f functions probed; then see "
		       "'llmprofctl dump --pid %d'\n",
		       pid, left, probed, pid);
	cJSON_Delete(doc);
	return CTL_OK;
}

const struct ctl_cmd ctl_cmd_precise = {
	.name = "precise",
	.usage = "--pid PID [--seconds S | --off]",
	.summary = "exact matmul and barrier times for one process, for a while",
	.help = "Puts a uprobe on every matmul and barrier function of the process: exact calls, "
		"times, and\nbarrier spin against sleep, at about 1.6 us per call (so only for a "
		"while). The results are in\n'llmprofctl dump --pid PID' under 'precise'. Needs "
		"root or group '" LP_GROUP "'.\n\n"
		"Options:\n"
		"  -p, --pid PID      the process (it must have ggml mapped)\n"
		"  -s, --seconds S    for S seconds (default 60; 0: until --off)\n"
		"  -o, --off          switch it off now\n\n"
		"Examples:\n"
		"  llmprofctl precise --pid 4242 --seconds 30\n"
		"  llmprofctl precise --pid 4242 --off\n",
	.shortopt = "p:s:o",
	.longopts = opts,
	.exec = exec,
};
