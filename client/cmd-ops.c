// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* llmprofctl ops: what each op did in precise mode, by op, shape, layer, block or node. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llmprofctl.h"

static const struct option opts[] = {
	{"pid", required_argument, NULL, 'p'}, {"by", required_argument, NULL, 'b'},
	{"top", required_argument, NULL, 'n'}, {"sort", required_argument, NULL, 's'},
	{"json", no_argument, NULL, 'j'},      CTL_COMMON_OPTS};

static const char *const bys[] = {"op", "shape", "layer", "block", "node", NULL};
/* Rows by own CPU time, by the longest call, or by time per byte moved (the least
 * efficient first: each node's time over the bytes it reads and writes). */
static const char *const sorts[] = {"cpu", "max", "time-per-byte", NULL};

struct args {
	int by, sort;
	long top;
};

struct group {
	char key[200];
	double instances, calls, ns, oncpu, max, rd, wr, flops;
	bool rd_unknown;
};

/* "mul_mat [1024,8192]q8_0 x [1024,1]f32 -> [8192,1]f32": the daemon's shape text
 * (lp_node_shape) after the op. */
static void node_shape(char *out, size_t n, const cJSON *x)
{
	snprintf(out, n, "%s %s", ctl_str(x, "op", "?"), ctl_str(x, "shape", "?"));
}

static void key_of(char *out, size_t n, const cJSON *x, int by)
{
	const cJSON *layer = cJSON_GetObjectItemCaseSensitive(x, "layer");
	char sh[160];

	switch (by) {
	case 0:
		snprintf(out, n, "%s", ctl_str(x, "op", "?"));
		break;
	case 1:
		node_shape(out, n, x);
		break;
	case 2:
		if (cJSON_IsNumber(layer))
			snprintf(out, n, "layer %.0f", layer->valuedouble);
		else
			snprintf(out, n, "(no layer)");
		break;
	case 3:
		snprintf(out, n, "%s", ctl_str(x, "block", "?"));
		break;
	default:
		node_shape(sh, sizeof(sh), x);
		snprintf(out, n, "%s %s", ctl_str(x, "tensor", ""), sh);
	}
}

static int by_cpu(const void *a, const void *b)
{
	const struct group *x = a, *y = b;

	return x->oncpu < y->oncpu ? 1 : x->oncpu > y->oncpu ? -1 : 0;
}

static int by_max(const void *a, const void *b)
{
	const struct group *x = a, *y = b;

	return x->max < y->max ? 1 : x->max > y->max ? -1 : 0;
}

/* Each thread's mean time in a node over the bytes the node moves; 0 where not known. */
static double per_byte(const struct group *g)
{
	double bytes = g->rd + g->wr;

	return g->rd_unknown || bytes <= 0 || !g->calls ? 0
							: g->ns / g->calls * g->instances / bytes;
}

static int by_per_byte(const void *a, const void *b)
{
	double x = per_byte(a), y = per_byte(b);

	return x < y ? 1 : x > y ? -1 : by_cpu(a, b);
}

static int by_layer(const void *a, const void *b)
{
	const struct group *x = a, *y = b;
	int lx = -1, ly = -1;

	sscanf(x->key, "layer %d", &lx);
	sscanf(y->key, "layer %d", &ly);
	return lx < ly ? -1 : lx > ly;
}

static size_t group(const cJSON *nodes, int by, int sort, struct group **out)
{
	static int (*const cmp[])(const void *, const void *) = {by_cpu, by_max, by_per_byte};
	struct group *g = NULL;
	size_t n = 0;
	const cJSON *x;

	cJSON_ArrayForEach(x, nodes)
	{
		char key[200];
		size_t i;
		const cJSON *rd = cJSON_GetObjectItemCaseSensitive(x, "bytes_read");

		key_of(key, sizeof(key), x, by);
		for (i = 0; i < n && strcmp(g[i].key, key); i++)
			;
		if (i == n) {
			struct group *v = realloc(g, (n + 1) * sizeof(*g));

			if (!v)
				break;
			g = v;
			memset(&g[n], 0, sizeof(g[n]));
			snprintf(g[n].key, sizeof(g[n].key), "%s", key);
			n++;
		}
		g[i].instances += ctl_num(x, "instances", 0);
		g[i].calls += ctl_num(x, "calls", 0);
		g[i].ns += ctl_num(x, "ns", 0);
		g[i].oncpu += ctl_num(x, "oncpu_ns", 0);
		g[i].rd += ctl_num(x, "bytes_read", 0);
		g[i].wr += ctl_num(x, "bytes_written", 0);
		g[i].flops += ctl_num(x, "flops", 0);
		g[i].rd_unknown |= !cJSON_IsNumber(rd);
		if (ctl_num(x, "max_ns", 0) > g[i].max)
			g[i].max = ctl_num(x, "max_ns", 0);
	}
	/* Layers in their order, unless another order is asked for. */
	qsort(g, n, sizeof(*g), by == 2 && sort == 0 ? by_layer : cmp[sort]);
	*out = g;
	return n;
}

