// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* ggml discovery: object files and their functions, the sampling table, llama_decode
 * probes. Precise mode is precise.c. */
#include "engine/ggml.h"

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
#include "kernel/uprobe.h"
#include "engine/requests.h"
#include "tracked/hot.h"

#define MAX_OBJS 4096
#define PENDING_TRIES 10

static const char *const class_names[LP_SYM_NR] = {"matmul", "barrier", "decode", "op"};

static int sync_proc(struct lp_ggml *g, pid_t pid, const struct lp_obj_key *want, bool *saw_key);

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
static void rows_give_back(struct lp_ggml *g, uint32_t slot, uint32_t n)
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

static void obj_free(struct lp_ggml *g, struct lp_ggml_obj *o)
{
	if (!o)
		return;
	rows_give_back(g, o->uw_slot, o->uw_n);
	lp_prober_release(g->prober, &o->decode, NULL);
	lp_elf_result_free(&o->syms);
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
static void obj_wait(struct lp_ggml_obj *o, pid_t pid)
{
	pids_add(&o->waiters, pid);
}

static void late_sync(struct lp_ggml *g, pid_t pid);

/* A process that waited for the kernel brought up to date: one gone meanwhile, untracked,
 * that mapped ggml (known holds matmul) is counted, as one gone before its mappings were
 * read is (lost.exited_before_tracking). */
static void wake_one(struct lp_ggml *g, pid_t pid, bool known_llm)
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
static void pids_wake(struct lp_ggml *g, struct lp_pids *w, bool known_llm)
{
	struct lp_pids v = *w;

	*w = (struct lp_pids){NULL, 0};
	for (size_t i = 0; i < v.n; i++)
		wake_one(g, v.v[i], known_llm);
	free(v.v);
}

static void obj_wake(struct lp_ggml *g, struct lp_ggml_obj *o)
{
	pids_wake(g, &o->waiters, lp_ggml_obj_has(o, LP_SYM_MATMUL));
}

void lp_ggml_proc_free(struct lp_ggml_proc *gp)
{
	if (!gp)
		return;
	lp_probes_free(&gp->probes);
	lp_sampler_stop(&gp->sampler);
	lp_op_table_free(&gp->ops);
	free(gp->final_ops);
	free(gp->final_op_precise);
	free(gp->final_nodes);
	free(gp->precise_ops_missing);
	free(gp->objs);
	free(gp);
}

void lp_ggml_init(struct lp_ggml *g, const struct lp_config *cfg, struct lp_core *core,
		  struct lp_tracker *tr)
{
	memset(g, 0, sizeof(*g));
	g->cfg = cfg;
	g->core = core;
	g->tr = tr;
	lp_unwind_init(&g->unwind, cfg->unwind && cfg->stack_scan
					   ? bpf_map__fd(core->skel->maps.unwind_rows)
					   : -1);
}

void lp_ggml_free(struct lp_ggml *g)
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

static bool obj_is_omp_runtime(const struct lp_ggml_obj *o)
{
	if (lp_ggml_obj_has(o, LP_SYM_MATMUL))
		return false;
	for (size_t i = 0; i < o->syms.nsyms; i++)
		if (o->syms.syms[i].cls == LP_SYM_BARRIER &&
		    (!strncmp(o->syms.syms[i].name, "GOMP_", 5) ||
		     !strncmp(o->syms.syms[i].name, "__kmpc_", 7)))
			return true;
	return false;
}

static uint32_t obj_verdict(const struct lp_ggml_obj *o)
{
	if (lp_ggml_obj_has(o, LP_SYM_MATMUL))
		return LP_OBJ_MATMUL;
	if (o->syms.nsyms)
		return LP_OBJ_HELPER;
	return LP_OBJ_NONE;
}

/* Tells the kernel side what this file holds, so that mapping it again is not reported. */
static void obj_publish(struct lp_ggml *g, const struct lp_ggml_obj *o)
{
	struct lp_obj_key key = {.dev = o->dev, .ino = o->ino};
	struct lp_obj_val val = {.mtime_ns = o->mtime_ns, .verdict = o->verdict};

	bpf_map_update_elem(bpf_map__fd(g->core->skel->maps.objs), &key, &val, BPF_ANY);
}

/* Whether the process's sampling table walks frames through o. */
static bool proc_walks(const struct lp_ggml_proc *gp, const struct lp_ggml_obj *o)
{
	for (size_t j = 0; j < LP_MAX_UNWIND; j++)
		if (gp->uw_objs[j] == o)
			return true;
	return false;
}

/* Whether a process, running or exited, walks frames through o (its report names it). */
static bool obj_walked(const struct lp_ggml *g, const struct lp_ggml_obj *o)
{
	for (size_t k = 0; k < g->tr->n; k++)
		if (g->tr->v[k]->ggml && proc_walks(g->tr->v[k]->ggml, o))
			return true;
	return false;
}

/* Forgets files without symbols when the cache is full; those are cheap to read again. */
static void objs_trim(struct lp_ggml *g)
{
	size_t k = 0;

	if (g->nobjs < MAX_OBJS)
		return;
	for (size_t i = 0; i < g->nobjs; i++) {
		if (g->objs[i]->verdict == LP_OBJ_NONE && !g->objs[i]->decode.n &&
		    !g->objs[i]->uw_n && !g->objs[i]->busy && !obj_walked(g, g->objs[i]))
			obj_free(g, g->objs[i]);
		else
			g->objs[k++] = g->objs[i];
	}
	g->nobjs = k;
}

/* Opens the file behind a mapping: through map_files (right even when the file was
 * replaced or lives in another mount namespace), else through the process's root. */
static struct lp_ggml_obj *obj_find(struct lp_ggml *g, uint64_t dev, uint64_t ino)
{
	for (size_t i = 0; i < g->nobjs; i++)
		if (g->objs[i]->dev == dev && g->objs[i]->ino == ino && !g->objs[i]->stale)
			return g->objs[i];
	return NULL;
}

#define LOG_NAMED 3

static void log_obj(const struct lp_ggml_obj *o)
{
	size_t nops = lp_ggml_obj_op_functions(o);
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
	else if (lp_ggml_obj_unwinds(o))
		lp_line_add(&l, "; callers found by %s", lp_ggml_obj_unwind(o));
	log_info("%s: %s%s%s%s", o->path, l.buf,
		 o->syms.has_symtab ? "" : " (no .symtab: stripped)",
		 o->omp_runtime ? "; an OpenMP runtime: all of its code counts as barrier" : "",
		 lp_ggml_obj_has(o, LP_SYM_MATMUL) && !nops
			 ? "; no op functions in its symbols: its ops are unknown, their time "
			   "counts as outside ops"
			 : "");
}

/* The call frame rows of an object into an array of their own: at once for an object
 * whose code holds ops (where samples are unwound from); for any other (plain: the C and
 * C++ runtimes, an OpenMP runtime, libllama: what a sample's walk crosses on its way to an
 * op or barrier, and a profile's stacks to their thread's start) when a tracked process
 * maps it. */
static void obj_load_unwind(struct lp_ggml *g, struct lp_ggml_obj *o, int fd, bool plain)
{
	o->uw_error = -EOPNOTSUPP;
	if (g->unwind.outer_fd < 0 || (!plain && !lp_ggml_obj_unwinds(o)))
		return;
	o->uw_tried = true;
	o->uw_error = lp_unwind_load(&g->unwind, fd, &o->uw_slot, &o->uw_n, o->uw_lost);
	o->uw_rows_read = o->uw_n;
	if ((o->uw_error == -ENOSPC || o->uw_error == -EFBIG) && plain)
		log_warning("%s: %s: samples whose frames pass through it are placed by "
			    "scanning the stack, which can take a stale return address for a "
			    "live frame",
			    o->path, lp_ggml_obj_unwind(o));
	else if (o->uw_error == -ENOSPC || o->uw_error == -EFBIG)
		log_warning("%s: %s: its ops are found by scanning the stack, which can take a "
			    "stale return address for a live frame",
			    o->path, lp_ggml_obj_unwind(o));
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
static void unwind_gc(struct lp_ggml *g, const struct lp_target *gone, uint64_t now)
{
	/* A process waiting for reads uses rows its sampling table does not name yet. */
	if (g->reads_busy)
		return;
	for (size_t i = 0; i < g->nobjs; i++) {
		struct lp_ggml_obj *o = g->objs[i];
		bool used = false;

		if (!o->uw_n || o->busy)
			continue;
		for (size_t k = 0; k < g->tr->n && !used; k++) {
			const struct lp_target *t = g->tr->v[k];

			if (t == gone || t->exited || !t->ggml)
				continue;
			for (size_t j = 0; j < t->ggml->nobjs; j++)
				used |= t->ggml->objs[j] == o;
			used |= proc_walks(t->ggml, o);
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

static void attach_decode(struct lp_ggml *g, pid_t pid, struct lp_ggml_obj *o);

/* What reading an object does, off the loop (prober.h): its symbols and what they make it
 * (an ELF file of hundreds of megabytes: libtorch_cpu.so), the rows of its .eh_frame (each
 * array put in the array of maps waits for an RCU grace period), its llama_decode probes
 * (uprobes). The results go to a scratch object, moved into the real one on the loop. */
struct obj_job {
	struct lp_ggml *g;
	struct lp_ggml_obj *o; /* busy until the job is done */
	struct lp_ggml_obj r;  /* what the job found; its path is o's */
	int fd;		       /* the mapping's file, or -1 (probes only) */
	pid_t pid;	       /* whose mapping: the probes' path */
	bool syms, rows, plain, decode;
};

static void obj_job_work(void *ctx)
{
	struct obj_job *j = ctx;
	struct lp_ggml_obj *r = &j->r;
	/* --no-fast-entry: no sites are looked for, every probe goes on the first
	 * instruction. */
	const struct lp_elf_patterns pat = {.lists = j->g->cfg->symbols,
					    .nclasses = LP_SYM_NR,
					    .probe_sites = j->g->cfg->fast_entry};

	if (j->syms) {
		r->read_error = lp_elf_find(j->fd, &pat, &r->syms);
		r->verdict = r->read_error ? LP_OBJ_NONE : obj_verdict(r);
		r->omp_runtime = !r->read_error && obj_is_omp_runtime(r);
	}
	if (j->rows)
		obj_load_unwind(j->g, r, j->fd, j->plain);
	if (j->decode)
		attach_decode(j->g, j->pid, r);
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

	if (j->syms) /* else o's, lent */
		lp_elf_result_free(&j->r.syms);
	if (j->rows)
		lp_unwind_release(&j->g->unwind, j->r.uw_slot, j->r.uw_n);
	lp_probes_free(&j->r.decode);
	obj_job_free(j);
}

static void obj_job_fin(void *ctx)
{
	struct obj_job *j = ctx;
	struct lp_ggml *g = j->g;
	struct lp_ggml_obj *o = j->o, *r = &j->r;
	bool syms;

	if (j->syms) {
		o->read_error = r->read_error;
		o->syms = r->syms;
		o->verdict = r->verdict;
		o->omp_runtime = r->omp_runtime;
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
		o->decode = r->decode;
		o->decode_tried = r->decode_tried;
		o->decode_error = r->decode_error;
		o->decode_pid = j->pid;
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
static void obj_job_start(struct lp_ggml *g, struct lp_ggml_obj *o, pid_t pid, int fd, bool syms,
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
			      .plain = rows && !syms && !lp_ggml_obj_unwinds(o),
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
static struct lp_ggml_obj *obj_get(struct lp_ggml *g, pid_t pid, const struct lp_proc_mapping *m)
{
	struct lp_ggml_obj *o = obj_find(g, m->dev, m->ino), **v;
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
		struct lp_ggml_obj *o;
	} * v,		/* executable mappings of objects with symbols */
		*plain; /* ... of the others, read without error */
	size_t n, nplain;
	size_t busy; /* mappings of objects whose symbols are still being read */
	bool llm;
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
static int scan_mapping(struct lp_ggml *g, pid_t pid, const struct lp_proc_mapping *m,
			struct proc_scan *s)
{
	struct lp_ggml_obj *o = obj_get(g, pid, m);
	struct scan_entry **v = &s->v;
	size_t *n = &s->n;
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
	}
	if (!(nv = realloc(*v, (*n + 1) * sizeof(*nv))))
		return -ENOMEM;
	*v = nv;
	nv[(*n)++] = (struct scan_entry){.m = *m, .o = o};
	s->llm |= o->verdict == LP_OBJ_MATMUL;
	return 0;
}

static int read_proc(struct lp_ggml *g, pid_t pid, const struct lp_obj_key *want,
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
		if ((mv = realloc(s->maps, (s->nmaps + 1) * sizeof(*mv)))) {
			s->maps = mv;
			mv[s->nmaps++] = m;
		}
	}
	fclose(f);
	return 0;
}

static void stash_drop(struct lp_ggml *g, pid_t pid)
{
	for (size_t i = 0; i < g->nstash; i++)
		if (g->stash[i].pid == pid) {
			free(g->stash[i].maps);
			g->stash[i] = g->stash[--g->nstash];
			return;
		}
}

#define MAX_STASH 64

static void stash_keep(struct lp_ggml *g, pid_t pid, struct proc_scan *s)
{
	struct lp_ggml_stash *v;

	stash_drop(g, pid);
	if (g->nstash == MAX_STASH) /* the oldest goes: its process was long in waiting */
		stash_drop(g, g->stash[0].pid);
	if (!(v = realloc(g->stash, (g->nstash + 1) * sizeof(*v))))
		return;
	g->stash = v;
	v[g->nstash++] = (struct lp_ggml_stash){pid, s->maps, s->nmaps};
	s->maps = NULL;
	s->nmaps = 0;
}

/* What one symbol is in the sampling table: its kind and op index, or -1 to leave it out
 * (the decode entry point; an op past the op table's room, counted in ops_dropped). */
static int sym_entry(struct lp_ggml_proc *gp, const struct lp_elf_sym *sym, uint8_t *kind)
{
	char op[LP_OP_NAME_MAX];
	int id;

	if (sym->cls == LP_SYM_DECODE)
		return -1;
	if (sym->cls == LP_SYM_BARRIER) {
		*kind = LP_K_BARRIER;
		return 0;
	}
	if (lp_op_name(sym->name, op, sizeof(op)) == 0) {
		*kind = LP_K_OP;
		id = lp_op_table_index(&gp->ops, op, lp_op_group_of(op), LP_MAX_OPS);
	} else if (sym->cls == LP_SYM_MATMUL) {
		/* A matmul kernel by configuration: matmul whatever its name says. */
		*kind = LP_K_KERNEL;
		snprintf(op, sizeof(op), "%s", sym->name);
		/* Its name as the op's: only characters a C++ symbol has, the rest as '?'. */
		for (char *c = op; *c; c++)
			if (!isalnum((unsigned char)*c) && !strchr("_.:<>,()~ ", *c))
				*c = '?';
		id = lp_op_table_index(&gp->ops, op, LP_G_MATMUL, LP_MAX_OPS);
	} else {
		return -1;
	}
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

/* Collects the entries of one mapping: an OpenMP runtime's whole text, else its op,
 * kernel and barrier functions. Returns the new count. */
static size_t collect(struct lp_ggml_proc *gp, const struct lp_proc_mapping *m,
		      const struct lp_ggml_obj *o, struct table_entry *v, size_t n, size_t cap)
{
	if (o->omp_runtime) {
		if (n < cap)
			v[n++] = (struct table_entry){{m->start, m->end}, LP_K_RUNTIME, 0};
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
static void make_op_samples(struct lp_ggml *g, struct lp_target *t)
{
	struct lp_op_samples *zero;
	__u32 key = (__u32)t->pid;

	if (t->ggml->op_samples_made || !(zero = calloc(1, sizeof(*zero))))
		return;
	if (bpf_map_update_elem(bpf_map__fd(g->core->skel->maps.op_samples), &key, zero,
				BPF_NOEXIST) == 0 ||
	    errno == EEXIST)
		t->ggml->op_samples_made = true;
	else
		log_warning_errno(-errno, "pid %d: no room for its op counts: %m", (int)t->pid);
	free(zero);
}

/* Whether a mapped object's rows are to be read for a process that walks through it: a
 * plain object when first walked; an object with ops again after its rows were given back
 * (unwind_gc). */
static bool rows_wanted(const struct lp_ggml *g, const struct lp_ggml_obj *o)
{
	return g->unwind.outer_fd >= 0 && (!lp_ggml_obj_unwinds(o) || o->uw_error == -ENODATA) &&
	       !o->uw_tried && !o->stale;
}

/* Starts reading the rows the sampling table's unwind entries need (up to LP_MAX_UNWIND
 * entries, as add_unwind_entries takes them, from *k on), and the llama_decode probes of
 * the objects that have them: returns how many objects pid now waits for. */
static size_t start_reads(struct lp_ggml *g, pid_t pid, const struct scan_entry *v, size_t n,
			  size_t *k, bool probes)
{
	size_t waiting = 0;

	for (size_t i = 0; i < n; i++) {
		struct lp_ggml_obj *o = v[i].o;
		bool rows = *k < LP_MAX_UNWIND && rows_wanted(g, o);
		/* Once per process: its path to the file may not be the one that works. */
		bool decode = probes && !o->decode_tried && o->decode_pid != pid &&
			      lp_ggml_obj_has(o, LP_SYM_DECODE);
		int fd = -1;

		if (o->busy) {
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

/* Appends the mappings of v that have rows to the sampling table's unwind entries (up to
 * LP_MAX_UNWIND). */
static void add_unwind_entries(struct lp_ggml_proc *gp, struct lp_ranges *rg,
			       const struct scan_entry *v, size_t n)
{
	for (size_t i = 0; i < n && rg->nuw < LP_MAX_UNWIND; i++) {
		struct lp_ggml_obj *o = v[i].o;

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
			.plain = !lp_ggml_obj_unwinds(o),
		};
	}
}

/* The sampling table: op, kernel and barrier functions and OpenMP runtimes at their
 * addresses in this process, sorted and disjoint (an inner symbol cuts the one it lies
 * in short). Entries past LP_MAX_RANGES are dropped, and said so. */
static void write_ranges(struct lp_ggml *g, struct lp_target *t, const struct proc_scan *s)
{
	struct lp_ggml_proc *gp = t->ggml;
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
	/* The mappings the sampler can walk frames in: the objects with ops, then the others
	 * (once the process runs ggml), their rows read now if they were not. */
	memset(gp->uw_objs, 0, sizeof(gp->uw_objs));
	add_unwind_entries(gp, rg, s->v, s->n);
	if (s->llm || gp->found_ns)
		add_unwind_entries(gp, rg, s->plain, s->nplain);
	/* by start, for the sampler's binary search; uw_objs in the same order */
	for (size_t i = 1; i < rg->nuw; i++)
		for (size_t k = i; k > 0 && rg->uw[k - 1].start > rg->uw[k].start; k--) {
			struct lp_unwind_obj x = rg->uw[k];
			struct lp_ggml_obj *y = gp->uw_objs[k];

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

/* llama_decode entry and return, for every process that maps this file. */
static void attach_decode(struct lp_ggml *g, pid_t pid, struct lp_ggml_obj *o)
{
	struct core_bpf *s = g->core->skel;
	char path[PATH_MAX + 64];
	int r = 0;

	if (o->decode_tried || !lp_ggml_obj_has(o, LP_SYM_DECODE))
		return;
	r = lp_uprobe_path(pid, o->path, o->dev, o->ino, path, sizeof(path));
	if (r < 0)
		return; /* the process is gone: try again with the next one mapping it */
	o->decode_tried = true;
	for (size_t i = 0; i < o->syms.nsyms && r == 0; i++) {
		const struct lp_elf_sym *sym = &o->syms.syms[i];

		if (sym->cls != LP_SYM_DECODE)
			continue;
		/* The batch's reader, where the kernel loaded it (bpf_loop), then entry and
		 * return. */
		for (int k = bpf_program__fd(s->progs.lp_decode_batch) < 0; k < 3 && r == 0; k++) {
			static const bool ret_of[] = {false, false, true};
			struct bpf_program *p = k == 0	 ? s->progs.lp_decode_batch
						: k == 1 ? s->progs.lp_decode_enter
							 : s->progs.lp_decode_exit;
			struct bpf_link *l = bpf_program__attach_uprobe(p, ret_of[k], -1, path,
									lp_uprobe_offset(sym));

			r = l ? lp_links_push(&o->decode.links, &o->decode.nlinks, l) : -errno;
			o->decode.n += l != NULL;
		}
	}
	if (r < 0) {
		o->decode_error = r;
		lp_prober_release(g->prober, &o->decode, NULL);
		log_warning_errno(r,
				  "attach llama_decode probes in %s: %m; tokens will not be "
				  "counted for it",
				  o->path);
	}
}

static void attach_new_objects(struct lp_target *t, const struct proc_scan *s)
{
	struct lp_ggml_proc *gp = t->ggml;
	struct lp_ggml_obj **v;
	size_t n = 0;

	for (size_t i = 0; i < s->n; i++) {
		/* Its decodes count from now: the process is in procs and the probes are on
		 * (attached just now, or for another process mapping the same file). */
		if (!gp->decode_since_ns && s->v[i].o->decode.n && !s->v[i].o->decode_error)
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

static void log_found(const struct lp_ggml *g, const struct lp_target *t)
{
	const struct lp_ggml_proc *gp = t->ggml;
	struct lp_line found = {.len = 0}, missing = {.len = 0};

	for (size_t i = 0; i < gp->nobjs; i++)
		if (lp_ggml_obj_has(gp->objs[i], LP_SYM_MATMUL))
			lp_line_add(&found, "%s%s", found.len ? ", " : "", gp->objs[i]->path);
	for (int c = 0; c < LP_SYM_NR; c++)
		for (const char *const *p = g->cfg->symbols[c]; p && *p; p++)
			if (!lp_ggml_proc_has(gp, *p))
				lp_line_add(&missing, "%s%s", missing.len ? ", " : "", *p);
	log_info("pid %d (%s) runs ggml: matmul in %s; %zu functions in the sampling table; "
		 "not found (stripped, inlined or not in this build): %s",
		 (int)t->pid, t->comm, found.buf, gp->nranges, missing.len ? missing.buf : "none");
}

/* The scan as the process's ggml state: its objects, and whether it runs an LLM (said once,
 * at found_ns). live: it still runs, and gets its sampling table and what is built on it
 * (precise mode); else it is gone and its entry with it. */
static void take_scan(struct lp_ggml *g, struct lp_target *t, const struct proc_scan *s, bool live)
{
	bool first = !t->ggml || !t->ggml->found_ns;

	if (!t->ggml && (t->ggml = calloc(1, sizeof(*t->ggml))))
		lp_tensor_state_init(&t->ggml->tensors);
	if (!t->ggml)
		return;
	attach_new_objects(t, s);
	if (live)
		write_ranges(g, t, s);
	if (s->llm && first) {
		t->ggml->found_ns = lp_now_ns();
		log_found(g, t);
		if (live && g->hooks.found)
			g->hooks.found(g, t, t->ggml->found_ns);
	}
	if (live && t->ggml->precise_on && g->hooks.mapped)
		g->hooks.mapped(g, t);
}

void lp_ggml_futex_ready(void *arg)
{
	struct lp_ggml *g = arg;

	pids_wake(g, &g->futex_waiters, true); /* they waited because they run ggml */
}

/* Brings a process's ggml state up to date with its mappings; tracks it if it runs ggml.
 * What needs the kernel's time (reading a new object, the rows of one it walks through, its
 * probes, the futex programs) is on its way meanwhile, off the loop: the process is brought
 * up to date again once that is done, and its sampling table is written only from a whole
 * scan, as it was when all of that ran here. */
static int sync_proc(struct lp_ggml *g, pid_t pid, const struct lp_obj_key *want, bool *saw_key)
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
	if (t && (s.n || t->ggml)) {
		size_t k = 0, n;

		/* The rows its walks need and its objects' probes first. */
		n = start_reads(g, pid, s.v, s.n, &k, true);
		if (s.llm || (t->ggml && t->ggml->found_ns))
			n += start_reads(g, pid, s.plain, s.nplain, &k, false);
		if ((wait = n > 0))
			goto out;
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
static void late_sync(struct lp_ggml *g, pid_t pid)
{
	struct lp_target *t = lp_tracker_find(g->tr, pid);
	const struct lp_ggml_stash *st = NULL;
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
	if (!s.busy && (s.n || t->ggml))
		take_scan(g, t, &s, false);
	if (!s.busy) /* else it waits again */
		stash_drop(g, pid);
	proc_scan_free(&s);
}

int lp_ggml_scan_all(struct lp_ggml *g)
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

void lp_ggml_check(struct lp_ggml *g, struct lp_target *t)
{
	sync_proc(g, t->pid, NULL, NULL);
}

void lp_ggml_event(struct lp_ggml *g, const struct lp_ev_map *e)
{
	struct lp_ggml_pending *v;

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
	v[g->npending++] = (struct lp_ggml_pending){.pid = (pid_t)e->tgid, .key = e->obj};
}

void lp_ggml_decode_event(struct lp_ggml *g, const struct lp_ev_decode *e)
{
	struct lp_target *t = lp_tracker_find(g->tr, (pid_t)e->tgid);

	if (!t || t->exited)
		return;
	if (!t->requests && !(t->requests = calloc(1, sizeof(*t->requests))))
		return;
	lp_requests_decode(t->requests, e);
}

bool lp_ggml_process_pending(struct lp_ggml *g)
{
	size_t k = 0;

	for (size_t i = 0; i < g->npending; i++) {
		struct lp_ggml_pending *p = &g->pending[i];
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
			struct lp_ggml_obj *o = obj_find(g, p->key.dev, p->key.ino);

			if (o && lp_ggml_obj_has(o, LP_SYM_MATMUL))
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

/* --- lifecycle --- */

void lp_ggml_on_exit(struct lp_ggml *g, struct lp_target *t)
{
	__u32 key = (__u32)t->pid;

	if (g->hooks.exited)
		g->hooks.exited(g, t);
	unwind_gc(g, t, lp_now_ns());
	if (t->ggml) {
		lp_sampler_stop(&t->ggml->sampler);
		/* The exit hook leaves the op counts for this last read. */
		if (!t->ggml->final_ops)
			t->ggml->final_ops = lp_ggml_op_samples(g->core, t->ggml, t->pid);
	}
	bpf_map_delete_elem(bpf_map__fd(g->core->skel->maps.op_samples), &key);
	/* The exit hook deletes these; an exit it missed (lp_tracker_find_missed_exits) leaves them. */
	bpf_map_delete_elem(bpf_map__fd(g->core->skel->maps.ranges), &key);
}

void lp_ggml_tick(struct lp_ggml *g)
{
	unwind_gc(g, NULL, lp_now_ns());
}

/* Zeroes the op counts, all but the decodes in flight; samples counted between the read
 * and the write are lost, as with the process counters. */
static void reset_op_samples(struct lp_ggml *g, struct lp_target *t)
{
	int fd = bpf_map__fd(g->core->skel->maps.op_samples);
	struct lp_op_samples *os = t->ggml->final_ops;
	__u32 key = (__u32)t->pid;
	__s32 depth;

	if (os) {
		memset(os, 0, sizeof(*os));
		return;
	}
	if (!t->ggml->op_samples_made || !(os = malloc(sizeof(*os))))
		return;
	if (bpf_map_lookup_elem(fd, &key, os) == 0) {
		depth = os->gen_depth;
		memset(os, 0, sizeof(*os));
		os->gen_depth = depth;
		bpf_map_update_elem(fd, &key, os, BPF_EXIST);
	}
	free(os);
}

void lp_ggml_reset(struct lp_ggml *g, struct lp_target *t)
{
	struct lp_ggml_proc *gp = t->ggml;

	if (!gp)
		return;
	reset_op_samples(g, t);
	gp->oncpu_at_table_ns = 0;
	if (g->hooks.reset)
		g->hooks.reset(g, t);
}
