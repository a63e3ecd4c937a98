// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* /proc parsing for process identity: comm, state, start time, fault counters, exe. */
#include "base/procfs.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#define PID_MAX_LIMIT (4 * 1024 * 1024)

int lp_proc_parse_stat(const char *buf, struct lp_proc_stat *out)
{
	const char *open = strchr(buf, '('), *close = strrchr(buf, ')'), *p;
	unsigned long long v[20];
	size_t n;
	char *end;

	if (!open || !close || close < open)
		return -EINVAL;
	n = (size_t)(close - open - 1);
	if (n >= sizeof(out->comm))
		n = sizeof(out->comm) - 1;
	memcpy(out->comm, open + 1, n);
	out->comm[n] = '\0';

	/* After ") ": field 3 is the state, then numbers; starttime is field 22. */
	p = close + 1;
	while (*p == ' ')
		p++;
	if (!*p)
		return -EINVAL;
	out->state = *p++;
	for (int i = 0; i < 19; i++) {
		errno = 0;
		v[i] = strtoull(p, &end, 10);
		if (end == p || errno)
			return -EINVAL;
		p = end;
	}
	/* v[0] is field 4 (ppid): minflt is field 10, majflt 12, starttime 22. */
	out->flags = (unsigned)v[5];
	out->minflt = v[6];
	out->majflt = v[8];
	out->utime = v[10];
	out->stime = v[11];
	out->starttime = v[18];
	return 0;
}

int lp_read_small(const char *path, char *buf, size_t size)
{
	ssize_t n = 0, got = 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC);

	if (fd < 0)
		return -errno;
	/* /proc and /sys files may come in more than one read. */
	while ((size_t)got < size - 1 && (n = read(fd, buf + got, size - 1 - (size_t)got)) > 0)
		got += n;
	if (n < 0 && got == 0) {
		int r = -errno;

		close(fd);
		return r;
	}
	close(fd);
	buf[got] = '\0';
	return (int)got;
}

int lp_proc_in_cgroup(pid_t pid, const char *scope)
{
	char path[64], buf[4096], *line, *save = NULL;
	size_t n = strlen(scope);
	int r;

	snprintf(path, sizeof(path), "/proc/%d/cgroup", (int)pid);
	r = lp_read_small(path, buf, sizeof(buf));
	if (r < 0)
		return r == -ENOENT ? -ESRCH : r;
	for (line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		if (strncmp(line, "0::", 3) != 0)
			continue;
		line += 3;
		/* "/" holds everything; else the path itself or one below it. */
		return n == 1 ||
		       (strncmp(line, scope, n) == 0 && (line[n] == '\0' || line[n] == '/'));
	}
	return -ENOENT;
}

int lp_cgroup2_mount(char *buf, size_t size)
{
	FILE *f = fopen("/proc/self/mounts", "re");
	char dev[64], dir[4096], type[64];
	int r = -ENOENT;

	if (!f)
		return -errno;
	while (fscanf(f, "%63s %4095s %63s %*[^\n]", dev, dir, type) == 3)
		if (strcmp(type, "cgroup2") == 0 && strlen(dir) < size) {
			strcpy(buf, dir);
			r = 0;
			break;
		}
	fclose(f);
	return r;
}

static int read_stat_path(const char *path, struct lp_proc_stat *out)
{
	char buf[1024];
	int r = lp_read_small(path, buf, sizeof(buf));

	if (r < 0)
		return r == -ENOENT || r == -ESRCH ? -ESRCH : r;
	return lp_proc_parse_stat(buf, out);
}

int lp_proc_read_stat(pid_t pid, struct lp_proc_stat *out)
{
	char path[64];
	int r;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	r = read_stat_path(path, out);
	if (r < 0)
		return r;
	if (out->state == 'Z' || out->state == 'X')
		return -ESRCH;
	return 0;
}

