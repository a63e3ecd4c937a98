// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* daemon/formats/cfi.c against two independent readings of the same files: binutils' readelf
 * --debug-dump=frames-interp prints every FDE's rows as a table (LOC, CFA, rbp, ra), with
 * "exp" where a rule is a DWARF expression; for those, LLVM's llvm-dwarfdump --eh-frame
 * prints the expression at the same address (0x1a: CFA=DW_OP_breg6 RBP-8, DW_OP_deref:
 * RBP=[DW_OP_breg6 RBP+0], RIP=[CFA-8]). LLVM 14's rows are not used otherwise: its
 * DW_CFA_restore_state does not restore the CFA, and readelf's does.
 *
 * Every row must be the rule lp_cfi_find gives at that address: a register plus an
 * offset, DW_OP_breg<r> off with or without DW_OP_deref, the PLT expression, a signal
 * trampoline ('S' CIE), the outermost frame (the return address undefined) each as such;
 * %rbp unchanged, saved at CFA+N or at DW_OP_breg6 RBP+N; anything else LP_CFI_NONE with
 * the reason.
 *
 *   test_cfi FILE...   (the fixture with realigned frames, libc, libstdc++: "zR", "zPLR"
 *                       and "zRS" CIEs, remember/restore_state, PLT expressions) */
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <inttypes.h>
#include <libelf.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "formats/cfi.h"
#include "check.h"

/* The rows of the file's .eh_frame by virtual address, as readelf's are. */
static int parse_vaddr(const char *path, struct lp_cfi *out)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC), r = -ENOENT;
	Elf_Scn *scn = NULL;
	size_t shstrndx;
	Elf *elf;

	if (fd < 0)
		return -errno;
	elf_version(EV_CURRENT);
	elf = elf_begin(fd, ELF_C_READ, NULL);
	if (elf && !elf_getshdrstrndx(elf, &shstrndx))
		while ((scn = elf_nextscn(elf, scn))) {
			GElf_Shdr sh;
			const char *name;
			Elf_Data *d;

			if (!gelf_getshdr(scn, &sh) ||
			    !(name = elf_strptr(elf, shstrndx, sh.sh_name)) ||
			    strcmp(name, ".eh_frame") != 0)
				continue;
			d = elf_getdata(scn, NULL);
			r = d ? lp_cfi_parse(d->d_buf, d->d_size, sh.sh_addr, out) : -EIO;
			break;
		}
	elf_end(elf);
	close(fd);
	return r;
}

/* DWARF register numbers of llvm-dwarfdump's names. */
static int reg_of(const char *name, size_t len)
{
	static const char *const names[] = {"RAX", "RDX", "RCX", "RBX", "RSI", "RDI",
					    "RBP", "RSP", "R8",	 "R9",	"R10", "R11",
					    "R12", "R13", "R14", "R15", "RIP"};

	for (size_t i = 0; i < sizeof(names) / sizeof(*names); i++)
		if (strlen(names[i]) == len && !strncmp(names[i], name, len))
			return (int)i;
	return -1;
}

/* "RSP+8", "R10", "RBP-24": a register and an offset. */
static bool reg_off(const char *s, int *reg, int64_t *off)
{
	size_t n = strcspn(s, "+-");

	*reg = reg_of(s, n);
	*off = s[n] ? strtoll(s + n, NULL, 10) : 0;
	return *reg >= 0;
}

/* The value of rule NAME ("RBP", "RIP") in a row's text, or NULL (unchanged). */
static const char *rule(const char *rules, const char *name, char *buf, size_t len)
{
	char key[16];
	const char *p = rules, *e;

	snprintf(key, sizeof(key), "%s=", name);
	while ((p = strstr(p, key))) {
		if (p == rules || p[-1] == ' ' || p[-1] == ':')
			break;
		p++;
	}
	if (!p)
		return NULL;
	p += strlen(key);
	e = p[0] == '[' ? strchr(p, ']') + 1 : p + strcspn(p, ",\n");
	snprintf(buf, len, "%.*s", (int)(e - p), p);
	return buf;
}

/* The row llvm-dwarfdump's text says (cfa: after "CFA=", up to ": "; rules: the rest). */
static struct lp_cfi_row expected(const char *cfa, const char *rules, bool signal)
{
	struct lp_cfi_row e = {.why = LP_CFI_WHY_RA};
	char rip[128], rbp[128];
	int reg;
	int64_t off;

