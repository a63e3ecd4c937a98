// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* Probe sites on x86-64 prologues: the ones compilers emit for ggml and llama.cpp, and the
 * encodings that must end the walk. With --list FILE..., prints every function's site
 * instead, for tests/unit/test_sites.py to hold against objdump. */
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "formats/elfsym.h"
#include "formats/x86entry.h"

#define BYTES(...) ((const uint8_t[]){__VA_ARGS__}), sizeof((const uint8_t[]){__VA_ARGS__})

static void expect(const char *what, const uint8_t *code, size_t len, size_t skip,
		   enum lp_x86_site site)
{
	enum lp_x86_site got;
	size_t n = lp_x86_entry_skip(code, len, &got);

	CHECK(n == skip && got == site, "%s: skip %zu site %s, expected %zu %s", what, n,
	      lp_x86_site_names[got], skip, lp_x86_site_names[site]);
}

#define ENDBR 0xf3, 0x0f, 0x1e, 0xfa

static void vectors(void)
{
	/* What node-llama-cpp's libggml-cpu-*.so and libllama.so start with. */
	expect("ggml_barrier",
	       BYTES(ENDBR, 0x8b, 0x47, 0x68, 0x0f, 0xb7, 0xf0, 0x66, 0x83, 0xf8, 0x01, 0x74, 0x3e,
		     0x8b, 0x97, 0xc0, 0, 0, 0),
	       14, LP_X86_JCC);
	expect("ggml_compute_forward_mul_mat", BYTES(ENDBR, 0x41, 0x57, 0x41, 0x56), 4,
	       LP_X86_PUSH);
	expect("llama_decode", BYTES(ENDBR, 0x41, 0x54, 0x48, 0x8d, 0x74, 0x24, 0x10), 4,
	       LP_X86_PUSH);
	/* Without CET: the first instruction is emulated already. */
	expect("push %rbp first", BYTES(0x55, 0x48, 0x89, 0xe5), 0, LP_X86_PUSH);
	expect("jmp first", BYTES(0xe9, 1, 2, 3, 4), 0, LP_X86_JMP);
	expect("5-byte nop", BYTES(0x0f, 0x1f, 0x44, 0, 0, 0xc3), 0, LP_X86_NOP);
	expect("call after mov", BYTES(ENDBR, 0x48, 0x89, 0xf8, 0xe8, 0, 0, 0, 0), 7, LP_X86_CALL);
	expect("jcc rel32", BYTES(ENDBR, 0x85, 0xff, 0x0f, 0x84, 0, 1, 0, 0), 6, LP_X86_JCC);
	expect("%rip-relative load, test imm32",
	       BYTES(0x48, 0x8b, 0x05, 1, 2, 3, 4, 0xf7, 0xc7, 1, 0, 0, 0, 0x75, 0x02), 13,
	       LP_X86_JCC);
	expect("SIB with disp32 and no base, movabs",
	       BYTES(0x8b, 0x04, 0x25, 1, 2, 3, 4, 0x48, 0xb8, 1, 2, 3, 4, 5, 6, 7, 8, 0x90), 17,
	       LP_X86_NOP);
	expect("cmp %al and lea disp8", BYTES(0x3c, 0x01, 0x48, 0x8d, 0x47, 0x08, 0x7e, 0x00), 6,
	       LP_X86_JCC);

	/* Things the walk must stop at, leaving the probe on the first instruction. */
	expect("ret", BYTES(ENDBR, 0xc3), 0, LP_X86_ENTRY);
	expect("sub $8,%rsp", BYTES(ENDBR, 0x48, 0x83, 0xec, 0x08, 0x55), 0, LP_X86_ENTRY);
	expect("mov %rdi,%rsp", BYTES(0x48, 0x89, 0xfc, 0x55), 0, LP_X86_ENTRY);
	expect("mov (%rdi),%rsp", BYTES(0x48, 0x8b, 0x27, 0x55), 0, LP_X86_ENTRY);
	expect("lea 8(%rdi),%rsp", BYTES(0x48, 0x8d, 0x67, 0x08, 0x55), 0, LP_X86_ENTRY);
	expect("mov $imm,%esp", BYTES(0xbc, 1, 0, 0, 0, 0x55), 0, LP_X86_ENTRY);
	expect("xor %esp,%esp", BYTES(0x31, 0xe4, 0x55), 0, LP_X86_ENTRY);
	expect("store to memory", BYTES(0x48, 0x89, 0x07, 0x55), 0, LP_X86_ENTRY);
	expect("add to memory", BYTES(0x01, 0x07, 0x55), 0, LP_X86_ENTRY);
	expect("and $imm,%rsp (0x83 /4)", BYTES(0x48, 0x83, 0xe4, 0xf0, 0x55), 0, LP_X86_ENTRY);
	expect("not (0xf7 /2)", BYTES(0xf7, 0xd0, 0x55), 0, LP_X86_ENTRY);
	expect("push with 0x66", BYTES(0x66, 0x55), 0, LP_X86_ENTRY);
	expect("push with REX.W", BYTES(0x48, 0x55), 0, LP_X86_ENTRY);
	expect("bnd jmp", BYTES(0xf2, 0xe9, 0, 0, 0, 0), 0, LP_X86_ENTRY);
	expect("ds jcc", BYTES(0x3e, 0x74, 0x00), 0, LP_X86_ENTRY);
	expect("endbr32", BYTES(0xf3, 0x0f, 0x1e, 0xfb, 0x55), 0, LP_X86_ENTRY);
	expect("address-size prefix", BYTES(0x67, 0x8b, 0x07, 0x55), 0, LP_X86_ENTRY);
	expect("vex", BYTES(0xc5, 0xf8, 0x77, 0x55), 0, LP_X86_ENTRY);

	/* Truncated code: nothing read past len. */
	expect("truncated modrm", BYTES(ENDBR, 0x8b), 0, LP_X86_ENTRY);
	expect("truncated SIB", BYTES(0x8b, 0x04), 0, LP_X86_ENTRY);
	expect("truncated disp32", BYTES(0x8b, 0x05, 1, 2), 0, LP_X86_ENTRY);
	expect("truncated imm", BYTES(0x3d, 1, 2, 3), 0, LP_X86_ENTRY);
	expect("truncated 2-byte jcc", BYTES(ENDBR, 0x0f), 0, LP_X86_ENTRY);
	expect("empty", (const uint8_t *)"", 0, 0, LP_X86_ENTRY);
	/* Seventeen skippable instructions: the walk gives up. */
	expect("too long",
	       BYTES(0x89, 0xc0, 0x89, 0xc0, 0x89, 0xc0, 0x89, 0xc0, 0x89, 0xc0, 0x89, 0xc0, 0x89,
		     0xc0, 0x89, 0xc0, 0x89, 0xc0, 0x89, 0xc0, 0x89, 0xc0, 0x89, 0xc0, 0x89, 0xc0,
		     0x89, 0xc0, 0x89, 0xc0, 0x89, 0xc0, 0x89, 0xc0, 0x55),
	       0, LP_X86_ENTRY);
}

