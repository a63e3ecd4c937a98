/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* Settings: defaults, then /etc/llmprofd/llmprofd.conf (INI, read with inih), then the
 * command line. The file's keys are the long options' names; one parser serves both. */
#ifndef LLMPROF_OPTIONS_H
#define LLMPROF_OPTIONS_H

#include <cjson/cJSON.h>

#include "base/config.h"

/* Fills cfg. Returns 0 to run, 1 to exit successfully (--help, --version), -EINVAL on bad
 * usage or a bad file (logged with file and line), -ENOMEM. */
int lp_options_load(struct lp_config *cfg, struct lp_config_store *store, int argc, char **argv);

/* The settings as {name: value}: the status shows it, a reload compares it. */
cJSON *lp_config_describe(const struct lp_config *cfg);

/* Settings a SIGHUP applies to the running daemon; the others need a restart. The two
 * functions name the same settings, next to each other in options.c. */
bool lp_option_reloadable(const char *name);
void lp_config_reload(struct lp_config *live, const struct lp_config *next);

void lp_config_store_free(struct lp_config_store *s);

#endif
