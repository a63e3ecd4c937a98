// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* What every engine shares: object files and their functions (read off the event loop),
 * which processes run an engine (by the engine table), their sampling tables and unwind
 * rows, the engines' step probes. Precise mode is precise.c. */
#include "engine/engine.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <dirent.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include "core.skel.h"
#include "base/log.h"
#include "escape.h"
#include "base/procfs.h"
#include "kernel/mapwalk.h"
#include "kernel/uprobe.h"
#include "engine/requests.h"
#include "tracked/hot.h"

#define MAX_OBJS 4096
#define PENDING_TRIES 10

static const char *const class_names[LP_SYM_NR] = {
	"matmul", "barrier", "decode", "op", "forward", "aten", "fork", "blas", "python"};

const struct lp_engine *const lp_engines_table[LP_ENGINE_NR] = {
	[LP_ENGINE_GGML] = &lp_engine_ggml,
	[LP_ENGINE_TORCH] = &lp_engine_torch,
};

/* The patterns of every symbol class: the settings' (ggml's), then the engines' own. */
static void class_lists(const struct lp_config *cfg, const char *const *lists[LP_SYM_NR])
{
	for (int c = 0; c < LP_SYM_NR; c++) {
		lists[c] = c < LP_SYM_CONFIG_NR ? cfg->symbols[c]
			   : c == LP_SYM_PYTHON ? lp_python_patterns
						: NULL;
		for (unsigned e = 0; e < LP_ENGINE_NR && !lists[c]; e++)
			lists[c] = lp_engines_table[e]->patterns[c];
	}
}

static int sync_proc(struct lp_engines *g, pid_t pid, const struct lp_obj_key *want, bool *saw_key);

struct rows_back {
	struct lp_unwind *u;
	uint32_t slot, n;
};

static void rows_back_work(void *ctx)
{
	struct rows_back *b = ctx;

	lp_unwind_release(b->u, b->slot, b->n);
}

/* Gives an object's rows back, off the loop: taking an array out of the array of maps
 * waits for an RCU grace period. Its slot is free again once that is done. */
static void rows_give_back(struct lp_engines *g, uint32_t slot, uint32_t n)
{
	struct rows_back *b;

	if (!n)
		return;
	if (!(b = malloc(sizeof(*b)))) {
		lp_unwind_release(&g->unwind, slot, n);
		return;
	}
	*b = (struct rows_back){&g->unwind, slot, n};
	lp_prober_call(g->prober, "give unwind rows back", true, rows_back_work, NULL, free, b);
}

static void obj_names_free(struct lp_obj *o)
{
	for (size_t i = 0; i < o->nop_names; i++)
		free(o->op_names[i]);
	free(o->op_names);
	free(o->op_groups);
	free(o->sym_op);
	o->op_names = NULL;
	o->op_groups = NULL;
	o->sym_op = NULL;
	o->nop_names = 0;
}

static void obj_free(struct lp_engines *g, struct lp_obj *o)
{
	if (!o)
		return;
	rows_give_back(g, o->uw_slot, o->uw_n);
	rows_give_back(g, o->opfn_slot, o->opfn_n);
	lp_prober_release(g->prober, &o->step, NULL);
	lp_elf_result_free(&o->syms);
	obj_names_free(o);
	free(o->waiters.v);
	free(o->path);
	free(o);
}

/* pid waits in w (once). */
static void pids_add(struct lp_pids *w, pid_t pid)
{
	pid_t *v;

	for (size_t i = 0; i < w->n; i++)
		if (w->v[i] == pid)
			return;
	if (!(v = realloc(w->v, (w->n + 1) * sizeof(*v))))
		return; /* found again at its next mapping, or the sweep's check */
	w->v = v;
	v[w->n++] = pid;
}

/* pid is brought up to date once o's read is done. */
static void obj_wait(struct lp_obj *o, pid_t pid)
{
	pids_add(&o->waiters, pid);
}

static void late_sync(struct lp_engines *g, pid_t pid);

/* A process that waited for the kernel brought up to date: one gone meanwhile, untracked,
 * that mapped ggml (known holds matmul) is counted, as one gone before its mappings were
 * read is (lost.exited_before_tracking). */
static void wake_one(struct lp_engines *g, pid_t pid, bool known_llm)
{
	struct lp_target *t = lp_tracker_find(g->tr, pid);

	/* Known gone: from what it mapped (sync_proc would not read it, nor, outside
	 * --discover-cgroup's group, say it failed). */
	if (t && t->exited) {
		late_sync(g, pid);
		return;
	}
	if (sync_proc(g, pid, NULL, NULL) >= 0)
		return;
	if (lp_tracker_find(g->tr, pid))
		late_sync(g, pid);
	else if (known_llm)
		g->tr->exited_untracked++;
}

/* The processes that waited in w, brought up to date (w emptied first: they may wait
 * again). known_llm: what they waited for holds matmul. */
static void pids_wake(struct lp_engines *g, struct lp_pids *w, bool known_llm)
{
	struct lp_pids v = *w;

	*w = (struct lp_pids){NULL, 0};
	for (size_t i = 0; i < v.n; i++)
		wake_one(g, v.v[i], known_llm);
	free(v.v);
}

static void obj_wake(struct lp_engines *g, struct lp_obj *o)
{
	pids_wake(g, &o->waiters, lp_obj_has(o, LP_SYM_MATMUL));
}

void lp_eproc_free(struct lp_eproc *gp)
{
	if (!gp)
		return;
	lp_probes_free(&gp->probes);
	lp_probes_free(&gp->region);
	lp_sampler_stop(&gp->sampler);
	lp_op_table_free(&gp->ops);
	free(gp->final_ops);
	lp_python_free(&gp->py);
	free(gp->final_op_precise);
	free(gp->final_nodes);
	free(gp->precise_ops_missing);
	free(gp->objs);
	free(gp);
}

void lp_engines_init(struct lp_engines *g, const struct lp_config *cfg, struct lp_core *core,
		     struct lp_tracker *tr)
{
	memset(g, 0, sizeof(*g));
	g->cfg = cfg;
	g->core = core;
	g->tr = tr;
	bool on = cfg->unwind && cfg->stack_scan;

	lp_unwind_init(&g->unwind, on ? bpf_map__fd(core->skel->maps.unwind_rows) : -1,
		       on ? bpf_map__fd(core->skel->maps.unwind_gen) : -1);
}

void lp_engines_free(struct lp_engines *g)
{
	for (size_t i = 0; i < g->nobjs; i++)
		obj_free(g, g->objs[i]);
	free(g->objs);
	free(g->pending);
	free(g->futex_waiters.v);
	for (size_t i = 0; i < g->nstash; i++)
		free(g->stash[i].maps);
	free(g->stash);
	lp_unwind_free(&g->unwind);
	memset(g, 0, sizeof(*g));
}

/* GCC's OpenMP runtime (libgomp): its region entry, and not LLVM's (libomp and Intel's
 * libiomp5 export GOMP_parallel too, beside their own __kmpc_fork_call). */
static bool obj_is_gomp(const struct lp_obj *o)
{
	bool gomp = false;

	for (size_t i = 0; i < o->syms.nsyms; i++) {
		if (!strcmp(o->syms.syms[i].name, "__kmpc_fork_call"))
			return false;
		gomp |= !strcmp(o->syms.syms[i].name, "GOMP_parallel");
	}
	return gomp;
}

static bool obj_is_omp_runtime(const struct lp_obj *o)
{
	if (lp_obj_has(o, LP_SYM_MATMUL))
		return false;
	for (size_t i = 0; i < o->syms.nsyms; i++)
		if (o->syms.syms[i].cls == LP_SYM_BARRIER &&
		    (!strncmp(o->syms.syms[i].name, "GOMP_", 5) ||
		     !strncmp(o->syms.syms[i].name, "__kmpc_", 7)))
			return true;
	return false;
}

/* What an object is: the strongest of the engines' verdicts (the engine's it is, in
 * o->engine), else a helper where it has symbols of interest (a barrier, a runtime). */
