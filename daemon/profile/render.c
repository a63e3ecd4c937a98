// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* A profile window's stacks named, as pprof and as folded stacks (render.h). */
#include "profile/render.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "base/protobuf.h"
#include "engine/engine.h"
#include "engine/ops.h"
#include "escape.h"
#include "tracked/identity.h"

/* Keys (a, b) to values, open addressing; a value of 0 is none. */
struct map2 {
	struct slot {
		uint64_t a, b;
		uint32_t v;
	} * s;
	size_t cap, n;
};

static uint64_t mix(uint64_t a, uint64_t b)
{
	uint64_t h = a * 0x9e3779b97f4a7c15ULL ^ (b + 0x632be59bd9b4e019ULL + (a << 6) + (a >> 2));

	h ^= h >> 31;
	h *= 0xbf58476d1ce4e5b9ULL;
	return h ^ (h >> 29);
}

static uint32_t map2_get(const struct map2 *m, uint64_t a, uint64_t b)
{
	if (!m->cap)
		return 0;
	for (size_t k = mix(a, b) & (m->cap - 1); m->s[k].v; k = (k + 1) & (m->cap - 1))
		if (m->s[k].a == a && m->s[k].b == b)
			return m->s[k].v;
	return 0;
}

static int map2_put(struct map2 *m, uint64_t a, uint64_t b, uint32_t v)
{
	size_t k;

	if ((m->n + 1) * 2 > m->cap) {
		size_t cap = m->cap ? 2 * m->cap : 1024;
		struct slot *s = calloc(cap, sizeof(*s));

		if (!s)
			return -ENOMEM;
		for (size_t i = 0; i < m->cap; i++) {
			if (!m->s[i].v)
				continue;
			for (k = mix(m->s[i].a, m->s[i].b) & (cap - 1); s[k].v;
			     k = (k + 1) & (cap - 1))
				;
			s[k] = m->s[i];
		}
		free(m->s);
		m->s = s;
		m->cap = cap;
	}
	for (k = mix(a, b) & (m->cap - 1); m->s[k].v; k = (k + 1) & (m->cap - 1))
		;
	m->s[k] = (struct slot){a, b, v};
	m->n++;
	return 0;
}

/* Strings, each once: pprof's string table (0 is ""). */
struct strtab {
	char **v;
	size_t n;
	uint32_t *slot; /* index + 1, open addressing by the string's hash */
	size_t cap;
};

static uint64_t str_hash(const char *s)
{
	uint64_t h = 1469598103934665603ULL;

	for (; *s; s++)
		h = (h ^ (unsigned char)*s) * 1099511628211ULL;
	return h;
}

static int str_grow(struct strtab *t)
{
	size_t cap = t->cap ? 2 * t->cap : 4096, k;
	uint32_t *slot = calloc(cap, sizeof(*slot));

	if (!slot)
		return -ENOMEM;
	for (size_t i = 0; i < t->n; i++) {
		for (k = str_hash(t->v[i]) & (cap - 1); slot[k]; k = (k + 1) & (cap - 1))
			;
		slot[k] = (uint32_t)i + 1;
	}
	free(t->slot);
	t->slot = slot;
	t->cap = cap;
	return 0;
}

/* s's index, added if new; -ENOMEM. */
static int64_t str_intern(struct strtab *t, const char *s)
{
	size_t k;
	char **v, *c;

	if ((t->n + 1) * 2 > t->cap && str_grow(t) < 0)
		return -ENOMEM;
	for (k = str_hash(s) & (t->cap - 1); t->slot[k]; k = (k + 1) & (t->cap - 1))
		if (!strcmp(t->v[t->slot[k] - 1], s))
			return t->slot[k] - 1;
	v = realloc(t->v, (t->n + 1) * sizeof(*v));
	if (!v)
		return -ENOMEM;
	t->v = v;
	if (!(c = strdup(s)))
		return -ENOMEM;
	t->v[t->n] = c;
	t->slot[k] = (uint32_t)++t->n;
	return (int64_t)t->n - 1;
}

