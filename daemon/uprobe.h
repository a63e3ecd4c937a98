/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* Uprobes on a process's object files: where they go; and arrays of BPF links, which
 * hold uprobes and perf events alike. */
#ifndef LLMPROF_UPROBE_H
#define LLMPROF_UPROBE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "elfsym.h"

struct bpf_link;

/* Destroys every link and frees the array. */
void lp_links_destroy(struct bpf_link ***links, size_t *n);
/* Appends l (destroyed on failure). Returns 0 or -ENOMEM. */
int lp_links_push(struct bpf_link ***links, size_t *n, struct bpf_link *l);

/* A path naming the file (dev, ino) that pid mapped as path, for attaching uprobes: that
 * path when it still names the file, else the same path inside the process's root (another
 * mount namespace). Returns 0 or -ENOENT. */
int lp_uprobe_path(pid_t pid, const char *path, uint64_t dev, uint64_t ino, char *buf, size_t len);

/* Where a function's uprobes go in its file: on its first emulated instruction
 * (elfsym.h, x86entry.h). */
static inline size_t lp_uprobe_offset(const struct lp_elf_sym *sym)
{
	return (size_t)(sym->file_off + sym->entry_skip);
}

#endif
