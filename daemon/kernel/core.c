// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* Opens the core BPF skeleton, picks the program variants this kernel supports, sizes the
 * maps, loads, and attaches: scheduler and lifecycle tracepoints, futex syscalls, and one
 * page-fault perf event per CPU. cpu-clock sampling is per CPU here, or per thread of each
 * LLM process (sampler.c). */
#include "kernel/core.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/perf_event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "core.skel.h"
#include "llmprof/abi.h"
#include "base/log.h"
#include "kernel/prober.h"
#include "kernel/mapwalk.h"
#include "base/procfs.h"
#include "kernel/sampler.h"
#include "kernel/uprobe.h"

static int attach_one(struct bpf_program *prog, struct bpf_link **slot)
{
	struct bpf_link *l = bpf_program__attach(prog);

	if (!l)
		return log_warning_errno(-errno, "attach BPF program '%s' (%s): %m",
					 bpf_program__name(prog), bpf_program__section_name(prog));
	*slot = l;
	return 0;
}

static void detach_one(struct bpf_link **slot)
{
	bpf_link__destroy(*slot);
	*slot = NULL;
}

/* Scheduler and lifecycle programs, tp_btf or raw_tp; the wakeup program only where the
 * kernel keeps no run-queue delay of its own (every wakeup on the host would run it), the
 * new thread's everywhere (threads are made seldom). */
static int attach_sched(struct lp_core *c, bool btf)
{
	struct core_bpf *s = c->skel;
	struct {
		struct bpf_program *prog;
		struct bpf_link **slot;
	} progs[] = {
		{btf ? s->progs.lp_switch_btf : s->progs.lp_switch_raw,
		 btf ? &s->links.lp_switch_btf : &s->links.lp_switch_raw},
		{btf ? s->progs.lp_wakeup_btf : s->progs.lp_wakeup_raw,
		 btf ? &s->links.lp_wakeup_btf : &s->links.lp_wakeup_raw},
		{btf ? s->progs.lp_wakeup_new_btf : s->progs.lp_wakeup_new_raw,
		 btf ? &s->links.lp_wakeup_new_btf : &s->links.lp_wakeup_new_raw},
		{btf ? s->progs.lp_exit_btf : s->progs.lp_exit_raw,
		 btf ? &s->links.lp_exit_btf : &s->links.lp_exit_raw},
		{btf ? s->progs.lp_exec_btf : s->progs.lp_exec_raw,
		 btf ? &s->links.lp_exec_btf : &s->links.lp_exec_raw},
	};
	int r;

	for (size_t i = 0; i < sizeof(progs) / sizeof(progs[0]); i++) {
		if (!bpf_program__autoload(progs[i].prog))
			continue;
		r = attach_one(progs[i].prog, progs[i].slot);
		if (r < 0)
			return r;
	}
	c->sched_variant = btf ? "tp_btf" : "raw_tp";
	return 0;
}

static int attach_futex_tracepoints(struct lp_core *c)
{
	struct core_bpf *s = c->skel;
	int r;

	if ((r = attach_one(s->progs.lp_futex_enter_tp, &s->links.lp_futex_enter_tp)) < 0 ||
	    (r = attach_one(s->progs.lp_futex_exit_tp, &s->links.lp_futex_exit_tp)) < 0)
		goto fail;
	/* futex_waitv(2) is newer (5.16) than the rest: without it, keep futex(2). */
	if (attach_one(s->progs.lp_futex_waitv_enter_tp, &s->links.lp_futex_waitv_enter_tp) ||
	    attach_one(s->progs.lp_futex_waitv_exit_tp, &s->links.lp_futex_waitv_exit_tp)) {
		detach_one(&s->links.lp_futex_waitv_enter_tp);
		detach_one(&s->links.lp_futex_waitv_exit_tp);
		log_warning("futex_waitv(2) waits will not be seen, ignoring");
	}
	c->futex_source = "syscall tracepoints";
	c->futex_results = true;
	return 0;
fail:
	detach_one(&s->links.lp_futex_enter_tp);
	detach_one(&s->links.lp_futex_exit_tp);
	return r;
}

static int attach_futex_raw(struct lp_core *c)
{
	struct core_bpf *s = c->skel;
	int r;

	if ((r = attach_one(s->progs.lp_sys_enter_raw, &s->links.lp_sys_enter_raw)) < 0 ||
	    (r = attach_one(s->progs.lp_sys_exit_raw, &s->links.lp_sys_exit_raw)) < 0) {
		detach_one(&s->links.lp_sys_enter_raw);
		return r;
	}
	c->futex_source = "raw_syscalls";
	c->futex_raw = true;
	c->futex_results = true;
	return 0;
}

/* Attaches or detaches the futex programs (whichever source attached at load): the links
 * only, on whichever thread runs it; the caller sets futex_attached. */
