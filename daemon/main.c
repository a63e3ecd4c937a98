// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* llmprofd: loads the collectors, tracks the selected processes, and serves what they
 * collect over the API socket and /metrics (or, with --once, prints one report). */
#include <bpf/libbpf.h>
#include <errno.h>
#include <event2/event.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <systemd/sd-daemon.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"
#include "daemon.h"
#include "persist.h"
#include "serving/api.h"
#include "kernel/core.h"
#include "report/diagnose.h"
#include "core.skel.h"
#include "engine/engine.h"
#include "tracked/identity.h"
#include "engine/precise.h"
#include "engine/requests.h"
#include "base/log.h"
#include "options.h"
#include "kernel/feature.h"
#include "base/procfs.h"
#include "timeline/record.h"
#include "report/render.h"
#include "serving/server.h"
#include "report/report.h"
#include "report/state.h"
#include "tracked/sweep.h"
#include "tracked/track.h"
#include "serving/webconfig.h"

static bool libbpf_debug;

/* libbpf's messages in our log; its debug output (verifier logs and more) only with -v. */
static int libbpf_log(enum libbpf_print_level level, const char *fmt, va_list ap)
{
	char buf[1024];
	size_t n;

	if (level == LIBBPF_DEBUG && !libbpf_debug)
		return 0;
	vsnprintf(buf, sizeof(buf), fmt, ap);
	n = strlen(buf);
	if (n && buf[n - 1] == '\n')
		buf[n - 1] = '\0';
	lp_log(level == LIBBPF_WARN   ? LOG_WARNING
	       : level == LIBBPF_INFO ? LOG_INFO
				      : LOG_DEBUG,
	       "libbpf: %s", buf);
	return 0;
}

static void log_memory(const struct lp_core *c)
{
	struct lp_map_usage u[LP_MAPS_MAX];
	size_t n = lp_core_map_usage(c, u, LP_MAPS_MAX);
	char line[1536];
	uint64_t total = 0;
	int len = 0;

	line[0] = '\0';
	for (size_t i = 0; i < n; i++) {
		total += u[i].memlock;
		if (len >= (int)sizeof(line))
			continue; /* the line is full; the total still counts every map */
		/* A ring buffer's max_entries is its size in bytes. */
		if (u[i].value_size == 0)
			len += snprintf(line + len, sizeof(line) - (size_t)len, "%s%s %u KiB",
					i ? ", " : "", u[i].name, u[i].max_entries >> 10);
		else
			len += snprintf(line + len, sizeof(line) - (size_t)len, "%s%s %u x %u B",
					i ? ", " : "", u[i].name, u[i].max_entries,
					u[i].value_size);
	}
	log_info("kernel maps: %s; %.1f MiB locked in all", line, (double)total / (1 << 20));
}

static int on_event(void *arg, void *data, size_t size)
{
	struct daemon *d = arg;
	__u32 type;

	if (size < sizeof(type))
		return 0;
	memcpy(&type, data, sizeof(type));
	if (type == LP_EV_DECODE) {
		if (size >= sizeof(struct lp_ev_decode))
			lp_engines_decode_event(&d->eng, data);
		return 0;
	}
	if (type == LP_EV_FOUND) {
		if (size >= sizeof(struct lp_ev_found))
			lp_engines_found(&d->eng, data);
		return 0;
	}
	if (type != LP_EV_MAP || size < sizeof(struct lp_ev_map))
		return lp_tracker_event(&d->tracker, data, size);
	lp_engines_event(&d->eng, data);
	/* Read the mappings a little later: the syscall fallbacks report from mmap's entry. */
	if (!evtimer_pending(d->ev_pending, NULL)) {
		struct timeval tv = {.tv_sec = 0, .tv_usec = 30000};

		evtimer_add(d->ev_pending, &tv);
	}
	return 0;
}

static void on_record(evutil_socket_t fd, short what, void *arg)
{
	struct daemon *d = arg;
	struct timeval tv = {.tv_sec = 0, .tv_usec = 100000};

	(void)fd;
	(void)what;
	lp_daemon_consume(d);
	lp_record_tick(&d->recorder);
	if (lp_record_running(&d->recorder))
		evtimer_add(d->ev_record, &tv);
}

