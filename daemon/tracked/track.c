// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* Tracking: inserting pids into the kernel's "procs" map, matching new processes by comm or
 * exe, and keeping the final record of each tracked process when it exits. */
#include "tracked/track.h"

#include <bpf/bpf.h>
#include <dirent.h>
#include <errno.h>
#include <fnmatch.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/log.h"
#include "kernel/mapwalk.h"
#include "base/procfs.h"

uint64_t lp_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

void lp_tracker_init(struct lp_tracker *tr, const struct lp_config *cfg, int procs_fd, int futex_fd,
		     int threads_fd)
{
	memset(tr, 0, sizeof(*tr));
	tr->cfg = cfg;
	tr->procs_fd = procs_fd;
	tr->futex_fd = futex_fd;
	tr->threads_fd = threads_fd;
	tr->preempt_fd = -1;
}

static void target_free(const struct lp_tracker *tr, struct lp_target *t)
{
	if (!t)
		return;
	free(t->exe);
	free(t->final);
	free(t->final_futex);
	free(t->final_preempt);
	free(t->base);
	if (t->ggml && tr->free_ggml)
		tr->free_ggml(t->ggml);
	free(t);
}

void lp_tracker_free(struct lp_tracker *tr)
{
	for (size_t i = 0; i < tr->n; i++)
		target_free(tr, tr->v[i]);
	free(tr->v);
	tr->v = NULL;
	tr->n = tr->cap = 0;
	free(tr->waiting);
	tr->waiting = NULL;
	tr->nwaiting = 0;
	free(tr->harvest);
	tr->harvest = NULL;
	tr->nharvest = tr->harvest_cap = 0;
}

struct lp_target *lp_tracker_find(struct lp_tracker *tr, pid_t pid)
{
	for (size_t i = tr->n; i > 0; i--)
		if (tr->v[i - 1]->pid == pid)
			return tr->v[i - 1];
	return NULL;
}

static struct lp_target *find_live(struct lp_tracker *tr, pid_t pid)
{
	struct lp_target *t = lp_tracker_find(tr, pid);

	return t && !t->exited ? t : NULL;
}

