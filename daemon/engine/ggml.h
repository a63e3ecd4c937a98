/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* ggml discovery and probes: which processes run ggml (found by the matmul symbols in
 * their executable mappings), where their matmul and barrier functions are, the always-on
 * llama_decode probes, and precise mode (per-call uprobes for a window or a duty cycle). */
#ifndef LLMPROF_GGML_H
#define LLMPROF_GGML_H

#include <stdbool.h>
#include <stddef.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/types.h>

#include "kernel/core.h"
#include "engine/ops.h"
#include "engine/tensors.h"
#include "kernel/sampler.h"
#include "formats/elfsym.h"
#include "kernel/prober.h"
#include "tracked/track.h"
#include "kernel/unwind.h"
#include "kernel/uprobe.h"

/* A tracked process's mappings, kept while it waits for objects to be read: one that is
 * gone by then (a 16-token engine lives 0.1 s) is known to have run ggml from them. */
struct lp_ggml_stash {
	pid_t pid;
	struct lp_proc_mapping *maps;
	size_t n;
};

/* Processes waiting for the kernel's work, to be brought up to date once it is done. */
struct lp_pids {
	pid_t *v;
	size_t n;
};

/* One executable file, read once per (device, inode, mtime). */
struct lp_ggml_obj {
	uint64_t dev; /* kernel encoding, major << 20 | minor */
	uint64_t ino;
	uint64_t mtime_ns;
	char *path; /* as the first process that mapped it names it */
	int read_error;
	struct lp_elf_result syms;
	uint32_t verdict; /* enum lp_obj_verdict */
	bool stale;	  /* replaced on disk: kept only while attached */
	/* An OpenMP runtime (libgomp, LLVM's libomp): its own barrier entry points and no
	 * matmul. ggml's barrier tail-calls into it and it spins and sleeps in functions a
	 * stripped build does not name, so all of its code is sync in the sampling table. */
	bool omp_runtime;
	/* its .eh_frame rows, or why not: -ENOENT no .eh_frame, -ENOSPC every slot taken,
	 * -EFBIG too many rows, -ENOEXEC not x86-64, -EOPNOTSUPP unwinding is off. Read
	 * when first seen for objects with op or matmul functions; for objects with no
	 * symbols of interest (the C and C++ runtimes) when a process that runs ggml maps
	 * it, since a walk from a sample there to its op or barrier crosses it. An OpenMP
	 * runtime needs none: all of its code is sync. */
	uint32_t uw_slot, uw_n;
	uint32_t uw_rows_read;	   /* uw_n as read, kept once given back (exited processes) */
	uint64_t uw_idle_since_ns; /* no running process has used its rows since; 0: in use */
	int uw_error;
	bool uw_tried;
	uint32_t uw_lost[LP_UW_WHY_NR]; /* rows the walk cannot follow, by why */
	/* llama_decode probes, attached system-wide when first seen in an LLM process */
	struct lp_probes decode;
	bool decode_tried;
	int decode_error;
	pid_t decode_pid; /* the last process whose path to it was tried */
	/* A read of it on its way (its symbols, its rows, its probes: prober.h): the fields it
	 * fills are not to be read, it is not freed, and the processes waiting for it are
	 * brought up to date once it is done. reading: its symbols are among them (what it
	 * is is not known yet). */
	bool busy, reading;
	struct lp_pids waiters;
};

/* ggml state of one tracked process; owned by its lp_target. */
/* The process counters precise windows follow (their growth inside the windows): the
 * samples, to compare with, and the tokens and barrier time of the per-token split. */
enum lp_window_ctr {
	LP_W_SAMPLES,
	LP_W_SAMPLES_MATMUL,
	LP_W_SAMPLES_BARRIER,
	LP_W_GEN_TOKENS,
	LP_W_GEN_NS, /* inside llama_decode, generating */
	LP_W_BARRIER_GEN_ONCPU_NS,
	LP_W_NR,
};