static void on_profile(evutil_socket_t fd, short what, void *arg)
{
	struct daemon *d = arg;
	struct timeval tv = {.tv_sec = 0, .tv_usec = LP_PROFILE_DRAIN_MS * 1000};

	(void)fd;
	(void)what;
	lp_daemon_consume(d);
	lp_profiler_tick(&d->profiler);
	if (lp_profiler_running(&d->profiler))
		evtimer_add(d->ev_profile, &tv);
}

static void on_decide(evutil_socket_t fd, short what, void *arg)
{
	struct daemon *d = arg;
	struct timeval tv = {.tv_sec = 0, .tv_usec = 100000};

	(void)fd;
	(void)what;
	if (lp_precise_decide(&d->eng))
		evtimer_add(d->ev_decide, &tv);
}

static void on_pending(evutil_socket_t fd, short what, void *arg)
{
	struct daemon *d = arg;

	(void)fd;
	(void)what;
	if (lp_engines_process_pending(&d->eng)) {
		struct timeval tv = {.tv_sec = 0, .tv_usec = 50000};

		evtimer_add(d->ev_pending, &tv);
	}
}

/* The findings' windows: a snapshot of each live process every LP_DIAGNOSE_WINDOW_NS. */
static void diagnose_tick(struct daemon *d)
{
	struct lp_report r;
	uint64_t now = lp_now_ns();
	bool live = false;

	for (size_t i = 0; i < d->tracker.n && !live; i++)
		live = !d->tracker.v[i]->exited;
	if (now - d->diagnose_ns < LP_DIAGNOSE_WINDOW_NS / 2)
		return;
	d->diagnose_ns = now;
	lp_membw_tick(&d->diagnose.membw);
	if (!live && !d->diagnose.n)
		return;
	/* The findings judge processes: no map's fill, which walks every map. */
	if (lp_report_build(&r, &d->core, &d->tracker, 0, false) == 0)
		lp_diagnose_tick(&d->diagnose, &r);
	lp_report_free(&r);
	/* The model a process maps is part of who it is (identity.h). */
	for (size_t i = 0; i < d->tracker.n; i++) {
		struct lp_target *t = d->tracker.v[i];
		const struct lp_context *ctx =
			t->exited ? NULL : lp_diagnose_context(&d->diagnose, t);

		if (ctx && lp_identity_set_model(&t->ident, ctx))
			log_info("pid %d maps the model %s", (int)t->pid, t->ident.model);
	}
}

static void before_insert(void *userdata)
{
	struct daemon *d = userdata;

	lp_core_futex_want(&d->core);
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
	struct daemon *d = arg;

	(void)fd;
	(void)what;
	lp_precise_tick(&d->eng);
	lp_engines_tick(&d->eng);
	if (!evtimer_pending(d->ev_decide, NULL))
		on_decide(-1, 0, d);
	/* Exit records in flight first, so that the sweep only finds exits the hook missed;
	 * timeline events before the records whose window ended are finished. */
	lp_daemon_consume(d);
	lp_record_tick(&d->recorder);
	lp_tracker_find_missed_exits(&d->tracker);
	if (d->tracker.nwaiting) {
		size_t from = d->tracker.n;

		if (lp_tracker_retry(&d->tracker) > 0)
			for (size_t i = from; i < d->tracker.n; i++)
				lp_engines_check(&d->eng, d->tracker.v[i]);
	}
	if (!d->cfg.once)
		lp_tracker_expire(&d->tracker, lp_now_ns(), (uint64_t)(d->cfg.retention * 1e9));
	lp_core_futex_tick(&d->core, lp_tracker_tracking(&d->tracker), lp_now_ns());
	diagnose_tick(d);
}

/* The per-CPU sampling timers restarted at random rates, every 50 to 150 ms (core.h). */
static void on_rephase(evutil_socket_t fd, short what, void *arg)
{
	struct daemon *d = arg;
	struct timeval tv = {.tv_sec = 0,
			     .tv_usec = (suseconds_t)lp_core_sample_rephase(
				     &d->core, lp_tracker_tracking(&d->tracker))};

	(void)fd;
	(void)what;
	evtimer_add(d->ev_rephase, &tv);
}

static void on_watchdog(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	(void)arg;
	sd_notify(0, "WATCHDOG=1");
}

