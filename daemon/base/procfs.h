/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* Reading /proc: the few facts about a process the daemon needs, with the parsing kept
 * separate from the I/O so that it can be unit-tested. */
#ifndef LLMPROF_PROCFS_H
#define LLMPROF_PROCFS_H

#include <stdbool.h>
#include <stddef.h>
#include <limits.h>
#include <stdint.h>
#include <sys/types.h>

struct lp_proc_stat {
	char comm[16];
	char state;
	unsigned flags; /* PF_*: PF_EXITING once the thread is in do_exit() */
	uint64_t minflt;
	uint64_t majflt;
	uint64_t utime, stime; /* clock ticks in user and system mode */
	uint64_t starttime;    /* clock ticks after boot: with the pid, identifies the process */
};

/* A thread that has not begun to exit: neither a zombie nor past exit_signals(), which
 * sets PF_EXITING before the sched_process_exit tracepoint runs. */
#define LP_PF_EXITING 0x4
static inline bool lp_proc_stat_live(const struct lp_proc_stat *st)
{
	return st->state != 'Z' && st->state != 'X' && !(st->flags & LP_PF_EXITING);
}

/* Whether the process pid that started at starttime still has a thread that has not begun
 * to exit (so its exit tracepoint is still to come): 1 or 0; a leader that exited before
 * its other threads does not make it dead. */
int lp_proc_alive(pid_t pid, uint64_t starttime);

/* Parses the contents of /proc/PID/stat. comm may hold spaces and parentheses. */
int lp_proc_parse_stat(const char *buf, struct lp_proc_stat *out);

/* Reads a small file whole into buf (NUL-terminated, at most size - 1 bytes): its length,
 * or -errno. */
int lp_read_small(const char *path, char *buf, size_t size);

/* What every exporter says about itself (Prometheus' process_* metrics): this process's
 * CPU seconds, memory, file descriptors. */
struct lp_self_stats {
	double cpu_seconds; /* user + system */
	uint64_t resident_bytes, virtual_bytes;
	uint64_t open_fds, max_fds;
};

/* Reads them for this process; 0 or -errno (a field it could not read stays 0). */
int lp_self_stats_read(struct lp_self_stats *out);

/* Reads /proc/PID/stat; -ESRCH when the process is gone or a zombie. */
int lp_proc_read_stat(pid_t pid, struct lp_proc_stat *out);

/* Reads the comm of a process (tid == 0) or of one of its threads. */
int lp_proc_read_comm(pid_t pid, pid_t tid, char *buf, size_t size);

/* Reads the /proc/PID/exe link; " (deleted)" is kept, as the kernel says it. */
int lp_proc_read_exe(pid_t pid, char *buf, size_t size);

/* Whether pid's cgroup in the unified (v2) hierarchy is scope or below it (scope as
 * /proc/PID/cgroup has it: "/system.slice/llama.service"). 1, 0, or -errno: -ESRCH gone,
 * -ENOENT no unified hierarchy. */
int lp_proc_in_cgroup(pid_t pid, const char *scope);

/* Where the unified cgroup hierarchy is mounted, into buf: 0 or -ENOENT. */
int lp_cgroup2_mount(char *buf, size_t size);

/* The effective uid from the Uid: line of /proc/PID/status text. */
int lp_proc_parse_uid(const char *status, uid_t *out);
int lp_proc_read_uid(pid_t pid, uid_t *out);

/* Parses a decimal pid (1 .. PID_MAX_LIMIT) with no trailing garbage. */
int lp_parse_pid(const char *s, pid_t *out);

/* Calls fn for each thread of process pid, as the task directory under proc ("/proc", or
 * a host's /proc mounted elsewhere) lists them, until fn returns nonzero: that value, 0 after
 * the last, or -ESRCH (gone) or -errno when the directory cannot be opened. */
int lp_proc_each_task(const char *proc, pid_t pid, int (*fn)(void *ctx, pid_t tid), void *ctx);

/* An executable file mapping of /proc/PID/maps. */
struct lp_proc_mapping {
	uint64_t start, end, pgoff;
	uint64_t dev, ino; /* dev as the kernel's (major << 20) | minor */
	char path[PATH_MAX];
};

/* A path as /proc/PID/maps shows it, back to the file's name, in place: the kernel writes
 * a newline in a name as "\012" (seq_file_path, the only character it escapes there), and
 * cuts the line's own newline off. A name holding the text "\012" itself reads as a newline
 * then: whoever opens by it checks the device and inode, and map_files opens by neither. */
void lp_proc_maps_path(char *path);

/* One line of /proc/PID/maps (its path as lp_proc_maps_path gives it): 0 for an executable
 * mapping of a file, -ENOENT for any other
 * mapping (not executable, anonymous, [vdso], deleted...), -EINVAL for a line that does not
 * parse. */
int lp_proc_parse_maps_line(const char *line, struct lp_proc_mapping *m);

/* The file behind a mapping of pid, opened read-only: by /proc/PID/map_files (the mapped
 * file itself, whatever its name now), else by its path under /proc/PID/root (the
 * process's own mount namespace: a container's files). how gets the path used. An fd or
 * -errno. */
int lp_proc_open_mapping(pid_t pid, const struct lp_proc_mapping *m, char *how, size_t howlen);

/* The same, for a reader that keeps what it read of a file by its modification time
 * (st_mtim in ns; known 0: nothing kept): an fd to read it again with its mtime, or
 * -EEXIST when it is still the one known (nothing opened), or -errno. */
int lp_proc_reopen_mapping(pid_t pid, const struct lp_proc_mapping *m, uint64_t known,
			   uint64_t *mtime, char *how, size_t howlen);

/* The kernel's initial PID namespace's inode (PROC_PID_INIT_INO, fixed since Linux 3.8). */
#define LP_PIDNS_INIT_INO 0xEFFFFFFCU
/* The PID namespace the pids of proc_root's procfs are in, by inode: 0 for the kernel's
 * initial one (the host's), else the namespace's (a container's /proc). 0 or -errno. */
int lp_proc_pidns(const char *proc_root, uint32_t *ino);

#endif