struct lp_ggml_proc {
	struct lp_ggml_obj **objs; /* mapped objects that hold any symbol of interest */
	size_t nobjs;
	uint64_t found_ns; /* when its first matmul symbol was found */
	/* CLOCK_MONOTONIC when its llama_decode calls began to count: every call entered
	 * since is counted (one entered while the probes went on may be); 0: none probed */
	uint64_t decode_since_ns;
	size_t nranges; /* matmul and barrier functions in the sampling table */
	size_t ranges_dropped;
	struct lp_sampler sampler; /* started with the first sampling table */
	struct lp_op_table ops;	   /* op indices of the sampling table */
	size_t ops_dropped;	   /* op names past LP_MAX_OPS: their samples are outside ops */
	bool op_samples_made;	   /* its op_samples entry exists in the kernel */
	struct lp_op_samples *final_ops; /* the kernel's last counts, read at the exit */
	/* the objects of the sampling table's unwind entries, in its order (uw_fail_obj) */
	struct lp_ggml_obj *uw_objs[LP_MAX_UNWIND];
	/* precise mode per op */
	uint8_t op_probed[LP_MAX_OPS]; /* 1: probed in some window: op_precise may hold it */
	size_t nops_probed;	       /* in the current window */
	char *precise_ops_missing;     /* --precise-ops names this process has no op of */
	struct lp_op_precise *final_op_precise; /* [ops.n], read at the exit */
	/* precise mode's tensors (nodes.c) */
	/* probed only by functions whose tensors may be read (precise.c's readable()), and
	 * how they get them: LP_READ_PLAIN, LP_READ_MEMBER; 0: not read */
	uint8_t op_readable[LP_MAX_OPS];
	struct lp_tensor_state tensors;
	bool tensors_logged;	     /* the layout's decision is in the log */
	int tensors_waits;	     /* ticks the first decision waited for ops' calls */
	size_t tensors_seen;	     /* ops whose calls were sniffed, at the last tick */
	uint64_t tensors_decodes0;   /* decodes returned when calls were first sniffed */
	uint64_t nodes_from_ns;	     /* when nodes began to be read (lp_precise.nodes_from_ns) */
	struct lp_node *final_nodes; /* read at the exit */
	size_t nfinal_nodes;
	/* LP_C_ONCPU_NS when the sampling table was first written: samples count from then */
	uint64_t oncpu_at_table_ns;
	uint64_t table_ns; /* CLOCK_MONOTONIC then; 0: not written yet */
	/* The ops /metrics names (lp_ggml_metrics_ops): chosen once, so that every series,
	 * op="other" included, only grows. */
	bool metrics_ops_chosen;
	uint8_t metrics_op[LP_MAX_OPS]; /* 1: exported under its own name */

	/* precise mode */
	bool precise_on;
	bool precise_attaching;	  /* its probes on their way (prober.h): the window opens then */
	uint32_t attach_seq;	  /* bumped to disown an attach on its way */
	double attach_seconds;	  /* the window asked for, from when its probes are on */
	uint64_t attach_ns;	  /* how long the last window's probes took to go on */
	struct event *window_end; /* a timed window's end, on the loop (NULL: the tick's) */
	uint32_t gen;
	uint64_t window_until_ns; /* 0: held by the duty cycle */
	uint64_t window_start_ns;
	uint64_t oncpu_start_ns;       /* /proc/PID/task/STAR/schedstat sums: up to date */
	uint64_t bpf_oncpu_start_ns;   /* LP_C_ONCPU_NS: exact once every thread has exited */
	uint64_t ctr_start[LP_W_NR];   /* the counters windows follow, at window start */
	struct lp_probes probes;       /* the current window's */
	size_t nprobed;		       /* functions probed in the current window */
	uint32_t objs_gen, probed_gen; /* probes are re-attached when the objects change */
	int precise_error;
	/* completed windows */
	uint64_t windows;
	uint64_t window_ns;
	uint64_t window_oncpu_ns;
	uint64_t window_ctr[LP_W_NR];
	/* op samples at the open window's start, and summed over completed windows */
	uint64_t op_start[LP_MAX_OPS], op_total_start;
	uint64_t window_op[LP_MAX_OPS], window_op_total;
};

