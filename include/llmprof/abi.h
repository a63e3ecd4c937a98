/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* The BPF <-> daemon contract: map keys, map values and ring buffer records.
 *
 * Only bpf/ and the daemon's loader include this file. It has no includes and uses only
 * fixed-width __u32/__u64 so that it compiles against vmlinux.h and <linux/types.h> alike.
 * Bump LP_ABI_VERSION if any layout below changes: the daemon persists nothing of it yet,
 * but the number is reported so that mismatched builds are recognisable.
 */
#ifndef LLMPROF_ABI_H
#define LLMPROF_ABI_H

#include "hist.h"

#define LP_ABI_VERSION 8

#define LP_COMM_LEN 16
#define LP_MAX_COMMS 64 /* --comm names the kernel side matches at exec */

/* One histogram per kind and tracked process, all in nanoseconds. */
enum lp_hist_kind {
	LP_H_RUNQ = 0,	    /* runnable (woken or preempted) until running again */
	LP_H_OFF_BLOCKED,   /* switched out while sleeping, until switched in */
	LP_H_OFF_PREEMPTED, /* switched out while runnable, until switched in */
	LP_H_FUTEX,	    /* futex waits: asleep (switch-out to in), or syscall enter to exit */
	LP_H_DECODE_PROMPT, /* llama_decode calls given more than one token */
	LP_H_DECODE_GEN,    /* llama_decode calls given one token: generation */
	LP_H_MATMUL,	    /* precise mode: outermost matmul calls, entry to return */
	LP_H_BARRIER,	    /* precise mode: outermost barrier calls, entry to return */
	LP_H_FUTEX_GEN,	    /* the futex waits that began and ended in one generation decode */
	LP_H_NR,
};

/* Per-process counters; index into lp_proc_stats.ctr. */
enum lp_counter {
	LP_C_ONCPU_NS = 0,
	LP_C_NVCSW,	     /* voluntary switches: the thread blocked */
	LP_C_NIVCSW,	     /* involuntary switches: preempted or yielded while runnable */
	LP_C_MIGRATIONS,     /* switched in on another CPU than it last ran on */
	LP_C_FUTEX_TIMEDOUT, /* futex waits that returned -ETIMEDOUT */
	LP_C_FUTEX_EAGAIN,   /* futex waits that returned at once: the value had changed */
	LP_C_FUTEX_LOCK_PI,  /* of the waits, FUTEX_LOCK_PI / LOCK_PI2 */
	LP_C_FUTEX_WAITV,    /* of the waits, futex_waitv(2) */
	LP_C_FAULTS_MIN,     /* user page faults resolved without I/O */
	LP_C_FAULTS_MAJ,     /* user page faults that needed I/O */
	/* llama_decode, probed always: once per batch */
	LP_C_DECODE_PROMPT_CALLS,
	LP_C_DECODE_PROMPT_TOKENS,
	LP_C_DECODE_PROMPT_NS,
	LP_C_DECODE_GEN_CALLS, /* = tokens: one each */
	LP_C_DECODE_GEN_NS,
	LP_C_DECODE_ERRORS, /* calls that returned non-zero */
	/* cpu-clock samples of the process, classified by where the thread was */
	LP_C_SAMPLES,
	LP_C_SAMPLES_MATMUL,
	LP_C_SAMPLES_BARRIER,
	LP_C_BARRIER_OFF_EST_NS, /* off-CPU time of threads switched out inside a barrier */
	/* precise mode only: uprobes on every matmul and barrier call */
	LP_C_MATMUL_CALLS,
	LP_C_MATMUL_NS,		   /* wall time, entry to return */
	LP_C_MATMUL_EXCL_ONCPU_NS, /* on CPU, less the barriers called from inside */
	LP_C_BARRIER_CALLS,
	LP_C_BARRIER_NS,     /* wall time, entry to return */
	LP_C_BARRIER_OFF_NS, /* of which off-CPU: the rest is spinning */
	/* the wall clock between the starts of two generation decodes of one stream (sampling
	 * and the application's own work included), gaps of a second or more left out */
	LP_C_GEN_INTERVALS,
	LP_C_GEN_INTERVAL_NS,
	/* precise mode: barrier time on CPU (spinning) while a generation decode is in flight */
	LP_C_BARRIER_GEN_ONCPU_NS,
	/* of those intervals, the gaps: from a generation decode's return to the next one's
	 * start. The wall time per token is the decode time plus these (render.c), so that it
	 * is never less than the time inside llama_decode over the same calls. */
	LP_C_GEN_GAP_NS,
	/* switch-outs with no switch-in seen since the last one: the kernel ran the thread
	 * without a sched_switch naming it (its off-CPU time then ends where its own account
	 * of the slice says the slice began) */
	LP_C_SWITCH_IN_UNSEEN,
	/* precise mode: barrier calls returned while a generation decode was in flight */
	LP_C_BARRIER_GEN_CALLS,
	/* off-CPU stretches taken as a sample of a busy thread's, each standing for the
	 * switch-outs since the one before (sched.bpf.c) */
	LP_C_STRETCHES_SAMPLED,
	/* threads whose stretches began to be taken as a sample (their first gap drawn): the
	 * off-CPU, run-queue and futex figures are estimates where this is not 0, even before
	 * a gap has ended */
	LP_C_SAMPLED_THREADS,
	/* samples the kernel did not take while one of its threads ran on and on (the CPU's
	 * timer fired and the sampler did not run: another BPF program ran there; or the timer
	 * itself came late by a period and more): missing from samples and from every share
	 * (sample.bpf.c, "Samples not taken") */
	LP_C_SAMPLES_SKIPPED,
	/* Tokens whose step's time is known, by phase: the rates' numerators (tokens over
	 * LP_C_DECODE_*_NS). For llama_decode every call's (its return times it); for torch,
	 * whose forward ends where the next begins, those followed by a generation forward
	 * (torch.bpf.c) */
	LP_C_PROMPT_TIMED_TOKENS,
	LP_C_GEN_TIMED_TOKENS,
	/* generation steps: llama_decode calls of one token; torch forwards of one position,
	 * each a token per sequence of the batch */
	LP_C_GEN_STEPS,
	/* torch: OpenMP parallel regions its threads opened (always: their entry is probed in
	 * its processes, torch.bpf.c), and the wall time with one open */
	LP_C_OMP_REGIONS,
	LP_C_OMP_REGION_NS,
	/* CPython: futex waits on its GIL's words (each one taken: never a sample), their
	 * time */
	LP_C_GIL_WAITS,
	LP_C_GIL_WAIT_NS,
	/* the run-queue wait of its threads, the kernel's own run_delay: every wait, where the
	 * runqueue_latency histogram samples a churning thread's (its sum an estimate) */
	LP_C_RUNQ_NS,
	LP_C_NR,
};

