// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* A process's identity from /proc: its command line, its cgroup and what the path names. */
#include "tracked/identity.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "escape.h"
#include "formats/gguf.h"
#include "base/procfs.h"

void lp_identity_cmdline(char *out, size_t size, const char *raw, size_t len)
{
	char buf[LP_IDENT_CMDLINE], esc[LP_ESCAPE_SIZE(LP_IDENT_CMDLINE)];
	size_t n = len < sizeof(buf) ? len : sizeof(buf);
	size_t w;

	/* Arguments end in NULs; the last one's is not a separator. */
	while (n && raw[n - 1] == '\0')
		n--;
	for (size_t i = 0; i < n; i++)
		buf[i] = raw[i] ? raw[i] : ' ';
	w = lp_escape(esc, sizeof(esc), buf, n);
	if (!size)
		return;
	if (len <= sizeof(buf) && w < size) {
		memcpy(out, esc, w + 1);
		return;
	}
	/* Cut after the last whole character or escape that fits before the "...". */
	for (size_t i = 0, step; i < w; i += step) {
		step = esc[i] == '\\' ? (esc[i + 1] == 'x' ? 4 : 2)
				      : lp_escape_printable(esc + i, w - i);
		if (!step || i + step + 4 > size) {
			w = i;
			break;
		}
	}
	memcpy(out, esc, w);
	snprintf(out + w, size - w, "...");
}

/* Whether an option or parameter name (its first n bytes) looks like it names a secret. */
static bool secret_name(const char *s, size_t n)
{
	static const char *const words[] = {"key",  "token",	  "secret", "passw",
					    "auth", "credential", "cookie"};
	char low[64];

	if (n >= sizeof(low))
		n = sizeof(low) - 1;
	for (size_t i = 0; i < n; i++)
		low[i] = (char)tolower((unsigned char)s[i]);
	low[n] = '\0';
	for (size_t i = 0; i < sizeof(words) / sizeof(*words); i++)
		if (strstr(low, words[i]))
			return true;
	return false;
}

/* Appends n bytes of s to out (of size, at *w), as far as they fit. */
static void put(char *out, size_t size, size_t *w, const char *s, size_t n)
{
	while (n-- && *w + 1 < size)
		out[(*w)++] = *s++;
	out[*w] = '\0';
}

#define REDACTED "<redacted>"

/* One argument (n bytes at a) without its value where that is a secret; returns whether
 * the next argument is this one's value (a secret option given as two arguments). */
static bool redact_arg(char *out, size_t size, size_t *w, const char *a, size_t n)
{
	const char *eq = memchr(a, '=', n), *scheme = memmem(a, n, "://", 3), *at, *colon;
	size_t i = 0;

	if (scheme)
		scheme += 3;
	if (a[0] == '-' && !scheme) {
		size_t name = eq ? (size_t)(eq - a) : n;

		if (!secret_name(a, name)) {
			put(out, size, w, a, n);
			return false;
		}
		put(out, size, w, a, name);
		if (eq)
			put(out, size, w, "=" REDACTED, strlen("=" REDACTED));
		return !eq;
	}
	if (!scheme) {
		put(out, size, w, a, n);
		return false;
	}
	/* A URL: its password, then each query parameter named like a secret. */
	at = memchr(scheme, '@', n - (size_t)(scheme - a));
	colon = at ? memchr(scheme, ':', (size_t)(at - scheme)) : NULL;
	if (colon) {
		put(out, size, w, a, (size_t)(colon - a) + 1);
		put(out, size, w, REDACTED, strlen(REDACTED));
		i = (size_t)(at - a);
	}
	while (i < n) {
		char c = a[i++];
		size_t k = i;

		put(out, size, w, &c, 1);
		if (c != '?' && c != '&')
			continue;
		while (i < n && a[i] != '=' && a[i] != '&')
			i++;
		put(out, size, w, a + k, i - k);
		if (i < n && a[i] == '=' && secret_name(a + k, i - k)) {
			put(out, size, w, "=" REDACTED, strlen("=" REDACTED));
			while (i < n && a[i] != '&')
				i++;
		}
	}
	return false;
}

void lp_identity_cmdline_redacted(char *out, size_t size, const char *in)
{
	bool value = false;
	size_t w = 0;

	if (!size)
		return;
	out[0] = '\0';
	for (const char *p = in; *p;) {
		size_t n = strcspn(p, " ");

		if (value && n) {
			put(out, size, &w, REDACTED, strlen(REDACTED));
			value = false;
		} else if (n) {
			value = redact_arg(out, size, &w, p, n);
		}
		p += n;
		if (*p == ' ') {
			put(out, size, &w, " ", 1);
			p++;
		}
	}
}

static bool is_hex(const char *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!isxdigit((unsigned char)s[i]))
			return false;
	return true;
}

/* The part of component c (length n) that is a 64-hex container id, as runtimes name their
 * cgroups: "<id>", "docker-<id>.scope", "cri-containerd-<id>.scope", "libpod-<id>". */
static const char *container_in(const char *c, size_t n)
{
	if (n >= 6 && !memcmp(c + n - 6, ".scope", 6))
		n -= 6;
	if (n < 64)
		return NULL;
	if (!is_hex(c + n - 64, 64) || (n > 64 && c[n - 65] != '-'))
		return NULL;
	return c + n - 64;
}

