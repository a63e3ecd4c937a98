// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* A tight loop over a function named like ggml's barrier, to measure what one probe hit
 * costs: prints its pid as JSON, waits for a line on stdin (tracers attach meanwhile),
 * calls ggml_barrier N times, and prints the wall time per call. Also holds a
 * ggml_compute_forward_mul_mat, so that llmprofd finds it as a ggml process.
 *
 * Built with CET like llama.cpp's releases, its ggml_barrier starts as theirs does:
 * endbr64, a load and compare of the thread count, and a jcc to return early. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static volatile unsigned long sink;

/* ggml_threadpool's n_threads_cur is at 0x68, as in node-llama-cpp's build. */
struct threadpool {
	char pad[0x68];
	int n_threads;
};

__attribute__((noinline, used)) void ggml_compute_forward_mul_mat(void)
{
	sink++;
}

__attribute__((noinline, used)) void ggml_barrier(struct threadpool *tp)
{
	if (tp->n_threads == 1)
		return;
	sink++;
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 1000000;
	struct threadpool tp = {.n_threads = 2};
	struct timespec a, b;
	char line[16];

	printf("{\"pid\": %d}\n", (int)getpid());
	fflush(stdout);
	if (!fgets(line, sizeof(line), stdin))
		return 1;
	ggml_compute_forward_mul_mat();
	clock_gettime(CLOCK_MONOTONIC, &a);
	for (long i = 0; i < n; i++)
		ggml_barrier(&tp);
	clock_gettime(CLOCK_MONOTONIC, &b);
	printf("{\"calls\": %ld, \"ns_per_call\": %.2f}\n", n,
	       ((double)(b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec)) / (double)n);
	return 0;
}
