/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* Where to put a function's entry uprobe on x86-64 so that it is cheap.
 *
 * The kernel runs a probed instruction in one of two ways: it emulates a few kinds (push of
 * a register, jmp, jcc, call, nop), or it copies the instruction to a page of its own and
 * single-steps it there, which costs a second trap. Measured on a 2-vCPU VM with Linux
 * 6.18: 0.7 us per hit emulated, 9 us single-stepped. Compilers with CET start functions
 * with endbr64, which is single-stepped; ggml_compute_forward_mul_mat's next instruction
 * is a push and ggml_barrier's fourth is a jcc.
 *
 * lp_x86_entry_skip() walks the function's first instructions while each is one that
 * always falls through to the next (no branch), leaves %rsp alone and writes no memory, and
 * stops at the first instruction the kernel emulates. lp_x86_mark_branched() then finds
 * the sites that a direct jump or call anywhere in the file lands on, or on a skipped
 * instruction after the first: a loop back there would fire the probe again, so those
 * stay on the first instruction. The others fire when the entry would, once per call,
 * with the return address still at (%rsp), so an entry uprobe and a uretprobe both work
 * there. Anything the walk does not decode leaves the probe on the first instruction.
 *
 * Not covered: a computed jump into a prologue. Compilers do not emit those. */
#ifndef LLMPROF_X86ENTRY_H
#define LLMPROF_X86ENTRY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum lp_x86_site {
	LP_X86_ENTRY = 0, /* the first instruction: nothing better was found */
	LP_X86_PUSH,
	LP_X86_JCC,
	LP_X86_JMP,
	LP_X86_CALL,
	LP_X86_NOP,
};

/* The names of enum lp_x86_site, for logs and the API. */
extern const char *const lp_x86_site_names[];

/* Bytes from the function's start to the probe site within the len bytes at code, and
 * what instruction is there in *site; 0 and LP_X86_ENTRY when none is found. */
size_t lp_x86_entry_skip(const uint8_t *code, size_t len, enum lp_x86_site *site);

/* Addresses (lo, hi]: the instructions after a function's first, up to its probe site. */
struct lp_x86_range {
	uint64_t lo, hi;
	size_t tag; /* the caller's, e.g. which function */
	bool hit;   /* a direct branch lands there */
};

/* Reads every byte of the n bytes of code at vaddr as a possible direct jmp, jcc or call
 * (instruction boundaries are not known: data that looks like one only costs a cheap
 * site) and sets hit on the ranges, sorted by lo and disjoint, that one lands in. */
void lp_x86_mark_branched(const uint8_t *code, size_t n, uint64_t vaddr, struct lp_x86_range *r,
			  size_t nr);

#endif
