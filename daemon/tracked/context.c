// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* Reading a process's surroundings from /proc and /sys for the findings (context.h). */
#include "tracked/context.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "formats/gguf.h"
#include "base/procfs.h"

/* lp_read_small of a path made from a format (the roots are parameters). */
static ssize_t read_small(char *buf, size_t size, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static ssize_t read_small(char *buf, size_t size, const char *fmt, ...)
{
	char path[512];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(path, sizeof(path), fmt, ap);
	va_end(ap);
	return lp_read_small(path, buf, size);
}

/* The first size - 1 bytes of src, terminated. */
static void copy(char *dst, size_t size, const char *src)
{
	snprintf(dst, size, "%.*s", (int)size - 1, src);
}

static void chomp(char *s)
{
	size_t n = strlen(s);

	while (n && isspace((unsigned char)s[n - 1]))
		s[--n] = '\0';
}

int lp_cpuset_parse(const char *s, struct lp_cpuset *out)
{
	memset(out, 0, sizeof(*out));
	while (*s && *s != '\n') {
		char *end;
		unsigned long a = strtoul(s, &end, 10), b = a;

		if (end == s)
			return -EINVAL;
		s = end;
		if (*s == '-') {
			b = strtoul(s + 1, &end, 10);
			if (end == s + 1 || b < a)
				return -EINVAL;
			s = end;
		}
		for (unsigned long c = a; c <= b && c < LP_CTX_MAX_CPUS; c++)
			out->w[c / 64] |= 1ULL << (c % 64);
		if (*s == ',')
			s++;
		else if (*s && *s != '\n')
			return -EINVAL;
	}
	return 0;
}

unsigned lp_cpuset_count(const struct lp_cpuset *s)
{
	unsigned n = 0;

	for (int i = 0; i < LP_CTX_WORDS; i++)
		n += (unsigned)__builtin_popcountll(s->w[i]);
	return n;
}

static uint32_t read_u32(const char *fmt, const char *root, unsigned cpu)
{
	char buf[64];

	if (read_small(buf, sizeof(buf), fmt, root, cpu) <= 0)
		return 0;
	return (uint32_t)strtoul(buf, NULL, 10);
}

static void read_freq(struct lp_host_cpus *h, const char *root, unsigned c)
{
	char buf[64];

	if (read_small(buf, sizeof(buf), "%s/devices/system/cpu/cpu%u/cpufreq/scaling_governor",
		       root, c) <= 0)
		return;
	h->freq[c] = true;
	chomp(buf);
	copy(h->governor[c], sizeof(h->governor[c]), buf);
	if (read_small(buf, sizeof(buf),
		       "%s/devices/system/cpu/cpu%u/cpufreq/energy_performance_preference", root,
		       c) > 0) {
		chomp(buf);
		copy(h->epp[c], sizeof(h->epp[c]), buf);
	}
	h->max_khz[c] = read_u32("%s/devices/system/cpu/cpu%u/cpufreq/scaling_max_freq", root, c);
	h->cpuinfo_max_khz[c] =
		read_u32("%s/devices/system/cpu/cpu%u/cpufreq/cpuinfo_max_freq", root, c);
	if (!h->driver[0] &&
	    read_small(buf, sizeof(buf), "%s/devices/system/cpu/cpu%u/cpufreq/scaling_driver", root,
		       c) > 0) {
		chomp(buf);
		copy(h->driver, sizeof(h->driver), buf);
	}
}

/* "32768K", "1M", "512": bytes, or 0. */
static uint64_t cache_size(const char *s)
{
	char *end;
	unsigned long long v = strtoull(s, &end, 10);

	if (end == s)
		return 0;
	return *end == 'K' ? v << 10 : *end == 'M' ? v << 20 : *end == 'G' ? v << 30 : v;
}

/* CPU c's last-level cache: the highest level among its caches that holds data (cpuN/cache/indexK). */
static void read_llc(struct lp_host_cpus *h, const char *root, unsigned c)
{
	char buf[4096];
	struct lp_cpuset s;

	for (unsigned k = 0; k < 16; k++) {
		unsigned level;

		if (read_small(buf, sizeof(buf), "%s/devices/system/cpu/cpu%u/cache/index%u/level",
			       root, c, k) <= 0)
			break;
		level = (unsigned)atoi(buf);
		if (read_small(buf, sizeof(buf), "%s/devices/system/cpu/cpu%u/cache/index%u/type",
			       root, c, k) <= 0 ||
		    !strncmp(buf, "Instruction", 11) || level < h->llc_level)
			continue;
		if (read_small(buf, sizeof(buf), "%s/devices/system/cpu/cpu%u/cache/index%u/size",
			       root, c, k) <= 0)
			continue;
		h->llc_level = level;
		h->llc_bytes[c] = cache_size(buf);
		h->llc[c] = (int16_t)c;
		if (read_small(buf, sizeof(buf),
			       "%s/devices/system/cpu/cpu%u/cache/index%u/shared_cpu_list", root, c,
			       k) > 0 &&
		    lp_cpuset_parse(buf, &s) == 0)
			for (unsigned f = 0; f < LP_CTX_MAX_CPUS; f++)
				if (lp_cpuset_has(&s, f)) {
					h->llc[c] = (int16_t)f;
					break;
				}
	}
}

int lp_host_cpus_read(struct lp_host_cpus *h, const char *root)
{
	char buf[4096], *l, *r;
	struct lp_cpuset s;
	ssize_t n;

	memset(h, 0, sizeof(*h));
	memset(h->core, 0xff, sizeof(h->core));
	memset(h->node, 0xff, sizeof(h->node));
	memset(h->llc, 0xff, sizeof(h->llc));
	n = read_small(buf, sizeof(buf), "%s/devices/system/cpu/online", root);
	if (n < 0)
		return (int)n;
	if (lp_cpuset_parse(buf, &h->online) < 0)
		return -EINVAL;
	for (unsigned c = 0; c < LP_CTX_MAX_CPUS; c++) {
		if (!lp_cpuset_has(&h->online, c))
			continue;
		if (read_small(buf, sizeof(buf),
			       "%s/devices/system/cpu/cpu%u/topology/thread_siblings_list", root,
			       c) > 0 &&
		    lp_cpuset_parse(buf, &s) == 0)
			for (unsigned f = 0; f < LP_CTX_MAX_CPUS; f++)
				if (lp_cpuset_has(&s, f)) {
					h->core[c] = (int16_t)f;
					break;
				}
		read_freq(h, root, c);
		read_llc(h, root, c);
	}
	if (read_small(buf, sizeof(buf), "%s/devices/system/node/online", root) > 0 &&
	    lp_cpuset_parse(buf, &s) == 0) {
		h->nnodes = lp_cpuset_count(&s);
		for (unsigned nd = 0; nd < LP_CTX_MAX_NODES; nd++) {
			struct lp_cpuset cs;

			if (!lp_cpuset_has(&s, nd) ||
			    read_small(buf, sizeof(buf), "%s/devices/system/node/node%u/cpulist",
				       root, nd) <= 0 ||
			    lp_cpuset_parse(buf, &cs) < 0)
				continue;
			for (unsigned c = 0; c < LP_CTX_MAX_CPUS; c++)
				if (lp_cpuset_has(&cs, c))
					h->node[c] = (int8_t)nd;
		}
	}
	if (!h->nnodes)
		h->nnodes = 1;
	if (read_small(buf, sizeof(buf), "%s/kernel/mm/transparent_hugepage/enabled", root) > 0 &&
	    (l = strchr(buf, '[')) && (r = strchr(l, ']')))
		snprintf(h->thp, sizeof(h->thp), "%.*s", (int)(r - l - 1), l + 1);
	return 0;
}

double lp_context_parse_cpu_max(const char *s)
{
	char *end;
	double quota, period;

	while (isspace((unsigned char)*s))
		s++;
	if (!strncmp(s, "max", 3) || *s == '-')
		return 0;
	quota = strtod(s, &end);
	if (end == s)
		return 0;
	period = strtod(end, &end);
	if (period <= 0)
		period = 100000;
	return quota > 0 ? quota / period : 0;
}

bool lp_context_env(const char *env, size_t len, const char *name, char *out, size_t size)
{
	size_t nl = strlen(name);

	for (size_t i = 0; i < len;) {
		const char *e = env + i;
		size_t el = strnlen(e, len - i);

		if (el > nl && !memcmp(e, name, nl) && e[nl] == '=') {
			snprintf(out, size, "%.*s", (int)(el - nl - 1), e + nl + 1);
			return true;
		}
		i += el + 1;
	}
	return false;
}

bool lp_context_numa_line(const char *line, uint64_t start, uint64_t pages[LP_CTX_MAX_NODES])
{
	char *end;
	uint64_t a = strtoull(line, &end, 16);
	const char *p;

	if (end == line || a != start)
		return false;
	for (p = strstr(end, " N"); p; p = strstr(p + 1, " N")) {
		unsigned long node = strtoul(p + 2, &end, 10);

		if (end != p + 2 && *end == '=' && node < LP_CTX_MAX_NODES)
			pages[node] += strtoull(end + 1, NULL, 10);
	}
	return true;
}

void lp_context_read_throttled(struct lp_context *ctx)
{
	char st[1024], *l, *save = NULL;

	ctx->cgroup_read = ctx->cpu_stat[0] && read_small(st, sizeof(st), "%s", ctx->cpu_stat) > 0;
	if (!ctx->cgroup_read)
		return;
	for (l = strtok_r(st, "\n", &save); l; l = strtok_r(NULL, "\n", &save))
		if (!strncmp(l, "nr_throttled ", 13))
			ctx->nr_throttled = strtoull(l + 13, NULL, 10);
		else if (!strncmp(l, "throttled_usec ", 15))
			ctx->throttled_usec = strtoull(l + 15, NULL, 10);
		else if (!strncmp(l, "throttled_time ", 15)) /* v1: ns */
			ctx->throttled_usec = strtoull(l + 15, NULL, 10) / 1000;
}

/* Whether the comma-separated list holds word. */
static bool has_token(const char *list, const char *word)
{
	size_t n = strlen(word);

	for (const char *p = list; p; p = strchr(p, ',')) {
		if (*p == ',')
			p++;
		if (!strncmp(p, word, n) && (p[n] == ',' || !p[n]))
			return true;
	}
	return false;
}

/* The smallest quota among the cgroup and its ancestors: cgroup v2 (one hierarchy, cpu.max)
 * or v1 (the cpu controller's own, cpu.cfs_quota_us over cpu.cfs_period_us). */
static void read_cgroup(struct lp_context *ctx, pid_t pid, const char *proc, const char *sys)
{
	static const char *const v1_mounts[] = {"cpu", "cpu,cpuacct", "cpuacct,cpu"};
	char buf[4096], path[1024], dir[1200], q[64], *line, *save = NULL;
	const char *mount = NULL, *rel = NULL;
	bool v2 = false;

	if (read_small(buf, sizeof(buf), "%s/%d/cgroup", proc, (int)pid) <= 0)
		return;
	for (line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
		char *ctrl;

		if (!c2)
			continue;
		*c1 = *c2 = '\0';
		ctrl = c1 + 1;
		if (!strcmp(line, "0") && !*ctrl && !mount) {
			/* The unified hierarchy, if it is mounted where cgroup v2 lives. */
			snprintf(dir, sizeof(dir), "%s/fs/cgroup/cgroup.controllers", sys);
			if (access(dir, R_OK) == 0) {
				v2 = true;
				mount = "";
				rel = c2 + 1;
			}
		} else {
			if (!has_token(ctrl, "cpu"))
				continue;
			for (size_t i = 0; i < 3; i++) {
				snprintf(dir, sizeof(dir), "%s/fs/cgroup/%s", sys, v1_mounts[i]);
				if (access(dir, R_OK) == 0) {
					mount = v1_mounts[i];
					rel = c2 + 1;
					v2 = false;
					break;
				}
			}
		}
	}
	if (!mount || !rel)
		return;
	snprintf(path, sizeof(path), "%s", rel);
	for (bool first = true;; first = false) {
		double cpus = 0;

		snprintf(dir, sizeof(dir), "%s/fs/cgroup/%s%s%s", sys, mount, *mount ? "/" : "",
			 path);
		if (v2) {
			if (read_small(q, sizeof(q), "%s/cpu.max", dir) > 0)
				cpus = lp_context_parse_cpu_max(q);
		} else {
			char p2[64];

			if (read_small(q, sizeof(q), "%s/cpu.cfs_quota_us", dir) > 0 &&
			    read_small(p2, sizeof(p2), "%s/cpu.cfs_period_us", dir) > 0) {
				chomp(q);
				strncat(q, " ", sizeof(q) - strlen(q) - 1);
				strncat(q, p2, sizeof(q) - strlen(q) - 1);
				cpus = lp_context_parse_cpu_max(q);
			}
		}
		if (first) {
			snprintf(ctx->cpu_stat, sizeof(ctx->cpu_stat), "%s/cpu.stat", dir);
			lp_context_read_throttled(ctx);
		}
		if (cpus > 0 && (ctx->quota_cpus == 0 || cpus < ctx->quota_cpus))
			ctx->quota_cpus = cpus;
		if (!strcmp(path, "/") || !path[0])
			break;
		*strrchr(path, '/') = '\0';
		if (!path[0])
			strcpy(path, "/");
	}
}

static void read_env(struct lp_context *ctx, pid_t pid, const char *proc)
{
	char *buf = malloc(65536);
	ssize_t n;

	if (!buf)
		return;
	n = read_small(buf, 65536, "%s/%d/environ", proc, (int)pid);
	if (n < 0) {
		if (!ctx->error)
			ctx->error = (int)n;
	} else {
		ctx->env_read = true;
		lp_context_env(buf, (size_t)n, "OMP_WAIT_POLICY", ctx->omp_wait_policy,
			       sizeof(ctx->omp_wait_policy));
		lp_context_env(buf, (size_t)n, "GOMP_SPINCOUNT", ctx->gomp_spincount,
			       sizeof(ctx->gomp_spincount));
		lp_context_env(buf, (size_t)n, "OMP_NUM_THREADS", ctx->omp_num_threads,
			       sizeof(ctx->omp_num_threads));
		lp_context_env(buf, (size_t)n, "OMP_THREAD_LIMIT", ctx->omp_thread_limit,
			       sizeof(ctx->omp_thread_limit));
	}
	free(buf);
}

#define LP_CTX_MAX_WEIGHTS 16

/* What a model file's header says, kept per file: parsing a header with a tokenizer of
 * 250,000 strings takes milliseconds, and findings are read every second by `top`. */
#define GGUF_CACHE 8
#define GGUF_MAX_HEADER (256U << 20)
static struct gguf_cached {
	dev_t dev;
	ino_t ino;
	off_t size;
	struct timespec mtime;
	int ret;
	struct lp_gguf g;
} gguf_cache[GGUF_CACHE];
static unsigned gguf_next;

static int gguf_of(int fd, const struct stat *st, struct lp_gguf *g)
{
	struct gguf_cached *c;
	size_t len;
	void *p;

	for (unsigned i = 0; i < GGUF_CACHE; i++) {
		c = &gguf_cache[i];
		if (c->ino == st->st_ino && c->dev == st->st_dev && c->size == st->st_size &&
		    c->mtime.tv_sec == st->st_mtim.tv_sec &&
		    c->mtime.tv_nsec == st->st_mtim.tv_nsec) {
			*g = c->g;
			return c->ret;
		}
	}
	c = &gguf_cache[gguf_next++ % GGUF_CACHE];
	c->dev = st->st_dev;
	c->ino = st->st_ino;
	c->size = st->st_size;
	c->mtime = st->st_mtim;
	len = (uint64_t)st->st_size < GGUF_MAX_HEADER ? (size_t)st->st_size : GGUF_MAX_HEADER;
	p = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
	if (p == MAP_FAILED) {
		c->ret = -errno;
		memset(&c->g, 0, sizeof(c->g));
	} else {
		c->ret = lp_gguf_parse(p, len, (uint64_t)st->st_size, &c->g);
		munmap(p, len);
	}
	*g = c->g;
	return c->ret;
}

/* Whether the mapping start-end is of a file that begins with the GGUF magic; if so, its
 * identity and header into st and g (g zeroed when the header does not parse). */
static bool is_gguf(pid_t pid, const char *proc, uint64_t start, uint64_t end, struct stat *st,
		    struct lp_gguf *g)
{
	char path[512], magic[4];
	bool yes;
	int fd;

	snprintf(path, sizeof(path), "%s/%d/map_files/%" PRIx64 "-%" PRIx64, proc, (int)pid, start,
		 end);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	yes = pread(fd, magic, 4, 0) == 4 && !memcmp(magic, "GGUF", 4) && fstat(fd, st) == 0;
	if (yes && gguf_of(fd, st, g) < 0) {
		memset(g, 0, sizeof(*g));
		g->file_type = -1;
	}
	close(fd);
	return yes;
}

/* Mappings of GGUF files (llama.cpp maps a model from its first tensor's page), then their
 * residency and NUMA placement. The magic is read at the file's start, whatever the
 * mapping's offset: the map_files link opens the file itself. */
/* Resident and huge-page bytes of the mappings that start at starts[0..n), from smaps. */
static void read_weights_rss(struct lp_context *ctx, pid_t pid, const char *proc,
			     const uint64_t *starts, unsigned n)
{
	char line[1024], path[64];
	bool in = false;
	FILE *f;

	snprintf(path, sizeof(path), "%s/%d/smaps", proc, (int)pid);
	f = fopen(path, "re");
	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		uint64_t start, kb;
		char *end;

		if (isxdigit((unsigned char)line[0]) && strchr(line, '-')) {
			start = strtoull(line, &end, 16);
			in = false;
			for (unsigned i = 0; i < n; i++)
				in |= starts[i] == start;
		} else if (in && sscanf(line, "Rss: %" SCNu64, &kb) == 1) {
			ctx->weights_rss += kb << 10;
		} else if (in && (sscanf(line, "FilePmdMapped: %" SCNu64, &kb) == 1 ||
				  sscanf(line, "AnonHugePages: %" SCNu64, &kb) == 1)) {
			ctx->weights_huge += kb << 10;
		}
	}
	fclose(f);
}