static uint32_t obj_verdict(struct lp_obj *o)
{
	uint32_t best = LP_OBJ_NONE;

	for (unsigned e = 0; e < LP_ENGINE_NR; e++) {
		uint32_t v = lp_engines_table[e]->verdict(o);

		if (v > best) {
			best = v;
			o->engine = (uint8_t)e;
		}
	}
	if (best == LP_OBJ_NONE && o->syms.nsyms)
		return LP_OBJ_HELPER;
	return best;
}

/* Tells the kernel side what this file holds, so that mapping it again is not reported. */
static void obj_publish(struct lp_engines *g, const struct lp_obj *o)
{
	struct lp_obj_key key = {.dev = o->dev, .ino = o->ino};
	struct lp_obj_val val = {.mtime_ns = o->mtime_ns, .verdict = o->verdict};

	bpf_map_update_elem(bpf_map__fd(g->core->skel->maps.objs), &key, &val, BPF_ANY);
}

/* Whether the process's sampling table walks frames through o. */
static bool proc_walks(const struct lp_eproc *gp, const struct lp_obj *o)
{
	for (size_t j = 0; j < LP_MAX_UNWIND; j++)
		if (gp->uw_objs[j] == o)
			return true;
	return false;
}

/* Whether a process, running or exited, walks frames through o (its report names it). */
static bool obj_walked(const struct lp_engines *g, const struct lp_obj *o)
{
	for (size_t k = 0; k < g->tr->n; k++)
		if (g->tr->v[k]->eng && proc_walks(g->tr->v[k]->eng, o))
			return true;
	return false;
}

/* Forgets files without symbols when the cache is full; those are cheap to read again. */
static void objs_trim(struct lp_engines *g)
{
	size_t k = 0;

	if (g->nobjs < MAX_OBJS)
		return;
	for (size_t i = 0; i < g->nobjs; i++) {
		if (g->objs[i]->verdict == LP_OBJ_NONE && !g->objs[i]->step.n &&
		    !g->objs[i]->uw_n && !g->objs[i]->busy && !obj_walked(g, g->objs[i]))
			obj_free(g, g->objs[i]);
		else
			g->objs[k++] = g->objs[i];
	}
	g->nobjs = k;
}

/* Opens the file behind a mapping: through map_files (right even when the file was
 * replaced or lives in another mount namespace), else through the process's root. */
static struct lp_obj *obj_find(struct lp_engines *g, uint64_t dev, uint64_t ino)
{
	for (size_t i = 0; i < g->nobjs; i++)
		if (g->objs[i]->dev == dev && g->objs[i]->ino == ino && !g->objs[i]->stale)
			return g->objs[i];
	return NULL;
}

#define LOG_NAMED 3

static void log_obj(const struct lp_obj *o)
{
	size_t nops = lp_obj_op_functions(o);
	struct lp_line l = {.len = 0};

	/* Op functions are many (150 in llama.cpp's static build): counted, not named; of the
	 * others the first LOG_NAMED of a class are named (the repack buffer types' matmuls
	 * are a dozen templates of 120 characters each), the rest counted. */
	for (int c = 0; c < LP_SYM_NR; c++) {
		size_t n = 0;

		for (size_t i = 0; i < o->syms.nsyms && c != LP_SYM_OP; i++) {
			const struct lp_elf_sym *sym = &o->syms.syms[i];

			if (sym->cls != c || n++ >= LOG_NAMED)
				continue;
			if (n == 1)
				lp_line_add(&l, "%s%s ", l.len ? "; " : "", class_names[c]);
			lp_line_add(&l, "%s%s", n == 1 ? "" : ", ", sym->name);
			if (sym->entry_skip)
				lp_line_add(&l, " (probe at +%u, a %s)", sym->entry_skip,
					    lp_x86_site_names[sym->site]);
		}
		if (n > LOG_NAMED)
			lp_line_add(&l, " and %zu more", n - LOG_NAMED);
	}
	if (nops)
		lp_line_add(&l, "%s%zu op functions", l.len ? "; " : "", nops);
	if (o->uw_n)
		lp_line_add(&l, "; callers found by walking frames by .eh_frame (%u rows)",
			    o->uw_n);
	else if (lp_obj_unwinds(o))
		lp_line_add(&l, "; callers found by %s", lp_obj_unwind(o));
	log_info("%s: %s%s%s%s", o->path, l.buf,
		 o->syms.has_symtab ? "" : " (no .symtab: stripped)",
		 o->omp_runtime ? "; an OpenMP runtime: all of its code counts as barrier" : "",
		 lp_obj_has(o, LP_SYM_MATMUL) && !nops
			 ? "; no op functions in its symbols: its ops are unknown, their time "
			   "counts as outside ops"
			 : "");
}

/* The call frame rows of an object into an array of their own: at once for an object
 * whose code holds ops (where samples are unwound from); for any other (plain: the C and
 * C++ runtimes, an OpenMP runtime, libllama: what a sample's walk crosses on its way to an
 * op or barrier, and a profile's stacks to their thread's start) when a tracked process
 * maps it. */
static void obj_load_unwind(struct lp_engines *g, struct lp_obj *o, int fd, bool plain)
{
	o->uw_error = -EOPNOTSUPP;
	if (g->unwind.outer_fd < 0 || (!plain && !lp_obj_unwinds(o)))
		return;
	o->uw_tried = true;
	o->uw_error = lp_unwind_load(&g->unwind, fd, &o->uw_slot, &o->uw_n, o->uw_lost);
	o->uw_rows_read = o->uw_n;
	if ((o->uw_error == -ENOSPC || o->uw_error == -EFBIG) && plain)
		log_warning("%s: %s: samples whose frames pass through it are placed by "
			    "scanning the stack, which can take a stale return address for a "
			    "live frame",
			    o->path, lp_obj_unwind(o));
	else if (o->uw_error == -ENOSPC || o->uw_error == -EFBIG)
		log_warning("%s: %s: its ops are found by scanning the stack, which can take a "
			    "stale return address for a live frame",
			    o->path, lp_obj_unwind(o));
	else if (o->uw_error && o->uw_error != -ENOENT && o->uw_error != -ENOEXEC)
		log_warning_errno(o->uw_error,
				  "%s: cannot read its .eh_frame (%m): its ops are "
				  "found by scanning the stack",
				  o->path);
	else if (plain && o->uw_n)
		log_info("%s: %u rows of its .eh_frame, for walks through it", o->path, o->uw_n);
}

/* Gives back the rows of every object that no running process has mapped or walked through
 * for LP_ROWS_LINGER_NS: a daemon that runs for weeks sees engines come and go, and the rows
 * (and the 256 slots) belong to what runs now. An object mapped again has its rows read
 * again then. The linger spares engines started one after another (a pool, a CI runner, a
 * fixture run 2,000 times) an RCU grace period each way for every object they map. */
static void unwind_gc(struct lp_engines *g, const struct lp_target *gone, uint64_t now)
{
	/* A process waiting for reads uses rows its sampling table does not name yet. */
	if (g->reads_busy)
		return;
	for (size_t i = 0; i < g->nobjs; i++) {
		struct lp_obj *o = g->objs[i];
		bool used = false;

		if (!o->uw_n || o->busy)
			continue;
		for (size_t k = 0; k < g->tr->n && !used; k++) {
			const struct lp_target *t = g->tr->v[k];

			if (t == gone || t->exited || !t->eng)
				continue;
			for (size_t j = 0; j < t->eng->nobjs; j++)
				used |= t->eng->objs[j] == o;
			used |= proc_walks(t->eng, o);
		}
		if (used || !o->uw_idle_since_ns) {
			o->uw_idle_since_ns = used ? 0 : now;
			continue;
		}
		if (now - o->uw_idle_since_ns >= LP_ROWS_LINGER_NS) {
			o->uw_idle_since_ns = 0;
			rows_give_back(g, o->uw_slot, o->uw_n);
			o->uw_n = 0;
			o->uw_tried = false;
			o->uw_error = o->stale ? -ESTALE : -ENODATA;
		}
	}
}

static void attach_step(struct lp_engines *g, pid_t pid, struct lp_obj *o);

/* Whether the ELF file at fd imports an OpenMP runtime's entry points (GCC's or LLVM's),
 * by the names its dynamic symbols need: an OpenBLAS built with OpenMP, whose threads are
 * then the runtime's. */
