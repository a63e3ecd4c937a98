/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* Untrusted text made safe for a terminal, a log line or a JSON answer: process names, paths and symbol
 * names come from other users, and an escape sequence or a newline in them must not reach
 * an administrator's terminal or forge a log line. Shared by the daemon and the client. */
#ifndef LLMPROF_ESCAPE_H
#define LLMPROF_ESCAPE_H

#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>

#include <cjson/cJSON.h>

/* Copies in[0..len) to out (always NUL-terminated, cut at size) with every byte that is not
 * printable written as \xNN, as systemd and `ps` do: C0 controls and DEL, C1 controls
 * (U+0080..U+009F, which some terminals obey), bytes that are not valid UTF-8, and the
 * backslash itself (as \\), so that the result reads back unambiguously. Printable ASCII and
 * valid printable UTF-8 pass unchanged. Returns the length written. */
size_t lp_escape(char *out, size_t size, const char *in, size_t len);

/* The same for text escaped once already (the daemon's answers, which escape every name
 * another user chose): a backslash passes as it is, so that nothing is escaped twice, and
 * any other byte lp_escape() escapes still is. */
size_t lp_escape_escaped(char *out, size_t size, const char *in, size_t len);

/* The room lp_escape() needs for len bytes of input at worst, with the NUL. */
#define LP_ESCAPE_SIZE(len) (4 * (len) + 1)

/* in[0..len) escaped with lp_escape() into small (size bytes) when it fits there at worst,
 * else into a buffer malloc'ed for it, to free() when it is not small. NULL when out of
 * memory; *n: the length written. */
char *lp_escape_into(char *small, size_t size, const char *in, size_t len, size_t *n);

/* The length of the printable character (ASCII or valid UTF-8, not a C1 control) at s, of
 * at most n bytes, or 0 when lp_escape() would escape the byte there. */
size_t lp_escape_printable(const char *s, size_t n);

/* Whether s[0..len) would come out of lp_escape() unchanged. */
bool lp_escape_clean(const char *s, size_t len);

/* Whether s[0..len) would come out of lp_escape_escaped() unchanged. */
bool lp_escaped_clean(const char *s, size_t len);

/* Undoes lp_escape() in place: \\ and \xNN (lowercase hex, as written) back to their
 * bytes; anything else stays as it is. Returns the length, which is less than strlen(s)
 * when the bytes hold a NUL. */
size_t lp_unescape(char *s);

/* Whether s[0..len) is valid UTF-8 (no overlong form, surrogate or code point past
 * U+10FFFF). */
bool lp_utf8_valid(const char *s, size_t len);

/* A copy of s[0..len) (malloc'ed, NUL-terminated, its length in *out_len) with each byte
 * that is not part of valid UTF-8 replaced by U+FFFD; NULL when out of memory. */
char *lp_utf8_repair(const char *s, size_t len, size_t *out_len);

/* Adds s to o under key, escaped once with lp_escape(): how the daemon answers with a
 * name another user chose (a process's, a file's, a symbol's, an environment value), so
 * that every answer is UTF-8 and reads back unambiguously. null when out of memory. */
cJSON *lp_json_add_escaped(cJSON *o, const char *key, const char *s);

/* The same as an item of its own, for arrays. */
cJSON *lp_json_escaped(const char *s);

/* Adds a count to o under key (exact up to 2^53, as JSON numbers are read). */
static inline cJSON *lp_json_add_u64(cJSON *o, const char *key, uint64_t v)
{
	return cJSON_AddNumberToObject(o, key, (double)v);
}

#endif
