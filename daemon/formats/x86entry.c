// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* A length decoder for the few x86-64 instructions that start functions, enough to find
 * the first one the kernel's uprobes emulate (see x86entry.h). It accepts a short list of
 * encodings and gives up on anything else: a wrong length would put the breakpoint in the
 * middle of an instruction and break the traced program. */
#include "formats/x86entry.h"

#include <stdbool.h>

#define MAX_INSNS 16
#define RSP 4

const char *const lp_x86_site_names[] = {
	[LP_X86_ENTRY] = "entry", [LP_X86_PUSH] = "push", [LP_X86_JCC] = "jcc",
	[LP_X86_JMP] = "jmp",	  [LP_X86_CALL] = "call", [LP_X86_NOP] = "nop",
};

/* What a skipped instruction may write. */
enum writes {
	W_NONE = 1, /* only flags: cmp, test */
	W_REG,	    /* the register in ModRM.reg */
	W_RM_REG,   /* ModRM.rm, which must then be a register */
};

#define IMM_Z 0xff /* an immediate of 4 bytes, 2 with the 0x66 prefix */

/* The one-byte opcodes the walk passes (w 0: it stops), with a ModRM operand unless
 * noted. */
static const struct op {
	unsigned char w;      /* enum writes */
	signed char need_reg; /* the ModRM.reg an opcode extension must have; -1 any */
	unsigned char imm;    /* immediate bytes, or IMM_Z */
	bool no_modrm;
} ops[256] = {
	/* add, or, and, sub, xor r, r/m; mov, lea, movsxd */
	[0x02] = {W_REG, -1, 0, 0},
	[0x03] = {W_REG, -1, 0, 0},
	[0x0a] = {W_REG, -1, 0, 0},
	[0x0b] = {W_REG, -1, 0, 0},
	[0x22] = {W_REG, -1, 0, 0},
	[0x23] = {W_REG, -1, 0, 0},
	[0x2a] = {W_REG, -1, 0, 0},
	[0x2b] = {W_REG, -1, 0, 0},
	[0x32] = {W_REG, -1, 0, 0},
	[0x33] = {W_REG, -1, 0, 0},
	[0x8a] = {W_REG, -1, 0, 0},
	[0x8b] = {W_REG, -1, 0, 0},
	[0x8d] = {W_REG, -1, 0, 0},
	[0x63] = {W_REG, -1, 0, 0},
	/* add, or, and, sub, xor, mov r/m, r */
	[0x00] = {W_RM_REG, -1, 0, 0},
	[0x01] = {W_RM_REG, -1, 0, 0},
	[0x08] = {W_RM_REG, -1, 0, 0},
	[0x09] = {W_RM_REG, -1, 0, 0},
	[0x20] = {W_RM_REG, -1, 0, 0},
	[0x21] = {W_RM_REG, -1, 0, 0},
	[0x28] = {W_RM_REG, -1, 0, 0},
	[0x29] = {W_RM_REG, -1, 0, 0},
	[0x30] = {W_RM_REG, -1, 0, 0},
	[0x31] = {W_RM_REG, -1, 0, 0},
	[0x88] = {W_RM_REG, -1, 0, 0},
	[0x89] = {W_RM_REG, -1, 0, 0},
	/* cmp, test */
	[0x38] = {W_NONE, -1, 0, 0},
	[0x39] = {W_NONE, -1, 0, 0},
	[0x3a] = {W_NONE, -1, 0, 0},
	[0x3b] = {W_NONE, -1, 0, 0},
	[0x84] = {W_NONE, -1, 0, 0},
	[0x85] = {W_NONE, -1, 0, 0},
	/* cmp r/m, imm; test r/m, imm */
	[0x80] = {W_NONE, 7, 1, 0},
	[0x83] = {W_NONE, 7, 1, 0},
	[0x81] = {W_NONE, 7, IMM_Z, 0},
	[0xf6] = {W_NONE, 0, 1, 0},
	[0xf7] = {W_NONE, 0, IMM_Z, 0},
	/* cmp, test %al or %eax, imm */
	[0x3c] = {W_NONE, -1, 1, 1},
	[0xa8] = {W_NONE, -1, 1, 1},
	[0x3d] = {W_NONE, -1, IMM_Z, 1},
	[0xa9] = {W_NONE, -1, IMM_Z, 1},
};

/* Bytes of a ModRM operand (ModRM, SIB, displacement) at p, or 0 if it does not fit. */
static size_t modrm_len(const uint8_t *p, size_t n)
{
	uint8_t mod, rm;
	size_t l = 1;

	if (n < 1)
		return 0;
	mod = p[0] >> 6;
	rm = p[0] & 7;
	if (mod != 3) {
		if (rm == 4) {
			if (n < 2)
				return 0;
			l = 2;
			if (mod == 0 && (p[1] & 7) == 5)
				l += 4;
		} else if (mod == 0 && rm == 5) {
			l += 4; /* %rip-relative */
		}
		l += mod == 1 ? 1 : mod == 2 ? 4 : 0;
	}
	return l <= n ? l : 0;
}

/* The site an emulated instruction at p (after prefixes) makes, or LP_X86_ENTRY. */
static enum lp_x86_site emulated(const uint8_t *p, size_t n, bool p66, uint8_t rex)
{
	bool plain = !p66 && !rex;