static int append(struct lp_tracker *tr, struct lp_target *t)
{
	if (tr->n == tr->cap) {
		size_t cap = tr->cap ? tr->cap * 2 : 16;
		struct lp_target **v = realloc(tr->v, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		tr->v = v;
		tr->cap = cap;
	}
	tr->v[tr->n++] = t;
	return 0;
}

static void forget(struct lp_tracker *tr, size_t i)
{
	if (tr->v[i]->exited)
		tr->nexited--;
	target_free(tr, tr->v[i]);
	memmove(&tr->v[i], &tr->v[i + 1], (tr->n - i - 1) * sizeof(*tr->v));
	tr->n--;
}

/* Keeps at most max_processes exited targets: the oldest exit goes first. */
static void evict_exited(struct lp_tracker *tr)
{
	while (tr->nexited > tr->cfg->max_processes) {
		size_t oldest = tr->n;

		for (size_t i = 0; i < tr->n; i++)
			if (tr->v[i]->exited &&
			    (oldest == tr->n || tr->v[i]->exit_seq < tr->v[oldest]->exit_seq))
				oldest = i;
		if (oldest == tr->n)
			return;
		forget(tr, oldest);
		tr->exited_evicted++;
	}
}

size_t lp_tracker_expire(struct lp_tracker *tr, uint64_t now_ns, uint64_t retention_ns)
{
	size_t n = 0;

	for (size_t i = tr->n; i > 0; i--) {
		struct lp_target *t = tr->v[i - 1];

		if (t->exited && now_ns > t->exited_at_ns &&
		    now_ns - t->exited_at_ns >= retention_ns) {
			log_info("pid %d (%s): forgotten, exited %.0f s ago (retention)",
				 (int)t->pid, t->comm, (double)(now_ns - t->exited_at_ns) / 1e9);
			forget(tr, i - 1);
			n++;
		}
	}
	return n;
}

/* Queues an exited target's futex addresses for lp_tracker_harvest(). */
static void harvest_later(struct lp_tracker *tr, const struct lp_target *t)
{
	if (tr->nharvest == tr->harvest_cap) {
		size_t cap = tr->harvest_cap ? 2 * tr->harvest_cap : 64;
		struct lp_harvest *v = realloc(tr->harvest, cap * sizeof(*v));

		if (!v)
			return; /* its addresses stay until maps_gc() finds them orphaned */
		tr->harvest = v;
		tr->harvest_cap = cap;
	}
	tr->harvest[tr->nharvest++] = (struct lp_harvest){(__u32)t->pid, t->exit_seq};
}

static void mark_exited(struct lp_tracker *tr, struct lp_target *t)
{
	t->exited = true;
	t->exited_at_ns = t->final && t->final->exit_ns ? t->final->exit_ns : lp_now_ns();
	t->exit_seq = ++tr->exit_seq;
	tr->nexited++;
	harvest_later(tr, t);
	if (tr->on_exit)
		tr->on_exit(tr->userdata, t);
	evict_exited(tr);
}

/* At most this many refused processes wait for room; more are only counted. */
#define LP_WAITING_MAX 1024

static void wait_for_room(struct lp_tracker *tr, pid_t pid, uint64_t starttime,
			  const char *matched_by)
{
	struct lp_waiting *v;

	for (size_t i = 0; i < tr->nwaiting; i++)
		if (tr->waiting[i].pid == pid && tr->waiting[i].starttime == starttime)
			return;
	if (tr->nwaiting == LP_WAITING_MAX)
		return;
	v = realloc(tr->waiting, (tr->nwaiting + 1) * sizeof(*v));
	if (!v)
		return;
	tr->waiting = v;
	v[tr->nwaiting++] = (struct lp_waiting){pid, starttime, matched_by};
}

int lp_tracker_retry(struct lp_tracker *tr)
{
	size_t k = 0, live = tr->n - tr->nexited;
	int added = 0;

	for (size_t i = 0; i < tr->nwaiting; i++) {
		struct lp_waiting w = tr->waiting[i];
		int r;

		if (!lp_proc_alive(w.pid, w.starttime))
			continue; /* gone while it waited */
		if (live >= tr->cfg->max_processes) {
			tr->waiting[k++] = w;
			continue;
		}
		r = lp_tracker_add(tr, w.pid, w.matched_by);
		if (r == 0) {
			log_info("pid %d: room in the procs map again, tracking it now",
				 (int)w.pid);
			live++;
			added++;
		} else if (r == -ENOSPC) {
			tr->waiting[k++] = w; /* still full after all: it keeps its place */
		}
	}
	tr->nwaiting = k;
	return added;
}

/* Clears the mark of a dead process whose procs entry the daemon deleted (the exit hook
 * clears it only when it finds the entry). A process that took the pid since and was put
 * into procs at its exec is marked again. */
static void unmark(struct lp_tracker *tr, __u32 tgid)
{
	struct lp_proc_stats *buf;

	if (!tr->tgid_marks || tgid >= tr->ntgid_marks)
		return;
	tr->tgid_marks[tgid] = 0;
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	buf = malloc(sizeof(*buf));
	if (!buf || bpf_map_lookup_elem(tr->procs_fd, &tgid, buf) == 0)
		tr->tgid_marks[tgid] = 1;
	free(buf);
}

/* Fills t from /proc: what it runs, who it is. */
static void read_target(struct lp_target *t, pid_t pid, const struct lp_proc_stat *st)
{
	char exe[PATH_MAX];

	t->pid = pid;
	t->starttime = st->starttime;
	memcpy(t->comm, st->comm, sizeof(t->comm));
	if (lp_proc_read_exe(pid, exe, sizeof(exe)) == 0)
		t->exe = strdup(exe);
	lp_identity_read(&t->ident, pid, "/proc");
	if (lp_proc_read_uid(pid, &t->uid) < 0)
		t->uid = (uid_t)-1;
}

bool lp_tracker_tracking(const struct lp_tracker *tr)
{
	__u32 k;

	return bpf_map_get_next_key(tr->procs_fd, NULL, &k) == 0;
}

int lp_tracker_add(struct lp_tracker *tr, pid_t pid, const char *matched_by)
{
	struct lp_proc_stat st;
	struct lp_proc_stats *zero = NULL;
	struct lp_target *t = NULL;
	__u32 key = (__u32)pid;
	int r;

	if (find_live(tr, pid))
		return -EALREADY;
	r = lp_proc_read_stat(pid, &st);
	if (r < 0)
		return r;
	zero = calloc(1, sizeof(*zero));
	t = calloc(1, sizeof(*t));
	if (!zero || !t) {
		r = -ENOMEM;
		goto fail;
	}
	zero->tgid = key;
	zero->tracked_since_ns = lp_now_ns();
	if (tr->before_insert)
		tr->before_insert(tr->userdata);
	/* Marked first: from the insert on, its tasks' events must not be skipped as not ours.
	 * A mark left behind by a failed insert only costs a lookup. */
	if (tr->tgid_marks && (size_t)pid < tr->ntgid_marks) {
		tr->tgid_marks[pid] = 1;
		__atomic_thread_fence(__ATOMIC_SEQ_CST);
	}
	if (bpf_map_update_elem(tr->procs_fd, &key, zero, BPF_NOEXIST) < 0) {
		r = -errno;
		/* An entry the kernel made at exec (a --comm match) is adopted as it is: it has
		 * counted since the exec. Gone again: the process exited meanwhile. */
		if (r == -EEXIST)
			r = bpf_map_lookup_elem(tr->procs_fd, &key, zero) == 0 ? 0 : -ESRCH;
		if (r == -E2BIG) {
			tr->procs_full++;
			r = -ENOSPC;
			wait_for_room(tr, pid, st.starttime, matched_by);
		}
		if (r < 0)
			goto fail;
	}
	/* The process may have begun to exit before the insert (its pid even reused): then its
	 * exit hook may have run already and no hook would ever delete the entry. After the
	 * insert, a thread that has not begun to exit means the hook is still to come; a zombie
	 * or a process whose every thread is past PF_EXITING does not (the ghosts of short-lived
	 * processes came from accepting those). */
	if (!lp_proc_alive(pid, st.starttime)) {
		tr->exited_untracked++;
		r = -ESRCH;
		goto fail_inserted;
	}
	read_target(t, pid, &st);
	t->matched_by = matched_by;
	t->tracked_since_ns = zero->tracked_since_ns;
	r = append(tr, t);
	if (r < 0)
		goto fail_inserted;
	free(zero);
	log_info("tracking pid %d (%s) matched by %s", (int)pid, t->comm, matched_by);
	return 0;

fail_inserted:
	bpf_map_delete_elem(tr->procs_fd, &key);
	unmark(tr, key);
fail:
	free(zero);
	target_free(tr, t);
	return r;
}

/* A process the exec hook put into "procs" itself (e->inserted): its exit hook sends its
 * final record, later in this ring buffer, so it is adopted whether it still runs or not
 * (a process that lived 10 ms was gone before a busy daemon read its exec, and its numbers
 * with it). Nothing is inserted or deleted here: the kernel's entry is the process's. What
 * /proc no longer shows stays unknown; the exec record's comm names it. */
static int adopt_exec(struct lp_tracker *tr, const struct lp_ev_exec *e, const char *comm,
		      const char *matched_by)
{
	pid_t pid = (pid_t)e->tgid;
	struct lp_proc_stat st;
	struct lp_target *t;
	int r;

	if (find_live(tr, pid))
		return -EALREADY;
	t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	if (lp_proc_read_stat(pid, &st) == 0) {
		read_target(t, pid, &st);
	} else {
		t->pid = pid;
		t->uid = (uid_t)-1;
		t->exiting = true;
		memcpy(t->comm, comm, strnlen(comm, sizeof(t->comm) - 1));
	}
	t->matched_by = matched_by;
	t->tracked_since_ns = lp_now_ns();
	r = append(tr, t);
	if (r < 0) {
		target_free(tr, t);
		return r;
	}
	log_info("tracking pid %d (%s) matched by %s%s", (int)pid, t->comm, matched_by,
		 t->exiting ? ", exited already: its final record follows" : "");
	return 0;
}

/* Which rule, if any, selects this process: "comm", "exe" or NULL. */
static const char *match(const struct lp_config *cfg, pid_t pid, const char *comm)
{
	char exe[PATH_MAX];

	for (size_t i = 0; i < cfg->ncomms; i++)
		if (strcmp(cfg->comms[i], comm) == 0)
			return "comm";
	if (cfg->nexes == 0 || lp_proc_read_exe(pid, exe, sizeof(exe)) < 0)
		return NULL;
	for (size_t i = 0; i < cfg->nexes; i++)
		if (fnmatch(cfg->exes[i], exe, 0) == 0)
			return "exe";
	return NULL;
}

/* Tracks pid if a rule selects it; e: its exec record, NULL when found in /proc. */
static void add_matched(struct lp_tracker *tr, pid_t pid, const char *comm,
			const struct lp_ev_exec *e)
{
	const char *why = match(tr->cfg, pid, comm);
	int r;

	if (!why)
		return;
	r = e && e->inserted ? adopt_exec(tr, e, comm, why) : lp_tracker_add(tr, pid, why);
	if (r == -ENOSPC)
		log_warning("pid %d (%s) matched by %s, but %u processes are tracked already "
			    "(--max-processes), ignoring",
			    (int)pid, comm, why, tr->cfg->max_processes);
	else if (r < 0 && r != -EALREADY && r != -ESRCH)
		log_warning_errno(r, "track pid %d (%s): %m, ignoring", (int)pid, comm);
}

int lp_tracker_scan(struct lp_tracker *tr)
{
	size_t before = tr->n;
	struct dirent *de;
	DIR *d;

	if (tr->cfg->ncomms == 0 && tr->cfg->nexes == 0)
		return 0;
	d = opendir("/proc");
	if (!d)
		return log_error_errno(-errno, "open /proc: %m");
	while ((de = readdir(d))) {
		char comm[16];
		pid_t pid;

		if (lp_parse_pid(de->d_name, &pid) < 0)
			continue;
		if (lp_proc_read_comm(pid, 0, comm, sizeof(comm)) < 0)
			continue;
		add_matched(tr, pid, comm, NULL);
	}
	closedir(d);
	return (int)(tr->n - before);
}

static int compare_wait_ns(const void *a, const void *b)
{
	const struct lp_futex_view *x = a, *y = b;

	return x->v.wait_ns < y->v.wait_ns ? 1 : x->v.wait_ns > y->v.wait_ns ? -1 : 0;
}

int lp_futex_list_push(struct lp_futex_list *l, uint64_t uaddr, const struct lp_futex_val *val)
{
	if (l->n == l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 64;
		struct lp_futex_view *v = realloc(l->v, cap * sizeof(*v));

		if (!v)
			return -ENOMEM;
		l->v = v;
		l->cap = cap;
	}
	l->v[l->n].uaddr = uaddr;
	l->v[l->n].v = *val;
	l->n++;
	return 0;
}

void lp_futex_list_top(struct lp_futex_list *l, struct lp_futex_top *top)
{
	memset(top, 0, sizeof(*top));
	top->naddrs = l->n;
	top->ntop = l->n < LP_FUTEX_TOP ? l->n : LP_FUTEX_TOP;
	if (l->n) {
		qsort(l->v, l->n, sizeof(*l->v), compare_wait_ns);
		memcpy(top->top, l->v, top->ntop * sizeof(*l->v));
	}
	free(l->v);
	memset(l, 0, sizeof(*l));
}

struct futex_take {
	__u32 tgid;
	struct lp_futex_list list;
	struct lp_keys gone;
};

static int futex_take_one(void *ctx, const void *key, const void *value)
{
	struct futex_take *x = ctx;
	const struct lp_futex_key *k = key;
	int r;

	if (k->tgid != x->tgid)
		return 0;
	r = lp_futex_list_push(&x->list, k->uaddr, value);
	return r ? r : lp_keys_add(&x->gone, key);
}

/* Moves the futex addresses of tgid out of the kernel map into top, now (a live process's
 * reset; exits go through lp_tracker_harvest()). */
static int futex_take(int futex_fd, uint32_t tgid, struct lp_futex_top *top)
{
	struct futex_take x = {.tgid = tgid, .gone.size = sizeof(struct lp_futex_key)};
	int r = lp_map_walk(futex_fd, sizeof(struct lp_futex_key), sizeof(struct lp_futex_val),
			    futex_take_one, &x);

	lp_map_delete(futex_fd, &x.gone);
	lp_futex_list_top(&x.list, top);
	return r;
}

static int compare_harvest(const void *a, const void *b)
{
	const struct lp_harvest *x = a, *y = b;

	if (x->tgid != y->tgid)
		return x->tgid < y->tgid ? -1 : 1;
	return x->exit_seq < y->exit_seq ? -1 : x->exit_seq > y->exit_seq;
}

struct harvest_pass {
	const struct lp_harvest *v; /* sorted by tgid; one per tgid */
	size_t n;
	struct lp_futex_list *lists;
	struct lp_keys gone;
};

static int harvest_one(void *ctx, const void *key, const void *value)
{
	struct harvest_pass *h = ctx;
	const struct lp_futex_key *k = key;
	size_t lo = 0, hi = h->n;
	int r;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (h->v[mid].tgid < k->tgid)
			lo = mid + 1;
		else
			hi = mid;
	}
	if (lo == h->n || h->v[lo].tgid != k->tgid)
		return 0;
	r = lp_futex_list_push(&h->lists[lo], k->uaddr, value);
	return r ? r : lp_keys_add(&h->gone, key);
}

