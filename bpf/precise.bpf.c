// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* Precise mode: every matmul, barrier and op call of a process while user space has it
 * switched on (uprobes attached by daemon/engine/precise.c). */
#include "offcpu.bpf.h"
#include "where.bpf.h"

/* A probe runs on the thread, so a stretch its last switch-out opened is over, its
 * switch-in untraced (off_end_unseen). Left open, the call in flight would count that
 * stretch as its own on-CPU time (soft_max: 1.652 ms a token where the CPU time was
 * 1.614), and a call entered now would count it as its off-CPU time. The kernel's
 * sched_info notes each switch-in on the run queue's clock, which the switch-out read
 * too: the stretch lasted the difference. Without both, the kernel's on-CPU account since
 * the switch-out (behind by at most the time since its last update, a tick) puts the
 * switch-in no earlier than it was. */
static __always_inline void switch_in_unseen(__u32 tgid, struct lp_thread *t)
{
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	struct lp_proc_stats *p;
	__u64 arrived, ran, now, at = 0;

	if (!t->off_since || !(p = proc_of(tgid)) || !kernel_accounting(task))
		return;
	now = bpf_ktime_get_ns();
	arrived = BPF_CORE_READ(task, sched_info.last_arrival);
	ran = BPF_CORE_READ(task, se.sum_exec_runtime) - t->sum_last;
	if (t->off_clock && arrived > t->off_clock)
		at = t->off_since + (arrived - t->off_clock);
	else if (now - t->off_since > ran)
		at = now - ran;
	if (at > now)
		at = now;
	off_end_unseen(p, hot_of(p, tgid), t, tgid, at);
	/* The slice in flight began then, should the thread exit in it (lifecycle.bpf.c). */
	t->on_since = at;
}

/* The calling thread's state if its process is in precise mode, reset when a new window
 * began since the thread was last seen (calls in flight then were half-observed), and
 * with a stretch an untraced switch-in left open ended: every precise probe comes here. */
static __always_inline struct lp_thread *precise_thread_pr(__u32 *tgid_out,
							   struct lp_precise **pr_out)
{
	__u64 id = current_ids();
	__u32 tgid = id >> 32;
	struct lp_precise *pr;
	struct lp_thread *t;

	pr = bpf_map_lookup_elem(&precise, &tgid);
	if (!pr)
		return NULL;
	t = thread_get((__u32)id, tgid);
	if (!t)
		return NULL;
	if (t->pgen != pr->gen) {
		t->pgen = pr->gen;
		t->mm.depth = 0;
		t->bar.depth = 0;
		t->op.depth = 0;
	}
	switch_in_unseen(tgid, t);
	*tgid_out = tgid;
	*pr_out = pr;
	return t;
}

static __always_inline struct lp_thread *precise_thread(__u32 *tgid_out)
{
	struct lp_precise *pr;

	return precise_thread_pr(tgid_out, &pr);
}

/* Whether a generation decode (one token) is in flight in the process (a torch forward of
 * one position: torch.bpf.c): the calls that return then make the exact per-token split. */
static __always_inline bool generating(__u32 tgid)
{
	struct lp_op_samples *os = bpf_map_lookup_elem(&op_samples, &tgid);

	return os && (os->gen_depth > 0 || (os->fwd_phase == LP_PHASE_GENERATION &&
					    os->fwd_until_ns > bpf_ktime_get_ns()));
}

/* Whether a generation decode is in flight that began once the nodes' tensors were read
 * (pr->nodes_from_ns): a node evaluated in it counts for a whole token (decode.bpf.c
 * whole_token counts those tokens by the same rule). */
static __always_inline bool whole_gen(__u32 tgid)
{
	struct lp_op_samples *os = bpf_map_lookup_elem(&op_samples, &tgid);
	struct lp_precise *pr = bpf_map_lookup_elem(&precise, &tgid);

	return os && pr && os->gen_depth > 0 && pr->nodes_from_ns &&
	       os->gen_begin_ns >= pr->nodes_from_ns;
}

static __always_inline void call_enter(struct lp_call *c)
{
	if (c->depth++ == 0) {
		c->since = bpf_ktime_get_ns();
		c->inner_ns = 0;
		c->off_ns = 0;
	}
}

/* Wall time of the call when the outermost one returns, else 0. */
static __always_inline __u64 call_exit(struct lp_call *c)
{
	if (!c->depth || --c->depth)
		return 0;
	return bpf_ktime_get_ns() - c->since;
}

