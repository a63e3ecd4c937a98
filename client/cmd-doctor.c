// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* llmprofctl doctor: why tokens/s is low, for one process or every running one: the
 * daemon's findings, most severe first, each with its numbers and what to do. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "llmprof/protocol.h"
#include "llmprofctl.h"

static const struct option opts[] = {{"pid", required_argument, NULL, 'p'},
				     {"json", no_argument, NULL, 'j'},
				     {"all", no_argument, NULL, 'a'},
				     {"measure-bandwidth", no_argument, NULL, 'm'},
				     CTL_COMMON_OPTS};

static bool ends(const char *s, const char *suffix)
{
	size_t n = strlen(s), m = strlen(suffix);

	return n >= m && !strcmp(s + n - m, suffix);
}

/* One evidence value, in the unit its name says. */
static void print_value(const char *key, const cJSON *v)
{
	char buf[32];

	if (cJSON_IsString(v)) {
		printf("%s", v->valuestring[0] ? v->valuestring : "(unset)");
	} else if (!cJSON_IsNumber(v)) {
		printf("?");
	} else if (ends(key, "_share") || !strcmp(key, "fraction")) {
		printf("%.1f%%", 100 * v->valuedouble);
	} else if (ends(key, "_ns")) {
		printf("%s", ctl_fmt_dur(buf, sizeof(buf), v->valuedouble));
	} else if (ends(key, "bytes") || ends(key, "_bytes_per_s")) {
		printf("%s%s", ctl_fmt_bytes(buf, sizeof(buf), v->valuedouble),
		       ends(key, "_per_s") ? "/s" : "");
	} else {
		printf("%.4g", v->valuedouble);
	}
}

static void print_evidence(const cJSON *ev)
{
	const cJSON *e, *p;
	int col = 0;

	printf("      evidence:");
	cJSON_ArrayForEach(e, ev)
	{
		if (cJSON_IsArray(e)) {
			/* the preemptors: who, how often, for how long */
			printf("\n      %s:", e->string);
			cJSON_ArrayForEach(p, e)
			{
				char d[32];

				printf(" %s (pid %.0f) %s in %.0f,", ctl_str(p, "comm", "?"),
				       ctl_num(p, "pid", 0),
				       ctl_fmt_dur(d, sizeof(d), ctl_num(p, "wait_ns", 0)),
				       ctl_num(p, "preemptions", 0));
			}
			col = 0;
			printf("\n               ");
			continue;
		}
		if (col++ && col % 4 == 1)
			printf("\n               ");
		printf(" %s ", e->string);
		print_value(e->string, e);
		printf(";");
	}
	printf("\n");
}

static void print_bandwidth(const cJSON *bw)
{
	char a[32], b[32], c[32];
	double peak = ctl_num(bw, "peak_bytes_per_s", 0), frac = ctl_num(bw, "fraction", 0);
	double stream = ctl_num(bw, "stream_bytes_per_s", 0);

	if (!ctl_num(bw, "weights_bytes", 0) || !ctl_num(bw, "tokens_per_s", 0))
		return;
	printf("  memory: decode reads %s per token x %.1f tokens/s = %s/s",
	       ctl_fmt_bytes(a, sizeof(a), ctl_num(bw, "bytes_per_token", 0)),
	       ctl_num(bw, "tokens_per_s", 0), ctl_fmt_bytes(b, sizeof(b), stream));
	if (ctl_true(bw, "fits_llc"))
		printf(", from the last-level caches (%s): the memory's bandwidth does not "
		       "bound it\n",
		       ctl_fmt_bytes(c, sizeof(c), ctl_num(bw, "llc_bytes", 0)));
	else if (peak > 0)
		printf(" of a measured %s/s (%.0f%%): %s\n", ctl_fmt_bytes(c, sizeof(c), peak),
		       100 * frac,
		       frac >= 0.6 ? "memory-bound" : "not memory-bound: compute, sync or waiting");
	else
		printf("; the host's peak is not measured yet\n");
}

