/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* Call frame information (.eh_frame) of an x86-64 ELF file, reduced to what an unwinder
 * in BPF needs to go from one frame to its caller: for every instruction, where the
 * canonical frame address (CFA) is and where the caller's %rbp was saved. The return
 * address is at CFA - 8 (the x86-64 psABI) except in a signal trampoline.
 *
 * Every rule x86-64 gcc and clang emit for C and C++ has a form here:
 * - a register plus an offset: %rsp or %rbp in the body of a function; any register in a
 *   prologue or epilogue (gcc's DRAP register, %r10 or %r13, while it realigns the stack);
 * - DW_OP_breg<r> off; DW_OP_deref (gcc's frames with a realigned stack: the CFA saved
 *   below the frame pointer), and DW_OP_breg<r> off alone (the same as a register rule);
 *   %rbp saved at DW_OP_breg6 off (the same frames);
 * - the expression binutils writes for a PLT entry;
 * - a signal trampoline ('S' augmentation): the kernel's rt_sigframe is at %rsp;
 * - the outermost frame (the return address undefined: _start, a thread's start).
 * Anything else reads LP_CFI_NONE with the reason. The OpenTelemetry eBPF profiler and
 * Parca reduce .eh_frame the same way: tables derived in user space, looked up in BPF. */
#ifndef LLMPROF_CFI_H
#define LLMPROF_CFI_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* DWARF register numbers on x86-64. */
#define LP_DW_RBP 6
#define LP_DW_RSP 7
#define LP_DW_R10 10
#define LP_DW_R13 13
#define LP_DW_RA 16

enum lp_cfi_cfa {
	LP_CFI_NONE = 0, /* no rule an unwinder can follow here: why says which */
	LP_CFI_REG,	 /* CFA = reg + cfa_off */
	LP_CFI_DEREF,	 /* CFA = *(reg + cfa_off) */
	LP_CFI_PLT,	 /* CFA = rsp + 8, and 8 more where (ip & 15) >= cfa_off */
	LP_CFI_SIGNAL,	 /* a signal trampoline: everything from the rt_sigframe at rsp */
	LP_CFI_END,	 /* the outermost frame: no caller */
};

/* Why a row reads LP_CFI_NONE. */
enum lp_cfi_why {
	LP_CFI_WHY_NO_FDE = 0, /* no FDE covers it: code without CFI */
	LP_CFI_WHY_EXPR,       /* a CFA expression of another form */
	LP_CFI_WHY_RA,	       /* the return address not at CFA - 8 */
	LP_CFI_WHY_INSN,       /* after an instruction that could not be read */
	LP_CFI_WHY_NR,
};

/* The caller's %rbp: unchanged (still in the register), saved at CFA + rbp_off, saved at
 * the frame's own %rbp + rbp_off (a realigned frame), or lost (a rule this reduction does
 * not follow: the unwinder stops needing it). */
enum lp_cfi_rbp {
	LP_CFI_RBP_SAME = 0,
	LP_CFI_RBP_SAVED,
	LP_CFI_RBP_AT_RBP,
	LP_CFI_RBP_LOST,
};

struct lp_cfi_row {
	uint64_t addr;	 /* first instruction it covers; it holds up to the next row's */
	uint8_t cfa;	 /* enum lp_cfi_cfa */
	uint8_t cfa_reg; /* DWARF register of LP_CFI_REG and LP_CFI_DEREF */
	uint8_t rbp;	 /* enum lp_cfi_rbp */
	uint8_t why;	 /* enum lp_cfi_why, when cfa is LP_CFI_NONE */
	int64_t cfa_off;
	int64_t rbp_off;
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

/* Whether two rows unwind alike (every field but the address): the parse never stores
 * two such rows in a row. */
bool lp_cfi_same_rule(const struct lp_cfi_row *a, const struct lp_cfi_row *b);

/* The row covering addr, or NULL. */
const struct lp_cfi_row *lp_cfi_find(const struct lp_cfi *c, uint64_t addr);

/* "no_fde", "cfa_expression", ... of abi.h's enum lp_unwind_why; "rbp_lost", ... of its
 * enum lp_uw_fail: the names the API and /metrics use. */
const char *lp_unwind_why_key(unsigned why);

void lp_cfi_free(struct lp_cfi *c);

#endif
