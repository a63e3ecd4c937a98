// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* What every collector shares: the maps (defined once, in maps.bpf.c; declared extern
 * here for the others, and resolved when bpftool gen object links them into one object),
 * the settings user space fills before load, and the helpers on them. Collectors are
 * static inline in their own .bpf.c files, one per collector. */
#ifndef LP_BPF_H
#define LP_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "llmprof/abi.h"

#define PF_EXITING 0x00000004
/* A task's state at its last switch-out (do_task_dead). */
#define TASK_DEAD 0x00000080

/* LP_SYSCALL_NR(regs): the syscall a task's user registers entered (-1 outside one), and
 * its arguments; regs a trusted pointer (bpf_task_pt_regs), read with plain loads. */
#if defined(__TARGET_ARCH_x86)
#define LP_NR_FUTEX 202
#define LP_NR_MMAP 9
#define LP_SYSCALL_NR(regs) ((regs)->orig_ax)
#define LP_SYSCALL_PARM1(regs) ((regs)->di)
#define LP_SYSCALL_PARM2(regs) ((regs)->si)
#define LP_SYSCALL_PARM3(regs) ((regs)->dx)
#define LP_SYSCALL_PARM5(regs) ((regs)->r8)
#elif defined(__TARGET_ARCH_arm64)
#define LP_NR_FUTEX 98
#define LP_NR_MMAP 222
#define LP_SYSCALL_NR(regs) ((regs)->syscallno)
#define LP_SYSCALL_PARM1(regs) ((regs)->orig_x0)
#define LP_SYSCALL_PARM2(regs) ((regs)->regs[1])
#define LP_SYSCALL_PARM3(regs) ((regs)->regs[2])
#define LP_SYSCALL_PARM5(regs) ((regs)->regs[4])
#endif
#define LP_NR_FUTEX_WAITV 449

/* User stack scanned per sample: up to 8 KiB, for kernels with large frames (tinyBLAS
 * tiles, a fork's GEMMs) between the instruction pointer and their op's return address. */
#define LP_STACK_WORDS 1024
/* At a switch-out only whether it stopped in a barrier matters: the instruction pointer in
 * a runtime or ggml_barrier, or a libc call (sched_yield, futex) just below one. Switches
 * are frequent (OpenMP threads sleep and wake thousands of times a second): 512 bytes. */
#define SWITCH_WORDS 64

#ifdef LP_MAPS_HERE
#define LP_MAP
#define LP_SETTING
#else
#define LP_MAP extern
#define LP_SETTING extern
#endif

/* Set by user space before load. */
/* The PID namespace the daemon runs in, by its inode, where it is not the initial one (a
 * container's, a pod's without hostPID); 0 in the initial one. Every pid the programs
 * keep is then the pid there, as the daemon's /proc shows it; a task outside it is no
 * one's (its ids read 0). */
LP_SETTING const volatile __u32 pidns_ino;
LP_SETTING const volatile bool want_exec_events;
/* Classify samples by return addresses on the user stack as well as by the instruction
 * pointer, so that time in callees (ggml_vec_dot_*, sgemm kernels) counts for the matmul
 * function that called them. */
LP_SETTING const volatile bool stack_scan;
/* Walk the stack by the objects' call frame information (unwind_rows) where they have it,
 * before scanning it. */
LP_SETTING const volatile bool unwind_cfi;
/* Futex waits from the scheduler: a tracked thread switched out asleep inside futex(2)
 * or futex_waitv(2) waits from then until its switch-in (sched.bpf.c). Where it is off,
 * the syscall tracepoints time them, if attached (futex.bpf.c). */
LP_SETTING const volatile bool futex_from_sched;
/* Processes found by an engine's step (torch.bpf.c) are put into procs by the kernel,
 * from that step on: off with --no-discover. With discover_in_cgroup, only those whose
 * task is in discover_cg's cgroup or below (--discover-cgroup). */
LP_SETTING const volatile bool step_discover;
LP_SETTING const volatile bool discover_in_cgroup;
/* Minor page faults from the kernel's per-thread count (acct.bpf.h), off with
 * --no-page-faults. */
LP_SETTING const volatile bool count_minor_faults;
/* The number of pid p in the daemon's namespace (pidns_ino), or 0 where p is not in it:
 * p's numbers, one per level of namespace from the initial one down to its own. */
