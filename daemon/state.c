// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* The state file: counters by name and non-empty histogram buckets by index, 64-bit values
 * as decimal strings (JSON numbers lose precision above 2^53), times as ages so that the
 * monotonic clock of the next run can place them. */
#include "state.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "log.h"
#include "procfs.h"
#include "render.h"

static void put_u64(cJSON *o, const char *k, uint64_t v)
{
	char buf[24];

	snprintf(buf, sizeof(buf), "%" PRIu64, v);
	cJSON_AddStringToObject(o, k, buf);
}

static uint64_t get_u64(const cJSON *o, const char *k)
{
	const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, k);

	if (cJSON_IsString(x))
		return strtoull(x->valuestring, NULL, 10);
	return cJSON_IsNumber(x) && x->valuedouble > 0 ? (uint64_t)x->valuedouble : 0;
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

static void parse_stats(const cJSON *o, struct lp_proc_stats *s)
{
	const cJSON *c = cJSON_GetObjectItemCaseSensitive(o, "counters");
	const cJSON *h = cJSON_GetObjectItemCaseSensitive(o, "histograms");

	for (int i = 0; i < LP_C_NR; i++)
		s->ctr[i] = get_u64(c, lp_counter_names[i]);
	for (int i = 0; i < LP_H_NR; i++) {
		const cJSON *e = cJSON_GetObjectItemCaseSensitive(h, lp_hist_names[i]), *b, *k;

		if (!e)
			continue;
		s->hist[i].sum_ns = get_u64(e, "sum");
		s->hist[i].max_ns = get_u64(e, "max");
		b = cJSON_GetObjectItemCaseSensitive(e, "buckets");
		cJSON_ArrayForEach(k, b)
		{
			unsigned long idx =
				k->string ? strtoul(k->string, NULL, 10) : LP_HIST_NBUCKETS;

			if (idx < LP_HIST_NBUCKETS && cJSON_IsString(k))
				s->hist[i].buckets[idx] = strtoull(k->valuestring, NULL, 10);
		}
	}
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
		cJSON_AddStringToObject(p, "comm", t->comm);
		if (t->exe)
			cJSON_AddStringToObject(p, "exe", t->exe);
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
		cJSON_AddItemToArray(a, p);
	}
	return doc;
}

int lp_state_write(const char *dir, const cJSON *doc)
{
	char path[4096], tmp[4096];
	char *text = cJSON_PrintUnformatted(doc);
	size_t len = text ? strlen(text) : 0, off = 0;
	int fd, r = 0;

	if (!text)
		return -ENOMEM;
	snprintf(path, sizeof(path), "%s/%s", dir, LP_STATE_FILE);
	snprintf(tmp, sizeof(tmp), "%s/.%s.tmp", dir, LP_STATE_FILE);
	if (mkdir(dir, 0700) < 0 && errno != EEXIST) {
		r = -errno;
		goto out;
	}
	/* 0600: it names the executables of every user's processes. */
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
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
	static const char *const known[] = {"pid", "comm", "exe", "ggml", NULL};

	for (const char *const *k = known; s && *k; k++)
		if (strcmp(*k, s) == 0)
			return *k;
	return "restored";
}

/* One saved process back: still running (same boot, pid and start time) gets tracked again
 * with the saved totals as its base; otherwise it comes back as exited. */