/* Each op precise mode read, its GB/s against the host's: which are memory-bound. */
static void print_roofline(const cJSON *r)
{
	const cJSON *e, *ops = cJSON_GetObjectItemCaseSensitive(r, "ops");
	double peak = ctl_num(r, "peak_bytes_per_s", 0);
	char a[32];
	int bound = 0;

	if (!cJSON_GetArraySize(ops))
		return;
	printf("  ops (precise mode's nodes");
	if (peak > 0)
		printf(", against the measured %s/s", ctl_fmt_bytes(a, sizeof(a), peak));
	printf("):");
	cJSON_ArrayForEach(e, ops)
	{
		const cJSON *bps = cJSON_GetObjectItemCaseSensitive(e, "bytes_per_s");

		printf("%s %s %.0f%% of CPU", e == ops->child ? "" : ";", ctl_str(e, "op", "?"),
		       100 * ctl_num(e, "cpu_share", 0));
		if (!cJSON_IsNumber(bps)) {
			printf(", bytes not known");
			continue;
		}
		printf(", %s/s", ctl_fmt_bytes(a, sizeof(a), bps->valuedouble));
		if (peak > 0)
			printf(" (%.0f%%)", 100 * ctl_num(e, "fraction", 0));
		bound += ctl_true(e, "memory_bound");
	}
	if (peak > 0)
		printf(": %s\n", bound ? "the ops at 60% or more are memory-bound"
				       : "none memory-bound: compute, sync or overhead");
	else
		printf("; the host's peak is not measured yet\n");
}

static void print_context(const cJSON *x)
{
	const cJSON *w = cJSON_GetObjectItemCaseSensitive(x, "weights");
	const cJSON *env = cJSON_GetObjectItemCaseSensitive(x, "openmp_environment");
	char a[32];

	if (!cJSON_IsObject(x))
		return;
	printf("  context: %.0f CPUs allowed (%.0f cores)", ctl_num(x, "cpus_allowed", 0),
	       ctl_num(x, "cores_allowed", 0));
	if (ctl_num(x, "quota_cpus", 0) > 0)
		printf(", CPU quota %.2f", ctl_num(x, "quota_cpus", 0));
	if (env && *ctl_str(env, "OMP_WAIT_POLICY", ""))
		printf(", OMP_WAIT_POLICY=%s", ctl_str(env, "OMP_WAIT_POLICY", ""));
	if (ctl_num(w, "mappings", 0) > 0)
		printf(", weights %s mapped, %.0f%% resident",
		       ctl_fmt_bytes(a, sizeof(a), ctl_num(w, "bytes", 0)),
		       100 * ctl_num(w, "resident_bytes", 0) / ctl_num(w, "bytes", 1));
	printf("\n");
}

static const char *upper(char *buf, size_t size, const char *s)
{
	snprintf(buf, size, "%s", s);
	for (size_t i = 0; buf[i]; i++)
		buf[i] = (char)(buf[i] >= 'a' && buf[i] <= 'z' ? buf[i] - 32 : buf[i]);
	return buf;
}

static void print_findings(const struct ctl *c, const cJSON *doc, void *arg)
{
	const cJSON *fs = cJSON_GetObjectItemCaseSensitive(doc, "findings"), *f, *ne, *e;
	int n = cJSON_GetArraySize(fs);

	(void)c;
	(void)arg;
	printf("pid %.0f (%s, %s): ", ctl_num(doc, "pid", 0), ctl_str(doc, "comm", "?"),
	       ctl_str(doc, "state", "?"));
	if (n)
		printf("%d finding%s over the last %.0f s\n", n, n == 1 ? "" : "s",
		       ctl_num(doc, "window_seconds", 0));
	else
		printf("nothing found over the last %.0f s\n", ctl_num(doc, "window_seconds", 0));
	cJSON_ArrayForEach(f, fs)
	{
		char sev[16];

		printf("  %-8s %s: %s\n", upper(sev, sizeof(sev), ctl_str(f, "severity", "?")),
		       ctl_str(f, "rule", "?"), ctl_str(f, "title", ""));
		print_evidence(cJSON_GetObjectItemCaseSensitive(f, "evidence"));
		printf("      action:   %s\n", ctl_str(f, "action", ""));
	}
	/* Rules that fired a few seconds ago and not over this window: near a threshold. */
	cJSON_ArrayForEach(f, cJSON_GetObjectItemCaseSensitive(doc, "recent"))
	{
		char sev[16];

		printf("  recently: %s %s, %.0f s ago (not over this window): %s\n",
		       upper(sev, sizeof(sev), ctl_str(f, "severity", "?")),
		       ctl_str(f, "rule", "?"), ctl_num(f, "seconds_ago", 0),
		       ctl_str(f, "title", ""));
	}
	print_bandwidth(cJSON_GetObjectItemCaseSensitive(doc, "bandwidth"));
	print_roofline(cJSON_GetObjectItemCaseSensitive(doc, "op_roofline"));
	print_context(cJSON_GetObjectItemCaseSensitive(doc, "context"));
	f = cJSON_GetObjectItemCaseSensitive(doc, "op_shares");
	if (cJSON_IsObject(f) && !ctl_true(f, "trustworthy"))
		printf("  op shares: NOT TRUSTWORTHY: the stack scan placed %.1f%% of the window's "
		       "samples (it can take a stale return address for a live frame); "
		       "`llmprofctl dump --pid %.0f` says where the walk by .eh_frame gave up\n",
		       100 * ctl_num(f, "scan_share", 0), ctl_num(doc, "pid", 0));
	/* The rules that could not be judged, grouped by why. */
	ne = cJSON_GetObjectItemCaseSensitive(doc, "not_evaluated");
	cJSON_ArrayForEach(e, ne)
	{
		const cJSON *g;
		bool first = true;

		for (g = ne->child; g != e; g = g->next)
			if (!strcmp(ctl_str(ne, g->string, ""), ctl_str(ne, e->string, "")))
				break;
		if (g != e)
			continue; /* printed with an earlier rule of the same reason */
		printf("  not evaluated (%s):", cJSON_IsString(e) ? e->valuestring : "?");
		for (g = e; g; g = g->next)
			if (!strcmp(ctl_str(ne, g->string, ""), ctl_str(ne, e->string, ""))) {
				printf("%s %s", first ? "" : ",", g->string);
				first = false;
			}
		printf("\n");
	}
}

