// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* The state file: counters by name and non-empty histogram buckets by index, 64-bit values
 * as decimal strings (JSON numbers lose precision above 2^53), times as ages so that the
 * monotonic clock of the next run can place them. */
#include "report/state.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "escape.h"
#include "engine/engine.h"
#include "base/log.h"
#include "base/procfs.h"
#include "report/render.h"

static void put_u64(cJSON *o, const char *k, uint64_t v)
{
	char buf[24];

	snprintf(buf, sizeof(buf), "%" PRIu64, v);
	cJSON_AddStringToObject(o, k, buf);
}

static cJSON *render_stats(const struct lp_proc_stats *s)
{
	cJSON *o = cJSON_CreateObject(), *c = cJSON_AddObjectToObject(o, "counters");
	cJSON *h = cJSON_AddObjectToObject(o, "histograms");

	for (int i = 0; i < LP_C_NR; i++)
		if (s->ctr[i])
			put_u64(c, lp_counter_names[i], s->ctr[i]);
	for (int i = 0; i < LP_H_NR; i++) {
		const struct lp_hist *x = &s->hist[i];
		cJSON *e, *b;

		if (!x->sum_ns && !x->max_ns)
			continue;
		e = cJSON_AddObjectToObject(h, lp_hist_names[i]);
		put_u64(e, "sum", x->sum_ns);
		put_u64(e, "max", x->max_ns);
		b = cJSON_AddObjectToObject(e, "buckets");
		for (unsigned k = 0; k < LP_HIST_NBUCKETS; k++) {
			char idx[8];

			if (!x->buckets[k])
				continue;
			snprintf(idx, sizeof(idx), "%u", k);
			put_u64(b, idx, x->buckets[k]);
		}
	}
	return o;
}

/* Who it was (identity.h) and whether it ran ggml: a process restored as exited is still
 * told apart by its model and command line, and keeps its tokens section. */
static const struct {
	const char *key;
	size_t off, size;
} ident_fields[] = {
#define F(x)                                                                              \
	{                                                                                 \
#x, offsetof(struct lp_identity, x), sizeof(((struct lp_identity *)0)->x) \
	}
	F(cmdline), F(cgroup), F(unit),	      F(container),
	F(pod),	    F(model),  F(model_arch), F(model_type),
#undef F
};

static void render_ident(cJSON *p, const struct lp_target *t)
{
	cJSON *o = cJSON_AddObjectToObject(p, "identity");

	for (size_t i = 0; i < sizeof(ident_fields) / sizeof(ident_fields[0]); i++) {
		const char *v = (const char *)&t->ident + ident_fields[i].off;

		if (*v)
			cJSON_AddStringToObject(o, ident_fields[i].key, v);
	}
	if (t->ident.model_bytes)
		put_u64(o, "model_bytes", t->ident.model_bytes);
	/* "ggml" as daemons before the engine table read it; "engine" beside it */
	cJSON_AddBoolToObject(p, "ggml",
			      t->eng && t->eng->found_ns && t->eng->engine == LP_ENGINE_GGML);
	if (t->eng && t->eng->found_ns)
		cJSON_AddStringToObject(p, "engine", lp_engine_name(t->eng->engine));
}

