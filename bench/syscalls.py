#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
"""Overhead on the syscall path: llmprofd sees futex waits from the scheduler by default; with
--futex-source tracepoint or raw its futex collector is on syscall tracepoints (attached while
it tracks a process), so that every futex call on the host runs it then, LLM process or not,
and every syscall takes the kernel's slow path; the floor here is that design's empty
programs. Its mmap discovery hook is on the mmap lock's release, which every mmap and
munmap reaches.
lpsysbench (bench/sysbench.c) makes FUTEX_WAKE calls nobody waits on, WAIT/WAKE round trips
between two threads on one CPU, and anonymous mmap/munmap pairs; each runs with no tracer,
with empty programs on the same tracepoints (the floor), with llmprofd not tracking it
(tracking nothing, and tracking another process: the case of every other process on an
inference server) and tracking it (--comm), in alternating rounds.

    sudo bench/syscalls.py [--rounds 8] [--calls 2000000] [--trips 100000] [--maps 500000]
"""
import argparse
import os
import re
import subprocess

import benchlib as b

FLOOR = os.path.join(b.BUILD, "floor")
BENCH = os.path.join(b.BUILD, "lpsysbench")
LOADS = (("wake", "calls", "FUTEX_WAKE, no waiter", "call"),
         ("pingpong", "trips", "FUTEX_WAIT/FUTEX_WAKE round trip, 2 threads on one CPU",
          "round trip"),
         ("mmap", "maps", "mmap and munmap of an anonymous page (not executable)", "call"))


def load(mode, n, cpu):
    out = subprocess.run(["taskset", "-c", cpu, BENCH, mode, str(n)], capture_output=True,
                         text=True, check=True, timeout=600).stdout
    return float(re.search(r"([\d.]+) ns per", out).group(1))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--calls", type=int, default=2000000)
    ap.add_argument("--trips", type=int, default=100000)
    ap.add_argument("--maps", type=int, default=500000)
    ap.add_argument("--cpu", default="0", help="CPU to pin the load to")
    a = ap.parse_args()
    b.need(b.LLMPROFD, FLOOR, BENCH)
    b.mount_tracefs()
    configs = [
        ("no tracer", ("none",)),
        ("empty programs on the same syscall tracepoints (the floor)",
         ("tool", [FLOOR, "--syscalls"], "attached")),
        ("llmprofd (load not tracked, nothing tracked)", ("llmprofd",)),
        ("llmprofd (load not tracked, another process tracked)",
         ("llmprofd", b.TRACK_OTHER)),
        ("llmprofd (load tracked: --comm lpsysbench)", ("llmprofd", "--comm", "lpsysbench")),
    ]

    def measure(cfg):
        def each():
            return tuple(load(mode, getattr(a, size), a.cpu) for mode, size, _, _ in LOADS)
        if cfg[0] == "none":
            return each()
        if cfg[0] == "llmprofd":
            d = b.Daemon(*cfg[1:])
            try:
                return each()
            finally:
                d.stop()
        t = b.Tool(cfg[1], cfg[2])
        try:
            return each()
        finally:
            t.stop()
    res = b.alternate(configs, a.rounds, measure)
    for k, (mode, size, what, unit) in enumerate(LOADS):
        vals = {name: [r[k] for r in res[name]] for name, _ in configs}
        base = b.summary(vals[configs[0][0]])[0]
        floor = b.summary(vals[configs[1][0]])[0] - base
        rows = []
        for name, _ in configs:
            med, lo, hi = b.summary(vals[name])
            rows.append((name, "%.1f" % med, "%.1f-%.1f" % (lo, hi),
                         "%.1f%%" % (100 * b.noise(vals[name])), "%.1f" % (med - base),
                         "%.2f" % ((med - base) / floor) if floor > 0 else "-"))
        b.table("Overhead on the syscall path: %s" % what,
                ["tracer", "median ns per %s" % unit, "min-max", "spread", "added ns",
                 "times the floor's"], rows,
                ["load: lpsysbench %s %d on CPU %s, %d alternating rounds"
                 % (mode, getattr(a, size), a.cpu, a.rounds)])


if __name__ == "__main__":
    main()
