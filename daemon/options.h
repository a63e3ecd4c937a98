/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* Settings: defaults, then /etc/llmprofd/llmprofd.conf (INI, read with inih), then the
 * command line. One table (options.c) holds every option once: its names, its type and
 * where it is stored, its bounds or choices, its default, whether a reload applies it and
 * whether the file may set it, and its help line. getopt's table, --help, the file's
 * parser, the status's description and the reload all read it. */
#ifndef LLMPROF_OPTIONS_H
#define LLMPROF_OPTIONS_H

#include <cjson/cJSON.h>
#include <stdio.h>

#include "base/config.h"

enum lp_opt_type {
	LP_OPT_CUSTOM, /* its parse and describe functions do all */
	LP_OPT_FLAG,   /* a bool, set by the flag */
	LP_OPT_CLEAR,  /* --no-X: a bool that is true by default, described as X */
	LP_OPT_U32,    /* uint32_t within [min, max] */
	LP_OPT_DOUBLE, /* double within [min, max] */
	LP_OPT_STRING, /* a string (with LP_OF_OFF, "off" stores "") */
	LP_OPT_CHOICE, /* an enum: the index of the value among choices */
	LP_OPT_LIST,   /* "a,b,c": a NULL-terminated array of strings */
	LP_OPT_STRS,   /* repeatable: an array of strings, its count at count_off */
	LP_OPT_ACTION, /* --help, --version: no setting */
};

enum lp_opt_flags {
	LP_OF_RELOAD = 1 << 0,	 /* SIGHUP applies it to the running daemon */
	LP_OF_CLI = 1 << 1,	 /* command line only: the file may not set it */
	LP_OF_NOSTATUS = 1 << 2, /* not in the status's description */
	LP_OF_OFF = 1 << 3,	 /* a string that "off" turns off ("" stored, "off" shown) */
};

struct lp_option {
	const char *name;  /* long name; the file's key */
	int short_name;	   /* 0: none */
	const char *alias; /* another long name (exporter-toolkit's --web.config.file) */
	const char *arg;   /* the value's name in --help; NULL for a flag */
	enum lp_opt_type type;
	size_t off;		    /* of the field in struct lp_config */
	size_t count_off;	    /* LP_OPT_STRS: of its count */
	double min, max;	    /* LP_OPT_U32, LP_OPT_DOUBLE */
	const char *const *choices; /* LP_OPT_CHOICE: NULL-terminated, in the enum's order */
	const char *def;	    /* the default, as the option takes it; NULL: none */
	unsigned flags;		    /* enum lp_opt_flags */
	const char *section;	    /* begins a section of --help */
	const char *help;	    /* --help's text, wrapped there; the default is appended */
	/* Parses arg into cfg instead of the type's parser (pid, ringbuf-kib, socket-mode, …);
	 * logs what is wrong, naming the option as name, and returns -EINVAL or -ENOMEM. */
	int (*parse)(const struct lp_option *o, struct lp_config *cfg, struct lp_config_store *st,
		     const char *name, const char *arg);
	/* Checks a value the type's parser stored (after it); the same contract. */
	int (*check)(const struct lp_option *o, struct lp_config *cfg, const char *name,
		     const char *arg);
	/* Adds the setting to the status's description instead of the type's rule. */
	void (*describe)(const struct lp_option *o, const struct lp_config *cfg, cJSON *out);
};

/* The table, for the tests and the documentation's checks. */
const struct lp_option *lp_options_table(size_t *n);
/* The key the status describes an option by: its name, less "no-" for LP_OPT_CLEAR. */
const char *lp_option_key(const struct lp_option *o, char *buf, size_t size);

/* Fills cfg. Returns 0 to run, 1 to exit successfully (--help, --version), -EINVAL on bad
 * usage or a bad file (logged with file and line), -ENOMEM. */
int lp_options_load(struct lp_config *cfg, struct lp_config_store *store, int argc, char **argv);

/* --help, from the table. */
void lp_options_usage(FILE *out);

/* The settings as {key: value}: the status shows it, a reload compares it. */
cJSON *lp_config_describe(const struct lp_config *cfg);

/* Whether SIGHUP applies the setting described by key (LP_OF_RELOAD). */
bool lp_option_reloadable(const char *key);
/* Copies every reloadable setting that is a number, a flag or a choice from next into
 * live; reloadable strings are applied by their owners (web-config-file: webconfig.c). */
void lp_config_reload(struct lp_config *live, const struct lp_config *next);

void lp_config_store_free(struct lp_config_store *s);

#endif