static void str_free(struct strtab *t)
{
	for (size_t i = 0; i < t->n; i++)
		free(t->v[i]);
	free(t->v);
	free(t->slot);
	memset(t, 0, sizeof(*t));
}

/* What a profile names: pprof's tables, ids from 1. */
struct model {
	struct strtab str;
	struct mapping {
		uint64_t start, limit, offset;
		uint32_t file, build_id;
	} * maps;
	size_t nmaps;
	uint32_t *fn_name; /* function id - 1 -> its name's string */
	/* function id - 1 -> its file's string and first line (Python's; 0 for native) */
	uint32_t *fn_file, *fn_start;
	size_t nfn;
	struct map2 fn_by; /* (name string, file string) -> function id */
	struct location {
		uint64_t mapping, address;
		uint32_t fn;
		uint32_t line; /* a Python frame's; 0: none */
		bool kernel;
	} * locs;
	size_t nlocs;
	struct map2 loc_by;  /* (mapping id, address) -> location id */
	struct map2 name_by; /* (object, function offset) -> its name's string + 1 */
	/* (name string, 0) -> the symbol as the object has it, + 1, where demangling changed
	 * it: pprof's system_name. pprof takes a function whose name is its system name for
	 * one not demangled yet and, for one that looks like demangled C++, cuts every "(...)"
	 * and "<...>" from it: "(anonymous namespace)::f<4>" became "::f". */
	struct map2 sys_by;
	bool kernel_used; /* a kernel frame was met: the kernel's mapping comes last */
	int err;
};

/* The kernel's mapping, until the tables are written. */
#define KERNEL_MAP UINT32_MAX

static uint32_t intern(struct model *m, const char *s)
{
	int64_t i = m->err ? 0 : str_intern(&m->str, s);

	if (i < 0) {
		m->err = (int)i;
		return 0;
	}
	return (uint32_t)i;
}

/* A name another user chose (a symbol, a file, a comm), escaped once. */
static uint32_t intern_untrusted(struct model *m, const char *s)
{
	size_t len = strnlen(s, LP_SYMTAB_NAME_MAX);
	char *e = malloc(LP_ESCAPE_SIZE(len));
	uint32_t i;

	if (!e) {
		m->err = -ENOMEM;
		return 0;
	}
	lp_escape(e, LP_ESCAPE_SIZE(len), s, len);
	i = intern(m, e);
	free(e);
	return i;
}

static uint32_t function_in(struct model *m, uint32_t name, uint32_t file, uint32_t start)
{
	uint32_t id = map2_get(&m->fn_by, name, file), *v, *f, *st;

	if (id || m->err)
		return id;
	v = realloc(m->fn_name, (m->nfn + 1) * sizeof(*v));
	if (v)
		m->fn_name = v;
	f = realloc(m->fn_file, (m->nfn + 1) * sizeof(*f));
	if (f)
		m->fn_file = f;
	st = realloc(m->fn_start, (m->nfn + 1) * sizeof(*st));
	if (st)
		m->fn_start = st;
	if (!v || !f || !st || map2_put(&m->fn_by, name, file, (uint32_t)m->nfn + 1) < 0) {
		m->err = -ENOMEM;
		return 0;
	}
	v[m->nfn] = name;
	f[m->nfn] = file;
	st[m->nfn++] = start;
	return (uint32_t)m->nfn;
}

static uint32_t function(struct model *m, uint32_t name)
{
	return function_in(m, name, 0, 0);
}

/* Python's frames: a mapping of no file, their location ids the addresses */
#define PYTHON_MAP (UINT32_MAX - 1)

static uint32_t location_at(struct model *m, uint32_t mapping, uint64_t address, uint32_t fn,
			    uint32_t line, bool kernel)
{
	uint32_t id = map2_get(&m->loc_by, mapping, address);
	struct location *v;

	if (id || m->err)
		return id;
	if (!(v = realloc(m->locs, (m->nlocs + 1) * sizeof(*v))) ||
	    map2_put(&m->loc_by, mapping, address, (uint32_t)m->nlocs + 1) < 0) {
		if (v)
			m->locs = v;
		m->err = -ENOMEM;
		return 0;
	}
	m->locs = v;
	v[m->nlocs++] = (struct location){mapping, address, fn, line, kernel};
	return (uint32_t)m->nlocs;
}

