// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* Profile windows: their stacks from the ring buffer, their end and answer (profiler.h). */
#include "profile/profiler.h"

#include <bpf/libbpf.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/log.h"
#include "formats/pycode.h"
#include "core.skel.h"
#include "profile/render.h"
#include "tracked/hot.h"

#define NS_PER_S 1000000000ULL

static int on_stack(void *ctx, void *data, size_t size);

int lp_profiler_init(struct lp_profiler *p, struct lp_core *core, struct lp_tracker *tr,
		     struct lp_engines *g, uint32_t sample_hz, uint32_t max_mib)
{
	memset(p, 0, sizeof(*p));
	p->core = core;
	p->tr = tr;
	p->g = g;
	p->hz = sample_hz;
	p->max_bytes = (uint64_t)max_mib << 20;
	lp_symbols_init(&p->syms);
	if (!sample_hz || !core->skel) {
		p->error = -ENOTSUP;
		return 0;
	}
	p->rb = ring_buffer__new(bpf_map__fd(core->skel->maps.stacks), on_stack, p, NULL);
	if (!p->rb)
		p->error = -errno ? -errno : -ENOMEM;
	return 0;
}

static void window_free(struct lp_profiler *p, struct lp_profile_window *w)
{
	for (size_t i = 0; i < w->cap; i++)
		free(w->tab[i]);
	free(w->tab);
	for (size_t i = 0; i < w->nprocs; i++)
		free(w->procs[i].maps);
	free(w->procs);
	free(w->skip0);
	p->bytes -= w->bytes;
	if (w->out) {
		if (!w->out->ended) {
			/* Nobody will answer it now: the daemon is stopping. */
			w->out->status = 503;
			lp_stream_end(w->out);
		}
		lp_stream_put(w->out);
	}
	free(w->who);
	free(w);
}

void lp_profiler_free(struct lp_profiler *p)
{
	for (size_t i = 0; i < p->nw; i++)
		window_free(p, p->w[i]);
	p->nw = 0;
	if (p->rb)
		ring_buffer__free(p->rb);
	lp_symbols_free(&p->syms);
	lp_pylocs_clear(&p->py);
	memset(p, 0, sizeof(*p));
}

static void set_kernel_flag(struct lp_profiler *p)
{
	if (p->core->skel && p->core->skel->bss)
		p->core->skel->bss->profiles = (uint32_t)p->nw;
}

static uint64_t realtime_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (uint64_t)ts.tv_sec * NS_PER_S + (uint64_t)ts.tv_nsec;
}

/* The samples the kernel did not take while pid ran (its LP_C_SAMPLES_SKIPPED), now. */
static uint64_t proc_skipped(struct lp_profiler *p, pid_t pid)
{
	struct lp_target *t = lp_tracker_find(p->tr, pid);
	struct lp_proc_stats *st;
	uint64_t n = 0;

	if (!t || !(st = malloc(sizeof(*st))))
		return 0;
	if (t->exited ? lp_target_final(t, st)
		      : lp_hot_read(p->tr->procs_fd, p->tr->hot_fd, (__u32)pid, st) == 0)
		n = st->ctr[LP_C_SAMPLES_SKIPPED];
	free(st);
	return n;
}

static void skip_snapshot(struct lp_profiler *p, struct lp_profile_window *w)
{
	w->skip0 = p->tr->n ? calloc(p->tr->n, sizeof(*w->skip0)) : NULL;
	for (size_t i = 0; w->skip0 && i < p->tr->n; i++) {
		const struct lp_target *t = p->tr->v[i];

		if (t->exited || (w->q.pid && t->pid != w->q.pid))
			continue;
		w->skip0[w->nskip0++] = (struct lp_profile_skip){t->pid, proc_skipped(p, t->pid)};
	}
}

/* The window's processes' samples not taken since its start. */
static uint64_t window_skipped(struct lp_profiler *p, const struct lp_profile_window *w)
{
	uint64_t n = 0;

	for (size_t i = 0; i < w->nprocs; i++) {
		uint64_t now = proc_skipped(p, w->procs[i].pid), then = 0;

		for (size_t k = 0; k < w->nskip0; k++)
			if (w->skip0[k].pid == w->procs[i].pid)
				then = w->skip0[k].n;
		n += now > then ? now - then : 0;
	}
	return n;
}

int lp_profile_start(struct lp_profiler *p, const struct lp_profile_query *q,
		     struct lp_stream **out)
{
	struct lp_profile_window *w;