void lp_tracker_harvest(struct lp_tracker *tr)
{
	struct harvest_pass h = {.v = tr->harvest, .gone.size = sizeof(struct lp_futex_key)};
	size_t n = 0;

	if (!tr->nharvest)
		return;
	/* A pid reused within one batch: the later exit keeps what is left in the map. */
	qsort(tr->harvest, tr->nharvest, sizeof(*tr->harvest), compare_harvest);
	for (size_t i = 0; i < tr->nharvest; i++) {
		if (n && tr->harvest[n - 1].tgid == tr->harvest[i].tgid)
			n--;
		tr->harvest[n++] = tr->harvest[i];
	}
	h.n = n;
	h.lists = calloc(n, sizeof(*h.lists));
	if (h.lists)
		lp_map_walk(tr->futex_fd, sizeof(struct lp_futex_key), sizeof(struct lp_futex_val),
			    harvest_one, &h);
	lp_map_delete(tr->futex_fd, &h.gone);
	for (size_t i = 0; h.lists && i < n; i++) {
		struct lp_target *t = lp_tracker_find(tr, (pid_t)h.v[i].tgid);

		if (t && t->exited && t->exit_seq == h.v[i].exit_seq && t->final_futex)
			lp_futex_list_top(&h.lists[i], t->final_futex);
		else
			free(h.lists[i].v);
	}
	free(h.lists);
	tr->nharvest = 0;
}

