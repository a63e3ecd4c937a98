// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* Unit tests of ELF symbol lookup on the fixture libraries: exported and local functions,
 * globs, the file offsets uprobes use (checked against where the loader really mapped
 * the code), a stripped copy, a renamed function and a file that is not ELF; the TLS
 * block's slot of GCC's OpenMP runtime, followed in a real region. */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "formats/elfsym.h"

static const char *const matmul[] = {"ggml_compute_forward_mul_mat", "iqk_mul_mat", NULL};
static const char *const barrier[] = {"ggml_barrier", "GOMP_barrier", NULL};
static const char *const decode[] = {"llama_*", NULL};
static const char *const *const lists[] = {matmul, barrier, decode};
static const struct lp_elf_patterns pat = {.lists = lists, .nclasses = 3};

static const struct lp_elf_sym *find(const struct lp_elf_result *r, const char *name)
{
	for (size_t i = 0; i < r->nsyms; i++)
		if (strcmp(r->syms[i].name, name) == 0)
			return &r->syms[i];
	return NULL;
}

static int read_file(const char *path, struct lp_elf_result *r)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC), ret;

	if (fd < 0)
		return -errno;
	ret = lp_elf_find(fd, &pat, r);
	close(fd);
	return ret;
}

/* Where the loader put the file offset off of path: the runtime address a uprobe at that
 * offset would fire on, from /proc/self/maps. exec: by the executable mapping's base
 * (start - pgoff), wherever off is (a GOT slot as an offset of that segment's). */
static uintptr_t runtime_addr(const char *path, uint64_t off, bool exec)
{
	char line[4096], real[4096];
	FILE *f = fopen("/proc/self/maps", "re");
	uintptr_t r = 0;

	if (!f || !realpath(path, real))
		return 0;
	while (fgets(line, sizeof(line), f)) {
		unsigned long start, end, pgoff;
		char perms[8];
		int pos = 0;

		if (sscanf(line, "%lx-%lx %7s %lx %*s %*s %n", &start, &end, perms, &pgoff, &pos) <
			    4 ||
		    !pos)
			continue;
		line[strcspn(line, "\n")] = '\0';
		if (strcmp(line + pos, real))
			continue;
		if (exec ? perms[2] == 'x' : off >= pgoff && off < pgoff + (end - start))
			r = start - pgoff + off;
	}
	fclose(f);
	return r;
}

static void test_library(const char *path)
{
	struct lp_elf_result r;
	const struct lp_elf_sym *mm, *bar, *dec;
	void *h;

	CHECK(read_file(path, &r) == 0, "read %s", path);
	CHECK(r.has_symtab, "has .symtab");
	mm = find(&r, "ggml_compute_forward_mul_mat");
	bar = find(&r, "ggml_barrier");
	dec = find(&r, "llama_decode");
	CHECK(mm && mm->cls == 0 && mm->size > 0, "matmul found");
	CHECK(bar && bar->cls == 1, "static ggml_barrier found through .symtab");
	CHECK(dec && dec->cls == 2, "llama_decode matched by the glob llama_*");
	CHECK(!find(&r, "iqk_mul_mat") && !find(&r, "lpggml_run"), "nothing else");
	CHECK(r.nsyms == 3, "%zu symbols", r.nsyms);

	/* The offsets name the code the loader mapped: compare with dlsym. */
	h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	CHECK(h != NULL, "dlopen %s", path);
	if (h && mm && dec) {
		uintptr_t a = runtime_addr(path, mm->file_off, false),
			  b = runtime_addr(path, dec->file_off, false);

		CHECK(a == (uintptr_t)dlsym(h, "ggml_compute_forward_mul_mat"),
		      "matmul offset 0x%" PRIx64 " maps to its code", mm->file_off);
		CHECK(b == (uintptr_t)dlsym(h, "llama_decode"),
		      "llama_decode offset 0x%" PRIx64 " maps to its code", dec->file_off);
	}
	if (h)
		dlclose(h);
	lp_elf_result_free(&r);
}

static void test_stripped(const char *path)
{
	struct lp_elf_result r;

	CHECK(read_file(path, &r) == 0, "read %s", path);
	CHECK(!r.has_symtab, "no .symtab");
	CHECK(find(&r, "ggml_compute_forward_mul_mat") && find(&r, "llama_decode"),
	      "exported functions still found through .dynsym");
	CHECK(!find(&r, "ggml_barrier"), "the static one is gone");
	lp_elf_result_free(&r);
}

static void test_renamed(const char *path)
{
	struct lp_elf_result r;

	CHECK(read_file(path, &r) == 0, "read %s", path);
	CHECK(!find(&r, "ggml_barrier") && find(&r, "ggml_compute_forward_mul_mat"),
	      "renamed barrier not found, matmul found");
	lp_elf_result_free(&r);
}

