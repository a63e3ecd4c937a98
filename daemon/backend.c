// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* The API's view of the daemon (backend.h). */
#include "backend.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "engine/precise.h"
#include "report/membw.h"
#include "report/render.h"
#include "tracked/sweep.h"

static int api_report(void *ctx, pid_t pid, struct lp_report *r)
{
	return lp_daemon_report(ctx, pid, r, true);
}

int lp_backend_print_report(struct daemon *d)
{
	struct lp_report r;
	cJSON *json;
	char *text;
	int ret;

	ret = api_report(d, 0, &r);
	if (ret < 0) {
		lp_report_free(&r);
		return log_error_errno(ret, "read maps: %m");
	}
	json = lp_render_report(&r);
	text = json ? cJSON_Print(json) : NULL;
	if (text) {
		fputs(text, stdout);
		fputc('\n', stdout);
		fflush(stdout);
	}
	free(text);
	cJSON_Delete(json);
	lp_report_free(&r);
	return text ? 0 : log_error_errno(-ENOMEM, "render report: %m");
}

static void api_bandwidth(void *ctx, bool measure, cJSON *o)
{
	struct daemon *d = ctx;

	if (measure)
		lp_membw_again(&d->diagnose.membw);
	lp_membw_render(&d->diagnose.membw, o);
}

static void api_report_free(void *ctx, struct lp_report *r)
{
	(void)ctx;
	lp_report_free(r);
}

/* CPython in the tracked processes: the versions this build reads, how many processes run
 * one (frames read, or a version it does not know), the code objects named and their
 * bound. */
static void python_status(struct daemon *d, cJSON *o)
{
	size_t read = 0, unknown = 0, named = 0, unreadable = 0;
	char known[64];

	for (size_t i = 0; i < d->tracker.n; i++) {
		const struct lp_eproc *gp = d->tracker.v[i]->eng;

		if (!gp || d->tracker.v[i]->exited)
			continue;
		read += gp->py.state == 1;
		unknown += gp->py.state < 0;
		named += gp->py.nfuncs;
		unreadable += gp->py.read_errors;
	}
	lp_py_versions(known, sizeof(known));
	cJSON_AddStringToObject(o, "versions_read", known);
	cJSON_AddBoolToObject(o, "enabled", d->cfg.python_frames);
	cJSON_AddNumberToObject(o, "processes", (double)read);
	cJSON_AddNumberToObject(o, "processes_unknown_version", (double)unknown);
	cJSON_AddNumberToObject(o, "functions_named", (double)named);
	cJSON_AddNumberToObject(o, "functions_max_per_process", LP_PY_FUNCS_MAX);
	cJSON_AddNumberToObject(o, "code_objects_unreadable", (double)unreadable);
}

/* The kernel calls on their way off the loop (prober.h): what each lane does now and for
 * how long, what waits behind it, and the longest so far. */
static void pending_status(struct daemon *d, cJSON *o)
{
	static const char *const lanes[] = {"attach", "release"};
	struct lp_prober_status st;
	uint64_t now = lp_now_ns();

	lp_prober_get_status(&d->prober, &st);
	cJSON_AddBoolToObject(o, "off_loop", st.running);
	for (int i = 0; i < 2; i++) {
		const struct lp_prober_lane_status *l = &st.lane[i];
		cJSON *x = cJSON_AddObjectToObject(o, lanes[i]);

		if (l->what[0]) {
			cJSON_AddStringToObject(x, "now", l->what);
			cJSON_AddNumberToObject(x, "for_seconds",
						(double)(now - l->since_ns) / 1e9);
		} else {
			cJSON_AddNullToObject(x, "now");
			cJSON_AddNumberToObject(x, "for_seconds", 0);
		}
		cJSON_AddNumberToObject(x, "queued", (double)l->queued);
		cJSON_AddNumberToObject(x, "oldest_queued_seconds",
					l->oldest_ns ? (double)(now - l->oldest_ns) / 1e9 : 0);
	}
	cJSON_AddNumberToObject(o, "objects_reading", (double)d->eng.reads_busy);
	cJSON_AddNumberToObject(o, "processes_waiting_futex", (double)d->eng.futex_waiters.n);
	cJSON_AddNumberToObject(o, "jobs_done", (double)st.jobs);
	cJSON_AddNumberToObject(o, "longest_seconds", (double)st.longest_ns / 1e9);
	if (st.longest_what[0])
		cJSON_AddStringToObject(o, "longest", st.longest_what);
	else
		cJSON_AddNullToObject(o, "longest");
}

