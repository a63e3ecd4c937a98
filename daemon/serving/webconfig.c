// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* Reading exporter-toolkit's web configuration file (see webconfig.h). Its keys, values
 * and strictness follow exporter-toolkit's docs/web-configuration.md: unknown keys are
 * errors, relative paths are relative to the file. */
#include "serving/webconfig.h"

#include <crypt.h>
#include <errno.h>
#include <openssl/crypto.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <yaml.h>

#include "base/log.h"

struct ctx {
	const char *path;
	yaml_document_t *doc;
	struct lp_webconfig *w;
};

static int fail(const struct ctx *c, const yaml_node_t *n, const char *what, const char *fix)
{
	log_error("%s:%zu: %s%s%s", c->path, n ? n->start_mark.line + 1 : 0, what, fix ? "; " : "",
		  fix ? fix : "");
	return -EINVAL;
}

static const char *scalar(const yaml_node_t *n)
{
	return n && n->type == YAML_SCALAR_NODE ? (const char *)n->data.scalar.value : NULL;
}

/* A path as the file gives it, made relative to the file's directory. */
static char *path_of(const struct ctx *c, const char *v)
{
	const char *slash = strrchr(c->path, '/');
	char *out;

	if (v[0] == '/' || !slash)
		return strdup(v);
	if (asprintf(&out, "%.*s/%s", (int)(slash - c->path), c->path, v) < 0)
		return NULL;
	return out;
}

static int tls_version(const char *v, int *out)
{
	static const struct {
		const char *name;
		int version;
	} versions[] = {{"TLS10", TLS1_VERSION},
			{"TLS11", TLS1_1_VERSION},
			{"TLS12", TLS1_2_VERSION},
			{"TLS13", TLS1_3_VERSION}};

	for (size_t i = 0; v && i < sizeof(versions) / sizeof(versions[0]); i++)
		if (strcmp(v, versions[i].name) == 0) {
			*out = versions[i].version;
			return 0;
		}
	return -EINVAL;
}

static int client_auth(const char *v, enum lp_client_auth *out)
{
	static const char *const names[] = {
		[LP_CLIENT_NONE] = "NoClientCert",
		[LP_CLIENT_REQUEST] = "RequestClientCert",
		[LP_CLIENT_REQUIRE_ANY] = "RequireAnyClientCert",
		[LP_CLIENT_VERIFY_IF_GIVEN] = "VerifyClientCertIfGiven",
		[LP_CLIENT_REQUIRE_VERIFY] = "RequireAndVerifyClientCert",
	};

	for (size_t i = 0; v && i < sizeof(names) / sizeof(names[0]); i++)
		if (strcmp(v, names[i]) == 0) {
			*out = (enum lp_client_auth)i;
			return 0;
		}
	return -EINVAL;
}

static int read_tls(struct ctx *c, yaml_node_t *map)
{
	struct lp_webconfig *w = c->w;

	if (map->type != YAML_MAPPING_NODE)
		return fail(c, map, "tls_server_config is not a mapping", NULL);
	w->tls = true;
	for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
	     p++) {
		yaml_node_t *kn = yaml_document_get_node(c->doc, p->key);
		yaml_node_t *vn = yaml_document_get_node(c->doc, p->value);
		const char *k = scalar(kn), *v = scalar(vn);
		char **file = NULL;

		if (!k)
			return fail(c, kn, "a key of tls_server_config is not a name", NULL);
		if (!strcmp(k, "cert_file"))
			file = &w->cert_file;
		else if (!strcmp(k, "key_file"))
			file = &w->key_file;
		else if (!strcmp(k, "client_ca_file"))
			file = &w->client_ca_file;
		if (file) {
			if (!v || !*v)
				return fail(c, vn, k, "expected a file name");
			free(*file);
			*file = path_of(c, v);
			if (!*file)
				return -ENOMEM;
		} else if (!strcmp(k, "client_auth_type")) {
			if (client_auth(v, &w->client_auth) < 0)
				return fail(c, vn, "client_auth_type",
					    "expected NoClientCert, RequestClientCert, "
					    "RequireAnyClientCert, VerifyClientCertIfGiven or "
					    "RequireAndVerifyClientCert");
		} else if (!strcmp(k, "min_version") || !strcmp(k, "max_version")) {
			if (tls_version(v, k[1] == 'i' ? &w->min_version : &w->max_version) < 0)
				return fail(c, vn, k, "expected TLS10, TLS11, TLS12 or TLS13");
		} else if (!strcmp(k, "cipher_suites") || !strcmp(k, "curve_preferences") ||
			   !strcmp(k, "prefer_server_cipher_suites")) {
			log_warning("%s:%zu: %s is not applied: OpenSSL's defaults are used, "
				    "ignoring",
				    c->path, kn->start_mark.line + 1, k);
		} else {
			return fail(c, kn, "unknown key in tls_server_config",
				    "see exporter-toolkit's web configuration");
		}
	}
	if (!w->cert_file || !w->key_file)
		return fail(c, map, "tls_server_config needs cert_file and key_file", NULL);
	if (w->client_auth >= LP_CLIENT_VERIFY_IF_GIVEN && !w->client_ca_file)
		return fail(c, map, "client_auth_type verifies certificates",
			    "client_ca_file must name the CA that signs them");
	return 0;
}

