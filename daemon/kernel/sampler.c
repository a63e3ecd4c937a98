// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* --sampler thread: cpu-clock sampling, one perf event per thread of a tracked process, as
 * `perf record -p` and `perf record -- CMD` sample. Each event's timer stops and starts at
 * every switch of its thread, which threads that sleep and wake in barriers pay for and
 * which adds to the barrier time it measures (README, "Which sampler"); the default is one
 * event per CPU (core.c). */
#include "kernel/sampler.h"

#include <bpf/libbpf.h>
#include <errno.h>
#include <linux/perf_event.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "base/procfs.h"
#include "kernel/uprobe.h"

static int open_thread_event(uint32_t hz, pid_t tid, bool inherit_thread)
{
	struct perf_event_attr attr = {
		.size = sizeof(attr),
		.type = PERF_TYPE_SOFTWARE,
		.config = PERF_COUNT_SW_CPU_CLOCK,
		.sample_period = 1000000000ULL / hz,
		/* Threads it creates get their own event; with inherit_thread (5.13) processes
		 * it forks do not, and remove_on_exec drops it when the thread runs another
		 * program. */
		.inherit = 1,
		.inherit_thread = inherit_thread,
		.remove_on_exec = inherit_thread,
	};
	int fd = (int)syscall(SYS_perf_event_open, &attr, tid, -1, -1, PERF_FLAG_FD_CLOEXEC);

	return fd < 0 ? -errno : fd;
}

static int attach_thread(struct lp_sampler *s, struct bpf_program *prog, uint32_t hz, pid_t tid)
{
	struct bpf_link *l;
	int fd = open_thread_event(hz, tid, s->inherit_thread), r;

	if (fd == -EINVAL && s->inherit_thread) {
		s->inherit_thread = false;
		fd = open_thread_event(hz, tid, false);
	}
	if (fd < 0)
		return fd;
	l = bpf_program__attach_perf_event(prog, fd);
	if (!l) {
		r = -errno;
		close(fd);
		return r;
	}
	/* The link owns the event's fd from here. */
	r = lp_links_push(&s->links, &s->n, l);
	if (r == 0)
		s->opened++;
	return r;
}

struct sampler_attach {
	struct lp_sampler *s;
	struct bpf_program *prog;
	uint32_t hz;
};

static int attach_task(void *ctx, pid_t tid)
{
	struct sampler_attach *a = ctx;
	int r = attach_thread(a->s, a->prog, a->hz, tid);

	return r == -ESRCH ? 0 : r; /* exited meanwhile */
}

int lp_sampler_start(struct lp_sampler *s, struct bpf_program *prog, uint32_t hz, pid_t pid)
{
	struct sampler_attach a = {s, prog, hz};
	int r;

	if (!hz || s->n)
		return (int)s->n;
	s->error = 0;
	s->inherit_thread = true;
	r = lp_proc_each_task("/proc", pid, attach_task, &a);
	if (r == -ESRCH) /* gone */
		return r;
	if (r == 0 && s->n && !s->started_ns) {
		struct timespec ts;

		clock_gettime(CLOCK_MONOTONIC, &ts);
		s->started_ns = (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
	}
	if (r < 0) {
		lp_sampler_stop(s);
		s->error = r;
		return log_warning_errno(r,
					 "pid %d: cannot sample its threads' CPU time: %m; "
					 "its matmul and barrier shares stay 0",
					 (int)pid);
	}
	return (int)s->n;
}

void lp_sampler_stop(struct lp_sampler *s)
{
	lp_links_destroy(&s->links, &s->n);
}

int lp_sampler_probe(struct bpf_program *prog, uint32_t hz)
{
	struct lp_sampler s = {.inherit_thread = true};
	int r = attach_thread(&s, prog, hz, (pid_t)syscall(SYS_gettid));

	lp_sampler_stop(&s);
	return r;
}
