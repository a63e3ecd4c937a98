/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* Finding functions by name in an ELF file: .symtab and .dynsym, local symbols included,
 * with the file offsets that uprobes need. */
#ifndef LLMPROF_ELFSYM_H
#define LLMPROF_ELFSYM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "formats/x86entry.h"

struct lp_elf_sym {
	char *name;
	int cls;	   /* index of the pattern list that matched */
	uint64_t vaddr;	   /* st_value */
	uint64_t size;	   /* st_size */
	uint64_t file_off; /* where the first instruction is in the file */
	/* x86-64: bytes from file_off to the first instruction the kernel emulates, and which
	 * kind it is (x86entry.h); 0 and LP_X86_ENTRY elsewhere. */
	uint32_t entry_skip;
	enum lp_x86_site site;
	bool endbr; /* x86-64: it starts with endbr64 */
	bool data;  /* a data object (pat->data_classes), not a function: no file_off */
};

/* Lists of names or fnmatch(3) globs, one list per class. */
struct lp_elf_patterns {
	const char *const *const *lists; /* lists[cls] is NULL-terminated */
	size_t nclasses;
	bool probe_sites; /* x86-64: find each function's cheap probe site (x86entry.h) */
	/* Classes whose data objects (STT_OBJECT: CPython's _PyRuntime) are taken too, by
	 * bit */
	uint64_t data_classes;
};

struct lp_elf_result {
	struct lp_elf_sym *syms;
	size_t nsyms;
	int has_symtab; /* .symtab present: not stripped */
};

/* Reads the function symbols of the ELF file at fd that match a pattern (and the data
 * objects of pat->data_classes); each address
 * appears once (aliases: the first name found wins, .symtab before .dynsym), with the
 * cheap probe site of each on x86-64 when pat->probe_sites. Returns 0,
 * -ENOEXEC when the file is not ELF, or -errno. */
int lp_elf_find(int fd, const struct lp_elf_patterns *pat, struct lp_elf_result *out);
void lp_elf_result_free(struct lp_elf_result *r);

/* A section's bytes by name (".rodata"), read from the 64-bit little-endian ELF file at fd
 * by its section headers: *buf malloc'ed, *size its length. At most max bytes. Returns 0,
 * -ENOENT (no such section, or none with contents), -ENOEXEC (not such an ELF file),
 * -EFBIG (larger than max) or -errno. */
int lp_elf_section(int fd, const char *name, size_t max, char **buf, size_t *size);

/* The GOT slot the loader fills with the thread-pointer offset of the file's own TLS block
 * (x86-64, initial-exec: the R_X86_64_TPOFF64 relocation against no symbol with addend 0),
 * as a file offset of the executable segment's: where the executable mapping with file
 * offset pgoff is at start, the slot is at start - pgoff + *slot. Returns 0, -ENOENT (no
 * such relocation, or no TLS), -ENOEXEC (not a 64-bit little-endian x86-64 ELF file) or
 * -errno. */
int lp_elf_tls_block_slot(int fd, uint64_t *slot);

/* Whether name matches pattern: exact, or fnmatch(3) when the pattern has * ? or [. */
int lp_elf_name_match(const char *pattern, const char *name);

#endif