static int web_config_reload(struct daemon *d, const char *path)
{
	struct lp_webconfig *w = NULL;
	char *keep = strdup(path);
	int r;

	if (!keep)
		return -ENOMEM;
	r = *path ? lp_webconfig_load(path, &w) : 0;
	if (r == 0)
		r = lp_server_set_webconfig(d->server, w);
	if (r < 0) {
		free(keep);
		return r;
	}
	free(d->web_config);
	d->web_config = keep;
	d->cfg.web_config = keep;
	return 0;
}

/* SIGHUP: reads the file and the command line again. Settings that apply to the running
 * daemon take effect; the others are named with "restart to apply". Nothing collected is
 * touched. A bad file keeps the current settings. */
static void on_reload(evutil_socket_t fd, short what, void *arg)
{
	struct daemon *d = arg;
	struct lp_config_store store = {};
	struct lp_config cfg;
	cJSON *now, *next, *item;
	int applied = 0, pending = 0;

	(void)fd;
	(void)what;
	sd_notify(0, "RELOADING=1\nSTATUS=Reloading the configuration");
	if (lp_options_load(&cfg, &store, d->argc, d->argv) != 0) {
		log_error("reload: the configuration has errors; keeping the current one");
		lp_config_store_free(&store);
		sd_notify(0, "READY=1\nSTATUS=Collecting (reload failed, see the log)");
		return;
	}
	now = lp_config_describe(&d->cfg);
	next = lp_config_describe(&cfg);
	cJSON_ArrayForEach(item, next)
	{
		cJSON *old = cJSON_GetObjectItemCaseSensitive(now, item->string);
		char *v;

		if (old && cJSON_Compare(old, item, true))
			continue;
		v = cJSON_PrintUnformatted(item);
		if (lp_option_reloadable(item->string)) {
			log_info("reload: %s = %s", item->string, v ? v : "?");
			applied++;
		} else {
			log_warning("reload: %s = %s takes effect at the next restart",
				    item->string, v ? v : "?");
			pending++;
		}
		free(v);
	}
	cJSON_Delete(now);
	cJSON_Delete(next);
	lp_config_reload(&d->cfg, &cfg);
	lp_persist_arm(d);
	/* The web configuration is read again whether or not its name changed: passwords and
	 * certificates change in place. A file with errors keeps the current one. */
	if (d->server && web_config_reload(d, cfg.web_config) < 0)
		log_error("reload: keeping the current web configuration");
	lp_log_set_level(cfg.verbose ? LOG_DEBUG : LOG_INFO);
	if (d->server) {
		struct lp_server_opts so = {.max_connections = cfg.max_connections,
					    .max_per_uid = cfg.max_per_uid,
					    .timeout_s = cfg.http_timeout};

		lp_server_set_limits(d->server, &so);
	}
	lp_config_store_free(&store);
	d->reloads++;
	log_info("reloaded the configuration: %d setting(s) applied, %d need a restart", applied,
		 pending);
	sd_notify(0, "READY=1\nSTATUS=Collecting");
}

static void on_ringbuf(evutil_socket_t fd, short what, void *arg)
{
	struct daemon *d = arg;

	(void)fd;
	(void)what;
	lp_daemon_consume(d);
}

static void on_stop(evutil_socket_t fd, short what, void *arg)
{
	struct daemon *d = arg;

	(void)what;
	if (fd >= 0)
		log_info("received SIG%s, stopping", sigabbrev_np((int)fd));
	event_base_loopbreak(d->base);
}

/* In --once mode with --pid targets (and no --comm/--exe), the report is due when the last
 * of them exits; processes found by their ggml symbols meanwhile are reported too. */
static void on_target_exit(void *userdata, struct lp_target *t)
{
	struct daemon *d = userdata;

	if (t)
		lp_engines_on_exit(&d->eng, t);
	if (!d->cfg.once || d->cfg.npids == 0 || d->cfg.ncomms || d->cfg.nexes)
		return;
	for (size_t i = 0; i < d->cfg.npids; i++) {
		struct lp_target *x = lp_tracker_find(&d->tracker, d->cfg.pids[i]);

		if (x && !x->exited)
			return;
	}
	event_base_loopbreak(d->base);
}

/* The socket systemd passed, if any: exactly one listening stream socket. */
static int activated_socket(void)
{
	int n = sd_listen_fds(1);

	if (n <= 0)
		return -1;
	if (n > 1)
		log_warning("systemd passed %d sockets; using the first", n);
	if (sd_is_socket_unix(SD_LISTEN_FDS_START, SOCK_STREAM, 1, NULL, 0) <= 0) {
		log_warning("the socket systemd passed is not a listening Unix stream socket, "
			    "ignoring it");
		return -1;
	}
	return SD_LISTEN_FDS_START;
}