static uint32_t location(struct model *m, uint32_t mapping, uint64_t address, uint32_t name,
			 bool kernel)
{
	uint32_t id = map2_get(&m->loc_by, mapping, address);
	struct location *v;

	if (id || m->err)
		return id;
	if (!(v = realloc(m->locs, (m->nlocs + 1) * sizeof(*v))) ||
	    map2_put(&m->loc_by, mapping, address, (uint32_t)m->nlocs + 1) < 0) {
		if (v)
			m->locs = v;
		m->err = -ENOMEM;
		return 0;
	}
	m->locs = v;
	v[m->nlocs++] = (struct location){mapping, address, function(m, name), 0, kernel};
	return (uint32_t)m->nlocs;
}

static uint32_t add_mapping(struct model *m, uint64_t start, uint64_t limit, uint64_t offset,
			    uint32_t file, uint32_t build_id)
{
	struct mapping *v = realloc(m->maps, (m->nmaps + 1) * sizeof(*v));

	if (!v) {
		m->err = -ENOMEM;
		return 0;
	}
	m->maps = v;
	v[m->nmaps++] = (struct mapping){start, limit, offset, file, build_id};
	return (uint32_t)m->nmaps;
}

static void model_free(struct model *m)
{
	str_free(&m->str);
	free(m->maps);
	free(m->fn_name);
	free(m->fn_file);
	free(m->fn_start);
	free(m->fn_by.s);
	free(m->locs);
	free(m->loc_by.s);
	free(m->name_by.s);
	free(m->sys_by.s);
}

/* A process of the window as the profile names it: its mappings' ids and objects, its
 * labels. */
struct proc {
	const struct lp_profile_proc *pp;
	uint32_t *map_id;	       /* per mapping, 0 until used */
	const struct lp_sym_obj **obj; /* per mapping, looked up once */
	bool *obj_done;
	uint32_t pid, comm, workload, model, engine; /* strings */
	char comm_folded[64];			     /* for folded lines */
	const struct lp_target *t;
};

const char *lp_profile_group(const struct lp_target *t, int op, int region)
{
	const struct lp_eproc *gp = t ? t->eng : NULL;

	if (region == LP_R_BARRIER)
		return lp_op_group_key(LP_G_SYNC);
	if (op < 0 || !gp || (size_t)op >= gp->ops.n)
		return op < 0 ? lp_op_group_key(LP_G_OUTSIDE) : lp_op_group_key(LP_G_OTHER);
	return lp_op_group_key((int)gp->ops.v[op].group);
}

static const char *const phase_names[LP_PHASE_NR] = {"outside", "prompt", "generation"};

static const char *basename_of(const char *path)
{
	const char *s = strrchr(path, '/');

	return s && s[1] ? s + 1 : path;
}

/* The name of a user frame at addr of process p: its function's, else object+0xoffset. */
static uint32_t user_name(struct model *m, struct lp_symbols *syms, struct proc *p, size_t mi,
			  uint64_t addr)
{
	const struct lp_proc_mapping *mp = &p->pp->maps[mi];
	uint64_t off = addr - mp->start + mp->pgoff;
	const struct lp_symtab_fn *f;
	const struct lp_sym_obj *o;
	char buf[PATH_MAX + 32];
	uint32_t name;
	char *d;

	if (!p->obj_done[mi]) {
		p->obj[mi] = lp_symbols_object(syms, (pid_t)p->pp->pid, mp);
		p->obj_done[mi] = true;
	}
	o = p->obj[mi];
	f = o && !o->error ? lp_symtab_find(&o->tab, off) : NULL;
	if (!f) {
		snprintf(buf, sizeof(buf), "%s+0x%llx", basename_of(mp->path),
			 (unsigned long long)off);
		return intern_untrusted(m, buf);
	}
	if ((name = map2_get(&m->name_by, (uintptr_t)o, f->off)))
		return name - 1;
	if (!(d = lp_demangle(lp_symtab_name(&o->tab, f)))) {
		m->err = -ENOMEM;
		return 0;
	}
	name = intern_untrusted(m, d);
	if (strcmp(d, lp_symtab_name(&o->tab, f)) && !map2_get(&m->sys_by, name, 0) &&
	    map2_put(&m->sys_by, name, 0, intern_untrusted(m, lp_symtab_name(&o->tab, f)) + 1) < 0)
		m->err = -ENOMEM;
	free(d);
	if (map2_put(&m->name_by, (uintptr_t)o, f->off, name + 1) < 0)
		m->err = -ENOMEM;
	return name;
}