SEC("uprobe")
int BPF_KPROBE(lp_matmul_enter)
{
	struct lp_thread *t;
	__u32 tgid;

	t = precise_thread(&tgid);
	if (t)
		call_enter(&t->mm);
	return 0;
}

SEC("uretprobe")
int BPF_KRETPROBE(lp_matmul_exit)
{
	struct lp_proc_stats *p;
	struct lp_thread *t;
	__u64 d, excl;
	__u32 tgid;

	t = precise_thread(&tgid);
	if (!t || !(d = call_exit(&t->mm)) || !(p = bpf_map_lookup_elem(&procs, &tgid)))
		return 0;
	excl = d > t->mm.inner_ns + t->mm.off_ns ? d - t->mm.inner_ns - t->mm.off_ns : 0;
	__sync_fetch_and_add(&p->ctr[LP_C_MATMUL_CALLS], 1);
	__sync_fetch_and_add(&p->ctr[LP_C_MATMUL_NS], d);
	__sync_fetch_and_add(&p->ctr[LP_C_MATMUL_EXCL_ONCPU_NS], excl);
	hist_add(&p->hist[LP_H_MATMUL], d);
	return 0;
}

SEC("uprobe")
int BPF_KPROBE(lp_barrier_enter)
{
	struct lp_thread *t;
	__u32 tgid;

	t = precise_thread(&tgid);
	if (!t)
		return 0;
	call_enter(&t->bar);
	if (t->bar.depth == 1)
		rec_emit(tgid, (__u32)current_ids(), LP_REC_BARRIER_BEGIN, 0);
	return 0;
}

SEC("uretprobe")
int BPF_KRETPROBE(lp_barrier_exit)
{
	struct lp_proc_stats *p;
	struct lp_thread *t;
	__u64 d, off;
	__u32 tgid;

	t = precise_thread(&tgid);
	if (!t || !(d = call_exit(&t->bar)) || !(p = bpf_map_lookup_elem(&procs, &tgid)))
		return 0;
	off = t->bar.off_ns < d ? t->bar.off_ns : d;
	rec_emit(tgid, (__u32)current_ids(), LP_REC_BARRIER_END, 0);
	__sync_fetch_and_add(&p->ctr[LP_C_BARRIER_CALLS], 1);
	__sync_fetch_and_add(&p->ctr[LP_C_BARRIER_NS], d);
	__sync_fetch_and_add(&p->ctr[LP_C_BARRIER_OFF_NS], off);
	if (generating(tgid)) {
		__sync_fetch_and_add(&p->ctr[LP_C_BARRIER_GEN_ONCPU_NS], d - off);
		__sync_fetch_and_add(&p->ctr[LP_C_BARRIER_GEN_CALLS], 1);
	}
	hist_add(&p->hist[LP_H_BARRIER], d);
	if (t->mm.depth)
		t->mm.inner_ns += d;
	if (t->op.depth)
		t->op.inner_ns += d;
	return 0;
}

/* Tensors (issue 32). ggml's compute_forward functions get (params, dst); params begins
 * with the thread's index and the thread count, dst names its sources. Until user space
 * has checked an op's function on LP_TSNIFF_N calls, its calls are only sniffed. */

/* The head of every ggml_tensor layout lp_tensor_layout knows: type, buffer, ne, nb. */
struct tensor_head {
	__s32 type;
	__u32 pad;
	__u64 buffer;
	__s64 ne[4];
	__u64 nb[4];
};

/* The arguments params and dst: first and second, or after a C++ object's `this`. The
 * registers are loaded first: the verifier refuses a load from ctx at a computed offset. */
static __always_inline void op_args(struct pt_regs *ctx, __u8 ta, __u64 *params, __u64 *dst)
{
	__u64 a1 = PT_REGS_PARM1(ctx), a2 = PT_REGS_PARM2(ctx), a3 = PT_REGS_PARM3(ctx);

	asm volatile("" : "+r"(a1), "+r"(a2), "+r"(a3));
	*params = ta & LP_TA_THIS ? a2 : a1;
	*dst = ta & LP_TA_THIS ? a3 : a2;
}