static bool obj_imports_omp(int fd)
{
	static const char *const names[] = {"GOMP_parallel", "__kmpc_fork_call",
					    "omp_get_num_threads"};
	size_t size = 0;
	char *str = NULL;
	bool found = false;

	if (lp_elf_section(fd, ".dynstr", 16u << 20, &str, &size) < 0)
		return false;
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]) && !found; i++)
		found = memmem(str, size, names[i], strlen(names[i]) + 1) != NULL;
	free(str);
	return found;
}

/* The object's op functions' table, where its engine names ops by their entry points: its
 * rows into a slot of unwind_rows, where the walk finds a frame's op (where.bpf.h). Kept
 * while the object is: one per libtorch build on the host. */
static void obj_load_op_functions(struct lp_engines *g, struct lp_obj *o, int fd)
{
	const struct lp_engine *e = lp_engine_of(o->engine);
	struct lp_opfn_row *rows = NULL;
	size_t n = 0;

	if (!e->op_functions || o->verdict == LP_OBJ_NONE)
		return;
	o->opfn_error = e->op_functions(fd, o, &rows, &n);
	if (!o->opfn_error)
		o->opfn_error = lp_unwind_load_rows(&g->unwind, rows, n, &o->opfn_slot);
	if (!o->opfn_error)
		o->opfn_n = (uint32_t)n;
	else if (o->opfn_error != -ENOENT)
		log_warning_errno(o->opfn_error,
				  "%s: its op functions' table could not be made (%m): its "
				  "processes' samples count as outside ops",
				  o->path);
	free(rows);
}

/* What reading an object does, off the loop (prober.h): its symbols and what they make it
 * (an ELF file of hundreds of megabytes: libtorch_cpu.so), the rows of its .eh_frame (each
 * array put in the array of maps waits for an RCU grace period), its llama_decode probes
 * (uprobes). The results go to a scratch object, moved into the real one on the loop. */
struct obj_job {
	struct lp_engines *g;
	struct lp_obj *o;		/* busy until the job is done */
	struct lp_obj r;		/* what the job found; its path is o's */
	int fd;				/* the mapping's file, or -1 (probes only) */
	pid_t pid;			/* whose mapping: the probes' path */
	bool syms, rows, plain, decode; /* decode: the step probes */
};

static void obj_job_work(void *ctx)
{
	struct obj_job *j = ctx;
	struct lp_obj *r = &j->r;
	const char *const *lists[LP_SYM_NR];
	/* --no-fast-entry: no sites are looked for, every probe goes on the first
	 * instruction. */
	const struct lp_elf_patterns pat = {.lists = lists,
					    .nclasses = LP_SYM_NR,
					    .probe_sites = j->g->cfg->fast_entry,
					    .data_classes = 1ULL << LP_SYM_PYTHON};

	class_lists(j->g->cfg, lists);
	if (j->syms) {
		r->read_error = lp_elf_find(j->fd, &pat, &r->syms);
		r->verdict = r->read_error ? LP_OBJ_NONE : obj_verdict(r);
		r->omp_runtime = !r->read_error && obj_is_omp_runtime(r);
		if (r->omp_runtime && obj_is_gomp(r) &&
		    lp_elf_tls_block_slot(j->fd, &r->omp_team_got) < 0)
			r->omp_team_got = 0;
		if (!r->read_error)
			obj_load_op_functions(j->g, r, j->fd);
		if (!r->read_error && lp_obj_has(r, LP_SYM_BLAS))
			r->imports_omp = obj_imports_omp(j->fd);
	}
	if (j->rows)
		obj_load_unwind(j->g, r, j->fd, j->plain);
	if (j->decode)
		attach_step(j->g, j->pid, r);
}

static void obj_job_free(struct obj_job *j)
{
	if (j->fd >= 0)
		close(j->fd);
	j->g->reads_busy--;
	free(j);
}

/* The prober stopped before the loop took the results: what they hold goes back. */
static void obj_job_drop(void *ctx)
{
	struct obj_job *j = ctx;

	if (j->syms) { /* else o's, lent */
		lp_elf_result_free(&j->r.syms);
		obj_names_free(&j->r);
		lp_unwind_release(&j->g->unwind, j->r.opfn_slot, j->r.opfn_n);
	}
	if (j->rows)
		lp_unwind_release(&j->g->unwind, j->r.uw_slot, j->r.uw_n);
	lp_probes_free(&j->r.step);
	obj_job_free(j);
}

static void obj_job_fin(void *ctx)
{
	struct obj_job *j = ctx;
	struct lp_engines *g = j->g;
	struct lp_obj *o = j->o, *r = &j->r;
	bool syms;

	if (j->syms) {
		o->read_error = r->read_error;
		o->syms = r->syms;
		o->verdict = r->verdict;
		o->engine = r->engine;
		o->omp_runtime = r->omp_runtime;
		o->op_names = r->op_names;
		o->op_groups = r->op_groups;
		o->sym_op = r->sym_op;
		o->nop_names = r->nop_names;
		o->opfn_slot = r->opfn_slot;
		o->opfn_n = r->opfn_n;
		o->opfn_error = r->opfn_error;
		o->imports_omp = r->imports_omp;
		o->omp_team_got = r->omp_team_got;
	}
	if (j->rows) {
		o->uw_error = r->uw_error;
		o->uw_tried = r->uw_tried;
		o->uw_slot = r->uw_slot;
		o->uw_n = r->uw_n;
		o->uw_rows_read = r->uw_rows_read;
		memcpy(o->uw_lost, r->uw_lost, sizeof(o->uw_lost));
	}
	if (j->decode) {
		o->step = r->step;
		o->step_tried = r->step_tried;
		o->step_error = r->step_error;
		o->step_pid = j->pid;
	}
	o->busy = false;
	o->reading = false;
	syms = j->syms;
	obj_job_free(j);
	if (syms) {
		obj_publish(g, o);
		if (o->read_error && o->read_error != -ENOEXEC)
			log_warning_errno(o->read_error, "read symbols of %s: %m", o->path);
		if (o->verdict != LP_OBJ_NONE)
			log_obj(o);
	}
	obj_wake(g, o);
}

/* Starts a job on o (busy until it is done; at once without a running prober), taking fd
 * over. pid waits for it. */
static void obj_job_start(struct lp_engines *g, struct lp_obj *o, pid_t pid, int fd, bool syms,
			  bool rows, bool decode)
{
	struct obj_job *j = calloc(1, sizeof(*j));
	char what[64], name[48]; /* "unwind rows of " and name fit what */
	const char *base;

	if (!j) {
		if (fd >= 0)
			close(fd);
		return;
	}
	*j = (struct obj_job){.g = g,
			      .o = o,
			      .fd = fd,
			      .pid = pid,
			      .syms = syms,
			      .rows = rows,
			      .plain = rows && !syms && !lp_obj_unwinds(o),
			      .decode = decode};
	/* The scratch object: o as the job may read it (its name, its file, its symbols
	 * where they are read already). */
	j->r.dev = o->dev;
	j->r.ino = o->ino;
	j->r.path = o->path;
	if (!syms) {
		j->r.syms = o->syms;
		j->r.omp_runtime = o->omp_runtime;
		j->r.verdict = o->verdict;
		j->r.engine = o->engine;
	}
	o->busy = true;
	o->reading = syms;
	g->reads_busy++;
	/* Without a running prober it is done before the call returns. */
	if (lp_prober_async(g->prober))
		obj_wait(o, pid);
	base = strrchr(o->path, '/') ? strrchr(o->path, '/') + 1 : o->path;
	/* Another user's file name: escaped, as every name an answer holds. */
	lp_escape(name, sizeof(name), base, strlen(base));
	snprintf(what, sizeof(what), "%s %s",
		 syms	? "read"
		 : rows ? "unwind rows of"
			: "probe",
		 name);
	lp_prober_call(g->prober, what, false, obj_job_work, obj_job_fin, obj_job_drop, j);
}

/* The object behind a mapping, its read started if this (device, inode, mtime) is new:
 * busy until it is done (at once without a running prober). */
static struct lp_obj *obj_get(struct lp_engines *g, pid_t pid, const struct lp_proc_mapping *m)
{
	struct lp_obj *o = obj_find(g, m->dev, m->ino), **v;
	char how[PATH_MAX + 64];
	uint64_t mtime;
	int fd;