static int rank_of(const char *severity)
{
	return !strcmp(severity, "critical")  ? 3
	       : !strcmp(severity, "warning") ? 2
	       : !strcmp(severity, "info")    ? 1
					      : 0;
}

static int severity_rank(const cJSON *summary)
{
	return rank_of(ctl_str(cJSON_GetObjectItemCaseSensitive(summary, "findings"), "worst", ""));
}

/* One process's findings, printed or as the API's document; *worst rises to the most
 * severe finding's rank. */
static int show_findings(const struct ctl *c, const char *path, bool json, int *worst)
{
	struct ctl_response raw;
	const cJSON *f;
	cJSON *doc;
	int status = ctl_request(c, "GET", path, NULL, &doc, &raw);

	if (status)
		return status;
	cJSON_ArrayForEach(f, cJSON_GetObjectItemCaseSensitive(doc, "findings"))
	{
		int r = rank_of(ctl_str(f, "severity", ""));

		if (r > *worst)
			*worst = r;
	}
	if (json)
		ctl_write_json(stdout, raw.body, raw.len);
	else
		print_findings(c, doc, NULL);
	ctl_response_free(&raw);
	cJSON_Delete(doc);
	return CTL_OK;
}

/* The exit status of a doctor run that met no error: by its worst finding. */
static int status_of(int worst)
{
	return worst >= 3 ? CTL_FINDING_CRITICAL : worst == 2 ? CTL_FINDING_WARNING : CTL_OK;
}

static int by_severity(const void *a, const void *b)
{
	const cJSON *x = *(const cJSON *const *)a, *y = *(const cJSON *const *)b;

	return severity_rank(y) - severity_rank(x);
}

/* Every running process (with --all, exited ones too), the most severe first. */
static int doctor_all(struct ctl *c, bool json, bool all)
{
	const cJSON **v = NULL, *p;
	size_t n = 0;
	int status, error = CTL_OK, worst = 0;
	cJSON *doc;

	status = ctl_request(c, "GET", LP_ROUTE_PROCESSES, NULL, &doc, NULL);
	if (status)
		return status;
	v = calloc((size_t)cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(doc, "processes")) +
			   1,
		   sizeof(*v));
	cJSON_ArrayForEach(p, cJSON_GetObjectItemCaseSensitive(
				      doc, "processes")) if (v &&
							     (all || strcmp(ctl_str(p, "state", ""),
									    "exited"))) v[n++] = p;
	if (v)
		qsort(v, n, sizeof(*v), by_severity);
	/* With --json, stdout holds the JSON and nothing else. */
	if (!n)
		fprintf(json ? stderr : stdout, "no %sLLM processes to examine\n",
			all ? "" : "running ");
	if (json)
		printf("[");
	for (size_t i = 0; i < n; i++) {
		char path[96];

		snprintf(path, sizeof(path), "%s/%.0f/%s", LP_ROUTE_PROCESSES,
			 ctl_num(v[i], "pid", 0), LP_ROUTE_FINDINGS);
		if (json && i)
			printf(",");
		/* A process that exits meanwhile is still reported (it is kept); one forgotten
		 * meanwhile is skipped. */
		status = show_findings(c, path, json, &worst);
		if (status && status != CTL_NOT_TRACKED)
			error = status;
		if (!json && i + 1 < n)
			printf("\n");
	}
	if (json)
		printf("]\n");
	free(v);
	cJSON_Delete(doc);
	return error ? error : status_of(worst);
}

/* Measures the host's memory bandwidth now (it takes the CPUs for a second or two) and
 * waits for the figure, so that the findings can say whether decode is memory-bound. */
