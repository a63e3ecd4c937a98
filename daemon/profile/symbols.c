// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* Names for frames (symbols.h). */
#include "profile/symbols.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/log.h"
#include "tracked/track.h"

/* The kernel's symbols are read again after this long: modules come and go. */
#define KALLSYMS_TTL_NS (600ULL * 1000000000ULL)

void lp_symbols_init(struct lp_symbols *s)
{
	memset(s, 0, sizeof(*s));
	s->proc_root = "/proc";
	s->kallsyms = "/proc/kallsyms";
}

static void obj_free(struct lp_sym_obj *o)
{
	if (!o)
		return;
	lp_symtab_free(&o->tab);
	free(o->path);
	free(o);
}

static void kallsyms_free(struct lp_kallsyms *k)
{
	free(k->v);
	free(k->names);
	memset(k, 0, sizeof(*k));
}

void lp_symbols_free(struct lp_symbols *s)
{
	for (size_t i = 0; i < s->n; i++)
		obj_free(s->v[i]);
	kallsyms_free(&s->k);
	memset(s, 0, sizeof(*s));
}

static uint64_t tab_bytes(const struct lp_symtab *t)
{
	return t->n * sizeof(*t->fn) + t->names_len;
}

/* A separate debug file of o with a symbol table, where one is installed: by build-id, then
 * by .gnu_debuglink beside the file and under /usr/lib/debug; in the process's root first
 * (a container's own), then the host's. */
static void read_debug_file(struct lp_symbols *s, pid_t pid, struct lp_sym_obj *o)
{
	char dir[2048], cand[4][3072], path[8192];
	struct lp_symtab dbg;
	size_t nc = 0;
	char *slash;

	if (o->build_id[0] && strlen(o->build_id) > 2)
		snprintf(cand[nc++], sizeof(cand[0]), "/usr/lib/debug/.build-id/%.2s/%s.debug",
			 o->build_id, o->build_id + 2);
	if (o->tab.debuglink[0] && o->path[0] == '/') {
		if (snprintf(dir, sizeof(dir), "%s", o->path) >= (int)sizeof(dir))
			return;
		slash = strrchr(dir, '/');
		*slash = '\0';
		snprintf(cand[nc++], sizeof(cand[0]), "%s/%s", dir, o->tab.debuglink);
		snprintf(cand[nc++], sizeof(cand[0]), "%s/.debug/%s", dir, o->tab.debuglink);
		snprintf(cand[nc++], sizeof(cand[0]), "/usr/lib/debug%s/%s", dir, o->tab.debuglink);
	}
	for (int root = 0; root < 2; root++)
		for (size_t i = 0; i < nc; i++) {
			int fd;

			if ((root == 0 ? snprintf(path, sizeof(path), "%s/%d/root%s", s->proc_root,
						  (int)pid, cand[i])
				       : snprintf(path, sizeof(path), "%s", cand[i])) >=
			    (int)sizeof(path))
				continue;
			fd = open(path, O_RDONLY | O_CLOEXEC);
			if (fd < 0)
				continue;
			if (lp_symtab_read(fd, &o->tab, &dbg) == 0 && dbg.has_symtab && dbg.n &&
			    (!o->tab.build_id_len || !dbg.build_id_len ||
			     (dbg.build_id_len == o->tab.build_id_len &&
			      !memcmp(dbg.build_id, o->tab.build_id, dbg.build_id_len)))) {
				/* Its functions, the stripped file's segments and identity. */
				free(o->tab.fn);
				free(o->tab.names);
				o->tab.fn = dbg.fn;
				o->tab.n = dbg.n;
				o->tab.names = dbg.names;
				o->tab.names_len = dbg.names_len;
				o->tab.has_symtab = true;
				o->debug_file = true;
				close(fd);
				return;
			}
			lp_symtab_free(&dbg);
			close(fd);
		}
}

/* Makes room for one more: the least recently used goes. */
static void evict(struct lp_symbols *s)
{
	size_t old = 0;

	if (s->n < LP_SYMBOLS_MAX)
		return;
	for (size_t i = 1; i < s->n; i++)
		if (s->v[i]->used < s->v[old]->used)
			old = i;
	s->bytes -= tab_bytes(&s->v[old]->tab);
	obj_free(s->v[old]);
	s->v[old] = s->v[--s->n];
}

