// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* The settings of llmprofd: one table of options (options.h) serves the command line
 * (getopt_long), the configuration file (inih: "name = value" lines, optionally in
 * [sections]), --help, the status's description and the reload. */
#include "options.h"

#include <errno.h>
#include <getopt.h>
#include <ini.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include <linux/types.h>

#include "llmprof/abi.h"
#include "llmprof/protocol.h"
#include "base/log.h"
#include "base/procfs.h"

/* The choices of LP_OPT_CHOICE options, in their enums' order (config.h). */
static const char *const futex_src[] = {"auto", "tracepoint", "raw", "off", "sched", NULL};
static const char *const mmap_src[] = {"auto", "lock", "tracepoint", "raw", NULL};
static const char *const uprobe_links[] = {"auto", "multi", "single", NULL};
static const char *const samplers[] = {"cpu", "thread", NULL};
static const char *const metrics_labels[] = {"pid", "workload", NULL};
static const char *const metrics_buckets[] = {"exact", "coarse", NULL};

static int parse_u32(const char *s, uint32_t min, uint32_t max, uint32_t *out)
{
	unsigned long v;
	char *end;

	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || end == s || *end || *s == '-' || v < min || v > max)
		return -EINVAL;
	*out = (uint32_t)v;
	return 0;
}

static int parse_double(const char *s, double min, double max, double *out)
{
	char *end;

	errno = 0;
	*out = strtod(s, &end);
	return errno || end == s || *end || !(*out >= min) || !(*out <= max) ? -EINVAL : 0;
}

/* Keeps p for the config's lifetime; returns it, or NULL (and frees it) without memory. */
static void *keep(struct lp_config_store *st, void *p)
{
	void **v;

	if (!p)
		return NULL;
	v = realloc(st->v, (st->n + 1) * sizeof(*v));
	if (!v) {
		free(p);
		return NULL;
	}
	st->v = v;
	st->v[st->n++] = p;
	return p;
}

void lp_config_store_free(struct lp_config_store *s)
{
	for (size_t i = 0; i < s->n; i++)
		free(s->v[i]);
	free(s->v);
	s->v = NULL;
	s->n = 0;
}

/* Appends item to a growing array kept in the store (the old one is dropped there). */
static int push(struct lp_config_store *st, void *arrp, size_t *n, size_t size, const void *item)
{
	void **arr = arrp;
	void *a = malloc((*n + 1) * size);

	if (!a || !keep(st, a))
		return -ENOMEM;
	if (*n)
		memcpy(a, *arr, *n * size);
	memcpy((char *)a + *n * size, item, size);
	*arr = a;
	(*n)++;
	return 0;
}

/* "a,b*,c" -> {"a", "b*", "c", NULL}, in one allocation. */
static char **split_list(const char *s)
{
	size_t n = 1, len = strlen(s);
	char **v, *copy;

	for (const char *p = s; *p; p++)
		n += *p == ',';
	v = malloc((n + 1) * sizeof(*v) + len + 1);
	if (!v)
		return NULL;
	copy = (char *)(v + n + 1);
	memcpy(copy, s, len + 1);
	n = 0;
	for (char *tok = strtok(copy, ", \t"); tok; tok = strtok(NULL, ", \t"))
		v[n++] = tok;
	v[n] = NULL;
	return v;
}

static void *field(const struct lp_option *o, struct lp_config *cfg)
{
	return (char *)cfg + o->off;
}

static const void *cfield(const struct lp_option *o, const struct lp_config *cfg)
{
	return (const char *)cfg + o->off;
}

/* "a, b or c" */
static void choice_list(const char *const *names, char *out, size_t size)
{
	size_t n = 0, len;

	while (names[n])
		n++;
	out[0] = '\0';
	for (size_t i = 0; i < n; i++) {
		len = strlen(out);
		snprintf(out + len, size - len, "%s%s",
			 i == 0	      ? ""
			 : i + 1 == n ? " or "
				      : ", ",
			 names[i]);
	}
}

/* Parses arg by the option's type into cfg; name is how the user spelled the option
 * ("--pid" or "file: pid"), for the message of a bad value. */
static int set_value(const struct lp_option *o, struct lp_config *cfg, struct lp_config_store *st,
		     const char *name, const char *arg)
{
	char list[128];
	char **v, *s;
	int r = 0;

	if (o->parse)
		return o->parse(o, cfg, st, name, arg);
	switch (o->type) {
	case LP_OPT_FLAG:
		*(bool *)field(o, cfg) = true;
		break;
	case LP_OPT_CLEAR:
		*(bool *)field(o, cfg) = false;
		break;
	case LP_OPT_U32:
		if (parse_u32(arg, (uint32_t)o->min, (uint32_t)o->max, field(o, cfg)) < 0) {
			log_error("%s: '%s' is not a number from %u to %u", name, arg,
				  (uint32_t)o->min, (uint32_t)o->max);
			return -EINVAL;
		}
		break;
	case LP_OPT_DOUBLE:
		if (parse_double(arg, o->min, o->max, field(o, cfg)) < 0) {
			log_error("%s: '%s' is not a number from %.15g to %.15g", name, arg, o->min,
				  o->max);
			return -EINVAL;
		}
		break;
	case LP_OPT_STRING:
		s = keep(st, strdup((o->flags & LP_OF_OFF) && strcmp(arg, "off") == 0 ? "" : arg));
		if (!s)
			return -ENOMEM;
		*(const char **)field(o, cfg) = s;
		break;
	case LP_OPT_CHOICE:
		for (int i = 0; o->choices[i]; i++)
			if (strcmp(arg, o->choices[i]) == 0) {
				*(int *)field(o, cfg) = i;
				goto checked;
			}
		choice_list(o->choices, list, sizeof(list));
		log_error("%s: '%s' is not %s", name, arg, list);
		return -EINVAL;
	case LP_OPT_LIST:
		if (!(v = keep(st, split_list(arg))))
			return -ENOMEM;
		*(const char *const **)field(o, cfg) = (const char *const *)v;
		break;
	case LP_OPT_STRS:
		if (!(s = keep(st, strdup(arg))))
			return -ENOMEM;
		r = push(st, field(o, cfg), (size_t *)((char *)cfg + o->count_off), sizeof(s), &s);
		break;
	case LP_OPT_CUSTOM:
	case LP_OPT_ACTION:
		break;
	}
checked:
	if (r == 0 && o->check)
		r = o->check(o, cfg, name, arg);
	return r;
}

