// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* Unit tests of formats/symtab.c, the names profiles give frames, against binutils on real
 * files of this machine: this test's own binary (.symtab), libc and libstdc++ (stripped:
 * .dynsym only, C++ names).
 *
 * - every function `nm -S` lists with a size is found at its middle byte, at its own
 *   address, under one of the names nm gives that address (aliases: one is chosen, as perf
 *   chooses);
 * - the build-id is `readelf -n`'s;
 * - names demangle as `c++filt -p` prints them (perf's default: no parameters), for every
 *   mangled function name of libstdc++;
 * - a file that is not ELF, and a truncated one, are refused. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "formats/symtab.h"

struct nmsym {
	uint64_t addr, size;
	char *name;
};

static int by_addr(const void *a, const void *b)
{
	const struct nmsym *x = a, *y = b;

	return x->addr < y->addr ? -1 : x->addr > y->addr;
}

/* nm's function symbols of path (dynamic ones with -D), with their sizes, sorted. */
static size_t nm_functions(const char *path, bool dynamic, struct nmsym **out)
{
	char cmd[512], line[8192];
	size_t n = 0, cap = 0;
	struct nmsym *v = NULL;
	FILE *p;

	snprintf(cmd, sizeof(cmd),
		 "nm -S --defined-only --without-symbol-versions %s '%s' 2>/dev/null",
		 dynamic ? "-D" : "", path);
	p = popen(cmd, "r");
	if (!p)
		return 0;
	while (fgets(line, sizeof(line), p)) {
		unsigned long long addr, size;
		char type, name[4096];

		/* "ADDR SIZE T NAME"; symbols without a size have three fields. */
		if (sscanf(line, "%llx %llx %c %4095s", &addr, &size, &type, name) != 4)
			continue;
		if (type != 'T' && type != 't' && type != 'W' && type != 'w' && type != 'i')
			continue;
		if (n == cap) {
			cap = cap ? 2 * cap : 1024;
			v = realloc(v, cap * sizeof(*v));
		}
		v[n++] = (struct nmsym){addr, size, strdup(name)};
	}
	pclose(p);
	qsort(v, n, sizeof(*v), by_addr);
	*out = v;
	return n;
}

static bool to_offset(const struct lp_symtab *t, uint64_t vaddr, uint64_t *off)
{
	for (size_t i = 0; i < t->nload; i++)
		if (vaddr >= t->load[i].vaddr && vaddr < t->load[i].vaddr + t->load[i].memsz) {
			*off = vaddr - t->load[i].vaddr + t->load[i].offset;
			return true;
		}
	return false;
}

static int read_symtab(const char *path, struct lp_symtab *t)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC), r;

	if (fd < 0)
		return -errno;
	r = lp_symtab_read(fd, NULL, t);
	close(fd);
	return r;
}

/* Every sized function of nm's list is found at its middle under a name of its address. */
static void check_functions(const char *path, bool dynamic)
{
	struct lp_symtab t = {0};
	struct nmsym *v = NULL;
	size_t n = nm_functions(path, dynamic, &v), checked = 0, wrong = 0;
	int r = read_symtab(path, &t);

	CHECK(r == 0 && n > 100, "%s: read %d, nm lists %zu functions", path, r, n);
	if (r != 0)
		return;
	CHECK(t.has_symtab == !dynamic, "%s: .symtab %s", path, t.has_symtab ? "yes" : "no");
	for (size_t i = 0; i < n; i++) {
		const struct lp_symtab_fn *f;
		uint64_t off;
		bool named = false;

		if (!v[i].size || !to_offset(&t, v[i].addr, &off))
			continue;
		f = lp_symtab_find(&t, off + v[i].size / 2);
		/* The names nm gives this address: the one found must be one of them. */
		for (size_t j = i; f && j < n && v[j].addr == v[i].addr; j++)
			named |= strcmp(v[j].name, lp_symtab_name(&t, f)) == 0;
		for (size_t j = i; f && j-- > 0 && v[j].addr == v[i].addr;)
			named |= strcmp(v[j].name, lp_symtab_name(&t, f)) == 0;
		checked++;
		if (!f || f->off != off || !named) {
			if (wrong++ < 5)
				fprintf(stderr,
					"%s: %s at %#" PRIx64 " (+%" PRIu64
					"): found %s at %#" PRIx64 "\n",
					path, v[i].name, v[i].addr, v[i].size / 2,
					f ? lp_symtab_name(&t, f) : "nothing", f ? f->off : 0);
		}
	}
	CHECK(checked > 100 && wrong == 0, "%s: %zu of %zu functions misnamed", path, wrong,
	      checked);
	printf("%s: %zu functions found at their middle under nm's names (%s)\n", path, checked,
	       dynamic ? ".dynsym" : ".symtab");

	/* The build-id, as readelf prints it. */
	{
		char cmd[512], line[512], want[2 * LP_BUILD_ID_MAX + 1] = "",
								     got[2 * LP_BUILD_ID_MAX + 1];
		FILE *p;

		snprintf(cmd, sizeof(cmd), "readelf -n '%s' 2>/dev/null", path);
		if ((p = popen(cmd, "r"))) {
			while (fgets(line, sizeof(line), p))
				if (sscanf(line, " Build ID: %64s", want) == 1)
					break;
			pclose(p);
		}
		lp_build_id_hex(&t, got, sizeof(got));
		CHECK(*want && strcmp(want, got) == 0, "%s: build-id %s, readelf's %s", path, got,
		      want);
	}
	for (size_t i = 0; i < n; i++)
		free(v[i].name);
	free(v);
	lp_symtab_free(&t);
}