	if (p->error)
		return p->error;
	if (!(q->seconds >= 1 && q->seconds <= LP_PROFILE_MAX_SECONDS) || q->phase >= LP_PHASE_NR ||
	    q->phase < -1)
		return -EINVAL;
	if (q->pid) {
		const struct lp_target *t = lp_tracker_find(p->tr, q->pid);

		if (!t || t->exited || (q->visible && !q->visible(q->who, t)))
			return -ESRCH;
	}
	if (p->nw == LP_PROFILE_MAX_WINDOWS)
		return -EBUSY;
	if (!q->privileged) {
		unsigned mine = 0, all = 0;

		for (size_t i = 0; i < p->nw; i++) {
			all += !p->w[i]->q.privileged;
			mine += !p->w[i]->q.privileged && p->w[i]->q.uid == q->uid;
		}
		if ((q->max_per_uid && mine >= q->max_per_uid) ||
		    (q->max_unprivileged && all >= q->max_unprivileged))
			return -EBUSY;
	}
	w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	w->q = *q;
	if (q->who_size) {
		if (!(w->who = malloc(q->who_size))) {
			free(w);
			return -ENOMEM;
		}
		memcpy(w->who, q->who, q->who_size);
		w->q.who = w->who;
	}
	w->out = lp_stream_new(q->format == LP_PROFILE_PPROF ? "application/octet-stream"
							     : "text/plain; charset=utf-8");
	if (!w->out) {
		free(w->who);
		free(w);
		return -ENOMEM;
	}
	w->out->deferred = true;
	/* What was in the ring before the window does not belong to it. */
	if (!p->nw && p->rb)
		ring_buffer__consume(p->rb);
	w->start_ns = lp_now_ns();
	w->end_ns = w->start_ns + (uint64_t)(q->seconds * 1e9);
	w->start_real_ns = realtime_ns();
	w->lost_ring0 = p->core->skel->bss->stacks_lost;
	w->skipped_unknown0 = p->core->skel->bss->samples_skipped_unknown;
	skip_snapshot(p, w);
	p->w[p->nw++] = w;
	set_kernel_flag(p);
	*out = lp_stream_get(w->out);
	return 0;
}

bool lp_profiler_running(const struct lp_profiler *p)
{
	return p->nw > 0;
}

/* FNV-1a over the stack and what its samples were. */
static uint64_t stack_hash(const struct lp_stack_rec *r, int16_t op, size_t n)
{
	uint64_t h = 1469598103934665603ULL;
	uint64_t head[2] = {((uint64_t)r->tgid << 32) | ((uint64_t)(uint16_t)op << 16) |
				    ((uint64_t)r->region << 8) | r->phase,
			    ((uint64_t)r->nkernel << 8) | r->nuser};

	for (size_t i = 0; i < 2 + n; i++) {
		uint64_t v = i < 2 ? head[i] : r->ip[i - 2];

		for (int b = 0; b < 8; b++) {
			h ^= (v >> (8 * b)) & 0xff;
			h *= 1099511628211ULL;
		}
	}
	return h;
}

static bool same(const struct lp_profile_stack *s, const struct lp_stack_rec *r, int16_t op,
		 size_t n)
{
	return s->tgid == r->tgid && s->op == op && s->region == r->region &&
	       s->phase == r->phase && s->nkernel == r->nkernel && s->nuser == r->nuser &&
	       !memcmp(s->ip, r->ip, n * sizeof(*s->ip));
}

static int grow(struct lp_profile_window *w)
{
	size_t cap = w->cap ? 2 * w->cap : 1024;
	struct lp_profile_stack **t = calloc(cap, sizeof(*t));

	if (!t)
		return -ENOMEM;
	for (size_t i = 0; i < w->cap; i++) {
		size_t k;

		if (!w->tab[i])
			continue;
		for (k = w->tab[i]->hash & (cap - 1); t[k]; k = (k + 1) & (cap - 1))
			;
		t[k] = w->tab[i];
	}
	free(w->tab);
	w->tab = t;
	w->cap = cap;
	return 0;
}

/* The process's executable mappings now, added to what the window knows of it; their
 * objects' symbols are read now, while the process is there to open them by. */