/* libevent's event_free() does not accept NULL. */
static void event_free_safe(struct event *ev)
{
	if (ev)
		event_free(ev);
}

/* Connections and per-CPU perf events need descriptors: the soft limit goes up to the
 * hard one, as systemd advises for daemons that need many. */
static void raise_nofile(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
}

/* Exit records wait in a ring buffer the kernel cannot block on. On a host whose CPUs are
 * all busy, as inference keeps them, a daemon at the default priority waits in the run
 * queue for seconds at a time, and records that do not fit are lost
 * (tests/bpf/test_lifecycle.py's 10,000 processes of 10 ms beside the busy host: run-queue
 * delay four times the daemon's CPU time; 722 records lost from 512 KiB at nice 0, none at
 * nice -5). As auditd's priority_boost, the daemon runs at nice -N: its work is the same,
 * done sooner. Threads made later inherit it; a unit that sets Nice= needs no call. */
static void boost_priority(uint32_t boost)
{
	int now, want = -(int)boost;

	if (!boost)
		return;
	errno = 0;
	now = getpriority(PRIO_PROCESS, 0);
	if (errno == 0 && now <= want)
		return;
	if (setpriority(PRIO_PROCESS, 0, want) < 0)
		log_warning(
			"cannot run at nice %d (%s): with every CPU busy, exit records may be "
			"lost (lost.ring_buffer_full); grant CAP_SYS_NICE or set Nice=%d in the "
			"unit (--priority-boost 0 leaves the priority as started)",
			want, strerror(errno), want);
}

static int serve_setup(struct daemon *d, struct event **ev_hup, struct event **ev_wd)
{
	struct lp_server_opts so = {
		.socket_path = d->cfg.socket_path,
		.activated_fd = activated_socket(),
		.socket_mode = d->cfg.socket_mode,
		.socket_group = d->cfg.socket_group,
		.metrics_address = d->cfg.metrics_address,
		.max_connections = d->cfg.max_connections,
		.max_per_uid = d->cfg.max_per_uid,
		.timeout_s = d->cfg.http_timeout,
	};
	uint64_t wd_usec = 0;
	int r;

	if (*d->cfg.web_config) {
		r = lp_webconfig_load(d->cfg.web_config, &so.web);
		if (r < 0)
			return r;
	}
	lp_backend_init(d);
	sd_notify(0, "STATUS=Opening the API socket");
	r = lp_server_start(&d->server, d->base, &so, &d->api);
	if (r < 0)
		return r;
	*ev_hup = evsignal_new(d->base, SIGHUP, on_reload, d);
	if (!*ev_hup || event_add(*ev_hup, NULL))
		return log_error_errno(-ENOMEM, "set up SIGHUP: %m");
	/* Pings from the event loop itself: a stuck loop stops them and systemd restarts us. */
	if (sd_watchdog_enabled(0, &wd_usec) > 0 && wd_usec > 0) {
		struct timeval tv = {.tv_sec = (time_t)(wd_usec / 2 / 1000000),
				     .tv_usec = (suseconds_t)(wd_usec / 2 % 1000000)};

		*ev_wd = event_new(d->base, -1, EV_PERSIST, on_watchdog, d);
		if (!*ev_wd || event_add(*ev_wd, &tv))
			return log_error_errno(-ENOMEM, "set up the watchdog timer: %m");
		log_info("watchdog: pinging systemd every %.1f s", (double)wd_usec / 2e6);
	}
	return 0;
}