/* Whether c++filt prints name otherwise than perf by rule: c++filt always demangles
 * verbosely (DMGL_VERBOSE), perf never does, and verbosity changes only how the standard
 * substitutions Ss, Si, So and Sd print (std::basic_string<char, std::char_traits<char>,
 * std::allocator<char> > for std::string). Names that may hold one are left out (a few
 * more than hold one: the test is by bytes). */
static bool verbose_differs(const char *name)
{
	return strstr(name, "Ss") || strstr(name, "Si") || strstr(name, "So") || strstr(name, "Sd");
}

/* Every mangled function name of path demangled as c++filt -p prints it. */
static void check_demangle(const char *path)
{
	char cmd[512], line[8192];
	size_t n = 0, wrong = 0, skipped = 0;
	struct nmsym *v = NULL;
	size_t nv = nm_functions(path, true, &v);
	char tmp[] = "/tmp/llmprof-demangle-XXXXXX";
	int fd = mkstemp(tmp);
	FILE *names = fd >= 0 ? fdopen(fd, "w") : NULL, *p;

	CHECK(names != NULL, "a scratch file: %s", strerror(errno));
	if (!names)
		return;
	for (size_t i = 0; i < nv; i++)
		if (strncmp(v[i].name, "_Z", 2) == 0 && !verbose_differs(v[i].name))
			fprintf(names, "%s\n", v[i].name);
		else if (strncmp(v[i].name, "_Z", 2) == 0)
			skipped++;
	fclose(names);
	snprintf(cmd, sizeof(cmd), "c++filt -p < %s", tmp);
	p = popen(cmd, "r");
	for (size_t i = 0; p && i < nv; i++) {
		char *ours;

		if (strncmp(v[i].name, "_Z", 2) != 0 || verbose_differs(v[i].name))
			continue;
		if (!fgets(line, sizeof(line), p))
			break;
		line[strcspn(line, "\n")] = 0;
		ours = lp_demangle(v[i].name);
		n++;
		if (!ours || strcmp(ours, line) != 0) {
			if (wrong++ < 5)
				fprintf(stderr, "%s: ours '%s', c++filt -p '%s'\n", v[i].name,
					ours ? ours : "(null)", line);
		}
		free(ours);
	}
	if (p)
		pclose(p);
	unlink(tmp);
	CHECK(n > 1000 && wrong == 0,
	      "%s: %zu of %zu C++ names demangled otherwise than c++filt -p", path, wrong, n);
	printf("%s: %zu C++ names demangled as c++filt -p does (%zu with a standard substitution "
	       "left out)\n",
	       path, n, skipped);
	{
		char *plain = lp_demangle("ggml_compute_forward_mul_mat");

		CHECK(plain && strcmp(plain, "ggml_compute_forward_mul_mat") == 0,
		      "a C name stays as it is: %s", plain);
		free(plain);
	}
	for (size_t i = 0; i < nv; i++)
		free(v[i].name);
	free(v);
}

/* Files that are not (whole) ELF files are refused. */
static void check_refused(const char *elf)
{
	char path[] = "/tmp/llmprof-notelf-XXXXXX", buf[4096];
	struct lp_symtab t = {0};
	int fd = mkstemp(path), src = open(elf, O_RDONLY | O_CLOEXEC);
	ssize_t got = src >= 0 ? read(src, buf, sizeof(buf)) : -1;

	CHECK(fd >= 0 && got == (ssize_t)sizeof(buf), "scratch and source files");
	if (fd < 0 || got <= 0)
		return;
	CHECK(write(fd, "#!/bin/sh\necho hi\n", 18) == 18, "write");
	CHECK(lp_symtab_read(fd, NULL, &t) == -ENOEXEC, "a script is not ELF");
	/* The first 4 KiB of a real file: headers pointing past its end. */
	CHECK(ftruncate(fd, 0) == 0 && pwrite(fd, buf, sizeof(buf), 0) == (ssize_t)sizeof(buf),
	      "write");
	CHECK(lp_symtab_read(fd, NULL, &t) == -ENOEXEC, "a truncated ELF file is refused");
	close(fd);
	close(src);
	unlink(path);
}

static const char *lib_path(const char *name)
{
	static char out[2][512];
	static int k;
	char cmd[256];
	FILE *p;

	snprintf(cmd, sizeof(cmd), "gcc -print-file-name=%s", name);
	k ^= 1;
	out[k][0] = 0;
	if ((p = popen(cmd, "r"))) {
		if (fgets(out[k], sizeof(out[k]), p))
			out[k][strcspn(out[k], "\n")] = 0;
		pclose(p);
	}
	/* Through its symlinks to the file itself. */
	{
		char *real = realpath(out[k], NULL);

		if (real) {
			snprintf(out[k], sizeof(out[k]), "%s", real);
			free(real);
		}
	}
	return out[k];
}

int main(int argc, char **argv)
{
	char self[4096];
	ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);

	(void)argc;
	(void)argv;
	CHECK(n > 0, "/proc/self/exe");
	if (n <= 0)
		return check_done();
	self[n] = 0;
	check_functions(self, false);
	check_functions(lib_path("libc.so.6"), true);
	check_functions(lib_path("libstdc++.so.6"), true);
	check_demangle(lib_path("libstdc++.so.6"));
	check_refused(self);
	return check_done();
}