static int read_users(struct ctx *c, yaml_node_t *map)
{
	struct lp_webconfig *w = c->w;
	size_t n;

	if (map->type != YAML_MAPPING_NODE)
		return fail(c, map, "basic_auth_users is not a mapping of user: bcrypt hash", NULL);
	n = (size_t)(map->data.mapping.pairs.top - map->data.mapping.pairs.start);
	w->users = calloc(n ? n : 1, sizeof(*w->users));
	if (!w->users)
		return -ENOMEM;
	for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
	     p++) {
		yaml_node_t *kn = yaml_document_get_node(c->doc, p->key);
		yaml_node_t *vn = yaml_document_get_node(c->doc, p->value);
		const char *k = scalar(kn), *v = scalar(vn);

		if (!k || !*k || strchr(k, ':'))
			return fail(c, kn, "a user name is empty or holds ':'", NULL);
		if (!v || strncmp(v, "$2", 2) != 0 || strlen(v) != 60)
			return fail(c, vn, "a password is not a bcrypt hash",
				    "make one with 'htpasswd -nBC 10 \"\" | tr -d :'");
		w->users[w->nusers].name = strdup(k);
		w->users[w->nusers].hash = strdup(v);
		if (!w->users[w->nusers].name || !w->users[w->nusers++].hash)
			return -ENOMEM;
	}
	return 0;
}

static int read_http(struct ctx *c, yaml_node_t *map)
{
	struct lp_webconfig *w = c->w;

	if (map->type != YAML_MAPPING_NODE)
		return fail(c, map, "http_server_config is not a mapping", NULL);
	for (yaml_node_pair_t *p = map->data.mapping.pairs.start; p < map->data.mapping.pairs.top;
	     p++) {
		yaml_node_t *kn = yaml_document_get_node(c->doc, p->key);
		yaml_node_t *vn = yaml_document_get_node(c->doc, p->value);
		const char *k = scalar(kn);

		if (k && !strcmp(k, "http2")) {
			continue; /* HTTP/1.1 is all evhttp speaks; Prometheus falls back to it */
		} else if (k && !strcmp(k, "headers") && vn->type == YAML_MAPPING_NODE) {
			size_t n =
				(size_t)(vn->data.mapping.pairs.top - vn->data.mapping.pairs.start);

			w->headers = calloc(n ? n : 1, sizeof(*w->headers));
			if (!w->headers)
				return -ENOMEM;
			for (yaml_node_pair_t *h = vn->data.mapping.pairs.start;
			     h < vn->data.mapping.pairs.top; h++) {
				const char *hk = scalar(yaml_document_get_node(c->doc, h->key));
				const char *hv = scalar(yaml_document_get_node(c->doc, h->value));

				if (!hk || !hv || strpbrk(hk, ":\r\n") || strpbrk(hv, "\r\n"))
					return fail(c, vn, "a header is not 'Name: value'", NULL);
				w->headers[w->nheaders].name = strdup(hk);
				w->headers[w->nheaders].value = strdup(hv);
				if (!w->headers[w->nheaders].name ||
				    !w->headers[w->nheaders++].value)
					return -ENOMEM;
			}
		} else {
			return fail(c, kn, "unknown key in http_server_config",
				    "http2 and headers are known");
		}
	}
	return 0;
}