#define LP_PIDNS_LEVELS 8
/* A global function (maps.bpf.c), p by its address: the verifier checks its loop once, not
 * at each of the dozens of places a program reads a task's ids (lp_switch_btf went past
 * the verifier's million instructions with it inlined). */
__u32 lp_pidns_nr(__u64 pid_addr);

static __always_inline __u32 pidns_nr(struct pid *p)
{
	return p ? lp_pidns_nr((__u64)p) : 0;
}

/* A task's thread and process ids as the daemon sees them (pidns_ino). */
static __always_inline __u32 ns_tid(struct task_struct *t)
{
	return pidns_nr(BPF_CORE_READ(t, thread_pid));
}

static __always_inline __u32 ns_tgid(struct task_struct *t)
{
	return pidns_nr(BPF_CORE_READ(t, group_leader, thread_pid));
}

/* bpf_get_current_pid_tgid(), in the daemon's namespace: tgid << 32 | tid. */
static __always_inline __u64 current_ids(void)
{
	struct task_struct *t;

	if (!pidns_ino)
		return bpf_get_current_pid_tgid();
	t = bpf_get_current_task_btf();
	return (__u64)ns_tgid(t) << 32 | ns_tid(t);
}

/* Processes being recorded (the "recording" map's entries), kept by user space: while
 * none is, timeline events cost no map lookup. */
LP_SETTING volatile __u32 recordings;
/* Profile windows open (llmprofctl flame, /debug/pprof), kept by user space: while any is,
 * every sample of a tracked process also sends its call stack to "stacks" (sample.bpf.c). */
LP_SETTING volatile __u32 profiles;
/* Samples whose stack did not fit in "stacks": the daemon had not read it in time. */
LP_SETTING volatile __u64 stacks_lost;
/* Samples the kernel did not take (sample.bpf.c, "Samples not taken"): each CPU's timer
 * period as user space last set it (0: not counted, the per-thread sampler), when it last
 * restarted the timer (bpf_ktime_get_ns()'s clock) and an epoch it makes odd while it does;
 * the samples found missing of tracked processes, and those whose process is not known. */
LP_SETTING volatile __u64 sample_period_ns[LP_SAMPLE_CPUS];
LP_SETTING volatile __u64 sample_restart_ns[LP_SAMPLE_CPUS];
LP_SETTING volatile __u32 sample_epoch[LP_SAMPLE_CPUS];
LP_SETTING volatile __u64 samples_skipped;
LP_SETTING volatile __u64 samples_skipped_unknown;
/* Processes in a precise window (their probes on or going on), kept by user space: while
 * any is, every off-CPU stretch is taken in full, as its probes' figures need. */
LP_SETTING volatile __u32 precise_procs;
/* Of a busy thread's off-CPU stretches, the scheduler's program takes one in
 * stretch_sample on average and counts it as those since the last one taken (sched.bpf.c,
 * "Stretches taken as a sample"); 1: every one. */
LP_SETTING const volatile __u32 stretch_sample;

LP_MAP struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256); /* resized by user space */
	__type(key, __u32);
	__type(value, struct lp_proc_stats);
} procs SEC(".maps");

LP_MAP struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384); /* resized by user space */
	__type(key, __u32);
	__type(value, struct lp_thread);
} threads SEC(".maps");

/* A thread past its exit tracepoint, not its process's last: the kernel's account of it as
 * far as it was counted there. It runs on (exit_files, exit_notify, the last schedule,
 * 10-128 us a thread measured), and its account is final at its last switch-out, where the
 * rest is counted (sched.bpf.c, exit_tail_take). */
struct lp_exit_tail {
	__u32 tgid;
	__u32 pad;
	__u64 counted; /* se.sum_exec_runtime counted through */
};

/* An entry lives microseconds, from the exit tracepoint to the last switch-out: a thousand
 * threads exiting at once fit; beyond, the oldest's tail is lost, not the entry leaked. */
LP_MAP struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, struct lp_exit_tail);
} exit_tail SEC(".maps");

/* What the scheduler's program needs at every switch of a tracked thread, to decide
 * whether this one is taken in full: in the task's own storage, which a switch finds in
 * a few loads where "threads" takes a hash lookup. Freed with the task. */