/* The tokens of a phase whose steps' time is known (the rates' numerators), where they were
 * counted; every one of the phase's where they were not (a report of a daemon from before
 * they were). */
#define lp_timed_tokens(ctr, prompt)                                                  \
	((ctr)[(prompt) ? LP_C_PROMPT_TIMED_TOKENS : LP_C_GEN_TIMED_TOKENS]           \
		 ? (ctr)[(prompt) ? LP_C_PROMPT_TIMED_TOKENS : LP_C_GEN_TIMED_TOKENS] \
		 : (ctr)[(prompt) ? LP_C_DECODE_PROMPT_TOKENS : LP_C_DECODE_GEN_CALLS])

/* Value of the "procs" map, keyed by tgid. User space inserts a zeroed entry to start
 * tracking; the BPF programs only update existing entries and delete the entry when the
 * last thread of the group exits, after copying it into an LP_EV_EXIT record. */
struct lp_proc_stats {
	__u64 tracked_since_ns; /* bpf_ktime_get_ns() clock, set by user space */
	__u64 exit_ns;		/* set in the exit record only */
	__u64 gen_last_ns;	/* when the last generation decode began; 0 after a prompt */
	__u64 gen_end_ns;	/* when the last generation decode returned */
	__u32 tgid;
	/* Odd while a generation decode is in flight: one more at its entry and at its return,
	 * so that a futex wait can tell it began and ended in the same one. */
	__u32 gen_seq;
	__u64 ctr[LP_C_NR];
	struct lp_hist hist[LP_H_NR];
};

/* A probed function in flight on one thread (precise mode); nested calls count once. */
struct lp_call {
	__u32 depth;
	__u32 pad;
	__u64 since;
	__u64 inner_ns; /* time in other probed functions called from inside */
	__u64 off_ns;	/* off-CPU time inside, not inside one of those */
};

/* Value of the "threads" map, keyed by tid: scheduler state of one thread of a tracked
 * process plus its own counters (the per-thread detail). */
struct lp_thread {
	__u32 tgid;
	__u32 last_cpu;	      /* cpu + 1; 0 = not seen running yet */
	__u64 on_since;	      /* switched in at; 0 while off-CPU */
	__u64 off_since;      /* switched out at; 0 while on-CPU */
	__u64 runnable_since; /* woken or preempted at; 0 when not waiting for a CPU */
	/* The kernel's own account (se.sum_exec_runtime, sched_info.run_delay) at the last
	 * switch of this thread; valid once acct_seen */
	__u64 sum_last;
	__u64 rd_last;
	__u32 acct_seen;
	__u32 futex_gen;   /* its process's gen_seq when the wait in flight began */
	__u64 futex_since; /* in a futex wait since; 0 otherwise */
	__u64 futex_uaddr;
	__u32 futex_kind;    /* enum lp_futex_kind of the wait in flight */
	__u32 off_preempted; /* 1 when the last switch-out left it runnable */
	__u64 oncpu_ns;
	__u64 runq_ns;
	__u64 off_blocked_ns;
	__u64 off_preempted_ns;
	__u64 futex_ns;
	__u64 futex_waits;
	__u64 nvcsw;
	__u64 nivcsw;
	__u64 migrations;
	__u64 faults_min;
	__u64 faults_maj;
	/* llama_decode in flight */
	__u64 decode_since;
	__u64 decode_tokens;
	/* where it was when switched out (enum lp_region), from its user stack */
	__u32 off_region;
	/* precise mode: calls in flight, valid while pgen matches the process's */
	__u32 pgen;
	__u32 gen_in;	    /* counted in its process's op_samples.gen_depth */
	struct lp_call mm;  /* inner_ns: wall time of barriers called from inside */
	struct lp_call bar; /* inner_ns: unused */
	struct lp_call op;  /* the outermost probed op in flight; inner_ns: its barriers */
	__u32 op_idx;	    /* its index in the process's op table */
	__u32 preempted_by; /* tgid of the task that took its CPU at the last preemption */
	/* Stretches taken as a sample (sched.bpf.c): how many switch-outs the open or last
	 * one stands for */
	__u32 stretch_w;
	__u32 dec_in; /* 1: counted in its process's decode_depth (a decode in flight) */
	/* The kernel's switch, migration and minor fault counts at the last look, as
	 * sum_last */
	__u64 nvcsw_last;
	__u64 nivcsw_last;
	__u64 mig_last;
	__u64 minflt_last;
	/* CPython: its waits for the GIL (futex waits on its words) and their time */
	__u64 gil_waits;
	__u64 gil_ns;
	/* cpu-clock samples of this thread: in all, in sync (a barrier), in ggml's compute (an
	 * op or sync) */
	__u64 samples;
	__u64 samples_sync;
	__u64 samples_ggml;
	/* The run queue's clock at the switch-out that opened the stretch off_since
	 * stands for (precise mode), else 0 */
	__u64 off_clock;
	/* The OpenMP region it opened (torch.bpf.c): its stack pointer at the runtime's
	 * entry, 0 when none is open; the regions it opened inside that one, and it */
	__u64 omp_sp;
	__u32 omp_depth;
	__u32 omp_pad;
};