	/* The CFA. */
	if (reg_off(cfa, &reg, &off)) {
		e.cfa = LP_CFI_REG;
	} else if (!strncmp(cfa, "DW_OP_breg", 10) && strchr(cfa, ' ') &&
		   reg_off(strchr(cfa, ' ') + 1, &reg, &off)) {
		const char *rest = strchr(cfa, ',');

		if (!rest)
			e.cfa = LP_CFI_REG;
		else if (!strcmp(rest, ", DW_OP_deref"))
			e.cfa = LP_CFI_DEREF;
		else if (reg == 7 && off == 8 &&
			 !strncmp(rest, ", DW_OP_breg16 RIP+0, DW_OP_lit15, DW_OP_and, DW_OP_lit",
				  55) &&
			 strstr(rest, ", DW_OP_ge, DW_OP_lit3, DW_OP_shl, DW_OP_plus")) {
			e.cfa = LP_CFI_PLT;
			off = strtol(rest + 55, NULL, 10);
		} else {
			e.why = LP_CFI_WHY_EXPR;
		}
	} else {
		e.why = LP_CFI_WHY_EXPR;
	}
	/* The return address decides first (as cfi.c does). */
	if (!rule(rules, "RIP", rip, sizeof(rip))) {
		e.cfa = LP_CFI_NONE;
		return e;
	}
	if (signal && e.cfa == LP_CFI_DEREF && reg == 7) {
		char want[64];

		snprintf(want, sizeof(want), "[DW_OP_breg7 RSP%+" PRId64 "]", off + 8);
		if (!strcmp(rip, want) && rule(rules, "RBP", rbp, sizeof(rbp)) &&
		    !strncmp(rbp, "[DW_OP_breg7 RSP", 16)) {
			e.cfa = LP_CFI_SIGNAL;
			e.cfa_reg = 7;
			e.cfa_off = off;
			e.rbp = LP_CFI_RBP_SAVED;
			e.rbp_off = strtoll(rbp + 16, NULL, 10);
			e.why = 0;
			return e;
		}
	}
	if (!strcmp(rip, "undefined")) {
		e = (struct lp_cfi_row){.cfa = LP_CFI_END};
		return e;
	}
	if (strcmp(rip, "[CFA-8]") != 0) {
		e.cfa = LP_CFI_NONE;
		e.why = LP_CFI_WHY_RA;
		return e;
	}
	if (e.cfa == LP_CFI_NONE)
		return e;
	e.why = 0;
	e.cfa_reg = (uint8_t)reg;
	e.cfa_off = off;
	if (!rule(rules, "RBP", rbp, sizeof(rbp)) || !strcmp(rbp, "same")) {
		e.rbp = LP_CFI_RBP_SAME;
	} else if (!strncmp(rbp, "[CFA", 4)) {
		e.rbp = LP_CFI_RBP_SAVED;
		e.rbp_off = strtoll(rbp + 4, NULL, 10);
	} else if (!strncmp(rbp, "[DW_OP_breg6 RBP", 16)) {
		e.rbp = LP_CFI_RBP_AT_RBP;
		e.rbp_off = strtoll(rbp + 16, NULL, 10);
	} else {
		e.rbp = LP_CFI_RBP_LOST;
	}
	return e;
}

static bool same_row(const struct lp_cfi_row *a, const struct lp_cfi_row *b)
{
	if (a->cfa != b->cfa)
		return false;
	if (a->cfa == LP_CFI_NONE)
		return a->why == b->why;
	if (a->cfa == LP_CFI_END)
		return true;
	return a->cfa_reg == b->cfa_reg && a->cfa_off == b->cfa_off && a->rbp == b->rbp &&
	       ((a->rbp != LP_CFI_RBP_SAVED && a->rbp != LP_CFI_RBP_AT_RBP) ||
		a->rbp_off == b->rbp_off);
}

/* llvm-dwarfdump's rows: where readelf says "exp", the expression. */
struct llvm_row {
	uint64_t addr;
	char *cfa, *rules;
};

static size_t llvm_rows(const char *path, struct llvm_row **out)
{
	char cmd[4200], line[8192];
	struct llvm_row *v = NULL;
	size_t n = 0, cap = 0;
	FILE *f;

	snprintf(cmd, sizeof(cmd), "llvm-dwarfdump --eh-frame '%s' 2>/dev/null", path);
	f = popen(cmd, "r");
	while (f && fgets(line, sizeof(line), f)) {
		char *p = line, *colon, *cfa, *end;

		while (*p == ' ')
			p++;
		if (strncmp(p, "0x", 2) != 0 || !(colon = strstr(p, ": CFA=")))
			continue;
		cfa = colon + 6;
		line[strcspn(line, "\n")] = 0;
		end = strstr(cfa, ": ");
		if (end)
			*end = 0;
		if (n == cap) {
			cap = cap ? 2 * cap : 1024;
			v = realloc(v, cap * sizeof(*v));
			if (!v)
				break;
		}
		v[n].addr = strtoull(p, NULL, 16);
		v[n].cfa = strdup(cfa);
		v[n].rules = strdup(end ? end + 2 : "");
		n++;
	}
	if (f)
		pclose(f);
	*out = v;
	return v ? n : 0;
}