struct lp_switch_fast {
	__u64 prev_out; /* its last switch-out, by its se.exec_start */
	__u64 pace;	/* its switch-outs' mean interval, recent ones weighing most */
	__u64 sum_at;	/* the kernel's on-CPU time and run-queue delay at the last look */
	__u64 rd_at;
	__u32 rng;	 /* its own xorshift state: gaps drawn without a helper call */
	__u32 seen;	 /* switch-outs seen, up to SAMPLE_AFTER */
	__u32 countdown; /* busy switch-outs left until the next one taken */
	__u32 gap;	 /* busy switch-outs the next one taken stands for */
};

/* A byte per tid below the host's pid_max, 8 to an element, as tgid_marks: 1 while the
 * thread has an off-CPU stretch taken and not yet ended (sched.bpf.c), so that its
 * switch-in is taken in full; any other switch-in of a tracked thread costs this array
 * load. Set too for a thread's first switch-in once it is tracked: by the new thread's
 * program, and by user space for the threads a process has when its tracking starts (the
 * first look at a thread takes its totals' starting point). One element where stretches
 * are not sampled. */
LP_MAP struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 1); /* pid_max / 8, set by user space */
	__type(key, __u32);
	__type(value, __u64);
} tid_open SEC(".maps");

LP_MAP struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct lp_switch_fast);
} switch_fast SEC(".maps");

/* Per CPU: the sampler's last run there, and on whom (sample.bpf.c, "Samples not taken"). */
struct lp_sample_clock {
	__u64 last_ns;
	__u64 period_ns; /* the timer's period then */
	__u64 notes;	 /* lp_cpu_switches.seq then */
	__u32 epoch;	 /* sample_epoch then */
	__u32 tgid;	 /* the task's process then, where tracked; else 0 */
};

LP_MAP struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct lp_sample_clock);
} sample_clock SEC(".maps");

/* Per CPU: its last LP_SWITCH_NOTES switches from or to a tracked task (sched.bpf.c's
 * lp_note_switch), where samples not taken across them are split (sample.bpf.c). */
#define LP_SWITCH_NOTES 4
struct lp_cpu_switches {
	__u64 seq; /* notes made; the newest is at (seq - 1) % LP_SWITCH_NOTES */
	struct lp_switch_note {
		__u64 ns;   /* bpf_ktime_get_ns() */
		__u32 tgid; /* the task switched in: its process where tracked, else 0 */
		__u32 pad;
	} n[LP_SWITCH_NOTES];
};

LP_MAP struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct lp_cpu_switches);
} cpu_switch SEC(".maps");

/* A byte per tgid below the host's pid_max, 8 to an element: 1 from just before its process
 * enters procs until it leaves. Most tasks that switch, wake or call futex on a host are not
 * ours, and this says so with an array load where procs would take a hash lookup. Written
 * byte by byte (by user space through a mapping, by the exec and exit hooks), so no update
 * ever touches a neighbour's byte. A byte left at 1 costs a lookup, never a wrong answer. */
LP_MAP struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(map_flags, BPF_F_MMAPABLE);
	__uint(max_entries, 4096); /* pid_max / 8, set by user space */
	__type(key, __u32);
	__type(value, __u64);
} tgid_marks SEC(".maps");

LP_MAP struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192); /* resized by user space */
	__type(key, struct lp_futex_key);
	__type(value, struct lp_futex_val);
} futex_addrs SEC(".maps");

LP_MAP struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096); /* resized by user space */
	__type(key, struct lp_preempt_key);
	__type(value, struct lp_preempt_val);
} preemptors SEC(".maps");

LP_MAP struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256); /* resized by user space */
	__type(key, __u32);
	__type(value, struct lp_ranges);
} ranges SEC(".maps");

LP_MAP struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256); /* resized by user space */
	__type(key, __u32);
	__type(value, struct lp_op_samples);
} op_samples SEC(".maps");

LP_MAP struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256); /* resized by user space */
	__type(key, __u32);
	__type(value, struct lp_precise);
} precise SEC(".maps");

/* Entries are made as probed ops return, at most LP_PRECISE_OPS per process in precise
 * mode: not preallocated. */
