// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* Unit tests of daemon/tracked/context.c against /proc and /sys trees written here: what a host
 * with SMT, two NUMA nodes, cpufreq and cgroup v2 (and v1) shows, which this test VM has
 * not. Then the findings those trees must raise (SMT, NUMA, frequency), end to end from
 * the files. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "check.h"
#include "tracked/context.h"
#include "report/findings.h"

static char root[256];

/* Writes len bytes (or the string) to root/path, creating its directories. */
static void put(const char *path, const void *data, size_t len)
{
	char full[512], *p;
	int fd;

	snprintf(full, sizeof(full), "%s/%s", root, path);
	for (p = full + strlen(root) + 1; (p = strchr(p, '/')); p++) {
		*p = '\0';
		mkdir(full, 0755);
		*p = '/';
	}
	fd = open(full, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0 || write(fd, data, len) != (ssize_t)len)
		perror(full);
	close(fd);
}

static void puts_(const char *path, const char *s)
{
	put(path, s, strlen(s));
}

static void putf(const char *path, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void putf(const char *path, const char *fmt, ...)
{
	char buf[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	puts_(path, buf);
}

/* A GGUF file with no keys and one 32-byte tensor. */
static void put_gguf(const char *path)
{
	uint8_t b[160] = "GGUF";
	uint32_t v = 3, ndims = 2, type = 0;
	uint64_t ntens = 1, nkv = 0, nl = 13, d0 = 8, d1 = 1, off = 0;
	size_t n = 4;

#define W(x)                                    \
	do {                                    \
		memcpy(b + n, &(x), sizeof(x)); \
		n += sizeof(x);                 \
	} while (0)
	W(v);
	W(ntens);
	W(nkv);
	W(nl);
	memcpy(b + n, "output.weight", 13);
	n += 13;
	W(ndims);
	W(d0);
	W(d1);
	W(type);
	W(off);
#undef W
	n = (n + 31) / 32 * 32 + 32; /* aligned, then the tensor's 32 bytes */
	put(path, b, n);
}

static void host_tree(void)
{
	puts_("sys/devices/system/cpu/online", "0-3\n");
	for (int c = 0; c < 4; c++) {
		char p[128];

		/* cpu c and c + 2 are SMT siblings; 0 and 2 on node 0, 1 and 3 on node 1 */
		snprintf(p, sizeof(p), "sys/devices/system/cpu/cpu%d/topology/thread_siblings_list",
			 c);
		putf(p, "%d,%d\n", c % 2, c % 2 + 2);
		/* L1d, L1i, L2 per core; an L3 of 32 MiB per node (CPUs 0,2 and 1,3), as an
		 * EPYC's CCDs each have theirs */
		static const char *const type[] = {"Data", "Instruction", "Unified", "Unified"};
		static const char *const size[] = {"32K", "32K", "1024K", "32768K"};
		static const int level[] = {1, 1, 2, 3};

		for (int k = 0; k < 4; k++) {
			snprintf(p, sizeof(p), "sys/devices/system/cpu/cpu%d/cache/index%d/level",
				 c, k);
			putf(p, "%d\n", level[k]);
			snprintf(p, sizeof(p), "sys/devices/system/cpu/cpu%d/cache/index%d/type", c,
				 k);
			putf(p, "%s\n", type[k]);
			snprintf(p, sizeof(p), "sys/devices/system/cpu/cpu%d/cache/index%d/size", c,
				 k);
			putf(p, "%s\n", size[k]);
			snprintf(p, sizeof(p),
				 "sys/devices/system/cpu/cpu%d/cache/index%d/shared_cpu_list", c,
				 k);
			putf(p, k == 3 ? "%d,%d\n" : "%d\n", c % 2, c % 2 + 2);
		}
	}
	puts_("sys/devices/system/cpu/cpu0/cpufreq/scaling_governor", "powersave\n");
	puts_("sys/devices/system/cpu/cpu0/cpufreq/scaling_driver", "acpi-cpufreq\n");
	puts_("sys/devices/system/cpu/cpu0/cpufreq/scaling_max_freq", "2000000\n");
	puts_("sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq", "3000000\n");
	puts_("sys/devices/system/node/online", "0-1\n");
	puts_("sys/devices/system/node/node0/cpulist", "0,2\n");
	puts_("sys/devices/system/node/node1/cpulist", "1,3\n");
	puts_("sys/kernel/mm/transparent_hugepage/enabled", "always [madvise] never\n");
	/* cgroup v2: the quota of an ancestor holds ("max" below it) */
	puts_("sys/fs/cgroup/cgroup.controllers", "cpu memory\n");
	puts_("sys/fs/cgroup/lp.slice/cpu.max", "150000 100000\n");
	puts_("sys/fs/cgroup/lp.slice/job/cpu.max", "max 100000\n");
	puts_("sys/fs/cgroup/lp.slice/job/cpu.stat",
	      "usage_usec 5\nnr_periods 10\nnr_throttled 7\nthrottled_usec 123456\n");
	/* cgroup v1, for pid 88 */
	puts_("sys/fs/cgroup/cpu,cpuacct/grp/cpu.cfs_quota_us", "50000\n");
	puts_("sys/fs/cgroup/cpu,cpuacct/grp/cpu.cfs_period_us", "100000\n");
	puts_("sys/fs/cgroup/cpu,cpuacct/grp/cpu.stat",
	      "nr_periods 4\nnr_throttled 3\nthrottled_time 2000000\n");
	puts_("sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us", "-1\n");
	puts_("sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us", "100000\n");
}

static void proc_tree(void)
{
	static const char env[] = "HOME=/root\0OMP_WAIT_POLICY=passive\0GOMP_SPINCOUNT=0\0"
				  "OMP_THREAD_LIMIT=3";

	/* threads allowed 0-1 and 2: the process may use 0-2 */
	puts_("proc/77/task/77/status", "Name:\tllama\nCpus_allowed_list:\t0-1\n");
	puts_("proc/77/task/78/status", "Name:\tllama\nCpus_allowed_list:\t2\n");
	puts_("proc/77/cgroup", "0::/lp.slice/job\n");
	put("proc/77/environ", env, sizeof(env));
	puts_("proc/77/maps",
	      "55d000000000-55d000100000 r-xp 00000000 fe:00 10 /usr/bin/llama\n"
	      "7f0000000000-7f0000200000 r--s 00001000 fe:00 123 /models/m.gguf\n"
	      "7f1000000000-7f1000200000 r--p 00000000 fe:00 124 /usr/lib/libbig.so\n"
	      "7f2000000000-7f2000001000 rw-p 00000000 00:00 0 \n");
	put_gguf("proc/77/map_files/7f0000000000-7f0000200000");
	puts_("proc/77/map_files/7f1000000000-7f1000200000", "\177ELF and more");
	puts_("proc/77/smaps",
	      "7f0000000000-7f0000200000 r--s 00001000 fe:00 123 /models/m.gguf\n"
	      "Size:               2048 kB\nRss:                1024 kB\n"
	      "FilePmdMapped:       512 kB\n"
	      "7f1000000000-7f1000200000 r--p 00000000 fe:00 124 /usr/lib/libbig.so\n"
	      "Rss:                2048 kB\n");
	puts_("proc/77/numa_maps",
	      "7f0000000000 default file=/models/m.gguf mapped=512 N0=100 N1=412 "
	      "kernelpagesize_kB=4\n7f1000000000 default file=/usr/lib/libbig.so N0=512\n");
	puts_("proc/88/task/88/status", "Cpus_allowed_list:\t0-3\n");
	puts_("proc/88/cgroup", "5:memory:/x\n4:cpu,cpuacct:/grp\n");
}

int main(void)
{
	static struct lp_host_cpus h;
	char proc[300], sys[300];
	struct lp_context x;
	struct lp_cpuset s;

	CHECK(lp_cpuset_parse("0-2,5,7-8\n", &s) == 0 && lp_cpuset_count(&s) == 6 &&
		      lp_cpuset_has(&s, 8) && !lp_cpuset_has(&s, 3),
	      "cpu list");
	CHECK(lp_cpuset_parse("3-1", &s) < 0 && lp_cpuset_parse("a", &s) < 0 &&
		      lp_cpuset_parse("1,,2", &s) < 0,
	      "bad cpu lists");
	CHECK(lp_context_parse_cpu_max("max 100000") == 0 &&
		      lp_context_parse_cpu_max("250000 100000\n") == 2.5 &&
		      lp_context_parse_cpu_max("-1 100000") == 0,
	      "cpu.max");

	snprintf(root, sizeof(root), "/tmp/lp-context-XXXXXX");
	if (!mkdtemp(root))
		return 1;
	host_tree();
	proc_tree();
	snprintf(proc, sizeof(proc), "%s/proc", root);
	snprintf(sys, sizeof(sys), "%s/sys", root);

	CHECK(lp_host_cpus_read(&h, sys) == 0 && lp_cpuset_count(&h.online) == 4 &&
		      h.core[2] == 0 && h.core[3] == 1 && h.nnodes == 2 && h.node[3] == 1 &&
		      h.freq[0] && !h.freq[1] && !strcmp(h.governor[0], "powersave") &&
		      !strcmp(h.driver, "acpi-cpufreq") && h.max_khz[0] == 2000000 &&
		      !strcmp(h.thp, "madvise"),
	      "host: online, cores, nodes, cpufreq, THP");

	CHECK(lp_context_read(&x, 77, &h, proc, sys) == 0 && x.error == 0, "pid 77 read: %d",
	      x.error);
	CHECK(x.ncpus == 3 && x.ncores == 2,
	      "affinity as the union of its threads': %u CPUs, %u cores", x.ncpus, x.ncores);
	CHECK(h.llc_level == 3 && h.llc[2] == 0 && h.llc_bytes[3] == 32 << 20 &&
		      x.llc_bytes == 64ULL << 20 && x.nllc == 2,
	      "the last-level caches of its CPUs: level %u, %llu bytes in %u", h.llc_level,
	      (unsigned long long)x.llc_bytes, x.nllc);
	CHECK(x.quota_cpus == 1.5 && x.cgroup_read && x.nr_throttled == 7 &&
		      x.throttled_usec == 123456,
	      "cgroup v2: the ancestor's quota %.2f, the group's throttling", x.quota_cpus);
	CHECK(x.env_read && !strcmp(x.omp_wait_policy, "passive") &&
		      !strcmp(x.gomp_spincount, "0") && !strcmp(x.omp_thread_limit, "3") &&
		      !x.omp_num_threads[0],
	      "OpenMP environment");
	CHECK(x.weights_mappings == 1 && x.weights_bytes == 2 << 20 && x.weights_rss == 1 << 20 &&
		      x.weights_huge == 512 << 10 && !strcmp(x.weights_path, "/models/m.gguf") &&
		      x.weights_per_token == 32 && x.weights_node_pages[0] == 100 &&
		      x.weights_node_pages[1] == 412,
	      "weights: the GGUF mapping only (%u, %llu bytes, %llu per token)", x.weights_mappings,
	      (unsigned long long)x.weights_bytes, (unsigned long long)x.weights_per_token);

	CHECK(lp_context_read(&x, 88, &h, proc, sys) == 0 && x.quota_cpus == 0.5 &&
		      x.throttled_usec == 2000 && x.nr_throttled == 3 && x.ncpus == 4 &&
		      !x.env_read && x.error == -ENOENT && !x.weights_mappings,
	      "pid 88: cgroup v1 quota %.2f, no environ (%d), no maps", x.quota_cpus, x.error);
	CHECK(lp_context_read(&x, 99, &h, proc, sys) == -ESRCH, "a gone pid is -ESRCH");

	/* OpenMP binds the main thread before its worker exists: read then, the context says
	 * one CPU; read again, the worker bound to another is there. The rest stays. */
	puts_("proc/66/task/66/status", "Cpus_allowed_list:\t0\n");
	CHECK(lp_context_read(&x, 66, &h, proc, sys) == 0 && x.ncpus == 1 && x.ncores == 1 &&
		      x.llc_bytes == 32 << 20,
	      "pid 66 while only its bound main thread is there: %u CPU, one L3", x.ncpus);
	x.quota_cpus = 1.5;
	puts_("proc/66/task/67/status", "Cpus_allowed_list:\t1\n");
	CHECK(lp_context_read_cpus(&x, 66, &h, proc) == 0 && x.ncpus == 2 && x.ncores == 2 &&
		      lp_cpuset_has(&x.allowed, 1) && x.quota_cpus == 1.5,
	      "its CPUs read again: %u CPUs, %u cores", x.ncpus, x.ncores);
	CHECK(lp_context_read_cpus(&x, 99, &h, proc) == -ESRCH && x.ncpus == 2,
	      "a gone pid's CPUs: -ESRCH, the context unchanged");

	/* The findings these files must raise, for two busy threads on CPUs 0 and 2 (the same
	 * core, node 0): SMT, NUMA (weights 80 % on node 1) and the powersave governor. */
	{
		uint64_t ctr[LP_C_NR] = {0};
		struct lp_find_thread th[3] = {{.tid = 1, .oncpu_ns = 9000000000, .cpu = 0},
					       {.tid = 2, .oncpu_ns = 9000000000, .cpu = 2},
					       {.tid = 3, .oncpu_ns = 9000000000, .cpu = 2}};
		struct lp_find_input in = {.pid = 77,
					   .window_s = 10,
					   .ctr = ctr,
					   .threads = th,
					   .nthreads = 3,
					   .ctx = &x,
					   .host = &h};
		struct lp_findings o;
		bool smt = false, numa = false, freq = false;

		lp_context_read(&x, 77, &h, proc, sys);
		ctr[LP_C_ONCPU_NS] = 27000000000;
		lp_findings_eval(&in, &o);
		for (size_t i = 0; i < o.n; i++) {
			smt |= o.f[i].rule == LP_RULE_SMT;
			numa |= o.f[i].rule == LP_RULE_NUMA;
			freq |= o.f[i].rule == LP_RULE_CPU_FREQUENCY;
		}
		CHECK(smt && numa && freq, "from the files: SMT %d, NUMA %d, frequency %d", smt,
		      numa, freq);
		lp_findings_clear(&o);
	}

	{
		char cmd[300];

		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
		if (system(cmd) != 0)
			fprintf(stderr, "could not remove %s\n", root);
	}
	return check_done();
}