	if (o && o->busy)
		return o; /* on its way */
	fd = lp_proc_reopen_mapping(pid, m, o ? o->mtime_ns : 0, &mtime, how, sizeof(how));
	if (fd < 0)
		return o; /* the same file, gone, or not ours to read: keep what we knew */
	if (o) {
		/* Rewritten in place: read it again; probes on the old one stay until unused. */
		log_info("%s changed on disk, reading it again", o->path);
		o->stale = true;
	}
	objs_trim(g);
	o = calloc(1, sizeof(*o));
	v = realloc(g->objs, (g->nobjs + 1) * sizeof(*v));
	if (!o || !v || !(o->path = strdup(m->path))) {
		free(o);
		if (v)
			g->objs = v;
		close(fd);
		return NULL;
	}
	g->objs = v;
	o->dev = m->dev;
	o->ino = m->ino;
	o->mtime_ns = mtime;
	g->objs[g->nobjs++] = o;
	/* Its llama_decode probes in the same job, where it has the symbol: on when the
	 * process is tracked, before its first decode (another round trip came too late for
	 * a short engine's first tokens). */
	obj_job_start(g, o, pid, fd, true, true, true);
	return o;
}

/* "7f..-7f.. r-xp 0001c000 fd:01 1234 /usr/lib/x.so": executable file mappings only. */
struct proc_scan {
	struct scan_entry {
		struct lp_proc_mapping m;
		struct lp_obj *o;
	} * v,		/* executable mappings of objects with symbols */
		*plain; /* ... of the others, read without error */
	size_t n, nplain;
	size_t cap, capplain, capmaps; /* each array's room: grown twofold, as a scan runs
					* once per object read (a torch process maps 200) */
	size_t busy;		       /* mappings of objects whose symbols are still being read */
	bool llm;
	uint8_t engine; /* the engine of the object that made it an LLM process */
	/* a candidate's object (LP_OBJ_CANDIDATE: libtorch) and its engine */
	bool candidate;
	uint8_t cand_engine;
	bool saw_key;
	struct lp_proc_mapping *maps; /* every executable mapping read */
	size_t nmaps;
};

static void proc_scan_free(struct proc_scan *s)
{
	free(s->v);
	free(s->plain);
	free(s->maps);
	memset(s, 0, sizeof(*s));
}

/* One mapping into the scan: its object (read now if new), as read_proc() sorts them. Returns
 * -ENOMEM, else 0. */
static int scan_mapping(struct lp_engines *g, pid_t pid, const struct lp_proc_mapping *m,
			struct proc_scan *s)
{
	struct lp_obj *o = obj_get(g, pid, m);
	struct scan_entry **v = &s->v;
	size_t *n = &s->n, *cap = &s->cap;
	struct scan_entry *nv;

	if (o && o->reading) {
		if (lp_prober_async(g->prober))
			obj_wait(o, pid);
		s->busy++;
		return 0;
	}
	if (!o || o->read_error)
		return 0;
	if (o->verdict == LP_OBJ_NONE) {
		v = &s->plain;
		n = &s->nplain;
		cap = &s->capplain;
	}
	if (*n == *cap) {
		if (!(nv = realloc(*v, (*cap ? 2 * *cap : 16) * sizeof(*nv))))
			return -ENOMEM;
		*v = nv;
		*cap = *cap ? 2 * *cap : 16;
	}
	(*v)[(*n)++] = (struct scan_entry){.m = *m, .o = o};
	if (o->verdict == LP_OBJ_MATMUL && !s->llm)
		s->engine = o->engine;
	if (o->verdict == LP_OBJ_CANDIDATE && !s->candidate) {
		s->candidate = true;
		s->cand_engine = o->engine;
	}
	s->llm |= o->verdict == LP_OBJ_MATMUL;
	return 0;
}

static int read_proc(struct lp_engines *g, pid_t pid, const struct lp_obj_key *want,
		     struct proc_scan *s)
{
	char path[64], line[PATH_MAX + 128];
	struct lp_proc_mapping m, *mv;
	FILE *f;

	memset(s, 0, sizeof(*s));
	snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
	f = fopen(path, "re");
	if (!f)
		return -errno;
	while (fgets(line, sizeof(line), f)) {
		if (lp_proc_parse_maps_line(line, &m) < 0)
			continue;
		if (want && m.dev == want->dev && m.ino == want->ino)
			s->saw_key = true;
		if (scan_mapping(g, pid, &m, s) < 0)
			break;
		/* Kept for a process that may be gone when the objects it waits for are read. */
		if (s->nmaps == s->capmaps) {
			size_t c = s->capmaps ? 2 * s->capmaps : 16;

			if (!(mv = realloc(s->maps, c * sizeof(*mv))))
				continue;
			s->maps = mv;
			s->capmaps = c;
		}
		s->maps[s->nmaps++] = m;
	}
	fclose(f);
	return 0;
}

static void stash_drop(struct lp_engines *g, pid_t pid)
{
	for (size_t i = 0; i < g->nstash; i++)
		if (g->stash[i].pid == pid) {
			free(g->stash[i].maps);
			g->stash[i] = g->stash[--g->nstash];
			return;
		}
}

#define MAX_STASH 64

static void stash_keep(struct lp_engines *g, pid_t pid, struct proc_scan *s)
{
	struct lp_proc_stash *v;

	stash_drop(g, pid);
	if (g->nstash == MAX_STASH) /* the oldest goes: its process was long in waiting */
		stash_drop(g, g->stash[0].pid);
	if (!(v = realloc(g->stash, (g->nstash + 1) * sizeof(*v))))
		return;
	g->stash = v;
	v[g->nstash++] = (struct lp_proc_stash){pid, s->maps, s->nmaps};
	s->maps = NULL;
	s->nmaps = s->capmaps = 0;
}

/* What one symbol is in the sampling table, by its process's engine: its kind and op
 * index, or -1 to leave it out (an op past the op table's room, counted in ops_dropped). */
static int sym_entry(struct lp_eproc *gp, const struct lp_elf_sym *sym, uint8_t *kind)
{
	enum lp_op_group group = LP_G_OTHER;
	char op[LP_OP_NAME_MAX] = "";
	int id;

	if (lp_engine_of(gp->engine)->sym_entry(sym, kind, op, sizeof(op), &group) < 0)
		return -1;
	if (*kind == LP_K_BARRIER || *kind == LP_K_RUNTIME)
		return 0;
	id = lp_op_table_index(&gp->ops, op, group, LP_MAX_OPS);
	if (id == -ENOSPC)
		gp->ops_dropped++;
	return id;
}

struct table_entry {
	struct lp_range r;
	uint8_t kind, op;
};

static int compare_entry(const void *a, const void *b)
{
	const struct table_entry *x = a, *y = b;

	return x->r.start < y->r.start ? -1 : x->r.start > y->r.start;
}

/* A library whose samples a process counts (LP_K_LIBRARY): its index in gp->libs, taken
 * if new; -1 past LP_MAX_LIBS. */
static int lib_index(struct lp_eproc *gp, const struct lp_obj *o)
{
	for (int i = 0; i < LP_MAX_LIBS; i++)
		if (gp->libs[i] == o || !gp->libs[i]) {
			gp->libs[i] = o;
			return i;
		}
	return -1;
}

/* Collects the entries of one mapping: an OpenMP runtime's whole text, a BLAS's (torch:
 * where its GEMMs run, by its samples), else its op, kernel and barrier functions. Returns
 * the new count. */
static size_t collect(struct lp_eproc *gp, const struct lp_proc_mapping *m, const struct lp_obj *o,
		      struct table_entry *v, size_t n, size_t cap)
{
	int lib;