cJSON *lp_state_render(const struct lp_report *r, const char *boot_id, double realtime_s)
{
	cJSON *doc = cJSON_CreateObject(), *a;

	cJSON_AddNumberToObject(doc, "format", LP_STATE_FORMAT);
	/* The bucket layout: histograms are only read back into the same one. */
	cJSON_AddNumberToObject(doc, "hist_sub_bits", LP_HIST_SUB_BITS);
	cJSON_AddNumberToObject(doc, "hist_buckets", LP_HIST_NBUCKETS);
	cJSON_AddStringToObject(doc, "boot_id", boot_id ? boot_id : "");
	cJSON_AddNumberToObject(doc, "saved_at", realtime_s);
	a = cJSON_AddArrayToObject(doc, "processes");
	for (size_t i = 0; i < r->nprocs; i++) {
		const struct lp_proc_view *v = &r->procs[i];
		const struct lp_target *t = v->target;
		cJSON *p = render_stats(&v->stats), *f;

		put_u64(p, "pid", (uint64_t)t->pid);
		put_u64(p, "starttime", t->starttime);
		lp_json_add_escaped(p, "comm", t->comm);
		if (t->exe)
			lp_json_add_escaped(p, "exe", t->exe);
		put_u64(p, "uid", t->uid == (uid_t)-1 ? UINT64_MAX : t->uid);
		cJSON_AddStringToObject(p, "matched_by", t->matched_by);
		cJSON_AddBoolToObject(p, "exited", t->exited);
		cJSON_AddBoolToObject(p, "data_lost", t->exit_lost);
		put_u64(p, "tracked_for_ns",
			(t->exited ? t->exited_at_ns : r->now_ns) - t->tracked_since_ns);
		if (t->exited)
			put_u64(p, "exited_ago_ns", r->now_ns - t->exited_at_ns);
		f = cJSON_AddArrayToObject(p, "futex");
		for (size_t k = 0; k < v->futex.ntop; k++) {
			const struct lp_futex_view *fv = &v->futex.top[k];
			cJSON *e = cJSON_CreateObject();

			put_u64(e, "uaddr", fv->uaddr);
			put_u64(e, "waits", fv->v.waits);
			put_u64(e, "wait_ns", fv->v.wait_ns);
			put_u64(e, "max_ns", fv->v.max_ns);
			cJSON_AddItemToArray(f, e);
		}
		put_u64(p, "futex_addresses", v->futex.naddrs);
		render_ident(p, t);
		cJSON_AddItemToArray(a, p);
	}
	return doc;
}

int lp_state_write(const char *dir, const cJSON *doc)
{
	return lp_state_write_file(dir, LP_STATE_FILE, doc);
}

int lp_state_write_file(const char *dir, const char *name, const cJSON *doc)
{
	char path[4096], tmp[4096];
	char *text = cJSON_PrintUnformatted(doc);
	size_t len = text ? strlen(text) : 0, off = 0;
	int fd, r = 0;

	if (!text)
		return -ENOMEM;
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	snprintf(tmp, sizeof(tmp), "%s/.%s.tmp", dir, name);
	if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
		r = -errno;
		goto out;
	}
	/* 0600: it names the executables of every user's processes. Made anew, never
	 * followed: a link planted under its name would have root write where it points. One
	 * left by a crash (or planted) is removed first; unlink takes a link, not its target. */
	fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0 && errno == EEXIST && unlink(tmp) == 0)
		fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0) {
		r = -errno;
		goto out;
	}
	while (off < len) {
		ssize_t n = write(fd, text + off, len - off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			r = -errno;
			break;
		}
		off += (size_t)n;
	}
	if (r == 0 && fsync(fd) < 0)
		r = -errno;
	close(fd);
	if (r == 0 && rename(tmp, path) < 0)
		r = -errno;
	if (r < 0)
		unlink(tmp);
out:
	free(text);
	return r;
}

int lp_boot_id(char *buf, size_t size)
{
	FILE *f = fopen("/proc/sys/kernel/random/boot_id", "re");

	if (!f)
		return -errno;
	if (!fgets(buf, (int)size, f)) {
		fclose(f);
		return -EIO;
	}
	fclose(f);
	buf[strcspn(buf, "\n")] = '\0';
	return 0;
}

static const char *matched_by_of(const char *s)
{
	static const char *const known[] = {"pid", "comm", "exe", "ggml", "torch", NULL};

	for (const char *const *k = known; s && *k; k++)
		if (strcmp(*k, s) == 0)
			return *k;
	return "restored";
}

/* Reading a record: every value is checked, and the first one that is wrong names why the
 * whole record is refused. A hand-edited, truncated or hostile file must not put counts
 * into the API that the kernel never counted. */
struct reader {
	char why[160];
};