void lp_preempt_top_add(struct lp_preempt_top *top, uint32_t by_tgid,
			const struct lp_preempt_val *v)
{
	size_t i = top->ntop < LP_PREEMPT_TOP ? top->ntop++ : LP_PREEMPT_TOP;

	top->npreemptors++;
	/* Kept sorted by wait, longest first: insertion into at most 8. */
	while (i > 0 && top->top[i - 1].v.wait_ns < v->wait_ns) {
		if (i < LP_PREEMPT_TOP)
			top->top[i] = top->top[i - 1];
		i--;
	}
	if (i < LP_PREEMPT_TOP) {
		top->top[i].by_tgid = by_tgid;
		top->top[i].v = *v;
	}
}

struct preempt_read {
	__u32 tgid;
	bool take;
	struct lp_preempt_top *top;
	struct lp_keys gone;
};

static int preempt_read_one(void *ctx, const void *key, const void *value)
{
	struct preempt_read *x = ctx;
	const struct lp_preempt_key *k = key;

	if (k->tgid != x->tgid)
		return 0;
	lp_preempt_top_add(x->top, k->by_tgid, value);
	return x->take ? lp_keys_add(&x->gone, key) : 0;
}

int lp_preempt_read(int fd, uint32_t tgid, bool take, struct lp_preempt_top *top)
{
	struct preempt_read x = {tgid, take, top, {.size = sizeof(struct lp_preempt_key)}};
	int r;

	memset(top, 0, sizeof(*top));
	if (fd < 0)
		return 0;
	r = lp_map_walk(fd, sizeof(struct lp_preempt_key), sizeof(struct lp_preempt_val),
			preempt_read_one, &x);
	lp_map_delete(fd, &x.gone);
	return r;
}