/* "  label: a b c", the names as the daemon escaped them; an empty list only if always. */
static void print_names(const char *label, const cJSON *names, bool always)
{
	const cJSON *e;

	if (!always && !cJSON_GetArraySize(names))
		return;
	printf("  %s:", label);
	cJSON_ArrayForEach(e, names) printf(" %s", cJSON_IsString(e) ? e->valuestring : "?");
	printf("\n");
}

static void print_ops(const struct ctl *c, const cJSON *doc, void *arg)
{
	const struct args *a = arg;
	const cJSON *gr = cJSON_GetObjectItemCaseSensitive(ctl_engine_doc(doc), "graph");
	const cJSON *nodes = cJSON_GetObjectItemCaseSensitive(gr, "nodes");
	const cJSON *pt = cJSON_GetObjectItemCaseSensitive(gr, "per_token");
	struct group *g = NULL;
	double total = 0;
	size_t n, i;

	(void)c;
	printf("pid %.0f (%s): ", ctl_num(doc, "pid", 0), ctl_str(doc, "comm", "?"));
	if (!cJSON_IsObject(gr)) {
		printf("not a ggml process\n");
		return;
	}
	if (!strcmp(ctl_str(gr, "tensors", ""), "refused")) {
		printf("its tensors are not read: %s\n", ctl_str(gr, "not_read_because", "?"));
		return;
	}
	if (!cJSON_GetArraySize(nodes)) {
		printf("no node read yet: tensors are read in precise mode ('llmprofctl precise "
		       "--pid %.0f')\n",
		       ctl_num(doc, "pid", 0));
		return;
	}
	printf("tensors read (ggml_tensor: %s), %.0f threads\n", ctl_str(gr, "layout", "?"),
	       ctl_num(gr, "threads", 0));
	print_names("ops read", cJSON_GetObjectItemCaseSensitive(gr, "ops_read"), true);
	print_names("probed, not read", cJSON_GetObjectItemCaseSensitive(gr, "ops_not_read"),
		    false);
	if (ctl_num(pt, "generated", 0))
		printf("  per generated token (%.0f): %.1f nodes of the ops read, %.1f barriers\n",
		       ctl_num(pt, "generated", 0), ctl_num(pt, "probed_nodes", 0),
		       ctl_num(pt, "barriers", 0));
	n = group(nodes, a->by, a->sort, &g);
	for (i = 0; i < n; i++)
		total += g[i].oncpu;
	printf("\n%7s %8s %6s %8s %8s %9s %8s %8s %8s  %s\n", "NODES", "CPU", "SHARE", "WALL/N",
	       "MAX", "BYTES/N", "GB/S", "GFLOP/S", "NS/KIB", bys[a->by]);
	for (i = 0; i < n && (long)i < a->top; i++) {
		double wall = g[i].calls ? g[i].ns / g[i].calls : 0;
		double per = g[i].instances ? 1 / g[i].instances : 0;
		/* each thread's mean time in a node: its wall time when the threads run it
		 * side by side; bytes and FLOPs over that, for every node */
		double t = wall * g[i].instances;
		char b[4][24], gbs[16] = "?", gfl[16] = "-", nsk[16] = "?";

		if (!g[i].rd_unknown && t > 0)
			snprintf(gbs, sizeof(gbs), "%.2f", (g[i].rd + g[i].wr) / t);
		if (g[i].flops > 0 && t > 0)
			snprintf(gfl, sizeof(gfl), "%.2f", g[i].flops / t);
		if (per_byte(&g[i]) > 0)
			snprintf(nsk, sizeof(nsk), "%.1f", 1024 * per_byte(&g[i]));
		printf("%7.0f %8s %5.1f%% %8s %8s %9s %8s %8s %8s  %s\n", g[i].instances,
		       ctl_fmt_dur(b[0], 24, g[i].oncpu), total ? 100 * g[i].oncpu / total : 0,
		       ctl_fmt_dur(b[1], 24, wall), ctl_fmt_dur(b[2], 24, g[i].max),
		       g[i].rd_unknown ? "?" : ctl_fmt_bytes(b[3], 24, (g[i].rd + g[i].wr) * per),
		       gbs, gfl, nsk, g[i].key);
	}
	if ((long)n > a->top)
		printf("  ... %zu more (--top)\n", n - (size_t)a->top);
	free(g);
}