static int futex_links(struct lp_core *c, bool on)
{
	struct core_bpf *s = c->skel;
	struct bpf_link **slots[] = {
		&s->links.lp_futex_enter_tp,	   &s->links.lp_futex_exit_tp,
		&s->links.lp_futex_waitv_enter_tp, &s->links.lp_futex_waitv_exit_tp,
		&s->links.lp_sys_enter_raw,	   &s->links.lp_sys_exit_raw};
	int r = 0;

	if (!on) {
		for (size_t i = 0; i < sizeof(slots) / sizeof(slots[0]); i++)
			detach_one(slots[i]);
	} else if (c->futex_raw) {
		r = attach_futex_raw(c);
	} else {
		r = attach_futex_tracepoints(c);
	}
	return r;
}

static int futex_attach(struct lp_core *c, bool on)
{
	int r = futex_links(c, on);

	if (r == 0)
		c->futex_attached = on;
	return r;
}

/* An attach or detach off the loop: each program attached to or detached from a syscall
 * tracepoint waits for the kernel (tracepoint_synchronize_unregister). */
struct futex_job {
	struct lp_core *c;
	bool on;
	int r;
};

static void futex_work(void *ctx)
{
	struct futex_job *j = ctx;

	j->r = futex_links(j->c, j->on);
}

static void futex_submit(struct lp_core *c, bool on);

static void futex_done(struct lp_core *c, bool on, int r)
{
	c->futex_busy = false;
	if (r == 0)
		c->futex_attached = on;
	if (on && r < 0)
		log_warning_errno(r, "futex waits of the processes tracked now will not be "
				     "collected: %m");
	else if (on)
		log_info("futex programs attached: a process is tracked");
	else
		log_info("futex programs detached: no process tracked for %d s",
			 (int)(LP_FUTEX_LINGER_NS / 1000000000ULL));
	if (!on && c->futex_rewant) {
		c->futex_rewant = false;
		futex_submit(c, true);
		return;
	}
	/* Attached, or never to be: those waiting are tracked now. */
	if (on && c->futex_ready)
		c->futex_ready(c->futex_ready_arg);
}

static void futex_fin(void *ctx)
{
	struct futex_job j = *(struct futex_job *)ctx;

	free(ctx);
	futex_done(j.c, j.on, j.r);
}

static void futex_submit(struct lp_core *c, bool on)
{
	struct futex_job *j = calloc(1, sizeof(*j));

	c->futex_busy = true;
	c->futex_busy_on = on;
	/* Off from now on: the kernel takes the programs off on the prober's thread, before
	 * the loop hears it is done. */
	if (!on)
		c->futex_attached = false;
	if (!j) {
		futex_done(c, on, futex_links(c, on));
		return;
	}
	*j = (struct futex_job){c, on, 0};
	lp_prober_call(c->prober, on ? "attach the futex programs" : "detach the futex programs",
		       !on, futex_work, futex_fin, free, j);
}

void lp_core_futex_tick(struct lp_core *c, bool tracking, uint64_t now_ns)
{
	if (!c->futex_on_demand)
		return;
	if (tracking) {
		lp_core_futex_want(c);
		return;
	}
	if (!c->futex_attached || c->futex_busy)
		return;
	if (!c->futex_idle_since_ns)
		c->futex_idle_since_ns = now_ns;
	else if (now_ns - c->futex_idle_since_ns >= LP_FUTEX_LINGER_NS)
		futex_submit(c, false);
}

bool lp_core_futex_want(struct lp_core *c)
{
	c->futex_idle_since_ns = 0;
	if (!c->futex_on_demand)
		return true;
	if (c->futex_busy) {
		/* A detach on its way: attach again after it. An attach: wait for it. */
		c->futex_rewant |= !c->futex_busy_on;
		return false;
	}
	if (c->futex_attached)
		return true;
	futex_submit(c, true);
	/* At once without a running prober: attached, or failed (never to be). */
	return !c->futex_busy;
}

static int open_sw_event(__u64 config, __u64 period, int cpu)
{
	struct perf_event_attr attr = {
		.size = sizeof(attr),
		.type = PERF_TYPE_SOFTWARE,
		.config = config,
		.sample_period = period,
	};
	int fd = (int)syscall(SYS_perf_event_open, &attr, -1, cpu, -1, PERF_FLAG_FD_CLOEXEC);

	return fd < 0 ? -errno : fd;
}

/* Detaches the per-CPU links attached after the first n. */
static void links_truncate(struct lp_core *c, size_t n)
{
	while (c->nlinks > n)
		bpf_link__destroy(c->links[--c->nlinks]);
}

/* One software perf event per online CPU, each running prog. Returns the number of CPUs
 * or -errno (logged); on failure nothing stays attached. */
