// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* Uprobes, and any other call that can wait for the kernel, off the event loop (prober.h). */
#include "kernel/prober.h"

#include <bpf/libbpf.h>
#include <errno.h>
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "kernel/uprobe.h"

struct lp_probe_job {
	struct lp_probe_job *next;
	/* attach: specs in, links out; release: links in */
	struct lp_probe_spec *specs;
	size_t nspecs;
	struct lp_probes probes;
	int err;
	uint64_t ns;
	lp_probe_done_fn done; /* NULL: a release or a call */
	void *ctx;
	uint64_t cookie;
	/* a call: work on the lane's thread, fin on the loop (it owns ctx then), drop where
	 * fin does not run */
	lp_call_fn work, fin, drop;
	bool release_lane;
	uint64_t queued_ns;
	char what[64];
};

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

void lp_probe_specs_free(struct lp_probe_spec *specs, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(specs[i].path);
	free(specs);
}

static bool multi_typed(const struct bpf_program *prog)
{
	return bpf_program__expected_attach_type(prog) == LP_TRACE_UPROBE_MULTI;
}

static int spec_cmp(const void *a, const void *b)
{
	const struct lp_probe_spec *x = a, *y = b;
	int c;

	if (x->prog != y->prog)
		return (uintptr_t)x->prog < (uintptr_t)y->prog ? -1 : 1;
	if (x->retprobe != y->retprobe)
		return x->retprobe - y->retprobe;
	if (x->pid != y->pid)
		return x->pid < y->pid ? -1 : 1;
	c = strcmp(x->path, y->path);
	return c ? c : (x->offset > y->offset) - (x->offset < y->offset);
}

/* Specs [i, *end) share program, direction, process and file: one multi-uprobe link. */
static int attach_multi(struct lp_probe_job *j, size_t i, size_t *end)
{
	const struct lp_probe_spec *s = &j->specs[i];
	unsigned long *off;
	size_t k = i, n = 0;
	int r;

	while (k < j->nspecs && j->specs[k].prog == s->prog &&
	       j->specs[k].retprobe == s->retprobe && j->specs[k].pid == s->pid &&
	       !strcmp(j->specs[k].path, s->path))
		k++;
	off = malloc((k - i) * sizeof(*off));
	if (!off)
		return -ENOMEM;
	for (size_t m = i; m < k; m++)
		if (!n || off[n - 1] != j->specs[m].offset) /* a symbol's aliases */
			off[n++] = j->specs[m].offset;
	r = lp_uprobe_multi_attach(&j->probes, s->prog, s->retprobe, s->pid, s->path, off, n);
	free(off);
	*end = k;
	return r;
}

/* The work itself, on whichever thread runs it. Programs loaded for multi-uprobe links
 * get one per program, direction and file; the others one link per probe. */
static void job_run(struct lp_probe_job *j)
{
	uint64_t t0 = mono_ns();

	if (j->work) {
		j->work(j->ctx);
	} else if (j->done) {
		qsort(j->specs, j->nspecs, sizeof(*j->specs), spec_cmp);
		for (size_t i = 0; i < j->nspecs && !j->err;) {
			const struct lp_probe_spec *s = &j->specs[i];
			struct bpf_link *l;

			if (multi_typed(s->prog)) {
				j->err = attach_multi(j, i, &i);
				continue;
			}
			l = bpf_program__attach_uprobe(s->prog, s->retprobe, s->pid, s->path,
						       s->offset);
			j->err = l ? lp_links_push(&j->probes.links, &j->probes.nlinks, l) : -errno;
			j->probes.n += l != NULL;
			i++;
		}
		lp_probe_specs_free(j->specs, j->nspecs);
		j->specs = NULL;
		j->nspecs = 0;
	} else {
		size_t n = j->probes.n, links = j->probes.nlinks + j->probes.nfds;

		lp_probes_free(&j->probes);
		if (j->what[0])
			log_info("%s: %zu probes off (%zu links) in %.1f ms", j->what, n, links,
				 (double)(mono_ns() - t0) / 1e6);
	}
	j->ns = mono_ns() - t0;
}

static void job_free(struct lp_probe_job *j)
{
	if (j->drop)
		j->drop(j->ctx);
	lp_probe_specs_free(j->specs, j->nspecs);
	lp_probes_free(&j->probes);
	free(j);
}

enum { LP_LANE_ATTACH, LP_LANE_RELEASE };

/* Whether the loop hears of the job once done: an attach, or a call with a fin. */
static bool job_reports(const struct lp_probe_job *j)
{
	return j->work ? j->fin != NULL : j->done != NULL;
}

