// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* Escaping of untrusted text for terminals and logs (see escape.h). */
#include "escape.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* The length of the valid, printable UTF-8 sequence at s (at most n bytes), or 0 when the
 * byte there must be escaped. Overlong forms, surrogates and C1 controls do not pass. */
static size_t printable_seq(const unsigned char *s, size_t n, bool backslash)
{
	uint32_t cp;
	size_t k;

	if (s[0] >= 0x20 && s[0] < 0x7f)
		return s[0] == '\\' && !backslash ? 0 : 1;
	if (s[0] < 0xc2 || s[0] > 0xf4)
		return 0; /* C0, DEL, continuation bytes, overlong leads, beyond U+10FFFF */
	k = s[0] >= 0xf0 ? 4 : s[0] >= 0xe0 ? 3 : 2;
	if (n < k)
		return 0;
	cp = s[0] & (0xff >> (k + 1));
	for (size_t i = 1; i < k; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		cp = cp << 6 | (s[i] & 0x3f);
	}
	if ((k == 3 && cp < 0x800) || (k == 4 && (cp < 0x10000 || cp > 0x10ffff)) ||
	    (cp >= 0xd800 && cp <= 0xdfff) || (cp >= 0x80 && cp <= 0x9f))
		return 0;
	return k;
}

static size_t escape(char *out, size_t size, const char *in, size_t len, bool backslash)
{
	static const char hex[] = "0123456789abcdef";
	const unsigned char *s = (const unsigned char *)in;
	size_t o = 0, i = 0;

	if (size == 0)
		return 0;
	while (i < len) {
		size_t k = printable_seq(s + i, len - i, backslash);

		if (k) {
			if (o + k >= size)
				break;
			for (size_t j = 0; j < k; j++)
				out[o++] = (char)s[i + j];
			i += k;
			continue;
		}
		if (s[i] == '\\') {
			if (o + 2 >= size)
				break;
			out[o++] = '\\';
			out[o++] = '\\';
		} else {
			if (o + 4 >= size)
				break;
			out[o++] = '\\';
			out[o++] = 'x';
			out[o++] = hex[s[i] >> 4];
			out[o++] = hex[s[i] & 15];
		}
		i++;
	}
	out[o] = '\0';
	return o;
}

size_t lp_escape(char *out, size_t size, const char *in, size_t len)
{
	return escape(out, size, in, len, false);
}

char *lp_escape_into(char *small, size_t size, const char *in, size_t len, size_t *n)
{
	char *e = LP_ESCAPE_SIZE(len) <= size ? small : malloc(LP_ESCAPE_SIZE(len));

	if (e)
		*n = lp_escape(e, e == small ? size : LP_ESCAPE_SIZE(len), in, len);
	return e;
}

size_t lp_escape_escaped(char *out, size_t size, const char *in, size_t len)
{
	return escape(out, size, in, len, true);
}

size_t lp_escape_printable(const char *s, size_t n)
{
	return n ? printable_seq((const unsigned char *)s, n, false) : 0;
}

static bool clean(const char *s, size_t len, bool backslash)
{
	for (size_t i = 0, k; i < len; i += k)
		if (!(k = printable_seq((const unsigned char *)s + i, len - i, backslash)))
			return false;
	return true;
}

bool lp_escape_clean(const char *s, size_t len)
{
	return clean(s, len, false);
}

bool lp_escaped_clean(const char *s, size_t len)
{
	return clean(s, len, true);
}

static int hexval(char c)
{
	return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
}

size_t lp_unescape(char *s)
{
	size_t o = 0, i = 0;

	while (s[i]) {
		if (s[i] == '\\' && s[i + 1] == '\\') {
			s[o++] = '\\';
			i += 2;
		} else if (s[i] == '\\' && s[i + 1] == 'x' && hexval(s[i + 2]) >= 0 &&
			   hexval(s[i + 3]) >= 0) {
			s[o++] = (char)(hexval(s[i + 2]) << 4 | hexval(s[i + 3]));
			i += 4;
		} else {
			s[o++] = s[i++];
		}
	}
	s[o] = '\0';
	return o;
}

/* The length of the valid UTF-8 sequence at s (at most n bytes), printable or not; 0 if
 * none starts there. */
static size_t utf8_seq(const unsigned char *s, size_t n)
{
	if (s[0] < 0x80)
		return 1;
	if (s[0] == 0xc2 && n >= 2 && s[1] >= 0x80 && s[1] <= 0x9f)
		return 2; /* a C1 control: valid, if not printable */
	return printable_seq(s, n, true);
}

bool lp_utf8_valid(const char *s, size_t len)
{
	for (size_t i = 0, k; i < len; i += k)
		if (!(k = utf8_seq((const unsigned char *)s + i, len - i)))
			return false;
	return true;
}

char *lp_utf8_repair(const char *s, size_t len, size_t *out_len)
{
	char *out = malloc(3 * len + 1);
	size_t o = 0;

	if (!out)
		return NULL;
	for (size_t i = 0, k; i < len; i += k) {
		if ((k = utf8_seq((const unsigned char *)s + i, len - i))) {
			memcpy(out + o, s + i, k);
			o += k;
		} else {
			k = 1;
			memcpy(out + o, "\xef\xbf\xbd", 3);
			o += 3;
		}
	}
	out[o] = '\0';
	*out_len = o;
	return out;
}

cJSON *lp_json_escaped(const char *s)
{
	char small[LP_ESCAPE_SIZE(64)];
	size_t n;
	char *e = lp_escape_into(small, sizeof(small), s, strlen(s), &n);
	cJSON *x;

	if (!e)
		return cJSON_CreateNull();
	x = cJSON_CreateString(e);
	if (e != small)
		free(e);
	return x ? x : cJSON_CreateNull();
}

cJSON *lp_json_add_escaped(cJSON *o, const char *key, const char *s)
{
	cJSON *x = lp_json_escaped(s);

	if (x && !cJSON_AddItemToObject(o, key, x)) {
		cJSON_Delete(x);
		return NULL;
	}
	return x;
}