static int attach_per_cpu(struct lp_core *c, struct bpf_program *prog, __u64 config, __u64 period,
			  const char *what, int *fds, int *cpus)
{
	int ncpus = libbpf_num_possible_cpus(), r = 0, n = 0;
	size_t first = c->nlinks;
	struct bpf_link **v;

	if (ncpus < 0)
		return log_warning_errno(ncpus, "count possible CPUs: %m");
	v = realloc(c->links, (c->nlinks + (size_t)ncpus) * sizeof(*v));
	if (!v)
		return -ENOMEM;
	c->links = v;
	for (int cpu = 0; cpu < ncpus; cpu++) {
		struct bpf_link *l;
		int fd = open_sw_event(config, period, cpu);

		if (fd == -ENODEV) /* possible but offline CPU */
			continue;
		if (fd < 0) {
			r = log_warning_errno(fd, "open %s perf event on CPU %d: %m", what, cpu);
			goto fail;
		}
		l = bpf_program__attach_perf_event(prog, fd);
		if (!l) {
			r = log_warning_errno(-errno, "attach '%s' to CPU %d: %m",
					      bpf_program__name(prog), cpu);
			close(fd);
			goto fail;
		}
		c->links[c->nlinks++] = l;
		if (fds) /* the link owns it: valid while the link is */
			fds[n] = fd;
		if (cpus)
			cpus[n] = cpu;
		n++;
	}
	return n;
fail:
	links_truncate(c, first);
	return r;
}

static int attach_faults(struct lp_core *c)
{
	size_t first = c->nlinks;
	int r;

	/* Every major fault runs the program; the kernel counts these exactly where it
	 * counts maj_flt (mm_account_fault), so totals match /proc/PID/stat. */
	r = attach_per_cpu(c, c->skel->progs.lp_fault_maj, PERF_COUNT_SW_PAGE_FAULTS_MAJ, 1,
			   "page-fault", NULL, NULL);
	if (r < 0) {
		links_truncate(c, first);
		return r;
	}
	c->nfault_cpus = r;
	c->faults = true;
	return 0;
}

static void attach_sampling(struct lp_core *c, uint32_t hz, bool per_thread)
{
	int r;

	if (per_thread) {
		/* Opened per process as each is found; tried here on this thread. */
		r = lp_sampler_probe(c->skel->progs.lp_sample, hz);
		if (r < 0) {
			log_warning_errno(r, "matmul and barrier shares will not be estimated: a "
					     "thread's cpu-clock perf event does not run BPF "
					     "programs: %m");
			return;
		}
		c->sample_per_thread = true;
	} else {
		int ncpus = libbpf_num_possible_cpus();

		c->sample_fds = ncpus > 0 ? calloc((size_t)ncpus, sizeof(int)) : NULL;
		c->sample_cpus = ncpus > 0 ? calloc((size_t)ncpus, sizeof(int)) : NULL;
		r = c->sample_fds && c->sample_cpus
			    ? attach_per_cpu(c, c->skel->progs.lp_sample, PERF_COUNT_SW_CPU_CLOCK,
					     1000000000ULL / hz, "cpu-clock", c->sample_fds,
					     c->sample_cpus)
			    : -ENOMEM;
		if (r < 0) {
			log_warning("matmul and barrier shares will not be estimated: cpu-clock "
				    "sampling is unavailable");
			return;
		}
		c->nsample_cpus = r;
		/* From here the sampler counts the samples the kernel does not take. */
		for (int i = 0; i < r; i++)
			if (c->sample_cpus[i] < LP_SAMPLE_CPUS)
				c->skel->bss->sample_period_ns[c->sample_cpus[i]] =
					1000000000ULL / hz;
	}
	c->sample_hz = hz;
}

/* New executable mappings (a late dlopen of libggml-cpu-*.so): from the mmap lock's release
 * inside mmap(2), else from mmap's entry. The mmap lock tracepoint runs where address spaces
 * change (and where page faults fall back to the lock); a syscall tracepoint would send every
 * syscall of every task on the host through the kernel's slow path. */
