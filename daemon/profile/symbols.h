/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* Names for a profile's frames: each object's function symbols (formats/symtab.h), read
 * once per file (device, inode, modification time) from the process's own view of it, with
 * its separate debug file where one is installed (by build-id, then by .gnu_debuglink, in
 * the process's root and then the host's); the kernel's from /proc/kallsyms. Bounded: at
 * most LP_SYMBOLS_MAX objects, the least recently used let go first. */
#ifndef LLMPROF_SYMBOLS_H
#define LLMPROF_SYMBOLS_H

#include <stdint.h>
#include <sys/types.h>

#include "base/procfs.h"
#include "formats/symtab.h"

#define LP_SYMBOLS_MAX 128

struct lp_sym_obj {
	uint64_t dev, ino, mtime_ns;
	char *path; /* as the process that first mapped it named it */
	char build_id[2 * LP_BUILD_ID_MAX + 1];
	struct lp_symtab tab;
	int error;	 /* 0, or why it has no symbols (-errno) */
	bool debug_file; /* the symbols came from a separate debug file */
	uint64_t used;	 /* the last lookup, by the cache's clock */
};

struct lp_kallsyms {
	struct lp_ksym {
		uint64_t addr;
		uint32_t name; /* into names */
	} * v;
	size_t n;
	char *names;
	uint64_t read_ns; /* when read; 0: never */
	int error;	  /* 0, or why there are none: -EPERM when the addresses read as 0 */
};

struct lp_symbols {
	struct lp_sym_obj *v[LP_SYMBOLS_MAX];
	size_t n;
	uint64_t clock;
	struct lp_kallsyms k;
	const char *proc_root; /* "/proc" */
	const char *kallsyms;  /* "/proc/kallsyms" */
	uint64_t bytes;	       /* held by the symbol tables */
};

void lp_symbols_init(struct lp_symbols *s);
void lp_symbols_free(struct lp_symbols *s);

/* The object behind mapping m of pid, its symbols read now if new; NULL when it cannot be
 * opened (gone, not ours to read) and was never read. */
const struct lp_sym_obj *lp_symbols_object(struct lp_symbols *s, pid_t pid,
					   const struct lp_proc_mapping *m);

/* The kernel function holding addr, or NULL (kallsyms unreadable: see k.error). */
const char *lp_symbols_kernel(struct lp_symbols *s, uint64_t addr);

#endif
