// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* The settings of llmprofd: one table of options serves the command line (getopt_long) and
 * the configuration file (inih: "name = value" lines, optionally in [sections]). */
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

/* The extra buffer types' compute_forward (ggml::cpu::<type>::...::compute_forward: AMX,
 * repack) computes MUL_MAT and MUL_MAT_ID from weights it laid out itself, on the hosts
 * whose CPU it was built for (AMX: Sapphire Rapids and later), instead of
 * ggml_compute_forward_mul_mat: without it, precise mode counted no matmul there. */
static const char *const default_matmul[] = {"ggml_compute_forward_mul_mat",
					     "ggml_compute_forward_mul_mat_id",
					     "iqk_mul_mat",
					     "iqk_mul_mat_4d",
					     "iqk_mul_mat_moe",
					     "_ZN4ggml3cpu*15compute_forwardE*",
					     NULL};
static const char *const default_barrier[] = {"ggml_barrier", "GOMP_barrier", "__kmpc_barrier",
					      NULL};
static const char *const default_decode[] = {"llama_decode", NULL};
/* Plain and C++-mangled op functions and their helpers; the extra buffer types' matmuls. */
static const char *const default_op[] = {"*ggml_compute_forward_*", "_ZN4ggml3cpu*compute_forward*",
					 NULL};