/* Where the weights' pages are, by NUMA node, from numa_maps. */
static void read_weights_nodes(struct lp_context *ctx, pid_t pid, const char *proc,
			       const uint64_t *starts, unsigned n)
{
	char line[1024], path[64];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%d/numa_maps", proc, (int)pid);
	f = fopen(path, "re");
	if (!f)
		return;
	while (fgets(line, sizeof(line), f))
		for (unsigned i = 0; i < n; i++)
			if (lp_context_numa_line(line, starts[i], ctx->weights_node_pages))
				break;
	fclose(f);
}

static void read_weights(struct lp_context *ctx, pid_t pid, const char *proc, unsigned nnodes)
{
	uint64_t starts[LP_CTX_MAX_WEIGHTS];
	struct stat seen[LP_CTX_MAX_WEIGHTS];
	char line[1024], path[64];
	unsigned n = 0;
	FILE *f;

	snprintf(path, sizeof(path), "%s/%d/maps", proc, (int)pid);
	f = fopen(path, "re");
	if (!f) {
		if (!ctx->error)
			ctx->error = -errno;
		return;
	}
	while (fgets(line, sizeof(line), f) && n < LP_CTX_MAX_WEIGHTS) {
		uint64_t start, end;
		struct lp_gguf g;
		char perms[8];
		bool again = false;
		int pos = 0;

		if (sscanf(line, "%" SCNx64 "-%" SCNx64 " %7s %*x %*s %*s %n", &start, &end, perms,
			   &pos) < 3 ||
		    !pos || line[pos] != '/' || perms[0] != 'r' || perms[2] == 'x' ||
		    end - start < (1 << 20) || !is_gguf(pid, proc, start, end, &seen[n], &g))
			continue;
		/* A file's header counts once, however many of its parts are mapped. */
		for (unsigned i = 0; i < n; i++)
			again |= seen[i].st_dev == seen[n].st_dev &&
				 seen[i].st_ino == seen[n].st_ino;
		if (!again) {
			ctx->weights_per_token += g.per_token_bytes;
			ctx->experts = g.experts;
			ctx->experts_used = g.experts_used;
		}
		starts[n++] = start;
		ctx->weights_bytes += end - start;
		if (!ctx->weights_path[0]) {
			ctx->weights_file_bytes = (uint64_t)seen[n - 1].st_size;
			ctx->weights_file_type = g.file_type;
			memcpy(ctx->weights_arch, g.arch, sizeof(ctx->weights_arch));
			lp_proc_maps_path(line + pos);
			snprintf(ctx->weights_path, sizeof(ctx->weights_path), "%s", line + pos);
		}
	}
	fclose(f);
	ctx->weights_mappings = n;
	if (!n)
		return;
	read_weights_rss(ctx, pid, proc, starts, n);
	if (nnodes >= 2)
		read_weights_nodes(ctx, pid, proc, starts, n);
}