static __always_inline void sniff(struct pt_regs *ctx, __u32 tgid, __u32 op, __u8 ta)
{
	struct lp_op_key key = {.tgid = tgid, .op = op};
	struct lp_tensor_sniff *s;
	__u32 zero = 0, i;
	__u64 params, dst;

	s = bpf_map_lookup_elem(&tensor_scratch, &zero);
	if (!s || !(s = lookup_or_init(&tensor_sniff, &key, s)))
		return;
	/* Two threads may take one slot: then it holds one call's fields or a mix of two
	 * calls' of the same op, which a check either passes as it would each or refuses. */
	i = s->n;
	if (i >= LP_TSNIFF_N)
		return;
	s->n = i + 1;
	op_args(ctx, ta, &params, &dst);
	bpf_probe_read_user(&s->params[i], sizeof(s->params[i]), (void *)params);
	bpf_probe_read_user(s->raw[i], sizeof(s->raw[i]), (void *)dst);
	/* Last: user space reads a slot once its dst is set. */
	asm volatile("" ::: "memory");
	s->dst[i] = dst ? dst : 1;
}

/* Reads one tensor into slot k of the key; its bytes into *bytes, or marks them unknown. */
static __always_inline bool read_tensor(struct lp_node_flight *f, int k, __u64 ptr,
					const struct lp_tensor_layout *lay, __u64 *bytes)
{
	struct tensor_head h;
	__u64 vsrc = 0, b;
	int i;

	if (bpf_probe_read_user(&h, sizeof(h), (void *)ptr) ||
	    bpf_probe_read_user(&vsrc, sizeof(vsrc), (void *)(ptr + lay->view_src)))
		return false;
	if (h.type < 0 || h.type >= LP_NODE_NO_TYPE)
		return false;
	f->key.type[k] = (__u8)h.type;
	for (i = 0; i < 4; i++) {
		if (h.ne[i] < 1)
			return false;
		f->key.ne[k][i] = h.ne[i] > 0xffffffffLL ? 0xffffffffU : (__u32)h.ne[i];
	}
	if (!vsrc) {
		/* Made by ggml_new_tensor: contiguous, nb[3] * ne[3] bytes (ggml_nbytes). */
		*bytes = h.nb[3] * (__u64)h.ne[3];
		return true;
	}
	/* A view of a block type: its extent needs the block size. The types of one value a
	 * block in GGUF's shared numbering: f32, f16, i8, i16, i32, i64, f64, bf16. */
	if (h.type > 1 && !(h.type >= 24 && h.type <= 28) && h.type != 30) {
		f->unknown = 1;
		*bytes = 0;
		return true;
	}
	/* ggml_nbytes for a block of one value: nb[0] is its size. */
	b = h.nb[0];
	for (i = 0; i < 4; i++)
		b += (__u64)(h.ne[i] - 1) * h.nb[i];
	*bytes = b;
	return true;
}

/* Bytes of a tensor's name read: llama.cpp's are short ("ffn_up-31", "cache_k_l3 (view)");
 * a longer one keeps no layer. */
#define NAME_READ 48
#define NAME_BUF 64 /* a power of two above NAME_READ: masks an index into it */

/* The layer from a name's "-N" suffix and the name before it, cut to the key's stem.
 * Returns the name's length (NAME_READ: not terminated within it). */
static __always_inline int name_parse(struct lp_node_flight *f, const char *name)
{
	int i, dash = -1, layer = 0, digits = 0, len, n;

	for (i = 0; i < NAME_READ; i++) {
		char c = name[i];

		if (!c)
			break;
		if (c == '-') {
			dash = i;
			layer = 0;
			digits = 0;
		} else if (c >= '0' && c <= '9' && dash >= 0 && digits < 5) {
			layer = layer * 10 + (c - '0');
			digits++;
		} else {
			dash = -1;
		}
	}
	n = i;
	if (i >= NAME_READ) /* not terminated where it was read */
		dash = -2;
	f->key.layer = dash >= 0 && digits > 0 && digits < 5 ? (__s16)layer : -1;
	len = dash >= 0 && digits > 0 ? dash : i;
	for (i = 0; i < LP_NODE_STEM - 1 && i < len; i++)
		f->key.stem[i] = name[i];
	return n;
}

/* The layer in a source's name: "-N" at its end or before a suffix ggml gives a view
 * (ggml_format_name's " (permuted)", " (view)", ...); -1 where none. name has NAME_BUF
 * bytes, NAME_READ of them read. */