static void usage(FILE *out)
{
	fprintf(out,
		"Usage: llmprofd [OPTION]...\n"
		"Collects scheduler, futex, page-fault and ggml statistics of LLM inference\n"
		"processes in the kernel, with eBPF.\n"
		"\n"
		"Which processes: every process that maps one of the matmul functions (ggml),\n"
		"also those that start or dlopen their ggml backend later, and:\n"
		"  -p, --pid PID            track this process (repeatable)\n"
		"  -c, --comm NAME          track processes whose comm is NAME, also those that\n"
		"                           start later (repeatable)\n"
		"  -e, --exe GLOB           track processes whose executable path matches GLOB\n"
		"                           (repeatable)\n"
		"      --no-discover        track only those, not every ggml process\n"
		"      --discover-cgroup PATH  discover ggml processes only in this cgroup (v2)\n"
		"                           and below: a service, a slice, a container\n"
		"\n"
		"ggml (LIST: comma-separated function names or fnmatch globs, mangled for C++):\n"
		"      --matmul-symbols LIST   default ggml_compute_forward_mul_mat,\n"
		"                           ggml_compute_forward_mul_mat_id, iqk_mul_mat,\n"
		"                           iqk_mul_mat_4d, iqk_mul_mat_moe,\n"
		"                           _ZN4ggml3cpu*15compute_forwardE* (AMX, repack)\n"
		"      --barrier-symbols LIST  default ggml_barrier, GOMP_barrier, __kmpc_barrier\n"
		"      --decode-symbols LIST   default llama_decode\n"
		"      --op-symbols LIST       operator functions; default "
		"*ggml_compute_forward_*,\n"
		"                           _ZN4ggml3cpu*compute_forward*\n"
		"      --sample-hz N        cpu-clock samples per second and CPU for the matmul\n"
		"                           and barrier shares (default 99; 0 = off)\n"
		"      --no-stack-scan      classify samples by instruction pointer only\n"
		"      --no-unwind          find a sample's op by scanning its stack only, not by\n"
		"                           walking its frames by .eh_frame (for comparison)\n"
		"      --no-sample-rephase  keep each CPU's sampling rate fixed instead of "
		"restarting\n"
		"                           it at random every 50-150 ms (for comparison: a fixed\n"
		"                           rate aliases with a steady decode)\n"
		"      --sampler cpu|thread one cpu-clock event per CPU (default), or one per "
		"thread\n"
		"                           of each LLM process, as perf record -p samples: it\n"
		"                           stops and starts a timer at each switch of those\n"
		"                           threads, which costs threads that sleep and wake "
		"often\n"
		"                           (OpenMP barriers) and adds to their barrier time\n"
		"      --precise-duty SHARE share of time (0 to 1) with a uprobe on every matmul\n"
		"                           and barrier call: exact, but 1.59 us per probed call\n"
		"                           on a VM (default 0; 1 = always)\n"
		"      --precise-ops LIST   ops whose every call precise mode times too (names as\n"
		"                           in ggml.ops: mul_mat, flash_attn_ext, ...); default "
		"the\n"
		"                           32 with most samples\n"
		"      --no-fast-entry      probe each function's first instruction, not the "
		"first\n"
		"                           one the kernel emulates (x86-64; about 10x the cost)\n"
		"      --precise-period S   length of one duty cycle (default 60)\n"
		"      --no-precise-tensors do not read the tensors of probed op calls (shapes,\n"
		"                           bytes, layers: llmprofctl ops)\n"
		"\n"
		"Service (the API and /metrics; see docs/API.md):\n"
		"      --config FILE        settings file (default " LP_CONFIG_PATH ",\n"
		"                           optional); command-line options override it\n"
		"      --socket PATH        API socket (default " LP_SOCKET_PATH ")\n"
		"      --socket-mode MODE   its permissions, octal (default 0660)\n"
		"      --socket-group NAME  its group; members see every process (default " LP_GROUP
		")\n"
		"      --metrics-address HOST:PORT  TCP listener for /metrics only (default\n"
		"                           " LP_METRICS_ADDRESS "; 'off' for none)\n"
		"      --metrics-max-processes N  processes in /metrics at most (default 100)\n"
		"      --metrics-labels pid|workload  series per process (pid, comm, exe), or\n"
		"                           per workload and model, summed over its processes\n"
		"                           and stable across restarts (default pid)\n"
		"      --metrics-cmdline    command lines in llmprof_process_info, with the\n"
		"                           values of options that look like secrets redacted\n"
		"                           (default: only in the local API)\n"
		"      --metrics-buckets exact|coarse  classic histogram buckets: the kernel's\n"
		"                           bounds around every counted bucket, so percentiles\n"
		"                           agree with the API within 12.5 %%; or powers of two\n"
		"                           only, 30 series a histogram (default exact)\n"
		"      --metrics-exited-seconds S  an exited process's series stay S seconds in\n"
		"                           /metrics by pid (default 120: two scrapes at 1m)\n"
		"      --web-config-file FILE  TLS and basic authentication for the TCP listener,\n"
		"                           in exporter-toolkit's format (also --web.config.file)\n"
		"      --max-connections N  open connections at most, on the socket and the TCP\n"
		"                           listener each (default 1024)\n"
		"      --max-connections-per-uid N  of those, held by one user other than root\n"
		"                           and the group (default 64)\n"
		"      --http-timeout S     seconds a connection gets per request (default 10)\n"
		"      --retention S        seconds an exited process stays (default 3600)\n"
		"      --state-directory DIR  totals saved at exit, read at start (default\n"
		"                           " LP_STATE_DIR "; 'off' for none)\n"
		"      --checkpoint-interval S  also save them every S seconds, so that a crash\n"
		"                           loses at most that much (default 60; 0: at exit only)\n"
		"      --check              load and attach everything, print what works, exit\n"
		"                           (non-zero if anything required failed)\n"
		"\n"
		"Reporting without the service:\n"
		"      --once               print one JSON report on stdout and exit: after\n"
		"                           --seconds, on SIGINT/SIGTERM, or when every --pid\n"
		"                           process has exited\n"
		"  -s, --seconds S          with --once, report after S seconds\n"
		"\n"
		"Limits (kernel memory is printed at start):\n"
		"      --max-processes N    tracked processes at once (default 256)\n"
		"      --max-threads N      threads of tracked processes (default 16384)\n"
		"      --max-futex-addrs N  distinct futex addresses (default 8192)\n"
		"      --ringbuf-kib N      ring buffer for exec and exit records, a power of two\n"
		"                           (default 4096; an exit record is about 9 KiB)\n"
		"      --priority-boost N   run at nice -N: the ring buffer is read in time\n"
		"                           on a busy host (default 4, as auditd; 0: none)\n"
		"\n"
		"Collectors:\n"
		"      --sched-raw-tp       use raw_tp even where tp_btf programs load\n"
		"      --stretch-sample N   take a busy thread's off-CPU stretches with chance\n"
		"                           1/N, each counted N times (default 16; 1 = every\n"
		"                           one); totals stay the kernel's\n"
		"      --futex-source SRC   auto, sched (waits that sleep, from the scheduler),\n"
		"                           tracepoint or raw (raw_syscalls: with timeouts and\n"
		"                           EAGAIN, costing every syscall on the host) or off\n"
		"      --mmap-source SRC    where new mappings are found: auto, lock (the mmap\n"
		"                           lock tracepoint), tracepoint (sys_enter_mmap) or raw\n"
		"      --uprobe-links KIND  a precise window's probes: auto, multi (one link per\n"
		"                           program and file, one wait to take them off) or\n"
		"                           single (one per probe)\n"
		"      --no-page-faults     do not count page faults\n"
		"      --no-mount-tracefs   do not mount tracefs when it is missing\n"
		"\n"
		"  -f, --foreground         accepted for clarity: llmprofd never forks\n"
		"  -v, --verbose            log debug messages, libbpf's included\n"
		"  -h, --help               show this help\n"
		"  -V, --version            show the version\n"
		"\n"
		"Examples:\n"
		"  llmprofd                 serve " LP_SOCKET_PATH " and /metrics\n"
		"  llmprofd --check         can this kernel run it?\n"
		"  llmprofd --once --pid 4242 --seconds 10 > report.json\n"
		"  curl --unix-socket " LP_SOCKET_PATH " http://localhost/v1/processes\n");
}

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

