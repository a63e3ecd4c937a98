// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* Precise mode: uprobes on every matmul and barrier function of one process, and on the op
 * functions it spends its time in, for windows of time (on demand or a duty cycle). */
#include "engine/precise.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <errno.h>
#include <event2/event.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core.skel.h"
#include "base/log.h"
#include "engine/nodes.h"
#include "engine/ops.h"
#include "kernel/uprobe.h"
#include "tracked/hot.h"

/* The process's CPU time by the kernel's own account (sum_exec_runtime of every thread,
 * the exited ones included), read through its CPU-time clock. Summing the live threads'
 * schedstat instead lost the threads that exited within a window, and with them most of
 * a build that starts worker threads per graph. */
static uint64_t proc_oncpu_ns(pid_t pid)
{
	struct timespec ts;
	clockid_t cid;

	if (clock_getcpuclockid(pid, &cid) != 0 || clock_gettime(cid, &ts) != 0)
		return 0;
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static int read_stats(struct lp_engines *g, pid_t pid, struct lp_proc_stats *st)
{
	__u32 key = (__u32)pid;

	return lp_hot_read(g->tr->procs_fd, g->tr->hot_fd, key, st);
}

/* The process counter behind each of enum lp_window_ctr. */
static const int window_ctr[LP_W_NR] = {
	[LP_W_SAMPLES] = LP_C_SAMPLES,
	[LP_W_SAMPLES_MATMUL] = LP_C_SAMPLES_MATMUL,
	[LP_W_SAMPLES_BARRIER] = LP_C_SAMPLES_BARRIER,
	[LP_W_GEN_TOKENS] = LP_C_DECODE_GEN_CALLS,
	[LP_W_GEN_NS] = LP_C_DECODE_GEN_NS,
	[LP_W_BARRIER_GEN_ONCPU_NS] = LP_C_BARRIER_GEN_ONCPU_NS,
};

/* Adds what the followed counters grew by since the open window started to acc. */
static void ctr_since_start(const struct lp_eproc *gp, const struct lp_proc_stats *st,
			    uint64_t acc[LP_W_NR])
{
	for (int i = 0; i < LP_W_NR; i++)
		acc[i] += st->ctr[window_ctr[i]] - gp->ctr_start[i];
}

/* Adds the op samples taken since the open window started to acc and *total. */
static void ops_since_start(const struct lp_eproc *gp, const struct lp_op_samples *os,
			    uint64_t acc[LP_MAX_OPS], uint64_t *total)
{
	if (!os)
		return;
	for (size_t i = 0; i < LP_MAX_OPS; i++)
		acc[i] += os->all[i] >= gp->op_start[i] ? os->all[i] - gp->op_start[i] : 0;
	*total += os->total >= gp->op_total_start ? os->total - gp->op_total_start : 0;
}

/* The probed ops named by an op functions' table (torch's), for the op probes to find
 * their index by. */
static void aops_fill(const struct lp_eproc *gp, struct lp_precise *pr)
{
	size_t n = 0;

	for (size_t i = 0; i < LP_PRECISE_AOPS; i++)
		pr->aop[i] = LP_AOP_NONE;
	for (size_t i = 0; i < gp->ops.n && i < LP_MAX_OPS && n < LP_PRECISE_AOPS; i++)
		if (gp->op_probed[i] && gp->aops[i]) {
			pr->aop[n] = gp->aops[i];
			pr->aop_op[n++] = (__u8)i;
		}
}

/* Starts a window's accounting now: counters, on-CPU time and samples as of this moment,
 * and a new generation so that calls in flight from before are discarded. */
static int window_mark(struct lp_engines *g, struct lp_target *t)
{
	struct lp_eproc *gp = t->eng;
	struct lp_precise pr = {.gen = ++gp->gen};
	struct lp_proc_stats *st = malloc(sizeof(*st));
	__u32 key = (__u32)t->pid;
	int r;

	if (!st)
		return -ENOMEM;
	lp_nodes_fill(gp, g->cfg->precise_tensors, &pr);
	aops_fill(gp, &pr);
	r = read_stats(g, t->pid, st);
	if (r == 0 &&
	    bpf_map_update_elem(bpf_map__fd(g->core->skel->maps.precise), &key, &pr, BPF_ANY) < 0)
		r = -errno;
	if (r == 0) {
		struct lp_op_samples *os = lp_eproc_op_samples(g->core, t->eng, t->pid);

		for (size_t i = 0; i < LP_MAX_OPS; i++)
			gp->op_start[i] = os ? os->all[i] : 0;
		gp->op_total_start = os ? os->total : 0;
		free(os);
		for (int i = 0; i < LP_W_NR; i++)
			gp->ctr_start[i] = st->ctr[window_ctr[i]];
		gp->bpf_oncpu_start_ns = st->ctr[LP_C_ONCPU_NS];
		gp->window_start_ns = lp_now_ns();
		gp->oncpu_start_ns = proc_oncpu_ns(t->pid);
	}
	free(st);
	return r;
}

/* The ops a window probes: those --precise-ops names, else the LP_PRECISE_OPS with most
 * samples so far. Names the process has no op of are kept to be reported. */
static void choose_ops(struct lp_engines *g, struct lp_target *t, uint8_t want[LP_MAX_OPS])
{
	struct lp_eproc *gp = t->eng;
	struct lp_op_samples *os;

	memset(want, 0, LP_MAX_OPS);
	if (g->cfg->precise_ops) {
		size_t len = 0;

		free(gp->precise_ops_missing);
		gp->precise_ops_missing = NULL;
		for (const char *const *p = g->cfg->precise_ops; *p; p++) {
			int i = lp_op_table_find(&gp->ops, *p);
			char *v;

			if (i >= 0) {
				want[i] = 1;
				continue;
			}
			v = realloc(gp->precise_ops_missing, len + strlen(*p) + 3);
			if (!v)
				continue;
			len += (size_t)sprintf(v + len, "%s%s", len ? ", " : "", *p);
			gp->precise_ops_missing = v;
		}
		if (gp->precise_ops_missing)
			log_warning("pid %d: --precise-ops: no op named %s in its ggml objects; "
				    "llmprofctl dump --pid %d lists its ops",
				    (int)t->pid, gp->precise_ops_missing, (int)t->pid);
		return;
	}
	os = lp_eproc_op_samples(g->core, t->eng, t->pid);
	if (os)
		lp_op_mark_top(&gp->ops, os->all, LP_PRECISE_OPS, want);
	free(os);
}

/* A growing array of uprobes to attach (prober.h). */
struct specs {
	struct lp_probe_spec *v;
	size_t n;
};

/* An entry and a return probe on sym. */
static int spec_pair(struct specs *sp, struct bpf_program *enter, struct bpf_program *exit,
		     pid_t pid, const char *path, const struct lp_elf_sym *sym)
{
	struct lp_probe_spec *v = realloc(sp->v, (sp->n + 2) * sizeof(*v));

	if (!v)
		return -ENOMEM;
	sp->v = v;
	for (int ret = 0; ret < 2; ret++) {
		char *copy = strdup(path);

		if (!copy)
			return -ENOMEM;
		v[sp->n++] = (struct lp_probe_spec){.prog = ret ? exit : enter,
						    .retprobe = ret,
						    .pid = pid,
						    .offset = lp_uprobe_offset(sym),
						    .path = copy};
	}
	return 0;
}

/* How a function of an op gets (params, dst), if it runs once per node and thread so
 * that its tensors may be read:
 * - LP_READ_PLAIN: as its first two arguments. ggml_compute_forward_<op> itself, or where
 *   a build has it inlined, its type's (ggml_compute_forward_<op>_f32, _f16, _bf16) the op
 *   calls by dst's type. Not a compiler's clone (".isra", ".constprop": arguments changed)
 *   nor a chunk's helper.
 * - LP_READ_MEMBER: after a C++ object. An extra buffer type's
 *   ggml::cpu::...::compute_forward(ggml_compute_params *, ggml_tensor *), as its mangled
 *   name spells the parameters: a member function of the buffer's tensor_traits (the
 *   Itanium ABI passes `this` first), called for each node it computes by every thread.
 * The calls are checked all the same (tensors.h). */
static enum lp_tensor_args readable(const char *sym, const char *plain)
{
	static const char member[] = "15compute_forwardEP19ggml_compute_paramsP11ggml_tensor";
	size_t n = strlen(plain), m = strlen(sym);

	if (strncmp(sym, plain, n) == 0 &&
	    (sym[n] == '\0' || strcmp(sym + n, "_f32") == 0 || strcmp(sym + n, "_f16") == 0 ||
	     strcmp(sym + n, "_bf16") == 0))
		return LP_READ_PLAIN;
	if (strncmp(sym, "_ZN4ggml3cpu", 12) == 0 && m > sizeof(member) - 1 &&
	    strcmp(sym + m - (sizeof(member) - 1), member) == 0)
		return LP_READ_MEMBER;
	return LP_READ_NOT;
}

/* The op whose function symbol k of o is, into op: ggml's op functions; torch's aten ops'
 * call entry points (the dispatcher's way in from Python and from other ops: redispatch
 * runs inside a call), but those of step_op (step_op_of). */
static bool precise_op(const struct lp_eproc *gp, const struct lp_obj *o, size_t k,
		       uint16_t step_op, char *op, size_t size)
{
	const struct lp_elf_sym *sym = &o->syms.syms[k];

	if (gp->engine == LP_ENGINE_TORCH) {
		if (!o->sym_op || !o->sym_op[k] || o->sym_op[k] == step_op ||
		    o->sym_op[k] > o->nop_names || !strstr(sym->name, "4callE"))
			return false;
		snprintf(op, size, "%s", o->op_names[o->sym_op[k] - 1]);
		return true;
	}
	return sym->cls != LP_SYM_BARRIER && sym->cls != LP_SYM_DECODE &&
	       lp_op_name(sym->name, op, size) == 0;
}

/* The op of o's step function (torch's aten::embedding), or 0. Its entry is the step's: a
 * probe of the op there would run before or after the step's, as the kernel orders a
 * uprobe's consumers, and the op's span would straddle two steps; so none of the op's
 * entry points is probed, and the op is not among those probed. */
static uint16_t step_op_of(const struct lp_eproc *gp, const struct lp_obj *o)
{
	int cls = lp_engine_of(gp->engine)->step_class;

	for (size_t k = 0; o->sym_op && k < o->syms.nsyms; k++)
		if (o->syms.syms[k].cls == cls)
			return o->sym_op[k];
	return 0;
}

/* Uprobes on the chosen ops' functions: the one named ggml_compute_forward_<op> where the
 * process has it (its helpers run inside it, many times per call), else every function
 * of the op (C++ templates, type variants). */
static int ops_specs(struct lp_engines *g, struct lp_target *t, struct specs *sp)
{
	struct lp_eproc *gp = t->eng;
	struct core_bpf *s = g->core->skel;
	uint8_t want[LP_MAX_OPS], plain[LP_MAX_OPS] = {0}, how[LP_MAX_OPS] = {0};
	char op[LP_OP_NAME_MAX], name[LP_OP_NAME_MAX + 32];
	int r = 0, pass;

	choose_ops(g, t, want);
	gp->nops_probed = 0;
	memset(gp->op_readable, 0, sizeof(gp->op_readable));
	for (pass = 0; pass < 2 && r == 0; pass++)
		for (size_t i = 0; i < gp->nobjs && r == 0; i++) {
			struct lp_obj *o = gp->objs[i];
			char path[PATH_MAX + 64];
			bool have_path = false;
			uint16_t step_op = step_op_of(gp, o);

			for (size_t k = 0; k < o->syms.nsyms && r == 0; k++) {
				const struct lp_elf_sym *sym = &o->syms.syms[k];
				int idx;

				if (!precise_op(gp, o, k, step_op, op, sizeof(op)) ||
				    (idx = lp_op_table_find(&gp->ops, op)) < 0 || !want[idx])
					continue;
				snprintf(name, sizeof(name), "ggml_compute_forward_%s", op);
				if (pass == 0) { /* which ops have their plain function */
					plain[idx] |= !strcmp(sym->name, name);
					continue;
				}
				if (plain[idx] && strcmp(sym->name, name))
					continue;
				if (!have_path) {
					r = lp_uprobe_path(t->pid, o->path, o->dev, o->ino, path,
							   sizeof(path));
					have_path = true;
				}
				/* torch's aten ops nest: each call's own time on a stack */
				if (r == 0 && gp->engine == LP_ENGINE_TORCH)
					r = spec_pair(sp, s->progs.lp_aop_enter,
						      s->progs.lp_aop_exit, t->pid, path, sym);
				else if (r == 0)
					r = spec_pair(sp, s->progs.lp_op_enter, s->progs.lp_op_exit,
						      t->pid, path, sym);
				gp->op_probed[idx] = 1;
				how[idx] |= 1U << readable(sym->name, name);
				gp->nops_probed++;
			}
		}
	/* Read where every function of the op gets its tensors one way. */
	for (size_t i = 0; i < LP_MAX_OPS; i++)
		gp->op_readable[i] = how[i] == 1U << LP_READ_PLAIN    ? LP_READ_PLAIN
				     : how[i] == 1U << LP_READ_MEMBER ? LP_READ_MEMBER
								      : LP_READ_NOT;
	return r;
}

/* What a symbol is to a window: LP_SYM_MATMUL, LP_SYM_BARRIER, or neither. ggml's matmul
 * and barrier functions; torch's BLAS GEMM entry points (its matmul calls) and its
 * runtime's barriers (an OpenMP region's entry is not one: its work runs inside). */
static int precise_class(const struct lp_eproc *gp, const struct lp_elf_sym *sym)
{
	static const char *const gemm[] = {"sgemm_", "dgemm_", "cblas_sgemm", "cblas_dgemm"};

	if (gp->engine != LP_ENGINE_TORCH)
		return sym->cls;
	if (sym->cls == LP_SYM_BARRIER)
		return LP_SYM_BARRIER;
	for (size_t i = 0; sym->cls == LP_SYM_BLAS && i < sizeof(gemm) / sizeof(gemm[0]); i++)
		if (!strcmp(sym->name, gemm[i]))
			return LP_SYM_MATMUL;
	return -1;
}

/* Every uprobe of a window: matmul and barrier functions, then the chosen ops'. */
static int window_specs(struct lp_engines *g, struct lp_target *t, struct specs *sp)
{
	struct lp_eproc *gp = t->eng;
	struct core_bpf *s = g->core->skel;
	int r = 0;

	gp->nprobed = 0;
	for (size_t i = 0; i < gp->nobjs && r == 0; i++) {
		struct lp_obj *o = gp->objs[i];
		char path[PATH_MAX + 64];

		r = lp_uprobe_path(t->pid, o->path, o->dev, o->ino, path, sizeof(path));
		for (size_t k = 0; k < o->syms.nsyms && r == 0; k++) {
			const struct lp_elf_sym *sym = &o->syms.syms[k];
			int cls = precise_class(gp, sym);
			bool mm = cls == LP_SYM_MATMUL;

			if (cls != LP_SYM_MATMUL && cls != LP_SYM_BARRIER)
				continue;
			r = spec_pair(sp, mm ? s->progs.lp_matmul_enter : s->progs.lp_barrier_enter,
				      mm ? s->progs.lp_matmul_exit : s->progs.lp_barrier_exit,
				      t->pid, path, sym);
			gp->nprobed++;
		}
	}
	return r ? r : ops_specs(g, t, sp);
}

static uint64_t cookie_of(pid_t pid, uint32_t seq)
{
	return (uint64_t)(uint32_t)pid << 32 | seq;
}

static void window_end_free(struct lp_eproc *gp)
{
	if (gp->window_end)
		event_free(gp->window_end);
	gp->window_end = NULL;
}

static void window_end_arm(struct lp_engines *g, struct lp_target *t);

/* A timed window's end: the tick comes once a second, this comes on time. Every window due
 * now ends; one not yet due (libevent's clock is the coarse one, a jiffy behind
 * CLOCK_MONOTONIC at worst) is waited for again. */
static void on_window_end(evutil_socket_t fd, short what, void *arg)
{
	struct lp_engines *g = arg;
	uint64_t now = lp_now_ns();

	(void)fd;
	(void)what;
	for (size_t i = 0; i < g->tr->n; i++) {
		struct lp_target *t = g->tr->v[i];
		struct lp_eproc *gp = t->eng;

		if (!gp || t->exited || !gp->precise_on || !gp->window_until_ns)
			continue;
		if (now + 1000000 >= gp->window_until_ns)
			lp_precise_set(g, t, false, 0);
		else if (!gp->window_end || !evtimer_pending(gp->window_end, NULL))
			window_end_arm(g, t);
	}
}

/* (Re)arms the end of the open window at window_until_ns. */
static void window_end_arm(struct lp_engines *g, struct lp_target *t)
{
	struct lp_eproc *gp = t->eng;
	uint64_t now = lp_now_ns(), left;
	struct timeval tv;

	window_end_free(gp);
	if (!g->base || !gp->precise_on || !gp->window_until_ns)
		return;
	left = gp->window_until_ns > now ? gp->window_until_ns - now : 0;
	tv.tv_sec = (time_t)(left / 1000000000ULL);
	tv.tv_usec = (suseconds_t)(left % 1000000000ULL / 1000);
	gp->window_end = evtimer_new(g->base, on_window_end, g);
	if (gp->window_end && evtimer_add(gp->window_end, &tv) < 0)
		window_end_free(gp);
}

/* Tells the kernel side how many processes are in a precise window or about to be: while
 * any is, the scheduler's program takes every off-CPU stretch in full (its probes count
 * the off-CPU time inside each call), not a sample of a busy thread's. */
static void precise_count(struct lp_engines *g)
{
	__u32 n = 0;

	for (size_t i = 0; i < g->tr->n; i++) {
		const struct lp_target *t = g->tr->v[i];

		n += !t->exited && t->eng && (t->eng->precise_on || t->eng->precise_attaching);
	}
	if (g->core && g->core->skel && g->core->skel->bss)
		g->core->skel->bss->precise_procs = n;
}

/* On the loop, when a window's probes are on: the window opens now, for what was asked. */
static void attached(void *ctx, uint64_t cookie, struct lp_probes *probes, int err, uint64_t ns)
{
	struct lp_engines *g = ctx;
	pid_t pid = (pid_t)(cookie >> 32);
	struct lp_target *t = lp_tracker_find(g->tr, pid);
	struct lp_eproc *gp = t ? t->eng : NULL;
	struct lp_line names = {.len = 0};
	char what[48];
	int r;

	snprintf(what, sizeof(what), "pid %d", (int)pid);
	/* Switched off, or exited, while they went on: they come off again. */
	if (!gp || t->exited || !gp->precise_attaching || gp->attach_seq != (uint32_t)cookie) {
		lp_prober_release(g->prober, probes, NULL);
		return;
	}
	gp->precise_attaching = false;
	gp->attach_ns = ns;
	/* A window's probes come off when it closes, before the next attach: none held. */
	gp->probes = *probes;
	memset(probes, 0, sizeof(*probes));
	r = err ? err : window_mark(g, t);
	if (r < 0) {
		lp_prober_release(g->prober, &gp->probes, NULL);
		gp->nprobed = gp->nops_probed = 0;
		gp->precise_error = r;
		log_warning_errno(r, "pid %d: attach precise-mode probes: %m", (int)pid);
		return;
	}
	gp->precise_on = true;
	gp->window_until_ns =
		gp->attach_seconds > 0 ? lp_now_ns() + (uint64_t)(gp->attach_seconds * 1e9) : 0;
	window_end_arm(g, t);
	for (size_t i = 0; i < gp->nobjs; i++)
		if (lp_obj_has(gp->objs[i], LP_SYM_MATMUL) ||
		    lp_obj_has(gp->objs[i], LP_SYM_BARRIER))
			lp_line_add(&names, "%s%s", names.len ? ", " : "", gp->objs[i]->path);
	log_info("pid %d: precise probes on %zu matmul and barrier functions in %s and %zu op "
		 "functions (%zu probes, %zu links) in %.1f ms",
		 (int)pid, gp->nprobed, names.buf, gp->nops_probed, gp->probes.n,
		 gp->probes.nlinks + gp->probes.nfds, (double)ns / 1e6);
	log_info("pid %d: precise mode on", (int)pid);
}

/* Hands the window's probes to the prober; the window opens when they are all on. */
static int start_attach(struct lp_engines *g, struct lp_target *t, double seconds)
{
	struct lp_eproc *gp = t->eng;
	struct specs sp = {0};
	int r;

	gp->probed_gen = gp->objs_gen;
	r = window_specs(g, t, &sp);
	if (r < 0) {
		lp_probe_specs_free(sp.v, sp.n);
		gp->nprobed = gp->nops_probed = 0;
		gp->precise_error = r;
		return log_warning_errno(r, "pid %d: attach precise-mode probes: %m", (int)t->pid);
	}
	gp->precise_attaching = true;
	gp->attach_seconds = seconds;
	gp->precise_error = 0;
	precise_count(g);
	r = lp_prober_attach(g->prober, sp.v, sp.n, attached, g,
			     cookie_of(t->pid, ++gp->attach_seq));
	if (r < 0)
		gp->precise_attaching = false;
	/* Without a prober, attached() has run: its error is the caller's. */
	return r < 0 ? r : gp->precise_on || gp->precise_attaching ? 0 : gp->precise_error;
}

static void window_close(struct lp_engines *g, struct lp_target *t, const struct lp_proc_stats *st)
{
	struct lp_eproc *gp = t->eng;
	__u32 key = (__u32)t->pid;
	uint64_t oncpu;
	char what[48];

	if (!gp->precise_on)
		return;
	/* The window ends here, for the counters: the probes count nothing once the process's
	 * entry is gone, and come off on the prober's time. */
	bpf_map_delete_elem(bpf_map__fd(g->core->skel->maps.precise), &key);
	snprintf(what, sizeof(what), "pid %d", (int)t->pid);
	lp_prober_release(g->prober, &gp->probes, what);
	gp->nprobed = gp->nops_probed = 0;
	gp->windows++;
	gp->window_ns += lp_now_ns() - gp->window_start_ns;
	if (t->exited && st) {
		gp->window_oncpu_ns += st->ctr[LP_C_ONCPU_NS] - gp->bpf_oncpu_start_ns;
	} else {
		oncpu = proc_oncpu_ns(t->pid);
		if (oncpu > gp->oncpu_start_ns)
			gp->window_oncpu_ns += oncpu - gp->oncpu_start_ns;
	}
	if (st) {
		struct lp_op_samples *os = lp_eproc_op_samples(g->core, t->eng, t->pid);

		ctr_since_start(gp, st, gp->window_ctr);
		ops_since_start(gp, os, gp->window_op, &gp->window_op_total);
		free(os);
	}
	gp->precise_on = false;
	gp->window_until_ns = 0;
	window_end_free(gp);
	log_info("pid %d: precise mode off", (int)t->pid);
	precise_count(g);
}

/* Closes the open window (st: the counters now, or NULL when they cannot be read). */
static void window_close_now(struct lp_engines *g, struct lp_target *t)
{
	struct lp_proc_stats *st = malloc(sizeof(*st));

	window_close(g, t, st && read_stats(g, t->pid, st) == 0 ? st : NULL);
	free(st);
}

/* Tokens generated inside precise windows so far, the open one included. */
static void precise_attach(struct lp_engines *g, struct lp_target *t)
{
	struct lp_eproc *gp = t->eng;
	uint64_t now = lp_now_ns();
	bool timed;
	double left;

	if (!gp->precise_on || gp->probed_gen == gp->objs_gen)
		return;
	/* The mappings changed under an open window (a dlopen): that window ends, and one with
	 * probes on everything now mapped opens for what was left of it. */
	timed = gp->window_until_ns != 0;
	left = timed && gp->window_until_ns > now ? (double)(gp->window_until_ns - now) / 1e9 : 0;
	window_close_now(g, t);
	if (!timed || left > 0)
		start_attach(g, t, left);
}

int lp_precise_set(struct lp_engines *g, struct lp_target *t, bool on, double seconds)
{
	struct lp_eproc *gp = t ? t->eng : NULL;

	if (!t || t->exited || !gp || !gp->found_ns)
		return -ESRCH;
	if (!on) {
		if (gp->precise_attaching) {
			gp->precise_attaching = false;
			gp->attach_seq++;
			log_info("pid %d: precise mode off before its probes were on", (int)t->pid);
		}
		window_close_now(g, t);
		return 0;
	}
	if (gp->precise_on) {
		gp->window_until_ns = seconds > 0 ? lp_now_ns() + (uint64_t)(seconds * 1e9) : 0;
		window_end_arm(g, t);
		return 0;
	}
	if (gp->precise_attaching) {
		gp->attach_seconds = seconds;
		return 0;
	}
	return start_attach(g, t, seconds);
}

/* The duty cycle, phased from when the process was found. */
static void precise_duty(struct lp_engines *g, struct lp_target *t, uint64_t now)
{
	double duty = g->cfg->precise_duty, period = g->cfg->precise_period;
	struct lp_eproc *gp = t->eng;
	bool want;

	if (duty <= 0)
		return;
	want = duty >= 1 ||
	       (double)((now - gp->found_ns) % (uint64_t)(period * 1e9)) < duty * period * 1e9;
	if (want != gp->precise_on && !(want && gp->precise_error))
		lp_precise_set(g, t, want, 0);
}

void lp_precise_tick(struct lp_engines *g)
{
	uint64_t now = lp_now_ns();

	for (size_t i = 0; i < g->tr->n; i++) {
		struct lp_target *t = g->tr->v[i];
		struct lp_eproc *gp = t->eng;

		if (t->exited || !gp || !gp->found_ns)
			continue;
		if (gp->precise_on)
			lp_nodes_check(g->core, t, false);
		if (gp->precise_on && gp->window_until_ns) {
			if (now >= gp->window_until_ns)
				lp_precise_set(g, t, false, 0);
			continue;
		}
		precise_duty(g, t, now);
	}
	precise_count(g);
}

bool lp_precise_decide(struct lp_engines *g)
{
	bool pending = false;

	for (size_t i = 0; i < g->tr->n; i++) {
		struct lp_target *t = g->tr->v[i];
		struct lp_eproc *gp = t->eng;

		if (t->exited || !gp || !gp->precise_on || !g->cfg->precise_tensors ||
		    gp->tensors.chosen >= 0 || gp->tensors.refused)
			continue;
		lp_nodes_check(g->core, t, true);
		pending |= gp->tensors.chosen < 0 && !gp->tensors.refused;
	}
	return pending;
}

void lp_precise_totals(const struct lp_target *t, const struct lp_proc_stats *now,
		       const struct lp_op_samples *ops_now, struct lp_precise_totals *out)
{
	const struct lp_eproc *gp = t->eng;

	memset(out, 0, sizeof(*out));
	if (!gp)
		return;
	out->windows = gp->windows;
	out->ns = gp->window_ns;
	out->oncpu_ns = gp->window_oncpu_ns;
	memcpy(out->ctr, gp->window_ctr, sizeof(out->ctr));
	memcpy(out->op_samples, gp->window_op, sizeof(out->op_samples));
	out->op_total = gp->window_op_total;
	if (!gp->precise_on)
		return;
	ops_since_start(gp, ops_now, out->op_samples, &out->op_total);
	out->windows++;
	out->ns += lp_now_ns() - gp->window_start_ns;
	uint64_t oncpu = proc_oncpu_ns(t->pid);
	if (oncpu >= gp->oncpu_start_ns)
		out->oncpu_ns += oncpu - gp->oncpu_start_ns;
	ctr_since_start(gp, now, out->ctr);
}

struct lp_op_precise *lp_precise_ops(const struct lp_core *c, const struct lp_target *t)
{
	const struct lp_eproc *gp = t->eng;
	int fd = bpf_map__fd(c->skel->maps.op_precise);
	struct lp_op_precise *v;
	bool any = false;

	if (!gp || !gp->ops.n)
		return NULL;
	v = calloc(gp->ops.n, sizeof(*v));
	if (!v)
		return NULL;
	if (gp->final_op_precise) {
		memcpy(v, gp->final_op_precise, gp->ops.n * sizeof(*v));
		return v;
	}
	for (size_t i = 0; i < gp->ops.n && i < LP_MAX_OPS; i++) {
		struct lp_op_key key = {.tgid = (__u32)t->pid, .op = (__u32)i};

		if (gp->op_probed[i] && bpf_map_lookup_elem(fd, &key, &v[i]) == 0)
			any = true;
	}
	if (!any) {
		free(v);
		return NULL;
	}
	return v;
}

/* Deletes the process's op_precise entries, after copying them to keep if asked. */
static void take_op_precise(struct lp_engines *g, struct lp_target *t, bool keep)
{
	struct lp_eproc *gp = t->eng;
	int fd = bpf_map__fd(g->core->skel->maps.op_precise);

	if (keep && !gp->final_op_precise)
		gp->final_op_precise = lp_precise_ops(g->core, t);
	for (size_t i = 0; i < gp->ops.n && i < LP_MAX_OPS; i++) {
		struct lp_op_key key = {.tgid = (__u32)t->pid, .op = (__u32)i};

		if (gp->op_probed[i])
			bpf_map_delete_elem(fd, &key);
	}
}

static void precise_on_exit(struct lp_engines *g, struct lp_target *t)
{
	__u32 key = (__u32)t->pid;

	if (t->eng) {
		if (t->eng->precise_attaching) {
			t->eng->precise_attaching = false;
			t->eng->attach_seq++;
		}
		if (t->eng->precise_on)
			window_close(g, t, t->final);
		lp_prober_release(g->prober, &t->eng->probes, NULL);
		take_op_precise(g, t, true);
		lp_nodes_take(g->core, t, true);
	}
	/* The exit hook deletes it; an exit it missed (lp_tracker_find_missed_exits) leaves it. */
	bpf_map_delete_elem(bpf_map__fd(g->core->skel->maps.precise), &key);
	precise_count(g);
}

void lp_precise_stop(struct lp_engines *g)
{
	for (size_t i = 0; i < g->tr->n; i++)
		if (g->tr->v[i]->eng)
			window_end_free(g->tr->v[i]->eng);
	g->base = NULL;
	g->prober = NULL;
}

static void precise_reset(struct lp_engines *g, struct lp_target *t)
{
	struct lp_eproc *gp = t->eng;

	gp->windows = gp->window_ns = gp->window_oncpu_ns = 0;
	memset(gp->window_ctr, 0, sizeof(gp->window_ctr));
	memset(gp->window_op, 0, sizeof(gp->window_op));
	gp->window_op_total = 0;
	if (gp->final_op_precise)
		memset(gp->final_op_precise, 0, gp->ops.n * sizeof(*gp->final_op_precise));
	else
		take_op_precise(g, t, false);
	if (gp->final_nodes)
		gp->nfinal_nodes = 0;
	else
		lp_nodes_take(g->core, t, false);
	/* An open window starts again from the zeroed counters. */
	if (gp->precise_on && !t->exited && window_mark(g, t) < 0)
		window_close(g, t, NULL);
}

void lp_precise_hook(struct lp_engines *g)
{
	g->hooks = (struct lp_engine_hooks){
		.found = precise_duty,
		.mapped = precise_attach,
		.exited = precise_on_exit,
		.reset = precise_reset,
	};
}