static int measure(struct ctl *c)
{
	struct timespec pause = {.tv_sec = 0, .tv_nsec = 200000000};
	int status;
	cJSON *doc;

	status = ctl_request(c, "POST", LP_ROUTE_BANDWIDTH, NULL, &doc, NULL);
	for (int i = 0; status == CTL_OK && i < 150; i++) {
		const char *state = ctl_str(doc, "state", "?");

		if (strcmp(state, "measuring")) {
			const cJSON *last =
				cJSON_GetObjectItemCaseSensitive(doc, "last_measurement");

			if (!strcmp(state, "measured"))
				fprintf(stderr,
					"memory bandwidth: %.1f GB/s%s; in use: %.1f GB/s\n",
					ctl_num(last, "bytes_per_s", 0) / 1e9,
					ctl_true(last, "contended")
						? " while other work ran (a lower bound)"
						: "",
					ctl_num(doc, "bytes_per_s", 0) / 1e9);
			else
				fprintf(stderr, "memory bandwidth: %s %s\n", state,
					ctl_str(doc, "error", ""));
			break;
		}
		cJSON_Delete(doc);
		doc = NULL;
		nanosleep(&pause, NULL);
		status = ctl_request(c, "GET", LP_ROUTE_BANDWIDTH, NULL, &doc, NULL);
	}
	cJSON_Delete(doc);
	return status;
}

static int exec(struct ctl *c, int argc, char **argv)
{
	int opt, status = CTL_OK, pid = 0;
	bool json = false, all = false, bw = false;
	int worst = 0;
	char path[96];

	while ((opt = ctl_getopt(c, &ctl_cmd_doctor, argc, argv, &status)) != -1) {
		if (opt == -2)
			return status;
		if (opt == 'p' && ctl_parse_pid(c, &ctl_cmd_doctor, optarg, &pid))
			return CTL_USAGE;
		json |= opt == 'j';
		all |= opt == 'a';
		bw |= opt == 'm';
	}
	if (bw && (status = measure(c)))
		return status;
	if (!pid)
		return doctor_all(c, json, all);
	if ((status = ctl_process_path(c, &ctl_cmd_doctor, pid, LP_ROUTE_FINDINGS, path,
				       sizeof(path))))
		return status;
	if ((status = show_findings(c, path, json, &worst)))
		return status;
	return status_of(worst);
}

const struct ctl_cmd ctl_cmd_doctor = {
	.name = "doctor",
	.usage = "[--pid N] [--all] [--json] [--measure-bandwidth]",
	.summary = "why tokens/s is low: findings with their evidence and what to do",
	.help = "The daemon's findings for one process, or for every running one (the most "
		"severe first),\njudged over the last 10 to 20 seconds (an exited process: over "
		"its life). Each names the\ncause with the numbers that show it and an action:\n"
		"  oversubscribed        more compute threads than the CPUs it may use (affinity, "
		"cgroup quota)\n"
		"  preempted             other processes take its CPUs, by name and pid\n"
		"  late_thread           one thread runs less and the others wait for it at "
		"barriers\n"
		"  smt                   more threads than physical cores\n"
		"  omp_wait_policy       OpenMP's wait policy against the sleeping or spinning "
		"seen\n"
		"  weights_not_resident  major page faults while generating: weights read from "
		"disk\n"
		"  numa                  threads on other NUMA nodes than the weights' pages\n"
		"  cpu_frequency         a powersave governor or a capped maximum frequency\n"
		"  memory_bound          decode streams its weights near the host's measured "
		"bandwidth\n"
		"  batch_interference    other requests' prompts stall the requests generating "
		"beside them\n"
		"  prefill_contention    prompts that arrive together share their decodes: each "
		"first token waits\n"
		"Every process also gets the memory line (memory-bound or not) and its context.\n\n"
		"Options:\n"
		"  -p, --pid N   one process\n"
		"  -a, --all     exited processes too\n"
		"  -m, --measure-bandwidth  measure the host's memory read bandwidth first (takes\n"
		"                its CPUs for a second or two; llmprofd otherwise waits for quiet\n"
		"                CPUs, and keeps the figure in its state directory)\n"
		"  -j, --json    the API documents GET " LP_ROUTE_PROCESSES
		"/{pid}/" LP_ROUTE_FINDINGS " (a list without --pid), and nothing else\n"
		"The exit status says the worst finding (below), where no error came first.\n\n"
		"Examples:\n"
		"  llmprofctl doctor\n"
		"  llmprofctl doctor --pid 4242 --json | jq '.findings[].rule'\n",
	.shortopt = "p:jam",
	.longopts = opts,
	.exec = exec,
};