/* What a piece of code is, for classifying samples and precise probes. */
enum lp_region {
	LP_R_OTHER = 0,
	LP_R_MATMUL,
	LP_R_BARRIER,
};

/* What an entry of the sampling table is. */
enum lp_range_kind {
	/* A ggml operator's function (ggml_compute_forward_<op>, a fork's fused ops): a
	 * sample whose instruction pointer or innermost return address of interest is in it
	 * counts for its op, with every kernel it calls. */
	LP_K_OP = 0,
	/* A matmul kernel outside any op function (ik_llama.cpp's iqk_mul_mat): counts for
	 * the op function above it, or for itself when none is found. */
	LP_K_KERNEL,
	/* ggml_barrier and the runtimes' barrier entry points: sync. */
	LP_K_BARRIER,
	/* An OpenMP runtime's whole text: sync when the instruction pointer is in it; as a
	 * caller (thread start, parallel region) it says nothing and the scan goes on. */
	LP_K_RUNTIME,
	/* A library's whole text (a BLAS): a sample whose instruction pointer is in it is
	 * counted for the library (op: its index, < LP_MAX_LIBS), and placed as any other */
	LP_K_LIBRARY,
};
#define LP_MAX_LIBS 8

/* Value of the "ranges" map, keyed by tgid: the process's sampling table, sorted by start
 * and disjoint. User space writes it after reading the process's mappings. */
#define LP_MAX_RANGES 512
/* A longer time outside llama_decode between two generation decodes is a pause (a new
 * request, a user), not a token: a slow token's time is inside its decode. (It was the
 * time from one decode's start to the next: at under 1 token/s no interval counted, and
 * at 2 tokens/s only the fast ones did, so the wall rate read above the decode rate.) */
#define LP_GEN_GAP_NS 1000000000ULL
#define LP_MAX_OPS 256 /* op indices: a byte */
/* CPUs whose samples not taken are counted (sample.bpf.c); on a larger host, the rest are
 * not counted, and the status says so. */
#define LP_SAMPLE_CPUS 1024
struct lp_range {
	__u64 start;
	__u64 end; /* exclusive */
};

/* Unwinding by call frame information (daemon/formats/cfi.c): each object with ops has its rows,
 * sorted by file offset, in an array of its own, sized to them, in a slot of the
 * "unwind_rows" array of maps; shared by every process that maps the object and freed when
 * none does. A row holds from its offset to the next row's. No object is too large (a
 * static llama-server has some 200,000 rows, node 370,000), and memory is what the
 * objects in use take: 8 bytes a row, and at most 1 more for their page index (below). */
#define LP_UNWIND_OBJS 256	     /* objects with rows at once, host-wide */
#define LP_UNWIND_MAX_ROWS (1 << 22) /* rows of one object: 32 MiB */
#define LP_MAX_UNWIND 32	     /* objects with rows per process */
enum lp_unwind_cfa {
	LP_UW_NONE = 0,	 /* cannot be unwound here: why says which */
	LP_UW_RSP,	 /* CFA = rsp + cfa_off */
	LP_UW_RBP,	 /* CFA = rbp + cfa_off */
	LP_UW_RBP_DEREF, /* CFA = *(rbp + cfa_off): a realigned frame (gcc's DRAP) */
	LP_UW_RSP_DEREF, /* CFA = *(rsp + cfa_off) */
	LP_UW_R10,	 /* CFA = r10 + cfa_off: a DRAP prologue or epilogue, innermost only */
	LP_UW_R13,	 /* the same with %r13 */
	LP_UW_PLT,	 /* a PLT entry: CFA = rsp + 8, + 8 where (ip & 15) >= cfa_off */
	LP_UW_SIGNAL,	 /* a signal trampoline: the kernel's rt_sigframe at rsp, the
			  * interrupted rsp at rsp + cfa_off, rip after it, rbp at rsp + 8 * rbp */
	LP_UW_END,	 /* the outermost frame: no caller */
};
/* Why a row is LP_UW_NONE: cfi.h's reasons, then the row format's. */
enum lp_unwind_why {
	LP_UW_WHY_NO_FDE = 0, /* code without CFI */
	LP_UW_WHY_EXPR,	      /* a CFA expression of another form */
	LP_UW_WHY_RA,	      /* the return address not at CFA - 8 */
	LP_UW_WHY_INSN,	      /* after a CFI instruction that could not be read */
	LP_UW_WHY_REG,	      /* the CFA in a register other than rsp, rbp, r10, r13 */
	LP_UW_WHY_RANGE,      /* an offset the row cannot hold */
	LP_UW_WHY_NR,
};
/* Why a sample's walk gave way to the stack scan: a row's why (above), then these. */
enum lp_uw_fail {
	LP_UF_RBP = LP_UW_WHY_NR, /* the rule needs %rbp, which an earlier frame lost */
	LP_UF_READ,		  /* the stack could not be read where the rule points */
	LP_UF_OUTSIDE,		  /* the innermost frame in code no object's rows cover */
	LP_UF_DEPTH,		  /* more frames than the walk takes (LP_UNWIND_FRAMES) */
	LP_UF_NR,
};
/* How a sample's place (an op, sync, or neither) was found. */
enum lp_how {
	LP_HOW_IP = 0, /* the instruction pointer was in an op, a barrier or a runtime */
	LP_HOW_CFI,    /* the walk by rows settled it */
	LP_HOW_SCAN,   /* the stack scan found an op, a barrier or a kernel */
	LP_HOW_NONE,   /* neither: counted outside ops without evidence */
	LP_HOW_NR,
};
#define LP_UW_RBP_LOST (-128)
/* 8 bytes: a BPF array's elements are 8-byte aligned, and the daemon writes the map
 * through a mapping of it. */
struct lp_unwind_row {
	__u32 off; /* file offset of the first instruction it covers */
	/* See enum lp_unwind_cfa: in units of 8 bytes (x86-64 frames move by whole words),
	 * but for LP_UW_PLT, the threshold; for LP_UW_NONE, why (enum lp_unwind_why). */
	__s16 cfa_off;
	__u8 cfa; /* enum lp_unwind_cfa */
	/* The caller's %rbp: 0 unchanged; -127..-1 saved at CFA + 8 * rbp; 1..127 saved at
	 * the frame's own rbp + 8 * (rbp - 1) (a realigned frame); or LP_UW_RBP_LOST. */
	__s8 rbp;
};