static int restore_one(struct lp_tracker *tr, const cJSON *p, bool same_boot, uint64_t now,
		       uint64_t downtime_ns)
{
	const cJSON *comm = cJSON_GetObjectItemCaseSensitive(p, "comm");
	const cJSON *exe = cJSON_GetObjectItemCaseSensitive(p, "exe");
	const cJSON *f;
	struct lp_proc_stats *stats = calloc(1, sizeof(*stats));
	struct lp_target *t;
	struct lp_proc_stat st;
	pid_t pid = (pid_t)get_u64(p, "pid");
	uint64_t starttime = get_u64(p, "starttime"), uid = get_u64(p, "uid");
	uint64_t tracked_for = get_u64(p, "tracked_for_ns"); /* up to its exit or the save */
	const char *by = matched_by_of(
		cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(p, "matched_by")));
	bool exited = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(p, "exited"));
	int r;

	if (!stats)
		return -ENOMEM;
	if (pid <= 0) {
		free(stats);
		return -EINVAL;
	}
	parse_stats(p, stats);
	stats->tgid = (__u32)pid;
	if (!exited && same_boot && lp_proc_read_stat(pid, &st) == 0 && st.starttime == starttime) {
		r = lp_tracker_add(tr, pid, by);
		t = r == 0 || r == -EALREADY ? lp_tracker_find(tr, pid) : NULL;
		if (!t) {
			free(stats);
			return r;
		}
		t->base = stats;
		/* Still running: the time we were stopped counts as tracked. */
		tracked_for += downtime_ns;
		t->tracked_since_ns = now > tracked_for ? now - tracked_for : 0;
		return 0;
	}
	t = calloc(1, sizeof(*t));
	if (!t) {
		free(stats);
		return -ENOMEM;
	}
	t->pid = pid;
	t->starttime = starttime;
	snprintf(t->comm, sizeof(t->comm), "%s", cJSON_IsString(comm) ? comm->valuestring : "?");
	t->exe = cJSON_IsString(exe) ? strdup(exe->valuestring) : NULL;
	t->uid = uid > UINT32_MAX ? (uid_t)-1 : (uid_t)uid;
	t->matched_by = by;
	t->exited = true;
	t->exit_lost = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(p, "data_lost"));
	/* Exited while we were stopped: it left when we last saw it. */
	{
		uint64_t ago = (exited ? get_u64(p, "exited_ago_ns") : 0) + downtime_ns;

		t->exited_at_ns = now > ago ? now - ago : 0;
	}
	t->tracked_since_ns = t->exited_at_ns > tracked_for ? t->exited_at_ns - tracked_for : 0;
	stats->exit_ns = t->exited_at_ns;
	stats->tracked_since_ns = t->tracked_since_ns;
	t->final = stats;
	t->final_futex = calloc(1, sizeof(*t->final_futex));
	if (t->final_futex) {
		const cJSON *e;

		t->final_futex->naddrs = get_u64(p, "futex_addresses");
		f = cJSON_GetObjectItemCaseSensitive(p, "futex");
		cJSON_ArrayForEach(e, f)
		{
			struct lp_futex_view *fv;

			if (t->final_futex->ntop == LP_FUTEX_TOP)
				break;
			fv = &t->final_futex->top[t->final_futex->ntop++];
			fv->uaddr = get_u64(e, "uaddr");
			fv->v.waits = get_u64(e, "waits");
			fv->v.wait_ns = get_u64(e, "wait_ns");
			fv->v.max_ns = get_u64(e, "max_ns");
		}
	}
	return lp_tracker_restore(tr, t);
}

int lp_state_restore(const char *dir, struct lp_tracker *tr, const char *boot_id, double realtime_s)
{
	char path[4096];
	const cJSON *procs, *p, *boot;
	uint64_t now = lp_now_ns(), downtime_ns = 0;
	double saved_at;
	cJSON *doc;
	char *text;
	long len;
	FILE *f;
	int n = 0;
	bool same_boot;

	snprintf(path, sizeof(path), "%s/%s", dir, LP_STATE_FILE);
	f = fopen(path, "re");
	if (!f)
		return errno == ENOENT ? 0
				       : log_warning_errno(-errno, "read %s: %m, ignoring", path);
	if (fseek(f, 0, SEEK_END) < 0 || (len = ftell(f)) < 0 || fseek(f, 0, SEEK_SET) < 0 ||
	    !(text = malloc((size_t)len + 1))) {
		fclose(f);
		return log_warning_errno(-EIO, "read %s: cannot size it, ignoring", path);
	}
	if (fread(text, 1, (size_t)len, f) != (size_t)len) {
		fclose(f);
		free(text);
		return log_warning_errno(-EIO, "read %s: short read, ignoring", path);
	}
	fclose(f);
	text[len] = '\0';
	doc = cJSON_Parse(text);
	free(text);
	if (!doc || cJSON_GetNumberValue(cJSON_GetObjectItem(doc, "format")) != LP_STATE_FORMAT ||
	    cJSON_GetNumberValue(cJSON_GetObjectItem(doc, "hist_sub_bits")) != LP_HIST_SUB_BITS ||
	    cJSON_GetNumberValue(cJSON_GetObjectItem(doc, "hist_buckets")) != LP_HIST_NBUCKETS) {
		cJSON_Delete(doc);
		return log_warning_errno(-EINVAL,
					 "%s: not a state file of this version of llmprofd, "
					 "ignoring it (the totals it holds are not restored)",
					 path);
	}
	boot = cJSON_GetObjectItem(doc, "boot_id");
	same_boot = boot_id && cJSON_IsString(boot) && strcmp(boot->valuestring, boot_id) == 0;
	saved_at = cJSON_GetNumberValue(cJSON_GetObjectItem(doc, "saved_at"));
	if (saved_at > 0 && realtime_s > saved_at)
		downtime_ns = (uint64_t)((realtime_s - saved_at) * 1e9);
	procs = cJSON_GetObjectItem(doc, "processes");
	cJSON_ArrayForEach(p, procs)
	{
		if (restore_one(tr, p, same_boot, now, downtime_ns) == 0)
			n++;
	}
	cJSON_Delete(doc);
	log_info("restored %d process(es) from %s", n, path);
	return n;
}