/* Kernel features, then the BPF object loaded and attached. 1: --check is done. */
static int load(struct daemon *d)
{
	int r;

	sd_notify(0, "STATUS=Probing kernel features");
	lp_features_probe(&d->features, d->cfg.mount_tracefs);
	lp_features_log(&d->features);
	if (d->features.bpf_denied)
		return -EPERM;

	sd_notify(0, "STATUS=Loading and attaching BPF programs");
	r = lp_core_load(&d->core, &d->cfg, &d->features);
	if (r < 0)
		return r;
	log_info("collectors: scheduler via %s, run-queue delay from %s, futex via %s%s, page "
		 "faults %s, new mappings via %s, sampling at %u Hz %s",
		 d->core.sched_variant,
		 d->core.wakeups ? "sched_wakeup" : "the kernel's sched_info",
		 d->core.futex_source ? d->core.futex_source : "off",
		 d->core.futex_on_demand ? " (attached while a process is tracked)" : "",
		 !d->cfg.faults	  ? "off"
		 : d->core.faults ? "from the kernel's counts (minor) and perf software events "
				    "(major)"
				  : "from the kernel's counts (minor only)",
		 d->core.mmap_source ? d->core.mmap_source : "nothing (off)", d->core.sample_hz,
		 d->core.sample_per_thread ? "per thread of each LLM process"
		 : d->cfg.sample_rephase   ? "per CPU (the rate restarted at random)"
					   : "per CPU (a fixed rate)");
	log_memory(&d->core);
	if (!d->cfg.check)
		return 0;
	if (*d->cfg.web_config) {
		r = lp_webconfig_check(d->cfg.web_config);
		if (r < 0)
			return r;
		log_info("check: web configuration %s is usable", d->cfg.web_config);
	}
	/* Everything required attached (lp_core_load fails otherwise); what degraded was
	 * logged above with what it costs. */
	log_info("check: ok, %zu programs attached", d->core.nlinks);
	return 1;
}

/* The rooms that read the kernel's maps, wired to each other, and the ring buffers. */
static int wire(struct daemon *d)
{
	lp_tracker_init(&d->tracker, &d->cfg, bpf_map__fd(d->core.skel->maps.procs),
			bpf_map__fd(d->core.skel->maps.futex_addrs),
			bpf_map__fd(d->core.skel->maps.threads));
	d->tracker.preempt_fd = bpf_map__fd(d->core.skel->maps.preemptors);
	d->tracker.hot_fd = bpf_map__fd(d->core.skel->maps.procs_hot);
	d->tracker.tgid_marks = d->core.tgid_marks;
	d->tracker.ntgid_marks = d->core.ntgid_marks;
	d->tracker.tid_open = d->core.tid_open;
	d->tracker.on_exit = on_target_exit;
	d->tracker.before_insert = before_insert;
	d->tracker.free_eng = lp_eproc_free;
	d->tracker.free_requests = lp_requests_free;
	d->tracker.userdata = d;
	lp_engines_init(&d->eng, &d->cfg, &d->core, &d->tracker);
	lp_precise_hook(&d->eng);
	lp_recorder_init(&d->recorder, &d->core, &d->eng, &d->tracker, LLMPROF_VERSION);
	lp_profiler_init(&d->profiler, &d->core, &d->tracker, &d->eng,
			 d->core.nsample_cpus > 0 || d->core.sample_per_thread ? d->core.sample_hz
									       : 0,
			 d->cfg.profile_memory_mib);
	lp_diagnose_init(&d->diagnose, d->cfg.state_dir);
	d->rb = ring_buffer__new(bpf_map__fd(d->core.skel->maps.events), on_event, d, NULL);
	if (!d->rb)
		return log_error_errno(-errno, "create ring buffer reader: %m");
	if (ring_buffer__add(d->rb, bpf_map__fd(d->core.skel->maps.rec_ring), lp_record_on_event,
			     &d->recorder) < 0)
		return log_error_errno(-errno, "create ring buffer reader: %m");
	return 0;
}

/* The first targets: --pid, the processes running now, and the saved ones still running
 * that the rules in force track again (state.h). */
static int first_targets(struct daemon *d, bool serve)
{
	int r;

	if (serve && *d->cfg.state_dir) {
		r = lp_persist_check_dir(d->cfg.state_dir);
		if (r < 0)
			return r;
	}
	for (size_t i = 0; i < d->cfg.npids; i++) {
		r = lp_tracker_add(&d->tracker, d->cfg.pids[i], "pid");
		if (r == -ESRCH)
			return log_error_errno(r, "--pid %d: no such process", (int)d->cfg.pids[i]);
		if (r < 0 && r != -EALREADY)
			return log_error_errno(r, "--pid %d: cannot track: %m",
					       (int)d->cfg.pids[i]);
	}
	r = lp_tracker_scan(&d->tracker);
	if (r < 0)
		return r;
	if (d->cfg.discover) {
		r = lp_engines_scan_all(&d->eng);
		if (r < 0)
			return r;
	} else {
		for (size_t i = 0; i < d->tracker.n; i++)
			lp_engines_check(&d->eng, d->tracker.v[i]);
	}
	if (serve && *d->cfg.state_dir)
		lp_state_restore(d->cfg.state_dir, &d->tracker, d->boot_id[0] ? d->boot_id : NULL,
				 d->start_realtime);
	return 0;
}