static const struct llvm_row *llvm_at(const struct llvm_row *v, size_t n, uint64_t addr)
{
	for (size_t i = 0; i < n; i++)
		if (v[i].addr == addr)
			return &v[i];
	return NULL;
}

/* A readelf cell in llvm-dwarfdump's notation: "rsp+8" is "RSP+8", "c-16" "[CFA-16]"; "u"
 * is "undefined" for the return address and unchanged (NULL) for %rbp, as the x86-64
 * psABI has callee-saved registers keep their value until a rule says otherwise. */
static const char *cell(const char *x, char *buf, size_t len, bool is_cfa, bool is_ra)
{
	if (!x || !strcmp(x, "s"))
		return NULL;
	if (!strcmp(x, "u"))
		return is_cfa ? "?" : is_ra ? "undefined" : NULL;
	if (x[0] == 'c' && (x[1] == '-' || x[1] == '+')) {
		snprintf(buf, len, "[CFA%s]", x + 1);
		return buf;
	}
	snprintf(buf, len, "%s", x);
	for (char *p = buf; *p; p++)
		*p = (char)(*p >= 'a' && *p <= 'z' ? *p - 32 : *p);
	if (!is_cfa)
		return "other"; /* a register or a value rule */
	return buf;
}

static void compare(const char *path)
{
	char cmd[4200], line[1024], *col[32];
	struct lp_cfi c;
	struct llvm_row *lv = NULL;
	size_t rows = 0, wrong = 0, fdes = 0, nlv, forms[LP_CFI_END + 1] = {0};
	int cfa_col = -1, rbp_col = -1, ra_col = -1, r;
	bool in_fde = false, signal = false;
	unsigned long cies_s[64];
	size_t ncies_s = 0;
	FILE *f;

	r = parse_vaddr(path, &c);
	CHECK(r == 0 && c.n > 0, "%s: parsed: %d, %zu rows", path, r, c.n);
	if (r)
		return;
	nlv = llvm_rows(path, &lv);
	CHECK(nlv > 0, "%s: llvm-dwarfdump prints %zu rows", path, nlv);
	snprintf(cmd, sizeof(cmd), "readelf --debug-dump=frames-interp '%s' 2>/dev/null", path);
	f = popen(cmd, "r");
	CHECK(f != NULL, "readelf runs");
	if (!f) {
		lp_cfi_free(&c);
		return;
	}
	while (fgets(line, sizeof(line), f)) {
		int n = 0;

		/* "r10 (r10)" is one column: a register rule with the register's name. */
		for (char *tok = strtok(line, " \t\n"); tok && n < 32; tok = strtok(NULL, " \t\n"))
			if (tok[0] != '(' || n == 0)
				col[n++] = tok;
		if (n >= 4 && !strcmp(col[3], "FDE")) {
			unsigned long cie = n >= 5 && !strncmp(col[4], "cie=", 4)
						    ? strtoul(col[4] + 4, NULL, 16)
						    : ~0UL;

			in_fde = true;
			signal = false;
			for (size_t i = 0; i < ncies_s; i++)
				signal |= cies_s[i] == cie;
			fdes++;
			continue;
		}
		if (n >= 5 && !strcmp(col[3], "CIE")) {
			if (strchr(col[4], 'S') && ncies_s < 64)
				cies_s[ncies_s++] = strtoul(col[0], NULL, 16);
			in_fde = false;
			continue;
		}
		if (!in_fde || n < 2)
			continue;
		if (!strcmp(col[0], "LOC")) {
			cfa_col = rbp_col = ra_col = -1;
			for (int i = 0; i < n; i++) {
				if (!strcmp(col[i], "CFA"))
					cfa_col = i;
				else if (!strcmp(col[i], "rbp"))
					rbp_col = i;
				else if (!strcmp(col[i], "ra"))
					ra_col = i;
			}
			continue;
		}
		if (cfa_col < 0 || cfa_col >= n || strlen(col[0]) != 16)
			continue;
		uint64_t addr = strtoull(col[0], NULL, 16);
		const struct llvm_row *lr = llvm_at(lv, nlv, addr);
		char b1[128], b2[128], b3[128], rules[400], cfa[256];
		const char *x_cfa = col[cfa_col];
		const char *x_rbp = rbp_col >= 0 && rbp_col < n ? col[rbp_col] : NULL;
		const char *x_ra = ra_col >= 0 && ra_col < n ? col[ra_col] : NULL;
		const char *rbp, *ra;

		/* The expressions readelf does not print, from llvm-dwarfdump's row. */
		if (!strcmp(x_cfa, "exp"))
			snprintf(cfa, sizeof(cfa), "%s", lr ? lr->cfa : "?");
		else
			snprintf(cfa, sizeof(cfa), "%s", cell(x_cfa, b1, sizeof(b1), true, false));
		rbp = x_rbp && !strcmp(x_rbp, "exp")
			      ? (lr ? rule(lr->rules, "RBP", b2, sizeof(b2)) : "?")
			      : cell(x_rbp, b2, sizeof(b2), false, false);
		ra = x_ra && !strcmp(x_ra, "exp")
			     ? (lr ? rule(lr->rules, "RIP", b3, sizeof(b3)) : "?")
			     : cell(x_ra, b3, sizeof(b3), false, true);
		snprintf(rules, sizeof(rules), "%s%s%sRIP=%s", rbp ? "RBP=" : "", rbp ? rbp : "",
			 rbp ? ", " : "", ra ? ra : "undefined");
		struct lp_cfi_row e = expected(cfa, rules, signal);
		const struct lp_cfi_row *got = lp_cfi_find(&c, addr);
		bool ok = got && same_row(got, &e);

		rows++;
		forms[e.cfa]++;
		if (!ok && wrong++ < 5)
			fprintf(stderr,
				"%s: at %#" PRIx64 " readelf: CFA %s rbp %s ra %s (as %s: %s)"
				"  want cfa %d reg %d off %" PRId64 " rbp %d %" PRId64 " why %d;"
				" got cfa %d reg %d off %" PRId64 " rbp %d %" PRId64 " why %d\n",
				path, addr, x_cfa, x_rbp ? x_rbp : "-", x_ra ? x_ra : "-", cfa,
				rules, e.cfa, e.cfa_reg, e.cfa_off, e.rbp, e.rbp_off, e.why,
				got ? got->cfa : -1, got ? got->cfa_reg : -1,
				got ? got->cfa_off : 0, got ? got->rbp : -1, got ? got->rbp_off : 0,
				got ? got->why : -1);
	}
	pclose(f);
	CHECK(rows > 20 && wrong == 0,
	      "%s: %zu of readelf's %zu rows differ (%zu FDEs; ours %zu); rows by form: none "
	      "%zu, reg %zu, deref %zu, plt %zu, signal %zu, end %zu",
	      path, wrong, rows, fdes, c.fdes, forms[LP_CFI_NONE], forms[LP_CFI_REG],
	      forms[LP_CFI_DEREF], forms[LP_CFI_PLT], forms[LP_CFI_SIGNAL], forms[LP_CFI_END]);
	CHECK(c.fdes == fdes, "%s: %zu FDEs, readelf %zu", path, c.fdes, fdes);
	for (size_t i = 0; i < nlv; i++)
		free(lv[i].cfa), free(lv[i].rules);
	free(lv);
	lp_cfi_free(&c);
}

