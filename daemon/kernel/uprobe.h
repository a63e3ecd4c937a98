/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* Uprobes on a process's object files: where they go; and arrays of BPF links, which
 * hold uprobes and perf events alike. */
#ifndef LLMPROF_UPROBE_H
#define LLMPROF_UPROBE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "formats/elfsym.h"

struct bpf_link;
struct bpf_program;

/* Destroys every link and frees the array. */
void lp_links_destroy(struct bpf_link ***links, size_t *n);
/* Appends l (destroyed on failure). Returns 0 or -ENOMEM. */
int lp_links_push(struct bpf_link ***links, size_t *n, struct bpf_link *l);

/* Uprobes held: libbpf's links, one per probe, and the kernel's multi-uprobe links
 * (BPF_TRACE_UPROBE_MULTI), one per program, file and process, each holding many probes,
 * as file descriptors (libbpf 1.1 has no wrapper for them). A multi-uprobe link comes off
 * with one RCU grace period for all its probes; a single one with one each. */
struct lp_probes {
	struct bpf_link **links;
	size_t nlinks;
	int *fds;
	size_t nfds;
	size_t n; /* probes held, all told */
};

/* Takes every probe off and empties p. */
void lp_probes_free(struct lp_probes *p);

/* The attach type of programs loaded for multi-uprobe links (uapi's BPF_TRACE_UPROBE_MULTI,
 * which libbpf 1.1's headers lack). */
#define LP_TRACE_UPROBE_MULTI 48

/* Whether the kernel makes multi-uprobe links that filter by process (Linux 6.6 made them,
 * a later fix made the pid filter cover every thread of the process, not one): 0, or why
 * not as a negative errno. Tried, as libbpf does: a link on "/" fails with EBADF where they
 * exist, and one for pid -1 with EINVAL where the filter is by process. */
int lp_uprobe_multi_probe(void);

/* Attaches prog (loaded with LP_TRACE_UPROBE_MULTI) at offsets[n] of the file at path, for
 * pid, entries or returns, as one link added to out. Returns 0 or a negative errno. */
int lp_uprobe_multi_attach(struct lp_probes *out, const struct bpf_program *prog, bool retprobe,
			   pid_t pid, const char *path, const unsigned long *offsets, size_t n);

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

/* Where a probe that reads the function's arguments or its caller's frame goes: past an
 * endbr64 (which writes nothing, and is single-stepped: 10 us a call), else at the first
 * instruction; the cheaper site may come after instructions that write registers. */
static inline size_t lp_uprobe_offset_args(const struct lp_elf_sym *sym)
{
	return (size_t)(sym->file_off + (sym->endbr && sym->entry_skip == 4 ? 4 : 0));
}

#endif
