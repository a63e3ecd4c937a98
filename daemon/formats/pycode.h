/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* What a CPython code object's bytes say, read from another user's process: the line of
 * an instruction by its location table, a module's name by its file. Pure. */
#ifndef LLMPROF_FORMATS_PYCODE_H
#define LLMPROF_FORMATS_PYCODE_H

#include <stddef.h>
#include <stdint.h>

/* The line of the instruction at byte offset lasti from the code's first, by a 3.11
 * location table (co_linetable); firstline where the table says none. Pure. */
int lp_py_line(const uint8_t *table, size_t n, int firstline, int lasti);

/* A module's dotted name from its file (the part below a site-packages, dist-packages or
 * pythonX.Y directory, without .py and __init__), into out. Pure. */
void lp_py_module(const char *file, char *out, size_t size);

#endif