static void attach_mmap(struct lp_core *c, enum lp_mmap_source src)
{
	struct core_bpf *s = c->skel;

	if ((bpf_program__autoload(s->progs.lp_mmap_lock_btf) &&
	     attach_one(s->progs.lp_mmap_lock_btf, &s->links.lp_mmap_lock_btf) == 0) ||
	    (bpf_program__autoload(s->progs.lp_mmap_lock_raw) &&
	     attach_one(s->progs.lp_mmap_lock_raw, &s->links.lp_mmap_lock_raw) == 0)) {
		c->mmap_source = "mmap lock tracepoint";
		return;
	}
	if (src == LP_MMAP_SRC_AUTO)
		log_warning("no mmap_lock_released tracepoint: new mappings are found from the "
			    "mmap syscall instead, which sends every syscall on the host through "
			    "the kernel's slow path");
	if (bpf_program__autoload(s->progs.lp_mmap_enter_tp) &&
	    attach_one(s->progs.lp_mmap_enter_tp, &s->links.lp_mmap_enter_tp) == 0) {
		c->mmap_source = "syscall tracepoint";
		return;
	}
	/* The raw_syscalls program also serves futex waits; attach it if they did not. */
	if ((src == LP_MMAP_SRC_AUTO || src == LP_MMAP_SRC_RAW) &&
	    (s->links.lp_sys_enter_raw ||
	     attach_one(s->progs.lp_sys_enter_raw, &s->links.lp_sys_enter_raw) == 0)) {
		c->mmap_source = "raw_syscalls";
		return;
	}
	log_warning("libraries loaded after a process started (dlopen) will not be seen: no "
		    "source of new mappings attaches (--mmap-source)");
}

/* A precise window's programs are loaded for multi-uprobe links where the kernel has them
 * (then they attach no other way), so that a window's hundreds of probes come off with one
 * RCU grace period per program and file instead of one each. */
static void set_uprobe_links(struct lp_core *c, const struct lp_config *cfg,
			     const struct lp_features *f)
{
	struct core_bpf *s = c->skel;
	struct bpf_program *progs[] = {s->progs.lp_matmul_enter,  s->progs.lp_matmul_exit,
				       s->progs.lp_barrier_enter, s->progs.lp_barrier_exit,
				       s->progs.lp_op_enter,	  s->progs.lp_op_exit};

	if (cfg->uprobe_links == LP_UPROBE_LINKS_MULTI && !f->uprobe_multi)
		log_warning("--uprobe-links multi: this kernel has no multi-uprobe links "
			    "filtering by process; a link per probe is used");
	c->uprobe_multi = cfg->uprobe_links != LP_UPROBE_LINKS_SINGLE && f->uprobe_multi;
	for (size_t i = 0; c->uprobe_multi && i < sizeof(progs) / sizeof(*progs); i++)
		bpf_program__set_expected_attach_type(progs[i], LP_TRACE_UPROBE_MULTI);
}

static void set_autoload_sched(struct core_bpf *s, bool btf, bool wakeups)
{
	struct {
		struct bpf_program *btf, *raw;
		bool on;
	} progs[] = {
		{s->progs.lp_switch_btf, s->progs.lp_switch_raw, true},
		{s->progs.lp_wakeup_btf, s->progs.lp_wakeup_raw, wakeups},
		{s->progs.lp_wakeup_new_btf, s->progs.lp_wakeup_new_raw, true},
		{s->progs.lp_exit_btf, s->progs.lp_exit_raw, true},
		{s->progs.lp_exec_btf, s->progs.lp_exec_raw, true},
	};

	for (size_t i = 0; i < sizeof(progs) / sizeof(progs[0]); i++) {
		bpf_program__set_autoload(progs[i].btf, progs[i].on && btf);
		bpf_program__set_autoload(progs[i].raw, progs[i].on && !btf);
	}
}

/* The host's pid_max: tgids are below it (4194304, the kernel's limit, when unreadable). */
static size_t pid_max(void)
{
	char buf[32];
	long v;

	if (lp_read_small("/proc/sys/kernel/pid_max", buf, sizeof(buf)) <= 0 ||
	    (v = strtol(buf, NULL, 10)) < 301 || v > (1L << 22))
		return (size_t)1 << 22;
	return (size_t)v;
}

static size_t marks_bytes(const struct lp_core *c)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);

	return ((c->ntgid_marks + 7) / 8 * 8 + page - 1) / page * page;
}

/* Which programs load, from the settings and what the kernel offers. */
struct plan {
	bool btf;			       /* scheduler programs as tp_btf, else raw_tp */
	bool futex_sched, futex_tp, futex_raw; /* where futex waits come from */
	bool faults, sampling;
	bool mmap_lock, mmap_tp, mmap_raw; /* where new mappings are seen */
};

static struct plan plan_of(const struct lp_config *cfg, const struct lp_features *f)
{
	struct plan p = {.btf = f->tp_btf && !cfg->sched_raw_tp};
	enum lp_futex_source fs = cfg->futex_source;
	enum lp_mmap_source ms = cfg->mmap_source;

