// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* Loads bpf/floor.bpf.c's empty scheduler programs (tp_btf, or raw_tp with --raw), or its
 * empty futex syscall and mmap lock programs (--syscalls), or both (--all: every
 * tracepoint llmprofd attaches on those paths while it tracks a process), says "attached",
 * and holds them until SIGINT or SIGTERM: the floor rows of bench/sched.py and
 * bench/syscalls.py. */
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <bpf/libbpf.h>

#include "floor.skel.h"

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
	(void)sig;
	stop = 1;
}

int main(int argc, char **argv)
{
	bool raw = argc > 1 && strcmp(argv[1], "--raw") == 0;
	bool all = argc > 1 && strcmp(argv[1], "--all") == 0;
	bool sys = all || (argc > 1 && strcmp(argv[1], "--syscalls") == 0);
	struct floor_bpf *s = floor_bpf__open();
	struct bpf_program *btf[] = {s ? s->progs.floor_switch_btf : NULL,
				     s ? s->progs.floor_wakeup_btf : NULL,
				     s ? s->progs.floor_wakeup_new_btf : NULL},
			   *rawp[] = {s ? s->progs.floor_switch_raw : NULL,
				      s ? s->progs.floor_wakeup_raw : NULL,
				      s ? s->progs.floor_wakeup_new_raw : NULL};

	if (!s)
		return 1;
	for (int i = 0; i < 3; i++) {
		bpf_program__set_autoload(btf[i], all || (!raw && !sys));
		bpf_program__set_autoload(rawp[i], raw);
	}
	bpf_program__set_autoload(s->progs.floor_futex_enter, sys);
	bpf_program__set_autoload(s->progs.floor_futex_exit, sys);
	bpf_program__set_autoload(s->progs.floor_mmap_lock, sys);
	if (floor_bpf__load(s) || floor_bpf__attach(s)) {
		fprintf(stderr, "floor: cannot load or attach the %s programs\n",
			all   ? "tp_btf and syscalls"
			: sys ? "syscalls"
			: raw ? "raw_tp"
			      : "tp_btf");
		floor_bpf__destroy(s);
		return 1;
	}
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
	printf("attached %s\n", all   ? "tp_btf and syscalls"
				: sys ? "syscalls"
				: raw ? "raw_tp"
				      : "tp_btf");
	fflush(stdout);
	while (!stop)
		pause();
	floor_bpf__destroy(s);
	return 0;
}
