// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* llama_decode: once per batch, so probed always. Tokens, decode times, the wall clock per
 * generated token, and whether a generation decode is in flight (for per-token samples). */
#include "lp.bpf.h"

SEC("uprobe")
int BPF_KPROBE(lp_decode_enter)
{
	__u64 id = bpf_get_current_pid_tgid();
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
		t->gen_in = gen_depth_add(tgid, 1);
	t->decode_tokens = n_tokens > 0 ? n_tokens : 0;
	t->decode_since = now;
	rec_emit(tgid, (__u32)id, LP_REC_DECODE_BEGIN, t->decode_tokens);
	return 0;
}

SEC("uretprobe")
int BPF_KRETPROBE(lp_decode_exit, int ret)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32, tid = (__u32)id;
	struct lp_proc_stats *p;
	struct lp_thread *t;
	__u64 d, end;

	t = bpf_map_lookup_elem(&threads, &tid);
	if (!t || t->tgid != tgid || !t->decode_since)
		return 0;
	end = bpf_ktime_get_ns();
	d = end - t->decode_since;
	t->decode_since = 0;
	rec_emit(tgid, tid, LP_REC_DECODE_END, (__u64)(__s64)ret);
	if (t->gen_in)
		t->gen_in = !gen_depth_add(tgid, -1);
	p = bpf_map_lookup_elem(&procs, &tgid);
	if (!p)
		return 0;
	if (t->decode_tokens == 1)
		__sync_fetch_and_add(&p->gen_seq, 1);
	if (ret != 0) {
		__sync_fetch_and_add(&p->ctr[LP_C_DECODE_ERRORS], 1);
		return 0;
	}
	if (t->decode_tokens == 1) {
		p->gen_end_ns = end;
		__sync_fetch_and_add(&p->ctr[LP_C_DECODE_GEN_CALLS], 1);
		__sync_fetch_and_add(&p->ctr[LP_C_DECODE_GEN_NS], d);
		hist_add(&p->hist[LP_H_DECODE_GEN], d);
	} else if (t->decode_tokens > 1) {
		__sync_fetch_and_add(&p->ctr[LP_C_DECODE_PROMPT_CALLS], 1);
		__sync_fetch_and_add(&p->ctr[LP_C_DECODE_PROMPT_TOKENS], t->decode_tokens);
		__sync_fetch_and_add(&p->ctr[LP_C_DECODE_PROMPT_NS], d);
		hist_add(&p->hist[LP_H_DECODE_PROMPT], d);
	}
	return 0;
}