static __always_inline __s16 source_layer(const char *name)
{
	int i, end = -1, layer = 0, mul = 1;

	for (i = 0; i < NAME_READ; i++) {
		if (!name[i] || (name[i] == ' ' && name[i + 1] == '(')) {
			end = i;
			break;
		}
	}
	/* Back from there: up to four digits after a '-'. */
	for (i = 1; i <= 5; i++) {
		char c;

		if (end - i < 0)
			return -1;
		c = name[(end - i) & (NAME_BUF - 1)];
		if (c == '-')
			return i > 1 ? (__s16)layer : -1;
		if (c < '0' || c > '9' || i == 5)
			return -1;
		layer += (c - '0') * mul;
		mul *= 10;
	}
	return -1;
}

/* A name ggml made, not the graph's builder: "node_N" for a node left unnamed
 * (ggml_visit_parents), or a view's "X (view)", "X (permuted)", ... (ggml_format_name in
 * ggml_view_*, ggml_permute, ggml_reshape_*, ggml_cont, ...). name is len bytes long. */
static __always_inline bool made_by_ggml(const struct lp_node_flight *f, const char *name, int len)
{
	const char *s = f->key.stem;

	if (len > 0 && len < NAME_READ && name[(len - 1) & (NAME_BUF - 1)] == ')')
		return true;
	return s[0] == 'n' && s[1] == 'o' && s[2] == 'd' && s[3] == 'e' && s[4] == '_' &&
	       s[5] >= '0' && s[5] <= '9';
}

static __always_inline void node_enter(struct pt_regs *ctx, const struct lp_precise *pr, __u32 tgid,
				       __u32 op)
{
	__u32 zero = 0, tid = (__u32)current_ids();
	struct lp_tensor_layout lay = pr->lay;
	__u8 ta = pr->targs[op & (LP_MAX_OPS - 1)];
	__u64 params, dst, src[LP_NODE_SRCS] = {}, b;
	struct lp_node_flight *f;
	char name[NAME_BUF] = {};
	int len;
	__s32 ith = -1;
	int k;

	if ((ta & LP_TA_STATE) == LP_TA_UNKNOWN) {
		sniff(ctx, tgid, op, ta);
		return;
	}
	if ((ta & LP_TA_STATE) != LP_TA_READ || !lay.src || !lay.name || !lay.view_src)
		return;
	f = bpf_map_lookup_elem(&flight_scratch, &zero);
	if (!f)
		return;
	op_args(ctx, ta, &params, &dst);
	__builtin_memset(f, 0, sizeof(*f));
	f->key.tgid = tgid;
	f->key.op = (__u16)op;
	f->key.type[1] = f->key.type[2] = f->key.type[3] = LP_NODE_NO_TYPE;
	if (bpf_probe_read_user(&ith, sizeof(ith), (void *)params) ||
	    !read_tensor(f, 0, dst, &lay, &b) ||
	    bpf_probe_read_user(src, sizeof(src), (void *)(dst + lay.src)) ||
	    bpf_probe_read_user(name, NAME_READ, (void *)(dst + lay.name)))
		return;
	f->wr_bytes = b;
	for (k = 0; k < LP_NODE_SRCS; k++) {
		if (!src[k])
			continue;
		if (!read_tensor(f, k + 1, src[k], &lay, &b))
			return;
		f->rd_bytes += b;
	}
	len = name_parse(f, name);
	/* A node the builder did not name (llama.cpp's flash attention, "node_N"; its KV
	 * cache writes, "cache_k_l3 (view)") is of its layer's code: the layer of its first
	 * source, where that one's name has it ("Qcur-3 (view) (permuted)"). */
	if (f->key.layer < 0 && src[0] && made_by_ggml(f, name, len) &&
	    !bpf_probe_read_user(name, NAME_READ, (void *)(src[0] + lay.name)))
		f->key.layer = source_layer(name);
	f->pgen = pr->gen;
	f->ith0 = ith == 0;
	f->ok = 1;
	bpf_map_update_elem(&node_flight, &tid, f, BPF_ANY);
}

/* The node's entry, made with a new id where there is none. */
static __always_inline struct lp_node_val *node_get(const struct lp_node_key *key)
{
	struct lp_node_val *v = bpf_map_lookup_elem(&nodes, key), init = {};

	if (v)
		return v;
	init.id = (__u64)bpf_get_prandom_u32() << 32 | bpf_get_prandom_u32() | 1;
	bpf_map_update_elem(&nodes, key, &init, BPF_NOEXIST);
	return bpf_map_lookup_elem(&nodes, key);
}