/* Custom parsers and checks, named after their options. */

static int parse_pid(const struct lp_option *o, struct lp_config *cfg, struct lp_config_store *st,
		     const char *name, const char *arg)
{
	pid_t pid;

	(void)o;
	if (lp_parse_pid(arg, &pid) < 0) {
		log_error("%s: '%s' is not a process id", name, arg);
		return -EINVAL;
	}
	return push(st, &cfg->pids, &cfg->npids, sizeof(pid), &pid);
}

static void describe_pid(const struct lp_option *o, const struct lp_config *cfg, cJSON *out)
{
	cJSON *a = cJSON_AddArrayToObject(out, o->name);

	for (size_t i = 0; i < cfg->npids; i++)
		cJSON_AddItemToArray(a, cJSON_CreateNumber(cfg->pids[i]));
}

static int check_comm(const struct lp_option *o, struct lp_config *cfg, const char *name,
		      const char *arg)
{
	(void)o;
	if (strlen(arg) == 0 || strlen(arg) > 15) {
		cfg->ncomms--;
		log_error("%s: '%s' cannot be a comm (1 to 15 characters)", name, arg);
		return -EINVAL;
	}
	return 0;
}

/* The kernel wants a power of two, at least a page. */
static int parse_ringbuf(const struct lp_option *o, struct lp_config *cfg,
			 struct lp_config_store *st, const char *name, const char *arg)
{
	uint32_t kib;

	(void)st;
	if (parse_u32(arg, (uint32_t)o->min, (uint32_t)o->max, &kib) < 0 || (kib & (kib - 1))) {
		log_error("%s: '%s' is not a power of two from %u to %u", name, arg,
			  (uint32_t)o->min, (uint32_t)o->max);
		return -EINVAL;
	}
	cfg->ringbuf_bytes = kib << 10;
	return 0;
}

static void describe_ringbuf(const struct lp_option *o, const struct lp_config *cfg, cJSON *out)
{
	cJSON_AddNumberToObject(out, o->name, cfg->ringbuf_bytes >> 10);
}

static int parse_profile_ringbuf(const struct lp_option *o, struct lp_config *cfg,
				 struct lp_config_store *st, const char *name, const char *arg)
{
	uint32_t bytes = cfg->ringbuf_bytes;
	int r = parse_ringbuf(o, cfg, st, name, arg);

	cfg->profile_ringbuf_bytes = cfg->ringbuf_bytes;
	cfg->ringbuf_bytes = bytes;
	return r;
}

static void describe_profile_ringbuf(const struct lp_option *o, const struct lp_config *cfg,
				     cJSON *out)
{
	cJSON_AddNumberToObject(out, o->name, cfg->profile_ringbuf_bytes >> 10);
}

/* The cgroup as /proc/PID/cgroup names it: given so, or as its directory under the unified
 * hierarchy's mount ("/sys/fs/cgroup/system.slice/x.service"). */
static int parse_discover_cgroup(const struct lp_option *o, struct lp_config *cfg,
				 struct lp_config_store *st, const char *name, const char *arg)
{
	char mnt[4096], *s;
	size_t n, m;

	(void)o;
	if (lp_cgroup2_mount(mnt, sizeof(mnt)) < 0) {
		log_error("%s: no unified (v2) cgroup hierarchy is mounted here", name);
		return -ENOENT;
	}
	m = strlen(mnt);
	if (strncmp(arg, mnt, m) == 0 && (arg[m] == '/' || arg[m] == '\0'))
		arg += m;
	if (!(s = keep(st, malloc(strlen(arg) + 2))))
		return -ENOMEM;
	snprintf(s, strlen(arg) + 2, "%s%s", arg[0] == '/' ? "" : "/", arg);
	for (n = strlen(s); n > 1 && s[n - 1] == '/'; n--)
		s[n - 1] = '\0';
	if (strstr(s, "/../") || strstr(s, "/./") || (n >= 3 && strcmp(s + n - 3, "/..") == 0)) {
		log_error("%s: '%s': give the cgroup's path without . or ..", name, arg);
		return -EINVAL;
	}
	cfg->discover_cgroup = s;
	return 0;
}

static int check_precise_ops(const struct lp_option *o, struct lp_config *cfg, const char *name,
			     const char *arg)
{
	(void)o;
	(void)arg;
	for (const char *const *p = cfg->precise_ops; *p; p++)
		if (!**p || strspn(*p, "abcdefghijklmnopqrstuvwxyz"
				       "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_:") != strlen(*p)) {
			log_error("%s: '%s' is not an op name (letters, digits, '_' and ':', as "
				  "the process document's ops name them: mul_mat, "
				  "flash_attn_ext, aten::mm)",
				  name, *p);
			return -EINVAL;
		}
	return 0;
}