	if (p[0] >= 0x50 && p[0] <= 0x57 && !p66 && (rex == 0 || rex == 0x41))
		return LP_X86_PUSH;
	if (!plain)
		return LP_X86_ENTRY;
	if (p[0] >= 0x70 && p[0] <= 0x7f)
		return LP_X86_JCC;
	if (p[0] == 0xeb || p[0] == 0xe9)
		return LP_X86_JMP;
	if (p[0] == 0xe8)
		return LP_X86_CALL;
	if (p[0] == 0x90)
		return LP_X86_NOP;
	if (p[0] == 0x0f && n >= 2 && p[1] >= 0x80 && p[1] <= 0x8f)
		return LP_X86_JCC;
	if (p[0] == 0x0f && n >= 5 && p[1] == 0x1f && p[2] == 0x44 && p[3] == 0 && p[4] == 0)
		return LP_X86_NOP; /* the 5-byte nop newer kernels turn into a call */
	return LP_X86_ENTRY;
}

/* Length of one skippable instruction at p, or 0 when it is not one. */
static size_t skippable(const uint8_t *p, size_t n)
{
	size_t j = 0, imm, m;
	bool p66 = false;
	uint8_t rex = 0, op;
	struct op o;

	if (n >= 4 && p[0] == 0xf3 && p[1] == 0x0f && p[2] == 0x1e && p[3] == 0xfa)
		return 4; /* endbr64 */
	if (j < n && p[j] == 0x66) {
		p66 = true;
		j++;
	}
	if (j < n && (p[j] & 0xf0) == 0x40)
		rex = p[j++];
	if (j >= n)
		return 0;
	op = p[j++];
	if (op >= 0xb8 && op <= 0xbf) { /* mov reg, imm */
		if (((op & 7) | ((rex & 1) << 3)) == RSP)
			return 0;
		o = (struct op){W_REG, -1, rex & 8 ? 8 : IMM_Z, true};
	} else if (op == 0x0f) { /* movzx, movsx */
		if (j >= n || (p[j] != 0xb6 && p[j] != 0xb7 && p[j] != 0xbe && p[j] != 0xbf))
			return 0;
		j++;
		o = (struct op){W_REG, -1, 0, false};
	} else {
		o = ops[op];
		if (!o.w)
			return 0;
	}
	if (!o.no_modrm) {
		uint8_t mod, reg, rm;

		m = modrm_len(p + j, n - j);
		if (!m)
			return 0;
		mod = p[j] >> 6;
		reg = ((p[j] >> 3) & 7) | ((rex & 4) << 1);
		rm = (p[j] & 7) | ((rex & 1) << 3);
		if (o.need_reg >= 0 && (reg & 7) != o.need_reg)
			return 0;
		if (o.w == W_REG && reg == RSP)
			return 0;
		if (o.w == W_RM_REG && (mod != 3 || rm == RSP))
			return 0;
		if (op == 0x8d && mod == 3)
			return 0; /* lea has no register form */
		j += m;
	}
	imm = o.imm == IMM_Z ? (p66 ? 2 : 4) : o.imm;
	j += imm;
	return j <= n ? j : 0;
}

static int32_t rel32(const uint8_t *p)
{
	return (int32_t)((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
			 (uint32_t)p[3] << 24);
}

/* The range that holds target, by binary search over ranges sorted by lo. */
static void mark(struct lp_x86_range *r, size_t nr, uint64_t target)
{
	size_t lo = 0, hi = nr;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;

		if (target <= r[mid].lo)
			hi = mid;
		else if (target > r[mid].hi)
			lo = mid + 1;
		else {
			r[mid].hit = true;
			return;
		}
	}
}

void lp_x86_mark_branched(const uint8_t *code, size_t n, uint64_t vaddr, struct lp_x86_range *r,
			  size_t nr)
{
	for (size_t p = 0; p < n && nr; p++) {
		uint64_t at = vaddr + p;

		if (((code[p] >= 0x70 && code[p] <= 0x7f) || code[p] == 0xeb) && p + 2 <= n)
			mark(r, nr, at + 2 + (uint64_t)(int64_t)(int8_t)code[p + 1]);
		else if ((code[p] == 0xe8 || code[p] == 0xe9) && p + 5 <= n)
			mark(r, nr, at + 5 + (uint64_t)(int64_t)rel32(code + p + 1));
		else if (code[p] == 0x0f && p + 6 <= n && code[p + 1] >= 0x80 &&
			 code[p + 1] <= 0x8f)
			mark(r, nr, at + 6 + (uint64_t)(int64_t)rel32(code + p + 2));
	}
}

size_t lp_x86_entry_skip(const uint8_t *code, size_t len, enum lp_x86_site *site)
{
	size_t i = 0;

	*site = LP_X86_ENTRY;
	for (int k = 0; k < MAX_INSNS && i < len; k++) {
		const uint8_t *p = code + i;
		size_t n = len - i, j = 0, l;
		bool p66 = false;
		uint8_t rex = 0;
		enum lp_x86_site s;

		if (p[j] == 0x66) {
			p66 = true;
			j++;
		}
		if (j < n && (p[j] & 0xf0) == 0x40)
			rex = p[j++];
		if (j < n && (s = emulated(p + j, n - j, p66, rex)) != LP_X86_ENTRY) {
			*site = s;
			return i;
		}
		l = skippable(p, n);
		if (!l)
			break;
		i += l;
	}
	return 0;
}