static int bad(struct reader *rd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int bad(struct reader *rd, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(rd->why, sizeof(rd->why), fmt, ap);
	va_end(ap);
	return -EINVAL;
}

/* A decimal string of 1 to 20 digits that fits in 64 bits and is at most max. */
static int take_u64(struct reader *rd, const cJSON *x, const char *k, __u64 max, __u64 *out)
{
	const char *v = cJSON_GetStringValue(x);
	size_t n = v ? strlen(v) : 0;
	unsigned long long u;
	char *end;

	if (!v)
		return bad(rd, "'%s' is not a string of digits", k);
	if (n == 0 || n > 20 || strspn(v, "0123456789") != n)
		return bad(rd, "'%s' is not a decimal number", k);
	errno = 0;
	u = strtoull(v, &end, 10);
	if (errno == ERANGE || u > max)
		return bad(rd, "'%s' = %.24s is out of range (at most %llu)", k, v, max);
	*out = u;
	return 0;
}

static int field_u64(struct reader *rd, const cJSON *o, const char *k, __u64 max, bool required,
		     __u64 *out)
{
	const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);

	*out = 0;
	if (!x)
		return required ? bad(rd, "'%s' is missing", k) : 0;
	return take_u64(rd, x, k, max, out);
}

static int field_bool(struct reader *rd, const cJSON *o, const char *k, bool *out)
{
	const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);

	*out = cJSON_IsTrue(x);
	return !x || cJSON_IsBool(x) ? 0 : bad(rd, "'%s' is not true or false", k);
}

/* A histogram is whole: its buckets' count, sum and maximum agree with each other the way
 * the kernel's updates keep them (every value lies within its bucket). */
static int read_hist(struct reader *rd, const cJSON *e, const char *name, struct lp_hist *h)
{
	const cJSON *b = cJSON_GetObjectItemCaseSensitive(e, "buckets"), *k;
	unsigned lo = LP_HIST_NBUCKETS, hi = 0;
	unsigned __int128 count = 0;

	if (!cJSON_IsObject(e) || !cJSON_IsObject(b))
		return bad(rd, "histogram '%s' is not an object with buckets", name);
	if (field_u64(rd, e, "sum", LP_STATE_MAX_VALUE, true, &h->sum_ns) < 0 ||
	    field_u64(rd, e, "max", LP_STATE_MAX_VALUE, true, &h->max_ns) < 0)
		return -EINVAL;
	cJSON_ArrayForEach(k, b)
	{
		size_t n = k->string ? strlen(k->string) : 0;
		unsigned long idx;

		if (n == 0 || n > 3 || strspn(k->string, "0123456789") != n ||
		    (idx = strtoul(k->string, NULL, 10)) >= LP_HIST_NBUCKETS)
			return bad(rd, "histogram '%s': no bucket '%.8s'", name,
				   k->string ? k->string : "");
		if (take_u64(rd, k, name, LP_STATE_MAX_VALUE, &h->buckets[idx]) < 0)
			return -EINVAL;
		if (h->buckets[idx]) {
			lo = idx < lo ? (unsigned)idx : lo;
			hi = idx > hi ? (unsigned)idx : hi;
			count += h->buckets[idx];
		}
	}
	if (count == 0)
		return h->sum_ns || h->max_ns
			       ? bad(rd, "histogram '%s' has a sum or maximum but no samples", name)
			       : 0;
	if (h->max_ns < lp_hist_lower(hi) || h->max_ns >= lp_hist_upper(hi))
		return bad(rd, "histogram '%s': maximum %llu ns is not in its top bucket", name,
			   h->max_ns);
	if ((unsigned __int128)h->sum_ns > count * h->max_ns ||
	    (unsigned __int128)h->sum_ns < count * lp_hist_lower(lo))
		return bad(rd, "histogram '%s': sum %llu ns does not fit its buckets", name,
			   h->sum_ns);
	return 0;
}

