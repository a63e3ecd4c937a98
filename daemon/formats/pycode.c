// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
#include "formats/pycode.h"

#include <limits.h>
#include <string.h>

/* A signed varint of the 3.11 location table: 6-bit chunks, bit 6 for more, the lowest
 * bit of the value its sign. */
static int svarint(const uint8_t *t, size_t n, size_t *i)
{
	unsigned v = 0, shift = 0;

	while (*i < n) {
		uint8_t b = t[(*i)++];

		v |= (unsigned)(b & 0x3f) << shift;
		shift += 6;
		if (!(b & 0x40) || shift > 28)
			break;
	}
	return (v & 1) ? -(int)(v >> 1) : (int)(v >> 1);
}

int lp_py_line(const uint8_t *table, size_t n, int firstline, int lasti)
{
	/* wide enough for any table's sum of deltas (65,536 bytes of 2^28 each): another
	 * process's table, read as it is */
	long line = firstline;
	size_t i = 0;
	long start = 0;

	if (lasti < 0 || !table)
		return firstline;
	while (i < n) {
		uint8_t b = table[i++];
		int kind = (b >> 3) & 15, delta = 0;
		long len = ((b & 7) + 1) * 2;

		if (!(b & 0x80))
			continue; /* not an entry's first byte */
		if (kind == 10 || kind == 11 || kind == 12)
			delta = kind - 10;
		else if (kind == 13 || kind == 14)
			delta = svarint(table, n, &i);
		line += delta;
		if (lasti >= start && lasti < start + len)
			return kind == 15 || line < 0 || line > INT_MAX ? firstline : (int)line;
		start += len;
		/* the entry's other bytes (columns) */
		while (i < n && !(table[i] & 0x80))
			i++;
	}
	return firstline;
}

void lp_py_module(const char *file, char *out, size_t size)
{
	const char *base = NULL, *c = file, *end;
	size_t k = 0;

	if (!size)
		return;
	out[0] = '\0';
	/* not a module's file: "<string>", "<frozen importlib._bootstrap>" */
	if (file[0] == '<')
		return;
	/* below the last site-packages, dist-packages or python3.N directory */
	for (const char *slash; (slash = strchr(c, '/')); c = slash + 1) {
		size_t len = (size_t)(slash - c);

		if ((len == 13 &&
		     (!strncmp(c, "site-packages", 13) || !strncmp(c, "dist-packages", 13))) ||
		    (len > 8 && !strncmp(c, "python3.", 8)))
			base = slash + 1;
	}
	if (!base) /* else its file's name */
		base = c;
	end = base + strlen(base);
	if (end - base > 3 && !strcmp(end - 3, ".py"))
		end -= 3;
	if (end - base > 9 && !strncmp(end - 9, "/__init__", 9))
		end -= 9;
	for (const char *p = base; p < end && k + 1 < size; p++)
		out[k++] = *p == '/' ? '.' : *p;
	out[k] = '\0';
}