/* Nonzero when thread tid, not the leader *ctx, has not begun to exit. */
static int other_thread_live(void *ctx, pid_t tid)
{
	pid_t pid = *(pid_t *)ctx;
	struct lp_proc_stat st;
	char path[96];

	if (tid == pid)
		return 0;
	snprintf(path, sizeof(path), "/proc/%d/task/%d/stat", (int)pid, (int)tid);
	return read_stat_path(path, &st) == 0 && lp_proc_stat_live(&st);
}

int lp_proc_alive(pid_t pid, uint64_t starttime)
{
	struct lp_proc_stat st;
	char path[64];

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	if (read_stat_path(path, &st) < 0 || st.starttime != starttime)
		return 0;
	if (lp_proc_stat_live(&st))
		return 1;
	return lp_proc_each_task("/proc", pid, other_thread_live, &pid) > 0;
}

int lp_proc_read_comm(pid_t pid, pid_t tid, char *buf, size_t size)
{
	char path[64];
	int r;

	if (tid)
		snprintf(path, sizeof(path), "/proc/%d/task/%d/comm", (int)pid, (int)tid);
	else
		snprintf(path, sizeof(path), "/proc/%d/comm", (int)pid);
	r = lp_read_small(path, buf, size);
	if (r < 0)
		return r == -ENOENT ? -ESRCH : r;
	buf[strcspn(buf, "\n")] = '\0';
	return 0;
}

int lp_proc_read_exe(pid_t pid, char *buf, size_t size)
{
	char path[64];
	ssize_t n;

	snprintf(path, sizeof(path), "/proc/%d/exe", (int)pid);
	n = readlink(path, buf, size - 1);
	if (n < 0)
		return errno == ENOENT ? -ESRCH : -errno;
	buf[n] = '\0';
	return 0;
}

int lp_proc_parse_uid(const char *status, uid_t *out)
{
	const char *p = strstr(status, "\nUid:");
	unsigned long long v[2];
	char *end;

	if (!p)
		return -EINVAL;
	p += 5;
	/* Real, effective, saved, filesystem: the effective one owns /proc/PID, as ps shows. */
	for (int i = 0; i < 2; i++) {
		errno = 0;
		v[i] = strtoull(p, &end, 10);
		if (end == p || errno || v[i] > UINT32_MAX)
			return -EINVAL;
		p = end;
	}
	*out = (uid_t)v[1];
	return 0;
}

int lp_proc_read_uid(pid_t pid, uid_t *out)
{
	char path[64], buf[4096];
	int r;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
	r = lp_read_small(path, buf, sizeof(buf));
	if (r < 0)
		return r == -ENOENT ? -ESRCH : r;
	return lp_proc_parse_uid(buf, out);
}

int lp_parse_pid(const char *s, pid_t *out)
{
	unsigned long v;
	char *end;

	if (!s || *s < '0' || *s > '9')
		return -EINVAL;
	errno = 0;
	v = strtoul(s, &end, 10);
	if (errno || *end || v < 1 || v > PID_MAX_LIMIT)
		return -EINVAL;
	*out = (pid_t)v;
	return 0;
}

int lp_proc_each_task(const char *proc, pid_t pid, int (*fn)(void *ctx, pid_t tid), void *ctx)
{
	char path[PATH_MAX];
	struct dirent *e;
	int r = 0;
	DIR *d;

	snprintf(path, sizeof(path), "%s/%d/task", proc, (int)pid);
	if (!(d = opendir(path)))
		return errno == ENOENT ? -ESRCH : -errno;
	while (r == 0 && (e = readdir(d))) {
		pid_t tid;

		if (lp_parse_pid(e->d_name, &tid) == 0)
			r = fn(ctx, tid);
	}
	closedir(d);
	return r;
}

void lp_proc_maps_path(char *path)
{
	char *w = path;

	for (const char *r = path; *r && *r != '\n'; r++) {
		if (r[0] == '\\' && r[1] == '0' && r[2] == '1' && r[3] == '2') {
			*w++ = '\n';
			r += 3;
		} else {
			*w++ = *r;
		}
	}
	*w = '\0';
}