static int read_stats(struct reader *rd, const cJSON *o, struct lp_proc_stats *s)
{
	const cJSON *c = cJSON_GetObjectItemCaseSensitive(o, "counters");
	const cJSON *h = cJSON_GetObjectItemCaseSensitive(o, "histograms"), *e;

	if ((c && !cJSON_IsObject(c)) || (h && !cJSON_IsObject(h)))
		return bad(rd, "'counters' or 'histograms' is not an object");
	for (int i = 0; i < LP_C_NR; i++)
		if (field_u64(rd, c, lp_counter_names[i], LP_STATE_MAX_VALUE, false, &s->ctr[i]) <
		    0)
			return -EINVAL;
	cJSON_ArrayForEach(e, h)
	{
		int i = 0;

		while (i < LP_H_NR && strcmp(lp_hist_names[i], e->string ? e->string : "") != 0)
			i++;
		if (i == LP_H_NR)
			return bad(rd, "no histogram named '%.32s'", e->string ? e->string : "");
		if (read_hist(rd, e, lp_hist_names[i], &s->hist[i]) < 0)
			return -EINVAL;
	}
	/* A file written before runqueue_ns: its waits up to then are the histogram's sum (an
	 * estimate where a busy thread's were sampled), the kernel's run_delay from now on. */
	if (!cJSON_GetObjectItemCaseSensitive(c, lp_counter_names[LP_C_RUNQ_NS]))
		s->ctr[LP_C_RUNQ_NS] = s->hist[LP_H_RUNQ].sum_ns;
	return 0;
}

static int read_futex(struct reader *rd, const cJSON *p, struct lp_futex_top *ft)
{
	const cJSON *f = cJSON_GetObjectItemCaseSensitive(p, "futex"), *e;

	if (f && (!cJSON_IsArray(f) || cJSON_GetArraySize(f) > LP_FUTEX_TOP))
		return bad(rd, "'futex' is not a list of at most %d addresses", LP_FUTEX_TOP);
	__u64 naddrs, uaddr;

	if (field_u64(rd, p, "futex_addresses", UINT32_MAX, false, &naddrs) < 0)
		return -EINVAL;
	ft->naddrs = naddrs;
	cJSON_ArrayForEach(e, f)
	{
		struct lp_futex_view *fv = &ft->top[ft->ntop++];

		if (field_u64(rd, e, "uaddr", UINT64_MAX, true, &uaddr) < 0 ||
		    field_u64(rd, e, "waits", LP_STATE_MAX_VALUE, true, &fv->v.waits) < 0 ||
		    field_u64(rd, e, "wait_ns", LP_STATE_MAX_VALUE, true, &fv->v.wait_ns) < 0 ||
		    field_u64(rd, e, "max_ns", LP_STATE_MAX_VALUE, true, &fv->v.max_ns) < 0)
			return -EINVAL;
		fv->uaddr = uaddr;
		if (fv->v.max_ns > fv->v.wait_ns || (fv->v.waits == 0 && fv->v.wait_ns))
			return bad(rd, "futex word %#llx: times do not fit its waits", uaddr);
	}
	return 0;
}

/* One saved record, checked whole. */
struct saved {
	__u64 pid, starttime, uid, tracked_for, exited_ago;
	bool exited, data_lost;
	const char *comm, *exe, *matched_by;
	struct lp_proc_stats stats;
	struct lp_futex_top futex;
	struct lp_identity ident;
	bool ggml;
	int engine; /* enum lp_engine_id; -1: none */
};

/* The engine it ran: "engine" by name (a name this daemon does not know is refused), else
 * ggml where "ggml" is true (a file of a daemon before the engine table). */
static int read_engine(struct reader *rd, const cJSON *p, struct saved *sv)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(p, "engine");

	sv->engine = sv->ggml ? LP_ENGINE_GGML : -1;
	if (!v)
		return 0;
	for (unsigned e = 0; cJSON_IsString(v) && e < LP_ENGINE_NR; e++)
		if (strcmp(v->valuestring, lp_engine_name(e)) == 0) {
			sv->engine = (int)e;
			return 0;
		}
	return bad(rd, "'engine' is not an engine this daemon knows");
}