static uint32_t user_location(struct model *m, struct lp_symbols *syms, struct proc *p,
			      uint64_t addr)
{
	const struct lp_profile_proc *pp = p->pp;
	char build_id[2 * LP_BUILD_ID_MAX + 1] = "";

	for (size_t i = 0; i < pp->nmaps; i++) {
		const struct lp_proc_mapping *mp = &pp->maps[i];

		if (addr < mp->start || addr >= mp->end)
			continue;
		if (!p->map_id[i]) {
			if (!p->obj_done[i]) {
				p->obj[i] = lp_symbols_object(syms, (pid_t)pp->pid, mp);
				p->obj_done[i] = true;
			}
			if (p->obj[i])
				snprintf(build_id, sizeof(build_id), "%s", p->obj[i]->build_id);
			p->map_id[i] =
				add_mapping(m, mp->start, mp->end, mp->pgoff,
					    intern_untrusted(m, mp->path), intern(m, build_id));
		}
		return location(m, p->map_id[i], addr, user_name(m, syms, p, i, addr), false);
	}
	/* In no file: JIT code, an anonymous mapping. */
	return location(m, 0, addr, intern(m, "[unknown]"), false);
}

static uint32_t kernel_location(struct model *m, struct lp_symbols *syms, uint64_t addr)
{
	const char *name = lp_symbols_kernel(syms, addr);
	char buf[64];

	/* The kernel's mapping comes last (KERNEL_MAP until then): pprof takes the first
	 * mapping for the main binary. */
	m->kernel_used = true;
	if (!name) {
		snprintf(buf, sizeof(buf), "[kernel.kallsyms]+0x%llx", (unsigned long long)addr);
		name = buf;
	}
	return location(m, KERNEL_MAP, addr, intern_untrusted(m, name), true);
}

/* The window's processes, each with its target's labels. */
static struct proc *procs_of(struct model *m, const struct lp_profile_render *in)
{
	const struct lp_profile_window *w = in->w;
	struct proc *v = calloc(w->nprocs ? w->nprocs : 1, sizeof(*v));
	char num[16], workload[160];

	if (!v)
		return NULL;
	for (size_t i = 0; i < w->nprocs; i++) {
		struct proc *p = &v[i];
		const struct lp_target *t = lp_tracker_find(in->tr, w->procs[i].pid);

		p->pp = &w->procs[i];
		p->t = t;
		p->map_id = calloc(p->pp->nmaps + 1, sizeof(*p->map_id));
		p->obj = calloc(p->pp->nmaps + 1, sizeof(*p->obj));
		p->obj_done = calloc(p->pp->nmaps + 1, sizeof(*p->obj_done));
		if (!p->map_id || !p->obj || !p->obj_done)
			m->err = -ENOMEM;
		snprintf(num, sizeof(num), "%d", (int)p->pp->pid);
		p->pid = intern(m, num);
		p->comm = intern_untrusted(m, t ? t->comm : "");
		snprintf(p->comm_folded, sizeof(p->comm_folded), "%s",
			 m->err ? "" : m->str.v[p->comm]);
		if (t)
			lp_identity_workload(&t->ident, t->comm, workload, sizeof(workload));
		else
			workload[0] = '\0';
		p->workload = intern_untrusted(m, workload);
		p->model = intern_untrusted(m, t ? lp_identity_model_name(&t->ident) : "");
		p->engine = intern(
			m, t && t->eng && t->eng->found_ns ? lp_engine_name(t->eng->engine) : "");
	}
	return v;
}

