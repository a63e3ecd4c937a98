#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
"""Overhead on the scheduler path: a context-switch-heavy load (`perf bench sched pipe`:
two processes passing a token through a pipe, two switches per round trip) with no tracer,
with empty tp_btf and raw_tp programs on the same tracepoints (the floor: what any
in-kernel scheduler collector costs at least), with empty programs on every tracepoint
llmprofd attaches on these paths while it tracks a process (the scheduler's, the futex
syscalls' and the mmap lock's: any syscall tracepoint sends every syscall on the host through
the kernel's slow path, the load's reads and writes included), with llmprofd (the load not
tracked and nothing tracked; the load not tracked while another process is, as on an
inference server; the load tracked, the worst case), with `runqlat -P` from libbpf-tools,
and with a bpftrace script doing the same histograms (bench/sched.bt), in alternating rounds.

    sudo bench/sched.py [--rounds 10] [--loops 200000]
"""
import argparse
import os
import re
import statistics
import subprocess

import benchlib as b

BT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "sched.bt")
FLOOR = os.path.join(b.BUILD, "floor")
ALL_FLOOR = "empty tp_btf + futex syscall + mmap lock programs (llmprofd's, tracking)"


def load(loops, cpu):
    # Both processes on one CPU: every round trip is two context switches on that CPU and
    # no idle wakeup of another (a vCPU's wakeup costs tens of us here and is noise).
    pin = ["taskset", "-c", cpu] if cpu != "any" else []
    out = subprocess.run(pin + ["perf", "bench", "sched", "pipe", "-l", str(loops)],
                         capture_output=True, text=True, check=True, timeout=600).stdout
    return float(re.search(r"(\d+)\s+ops/sec", out).group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--loops", type=int, default=300000)
    ap.add_argument("--cpu", default="0", help="CPU to pin the load to, or 'any'")
    ap.add_argument("--quick", action="store_true",
                    help="no tracer, the floor and llmprofd only (shorter rounds, less drift)")
    a = ap.parse_args()
    b.need("perf", "/usr/sbin/runqlat", "bpftrace", b.LLMPROFD, FLOOR)
    b.mount_tracefs()
    configs = [
        ("no tracer", ("none",)),
        ("empty tp_btf programs (the floor)", ("tool", [FLOOR], "attached")),
        ("empty raw_tp programs", ("tool", [FLOOR, "--raw"], "attached")),
        # Any program on a syscall tracepoint sends every syscall of every task through the
        # kernel's slow path (SYSCALL_WORK_SYSCALL_TRACEPOINT), the load's reads and writes
        # included: llmprofd's futex collector is such a program, attached while it tracks
        # a process.
        (ALL_FLOOR, ("tool", [FLOOR, "--all"], "attached")),
        ("llmprofd (load not tracked, nothing tracked)", ("llmprofd",)),
        ("llmprofd (load not tracked, another process tracked)",
         ("llmprofd", b.TRACK_OTHER)),
        ("llmprofd (load tracked: --comm perf)", ("llmprofd", "--comm", "perf")),
        ("runqlat -P (libbpf-tools)", ("tool", ["stdbuf", "-oL", "/usr/sbin/runqlat", "-P"], "Tracing")),
        ("bpftrace sched.bt", ("tool", ["bpftrace", BT], "attached")),
    ]

    def measure(cfg):
        if cfg[0] == "none":
            return load(a.loops, a.cpu)
        if cfg[0] == "llmprofd":
            d = b.Daemon(*cfg[1:])
            try:
                return load(a.loops, a.cpu)
            finally:
                d.stop()
        t = b.Tool(cfg[1], cfg[2])
        try:
            return load(a.loops, a.cpu)
        finally:
            t.stop()
    if a.quick:
        configs = [c for c in configs if c[0].startswith(("no tracer", "empty tp_btf", "llmprofd"))]
    names = [c[0] for c in configs]
    res = b.alternate(configs, a.rounds, measure)
    base = b.summary(res[configs[0][0]])[0]
    rows = []
    for name, _ in configs:
        med, lo, hi = b.summary(res[name])
        rows.append((name, "%.0f" % med, "%.0f-%.0f" % (lo, hi), "%.1f%%" % (100 * b.noise(res[name])),
                     "%.3f" % (med / base), "%.2f" % (1e6 / med - 1e6 / base)))
    # Paired by round: each round's configurations ran back to back, so a host that drifts
    # over the run moves them together; the median of per-round differences is steadier
    # than the difference of medians.
    def added(name, r):
        return 1e6 / res[name][r] - 1e6 / res[configs[0][0]][r]

    def paired(name, ref):
        d = sorted(added(name, r) - added(ref, r) for r in range(a.rounds))
        q = statistics.quantiles(d, n=4) if len(d) > 1 else d * 3
        return statistics.median(d), q[0], q[2]

    floor = configs[1][0]
    notes = ["load: perf bench sched pipe -l %d on CPU %s (2 processes, 2 context switches and "
             "2 wakeups per round trip), %d alternating rounds" % (a.loops, a.cpu, a.rounds)]
    fa = statistics.median(added(floor, r) for r in range(a.rounds))
    for name, _ in configs[2:]:
        med, q1, q3 = paired(name, floor)
        notes.append("%s minus the floor, paired by round: median %+.2f us per round trip "
                     "(quartiles %+.2f to %+.2f), %+.0f%% of the floor's added %.2f us"
                     % (name, med, q1, q3, 100 * med / fa if fa else 0, fa))
    # llmprofd's own code, apart from what its set of tracepoints costs empty.
    if ALL_FLOOR in names:
        aa = statistics.median(added(ALL_FLOOR, r) for r in range(a.rounds))
        for name in names:
            if name.startswith("llmprofd"):
                med, q1, q3 = paired(name, ALL_FLOOR)
                notes.append("%s minus the empty programs on all its tracepoints, paired by "
                             "round: median %+.2f us per round trip (quartiles %+.2f to %+.2f), "
                             "%+.0f%% of their added %.2f us"
                             % (name, med, q1, q3, 100 * med / aa if aa else 0, aa))
    b.table("Overhead on the scheduler path", ["tracer", "median round trips/s", "min-max",
                                               "spread", "ratio", "added us per round trip"],
            rows, notes)


if __name__ == "__main__":
    main()