LP_MAP struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192); /* resized by user space */
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct lp_op_key);
	__type(value, struct lp_op_precise);
} op_precise SEC(".maps");

/* Calls sniffed per probed op while its arguments are not yet checked (abi.h); user
 * space deletes each entry once it has checked it. Not preallocated. */
LP_MAP struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 8192);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct lp_op_key);
	__type(value, struct lp_tensor_sniff);
} tensor_sniff SEC(".maps");

/* Graph nodes by shape, made as probed ops return: not preallocated. A node that finds
 * the map full is counted (LP_D_NODES_FULL, the report's lost.nodes_map_full). */
LP_MAP struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct lp_node_key);
	__type(value, struct lp_node_val);
} nodes SEC(".maps");

/* Each thread's node in flight, by tid. */
LP_MAP struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct lp_node_flight);
} node_flight SEC(".maps");

/* Zeroed values to insert from, too large for the BPF stack. */
LP_MAP struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct lp_tensor_sniff);
} tensor_scratch SEC(".maps");

LP_MAP struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct lp_node_flight);
} flight_scratch SEC(".maps");

/* A zeroed op_precise value to insert from: too large for the BPF stack. */
LP_MAP struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct lp_op_precise);
} op_precise_init SEC(".maps");

LP_MAP struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, struct lp_obj_key);
	__type(value, struct lp_obj_val);
} objs SEC(".maps");

LP_MAP struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64[LP_STACK_WORDS]);
} stack_buf SEC(".maps");

/* The OpenMP region open in each process (abi.h's struct lp_omp_region), by tgid
 * (torch.bpf.c). */
LP_MAP struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 256); /* resized by user space */
	__type(key, __u32);
	__type(value, struct lp_omp_region);
} omp_region SEC(".maps");

/* Tracked processes running CPython: where their interpreter's structures are
 * (struct lp_py_proc), written by user space (daemon/engine/python.c). */
LP_MAP struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256); /* resized by user space */
	__type(key, __u32);
	__type(value, struct lp_py_proc);
} py_procs SEC(".maps");

/* A CPython process's samples outside ops by its innermost Python function's code object
 * (python.bpf.c); user space deletes a process's entries at its exit. */
LP_MAP struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384); /* resized by user space */
	__type(key, struct lp_py_key);
	__type(value, struct lp_py_val);
} py_samples SEC(".maps");

/* An interpreter frame's first bytes, read at once (python.bpf.c), per CPU. */
struct lp_py_scratch {
	__u8 b[LP_PY_FRAME_READ];
};
LP_MAP struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct lp_py_scratch);
} py_scratch SEC(".maps");

/* CPython's frames (python.bpf.c; global functions, each verified once). The sampled
 * thread's interpreter frames into rec->ip from slot at, two words each, innermost first:
 * how many, | LP_PY_MORE where there were more than fit (0: not a thread running CPython,
 * or not a process that runs it). */
#define LP_PY_MORE 0x10000
__hidden __u32 lp_py_frames(struct lp_stack_rec *rec, __u32 at);
/* Counts a sample outside ops of the current thread of tgid for its innermost Python
 * frame's function (py_samples), if its process runs CPython: 1 if it does, else 0. */
__hidden int lp_py_count(__u32 tgid, __u32 gen);
/* Whether uaddr is one of the GIL's words in process tgid. */
__hidden int lp_py_gil(__u32 tgid, __u64 uaddr);

/* Samples by op of an op functions' table (aop), per process (sample.bpf.c); user space
 * deletes a process's entries at its exit. */
LP_MAP struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384); /* resized by user space */
	__type(key, struct lp_aop_key);
	__type(value, struct lp_aop_val);
} aop_samples SEC(".maps");

/* A torch process's forward state (abi.h's struct lp_fwd), by tgid (torch.bpf.c). */
LP_MAP struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, struct lp_fwd);
} fwd SEC(".maps");

/* --discover-cgroup's cgroup, for the kernel's own discovery (step_discover). */
LP_MAP struct {
	__uint(type, BPF_MAP_TYPE_CGROUP_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} discover_cg SEC(".maps");

/* A tensor's TensorImpl read at an embedding call, per CPU: too large for the stack. */
LP_MAP struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2); /* 0: the indices', 1: the weight's */
	__type(key, __u32);
	__type(value, __u64[LP_TI_BYTES / 8]);
} tensor_buf SEC(".maps");

