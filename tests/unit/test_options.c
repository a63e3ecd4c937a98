// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* Unit tests of daemon/options.c, from its table: every option is accepted on the command
 * line and in the file with the same meaning, and moves the setting it names away from
 * its default; a bad value is refused with the option named and its bound or choices; a
 * reload applies exactly the reloadable settings. */
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "base/log.h"
#include "options.h"

static char conf_path[] = "/tmp/llmprof-test-options-XXXXXX";
static char err_path[] = "/tmp/llmprof-test-options-err-XXXXXX";

/* A value of the option's type other than its default. */
static const char *sample(const struct lp_option *o, char *buf, size_t size)
{
	if (!strcmp(o->name, "pid"))
		return "1";
	if (!strcmp(o->name, "socket-mode"))
		return "0600";
	if (!strcmp(o->name, "ringbuf-kib") || !strcmp(o->name, "profile-ringbuf-kib"))
		return "8";
	if (!strcmp(o->name, "precise-ops") || o->type == LP_OPT_LIST)
		return "mul_mat,rms_norm";
	if (!strcmp(o->name, "discover-cgroup"))
		return "/system.slice/x.service";
	switch (o->type) {
	case LP_OPT_U32:
	case LP_OPT_DOUBLE:
		snprintf(buf, size, "%.0f", o->def && atof(o->def) == o->max ? o->min : o->max);
		return buf;
	case LP_OPT_CHOICE: {
		int n = 0;

		while (o->choices[n])
			n++;
		return o->choices[o->def && !strcmp(o->def, o->choices[n - 1]) ? 0 : n - 1];
	}
	case LP_OPT_STRING:
		if (!strcmp(o->name, "socket-group"))
			return "wheel";
		return !strcmp(o->name, "metrics-address") ? "127.0.0.1:1" : "/tmp/lp-sample";
	case LP_OPT_STRS:
		return "llama-server";
	default:
		return NULL;
	}
}

static int load(struct lp_config *cfg, struct lp_config_store *st, int argc, const char **argv)
{
	char *v[16];

	for (int i = 0; i < argc; i++)
		v[i] = (char *)argv[i];
	v[argc] = NULL;
	return lp_options_load(cfg, st, argc, v);
}

/* Loads the command line with stderr into err_path; returns load's result. */
static int load_quiet(struct lp_config *cfg, struct lp_config_store *st, int argc,
		      const char **argv, char *msg, size_t size)
{
	int saved = dup(2), fd = open(err_path, O_RDWR | O_TRUNC), r;
	ssize_t n;

	fflush(stderr);
	dup2(fd, 2);
	r = load(cfg, st, argc, argv);
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	n = pread(fd, msg, size - 1, 0);
	msg[n > 0 ? n : 0] = '\0';
	close(fd);
	return r;
}

static void write_conf(const char *text)
{
	FILE *f = fopen(conf_path, "w");

	fputs(text, f);
	fclose(f);
}

static char *describe(const struct lp_config *cfg, const char *key)
{
	cJSON *d = lp_config_describe(cfg), *x = cJSON_GetObjectItemCaseSensitive(d, key);
	char *s = x ? cJSON_PrintUnformatted(x) : strdup("(absent)");

	cJSON_Delete(d);
	return s;
}

/* Every option both ways, the same meaning, away from the default. */
static void both_ways(void)
{
	size_t n;
	const struct lp_option *t = lp_options_table(&n);
	struct lp_config def, cli, file;
	struct lp_config_store sd = {}, sc = {}, sf = {};
	const char *empty[] = {"llmprofd", "--config", conf_path};
	char buf[64], key[64], line[256], opt[96];

	write_conf("");
	CHECK(load(&def, &sd, 3, empty) == 0, "defaults load");
	for (size_t i = 0; i < n; i++) {
		const struct lp_option *o = &t[i];
		const char *v = o->arg ? sample(o, buf, sizeof(buf)) : NULL;
		const char *argv[6] = {"llmprofd", "--config", conf_path, opt, v, NULL};
		char *a, *b, *c;

		if (o->type == LP_OPT_ACTION || (o->flags & LP_OF_NOSTATUS) ||
		    !strcmp(o->name, "config"))
			continue;
		CHECK(!o->arg == (o->type == LP_OPT_FLAG || o->type == LP_OPT_CLEAR),
		      "%s: takes a value exactly when it is not a flag", o->name);
		if (o->arg && !v) {
			CHECK(0, "%s: no sample value for its type", o->name);
			continue;
		}
		lp_option_key(o, key, sizeof(key));
		snprintf(opt, sizeof(opt), "--%s", o->name);
		write_conf("");
		/* Nothing to track is refused: --no-discover with a --pid. */
		if (!strcmp(o->name, "no-discover")) {
			argv[4] = "--pid=1";
			write_conf("pid = 1\n");
			load(&def, &sd, 3, empty);
		}
		CHECK(load(&cli, &sc, argv[4] ? 5 : 4, argv) == 0, "%s %s is accepted", opt,
		      v ? v : "");
		if (!strcmp(o->name, "no-discover"))
			snprintf(line, sizeof(line), "%s = no\npid = 1\n", key);
		else if (o->type == LP_OPT_CLEAR)
			snprintf(line, sizeof(line), "%s = no\n", key);
		else
			snprintf(line, sizeof(line), "%s = %s\n", o->name, v ? v : "yes");
		write_conf(line);
		CHECK(load(&file, &sf, 3, empty) == 0, "'%s' in the file is accepted", line);
		a = describe(&def, key);
		b = describe(&cli, key);
		c = describe(&file, key);
		CHECK(!strcmp(b, c), "%s: the same setting both ways: %s against %s", o->name, b,
		      c);
		CHECK(strcmp(a, b) != 0, "%s: moves its setting from the default %s", o->name, a);
		free(a);
		free(b);
		free(c);
		lp_config_store_free(&sc);
		lp_config_store_free(&sf);
		if (!strcmp(o->name, "no-discover")) {
			write_conf("");
			load(&def, &sd, 3, empty);
		}
	}
	/* Command-line-only options are refused by the file. */
	for (size_t i = 0; i < n; i++) {
		if (!(t[i].flags & LP_OF_CLI))
			continue;
		snprintf(line, sizeof(line), "%s = %s\n", t[i].name, t[i].arg ? "1" : "yes");
		write_conf(line);
		CHECK(load_quiet(&file, &sf, 3, empty, buf, sizeof(buf)) < 0,
		      "the file refuses the command-line option %s", t[i].name);
		lp_config_store_free(&sf);
	}
	lp_config_store_free(&sd);
}