/* The pod uid of a component "kubepods-besteffort-pod<uid>.slice" or "pod<uid>". */
static bool pod_in(const char *c, size_t n, char *out, size_t size)
{
	const char *p = NULL;
	size_t len;

	for (size_t i = 0; i + 3 < n; i++)
		if (!memcmp(c + i, "pod", 3) && (i == 0 || c[i - 1] == '-'))
			p = c + i + 3;
	if (!p)
		return false;
	len = (size_t)(c + n - p);
	if (len >= 6 && !memcmp(p + len - 6, ".slice", 6))
		len -= 6;
	if (len < 32 || len > 36 || len >= size)
		return false;
	for (size_t i = 0; i < len; i++) {
		char ch = p[i] == '_' ? '-' : p[i];

		if (ch != '-' && !isxdigit((unsigned char)ch))
			return false;
		out[i] = ch;
	}
	out[len] = '\0';
	return true;
}

static bool ends_with(const char *c, size_t n, const char *what)
{
	size_t w = strlen(what);

	return n > w && !memcmp(c + n - w, what, w);
}

void lp_identity_cgroup(struct lp_identity *id, const char *proc_cgroup)
{
	const char *best = NULL, *line = proc_cgroup;
	int rank = 0;
	size_t len = 0;

	id->cgroup[0] = id->unit[0] = id->container[0] = id->pod[0] = '\0';
	/* "hierarchy:controllers:path" lines: v2's "0::" first, then systemd's, then cpu's. */
	while (line && *line) {
		const char *end = strchr(line, '\n'), *c1 = strchr(line, ':'), *c2;
		size_t n = end ? (size_t)(end - line) : strlen(line);
		int r = 0;

		c2 = c1 && c1 < line + n ? memchr(c1 + 1, ':', (size_t)(line + n - c1 - 1)) : NULL;
		if (c2) {
			size_t cn = (size_t)(c2 - c1 - 1);

			if (!strncmp(line, "0::", 3))
				r = 3;
			else if (cn == 12 && !memcmp(c1 + 1, "name=systemd", 12))
				r = 2;
			else if (strstr(c1 + 1, "cpu") && strstr(c1 + 1, "cpu") < c2)
				r = 1;
			if (r > rank) {
				rank = r;
				best = c2 + 1;
				len = (size_t)(line + n - best);
			}
		}
		line = end ? end + 1 : NULL;
	}
	if (!best)
		return;
	lp_escape(id->cgroup, sizeof(id->cgroup), best, len);
	/* Its components, outermost first: the last unit and container win. */
	for (const char *c = best; c < best + len;) {
		const char *slash = memchr(c, '/', (size_t)(best + len - c));
		size_t n = slash ? (size_t)(slash - c) : (size_t)(best + len - c);
		const char *cid = container_in(c, n);

		if (cid)
			snprintf(id->container, sizeof(id->container), "%.64s", cid);
		if (ends_with(c, n, ".service") || ends_with(c, n, ".scope"))
			lp_escape(id->unit, sizeof(id->unit), c, n);
		pod_in(c, n, id->pod, sizeof(id->pod));
		c += n + 1;
	}
}

int lp_identity_read(struct lp_identity *id, pid_t pid, const char *proc_root)
{
	char path[64], buf[4096];
	int n;

	memset(id, 0, sizeof(*id));
	snprintf(path, sizeof(path), "%s/%d/cgroup", proc_root, (int)pid);
	if (lp_read_small(path, buf, sizeof(buf)) > 0)
		lp_identity_cgroup(id, buf);
	snprintf(path, sizeof(path), "%s/%d/cmdline", proc_root, (int)pid);
	n = lp_read_small(path, buf, LP_IDENT_CMDLINE + 2); /* one more: cut or not */
	if (n < 0)
		return n;
	lp_identity_cmdline(id->cmdline, sizeof(id->cmdline), buf, (size_t)n);
	return 0;
}

bool lp_identity_set_model(struct lp_identity *id, const struct lp_context *ctx)
{
	char model[sizeof(id->model)];
	const char *type;

	if (!ctx->weights_path[0])
		return false;
	lp_escape(model, sizeof(model), ctx->weights_path, strlen(ctx->weights_path));
	if (!strcmp(id->model, model))
		return false;
	memcpy(id->model, model, sizeof(model));
	id->model_bytes = ctx->weights_file_bytes;
	snprintf(id->model_arch, sizeof(id->model_arch), "%s", ctx->weights_arch);
	type = lp_gguf_file_type_name(ctx->weights_file_type);
	snprintf(id->model_type, sizeof(id->model_type), "%s", type ? type : "");
	return true;
}

const char *lp_identity_model_name(const struct lp_identity *id)
{
	const char *slash = strrchr(id->model, '/');

	return slash ? slash + 1 : id->model;
}

void lp_identity_workload(const struct lp_identity *id, const char *comm, char *out, size_t size)
{
	if (id && id->container[0])
		snprintf(out, size, "container/%.12s", id->container);
	else if (id && ends_with(id->unit, strlen(id->unit), ".service"))
		snprintf(out, size, "%s", id->unit);
	else
		lp_escape(out, size, comm, strnlen(comm, 16));
}
