// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* llmprofctl flame: a flame graph of one process's samples over a window: an SVG to open in
 * a browser, folded stacks, a pprof profile, or the hottest functions as text. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "flame.h"
#include "llmprof/protocol.h"
#include "llmprofctl.h"

static const struct option opts[] = {{"pid", required_argument, NULL, 'p'},
				     {"seconds", required_argument, NULL, 's'},
				     {"output", required_argument, NULL, 'o'},
				     {"by", required_argument, NULL, 'b'},
				     {"phase", required_argument, NULL, 'P'},
				     {"top", required_argument, NULL, 'n'},
				     CTL_COMMON_OPTS};

enum kind { TOP, SVG, FOLDED, PPROF };

struct flame_opts {
	int pid;
	double seconds;
	const char *out, *phase;
	bool by_group;
	long top;
	enum kind kind;
};

static bool ends(const char *s, const char *suffix)
{
	size_t n = strlen(s), k = strlen(suffix);

	return n >= k && !strcmp(s + n - k, suffix);
}

static int write_file(const struct ctl *c, const char *path, const void *p, size_t n)
{
	FILE *f = fopen(path, "w");

	if (!f || fwrite(p, 1, n, f) != n || fclose(f)) {
		fprintf(stderr, "%s: cannot write %s: %s\n", c->prog, path, strerror(errno));
		if (f)
			fclose(f);
		return CTL_DAEMON;
	}
	return CTL_OK;
}

/* "pid 4242 (llama-simple), model m.gguf": what the title says of the process. */
static void describe(struct ctl *c, int pid, char *out, size_t n, double *hz)
{
	char path[64];
	cJSON *doc = NULL;
	const cJSON *model;

	snprintf(out, n, "pid %d", pid);
	snprintf(path, sizeof(path), "%s/%d", LP_ROUTE_PROCESSES, pid);
	if (ctl_request(c, "GET", path, NULL, &doc, NULL) == CTL_OK) {
		model = cJSON_GetObjectItemCaseSensitive(doc, "model");
		snprintf(out, n, "pid %d (%s)%s%s", pid, ctl_str(doc, "comm", "?"),
			 cJSON_IsObject(model) ? ", model " : "",
			 cJSON_IsObject(model) ? ctl_str(model, "name", "?") : "");
		*hz = ctl_num(cJSON_GetObjectItemCaseSensitive(ctl_engine_doc(doc), "sampled"),
			      "hz", 0);
	}
	cJSON_Delete(doc);
}