/* The rows' page index, after an object's n rows in the same array (unwind.c): element n is
 * its head, elements n + 1 .. n + pages its pages. The rows' offsets are cut into pages of
 * 1 << shift bytes, page first holding the first row's, as few bytes as leave at least
 * LP_ROWS_PER_PAGE rows a page on average. A page's entry names the rows the row covering any
 * offset in it lies between: lo, the row covering its first byte (0 if none does), and hi,
 * its last byte's. A walk's search for a row (bpf/maps.bpf.c) then halves a page's few rows,
 * a cache line or two, where halving all of them (22 times for libtorch_cpu.so's 1.4
 * million) took a helper call and, past the first halvings, a cache and TLB miss each. */
#define LP_ROWS_PER_PAGE 8
struct lp_rows_head {
	__u32 first;	   /* the first row's offset >> shift */
	__u32 pages_shift; /* pages << 8 | shift */
};
struct lp_rows_page {
	__u32 lo, hi; /* row indices */
};
_Static_assert(sizeof(struct lp_rows_head) == sizeof(struct lp_unwind_row) &&
		       sizeof(struct lp_rows_page) == sizeof(struct lp_unwind_row),
	       "the index lives in the rows' array");

/* The rows a walk found last, per CPU, by object slot and file offset (bpf/maps.bpf.c's
 * lp_uw_row): LP_ROW_CACHE of them, one per hash of the two. A torch process's walks go
 * through the same few hundred call sites forward after forward; a row found there is a
 * cache line read, where a search reads the array's head, a page of its index and a few
 * rows, each in a page of its own (a cache and TLB miss each, in a program that runs
 * with both cold). Each slot has a generation (the "unwind_gen" array): odd while user
 * space puts an array in it or takes one out, moved past it after (kernel/unwind.c). A
 * row found is kept under the generation read before the search, if even; a kept row
 * whose generation is no longer the slot's is not used. */
#define LP_ROW_CACHE_BITS 12
#define LP_ROW_CACHE (1 << LP_ROW_CACHE_BITS)
struct lp_row_cached {
	__u64 key; /* offset | slot << 32 | (generation & 0x7fffff) << 40 | 1 << 63; 0: none */
	__u64 row; /* as lp_uw_row returns it */
};

/* An executable mapping of an object with rows, in one process. */
struct lp_unwind_obj {
	__u64 start, end;
	__u64 bias; /* its start less its file offset: an address less bias is a file offset */
	__u32 n;    /* its rows: n of them in the array in slot of "unwind_rows" */
	__u16 slot;
	/* 1: an object with no ops (the C and C++ runtimes, an OpenMP runtime, libllama),
	 * whose rows only carry a walk through it */
	__u16 plain;
	/* Its op functions' table (struct lp_opfn_row), where its engine names ops by their
	 * entry points (torch's at::_ops::<op>::call): opfn_n rows in opfn_slot of
	 * "unwind_rows"; 0: none */
	__u32 opfn_n;
	__u16 opfn_slot;
	/* 1: the C library, where an OpenMP runtime waits (LLVM's libomp in sched_yield and
	 * condition variables): a return address into the runtime above frames in it alone
	 * is sync, as the runtime's own code is; above any other code (OpenBLAS's kernels in
	 * a region's work), it is the thread's start */
	__u16 libc;
};

/* A row of an object's op functions' table: from its offset to the next row's, the code
 * of op name (1-based: 0 is a gap between functions) of group (ops.h's enum
 * lp_op_group). 8 bytes, as struct lp_unwind_row: the tables live in unwind_rows' slots,
 * looked up the same way. An op found so is a sample's "aop": slot << 16 | name. */
struct lp_opfn_row {
	__u32 off;
	__u16 name;
	__u8 group;
	__u8 pad;
};
_Static_assert(sizeof(struct lp_opfn_row) == sizeof(struct lp_unwind_row),
	       "op functions' rows live where unwind rows do");
#define LP_AOP_NONE 0xffffffffU

/* Key and value of the "aop_samples" map: a process's samples by op found in an op
 * functions' table (aop), in all and while generating. */
struct lp_aop_key {
	__u32 tgid;
	__u32 aop;
};

struct lp_aop_val {
	__u64 all, gen;
	__u64 region; /* of all, an OpenMP worker's, its master's op (where.bpf.h) */
};

struct lp_ranges {
	__u32 n;
	__u32 nuw;  /* unwind objects in uw, sorted by start */
	__u32 opfn; /* 1: some object in uw has an op functions' table */
	__u32 pad;
	__u64 lo, hi; /* start of the first range, end of the last */
	/* GCC's OpenMP runtime (libgomp) in the process: the GOT slot its loader fills with
	 * the thread-pointer offset of the runtime's TLS block, whose first member is each
	 * thread's struct gomp_thread (where.bpf.h's team path); 0: none */
	__u64 omp_team_got;
	struct lp_range r[LP_MAX_RANGES];
	__u8 kind[LP_MAX_RANGES];   /* enum lp_range_kind */
	__u8 op[LP_MAX_RANGES];	    /* LP_K_OP, LP_K_KERNEL: index in the process's op table */
	__u8 op_matmul[LP_MAX_OPS]; /* 1: the op is in the matmul group */
	struct lp_unwind_obj uw[LP_MAX_UNWIND];
};

/* A sample's call stack (the "stacks" ring buffer), while a profile is being collected
 * (llmprofctl flame, /debug/pprof): its kernel frames, leaf first, then its user frames,
 * leaf first, walked by the objects' unwind rows (and by frame pointers where there are
 * none, said in flags); with what the sample was: its op, its region, its phase. */
