/* The daemon's settings, from the command line. */
#ifndef LLMPROF_CONFIG_H
#define LLMPROF_CONFIG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

enum lp_futex_source {
	LP_FUTEX_SRC_AUTO = 0, /* syscall tracepoints when tracefs is there, else raw_syscalls */
	LP_FUTEX_SRC_TRACEPOINT,
	LP_FUTEX_SRC_RAW,
	LP_FUTEX_SRC_OFF,
};

/* The kinds of ggml functions llmprofd looks for; index into lp_config.symbols. */
enum lp_sym_class {
	LP_SYM_MATMUL = 0, /* any of these mapped makes a process an LLM process */
	LP_SYM_BARRIER,
	LP_SYM_DECODE,
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

	bool once;
	double seconds;	   /* with once: stop after this long (0 = until the --pid targets exit) */
	bool sched_raw_tp; /* use raw_tp even where tp_btf loads */
	enum lp_futex_source futex_source;
	bool faults;
	bool mount_tracefs;
	bool verbose;

	/* ggml */
	bool discover;			       /* track processes that map a matmul symbol */
	const char *const *symbols[LP_SYM_NR]; /* NULL-terminated names or globs per class */
	uint32_t sample_hz;		       /* cpu-clock sampling; 0 = off */
	bool stack_scan;		       /* classify samples by return addresses too */
	double precise_duty;		       /* share of time in precise mode, 0 to 1 */
	double precise_period;		       /* seconds per duty cycle */
};

#endif