static int exec(struct ctl *c, int argc, char **argv)
{
	struct flame_opts fo = {.seconds = 10, .top = 20};
	struct ctl_response res;
	struct flame f = {0};
	char path[256], who[512], title[768], sub[256];
	double hz = 0;
	int opt, status = CTL_OK, r;
	size_t bad = 0;

	while ((opt = ctl_getopt(c, &ctl_cmd_flame, argc, argv, &status)) != -1) {
		if (opt == -2)
			return status;
		if (opt == 'p' && ctl_parse_pid(c, &ctl_cmd_flame, optarg, &fo.pid))
			return CTL_USAGE;
		if (opt == 's' && ctl_parse_seconds(c, &ctl_cmd_flame, "--seconds", optarg, 1,
						    LP_PROFILE_MAX_SECONDS, &fo.seconds))
			return CTL_USAGE;
		if (opt == 'n' &&
		    ctl_parse_count(c, &ctl_cmd_flame, "--top", optarg, 1, 100000, &fo.top))
			return CTL_USAGE;
		if (opt == 'o')
			fo.out = optarg;
		if (opt == 'b') {
			if (strcmp(optarg, "op_group"))
				return ctl_usage_error(c, &ctl_cmd_flame, "--by takes op_group");
			fo.by_group = true;
		}
		if (opt == 'P') {
			if (strcmp(optarg, "prompt") && strcmp(optarg, "generation") &&
			    strcmp(optarg, "outside"))
				return ctl_usage_error(
					c, &ctl_cmd_flame,
					"--phase takes prompt, generation or outside");
			fo.phase = optarg;
		}
	}
	if (!fo.pid)
		return ctl_usage_error(c, &ctl_cmd_flame, "--pid is required");
	fo.kind = !fo.out		    ? TOP
		  : ends(fo.out, ".svg")    ? SVG
		  : ends(fo.out, ".folded") ? FOLDED
		  : ends(fo.out, ".pb.gz")  ? PPROF
		  : ends(fo.out, ".pprof")  ? PPROF
					    : (enum kind) - 1;
	if ((int)fo.kind < 0)
		return ctl_usage_error(c, &ctl_cmd_flame,
				       "-o: FILE ends in .svg, .folded or .pb.gz (what it writes)");
	describe(c, fo.pid, who, sizeof(who), &hz);
	/* The SVG and the text colour and count by op group: the stacks come rooted at it. */
	snprintf(path, sizeof(path), "%s?seconds=%g&pid=%d%s%s%s",
		 fo.kind == PPROF ? LP_ROUTE_PPROF : LP_ROUTE_FOLDED, fo.seconds, fo.pid,
		 fo.kind == TOP || fo.kind == SVG || fo.by_group ? "&by=op_group" : "",
		 fo.phase ? "&phase=" : "", fo.phase ? fo.phase : "");
	fprintf(stderr, "%s: sampling %s for %g s...\n", c->prog, who, fo.seconds);
	status = ctl_request_raw(c, path, fo.seconds + c->timeout, &res);
	if (status)
		return status;
	if (fo.kind == PPROF || fo.kind == FOLDED) {
		status = write_file(c, fo.out, res.body, res.len);
		if (!status)
			fprintf(stderr, "%s: wrote %s (%zu bytes)%s\n", c->prog, fo.out, res.len,
				fo.kind == PPROF ? "; go tool pprof -http=: opens it" : "");
		ctl_response_free(&res);
		return status;
	}
	r = flame_parse(&f, res.body, res.len, fo.by_group, &bad);
	ctl_response_free(&res);
	if (r < 0) {
		fprintf(stderr, "%s: llmprofd's folded stacks are not readable (line %zu)\n",
			c->prog, bad);
		flame_free(&f);
		return CTL_DAEMON;
	}
	snprintf(title, sizeof(title), "%s: %g s%s%s", who, fo.seconds, fo.phase ? ", phase " : "",
		 fo.phase ? fo.phase : "");
	snprintf(sub, sizeof(sub), "%llu samples at %g Hz per CPU; click a frame to zoom",
		 (unsigned long long)f.root.total, hz);
	if (fo.kind == TOP) {
		printf("%s\n%llu samples at %g Hz per CPU\n", title,
		       (unsigned long long)f.root.total, hz);
		flame_write_top(&f, (size_t)fo.top, stdout);
	} else {
		FILE *out = fopen(fo.out, "w");

		if (!out || flame_write_svg(&f, &(struct flame_svg){title, sub, 0}, out) < 0 ||
		    fclose(out)) {
			fprintf(stderr, "%s: cannot write %s: %s\n", c->prog, fo.out,
				strerror(errno));
			status = CTL_DAEMON;
		} else {
			fprintf(stderr, "%s: wrote %s: %llu samples; open it in a browser\n",
				c->prog, fo.out, (unsigned long long)f.root.total);
		}
	}
	flame_free(&f);
	return status;
}

const struct ctl_cmd ctl_cmd_flame = {
	.name = "flame",
	.usage = "--pid PID [--seconds S] [-o FILE] [--by op_group] "
		 "[--phase prompt|generation|outside] [--top N]",
	.summary = "a flame graph of one process's samples: SVG, folded, pprof or text",
	.help = "Collects the call stacks of the process's cpu-clock samples for S seconds (the\n"
		"sampler that always runs: nothing is attached for it), each with its op group "
		"and\n"
		"phase, and writes by FILE's extension: .svg a flame graph to open in a browser\n"
		"(frames coloured by op group, click to zoom, search), .folded stackcollapse's\n"
		"lines for flamegraph.pl, inferno or speedscope, .pb.gz a pprof profile (go tool\n"
		"pprof, Parca, Pyroscope). Without -o, the hottest functions as text, as pprof\n"
		"-top lists them, with each one's op group. Names are the objects' symbols\n"
		"(demangled as perf prints them), or object+0xoffset where there are none.\n\n"
		"Options:\n"
		"  -p, --pid PID      the process\n"
		"  -s, --seconds S    for S seconds (default 10, at most 300)\n"
		"  -o, --output FILE  .svg, .folded or .pb.gz\n"
		"  -b, --by op_group  root each stack at its op group (matmul, attention, ...,\n"
		"                     sync, outside_ops)\n"
		"  -P, --phase PHASE  only samples in prompt or generation decodes, or outside\n"
		"                     llama_decode\n"
		"  -n, --top N        functions listed without -o (default 20)\n\n"
		"Examples:\n"
		"  llmprofctl flame --pid 4242\n"
		"  llmprofctl flame --pid 4242 --seconds 30 -o decode.svg --phase generation\n"
		"  llmprofctl flame --pid 4242 -o decode.pb.gz && go tool pprof -top "
		"decode.pb.gz\n",
	.shortopt = "p:s:o:b:P:n:",
	.longopts = opts,
	.exec = exec,
};
