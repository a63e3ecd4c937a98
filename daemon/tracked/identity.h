/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* Who a process is, beyond its pid and name: its command line, its cgroup and what that
 * says (systemd unit, container, Kubernetes pod), and the model it has mapped. Every
 * "node" process of a host looks alike by comm and exe; these tell them apart, and the
 * unit or container with the model name a workload across restarts. All text is another
 * user's: it is kept escaped (escape.h), safe for a terminal, a log line and a label. */
#ifndef LLMPROF_IDENTITY_H
#define LLMPROF_IDENTITY_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "tracked/context.h"

#define LP_IDENT_CMDLINE 256 /* bytes of the command line kept (escaped), "..." after */

struct lp_identity {
	char cmdline[LP_IDENT_CMDLINE]; /* arguments joined by spaces */
	char cgroup[256];		/* cgroup v2 path, else the v1 name=systemd or cpu one */
	char unit[128];			/* systemd unit: the last *.service or *.scope */
	char container[72]; /* a 64-hex container id in the path (docker, cri, podman) */
	char pod[48];	    /* Kubernetes pod uid (kubepods...pod<uid>) */
	/* the model: the first GGUF file it maps; "" until one is seen */
	char model[256]; /* its path */
	uint64_t model_bytes;
	char model_arch[32]; /* general.architecture */
	char model_type[16]; /* general.file_type by name ("Q8_0") */
};

/* Reads pid's command line and cgroup under proc_root ("/proc"). Returns 0 or -errno of the
 * command line's read (-ESRCH, -ENOENT when gone); fields that cannot be read stay "". */
int lp_identity_read(struct lp_identity *id, pid_t pid, const char *proc_root);

/* Parsers, for the tests. */
/* /proc/PID/cmdline (NUL-separated): arguments joined by spaces, escaped, cut to size. */
void lp_identity_cmdline(char *out, size_t size, const char *raw, size_t len);
/* A joined command line (lp_identity_cmdline's) with the values of options that look like
 * secrets replaced by "<redacted>": an option whose name holds key, token, secret, passw,
 * auth, credential or cookie (--api-key X, --api-key=X), a URL's password
 * (scheme://user:PASS@), and such a URL query parameter (?token=X). out may not be in. */
void lp_identity_cmdline_redacted(char *out, size_t size, const char *in);
/* /proc/PID/cgroup: the path (v2 "0::", else name=systemd, else the cpu controller's), and
 * the unit, container and pod it names. */
void lp_identity_cgroup(struct lp_identity *id, const char *proc_cgroup);

/* Takes the model from a context read (context.h); false when it has none or it is the
 * same as before. */
bool lp_identity_set_model(struct lp_identity *id, const struct lp_context *ctx);

/* The model's file name without directories ("" when none). */
const char *lp_identity_model_name(const struct lp_identity *id);

/* A name for the workload that survives restarts: "container/<12 hex>", else the unit when
 * it is a service, else comm. Written to out (size >= 80). */
void lp_identity_workload(const struct lp_identity *id, const char *comm, char *out, size_t size);

#endif