/* A value past its bound names the option and the bound, on both ways in. */
static void bad_values(void)
{
	size_t n;
	const struct lp_option *t = lp_options_table(&n);
	struct lp_config cfg;
	struct lp_config_store st = {};
	char bad[64], want[96], opt[96], msg[2048], line[256];

	for (size_t i = 0; i < n; i++) {
		const struct lp_option *o = &t[i];
		const char *argv[6] = {"llmprofd", "--config", conf_path, opt, bad, NULL};

		if (o->type == LP_OPT_U32 || o->type == LP_OPT_DOUBLE ||
		    !strcmp(o->name, "ringbuf-kib") || !strcmp(o->name, "profile-ringbuf-kib")) {
			snprintf(bad, sizeof(bad), "%.0f", o->max + 1);
			snprintf(want, sizeof(want), "from %.15g to %.15g", o->min, o->max);
		} else if (o->type == LP_OPT_CHOICE) {
			int k = 0;

			while (o->choices[k + 1])
				k++;
			snprintf(bad, sizeof(bad), "bogus");
			snprintf(want, sizeof(want), " or %s", o->choices[k]);
		} else if (!strcmp(o->name, "socket-mode")) {
			snprintf(bad, sizeof(bad), "01000");
			snprintf(want, sizeof(want), "from 0 to 0777");
		} else {
			continue;
		}
		snprintf(opt, sizeof(opt), "--%s", o->name);
		write_conf("");
		CHECK(load_quiet(&cfg, &st, 5, argv, msg, sizeof(msg)) < 0 && strstr(msg, opt) &&
			      strstr(msg, want),
		      "%s %s is refused naming it and '%s': %s", opt, bad, want, msg);
		lp_config_store_free(&st);
		if (o->flags & LP_OF_CLI)
			continue;
		snprintf(line, sizeof(line), "%s = %s\n", o->name, bad);
		write_conf(line);
		snprintf(opt, sizeof(opt), "%s: %s", conf_path, o->name);
		CHECK(load_quiet(&cfg, &st, 3, argv, msg, sizeof(msg)) < 0 && strstr(msg, opt) &&
			      strstr(msg, want),
		      "'%s' is refused naming the file, the setting and '%s': %s", o->name, want,
		      msg);
		lp_config_store_free(&st);
	}
}

/* A reload moves the reloadable settings, and only those. */
static void reload(void)
{
	size_t n;
	const struct lp_option *t = lp_options_table(&n);
	struct lp_config live, next, was;
	struct lp_config_store sl = {}, sn = {};
	const char *empty[] = {"llmprofd", "--config", conf_path};
	char buf[64], key[64], opt[96];

	write_conf("");
	for (size_t i = 0; i < n; i++) {
		const struct lp_option *o = &t[i];
		const char *v = o->arg ? sample(o, buf, sizeof(buf)) : NULL;
		const char *argv[6] = {"llmprofd", "--config", conf_path, opt, v, NULL};
		char *a, *b, *c;

		if (o->type == LP_OPT_ACTION || (o->flags & (LP_OF_NOSTATUS | LP_OF_CLI)) ||
		    (o->arg && !v) || !strcmp(o->name, "no-discover"))
			continue;
		snprintf(opt, sizeof(opt), "--%s", o->name);
		lp_option_key(o, key, sizeof(key));
		load(&live, &sl, 3, empty);
		was = live;
		load(&next, &sn, v ? 5 : 4, argv);
		lp_config_reload(&live, &next);
		a = describe(&was, key);
		b = describe(&live, key);
		c = describe(&next, key);
		/* Reloadable strings are applied by their owners (web-config-file). */
		if (lp_option_reloadable(key) && o->type != LP_OPT_STRING)
			CHECK(!strcmp(b, c), "%s is reloaded: %s, want %s", o->name, b, c);
		else
			CHECK(!strcmp(a, b), "%s waits for a restart: %s, was %s", o->name, b, a);
		CHECK(lp_option_reloadable(key) == !!(o->flags & LP_OF_RELOAD),
		      "%s: reloadable as the table says", key);
		free(a);
		free(b);
		free(c);
		lp_config_store_free(&sl);
		lp_config_store_free(&sn);
	}
}

