// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* daemon/formats/pycode.c: the line of every instruction of two functions by their 3.11
 * location tables against what CPython's own co_lines() says of them (the tables and the
 * answers taken from Debian's python3.11 3.11.2, by tests/unit/pycode-gen.py: a loop, a
 * comprehension over two lines, a jump of 300 lines that takes a long varint); a table cut
 * short or empty; modules' names from their files. */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "formats/pycode.h"

static const uint8_t lt_f[] = {128, 0,	 216, 8,   9,	136, 65,  137, 5,   128, 65,  221,
			       13,  18,	 144, 49,  137, 88,  140, 88,  240, 0,	 1,   5,
			       15,  240, 0,   1,   5,	15,  136, 1,   216, 8,	 9,   136,
			       81,  137, 6,   136, 1,	136, 1,	  216, 11,  12,	 128, 72};
static const int want_f[][2] = {{0, 2},	 {2, 3},  {4, 3},  {6, 3},  {8, 3},  {10, 3}, {12, 4},
				{14, 4}, {16, 4}, {18, 4}, {20, 4}, {22, 4}, {24, 4}, {26, 4},
				{28, 4}, {30, 4}, {32, 4}, {34, 4}, {36, 4}, {38, 4}, {40, 4},
				{42, 4}, {44, 4}, {46, 5}, {48, 5}, {50, 5}, {52, 5}, {54, 5},
				{56, 5}, {58, 6}, {60, 6}};
/* firstline 2 */
static const uint8_t lt_g[] = {
	248, 128, 0, 240, 4,   1,  9,  28,  240, 0,   1,   9,	28,  240, 0,   1,  9,	28,  240,
	0,   1,	  9, 28,  221, 18, 23, 152, 1,	 145, 40,  148, 40,  240, 3,   1,  9,	28,  241,
	0,   1,	  9, 28,  244, 0,  1,  9,   28,	 128, 65,  224, 7,   8,	  136, 49, 130, 117, 128,
	117, 216, 8, 12,  245, 92, 9,  0,   12,	 15,  136, 113, 137, 54,  140, 54, 128, 77};
static const int want_g[][2] = {
	{0, 8},	   {2, 8},    {4, 10},	 {6, 10},   {8, 10},   {10, 10},  {12, 11},  {14, 11},
	{16, 11},  {18, 11},  {20, 11},	 {22, 11},  {24, 11},  {26, 11},  {28, 11},  {30, 11},
	{32, 11},  {34, 11},  {36, 11},	 {38, 11},  {40, 10},  {42, 10},  {44, 10},  {46, 10},
	{48, 10},  {50, 10},  {52, 10},	 {54, 10},  {56, 10},  {58, 12},  {60, 12},  {62, 12},
	{64, 12},  {66, 12},  {68, 12},	 {70, 13},  {72, 315}, {74, 315}, {76, 315}, {78, 315},
	{80, 315}, {82, 315}, {84, 315}, {86, 315}, {88, 315}, {90, 315}, {92, 315}, {94, 315},
	{96, 315}, {98, 315}, {100, 315}};
/* firstline 8 */

static void lines(const char *name, const uint8_t *lt, size_t n, int first, const int (*want)[2],
		  size_t nwant)
{
	size_t bad = 0;

	for (size_t i = 0; i < nwant; i++)
		if (lp_py_line(lt, n, first, want[i][0]) != want[i][1]) {
			if (!bad)
				printf("%s: offset %d: line %d, co_lines says %d\n", name,
				       want[i][0], lp_py_line(lt, n, first, want[i][0]),
				       want[i][1]);
			bad++;
		}
	CHECK(!bad, "%s: every one of %zu instructions on co_lines()'s line (%zu wrong)", name,
	      nwant, bad);
}

static void module(const char *file, const char *want)
{
	char out[128];

	lp_py_module(file, out, sizeof(out));
	CHECK(!strcmp(out, want), "module of %s: %s, want %s", file, out, want);
}

int main(void)
{
	lines("f", lt_f, sizeof(lt_f), 2, want_f, sizeof(want_f) / sizeof(want_f[0]));
	lines("g", lt_g, sizeof(lt_g), 8, want_g, sizeof(want_g) / sizeof(want_g[0]));
	CHECK(lp_py_line(lt_g, 5, 8, 400) == 8 && lp_py_line(NULL, 0, 8, 4) == 8 &&
		      lp_py_line(lt_f, sizeof(lt_f), 2, -2) == 2,
	      "a table cut short, none, a frame not begun: the first line");
	module("/usr/lib/python3/dist-packages/torch/nn/modules/module.py",
	       "torch.nn.modules.module");
	module("/usr/lib/python3/dist-packages/torch/__init__.py", "torch");
	module("/usr/lib/python3.11/threading.py", "threading");
	module("/root/.pyenv/versions/3.11.7/lib/python3.11/site-packages/x/y.py", "x.y");
	module("/work/app/decoder.py", "decoder");
	module("decoder.py", "decoder");
	module("<string>", "");
	module("<frozen importlib._bootstrap>", "");
	return check_done();
}