/* How the last classification on this CPU placed its sample (where.bpf.h): written in the
 * walk, read by the sampler after it. Kept in a map, not on the stack, so that the verifier
 * does not follow every value it can take through the walk's loop. */
struct lp_walk_note {
	__u32 how;  /* enum lp_how */
	__u32 fail; /* a walk that gave way to the scan: enum lp_uw_fail */
	__u32 obj;  /* ... and the object it stopped in (LP_MAX_UNWIND: none) */
	__u32 walked;
	__u32 aop;	   /* the op found in an op functions' table, or LP_AOP_NONE */
	__u32 via_runtime; /* enum lp_rt_passed */
	__u32 lib;	   /* 1 + the library the instruction pointer is in (LP_K_LIBRARY) */
	__u32 pad;
};

/* A walk's return addresses into an OpenMP runtime (lp_walk_note.via_runtime). */
enum lp_rt_passed {
	LP_RT_NONE = 0,
	LP_RT_STARTED, /* one passed, and above it the C library's frames only: a worker */
	LP_RT_CALLED,  /* one passed, and above it user code: the runtime's caller's frames */
};

LP_MAP struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 2); /* 0: the classification's; 1: a profile's stack walk */
	__type(key, __u32);
	__type(value, struct lp_walk_note);
} walk_note SEC(".maps");

/* The unwind rows of every object with ops (abi.h): an array per object, which user space
 * makes as large as the object's rows (BPF_F_INNER_MAP: arrays of any size), writes
 * through a mapping of it, and puts here. */
struct lp_unwind_rows {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_MMAPABLE | BPF_F_INNER_MAP);
	/* Sizes, not types: the linker (libbpf 1.1) cannot size an inner map's types where
	 * the outer map is declared extern. */
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(struct lp_unwind_row));
};

LP_MAP struct {
	__uint(type, BPF_MAP_TYPE_ARRAY_OF_MAPS);
	__uint(max_entries, LP_UNWIND_OBJS);
	__type(key, __u32);
	__array(values, struct lp_unwind_rows);
} unwind_rows SEC(".maps");

/* Each unwind_rows slot's generation, and the rows found last per CPU (abi.h,
 * struct lp_row_cached). */
LP_MAP struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, LP_UNWIND_OBJS);
	__type(key, __u32);
	__type(value, __u32);
} unwind_gen SEC(".maps");

LP_MAP struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, LP_ROW_CACHE);
	__type(key, __u32);
	__type(value, struct lp_row_cached);
} row_cache SEC(".maps");

/* Timelines being recorded (llmprofctl record), by tgid, and their events: a ring buffer of
 * its own, so that a record never crowds out the exit records in "events". */
LP_MAP struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, LP_MAX_RECORDINGS);
	__type(key, __u32);
	__type(value, struct lp_recording);
} recording SEC(".maps");

LP_MAP struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4 << 20);
} rec_ring SEC(".maps");

/* The --comm names, filled by user space before attach: a process that execs under one is
 * tracked from the exec itself; the daemon adopts the entry when the event reaches it
 * (before, the faults of its first milliseconds were lost). */
LP_MAP struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, LP_MAX_COMMS);
	__type(key, char[LP_COMM_LEN]);
	__type(value, __u8);
} comms SEC(".maps");

/* llama_decode's batch (decode.bpf.c), by thread, from entry to return; built in
 * batch_scratch, too large for the BPF stack. LRU: a thread that died inside a decode
 * leaves its entry behind. */
LP_MAP struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, struct lp_ev_decode);
} decode_batch SEC(".maps");

LP_MAP struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct lp_ev_decode);
} batch_scratch SEC(".maps");

/* A zeroed record to insert from: too large for the BPF stack. */
LP_MAP struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct lp_proc_stats);
} proc_init SEC(".maps");

/* A thread's first entry, zeroed but for its tgid (thread_get): on the stack, it would
 * leave the programs that make one too little of theirs. */
LP_MAP struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct lp_thread);
} thread_init SEC(".maps");

