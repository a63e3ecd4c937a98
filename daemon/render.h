/* The report as JSON: the document printed by --once (and later served over the API).
 * Pure: builds a cJSON tree, does no I/O. */
#ifndef LLMPROF_RENDER_H
#define LLMPROF_RENDER_H

#include <cjson/cJSON.h>

#include "snapshot.h"

/* Names of histograms and counters as they appear in the JSON document. */
extern const char *const lp_hist_names[LP_H_NR];
extern const char *const lp_counter_names[LP_C_NR];

cJSON *lp_render_report(const struct lp_report *r);
cJSON *lp_render_hist(const struct lp_hist *h);

#endif
