# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
"""bpf tier: missing kernel features degrade with a message a user can act on. Here:
tracefs absent. Futex waits come from the scheduler by default, which needs no tracefs.
Without tp_btf (--sched-raw-tp here) and with --no-mount-tracefs they come from
raw_syscalls (same numbers) and the log says how to avoid that; by default llmprofd mounts
tracefs itself, which --futex-source tracepoint uses."""
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
import lptest as t  # noqa: E402

TRACEFS = "/sys/kernel/tracing"


def tracefs_mounted():
    with open("/proc/self/mounts") as f:
        return any(line.split()[1] in (TRACEFS, "/sys/kernel/debug/tracing") and
                   line.split()[2] == "tracefs" for line in f)


def unmount_tracefs():
    while tracefs_mounted():
        subprocess.run(["umount", TRACEFS], check=True)


def futex_run(*flags):
    d, rep, res, pid = t.observe(["--futex-threads", "2", "--futex-waits", "6", "--futex-ms", "2"], flags)
    return d, rep, t.futex_waits_on(t.proc_of(rep, pid), res["futex_addrs"])


def main():
    was_mounted = tracefs_mounted()
    try:
        unmount_tracefs()
        d, rep, waits = futex_run("--no-mount-tracefs")
        t.check(rep["collectors"]["futex"] == "scheduler", "futex waits from the scheduler")
        t.check(waits == [6, 6], "exact futex counts with no tracefs: %s" % waits)
        t.check(not tracefs_mounted(), "--no-mount-tracefs left tracefs alone")

        d, rep, waits = futex_run("--no-mount-tracefs", "--sched-raw-tp")
        log = d.log()
        t.check("missing: tracefs" in log and "mount -t tracefs" in log,
                "log says tracefs is missing and how to mount it")
        t.check(rep["collectors"]["futex"] == "raw_syscalls", "futex falls back to raw_syscalls")
        t.check(rep["features"]["tracefs"] is False, "report shows tracefs missing")
        t.check(waits == [6, 6], "same exact futex counts through the fallback: %s" % waits)
        t.check(not tracefs_mounted(), "--no-mount-tracefs left tracefs alone")

        d, rep, waits = futex_run("--futex-source", "tracepoint")
        t.check("tracefs mounted by llmprofd" in d.log(), "llmprofd mounted tracefs itself")
        t.check(rep["collectors"]["futex"] == "syscall tracepoints", "futex via syscall tracepoints")
        t.check(waits == [6, 6], "exact futex counts: %s" % waits)
    finally:
        if was_mounted and not tracefs_mounted():
            subprocess.run(["mount", "-t", "tracefs", "tracefs", TRACEFS], check=False)
        elif not was_mounted:
            unmount_tracefs()


t.run(main, timeout=100)