/* Each CPU's own part of a tracked process's counters and histograms, for what the
 * scheduler's programs add at every switch: two threads on two CPUs adding to one
 * "procs" entry would move its cache lines between the CPUs at each switch (its cost:
 * bench/RESULTS.md). Only ctr and hist are used; user space
 * adds every CPU's to the procs entry where it reads one (tracked/hot.h), and takes the
 * entry out with the process's final record. Made on a process's first switch. */
LP_MAP struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, 256); /* resized by user space */
	__type(key, __u32);
	__type(value, struct lp_proc_stats);
} procs_hot SEC(".maps");

LP_MAP struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, LP_D_NR);
	__type(key, __u32);
	__type(value, __u64);
} drops SEC(".maps");

LP_MAP struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20); /* resized by user space */
} events SEC(".maps");

/* Samples' call stacks while a profile window is open (struct lp_stack_rec), read by the
 * daemon every PROFILE_DRAIN_MS without a wake-up per record. */
LP_MAP struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 2 << 20); /* resized by user space */
} stacks SEC(".maps");

/* A stack record being made, per CPU: too large for the program's stack. */
LP_MAP struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct lp_stack_rec);
} stack_rec SEC(".maps");

/* A process mapped executable memory (mmap with PROT_EXEC of file fd): the discovery
 * collector (lifecycle.bpf.c) decides whether user space hears of it. Called from the mmap
 * lock and mmap syscall tracepoints, and by the raw syscall fallback in futex.bpf.c. */
__hidden int lp_mmap_exec(__u64 prot, __s64 fd);

static __always_inline void drop(__u32 what)
{
	__u64 *c = bpf_map_lookup_elem(&drops, &what);

	if (c)
		__sync_fetch_and_add(c, 1);
}

/* The entry of key in map, inserted from init (a zeroed value) when absent; another CPU
 * may insert it meanwhile, so it is looked up again either way. NULL: the map is full. */
static __always_inline void *lookup_or_init(void *map, const void *key, const void *init)
{
	void *v = bpf_map_lookup_elem(map, key);

	if (v)
		return v;
	bpf_map_update_elem(map, key, init, BPF_NOEXIST);
	return bpf_map_lookup_elem(map, key);
}

/* Adds v to h as w values: a sample standing for w of them (sched.bpf.c). */
static __always_inline void hist_addw(struct lp_hist *h, __u64 v, __u32 w)
{
	__u32 idx = lp_hist_index(v);

	if (idx >= LP_HIST_NBUCKETS)
		return;
	__sync_fetch_and_add(&h->buckets[idx], w);
	__sync_fetch_and_add(&h->sum_ns, v * w);
	/* No atomic max in BPF: a lost race under-reports max by one concurrent sample. */
	if (v > h->max_ns)
		h->max_ns = v;
}

static __always_inline void hist_add(struct lp_hist *h, __u64 v)
{
	hist_addw(h, v, 1);
}

/* The thread's state, created on first sight. Only called for tracked processes. */
/* Whether tgid may be tracked: false means surely not (a tgid beyond the marks, after
 * pid_max was raised, may be). */
/* id's byte in a byte-per-id array of 8-byte elements (tgid_marks, tid_open); NULL
 * beyond it (pid_max raised since the start). */
static __always_inline __u8 *id_byte(void *map, __u32 id)
{
	__u32 k = id / 8;
	__u8 *m = bpf_map_lookup_elem(map, &k);

	return m ? m + (id & 7) : NULL;
}

static __always_inline bool maybe_ours(__u32 tgid)
{
	__u8 *m = id_byte(&tgid_marks, tgid);

	return !m || *m;
}

static __always_inline void mark_ours(__u32 tgid, __u8 ours)
{
	__u8 *m = id_byte(&tgid_marks, tgid);

	if (m)
		*m = ours;
}

/* The process's figures when tgid is tracked. */
static __always_inline struct lp_proc_stats *proc_of(__u32 tgid)
{
	return maybe_ours(tgid) ? bpf_map_lookup_elem(&procs, &tgid) : NULL;
}

/* This CPU's part of tgid's counters and histograms (procs_hot), made on first use; p
 * itself, tgid's entry in procs, where it cannot be made. */
