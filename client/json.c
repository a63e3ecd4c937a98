// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* Reading the API's documents: absent or mistyped members read as a default, so a newer
 * daemon's extra or missing fields never crash the client. */
#include "llmprofctl.h"

#include <string.h>

#include "escape.h"

double ctl_num(const cJSON *o, const char *key, double def)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);

	return cJSON_IsNumber(v) ? v->valuedouble : def;
}

double ctl_num_path(const cJSON *o, const char *a, const char *b, double def)
{
	return ctl_num(cJSON_GetObjectItemCaseSensitive(o, a), b, def);
}

const char *ctl_str(const cJSON *o, const char *key, const char *def)
{
	const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);

	return cJSON_IsString(v) && v->valuestring ? v->valuestring : def;
}

const cJSON *ctl_engine_doc(const cJSON *doc)
{
	const char *e = ctl_str(doc, "engine", "ggml");

	return cJSON_GetObjectItemCaseSensitive(doc, e);
}

/* Replaces s (cJSON's own allocation) with its escaped form when it needs one. The daemon
 * escapes the names others chose once (\xNN, \\); this is for whatever still would reach
 * the terminal raw, without escaping the daemon's backslashes again. */
static char *escaped(char *s)
{
	size_t len = strlen(s);
	char *e;

	if (lp_escaped_clean(s, len) || !(e = cJSON_malloc(LP_ESCAPE_SIZE(len))))
		return s;
	lp_escape_escaped(e, LP_ESCAPE_SIZE(len), s, len);
	cJSON_free(s);
	return e;
}

void ctl_sanitize(cJSON *o)
{
	for (; o; o = o->next) {
		if (o->string && !(o->type & cJSON_StringIsConst))
			o->string = escaped(o->string);
		if (cJSON_IsString(o) && o->valuestring)
			o->valuestring = escaped(o->valuestring);
		ctl_sanitize(o->child);
	}
}

void ctl_write_json(FILE *f, const char *s, size_t len)
{
	static const char hex[] = "0123456789abcdef";

	for (size_t i = 0, k; i < len; i += k) {
		unsigned char c = (unsigned char)s[i];

		if ((c >= 0x20 && c < 0x7f) || c == '\n' || c == '\t' || c == '\r') {
			k = 1;
			fputc(c, f);
		} else if ((k = lp_escape_printable(s + i, len - i))) {
			fwrite(s + i, 1, k, f);
		} else if (c == 0xc2 && i + 1 < len && (unsigned char)s[i + 1] >= 0x80 &&
			   (unsigned char)s[i + 1] <= 0x9f) {
			k = 2; /* a C1 control: the same character, escaped */
			fprintf(f, "\\u00%c%c", hex[(unsigned char)s[i + 1] >> 4],
				hex[s[i + 1] & 15]);
		} else {
			k = 1;
			fputs(c == 0x7f ? "\\u007f" : "\\ufffd", f);
		}
	}
}

int ctl_print_json(const cJSON *o, bool compact)
{
	char *s = o ? (compact ? cJSON_PrintUnformatted(o) : cJSON_Print(o)) : NULL;

	if (!s)
		return CTL_DAEMON;
	ctl_write_json(stdout, s, strlen(s));
	putchar('\n');
	cJSON_free(s);
	return CTL_OK;
}

bool ctl_true(const cJSON *o, const char *key)
{
	return cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(o, key));
}
