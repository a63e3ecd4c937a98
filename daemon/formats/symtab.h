/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* Every function of an ELF file by file offset, for naming the frames of a profile: its
 * .symtab (or .dynsym where it was stripped), its GNU build-id and .gnu_debuglink, read
 * with pread() and checked as another user's file must be (formats/README.md). Aliases and
 * sizes are resolved as perf resolves them, so that the same address gets the same name in
 * both. */
#ifndef LLMPROF_SYMTAB_H
#define LLMPROF_SYMTAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Bounds against hostile files: a symbol table, its strings and a name at most this big. */
#define LP_SYMTAB_MAX_BYTES (512u << 20)
#define LP_SYMTAB_NAME_MAX 4096
#define LP_BUILD_ID_MAX 32

struct lp_symtab_fn {
	uint64_t off;  /* file offset of its first instruction */
	uint64_t size; /* 0 in the file: up to the next function */
	uint32_t name; /* into names */
	uint8_t bind;  /* STB_* */
};

/* An executable PT_LOAD: how a virtual address maps to a file offset. */
struct lp_symtab_load {
	uint64_t vaddr, memsz, offset;
};

struct lp_symtab {
	struct lp_symtab_fn *fn; /* sorted by off, one per address */
	size_t n;
	char *names;
	size_t names_len;
	struct lp_symtab_load load[8];
	size_t nload;
	uint8_t build_id[LP_BUILD_ID_MAX];
	size_t build_id_len; /* 0: none */
	char debuglink[256]; /* .gnu_debuglink's file name; "" none */
	bool has_symtab;     /* .symtab present: not stripped */
};

/* Reads the ELF file at fd. With loads (a separate debug file: its symbols' addresses are
 * the stripped file's), the stripped file's segments map them to offsets. Returns 0,
 * -ENOEXEC when it is not a 64-bit little-endian ELF file or is malformed, -EFBIG past
 * the bounds, or -errno. */
int lp_symtab_read(int fd, const struct lp_symtab *loads, struct lp_symtab *out);
void lp_symtab_free(struct lp_symtab *t);

/* The function holding file offset off, or NULL: perf's rule, [off, off + size), a size
 * of 0 reaching to the next function (the last one past the end of its page). */
const struct lp_symtab_fn *lp_symtab_find(const struct lp_symtab *t, uint64_t off);

static inline const char *lp_symtab_name(const struct lp_symtab *t, const struct lp_symtab_fn *f)
{
	return t->names + f->name;
}

/* The build-id as lowercase hex into out (2 * LP_BUILD_ID_MAX + 1); "" when none. */
void lp_build_id_hex(const struct lp_symtab *t, char *out, size_t size);

/* A C++ (Itanium ABI) name demangled as perf prints it by default: no parameters, no return
 * type ("ns::W<int>::spin"); the name itself when it is not mangled. malloc'ed; NULL only
 * without memory. */
char *lp_demangle(const char *name);

#endif