#define LP_STACK_USER_MAX 128
#define LP_STACK_KERNEL_MAX 64
/* Python frames after the native ones: a pair of words each (lp_py_frame_word) */
#define LP_STACK_PY_MAX 64
/* ip's slots: a power of two, so that an index into it is bounded by a mask */
#define LP_STACK_SLOTS 512
_Static_assert(LP_STACK_KERNEL_MAX + LP_STACK_USER_MAX + 2 * LP_STACK_PY_MAX <= LP_STACK_SLOTS,
	       "a stack record holds its frames");
enum lp_stack_flags {
	LP_SF_COMPLETE = 1 << 0,     /* the user walk reached the outermost frame */
	LP_SF_TRUNCATED = 1 << 1,    /* more user frames than LP_STACK_USER_MAX */
	LP_SF_FP = 1 << 2,	     /* some frames were found by frame pointers, not rows */
	LP_SF_PY = 1 << 3,	     /* a CPython thread: its interpreter frames follow (npy) */
	LP_SF_PY_TRUNCATED = 1 << 4, /* more Python frames than LP_STACK_PY_MAX */
};
enum lp_phase {
	LP_PHASE_OUTSIDE = 0, /* no llama_decode in flight */
	LP_PHASE_PROMPT,      /* a decode of more than one token */
	LP_PHASE_GENERATION,  /* a decode of one token */
	LP_PHASE_NR,
};
struct lp_stack_rec {
	__u64 ts; /* bpf_ktime_get_ns() */
	__u32 tgid, tid;
	__s16 op;     /* op index in the process's table; -1: none */
	__u8 region;  /* enum lp_region */
	__u8 phase;   /* enum lp_phase */
	__u8 flags;   /* enum lp_stack_flags */
	__u8 nkernel; /* kernel frames in ip */
	__u8 nuser;   /* user frames after them */
	__u8 npy;     /* Python frames after those, innermost first: two words each */
	__u32 aop;    /* its op from an op functions' table (LP_AOP_NONE: none) */
	__u32 pad2;
	__u64 ip[LP_STACK_SLOTS];
};
#define LP_STACK_REC_HDR 32 /* the bytes before ip */

/* A Python frame of a stack record: its code object's address, then this word: the offset
 * of its last instruction from the code's first, in bytes (may be negative: a frame not
 * begun), whether it is an entry frame (the first a native call of the interpreter loop
 * ran: where Python frames meet native ones) and who owns it. */
#define LP_PY_LASTI(w) ((__s32)(__u32)(w))
#define LP_PY_ENTRY(w) (((w) >> 32) & 1)
#define LP_PY_OWNER(w) (((w) >> 40) & 0xff)
#define LP_PY_WORD(lasti, entry, owner) \
	((__u64)(__u32)(lasti) | ((__u64)((entry)&1) << 32) | ((__u64)((owner)&0xff) << 40))

/* Value of the "py_procs" map, keyed by tgid: a tracked process running CPython, where its
 * interpreter's structures are (daemon/engine/python.c: a table per version, by rule).
 * Offsets are bytes into each structure; the frame's fields within its first
 * LP_PY_FRAME_READ bytes. */
#define LP_PY_FRAME_READ 128
#define LP_PY_THREADS_MAX 64
#define LP_PY_NO_CFRAME 0xffff
struct lp_py_proc {
	__u64 runtime;	      /* _PyRuntime's address in the process */
	__u64 gil_lo, gil_hi; /* the GIL's futex words: [gil_lo, gil_hi) */
	__u32 version;	      /* PY_VERSION_HEX */
	__u16 interp_head;    /* _PyRuntime.interpreters.head */
	__u16 interp_threads; /* PyInterpreterState.threads.head */
	__u16 ts_next;	      /* PyThreadState.next */
	__u16 ts_native_tid;  /* PyThreadState.native_thread_id (a long) */
	__u16 ts_frame;	      /* PyThreadState.cframe (3.11, 3.12), .current_frame (3.13) */
	__u16 cframe_current; /* _PyCFrame.current_frame; LP_PY_NO_CFRAME: ts_frame is it */
	__u16 frame_code;     /* _PyInterpreterFrame.f_code (.f_executable: 3.13) */
	__u16 frame_previous; /* .previous */
	__u16 frame_instr;    /* .prev_instr (.instr_ptr: 3.13) */
	__u16 frame_entry;    /* .is_entry (a byte; 3.11 only: see python.h) */
	__u16 frame_owner;    /* .owner (a byte) */
	__u16 code_first;     /* PyCodeObject.co_code_adaptive: its first instruction */
	__u32 pad;
};

/* Key and value of the "py_samples" map: a CPython process's samples outside ops by the
 * code object of the sampled thread's innermost Python frame (code 0: a thread running no
 * Python, an OpenMP worker), in all and while generating. */
struct lp_py_key {
	__u32 tgid;
	__u32 pad;
	__u64 code;
};
struct lp_py_val {
	__u64 all;
	__u64 gen;
};

/* Value of the "op_samples" map, keyed by tgid: the process's samples by op index, in all
 * and while a one-token llama_decode (generation) was in flight. Samples in no op are
 * total - sync - the sum over ops. User space creates the entry with the sampling table
 * and deletes it after reading it at the exit. */