	/* Waits from the scheduler need prev's registers: a trusted task (tp_btf). */
	p.futex_sched = p.btf && (fs == LP_FUTEX_SRC_AUTO || fs == LP_FUTEX_SRC_SCHED);
	p.futex_tp = !p.futex_sched && (fs == LP_FUTEX_SRC_AUTO || fs == LP_FUTEX_SRC_TRACEPOINT);
	p.futex_raw = !p.futex_sched && (fs == LP_FUTEX_SRC_AUTO || fs == LP_FUTEX_SRC_RAW);
	p.faults = cfg->faults && f->perf_sw;
	p.sampling = cfg->sample_hz > 0 && f->perf_sw;
	p.mmap_lock = cfg->discover && (ms == LP_MMAP_SRC_AUTO || ms == LP_MMAP_SRC_LOCK);
	p.mmap_tp = cfg->discover && f->tracefs &&
		    (ms == LP_MMAP_SRC_AUTO || ms == LP_MMAP_SRC_TRACEPOINT);
	p.mmap_raw = cfg->discover && (ms == LP_MMAP_SRC_AUTO || ms == LP_MMAP_SRC_RAW);
	return p;
}

/* The maps' sizes and the programs' constants, before the load. */
static void configure(struct lp_core *c, const struct lp_config *cfg, const struct plan *p,
		      const struct lp_features *f)
{
	struct core_bpf *s = c->skel;

	bpf_map__set_max_entries(s->maps.procs, cfg->max_processes);
	bpf_map__set_max_entries(s->maps.procs_hot, cfg->max_processes);
	bpf_map__set_max_entries(s->maps.threads, cfg->max_threads);
	bpf_map__set_max_entries(s->maps.futex_addrs, cfg->max_futex_addrs);
	/* A few preempting processes each is the rule; a busy host's many are counted lost. */
	bpf_map__set_max_entries(s->maps.preemptors, cfg->max_processes * 16);
	bpf_map__set_max_entries(s->maps.events, cfg->ringbuf_bytes);
	/* No sampling, no stacks: the smallest ring the kernel takes. */
	bpf_map__set_max_entries(s->maps.stacks,
				 cfg->sample_hz ? cfg->profile_ringbuf_bytes : 4096);
	bpf_map__set_max_entries(s->maps.ranges, cfg->max_processes);
	bpf_map__set_max_entries(s->maps.precise, cfg->max_processes);
	bpf_map__set_max_entries(s->maps.op_samples, cfg->max_processes);
	/* A byte per possible tgid, 8 to an element. */
	c->ntgid_marks = pid_max();
	bpf_map__set_max_entries(s->maps.tgid_marks, (uint32_t)((c->ntgid_marks + 7) / 8));
	s->rodata->pidns_ino = c->pidns_ino;
	s->rodata->want_exec_events = cfg->ncomms > 0 || cfg->nexes > 0;
	s->rodata->stack_scan = cfg->stack_scan;
	s->rodata->unwind_cfi = cfg->unwind;
	s->rodata->futex_from_sched = p->futex_sched;
	/* The engines whose step finds their processes (torch) put them in procs themselves,
	 * within --discover-cgroup where it is set (fill() gives the kernel its cgroup). */
	s->rodata->step_discover = cfg->discover;
	s->rodata->count_minor_faults = cfg->faults;
	s->rodata->discover_in_cgroup = cfg->discover_cgroup != NULL;
	bpf_map__set_max_entries(s->maps.omp_region, cfg->max_processes);
	/* The ops a process's samples fell in, a few dozen each: 256 a process at most. */
	bpf_map__set_max_entries(s->maps.aop_samples, cfg->max_processes * 256);
	/* Stretches taken as a sample need the task's storage from a trusted task (tp_btf)
	 * and the kernel's own totals (sched_info): elsewhere every one is taken. */
	c->stretch_sample = p->btf && f->task_storage && f->sched_info ? cfg->stretch_sample : 1;
	s->rodata->stretch_sample = c->stretch_sample;
	if (c->stretch_sample > 1)
		bpf_map__set_max_entries(s->maps.tid_open, (uint32_t)((c->ntgid_marks + 7) / 8));
	if (!f->task_storage)
		bpf_map__set_autocreate(s->maps.switch_fast, false);
	if (cfg->stretch_sample > 1 && c->stretch_sample == 1)
		log_notice("every off-CPU stretch of every thread is taken, as with "
			   "--stretch-sample 1: sampling them needs %s",
			   !p->btf	      ? "tp_btf programs"
			   : !f->task_storage ? "task local storage (Linux 5.11)"
					      : "the kernel's sched_info (CONFIG_SCHED_INFO)");
}

