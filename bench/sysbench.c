// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* The syscall loads of bench/syscalls.py, the calls llmprofd's syscall tracepoints see from
 * every process: FUTEX_WAKE on a word nobody waits on (a call that returns at once, what
 * most futex calls on a host are); two threads passing a turn through a word with FUTEX_WAIT
 * and FUTEX_WAKE (a wait that blocks and a wake that wakes); an anonymous mmap and its
 * munmap (not executable: what most mappings are). Prints the nanoseconds per call, or per
 * round trip.
 *
 *     lpsysbench wake|pingpong|mmap N */
#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static _Atomic int turn; /* 0: the main thread's, 1: the other's */
static long rounds;

static long futex(_Atomic int *word, int op, int val)
{
	return syscall(SYS_futex, word, op, val, NULL, NULL, 0);
}

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* Waits until the turn is mine, then hands it over and wakes the other. */
static void play(int me, long n)
{
	for (long i = 0; i < n; i++) {
		while (atomic_load(&turn) != me)
			futex(&turn, FUTEX_WAIT_PRIVATE, !me);
		atomic_store(&turn, !me);
		futex(&turn, FUTEX_WAKE_PRIVATE, 1);
	}
}

static void *other(void *arg)
{
	(void)arg;
	play(1, rounds);
	return NULL;
}

int main(int argc, char **argv)
{
	long n = argc > 2 ? atol(argv[2]) : 0;
	_Atomic int word = 0;
	pthread_t t;
	double t0;

	if (argc != 3 || n <= 0 ||
	    (strcmp(argv[1], "wake") && strcmp(argv[1], "pingpong") && strcmp(argv[1], "mmap"))) {
		fprintf(stderr, "usage: lpsysbench wake|pingpong|mmap N\n");
		return 2;
	}
	t0 = now();
	if (!strcmp(argv[1], "wake")) {
		for (long i = 0; i < n; i++)
			futex(&word, FUTEX_WAKE_PRIVATE, 1);
	} else if (!strcmp(argv[1], "mmap")) {
		for (long i = 0; i < n; i++) {
			void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE,
				       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

			if (p == MAP_FAILED)
				return 1;
			munmap(p, 4096);
		}
	} else {
		rounds = n;
		if (pthread_create(&t, NULL, other, NULL))
			return 1;
		play(0, n);
		pthread_join(t, NULL);
	}
	printf("%.1f ns per %s\n", (now() - t0) / (double)n,
	       !strcmp(argv[1], "pingpong") ? "round trip" : "call");
	return 0;
}