const struct lp_sym_obj *lp_symbols_object(struct lp_symbols *s, pid_t pid,
					   const struct lp_proc_mapping *m)
{
	struct lp_sym_obj *o = NULL;
	char how[PATH_MAX + 64];
	uint64_t mtime;
	int fd;

	for (size_t i = 0; i < s->n; i++)
		if (s->v[i]->dev == m->dev && s->v[i]->ino == m->ino)
			o = s->v[i];
	fd = lp_proc_reopen_mapping(pid, m, o ? o->mtime_ns : 0, &mtime, how, sizeof(how));
	if (fd < 0) {
		if (o)
			o->used = ++s->clock;
		return o; /* the same file, or gone: what was read of it stands */
	}
	if (o) {
		/* Rewritten in place: read again. */
		for (size_t i = 0; i < s->n; i++)
			if (s->v[i] == o) {
				s->bytes -= tab_bytes(&o->tab);
				obj_free(o);
				s->v[i] = s->v[--s->n];
				break;
			}
	}
	evict(s);
	o = calloc(1, sizeof(*o));
	if (!o || !(o->path = strdup(m->path))) {
		free(o);
		close(fd);
		return NULL;
	}
	o->dev = m->dev;
	o->ino = m->ino;
	o->mtime_ns = mtime;
	o->error = lp_symtab_read(fd, NULL, &o->tab);
	close(fd);
	if (!o->error) {
		lp_build_id_hex(&o->tab, o->build_id, sizeof(o->build_id));
		if (!o->tab.has_symtab)
			read_debug_file(s, pid, o);
	} else if (o->error != -ENOEXEC) {
		log_info_errno(o->error,
			       "%s: its symbols cannot be read (%m): its frames are "
			       "named by offset",
			       o->path);
	}
	o->used = ++s->clock;
	s->bytes += tab_bytes(&o->tab);
	s->v[s->n++] = o;
	return o;
}

static int by_addr(const void *a, const void *b)
{
	const struct lp_ksym *x = a, *y = b;

	return x->addr < y->addr ? -1 : x->addr > y->addr;
}

/* The text symbols of /proc/kallsyms, sorted. Addresses that all read 0 (kptr_restrict, or
 * no CAP_SYSLOG where perf_event_paranoid hides them) leave the kernel's frames unnamed. */
static void read_kallsyms(struct lp_symbols *s)
{
	struct lp_kallsyms *k = &s->k;
	size_t cap = 0, ncap = 0, nlen = 0;
	char line[512];
	bool nonzero = false;
	FILE *f;

	kallsyms_free(k);
	k->read_ns = lp_now_ns();
	f = fopen(s->kallsyms, "re");
	if (!f) {
		k->error = -errno;
		return;
	}
	while (fgets(line, sizeof(line), f)) {
		unsigned long long addr;
		char type, name[256];
		size_t len;

		if (sscanf(line, "%llx %c %255s", &addr, &type, name) != 3 ||
		    (type != 't' && type != 'T' && type != 'w' && type != 'W'))
			continue;
		nonzero |= addr != 0;
		len = strlen(name);
		if (k->n == cap) {
			struct lp_ksym *v =
				realloc(k->v, (cap = cap ? 2 * cap : 65536) * sizeof(*v));

			if (!v)
				break;
			k->v = v;
		}
		if (nlen + len + 1 > ncap) {
			char *p = realloc(k->names, ncap = ncap ? 2 * ncap : 1 << 20);

			if (!p)
				break;
			k->names = p;
		}
		memcpy(k->names + nlen, name, len + 1);
		k->v[k->n++] = (struct lp_ksym){addr, (uint32_t)nlen};
		nlen += len + 1;
	}
	fclose(f);
	if (!nonzero) {
		kallsyms_free(k);
		k->read_ns = lp_now_ns();
		k->error = -EPERM;
		log_warning("%s shows no addresses to llmprofd (kptr_restrict, or no CAP_SYSLOG): "
			    "the kernel's frames of profiles are named by address",
			    s->kallsyms);
		return;
	}
	qsort(k->v, k->n, sizeof(*k->v), by_addr);
}

const char *lp_symbols_kernel(struct lp_symbols *s, uint64_t addr)
{
	struct lp_kallsyms *k = &s->k;
	size_t lo = 0, hi;

	if (!k->read_ns || lp_now_ns() - k->read_ns > KALLSYMS_TTL_NS)
		read_kallsyms(s);
	hi = k->n;
	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (k->v[mid].addr <= addr)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo ? k->names + k->v[lo - 1].name : NULL;
}