static __always_inline struct lp_proc_stats *hot_of(struct lp_proc_stats *p, __u32 tgid)
{
	struct lp_proc_stats *h = bpf_map_lookup_elem(&procs_hot, &tgid), *zero;
	__u32 k = 0;

	if (h)
		return h;
	zero = bpf_map_lookup_elem(&proc_init, &k);
	if (!zero)
		return p;
	/* Only its ctr and hist are read: the header proc_init carries is left as it is. */
	bpf_map_update_elem(&procs_hot, &tgid, zero, BPF_NOEXIST);
	h = bpf_map_lookup_elem(&procs_hot, &tgid);
	return h ? h : p;
}

static __always_inline struct lp_thread *thread_get(__u32 tid, __u32 tgid)
{
	struct lp_thread *t = bpf_map_lookup_elem(&threads, &tid), *zero;
	__u32 k = 0;

	if (t && t->tgid == tgid)
		return t;
	/* Absent, or left over from an earlier thread with a reused tid: start afresh. Only
	 * its tgid is ever written in this CPU's zeroed value. */
	zero = bpf_map_lookup_elem(&thread_init, &k);
	if (!zero)
		return NULL;
	zero->tgid = tgid;
	if (bpf_map_update_elem(&threads, &tid, zero, BPF_ANY)) {
		drop(LP_D_THREADS_FULL);
		return NULL;
	}
	return bpf_map_lookup_elem(&threads, &tid);
}

static __always_inline bool gen_depth_add(__u32 tgid, int d, __u64 now)
{
	struct lp_op_samples *os = bpf_map_lookup_elem(&op_samples, &tgid);

	if (!os)
		return false;
	/* The first of the decodes in flight: when they began. */
	if (d > 0 && os->gen_depth <= 0)
		os->gen_begin_ns = now;
	__sync_fetch_and_add(&os->gen_depth, d);
	return true;
}

static __always_inline bool decode_depth_add(__u32 tgid, int d)
{
	struct lp_op_samples *os = bpf_map_lookup_elem(&op_samples, &tgid);

	if (!os)
		return false;
	__sync_fetch_and_add(&os->decode_depth, d);
	return true;
}

/* Index of the range holding addr, or -1: a binary search over at most 512 ranges, in a
 * global function (maps.bpf.c), whose loop the verifier checks once. */
int lp_range_find(const struct lp_ranges *rg, __u64 addr);

static __always_inline int range_find(const struct lp_ranges *rg, __u64 addr)
{
	if (addr < rg->lo || addr >= rg->hi)
		return -1;
	return lp_range_find(rg, addr);
}

/* A timeline event of thread tid of process tgid, zeroed but for its header, when the
 * process is being recorded; NULL otherwise (and counted when the ring is full). The caller
 * fills the rest and submits it. */
static __always_inline struct lp_rec_ev *rec_reserve(__u32 tgid, __u32 tid, __u8 type)
{
	struct lp_recording *r;
	struct lp_rec_ev *e;

	if (!recordings || !(r = bpf_map_lookup_elem(&recording, &tgid)))
		return NULL;
	e = bpf_ringbuf_reserve(&rec_ring, sizeof(*e), 0);
	if (!e) {
		__sync_fetch_and_add(&r->lost, 1);
		return NULL;
	}
	__builtin_memset(e, 0, sizeof(*e));
	e->ts = bpf_ktime_get_ns();
	e->tgid = tgid;
	e->tid = tid;
	e->type = type;
	e->cpu = (__u16)bpf_get_smp_processor_id();
	return e;
}

/* Submits a timeline event without waking the daemon, unless a quarter of the ring waits:
 * a wakeup per event would have the daemon preempt the recorded threads at every switch.
 * The daemon also reads the ring every 100 ms while it records. */
static __always_inline void rec_submit(struct lp_rec_ev *e)
{
	__u64 waiting = bpf_ringbuf_query(&rec_ring, BPF_RB_AVAIL_DATA);

	bpf_ringbuf_submit(e, waiting > (1 << 20) ? BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP);
}

/* An event with one value, if the process is being recorded. */
static __always_inline void rec_emit(__u32 tgid, __u32 tid, __u8 type, __u64 a)
{
	struct lp_rec_ev *e = rec_reserve(tgid, tid, type);

	if (e) {
		e->a = a;
		rec_submit(e);
	}
}

#endif /* LP_BPF_H */
