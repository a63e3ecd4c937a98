// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* Timeline records (record.h). */
#include "timeline/record.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core.skel.h"
#include "base/log.h"
#include "engine/nodes.h"
#include "engine/precise.h"
#include "engine/requests.h"
#include "base/procfs.h"

void lp_recorder_init(struct lp_recorder *r, struct lp_core *core, struct lp_engines *g,
		      struct lp_tracker *tr, const char *version)
{
	memset(r, 0, sizeof(*r));
	r->core = core;
	r->g = g;
	r->tr = tr;
	r->version = version;
}

/* What rendering needed beyond the record: its thread, and the op names. */
static void render_free(struct lp_record *rec)
{
	if (rec->threaded)
		pthread_join(rec->thread, NULL);
	rec->threaded = false;
	for (size_t i = 0; i < rec->nops; i++)
		free(rec->op_names[i]);
	free(rec->op_names);
	free(rec->op_groups);
	rec->op_names = NULL;
	rec->op_groups = NULL;
	rec->nops = 0;
	free(rec->requests);
	rec->requests = NULL;
	rec->nrequests = 0;
	free(rec->nodes);
	rec->nodes = NULL;
	rec->nnodes = 0;
}

static void record_free(struct lp_record *rec)
{
	if (!rec)
		return;
	render_free(rec);
	for (size_t i = 0; i < rec->nthreads; i++)
		free((char *)rec->threads[i].name);
	free(rec->threads);
	for (size_t i = 0; i < rec->nmaps; i++)
		free((char *)rec->maps[i].name);
	free(rec->maps);
	free(rec->ev);
	free(rec->trace);
	lp_body_put(rec->shared);
	if (rec->pf)
		lp_pf_free(rec->pf);
	free(rec->pf);
	lp_stream_put(rec->stream);
	free(rec);
}

static void forget(struct lp_recorder *r, size_t i)
{
	record_free(r->v[i]);
	r->v[i] = r->v[--r->n];
	r->v[r->n] = NULL;
}

static int map_fd(const struct lp_recorder *r)
{
	return bpf_map__fd(r->core->skel->maps.recording);
}

/* Tells the kernel side how many processes are being recorded: none, no lookups. */
static void count_recordings(struct lp_recorder *r)
{
	__u32 n = 0;

	for (size_t i = 0; i < r->n; i++)
		n += !r->v[i]->finished;
	if (r->core && r->core->skel && r->core->skel->bss)
		r->core->skel->bss->recordings = n;
}

void lp_recorder_free(struct lp_recorder *r)
{
	while (r->n) {
		__u32 key = (__u32)r->v[r->n - 1]->pid;

		if (r->core && r->core->skel)
			bpf_map_delete_elem(map_fd(r), &key);
		forget(r, r->n - 1);
	}
	count_recordings(r);
}

static struct lp_record *find(struct lp_recorder *r, pid_t pid, size_t *at)
{
	for (size_t i = 0; i < r->n; i++)
		if (r->v[i]->pid == pid) {
			if (at)
				*at = i;
			return r->v[i];
		}
	return NULL;
}

/* Thread tid's name, added to those known unless it is. */
static int read_thread(void *ctx, pid_t tid)
{
	struct lp_record *rec = ctx;
	struct lp_trace_thread *v;
	char name[32];

	for (size_t i = 0; i < rec->nthreads; i++)
		if (rec->threads[i].tid == (uint32_t)tid)
			return 0;
	if (lp_proc_read_comm(rec->pid, tid, name, sizeof(name)) < 0)
		return 0; /* exited meanwhile */
	v = realloc(rec->threads, (rec->nthreads + 1) * sizeof(*v));
	if (!v)
		return -ENOMEM;
	rec->threads = v;
	v[rec->nthreads].tid = (uint32_t)tid;
	v[rec->nthreads].name = strdup(name);
	rec->nthreads++;
	return 0;
}

/* The names of the process's threads now, added to those known. */
static void read_threads(struct lp_record *rec)
{
	lp_proc_each_task("/proc", rec->pid, read_thread, rec);
}