struct affinity {
	const char *proc;
	pid_t pid;
	char *status; /* 8 KiB */
	struct lp_cpuset *out;
	bool any;
};

static int read_thread_affinity(void *ctx, pid_t tid)
{
	struct affinity *a = ctx;
	struct lp_cpuset one;
	char *l;

	if (read_small(a->status, 8192, "%s/%d/task/%d/status", a->proc, (int)a->pid, (int)tid) < 0)
		return 0;
	l = strstr(a->status, "Cpus_allowed_list:");
	if (l && lp_cpuset_parse(l + 18 + strspn(l + 18, " \t"), &one) == 0) {
		for (int i = 0; i < LP_CTX_WORDS; i++)
			a->out->w[i] |= one.w[i];
		a->any = true;
	}
	return 0;
}

/* The CPUs any of its threads may run on: threads bound one per CPU (OMP_PROC_BIND,
 * --cpu-mask) each allow one, the process all of them. */
static int read_affinity(pid_t pid, const char *proc, struct lp_cpuset *out)
{
	struct affinity a = {proc, pid, malloc(8192), out, false};
	int r;

	memset(out, 0, sizeof(*out));
	if (!a.status)
		return -ENOMEM;
	r = lp_proc_each_task(proc, pid, read_thread_affinity, &a);
	free(a.status);
	return r < 0 ? r : a.any ? 0 : -ESRCH;
}

