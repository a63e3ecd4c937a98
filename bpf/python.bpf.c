// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* CPython's own frames: a sampled thread's interpreter frames, read from its process's
 * memory where py_procs says its interpreter keeps them (daemon/engine/python.c: offsets
 * by version, by rule, never guessed), for profiles' stacks and for the samples outside
 * ops by Python function; and the GIL's futex words.
 *
 * A thread's state is found in its interpreter's list of thread states by the id CPython
 * keeps (native_thread_id: gettid() in the process's own namespace), as py-spy finds it:
 * no C library's thread-local layout assumed, and a thread that released the GIL (torch's
 * bindings release it around every op) is found as well as its holder. Frames are
 * walked from its current frame by their previous links, which cross the native calls
 * between them; user space puts each run of them (to an entry frame) where its native
 * interpreter call is (daemon/profile). */
#include "lp.bpf.h"

/* The current task's thread id in its own (innermost) PID namespace. */
static __always_inline __u32 own_tid(void)
{
	struct task_struct *task = bpf_get_current_task_btf();
	struct pid *p = task->thread_pid;
	unsigned int level = BPF_CORE_READ(p, level);
	struct upid u = {};

	if (level >= LP_PIDNS_LEVELS)
		return 0;
	bpf_probe_read_kernel(&u, sizeof(u),
			      (char *)p + bpf_core_field_offset(struct pid, numbers) +
				      level * sizeof(struct upid));
	return (__u32)u.nr;
}

static __always_inline __u64 read_word(__u64 addr)
{
	__u64 v = 0;

	if (bpf_probe_read_user(&v, sizeof(v), (const void *)addr))
		return 0;
	return v;
}

struct ts_find {
	const struct lp_py_proc *py;
	__u64 ts, found;
	__u32 tid;
};

static long ts_step(__u64 i, void *arg)
{
	struct ts_find *f = arg;

	if (!f->ts)
		return 1;
	if ((__u32)read_word(f->ts + f->py->ts_native_tid) == f->tid) {
		f->found = f->ts;
		return 1;
	}
	f->ts = read_word(f->ts + f->py->ts_next);
	return 0;
}

/* The current thread's PyThreadState in the process py describes, or 0. */
static __always_inline __u64 tstate_of(const struct lp_py_proc *py)
{
	struct ts_find f = {.py = py, .tid = own_tid()};
	__u64 interp = read_word(py->runtime + py->interp_head);

	if (!interp || !f.tid)
		return 0;
	f.ts = read_word(interp + py->interp_threads);
	bpf_loop(LP_PY_THREADS_MAX, ts_step, &f, 0);
	return f.found;
}

/* The thread state's current frame: through its _PyCFrame (3.11, 3.12) or held by it
 * (3.13). Never an interpreter call's shim frame (3.12 on): the call links its own frame
 * above the shim before making it current. */
static __always_inline __u64 frame_of(const struct lp_py_proc *py, __u64 ts)
{
	__u64 cf = read_word(ts + py->ts_frame);

	if (py->cframe_current == LP_PY_NO_CFRAME)
		return cf;
	return cf ? read_word(cf + py->cframe_current) : 0;
}

static __always_inline __u64 word_at(const struct lp_py_scratch *b, __u32 off)
{
	return *(const __u64 *)&b->b[off & (LP_PY_FRAME_READ - 8)];
}

struct frames {
	const struct lp_py_proc *py;
	struct lp_stack_rec *rec;
	__u64 f;
	__u32 at, n;
};

static long frame_step(__u64 i, void *arg)
{
	struct frames *x = arg;
	const struct lp_py_proc *py = x->py;
	struct lp_py_scratch *b;
	__u64 code, instr;
	__u32 k = 0;

	if (!x->f)
		return 1;
	b = bpf_map_lookup_elem(&py_scratch, &k);
	if (!b || bpf_probe_read_user(b->b, sizeof(b->b), (const void *)x->f)) {
		x->f = 0;
		return 1;
	}
	code = word_at(b, py->frame_code);
	instr = word_at(b, py->frame_instr);
	k = x->at + 2 * x->n;
	x->rec->ip[k & (LP_STACK_SLOTS - 1)] = code;
	x->rec->ip[(k + 1) & (LP_STACK_SLOTS - 1)] =
		LP_PY_WORD((__s64)(instr - code - py->code_first),
			   b->b[py->frame_entry & (LP_PY_FRAME_READ - 1)],
			   b->b[py->frame_owner & (LP_PY_FRAME_READ - 1)]);
	x->n++;
	x->f = word_at(b, py->frame_previous);
	return 0;
}

__noinline __u32 lp_py_frames(struct lp_stack_rec *rec, __u32 at)
{
	struct frames x = {.rec = rec, .at = at};
	const struct lp_py_proc *py;
	__u32 tgid;
	__u64 ts;

	if (!rec)
		return 0;
	tgid = rec->tgid;
	py = bpf_map_lookup_elem(&py_procs, &tgid);
	if (!py || !(ts = tstate_of(py)))
		return 0;
	x.py = py;
	x.f = frame_of(py, ts);
	bpf_loop(LP_STACK_PY_MAX, frame_step, &x, 0);
	return x.n | (x.f ? LP_PY_MORE : 0);
}

__noinline int lp_py_count(__u32 tgid, __u32 gen)
{
	const struct lp_py_proc *py = bpf_map_lookup_elem(&py_procs, &tgid);
	struct lp_py_key key = {.tgid = tgid};
	struct lp_py_val *v, zero = {};
	__u64 ts, f;

	if (!py)
		return 0;
	/* a thread running no Python (an OpenMP worker): code 0 */
	if ((ts = tstate_of(py)) && (f = frame_of(py, ts)))
		key.code = read_word(f + py->frame_code);
	v = bpf_map_lookup_elem(&py_samples, &key);
	if (!v) {
		/* Two CPUs may insert the same key at once: the loser looks it up. */
		bpf_map_update_elem(&py_samples, &key, &zero, BPF_NOEXIST);
		v = bpf_map_lookup_elem(&py_samples, &key);
		if (!v) {
			drop(LP_D_PY_FULL);
			return 1;
		}
	}
	__sync_fetch_and_add(&v->all, 1);
	if (gen)
		__sync_fetch_and_add(&v->gen, 1);
	return 1;
}

__noinline int lp_py_gil(__u32 tgid, __u64 uaddr)
{
	const struct lp_py_proc *py = bpf_map_lookup_elem(&py_procs, &tgid);

	return py && uaddr >= py->gil_lo && uaddr < py->gil_hi;
}