static struct lp_profile_proc *window_proc(struct lp_profiler *p, struct lp_profile_window *w,
					   pid_t pid, bool again)
{
	struct lp_profile_proc *pr = NULL, *v;
	char path[64], line[PATH_MAX + 128];
	struct lp_proc_mapping m, *mv;
	FILE *f;

	for (size_t i = 0; i < w->nprocs; i++)
		if (w->procs[i].pid == pid)
			pr = &w->procs[i];
	if (pr && !again)
		return pr;
	if (!pr) {
		if (!(v = realloc(w->procs, (w->nprocs + 1) * sizeof(*v))))
			return NULL;
		w->procs = v;
		pr = &w->procs[w->nprocs++];
		memset(pr, 0, sizeof(*pr));
		pr->pid = pid;
	}
	snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
	if (!(f = fopen(path, "re")))
		return pr;
	while (fgets(line, sizeof(line), f) && pr->nmaps < 4096) {
		bool known = false;

		if (lp_proc_parse_maps_line(line, &m) < 0)
			continue;
		for (size_t i = 0; i < pr->nmaps && !known; i++)
			known = pr->maps[i].start == m.start && pr->maps[i].ino == m.ino;
		if (known || !(mv = realloc(pr->maps, (pr->nmaps + 1) * sizeof(*mv))))
			continue;
		pr->maps = mv;
		pr->maps[pr->nmaps++] = m;
		lp_symbols_object(&p->syms, pid, &m);
	}
	fclose(f);
	return pr;
}

static void take(struct lp_profiler *p, struct lp_profile_window *w, const struct lp_stack_rec *r,
		 int16_t op, size_t n, uint64_t h)
{
	struct lp_profile_stack *s;
	size_t k, size;

	if (w->q.pid && (pid_t)r->tgid != w->q.pid)
		return;
	if (w->q.phase >= 0 && r->phase != w->q.phase)
		return;
	w->samples++;
	w->complete += !!(r->flags & LP_SF_COMPLETE);
	w->fp += !!(r->flags & LP_SF_FP);
	w->truncated += !!(r->flags & LP_SF_TRUNCATED);
	w->kernel += r->nkernel > 0;
	if (w->cap)
		for (k = h & (w->cap - 1); (s = w->tab[k]); k = (k + 1) & (w->cap - 1))
			if (s->hash == h && same(s, r, op, n)) {
				s->count++;
				return;
			}
	size = sizeof(*s) + n * sizeof(s->ip[0]);
	if (p->bytes + size > p->max_bytes || (w->n + 1 > w->cap / 2 && grow(w) < 0) ||
	    !(s = malloc(size))) {
		w->lost_table++;
		p->lost_table++;
		return;
	}
	for (k = h & (w->cap - 1); w->tab[k]; k = (k + 1) & (w->cap - 1))
		;
	s->hash = h;
	s->count = 1;
	s->tgid = r->tgid;
	s->op = op;
	s->region = r->region;
	s->phase = r->phase;
	s->nkernel = r->nkernel;
	s->nuser = r->nuser;
	memcpy(s->ip, r->ip, n * sizeof(s->ip[0]));
	w->tab[k] = s;
	w->n++;
	w->bytes += size;
	p->bytes += size;
	window_proc(p, w, (pid_t)r->tgid, false);
}

/* The sample's op as its process's op table numbers it: an op functions' table's (aop)
 * taken into the table (engine.h). */
static int16_t stack_op(struct lp_profiler *p, const struct lp_stack_rec *r)
{
	struct lp_target *t;
	int id;

	if (r->op >= 0 || r->aop == LP_AOP_NONE)
		return r->op;
	t = lp_tracker_find(p->tr, (pid_t)r->tgid);
	if (!t || !t->eng || (id = lp_eproc_aop_index(t->eng, r->aop)) < 0)
		return -1;
	return (int16_t)id;
}

/* A Python frame as a tagged location id (pyloc.h), or 0: left out (an interpreter call's
 * shim, not begun, or not named). */
static uint64_t py_frame(struct lp_profiler *p, struct lp_py_state *py, pid_t pid, uint64_t code,
			 uint64_t word)
{
	const struct lp_py_func *f;
	int lasti = LP_PY_LASTI(word);
	uint32_t id;

	if (lp_py_shim(py->lay, word)) /* its code object is no function's (3.13: None) */
		return 0;
	f = lp_python_func(py, pid, code);
	if (!f) {
		p->py_unnamed++;
		return 0;
	}
	if (lp_py_incomplete(py->lay, f, lasti, LP_PY_OWNER(word)))
		return 0;
	id = lp_pylocs_get(
		&p->py, f->name, f->file,
		(uint32_t)lp_py_line(f->linetable, f->nlinetable, (int)f->firstline, lasti),
		f->firstline);
	return id ? LP_PYLOC_TAG | id : 0;
}