/* Hostile bytes end the parse, never the process: truncations of a real section and
 * random garbage (the file comes from another user). */
static void hostile(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	struct lp_cfi c;
	uint8_t junk[4096];

	CHECK(lp_cfi_read(fd, &c) == 0 && c.n > 0, "%s: read by file offset: %zu rows", path, c.n);
	lp_cfi_free(&c);
	close(fd);
	srand(1);
	for (int round = 0; round < 200; round++) {
		for (size_t i = 0; i < sizeof(junk); i++)
			junk[i] = (uint8_t)rand();
		/* A plausible length and CIE id first, so that the walk goes past the header. */
		junk[0] = 0x14, junk[1] = junk[2] = junk[3] = 0,
		junk[4] = junk[5] = junk[6] = junk[7] = 0;
		if (lp_cfi_parse(junk, (size_t)(rand() % (int)sizeof(junk)), 0x1000, &c) == 0)
			lp_cfi_free(&c);
	}
	CHECK(lp_cfi_parse(junk, 0, 0, &c) == -EINVAL, "an empty section is an error");
	fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	CHECK(lp_cfi_read(fd, &c) == -ENOEXEC, "not ELF: -ENOEXEC");
	close(fd);
}

int main(int argc, char **argv)
{
	for (int i = 1; i < argc; i++)
		compare(argv[i]);
	if (argc > 1)
		hostile(argv[1]);
	return check_done();
}