struct threads_of {
	__u32 tgid;
	struct lp_keys tids;
};

static int threads_of_one(void *ctx, const void *key, const void *value)
{
	struct threads_of *x = ctx;
	const struct lp_thread *th = value;

	return th->tgid == x->tgid ? lp_keys_add(&x->tids, key) : 0;
}

/* The tids of tgid's entries in the threads map, in tids (of sizeof(__u32)). */
static void threads_of(struct lp_tracker *tr, __u32 tgid, struct lp_keys *tids)
{
	struct threads_of x = {tgid, {.size = sizeof(__u32)}};

	lp_map_walk(tr->threads_fd, sizeof(__u32), sizeof(struct lp_thread), threads_of_one, &x);
	*tids = x.tids;
}

/* Deletes the thread entries of tgid that an exit hook left (it only runs for threads of
 * processes in the procs map). */
static void threads_drop(struct lp_tracker *tr, __u32 tgid)
{
	struct lp_keys tids;

	threads_of(tr, tgid, &tids);
	lp_map_delete(tr->threads_fd, &tids);
}

/* Ends a target whose exit record did not come: final is what is known of its totals
 * (NULL: nothing, the data is lost); its futex addresses are still in their map. */
static void exit_without_record(struct lp_tracker *tr, struct lp_target *t,
				struct lp_proc_stats *final)
{
	t->final = final;
	t->exit_lost = !final;
	t->final_futex = calloc(1, sizeof(*t->final_futex));
	mark_exited(tr, t);
}

