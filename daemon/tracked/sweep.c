// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* The kernel's maps kept in step with the tracked processes' lives (sweep.h). */
#include "tracked/sweep.h"

#include <bpf/bpf.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/procfs.h"
#include "kernel/mapwalk.h"
#include "tracked/hot.h"
#include "tracked/packed.h"

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
 * reset; exits go through lp_tracker_take_exited_futexes()). */
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

void lp_tracker_take_exited_futexes(struct lp_tracker *tr)
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
	__u32 key = (__u32)t->pid;
	struct lp_proc_stats *buf;

	/* Where the record is lost, so is its procs part: each CPU's goes too, unless procs
	 * holds the pid again (a newer process's, whose part it then is). */
	if (final) {
		lp_hot_take(tr->hot_fd, key, final);
	} else if ((buf = malloc(sizeof(*buf)))) {
		if (bpf_map_lookup_elem(tr->procs_fd, &key, buf) < 0 && errno == ENOENT)
			lp_hot_take(tr->hot_fd, key, NULL);
		free(buf);
	}
	t->final = final;
	t->exit_lost = !final;
	t->final_futex = calloc(1, sizeof(*t->final_futex));
	lp_tracker_mark_exited(tr, t);
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

static int gc_hot_one(void *ctx, const void *key, const void *value)
{
	struct gc_pass *g = ctx;

	(void)value;
	return orphaned(g->tr, *(const __u32 *)key, g->buf) ? lp_keys_add(&g->gone, key) : 0;
}

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
	if (tr->hot_fd >= 0) {
		/* Keys alone: a per-CPU value is one per CPU. */
		g.gone.size = sizeof(__u32);
		lp_map_walk(tr->hot_fd, sizeof(__u32), 0, gc_hot_one, &g);
		lp_map_delete(tr->hot_fd, &g.gone);
	}
	free(g.buf);
}

/* The pids of the live targets seen dead at min_dead_sweeps sweeps or more, collected
 * before any of them is marked exited: marking one may evict others and move the rest, and
 * a scan started over after each (as before) cost a procs lookup per pending target per
 * exit, a stall of seconds once thousands of records were lost at once. NULL with *n = 0
 * when none. */
static pid_t *live_pids(const struct lp_tracker *tr, unsigned min_dead_sweeps, size_t *n)
{
	pid_t *v = NULL;

	*n = 0;
	for (size_t i = 0; i < tr->n; i++) {
		const struct lp_target *t = tr->v[i];

		if (t->exited || t->dead_sweeps < min_dead_sweeps)
			continue;
		if (!v && !(v = malloc(tr->n * sizeof(*v))))
			return NULL;
		v[(*n)++] = t->pid;
	}
	return v;
}

int lp_tracker_find_missed_exits(struct lp_tracker *tr)
{
	struct lp_proc_stats *buf = NULL;
	size_t npids;
	pid_t *pids;
	int n = 0;

	maps_gc(tr);

	/* Seen dead at two sweeps a second apart: an exit hook that was due has run. */
	for (size_t i = 0; i < tr->n; i++) {
		struct lp_target *t = tr->v[i];

		if (!t->exited)
			t->dead_sweeps =
				lp_proc_alive(t->pid, t->starttime) ? 0 : t->dead_sweeps + 1;
	}
	pids = live_pids(tr, 2, &npids);
	for (size_t i = 0; i < npids; i++) {
		struct lp_target *t = lp_tracker_find(tr, pids[i]);
		__u32 key = (__u32)pids[i];

		if (!t || t->exited)
			continue;
		if (t->exiting) {
			/* Its record was due before this sweep's drain: lost. The entry in
			 * procs, if any, is a newer process's. */
			log_warning("pid %d (%s) exited but its final record was lost", (int)t->pid,
				    t->comm);
			exit_without_record(tr, t, NULL);
			n++;
			continue;
		}
		if (!buf && !(buf = malloc(sizeof(*buf)))) {
			free(pids);
			return -ENOMEM;
		}
		if (bpf_map_lookup_elem(tr->procs_fd, &key, buf) < 0)
			continue; /* the hook ran: its record is lp_tracker_find_lost_exits()'s business */
		bpf_map_delete_elem(tr->procs_fd, &key);
		buf->exit_ns = lp_now_ns();
		lp_tracker_unmark(tr, key);
		threads_drop(tr, key);
		tr->exits_recovered++;
		log_info("pid %d (%s) exited; its exit was recovered from /proc", (int)t->pid,
			 t->comm);
		exit_without_record(tr, t, buf);
		buf = NULL;
		n++;
	}
	free(pids);
	free(buf);
	lp_tracker_take_exited_futexes(tr);
	return n;
}

int lp_tracker_find_lost_exits(struct lp_tracker *tr, pid_t pid)
{
	struct lp_proc_stats *buf = malloc(sizeof(*buf));
	size_t npids;
	pid_t *pids;
	int n = 0;

	if (!buf)
		return -ENOMEM;
	pids = live_pids(tr, 0, &npids);
	for (size_t i = 0; i < npids; i++) {
		struct lp_target *t;
		__u32 key = (__u32)pids[i];

		if ((pid && pids[i] != pid) || bpf_map_lookup_elem(tr->procs_fd, &key, buf) == 0 ||
		    errno != ENOENT)
			continue;
		t = lp_tracker_find(tr, pids[i]);
		if (!t || t->exited)
			continue;
		log_warning("pid %d (%s) exited but its final record was lost (ring buffer full)",
			    (int)t->pid, t->comm);
		exit_without_record(tr, t, NULL);
		n++;
	}
	free(pids);
	free(buf);
	lp_tracker_take_exited_futexes(tr);
	return n;
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
	lp_hot_take(tr->hot_fd, key, NULL);
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
		struct lp_proc_stats *zero = malloc(sizeof(*zero));

		/* Its header kept, its counts zeroed, packed again. */
		if (zero && lp_target_final(t, zero)) {
			struct lp_packed *p;

			memset(zero->ctr, 0, sizeof(zero->ctr));
			memset(zero->hist, 0, sizeof(zero->hist));
			zero->tracked_since_ns = t->tracked_since_ns;
			if (t->final) {
				*t->final = *zero;
			} else if ((p = lp_stats_pack(zero))) {
				free(t->final_packed);
				t->final_packed = p;
			}
		}
		free(zero);
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