	if (o->omp_runtime) {
		if (n < cap)
			v[n++] = (struct table_entry){{m->start, m->end}, LP_K_RUNTIME, 0};
		return n;
	}
	if (gp->engine == LP_ENGINE_TORCH && lp_obj_has(o, LP_SYM_BLAS)) {
		if (n < cap && (lib = lib_index(gp, o)) >= 0)
			v[n++] = (struct table_entry){
				{m->start, m->end}, LP_K_LIBRARY, (uint8_t)lib};
		return n;
	}
	for (size_t k = 0; k < o->syms.nsyms && n < cap; k++) {
		const struct lp_elf_sym *sym = &o->syms.syms[k];
		uint64_t len = m->end - m->start;
		uint8_t kind = 0;
		int id;

		if (sym->file_off < m->pgoff || sym->file_off >= m->pgoff + len)
			continue;
		id = sym_entry(gp, sym, &kind);
		if (id < 0)
			continue;
		v[n].r.start = m->start + (sym->file_off - m->pgoff);
		v[n].r.end = v[n].r.start + (sym->size ? sym->size : 1);
		v[n].kind = kind;
		v[n].op = (uint8_t)id;
		n++;
	}
	return n;
}

/* The op_samples entry, made once with the first sampling table. */
static void make_op_samples(struct lp_engines *g, struct lp_target *t)
{
	struct lp_op_samples *zero;
	__u32 key = (__u32)t->pid;

	if (t->eng->op_samples_made || !(zero = calloc(1, sizeof(*zero))))
		return;
	if (bpf_map_update_elem(bpf_map__fd(g->core->skel->maps.op_samples), &key, zero,
				BPF_NOEXIST) == 0 ||
	    errno == EEXIST)
		t->eng->op_samples_made = true;
	else
		log_warning_errno(-errno, "pid %d: no room for its op counts: %m", (int)t->pid);
	free(zero);
}

/* Whether a mapped object's rows are to be read for a process that walks through it: a
 * plain object when first walked; an object with ops again after its rows were given back
 * (unwind_gc). */
static bool rows_wanted(const struct lp_engines *g, const struct lp_obj *o)
{
	return g->unwind.outer_fd >= 0 && (!lp_obj_unwinds(o) || o->uw_error == -ENODATA) &&
	       !o->uw_tried && !o->stale;
}

/* Starts reading the rows the sampling table's unwind entries need (up to LP_MAX_UNWIND
 * entries, as add_unwind_entries takes them, from *k on), and the llama_decode probes of
 * the objects that have them: returns how many objects pid now waits for. */
static size_t start_reads(struct lp_engines *g, pid_t pid, const struct scan_entry *v, size_t n,
			  size_t *k, bool probes)
{
	size_t waiting = 0;

	for (size_t i = 0; i < n; i++) {
		struct lp_obj *o = v[i].o;
		bool rows = *k < LP_MAX_UNWIND && rows_wanted(g, o);
		/* Once per process: its path to the file may not be the one that works. */
		bool decode = probes && !o->step_tried && o->step_pid != pid &&
			      lp_obj_has(o, lp_engine_of(o->engine)->step_class);
		int fd = -1;

		if (o->busy) {
			/* its rows may be on their way: they count against the process's */
			*k += *k < LP_MAX_UNWIND && (o->uw_n || rows);
			obj_wait(o, pid);
			waiting++;
			continue;
		}
		o->uw_idle_since_ns = 0; /* in use: a process walks through it */
		if (rows) {
			char how[PATH_MAX + 64];

			fd = lp_proc_open_mapping(pid, &v[i].m, how, sizeof(how));
			rows = fd >= 0;
		}
		*k += *k < LP_MAX_UNWIND && (o->uw_n || rows);
		if (!rows && !decode)
			continue;
		obj_job_start(g, o, pid, fd, false, rows, decode);
		waiting += o->busy;
	}
	return waiting;
}

/* The C library (glibc's libc.so.6 and libpthread, musl's libc.so or its loader), by the
 * names their ABIs give the files: where an OpenMP runtime waits (abi.h's
 * lp_unwind_obj.libc). */
static bool obj_is_libc(const struct lp_obj *o)
{
	const char *b = strrchr(o->path, '/') ? strrchr(o->path, '/') + 1 : o->path;

	return !strncmp(b, "libc.so", 7) || !strncmp(b, "libc-", 5) ||
	       !strncmp(b, "libpthread.so", 13) || !strncmp(b, "libpthread-", 11) ||
	       !strncmp(b, "ld-musl-", 8);
}

/* Appends the mappings of v that have rows to the sampling table's unwind entries (up to
 * LP_MAX_UNWIND). */
static void add_unwind_entries(struct lp_eproc *gp, struct lp_ranges *rg,
			       const struct scan_entry *v, size_t n)
{
	for (size_t i = 0; i < n && rg->nuw < LP_MAX_UNWIND; i++) {
		struct lp_obj *o = v[i].o;

		if (!o->uw_n)
			continue;
		gp->uw_objs[rg->nuw] = o;
		rg->uw[rg->nuw++] = (struct lp_unwind_obj){
			.start = v[i].m.start,
			.end = v[i].m.end,
			.bias = v[i].m.start - v[i].m.pgoff,
			.n = o->uw_n,
			.slot = (__u16)o->uw_slot,
			/* walked through only: no ops in it (the C and C++ runtimes, an
			 * OpenMP runtime, libllama) */
			.plain = !lp_obj_unwinds(o),
			/* its op functions, for its engine's processes */
			.opfn_n = o->engine == gp->engine ? o->opfn_n : 0,
			.opfn_slot = (__u16)o->opfn_slot,
			.libc = obj_is_libc(o),
		};
		rg->opfn |= o->engine == gp->engine && o->opfn_n;
	}
}

/* The sampling table: op, kernel and barrier functions and OpenMP runtimes at their
 * addresses in this process, sorted and disjoint (an inner symbol cuts the one it lies
 * in short). Entries past LP_MAX_RANGES are dropped, and said so. */
static void write_ranges(struct lp_engines *g, struct lp_target *t, const struct proc_scan *s)
{
	struct lp_eproc *gp = t->eng;
	size_t cap = LP_MAX_RANGES * 4, n = 0, dropped = 0, collected = 0;
	struct table_entry *v = calloc(cap, sizeof(*v));
	struct lp_ranges *rg = calloc(1, sizeof(*rg));
	__u32 key = (__u32)t->pid;

	if (!v || !rg)
		goto out;
	for (size_t i = 0; i < s->n; i++)
		n = collect(gp, &s->v[i].m, s->v[i].o, v, n, cap);
	qsort(v, n, sizeof(*v), compare_entry);
	for (size_t i = 0; i < n; i++) {
		if (rg->n && v[i].r.start < rg->r[rg->n - 1].end) {
			if (v[i].r.start == rg->r[rg->n - 1].start)
				continue; /* an alias of the same code */
			rg->r[rg->n - 1].end = v[i].r.start;
		}
		if (rg->n == LP_MAX_RANGES) {
			dropped++;
			continue;
		}
		rg->r[rg->n] = v[i].r;
		rg->kind[rg->n] = v[i].kind;
		rg->op[rg->n] = v[i].op;
		rg->n++;
		collected++;
	}
	for (size_t i = 0; i < gp->ops.n; i++)
		rg->op_matmul[i] = gp->ops.v[i].group == LP_G_MATMUL;
	/* GCC's runtime's TLS slot where it is mapped, for an engine whose workers take
	 * their region's op */
	if (lp_engine_of(gp->engine)->region_ops)
		for (size_t i = 0; i < s->n; i++)
			if (lp_obj_team_path(g, s->v[i].o))
				rg->omp_team_got =
					s->v[i].m.start - s->v[i].m.pgoff + s->v[i].o->omp_team_got;
	gp->omp_team = rg->omp_team_got != 0;
	/* The mappings the sampler can walk frames in: the objects with ops, then the others
	 * (once the process runs ggml), their rows read now if they were not. */
	memset(gp->uw_objs, 0, sizeof(gp->uw_objs));
	add_unwind_entries(gp, rg, s->v, s->n);
	if (s->llm || gp->found_ns || gp->py.state)
		add_unwind_entries(gp, rg, s->plain, s->nplain);
	/* by start, for the sampler's binary search; uw_objs in the same order */
	for (size_t i = 1; i < rg->nuw; i++)
		for (size_t k = i; k > 0 && rg->uw[k - 1].start > rg->uw[k].start; k--) {
			struct lp_unwind_obj x = rg->uw[k];
			struct lp_obj *y = gp->uw_objs[k];

			rg->uw[k] = rg->uw[k - 1];
			gp->uw_objs[k] = gp->uw_objs[k - 1];
			rg->uw[k - 1] = x;
			gp->uw_objs[k - 1] = y;
		}
	if (rg->n) {
		rg->lo = rg->r[0].start;
		for (size_t i = 0; i < rg->n; i++)
			if (rg->r[i].end > rg->hi)
				rg->hi = rg->r[i].end;
	}
	if (dropped && dropped != gp->ranges_dropped)
		log_warning("pid %d: %zu functions do not fit the %d-entry sampling table and "
			    "will count as outside ops; narrow the symbol patterns",
			    (int)t->pid, dropped, LP_MAX_RANGES);
	gp->nranges = rg->n;
	gp->ranges_dropped = dropped;
	make_op_samples(g, t);
	if (!gp->table_ns) {
		struct lp_proc_stats *st = malloc(sizeof(*st));

		if (st && lp_hot_read(g->tr->procs_fd, g->tr->hot_fd, key, st) == 0)
			gp->oncpu_at_table_ns = st->ctr[LP_C_ONCPU_NS];
		free(st);
		gp->table_ns = lp_now_ns();
	}
	bpf_map_update_elem(bpf_map__fd(g->core->skel->maps.ranges), &key, rg, BPF_ANY);
	if (g->core->sample_per_thread && gp->nranges && !gp->sampler.n && !gp->sampler.error)
		lp_sampler_start(&gp->sampler, g->core->skel->progs.lp_sample, g->core->sample_hz,
				 t->pid);
out:
	free(v);
	free(rg);
}

