// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* The totals kept across restarts (persist.h). */
#include "persist.h"

#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/log.h"
#include "report/state.h"

/* The totals go to the state directory, to be read back at the next start: at SIGTERM,
 * and every --checkpoint-interval so that a crash loses at most that much. */
int lp_persist_save(struct daemon *d, bool at_exit)
{
	struct lp_report r;
	cJSON *doc;
	int ret;

	if (!*d->cfg.state_dir)
		return 0;
	/* Totals only: the findings are not kept. */
	ret = lp_daemon_report(d, 0, &r, false);
	doc = ret == 0 ? lp_state_render(&r, d->boot_id, lp_realtime_now()) : NULL;
	lp_report_free(&r);
	ret = doc ? lp_state_write(d->cfg.state_dir, doc) : ret < 0 ? ret : -ENOMEM;
	d->saves++;
	d->saves_failed += ret < 0;
	d->save_error = ret < 0 ? ret : 0;
	if (ret < 0)
		log_error_errno(ret, "save the totals to %s/%s: %m; %s", d->cfg.state_dir,
				LP_STATE_FILE,
				at_exit ? "those since the last checkpoint are lost"
					: "trying again at the next checkpoint");
	else if (at_exit)
		log_info("saved the totals of %d process(es) to %s/%s",
			 cJSON_GetArraySize(cJSON_GetObjectItem(doc, "processes")),
			 d->cfg.state_dir, LP_STATE_FILE);
	else
		log_debug("checkpoint: %d process(es) saved",
			  cJSON_GetArraySize(cJSON_GetObjectItem(doc, "processes")));
	cJSON_Delete(doc);
	return ret;
}

void lp_persist_on_checkpoint(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	lp_persist_save(arg, false);
}

/* (Re)arms the checkpoint timer with the configured interval; 0 stops it. */
void lp_persist_arm(struct daemon *d)
{
	double s = d->cfg.checkpoint;
	struct timeval tv = {.tv_sec = (time_t)s,
			     .tv_usec = (suseconds_t)((s - (double)(time_t)s) * 1e6)};

	if (!d->ev_checkpoint)
		return;
	event_del(d->ev_checkpoint);
	if (s > 0 && *d->cfg.state_dir)
		event_add(d->ev_checkpoint, &tv);
}

/* At start, so that a state directory that cannot take the totals is found now and not at
 * the first save: it must be (or become) a directory we can write. */
int lp_persist_check_dir(const char *dir)
{
	struct stat st;

	if (mkdir(dir, 0700) < 0 && errno != EEXIST)
		return log_error_errno(-errno,
				       "state directory '%s': %m; create it, or run with "
				       "--state-directory off to keep no totals across restarts",
				       dir);
	if (stat(dir, &st) < 0 || !S_ISDIR(st.st_mode))
		return log_error_errno(-ENOTDIR, "state directory '%s': %m", dir);
	/* Whoever else can write there can plant names in it for root to write through. */
	if (st.st_uid != geteuid() || (st.st_mode & (S_IWGRP | S_IWOTH)))
		return log_error_errno(
			-EPERM,
			"state directory '%s' is writable by others than llmprofd's "
			"user (owner uid %u, mode %04o), who could make it overwrite "
			"files; chown it to uid %u and chmod go-w it, or name another",
			dir, (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777),
			(unsigned)geteuid());
	if (access(dir, W_OK | X_OK) < 0)
		return log_error_errno(-errno,
				       "state directory '%s': %m; the totals could not "
				       "be saved",
				       dir);
	return 0;
}