/* The identity saved with a record: each text as it was kept (escaped, escape.h), refused
 * when it is not, or does not fit. */
static int read_ident(struct reader *rd, const cJSON *p, struct saved *sv)
{
	const cJSON *o = cJSON_GetObjectItemCaseSensitive(p, "identity");
	__u64 bytes = 0;

	sv->engine = -1;
	if (!o)
		return 0;
	if (!cJSON_IsObject(o))
		return bad(rd, "'identity' is not an object");
	for (size_t i = 0; i < sizeof(ident_fields) / sizeof(ident_fields[0]); i++) {
		const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, ident_fields[i].key);
		size_t n;

		if (!v)
			continue;
		/* Kept as shown: escaped once, so a backslash is one of its escapes. */
		if (!cJSON_IsString(v) || (n = strlen(v->valuestring)) >= ident_fields[i].size ||
		    !lp_escaped_clean(v->valuestring, n))
			return bad(rd, "identity '%s' is not a clean text of at most %zu bytes",
				   ident_fields[i].key, ident_fields[i].size - 1);
		memcpy((char *)&sv->ident + ident_fields[i].off, v->valuestring, n + 1);
	}
	if (field_u64(rd, o, "model_bytes", LP_STATE_MAX_VALUE, false, &bytes) < 0)
		return -EINVAL;
	sv->ident.model_bytes = bytes;
	if (field_bool(rd, p, "ggml", &sv->ggml) < 0)
		return -EINVAL;
	return read_engine(rd, p, sv);
}

/* A text written escaped once, read back in place to bytes: shorter than size, no NUL. */
static bool unescaped(const cJSON *s, size_t size)
{
	size_t n;

	if (!cJSON_IsString(s))
		return false;
	n = lp_unescape(s->valuestring);
	return n == strlen(s->valuestring) && n < size;
}

static int read_record(struct reader *rd, const cJSON *p, struct saved *sv)
{
	const cJSON *comm = cJSON_GetObjectItemCaseSensitive(p, "comm");
	const cJSON *exe = cJSON_GetObjectItemCaseSensitive(p, "exe");
	const cJSON *by = cJSON_GetObjectItemCaseSensitive(p, "matched_by");
	__u64 uid;

	if (!cJSON_IsObject(p))
		return bad(rd, "not an object");
	if (field_u64(rd, p, "pid", LP_PID_MAX, true, &sv->pid) < 0 ||
	    field_u64(rd, p, "starttime", LP_STATE_MAX_VALUE, true, &sv->starttime) < 0 ||
	    field_u64(rd, p, "uid", UINT64_MAX, false, &uid) < 0 ||
	    field_u64(rd, p, "tracked_for_ns", LP_STATE_MAX_VALUE, false, &sv->tracked_for) < 0 ||
	    field_u64(rd, p, "exited_ago_ns", LP_STATE_MAX_VALUE, false, &sv->exited_ago) < 0 ||
	    field_bool(rd, p, "exited", &sv->exited) < 0 ||
	    field_bool(rd, p, "data_lost", &sv->data_lost) < 0)
		return -EINVAL;
	if (sv->pid == 0)
		return bad(rd, "'pid' is 0");
	if (uid > UINT32_MAX && uid != UINT64_MAX)
		return bad(rd, "'uid' is out of range");
	sv->uid = uid;
	/* Both are written escaped once (the file is UTF-8 like every answer): read back to
	 * their bytes, which hold no NUL. */
	if (!unescaped(comm, LP_COMM_LEN))
		return bad(rd, "'comm' is not a name of at most %d bytes", LP_COMM_LEN - 1);
	if (exe && !unescaped(exe, PATH_MAX))
		return bad(rd, "'exe' is not a path");
	if (by && !cJSON_IsString(by))
		return bad(rd, "'matched_by' is not a string");
	sv->comm = comm->valuestring;
	sv->exe = exe ? exe->valuestring : NULL;
	sv->matched_by = matched_by_of(cJSON_GetStringValue(by));
	return read_stats(rd, p, &sv->stats) < 0 || read_futex(rd, p, &sv->futex) < 0 ||
			       read_ident(rd, p, sv) < 0
		       ? -EINVAL
		       : 0;
}