static void test_not_elf(void)
{
	char path[] = "/tmp/lp-elfsym-XXXXXX";
	struct lp_elf_result r;
	int fd = mkstemp(path);

	CHECK(fd >= 0, "temp file");
	CHECK(write(fd, "#!/bin/sh\nexit 0\n", 17) == 17, "write");
	CHECK(lp_elf_find(fd, &pat, &r) == -ENOEXEC, "a script is not ELF");
	CHECK(r.nsyms == 0 && r.syms == NULL, "and yields nothing");
	close(fd);
	unlink(path);
}

static int (*omp_thread_num)(void);
static int64_t gomp_tpoff;
static int workers_seen, workers_right, workers_null;

/* A region's work on each thread of its team: a worker's own thread data (libgomp's
 * struct gomp_thread at the start of its TLS block: fn, then data) holds the region's, or
 * NULL in a thread's first region (a new thread takes it from its start data). */
static void region_work(void *data)
{
	uintptr_t tp;
	void *seen;

	if (omp_thread_num() == 0)
		return;
	__asm__ volatile("mov %%fs:0, %0" : "=r"(tp)); /* x86-64: the TCB points at itself */
	memcpy(&seen, (void *)(tp + (uintptr_t)gomp_tpoff + sizeof(void *)), sizeof(seen));
	__atomic_add_fetch(&workers_seen, 1, __ATOMIC_SEQ_CST);
	if (seen == data)
		__atomic_add_fetch(&workers_right, 1, __ATOMIC_SEQ_CST);
	if (!seen)
		__atomic_add_fetch(&workers_null, 1, __ATOMIC_SEQ_CST);
}

/* GCC's OpenMP runtime, loaded here: its TLS block's slot, read where the loader filled
 * it, leads each worker of a real region to that region's data (where.bpf.h's team
 * path). */
static void test_tls_block(void)
{
	void (*parallel)(void (*)(void *), void *, unsigned, unsigned);
	void *h = dlopen("libgomp.so.1", RTLD_NOW), *sym;
	uint64_t slot = 0;
	uintptr_t addr;
	int marker = 0, fd;
	Dl_info info;

	CHECK(h != NULL, "libgomp.so.1, GCC's OpenMP runtime, loads: %s", h ? "" : dlerror());
	if (!h)
		return;
	sym = dlsym(h, "GOMP_parallel");
	omp_thread_num = (int (*)(void))dlsym(h, "omp_get_thread_num");
	CHECK(sym && omp_thread_num && dladdr(sym, &info) && info.dli_fname, "its entry points");
	if (!sym || !omp_thread_num || !info.dli_fname)
		return;
	fd = open(info.dli_fname, O_RDONLY | O_CLOEXEC);
	CHECK(fd >= 0 && lp_elf_tls_block_slot(fd, &slot) == 0 && slot,
	      "%s: its TLS block's GOT slot found", info.dli_fname);
	addr = slot ? runtime_addr(info.dli_fname, slot, true) : 0;
	CHECK(addr != 0, "the slot by its executable mapping");
	if (fd >= 0)
		close(fd);
	if (!addr)
		return;
	memcpy(&gomp_tpoff, (void *)addr, sizeof(gomp_tpoff));
	CHECK(gomp_tpoff < 0, "the slot holds a static TLS offset: %" PRId64, gomp_tpoff);
	memcpy(&parallel, &sym, sizeof(parallel));
	parallel(region_work, &marker, 3, 0);
	CHECK(workers_seen == 2 && workers_null == 2,
	      "new workers' thread data holds no region's in their first: %d of %d NULL",
	      workers_null, workers_seen);
	workers_seen = workers_right = workers_null = 0;
	for (int i = 0; i < 20; i++)
		parallel(region_work, i % 2 ? (void *)&marker : (void *)&workers_seen, 3, 0);
	CHECK(workers_seen == 40 && workers_right == workers_seen,
	      "each worker's thread data names its region's data after: %d of %d", workers_right,
	      workers_seen);
	/* Not closed: the runtime's pool threads live on, docked in its code. */
}

static void test_match(void)
{
	CHECK(lp_elf_name_match("ggml_barrier", "ggml_barrier"), "exact");
	CHECK(!lp_elf_name_match("ggml_barrier", "ggml_barrier2"), "exact is exact");
	CHECK(lp_elf_name_match("iqk_mul_mat*", "iqk_mul_mat_4d"), "glob");
	CHECK(lp_elf_name_match(
		      "_ZN4ggml3cpu6repack*forward_mul_mat*",
		      "_ZN4ggml3cpu6repack13tensor_traitsI10block_q4_0Ll8ELl4EL9ggml_type8EE1"
		      "5forward_mul_matEP19ggml_compute_paramsP11ggml_tensor"),
	      "glob over a mangled C++ name");
}

int main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr, "usage: test_elfsym LIB STRIPPED RENAMED\n");
		return 2;
	}
	test_library(argv[1]);
	test_stripped(argv[2]);
	test_renamed(argv[3]);
	test_not_elf();
	test_tls_block();
	test_match();
	return check_done();
}