enum {
	OPT_ONCE = 256,
	OPT_MAX_PROCESSES,
	OPT_MAX_THREADS,
	OPT_MAX_FUTEX,
	OPT_RINGBUF_KIB,
	OPT_PRIORITY_BOOST,
	OPT_SCHED_RAW,
	OPT_FUTEX_SOURCE,
	OPT_STRETCH_SAMPLE,
	OPT_MMAP_SOURCE,
	OPT_UPROBE_LINKS,
	OPT_NO_FAULTS,
	OPT_NO_MOUNT,
	OPT_NO_DISCOVER,
	OPT_DISCOVER_CGROUP,
	OPT_MATMUL_SYMS,
	OPT_BARRIER_SYMS,
	OPT_OP_SYMS,
	OPT_DECODE_SYMS,
	OPT_SAMPLE_HZ,
	OPT_NO_STACK_SCAN,
	OPT_NO_UNWIND,
	OPT_NO_SAMPLE_REPHASE,
	OPT_SAMPLER,
	OPT_NO_FAST_ENTRY,
	OPT_NO_PRECISE_TENSORS,
	OPT_PRECISE_DUTY,
	OPT_PRECISE_OPS,
	OPT_PRECISE_PERIOD,
	OPT_CONFIG,
	OPT_CHECK,
	OPT_SOCKET,
	OPT_SOCKET_MODE,
	OPT_SOCKET_GROUP,
	OPT_METRICS_ADDRESS,
	OPT_METRICS_MAX,
	OPT_METRICS_LABELS,
	OPT_METRICS_CMDLINE,
	OPT_METRICS_BUCKETS,
	OPT_METRICS_EXITED,
	OPT_MAX_CONNECTIONS,
	OPT_HTTP_TIMEOUT,
	OPT_RETENTION,
	OPT_STATE_DIR,
	OPT_CHECKPOINT,
	OPT_MAX_PER_UID,
	OPT_WEB_CONFIG,
};

static const struct option opts[] = {
	{"pid", required_argument, NULL, 'p'},
	{"comm", required_argument, NULL, 'c'},
	{"exe", required_argument, NULL, 'e'},
	{"once", no_argument, NULL, OPT_ONCE},
	{"seconds", required_argument, NULL, 's'},
	{"max-processes", required_argument, NULL, OPT_MAX_PROCESSES},
	{"max-threads", required_argument, NULL, OPT_MAX_THREADS},
	{"max-futex-addrs", required_argument, NULL, OPT_MAX_FUTEX},
	{"ringbuf-kib", required_argument, NULL, OPT_RINGBUF_KIB},
	{"priority-boost", required_argument, NULL, OPT_PRIORITY_BOOST},
	{"sched-raw-tp", no_argument, NULL, OPT_SCHED_RAW},
	{"futex-source", required_argument, NULL, OPT_FUTEX_SOURCE},
	{"stretch-sample", required_argument, NULL, OPT_STRETCH_SAMPLE},
	{"mmap-source", required_argument, NULL, OPT_MMAP_SOURCE},
	{"uprobe-links", required_argument, NULL, OPT_UPROBE_LINKS},
	{"no-page-faults", no_argument, NULL, OPT_NO_FAULTS},
	{"no-mount-tracefs", no_argument, NULL, OPT_NO_MOUNT},
	{"no-discover", no_argument, NULL, OPT_NO_DISCOVER},
	{"discover-cgroup", required_argument, NULL, OPT_DISCOVER_CGROUP},
	{"matmul-symbols", required_argument, NULL, OPT_MATMUL_SYMS},
	{"barrier-symbols", required_argument, NULL, OPT_BARRIER_SYMS},
	{"op-symbols", required_argument, NULL, OPT_OP_SYMS},
	{"decode-symbols", required_argument, NULL, OPT_DECODE_SYMS},
	{"sample-hz", required_argument, NULL, OPT_SAMPLE_HZ},
	{"no-stack-scan", no_argument, NULL, OPT_NO_STACK_SCAN},
	{"no-unwind", no_argument, NULL, OPT_NO_UNWIND},
	{"no-sample-rephase", no_argument, NULL, OPT_NO_SAMPLE_REPHASE},
	{"sampler", required_argument, NULL, OPT_SAMPLER},
	{"no-fast-entry", no_argument, NULL, OPT_NO_FAST_ENTRY},
	{"no-precise-tensors", no_argument, NULL, OPT_NO_PRECISE_TENSORS},
	{"precise-duty", required_argument, NULL, OPT_PRECISE_DUTY},
	{"precise-ops", required_argument, NULL, OPT_PRECISE_OPS},
	{"precise-period", required_argument, NULL, OPT_PRECISE_PERIOD},
	{"config", required_argument, NULL, OPT_CONFIG},
	{"check", no_argument, NULL, OPT_CHECK},
	{"socket", required_argument, NULL, OPT_SOCKET},
	{"socket-mode", required_argument, NULL, OPT_SOCKET_MODE},
	{"socket-group", required_argument, NULL, OPT_SOCKET_GROUP},
	{"metrics-address", required_argument, NULL, OPT_METRICS_ADDRESS},
	{"metrics-max-processes", required_argument, NULL, OPT_METRICS_MAX},
	{"metrics-labels", required_argument, NULL, OPT_METRICS_LABELS},
	{"metrics-cmdline", no_argument, NULL, OPT_METRICS_CMDLINE},
	{"metrics-buckets", required_argument, NULL, OPT_METRICS_BUCKETS},
	{"metrics-exited-seconds", required_argument, NULL, OPT_METRICS_EXITED},
	{"max-connections", required_argument, NULL, OPT_MAX_CONNECTIONS},
	{"max-connections-per-uid", required_argument, NULL, OPT_MAX_PER_UID},
	{"web-config-file", required_argument, NULL, OPT_WEB_CONFIG},
	/* exporter-toolkit's spelling, which node_exporter users type */
	{"web.config.file", required_argument, NULL, OPT_WEB_CONFIG},
	{"http-timeout", required_argument, NULL, OPT_HTTP_TIMEOUT},
	{"retention", required_argument, NULL, OPT_RETENTION},
	{"state-directory", required_argument, NULL, OPT_STATE_DIR},
	{"checkpoint-interval", required_argument, NULL, OPT_CHECKPOINT},
	{"foreground", no_argument, NULL, 'f'},
	{"verbose", no_argument, NULL, 'v'},
	{"help", no_argument, NULL, 'h'},
	{"version", no_argument, NULL, 'V'},
	{}};