/* The object's engine's step probes, for every process that maps the file: tried once,
 * through the first process whose path to it works. */
static void attach_step(struct lp_engines *g, pid_t pid, struct lp_obj *o)
{
	const struct lp_engine *e = lp_engine_of(o->engine);
	char path[PATH_MAX + 64];
	int r;

	if (o->step_tried || !lp_obj_has(o, e->step_class))
		return;
	r = lp_uprobe_path(pid, o->path, o->dev, o->ino, path, sizeof(path));
	if (r < 0)
		return; /* the process is gone: try again with the next one mapping it */
	o->step_tried = true;
	r = e->attach_step(g, pid, o, path);
	if (r < 0) {
		o->step_error = r;
		lp_prober_release(g->prober, &o->step, NULL);
	}
}

static void attach_new_objects(struct lp_target *t, const struct proc_scan *s)
{
	struct lp_eproc *gp = t->eng;
	struct lp_obj **v;
	size_t n = 0;

	for (size_t i = 0; i < s->n; i++) {
		/* Its decodes count from now: the process is in procs and the probes are on
		 * (attached just now, or for another process mapping the same file). */
		if (!gp->decode_since_ns && s->v[i].o->step.n && !s->v[i].o->step_error)
			gp->decode_since_ns = lp_now_ns();
	}
	v = calloc(s->n ? s->n : 1, sizeof(*v));
	if (!v)
		return;
	for (size_t i = 0; i < s->n; i++) {
		size_t k;

		for (k = 0; k < n && v[k] != s->v[i].o; k++)
			;
		if (k == n)
			v[n++] = s->v[i].o;
	}
	if (n != gp->nobjs || memcmp(v, gp->objs, n * sizeof(*v)))
		gp->objs_gen++;
	free(gp->objs);
	gp->objs = v;
	gp->nobjs = n;
}

static void log_found(const struct lp_engines *g, const struct lp_target *t)
{
	const struct lp_engine *e = lp_engine_of(t->eng->engine);
	struct lp_line l = {.len = 0};

	e->describe_found(g, t, &l);
	log_info("pid %d (%s) runs %s: %s", (int)t->pid, t->comm, lp_engine_name(e->id), l.buf);
}

/* A process's own probes (its engine's proc_probes), attached off the loop. */
struct proc_job {
	struct lp_engines *g;
	pid_t pid;
	struct lp_eproc *gp; /* compared, never followed, off the loop */
	struct lp_probe_site *v;
	size_t n;
	struct lp_probes probes;
	int error;
};

static void proc_job_work(void *ctx)
{
	struct proc_job *j = ctx;

	for (size_t i = 0; i < j->n && !j->error; i++) {
		struct bpf_link *l = bpf_program__attach_uprobe(j->v[i].prog, j->v[i].ret, j->pid,
								j->v[i].path, j->v[i].off);

		j->error = l ? lp_links_push(&j->probes.links, &j->probes.nlinks, l) : -errno;
		j->probes.n += l != NULL;
	}
}

static void proc_job_drop(void *ctx)
{
	struct proc_job *j = ctx;

	lp_probes_free(&j->probes);
	free(j->v);
	free(j);
}

static void proc_job_fin(void *ctx)
{
	struct proc_job *j = ctx;
	struct lp_target *t = lp_tracker_find(j->g->tr, j->pid);

	/* Gone, or another process by now: its probes go. */
	if (!t || t->exited || t->eng != j->gp) {
		lp_prober_release(j->g->prober, &j->probes, NULL);
		free(j->v);
		free(j);
		return;
	}
	t->eng->region = j->probes;
	t->eng->region_attached = j->probes.n > 0;
	t->eng->region_error = j->error;
	if (j->error && j->error != -ESRCH && j->error != -ENOENT)
		log_warning_errno(
			j->error,
			"pid %d: attach its OpenMP region probes: %m; its OpenMP workers' "
			"samples count as outside ops",
			(int)j->pid);
	free(j->v);
	free(j);
}

/* The engine's probes of a process it found (torch: its OpenMP regions), once. */
static void attach_proc(struct lp_engines *g, struct lp_target *t)
{
	const struct lp_engine *e = lp_engine_of(t->eng->engine);
	struct proc_job *j;

	if (!e->proc_probes || t->eng->region_tried)
		return;
	t->eng->region_tried = true;
	if (!(j = calloc(1, sizeof(*j))))
		return;
	*j = (struct proc_job){.g = g, .pid = t->pid, .gp = t->eng};
	t->eng->region_error = e->proc_probes(g, t->pid, t->eng, &j->v, &j->n);
	if (t->eng->region_error || !j->n) {
		free(j->v);
		free(j);
		return;
	}
	lp_prober_call(g->prober, "probe a process's OpenMP regions", false, proc_job_work,
		       proc_job_fin, proc_job_drop, j);
}

void lp_engines_found(struct lp_engines *g, const struct lp_ev_found *e)
{
	pid_t pid = (pid_t)e->tgid;
	struct lp_target *t;
	int r;

	if (e->engine >= LP_ENGINE_NR)
		return;
	/* The kernel counts it from its step on; the futex programs go on for it. */
	(void)lp_core_futex_want(g->core);
	r = lp_tracker_add(g->tr, pid, lp_engine_name(e->engine));
	if (r == -ENOSPC)
		log_warning("pid %d runs %s, but %u processes are tracked already "
			    "(--max-processes), ignoring",
			    (int)pid, lp_engine_name(e->engine), g->cfg->max_processes);
	else if (r < 0 && r != -ESRCH && r != -EALREADY)
		log_warning_errno(r, "track pid %d: %m, ignoring", (int)pid);
	t = lp_tracker_find(g->tr, pid);
	if (!t || t->exited)
		return;
	t->found_by = (uint8_t)(e->engine + 1);
	/* It runs the engine from now: said at once, its objects read meanwhile (a Python
	 * process maps a hundred; its sampling table waits for them, its tokens do not). */
	if (!t->eng && (t->eng = calloc(1, sizeof(*t->eng))))
		lp_tensor_state_init(&t->eng->tensors);
	if (t->eng && !t->eng->found_ns) {
		t->eng->engine = (uint8_t)e->engine;
		t->eng->found_ns = lp_now_ns();
	}
	sync_proc(g, pid, NULL, NULL);
}

/* The scan as the process's ggml state: its objects, and whether it runs an LLM (said once,
 * at found_ns). live: it still runs, and gets its sampling table and what is built on it
 * (precise mode); else it is gone and its entry with it. */
