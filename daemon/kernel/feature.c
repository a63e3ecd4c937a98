// SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
/* Run-time feature probes: load a trivial program of each kind, open each kind of perf event. */
#include "kernel/feature.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <errno.h>
#include <linux/perf_event.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "base/log.h"
#include "kernel/uprobe.h"

#define TRACEFS_MAGIC 0x74726163
#define TRACEFS_PATH "/sys/kernel/tracing"
#define DEBUGFS_TRACING_PATH "/sys/kernel/debug/tracing"

/* Loads "r0 = 0; exit" as the given kind; returns 0 or -errno. */
static int probe_prog(enum bpf_prog_type type, enum bpf_attach_type attach, const char *btf_name)
{
	struct bpf_insn insns[] = {
		{.code = 0xb7, .dst_reg = 0, .imm = 0}, /* BPF_MOV64_IMM(R0, 0) */
		{.code = 0x95},				/* BPF_EXIT */
	};
	LIBBPF_OPTS(bpf_prog_load_opts, opts, .expected_attach_type = attach);
	int fd, id;

	if (btf_name) {
		id = libbpf_find_vmlinux_btf_id(btf_name, attach);
		if (id < 0)
			return id;
		opts.attach_btf_id = id;
	}
	fd = bpf_prog_load(type, NULL, "GPL", insns, 2, &opts);
	if (fd < 0)
		return -errno;
	close(fd);
	return 0;
}

static int probe_perf(__u32 type, __u64 config, int pid, int cpu)
{
	struct perf_event_attr attr = {
		.size = sizeof(attr),
		.type = type,
		.config = config,
		.sample_period = 1,
		.disabled = 1,
	};
	int fd = (int)syscall(SYS_perf_event_open, &attr, pid, cpu, -1, PERF_FLAG_FD_CLOEXEC);

	if (fd < 0)
		return -errno;
	close(fd);
	return 0;
}

static bool is_tracefs(const char *path)
{
	struct statfs st;

	return statfs(path, &st) == 0 && st.f_type == TRACEFS_MAGIC;
}