int lp_context_read_cpus(struct lp_context *ctx, pid_t pid, const struct lp_host_cpus *h,
			 const char *proc)
{
	bool seen[LP_CTX_MAX_CPUS] = {false}, cache[LP_CTX_MAX_CPUS] = {false};
	struct lp_cpuset aff;
	int r = read_affinity(pid, proc, &aff);

	if (r < 0)
		return r;
	for (int i = 0; i < LP_CTX_WORDS; i++)
		ctx->allowed.w[i] = aff.w[i] & h->online.w[i];
	ctx->ncpus = lp_cpuset_count(&ctx->allowed);
	ctx->ncores = 0;
	ctx->llc_bytes = 0;
	ctx->nllc = 0;
	for (unsigned c = 0; c < LP_CTX_MAX_CPUS; c++) {
		int core;

		if (!lp_cpuset_has(&ctx->allowed, c))
			continue;
		/* Each cache instance once: threads on its CPUs share it. */
		if (h->llc[c] >= 0 && !cache[h->llc[c]]) {
			cache[h->llc[c]] = true;
			ctx->llc_bytes += h->llc_bytes[c];
			ctx->nllc++;
		}
		core = h->core[c] >= 0 ? h->core[c] : (int)c;
		if (!seen[core]) {
			seen[core] = true;
			ctx->ncores++;
		}
	}
	return 0;
}

