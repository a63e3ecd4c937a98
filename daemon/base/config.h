/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* The daemon's settings, from the command line. */
#ifndef LLMPROF_CONFIG_H
#define LLMPROF_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

enum lp_futex_source {
	/* the scheduler where tp_btf programs load, else syscall tracepoints where tracefs
	 * is, else raw_syscalls */
	LP_FUTEX_SRC_AUTO = 0,
	LP_FUTEX_SRC_TRACEPOINT,
	LP_FUTEX_SRC_RAW,
	LP_FUTEX_SRC_OFF,
	LP_FUTEX_SRC_SCHED, /* waits that sleep, from sched_switch: nothing on the syscall path */
};

/* Where new executable mappings (a late dlopen) are found. */
enum lp_mmap_source {
	LP_MMAP_SRC_AUTO = 0, /* the mmap lock tracepoint, else the syscall fallbacks */
	LP_MMAP_SRC_LOCK,
	LP_MMAP_SRC_TRACEPOINT, /* syscalls:sys_enter_mmap */
	LP_MMAP_SRC_RAW,	/* raw_syscalls:sys_enter */
};

/* How a precise window's uprobes are attached. */
enum lp_uprobe_links {
	LP_UPROBE_LINKS_AUTO = 0, /* multi where the kernel has them, else single */
	LP_UPROBE_LINKS_MULTI,	  /* as auto, with a warning where the kernel has none */
	LP_UPROBE_LINKS_SINGLE,	  /* one link (a perf event) per probe */
};

/* --sampler: one cpu-clock event per CPU, or one per thread of each LLM process. */
enum lp_sampler_kind {
	LP_SAMPLER_CPU = 0,
	LP_SAMPLER_THREAD,
};

/* --metrics-labels: series per process, or per workload and model. */
enum lp_metrics_labels {
	LP_METRICS_BY_PID = 0,
	LP_METRICS_BY_WORKLOAD,
};

/* --metrics-buckets: every kernel bound beside a counted bucket, or powers of two. */
enum lp_metrics_buckets {
	LP_METRICS_EXACT = 0,
	LP_METRICS_COARSE,
};

/* The kinds of functions llmprofd looks for in objects. The first LP_SYM_CONFIG_NR are
 * ggml's and settings (lp_config.symbols, --*-symbols); the rest are fixed, their engine's
 * own (engine.h's struct lp_engine, patterns). */
enum lp_sym_class {
	LP_SYM_MATMUL = 0, /* any of these mapped makes a process an LLM process */
	LP_SYM_BARRIER,
	LP_SYM_DECODE,
	LP_SYM_OP, /* op functions: every sample is counted for the op it is in */
	LP_SYM_CONFIG_NR,
	/* torch (engine/torch.c): the token embedding's entry point, a forward's start (before
	 * ATEN: a symbol is its first class's); PyTorch's aten entry points at::_ops::<op>::call
	 * and ::redispatch, an op functions' table (the embedding's among them) */
	LP_SYM_FORWARD = LP_SYM_CONFIG_NR,
	LP_SYM_ATEN,
	/* an OpenMP runtime's parallel region entry: GOMP_parallel, __kmpc_fork_call */
	LP_SYM_FORK,
	/* BLAS libraries' marks: the GEMM entry points and what tells one BLAS from another */
	LP_SYM_BLAS,
	/* CPython's interpreter, in any engine's processes (engine/python.c): _PyRuntime and
	 * Py_Version (data objects), _PyEval_EvalFrameDefault */
	LP_SYM_PYTHON,
	LP_SYM_NR,
};

struct lp_config {
	pid_t *pids;
	size_t npids;
	char **comms; /* exact comm (as in /proc/PID/comm) */
	size_t ncomms;
	char **exes; /* fnmatch(3) patterns over the /proc/PID/exe path */
	size_t nexes;

	uint32_t max_processes;
	uint32_t max_threads;
	uint32_t max_futex_addrs;
	uint32_t ringbuf_bytes;
	uint32_t priority_boost;	/* nice -N for the daemon's threads; 0: left as started */
	uint32_t profile_ringbuf_bytes; /* the "stacks" ring buffer */
	uint32_t profile_memory_mib;	/* the stacks profile windows hold, at most */

	bool once;
	double seconds;	   /* with once: stop after this long (0 = until the --pid targets exit) */
	bool sched_raw_tp; /* use raw_tp even where tp_btf loads */
	enum lp_futex_source futex_source;
	enum lp_mmap_source mmap_source;
	enum lp_uprobe_links uprobe_links;
	bool faults;
	bool python_frames; /* --no-python-frames clears it */
	bool mount_tracefs;
	bool verbose;
	bool foreground; /* accepted for clarity: llmprofd never forks */

	/* ggml */
	bool discover; /* track processes that map a matmul symbol */
	/* Discovery only in this cgroup (v2) and below, as /proc/PID/cgroup names it;
	 * NULL: anywhere. */
	const char *discover_cgroup;
	const char *const *symbols[LP_SYM_CONFIG_NR]; /* NULL-terminated names or globs per class */
	uint32_t sample_hz;			      /* cpu-clock sampling; 0 = off */
	uint32_t stretch_sample;		      /* a busy thread's stretches: 1 in N taken */
	enum lp_sampler_kind sampler;		      /* one event per CPU or per thread */
	bool stack_scan;			      /* classify samples by return addresses too */
	bool unwind;			/* ... walking frames by .eh_frame where it can */
	bool sample_rephase;		/* per-CPU sampling rates restarted at random */
	bool openmp_thread_data;	/* GCC's OpenMP workers' regions by their thread data */
	bool fast_entry;		/* uprobes on the first emulated instruction */
	bool precise_tensors;		/* precise mode reads op calls' tensors */
	double precise_duty;		/* share of time in precise mode, 0 to 1 */
	const char *const *precise_ops; /* --precise-ops: NULL = those with samples */
	double precise_period;		/* seconds per duty cycle */

	/* service */
	const char *config_path; /* NULL: the default path, optional */
	bool check;		 /* load and attach, report, exit */
	const char *socket_path;
	uint32_t socket_mode;
	const char *socket_group;
	const char *metrics_address; /* "" = no TCP listener */
	uint32_t metrics_max_processes;
	enum lp_metrics_labels metrics_labels;	 /* series by pid, or by workload and model */
	bool metrics_cmdline;			 /* command lines in /metrics, secrets redacted */
	enum lp_metrics_buckets metrics_buckets; /* classic buckets: exact or coarse */
	uint32_t metrics_exited_seconds; /* an exited process's series stay this long (by pid) */
	uint32_t max_connections;
	uint32_t max_per_uid;	/* connections one unprivileged uid may hold */
	const char *web_config; /* exporter-toolkit web configuration for TCP; "" for none */
	uint32_t http_timeout;	/* seconds per request on a connection */
	double retention;	/* seconds an exited process stays in reports */
	double checkpoint;	/* seconds between saves of the totals; 0: only at exit */
	const char *state_dir;	/* "" = no persistence */
};

/* Strings and arrays a config owns (from the file or split lists). */
struct lp_config_store {
	void **v;
	size_t n;
};

/* Where the defaults put things. */
#define LP_CONFIG_PATH "/etc/llmprofd/llmprofd.conf"
#define LP_STATE_DIR "/var/lib/llmprofd"

#endif
