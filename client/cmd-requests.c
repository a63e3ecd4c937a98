// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* llmprofctl requests: one process's requests, from llama_decode's batches. */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "llmprof/protocol.h"
#include "llmprofctl.h"

static const struct option opts[] = {{"pid", required_argument, NULL, 'p'},
				     {"json", no_argument, NULL, 'j'},
				     {"last", required_argument, NULL, 'n'},
				     CTL_COMMON_OPTS};

/* A duration field in ns, or "-" where it is null. */
static const char *dur(char *buf, size_t n, const cJSON *o, const char *k)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);

	if (!cJSON_IsNumber(v)) {
		snprintf(buf, n, "-");
		return buf;
	}
	return ctl_fmt_dur(buf, n, v->valuedouble);
}

static void quantile_row(const cJSON *kept, const char *k, const char *label)
{
	const cJSON *q = cJSON_GetObjectItemCaseSensitive(kept, k);
	char b[4][16];

	if (!cJSON_IsObject(q)) {
		printf("  %-22s %9s\n", label, "-");
		return;
	}
	printf("  %-22s %9s %9s %9s %9s\n", label, dur(b[0], 16, q, "p50"), dur(b[1], 16, q, "p90"),
	       dur(b[2], 16, q, "p99"), dur(b[3], 16, q, "max"));
}

static void request_row(const cJSON *q)
{
	char b[6][16], reused[16];
	const cJSON *r = cJSON_GetObjectItemCaseSensitive(q, "reused_tokens");

	if (cJSON_IsNumber(r))
		snprintf(reused, sizeof(reused), "%.0f", r->valuedouble);
	else
		snprintf(reused, sizeof(reused), "?");
	printf("%6.0f %4.0f %7.0f %6s %6.0f %8s %8s %8s %8s %8s %4.1f  %s\n", ctl_num(q, "id", 0),
	       ctl_num(q, "seq", 0), ctl_num(q, "prompt_tokens", 0), reused,
	       ctl_num(q, "output_tokens", 0), dur(b[0], 16, q, "ttft_ns"),
	       dur(b[1], 16, q, "prefill_ns"), dur(b[2], 16, q, "decode_ns"),
	       dur(b[3], 16, q, "tpot_ns"), dur(b[4], 16, q, "e2e_ns"),
	       ctl_num(q, "mean_occupancy", 0), ctl_str(q, "ended_by", "?"));
}