static void api_status(void *ctx, cJSON *o)
{
	struct daemon *d = ctx;
	struct lp_feature_flag f[LP_FEATURE_FLAGS_MAX];
	size_t nf = lp_feature_flags(&d->features, f), decode_objs = 0, decode_links = 0;
	size_t precise_procs = 0, precise_links = 0;
	struct lp_server_stats st = {};
	struct lp_unwind_use uw;
	const char *worst;
	cJSON *x, *found, *missing;

	cJSON_AddNumberToObject(o, "pid", getpid());
	cJSON_AddNumberToObject(o, "uptime_seconds", (double)(lp_now_ns() - d->start_ns) / 1e9);
	cJSON_AddNumberToObject(o, "started_at", d->start_realtime);
	lp_membw_render(&d->diagnose.membw, cJSON_AddObjectToObject(o, "bandwidth"));
	lp_profiler_status(&d->profiler, cJSON_AddObjectToObject(o, "profiles"));
	/* Which processes it can see: the host's, or one namespace's (a container's). */
	x = cJSON_AddObjectToObject(o, "pid_namespace");
	cJSON_AddBoolToObject(x, "host", !d->core.pidns_ino);
	cJSON_AddNumberToObject(x, "inode",
				d->core.pidns_ino ? d->core.pidns_ino : LP_PIDNS_INIT_INO);
	x = cJSON_AddObjectToObject(o, "kernel_features");
	found = cJSON_AddArrayToObject(x, "found");
	missing = cJSON_AddArrayToObject(x, "missing");
	for (size_t i = 0; i < nf; i++)
		cJSON_AddItemToArray(f[i].on ? found : missing, cJSON_CreateString(f[i].name));
	for (size_t i = 0; i < d->eng.nobjs; i++) {
		decode_objs += d->eng.objs[i]->step.n > 0;
		decode_links += d->eng.objs[i]->step.n;
	}
	for (size_t i = 0; i < d->tracker.n; i++) {
		const struct lp_eproc *gp = d->tracker.v[i]->eng;

		precise_procs += gp && gp->precise_on;
		precise_links += gp ? gp->probes.n : 0;
	}
	x = cJSON_AddObjectToObject(o, "probes");
	cJSON_AddNumberToObject(x, "core_links", (double)d->core.nlinks);
	cJSON_AddNumberToObject(x, "objects_read", (double)d->eng.nobjs);
	cJSON_AddNumberToObject(x, "decode_objects", (double)decode_objs);
	cJSON_AddNumberToObject(x, "decode_links", (double)decode_links);
	cJSON_AddNumberToObject(x, "precise_processes", (double)precise_procs);
	cJSON_AddNumberToObject(x, "precise_links", (double)precise_links);
	pending_status(d, cJSON_AddObjectToObject(o, "pending"));
	cJSON_AddNumberToObject(x, "recursion_misses",
				(double)lp_core_recursion_misses(&d->core, &worst));
	if (worst)
		cJSON_AddStringToObject(x, "recursion_misses_most", worst);
	else
		cJSON_AddNullToObject(x, "recursion_misses_most");
	/* The .eh_frame rows the sampler walks frames by: the pool, and its use. */
	uw = lp_unwind_use(&d->eng.unwind);
	x = cJSON_AddObjectToObject(o, "unwind");
	cJSON_AddBoolToObject(x, "enabled", d->eng.unwind.outer_fd >= 0);
	cJSON_AddNumberToObject(x, "objects", (double)uw.objs);
	cJSON_AddNumberToObject(x, "objects_max", LP_UNWIND_OBJS);
	cJSON_AddNumberToObject(x, "rows_used", (double)uw.used);
	cJSON_AddNumberToObject(x, "bytes", (double)uw.bytes);
	python_status(d, cJSON_AddObjectToObject(o, "python"));
	if (d->server)
		lp_server_stats(d->server, &st);
	x = cJSON_AddObjectToObject(o, "server");
	cJSON_AddNumberToObject(x, "connections", (double)st.connections);
	cJSON_AddNumberToObject(x, "accepted", (double)st.accepted);
	cJSON_AddNumberToObject(x, "requests", (double)st.requests);
	cJSON_AddNumberToObject(x, "over_cap", (double)st.over_cap);
	cJSON_AddNumberToObject(x, "over_uid_cap", (double)st.over_uid_cap);
	cJSON_AddNumberToObject(x, "refused", (double)st.refused);
	cJSON_AddNumberToObject(x, "refused_in_kernel", (double)st.refused_in_kernel);
	if (d->server)
		cJSON_AddStringToObject(x, "kernel_admission",
					!st.kernel_admission   ? "on"
					: *st.kernel_admission ? st.kernel_admission
							       : "no TCP listener");
	cJSON_AddNumberToObject(x, "timed_out", (double)st.timed_out);
	cJSON_AddNumberToObject(x, "http_errors_rewritten", (double)st.rewritten);
	cJSON_AddNumberToObject(o, "reloads", (double)d->reloads);
	x = cJSON_AddObjectToObject(o, "state");
	cJSON_AddNumberToObject(x, "saves", (double)d->saves);
	cJSON_AddNumberToObject(x, "saves_failed", (double)d->saves_failed);
	if (d->save_error)
		cJSON_AddStringToObject(x, "last_error", strerror(-d->save_error));
	else
		cJSON_AddNullToObject(x, "last_error");
	cJSON_AddItemToObject(o, "config", lp_config_describe(&d->cfg));
}