/* The loop's own events (the daemon's are in struct daemon). */
struct loop {
	struct event *rb, *sigint, *sigterm, *timer, *tick, *hup, *wd;
};

/* --once --seconds S: the report after S seconds. */
static int once_timer(struct daemon *d, struct loop *l)
{
	struct timeval tv = {
		.tv_sec = (time_t)d->cfg.seconds,
		.tv_usec = (suseconds_t)((d->cfg.seconds - (double)(time_t)d->cfg.seconds) * 1e6)};

	l->timer = evtimer_new(d->base, on_stop, d);
	if (!l->timer || evtimer_add(l->timer, &tv))
		return log_error_errno(-ENOMEM, "set up timer: %m");
	return 0;
}

/* The loop, its timers on the precise monotonic clock. libevent's default is
 * CLOCK_MONOTONIC_COARSE, a jiffy behind: a timer's wait ended, the coarse clock says it is
 * not due yet and the loop sleeps again for the rest, a wake-up of its own (a third of the
 * daemon's beside a busy decoder, each a switch on a CPU the decoder needs). Precise, the
 * epoll backend sets a timerfd instead, one call a wait. */
static struct event_base *loop_base(void)
{
	struct event_config *cfg = event_config_new();
	struct event_base *b;

	if (!cfg)
		return event_base_new();
	event_config_set_flag(cfg, EVENT_BASE_FLAG_PRECISE_TIMER);
	b = event_base_new_with_config(cfg);
	event_config_free(cfg);
	return b ? b : event_base_new();
}

static int loop_setup(struct daemon *d, struct loop *l, bool serve)
{
	int r;

	d->base = loop_base();
	if (!d->base)
		return log_error_errno(-ENOMEM, "create event loop: %m");
	d->ev_pending = evtimer_new(d->base, on_pending, d);
	d->ev_record = evtimer_new(d->base, on_record, d);
	d->ev_rephase = evtimer_new(d->base, on_rephase, d);
	d->ev_decide = evtimer_new(d->base, on_decide, d);
	d->ev_profile = evtimer_new(d->base, on_profile, d);
	l->tick = event_new(d->base, -1, EV_PERSIST, on_tick, d);
	if (!d->ev_pending || !d->ev_record || !d->ev_rephase || !d->ev_decide || !d->ev_profile ||
	    !l->tick || event_add(l->tick, &(struct timeval){.tv_sec = 1, .tv_usec = 0}))
		return log_error_errno(-ENOMEM, "set up event loop: %m");
	/* Probes go on and off on a thread of their own: the kernel's waits there hold no
	 * answer (prober.h). Without it, on the loop as before. */
	if (lp_prober_start(&d->prober, d->base) == 0) {
		d->eng.prober = &d->prober;
		d->core.prober = &d->prober;
	}
	d->core.futex_ready = lp_engines_futex_ready;
	d->core.futex_ready_arg = &d->eng;
	d->eng.base = d->base;
	lp_precise_tick(&d->eng);
	if (d->core.nsample_cpus > 0 && d->cfg.sample_rephase)
		on_rephase(-1, 0, d);
	l->rb = event_new(d->base, ring_buffer__epoll_fd(d->rb), EV_READ | EV_PERSIST, on_ringbuf,
			  d);
	l->sigint = evsignal_new(d->base, SIGINT, on_stop, d);
	l->sigterm = evsignal_new(d->base, SIGTERM, on_stop, d);
	if (!l->rb || !l->sigint || !l->sigterm || event_add(l->rb, NULL) ||
	    event_add(l->sigint, NULL) || event_add(l->sigterm, NULL))
		return log_error_errno(-ENOMEM, "set up event loop: %m");
	if (d->cfg.once && d->cfg.seconds > 0 && (r = once_timer(d, l)) < 0)
		return r;
	if (!serve)
		return 0;
	r = serve_setup(d, &l->hup, &l->wd);
	if (r < 0)
		return r;
	d->ev_checkpoint = event_new(d->base, -1, EV_PERSIST, lp_persist_on_checkpoint, d);
	if (!d->ev_checkpoint)
		return log_error_errno(-ENOMEM, "set up the checkpoint timer: %m");
	lp_persist_arm(d);
	return 0;
}