static void print_requests(const struct ctl *c, const cJSON *doc, void *arg)
{
	const cJSON *rq = cJSON_GetObjectItemCaseSensitive(doc, "requests"), *e;
	const cJSON *kept = cJSON_GetObjectItemCaseSensitive(rq, "kept");
	long last = *(const long *)arg, i = 0;
	const char *why = ctl_str(rq, "unavailable", NULL);

	(void)c;
	printf("pid %.0f (%s): ", ctl_num(doc, "pid", 0), ctl_str(doc, "comm", "?"));
	if (why && !cJSON_GetObjectItemCaseSensitive(rq, "requests")) {
		printf("no requests: %s\n", why);
		return;
	}
	printf("%.0f requests over, %.0f in flight (from %s)\n", ctl_num(rq, "requests", 0),
	       ctl_num(rq, "in_flight_now", 0), ctl_str(rq, "source", "?"));
	printf("  tokens: %.0f of prompt, %.0f generated, %.0f reused from the cache\n",
	       ctl_num(rq, "prompt_tokens", 0), ctl_num(rq, "output_tokens", 0),
	       ctl_num(rq, "reused_tokens", 0));
	printf("  decodes: %.0f", ctl_num(rq, "decodes", 0));
	if (ctl_num(rq, "decodes_failed", 0))
		printf(", %.0f failed", ctl_num(rq, "decodes_failed", 0));
	if (ctl_num(rq, "decodes_unread", 0))
		printf(", %.0f whose batch could not be read", ctl_num(rq, "decodes_unread", 0));
	printf("; sequences each carried:");
	cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(rq, "occupancy"))
		printf(" %.0f%s in %.0f", ctl_num(e, "sequences", 0),
		       ctl_true(e, "or_more") ? "+" : "", ctl_num(e, "decodes", 0));
	printf("\n");
	cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(rq, "flags"))
	{
		const char *f = cJSON_IsString(e) ? e->valuestring : "";

		if (!strcmp(f, "no_positions"))
			printf("  note: some batches gave no positions (llama.cpp placed the "
			       "tokens): "
			       "tokens reused from the cache are unknown there (?)\n");
		else if (!strcmp(f, "sequences_full") || !strcmp(f, "truncated"))
			printf("  note: some batches held more sequences or tokens than are read: "
			       "their "
			       "requests are incomplete\n");
	}
	if (cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(rq, "not_measured"),
					     "queue_wait"))
		printf("  not measured: a request's wait from its arrival to its first decode "
		       "(time to first token starts there)\n");
	if (!ctl_num(kept, "requests", 0))
		return;
	printf("\n  over the last %.0f requests %9s %9s %9s %9s\n", ctl_num(kept, "requests", 0),
	       "p50", "p90", "p99", "max");
	quantile_row(kept, "ttft_ns", "time to first token");
	quantile_row(kept, "tpot_ns", "time per output token");
	quantile_row(kept, "e2e_ns", "end to end");
	printf("\n%6s %4s %7s %6s %6s %8s %8s %8s %8s %8s %4s  %s\n", "ID", "SEQ", "PROMPT",
	       "REUSED", "OUT", "TTFT", "PREFILL", "DECODE", "TPOT", "E2E", "OCC", "ENDED");
	cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(rq, "in_flight")) request_row(e);
	cJSON_ArrayForEach(e, cJSON_GetObjectItemCaseSensitive(rq, "last"))
	{
		if (i++ >= last)
			break;
		request_row(e);
	}
}

static int exec(struct ctl *c, int argc, char **argv)
{
	int pid = 0, opt, status = CTL_OK;
	bool json = false;
	long last = 20;
	char path[96];

	while ((opt = ctl_getopt(c, &ctl_cmd_requests, argc, argv, &status)) != -1) {
		if (opt == -2)
			return status;
		if (opt == 'p' && ctl_parse_pid(c, &ctl_cmd_requests, optarg, &pid))
			return CTL_USAGE;
		if (opt == 'n' &&
		    ctl_parse_count(c, &ctl_cmd_requests, "--last", optarg, 0, 100000, &last))
			return CTL_USAGE;
		json |= opt == 'j';
	}
	if (ctl_process_path(c, &ctl_cmd_requests, pid, LP_ROUTE_REQUESTS, path, sizeof(path)))
		return CTL_USAGE;
	return ctl_show(c, path, json, print_requests, &last);
}

const struct ctl_cmd ctl_cmd_requests = {
	.name = "requests",
	.usage = "--pid PID [--last N] [--json]",
	.summary = "one process's requests: time to first token, per output token, end to end",
	.help = "Prints the requests the daemon followed in the process's llama_decode batches "
		"(any llama.cpp\nserver, binding or app): tokens of prompt, reused from the cache "
		"and generated, time to\nfirst token (the first decode's entry to the return of "
		"the decode of its first output), time\nper output token, end to end, and the "
		"sequences each decode carried; percentiles over the\nrequests kept (the last "
		"256), then the requests in flight and the newest over.\n\n"
		"Options:\n"
		"  -p, --pid PID   the process\n"
		"  -n, --last N    requests listed (default 20; 0: none)\n"
		"  -j, --json      the API's document (GET /v1/processes/PID/requests)\n\n"
		"Examples:\n"
		"  llmprofctl requests --pid 4242\n"
		"  llmprofctl requests --pid 4242 --json | jq '.requests.kept.ttft_ns.p99'\n",
	.shortopt = "p:jn:",
	.longopts = opts,
	.exec = exec,
};