static void set_autoload(struct lp_core *c, const struct plan *p, const struct lp_features *f)
{
	struct core_bpf *s = c->skel;

	set_autoload_sched(s, p->btf, c->wakeups);
	bpf_program__set_autoload(s->progs.lp_futex_enter_tp, p->futex_tp);
	bpf_program__set_autoload(s->progs.lp_futex_exit_tp, p->futex_tp);
	bpf_program__set_autoload(s->progs.lp_futex_waitv_enter_tp, p->futex_tp);
	bpf_program__set_autoload(s->progs.lp_futex_waitv_exit_tp, p->futex_tp);
	bpf_program__set_autoload(s->progs.lp_sys_enter_raw, p->futex_raw || p->mmap_raw);
	bpf_program__set_autoload(s->progs.lp_sys_exit_raw, p->futex_raw);
	bpf_program__set_autoload(s->progs.lp_mmap_enter_tp, p->mmap_tp);
	bpf_program__set_autoload(s->progs.lp_mmap_lock_btf,
				  p->mmap_lock && p->btf && f->mmap_lock_btf);
	bpf_program__set_autoload(s->progs.lp_mmap_lock_raw,
				  p->mmap_lock && !(p->btf && f->mmap_lock_btf));
	bpf_program__set_autoload(s->progs.lp_fault_maj, p->faults);
	bpf_program__set_autoload(s->progs.lp_sample, p->sampling);
	bpf_program__set_autoload(s->progs.lp_decode_batch, f->bpf_loop);
}

/* A byte-per-id array (tgid_marks, tid_open) mapped into *out; what, for the error. */
static int map_marks(const struct lp_core *c, const struct bpf_map *m, volatile uint8_t **out,
		     const char *what)
{
	void *p = mmap(NULL, marks_bytes(c), PROT_READ | PROT_WRITE, MAP_SHARED, bpf_map__fd(m), 0);

	if (p == MAP_FAILED)
		return log_error_errno(-errno, "map the %s: %m", what);
	*out = p;
	return 0;
}

/* After the load: the tgid marks mapped (and the open stretches' where stretches are
 * sampled), the --comm names in the kernel's table. */
/* --discover-cgroup's directory for the kernel's own discovery (torch.bpf.c): without
 * it, the processes a step would find there are not. */
static void fill_discover_cgroup(struct core_bpf *s, const char *scope)
{
	char mnt[PATH_MAX], path[2 * PATH_MAX];
	__u32 zero = 0;
	int fd;

	if (lp_cgroup2_mount(mnt, sizeof(mnt)) < 0) {
		log_warning("--discover-cgroup: no cgroup v2 mount: torch processes will not be "
			    "found by their forwards");
		return;
	}
	snprintf(path, sizeof(path), "%s%s", mnt, scope);
	fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0 || bpf_map__update_elem(s->maps.discover_cg, &zero, sizeof(zero), &fd,
					   sizeof(fd), BPF_ANY) < 0)
		log_warning_errno(-errno,
				  "--discover-cgroup: open %s for the kernel: %m; torch "
				  "processes will not be found by their forwards",
				  path);
	if (fd >= 0)
		close(fd);
}

static int fill(struct lp_core *c, const struct lp_config *cfg)
{
	struct core_bpf *s = c->skel;
	int r;

	if ((r = map_marks(c, s->maps.tgid_marks, &c->tgid_marks, "tgid marks")) < 0 ||
	    (c->stretch_sample > 1 &&
	     (r = map_marks(c, s->maps.tid_open, &c->tid_open, "open stretches' marks")) < 0))
		return r;
	for (size_t i = 0; i < cfg->ncomms && i < LP_MAX_COMMS; i++) {
		char key[LP_COMM_LEN] = {};
		__u8 one = 1;

		strncpy(key, cfg->comms[i], sizeof(key) - 1);
		bpf_map__update_elem(s->maps.comms, key, sizeof(key), &one, sizeof(one), BPF_ANY);
	}
	if (cfg->ncomms > LP_MAX_COMMS)
		log_warning(
			"more than %d --comm names: the others are tracked from when their exec "
			"is read, not from the exec itself",
			LP_MAX_COMMS);
	if (cfg->discover_cgroup)
		fill_discover_cgroup(s, cfg->discover_cgroup);
	return 0;
}

/* Futex waits from the planned source, falling back from tracepoints to raw syscalls. */
static void attach_futex(struct lp_core *c, const struct lp_config *cfg,
			 const struct lp_features *f, const struct plan *p)
{
	int r = -ENOENT;

	if (p->futex_sched) {
		c->futex_source = "scheduler";
		r = 0;
	} else if (cfg->futex_source == LP_FUTEX_SRC_SCHED) {
		log_warning("--futex-source sched needs tp_btf programs (%s): futex waits "
			    "will not be collected; --futex-source tracepoint or raw collects "
			    "them from the syscalls",
			    cfg->sched_raw_tp ? "--sched-raw-tp is set"
					      : "this kernel refuses them");
	}
	if (p->futex_tp && f->tracefs)
		r = attach_futex_tracepoints(c);
	if (r < 0 && p->futex_raw)
		r = attach_futex_raw(c);
	if (r < 0 && cfg->futex_source != LP_FUTEX_SRC_OFF &&
	    cfg->futex_source != LP_FUTEX_SRC_SCHED)
		log_warning_errno(r, "futex waits will not be collected: %m");
	c->futex_attached = r == 0;
}

