/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* What /proc and /sys say about a process's surroundings, for the findings: the CPUs it may
 * use (affinity, cgroup CPU quota, online CPUs, cores and SMT siblings), their frequency
 * policy, its OpenMP environment, and its model weights (mapped bytes, residency, huge
 * pages, NUMA nodes). The roots are parameters so that tests read fixture trees. */
#ifndef LLMPROF_CONTEXT_H
#define LLMPROF_CONTEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#define LP_CTX_MAX_CPUS 1024
#define LP_CTX_MAX_NODES 16
#define LP_CTX_WORDS (LP_CTX_MAX_CPUS / 64)

struct lp_cpuset {
	uint64_t w[LP_CTX_WORDS];
};

static inline bool lp_cpuset_has(const struct lp_cpuset *s, unsigned cpu)
{
	return cpu < LP_CTX_MAX_CPUS && (s->w[cpu / 64] >> (cpu % 64)) & 1;
}

/* Parses a kernel CPU list ("0-3,8,10-11"); 0 or -EINVAL. */
int lp_cpuset_parse(const char *s, struct lp_cpuset *out);
unsigned lp_cpuset_count(const struct lp_cpuset *s);

/* The host's CPUs, read once in a while: the same for every process. */
struct lp_host_cpus {
	struct lp_cpuset online;
	int16_t core[LP_CTX_MAX_CPUS]; /* its first SMT sibling: one per core; -1 unknown */
	int8_t node[LP_CTX_MAX_CPUS];  /* NUMA node; -1 unknown */
	unsigned nnodes;	       /* nodes online; 1 on most machines */
	/* CPU frequency policy, per CPU where cpufreq is present */
	bool freq[LP_CTX_MAX_CPUS];
	char governor[LP_CTX_MAX_CPUS][16];
	char driver[24]; /* of the first CPU with cpufreq */
	char epp[LP_CTX_MAX_CPUS][24];
	uint32_t max_khz[LP_CTX_MAX_CPUS];	   /* scaling_max_freq */
	uint32_t cpuinfo_max_khz[LP_CTX_MAX_CPUS]; /* what the hardware can */
	char thp[16];				   /* transparent_hugepage/enabled: its [choice] */
	/* The last-level cache (the highest level of cpuN/cache/indexK that holds data): its
	 * instance per CPU (the first CPU of its shared_cpu_list; -1 unknown), its size */
	int16_t llc[LP_CTX_MAX_CPUS];
	uint64_t llc_bytes[LP_CTX_MAX_CPUS];
	unsigned llc_level;
};

/* 0, or -errno when even the online CPUs cannot be read. */
int lp_host_cpus_read(struct lp_host_cpus *h, const char *sys_root);

struct lp_context {
	/* CPUs the process may run on: its affinity and the online CPUs */
	struct lp_cpuset allowed;
	unsigned ncpus;	 /* of allowed */
	unsigned ncores; /* distinct cores among allowed (SMT siblings count once) */
	/* the last-level caches of the allowed CPUs, each instance once; 0 unknown */
	uint64_t llc_bytes;
	unsigned nllc;	       /* ... how many instances */
	double quota_cpus;     /* cgroup CPU quota in CPUs (cpu.max); 0: none */
	uint64_t nr_throttled; /* the cgroup's cpu.stat, cumulative */
	uint64_t throttled_usec;
	bool cgroup_read;    /* found the process's CPU cgroup */
	char cpu_stat[1280]; /* its cpu.stat */
	/* the OpenMP environment; "" when unset; env_read false when environ was unreadable */
	bool env_read;
	char omp_wait_policy[16];
	char gomp_spincount[24];
	char omp_num_threads[16];
	char omp_thread_limit[16];
	/* model weights: mappings of files that begin with the GGUF magic */
	uint64_t weights_bytes;
	uint64_t weights_rss;	   /* resident, from smaps */
	uint64_t weights_huge;	   /* of which in huge pages (FilePmdMapped, AnonHugePages) */
	unsigned weights_mappings; /* 0: no GGUF mapping (read into memory: --no-mmap) */
	/* what generating one token reads of them, from the files' headers (gguf.h); 0 when no
	 * header could be read */
	uint64_t weights_per_token;
	uint32_t experts, experts_used;
	uint64_t weights_node_pages[LP_CTX_MAX_NODES]; /* from numa_maps */
	char weights_path[256];			       /* the first GGUF file mapped: the model */
	uint64_t weights_file_bytes;		       /* its size */
	char weights_arch[32];			       /* its general.architecture; "" unknown */
	int32_t weights_file_type;		       /* its general.file_type; -1 unknown */
	int error; /* -errno of the first read that failed (the process exited: -ESRCH) */
};

/* Reads pid's context; fields that cannot be read stay zero and the first failure is kept
 * in ctx->error. Returns 0, or -ESRCH when the process is gone. */
int lp_context_read(struct lp_context *ctx, pid_t pid, const struct lp_host_cpus *h,
		    const char *proc_root, const char *sys_root);

/* Reads the cgroup's throttling counters again (ctx from lp_context_read): they move every
 * period, the rest of a context rarely. */
void lp_context_read_throttled(struct lp_context *ctx);

/* Reads the CPUs its threads may run on again (allowed, ncpus, ncores): they change when
 * OpenMP binds its threads at its first parallel region (an instant when the bound main
 * thread is the only one), or under taskset -p. Returns 0, or -errno with ctx unchanged. */
int lp_context_read_cpus(struct lp_context *ctx, pid_t pid, const struct lp_host_cpus *h,
			 const char *proc_root);

/* The host's CPU time from /proc/stat's first line: *spare the ticks idle, waiting for I/O
 * or running niced work (which yields to a process of normal priority), *total all of
 * them. Returns 0 or -errno. */
int lp_host_cpu_ticks(const char *proc_root, uint64_t *spare, uint64_t *total);

/* Parsers, for the tests. */
/* /proc/stat's "cpu  user nice system idle iowait irq softirq steal ...": 0 or -EINVAL */
int lp_context_parse_stat(const char *line, uint64_t *spare, uint64_t *total);
/* cgroup v2 cpu.max ("max 100000" or "50000 100000") or v1 quota and period: CPUs, 0 none */
double lp_context_parse_cpu_max(const char *s);
/* environ (NUL-separated): copies the value of name into out; false when absent */
bool lp_context_env(const char *env, size_t len, const char *name, char *out, size_t size);
/* One line of numa_maps: adds its N<node>=<pages> counts to pages[] when it starts at start */
bool lp_context_numa_line(const char *line, uint64_t start, uint64_t pages[LP_CTX_MAX_NODES]);

#endif