void lp_ggml_proc_free(struct lp_ggml_proc *gp);

/* How many of an object's functions are op functions (ggml_compute_forward_*, whatever
 * class of symbol matched them first). */
static inline bool lp_ggml_obj_has(const struct lp_ggml_obj *o, int cls)
{
	for (size_t i = 0; i < o->syms.nsyms; i++)
		if (o->syms.syms[i].cls == cls)
			return true;
	return false;
}

static inline size_t lp_ggml_obj_op_functions(const struct lp_ggml_obj *o)
{
	char op[LP_OP_NAME_MAX];
	size_t n = 0;

	for (size_t i = 0; i < o->syms.nsyms; i++)
		n += o->syms.syms[i].cls != LP_SYM_BARRIER &&
		     o->syms.syms[i].cls != LP_SYM_DECODE &&
		     lp_op_name(o->syms.syms[i].name, op, sizeof(op)) == 0;
	return n;
}

/* /metrics exports the LP_METRICS_OPS ops with most samples by name and sums the rest as
 * op="other". The choice is made once, when the process has LP_METRICS_OPS_AFTER samples
 * (enough to rank them): an op that joined later would take its past out of "other". */
#define LP_METRICS_OPS 10
#define LP_METRICS_OPS_AFTER 1000
static inline void lp_ggml_metrics_ops(struct lp_ggml_proc *gp, const struct lp_op_samples *os)
{
	if (gp->metrics_ops_chosen || os->total < LP_METRICS_OPS_AFTER)
		return;
	lp_op_mark_top(&gp->ops, os->all, LP_METRICS_OPS, gp->metrics_op);
	gp->metrics_ops_chosen = true;
}

/* The process's op counts now, on the heap (the caller frees), or NULL: the kernel's while
 * it runs, the last read once it has exited. The one place that reads them. */
static inline struct lp_op_samples *lp_ggml_op_samples(const struct lp_core *c,
						       const struct lp_ggml_proc *gp, pid_t pid)
{
	struct lp_op_samples *os;

	if (!gp || !(gp->final_ops || gp->op_samples_made) || !(os = malloc(sizeof(*os))))
		return NULL;
	if (gp->final_ops)
		*os = *gp->final_ops;
	else if (lp_core_op_samples(c, pid, os)) {
		free(os);
		return NULL;
	}
	return os;
}

/* Whether samples in the object's code may be an op's: its frames are worth walking (an
 * OpenMP runtime's time is sync wherever it is called from). */
static inline bool lp_ggml_obj_unwinds(const struct lp_ggml_obj *o)
{
	return !o->omp_runtime &&
	       (lp_ggml_obj_has(o, LP_SYM_MATMUL) || lp_ggml_obj_has(o, LP_SYM_OP));
}

/* How samples in the object's code find their callers: "eh_frame", or why not. */
/* Walked by its rows: it has them, or had them and gave them back when no running process
 * mapped it any more (read again when one does). */
static inline bool lp_ggml_obj_walked_by_rows(const struct lp_ggml_obj *o)
{
	return o->uw_n || o->uw_error == -ENODATA;
}

static inline const char *lp_ggml_obj_unwind(const struct lp_ggml_obj *o)
{
	if (lp_ggml_obj_walked_by_rows(o))
		return "eh_frame";
	switch (o->uw_error) {
	case -ENOENT:
		return "stack scan: no .eh_frame";
	case -ENOSPC:
		return "stack scan: every unwind slot is taken";
	case -EFBIG:
		return "stack scan: more unwind rows than one object may have";
	case -ENOEXEC:
		return "stack scan: not an x86-64 object";
	case -ESTALE:
		return "none: replaced on disk, no process maps it";
	case -EOPNOTSUPP:
		return lp_ggml_obj_unwinds(o) ? "stack scan: unwinding is off"
					      : "none: no ops in it";
	default:
		return "stack scan: its .eh_frame could not be read";
	}
}

