// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* Unit tests of /proc parsing: comm with spaces and parentheses, fields, pid syntax. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "base/procfs.h"

static void test_stat(void)
{
	struct lp_proc_stat st;
	const char *line = "4242 (a) b (c)) S 1 4242 4242 0 -1 4194560 1234 0 56 0 10 20 0 0 20 0 "
			   "3 0 987654 12345678 100 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 "
			   "0 17 1 0 0 0 0 0\n";

	CHECK(lp_proc_parse_stat(line, &st) == 0, "parse");
	CHECK(strcmp(st.comm, "a) b (c)") == 0, "comm '%s'", st.comm);
	CHECK(st.state == 'S', "state %c", st.state);
	CHECK(st.minflt == 1234, "minflt %llu", (unsigned long long)st.minflt);
	CHECK(st.majflt == 56, "majflt %llu", (unsigned long long)st.majflt);
	CHECK(st.utime == 10 && st.stime == 20, "utime %llu, stime %llu ticks",
	      (unsigned long long)st.utime, (unsigned long long)st.stime);
	CHECK(st.starttime == 987654, "starttime %llu", (unsigned long long)st.starttime);
	CHECK(lp_proc_parse_stat("12 (x) R 1 2", &st) == -EINVAL, "truncated");
	CHECK(lp_proc_parse_stat("garbage", &st) == -EINVAL, "no parentheses");
	CHECK(lp_proc_parse_stat("1 (x)", &st) == -EINVAL, "nothing after comm");
}

static void test_self(void)
{
	struct lp_proc_stat st;
	char comm[16];

	CHECK(lp_proc_read_stat(getpid(), &st) == 0, "read own stat");
	CHECK(st.state == 'R', "running");
	CHECK(lp_proc_read_comm(getpid(), 0, comm, sizeof(comm)) == 0, "read comm");
	CHECK(strcmp(comm, st.comm) == 0, "comm agrees: %s vs %s", comm, st.comm);
	CHECK(lp_proc_read_stat(4194304 + 1, &st) < 0, "pid above PID_MAX_LIMIT");
}

static void test_pid(void)
{
	pid_t p;

	CHECK(lp_parse_pid("1", &p) == 0 && p == 1, "1");
	CHECK(lp_parse_pid("4194304", &p) == 0, "max");
	CHECK(lp_parse_pid("4194305", &p) == -EINVAL, "over max");
	CHECK(lp_parse_pid("0", &p) == -EINVAL, "zero");
	CHECK(lp_parse_pid("-5", &p) == -EINVAL, "negative");
	CHECK(lp_parse_pid("12abc", &p) == -EINVAL, "trailing garbage");
	CHECK(lp_parse_pid("", &p) == -EINVAL, "empty");
	CHECK(lp_parse_pid(" 7", &p) == -EINVAL, "leading space");
	CHECK(lp_parse_pid("99999999999999999999", &p) == -EINVAL, "overflow");
}

static void test_uid(void)
{
	uid_t u = 0;

	CHECK(lp_proc_parse_uid("Name:\tx\nUid:\t1000\t1001\t1000\t1000\nGid:\t5\n", &u) == 0 &&
		      u == 1001,
	      "effective uid: %u", (unsigned)u);
	CHECK(lp_proc_parse_uid("Name:\tx\nGid:\t5\n", &u) == -EINVAL, "no Uid line");
	CHECK(lp_proc_parse_uid("Name:\tx\nUid:\t1000\n", &u) == -EINVAL, "one field only");
	CHECK(lp_proc_read_uid(getpid(), &u) == 0 && u == geteuid(), "own uid");
}

static void test_maps(void)
{
	struct lp_proc_mapping m;

	CHECK(lp_proc_parse_maps_line("7f3a1c000000-7f3a1c400000 r-xp 00082000 fd:01 1234567 "
				      "/usr/lib/x86_64-linux-gnu/libggml-cpu.so\n",
				      &m) == 0 &&
		      m.start == 0x7f3a1c000000 && m.end == 0x7f3a1c400000 && m.pgoff == 0x82000 &&
		      m.dev == ((0xfdULL << 20) | 1) && m.ino == 1234567 &&
		      !strcmp(m.path, "/usr/lib/x86_64-linux-gnu/libggml-cpu.so"),
	      "an executable file mapping: %s", m.path);
	CHECK(lp_proc_parse_maps_line("55d0-55e0 r-xp 00000000 08:02 42 /opt/my app (deleted)\n",
				      &m) == 0 &&
		      !strcmp(m.path, "/opt/my app (deleted)"),
	      "a path with spaces is kept whole: %s", m.path);
	CHECK(lp_proc_parse_maps_line("55d0-55e0 r--p 00000000 08:02 42 /usr/bin/x\n", &m) ==
		      -ENOENT,
	      "not executable");
	CHECK(lp_proc_parse_maps_line("7ffd-7ffe r-xp 00000000 00:00 0 [vdso]\n", &m) == -ENOENT,
	      "not a file");
	CHECK(lp_proc_parse_maps_line("garbage\n", &m) == -EINVAL, "a line that does not parse");
	CHECK(lp_proc_parse_maps_line("55d0-55e0 r-xp 00000000 08:02 42 /tmp/a\\012b\\012\n", &m) ==
			      0 &&
		      !strcmp(m.path, "/tmp/a\nb\n"),
	      "a newline in a name, as the kernel writes it (\\012), is a newline again");
}