static void procs_free(struct proc *v, size_t n)
{
	for (size_t i = 0; v && i < n; i++) {
		free(v[i].map_id);
		free(v[i].obj);
		free(v[i].obj_done);
	}
	free(v);
}

static struct proc *proc_of(struct proc *v, size_t n, uint32_t tgid)
{
	for (size_t i = 0; i < n; i++)
		if (v[i].pp->pid == (pid_t)tgid)
			return &v[i];
	return NULL;
}

/* A stack's locations, leaf first: its kernel frames, then its user frames (a caller's
 * return address less one: the call it made). */
/* A Python frame's location: its function (module.qualname, file, first line) and line. */
static uint32_t python_location(struct model *m, const struct lp_pylocs *py, uint64_t tagged)
{
	uint32_t id = (uint32_t)(tagged & ~LP_PYLOC_TAG);
	const struct lp_pyloc *l = py ? lp_pylocs_at(py, id) : NULL;

	if (!l)
		return location(m, 0, tagged, intern(m, "[python]"), false);
	return location_at(m, PYTHON_MAP, id,
			   function_in(m, intern_untrusted(m, l->name),
				       intern_untrusted(m, l->file), l->firstline),
			   l->line, false);
}

static size_t locations_of(struct model *m, struct lp_symbols *syms, const struct lp_pylocs *py,
			   struct proc *p, const struct lp_profile_stack *s, uint32_t *loc)
{
	size_t n = 0;

	for (size_t i = 0; i < s->nkernel; i++)
		loc[n++] = kernel_location(m, syms, s->ip[i]);
	for (size_t i = 0; i < s->nuser; i++) {
		uint64_t ip = s->ip[s->nkernel + i];

		if (!ip)
			continue;
		if (ip & LP_PYLOC_TAG)
			loc[n++] = python_location(m, py, ip);
		else
			loc[n++] = p ? user_location(m, syms, p, i ? ip - 1 : ip)
				     : location(m, 0, ip, intern(m, "[unknown]"), false);
	}
	return n;
}

/* ---- pprof ---- */

static void pb_message(struct lp_pb *b, unsigned field, struct lp_pb *sub)
{
	lp_pb_bytes(b, field, sub->p, sub->len);
	if (sub->err)
		b->err = sub->err;
	sub->len = 0;
}

static void pb_packed(struct lp_pb *b, unsigned field, const uint64_t *v, size_t n)
{
	struct lp_pb p = {0};

	for (size_t i = 0; i < n; i++)
		lp_pb_varint(&p, v[i]);
	pb_message(b, field, &p);
	lp_pb_free(&p);
}

static void value_type(struct lp_pb *b, unsigned field, struct model *m, const char *type,
		       const char *unit)
{
	struct lp_pb v = {0};

	lp_pb_uint(&v, 1, intern(m, type));
	lp_pb_uint(&v, 2, intern(m, unit));
	pb_message(b, field, &v);
	lp_pb_free(&v);
}

static void label(struct lp_pb *b, struct model *m, const char *key, uint32_t str)
{
	struct lp_pb l = {0};

	/* An empty value is no label: a scraper would make a series of it. */
	if (!str)
		return;

	lp_pb_uint(&l, 1, intern(m, key));
	lp_pb_uint(&l, 2, str);
	pb_message(b, 3, &l);
	lp_pb_free(&l);
}

static void comment(struct lp_pb *b, struct model *m, const char *text)
{
	lp_pb_uint(b, 13, intern(m, text));
}