/* The safety net under the exit hook: a tracked process that is no longer alive but still
 * has its kernel entry lost its exit hook (exited between a check and an insert, however
 * the kernel orders it). Its entry becomes its final record and is removed, so that maps
 * return to their baseline and the process reads as exited with its data. */
/* Whether entries of tgid in the per-thread and per-futex maps are orphans: the process is
 * neither tracked and running nor in the kernel's procs map (a process found at its exec
 * is there before the daemon adopts it). */
static bool orphaned(struct lp_tracker *tr, __u32 tgid, struct lp_proc_stats *buf)
{
	struct lp_target *t = lp_tracker_find(tr, (pid_t)tgid);

	return (!t || t->exited) && bpf_map_lookup_elem(tr->procs_fd, &tgid, buf) < 0;
}

struct gc_pass {
	struct lp_tracker *tr;
	struct lp_proc_stats *buf;
	struct lp_keys gone;
};

static int gc_futex_one(void *ctx, const void *key, const void *value)
{
	struct gc_pass *g = ctx;

	(void)value;
	return orphaned(g->tr, ((const struct lp_futex_key *)key)->tgid, g->buf)
		       ? lp_keys_add(&g->gone, key)
		       : 0;
}

static int gc_thread_one(void *ctx, const void *key, const void *value)
{
	struct gc_pass *g = ctx;

	return orphaned(g->tr, ((const struct lp_thread *)value)->tgid, g->buf)
		       ? lp_keys_add(&g->gone, key)
		       : 0;
}

/* Exited processes' preemptors go into their final records; orphans are deleted. */
static int gc_preempt_one(void *ctx, const void *key, const void *value)
{
	struct gc_pass *g = ctx;
	const struct lp_preempt_key *k = key;
	struct lp_target *t = lp_tracker_find(g->tr, (pid_t)k->tgid);

	if (t && t->exited && !t->exit_lost) {
		if (!t->final_preempt)
			t->final_preempt = calloc(1, sizeof(*t->final_preempt));
		if (t->final_preempt)
			lp_preempt_top_add(t->final_preempt, k->by_tgid, value);
	} else if (!orphaned(g->tr, k->tgid, g->buf)) {
		return 0;
	}
	return lp_keys_add(&g->gone, key);
}

/* Entries the kernel hooks left behind for processes gone: a futex wait that ended between
 * an exit's record and its reading, a thread that ran again past its exit hook, the
 * addresses of processes whose exit record the ring buffer had no room for. Exited
 * processes' preemptors move into their final records here too. One pass over each map
 * per sweep, however many processes exited since the last (a pass per exit cost the map's
 * size for each of thousands of short-lived processes). */
