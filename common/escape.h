/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* Untrusted text made safe for a terminal or a log line: process names, paths and symbol
 * names come from other users, and an escape sequence or a newline in them must not reach
 * an administrator's terminal or forge a log line. Shared by the daemon and the client. */
#ifndef LLMPROF_ESCAPE_H
#define LLMPROF_ESCAPE_H

#include <stdbool.h>
#include <stddef.h>

/* Copies in[0..len) to out (always NUL-terminated, cut at size) with every byte that is not
 * printable written as \xNN, as systemd and `ps` do: C0 controls and DEL, C1 controls
 * (U+0080..U+009F, which some terminals obey), bytes that are not valid UTF-8, and the
 * backslash itself (as \\), so that the result reads back unambiguously. Printable ASCII and
 * valid printable UTF-8 pass unchanged. Returns the length written. */
size_t lp_escape(char *out, size_t size, const char *in, size_t len);

/* The room lp_escape() needs for len bytes of input at worst, with the NUL. */
#define LP_ESCAPE_SIZE(len) (4 * (len) + 1)

/* The length of the printable character (ASCII or valid UTF-8, not a C1 control) at s, of
 * at most n bytes, or 0 when lp_escape() would escape the byte there. */
size_t lp_escape_printable(const char *s, size_t n);

/* Whether s[0..len) would come out of lp_escape() unchanged. */
bool lp_escape_clean(const char *s, size_t len);

#endif