static int check_socket(const struct lp_option *o, struct lp_config *cfg, const char *name,
			const char *arg)
{
	(void)o;
	if (cfg->socket_path[0] != '/') {
		log_error("%s: '%s' is not an absolute path", name, arg);
		return -EINVAL;
	}
	return 0;
}

static int parse_socket_mode(const struct lp_option *o, struct lp_config *cfg,
			     struct lp_config_store *st, const char *name, const char *arg)
{
	unsigned long v;
	char *end;

	(void)o;
	(void)st;
	errno = 0;
	v = strtoul(arg, &end, 8);
	if (errno || end == arg || *end || v > 0777) {
		log_error("%s: '%s' is not an octal mode from 0 to 0777, such as 0660", name, arg);
		return -EINVAL;
	}
	cfg->socket_mode = (uint32_t)v;
	return 0;
}

static void describe_socket_mode(const struct lp_option *o, const struct lp_config *cfg, cJSON *out)
{
	char mode[8];

	snprintf(mode, sizeof(mode), "%04o", cfg->socket_mode);
	cJSON_AddStringToObject(out, o->name, mode);
}

static int check_checkpoint(const struct lp_option *o, struct lp_config *cfg, const char *name,
			    const char *arg)
{
	if (cfg->checkpoint > 0 && cfg->checkpoint < 1) {
		log_error("%s: '%s' is not 0 or a number of seconds from 1 to %.15g", name, arg,
			  o->max);
		return -EINVAL;
	}
	return 0;
}

static void describe_config(const struct lp_option *o, const struct lp_config *cfg, cJSON *out)
{
	cJSON_AddStringToObject(out, o->name, cfg->config_path ? cfg->config_path : LP_CONFIG_PATH);
}

#define OFF(f) offsetof(struct lp_config, f)
#define SYMS(cls) OFF(symbols[cls])