struct lp_op_samples {
	__s32 gen_depth;    /* generation decodes in flight */
	__s32 decode_depth; /* decodes of any kind in flight */
	/* A forward's phase where the step has no return (torch: a forward runs to the next
	 * one's start, torch.bpf.c): the last one's (enum lp_phase) until fwd_until_ns */
	__u64 fwd_until_ns;
	__u32 fwd_phase;
	__u32 pad;
	/* When the generation decodes in flight began (the last entry with none in flight),
	 * and the generation decodes that began once nodes were read (lp_precise's
	 * nodes_from_ns) and returned: the per-token figures of nodes count whole tokens. */
	__u64 gen_begin_ns;
	__u64 nodes_gen_tokens;
	__u64 decodes; /* decodes that returned */
	__u64 total, sync;
	__u64 gen_total, gen_sync;
	__u64 all[LP_MAX_OPS];
	__u64 gen[LP_MAX_OPS];
	/* of all, the samples of OpenMP workers counted for their region's master's op
	 * (where.bpf.h): not on the workers' own stacks */
	__u64 region[LP_MAX_OPS];
	/* the unwind's quality: samples by how their place was found; walks that gave way
	 * to the scan by why, and by the object of the frame they stopped at (uw's index;
	 * LP_MAX_UNWIND: in none) */
	__u64 how[LP_HOW_NR];
	__u64 uw_fail[16];		      /* [LP_UF_NR], a power of two for the verifier */
	__u64 uw_fail_obj[2 * LP_MAX_UNWIND]; /* [LP_MAX_UNWIND + 1] used */
	/* Samples whose instruction pointer was in library i of the sampling table
	 * (LP_K_LIBRARY) */
	__u64 lib[LP_MAX_LIBS];
	/* Samples of threads in an OpenMP region's work, by how their op was found
	 * (where.bpf.h's enum lp_where_via: [1] the region's master's frames, [2] more than
	 * one region open, [3] none open); [0] unused */
	__u64 via[4];
};

/* Key and value of the "op_precise" map: precise mode's figures of one probed op of one
 * process. Nested and fused calls count once, for the outermost op. */
struct lp_op_key {
	__u32 tgid;
	__u32 op; /* index in the process's op table */
};

struct lp_op_precise {
	__u64 calls;
	__u64 ns;	     /* wall time, entry to return */
	__u64 oncpu_ns;	     /* its own on-CPU time: minus off-CPU time and barriers inside */
	struct lp_hist hist; /* wall time per call */
	/* of the calls, those that returned while a generation decode was in flight */
	__u64 gen_calls;
	__u64 gen_oncpu_ns;
};

/* Value of the "recording" map, keyed by tgid: present while a timeline of the process is
 * recorded (llmprofctl record); its events go to the "rec_ring" ring buffer. */
#define LP_MAX_RECORDINGS 8
struct lp_recording {
	__u64 lost; /* events the ring buffer had no room for */
};

enum lp_rec_type {
	LP_REC_OFF = 1,	     /* a thread switched out */
	LP_REC_ON,	     /* ... and in */
	LP_REC_DECODE_BEGIN, /* llama_decode */
	LP_REC_DECODE_END,
	LP_REC_OP_BEGIN, /* precise mode: an op call, outermost */
	LP_REC_OP_END,
	LP_REC_BARRIER_BEGIN,
	LP_REC_BARRIER_END,
	LP_REC_FAULT_MAJ, /* a major page fault, at its end */
};

/* Why a thread switched out. */
enum lp_rec_off {
	LP_OFF_PREEMPTED = 0, /* runnable: another task took the CPU */
	LP_OFF_FUTEX,	      /* blocked in a futex wait */
	LP_OFF_BLOCKED,	      /* blocked otherwise (I/O, sleep, a lock in the kernel) */
};

struct lp_rec_ev {
	__u64 ts; /* CLOCK_MONOTONIC, ns */
	__u32 tgid, tid;
	__u8 type; /* enum lp_rec_type */
	/* LP_REC_OFF: enum lp_rec_off; LP_REC_DECODE_BEGIN: the step's enum lp_phase where
	 * its engine knows it (a torch forward's batch), else 0: one token, generation */
	__u8 reason;
	__u16 cpu;
	__u32 other; /* LP_REC_OFF preempted: the task that took the CPU */
	/* LP_REC_OFF futex: the futex word; LP_REC_DECODE_BEGIN: the batch's tokens;
	 * LP_REC_DECODE_END: its return value; LP_REC_OP_*: the op index */
	__u64 a;
	/* Run-queue wait the kernel accounted since the thread's last switch (ns): at
	 * LP_REC_OFF, that before the slice it ends (the kernel adds it after the switch-in);
	 * at LP_REC_ON, any it added before (a task that migrated while it waited) */
	__u64 runq;
	union {
		/* LP_REC_OFF: the slice it ends, on CPU (ns), by the kernel's account where it
		 * has one: where the switch-in was not seen, the slice began this long before */
		__u64 oncpu;
		/* LP_REC_OP_END: the id of the graph node it computed part of (lp_node_val), 0
		 * where its tensors were not read */
		__u64 node;
	};
	char comm[LP_COMM_LEN]; /* LP_REC_OFF preempted: the comm of the task that took the CPU */
};

/* Where a ggml_tensor's fields are (daemon/engine/tensors.c). type, ne, nb and op sit at
 * LP_T_TYPE, LP_T_NE, LP_T_NB and LP_T_OP in every layout ggml has had since op_params
 * (2023); the sources, view_src and name moved as fields came and went before them. */
#define LP_T_TYPE 0
#define LP_T_NE 16
#define LP_T_NB 48
#define LP_T_OP 80
struct lp_tensor_layout {
	__u16 src;	/* the src[] array; 0: not known yet, or none fits */
	__u16 view_src; /* the view's source, then view_offs and data */
	__u16 name;
	__u16 pad;
};

/* Whether an op's probed function gets (params, dst) as its first two arguments, as
 * ggml's compute_forward functions are declared: a compiler may drop or split arguments
 * of a static function, so it is checked on calls (LP_TSNIFF_N) before any is read. With
 * LP_TA_THIS they come after a C++ object, as the second and third (an extra buffer
 * type's compute_forward member function). */
enum lp_targ {
	LP_TA_UNKNOWN = 0, /* calls are sniffed into "tensor_sniff" */
	LP_TA_READ,	   /* checked: read every call's tensors */
	LP_TA_NO,	   /* not readable: a helper, a clone, or arguments that did not fit */
	LP_TA_STATE = 0x7f,
	LP_TA_THIS = 0x80,
};