/* Whether the tracker holds pid with this start time already (a record saved twice). */
static int lp_state_seen(const struct lp_tracker *tr, pid_t pid, uint64_t starttime)
{
	for (size_t i = 0; i < tr->n; i++)
		if (tr->v[i]->pid == pid && tr->v[i]->starttime == starttime &&
		    (tr->v[i]->exited || tr->v[i]->base))
			return -EEXIST;
	return 0;
}

size_t lp_state_max_bytes(uint32_t max_processes)
{
	return LP_STATE_BASE_BYTES + 2 * (size_t)max_processes * LP_STATE_RECORD_BYTES;
}

/* One saved process back: still running (same boot, pid and start time) and tracked again by
 * the rules in force (the scans ran first) gets the saved totals as its base; running but
 * not selected now, it is refused, so that a record cannot make the daemon watch a process
 * (pid 1 with its real start time) that no rule selects; gone, it comes back as exited. */
static int restore_one(struct lp_tracker *tr, const struct saved *sv, bool same_boot, uint64_t now,
		       uint64_t downtime_ns, char *why, size_t whysize)
{
	struct lp_proc_stats *stats = malloc(sizeof(*stats));
	pid_t pid = (pid_t)sv->pid;
	uint64_t tracked_for = sv->tracked_for; /* up to its exit or the save */
	struct lp_target *t;
	struct lp_proc_stat st;

	if (!stats)
		return -ENOMEM;
	*stats = sv->stats;
	stats->tgid = (__u32)pid;
	if (!sv->exited && same_boot && lp_proc_read_stat(pid, &st) == 0 &&
	    st.starttime == sv->starttime) {
		t = lp_tracker_find(tr, pid);
		if (!t || t->exited || t->starttime != sv->starttime) {
			snprintf(why, whysize,
				 "pid %d is running but is not a process this daemon tracks now "
				 "(no ggml, and no --pid, --comm or --exe of it): not adopted",
				 (int)pid);
			free(stats);
			return -EPERM;
		}
		if (t->base) {
			free(stats);
			return -EEXIST;
		}
		t->base = stats;
		/* Read again at the add; the model comes with its context, later. */
		if (!t->ident.model[0] && sv->ident.model[0]) {
			memcpy(t->ident.model, sv->ident.model, sizeof(t->ident.model));
			memcpy(t->ident.model_arch, sv->ident.model_arch,
			       sizeof(t->ident.model_arch));
			memcpy(t->ident.model_type, sv->ident.model_type,
			       sizeof(t->ident.model_type));
			t->ident.model_bytes = sv->ident.model_bytes;
		}
		/* Still running. Its counters hold what was seen while a daemon watched, and
		 * so does its tracked time: rates since tracking are over the watched time
		 * (with the downtime in it, every rate would read low by its share). */
		t->tracked_since_ns = now > tracked_for ? now - tracked_for : 0;
		return 0;
	}
	t = calloc(1, sizeof(*t));
	if (!t) {
		free(stats);
		return -ENOMEM;
	}
	t->pid = pid;
	t->starttime = sv->starttime;
	snprintf(t->comm, sizeof(t->comm), "%s", sv->comm);
	t->exe = sv->exe ? strdup(sv->exe) : NULL;
	t->uid = sv->uid > UINT32_MAX ? (uid_t)-1 : (uid_t)sv->uid;
	t->matched_by = sv->matched_by;
	t->ident = sv->ident;
	/* It ran an engine: its tokens, samples and unwind figures are in the counters; no
	 * object or op of it is known any more. */
	if (sv->engine >= 0 && (t->eng = calloc(1, sizeof(*t->eng)))) {
		t->eng->engine = (uint8_t)sv->engine;
		t->eng->found_ns = 1;
	}
	t->exited = true;
	t->exit_lost = sv->data_lost;
	/* Exited while we were stopped: it left when we last saw it. */
	{
		uint64_t ago = (sv->exited ? sv->exited_ago : 0) + downtime_ns;

		t->exited_at_ns = now > ago ? now - ago : 0;
	}
	t->tracked_since_ns = t->exited_at_ns > tracked_for ? t->exited_at_ns - tracked_for : 0;
	stats->exit_ns = t->exited_at_ns;
	stats->tracked_since_ns = t->tracked_since_ns;
	t->final = stats;
	t->final_futex = malloc(sizeof(*t->final_futex));
	if (t->final_futex)
		*t->final_futex = sv->futex;
	return lp_tracker_restore(tr, t);
}