static int exec(struct ctl *c, int argc, char **argv)
{
	struct args a = {.by = 0, .sort = 0, .top = 20};
	int pid = 0, opt, status = CTL_OK;
	bool json = false;
	char path[96];

	while ((opt = ctl_getopt(c, &ctl_cmd_ops, argc, argv, &status)) != -1) {
		if (opt == -2)
			return status;
		if (opt == 'p' && ctl_parse_pid(c, &ctl_cmd_ops, optarg, &pid))
			return CTL_USAGE;
		if (opt == 'n' &&
		    ctl_parse_count(c, &ctl_cmd_ops, "--top", optarg, 1, 100000, &a.top))
			return CTL_USAGE;
		if (opt == 'b') {
			for (a.by = 0; bys[a.by] && strcmp(bys[a.by], optarg); a.by++)
				;
			if (!bys[a.by])
				return ctl_usage_error(
					c, &ctl_cmd_ops,
					"--by takes op, shape, layer, block or node");
		}
		if (opt == 's') {
			for (a.sort = 0; sorts[a.sort] && strcmp(sorts[a.sort], optarg); a.sort++)
				;
			if (!sorts[a.sort])
				return ctl_usage_error(c, &ctl_cmd_ops,
						       "--sort takes cpu, max or time-per-byte");
		}
		json |= opt == 'j';
	}
	if (ctl_process_path(c, &ctl_cmd_ops, pid, NULL, path, sizeof(path)))
		return CTL_USAGE;
	return ctl_show(c, path, json, print_ops, &a);
}

const struct ctl_cmd ctl_cmd_ops = {
	.name = "ops",
	.usage = "--pid PID [--by op|shape|layer|block|node] [--sort cpu|max|time-per-byte] "
		 "[--top N] [--json]",
	.summary = "what each op did in precise mode: shapes, bytes, GB/s, layers, blocks",
	.help = "Prints the graph nodes precise mode read the tensors of (llmprofctl precise, or\n"
		"--precise-duty): per op, shape, layer, model block or node, the nodes evaluated, "
		"their\nown CPU time (every thread's, less barriers and off-CPU time) and share, "
		"each thread's\nmean time in one (WALL/N) and the longest call, the bytes a node "
		"reads and writes, the\nGB/s and GFLOP/s over WALL/N, and NS/KIB: WALL/N per KiB "
		"moved. Layers and blocks come\nfrom the names llama.cpp gives its nodes "
		"(\"ffn_up-3\"); BYTES/N is ? where a source is a view\nwhose extent is not "
		"known.\n\n"
		"Options:\n"
		"  -p, --pid PID   the process\n"
		"  -b, --by KEY    op (default), shape, layer, block or node\n"
		"  -s, --sort KEY  cpu (own CPU time, the default; layers in order), max (the\n"
		"                  longest call first) or time-per-byte (the least efficient\n"
		"                  first: NS/KIB; rows whose bytes are not known last)\n"
		"  -n, --top N     rows printed (default 20)\n"
		"  -j, --json      the process's document (GET /v1/processes/PID); its nodes are\n"
		"                  under .ggml.graph\n\n"
		"Examples:\n"
		"  llmprofctl ops --pid 4242 --by block\n"
		"  llmprofctl ops --pid 4242 --by shape --top 5\n"
		"  llmprofctl ops --pid 4242 --by node --sort max --top 5\n"
		"  llmprofctl ops --pid 4242 --json | jq '.ggml.graph.per_token'\n",
	.shortopt = "p:b:s:n:j",
	.longopts = opts,
	.exec = exec,
};
