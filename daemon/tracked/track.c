// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* Tracking: inserting pids into the kernel's "procs" map, matching new processes by comm or
 * exe, and keeping the final record of each tracked process when it exits. */
#include "tracked/track.h"

#include <bpf/bpf.h>
#include <dirent.h>
#include <errno.h>
#include <fnmatch.h>
#include <limits.h>
#include <malloc.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/log.h"
#include "kernel/mapwalk.h"
#include "tracked/hot.h"
#include "tracked/packed.h"
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
	tr->hot_fd = -1;
}

static void target_free(const struct lp_tracker *tr, struct lp_target *t)
{
	if (!t)
		return;
	free(t->exe);
	free(t->final);
	free(t->final_packed);
	free(t->final_futex);
	free(t->final_preempt);
	free(t->base);
	if (t->requests && tr->free_requests)
		tr->free_requests(t->requests);
	if (t->eng && tr->free_eng)
		tr->free_eng(t->eng);
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

/* Queues an exited target's futex addresses for lp_tracker_take_exited_futexes(). */
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

/* An exited target's totals packed: 18 KiB whole, a few hundred bytes packed. glibc keeps
 * what is freed in its heap, so a megabyte of it is handed back at a time (1,000 exits
 * left 86 MiB resident packed without that, against 75 MiB whole). */
static void pack_final(struct lp_tracker *tr, struct lp_target *t)
{
	struct lp_packed *p = t->final ? lp_stats_pack(t->final) : NULL;

	if (!p)
		return; /* none, or out of memory: it stays whole */
	free(t->final_packed);
	t->final_packed = p;
	free(t->final);
	t->final = NULL;
	tr->freed_since_trim += sizeof(struct lp_proc_stats) - lp_packed_size(p);
	if (tr->freed_since_trim >= (1 << 20)) {
		malloc_trim(0);
		tr->freed_since_trim = 0;
	}
}

bool lp_target_final(const struct lp_target *t, struct lp_proc_stats *out)
{
	if (t->final)
		*out = *t->final;
	else if (t->final_packed)
		lp_stats_unpack(t->final_packed, out);
	return t->final || t->final_packed;
}

void lp_tracker_mark_exited(struct lp_tracker *tr, struct lp_target *t)
{
	t->exited = true;
	t->exited_at_ns = t->final && t->final->exit_ns ? t->final->exit_ns : lp_now_ns();
	t->exit_seq = ++tr->exit_seq;
	tr->nexited++;
	harvest_later(tr, t);
	if (tr->on_exit)
		tr->on_exit(tr->userdata, t);
	pack_final(tr, t);
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
void lp_tracker_unmark(struct lp_tracker *tr, __u32 tgid)
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

/* Its threads' next switch-ins taken in full: the first look at each takes the starting
 * point of its totals, so a thread asleep when tracking starts has all it runs after it
 * counted (else the slice it wakes into was lost, up to its first switch-out). A thread
 * made meanwhile has its first switch-in taken by the new thread's program. */
static int open_thread(void *ctx, pid_t tid)
{
	const struct lp_tracker *tr = ctx;

	if ((size_t)tid < tr->ntgid_marks)
		tr->tid_open[tid] = 1;
	return 0;
}

static void open_threads(struct lp_tracker *tr, pid_t pid)
{
	if (tr->tid_open)
		lp_proc_each_task("/proc", pid, open_thread, tr);
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
	open_threads(tr, pid);
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
	lp_hot_take(tr->hot_fd, key, NULL);
	lp_tracker_unmark(tr, key);
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

static void on_exit_record(struct lp_tracker *tr, const struct lp_ev_exit *e)
{
	struct lp_target *t = find_live(tr, (pid_t)e->stats.tgid);

	if (!t) {
		lp_hot_take(tr->hot_fd, e->stats.tgid, NULL);
		return;
	}
	t->final = malloc(sizeof(*t->final));
	t->final_futex = calloc(1, sizeof(*t->final_futex));
	if (t->final && t->final_futex) {
		memcpy(t->final, &e->stats, sizeof(*t->final));
		/* The exit hook sent procs' part; each CPU's is still in the kernel. */
		lp_hot_take(tr->hot_fd, e->stats.tgid, t->final);
	} else {
		lp_hot_take(tr->hot_fd, e->stats.tgid, NULL);
		t->exit_lost = true;
	}
	log_info("pid %d (%s) exited", (int)t->pid, t->comm);
	lp_tracker_mark_exited(tr, t);
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
		pack_final(tr, t);
		evict_exited(tr);
	}
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