/* At the op's return: its node's figures, if its entry read them in this window. Returns
 * the node's id, or 0. */
static __always_inline __u64 node_exit(__u32 pgen, __u64 d, __u64 own, bool gen, bool whole)
{
	__u32 tid = (__u32)current_ids();
	struct lp_node_flight *f = bpf_map_lookup_elem(&node_flight, &tid);
	struct lp_node_val *v;

	if (!f || !f->ok || f->pgen != pgen)
		return 0;
	f->ok = 0;
	v = node_get(&f->key);
	if (!v) {
		drop(LP_D_NODES_FULL);
		return 0;
	}
	__sync_fetch_and_add(&v->calls, 1);
	__sync_fetch_and_add(&v->ns, d);
	__sync_fetch_and_add(&v->oncpu_ns, own);
	if (d > v->max_ns)
		v->max_ns = d; /* a race loses one maximum to another: either is a call's */
	if (gen)
		__sync_fetch_and_add(&v->gen_oncpu_ns, own);
	if (!f->ith0)
		return v->id;
	__sync_fetch_and_add(&v->instances, 1);
	__sync_fetch_and_add(&v->rd_bytes, f->rd_bytes);
	__sync_fetch_and_add(&v->wr_bytes, f->wr_bytes);
	if (f->unknown)
		__sync_fetch_and_add(&v->bytes_unknown, 1);
	if (whole)
		__sync_fetch_and_add(&v->gen_instances, 1);
	return v->id;
}

/* The index of the window's op whose entry point holds addr, by the op functions' table
 * (torch's aten ops), or -1. */
static __always_inline int precise_aop(const struct lp_precise *pr, const struct lp_ranges *rg,
				       __u64 addr)
{
	__u32 aop = rg->opfn ? aop_at(rg, addr) : LP_AOP_NONE;

	if (aop == LP_AOP_NONE)
		return -1;
	for (int i = 0; i < LP_PRECISE_AOPS; i++)
		if (pr->aop[i] == aop)
			return pr->aop_op[i];
	return -1;
}

/* An op function: which op comes from the sampling table, by the probe's address; an op
 * functions' table's op from the window's list. */
SEC("uprobe")
int BPF_KPROBE(lp_op_enter)
{
	const struct lp_ranges *rg;
	struct lp_precise *pr;
	struct lp_thread *t;
	__u32 tgid;
	int i;

	t = precise_thread_pr(&tgid, &pr);
	if (!t)
		return 0;
	if (t->op.depth == 0) {
		rg = bpf_map_lookup_elem(&ranges, &tgid);
		if (!rg)
			return 0;
		i = range_find(rg, PT_REGS_IP(ctx));
		if (i >= 0 && rg->kind[i & (LP_MAX_RANGES - 1)] == LP_K_OP)
			t->op_idx = rg->op[i & (LP_MAX_RANGES - 1)];
		else if ((i = precise_aop(pr, rg, PT_REGS_IP(ctx))) >= 0)
			t->op_idx = (__u32)i;
		else
			return 0;
	}
	call_enter(&t->op);
	if (t->op.depth == 1) {
		rec_emit(tgid, (__u32)current_ids(), LP_REC_OP_BEGIN, t->op_idx);
		node_enter(ctx, pr, tgid, t->op_idx);
	}
	return 0;
}

SEC("uretprobe")
int BPF_KRETPROBE(lp_op_exit)
{
	struct lp_op_key key = {};
	struct lp_op_precise *s;
	struct lp_rec_ev *e;
	struct lp_thread *t;
	__u32 zero = 0;
	__u64 d, own, node = 0;
	bool gen;

	t = precise_thread(&key.tgid);
	if (!t || !(d = call_exit(&t->op)))
		return 0;
	key.op = t->op_idx;
	/* Its time now; submitted once the node it computed is known. */
	e = rec_reserve(key.tgid, (__u32)current_ids(), LP_REC_OP_END);
	s = bpf_map_lookup_elem(&op_precise_init, &zero);
	if (!s || !(s = lookup_or_init(&op_precise, &key, s)))
		goto out;
	own = d > t->op.inner_ns + t->op.off_ns ? d - t->op.inner_ns - t->op.off_ns : 0;
	__sync_fetch_and_add(&s->calls, 1);
	__sync_fetch_and_add(&s->ns, d);
	__sync_fetch_and_add(&s->oncpu_ns, own);
	hist_add(&s->hist, d);
	gen = generating(key.tgid);
	if (gen) {
		__sync_fetch_and_add(&s->gen_calls, 1);
		__sync_fetch_and_add(&s->gen_oncpu_ns, own);
	}
	node = node_exit(t->pgen, d, own, gen, gen && whole_gen(key.tgid));
out:
	if (e) {
		e->a = key.op;
		e->node = node;
		rec_submit(e);
	}
	return 0;
}

