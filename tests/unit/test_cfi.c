// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* daemon/cfi.c against an independent reading of the same files: binutils' readelf
 * --debug-dump=frames-interp prints every FDE's rows as a table (LOC, CFA, rbp, ra). Every
 * row readelf prints must be the rule lp_cfi_find gives at that address: rsp+N and rbp+N
 * as such, anything else (an expression, another register) as LP_CFI_NONE; rbp saved at
 * c-N, or unchanged.
 *
 *   test_cfi FILE...   (the test's own executable, libc, libstdc++: "zR" and "zPLR" CIEs,
 *                       remember/restore_state, DWARF expressions in PLT entries) */
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

#include "cfi.h"
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

struct expect {
	uint8_t reg, rbp;
	int64_t off, rbp_off;
};

/* One readelf row: the CFA column, and the rbp and ra columns where the table has them. */
static struct expect expected(const char *cfa, const char *rbp, const char *ra)
{
	struct expect e = {0};
	char *end;

	if (ra && strcmp(ra, "c-8") != 0)
		return e; /* the return address not at CFA - 8: no rule to follow */
	if (!strncmp(cfa, "rsp+", 4) || !strncmp(cfa, "rbp+", 4)) {
		e.off = strtoll(cfa + 4, &end, 10);
		if (*end == 0)
			e.reg = cfa[1] == 's' ? LP_CFI_RSP : LP_CFI_RBP;
	}
	if (!e.reg)
		return e;
	if (!rbp || !strcmp(rbp, "u") || !strcmp(rbp, "s")) {
		e.rbp = LP_CFI_RBP_SAME;
	} else if (!strncmp(rbp, "c", 1)) {
		e.rbp = LP_CFI_RBP_SAVED;
		e.rbp_off = strtoll(rbp + 1, NULL, 10);
	} else {
		e.rbp = LP_CFI_RBP_LOST;
	}
	return e;
}

static void compare(const char *path)
{
	char cmd[4200], line[1024], *col[32];
	struct lp_cfi c;
	size_t rows = 0, wrong = 0, fdes = 0;
	int cfa_col = -1, rbp_col = -1, ra_col = -1, r;
	bool in_fde = false;
	FILE *f;

	r = parse_vaddr(path, &c);
	CHECK(r == 0 && c.n > 0, "%s: parsed: %d, %zu rows", path, r, c.n);
	if (r)
		return;
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
			in_fde = true;
			fdes++;
			continue;
		}
		if (n >= 4 && !strcmp(col[3], "CIE")) {
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
		struct expect e =
			expected(col[cfa_col], rbp_col >= 0 && rbp_col < n ? col[rbp_col] : NULL,
				 ra_col >= 0 && ra_col < n ? col[ra_col] : NULL);
		const struct lp_cfi_row *got = lp_cfi_find(&c, addr);
		bool ok = got && got->cfa_reg == e.reg &&
			  (e.reg == LP_CFI_NONE ||
			   (got->cfa_off == e.off && got->rbp == e.rbp &&
			    (e.rbp != LP_CFI_RBP_SAVED || got->rbp_off == e.rbp_off)));

		rows++;
		if (!ok && wrong++ < 5)
			fprintf(stderr,
				"%s: at %#" PRIx64
				" readelf: CFA %s rbp %s ra %s; got reg %d off %" PRId64
				" rbp %d %" PRId64 "\n",
				path, addr, col[cfa_col],
				rbp_col >= 0 && rbp_col < n ? col[rbp_col] : "-",
				ra_col >= 0 && ra_col < n ? col[ra_col] : "-",
				got ? got->cfa_reg : -1, got ? got->cfa_off : 0,
				got ? got->rbp : -1, got ? got->rbp_off : 0);
	}
	pclose(f);
	CHECK(rows > 20 && wrong == 0, "%s: %zu of readelf's %zu rows (%zu FDEs; ours %zu) differ",
	      path, wrong, rows, fdes, c.fdes);
	CHECK(c.fdes == fdes, "%s: %zu FDEs, readelf %zu", path, c.fdes, fdes);
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
