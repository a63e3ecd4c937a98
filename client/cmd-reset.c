// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* llmprofctl reset: zero one process's counters, histograms and futex words. */
#include <getopt.h>
#include <stdio.h>

#include "llmprof/protocol.h"
#include "llmprofctl.h"

static const struct option opts[] = {{"pid", required_argument, NULL, 'p'}, CTL_COMMON_OPTS};

static int exec(struct ctl *c, int argc, char **argv)
{
	char path[96];
	int pid = 0, opt, status = CTL_OK;
	cJSON *doc;

	while ((opt = ctl_getopt(c, &ctl_cmd_reset, argc, argv, &status)) != -1) {
		if (opt == -2)
			return status;
		if (opt == 'p' && ctl_parse_pid(c, &ctl_cmd_reset, optarg, &pid))
			return CTL_USAGE;
	}
	if (ctl_process_path(c, &ctl_cmd_reset, pid, LP_ROUTE_RESET, path, sizeof(path)))
		return CTL_USAGE;
	status = ctl_request(c, "POST", path, "", &doc, NULL);
	if (status)
		return status;
	printf("pid %d: counters, histograms and futex words reset; rates start again from now\n",
	       pid);
	cJSON_Delete(doc);
	return CTL_OK;
}

const struct ctl_cmd ctl_cmd_reset = {
	.name = "reset",
	.usage = "--pid PID",
	.summary = "zero the counters and histograms of one process",
	.help = "Zeroes the process's counters, histograms, futex words and per-thread counters, "
		"so that what\nfollows (a benchmark, a configuration change) is seen on its own. "
		"Needs root or group\n'" LP_GROUP
		"'. Prometheus sees the drop as a counter reset.\n\n"
		"Options:\n"
		"  -p, --pid PID   the process\n\n"
		"Examples:\n"
		"  llmprofctl reset --pid 4242\n"
		"  llmprofctl reset --pid 4242 && sleep 60 && llmprofctl dump --pid 4242\n",
	.shortopt = "p:",
	.longopts = opts,
	.exec = exec,
};