static void take_scan(struct lp_engines *g, struct lp_target *t, const struct proc_scan *s,
		      bool live)
{
	bool first = !t->eng || !t->eng->found_ns;

	if (!t->eng && (t->eng = calloc(1, sizeof(*t->eng))))
		lp_tensor_state_init(&t->eng->tensors);
	if (!t->eng)
		return;
	/* Its engine before its sampling table: the engine names its ops. */
	if (s->llm && first)
		t->eng->engine = s->engine;
	attach_new_objects(t, s);
	/* CPython in it, whatever its engine, or tracked by a setting: its frames in its
	 * stacks, walked to them through its runtimes' rows (write_ranges) */
	for (size_t i = 0; live && g->cfg->python_frames && !t->eng->py.state && i < s->n; i++)
		if (lp_obj_has(s->v[i].o, LP_SYM_PYTHON))
			lp_python_scan(g->core, t->pid, t->comm, &t->eng->py, &s->v[i].o->syms,
				       s->v[i].o->path, &s->v[i].m);
	if (live)
		write_ranges(g, t, s);
	if (s->llm && !t->eng->announced) {
		if (!t->eng->found_ns)
			t->eng->found_ns = lp_now_ns();
		t->eng->announced = true;
		log_found(g, t);
		if (live && g->hooks.found)
			g->hooks.found(g, t, t->eng->found_ns);
	}
	if (live && t->eng->found_ns)
		attach_proc(g, t);
	if (live && t->eng->precise_on && g->hooks.mapped)
		g->hooks.mapped(g, t);
}

void lp_engines_futex_ready(void *arg)
{
	struct lp_engines *g = arg;

	pids_wake(g, &g->futex_waiters, true); /* they waited because they run ggml */
}

/* A candidate's engine found it (its step ran: lp_engines_found): it runs that engine. */
static void candidate_found(const struct lp_target *t, struct proc_scan *s)
{
	if (t && !s->llm && s->candidate && t->found_by == s->cand_engine + 1) {
		s->llm = true;
		s->engine = s->cand_engine;
	}
}

/* Whether a scan maps CPython whose frames are to be read. */
static bool scan_runs_python(const struct lp_engines *g, const struct proc_scan *s)
{
	for (size_t i = 0; g->cfg->python_frames && i < s->n; i++)
		if (lp_obj_has(s->v[i].o, LP_SYM_PYTHON))
			return true;
	return false;
}

/* Brings a process's ggml state up to date with its mappings; tracks it if it runs ggml.
 * What needs the kernel's time (reading a new object, the rows of one it walks through, its
 * probes, the futex programs) is on its way meanwhile, off the loop: the process is brought
 * up to date again once that is done, and its sampling table is written only from a whole
 * scan, as it was when all of that ran here. */
static int sync_proc(struct lp_engines *g, pid_t pid, const struct lp_obj_key *want, bool *saw_key)
{
	struct lp_target *t = lp_tracker_find(g->tr, pid);
	struct proc_scan s;
	bool added = false, wait = false;
	int r;

	if (t && t->exited)
		t = NULL;
	/* Outside --discover-cgroup a process is not even read, unless a rule tracks it. */
	if (!t && g->cfg->discover_cgroup && lp_proc_in_cgroup(pid, g->cfg->discover_cgroup) != 1) {
		if (saw_key)
			*saw_key = false;
		return 0;
	}
	r = read_proc(g, pid, want, &s);
	if (saw_key)
		*saw_key = s.saw_key;
	if (r < 0)
		return r;
	candidate_found(t, &s);
	if ((wait = s.busy))
		goto out;
	if (!t && s.llm && g->cfg->discover) {
		if (!lp_core_futex_want(g->core)) {
			pids_add(&g->futex_waiters, pid);
			goto out;
		}
		r = lp_tracker_add(g->tr, pid, "ggml");
		if (r == -ENOSPC)
			log_warning("pid %d runs ggml, but %u processes are tracked already "
				    "(--max-processes), ignoring",
				    (int)pid, g->cfg->max_processes);
		else if (r < 0 && r != -ESRCH && r != -EALREADY)
			log_warning_errno(r, "track pid %d: %m, ignoring", (int)pid);
		t = r == 0 ? lp_tracker_find(g->tr, pid) : NULL;
		added = t != NULL;
		/* Its mappings again, now that it is in procs: a helper (libgomp) mapped between
		 * the read above and the insert was neither in that read nor reported by the
		 * mmap hook, which reports objects it knows (helpers, runtimes) only for
		 * tracked processes; its barrier samples were then counted outside ops. */
		if (added) {
			proc_scan_free(&s);
			/* gone meanwhile: s is empty, its exit follows */
			(void)read_proc(g, pid, want, &s);
			if ((wait = s.busy))
				goto out;
		}
	}
	if (t && (s.n || t->eng)) {
		size_t k = 0, n, np = 0;
		/* CPython and no engine (tracked by a setting): its stacks are walked too, and
		 * through the C library's frames (a clock read, a read(2)) to its
		 * interpreter's */
		bool py = !s.llm && !(t->eng && t->eng->found_ns) && scan_runs_python(g, &s);

		/* The rows its walks need and its objects' probes first. */
		n = start_reads(g, pid, s.v, s.n, &k, true);
		if (s.llm || (t->eng && t->eng->found_ns) || py)
			np = start_reads(g, pid, s.plain, s.nplain, &k, false);
		/* A process its engine's step found (torch's first forward), or running
		 * CPython alone, gets its sampling table once its objects with ops are read,
		 * and again as the rows of the others come (a Python process maps a hundred,
		 * each a grace period); a ggml process, once all are. */
		if ((wait = n > 0 || (np > 0 && !t->found_by && !py)))
			goto out;
		wait = np > 0;
		if (!wait)
			stash_drop(g, pid);
		take_scan(g, t, &s, true);
	}
out:
	/* A tracked process that waits keeps what it maps, in case it is gone by then. */
	t = lp_tracker_find(g->tr, pid);
	if (wait && t && !t->exited && s.nmaps && lp_prober_async(g->prober))
		stash_keep(g, pid, &s);
	proc_scan_free(&s);
	return added;
}

/* A tracked process gone before the objects it waited for were read: what it ran, from the
 * mappings it had (no sampling table: it has exited, and its entry with it). */
static void late_sync(struct lp_engines *g, pid_t pid)
{
	struct lp_target *t = lp_tracker_find(g->tr, pid);
	const struct lp_proc_stash *st = NULL;
	struct proc_scan s = {0};

	for (size_t i = 0; i < g->nstash && !st; i++)
		if (g->stash[i].pid == pid)
			st = &g->stash[i];
	if (!st || !t)
		return;
	/* Objects known by now; a new one cannot be opened by a process that is gone. */
	for (size_t i = 0; i < st->n; i++)
		if (scan_mapping(g, pid, &st->maps[i], &s) < 0)
			break;
	candidate_found(t, &s);
	if (!s.busy && (s.n || t->eng))
		take_scan(g, t, &s, false);
	if (!s.busy) /* else it waits again */
		stash_drop(g, pid);
	proc_scan_free(&s);
}

int lp_engines_scan_all(struct lp_engines *g)
{
	struct dirent *de;
	int n = 0;
	DIR *d;

	d = opendir("/proc");
	if (!d)
		return log_error_errno(-errno, "open /proc: %m");
	while ((de = readdir(d))) {
		pid_t pid;

		if (lp_parse_pid(de->d_name, &pid) < 0 || pid == getpid())
			continue;
		if (sync_proc(g, pid, NULL, NULL) > 0)
			n++;
	}
	closedir(d);
	return n;
}

void lp_engines_check(struct lp_engines *g, struct lp_target *t)
{
	sync_proc(g, t->pid, NULL, NULL);
}

void lp_engines_event(struct lp_engines *g, const struct lp_ev_map *e)
{
	struct lp_map_pending *v;

	log_debug("pid %u maps executable %llx:%llu", e->tgid, (unsigned long long)e->obj.dev,
		  (unsigned long long)e->obj.ino);
	for (size_t i = 0; i < g->npending; i++)
		if (g->pending[i].pid == (pid_t)e->tgid) {
			g->pending[i].key = e->obj;
			g->pending[i].tries = 0;
			return;
		}
	v = realloc(g->pending, (g->npending + 1) * sizeof(*v));
	if (!v)
		return;
	g->pending = v;
	v[g->npending++] = (struct lp_map_pending){.pid = (pid_t)e->tgid, .key = e->obj};
}