/* Every option, in --help's order. */
static const struct lp_option options[] = {
	/* Which processes */
	{"pid", 'p', .arg = "PID", .parse = parse_pid, .describe = describe_pid,
	 .section = "Which processes: every process that maps one of the matmul functions (ggml),\n"
		    "also those that start or dlopen their ggml backend later, and:",
	 .help = "track this process (repeatable)"},
	{"comm", 'c', .arg = "NAME", .type = LP_OPT_STRS, .off = OFF(comms),
	 .count_off = OFF(ncomms), .check = check_comm,
	 .help = "track processes whose comm is NAME, also those that start later (repeatable)"},
	{"exe", 'e', .arg = "GLOB", .type = LP_OPT_STRS, .off = OFF(exes), .count_off = OFF(nexes),
	 .help = "track processes whose executable path matches GLOB (repeatable)"},
	{"no-discover", .type = LP_OPT_CLEAR, .off = OFF(discover),
	 .help = "track only those, not every ggml process"},
	{"discover-cgroup", .arg = "PATH", .type = LP_OPT_STRING, .off = OFF(discover_cgroup),
	 .parse = parse_discover_cgroup,
	 .help = "discover ggml processes only in this cgroup (v2) and below: a service, a "
		 "slice, a container"},

	/* ggml */
	{"matmul-symbols", .arg = "LIST", .type = LP_OPT_LIST, .off = SYMS(LP_SYM_MATMUL),
	 /* The extra buffer types' compute_forward (ggml::cpu::<type>::...::compute_forward:
	  * AMX, repack) computes MUL_MAT and MUL_MAT_ID from weights it laid out itself,
	  * instead of ggml_compute_forward_mul_mat: without it, precise mode counted no
	  * matmul there. */
	 .def = "ggml_compute_forward_mul_mat,ggml_compute_forward_mul_mat_id,iqk_mul_mat,"
		"iqk_mul_mat_4d,iqk_mul_mat_moe,_ZN4ggml3cpu*15compute_forwardE*",
	 .section =
		 "ggml (LIST: comma-separated function names or fnmatch globs, mangled for C++):",
	 .help = "functions whose mapping makes a process an LLM process, and the matmul group's "
		 "(the last one: AMX and repacked weights)"},
	{"barrier-symbols", .arg = "LIST", .type = LP_OPT_LIST, .off = SYMS(LP_SYM_BARRIER),
	 .def = "ggml_barrier,GOMP_barrier,__kmpc_barrier",
	 .help = "barriers: time in them is sync"},
	{"decode-symbols", .arg = "LIST", .type = LP_OPT_LIST, .off = SYMS(LP_SYM_DECODE),
	 .def = "llama_decode", .help = "the decode entry points: tokens, phases and requests"},
	/* Plain and C++-mangled op functions and their helpers; the extra buffer types'. */
	{"op-symbols", .arg = "LIST", .type = LP_OPT_LIST, .off = SYMS(LP_SYM_OP),
	 .def = "*ggml_compute_forward_*,_ZN4ggml3cpu*compute_forward*",
	 .help = "operator functions: every sample counts for the op it is in"},
	{"sample-hz", .arg = "N", .type = LP_OPT_U32, .off = OFF(sample_hz), .min = 0, .max = 10000,
	 .def = "99",
	 .help = "cpu-clock samples per second and CPU for the op shares and flame "
		 "graphs; 0 = off"},
	{"no-stack-scan", .type = LP_OPT_CLEAR, .off = OFF(stack_scan),
	 .help = "classify samples by instruction pointer only"},
	{"no-unwind", .type = LP_OPT_CLEAR, .off = OFF(unwind),
	 .help = "find a sample's op by scanning its stack only, not by walking its frames by "
		 ".eh_frame (for comparison)"},
	{"no-openmp-thread-data", .type = LP_OPT_CLEAR, .off = OFF(openmp_thread_data),
	 .help = "find the op of a torch OpenMP worker's region by probing GCC's runtime's "
		 "region entry (a trap per region) instead of from the worker's thread data"},
	{"no-sample-rephase", .type = LP_OPT_CLEAR, .off = OFF(sample_rephase),
	 .help = "keep each CPU's sampling rate fixed instead of restarting it at random every "
		 "50-150 ms (for comparison: a fixed rate aliases with a steady decode)"},
	/* Per CPU: a thread's own event stops and starts a timer at each of its switches,
	 * which threads that sleep and wake in barriers pay for, and which moves the share it
	 * measures; per CPU is as close to the threads' own clocks (bpf.test_ggml) and to perf
	 * record -a (README, "Which sampler"). */
	{"sampler", .arg = "cpu|thread", .type = LP_OPT_CHOICE, .off = OFF(sampler),
	 .choices = samplers, .def = "cpu",
	 .help = "one cpu-clock event per CPU, or one per thread of each LLM process, as perf "
		 "record -p samples: it stops and starts a timer at each switch of those "
		 "threads, which costs threads that sleep and wake often (OpenMP barriers) and "
		 "adds to their barrier time"},
	{"precise-duty", .arg = "SHARE", .type = LP_OPT_DOUBLE, .off = OFF(precise_duty), .min = 0,
	 .max = 1, .def = "0", .flags = LP_OF_RELOAD,
	 .help = "share of time (0 to 1) with a uprobe on every matmul and barrier call: exact, "
		 "but 1.59 us per probed call on a VM; 1 = always"},
	{"precise-ops", .arg = "LIST", .type = LP_OPT_LIST, .off = OFF(precise_ops),
	 .check = check_precise_ops,
	 .help = "ops whose every call precise mode times too (names as the document's ops: "
		 "mul_mat, flash_attn_ext, aten::mm, ...); by default the 32 with most samples"},
	{"no-fast-entry", .type = LP_OPT_CLEAR, .off = OFF(fast_entry),
	 .help = "probe each function's first instruction, not the first one the kernel "
		 "emulates (x86-64; about 10x the cost)"},
	{"precise-period", .arg = "S", .type = LP_OPT_DOUBLE, .off = OFF(precise_period), .min = 1,
	 .max = 86400, .def = "60", .flags = LP_OF_RELOAD, .help = "length of one duty cycle"},
	{"no-precise-tensors", .type = LP_OPT_CLEAR, .off = OFF(precise_tensors),
	 .help = "do not read the tensors of probed op calls (shapes, bytes, layers: llmprofctl "
		 "ops)"},

	/* Service */
	{"config", .arg = "FILE", .type = LP_OPT_STRING, .off = OFF(config_path),
	 .flags = LP_OF_CLI, .describe = describe_config,
	 .section = "Service (the API and /metrics; see docs/API.md):",
	 .help = "settings file (default " LP_CONFIG_PATH ", optional); command-line options "
		 "override it"},
	{"socket", .arg = "PATH", .type = LP_OPT_STRING, .off = OFF(socket_path),
	 .def = LP_SOCKET_PATH, .check = check_socket, .help = "API socket"},
	{"socket-mode", .arg = "MODE", .off = OFF(socket_mode), .def = "0660",
	 .parse = parse_socket_mode, .describe = describe_socket_mode,
	 .help = "its permissions, octal"},
	{"socket-group", .arg = "NAME", .type = LP_OPT_STRING, .off = OFF(socket_group),
	 .def = LP_GROUP,
	 .help = "its group; members see every process (a number: the host's group, from a "
		 "container)"},
	{"metrics-address", .arg = "HOST:PORT", .type = LP_OPT_STRING, .off = OFF(metrics_address),
	 .def = LP_METRICS_ADDRESS, .flags = LP_OF_OFF,
	 .help = "TCP listener for /metrics and the pprof profiles; 'off' for none"},
	{"metrics-max-processes", .arg = "N", .type = LP_OPT_U32, .off = OFF(metrics_max_processes),
	 .min = 1, .max = 100000, .def = "100", .flags = LP_OF_RELOAD,
	 .help = "processes in /metrics at most"},
	{"metrics-labels", .arg = "pid|workload", .type = LP_OPT_CHOICE, .off = OFF(metrics_labels),
	 .choices = metrics_labels, .def = "pid", .flags = LP_OF_RELOAD,
	 .help = "series per process (pid, comm, exe), or per workload and model, summed over "
		 "its processes and stable across restarts"},
	{"metrics-cmdline", .type = LP_OPT_FLAG, .off = OFF(metrics_cmdline), .flags = LP_OF_RELOAD,
	 .help = "command lines in llmprof_process_info, with the values of options that look "
		 "like secrets redacted (by default only in the local API)"},
	{"metrics-buckets", .arg = "exact|coarse", .type = LP_OPT_CHOICE,
	 .off = OFF(metrics_buckets), .choices = metrics_buckets, .def = "exact",
	 .flags = LP_OF_RELOAD,
	 .help = "classic histogram buckets: the kernel's bounds around every counted bucket, "
		 "so percentiles agree with the API within 12.5 %; or powers of two only, 30 "
		 "series a histogram"},
	{"metrics-exited-seconds", .arg = "S", .type = LP_OPT_U32,
	 .off = OFF(metrics_exited_seconds), .min = 0, .max = 86400, .def = "120",
	 .flags = LP_OF_RELOAD,
	 .help = "an exited process's series stay S seconds in /metrics by pid (two scrapes at "
		 "1m)"},
	{"web-config-file", .alias = "web.config.file", .arg = "FILE", .type = LP_OPT_STRING,
	 .off = OFF(web_config), .def = "off", .flags = LP_OF_RELOAD | LP_OF_OFF,
	 .help = "TLS and basic authentication for the TCP listener, in exporter-toolkit's "
		 "format (also --web.config.file)"},
	{"max-connections", .arg = "N", .type = LP_OPT_U32, .off = OFF(max_connections), .min = 1,
	 .max = 100000, .def = "1024", .flags = LP_OF_RELOAD,
	 .help = "open connections at most, on the socket and the TCP listener each"},
	{"max-connections-per-uid", .arg = "N", .type = LP_OPT_U32, .off = OFF(max_per_uid),
	 .min = 1, .max = 100000, .def = "64", .flags = LP_OF_RELOAD,
	 .help = "of those, held by one user other than root and the group"},
	{"http-timeout", .arg = "S", .type = LP_OPT_U32, .off = OFF(http_timeout), .min = 1,
	 .max = 3600, .def = "10", .flags = LP_OF_RELOAD,
	 .help = "seconds a connection gets per request"},
	{"retention", .arg = "S", .type = LP_OPT_DOUBLE, .off = OFF(retention), .min = 0,
	 .max = 86400.0 * 365, .def = "3600", .flags = LP_OF_RELOAD,
	 .help = "seconds an exited process stays"},
	{"state-directory", .arg = "DIR", .type = LP_OPT_STRING, .off = OFF(state_dir),
	 .def = LP_STATE_DIR, .flags = LP_OF_OFF,
	 .help = "totals saved at exit, read at start; 'off' for none"},
	{"checkpoint-interval", .arg = "S", .type = LP_OPT_DOUBLE, .off = OFF(checkpoint), .min = 0,
	 .max = 86400, .def = "60", .flags = LP_OF_RELOAD, .check = check_checkpoint,
	 .help = "also save them every S seconds, so that a crash loses at most that much; 0: at "
		 "exit only"},
	{"check", .type = LP_OPT_FLAG, .off = OFF(check), .flags = LP_OF_CLI | LP_OF_NOSTATUS,
	 .help = "load and attach everything, print what works, exit (non-zero if anything "
		 "required failed)"},

	/* Reporting without the service */
	{"once", .type = LP_OPT_FLAG, .off = OFF(once), .flags = LP_OF_CLI | LP_OF_NOSTATUS,
	 .section = "Reporting without the service:",
	 .help = "print one JSON report on stdout and exit: after --seconds, on SIGINT/SIGTERM, "
		 "or when every --pid process has exited"},
	{"seconds", 's', .arg = "S", .type = LP_OPT_DOUBLE, .off = OFF(seconds), .min = 1e-3,
	 .max = 1e7, .flags = LP_OF_CLI | LP_OF_NOSTATUS,
	 .help = "with --once, report after S seconds"},

	/* Limits */
	{"max-processes", .arg = "N", .type = LP_OPT_U32, .off = OFF(max_processes), .min = 1,
	 .max = 1 << 22, .def = "256", .section = "Limits (kernel memory is printed at start):",
	 .help = "tracked processes at once"},
	{"max-threads", .arg = "N", .type = LP_OPT_U32, .off = OFF(max_threads), .min = 1,
	 .max = 1 << 22, .def = "16384", .help = "threads of tracked processes"},
	{"max-futex-addrs", .arg = "N", .type = LP_OPT_U32, .off = OFF(max_futex_addrs), .min = 1,
	 .max = 1 << 22, .def = "8192", .help = "distinct futex addresses"},
	{"ringbuf-kib", .arg = "N", .min = 4, .max = 1 << 20, .def = "4096", .parse = parse_ringbuf,
	 .describe = describe_ringbuf,
	 .help = "ring buffer for exec and exit records, a power of two (an exit record is "
		 "about 9 KiB)"},
	{"profile-ringbuf-kib", .arg = "N", .min = 4, .max = 1 << 20, .def = "2048",
	 .parse = parse_profile_ringbuf, .describe = describe_profile_ringbuf,
	 .help = "ring buffer for the samples' call stacks while a profile is collected, a "
		 "power of two (a stack is about 300 bytes; read every 100 ms)"},
	{"profile-memory-mib", .arg = "N", .type = LP_OPT_U32, .off = OFF(profile_memory_mib),
	 .min = 1, .max = 65536, .def = "64",
	 .help = "the distinct call stacks all open profiles hold, at most; a sample whose "
		 "stack is new past it is counted lost"},
	{"priority-boost", .arg = "N", .type = LP_OPT_U32, .off = OFF(priority_boost), .min = 0,
	 .max = 19, .def = "4",
	 .help = "run at nice -N: the ring buffer is read in time on a busy host, as auditd; 0: "
		 "none"},

	/* Collectors */
	{"sched-raw-tp", .type = LP_OPT_FLAG, .off = OFF(sched_raw_tp),
	 .section = "Collectors:", .help = "use raw_tp even where tp_btf programs load"},
	{"stretch-sample", .arg = "N", .type = LP_OPT_U32, .off = OFF(stretch_sample), .min = 1,
	 .max = 65536, .def = "16",
	 .help = "take a busy thread's off-CPU stretches with chance 1/N, each counted N times "
		 "(1 = every one); totals stay the kernel's"},
	{"futex-source", .arg = "SRC", .type = LP_OPT_CHOICE, .off = OFF(futex_source),
	 .choices = futex_src, .def = "auto",
	 .help = "auto, sched (waits that sleep, from the scheduler), tracepoint or raw "
		 "(raw_syscalls: with timeouts and EAGAIN, costing every syscall on the host) or "
		 "off"},
	{"mmap-source", .arg = "SRC", .type = LP_OPT_CHOICE, .off = OFF(mmap_source),
	 .choices = mmap_src, .def = "auto",
	 .help = "where new mappings are found: auto, lock (the mmap lock tracepoint), "
		 "tracepoint (sys_enter_mmap) or raw"},
	{"uprobe-links", .arg = "KIND", .type = LP_OPT_CHOICE, .off = OFF(uprobe_links),
	 .choices = uprobe_links, .def = "auto",
	 .help = "a precise window's probes: auto, multi (one link per program and file, one "
		 "wait to take them off) or single (one per probe)"},
	{"no-page-faults", .type = LP_OPT_CLEAR, .off = OFF(faults),
	 .help = "do not count page faults"},
	{"no-python-frames", .type = LP_OPT_CLEAR, .off = OFF(python_frames),
	 .help = "do not read CPython's frames (stacks keep their native frames; no outside "
		 "ops by Python function, no GIL waits)"},
	{"no-mount-tracefs", .type = LP_OPT_CLEAR, .off = OFF(mount_tracefs),
	 .help = "do not mount tracefs when it is missing"},

	{"foreground", 'f', .type = LP_OPT_FLAG, .off = OFF(foreground),
	 .flags = LP_OF_CLI | LP_OF_NOSTATUS, .section = "",
	 .help = "accepted for clarity: llmprofd never forks"},
	{"verbose", 'v', .type = LP_OPT_FLAG, .off = OFF(verbose), .flags = LP_OF_RELOAD,
	 .help = "log debug messages, libbpf's included"},
	{"help", 'h', .type = LP_OPT_ACTION, .flags = LP_OF_CLI | LP_OF_NOSTATUS,
	 .help = "show this help"},
	{"version", 'V', .type = LP_OPT_ACTION, .flags = LP_OF_CLI | LP_OF_NOSTATUS,
	 .help = "show the version"},
};

