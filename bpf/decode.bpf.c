// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* llama_decode: once per batch, so probed always. Tokens, decode times, the wall clock per
 * generated token, and whether a generation decode is in flight (for per-token samples). */
#include "lp.bpf.h"

SEC("uprobe")
int BPF_KPROBE(lp_decode_enter)
{
	__u64 id = current_ids();
	__u32 tgid = id >> 32;
	struct lp_proc_stats *p;
	struct lp_thread *t;
	__s32 n_tokens = 0;
	__u64 now, last;
	void *batch;

	p = bpf_map_lookup_elem(&procs, &tgid);
	if (!p)
		return 0;
	t = thread_get((__u32)id, tgid);
	if (!t)
		return 0;
		/* llama_decode(ctx, struct llama_batch batch): n_tokens is the batch's first field.
	 * The 56-byte struct is passed in memory: on the stack above the return address on
	 * x86-64, by reference in x1 on arm64. */
#if defined(__TARGET_ARCH_x86)
	batch = (void *)(PT_REGS_SP(ctx) + 8);
#else
	batch = (void *)PT_REGS_PARM2(ctx);
#endif
	bpf_probe_read_user(&n_tokens, sizeof(n_tokens), batch);
	/* The wall clock per generated token, from one generation decode to the next, when
	 * the last one has returned and not long ago (LP_GEN_GAP_NS). */
	now = bpf_ktime_get_ns();
	last = p->gen_last_ns;
	if (n_tokens == 1 && last && p->gen_end_ns >= last && now - p->gen_end_ns < LP_GEN_GAP_NS) {
		__sync_fetch_and_add(&p->ctr[LP_C_GEN_INTERVALS], 1);
		__sync_fetch_and_add(&p->ctr[LP_C_GEN_INTERVAL_NS], now - last);
		__sync_fetch_and_add(&p->ctr[LP_C_GEN_GAP_NS], now - p->gen_end_ns);
	}
	p->gen_last_ns = n_tokens == 1 ? now : 0;
	if (n_tokens == 1)
		__sync_fetch_and_add(&p->gen_seq, 1);
	/* A generation decode is in flight for the process's samples, once per thread. */
	if (n_tokens == 1 && !t->gen_in)
		t->gen_in = gen_depth_add(tgid, 1, now);
	t->decode_tokens = n_tokens > 0 ? n_tokens : 0;
	/* Any decode in flight: the samples' phase (sample.bpf.c). */
	if (!t->dec_in)
		t->dec_in = decode_depth_add(tgid, 1);
	t->decode_since = now;
	rec_emit(tgid, (__u32)id, LP_REC_DECODE_BEGIN, t->decode_tokens);
	return 0;
}

/* The batch's pointers and where the walk is (batch_token). */
struct batch_walk {
	struct lp_ev_decode *e;
	__u64 pos, n_seq_id, seq_id, logits; /* user addresses; 0: NULL */
	__u32 n;			     /* tokens walked */
	__u32 last;			     /* index in e->seq of the previous token's sequence */
};

/* One token: its sequence (the first of its n_seq_id), position and whether its logits are
 * wanted, added to its sequence's entry. llama.cpp's defaults for NULL arrays: sequence 0,
 * positions from the memory, the last token's logits only. */