/* Names are unique, short names too, and the help has every one. */
static void table(void)
{
	size_t n, len = 0;
	const struct lp_option *t = lp_options_table(&n);
	char *help = NULL, name[96];
	FILE *f = open_memstream(&help, &len);

	lp_options_usage(f);
	fclose(f);
	for (size_t i = 0; i < n; i++) {
		snprintf(name, sizeof(name), "--%s", t[i].name);
		CHECK(strstr(help, name), "--help lists %s", name);
		CHECK(t[i].help && *t[i].help, "%s has a help line", name);
		for (size_t k = 0; k < i; k++) {
			CHECK(strcmp(t[i].name, t[k].name), "%s is named once", name);
			CHECK(!t[i].short_name || t[i].short_name != t[k].short_name,
			      "-%c is given once", t[i].short_name);
		}
	}
	for (char *l = help; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL)
		CHECK(strcspn(l, "\n") <= 80, "--help fits 80 columns: %.*s", (int)strcspn(l, "\n"),
		      l);
	free(help);
}

/* Whether key is an option's name in the table (its key, for the file) */
static const struct lp_option *find(const char *name, bool by_key)
{
	size_t n;
	const struct lp_option *t = lp_options_table(&n);
	char key[64];

	for (size_t i = 0; i < n; i++)
		if (!strcmp(by_key ? lp_option_key(&t[i], key, sizeof(key)) : t[i].name, name) ||
		    (t[i].alias && !strcmp(t[i].alias, name)))
			return &t[i];
	return NULL;
}

/* llmprofd(8) describes every option of the table under .TP, and no other; the example
 * settings file names every setting the file takes, and no other. */
static void docs(const char *root)
{
	size_t n, len = 0;
	const struct lp_option *t = lp_options_table(&n);
	char path[4096], line[1024], name[96], key[64], *p;
	bool in_man[256] = {false}, in_conf[256] = {false}, after_tp = false;
	FILE *f;

	snprintf(path, sizeof(path), "%s/man/llmprofd.8", root);
	f = fopen(path, "r");
	CHECK(f, "%s opens", path);
	while (f && fgets(line, sizeof(line), f)) {
		if (after_tp && (p = strstr(line, "\\-\\-"))) {
			p += 4;
			len = 0;
			while ((p[len] >= 'a' && p[len] <= 'z') || p[len] == '.' ||
			       (p[len] == '\\' && p[len + 1] == '-'))
				len += p[len] == '\\' ? 2 : 1;
			snprintf(name, sizeof(name), "%.*s", (int)len, p);
			for (char *s = strstr(name, "\\-"); s; s = strstr(s, "\\-"))
				memmove(s, s + 1, strlen(s));
			const struct lp_option *o = find(name, false);

			CHECK(o, "llmprofd(8)'s --%s is an option of the table", name);
			if (o)
				in_man[o - t] = true;
		}
		after_tp = strncmp(line, ".TP", 3) == 0;
	}
	if (f)
		fclose(f);
	snprintf(path, sizeof(path), "%s/etc/llmprofd.conf", root);
	f = fopen(path, "r");
	CHECK(f, "%s opens", path);
	while (f && fgets(line, sizeof(line), f)) {
		const struct lp_option *o;

		if (sscanf(line, "# %63[a-z.-]", key) != 1 ||
		    strncmp(line + 2 + strlen(key), " = ", 3) != 0)
			continue;
		o = find(key, true);
		CHECK(o && !(o->flags & LP_OF_CLI), "etc/llmprofd.conf's %s is a setting", key);
		if (o)
			in_conf[o - t] = true;
	}
	if (f)
		fclose(f);
	for (size_t i = 0; i < n; i++) {
		CHECK(in_man[i], "llmprofd(8) describes --%s under .TP", t[i].name);
		CHECK(in_conf[i] || (t[i].flags & LP_OF_CLI), "etc/llmprofd.conf names %s",
		      lp_option_key(&t[i], key, sizeof(key)));
	}
}

int main(int argc, char **argv)
{
	int fd;

	lp_log_init("llmprofd");
	fd = mkstemp(conf_path);
	close(fd);
	fd = mkstemp(err_path);
	close(fd);
	table();
	both_ways();
	bad_values();
	reload();
	if (argc > 1)
		docs(argv[1]);
	unlink(conf_path);
	unlink(err_path);
	return check_done();
}