/* Whether a branch in the code at vaddr lands in (lo, hi]. */
static bool lands(const uint8_t *code, size_t len, uint64_t vaddr, uint64_t lo, uint64_t hi)
{
	struct lp_x86_range r = {.lo = lo, .hi = hi};

	lp_x86_mark_branched(code, len, vaddr, &r, 1);
	return r.hit;
}

static void branches(void)
{
	/* A function at 0x1000: endbr64, test %edi,%edi, je; its site is +6. */
	const uint64_t f = 0x1000, lo = f, hi = f + 6;
	struct lp_x86_range rs[40];
	size_t hits = 0;

	CHECK(lands(BYTES(ENDBR, 0x85, 0xff, 0x74, 0x02, 0xeb, 0xfa), f, lo, hi),
	      "a loop back to the skipped test");
	CHECK(lands(BYTES(ENDBR, 0x85, 0xff, 0x74, 0x02, 0xe9, 0xf9, 0xff, 0xff, 0xff), f, lo, hi),
	      "a jmp rel32 onto the site");
	CHECK(lands(BYTES(ENDBR, 0x85, 0xff, 0x74, 0x02, 0x0f, 0x85, 0xf8, 0xff, 0xff, 0xff), f, lo,
		    hi),
	      "a jcc rel32 onto the site");
	CHECK(lands(BYTES(0xe8, 0xfb, 0x0f, 0, 0), 0x1, lo, hi), "a call from another function");
	CHECK(lands(BYTES(0x74, 0x7f), f - 0x7b, lo, hi), "a jcc rel8 from just before");
	CHECK(!lands(BYTES(ENDBR, 0x85, 0xff, 0x74, 0x02, 0xeb, 0xf6), f, lo, hi),
	      "a loop to the start is an entry");
	CHECK(!lands(BYTES(ENDBR, 0x85, 0xff, 0x74, 0x02, 0xeb, 0x00), f, lo, hi),
	      "a jump past the site");
	CHECK(!lands(BYTES(ENDBR, 0x85, 0xff, 0x74, 0x02, 0xeb), f, lo, hi),
	      "a rel8 jump cut off at the end is not read");
	/* Many ranges: only the one a call lands in. */
	for (size_t i = 0; i < 40; i++)
		rs[i] = (struct lp_x86_range){.lo = 0x10000 + i * 0x100,
					      .hi = 0x10000 + i * 0x100 + 4};
	lp_x86_mark_branched(BYTES(0xe8, 0xfd, 0x1e, 0, 0), 0x10000, rs, 40); /* to 0x11f02 */
	for (size_t i = 0; i < 40; i++)
		hits += rs[i].hit;
	CHECK(hits == 1 && rs[31].hit, "a call to 0x11f02 marks the range after 0x11f00 alone");
}

/* Every function's site, one per line: "vaddr size skip site name". */
static int list(int argc, char **argv)
{
	static const char *const all[] = {"*", NULL};
	static const char *const *lists[] = {all};
	const struct lp_elf_patterns pat = {.lists = lists, .nclasses = 1, .probe_sites = true};

	for (int i = 0; i < argc; i++) {
		struct lp_elf_result r;
		int fd = open(argv[i], O_RDONLY | O_CLOEXEC), ret;

		if (fd < 0) {
			perror(argv[i]);
			return 1;
		}
		ret = lp_elf_find(fd, &pat, &r);
		close(fd);
		if (ret < 0) {
			fprintf(stderr, "%s: %s\n", argv[i], strerror(-ret));
			return 1;
		}
		printf("file %s\n", argv[i]);
		for (size_t k = 0; k < r.nsyms; k++)
			printf("%" PRIx64 " %" PRIu64 " %u %s %s\n", r.syms[k].vaddr,
			       r.syms[k].size, r.syms[k].entry_skip,
			       lp_x86_site_names[r.syms[k].site], r.syms[k].name);
		lp_elf_result_free(&r);
	}
	return 0;
}

int main(int argc, char **argv)
{
	if (argc > 1 && strcmp(argv[1], "--list") == 0)
		return list(argc - 2, argv + 2);
	vectors();
	branches();
	return check_done();
}