/* Value of the "precise" map, keyed by tgid: present while precise probes are attached. */
#define LP_PRECISE_AOPS 64
struct lp_precise {
	__u32 gen; /* bumped per window, so state left by the last one is discarded */
	__u32 pad;
	/* When the nodes' tensors began to be read (0: not yet): a node's evaluation counts
	 * for a generated token only in a generation decode that began after it. */
	__u64 nodes_from_ns;
	struct lp_tensor_layout lay;
	__u8 targs[LP_MAX_OPS]; /* enum lp_targ per op index */
	/* Ops named by an op functions' table (torch's aten ops): a probed entry point's op
	 * (aop) and its index, for the window's probed ops (LP_AOP_NONE: unused) */
	__u32 aop[LP_PRECISE_AOPS];
	__u8 aop_op[LP_PRECISE_AOPS];
};

/* Calls sniffed per op, and the bytes of each destination tensor kept: enough for the
 * largest layout (ik_llama.cpp's: 16 sources and a grad, 384 bytes). */
#define LP_TSNIFF_N 4
#define LP_TSNIFF_BYTES 448
struct lp_tensor_sniff {
	__u32 n;
	__u32 pad;
	__u64 params[LP_TSNIFF_N]; /* the first 8 bytes params points to */
	__u64 dst[LP_TSNIFF_N];	   /* the dst argument */
	__u8 raw[LP_TSNIFF_N][LP_TSNIFF_BYTES];
};

/* Key and value of the "nodes" map: precise mode's figures of one graph node shape of one
 * process, from the tensors its op's function gets. Sources beyond LP_NODE_SRCS are not
 * read; a name's "-N" suffix (llama.cpp's per-layer names) is the layer. */
#define LP_NODE_SRCS 3
#define LP_NODE_STEM 24
#define LP_NODE_NO_TYPE 0xff
struct lp_node_key {
	__u32 tgid;
	__u16 op;
	__s16 layer;		       /* -1: none in the name */
	__u8 type[1 + LP_NODE_SRCS];   /* dst, src[0..]; LP_NODE_NO_TYPE: no such source */
	__u32 ne[1 + LP_NODE_SRCS][4]; /* clamped at 2^32 - 1 */
	char stem[LP_NODE_STEM];       /* the name without its "-N", cut */
};

struct lp_node_val {
	__u64 instances; /* calls by the thread of index 0: once per node evaluated */
	__u64 calls;	 /* by every thread */
	__u64 ns;	 /* wall time, entry to return, summed over threads */
	__u64 oncpu_ns;	 /* own on-CPU time: less off-CPU time and barriers inside */
	__u64 max_ns;	 /* the longest call */
	/* instances in generation decodes that began once nodes were read (whole tokens) */
	__u64 gen_instances;
	__u64 gen_oncpu_ns;
	__u64 rd_bytes; /* per instance, summed: the sources' bytes */
	__u64 wr_bytes; /* the destination's */
	/* instances with a tensor whose bytes are not known: a view (its extent needs the
	 * type's block size) of a type of more than one value a block (bpf/precise.bpf.c) */
	__u64 bytes_unknown;
	/* Drawn at random at its making (never 0), so that a record's op spans can name the
	 * node each computed part of: 64 bits, for no two of a process's nodes to share one
	 * (odds about n^2 / 2^64) without the atomic fetch old kernels refuse */
	__u64 id;
};

/* A thread's node in flight, keyed by tid: read at the op's entry, counted at its return. */
struct lp_node_flight {
	struct lp_node_key key;
	__u64 rd_bytes, wr_bytes;
	__u32 pgen; /* the window it was read in */
	__u8 ith0;
	__u8 unknown;
	__u8 ok;
	__u8 pad;
};

/* Key and value of the "objs" map: what user space found in an executable file, so that
 * mappings of files it has read already are not reported again. */
struct lp_obj_key {
	__u64 dev; /* the kernel's encoding: major << 20 | minor */
	__u64 ino;
};

enum lp_obj_verdict {
	LP_OBJ_UNKNOWN = 0,
	LP_OBJ_NONE,   /* none of the symbols */
	LP_OBJ_HELPER, /* barrier or decode symbols, no matmul: matters in LLM processes */
	LP_OBJ_MATMUL, /* matmul symbols: makes any process mapping it an LLM process */
	/* its engine's step (torch's aten::embedding): a process mapping it is an LLM
	 * process once that runs (torch.bpf.c) */
	LP_OBJ_CANDIDATE,
};

struct lp_obj_val {
	__u64 mtime_ns;
	__u32 verdict;
	__u32 pad;
};

enum lp_futex_kind {
	LP_FUTEX_WAIT = 1,
	LP_FUTEX_LOCK_PI,
	LP_FUTEX_WAITV,
};

/* Key of the "futex_addrs" map: where a process's futex waits block. */
struct lp_futex_key {
	__u32 tgid;
	__u32 pad;
	__u64 uaddr;
};

struct lp_futex_val {
	__u64 waits;
	__u64 wait_ns;
	__u64 max_ns;
};

/* Key and value of the "preemptors" map: who took the CPU from a tracked process's threads
 * while they could still run, and how long they then waited to run again. A preemptor of
 * the same tgid is the process's own thread: it has more threads than CPUs. */
struct lp_preempt_key {
	__u32 tgid;    /* the tracked process */
	__u32 by_tgid; /* the preemptor's process (a kernel thread's own pid) */
};

struct lp_preempt_val {
	__u64 count;		/* preemptions */
	__u64 wait_ns;		/* off-CPU time of the preempted threads until they ran again */
	char comm[LP_COMM_LEN]; /* the preempting thread's name, at its first preemption */
};

/* Index into the "drops" array map: every place where data is lost is counted. */
enum lp_drop {
	LP_D_THREADS_FULL = 0, /* a thread of a tracked process found "threads" full */
	LP_D_FUTEX_ADDRS_FULL, /* a new futex address found "futex_addrs" full */
	LP_D_EVENTS_LOST,      /* a ring buffer record could not be reserved */
	LP_D_PREEMPTORS_FULL,  /* a new preemptor found "preemptors" full */
	LP_D_DECODES_LOST,     /* a decode's batch record left out: "events" was half full */
	LP_D_NODES_FULL,       /* a new graph node found "nodes" full (precise mode) */
	LP_D_AOP_FULL,	       /* a new op of an op functions' table found "aop_samples" full */
	LP_D_PY_FULL,	       /* a new Python function found "py_samples" full */
	LP_D_NR,
};

