// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* llmprofctl status: the daemon itself: what it collects with, what it lost, who you are. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "llmprof/protocol.h"
#include "llmprofctl.h"

static const struct option opts[] = {{"json", no_argument, NULL, 'j'}, CTL_COMMON_OPTS};

/* "a b c" from a JSON array of strings, or "none". */
static void print_words(const cJSON *a)
{
	const cJSON *s;
	bool any = false;

	cJSON_ArrayForEach(s, a)
	{
		if (cJSON_IsString(s)) {
			printf("%s%s", any ? " " : "", s->valuestring);
			any = true;
		}
	}
	printf("%s\n", any ? "" : "none");
}

static void print_status(const struct ctl *c, const cJSON *doc, void *arg)
{
	const cJSON *col = cJSON_GetObjectItemCaseSensitive(doc, "collectors"),
		    *kf = cJSON_GetObjectItemCaseSensitive(doc, "kernel_features"),
		    *pr = cJSON_GetObjectItemCaseSensitive(doc, "probes"),
		    *sv = cJSON_GetObjectItemCaseSensitive(doc, "server"),
		    *peer = cJSON_GetObjectItemCaseSensitive(doc, "peer"), *uw, *e;
	char a[32], b[32];
	double lost = 0;

	(void)arg;
	printf("llmprofd %s (API %.0f, ABI %.0f), pid %.0f, up %s\n", ctl_str(doc, "version", "?"),
	       ctl_num(doc, "api", 0), ctl_num(doc, "abi", 0), ctl_num(doc, "pid", 0),
	       ctl_fmt_age(a, sizeof(a), ctl_num(doc, "uptime_seconds", -1)));
	printf("%-12s %s (you: uid %.0f, %s)\n", "socket", c->socket, ctl_num(peer, "uid", -1),
	       ctl_true(peer, "privileged") ? "see every process"
					    : "see your own processes only; group '" LP_GROUP
					      "' sees all");
	printf("%-12s %.0f running, %.0f exited, %.0f visible to you\n", "processes",
	       ctl_num_path(doc, "processes", "running", 0),
	       ctl_num_path(doc, "processes", "exited", 0),
	       ctl_num_path(doc, "processes", "visible", 0));
	if (ctl_num_path(doc, "pid_namespace", "inode", 0) > 0)
		printf("%-12s %s (pid:[%.0f]): %s\n", "pid ns",
		       ctl_true(cJSON_GetObjectItemCaseSensitive(doc, "pid_namespace"), "host")
			       ? "the host's"
			       : "a container's",
		       ctl_num_path(doc, "pid_namespace", "inode", 0),
		       ctl_true(cJSON_GetObjectItemCaseSensitive(doc, "pid_namespace"), "host")
			       ? "every process"
			       : "its processes only, by their pids there (--pid=host, hostPID: "
				 "true for all)");
	printf("%-12s found: ", "kernel");
	print_words(cJSON_GetObjectItemCaseSensitive(kf, "found"));
	printf("%-12s missing: ", "");
	print_words(cJSON_GetObjectItemCaseSensitive(kf, "missing"));
	printf("%-12s scheduler %s, futex %s, page faults %s, new mappings %s, sampling %.0f Hz\n",
	       "collectors", ctl_str(col, "scheduler", "-"), ctl_str(col, "futex", "-"),
	       ctl_str(col, "page_faults", "-"), ctl_str(col, "new_mappings", "-"),
	       ctl_num(col, "sample_hz", 0));
	printf("%-12s %.0f core links, %.0f objects read, llama_decode in %.0f objects (%.0f "
	       "links), precise mode on %.0f processes (%.0f links)\n",
	       "probes", ctl_num(pr, "core_links", 0), ctl_num(pr, "objects_read", 0),
	       ctl_num(pr, "decode_objects", 0), ctl_num(pr, "decode_links", 0),
	       ctl_num(pr, "precise_processes", 0), ctl_num(pr, "precise_links", 0));
	uw = cJSON_GetObjectItemCaseSensitive(doc, "unwind");
	if (!ctl_true(uw, "enabled"))
		printf("%-12s off: ops are found by scanning the stack\n", "unwind");
	else if (cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(uw, "objects")))
		printf("%-12s .eh_frame rows of %.0f objects (at most %.0f), %.0f rows, %s\n",
		       "unwind", ctl_num(uw, "objects", 0), ctl_num(uw, "objects_max", 0),
		       ctl_num(uw, "rows_used", 0),
		       ctl_fmt_bytes(b, sizeof(b), ctl_num(uw, "bytes", 0)));
	e = cJSON_GetObjectItemCaseSensitive(doc, "python");
	if (cJSON_IsObject(e) && !ctl_true(e, "enabled"))
		printf("%-12s off: CPython's frames are not read\n", "python");
	else if (cJSON_IsObject(e))
		printf("%-12s reads CPython %s: %.0f processes read, %.0f of a version not read, "
		       "%.0f code objects named, %.0f unreadable\n",
		       "python", ctl_str(e, "versions_read", "?"), ctl_num(e, "processes", 0),
		       ctl_num(e, "processes_unknown_version", 0), ctl_num(e, "functions_named", 0),
		       ctl_num(e, "code_objects_unreadable", 0));
	printf("%-12s", "maps");
	cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(doc, "maps"))
	{
		if (ctl_num(e, "max_entries", 0) > 0 && strcmp(ctl_str(e, "name", ""), "events"))
			printf(" %s %.0f/%.0f", ctl_str(e, "name", "?"), ctl_num(e, "entries", 0),
			       ctl_num(e, "max_entries", 0));
	}
	printf("; kernel memory %s\n",
	       ctl_fmt_bytes(b, sizeof(b), ctl_num(doc, "kernel_memory_bytes", 0)));
	printf("%-12s", "lost");
	cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(doc, "lost"))
	{
		if (cJSON_IsNumber(e) && e->valuedouble > 0) {
			printf(" %s %.0f", e->string, e->valuedouble);
			lost += e->valuedouble;
		}
	}
	printf("%s\n", lost > 0 ? " (see llmprofd(8), LIMITS)" : " nothing");
	e = cJSON_GetObjectItemCaseSensitive(doc, "pending");
	if (cJSON_IsObject(e)) {
		static const char *const lanes[] = {"attach", "release"};

		printf("%-12s", "pending");
		for (int i = 0; i < 2; i++) {
			const cJSON *l = cJSON_GetObjectItemCaseSensitive(e, lanes[i]);

			if (ctl_str(l, "now", NULL))
				printf(" %s: %s for %.1f s, %.0f queued;", lanes[i],
				       ctl_str(l, "now", ""), ctl_num(l, "for_seconds", 0),
				       ctl_num(l, "queued", 0));
			else
				printf(" %s: idle;", lanes[i]);
		}
		printf(" %.0f done, the longest %.3f s%s%s\n", ctl_num(e, "jobs_done", 0),
		       ctl_num(e, "longest_seconds", 0), ctl_str(e, "longest", NULL) ? ": " : "",
		       ctl_str(e, "longest", ""));
	}
	e = cJSON_GetObjectItemCaseSensitive(doc, "kernel_skipped");
	if (ctl_num(e, "samples_not_taken", 0) > 0 || ctl_num(e, "bpf_recursion_misses", 0) > 0)
		printf("%-12s %.0f samples the kernel did not take (%.0f of a process not known: "
		       "across a switch), %.0f runs of its programs skipped\n",
		       "skipped", ctl_num(e, "samples_not_taken", 0),
		       ctl_num(e, "samples_not_taken_unattributed", 0),
		       ctl_num(e, "bpf_recursion_misses", 0));
	printf("%-12s %.0f connections open, %.0f accepted, %.0f requests, %.0f over the cap, "
	       "%.0f timed out\n",
	       "server", ctl_num(sv, "connections", 0), ctl_num(sv, "accepted", 0),
	       ctl_num(sv, "requests", 0), ctl_num(sv, "over_cap", 0), ctl_num(sv, "timed_out", 0));
}

static int exec(struct ctl *c, int argc, char **argv)
{
	int opt, status = CTL_OK;
	bool json = false;

	while ((opt = ctl_getopt(c, &ctl_cmd_status, argc, argv, &status)) != -1) {
		if (opt == -2)
			return status;
		json |= opt == 'j';
	}
	return ctl_show(c, LP_ROUTE_STATUS, json, print_status, NULL);
}

const struct ctl_cmd ctl_cmd_status = {
	.name = "status",
	.usage = "[--json]",
	.summary = "the daemon: version, kernel features, collectors, probes, maps, losses",
	.help = "Says which kernel features llmprofd found and which it works without, how each "
		"collector is\nattached, how full its maps are, and whether any data was lost (a "
		"full "
		"map or ring buffer).\n\n"
		"Options:\n"
		"  -j, --json   the API document GET " LP_ROUTE_STATUS " unchanged\n\n"
		"Examples:\n"
		"  llmprofctl status\n"
		"  llmprofctl --socket /tmp/llmprofd.sock status --json\n",
	.shortopt = "j",
	.longopts = opts,
	.exec = exec,
};