#define NOPTS (sizeof(options) / sizeof(options[0]))

const struct lp_option *lp_options_table(size_t *n)
{
	*n = NOPTS;
	return options;
}

const char *lp_option_key(const struct lp_option *o, char *buf, size_t size)
{
	snprintf(buf, size, "%s", o->type == LP_OPT_CLEAR ? o->name + 3 : o->name);
	return buf;
}

/* Writes words to out, wrapped at 80 columns, the lines after the first indented by
 * indent; col is where the first line's text starts. */
static void wrap(FILE *out, const char *text, size_t col, size_t indent)
{
	bool first = true;

	for (const char *p = text + strspn(text, " "); *p; p += strspn(p, " ")) {
		size_t w = strcspn(p, " ");

		if (!first && col + 1 + w > 80) {
			fprintf(out, "\n%*s", (int)indent, "");
			col = indent;
		} else if (!first) {
			fputc(' ', out);
			col++;
		}
		fwrite(p, 1, w, out);
		col += w;
		p += w;
		first = false;
	}
	fputc('\n', out);
}

void lp_options_usage(FILE *out)
{
	enum { COL = 27 };

	fprintf(out, "Usage: llmprofd [OPTION]...\n"
		     "Collects scheduler, futex, page-fault and ggml statistics of LLM inference\n"
		     "processes in the kernel, with eBPF.\n");
	for (size_t i = 0; i < NOPTS; i++) {
		const struct lp_option *o = &options[i];
		char spec[96], text[1024];
		int n;

		if (o->section)
			fprintf(out, "\n%s%s", o->section, *o->section ? "\n" : "");
		n = snprintf(text, sizeof(text), "%s", o->help);
		if (o->def && !(o->flags & LP_OF_OFF && strcmp(o->def, "off") == 0)) {
			/* A list's default, one name after another */
			snprintf(text + n, sizeof(text) - (size_t)n, " (default ");
			for (const char *d = o->def; *d; d++) {
				size_t len = strlen(text);

				if (len + 3 < sizeof(text))
					snprintf(text + len, sizeof(text) - len, "%s",
						 *d == ',' && o->type == LP_OPT_LIST
							 ? ", "
							 : (char[]){*d, 0});
			}
			snprintf(text + strlen(text), sizeof(text) - strlen(text), ")");
		}
		n = snprintf(spec, sizeof(spec), "  %c%c%c --%s%s%s", o->short_name ? '-' : ' ',
			     o->short_name ? o->short_name : ' ', o->short_name ? ',' : ' ',
			     o->name, o->arg ? " " : "", o->arg ? o->arg : "");
		if (n + 2 <= COL)
			fprintf(out, "%-*s", COL, spec);
		else
			fprintf(out, "%s  ", spec);
		wrap(out, text, n + 2 <= COL ? COL : (size_t)n + 2, COL);
	}
	fprintf(out, "\n"
		     "Examples:\n"
		     "  llmprofd                 serve " LP_SOCKET_PATH " and /metrics\n"
		     "  llmprofd --check         can this kernel run it?\n"
		     "  llmprofd --once --pid 4242 --seconds 10 > report.json\n"
		     "  curl --unix-socket " LP_SOCKET_PATH " http://localhost/v1/processes\n");
}