int lp_webconfig_load(const char *path, struct lp_webconfig **out)
{
	struct lp_webconfig *w = calloc(1, sizeof(*w));
	yaml_parser_t parser;
	yaml_document_t doc;
	struct ctx c = {.path = path, .doc = &doc, .w = w};
	yaml_node_t *root;
	FILE *f;
	int r = 0;

	*out = NULL;
	if (!w)
		return -ENOMEM;
	f = fopen(path, "re");
	if (!f) {
		r = log_error_errno(-errno, "web configuration '%s': %m", path);
		free(w);
		return r;
	}
	yaml_parser_initialize(&parser);
	yaml_parser_set_input_file(&parser, f);
	if (!yaml_parser_load(&parser, &doc)) {
		log_error("%s:%zu: not YAML: %s", path, parser.problem_mark.line + 1,
			  parser.problem ? parser.problem : "?");
		yaml_parser_delete(&parser);
		fclose(f);
		free(w);
		return -EINVAL;
	}
	root = yaml_document_get_root_node(&doc);
	if (root && root->type != YAML_MAPPING_NODE)
		r = fail(&c, root, "the file is not a mapping", NULL);
	for (yaml_node_pair_t *p = root && !r ? root->data.mapping.pairs.start : NULL;
	     p && p < root->data.mapping.pairs.top && r == 0; p++) {
		yaml_node_t *kn = yaml_document_get_node(&doc, p->key);
		yaml_node_t *vn = yaml_document_get_node(&doc, p->value);
		const char *k = scalar(kn);

		if (k && !strcmp(k, "tls_server_config"))
			r = read_tls(&c, vn);
		else if (k && !strcmp(k, "basic_auth_users"))
			r = read_users(&c, vn);
		else if (k && !strcmp(k, "http_server_config"))
			r = read_http(&c, vn);
		else
			r = fail(&c, kn, "unknown key",
				 "tls_server_config, basic_auth_users and http_server_config are "
				 "known");
	}
	yaml_document_delete(&doc);
	yaml_parser_delete(&parser);
	fclose(f);
	if (r < 0) {
		lp_webconfig_free(w);
		return r;
	}
	*out = w;
	return 0;
}

void lp_webconfig_free(struct lp_webconfig *w)
{
	if (!w)
		return;
	free(w->cert_file);
	free(w->key_file);
	free(w->client_ca_file);
	for (size_t i = 0; i < w->nusers; i++) {
		free(w->users[i].name);
		free(w->users[i].hash);
	}
	free(w->users);
	for (size_t i = 0; i < w->nheaders; i++) {
		free(w->headers[i].name);
		free(w->headers[i].value);
	}
	free(w->headers);
	free(w);
}

/* bcrypt of password against hash: crypt_r() reads the cost and salt from the hash. */
static bool bcrypt_ok(const char *password, const char *hash)
{
	static struct crypt_data *cd;
	const char *got;

	if (!cd && !(cd = calloc(1, sizeof(*cd))))
		return false;
	got = crypt_r(password, hash, cd);
	return got && strlen(got) == strlen(hash) && CRYPTO_memcmp(got, hash, strlen(hash)) == 0;
}

