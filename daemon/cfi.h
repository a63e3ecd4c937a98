/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* Call frame information (.eh_frame) of an x86-64 ELF file, reduced to what an unwinder
 * in BPF needs to go from one frame to its caller: for every instruction, where the
 * canonical frame address (CFA) is, as %rsp or %rbp plus an offset, and where the caller's
 * %rbp was saved. The return address is at CFA - 8 (the x86-64 psABI); a frame whose rule
 * is anything else (a DWARF expression, another register) cannot be unwound and reads
 * LP_CFI_NONE.
 *
 * The OpenTelemetry eBPF profiler and Parca unwind code built without frame pointers the
 * same way: tables derived from .eh_frame in user space, looked up by the BPF program. */
#ifndef LLMPROF_CFI_H
#define LLMPROF_CFI_H

#include <stddef.h>
#include <stdint.h>

enum lp_cfi_reg {
	LP_CFI_NONE = 0, /* no rule an unwinder can follow here (or no FDE covers it) */
	LP_CFI_RSP,
	LP_CFI_RBP,
};

/* The caller's %rbp: unchanged (still in the register), saved at CFA + rbp_off, or lost
 * (a rule this reduction does not follow: the unwinder stops needing it). */
enum lp_cfi_rbp {
	LP_CFI_RBP_SAME = 0,
	LP_CFI_RBP_SAVED,
	LP_CFI_RBP_LOST,
};

struct lp_cfi_row {
	uint64_t addr;	 /* first instruction it covers; it holds up to the next row's */
	uint8_t cfa_reg; /* enum lp_cfi_reg */
	uint8_t rbp;	 /* enum lp_cfi_rbp */
	int64_t cfa_off;
	int64_t rbp_off; /* from the CFA, when rbp is LP_CFI_RBP_SAVED */
};

struct lp_cfi {
	struct lp_cfi_row *rows; /* sorted by addr, no two alike in a row */
	size_t n;
	size_t fdes;
};

/* Parses an .eh_frame section's bytes, loaded at address vaddr (for pc-relative
 * pointers), into out (rows by virtual address). Malformed entries end the parse with
 * what was read before them. Returns 0, -ENOMEM, or -EINVAL when nothing could be read. */
int lp_cfi_parse(const uint8_t *data, size_t len, uint64_t vaddr, struct lp_cfi *out);

/* Reads the .eh_frame of the ELF file at fd; rows are by file offset (the offset a
 * process's mapping adds to its start, as uprobes use), those outside executable segments
 * dropped. Returns 0, -ENOENT (no .eh_frame), -ENOEXEC (not a 64-bit x86-64 ELF file), or
 * -errno. */
int lp_cfi_read(int fd, struct lp_cfi *out);

/* The row covering addr, or NULL. */
const struct lp_cfi_row *lp_cfi_find(const struct lp_cfi *c, uint64_t addr);

void lp_cfi_free(struct lp_cfi *c);

#endif