static void set_defaults(struct lp_config *cfg, struct lp_config_store *st)
{
	memset(cfg, 0, sizeof(*cfg));
	for (size_t i = 0; i < NOPTS; i++) {
		const struct lp_option *o = &options[i];

		if (o->type == LP_OPT_CLEAR)
			*(bool *)field(o, cfg) = true;
		else if (o->def && set_value(o, cfg, st, o->name, o->def) < 0)
			abort(); /* a default its own option refuses: a bug in the table */
	}
}

struct file_ctx {
	struct lp_config *cfg;
	struct lp_config_store *st;
	const char *path;
	int error;
};

static int parse_bool(const char *s, bool *out)
{
	static const char *const yes[] = {"yes", "true", "on", "1"}, *const no[] = {"no", "false",
										    "off", "0"};

	for (size_t i = 0; i < 4; i++) {
		if (strcasecmp(s, yes[i]) == 0)
			return *out = true, 0;
		if (strcasecmp(s, no[i]) == 0)
			return *out = false, 0;
	}
	return -EINVAL;
}

static bool is_flag(const struct lp_option *o)
{
	return o->type == LP_OPT_FLAG || o->type == LP_OPT_CLEAR || o->type == LP_OPT_ACTION;
}

/* inih calls this per "name = value"; sections only group lines for the reader. A flag
 * option (sched-raw-tp) takes yes or no; a --no-X flag is written "X = no". */