/* Options that make no sense in the file. */
static bool command_line_only(int c)
{
	return c == OPT_ONCE || c == 's' || c == OPT_CONFIG || c == OPT_CHECK || c == 'f' ||
	       c == 'h' || c == 'V';
}

struct u32_opt {
	int code;
	uint32_t min, max;
	size_t off;
};

static const struct u32_opt u32_opts[] = {
	{OPT_MAX_PROCESSES, 1, 1 << 22, offsetof(struct lp_config, max_processes)},
	{OPT_MAX_THREADS, 1, 1 << 22, offsetof(struct lp_config, max_threads)},
	{OPT_MAX_FUTEX, 1, 1 << 22, offsetof(struct lp_config, max_futex_addrs)},
	{OPT_PRIORITY_BOOST, 0, 19, offsetof(struct lp_config, priority_boost)},
	{OPT_SAMPLE_HZ, 0, 10000, offsetof(struct lp_config, sample_hz)},
	{OPT_STRETCH_SAMPLE, 1, 65536, offsetof(struct lp_config, stretch_sample)},
	{OPT_METRICS_MAX, 1, 100000, offsetof(struct lp_config, metrics_max_processes)},
	{OPT_METRICS_EXITED, 0, 86400, offsetof(struct lp_config, metrics_exited_seconds)},
	{OPT_MAX_CONNECTIONS, 1, 100000, offsetof(struct lp_config, max_connections)},
	{OPT_MAX_PER_UID, 1, 100000, offsetof(struct lp_config, max_per_uid)},
	{OPT_HTTP_TIMEOUT, 1, 3600, offsetof(struct lp_config, http_timeout)},
};

/* The names of enum lp_futex_source's, lp_mmap_source's and lp_uprobe_links' values, and of
 * metrics_coarse's, in their order: what the options take and what the configuration is
 * described with. */
static const char *const futex_src[] = {"auto", "tracepoint", "raw", "off", "sched"};
static const char *const mmap_src[] = {"auto", "lock", "tracepoint", "raw"};
static const char *const uprobe_links[] = {"auto", "multi", "single"};
static const char *const metrics_buckets[] = {"exact", "coarse"};

/* The index of arg among the n names, or -EINVAL (logged, with the names). */
static int choice(const char *name, const char *arg, const char *const *names, size_t n)
{
	char list[128] = "";

	for (size_t i = 0; i < n; i++)
		if (!strcmp(arg, names[i]))
			return (int)i;
	for (size_t i = 0; i < n; i++)
		snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%s",
			 i == 0	      ? ""
			 : i + 1 == n ? " or "
				      : ", ",
			 names[i]);
	log_error("%s: '%s' is not %s", name, arg, list);
	return -EINVAL;
}

/* Applies one option; name is how the user spelled it ("--pid" or "file:pid"). */
/* The cgroup as /proc/PID/cgroup names it: given so, or as its directory under the unified
 * hierarchy's mount ("/sys/fs/cgroup/system.slice/x.service"). */
