// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* llmprofctl list: the processes llmprofd tracks, one line each. */
#include <getopt.h>
#include <stdio.h>

#include "llmprof/protocol.h"
#include "llmprofctl.h"

static const struct option opts[] = {
	{"json", no_argument, NULL, 'j'}, {"pids", no_argument, NULL, 'q'}, CTL_COMMON_OPTS};

static void print_list(const struct ctl *c, const cJSON *doc, void *arg)
{
	bool pids = *(const bool *)arg;
	const cJSON *p;

	(void)c;
	if (!pids)
		printf("%7s %-7s %6s %-15s %4s %8s %-6s %-6s %-20s %-24s %s\n", "PID", "STATE",
		       "UID", "COMMAND", "THR", "TRACKED", "FOUND", "ENGINE", "WORKLOAD", "MODEL",
		       "EXE");
	cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(doc, "processes"))
	{
		char age[32], uid[16];
		double u = ctl_num(p, "uid", -1);

		if (pids) {
			printf("%.0f\n", ctl_num(p, "pid", 0));
			continue;
		}
		snprintf(uid, sizeof(uid), u < 0 ? "-" : "%.0f", u);
		printf("%7.0f %-7s %6s %-15s %4.0f %8s %-6s %-6s %-20s %-24s %s\n",
		       ctl_num(p, "pid", 0), ctl_str(p, "state", "?"), uid, ctl_str(p, "comm", "?"),
		       ctl_num(p, "threads", 0),
		       ctl_fmt_age(age, sizeof(age), ctl_num(p, "tracked_seconds", -1)),
		       ctl_str(p, "matched_by", "?"), ctl_str(p, "engine", "-"),
		       ctl_str(p, "workload", "-"),
		       ctl_str(cJSON_GetObjectItemCaseSensitive(p, "model"), "name", "-"),
		       ctl_str(p, "exe", ""));
	}
}

static int exec(struct ctl *c, int argc, char **argv)
{
	int opt, status = CTL_OK;
	bool json = false, pids = false;

	while ((opt = ctl_getopt(c, &ctl_cmd_list, argc, argv, &status)) != -1) {
		if (opt == -2)
			return status;
		json |= opt == 'j';
		pids |= opt == 'q';
	}
	return ctl_show(c, LP_ROUTE_PROCESSES, json, print_list, &pids);
}

const struct ctl_cmd ctl_cmd_list = {
	.name = "list",
	.usage = "[--json | --pids]",
	.summary = "the processes llmprofd tracks, running and recently exited",
	.help = "One line per process you may see (root and group '" LP_GROUP "' see all; others "
		"their own).\nFOUND says how it was found: 'ggml' (its mappings hold a matmul "
		"function), 'torch'\n(it ran a forward pass) or the --pid, --comm or --exe setting "
		"of llmprofd. ENGINE\nis the engine it runs. Exited processes "
		"stay "
		"for llmprofd's --retention.\n\n"
		"Options:\n"
		"  -j, --json   the API document GET " LP_ROUTE_PROCESSES " unchanged\n"
		"  -q, --pids   only the pids, one per line\n\n"
		"Examples:\n"
		"  llmprofctl list\n"
		"  llmprofctl list --json | jq '.processes[] | {pid, comm, state}'\n",
	.shortopt = "jq",
	.longopts = opts,
	.exec = exec,
};