static void probe_tracefs(struct lp_features *f, bool mount_it)
{
	if (is_tracefs(TRACEFS_PATH) || is_tracefs(DEBUGFS_TRACING_PATH)) {
		f->tracefs = true;
		return;
	}
	if (!mount_it) {
		f->tracefs_err = -ENOENT;
		return;
	}
	/* libbpf finds classic tracepoint ids under /sys/kernel/tracing when debugfs is absent. */
	if (mount("tracefs", TRACEFS_PATH, "tracefs", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0) {
		f->tracefs_err = -errno;
		return;
	}
	f->tracefs = f->tracefs_mounted_here = true;
}

void lp_features_probe(struct lp_features *f, bool mount_tracefs)
{
	int r;

	memset(f, 0, sizeof(*f));
	f->btf = access("/sys/kernel/btf/vmlinux", R_OK) == 0;
	if (f->btf) {
		f->tp_btf_err = probe_prog(BPF_PROG_TYPE_TRACING, BPF_TRACE_RAW_TP, "sched_switch");
		f->tp_btf = f->tp_btf_err == 0;
		f->mmap_lock_btf =
			libbpf_find_vmlinux_btf_id("mmap_lock_released", BPF_TRACE_RAW_TP) >= 0;
		f->fentry_err = probe_prog(BPF_PROG_TYPE_TRACING, BPF_TRACE_FENTRY, "do_exit");
		f->fentry = f->fentry_err == 0;
	} else {
		f->tp_btf_err = f->fentry_err = -ENOENT;
	}
	r = probe_prog(BPF_PROG_TYPE_RAW_TRACEPOINT, 0, NULL);
	f->raw_tp = r == 0;
	f->bpf_denied = r == -EPERM;
	f->kprobes = access("/sys/bus/event_source/devices/kprobe", F_OK) == 0;
	probe_tracefs(f, mount_tracefs);
	f->perf_sw_err = probe_perf(PERF_TYPE_SOFTWARE, PERF_COUNT_SW_PAGE_FAULTS_MAJ, -1, 0);
	f->perf_sw = f->perf_sw_err == 0;
	f->pmu_err = probe_perf(PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES, 0, -1);
	f->pmu = f->pmu_err == 0;
	f->ringbuf = libbpf_probe_bpf_map_type(BPF_MAP_TYPE_RINGBUF, NULL) == 1;
	f->task_storage = libbpf_probe_bpf_map_type(BPF_MAP_TYPE_TASK_STORAGE, NULL) == 1;
	f->bpf_loop = libbpf_probe_bpf_helper(BPF_PROG_TYPE_KPROBE, BPF_FUNC_loop, NULL) == 1;
	/* The file exists exactly when the kernel keeps sched_info (CONFIG_SCHED_INFO); the
	 * BPF side finds the same by its field in the kernel's BTF. */
	f->sched_info = access("/proc/self/schedstat", R_OK) == 0;
	f->uprobe_multi_err = lp_uprobe_multi_probe();
	f->uprobe_multi = f->uprobe_multi_err == 0;
}

static const char *yesno(bool b)
{
	return b ? "yes" : "no";
}

void lp_features_log(const struct lp_features *f)
{
	if (f->bpf_denied) {
		log_error(
			"permission denied loading BPF programs: run llmprofd as root, or with "
			"the capabilities CAP_BPF and CAP_PERFMON (and CAP_SYS_ADMIN for uprobes, "
			"CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH for other users' processes; "
			"systemd/llmprofd.service sets them)");
		return;
	}
	log_info(
		"kernel features: btf %s, tp_btf %s, raw_tp %s, fentry %s, kprobes %s, tracefs %s, "
		"perf software events %s, hardware PMU %s, ring buffer %s, sched_info %s, "
		"multi-uprobe links %s, bpf_loop %s, task storage %s",
		yesno(f->btf), yesno(f->tp_btf), yesno(f->raw_tp), yesno(f->fentry),
		yesno(f->kprobes),
		f->tracefs_mounted_here ? "mounted by llmprofd" : yesno(f->tracefs),
		yesno(f->perf_sw), yesno(f->pmu), yesno(f->ringbuf), yesno(f->sched_info),
		yesno(f->uprobe_multi), yesno(f->bpf_loop), yesno(f->task_storage));
	if (!f->btf)
		log_error("missing: kernel BTF (/sys/kernel/btf/vmlinux); llmprofd needs a kernel "
			  "built with CONFIG_DEBUG_INFO_BTF=y");
	if (f->btf && !f->tp_btf)
		log_warning_errno(
			f->tp_btf_err,
			"missing: tp_btf programs (%m); using raw_tp tracepoints instead, "
			"same data, slightly more overhead");
	if (!f->fentry)
		log_info("missing: fentry/fexit (load: %s); not needed, tracepoints are used",
			 strerror(-f->fentry_err));
	/* Only the syscall sources of futex waits and of new mappings read tracefs. */
	if (!f->tracefs && f->tp_btf)
		log_info_errno(f->tracefs_err,
			       "missing: tracefs at " TRACEFS_PATH " (%m); not needed: futex waits "
			       "come from the scheduler (--futex-source tracepoint would need it: "
			       "mount -t tracefs tracefs " TRACEFS_PATH ")");
	else if (!f->tracefs)
		log_warning_errno(f->tracefs_err,
				  "missing: tracefs at " TRACEFS_PATH
				  " (%m); futex waits are taken "
				  "from raw_syscalls, which costs every syscall a few ns; mount it "
				  "(mount -t tracefs tracefs " TRACEFS_PATH ") to avoid that");
	if (!f->perf_sw)
		log_warning_errno(
			f->perf_sw_err,
			"missing: perf software events (%m); major page faults will not "
			"be counted (minor ones are, from the kernel's own counts); check "
			"kernel.perf_event_paranoid and CAP_PERFMON");
	if (!f->sched_info)
		log_info("missing: the kernel's run-queue accounting (CONFIG_SCHED_INFO, "
			 "/proc/PID/schedstat); run-queue latency is timed from sched_wakeup "
			 "instead, which costs every wakeup on the host a program run");
	if (!f->uprobe_multi)
		log_info("missing: multi-uprobe links (%s; Linux 6.6 and later have them); a "
			 "precise window's probes come off one RCU grace period each, on a "
			 "thread of their own",
			 strerror(-f->uprobe_multi_err));
	if (!f->bpf_loop)
		log_warning("missing: the bpf_loop helper (Linux 5.17 and later have it); the "
			    "batches of llama_decode are not read: no per-request figures "
			    "(tokens and decode times are counted still)");
	if (!f->pmu)
		log_info("missing: hardware PMU counters (%s); nothing needs them yet",
			 strerror(-f->pmu_err));
}