/* A file that cannot be used is moved aside (state.json.corrupt, or .format-N for another
 * version's), so that the next save does not overwrite what someone may want to recover. */
static void set_aside(const char *path, const char *suffix)
{
	char to[4200];

	snprintf(to, sizeof(to), "%s.%s", path, suffix);
	if (rename(path, to) < 0)
		log_warning_errno(-errno, "move %s aside to %s: %m, ignoring", path, to);
	else
		log_warning("kept it as %s", to);
}

static char *read_capped(const char *path, size_t max, size_t *len, int *err)
{
	struct stat st;
	char *text = NULL;
	FILE *f = NULL;
	/* Not followed, and without waiting: a FIFO under the name would block the open (and
	 * the daemon's start) until someone writes to it. */
	int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);

	*err = 0;
	if (fd >= 0 && !(f = fdopen(fd, "r")))
		close(fd);
	if (!f) {
		*err = errno == ELOOP ? -EINVAL : -errno;
		return NULL;
	}
	if (fstat(fileno(f), &st) < 0 || !S_ISREG(st.st_mode)) {
		*err = -EINVAL;
	} else if ((uint64_t)st.st_size > max) {
		*err = -EFBIG;
		*len = (size_t)st.st_size;
	} else if (!(text = malloc((size_t)st.st_size + 1))) {
		*err = -ENOMEM;
	} else if (fread(text, 1, (size_t)st.st_size, f) != (size_t)st.st_size) {
		*err = -EIO;
		free(text);
		text = NULL;
	} else {
		text[st.st_size] = '\0';
		*len = (size_t)st.st_size;
	}
	fclose(f);
	return text;
}

/* The state file's document, checked to be one this version reads: NULL with *err set
 * (0 when there is no file; a file that is not one is set aside, and says why). */
static cJSON *load_doc(const char *path, const struct lp_tracker *tr, int *err)
{
	size_t max_bytes = lp_state_max_bytes(tr->cfg->max_processes), len = 0;
	const cJSON *format;
	char suffix[32], *text = read_capped(path, max_bytes, &len, err);
	cJSON *doc;

	if (*err == -ENOENT) {
		*err = 0;
		return NULL;
	}
	if (*err == -EFBIG || *err == -EINVAL) {
		if (*err == -EFBIG)
			log_error(
				"%s is %zu bytes, over the %zu a state file of --max-processes %u "
				"can be: not restored",
				path, len, max_bytes, tr->cfg->max_processes);
		else
			log_error("%s is not a regular file (a FIFO, a device or a symbolic link): "
				  "not restored",
				  path);
		set_aside(path, "corrupt");
		return NULL;
	}
	if (*err < 0) {
		log_warning_errno(*err, "read %s: %m; the totals it holds are not restored", path);
		return NULL;
	}
	doc = cJSON_ParseWithLength(text, len);
	free(text);
	format = cJSON_GetObjectItemCaseSensitive(doc, "format");
	if (!cJSON_IsObject(doc) || !cJSON_IsNumber(format)) {
		cJSON_Delete(doc);
		log_error("%s is corrupt (not a JSON object with a format number): not restored",
			  path);
		set_aside(path, "corrupt");
		*err = -EINVAL;
		return NULL;
	}
	if (format->valuedouble == LP_STATE_FORMAT &&
	    cJSON_GetNumberValue(cJSON_GetObjectItem(doc, "hist_sub_bits")) == LP_HIST_SUB_BITS &&
	    cJSON_GetNumberValue(cJSON_GetObjectItem(doc, "hist_buckets")) == LP_HIST_NBUCKETS)
		return doc;
	log_error("%s was written by another version of llmprofd (state format %g, histograms "
		  "%g/%g; this one reads %d, %d/%d): not restored",
		  path, format->valuedouble,
		  cJSON_GetNumberValue(cJSON_GetObjectItem(doc, "hist_sub_bits")),
		  cJSON_GetNumberValue(cJSON_GetObjectItem(doc, "hist_buckets")), LP_STATE_FORMAT,
		  LP_HIST_SUB_BITS, LP_HIST_NBUCKETS);
	snprintf(suffix, sizeof(suffix), "format-%g", format->valuedouble);
	cJSON_Delete(doc);
	set_aside(path, suffix);
	*err = -EPROTO;
	return NULL;
}