bool lp_webconfig_authorized(struct lp_webconfig *w, const char *authorization)
{
	/* Checked against for unknown users too, so that timing does not tell names apart. */
	static const char dummy[] = "$2y$10$QOauhQNbBCuQDKes6eFzPeMqBSjb7Mr5DUmpZ/VcEd00UAV/LDeSi";
	unsigned char plain[512], digest[32];
	const char *hash = dummy, *b64;
	size_t len, n;
	unsigned dlen = 0;
	char *colon;
	int got;

	if (!w || !authorization || strncasecmp(authorization, "Basic ", 6) != 0)
		return false;
	b64 = authorization + 6;
	len = strlen(b64);
	if (len == 0 || len % 4 || len / 4 * 3 >= sizeof(plain))
		return false;
	got = EVP_DecodeBlock(plain, (const unsigned char *)b64, (int)len);
	if (got < 0)
		return false;
	n = (size_t)got - (b64[len - 1] == '=') - (b64[len - 2] == '=');
	plain[n] = '\0';
	if (strlen((char *)plain) != n || !(colon = strchr((char *)plain, ':')))
		return false;
	*colon = '\0';
	for (size_t i = 0; i < w->nusers; i++)
		if (strcmp(w->users[i].name, (char *)plain) == 0)
			hash = w->users[i].hash;
	*colon = ':';
	/* The cache key covers the hash too, so a changed password is checked anew. */
	{
		EVP_MD_CTX *md = EVP_MD_CTX_new();

		if (!md || !EVP_DigestInit_ex(md, EVP_sha256(), NULL) ||
		    !EVP_DigestUpdate(md, plain, n) || !EVP_DigestUpdate(md, hash, strlen(hash)) ||
		    !EVP_DigestFinal_ex(md, digest, &dlen) || dlen != sizeof(digest)) {
			EVP_MD_CTX_free(md);
			return false;
		}
		EVP_MD_CTX_free(md);
	}
	for (unsigned i = 0; i < w->ncache; i++)
		if (hash != dummy && CRYPTO_memcmp(w->cache[i], digest, sizeof(digest)) == 0)
			return true;
	*colon = '\0';
	if (!bcrypt_ok(colon + 1, hash) || hash == dummy) {
		OPENSSL_cleanse(plain, sizeof(plain));
		return false;
	}
	OPENSSL_cleanse(plain, sizeof(plain));
	memcpy(w->cache[w->next_cache], digest, sizeof(digest));
	w->next_cache = (w->next_cache + 1) % 16;
	w->ncache += w->ncache < 16;
	return true;
}

static int verify_mode(enum lp_client_auth a)
{
	switch (a) {
	case LP_CLIENT_NONE:
		return SSL_VERIFY_NONE;
	case LP_CLIENT_REQUEST:
	case LP_CLIENT_VERIFY_IF_GIVEN:
		return SSL_VERIFY_PEER;
	case LP_CLIENT_REQUIRE_ANY:
	case LP_CLIENT_REQUIRE_VERIFY:
		return SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT;
	}
	return SSL_VERIFY_NONE;
}

/* Request and RequireAny take any certificate, as Go's tls package does for them; the
 * verdict is read per connection (lp_webconfig_client_verified in server.c's terms). */
static int accept_any(int ok, X509_STORE_CTX *x)
{
	(void)ok;
	(void)x;
	return 1;
}

int lp_webconfig_check(const char *path)
{
	struct lp_webconfig *w;
	SSL_CTX *tls = NULL;
	int r = lp_webconfig_load(path, &w);

	if (r < 0)
		return r;
	if (w->tls && !(tls = lp_webconfig_tls_context(w)))
		r = -EINVAL;
	SSL_CTX_free(tls);
	lp_webconfig_free(w);
	return r;
}

void *lp_webconfig_tls_context(const struct lp_webconfig *w)
{
	SSL_CTX *ctx = SSL_CTX_new(TLS_server_method());
	unsigned long e;

	if (!ctx)
		goto fail;
	SSL_CTX_set_min_proto_version(ctx, w->min_version ? w->min_version : TLS1_2_VERSION);
	if (w->max_version)
		SSL_CTX_set_max_proto_version(ctx, w->max_version);
	if (SSL_CTX_use_certificate_chain_file(ctx, w->cert_file) != 1) {
		e = ERR_get_error();
		log_error("TLS certificate '%s': %s", w->cert_file, ERR_reason_error_string(e));
		goto out;
	}
	if (SSL_CTX_use_PrivateKey_file(ctx, w->key_file, SSL_FILETYPE_PEM) != 1 ||
	    SSL_CTX_check_private_key(ctx) != 1) {
		e = ERR_get_error();
		log_error("TLS key '%s': %s", w->key_file, ERR_reason_error_string(e));
		goto out;
	}
	if (w->client_ca_file && SSL_CTX_load_verify_locations(ctx, w->client_ca_file, NULL) != 1) {
		e = ERR_get_error();
		log_error("client CA '%s': %s", w->client_ca_file, ERR_reason_error_string(e));
		goto out;
	}
	SSL_CTX_set_verify(ctx, verify_mode(w->client_auth),
			   w->client_auth == LP_CLIENT_REQUEST ||
					   w->client_auth == LP_CLIENT_REQUIRE_ANY
				   ? accept_any
				   : NULL);
	return ctx;
fail:
	log_error("TLS: %s", ERR_reason_error_string(ERR_get_error()));
out:
	SSL_CTX_free(ctx);
	return NULL;
}