enum lp_event_type {
	LP_EV_EXEC = 1,
	LP_EV_EXIT,
	LP_EV_MAP,
	LP_EV_DECODE,
	LP_EV_FOUND,
};

/* Ring buffer record for an exec anywhere on the system (only when user space asked
 * for them, to match --comm/--exe against new processes). */
struct lp_ev_exec {
	__u32 type; /* LP_EV_EXEC */
	__u32 tgid;
	char comm[LP_COMM_LEN];
	/* 1: the exec hook put the process into "procs" (a --comm match), so its exit hook
	 * sends its final record, later in the same ring buffer. */
	__u32 inserted;
	__u32 pad;
};

/* Ring buffer record for a new executable file mapping (mmap with PROT_EXEC) or an exec,
 * of a file user space has not classified, or that matters (enum lp_obj_verdict). */
struct lp_ev_map {
	__u32 type; /* LP_EV_MAP */
	__u32 tgid;
	struct lp_obj_key obj;
	__u64 mtime_ns;
};

/* A llama_decode's batch, by sequence: read at entry (decode.bpf.c, lp_decode_batch), sent
 * at return. llama.cpp's struct llama_batch, passed in memory: n_tokens, then the pointers
 * token, embd, pos, n_seq_id, seq_id and logits. Tokens past LP_BATCH_MAX, and sequences
 * past LP_BATCH_SEQS, are not read (flags say so). */
#define LP_BATCH_MAX 8192
#define LP_BATCH_SEQS 16

enum lp_batch_flag {
	LP_BATCH_UNREAD = 1 << 0,    /* the struct was unreadable or made no sense */
	LP_BATCH_TRUNCATED = 1 << 1, /* more than LP_BATCH_MAX tokens */
	LP_BATCH_SEQS_FULL = 1 << 2, /* more than LP_BATCH_SEQS sequences */
	LP_BATCH_NO_POS = 1 << 3,    /* pos NULL: llama.cpp places the tokens itself */
	LP_BATCH_SHARED = 1 << 4,    /* a token in several sequences: counted in its first */
};

struct lp_batch_seq {
	__s32 seq;
	__u32 tokens;  /* its tokens in the batch */
	__u32 outputs; /* of them, those whose logits are wanted */
	__s32 pos_min; /* -1: not given (LP_BATCH_NO_POS) */
	__s32 pos_max;
};

struct lp_ev_decode {
	__u32 type; /* LP_EV_DECODE */
	__u32 tgid;
	__u32 tid;
	__s32 ret; /* llama_decode's */
	__u64 begin_ns, end_ns;
	__s32 n_tokens;
	__u32 flags; /* enum lp_batch_flag */
	__u32 nseq;
	__u32 pad;
	struct lp_batch_seq seq[LP_BATCH_SEQS];
};

/* The engines (daemon/engine/engine.h's table), as the kernel names them. */
enum lp_engine_id {
	LP_ENGINE_GGML = 0,
	LP_ENGINE_TORCH,
	LP_ENGINE_NR,
};

/* A process an engine's step found (torch.bpf.c: its first forward): the kernel put it
 * into "procs" itself where inserted is 1, counting from that step on. */
struct lp_ev_found {
	__u32 type; /* LP_EV_FOUND */
	__u32 tgid;
	__u32 engine; /* enum lp_engine_id */
	__u32 inserted;
};

/* An OpenMP parallel region opened by a process's thread (torch.bpf.c): where its master
 * was when it opened it (GOMP_parallel, __kmpc_fork_call), classified as a sample there
 * would be: the op a worker's sample in the region's work counts for. open counts the
 * regions open in the process: with one, every worker runs this one's. The master is
 * classified by the first worker's sample that needs it (sample.bpf.c), from its registers
 * at the entry: its frames above the runtime's stay as they were while the region is open.
 * Most regions get no sample (a torch forward opens some twenty): none is walked. */
struct lp_omp_region {
	__u32 master; /* tid */
	__s32 open;
	__s32 op; /* as a sample's (where.bpf.h's struct where), once taken */
	__u32 aop;
	__u32 region;
	__u32 seq;	  /* regions opened: a classification is kept for its own region only */
	__u64 since;	  /* when the open ones began to be (bpf_ktime_get_ns()) */
	__u64 ra, sp, bp; /* the master's at the entry: the runtime's return address, ... */
	__u32 taken;	  /* 1: op, aop and region are the master's */
	__u32 pad;
};

/* Forward state of a torch process (torch.bpf.c), by tgid. */
struct lp_fwd {
	__u64 start_time;  /* its group leader's start_time: an entry of an earlier pid is not it */
	__u64 last_ns;	   /* the last forward's start */
	__u64 last_tokens; /* its tokens */
	__u64 rows_max;	   /* the most rows of an embedding weight it has called */
	__u64 interval_ns; /* the last generation interval */
	__u32 last_phase;  /* enum lp_phase of the last forward; 0: none */
	__u32 last_tid;
};

/* Where a torch tensor's sizes are in c10::TensorImpl: its dim (sizes_and_strides_.size_)
 * at some offset, then LP_TI_INLINE sizes inline, LP_TI_INLINE strides, the storage offset
 * and numel, as c10::impl::SizesAndStrides has kept them since 1.9. The offset is found on
 * each call by that invariant (torch.bpf.c), not assumed. */
#define LP_TI_INLINE 5
#define LP_TI_SCAN_FROM 8
#define LP_TI_SCAN_TO 160
#define LP_TI_BYTES 256 /* a power of two: indices into it are masked */

/* Ring buffer record sent when a tracked process's last thread exits: its final stats. */
struct lp_ev_exit {
	__u32 type; /* LP_EV_EXIT */
	__u32 pad;
	struct lp_proc_stats stats;
};

#endif
