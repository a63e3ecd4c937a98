/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* The web configuration file of Prometheus exporters (exporter-toolkit's
 * --web.config.file), for scrapes of the TCP /metrics listener from other hosts: TLS with
 * an optional client certificate check, basic authentication against bcrypt hashes, and
 * extra response headers. The same file node_exporter and ebpf_exporter read works here. */
#ifndef LLMPROF_WEBCONFIG_H
#define LLMPROF_WEBCONFIG_H

#include <stdbool.h>
#include <stddef.h>

enum lp_client_auth {
	LP_CLIENT_NONE,		   /* NoClientCert */
	LP_CLIENT_REQUEST,	   /* RequestClientCert */
	LP_CLIENT_REQUIRE_ANY,	   /* RequireAnyClientCert */
	LP_CLIENT_VERIFY_IF_GIVEN, /* VerifyClientCertIfGiven */
	LP_CLIENT_REQUIRE_VERIFY,  /* RequireAndVerifyClientCert */
};

struct lp_webuser {
	char *name, *hash;
};

struct lp_webheader {
	char *name, *value;
};

struct lp_webconfig {
	bool tls;
	char *cert_file, *key_file, *client_ca_file; /* absolute, or relative to the file */
	enum lp_client_auth client_auth;
	int min_version, max_version; /* OpenSSL's TLS1_x_VERSION, 0 for its default */
	struct lp_webuser *users;
	size_t nusers;
	struct lp_webheader *headers;
	size_t nheaders;
	/* Credentials that passed bcrypt lately, by SHA-256, so that each scrape does not pay
	 * bcrypt's cost again (as exporter-toolkit caches them). */
	unsigned char cache[16][32];
	unsigned ncache, next_cache;
};

/* Reads and checks the file; every problem is logged with the file's name and what to
 * fix. Returns 0 or -errno (-EINVAL for a file that is not right). */
int lp_webconfig_load(const char *path, struct lp_webconfig **out);

void lp_webconfig_free(struct lp_webconfig *w);

/* Whether an Authorization header value ("Basic base64(user:password)", NULL when there is
 * none) names a user of the file with the right password. */
bool lp_webconfig_authorized(struct lp_webconfig *w, const char *authorization);

/* Loads the file and, with TLS, its certificate and key, then lets go: for --check. */
int lp_webconfig_check(const char *path);

/* An OpenSSL server context for the file's TLS settings (an SSL_CTX *), or NULL (logged). */
void *lp_webconfig_tls_context(const struct lp_webconfig *w);

#endif