/* The process's mappings now (at most 65,536), replacing what was read before. */
static void read_maps(struct lp_record *rec)
{
	struct lp_trace_map *v = NULL;
	char path[64], line[4200];
	size_t n = 0, cap = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/maps", (int)rec->pid);
	f = fopen(path, "re");
	if (!f)
		return;
	while (n < 65536 && fgets(line, sizeof(line), f)) {
		unsigned long long start, end;
		struct lp_trace_map *p;
		char *name = NULL;
		int off = 0;

		if (sscanf(line, "%llx-%llx %*s %*s %*s %*s %n", &start, &end, &off) < 2 || !off)
			continue;
		lp_proc_maps_path(line + off);
		name = strdup(line[off] ? line + off : "[anon]");
		/* Doubling: a process may have tens of thousands of mappings. */
		p = n < cap ? v : realloc(v, (cap = cap ? 2 * cap : 256) * sizeof(*v));
		if (p)
			v = p;
		if (!name || !p) {
			free(name);
			break;
		}
		v[n++] = (struct lp_trace_map){start, end, name};
	}
	fclose(f);
	if (!n) {
		free(v);
		return;
	}
	for (size_t i = 0; i < rec->nmaps; i++)
		free((char *)rec->maps[i].name);
	free(rec->maps);
	rec->maps = v;
	rec->nmaps = n;
}

/* What the streamed trace asks as it goes (perfetto.h). */
static const char *name_of_thread(void *ctx, uint32_t tid)
{
	struct lp_record *rec = ctx;

	for (int again = 0; again < 2; again++) {
		for (size_t i = 0; i < rec->nthreads; i++)
			if (rec->threads[i].tid == tid)
				return rec->threads[i].name;
		if (!again)
			read_threads(rec); /* a thread started in the window */
	}
	return NULL;
}

static const char *name_of_op(void *ctx, uint64_t op, const char **group)
{
	struct lp_record *rec = ctx;
	struct lp_target *t = lp_tracker_find(rec->owner->tr, rec->pid);

	if (!t || !t->eng || op >= t->eng->ops.n)
		return NULL;
	*group = lp_op_group_key((int)t->eng->ops.v[op].group);
	return t->eng->ops.v[op].name;
}

/* The process's graph nodes (engine/nodes.h), as op spans' args by id. */
static void read_nodes(struct lp_record *rec, const struct lp_target *t)
{
	struct lp_node *v;
	size_t n, k = 0;

	rec->nodes_read_ns = lp_now_ns();
	if (!t || !t->eng || !(v = lp_nodes_read(rec->owner->core, t, &n)))
		return;
	free(rec->nodes);
	rec->nnodes = 0;
	if ((rec->nodes = calloc(n, sizeof(*rec->nodes)))) {
		for (size_t i = 0; i < n; i++)
			if (v[i].val.id && v[i].key.op < t->eng->ops.n)
				lp_tl_node_make(&rec->nodes[k++], &v[i],
						t->eng->ops.v[v[i].key.op].name);
		rec->nnodes = k;
		lp_tl_nodes_sort(rec->nodes, k);
	}
	free(v);
}

static const struct lp_tl_node *node_of(void *ctx, uint64_t id)
{
	struct lp_record *rec = ctx;
	const struct lp_tl_node *n = lp_tl_node_find(rec->nodes, rec->nnodes, id);

	/* Made in the window: read again, at most once a second. */
	if (!n && lp_now_ns() >= rec->nodes_read_ns + 1000000000ULL) {
		read_nodes(rec, lp_tracker_find(rec->owner->tr, rec->pid));
		n = lp_tl_node_find(rec->nodes, rec->nnodes, id);
	}
	return n;
}

static const char *object_of(void *ctx, uint64_t addr)
{
	struct lp_record *rec = ctx;
	uint64_t now = lp_now_ns();

	for (int again = 0; again < 2; again++) {
		for (size_t i = 0; i < rec->nmaps; i++)
			if (addr >= rec->maps[i].start && addr < rec->maps[i].end)
				return rec->maps[i].name;
		/* Mapped in the window: read again, at most once a second. */
		if (again || now < rec->maps_read_ns + 1000000000ULL)
			break;
		rec->maps_read_ns = now;
		read_maps(rec);
	}
	return NULL;
}

