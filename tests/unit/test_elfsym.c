// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* Unit tests of ELF symbol lookup on the fixture libraries: exported and local functions,
 * globs, the file offsets uprobes use (checked against where the loader really mapped
 * the code), a stripped copy, a renamed function and a file that is not ELF. */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
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
 * offset would fire on, from /proc/self/maps. */
static uintptr_t runtime_addr(const char *path, uint64_t off)
{
	char line[4096], real[4096];
	FILE *f = fopen("/proc/self/maps", "re");
	uintptr_t r = 0;

	if (!f || !realpath(path, real))
		return 0;
	while (fgets(line, sizeof(line), f)) {
		unsigned long start, end, pgoff;
		int pos = 0;

		if (sscanf(line, "%lx-%lx %*s %lx %*s %*s %n", &start, &end, &pgoff, &pos) < 3 ||
		    !pos)
			continue;
		line[strcspn(line, "\n")] = '\0';
		if (strcmp(line + pos, real) == 0 && off >= pgoff && off < pgoff + (end - start))
			r = start + (off - pgoff);
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
		uintptr_t a = runtime_addr(path, mm->file_off),
			  b = runtime_addr(path, dec->file_off);

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
	test_match();
	return check_done();
}