/* torch's aten ops, which call one another (linear calls matmul calls mm): each call's own
 * time is its wall time less that of the probed ops it called, a stack per thread. */
#define LP_AOP_DEPTH 8
struct lp_aop_stack {
	__u32 gen; /* the window's (lp_precise.gen): a stack of an earlier window is reset */
	__u32 depth;
	struct lp_aop_frame {
		__u64 since, inner;
		__u32 op; /* index in the process's op table; LP_MAX_OPS: not a probed op's */
		__u32 pad;
	} f[LP_AOP_DEPTH];
};

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct lp_aop_stack);
} aop_stack SEC(".maps");

static __always_inline struct lp_aop_stack *aop_stack_of(__u32 tid, __u32 gen)
{
	struct lp_aop_stack *st = bpf_map_lookup_elem(&aop_stack, &tid), zero = {};

	if (!st) {
		zero.gen = gen;
		bpf_map_update_elem(&aop_stack, &tid, &zero, BPF_ANY);
		return bpf_map_lookup_elem(&aop_stack, &tid);
	}
	if (st->gen != gen) {
		st->gen = gen;
		st->depth = 0;
	}
	return st;
}

SEC("uprobe")
int BPF_KPROBE(lp_aop_enter)
{
	const struct lp_ranges *rg;
	struct lp_aop_stack *st;
	struct lp_precise *pr;
	struct lp_thread *t;
	__u32 tgid, d;
	int op;

	t = precise_thread_pr(&tgid, &pr);
	if (!t || !(st = aop_stack_of((__u32)current_ids(), pr->gen)))
		return 0;
	rg = bpf_map_lookup_elem(&ranges, &tgid);
	op = rg ? precise_aop(pr, rg, PT_REGS_IP(ctx)) : -1;
	d = st->depth++;
	if (d >= LP_AOP_DEPTH)
		return 0;
	st->f[d].since = bpf_ktime_get_ns();
	st->f[d].inner = 0;
	st->f[d].op = op < 0 ? LP_MAX_OPS : (__u32)op;
	if (op >= 0)
		rec_emit(tgid, (__u32)current_ids(), LP_REC_OP_BEGIN, (__u64)op);
	return 0;
}

SEC("uretprobe")
int BPF_KRETPROBE(lp_aop_exit)
{
	struct lp_op_key key = {};
	struct lp_op_precise *s;
	struct lp_aop_stack *st;
	struct lp_precise *pr;
	struct lp_thread *t;
	__u32 d, zero = 0;
	__u64 wall, own;

	t = precise_thread_pr(&key.tgid, &pr);
	if (!t || !(st = bpf_map_lookup_elem(&aop_stack, &(__u32){(__u32)current_ids()})) ||
	    st->gen != pr->gen || !st->depth)
		return 0;
	d = --st->depth;
	if (d >= LP_AOP_DEPTH)
		return 0;
	wall = bpf_ktime_get_ns() - st->f[d].since;
	own = wall > st->f[d].inner ? wall - st->f[d].inner : 0;
	if (d > 0)
		st->f[(d - 1) & (LP_AOP_DEPTH - 1)].inner += wall;
	if (st->f[d].op >= LP_MAX_OPS)
		return 0;
	key.op = st->f[d].op;
	rec_emit(key.tgid, (__u32)current_ids(), LP_REC_OP_END, key.op);
	s = bpf_map_lookup_elem(&op_precise_init, &zero);
	if (!s || !(s = lookup_or_init(&op_precise, &key, s)))
		return 0;
	__sync_fetch_and_add(&s->calls, 1);
	__sync_fetch_and_add(&s->ns, wall);
	__sync_fetch_and_add(&s->oncpu_ns, own);
	hist_add(&s->hist, wall);
	if (generating(key.tgid)) {
		__sync_fetch_and_add(&s->gen_calls, 1);
		__sync_fetch_and_add(&s->gen_oncpu_ns, own);
	}
	return 0;
}