static void maps_gc(struct lp_tracker *tr)
{
	struct gc_pass g = {tr, malloc(sizeof(struct lp_proc_stats)), {.size = 0}};

	if (!g.buf)
		return;
	g.gone.size = sizeof(struct lp_futex_key);
	lp_map_walk(tr->futex_fd, sizeof(struct lp_futex_key), sizeof(struct lp_futex_val),
		    gc_futex_one, &g);
	lp_map_delete(tr->futex_fd, &g.gone);
	g.gone.size = sizeof(__u32);
	lp_map_walk(tr->threads_fd, sizeof(__u32), sizeof(struct lp_thread), gc_thread_one, &g);
	lp_map_delete(tr->threads_fd, &g.gone);
	if (tr->preempt_fd >= 0) {
		g.gone.size = sizeof(struct lp_preempt_key);
		lp_map_walk(tr->preempt_fd, sizeof(struct lp_preempt_key),
			    sizeof(struct lp_preempt_val), gc_preempt_one, &g);
		lp_map_delete(tr->preempt_fd, &g.gone);
	}
	free(g.buf);
}

int lp_tracker_sweep(struct lp_tracker *tr)
{
	struct lp_proc_stats *buf = NULL;
	int n = 0;

	maps_gc(tr);

	/* Seen dead at two sweeps a second apart: an exit hook that was due has run. */
	for (size_t i = 0; i < tr->n; i++) {
		struct lp_target *t = tr->v[i];

		if (!t->exited)
			t->dead_sweeps =
				lp_proc_alive(t->pid, t->starttime) ? 0 : t->dead_sweeps + 1;
	}
	for (size_t i = 0; i < tr->n; i++) {
		struct lp_target *t = tr->v[i];
		__u32 key = (__u32)t->pid;

		if (t->exited || t->dead_sweeps < 2)
			continue;
		if (t->exiting) {
			/* Its record was due before this sweep's drain: lost. The entry in
			 * procs, if any, is a newer process's. */
			log_warning("pid %d (%s) exited but its final record was lost", (int)t->pid,
				    t->comm);
			exit_without_record(tr, t, NULL);
			n++;
			i = (size_t)-1;
			continue;
		}
		if (!buf && !(buf = malloc(sizeof(*buf))))
			return -ENOMEM;
		if (bpf_map_lookup_elem(tr->procs_fd, &key, buf) < 0)
			continue; /* the hook ran: its record is lp_tracker_reap()'s business */
		bpf_map_delete_elem(tr->procs_fd, &key);
		buf->exit_ns = lp_now_ns();
		unmark(tr, key);
		threads_drop(tr, key);
		tr->exits_recovered++;
		log_info("pid %d (%s) exited; its exit was recovered from /proc", (int)t->pid,
			 t->comm);
		exit_without_record(tr, t, buf);
		buf = NULL;
		n++;
		i = (size_t)-1; /* mark_exited() may have evicted entries: start over */
	}
	free(buf);
	lp_tracker_harvest(tr);
	return n;
}

int lp_tracker_reap(struct lp_tracker *tr, pid_t pid)
{
	struct lp_proc_stats *buf = malloc(sizeof(*buf));
	int n = 0;

	if (!buf)
		return -ENOMEM;
	for (size_t i = 0; i < tr->n; i++) {
		struct lp_target *t = tr->v[i];
		__u32 key = (__u32)t->pid;

		if (t->exited || (pid && t->pid != pid) ||
		    bpf_map_lookup_elem(tr->procs_fd, &key, buf) == 0 || errno != ENOENT)
			continue;
		log_warning("pid %d (%s) exited but its final record was lost (ring buffer full)",
			    (int)t->pid, t->comm);
		exit_without_record(tr, t, NULL);
		n++;
		/* mark_exited() may have evicted entries: start over. */
		i = (size_t)-1;
	}
	free(buf);
	lp_tracker_harvest(tr);
	return n;
}