/* r's frames with its Python frames among them: each run of them, down to an entry frame
 * (the first a native call of the interpreter loop ran), where that call is among the
 * native frames, in its place; runs beyond the interpreter calls found (a native walk cut
 * short, code of the loop outside its symbol) at the outermost end. Into p->merged. */
static const struct lp_stack_rec *with_python(struct lp_profiler *p, const struct lp_stack_rec *r)
{
	struct lp_target *t = lp_tracker_find(p->tr, (pid_t)r->tgid);
	const __u64 *u = r->ip + r->nkernel, *pyw = r->ip + r->nkernel + r->nuser;
	struct lp_stack_rec *m = &p->merged;
	struct lp_py_state *py;
	size_t out = 0, j = 0, max = LP_STACK_USER_MAX + LP_STACK_PY_MAX;
	__u64 *dst;

	if (!t || !t->eng || t->eng->py.state != 1)
		return r;
	py = &t->eng->py;
	p->py_samples++;
	memcpy(m, r, LP_STACK_REC_HDR + r->nkernel * sizeof(r->ip[0]));
	dst = m->ip + r->nkernel;
	for (size_t i = 0; i < r->nuser; i++) {
		/* a caller's return address less one: the call it made */
		uint64_t at = i ? u[i] - 1 : u[i];

		if (j < r->npy && u[i] && at >= py->eval_lo && at < py->eval_hi) {
			/* the loop's own frame: the run of Python frames it ran stands for it */
			while (j < r->npy) {
				uint64_t w = pyw[2 * j + 1],
					 id = py_frame(p, py, (pid_t)r->tgid, pyw[2 * j], w);

				j++;
				if (id && out < max)
					dst[out++] = id;
				if (lp_py_run_end(py->lay, w))
					break;
			}
			continue;
		}
		if (out < max)
			dst[out++] = u[i];
	}
	/* runs no interpreter call was found for: the outermost */
	for (; j < r->npy; j++) {
		uint64_t id = py_frame(p, py, (pid_t)r->tgid, pyw[2 * j], pyw[2 * j + 1]);

		if (id && out < max)
			dst[out++] = id;
	}
	m->nuser = (uint8_t)out;
	m->npy = 0;
	return m;
}

static int on_stack(void *ctx, void *data, size_t size)
{
	struct lp_profiler *p = ctx;
	const struct lp_stack_rec *r = data;
	size_t n;
	uint64_t h = 0;
	bool hashed = false;
	int16_t op = -1;

	if (size < LP_STACK_REC_HDR)
		return 0;
	n = (size_t)r->nkernel + r->nuser;
	if (n > LP_STACK_KERNEL_MAX + LP_STACK_USER_MAX || r->npy > LP_STACK_PY_MAX ||
	    LP_STACK_REC_HDR + (n + 2 * (size_t)r->npy) * 8 > size)
		return 0;
	p->samples_read++;
	if (r->npy && p->nw) {
		r = with_python(p, r);
		n = (size_t)r->nkernel + r->nuser;
	}
	for (size_t i = 0; i < p->nw; i++) {
		struct lp_profile_window *w = p->w[i];

		if (r->ts < w->start_ns || r->ts >= w->end_ns)
			continue;
		if (!hashed) {
			op = stack_op(p, r);
			h = stack_hash(r, op, n);
			hashed = true;
		}
		take(p, w, r, op, n, h);
	}
	return 0;
}