static long batch_token(__u32 i, void *arg)
{
	struct batch_walk *w = arg;
	struct lp_ev_decode *e = w->e;
	struct lp_batch_seq *q;
	__s32 seq = 0, pos = -1, nseq = 1;
	__s8 out = i + 1 == w->n;
	__u64 p = 0;
	__u32 k;

	if (w->seq_id) {
		bpf_probe_read_user(&nseq, sizeof(nseq), (void *)(w->n_seq_id + 4ULL * i));
		bpf_probe_read_user(&p, sizeof(p), (void *)(w->seq_id + 8ULL * i));
		if (p)
			bpf_probe_read_user(&seq, sizeof(seq), (void *)p);
		if (nseq > 1)
			e->flags |= LP_BATCH_SHARED;
	}
	if (w->pos)
		bpf_probe_read_user(&pos, sizeof(pos), (void *)(w->pos + 4ULL * i));
	if (w->logits)
		bpf_probe_read_user(&out, sizeof(out), (void *)(w->logits + i));
	/* Tokens of a sequence mostly follow each other: the previous token's entry first. */
	k = w->last;
	if (k >= LP_BATCH_SEQS || k >= e->nseq || e->seq[k].seq != seq) {
		for (k = 0; k < LP_BATCH_SEQS; k++)
			if (k >= e->nseq || e->seq[k].seq == seq)
				break;
		if (k >= LP_BATCH_SEQS) {
			e->flags |= LP_BATCH_SEQS_FULL;
			return 0;
		}
		if (k == e->nseq) {
			e->nseq++;
			e->seq[k].seq = seq;
			e->seq[k].pos_min = pos;
			e->seq[k].pos_max = pos;
		}
	}
	w->last = k;
	q = &e->seq[k];
	q->tokens++;
	q->outputs += out != 0;
	if (pos < q->pos_min)
		q->pos_min = pos;
	if (pos > q->pos_max)
		q->pos_max = pos;
	return 0;
}

/* The batch by sequence, for per-request figures: a program of its own (bpf_loop, Linux
 * 5.17), left unloaded where the kernel lacks it; one bpf_probe_read_user a field a token. */
SEC("uprobe")
int BPF_KPROBE(lp_decode_batch)
{
	__u64 id = current_ids();
	__u32 tgid = id >> 32, tid = (__u32)id, zero = 0;
	struct batch_walk w = {};
	struct lp_ev_decode *e;
	struct {
		__s32 n_tokens;
		__u32 pad;
		__u64 token, embd, pos, n_seq_id, seq_id, logits;
	} b;
	void *batch;

	if (!bpf_map_lookup_elem(&procs, &tgid))
		return 0;
	e = bpf_map_lookup_elem(&batch_scratch, &zero);
	if (!e)
		return 0;
	__builtin_memset(e, 0, sizeof(*e));
	e->begin_ns = bpf_ktime_get_ns(); /* the entry's time, before the walk */
	e->type = LP_EV_DECODE;
	e->tgid = tgid;
	e->tid = tid;
#if defined(__TARGET_ARCH_x86)
	batch = (void *)(PT_REGS_SP(ctx) + 8);
#else
	batch = (void *)PT_REGS_PARM2(ctx);
#endif
	if (bpf_probe_read_user(&b, sizeof(b), batch) < 0 || b.n_tokens <= 0 ||
	    !b.token == !b.embd || !b.n_seq_id != !b.seq_id) {
		e->flags |= LP_BATCH_UNREAD;
	} else {
		e->n_tokens = b.n_tokens;
		w.e = e;
		w.pos = b.pos;
		w.n_seq_id = b.n_seq_id;
		w.seq_id = b.seq_id;
		w.logits = b.logits;
		w.n = b.n_tokens;
		if (b.n_tokens > LP_BATCH_MAX) {
			e->flags |= LP_BATCH_TRUNCATED;
			w.n = LP_BATCH_MAX;
		}
		if (!b.pos)
			e->flags |= LP_BATCH_NO_POS;
		bpf_loop(w.n, batch_token, &w, 0);
	}
	bpf_map_update_elem(&decode_batch, &tid, e, BPF_ANY);
	return 0;
}

/* The batch read at entry, with the decode's end and result, to user space; left out when
 * "events" is half full: it carries the exit records, which matter more. It wakes the
 * daemon only once a quarter of the ring waits: the daemon drains it every second anyway,
 * and a wake-up per decode would take a CPU from the engine it measures: the daemon would
 * preempt the engine's threads at every token.
 * The lifecycle records force their wake-up, waiting decodes or not. */