static void *worker(void *arg)
{
	struct lp_probe_lane *l = arg;
	struct lp_prober *p = l->p;

	pthread_mutex_lock(&p->lock);
	for (;;) {
		struct lp_probe_job *j = l->todo;
		uint64_t one = 1;

		if (!j) {
			l->busy = false;
			if (p->stopping)
				break;
			pthread_cond_wait(&l->wake, &p->lock);
			continue;
		}
		l->todo = j->next;
		if (!l->todo)
			l->todo_tail = &l->todo;
		l->queued--;
		l->busy = true;
		l->current = j;
		l->current_since_ns = mono_ns();
		pthread_mutex_unlock(&p->lock);
		/* Stopping: only what frees the kernel's resources (the release lane's) is
		 * still worth doing. */
		if (p->delay_ms && !p->stopping)
			nanosleep(&(struct timespec){.tv_sec = p->delay_ms / 1000,
						     .tv_nsec =
							     (long)(p->delay_ms % 1000) * 1000000L},
				  NULL);
		if (!p->stopping || l == &p->lane[LP_LANE_RELEASE])
			job_run(j);
		pthread_mutex_lock(&p->lock);
		l->current = NULL;
		p->jobs++;
		if (j->ns > p->longest_ns) {
			p->longest_ns = j->ns;
			snprintf(p->longest_what, sizeof(p->longest_what), "%s", j->what);
		}
		if (!job_reports(j) || p->stopping) {
			pthread_mutex_unlock(&p->lock);
			job_free(j);
			pthread_mutex_lock(&p->lock);
			continue;
		}
		j->next = p->done;
		p->done = j;
		if (write(p->efd, &one, sizeof(one)) < 0) {
			/* The counter cannot overflow at one per job; a failure leaves the job
			 * for the next wakeup. */
		}
	}
	pthread_mutex_unlock(&p->lock);
	return NULL;
}

/* On the loop: the finished attaches, oldest first, to their callbacks. */
static void on_done(evutil_socket_t fd, short what, void *arg)
{
	struct lp_prober *p = arg;
	struct lp_probe_job *list, *rev = NULL;
	uint64_t n;

	(void)what;
	if (read(fd, &n, sizeof(n)) < 0) {
		/* EAGAIN: another wakeup took the jobs. */
	}
	pthread_mutex_lock(&p->lock);
	list = p->done;
	p->done = NULL;
	pthread_mutex_unlock(&p->lock);
	while (list) {
		struct lp_probe_job *next = list->next;

		list->next = rev;
		rev = list;
		list = next;
	}
	while (rev) {
		struct lp_probe_job *j = rev;

		rev = j->next;
		if (j->work) {
			j->drop = NULL; /* fin owns ctx */
			j->fin(j->ctx);
		} else {
			j->done(j->ctx, j->cookie, &j->probes, j->err, j->ns);
		}
		job_free(j);
	}
}

static void prober_join(struct lp_prober *p)
{
	pthread_mutex_lock(&p->lock);
	p->stopping = true;
	for (int i = 0; i < 2; i++)
		pthread_cond_signal(&p->lane[i].wake);
	pthread_mutex_unlock(&p->lock);
	for (int i = 0; i < 2; i++)
		if (p->lane[i].started)
			pthread_join(p->lane[i].thread, NULL);
}

int lp_prober_start(struct lp_prober *p, struct event_base *base)
{
	int r;

	const char *delay = getenv("LLMPROF_FAULT_KERNEL_DELAY_MS");

	memset(p, 0, sizeof(*p));
	if (delay && *delay) {
		p->delay_ms = (unsigned)strtoul(delay, NULL, 10);
		log_warning("fault injection: every kernel call off the loop waits %u ms first "
			    "(LLMPROF_FAULT_KERNEL_DELAY_MS)",
			    p->delay_ms);
	}
	p->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (p->efd < 0)
		return log_warning_errno(-errno, "probe threads: eventfd: %m; probes are attached "
						 "and detached on the event loop");
	pthread_mutex_init(&p->lock, NULL);
	for (int i = 0; i < 2; i++) {
		p->lane[i].p = p;
		p->lane[i].todo_tail = &p->lane[i].todo;
		pthread_cond_init(&p->lane[i].wake, NULL);
	}
	p->ev = event_new(base, p->efd, EV_READ | EV_PERSIST, on_done, p);
	if (!p->ev || event_add(p->ev, NULL) < 0) {
		r = -ENOMEM;
		goto fail;
	}
	for (int i = 0; i < 2; i++) {
		r = -pthread_create(&p->lane[i].thread, NULL, worker, &p->lane[i]);
		if (r < 0)
			goto fail;
		p->lane[i].started = true;
	}
	p->running = true;
	return 0;
fail:
	prober_join(p);
	if (p->ev)
		event_free(p->ev);
	p->ev = NULL;
	close(p->efd);
	p->efd = -1;
	return log_warning_errno(r, "probe threads: %m; probes are attached and detached on "
				    "the event loop");
}