static uint64_t clock_ns(clockid_t id)
{
	struct timespec ts;

	clock_gettime(id, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

/* What the streamed trace wrote since, to its client. */
static void stream_flush(struct lp_record *rec)
{
	if (!rec->pf || !rec->pf->out.len)
		return;
	if (!rec->error)
		rec->error = lp_stream_write(rec->stream, rec->pf->out.p, rec->pf->out.len);
	lp_pf_taken(rec->pf);
}

/* The streamed trace's beginning. */
static int stream_begin(struct lp_record *rec, const struct lp_target *t)
{
	struct lp_pf_names names = {rec, name_of_thread, name_of_op, object_of, node_of};
	struct lp_pf_info info = {
		.pid = rec->pid,
		.comm = t->comm,
		.step = rec->step,
		.start_ns = rec->start_ns,
		.end_ns = rec->until_ns,
	};
	int e;

	info.boottime_ns = clock_ns(CLOCK_BOOTTIME);
	info.monotonic_ns = clock_ns(CLOCK_MONOTONIC);
	info.realtime_ns = clock_ns(CLOCK_REALTIME);
	rec->stream = lp_stream_new("application/x-protobuf");
	rec->pf = calloc(1, sizeof(*rec->pf));
	if (!rec->stream || !rec->pf)
		return -ENOMEM;
	e = lp_pf_begin(rec->pf, &info, &names);
	if (!e)
		stream_flush(rec);
	return e ? e : rec->error;
}

int lp_record_start(struct lp_recorder *r, pid_t pid, double seconds, bool ops, double lease,
		    struct lp_stream **stream)
{
	struct lp_target *t = lp_tracker_find(r->tr, pid);
	struct lp_recording zero = {0};
	struct lp_record *rec;
	__u32 key = (__u32)pid;
	size_t at;

	if (!t)
		return -ESRCH;
	if (t->exited)
		return -ENODATA;
	rec = find(r, pid, &at);
	if (rec && !rec->done)
		return -EBUSY;
	if (rec)
		forget(r, at); /* the last trace gives way to the new record */
	if (r->n == LP_MAX_RECORDINGS)
		return -ENOSPC;
	rec = calloc(1, sizeof(*rec));
	if (!rec)
		return -ENOMEM;
	rec->pid = pid;
	rec->ops = ops;
	rec->start_ns = lp_now_ns();
	rec->until_ns = rec->start_ns + (uint64_t)(seconds * 1e9);
	rec->lease_ns = (uint64_t)(lease * 1e9);
	rec->asked_ns = rec->start_ns;
	rec->owner = r;
	/* its engine's step function, its decode spans' name; known once its engine is */
	rec->step = t->eng ? lp_engine_step_of(t->eng->engine).name : NULL;
	read_threads(rec);
	read_maps(rec);
	rec->maps_read_ns = rec->start_ns;
	if (stream) {
		int e = stream_begin(rec, t);

		rec->lease_ns = 0; /* the answer is its lease: a client gone cancels it */
		if (e) {
			record_free(rec);
			return e;
		}
	}
	/* Op and barrier spans come from precise mode's probes: on for the window, unless
	 * they are on already (then they stay as they were). */
	if (ops && t->eng && !t->eng->precise_on && !t->eng->precise_attaching) {
		int e = lp_precise_set(r->g, t, true, seconds);

		if (e == 0)
			rec->precise_ours = true;
		else
			log_warning_errno(e, "pid %d: record without op spans: precise mode: %m",
					  (int)pid);
	}
	if (bpf_map_update_elem(map_fd(r), &key, &zero, BPF_ANY) < 0) {
		int e = -errno;

		if (rec->precise_ours)
			lp_precise_set(r->g, t, false, 0);
		record_free(rec);
		return e;
	}
	r->v[r->n++] = rec;
	count_recordings(r);
	log_info("pid %d: recording a timeline for %.1f s%s%s", (int)pid, seconds,
		 rec->precise_ours ? ", with op spans" : "",
		 rec->stream ? ", streamed in Perfetto's format" : "");
	if (stream)
		*stream = lp_stream_get(rec->stream);
	return 0;
}

bool lp_record_running(const struct lp_recorder *r)
{
	for (size_t i = 0; i < r->n; i++)
		if (!r->v[i]->done)
			return true;
	return false;
}

/* Keeps an event of a record's window, within the record's bound. */
static void keep(struct lp_recorder *r, const struct lp_rec_ev *e)
{
	struct lp_record *rec = find(r, (pid_t)e->tgid, NULL);
	struct lp_rec_ev *v;
	size_t cap;

	if (!rec || rec->finished || e->ts < rec->start_ns || e->ts > rec->until_ns)
		return;
	if (rec->pf) {
		/* A client that does not read: its trace gives way, not the daemon's memory. */
		if (rec->error ||
		    lp_stream_backlog(rec->stream) + rec->pf->out.len > LP_RECORD_MAX_BACKLOG)
			rec->dropped++;
		else if ((rec->error = lp_pf_feed(rec->pf, e)))
			rec->dropped++;
		else
			rec->n++;
		return;
	}
	if (rec->n == rec->cap) {
		cap = rec->cap ? rec->cap * 2 : 4096;
		if (cap > LP_RECORD_MAX_EVENTS)
			cap = LP_RECORD_MAX_EVENTS;
		if (rec->n == cap || !(v = realloc(rec->ev, cap * sizeof(*v)))) {
			rec->dropped++;
			return;
		}
		rec->ev = v;
		rec->cap = cap;
	}
	rec->ev[rec->n++] = *e;
}

int lp_record_on_event(void *ctx, void *data, size_t size)
{
	struct lp_recorder *r = ctx;

	if (size >= sizeof(struct lp_rec_ev))
		keep(r, data);
	/* This one is read either way; past the budget the call stops after it. */
	if (r->budget)
		r->budget--;
	return r->budget ? 0 : -EAGAIN;
}

static void *render(void *arg)
{
	struct lp_record *rec = arg;
	struct lp_trace_in in = {
		.pid = rec->pid,
		.comm = rec->comm[0] ? rec->comm : NULL,
		.step = rec->step,
		.start_ns = rec->start_ns,
		.end_ns = rec->until_ns,
		.ev = rec->ev,
		.n = rec->n,
		.threads = rec->threads,
		.nthreads = rec->nthreads,
		.maps = rec->maps,
		.nmaps = rec->nmaps,
		.op_names = (const char *const *)rec->op_names,
		.op_groups = (const char *const *)rec->op_groups,
		.nops = rec->nops,
		.lost = rec->lost,
		.dropped = rec->dropped,
		.version = rec->version,
		.requests = rec->requests,
		.nrequests = rec->nrequests,
		.nodes = rec->nodes,
		.nnodes = rec->nnodes,
	};

	rec->error = lp_trace_render(&in, &rec->trace, &rec->len);
	atomic_store(&rec->rendered, true);
	return NULL;
}

static int by_seq_from(const void *a, const void *b)
{
	const struct lp_tl_request *x = a, *y = b;

	if (x->seq != y->seq)
		return x->seq < y->seq ? -1 : 1;
	return x->from < y->from ? -1 : x->from > y->from;
}

/* The process's requests that overlap the window (the finished ones kept, those in
 * flight), clipped to it, by sequence and start. */
static void read_requests(struct lp_record *rec, const struct lp_target *t)
{
	const struct lp_requests *rq = t ? t->requests : NULL;
	uint64_t kept = lp_requests_kept(rq), n = kept + (rq ? rq->nactive : 0);

	if (!n || !(rec->requests = calloc(n, sizeof(*rec->requests))))
		return;
	for (uint64_t i = 0; i < n; i++) {
		const struct lp_request *q =
			i < kept ? lp_requests_done(rq, i) : &rq->active[i - kept];
		bool over = i < kept && q->last_ns <= rec->until_ns;
		uint64_t to = over ? q->last_ns : rec->until_ns;
		struct lp_tl_request *r = &rec->requests[rec->nrequests];

		if (q->start_ns > rec->until_ns || (i < kept && q->last_ns < rec->start_ns))
			continue;
		*r = (struct lp_tl_request){
			.id = q->id,
			.seq = q->seq,
			.prompt_tokens = q->prompt_tokens,
			.output_tokens = q->output_tokens,
			.from = q->start_ns > rec->start_ns ? q->start_ns : rec->start_ns,
			.to = to,
			.began = q->start_ns >= rec->start_ns,
			.over = over,
		};
		if (q->first_ns >= r->from && q->first_ns <= r->to)
			r->first = q->first_ns;
		rec->nrequests++;
	}
	qsort(rec->requests, rec->nrequests, sizeof(*rec->requests), by_seq_from);
}

/* The kernel stops recording the process, and precise mode goes back as it was. */
static void stop_kernel(struct lp_recorder *r, struct lp_record *rec, struct lp_target *t)
{
	struct lp_recording st = {0};
	__u32 key = (__u32)rec->pid;

	if (bpf_map_lookup_elem(map_fd(r), &key, &st) == 0)
		rec->lost = st.lost;
	bpf_map_delete_elem(map_fd(r), &key);
	if (t && rec->precise_ours && t->eng && (t->eng->precise_on || t->eng->precise_attaching) &&
	    !t->exited)
		lp_precise_set(r->g, t, false, 0);
}

/* A streamed record's window is over: open slices are closed, and its counters follow a
 * piece at a time (stream_close()). */
static void finish_stream(struct lp_recorder *r, struct lp_record *rec, struct lp_target *t)
{
	if (!rec->error)
		rec->error = lp_pf_end(rec->pf, rec->until_ns);
	read_requests(rec, t);
	if (!rec->error)
		rec->error = lp_pf_requests(rec->pf, rec->requests, rec->nrequests);
	stream_flush(rec);
	rec->finished = true;
	count_recordings(r);
}

/* The streamed trace's counters, a piece each turn while its client keeps up (millions of
 * points for a minute of an OpenMP engine: all at once, they were copies of hundreds of MB
 * in memory), then its end; what is kept for GET is what the window held. */
static void stream_close(struct lp_record *rec)
{
	uint64_t bytes;
	int e = rec->error;

	if (!e && lp_stream_backlog(rec->stream) > LP_RECORD_CLOSE_BACKLOG)
		return;
	if (!e) {
		e = lp_pf_finish(rec->pf, LP_RECORD_CLOSE_POINTS, rec->lost, rec->dropped);
		stream_flush(rec);
		if (e == 0)
			return;
		e = e < 0 ? e : rec->error;
	}
	lp_stream_end(rec->stream);
	bytes = rec->stream->written;
	lp_pf_free(rec->pf);
	free(rec->pf);
	rec->pf = NULL;
	rec->error = e;
	if (asprintf(&rec->trace,
		     "{\"pid\":%d,\"format\":\"perfetto\",\"streamed\":true,\"events\":%zu,"
		     "\"events_lost\":%llu,\"events_dropped\":%llu,\"bytes\":%llu,"
		     "\"window_seconds\":%.3f%s}\n",
		     (int)rec->pid, rec->n, (unsigned long long)rec->lost,
		     (unsigned long long)rec->dropped, (unsigned long long)bytes,
		     (double)(rec->until_ns - rec->start_ns) / 1e9,
		     e ? ",\"complete\":false" : "") < 0) {
		rec->trace = NULL;
		rec->error = -ENOMEM;
	}
	rec->len = rec->trace ? strlen(rec->trace) : 0;
	rec->done = true;
	rec->done_ns = lp_now_ns();
	atomic_store(&rec->rendered, true);
	log_info("pid %d: timeline streamed: %zu events in %.1f s, %llu bytes, %llu lost, %llu "
		 "dropped%s",
		 (int)rec->pid, rec->n, (double)(rec->until_ns - rec->start_ns) / 1e9,
		 (unsigned long long)bytes, (unsigned long long)rec->lost,
		 (unsigned long long)rec->dropped, e ? " (incomplete: out of memory)" : "");
}

/* The window is over: the kernel stops, and the events are rendered (by a thread; done()
 * when it is over). */
static void finish(struct lp_recorder *r, struct lp_record *rec)
{
	struct lp_target *t = lp_tracker_find(r->tr, rec->pid);

	stop_kernel(r, rec, t);
	if (rec->pf) {
		finish_stream(r, rec, t);
		return;
	}
	read_threads(rec);
	read_maps(rec);
	read_requests(rec, t);
	if (rec->ops)
		read_nodes(rec, t);
	if (t)
		memcpy(rec->comm, t->comm, sizeof(rec->comm));
	/* The op table may grow while the thread renders: copies of the names. */
	if (t && t->eng && t->eng->ops.n &&
	    (rec->op_names = calloc(t->eng->ops.n, sizeof(char *))) &&
	    (rec->op_groups = calloc(t->eng->ops.n, sizeof(char *)))) {
		rec->nops = t->eng->ops.n;
		for (size_t i = 0; i < rec->nops; i++) {
			rec->op_names[i] = strdup(t->eng->ops.v[i].name);
			rec->op_groups[i] = lp_op_group_key((int)t->eng->ops.v[i].group);
		}
	}
	rec->version = r->version;
	rec->finished = true;
	count_recordings(r);
	rec->threaded = pthread_create(&rec->thread, NULL, render, rec) == 0;
	if (!rec->threaded)
		render(rec); /* no thread: here and now */
}

/* The rendering is over: what it took is freed, and the log says what came of it. */
static void done(struct lp_record *rec)
{
	render_free(rec);
	free(rec->ev);
	rec->ev = NULL;
	rec->done = true;
	rec->done_ns = lp_now_ns();
	if (rec->error)
		log_warning_errno(rec->error, "pid %d: the timeline could not be written: %m",
				  (int)rec->pid);
	else
		log_info(
			"pid %d: timeline recorded: %zu events, %zu bytes, %llu lost, %llu dropped",
			(int)rec->pid, rec->n, rec->len, (unsigned long long)rec->lost,
			(unsigned long long)rec->dropped);
	rec->n = rec->cap = 0;
}

/* Whether rec's client let its lease run out: asked for it last longer ago than that, the
 * trace not fetched yet (a rendering thread, which owns it, is waited for). */
static bool abandoned(const struct lp_record *rec, uint64_t now)
{
	return rec->lease_ns && !rec->fetched && now > rec->asked_ns + rec->lease_ns &&
	       (!rec->finished || rec->done);
}

void lp_record_tick(struct lp_recorder *r)
{
	uint64_t now = lp_now_ns();

	for (size_t i = 0; i < r->n;) {
		struct lp_record *rec = r->v[i];

		if (rec->stream && rec->stream->gone && !rec->done) {
			if (!rec->finished)
				stop_kernel(r, rec, lp_tracker_find(r->tr, rec->pid));
			rec->finished = true;
			count_recordings(r);
			log_info("pid %d: recording cancelled: its client went away",
				 (int)rec->pid);
			forget(r, i);
			continue;
		}
		if (!rec->finished)
			stream_flush(rec);
		else if (rec->pf)
			stream_close(rec);
		if (abandoned(rec, now)) {
			if (!rec->finished) {
				stop_kernel(r, rec, lp_tracker_find(r->tr, rec->pid));
				rec->finished = true;
				count_recordings(r);
			}
			log_info("pid %d: recording cancelled: its client has not asked for it "
				 "for %.1f s (its lease)",
				 (int)rec->pid, (double)(now - rec->asked_ns) / 1e9);
			forget(r, i);
			continue;
		}
		if (!rec->finished && now >= rec->until_ns)
			finish(r, rec);
		if (rec->finished && !rec->done && atomic_load(&rec->rendered))
			done(rec);
		if (rec->done && now > rec->done_ns + LP_RECORD_KEEP_NS) {
			forget(r, i);
			continue;
		}
		i++;
	}
}

int lp_record_stop(struct lp_recorder *r, pid_t pid)
{
	struct lp_record *rec = find(r, pid, NULL);
	uint64_t now = lp_now_ns();

	if (!rec || rec->finished)
		return -ENOENT;
	if (now < rec->until_ns)
		rec->until_ns = now;
	/* The events up to now are read before the window is closed on them. */
	lp_record_tick(r);
	log_info("pid %d: recording stopped by a client", (int)pid);
	return 0;
}

int lp_record_fetch(struct lp_recorder *r, pid_t pid, struct lp_body **body, double *remaining)
{
	struct lp_record *rec = find(r, pid, NULL);
	uint64_t now = lp_now_ns();

	if (!rec)
		return -ENOENT;
	rec->asked_ns = now;
	if (!rec->done) {
		/* Recording, or rendering (0 s left). */
		*remaining = rec->until_ns > now ? (double)(rec->until_ns - now) / 1e9 : 0;
		return 1;
	}
	if (rec->error)
		return rec->error;
	/* Shared with the answers, not copied: a copy of tens of MB on the event loop held
	 * every other answer for up to 0.5 s on a busy host. */
	if (!rec->shared) {
		rec->shared = lp_body_wrap(rec->trace, rec->len);
		rec->trace = NULL;
		if (!rec->shared) {
			rec->error = -ENOMEM;
			return -ENOMEM;
		}
	}
	*body = lp_body_get(rec->shared);
	rec->fetched = true;
	return 0;
}