/* Whether any of the process's objects holds a function matching pattern. */
static inline bool lp_ggml_proc_has(const struct lp_ggml_proc *gp, const char *pattern)
{
	for (size_t i = 0; i < gp->nobjs; i++)
		for (size_t k = 0; k < gp->objs[i]->syms.nsyms; k++)
			if (lp_elf_name_match(pattern, gp->objs[i]->syms.syms[k].name))
				return true;
	return false;
}

struct lp_ggml;

/* What a room built on this one (precise mode: engine/precise.h) is told of a process's
 * life, set by the daemon's wiring; each may be NULL. */
struct lp_ggml_hooks {
	/* The process was found to run an LLM (at found_ns). */
	void (*found)(struct lp_ggml *g, struct lp_target *t, uint64_t found_ns);
	/* It mapped objects while its precise window is on. */
	void (*mapped)(struct lp_ggml *g, struct lp_target *t);
	/* It exited: before its sampler stops and its last op counts are read. */
	void (*exited)(struct lp_ggml *g, struct lp_target *t);
	/* Its figures were reset: after the op counts. */
	void (*reset)(struct lp_ggml *g, struct lp_target *t);
};

struct lp_ggml {
	const struct lp_config *cfg;
	struct lp_core *core;
	struct lp_tracker *tr;
	struct lp_ggml_obj **objs;
	size_t nobjs;
	struct lp_ggml_pending {
		pid_t pid;
		struct lp_obj_key key;
		int tries;
	} * pending;
	size_t npending;
	struct lp_unwind unwind;
	/* Processes whose tracking waits for the futex programs' attach (core.h). */
	struct lp_pids futex_waiters;
	/* Tracked processes' mappings while they wait for objects (ggml.c) */
	struct lp_ggml_stash *stash;
	size_t nstash;
	size_t reads_busy;	  /* objects read on the prober's threads now */
	struct lp_prober *prober; /* NULL: probes go on and off on the calling thread */
	struct event_base *base;  /* NULL: timed windows end at the once-a-second tick */
	struct lp_ggml_hooks hooks;
};

void lp_ggml_init(struct lp_ggml *g, const struct lp_config *cfg, struct lp_core *core,
		  struct lp_tracker *tr);
void lp_ggml_free(struct lp_ggml *g);

/* Reads every process's executable mappings; tracks those that run ggml. Returns how many
 * processes it started tracking. */
int lp_ggml_scan_all(struct lp_ggml *g);

/* An LP_EV_MAP record: queued, read by lp_ggml_process_pending() once the mapping exists. */
void lp_ggml_event(struct lp_ggml *g, const struct lp_ev_map *e);

/* An LP_EV_DECODE record: a decode's batch, to its process's requests (requests.h). */
void lp_ggml_decode_event(struct lp_ggml *g, const struct lp_ev_decode *e);

/* Reads the queued processes' mappings. Returns true while some are still queued. */
bool lp_ggml_process_pending(struct lp_ggml *g);

/* The futex programs are attached (core.h's futex_ready): the processes waiting for them
 * are tracked. */
void lp_ggml_futex_ready(void *g);

/* Looks at a process tracked some other way (--pid, --comm, --exe): it may run ggml. */
void lp_ggml_check(struct lp_ggml *g, struct lp_target *t);

/* After lp_tracker_reset(): zeroes the op counts and precise mode's figures. */
void lp_ggml_reset(struct lp_ggml *g, struct lp_target *t);

/* Once a second: gives back the unwind rows no process has used for LP_ROWS_LINGER_NS. */
#define LP_ROWS_LINGER_NS (3ULL * 1000000000ULL)
void lp_ggml_tick(struct lp_ggml *g);

/* The tracker's exit hook: reads the op counts a last time, closes a precise window and
 * drops the probes. */
void lp_ggml_on_exit(struct lp_ggml *g, struct lp_target *t);

#endif