int lp_core_load(struct lp_core *c, const struct lp_config *cfg, const struct lp_features *f)
{
	struct plan p = plan_of(cfg, f);
	int r;

	memset(c, 0, sizeof(*c));
	if (!f->btf)
		return log_error_errno(-EOPNOTSUPP, "cannot load BPF programs: the kernel has no "
						    "BTF (/sys/kernel/btf/vmlinux)");
	if (!p.btf && !f->raw_tp)
		return log_error_errno(-EOPNOTSUPP, "cannot attach to scheduler tracepoints: "
						    "neither tp_btf nor raw_tp programs load");
	c->skel = core_bpf__open();
	if (!c->skel)
		return log_error_errno(-errno, "open BPF object: %m");
	if (lp_proc_pidns("/proc", &c->pidns_ino) == 0 && c->pidns_ino)
		log_notice(
			"PID namespace: not the host's (pid:[%u]): the processes of this "
			"namespace are tracked, by their pids here; those of others are not seen",
			c->pidns_ino);
	configure(c, cfg, &p, f);
	c->wakeups = !f->sched_info;
	set_autoload(c, &p, f);
	set_uprobe_links(c, cfg, f);
	r = core_bpf__load(c->skel);
	if (r < 0 && c->pidns_ino)
		return log_error_errno(r,
				       "load BPF programs: %m; in a PID namespace other than "
				       "the host's, the programs number tasks as it does, which "
				       "needs the kernel's struct pid in its BTF: run llmprofd in "
				       "the host's (docker run --pid=host, Kubernetes hostPID: "
				       "true)");
	if (r < 0)
		return log_error_errno(r, "load BPF programs: %m");
	if ((r = fill(c, cfg)) < 0)
		return r;
	r = attach_sched(c, p.btf);
	if (r < 0)
		return log_error_errno(r, "scheduler tracepoints are required: %m");
	attach_futex(c, cfg, f, &p);
	if (p.faults && attach_faults(c) < 0)
		log_warning("page faults will not be counted, ignoring");
	if (cfg->discover)
		attach_mmap(c, cfg->mmap_source);
	/* From the scheduler, waits cost nothing on the syscall path. Any syscall tracepoint
	 * sends every syscall of every task on the host through the
	 * kernel's slow path: the futex programs stay attached only while a process is
	 * tracked (attached here, they said whether they can be). Not where the kernel
	 * inserts processes itself at exec (--comm), nor where the raw syscall program also
	 * discovers mappings. */
	c->futex_on_demand = c->futex_attached && !p.futex_sched && cfg->ncomms == 0 &&
			     !(c->mmap_source && !strcmp(c->mmap_source, "raw_syscalls"));
	if (c->futex_on_demand)
		futex_attach(c, false);
	if (p.sampling)
		attach_sampling(c, cfg->sample_hz, cfg->sampler == LP_SAMPLER_THREAD);
	else if (cfg->sample_hz)
		log_warning("matmul and barrier shares will not be estimated: this kernel has no "
			    "software perf events for BPF");
	return 0;
}

/* xorshift64*, seeded from the kernel's random pool: chances independent of the work. */
static uint64_t next_random(struct lp_core *c)
{
	if (!c->rng &&
	    (getrandom(&c->rng, sizeof(c->rng), GRND_NONBLOCK) != sizeof(c->rng) || !c->rng))
		c->rng = (uint64_t)time(NULL) << 20 | (uint64_t)getpid() | 1;
	c->rng ^= c->rng >> 12;
	c->rng ^= c->rng << 25;
	c->rng ^= c->rng >> 27;
	return c->rng * 0x2545F4914F6CDD1DULL;
}

/* A number in [lo, hi), uniform. */
static double uniform(struct lp_core *c, double lo, double hi)
{
	return lo + (hi - lo) * (double)(next_random(c) >> 11) / (double)(1ULL << 53);
}

