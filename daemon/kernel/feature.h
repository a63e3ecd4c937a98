/* SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause */
/* What this kernel offers to llmprofd, found by trying, never by version number. */
#ifndef LLMPROF_FEATURE_H
#define LLMPROF_FEATURE_H

#include <stdbool.h>

struct lp_features {
	bool btf;    /* /sys/kernel/btf/vmlinux: needed for CO-RE */
	bool tp_btf; /* BTF-typed tracepoints load */
	int tp_btf_err;
	bool raw_tp;
	bool bpf_denied;    /* even the simplest program fails to load with EPERM */
	bool mmap_lock_btf; /* the mmap_lock_released tracepoint has BTF (tp_btf) */
	bool fentry;	    /* fentry/fexit programs load (not needed yet; reported) */
	int fentry_err;
	bool kprobes;		   /* the kprobe PMU exists */
	bool tracefs;		   /* tracefs is mounted where libbpf looks for it */
	bool tracefs_mounted_here; /* ... because llmprofd mounted it */
	int tracefs_err;
	bool perf_sw; /* perf software events can be opened system-wide */
	int perf_sw_err;
	bool pmu; /* hardware counters (cycles) exist */
	int pmu_err;
	bool ringbuf;
	bool task_storage; /* task local storage maps (Linux 5.11) */
	bool bpf_loop;	   /* the bpf_loop helper (Linux 5.17): a decode's batch is read with it */
	bool sched_info;   /* the kernel keeps run-queue delay per task (CONFIG_SCHED_INFO) */
	bool uprobe_multi; /* multi-uprobe links filtering by process (uprobe.h) */
	int uprobe_multi_err;
};

/* Probes everything; mounts tracefs at /sys/kernel/tracing when it is absent and
 * mount_tracefs is set. Never fails: missing pieces are recorded with their errno. */
void lp_features_probe(struct lp_features *f, bool mount_tracefs);

/* Logs one line listing what was found, then one line per missing feature saying what
 * it costs and what to do about it. */
void lp_features_log(const struct lp_features *f);

#endif