static int gzip_body(const struct lp_pb *in, uint8_t **out, size_t *len)
{
	z_stream z = {0};
	size_t cap = deflateBound(&z, in->len) + 64;
	uint8_t *buf;

	if (deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
		return -ENOMEM;
	cap = deflateBound(&z, in->len) + 64;
	if (!(buf = malloc(cap))) {
		deflateEnd(&z);
		return -ENOMEM;
	}
	z.next_in = in->p;
	z.avail_in = (uInt)in->len;
	z.next_out = buf;
	z.avail_out = (uInt)cap;
	if (deflate(&z, Z_FINISH) != Z_STREAM_END) {
		deflateEnd(&z);
		free(buf);
		return -ENOMEM;
	}
	*len = z.total_out;
	*out = buf;
	deflateEnd(&z);
	return 0;
}

static int pprof(const struct lp_profile_render *in, uint8_t **out, size_t *len)
{
	const struct lp_profile_window *w = in->w;
	uint64_t period = in->hz ? 1000000000ULL / in->hz : 0;
	struct model m = {0};
	struct lp_pb b = {0}, s = {0};
	struct proc *pv;
	uint32_t loc[LP_PROFILE_FRAMES_MAX];
	uint64_t ids[LP_PROFILE_FRAMES_MAX], val[2];
	char text[256];
	int r;

	intern(&m, "");
	pv = procs_of(&m, in);
	if (!pv)
		return -ENOMEM;
	value_type(&b, 1, &m, "samples", "count");
	value_type(&b, 1, &m, "cpu", "nanoseconds");
	for (size_t i = 0; i < w->cap && !m.err; i++) {
		const struct lp_profile_stack *st = w->tab[i];
		struct proc *p;
		size_t n;

		if (!st)
			continue;
		p = proc_of(pv, w->nprocs, st->tgid);
		n = locations_of(&m, in->syms, in->py, p, st, loc);
		for (size_t k = 0; k < n; k++)
			ids[k] = loc[k];
		pb_packed(&s, 1, ids, n);
		val[0] = st->count;
		val[1] = st->count * period;
		pb_packed(&s, 2, val, 2);
		if (p) {
			label(&s, &m, "pid", p->pid);
			label(&s, &m, "comm", p->comm);
			label(&s, &m, "workload", p->workload);
			label(&s, &m, "model", p->model);
			label(&s, &m, "engine", p->engine);
		}
		label(&s, &m, "op_group",
		      intern(&m, lp_profile_group(p ? p->t : NULL, st->op, st->region)));
		/* "op" for every engine; "ggml_op", the same, kept for ggml's processes (the
		 * label profiles had before there were other engines) */
		if (st->op >= 0 && st->region != LP_R_BARRIER && p && p->t && p->t->eng &&
		    (size_t)st->op < p->t->eng->ops.n) {
			uint32_t op = intern(&m, p->t->eng->ops.v[st->op].name);

			label(&s, &m, "op", op);
			if (p->t->eng->engine == LP_ENGINE_GGML)
				label(&s, &m, "ggml_op", op);
		}
		label(&s, &m, "phase", intern(&m, phase_names[st->phase % LP_PHASE_NR]));
		pb_message(&b, 2, &s);
	}
	if (m.kernel_used)
		add_mapping(&m, 0xffff800000000000ULL, ~0ULL, 0, intern(&m, "[kernel.kallsyms]"),
			    intern(&m, ""));
	for (size_t i = 0; i < m.nmaps; i++) {
		lp_pb_uint(&s, 1, i + 1);
		lp_pb_uint(&s, 2, m.maps[i].start);
		lp_pb_uint(&s, 3, m.maps[i].limit);
		lp_pb_uint(&s, 4, m.maps[i].offset);
		lp_pb_uint(&s, 5, m.maps[i].file);
		lp_pb_uint(&s, 6, m.maps[i].build_id);
		lp_pb_uint(&s, 7, 1); /* has_functions */
		pb_message(&b, 3, &s);
	}
	for (size_t i = 0; i < m.nlocs; i++) {
		struct lp_pb line = {0};

		lp_pb_uint(&s, 1, i + 1);
		if (m.locs[i].mapping && m.locs[i].mapping != PYTHON_MAP)
			lp_pb_uint(&s, 2,
				   m.locs[i].mapping == KERNEL_MAP ? m.nmaps : m.locs[i].mapping);
		lp_pb_uint(&s, 3, m.locs[i].address);
		lp_pb_uint(&line, 1, m.locs[i].fn);
		if (m.locs[i].line)
			lp_pb_uint(&line, 2, m.locs[i].line);
		pb_message(&s, 4, &line);
		lp_pb_free(&line);
		pb_message(&b, 4, &s);
	}
	for (size_t i = 0; i < m.nfn; i++) {
		lp_pb_uint(&s, 1, i + 1);
		uint32_t sys = map2_get(&m.sys_by, m.fn_name[i], 0);

		lp_pb_uint(&s, 2, m.fn_name[i]);
		lp_pb_uint(&s, 3, sys ? sys - 1 : m.fn_name[i]);
		if (m.fn_file[i])
			lp_pb_uint(&s, 4, m.fn_file[i]);
		if (m.fn_start[i])
			lp_pb_uint(&s, 5, m.fn_start[i]);
		pb_message(&b, 5, &s);
	}
	lp_pb_uint(&b, 9, w->start_real_ns);
	lp_pb_uint(&b, 10, in->duration_ns);
	value_type(&b, 11, &m, "cpu", "nanoseconds");
	lp_pb_uint(&b, 12, period);
	snprintf(text, sizeof(text),
		 "llmprofd: %llu samples in %zu stacks over %.1f s, %u Hz per CPU (cpu-clock)",
		 (unsigned long long)w->samples, w->n, (double)in->duration_ns / 1e9, in->hz);
	comment(&b, &m, text);
	if (w->lost_table) {
		snprintf(text, sizeof(text),
			 "llmprofd: %llu samples lost: their stacks were new past the memory bound "
			 "(--profile-memory-mib %u)",
			 (unsigned long long)w->lost_table, in->max_mib);
		comment(&b, &m, text);
	}
	if (in->lost_ring) {
		snprintf(text, sizeof(text),
			 "llmprofd: %llu samples lost: the stack ring buffer was full "
			 "(--profile-ringbuf-kib)",
			 (unsigned long long)in->lost_ring);
		comment(&b, &m, text);
	}
	if (in->skipped || in->skipped_unknown) {
		snprintf(text, sizeof(text),
			 "llmprofd: %llu more samples the kernel did not take while these "
			 "processes ran (another BPF program on the CPU, a timer a period late), "
			 "and %llu on CPUs whose process is not known: missing from the stacks",
			 (unsigned long long)in->skipped, (unsigned long long)in->skipped_unknown);
		comment(&b, &m, text);
	}
	if (w->fp) {
		snprintf(text, sizeof(text),
			 "llmprofd: %llu samples have frames found by frame pointers (code without "
			 ".eh_frame rows): their callers there may be wrong",
			 (unsigned long long)w->fp);
		comment(&b, &m, text);
	}
	if (w->samples - w->complete) {
		snprintf(text, sizeof(text),
			 "llmprofd: %llu samples' stacks stop short of the thread's start%s",
			 (unsigned long long)(w->samples - w->complete),
			 w->truncated ? " (some cut at 128 frames)" : "");
		comment(&b, &m, text);
	}
	lp_pb_uint(&b, 14, intern(&m, "cpu"));
	/* The strings last: every table above has interned its own. */
	for (size_t i = 0; i < m.str.n; i++)
		lp_pb_bytes(&b, 6, m.str.v[i], strlen(m.str.v[i]));
	r = m.err ? m.err : b.err ? b.err : gzip_body(&b, out, len);
	lp_pb_free(&b);
	lp_pb_free(&s);
	procs_free(pv, w->nprocs);
	model_free(&m);
	return r;
}

/* ---- folded ---- */

struct line {
	char *text;
	uint64_t count;
};

static int by_text(const void *a, const void *b)
{
	return strcmp(((const struct line *)a)->text, ((const struct line *)b)->text);
}

/* Appends s to the line, ';' written ':' (stackcollapse's separator). */
static void put_frame(char **l, size_t *len, size_t *cap, const char *s, const char *suffix,
		      int *err)
{
	size_t n = strlen(s) + strlen(suffix) + 2;
	char *v;

	if (*len + n > *cap) {
		size_t c = *cap ? 2 * *cap : 1024;

		while (c < *len + n)
			c *= 2;
		if (!(v = realloc(*l, c))) {
			*err = -ENOMEM;
			return;
		}
		*l = v;
		*cap = c;
	}
	if (*len)
		(*l)[(*len)++] = ';';
	for (; *s; s++)
		(*l)[(*len)++] = *s == ';' ? ':' : *s;
	for (; *suffix; suffix++)
		(*l)[(*len)++] = *suffix;
	(*l)[*len] = '\0';
}

static int folded(const struct lp_profile_render *in, uint8_t **out, size_t *len)
{
	const struct lp_profile_window *w = in->w;
	struct model m = {0};
	struct proc *pv;
	struct line *lines = NULL;
	struct map2 line_by = {0};
	size_t nlines = 0, cap = 0, total = 0;
	uint32_t loc[LP_PROFILE_FRAMES_MAX];
	char *l = NULL, *body;
	int err = 0;

	intern(&m, "");
	if (!(pv = procs_of(&m, in)))
		return -ENOMEM;
	for (size_t i = 0; i < w->cap && !m.err && !err; i++) {
		const struct lp_profile_stack *st = w->tab[i];
		struct proc *p;
		size_t n, ll = 0;
		uint32_t id;

		if (!st)
			continue;
		p = proc_of(pv, w->nprocs, st->tgid);
		n = locations_of(&m, in->syms, in->py, p, st, loc);
		put_frame(&l, &ll, &cap, p && p->comm_folded[0] ? p->comm_folded : "[unknown]", "",
			  &err);
		if (w->q.by_group)
			put_frame(&l, &ll, &cap,
				  lp_profile_group(p ? p->t : NULL, st->op, st->region), "", &err);
		/* root first: the outermost user frame down to the kernel's leaf */
		for (size_t k = n; k-- > 0 && !err;) {
			const struct location *x = &m.locs[loc[k] - 1];

			put_frame(&l, &ll, &cap, m.str.v[m.fn_name[x->fn - 1]],
				  x->kernel ? "_[k]" : "", &err);
		}
		if (err)
			break;
		id = intern(&m, l);
		if (m.err)
			break;
		if (!map2_get(&line_by, id, 0)) {
			struct line *v = realloc(lines, (nlines + 1) * sizeof(*v));

			if (!v || map2_put(&line_by, id, 0, (uint32_t)nlines + 1) < 0) {
				if (v)
					lines = v;
				err = -ENOMEM;
				break;
			}
			lines = v;
			lines[nlines++] = (struct line){m.str.v[id], 0};
		}
		lines[map2_get(&line_by, id, 0) - 1].count += st->count;
	}
	if (!err && !m.err) {
		qsort(lines, nlines, sizeof(*lines), by_text);
		for (size_t i = 0; i < nlines; i++)
			total += strlen(lines[i].text) + 24;
		body = malloc(total + 1);
		if (!body) {
			err = -ENOMEM;
		} else {
			size_t at = 0;

			for (size_t i = 0; i < nlines; i++)
				at += (size_t)snprintf(body + at, total + 1 - at, "%s %llu\n",
						       lines[i].text,
						       (unsigned long long)lines[i].count);
			*out = (uint8_t *)body;
			*len = at;
		}
	}
	free(l);
	free(lines);
	free(line_by.s);
	procs_free(pv, w->nprocs);
	err = err ? err : m.err;
	model_free(&m);
	return err;
}

int lp_profile_render(const struct lp_profile_render *in, uint8_t **out, size_t *len)
{
	*out = NULL;
	*len = 0;
	return in->w->q.format == LP_PROFILE_PPROF ? pprof(in, out, len) : folded(in, out, len);
}