int lp_context_read(struct lp_context *ctx, pid_t pid, const struct lp_host_cpus *h,
		    const char *proc, const char *sys)
{
	int r;

	memset(ctx, 0, sizeof(*ctx));
	r = lp_context_read_cpus(ctx, pid, h, proc);
	if (r < 0) {
		ctx->error = r;
		return r == -ESRCH ? -ESRCH : 0;
	}
	read_cgroup(ctx, pid, proc, sys);
	read_env(ctx, pid, proc);
	read_weights(ctx, pid, proc, h->nnodes);
	return 0;
}

int lp_context_parse_stat(const char *line, uint64_t *spare, uint64_t *total)
{
	unsigned long long v[8] = {0};

	if (strncmp(line, "cpu ", 4) ||
	    sscanf(line + 4, "%llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2], &v[3],
		   &v[4], &v[5], &v[6], &v[7]) < 5)
		return -EINVAL;
	*spare = v[1] + v[3] + v[4];
	*total = 0;
	for (int i = 0; i < 8; i++)
		*total += v[i];
	return 0;
}

int lp_host_cpu_ticks(const char *proc_root, uint64_t *spare, uint64_t *total)
{
	char path[PATH_MAX], buf[512];
	int r;

	snprintf(path, sizeof(path), "%s/stat", proc_root);
	r = lp_read_small(path, buf, sizeof(buf));
	if (r < 0)
		return r;
	return lp_context_parse_stat(buf, spare, total);
}