static int on_file_line(void *user, const char *section, const char *key, const char *value)
{
	struct file_ctx *fc = user;
	char name[256], neg[64];
	bool b, negated = false;
	const struct lp_option *o = NULL;

	(void)section;
	snprintf(name, sizeof(name), "%s: %s", fc->path, key);
	snprintf(neg, sizeof(neg), "no-%s", key);
	for (size_t i = 0; i < NOPTS; i++) {
		const struct lp_option *x = &options[i];

		if (strcmp(x->name, key) == 0 || (x->alias && strcmp(x->alias, key) == 0))
			o = x, negated = false;
		else if (strcmp(x->name, neg) == 0 && x->type == LP_OPT_CLEAR)
			o = x, negated = true;
	}
	if (!o || (o->flags & LP_OF_CLI)) {
		log_error("%s: unknown setting (see llmprofd --help; the file takes the long "
			  "options' names)",
			  name);
		fc->error = -EINVAL;
		return 0;
	}
	if (!is_flag(o)) {
		if (set_value(o, fc->cfg, fc->st, name, value) < 0) {
			fc->error = -EINVAL;
			return 0;
		}
		return 1;
	}
	if (parse_bool(value, &b) < 0) {
		log_error("%s: '%s' is not yes or no", name, value);
		fc->error = -EINVAL;
		return 0;
	}
	/* "yes" on a flag or a --no-X flag sets it; "X = no" sets --no-X; the others keep the
	 * default. */
	if (b != negated)
		set_value(o, fc->cfg, fc->st, name, NULL);
	return 1;
}

static int load_file(struct lp_config *cfg, struct lp_config_store *st, const char *path,
		     bool required)
{
	struct file_ctx fc = {.cfg = cfg, .st = st, .path = path};
	FILE *f = fopen(path, "re");
	struct stat sb;
	int line;

	if (!f) {
		if (!required && errno == ENOENT)
			return 0;
		return log_error_errno(-errno, "%s: %m", path);
	}
	/* fopen() opens a directory, and reading it then fails: without these checks the
	 * daemon would run on defaults as if the file were empty. */
	if (fstat(fileno(f), &sb) == 0 && S_ISDIR(sb.st_mode)) {
		fclose(f);
		return log_error_errno(-EISDIR, "%s: is a directory, not a settings file", path);
	}
	line = ini_parse_file(f, on_file_line, &fc);
	if (ferror(f)) {
		int e = -errno;

		fclose(f);
		return log_error_errno(e ? e : -EIO, "%s: %m", path);
	}
	fclose(f);
	if (line > 0) {
		if (!fc.error)
			log_error("%s:%d: not a 'name = value' line", path, line);
		else
			log_error("%s:%d: the first bad line", path, line);
		return -EINVAL;
	}
	return fc.error;
}

/* getopt's tables, from the options: each option's index is its code (past 255, so that
 * no code is a short name's character). */
static void getopt_tables(struct option *longs, char *shorts)
{
	size_t n = 0, k = 0;

	for (size_t i = 0; i < NOPTS; i++) {
		const struct lp_option *o = &options[i];
		int has = o->arg ? required_argument : no_argument;

		longs[n++] = (struct option){o->name, has, NULL, 256 + (int)i};
		if (o->alias)
			longs[n++] = (struct option){o->alias, has, NULL, 256 + (int)i};
		if (o->short_name) {
			shorts[k++] = (char)o->short_name;
			if (o->arg)
				shorts[k++] = ':';
		}
	}
	longs[n] = (struct option){0};
	shorts[k] = '\0';
}

static const struct lp_option *by_code(int c)
{
	if (c >= 256 && (size_t)(c - 256) < NOPTS)
		return &options[c - 256];
	for (size_t i = 0; i < NOPTS; i++)
		if (c > 0 && options[i].short_name == c)
			return &options[i];
	return NULL;
}