unsigned lp_core_sample_rephase(struct lp_core *c, bool tracking)
{
	for (int i = 0; tracking && c->sample_fds && i < c->nsample_cpus; i++) {
		/* Each window's rate uniform in [0.75, 1.25] of the configured one: over windows
		 * of lengths drawn apart from the rates, the mean rate is the configured one. */
		uint64_t period = (uint64_t)(1e9 / (c->sample_hz * uniform(c, 0.75, 1.25)));
		int cpu = c->sample_cpus[i];
		volatile __u32 *epoch =
			cpu < LP_SAMPLE_CPUS ? &c->skel->bss->sample_epoch[cpu] : NULL;

		/* Odd from before the restart to after it, the restart's time and period set
		 * between: the sampler counts a gap across it from both grids, and one it saw
		 * midway not at all (sample.bpf.c, "Samples not taken"). */
		if (epoch)
			__atomic_add_fetch(epoch, 1, __ATOMIC_SEQ_CST);
		if (ioctl(c->sample_fds[i], PERF_EVENT_IOC_PERIOD, &period) < 0) {
			log_debug("cpu-clock event %d of %d: set its period: %m", i,
				  c->nsample_cpus);
		} else if (epoch) {
			/* Restarted by the time the call returns (on that CPU, by an IPI the call
			 * waits for): the new grid starts at most this much before. */
			struct timespec ts;

			clock_gettime(CLOCK_MONOTONIC, &ts);
			c->skel->bss->sample_restart_ns[cpu] =
				(uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
			c->skel->bss->sample_period_ns[cpu] = period;
		}
		if (epoch)
			__atomic_add_fetch(epoch, 1, __ATOMIC_SEQ_CST);
	}
	return (unsigned)uniform(c, 50000, 150000);
}

uint64_t lp_core_recursion_misses(const struct lp_core *c, const char **worst)
{
	struct bpf_program *prog;
	uint64_t sum = 0, most = 0;

	*worst = NULL;
	if (!c->skel)
		return 0;
	bpf_object__for_each_program(prog, c->skel->obj)
	{
		struct bpf_prog_info info = {0};
		__u32 len = sizeof(info);
		int fd = bpf_program__fd(prog);

		if (fd < 0 || bpf_obj_get_info_by_fd(fd, &info, &len) < 0)
			continue;
		sum += info.recursion_misses;
		if (info.recursion_misses > most) {
			most = info.recursion_misses;
			*worst = bpf_program__name(prog);
		}
	}
	return sum;
}

void lp_core_destroy(struct lp_core *c)
{
	if (c->tgid_marks)
		munmap((void *)c->tgid_marks, marks_bytes(c));
	if (c->tid_open)
		munmap((void *)c->tid_open, marks_bytes(c));
	lp_links_destroy(&c->links, &c->nlinks);
	free(c->sample_fds);
	free(c->sample_cpus);
	core_bpf__destroy(c->skel);
	memset(c, 0, sizeof(*c));
}

static uint64_t map_memlock(int fd)
{
	char path[64], line[256];
	unsigned long long v = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/self/fdinfo/%d", fd);
	f = fopen(path, "re");
	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "memlock: %llu", &v) == 1)
			break;
	fclose(f);
	return v;
}

static int count_one(void *ctx, const void *key, const void *value)
{
	(void)key;
	(void)value;
	++*(uint64_t *)ctx;
	return 0;
}

static uint64_t count_entries(struct bpf_map *map)
{
	uint64_t n = 0;

	switch (bpf_map__type(map)) {
	case BPF_MAP_TYPE_HASH:
	case BPF_MAP_TYPE_LRU_HASH:
		lp_map_walk(bpf_map__fd(map), bpf_map__key_size(map), bpf_map__value_size(map),
			    count_one, &n);
		break;
	case BPF_MAP_TYPE_PERCPU_HASH: /* a value per CPU: counted by the keys alone */
		lp_map_walk(bpf_map__fd(map), bpf_map__key_size(map), 0, count_one, &n);
		break;
	default:
		break;
	}
	return n;
}

int lp_core_op_samples(const struct lp_core *c, pid_t pid, struct lp_op_samples *out)
{
	__u32 key = (__u32)pid;

	if (bpf_map_lookup_elem(bpf_map__fd(c->skel->maps.op_samples), &key, out))
		return -errno;
	return 0;
}

size_t lp_core_map_usage(const struct lp_core *c, struct lp_map_usage *out, size_t n)
{
	struct bpf_map *m;
	size_t k = 0;

	/* Every map the object made, its per-CPU scratch and constants too: a list kept by
	 * hand left ten out (decode_batch, proc_init, stack_buf, ...) and their 0.6 MiB
	 * out of the total. */
	bpf_object__for_each_map(m, c->skel->obj)
	{
		if (k == n) {
			/* a map more than the callers' arrays hold: a bug of this build */
			log_error("more kernel maps than LP_MAPS_MAX (%zu): the figures leave "
				  "some out",
				  n);
			break;
		}
		if (bpf_map__fd(m) < 0)
			continue;
		out[k].name = bpf_map__name(m);
		out[k].max_entries = bpf_map__max_entries(m);
		out[k].value_size = bpf_map__value_size(m);
		out[k].memlock = map_memlock(bpf_map__fd(m));
		out[k].entries = count_entries(m);
		k++;
	}
	return k;
}