void lp_prober_stop(struct lp_prober *p)
{
	if (!p->running)
		return;
	prober_join(p);
	p->running = false;
	while (p->done) {
		struct lp_probe_job *j = p->done;

		p->done = j->next;
		job_free(j);
	}
	event_free(p->ev);
	close(p->efd);
	for (int i = 0; i < 2; i++)
		pthread_cond_destroy(&p->lane[i].wake);
	pthread_mutex_destroy(&p->lock);
}

static void submit(struct lp_prober *p, struct lp_probe_job *j)
{
	bool release = j->work ? j->release_lane : !j->done;
	struct lp_probe_lane *l = &p->lane[release ? LP_LANE_RELEASE : LP_LANE_ATTACH];

	j->queued_ns = mono_ns();
	pthread_mutex_lock(&p->lock);
	*l->todo_tail = j;
	l->todo_tail = &j->next;
	l->queued++;
	pthread_cond_signal(&l->wake);
	pthread_mutex_unlock(&p->lock);
}

int lp_prober_attach(struct lp_prober *p, struct lp_probe_spec *specs, size_t n,
		     lp_probe_done_fn done, void *ctx, uint64_t cookie)
{
	struct lp_probe_job *j = calloc(1, sizeof(*j));

	if (!j) {
		lp_probe_specs_free(specs, n);
		return -ENOMEM;
	}
	*j = (struct lp_probe_job){
		.specs = specs, .nspecs = n, .done = done, .ctx = ctx, .cookie = cookie};
	if (!p || !p->running) {
		job_run(j);
		done(ctx, cookie, &j->probes, j->err, j->ns);
		job_free(j);
		return 0;
	}
	submit(p, j);
	return 0;
}

void lp_prober_release(struct lp_prober *p, struct lp_probes *probes, const char *what)
{
	struct lp_probe_job *j;

	if (!probes->n) {
		lp_probes_free(probes);
		return;
	}
	j = p && p->running ? calloc(1, sizeof(*j)) : NULL;
	if (!j) {
		lp_probes_free(probes);
		return;
	}
	j->probes = *probes;
	memset(probes, 0, sizeof(*probes));
	if (what)
		snprintf(j->what, sizeof(j->what), "%s", what);
	submit(p, j);
}

int lp_prober_call(struct lp_prober *p, const char *what, bool release, lp_call_fn work,
		   lp_call_fn fin, lp_call_fn drop, void *ctx)
{
	struct lp_probe_job *j = calloc(1, sizeof(*j));

	if (!j) {
		if (drop)
			drop(ctx);
		return -ENOMEM;
	}
	*j = (struct lp_probe_job){
		.work = work, .fin = fin, .drop = drop, .ctx = ctx, .release_lane = release};
	snprintf(j->what, sizeof(j->what), "%s", what ? what : "");
	if (!lp_prober_async(p)) {
		job_run(j);
		if (fin) {
			j->drop = NULL;
			fin(ctx);
		}
		job_free(j);
		return 0;
	}
	submit(p, j);
	return 0;
}

void lp_prober_get_status(struct lp_prober *p, struct lp_prober_status *out)
{
	memset(out, 0, sizeof(*out));
	if (!lp_prober_async(p))
		return;
	out->running = true;
	pthread_mutex_lock(&p->lock);
	for (int i = 0; i < 2; i++) {
		const struct lp_probe_lane *l = &p->lane[i];

		if (l->current) {
			snprintf(out->lane[i].what, sizeof(out->lane[i].what), "%s",
				 l->current->what[0] ? l->current->what : "uprobes");
			out->lane[i].since_ns = l->current_since_ns;
		}
		out->lane[i].queued = l->queued;
		out->lane[i].oldest_ns = l->todo ? l->todo->queued_ns : 0;
	}
	out->jobs = p->jobs;
	out->longest_ns = p->longest_ns;
	snprintf(out->longest_what, sizeof(out->longest_what), "%s",
		 p->longest_what[0] || !p->longest_ns ? p->longest_what : "uprobes");
	pthread_mutex_unlock(&p->lock);
}