/* What is still on its way is taken off here; from now on links go at once. */
static void loop_free(struct daemon *d, struct loop *l)
{
	lp_precise_stop(&d->eng);
	lp_prober_stop(&d->prober);
	d->core.prober = NULL;
	event_free_safe(d->ev_checkpoint);
	d->ev_checkpoint = NULL;
	lp_server_free(d->server);
	d->server = NULL;
	event_free_safe(l->wd);
	event_free_safe(l->hup);
	event_free_safe(l->tick);
	event_free_safe(d->ev_pending);
	d->ev_pending = NULL;
	event_free_safe(d->ev_record);
	d->ev_record = NULL;
	event_free_safe(d->ev_rephase);
	d->ev_rephase = NULL;
	event_free_safe(d->ev_decide);
	d->ev_decide = NULL;
	event_free_safe(d->ev_profile);
	d->ev_profile = NULL;
	event_free_safe(l->timer);
	event_free_safe(l->sigterm);
	event_free_safe(l->sigint);
	event_free_safe(l->rb);
}

static int run(struct daemon *d)
{
	struct loop l = {0};
	bool serve = !d->cfg.once && !d->cfg.check;
	int r;

	d->start_ns = lp_now_ns();
	d->start_realtime = lp_realtime_now();
	if (lp_boot_id(d->boot_id, sizeof(d->boot_id)) < 0)
		d->boot_id[0] = '\0';
	raise_nofile();
	boost_priority(d->cfg.priority_boost);
	r = load(d);
	if (r)
		return r > 0 ? 0 : r;
	if ((r = wire(d)) < 0 || (r = first_targets(d, serve)) < 0)
		return r;
	r = loop_setup(d, &l, serve);
	if (r < 0) {
		loop_free(d, &l);
		return r;
	}
	log_info("ready: tracking %zu process(es)", d->tracker.n);
	sd_notify(0, "READY=1\nSTATUS=Collecting");
	/* With only --pid targets that are all gone already, report at once. */
	if (d->cfg.npids)
		on_target_exit(d, NULL);
	event_base_dispatch(d->base);
	sd_notify(0, "STOPPING=1\nSTATUS=Stopping");

	/* Totals that could not be saved are lost: the exit status says so. */
	r = serve ? lp_persist_save(d, true) : 0;
	if (d->cfg.once) {
		/* Exit records still in flight, then what the hooks left behind, before the
		 * report counts the maps. */
		lp_daemon_consume(d);
		lp_tracker_find_missed_exits(&d->tracker);
		r = lp_backend_print_report(d);
	}
	loop_free(d, &l);
	return r;
}

int main(int argc, char **argv)
{
	struct daemon d = {.argc = argc, .argv = argv};
	int r, ret;

	lp_log_init("llmprofd");
	lp_log_fatal_signals();
	/* A client that closes its end before the answer is written must end that answer, not
	 * the daemon: writes to it fail with EPIPE instead. systemd's IgnoreSIGPIPE= default
	 * hides this under the unit, nothing does in a container, a terminal or the Quick
	 * start's background daemon. */
	signal(SIGPIPE, SIG_IGN);
	r = lp_options_load(&d.cfg, &d.store, argc, argv);
	if (r != 0) {
		ret = r > 0 ? 0 : 2;
		goto out;
	}
	if (d.cfg.verbose)
		lp_log_set_level(LOG_DEBUG);
	libbpf_debug = d.cfg.verbose;
	libbpf_set_print(libbpf_log);

	ret = run(&d) < 0 ? 1 : 0;
	if (ret && d.cfg.check)
		log_error("check: failed; see the messages above");

	if (d.base)
		event_base_free(d.base);
	ring_buffer__free(d.rb);
	/* Targets hold probe links: free them before the BPF object. */
	lp_tracker_free(&d.tracker);
	lp_recorder_free(&d.recorder);
	lp_profiler_free(&d.profiler);
	lp_engines_free(&d.eng);
	lp_diagnose_free(&d.diagnose);
	lp_core_destroy(&d.core);
out:
	lp_config_store_free(&d.store);
	free(d.web_config);
	return ret;
}
