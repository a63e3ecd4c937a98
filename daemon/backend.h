/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* The API's view of the daemon: the backend (serving/answer.h) that routes call for reports,
 * status, resets, precise mode, records and the bandwidth. */
#ifndef LLMPROF_BACKEND_H
#define LLMPROF_BACKEND_H

#include "daemon.h"

/* Fills d->api from the daemon and its configuration. */
void lp_backend_init(struct daemon *d);

/* --once: one report of every process, as JSON on stdout. */
int lp_backend_print_report(struct daemon *d);

#endif