int lp_proc_parse_maps_line(const char *line, struct lp_proc_mapping *m)
{
	unsigned int maj, min;
	char perms[5];
	int pos = 0;

	if (sscanf(line, "%" SCNx64 "-%" SCNx64 " %4s %" SCNx64 " %x:%x %" SCNu64 " %n", &m->start,
		   &m->end, perms, &m->pgoff, &maj, &min, &m->ino, &pos) < 7 ||
	    pos == 0)
		return -EINVAL;
	if (perms[2] != 'x' || m->ino == 0 || line[pos] != '/')
		return -ENOENT;
	snprintf(m->path, sizeof(m->path), "%s", line + pos);
	lp_proc_maps_path(m->path);
	m->dev = ((uint64_t)maj << 20) | min;
	return 0;
}

int lp_self_stats_read(struct lp_self_stats *out)
{
	long page = sysconf(_SC_PAGESIZE);
	unsigned long long vsz, rss;
	struct lp_proc_stat st;
	struct rlimit rl;
	struct dirent *e;
	char buf[128];
	DIR *d;
	int r;

	memset(out, 0, sizeof(*out));
	if ((r = lp_proc_read_stat(getpid(), &st)) < 0)
		return r;
	out->cpu_seconds = (double)(st.utime + st.stime) / (double)sysconf(_SC_CLK_TCK);
	if (lp_read_small("/proc/self/statm", buf, sizeof(buf)) >= 0 &&
	    sscanf(buf, "%llu %llu", &vsz, &rss) == 2) {
		out->virtual_bytes = vsz * (uint64_t)page;
		out->resident_bytes = rss * (uint64_t)page;
	}
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0)
		out->max_fds = rl.rlim_cur;
	d = opendir("/proc/self/fd");
	if (!d)
		return -errno;
	while ((e = readdir(d)))
		out->open_fds += e->d_name[0] != '.';
	/* The directory's own descriptor was one of them. */
	if (out->open_fds)
		out->open_fds--;
	closedir(d);
	return 0;
}

int lp_proc_open_mapping(pid_t pid, const struct lp_proc_mapping *m, char *how, size_t howlen)
{
	int fd;

	snprintf(how, howlen, "/proc/%d/map_files/%" PRIx64 "-%" PRIx64, (int)pid, m->start,
		 m->end);
	fd = open(how, O_RDONLY | O_CLOEXEC);
	if (fd >= 0)
		return fd;
	snprintf(how, howlen, "/proc/%d/root%s", (int)pid, m->path);
	fd = open(how, O_RDONLY | O_CLOEXEC);
	return fd < 0 ? -errno : fd;
}

int lp_proc_reopen_mapping(pid_t pid, const struct lp_proc_mapping *m, uint64_t known,
			   uint64_t *mtime, char *how, size_t howlen)
{
	struct stat st;
	int fd = lp_proc_open_mapping(pid, m, how, howlen);

	if (fd < 0)
		return fd;
	if (fstat(fd, &st) < 0) {
		int r = -errno;

		close(fd);
		return r;
	}
	*mtime = (uint64_t)st.st_mtim.tv_sec * 1000000000ULL + (uint64_t)st.st_mtim.tv_nsec;
	if (known && known == *mtime) {
		close(fd);
		return -EEXIST;
	}
	return fd;
}

int lp_proc_pidns(const char *proc_root, uint32_t *ino)
{
	char path[128];
	struct stat st;

	/* The namespace of pid 1 as this /proc numbers it: the pids the daemon reads. */
	snprintf(path, sizeof(path), "%s/1/ns/pid", proc_root);
	if (stat(path, &st) < 0) {
		snprintf(path, sizeof(path), "%s/self/ns/pid", proc_root);
		if (stat(path, &st) < 0)
			return -errno;
	}
	*ino = st.st_ino == LP_PIDNS_INIT_INO ? 0 : (uint32_t)st.st_ino;
	return 0;
}