static void on_exit_record(struct lp_tracker *tr, const struct lp_ev_exit *e)
{
	struct lp_target *t = find_live(tr, (pid_t)e->stats.tgid);

	if (!t)
		return;
	t->final = malloc(sizeof(*t->final));
	t->final_futex = calloc(1, sizeof(*t->final_futex));
	if (t->final && t->final_futex) {
		memcpy(t->final, &e->stats, sizeof(*t->final));
	} else {
		t->exit_lost = true;
	}
	log_info("pid %d (%s) exited", (int)t->pid, t->comm);
	mark_exited(tr, t);
}

int lp_tracker_restore(struct lp_tracker *tr, struct lp_target *t)
{
	int r = append(tr, t);

	if (r < 0) {
		target_free(tr, t);
		return r;
	}
	if (t->exited) {
		t->exit_seq = ++tr->exit_seq;
		tr->nexited++;
		evict_exited(tr);
	}
	return 0;
}

/* Zeroes what a thread has counted; its scheduler state stays, or its next switch would
 * be misaccounted. */
static void thread_zero_counters(struct lp_thread *th)
{
	th->oncpu_ns = th->runq_ns = th->off_blocked_ns = th->off_preempted_ns = 0;
	th->futex_ns = th->futex_waits = th->nvcsw = th->nivcsw = th->migrations = 0;
	th->faults_min = th->faults_maj = 0;
	th->samples = th->samples_sync = th->samples_ggml = 0;
}

static void reset_kernel(struct lp_tracker *tr, struct lp_target *t)
{
	struct lp_proc_stats *zero = calloc(1, sizeof(*zero));
	struct lp_futex_top drop;
	struct lp_preempt_top pdrop;
	__u32 key = (__u32)t->pid;
	struct lp_keys tids;
	struct lp_thread th;

	if (zero) {
		zero->tgid = key;
		zero->tracked_since_ns = t->tracked_since_ns;
		/* BPF_EXIST: an entry the exit hook deleted meanwhile must stay deleted. */
		bpf_map_update_elem(tr->procs_fd, &key, zero, BPF_EXIST);
		free(zero);
	}
	futex_take(tr->futex_fd, key, &drop);
	lp_preempt_read(tr->preempt_fd, key, true, &pdrop);
	threads_of(tr, key, &tids);
	for (size_t i = 0; i < tids.n; i++) {
		__u32 tid;

		memcpy(&tid, tids.v + i * sizeof(tid), sizeof(tid));
		if (bpf_map_lookup_elem(tr->threads_fd, &tid, &th) < 0 || th.tgid != key)
			continue;
		thread_zero_counters(&th);
		bpf_map_update_elem(tr->threads_fd, &tid, &th, BPF_EXIST);
	}
	free(tids.v);
}

int lp_tracker_reset(struct lp_tracker *tr, struct lp_target *t)
{
	t->tracked_since_ns = lp_now_ns();
	free(t->base);
	t->base = NULL;
	if (t->exited) {
		if (t->final) {
			memset(t->final->ctr, 0, sizeof(t->final->ctr));
			memset(t->final->hist, 0, sizeof(t->final->hist));
			t->final->tracked_since_ns = t->tracked_since_ns;
		}
		if (t->final_futex)
			memset(t->final_futex, 0, sizeof(*t->final_futex));
		if (t->final_preempt)
			memset(t->final_preempt, 0, sizeof(*t->final_preempt));
	} else {
		reset_kernel(tr, t);
	}
	log_info("pid %d (%s): counters reset", (int)t->pid, t->comm);
	return 0;
}

int lp_tracker_event(void *tracker, void *data, size_t size)
{
	struct lp_tracker *tr = tracker;
	const struct lp_ev_exec *x = data;
	__u32 type;

	if (size < sizeof(type))
		return 0;
	memcpy(&type, data, sizeof(type));
	if (type == LP_EV_EXEC && size >= sizeof(*x)) {
		char comm[LP_COMM_LEN + 1];

		memcpy(comm, x->comm, LP_COMM_LEN);
		comm[LP_COMM_LEN] = '\0';
		add_matched(tr, (pid_t)x->tgid, comm, x);
	} else if (type == LP_EV_EXIT && size >= sizeof(struct lp_ev_exit)) {
		on_exit_record(tr, data);
	}
	return 0;
}
