// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* PyTorch's forward passes and OpenMP regions (daemon/engine/torch.c).
 *
 * A forward begins at its token embedding: at::_ops::embedding::call, probed always (a
 * call or two per forward). Its indices tensor [batch, positions] says prompt (more than
 * one position) or generation (one: a token per sequence). A model with a learned
 * position embedding (GPT-2's wpe) calls embedding twice a forward: the token embedding is
 * the call whose weight has the most rows the process has called (a vocabulary outnumbers
 * a context's positions), and it comes first in every model of transformers. A forward
 * has no return to probe (the model's Python returns its logits): it runs until the next
 * forward starts, so its time is known where a generation forward follows it, the same
 * thread's; the last of a generate() call is counted, not timed.
 *
 * An untracked process's first forward puts it into procs here (step_discover): it is an
 * LLM process from its first forward on, that one counted, and user space hears of it
 * (LP_EV_FOUND). A process that imports torch and never runs a model is never tracked.
 *
 * An OpenMP runtime's region entry (LLVM's and Intel's __kmpc_fork_call and their
 * GOMP_parallel) is probed in the tracked torch processes only (a probe per process,
 * attached by user space): a worker's stack holds no op, the master's does (where.bpf.h's
 * region_op). GCC's runtime's is not: a worker's thread data leads to its master's
 * frames (maps.bpf.c's lp_team_opener). */
#include "lp.bpf.h"
#include "where.bpf.h"

/* c10::TensorImpl's sizes: from 8-byte word w of the read, the dim, LP_TI_INLINE sizes,
 * LP_TI_INLINE strides, the storage offset and numel (abi.h). */
struct ti_sizes {
	__u64 dim;
	__u64 size[LP_TI_INLINE];
	__u64 numel;
};

/* Whether the words from w of a TensorImpl read are a contiguous tensor's sizes: dim 1 to
 * LP_TI_INLINE, sizes 1 to 2^31, strides each the product of the sizes after it, storage
 * offset 0 and numel the product of the sizes. The embedding's indices (token ids) and
 * weight are contiguous tensors of at least one element. */
static __always_inline bool ti_fits(const __u64 *buf, __u32 w, struct ti_sizes *out)
{
	__u64 d, prod = 1, stride = 1;
	const __u64 *b;

	/* Bounded where the verifier sees it: the compiler would fold a mask it can prove. */
	asm volatile("" : "+r"(w));
	if (w >= LP_TI_SCAN_TO / 8)
		return false;
	b = buf + w;
	d = b[0];
	if (d < 1 || d > LP_TI_INLINE)
		return false;
	for (int i = LP_TI_INLINE - 1; i >= 0; i--) {
		__u64 sz = b[1 + i], st = b[1 + LP_TI_INLINE + i];

		if ((__u64)i >= d)
			continue;
		if (sz < 1 || sz > (1ULL << 31) || st != stride)
			return false;
		stride *= sz;
		prod *= sz;
		if (out)
			out->size[i] = sz;
	}
	if (b[1 + 2 * LP_TI_INLINE] != 0 || b[2 + 2 * LP_TI_INLINE] != prod)
		return false;
	if (out) {
		out->dim = d;
		out->numel = prod;
	}
	return true;
}

_Static_assert((LP_TI_SCAN_TO / 8 - 1 + 3 + 2 * LP_TI_INLINE) * 8 <= LP_TI_BYTES,
	       "a scanned offset's sizes lie inside the read");

struct ti_scan {
	const __u64 *ids, *weight;
	__u32 found; /* the word the sizes are at; 0: none */
};

/* One candidate offset: the first where both tensors fit. */
static long ti_try(__u64 i, void *data)
{
	struct ti_scan *s = data;
	__u32 w = LP_TI_SCAN_FROM / 8 + (__u32)i;

	if (w >= LP_TI_SCAN_TO / 8)
		return 1;
	if (ti_fits(s->ids, w, NULL) && ti_fits(s->weight, w, NULL)) {
		s->found = w;
		return 1;
	}
	return 0;
}

/* The TensorImpl a const at::Tensor& points at (its intrusive_ptr's only member), read
 * into buffer k of tensor_buf. */
static __always_inline __u64 *ti_read(__u64 ref, __u32 k)
{
	__u64 *b = bpf_map_lookup_elem(&tensor_buf, &k), impl = 0;

	if (!b || bpf_probe_read_user(&impl, sizeof(impl), (void *)ref) || !impl ||
	    bpf_probe_read_user(b, LP_TI_BYTES, (void *)impl))
		return NULL;
	return b;
}

/* User space hears that a forward found tgid (inserted: the kernel put it in procs). */
static __always_inline void found(__u32 tgid, __u32 inserted)
{
	struct lp_ev_found *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);

	if (!e) {
		drop(LP_D_EVENTS_LOST);
		return;
	}
	e->type = LP_EV_FOUND;
	e->tgid = tgid;
	e->engine = LP_ENGINE_TORCH;
	e->inserted = inserted;
	bpf_ringbuf_submit(e, BPF_RB_FORCE_WAKEUP);
}

/* Whether the current task's forward may make its process an LLM process: discovery on,
 * and the task inside --discover-cgroup's cgroup where one is set. */
static __always_inline bool discoverable(void)
{
	return step_discover &&
	       (!discover_in_cgroup || bpf_current_task_under_cgroup(&discover_cg, 0) == 1);
}

/* The process is not tracked yet, and discoverable(): its first forward makes it an LLM
 * process. */
static __always_inline struct lp_proc_stats *discover(__u32 tgid, bool *sent)
{
	struct lp_proc_stats *init;
	__u32 zero = 0;
	bool inserted;

	init = bpf_map_lookup_elem(&proc_init, &zero);
	if (!init)
		return NULL;
	init->tgid = tgid;
	init->tracked_since_ns = bpf_ktime_get_ns();
	mark_ours(tgid, 1);
	inserted = !bpf_map_update_elem(&procs, &tgid, init, BPF_NOEXIST);
	init->tgid = 0;
	init->tracked_since_ns = 0;
	if (inserted) {
		found(tgid, 1);
		*sent = true;
	}
	return bpf_map_lookup_elem(&procs, &tgid);
}

/* A forward's end, at the next one's start: its time, and its tokens as timed ones. */
static __always_inline void forward_end(struct lp_proc_stats *p, struct lp_fwd *f, __u64 now)
{
	__u64 d = now - f->last_ns;

	if (f->last_phase == LP_PHASE_PROMPT) {
		__sync_fetch_and_add(&p->ctr[LP_C_DECODE_PROMPT_NS], d);
		__sync_fetch_and_add(&p->ctr[LP_C_PROMPT_TIMED_TOKENS], f->last_tokens);
		hist_add(&p->hist[LP_H_DECODE_PROMPT], d);
		return;
	}
	__sync_fetch_and_add(&p->ctr[LP_C_DECODE_GEN_NS], d);
	__sync_fetch_and_add(&p->ctr[LP_C_GEN_TIMED_TOKENS], f->last_tokens);
	__sync_fetch_and_add(&p->ctr[LP_C_GEN_INTERVALS], 1);
	__sync_fetch_and_add(&p->ctr[LP_C_GEN_INTERVAL_NS], d);
	hist_add(&p->hist[LP_H_DECODE_GEN], d);
	f->interval_ns = d;
}

/* A forward's samples count for its phase until the next one starts, or for twice the last
 * generation interval (LP_FWD_HOLD_NS before there is one): the time after a generate()
 * call's last forward (decoding the text, waiting for the next request) is not generation. */
#define LP_FWD_HOLD_NS 10000000000ULL

/* at::Tensor at::_ops::embedding::call(const at::Tensor &weight, const at::Tensor &indices,
 * ...): at::Tensor has a destructor, so the Itanium C++ ABI returns it through a pointer the
 * caller passes first (%rdi); weight and indices follow it. */
SEC("uprobe")
int BPF_KPROBE(lp_torch_forward, __u64 ret_slot, __u64 weight_ref, __u64 ids_ref)
{
	__u64 id = current_ids(), now = bpf_ktime_get_ns(), tokens, positions, rows = 0;
	__u32 tgid = id >> 32, tid = (__u32)id, phase, zero = 0;
	struct ti_scan scan = {};
	struct ti_sizes ids = {}, wt = {};
	struct lp_op_samples *os;
	struct lp_proc_stats *p;
	struct lp_fwd *f, init = {};
	struct lp_rec_ev *rec;
	bool sized = false, first = false, found_sent = false;
	__u64 start;

	/* A process neither tracked nor to be found here (--no-discover, outside
	 * --discover-cgroup) pays for no read of its memory: the probe is on libtorch for every
	 * process that maps it. Its forwards start counting once it is tracked. */
	p = bpf_map_lookup_elem(&procs, &tgid);
	if (!p && !discoverable())
		return 0;
	scan.ids = ti_read(ids_ref, 0);
	scan.weight = ti_read(weight_ref, 1);
	if (scan.ids && scan.weight) {
		bpf_loop((LP_TI_SCAN_TO - LP_TI_SCAN_FROM) / 8, ti_try, &scan, 0);
		sized = scan.found && ti_fits(scan.ids, scan.found, &ids) &&
			ti_fits(scan.weight, scan.found, &wt);
	}
	start = BPF_CORE_READ(bpf_get_current_task_btf(), group_leader, start_time);
	f = bpf_map_lookup_elem(&fwd, &tgid);
	if (f && f->start_time != start) {
		/* an earlier process's with this pid */
		bpf_map_delete_elem(&fwd, &tgid);
		f = NULL;
	}
	if (!f) {
		init.start_time = start;
		bpf_map_update_elem(&fwd, &tgid, &init, BPF_NOEXIST);
		f = bpf_map_lookup_elem(&fwd, &tgid);
		if (!f)
			return 0;
		first = true;
	}
	/* The token embedding: the weight with the most rows so far (a position
	 * embedding's has fewer). Sizes not read: every call counts, tokens unknown. */
	if (sized) {
		rows = wt.size[0];
		if (rows < f->rows_max)
			return 0;
		f->rows_max = rows;
	}
	if (!p && !(p = discover(tgid, &found_sent)))
		return 0;
	/* Tracked some other way (--pid, --comm): its engine is said at its first forward. */
	if (first && p && !found_sent)
		found(tgid, 0);
	/* The positions are the indices' last dimension ([batch, positions]). */
	positions = 1;
	for (int i = 0; i < LP_TI_INLINE; i++)
		if (sized && (__u64)i + 1 == ids.dim)
			positions = ids.size[i];
	tokens = sized ? ids.numel : 0;
	phase = positions > 1 ? LP_PHASE_PROMPT : LP_PHASE_GENERATION;
	if (sized && phase == LP_PHASE_GENERATION)
		tokens = ids.numel / positions;
	/* The last forward of this thread ends here, timed where this one continues it. */
	if (f->last_phase && f->last_tid == tid && phase == LP_PHASE_GENERATION && now > f->last_ns)
		forward_end(p, f, now);
	if (f->last_phase && f->last_tid == tid)
		rec_emit(tgid, tid, LP_REC_DECODE_END, 0);
	if (phase == LP_PHASE_PROMPT) {
		__sync_fetch_and_add(&p->ctr[LP_C_DECODE_PROMPT_CALLS], 1);
		__sync_fetch_and_add(&p->ctr[LP_C_DECODE_PROMPT_TOKENS], tokens);
	} else {
		/* tokens generated: one per sequence of the batch */
		__sync_fetch_and_add(&p->ctr[LP_C_DECODE_GEN_CALLS], tokens);
		__sync_fetch_and_add(&p->ctr[LP_C_GEN_STEPS], 1);
		__sync_fetch_and_add(&p->gen_seq, 2);
	}
	if (!sized)
		__sync_fetch_and_add(&p->ctr[LP_C_DECODE_ERRORS], 1);
	f->last_ns = now;
	f->last_tokens = tokens;
	f->last_phase = phase;
	f->last_tid = tid;
	rec = rec_reserve(tgid, tid, LP_REC_DECODE_BEGIN);
	if (rec) {
		rec->a = tokens;
		rec->reason = (__u8)phase;
		rec_submit(rec);
	}
	os = bpf_map_lookup_elem(&op_samples, &tgid);
	if (os) {
		os->fwd_phase = phase;
		os->fwd_until_ns =
			now + (phase == LP_PHASE_GENERATION && f->interval_ns ? 2 * f->interval_ns
									      : LP_FWD_HOLD_NS);
	}
	(void)zero;
	(void)ret_slot;
	return 0;
}

/* An OpenMP region opens (GOMP_parallel, __kmpc_fork_call): where its master is, where it
 * is the only one open in the process: classified from the runtime's caller (its return
 * address less one, in the call: the runtime's own code is sync) when a worker's sample
 * first needs it (where.bpf.h's region_take).
 *
 * The regions open are counted per thread that opened them (its lp_thread's omp_sp): a
 * region whose entry was seen and whose return was not (the return's probe attached after
 * the entry's, to a process already running, between a call's entry and its return) must
 * not stay counted, or every later region of the process would be one of two open and its
 * workers' samples no op's. The entry runs on the stack of the function that calls the
 * runtime, so a thread's next entry tells the two apart by the ABI's stack: deeper than
 * its open region's entry (a lower stack pointer), a region nested in that one's work;
 * not deeper, that call has returned. */
SEC("uprobe")
int BPF_KPROBE(lp_omp_fork_enter)
{
	__u64 id = current_ids(), sp = PT_REGS_SP(ctx);
	__u32 tgid = id >> 32;
	struct lp_omp_region *r, zero = {};
	struct lp_proc_stats *p;
	struct lp_thread *t;
	__u64 ra = 0;

	r = bpf_map_lookup_elem(&omp_region, &tgid);
	if (!r) {
		bpf_map_update_elem(&omp_region, &tgid, &zero, BPF_NOEXIST);
		r = bpf_map_lookup_elem(&omp_region, &tgid);
		if (!r)
			return 0;
	}
	if ((p = bpf_map_lookup_elem(&procs, &tgid)))
		__sync_fetch_and_add(&p->ctr[LP_C_OMP_REGIONS], 1);
	t = thread_get((__u32)id, tgid);
	if (t && t->omp_sp && sp < t->omp_sp) {
		/* nested in its open region: that one stays the thread's one */
		t->omp_depth++;
		return 0;
	}
	/* Its open region, if any, returned unseen: this one is counted in its place. Read
	 * after the add, not returned by it (no atomic fetch before BPF v3): two threads that
	 * open regions at once both read 2, and neither is the master of one. */
	if (!t || !t->omp_sp)
		__sync_fetch_and_add(&r->open, 1);
	if (t) {
		t->omp_sp = sp;
		t->omp_depth = 1;
	}
	if (r->open != 1)
		return 0;
	r->since = bpf_ktime_get_ns();
	r->master = (__u32)id;
	r->taken = 0;
	r->op = -1;
	r->aop = LP_AOP_NONE;
	r->region = LP_R_OTHER;
	bpf_probe_read_user(&ra, sizeof(ra), (void *)sp);
	r->ra = ra;
	r->sp = sp;
	r->bp = PT_REGS_FP(ctx);
	/* last: a worker that read the earlier value drops what it found */
	__sync_fetch_and_add(&r->seq, 1);
	return 0;
}

SEC("uretprobe")
int BPF_KRETPROBE(lp_omp_fork_exit)
{
	__u64 id = current_ids();
	__u32 tgid = id >> 32, tid = (__u32)id;
	struct lp_omp_region *r = bpf_map_lookup_elem(&omp_region, &tgid);
	struct lp_thread *t = bpf_map_lookup_elem(&threads, &tid);
	struct lp_proc_stats *p;

	if (t && t->tgid == tgid) {
		/* its entry not seen (the entry's probe attached after the return's) */
		if (!t->omp_sp)
			return 0;
		if (t->omp_depth > 1) {
			t->omp_depth--;
			return 0;
		}
		t->omp_sp = 0;
		t->omp_depth = 0;
	}
	if (!r || r->open <= 0)
		return 0;
	__sync_fetch_and_add(&r->open, -1);
	/* the last one open closed: the time with some open */
	if (r->open == 0 && r->since && (p = bpf_map_lookup_elem(&procs, &tgid)))
		__sync_fetch_and_add(&p->ctr[LP_C_OMP_REGION_NS], bpf_ktime_get_ns() - r->since);
	return 0;
}