/* The rule lp_proc_maps_path undoes, as this kernel writes it: a file whose name holds a
 * newline, mapped, and its line of /proc/self/maps read back. */
static void test_maps_kernel(void)
{
	char dir[] = "/tmp/lp-procfs-XXXXXX", name[64], line[512], found[512] = "";
	void *p = MAP_FAILED;
	FILE *f;
	int fd;

	if (!mkdtemp(dir)) {
		CHECK(0, "mkdtemp: %s", strerror(errno));
		return;
	}
	snprintf(name, sizeof(name), "%s/a\nb", dir);
	fd = open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
	if (fd >= 0 && write(fd, "x", 1) == 1)
		p = mmap(NULL, 4096, PROT_READ, MAP_PRIVATE, fd, 0);
	f = fopen("/proc/self/maps", "re");
	while (f && p != MAP_FAILED && fgets(line, sizeof(line), f)) {
		char *at = strstr(line, dir);

		if (at) {
			lp_proc_maps_path(at);
			snprintf(found, sizeof(found), "%s", at);
		}
	}
	if (f)
		fclose(f);
	CHECK(!strcmp(found, name), "/proc/self/maps names the file with a newline: %s", found);
	if (p != MAP_FAILED)
		munmap(p, 4096);
	if (fd >= 0)
		close(fd);
	unlink(name);
	rmdir(dir);
}

struct tids {
	pid_t v[8];
	int n, stop_at; /* returns 7 at the stop_at'th thread; 0: never */
};

static int note_tid(void *ctx, pid_t tid)
{
	struct tids *x = ctx;

	if (x->n < 8)
		x->v[x->n] = tid;
	return ++x->n == x->stop_at ? 7 : 0;
}

/* The task directory of a /proc laid out by the test: only entries that are pids count. */
static void test_each_task(void)
{
	char root[] = "/tmp/lp-procfs-XXXXXX", path[128];
	const char *entries[] = {"12", "30", "abc", "0", "4x"};
	struct tids x = {.n = 0};

	CHECK(mkdtemp(root) != NULL, "temp dir");
	snprintf(path, sizeof(path), "%s/12", root);
	mkdir(path, 0700);
	snprintf(path, sizeof(path), "%s/12/task", root);
	mkdir(path, 0700);
	for (size_t i = 0; i < sizeof(entries) / sizeof(entries[0]); i++) {
		snprintf(path, sizeof(path), "%s/12/task/%s", root, entries[i]);
		mkdir(path, 0700);
	}
	CHECK(lp_proc_each_task(root, 12, note_tid, &x) == 0 && x.n == 2 && x.v[0] + x.v[1] == 42 &&
		      (x.v[0] == 12 || x.v[0] == 30),
	      "two threads, 12 and 30: %d (%d, %d)", x.n, (int)x.v[0], (int)x.v[1]);
	x = (struct tids){.stop_at = 1};
	CHECK(lp_proc_each_task(root, 12, note_tid, &x) == 7 && x.n == 1,
	      "stops where fn returns nonzero: %d", x.n);
	CHECK(lp_proc_each_task(root, 13, note_tid, &x) == -ESRCH, "a process not there: -ESRCH");
	x = (struct tids){.n = 0};
	CHECK(lp_proc_each_task("/proc", getpid(), note_tid, &x) == 0 && x.n == 1 &&
		      x.v[0] == getpid(),
	      "this process, one thread: %d", x.n);
	for (size_t i = 0; i < sizeof(entries) / sizeof(entries[0]); i++) {
		snprintf(path, sizeof(path), "%s/12/task/%s", root, entries[i]);
		rmdir(path);
	}
	snprintf(path, sizeof(path), "%s/12/task", root);
	rmdir(path);
	snprintf(path, sizeof(path), "%s/12", root);
	rmdir(path);
	rmdir(root);
}

int main(void)
{
	test_each_task();
	test_maps();
	test_maps_kernel();
	test_uid();
	test_stat();
	test_self();
	test_pid();
	return check_done();
}
