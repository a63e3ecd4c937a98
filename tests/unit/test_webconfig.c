// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* Unit tests of the web configuration file: what exporter-toolkit accepts is read, every
 * mistake is refused (naming the line), and basic credentials are checked against bcrypt
 * hashes, cached only when right. */
#include <crypt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "base/log.h"
#include "serving/webconfig.h"

static char dir[] = "/tmp/lpwebcfg-XXXXXX";

static int load(const char *text, struct lp_webconfig **w)
{
	char path[256];
	FILE *f;

	snprintf(path, sizeof(path), "%s/web.yml", dir);
	f = fopen(path, "w");
	fputs(text, f);
	fclose(f);
	return lp_webconfig_load(path, w);
}

/* "Basic " + base64 of s. */
static const char *basic(const char *s)
{
	static const char b64[] =
		"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	static char out[256];
	size_t n = strlen(s), o = 6;

	memcpy(out, "Basic ", 6);
	for (size_t i = 0; i < n; i += 3) {
		unsigned v = (unsigned char)s[i] << 16 |
			     (i + 1 < n ? (unsigned char)s[i + 1] << 8 : 0) |
			     (i + 2 < n ? (unsigned char)s[i + 2] : 0);

		out[o++] = b64[v >> 18 & 63];
		out[o++] = b64[v >> 12 & 63];
		out[o++] = i + 1 < n ? b64[v >> 6 & 63] : '=';
		out[o++] = i + 2 < n ? b64[v & 63] : '=';
	}
	out[o] = '\0';
	return out;
}

int main(void)
{
	struct lp_webconfig *w = NULL;
	char text[512];
	const char *hash;
	char setting[64];

	lp_log_init("test_webconfig");
	if (!mkdtemp(dir))
		return 1;
	hash = crypt("sekrit", crypt_gensalt_rn("$2b$", 5, NULL, 0, setting, sizeof(setting)));
	CHECK(hash && strncmp(hash, "$2b$05$", 7) == 0, "bcrypt is available: %s", hash);
	snprintf(text, sizeof(text),
		 "tls_server_config:\n  cert_file: c.pem\n  key_file: /k.pem\n"
		 "  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.pem\n"
		 "  min_version: TLS13\nbasic_auth_users:\n  prom: %s\n"
		 "http_server_config:\n  http2: false\n  headers:\n    X-Frame-Options: deny\n",
		 hash);
	CHECK(load(text, &w) == 0 && w, "a full file loads");
	if (w) {
		char want[300];

		snprintf(want, sizeof(want), "%s/c.pem", dir);
		CHECK(w->tls && !strcmp(w->cert_file, want) && !strcmp(w->key_file, "/k.pem"),
		      "paths are relative to the file: %s", w->cert_file);
		CHECK(w->client_auth == LP_CLIENT_REQUIRE_VERIFY && w->min_version == 0x0304,
		      "client auth and minimum version");
		CHECK(w->nusers == 1 && w->nheaders == 1 && !strcmp(w->headers[0].value, "deny"),
		      "users and headers");
		CHECK(lp_webconfig_authorized(w, basic("prom:sekrit")), "right password");
		CHECK(w->ncache == 1, "remembered");
		CHECK(lp_webconfig_authorized(w, basic("prom:sekrit")), "right again, from cache");
		CHECK(!lp_webconfig_authorized(w, basic("prom:wrong")), "wrong password");
		CHECK(!lp_webconfig_authorized(w, basic("nobody:sekrit")), "unknown user");
		CHECK(!lp_webconfig_authorized(w, basic("promsekrit")), "no colon");
		CHECK(!lp_webconfig_authorized(w, NULL), "no header");
		CHECK(!lp_webconfig_authorized(w, "Bearer abc"), "another scheme");
		CHECK(!lp_webconfig_authorized(w, "Basic !!!!"), "not base64");
		CHECK(!lp_webconfig_authorized(w, basic("prom:sekrit\nx")), "a longer password");
		CHECK(w->ncache == 1, "failures are not cached");
		lp_webconfig_free(w);
	}
	{
		static const char *const bad[] = {
			"tls_server_config:\n  cert_file: c.pem\n",
			"tls_server_config:\n  cert_file: c\n  key_file: k\n  client_auth_type: "
			"x\n",
			"tls_server_config:\n  cert_file: c\n  key_file: k\n"
			"  client_auth_type: VerifyClientCertIfGiven\n",
			"tls_server_config:\n  cert_file: c\n  key_file: k\n  min_version: SSL3\n",
			"tls_server_config:\n  cert_file: c\n  key_file: k\n  certfile: x\n",
			"basic_auth_users:\n  prom: plaintext\n",
			"basic_auth_users:\n  'a:b': "
			"$2y$10$QOauhQNbBCuQDKes6eFzPeMqBSjb7Mr5DUmpZ/VcEd00UAV/LDeSi\n",
			"http_server_config:\n  headers:\n    'X-A': \"a\\r\\nSet-Cookie: x\"\n",
			"basic_auth: {}\n",
			"- a list\n",
			"tls_server_config: [\n",
		};

		for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
			w = NULL;
			CHECK(load(bad[i], &w) < 0 && !w, "refused: %s", bad[i]);
		}
	}
	CHECK(lp_webconfig_load("/nonexistent/web.yml", &w) < 0, "a missing file");
	{
		char path[256];

		snprintf(path, sizeof(path), "%s/web.yml", dir);
		unlink(path);
		rmdir(dir);
	}
	return check_done();
}