static int set_discover_cgroup(struct lp_config *cfg, struct lp_config_store *st, const char *name,
			       const char *arg)
{
	char mnt[4096], *s;
	size_t n, m;

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

static int set_option(struct lp_config *cfg, struct lp_config_store *st, int c, const char *name,
		      const char *arg)
{
	int r;
	char *s;
	pid_t pid;

	for (size_t i = 0; i < sizeof(u32_opts) / sizeof(u32_opts[0]); i++) {
		const struct u32_opt *u = &u32_opts[i];

		if (u->code != c)
			continue;
		if (parse_u32(arg, u->min, u->max, (uint32_t *)((char *)cfg + u->off)) < 0) {
			log_error("%s: '%s' is not a number from %u to %u", name, arg, u->min,
				  u->max);
			return -EINVAL;
		}
		return 0;
	}
	switch (c) {
	case 'p':
		if (lp_parse_pid(arg, &pid) < 0) {
			log_error("%s: '%s' is not a process id", name, arg);
			return -EINVAL;
		}
		return push(st, &cfg->pids, &cfg->npids, sizeof(pid), &pid);
	case 'c':
		if (strlen(arg) == 0 || strlen(arg) > 15) {
			log_error("%s: '%s' cannot be a comm (1 to 15 characters)", name, arg);
			return -EINVAL;
		}
		s = keep(st, strdup(arg));
		return s ? push(st, &cfg->comms, &cfg->ncomms, sizeof(s), &s) : -ENOMEM;
	case 'e':
		s = keep(st, strdup(arg));
		return s ? push(st, &cfg->exes, &cfg->nexes, sizeof(s), &s) : -ENOMEM;
	case OPT_ONCE:
		cfg->once = true;
		return 0;
	case 's':
		if (parse_double(arg, 1e-3, 1e7, &cfg->seconds) < 0) {
			log_error("%s: '%s' is not a positive number", name, arg);
			return -EINVAL;
		}
		return 0;
	case OPT_RINGBUF_KIB: {
		uint32_t kib;

		/* The kernel wants a power of two, at least a page. */
		if (parse_u32(arg, 4, 1 << 20, &kib) < 0 || (kib & (kib - 1))) {
			log_error("%s: '%s' is not a power of two from 4 to %u", name, arg,
				  1 << 20);
			return -EINVAL;
		}
		cfg->ringbuf_bytes = kib << 10;
		return 0;
	}
	case OPT_SCHED_RAW:
		cfg->sched_raw_tp = true;
		return 0;
	case OPT_FUTEX_SOURCE:
		if ((r = choice(name, arg, futex_src, sizeof(futex_src) / sizeof(*futex_src))) < 0)
			return r;
		cfg->futex_source = (enum lp_futex_source)r;
		return 0;
	case OPT_MMAP_SOURCE:
		if ((r = choice(name, arg, mmap_src, sizeof(mmap_src) / sizeof(*mmap_src))) < 0)
			return r;
		cfg->mmap_source = (enum lp_mmap_source)r;
		return 0;
	case OPT_UPROBE_LINKS:
		if ((r = choice(name, arg, uprobe_links,
				sizeof(uprobe_links) / sizeof(*uprobe_links))) < 0)
			return r;
		cfg->uprobe_links = (enum lp_uprobe_links)r;
		return 0;
	case OPT_NO_FAULTS:
		cfg->faults = false;
		return 0;
	case OPT_NO_MOUNT:
		cfg->mount_tracefs = false;
		return 0;
	case OPT_NO_DISCOVER:
		cfg->discover = false;
		return 0;
	case OPT_DISCOVER_CGROUP:
		return set_discover_cgroup(cfg, st, name, arg);
	case OPT_MATMUL_SYMS:
	case OPT_BARRIER_SYMS:
	case OPT_DECODE_SYMS:
	case OPT_OP_SYMS: {
		int cls = c == OPT_MATMUL_SYMS	  ? LP_SYM_MATMUL
			  : c == OPT_BARRIER_SYMS ? LP_SYM_BARRIER
			  : c == OPT_OP_SYMS	  ? LP_SYM_OP
						  : LP_SYM_DECODE;
		char **v = keep(st, split_list(arg));

		if (!v)
			return -ENOMEM;
		cfg->symbols[cls] = (const char *const *)v;
		return 0;
	}
	case OPT_METRICS_CMDLINE:
		cfg->metrics_cmdline = true;
		return 0;
	case OPT_METRICS_BUCKETS:
		if ((r = choice(name, arg, metrics_buckets,
				sizeof(metrics_buckets) / sizeof(*metrics_buckets))) < 0)
			return r;
		cfg->metrics_coarse = r == 1;
		return 0;
	case OPT_METRICS_LABELS:
		if (strcmp(arg, "pid") && strcmp(arg, "workload")) {
			log_error("--metrics-labels: '%s' is neither pid nor workload", arg);
			return -EINVAL;
		}
		cfg->metrics_by_workload = strcmp(arg, "workload") == 0;
		return 0;
	case OPT_SAMPLER:
		if (strcmp(arg, "cpu") && strcmp(arg, "thread")) {
			log_error("--sampler: '%s' is neither cpu nor thread", arg);
			return -EINVAL;
		}
		cfg->sample_per_thread = strcmp(arg, "thread") == 0;
		return 0;
	case OPT_NO_STACK_SCAN:
		cfg->stack_scan = false;
		return 0;
	case OPT_NO_SAMPLE_REPHASE:
		cfg->sample_rephase = false;
		return 0;
	case OPT_NO_UNWIND:
		cfg->unwind = false;
		return 0;
	case OPT_NO_FAST_ENTRY:
		cfg->fast_entry = false;
		return 0;
	case OPT_NO_PRECISE_TENSORS:
		cfg->precise_tensors = false;
		return 0;
	case OPT_PRECISE_DUTY:
		if (parse_double(arg, 0, 1, &cfg->precise_duty) < 0) {
			log_error("%s: '%s' is not a share from 0 to 1", name, arg);
			return -EINVAL;
		}
		return 0;
	case OPT_PRECISE_OPS: {
		char **v = keep(st, split_list(arg));

		if (!v)
			return -ENOMEM;
		for (char **p = v; *p; p++)
			if (!**p ||
			    strspn(*p, "abcdefghijklmnopqrstuvwxyz"
				       "ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_") != strlen(*p)) {
				log_error("%s: '%s' is not an op name (letters, digits and '_', as "
					  "in "
					  "ggml.ops: mul_mat, flash_attn_ext)",
					  name, *p);
				return -EINVAL;
			}
		cfg->precise_ops = (const char *const *)v;
		return 0;
	}
	case OPT_PRECISE_PERIOD:
		if (parse_double(arg, 1, 86400, &cfg->precise_period) < 0) {
			log_error("%s: '%s' is not a number of seconds from 1 to 86400", name, arg);
			return -EINVAL;
		}
		return 0;
	case OPT_CONFIG:
		cfg->config_path = arg;
		return 0;
	case OPT_CHECK:
		cfg->check = true;
		return 0;
	case OPT_SOCKET:
	case OPT_SOCKET_GROUP:
	case OPT_METRICS_ADDRESS:
	case OPT_STATE_DIR:
	case OPT_WEB_CONFIG:
		s = keep(st, strdup(strcmp(arg, "off") == 0 && c != OPT_SOCKET ? "" : arg));
		if (!s)
			return -ENOMEM;
		if (c == OPT_SOCKET && s[0] != '/') {
			log_error("%s: '%s' is not an absolute path", name, arg);
			return -EINVAL;
		}
		*(c == OPT_SOCKET	     ? &cfg->socket_path
		  : c == OPT_SOCKET_GROUP    ? &cfg->socket_group
		  : c == OPT_METRICS_ADDRESS ? &cfg->metrics_address
		  : c == OPT_WEB_CONFIG	     ? &cfg->web_config
					     : &cfg->state_dir) = s;
		return 0;
	case OPT_SOCKET_MODE: {
		unsigned long v;
		char *end;

		errno = 0;
		v = strtoul(arg, &end, 8);
		if (errno || end == arg || *end || v > 0777) {
			log_error("%s: '%s' is not an octal mode such as 0660", name, arg);
			return -EINVAL;
		}
		cfg->socket_mode = (uint32_t)v;
		return 0;
	}
	case OPT_RETENTION:
		if (parse_double(arg, 0, 86400.0 * 365, &cfg->retention) < 0) {
			log_error("%s: '%s' is not a number of seconds from 0 to a year", name,
				  arg);
			return -EINVAL;
		}
		return 0;
	case OPT_CHECKPOINT:
		if (parse_double(arg, 0, 86400, &cfg->checkpoint) < 0 ||
		    (cfg->checkpoint > 0 && cfg->checkpoint < 1)) {
			log_error("%s: '%s' is not 0 or a number of seconds from 1 to 86400", name,
				  arg);
			return -EINVAL;
		}
		return 0;
	case 'f':
		return 0;
	case 'v':
		cfg->verbose = true;
		return 0;
	}
	return -EINVAL;
}

static void set_defaults(struct lp_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->max_processes = 256;
	cfg->max_threads = 16384;
	cfg->max_futex_addrs = 8192;
	cfg->ringbuf_bytes = 4 << 20;
	cfg->priority_boost = 4;
	cfg->faults = true;
	cfg->mount_tracefs = true;
	cfg->discover = true;
	cfg->symbols[LP_SYM_MATMUL] = default_matmul;
	cfg->symbols[LP_SYM_BARRIER] = default_barrier;
	cfg->symbols[LP_SYM_DECODE] = default_decode;
	cfg->symbols[LP_SYM_OP] = default_op;
	cfg->sample_hz = 99;
	cfg->stretch_sample = 16;
	/* Per CPU: a thread's own event stops and starts a timer at each of its switches, which
	 * threads that sleep and wake in barriers pay for (OpenMP decoding: 0.92 of its speed
	 * at 99 Hz on a VM) and which moves the share it measures; per CPU is as close to the
	 * threads' own clocks (bpf.test_ggml) and to perf record -a (README, "Which sampler"). */
	cfg->sample_per_thread = false;
	cfg->stack_scan = true;
	cfg->unwind = true;
	cfg->sample_rephase = true;
	cfg->fast_entry = true;
	cfg->precise_tensors = true;
	cfg->precise_period = 60;
	cfg->socket_path = LP_SOCKET_PATH;
	cfg->socket_mode = 0660;
	cfg->socket_group = LP_GROUP;
	cfg->metrics_address = LP_METRICS_ADDRESS;
	cfg->metrics_max_processes = 100;
	cfg->metrics_exited_seconds = 120;
	cfg->max_connections = 1024;
	cfg->max_per_uid = 64;
	cfg->http_timeout = 10;
	cfg->retention = 3600;
	cfg->checkpoint = 60;
	cfg->state_dir = LP_STATE_DIR;
	cfg->web_config = "";
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

/* inih calls this per "name = value"; sections only group lines for the reader. A flag
 * option (sched-raw-tp) takes yes or no; a --no-X flag is written "X = no". */
static int on_file_line(void *user, const char *section, const char *key, const char *value)
{
	struct file_ctx *fc = user;
	char name[256], neg[64];
	bool b, negated = false;
	const struct option *o = NULL;

	(void)section;
	snprintf(name, sizeof(name), "%s: %s", fc->path, key);
	snprintf(neg, sizeof(neg), "no-%s", key);
	for (const struct option *x = opts; x->name; x++) {
		if (strcmp(x->name, key) == 0)
			o = x;
		else if (strcmp(x->name, neg) == 0 && x->has_arg == no_argument)
			o = x, negated = true;
	}
	if (!o || command_line_only(o->val)) {
		log_error("%s: unknown setting (see llmprofd --help; the file takes the long "
			  "options' names)",
			  name);
		fc->error = -EINVAL;
		return 0;
	}
	if (o->has_arg == required_argument) {
		if (set_option(fc->cfg, fc->st, o->val, name, value) < 0) {
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
	/* Flags only move away from the default: "yes" on a flag, "no" on a negated one. */
	if (b != negated)
		set_option(fc->cfg, fc->st, o->val, name, NULL);
	return 1;
}

static int load_file(struct lp_config *cfg, struct lp_config_store *st, const char *path,
		     bool required)
{
	struct file_ctx fc = {.cfg = cfg, .st = st, .path = path};
	FILE *f = fopen(path, "re");
	int line;

	struct stat sb;

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

int lp_options_load(struct lp_config *cfg, struct lp_config_store *st, int argc, char **argv)
{
	char name[64];
	int c, r;

	set_defaults(cfg);
	/* First pass: only --config, which says where the file is. */
	opterr = 0;
	optind = 0;
	while ((c = getopt_long(argc, argv, "p:c:e:s:fvhV", opts, NULL)) != -1)
		if (c == OPT_CONFIG)
			cfg->config_path = optarg;
	r = load_file(cfg, st, cfg->config_path ? cfg->config_path : LP_CONFIG_PATH,
		      cfg->config_path != NULL);
	if (r < 0)
		return r;

	opterr = 1;
	optind = 0;
	while ((c = getopt_long(argc, argv, "p:c:e:s:fvhV", opts, NULL)) != -1) {
		const char *long_name = NULL;

		for (const struct option *x = opts; x->name; x++)
			if (x->val == c)
				long_name = x->name;
		if (c == 'h') {
			usage(stdout);
			return 1;
		}
		if (c == 'V') {
			printf("llmprofd %s (abi %d, api %d)\n", LLMPROF_VERSION, LP_ABI_VERSION,
			       LP_API_VERSION);
			return 1;
		}
		if (!long_name) {
			usage(stderr);
			return -EINVAL;
		}
		snprintf(name, sizeof(name), "--%s", long_name);
		r = set_option(cfg, st, c, name, optarg);
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
	cJSON *o = cJSON_CreateObject(), *pids;
	char mode[8];

	cJSON_AddStringToObject(o, "config", cfg->config_path ? cfg->config_path : LP_CONFIG_PATH);
	pids = cJSON_AddArrayToObject(o, "pid");
	for (size_t i = 0; i < cfg->npids; i++)
		cJSON_AddItemToArray(pids, cJSON_CreateNumber(cfg->pids[i]));
	add_list(o, "comm", (const char *const *)cfg->comms, cfg->ncomms);
	add_list(o, "exe", (const char *const *)cfg->exes, cfg->nexes);
	cJSON_AddBoolToObject(o, "discover", cfg->discover);
	if (cfg->discover_cgroup)
		cJSON_AddStringToObject(o, "discover-cgroup", cfg->discover_cgroup);
	add_list(o, "matmul-symbols", cfg->symbols[LP_SYM_MATMUL], 0);
	add_list(o, "barrier-symbols", cfg->symbols[LP_SYM_BARRIER], 0);
	add_list(o, "decode-symbols", cfg->symbols[LP_SYM_DECODE], 0);
	add_list(o, "op-symbols", cfg->symbols[LP_SYM_OP], 0);
	cJSON_AddNumberToObject(o, "sample-hz", cfg->sample_hz);
	cJSON_AddBoolToObject(o, "stack-scan", cfg->stack_scan);
	cJSON_AddBoolToObject(o, "unwind", cfg->unwind);
	cJSON_AddBoolToObject(o, "sample-rephase", cfg->sample_rephase);
	cJSON_AddStringToObject(o, "sampler", cfg->sample_per_thread ? "thread" : "cpu");
	cJSON_AddBoolToObject(o, "fast-entry", cfg->fast_entry);
	cJSON_AddNumberToObject(o, "precise-duty", cfg->precise_duty);
	if (cfg->precise_ops)
		add_list(o, "precise-ops", cfg->precise_ops, 0);
	cJSON_AddNumberToObject(o, "precise-period", cfg->precise_period);
	cJSON_AddBoolToObject(o, "precise-tensors", cfg->precise_tensors);
	cJSON_AddNumberToObject(o, "max-processes", cfg->max_processes);
	cJSON_AddNumberToObject(o, "max-threads", cfg->max_threads);
	cJSON_AddNumberToObject(o, "max-futex-addrs", cfg->max_futex_addrs);
	cJSON_AddNumberToObject(o, "ringbuf-kib", cfg->ringbuf_bytes >> 10);
	cJSON_AddNumberToObject(o, "priority-boost", cfg->priority_boost);
	cJSON_AddBoolToObject(o, "sched-raw-tp", cfg->sched_raw_tp);
	cJSON_AddNumberToObject(o, "stretch-sample", cfg->stretch_sample);
	cJSON_AddStringToObject(o, "futex-source", futex_src[cfg->futex_source]);
	cJSON_AddStringToObject(o, "mmap-source", mmap_src[cfg->mmap_source]);
	cJSON_AddStringToObject(o, "uprobe-links", uprobe_links[cfg->uprobe_links]);
	cJSON_AddBoolToObject(o, "page-faults", cfg->faults);
	cJSON_AddBoolToObject(o, "mount-tracefs", cfg->mount_tracefs);
	cJSON_AddStringToObject(o, "socket", cfg->socket_path);
	snprintf(mode, sizeof(mode), "%04o", cfg->socket_mode);
	cJSON_AddStringToObject(o, "socket-mode", mode);
	cJSON_AddStringToObject(o, "socket-group", cfg->socket_group);
	cJSON_AddStringToObject(o, "metrics-address",
				*cfg->metrics_address ? cfg->metrics_address : "off");
	cJSON_AddNumberToObject(o, "metrics-max-processes", cfg->metrics_max_processes);
	cJSON_AddStringToObject(o, "metrics-labels", cfg->metrics_by_workload ? "workload" : "pid");
	cJSON_AddBoolToObject(o, "metrics-cmdline", cfg->metrics_cmdline);
	cJSON_AddStringToObject(o, "metrics-buckets", metrics_buckets[cfg->metrics_coarse]);
	cJSON_AddNumberToObject(o, "metrics-exited-seconds", cfg->metrics_exited_seconds);
	cJSON_AddStringToObject(o, "web-config-file", *cfg->web_config ? cfg->web_config : "off");
	cJSON_AddNumberToObject(o, "max-connections", cfg->max_connections);
	cJSON_AddNumberToObject(o, "max-connections-per-uid", cfg->max_per_uid);
	cJSON_AddNumberToObject(o, "http-timeout", cfg->http_timeout);
	cJSON_AddNumberToObject(o, "retention", cfg->retention);
	cJSON_AddStringToObject(o, "state-directory", *cfg->state_dir ? cfg->state_dir : "off");
	cJSON_AddNumberToObject(o, "checkpoint-interval", cfg->checkpoint);
	cJSON_AddBoolToObject(o, "verbose", cfg->verbose);
	return o;
}

void lp_config_reload(struct lp_config *live, const struct lp_config *next)
{
	live->precise_duty = next->precise_duty;
	live->precise_period = next->precise_period;
	live->metrics_max_processes = next->metrics_max_processes;
	live->metrics_by_workload = next->metrics_by_workload;
	live->metrics_cmdline = next->metrics_cmdline;
	live->metrics_coarse = next->metrics_coarse;
	live->metrics_exited_seconds = next->metrics_exited_seconds;
	live->max_connections = next->max_connections;
	live->max_per_uid = next->max_per_uid;
	live->http_timeout = next->http_timeout;
	live->retention = next->retention;
	live->checkpoint = next->checkpoint;
	live->verbose = next->verbose;
}

bool lp_option_reloadable(const char *name)
{
	static const char *const live[] = {"precise-duty",
					   "precise-period",
					   "metrics-max-processes",
					   "metrics-labels",
					   "metrics-cmdline",
					   "metrics-buckets",
					   "metrics-exited-seconds",
					   "max-connections",
					   "http-timeout",
					   "retention",
					   "checkpoint-interval",
					   "verbose",
					   "max-connections-per-uid",
					   "web-config-file",
					   NULL};

	for (const char *const *p = live; *p; p++)
		if (strcmp(*p, name) == 0)
			return true;
	return false;
}