int lp_options_load(struct lp_config *cfg, struct lp_config_store *st, int argc, char **argv)
{
	struct option longs[2 * NOPTS + 1];
	char shorts[2 * NOPTS + 1], name[80];
	const struct lp_option *o;
	int c, r;

	set_defaults(cfg, st);
	getopt_tables(longs, shorts);
	/* First pass: only --config, which says where the file is. */
	opterr = 0;
	optind = 0;
	while ((c = getopt_long(argc, argv, shorts, longs, NULL)) != -1)
		if ((o = by_code(c)) && o->off == offsetof(struct lp_config, config_path) &&
		    o->type == LP_OPT_STRING)
			cfg->config_path = optarg;
	r = load_file(cfg, st, cfg->config_path ? cfg->config_path : LP_CONFIG_PATH,
		      cfg->config_path != NULL);
	if (r < 0)
		return r;

	opterr = 1;
	optind = 0;
	while ((c = getopt_long(argc, argv, shorts, longs, NULL)) != -1) {
		o = by_code(c);
		if (!o) {
			lp_options_usage(stderr);
			return -EINVAL;
		}
		if (o->type == LP_OPT_ACTION && o->short_name == 'h') {
			lp_options_usage(stdout);
			return 1;
		}
		if (o->type == LP_OPT_ACTION) {
			printf("llmprofd %s (abi %d, api %d)\n", LLMPROF_VERSION, LP_ABI_VERSION,
			       LP_API_VERSION);
			return 1;
		}
		snprintf(name, sizeof(name), "--%s", o->name);
		r = set_value(o, cfg, st, name, optarg);
		if (r < 0)
			return r;
	}
	if (optind < argc) {
		log_error("unexpected argument '%s'; see --help", argv[optind]);
		return -EINVAL;
	}
	if (cfg->seconds > 0 && !cfg->once) {
		log_error("--seconds goes with --once");
		return -EINVAL;
	}
	if (cfg->once && cfg->check) {
		log_error("--once and --check do not go together");
		return -EINVAL;
	}
	if (!cfg->discover && cfg->npids == 0 && cfg->ncomms == 0 && cfg->nexes == 0) {
		log_error("--no-discover needs --pid, --comm or --exe: nothing would be tracked");
		return -EINVAL;
	}
	return 0;
}

static void add_list(cJSON *o, const char *key, const char *const *v, size_t n)
{
	cJSON *a = cJSON_AddArrayToObject(o, key);

	for (size_t i = 0; v && (n ? i < n : v[i] != NULL); i++)
		cJSON_AddItemToArray(a, cJSON_CreateString(v[i]));
}

cJSON *lp_config_describe(const struct lp_config *cfg)
{
	cJSON *out = cJSON_CreateObject();
	const char *s;
	char key[64];

	for (size_t i = 0; i < NOPTS; i++) {
		const struct lp_option *o = &options[i];
		const void *f = cfield(o, cfg);

		if (o->flags & LP_OF_NOSTATUS)
			continue;
		lp_option_key(o, key, sizeof(key));
		if (o->describe) {
			o->describe(o, cfg, out);
			continue;
		}
		switch (o->type) {
		case LP_OPT_FLAG:
		case LP_OPT_CLEAR:
			cJSON_AddBoolToObject(out, key, *(const bool *)f);
			break;
		case LP_OPT_U32:
			cJSON_AddNumberToObject(out, key, *(const uint32_t *)f);
			break;
		case LP_OPT_DOUBLE:
			cJSON_AddNumberToObject(out, key, *(const double *)f);
			break;
		case LP_OPT_STRING:
			s = *(const char *const *)f;
			/* Unset (discover-cgroup): left out. */
			if (s)
				cJSON_AddStringToObject(out, key,
							*s || !(o->flags & LP_OF_OFF) ? s : "off");
			break;
		case LP_OPT_CHOICE:
			cJSON_AddStringToObject(out, key, o->choices[*(const int *)f]);
			break;
		case LP_OPT_LIST:
			/* Unset (precise-ops): left out. */
			if (*(const char *const *const *)f)
				add_list(out, key, *(const char *const *const *)f, 0);
			break;
		case LP_OPT_STRS:
			add_list(out, key, *(const char *const *const *)f,
				 *(const size_t *)((const char *)cfg + o->count_off));
			break;
		case LP_OPT_CUSTOM:
		case LP_OPT_ACTION:
			break;
		}
	}
	return out;
}

static size_t scalar_size(const struct lp_option *o)
{
	switch (o->type) {
	case LP_OPT_FLAG:
	case LP_OPT_CLEAR:
		return sizeof(bool);
	case LP_OPT_U32:
		return sizeof(uint32_t);
	case LP_OPT_DOUBLE:
		return sizeof(double);
	case LP_OPT_CHOICE:
		return sizeof(int);
	default:
		return 0;
	}
}

void lp_config_reload(struct lp_config *live, const struct lp_config *next)
{
	for (size_t i = 0; i < NOPTS; i++) {
		const struct lp_option *o = &options[i];

		if ((o->flags & LP_OF_RELOAD) && !o->parse && scalar_size(o))
			memcpy(field(o, live), cfield(o, next), scalar_size(o));
	}
}

bool lp_option_reloadable(const char *key)
{
	char k[64];

	for (size_t i = 0; i < NOPTS; i++)
		if ((options[i].flags & LP_OF_RELOAD) &&
		    strcmp(lp_option_key(&options[i], k, sizeof(k)), key) == 0)
			return true;
	return false;
}