/* Each record of procs restored or refused (the first refusals said in full): how many
 * were restored, or -ENOMEM. */
static int restore_records(struct lp_tracker *tr, const char *path, const cJSON *procs,
			   bool same_boot, uint64_t downtime_ns)
{
	size_t max_records = 2 * (size_t)tr->cfg->max_processes, seen = 0, refused = 0, n = 0;
	struct saved *sv = malloc(sizeof(*sv));
	uint64_t now = lp_now_ns();
	const cJSON *p;
	int r;

	if (!sv)
		return log_error_errno(-ENOMEM, "read %s: %m", path);
	cJSON_ArrayForEach(p, procs)
	{
		struct reader rd = {""};

		if (++seen > max_records) {
			log_warning(
				"%s: more than %zu records (twice --max-processes); the rest are "
				"not restored",
				path, max_records);
			break;
		}
		memset(sv, 0, sizeof(*sv));
		r = read_record(&rd, p, sv);
		if (r == 0 && (r = lp_state_seen(tr, (pid_t)sv->pid, sv->starttime)) < 0)
			snprintf(rd.why, sizeof(rd.why), "pid %llu started at %llu is saved twice",
				 sv->pid, sv->starttime);
		if (r == 0)
			r = restore_one(tr, sv, same_boot, now, downtime_ns, rd.why,
					sizeof(rd.why));
		if (r == 0) {
			n++;
			continue;
		}
		/* The first reasons in full; the count says the rest. */
		if (++refused <= 20)
			log_warning("%s: record %zu refused: %s", path, seen,
				    rd.why[0] ? rd.why : strerror(-r));
	}
	if (refused)
		log_warning("%s: %zu record(s) refused in all", path, refused);
	free(sv);
	return (int)n;
}

int lp_state_restore(const char *dir, struct lp_tracker *tr, const char *boot_id, double realtime_s)
{
	uint64_t evicted = tr->exited_evicted, downtime_ns = 0;
	const cJSON *boot;
	char path[4096];
	double saved_at;
	cJSON *doc;
	int r, n;

	snprintf(path, sizeof(path), "%s/%s", dir, LP_STATE_FILE);
	if (!(doc = load_doc(path, tr, &r)))
		return r;
	boot = cJSON_GetObjectItem(doc, "boot_id");
	saved_at = cJSON_GetNumberValue(cJSON_GetObjectItem(doc, "saved_at"));
	if (saved_at > 0 && realtime_s > saved_at)
		downtime_ns = (uint64_t)((realtime_s - saved_at) * 1e9);
	n = restore_records(tr, path, cJSON_GetObjectItem(doc, "processes"),
			    boot_id && cJSON_IsString(boot) &&
				    strcmp(boot->valuestring, boot_id) == 0,
			    downtime_ns);
	cJSON_Delete(doc);
	if (n < 0)
		return n;
	evicted = tr->exited_evicted - evicted;
	log_info("restored %zu process(es) from %s%s", (size_t)n - evicted, path,
		 evicted ? " (the oldest exited ones beyond --max-processes left out)" : "");
	return (int)((size_t)n - evicted);
}
