/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* The engines: which processes run an LLM engine (ggml, torch: engine/ggml.c,
 * engine/torch.c), found by the symbols of the objects they map; the neutral parts every
 * engine shares (engine.c): the object cache, the unwind rows, the sampling table and its
 * sampler, the step probes' attachment. Precise mode (per-call uprobes for a window or a
 * duty cycle) is precise.c. */
#ifndef LLMPROF_ENGINE_H
#define LLMPROF_ENGINE_H

#include <stdbool.h>
#include <stddef.h>
#include <errno.h>
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/types.h>

#include "kernel/core.h"
#include "engine/ops.h"
#include "engine/python.h"
#include "engine/tensors.h"
#include "kernel/sampler.h"
#include "formats/elfsym.h"
#include "kernel/prober.h"
#include "tracked/track.h"
#include "kernel/unwind.h"
#include "kernel/uprobe.h"
#include "base/log.h"

/* A tracked process's mappings, kept while it waits for objects to be read: one that is
 * gone by then (a 16-token engine lives 0.1 s) is known to have run ggml from them. */
struct lp_proc_stash {
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
struct lp_obj {
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
	/* Its engine's step probes (llama_decode, aten::embedding), attached system-wide when
	 * first seen (in an LLM process for ggml, in any for torch, whose processes its step
	 * finds) */
	struct lp_probes step;
	bool step_tried;
	int step_error;
	pid_t step_pid; /* the last process whose path to it was tried */
	uint8_t engine; /* enum lp_engine_id of its verdict (LP_OBJ_NONE: none's) */
	/* Its op functions' table, where its engine names ops by their entry points (torch):
	 * the ops' names and groups by id (the rows' 1-based name), and where the kernel
	 * has the rows (a slot of unwind_rows, given back with the object), or why not */
	char **op_names;
	uint8_t *op_groups;
	size_t nop_names;
	uint32_t opfn_slot, opfn_n;
	int opfn_error;
	uint16_t *sym_op; /* per symbol of syms, its op's id (1-based), or 0 */
	/* a BLAS that imports OpenMP's entry points (its threads are OpenMP's, not its own) */
	bool imports_omp;
	/* GCC's OpenMP runtime (libgomp): the GOT slot of its TLS block as a file offset of
	 * its executable segment's (formats/elfsym.h), where each thread's struct gomp_thread
	 * is; 0: not GCC's, or not found */
	uint64_t omp_team_got;
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

struct lp_eproc {
	uint8_t engine; /* enum lp_engine_id: the engine it runs */
	/* Its OpenMP runtime's region entries, probed for this process only (torch.bpf.c:
	 * a worker's op), attached once it is found; why not */
	struct lp_probes region;
	bool region_tried;
	bool region_attached; /* they were, once (let go at its exit) */
	int region_error;
	/* its workers' regions found from their own thread data, GCC's runtime's (where.bpf.h's
	 * team path): its region entries are not probed */
	bool omp_team;
	struct lp_obj **objs; /* mapped objects that hold any symbol of interest */
	size_t nobjs;
	uint64_t found_ns; /* when it was found to run its engine */
	bool announced;	   /* "runs ENGINE" logged, and found's hook called, once its objects are */
	/* CLOCK_MONOTONIC when its llama_decode calls began to count: every call entered
	 * since is counted (one entered while the probes went on may be); 0: none probed */
	uint64_t decode_since_ns;
	size_t nranges; /* matmul and barrier functions in the sampling table */
	size_t ranges_dropped;
	struct lp_sampler sampler; /* started with the first sampling table */
	struct lp_op_table ops;	   /* op indices of the sampling table */
	uint32_t aops[LP_MAX_OPS]; /* per index: the op functions' table's op, or 0 */
	size_t ops_dropped;	   /* op names past LP_MAX_OPS: their samples are outside ops */
	bool op_samples_made;	   /* its op_samples entry exists in the kernel */
	struct lp_op_samples *final_ops; /* the kernel's last counts, read at the exit */
	struct lp_py_state py;		 /* CPython in it (python.h) */
	/* the libraries whose samples it counts (LP_K_LIBRARY: torch's BLAS), by index */
	const struct lp_obj *libs[LP_MAX_LIBS];
	/* the objects of the sampling table's unwind entries, in its order (uw_fail_obj) */
	struct lp_obj *uw_objs[LP_MAX_UNWIND];
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
	/* The ops /metrics names (lp_eproc_metrics_ops): chosen once, so that every series,
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

void lp_eproc_free(struct lp_eproc *gp);

/* How many of an object's functions are op functions (ggml_compute_forward_*, whatever
 * class of symbol matched them first). */
static inline bool lp_obj_has(const struct lp_obj *o, int cls)
{
	for (size_t i = 0; i < o->syms.nsyms; i++)
		if (o->syms.syms[i].cls == cls)
			return true;
	return false;
}

static inline size_t lp_obj_op_functions(const struct lp_obj *o)
{
	char op[LP_OP_NAME_MAX];
	size_t n = 0;

	/* an op functions' table names them (torch's aten entry points) */
	for (size_t i = 0; o->sym_op && i < o->syms.nsyms; i++)
		n += o->sym_op[i] != 0;
	for (size_t i = 0; !o->sym_op && i < o->syms.nsyms; i++)
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
static inline void lp_eproc_metrics_ops(struct lp_eproc *gp, const struct lp_op_samples *os)
{
	if (gp->metrics_ops_chosen || os->total < LP_METRICS_OPS_AFTER)
		return;
	lp_op_mark_top(&gp->ops, os->all, LP_METRICS_OPS, gp->metrics_op);
	gp->metrics_ops_chosen = true;
}

/* The process's op counts now, on the heap (the caller frees), or NULL: the kernel's while
 * it runs, the last read once it has exited. The one place that reads them: the ops of
 * its op functions' tables (aop_samples) in with the others, each under the index its op
 * has in the process's table (appended as first seen). */
struct lp_op_samples *lp_eproc_op_samples(const struct lp_core *c, struct lp_eproc *gp, pid_t pid);

/* The index in the process's op table of an op functions' table's op (aop: abi.h), added
 * if new; -1 where it names none the process maps, or the table is full. */
int lp_eproc_aop_index(struct lp_eproc *gp, uint32_t aop);

/* Whether samples in the object's code may be an op's: its frames are worth walking (an
 * OpenMP runtime's time is sync wherever it is called from). */
static inline bool lp_obj_unwinds(const struct lp_obj *o)
{
	return !o->omp_runtime && (lp_obj_has(o, LP_SYM_MATMUL) || lp_obj_has(o, LP_SYM_OP));
}

/* How samples in the object's code find their callers: "eh_frame", or why not. */
/* Walked by its rows: it has them, or had them and gave them back when no running process
 * mapped it any more (read again when one does). */
static inline bool lp_obj_walked_by_rows(const struct lp_obj *o)
{
	return o->uw_n || o->uw_error == -ENODATA;
}

static inline const char *lp_obj_unwind(const struct lp_obj *o)
{
	if (lp_obj_walked_by_rows(o))
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
		return lp_obj_unwinds(o) ? "stack scan: unwinding is off" : "none: no ops in it";
	default:
		return "stack scan: its .eh_frame could not be read";
	}
}

/* Whether any of the process's objects holds a function matching pattern. */
static inline bool lp_eproc_has(const struct lp_eproc *gp, const char *pattern)
{
	for (size_t i = 0; i < gp->nobjs; i++)
		for (size_t k = 0; k < gp->objs[i]->syms.nsyms; k++)
			if (lp_elf_name_match(pattern, gp->objs[i]->syms.syms[k].name))
				return true;
	return false;
}

struct lp_engines;

/* What a room built on this one (precise mode: engine/precise.h) is told of a process's
 * life, set by the daemon's wiring; each may be NULL. */
struct lp_engine_hooks {
	/* The process was found to run an LLM (at found_ns). */
	void (*found)(struct lp_engines *g, struct lp_target *t, uint64_t found_ns);
	/* It mapped objects while its precise window is on. */
	void (*mapped)(struct lp_engines *g, struct lp_target *t);
	/* It exited: before its sampler stops and its last op counts are read. */
	void (*exited)(struct lp_engines *g, struct lp_target *t);
	/* Its figures were reset: after the op counts. */
	void (*reset)(struct lp_engines *g, struct lp_target *t);
};

struct lp_engines {
	const struct lp_config *cfg;
	struct lp_core *core;
	struct lp_tracker *tr;
	struct lp_obj **objs;
	size_t nobjs;
	struct lp_map_pending {
		pid_t pid;
		struct lp_obj_key key;
		int tries;
	} * pending;
	size_t npending;
	struct lp_unwind unwind;
	/* Processes whose tracking waits for the futex programs' attach (core.h). */
	struct lp_pids futex_waiters;
	/* Tracked processes' mappings while they wait for objects (ggml.c) */
	struct lp_proc_stash *stash;
	size_t nstash;
	size_t reads_busy;	  /* objects read on the prober's threads now */
	struct lp_prober *prober; /* NULL: probes go on and off on the calling thread */
	struct event_base *base;  /* NULL: timed windows end at the once-a-second tick */
	struct lp_engine_hooks hooks;
};

/* Whether the workers of OpenMP runtime o find their region's op from their own thread
 * data (GCC's runtime, its TLS slot found; not --no-openmp-thread-data): its slot goes in
 * the sampling table of an engine whose workers take their region's op (engine.c), and
 * its region entry is not probed (torch.c). */
static inline bool lp_obj_team_path(const struct lp_engines *g, const struct lp_obj *o)
{
	return o->omp_team_got && g->cfg->openmp_thread_data;
}

void lp_engines_init(struct lp_engines *g, const struct lp_config *cfg, struct lp_core *core,
		     struct lp_tracker *tr);
void lp_engines_free(struct lp_engines *g);

/* Reads every process's executable mappings; tracks those that run ggml. Returns how many
 * processes it started tracking. */
int lp_engines_scan_all(struct lp_engines *g);

/* An LP_EV_MAP record: queued, read by lp_engines_process_pending() once the mapping exists. */
void lp_engines_event(struct lp_engines *g, const struct lp_ev_map *e);

/* An LP_EV_FOUND record: a process an engine's step found (torch's first forward), in
 * procs already, to track. */
void lp_engines_found(struct lp_engines *g, const struct lp_ev_found *e);

/* An LP_EV_DECODE record: a decode's batch, to its process's requests (requests.h). */
void lp_engines_decode_event(struct lp_engines *g, const struct lp_ev_decode *e);

/* Reads the queued processes' mappings. Returns true while some are still queued. */
bool lp_engines_process_pending(struct lp_engines *g);

/* The futex programs are attached (core.h's futex_ready): the processes waiting for them
 * are tracked. */
void lp_engines_futex_ready(void *g);

/* Looks at a process tracked some other way (--pid, --comm, --exe): it may run ggml. */
void lp_engines_check(struct lp_engines *g, struct lp_target *t);

/* After lp_tracker_reset(): zeroes the op counts and precise mode's figures. */
void lp_engines_reset(struct lp_engines *g, struct lp_target *t);

/* Once a second: gives back the unwind rows no process has used for LP_ROWS_LINGER_NS. */
#define LP_ROWS_LINGER_NS (3ULL * 1000000000ULL)
void lp_engines_tick(struct lp_engines *g);

/* The tracker's exit hook: reads the op counts a last time, closes a precise window and
 * drops the probes. */
void lp_engines_on_exit(struct lp_engines *g, struct lp_target *t);

/* --- the engine table --- */

/* A probe for one process: a program, at a file offset of the file a path reaches. */
struct lp_probe_site {
	struct bpf_program *prog;
	bool ret;
	size_t off;
	char path[PATH_MAX + 64];
};

/* One engine llmprofd knows: how its processes are recognised, how one of their symbols
 * becomes an op of the sampling table, which step probe counts their tokens and phases.
 * Everything else is engine.c's, the same for every engine. A new engine is one of these
 * in a file of its own, its entry in lp_engines_table (engine.c) and, if it needs one, its
 * step program in bpf/ (README, "Adding an engine"). */
struct lp_engine {
	enum lp_engine_id id;
	/* Its own symbol classes (config.h's, past LP_SYM_CONFIG_NR): the patterns of each,
	 * NULL where it has none */
	const char *const *patterns[LP_SYM_NR];
	/* What an object is to it (enum lp_obj_verdict), from the object's symbols */
	uint32_t (*verdict)(const struct lp_obj *o);
	/* The sampling table's entry of a symbol of one of its processes: its kind (enum
	 * lp_range_kind), and for an op or a kernel its op's name and group. Returns 0, or
	 * -ENOENT for a symbol with no entry. */
	int (*sym_entry)(const struct lp_elf_sym *sym, uint8_t *kind, char *op, size_t size,
			 enum lp_op_group *group);
	/* The symbol class of its step entry point, and its probes on an object holding it,
	 * for every process that maps the object (on the prober's thread: prober.h) */
	int step_class;
	int (*attach_step)(struct lp_engines *g, pid_t pid, struct lp_obj *o, const char *path);
	/* What the log's "pid N (comm) runs NAME: ..." says of a process it found */
	void (*describe_found)(const struct lp_engines *g, const struct lp_target *t,
			       struct lp_line *l);
	/* Its op functions' table of an object holding its entry points (NULL: it names
	 * its ops by the sampling table's ranges): the names and groups by id into o, and
	 * the rows, sorted by offset, into *rows (malloc'ed), *n of them (prober thread).
	 * Returns 0, -ENOENT (no op functions) or -errno. */
	int (*op_functions)(int fd, struct lp_obj *o, struct lp_opfn_row **rows, size_t *n);
	/* Probes of its own for one process it found, on the process's objects (NULL: none):
	 * where they go, into *v (malloc'ed), *n of them, on the loop; engine.c attaches
	 * them for that process only, off it. Returns 0 or -errno. */
	int (*proc_probes)(struct lp_engines *g, pid_t pid, const struct lp_eproc *gp,
			   struct lp_probe_site **v, size_t *n);
	/* Its OpenMP workers' samples count for the op their region's master was in (their
	 * stacks hold none): found from a worker's thread data with GCC's runtime (engine.c
	 * puts the runtime's TLS slot in the sampling table), else by its proc_probes */
	bool region_ops;
};

extern const struct lp_engine lp_engine_ggml, lp_engine_torch;
extern const struct lp_engine *const lp_engines_table[LP_ENGINE_NR];

static inline const struct lp_engine *lp_engine_of(unsigned id)
{
	return lp_engines_table[id < LP_ENGINE_NR ? id : LP_ENGINE_GGML];
}

/* An engine's name: the API's "engine", the process document's key of its figures, the
 * pprof and /metrics label (here, not in the table: reports name engines without the
 * daemon's wiring). */
static inline const char *lp_engine_name(unsigned id)
{
	static const char *const names[LP_ENGINE_NR] = {
		[LP_ENGINE_GGML] = "ggml", [LP_ENGINE_TORCH] = "torch"};

	return id < LP_ENGINE_NR ? names[id] : "unknown";
}

/* An engine's step in words, for the reports: the function whose calls are its steps
 * (which count its tokens and phases), and how one is timed. */
struct lp_engine_step {
	const char *name, *timed, *errors; /* errors: what its decode_errors count */
};

static inline struct lp_engine_step lp_engine_step_of(unsigned id)
{
	static const struct lp_engine_step steps[LP_ENGINE_NR] = {
		[LP_ENGINE_GGML] = {"llama_decode", "entry to return", "decode errors"},
		[LP_ENGINE_TORCH] = {"forward",
				     "from its token embedding (at::_ops::embedding::call) to the "
				     "next forward's, on the same thread; a generation's last "
				     "forward and a prompt's not followed by a generation's are "
				     "not timed",
				     "forwards whose token ids were not read"}};

	return id < LP_ENGINE_NR ? steps[id] : (struct lp_engine_step){"step", "unknown", "errors"};
}

#endif