static int api_reset(void *ctx, pid_t pid)
{
	struct daemon *d = ctx;
	struct lp_target *t = lp_tracker_find(&d->tracker, pid);
	int r;

	if (!t)
		return -ESRCH;
	r = lp_tracker_reset(&d->tracker, t);
	if (r == 0)
		lp_engines_reset(&d->eng, t);
	return r;
}

static int api_record_start(void *ctx, pid_t pid, double seconds, bool ops, double lease,
			    struct lp_stream **stream)
{
	struct daemon *d = ctx;
	struct timeval tv = {.tv_sec = 0, .tv_usec = 100000};
	int r = lp_record_start(&d->recorder, pid, seconds, ops, lease, stream);

	if (r == 0 && !evtimer_pending(d->ev_record, NULL))
		evtimer_add(d->ev_record, &tv);
	return r;
}

static int api_profile_start(void *ctx, const struct lp_profile_query *q, struct lp_stream **out)
{
	struct daemon *d = ctx;
	struct timeval tv = {.tv_sec = 0, .tv_usec = LP_PROFILE_DRAIN_MS * 1000};
	int r;

	/* A process that just exited is known as such before its window opens. */
	lp_daemon_consume(d);
	r = lp_profile_start(&d->profiler, q, out);
	if (r == 0 && !evtimer_pending(d->ev_profile, NULL))
		evtimer_add(d->ev_profile, &tv);
	return r;
}

static int api_record_stop(void *ctx, pid_t pid)
{
	struct daemon *d = ctx;

	/* Its last events are read first: the window closes on what the kernel has. */
	lp_daemon_consume(d);
	return lp_record_stop(&d->recorder, pid);
}

static int api_record_fetch(void *ctx, pid_t pid, struct lp_body **body, double *remaining)
{
	struct daemon *d = ctx;

	return lp_record_fetch(&d->recorder, pid, body, remaining);
}

static int api_precise(void *ctx, pid_t pid, bool on, double seconds, cJSON *o)
{
	struct daemon *d = ctx;
	struct lp_target *t = lp_tracker_find(&d->tracker, pid);
	struct lp_eproc *gp;
	cJSON *x;
	int r;

	if (!t)
		return -ESRCH;
	if (t->exited)
		return -ENODATA;
	if (!t->eng || !t->eng->found_ns)
		return -ENOEXEC;
	r = lp_precise_set(&d->eng, t, on, seconds);
	if (r < 0)
		return r;
	gp = t->eng;
	x = cJSON_AddObjectToObject(o, "precise");
	lp_render_precise_state(x, gp, lp_now_ns());
	cJSON_AddNumberToObject(x, "functions_probed", (double)gp->nprobed);
	return 0;
}

void lp_backend_init(struct daemon *d)
{
	d->api = (struct lp_api_backend){
		.ctx = d,
		.report = api_report,
		.report_free = api_report_free,
		.bandwidth = api_bandwidth,
		.status = api_status,
		.reset = api_reset,
		.precise = api_precise,
		.record_start = api_record_start,
		.record_stop = api_record_stop,
		.record_fetch = api_record_fetch,
		.profile_start = api_profile_start,
		.group = d->cfg.socket_group,
		.cfg = &d->cfg,
		.start_time = d->start_realtime,
	};
}
