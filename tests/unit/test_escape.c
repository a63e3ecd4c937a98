// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* Unit tests of escaping untrusted text: what a terminal would obey never passes, printable
 * text passes unchanged, the output is bounded, and every escape reads back to its byte. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "escape.h"

static const char *esc(const char *in, size_t len)
{
	static char out[256];

	lp_escape(out, sizeof(out), in, len);
	return out;
}

#define ESC(lit) esc(lit, sizeof(lit) - 1)

/* Undoes lp_escape(): \\ and \xNN back to bytes. */
static size_t unescape(const char *s, char *out)
{
	size_t o = 0;

	while (*s) {
		if (s[0] == '\\' && s[1] == '\\') {
			out[o++] = '\\';
			s += 2;
		} else if (s[0] == '\\' && s[1] == 'x') {
			char h[3] = {s[2], s[3], 0};

			out[o++] = (char)strtoul(h, NULL, 16);
			s += 4;
		} else {
			out[o++] = *s++;
		}
	}
	return o;
}

int main(void)
{
	uint64_t x = 88172645463325252ULL;

	CHECK(!strcmp(ESC("llama-server"), "llama-server"), "plain ASCII passes");
	CHECK(!strcmp(ESC("/opt/модели/ggml"), "/opt/модели/ggml"), "UTF-8 passes");
	CHECK(!strcmp(ESC("\x1b]0;pwned\x07"), "\\x1b]0;pwned\\x07"), "OSC window title: %s",
	      ESC("\x1b]0;pwned\x07"));
	CHECK(!strcmp(ESC("a\nb\rc\td"), "a\\x0ab\\x0dc\\x09d"), "line breaks: %s",
	      ESC("a\nb\rc\td"));
	CHECK(!strcmp(ESC("\x1b[2J\x7f"), "\\x1b[2J\\x7f"), "clear screen, DEL");
	CHECK(!strcmp(ESC("\xc2\x9b"
			  "31m"),
		      "\\xc2\\x9b31m"),
	      "C1 CSI as UTF-8: %s",
	      ESC("\xc2\x9b"
		  "31m"));
	CHECK(!strcmp(ESC("\x9b"
			  "31m"),
		      "\\x9b31m"),
	      "a lone C1 byte");
	CHECK(!strcmp(ESC("\xc0\xaf"), "\\xc0\\xaf"), "overlong UTF-8");
	CHECK(!strcmp(ESC("\xed\xa0\x80"), "\\xed\\xa0\\x80"), "a UTF-16 surrogate");
	CHECK(!strcmp(ESC("\xe2\x82"), "\\xe2\\x82"), "a truncated sequence");
	CHECK(!strcmp(ESC("a\\x1b"), "a\\\\x1b"), "a backslash is escaped: %s", ESC("a\\x1b"));
	CHECK(!strcmp(esc("a\0b", 3), "a\\x00b"), "NUL inside");
	CHECK(lp_escape_clean("ggml", 4) && !lp_escape_clean("a\x1b", 2), "clean");

	/* The client's pass over the daemon's answers: what the daemon escaped stays as it is,
	 * what it did not still gets escaped. */
	{
		char out[64];

		lp_escape_escaped(out, sizeof(out), "x\\x1b[2J\\x0ay", 13);
		CHECK(!strcmp(out, "x\\x1b[2J\\x0ay"), "escaped once, not twice: %s", out);
		lp_escape_escaped(out, sizeof(out), "a\\\x1b", 3);
		CHECK(!strcmp(out, "a\\\\x1b"), "a raw ESC is still escaped: %s", out);
		CHECK(lp_escaped_clean("a\\x1b", 5) && !lp_escaped_clean("a\x1b", 2),
		      "clean once escaped");
	}

	/* Into a small buffer when it fits at worst, else into one of its own. */
	{
		char small[LP_ESCAPE_SIZE(4)], big[LP_ESCAPE_SIZE(64)], *e;
		const char *longer = "a name \x1b longer than four bytes \xff";
		size_t n = 0;

		e = lp_escape_into(small, sizeof(small), "a\x1b", 2, &n);
		CHECK(e == small && n == 5 && !strcmp(e, "a\\x1b"), "fits the small buffer: %s", e);
		e = lp_escape_into(small, sizeof(small), longer, strlen(longer), &n);
		lp_escape(big, sizeof(big), longer, strlen(longer));
		CHECK(e && e != small && n == strlen(big) && !strcmp(e, big),
		      "a longer one in a buffer of its own, the same text: %s", e ? e : "(null)");
		if (e != small)
			free(e);
	}

	/* UTF-8 validity, and its repair: every answer the daemon sends is UTF-8. */
	CHECK(lp_utf8_valid("llama \xd0\xbc\xf0\x9f\xa6\x99", 12) &&
		      lp_utf8_valid("\x1b\xc2\x9b", 3),
	      "UTF-8, controls included, is valid");
	CHECK(!lp_utf8_valid("a\xff", 2) && !lp_utf8_valid("\xc0\xaf", 2) &&
		      !lp_utf8_valid("\xed\xa0\x80", 3) && !lp_utf8_valid("\xe2\x82", 2),
	      "a stray byte, an overlong form, a surrogate, a cut sequence are not");
	{
		size_t n;
		char *r = lp_utf8_repair("a\xff\xe2\x82"
					 "b\xd0\xbc",
					 7, &n);

		CHECK(r && n == 13 &&
			      !memcmp(r,
				      "a\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"
				      "b\xd0\xbc",
				      14),
		      "each bad byte becomes U+FFFD, the rest passes: %s", r);
		free(r);
	}
	{
		cJSON *o = cJSON_CreateObject();
		char *text;

		lp_json_add_escaped(o, "exe", "/tmp/\xff\x1b");
		text = cJSON_PrintUnformatted(o);
		CHECK(text && !strcmp(text, "{\"exe\":\"/tmp/\\\\xff\\\\x1b\"}"),
		      "a JSON answer carries the name escaped once: %s", text);
		free(text);
		cJSON_Delete(o);
	}

	/* Bounded: a cut never splits an escape or a character. */
	{
		char small[6];
		size_t n = lp_escape(small, sizeof(small),
				     "ab\x1b"
				     "cd",
				     5);

		CHECK(n == 2 && !strcmp(small, "ab"), "cut before an escape: %s", small);
		n = lp_escape(small, sizeof(small), "abcdйx", 7);
		CHECK(n == 4 && !strcmp(small, "abcd"), "cut before a character: %s", small);
		CHECK(lp_escape(small, 0, "a", 1) == 0, "size 0 writes nothing");
	}

	/* Random bytes: no control byte survives, and the escapes read back exactly. */
	for (int round = 0; round < 20000; round++) {
		char in[32], out[LP_ESCAPE_SIZE(32)], back[32];
		size_t len = 1 + round % 32, n;
		int bad = 0;

		for (size_t i = 0; i < len; i++) {
			x ^= x << 13;
			x ^= x >> 7;
			x ^= x << 17;
			in[i] = (char)x;
		}
		n = lp_escape(out, sizeof(out), in, len);
		for (size_t i = 0; i < n; i++) {
			unsigned char c = (unsigned char)out[i];

			bad |= c < 0x20 || c == 0x7f;
			if (c == 0xc2 && i + 1 < n)
				bad |= (unsigned char)out[i + 1] >= 0x80 &&
				       (unsigned char)out[i + 1] <= 0x9f;
		}
		CHECK(!bad && strlen(out) == n, "round %d: no control byte in the output", round);
		CHECK(unescape(out, back) == len && !memcmp(back, in, len), "round %d: reads back",
		      round);
		CHECK(lp_utf8_valid(out, n), "round %d: the escaped text is UTF-8", round);
		{
			char again[LP_ESCAPE_SIZE(LP_ESCAPE_SIZE(32))], *r;
			size_t m;

			char copy[LP_ESCAPE_SIZE(32)];

			memcpy(copy, out, n + 1);
			CHECK(lp_unescape(copy) == len && !memcmp(copy, in, len),
			      "round %d: lp_unescape reads it back", round);
			lp_escape_escaped(again, sizeof(again), out, n);
			CHECK(!strcmp(again, out), "round %d: the client does not escape it again",
			      round);
			r = lp_utf8_repair(in, len, &m);
			CHECK(r && lp_utf8_valid(r, m) && (m == len) == lp_utf8_valid(in, len),
			      "round %d: repaired is UTF-8, and changed only if it was not", round);
			free(r);
		}
	}
	return check_done();
}