/* Names the window's stacks and writes its answer. */
static void answer(struct lp_profiler *p, struct lp_profile_window *w)
{
	struct lp_profile_render in = {
		.w = w,
		.syms = &p->syms,
		.py = &p->py,
		.tr = p->tr,
		.hz = p->hz,
		.duration_ns = lp_now_ns() - w->start_ns,
		.lost_ring = p->core->skel->bss->stacks_lost - w->lost_ring0,
		.skipped = window_skipped(p, w),
		.skipped_unknown =
			p->core->skel->bss->samples_skipped_unknown - w->skipped_unknown0,
		.max_mib = (uint32_t)(p->max_bytes >> 20),
	};
	struct lp_stream *s = w->out;
	uint8_t *body = NULL;
	size_t len = 0;
	int r;

	if (in.duration_ns > w->end_ns - w->start_ns)
		in.duration_ns = w->end_ns - w->start_ns;
	/* Its processes' mappings again, where they still run: what they loaded since. */
	for (size_t i = 0; i < w->nprocs; i++)
		window_proc(p, w, w->procs[i].pid, true);
	r = lp_profile_render(&in, &body, &len);
	if (r < 0) {
		s->status = 500;
		log_warning_errno(r, "a profile could not be made: %m");
	} else {
		s->status = 200;
		snprintf(s->headers, sizeof(s->headers),
			 "X-Llmprof-Samples: %llu\nX-Llmprof-Samples-Lost: %llu\n"
			 "X-Llmprof-Samples-Not-Taken: %llu %llu\n"
			 "X-Llmprof-Window: %llu %llu\n%s",
			 (unsigned long long)w->samples,
			 (unsigned long long)(w->lost_table + in.lost_ring),
			 (unsigned long long)in.skipped, (unsigned long long)in.skipped_unknown,
			 (unsigned long long)w->start_ns,
			 (unsigned long long)(w->start_ns + in.duration_ns),
			 w->q.format == LP_PROFILE_PPROF
				 ? "Content-Disposition: attachment; filename=\"profile\"\n"
				 : "");
		lp_stream_write(s, body, len);
	}
	free(body);
	lp_stream_end(s);
}

void lp_profiler_tick(struct lp_profiler *p)
{
	uint64_t now;

	if (!p->nw)
		return;
	if (p->rb)
		ring_buffer__consume(p->rb);
	now = lp_now_ns();
	for (size_t i = 0; i < p->nw;) {
		struct lp_profile_window *w = p->w[i];

		if (w->out->gone) {
			p->windows_cancelled++;
		} else if (now >= w->end_ns) {
			answer(p, w);
			p->windows_done++;
		} else {
			i++;
			continue;
		}
		window_free(p, w);
		p->w[i] = p->w[--p->nw];
	}
	/* the Python locations are the open windows' stacks' */
	if (!p->nw)
		lp_pylocs_clear(&p->py);
	set_kernel_flag(p);
}

void lp_profiler_status(const struct lp_profiler *p, cJSON *o)
{
	cJSON_AddNumberToObject(o, "windows_open", (double)p->nw);
	cJSON_AddNumberToObject(o, "windows_done", (double)p->windows_done);
	cJSON_AddNumberToObject(o, "windows_cancelled", (double)p->windows_cancelled);
	cJSON_AddNumberToObject(o, "samples_read", (double)p->samples_read);
	cJSON_AddNumberToObject(
		o, "lost_ring",
		p->core->skel && p->core->skel->bss ? (double)p->core->skel->bss->stacks_lost : 0);
	cJSON_AddNumberToObject(o, "lost_table", (double)p->lost_table);
	/* Python frames: samples that had them, locations named, frames no code object named */
	cJSON_AddNumberToObject(o, "python_samples", (double)p->py_samples);
	cJSON_AddNumberToObject(o, "python_locations", (double)p->py.n);
	cJSON_AddNumberToObject(o, "python_locations_full", (double)p->py.full);
	cJSON_AddNumberToObject(o, "python_frames_unnamed", (double)p->py_unnamed);
	/* The sampler's own losses (sample.bpf.c, "Samples not taken"). */
	cJSON_AddNumberToObject(o, "samples_not_taken",
				p->core->skel && p->core->skel->bss
					? (double)p->core->skel->bss->samples_skipped
					: 0);
	cJSON_AddNumberToObject(o, "samples_not_taken_unattributed",
				p->core->skel && p->core->skel->bss
					? (double)p->core->skel->bss->samples_skipped_unknown
					: 0);
	cJSON_AddNumberToObject(o, "memory_bytes", (double)p->bytes);
	cJSON_AddNumberToObject(o, "memory_limit_bytes", (double)p->max_bytes);
	cJSON_AddNumberToObject(o, "symbol_objects", (double)p->syms.n);
	cJSON_AddNumberToObject(o, "symbol_bytes", (double)p->syms.bytes);
	if (p->error)
		cJSON_AddStringToObject(o, "unavailable",
					p->error == -ENOTSUP ? "no sampling (--sample-hz 0, or "
							       "cpu-clock events do not run BPF)"
							     : strerror(-p->error));
}