void lp_engines_decode_event(struct lp_engines *g, const struct lp_ev_decode *e)
{
	struct lp_target *t = lp_tracker_find(g->tr, (pid_t)e->tgid);

	if (!t || t->exited)
		return;
	if (!t->requests && !(t->requests = calloc(1, sizeof(*t->requests))))
		return;
	lp_requests_decode(t->requests, e);
}

bool lp_engines_process_pending(struct lp_engines *g)
{
	size_t k = 0;

	for (size_t i = 0; i < g->npending; i++) {
		struct lp_map_pending *p = &g->pending[i];
		struct lp_proc_stat st;
		bool saw = false;
		int r = sync_proc(g, p->pid, &p->key, &saw);

		log_debug("pid %d: mappings read (%d), %s", (int)p->pid, r,
			  saw ? "found" : "not yet");
		/* Gone before its mappings could be read, after mapping a file known to hold
		 * ggml: a process that ran ggml and was never tracked. Counted, so that the
		 * loss shows (lost.exited_before_tracking). */
		if (!saw && lp_proc_read_stat(p->pid, &st) == -ESRCH &&
		    !lp_tracker_find(g->tr, p->pid)) {
			struct lp_obj *o = obj_find(g, p->key.dev, p->key.ino);

			if (o && lp_obj_has(o, LP_SYM_MATMUL))
				g->tr->exited_untracked++;
			continue;
		}

		/* From a syscall fallback the record comes from mmap's entry: the mapping
		 * may not exist yet. */
		if (r >= 0 && !saw && ++p->tries < PENDING_TRIES)
			g->pending[k++] = *p;
	}
	g->npending = k;
	return k > 0;
}

/* --- op counts --- */

int lp_eproc_aop_index(struct lp_eproc *gp, uint32_t aop)
{
	uint32_t slot = aop >> 16, name = aop & 0xffff;
	int id;

	for (size_t i = 0; i < gp->ops.n && i < LP_MAX_OPS; i++)
		if (gp->aops[i] == aop)
			return (int)i;
	for (size_t i = 0; i < gp->nobjs; i++) {
		const struct lp_obj *o = gp->objs[i];

		if (!o->opfn_n || o->opfn_slot != slot || !name || name > o->nop_names)
			continue;
		id = lp_op_table_index(&gp->ops, o->op_names[name - 1], o->op_groups[name - 1],
				       LP_MAX_OPS);
		if (id == -ENOSPC)
			gp->ops_dropped++;
		if (id < 0)
			return -1;
		/* The same op in another object (call and redispatch share theirs) keeps the
		 * first aop seen: the next lookup of this one finds its name again. */
		if (!gp->aops[id])
			gp->aops[id] = aop;
		return id;
	}
	return -1;
}

struct aop_walk {
	struct lp_eproc *gp;
	__u32 tgid;
	struct lp_op_samples *os;
	struct lp_keys gone;
};

static int aop_add(void *ctx, const void *key, const void *value)
{
	struct aop_walk *w = ctx;
	const struct lp_aop_key *k = key;
	const struct lp_aop_val *v = value;
	int id;

	if (k->tgid != w->tgid || (id = lp_eproc_aop_index(w->gp, k->aop)) < 0)
		return 0;
	w->os->all[id] += v->all;
	w->os->gen[id] += v->gen;
	w->os->region[id] += v->region;
	return 0;
}

/* The process's samples by op functions' table op, into os. */
static void aop_overlay(const struct lp_core *c, struct lp_eproc *gp, pid_t pid,
			struct lp_op_samples *os)
{
	struct aop_walk w = {.gp = gp, .tgid = (__u32)pid, .os = os};

	lp_map_walk(bpf_map__fd(c->skel->maps.aop_samples), sizeof(struct lp_aop_key),
		    sizeof(struct lp_aop_val), aop_add, &w);
}

static int aop_gone(void *ctx, const void *key, const void *value)
{
	struct aop_walk *w = ctx;

	(void)value;
	if (((const struct lp_aop_key *)key)->tgid == w->tgid)
		lp_keys_add(&w->gone, key);
	return 0;
}

/* Takes the process's aop_samples entries out (at its exit, after their last read). */
static void aop_forget(const struct lp_core *c, pid_t pid)
{
	int fd = bpf_map__fd(c->skel->maps.aop_samples);
	struct aop_walk w = {.tgid = (__u32)pid, .gone = {.size = sizeof(struct lp_aop_key)}};

	lp_map_walk(fd, sizeof(struct lp_aop_key), sizeof(struct lp_aop_val), aop_gone, &w);
	lp_map_delete(fd, &w.gone);
}

struct lp_op_samples *lp_eproc_op_samples(const struct lp_core *c, struct lp_eproc *gp, pid_t pid)
{
	struct lp_op_samples *os;

	if (!gp || !(gp->final_ops || gp->op_samples_made) || !(os = malloc(sizeof(*os))))
		return NULL;
	if (gp->final_ops) {
		*os = *gp->final_ops;
		return os;
	}
	if (lp_core_op_samples(c, pid, os)) {
		free(os);
		return NULL;
	}
	if (gp->engine != LP_ENGINE_GGML)
		aop_overlay(c, gp, pid, os);
	return os;
}

/* --- lifecycle --- */

void lp_engines_on_exit(struct lp_engines *g, struct lp_target *t)
{
	__u32 key = (__u32)t->pid;

	if (g->hooks.exited)
		g->hooks.exited(g, t);
	unwind_gc(g, t, lp_now_ns());
	if (t->eng) {
		lp_sampler_stop(&t->eng->sampler);
		/* The exit hook leaves the op counts for this last read. */
		if (!t->eng->final_ops)
			t->eng->final_ops = lp_eproc_op_samples(g->core, t->eng, t->pid);
	}
	bpf_map_delete_elem(bpf_map__fd(g->core->skel->maps.op_samples), &key);
	/* The exit hook deletes these; an exit it missed (lp_tracker_find_missed_exits) leaves them. */
	bpf_map_delete_elem(bpf_map__fd(g->core->skel->maps.ranges), &key);
	/* torch's: its forwards, its region, its ops' counts (read above) */
	bpf_map_delete_elem(bpf_map__fd(g->core->skel->maps.fwd), &key);
	bpf_map_delete_elem(bpf_map__fd(g->core->skel->maps.omp_region), &key);
	if (t->eng && t->eng->engine != LP_ENGINE_GGML) {
		aop_forget(g->core, t->pid);
		lp_prober_release(g->prober, &t->eng->region, NULL);
	}
	if (t->eng && t->eng->py.state == 1)
		lp_python_exit(g->core, t->pid, &t->eng->py);
}

void lp_engines_tick(struct lp_engines *g)
{
	unwind_gc(g, NULL, lp_now_ns());
	for (size_t i = 0; g->tr && i < g->tr->n; i++)
		if (!g->tr->v[i]->exited && g->tr->v[i]->eng)
			lp_python_name(g->core, g->tr->v[i]->pid, &g->tr->v[i]->eng->py);
}

/* Zeroes the op counts, all but the decodes in flight; samples counted between the read
 * and the write are lost, as with the process counters. */
static void reset_op_samples(struct lp_engines *g, struct lp_target *t)
{
	int fd = bpf_map__fd(g->core->skel->maps.op_samples);
	struct lp_op_samples *os = t->eng->final_ops;
	__u32 key = (__u32)t->pid;
	__s32 depth;

	if (os) {
		memset(os, 0, sizeof(*os));
		return;
	}
	if (!t->eng->op_samples_made || !(os = malloc(sizeof(*os))))
		return;
	if (bpf_map_lookup_elem(fd, &key, os) == 0) {
		depth = os->gen_depth;
		memset(os, 0, sizeof(*os));
		os->gen_depth = depth;
		bpf_map_update_elem(fd, &key, os, BPF_EXIST);
	}
	free(os);
}

void lp_engines_reset(struct lp_engines *g, struct lp_target *t)
{
	struct lp_eproc *gp = t->eng;

	if (!gp)
		return;
	reset_op_samples(g, t);
	if (gp->engine != LP_ENGINE_GGML && !gp->final_ops)
		aop_forget(g->core, t->pid);
	gp->oncpu_at_table_ns = 0;
	if (g->hooks.reset)
		g->hooks.reset(g, t);
}