static __always_inline void batch_send(__u32 tid, __u64 end, int ret)
{
	struct lp_ev_decode *b = bpf_map_lookup_elem(&decode_batch, &tid);
	__u64 waiting = bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA);
	__u64 size = bpf_ringbuf_query(&events, BPF_RB_RING_SIZE);
	struct lp_ev_decode *e;

	if (!b)
		return;
	if (waiting > size / 2) {
		drop(LP_D_DECODES_LOST);
	} else if ((e = bpf_ringbuf_reserve(&events, sizeof(*e), 0))) {
		__builtin_memcpy(e, b, sizeof(*e));
		e->end_ns = end;
		e->ret = ret;
		bpf_ringbuf_submit(e, waiting + sizeof(*e) > size / 4 ? BPF_RB_FORCE_WAKEUP
								      : BPF_RB_NO_WAKEUP);
	} else {
		drop(LP_D_DECODES_LOST);
	}
	bpf_map_delete_elem(&decode_batch, &tid);
}

static __always_inline void decode_returned(__u32 tgid)
{
	struct lp_op_samples *os = bpf_map_lookup_elem(&op_samples, &tgid);

	if (os)
		__sync_fetch_and_add(&os->decodes, 1);
}

/* A generation decode that began once the nodes' tensors were read (precise mode) counts
 * for the nodes' per-token figures: their evaluations count in such decodes only (precise.bpf.c
 * whole_gen), so both sides hold whole tokens. */
static __always_inline void whole_token(__u32 tgid, __u64 begin)
{
	struct lp_precise *pr = bpf_map_lookup_elem(&precise, &tgid);
	struct lp_op_samples *os;

	if (!pr || !pr->nodes_from_ns || begin < pr->nodes_from_ns)
		return;
	os = bpf_map_lookup_elem(&op_samples, &tgid);
	if (os)
		__sync_fetch_and_add(&os->nodes_gen_tokens, 1);
}

SEC("uretprobe")
int BPF_KRETPROBE(lp_decode_exit, int ret)
{
	__u64 id = current_ids();
	__u32 tgid = id >> 32, tid = (__u32)id;
	struct lp_proc_stats *p;
	struct lp_thread *t;
	__u64 d, end, begin;

	t = bpf_map_lookup_elem(&threads, &tid);
	if (!t || t->tgid != tgid || !t->decode_since)
		return 0;
	end = bpf_ktime_get_ns();
	begin = t->decode_since;
	d = end - begin;
	t->decode_since = 0;
	if (t->dec_in)
		t->dec_in = !decode_depth_add(tgid, -1);
	decode_returned(tgid);
	batch_send(tid, end, ret);
	rec_emit(tgid, tid, LP_REC_DECODE_END, (__u64)(__s64)ret);
	if (t->gen_in)
		t->gen_in = !gen_depth_add(tgid, -1, 0);
	p = bpf_map_lookup_elem(&procs, &tgid);
	if (!p)
		return 0;
	if (t->decode_tokens == 1)
		__sync_fetch_and_add(&p->gen_seq, 1);
	if (ret != 0) {
		__sync_fetch_and_add(&p->ctr[LP_C_DECODE_ERRORS], 1);
		return 0;
	}
	/* Every call's tokens are timed ones: its return times it. */
	if (t->decode_tokens == 1) {
		whole_token(tgid, begin);
		p->gen_end_ns = end;
		__sync_fetch_and_add(&p->ctr[LP_C_DECODE_GEN_CALLS], 1);
		__sync_fetch_and_add(&p->ctr[LP_C_GEN_TIMED_TOKENS], 1);
		__sync_fetch_and_add(&p->ctr[LP_C_GEN_STEPS], 1);
		__sync_fetch_and_add(&p->ctr[LP_C_DECODE_GEN_NS], d);
		hist_add(&p->hist[LP_H_DECODE_GEN], d);
	} else if (t->decode_tokens > 1) {
		__sync_fetch_and_add(&p->ctr[LP_C_DECODE_PROMPT_CALLS], 1);
		__sync_fetch_and_add(&p->ctr[LP_C_DECODE_PROMPT_TOKENS], t->decode_tokens);
		__sync_fetch_and_add(&p->ctr[LP_C_PROMPT_TIMED_TOKENS], t->decode_tokens);
		__sync_fetch_and_add(&p->ctr[LP_C_DECODE_PROMPT_NS], d);
		hist_add(&p->hist[LP_H_DECODE_PROMPT], d);
	}
	return 0;
}
