#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
"""What llmprofd's programs cost per event, beside the floor's, on the same events.

Throughput of a pinned load (bench/sched.py, bench/syscalls.py) on a virtual machine whose
speed drifts by tens of per cent within minutes cannot resolve tens of nanoseconds. Here
the kernel times every program run itself (kernel.bpf_stats_enabled: run_time_ns and
run_cnt per program), and the empty programs (bench/floor.c --all), an llmprofd that does
not track the load and one that does (--comm) are attached at once: each event runs all
three, so they are compared on the same events, not on rounds minutes apart. The one that
does not track the load tracks a sleeping process, as on an inference server: its futex
programs are attached only while it tracks something.

Each figure is the programs' time per operation of the load (a round trip of `perf bench
sched pipe`: 2 switches and 2 wakeups; a FUTEX_WAKE call; a FUTEX_WAIT/WAKE round trip; an
mmap/munmap pair), summed over every program of that tool that ran. The empty programs'
figure is what the kernel's dispatch and the statistics' own clock reads cost (two
sched_clock() reads per run); a tool's own code is what it adds to that.

    sudo bench/progcost.py [--rounds 5]
"""
import argparse
import json
import os
import statistics
import subprocess

import benchlib as b
import lptest

FLOOR = os.path.join(b.BUILD, "floor")
BENCH = os.path.join(b.BUILD, "lpsysbench")
LOADS = (("sched pipe round trip (2 switches, 2 wakeups)",
          ["perf", "bench", "sched", "pipe", "-l", "100000"], 100000),
         ("FUTEX_WAKE, no waiter", [BENCH, "wake", "1000000"], 1000000),
         ("FUTEX_WAIT/WAKE round trip, 2 threads", [BENCH, "pingpong", "50000"], 50000),
         ("mmap + munmap, anonymous", [BENCH, "mmap", "200000"], 200000))


def stats(ids):
    """{name: (run_time_ns, run_cnt)} of those programs, from one bpftool run (one a
    program took seconds for a daemon's hundred)."""
    out, ids = {}, set(ids)
    text = subprocess.run(["bpftool", "-j", "prog", "show"], capture_output=True,
                          text=True).stdout
    for p in json.loads(text or "[]"):
        if p.get("id") in ids and "name" in p:
            out[p["name"]] = (int(p.get("run_time_ns", 0)), int(p.get("run_cnt", 0)))
    return out


def delta(before, after):
    return {k: (after[k][0] - before.get(k, (0, 0))[0], after[k][1] - before.get(k, (0, 0))[1])
            for k in after}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--cpu", default="0", help="CPU to pin the loads to")
    a = ap.parse_args()
    b.need("perf", "bpftool", b.LLMPROFD, FLOOR, BENCH)
    b.mount_tracefs()
    with b.bpf_stats():
        floor = b.Tool([FLOOR, "--all"], "attached")
        untracked = b.Daemon(b.TRACK_OTHER)
        # Tracks the loads' processes: perf (sched pipe's two) and lpsysbench.
        tracked = b.Daemon("--comm", "perf", "--comm", "lpsysbench")
        tools = (("empty programs (floor)", floor.proc.pid),
                 ("llmprofd, load not tracked", untracked.proc.pid),
                 ("llmprofd, load tracked", tracked.proc.pid))
        ids = {name: lptest.prog_ids_of(pid) for name, pid in tools}
        per_op = {(load[0], name): [] for load in LOADS for name, _ in tools}
        runs = {}
        try:
            for r in range(a.rounds):
                for what, cmd, ops in LOADS:
                    before = {name: stats(ids[name]) for name, _ in tools}
                    subprocess.run(["taskset", "-c", a.cpu] + cmd, stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL, check=True, timeout=600)
                    for name, _ in tools:
                        d = delta(before[name], stats(ids[name]))
                        per_op[(what, name)].append(sum(ns for ns, _ in d.values()) / ops)
                        runs[(what, name)] = {k: v for k, v in d.items() if v[1]}
                    print("round %d/%d  %s: %s" % (r + 1, a.rounds, what, ", ".join(
                        "%s %.0f ns" % (name, per_op[(what, name)][-1]) for name, _ in tools)))
        finally:
            tracked.stop()
            untracked.stop()
            floor.stop()
    rows = []
    notes = ["programs' time per operation of the load pinned to CPU %s, median of %d rounds; "
             "the three tools attached at once, so every event ran all three" % (a.cpu, a.rounds)]
    for what, _, _ in LOADS:
        med = {name: statistics.median(per_op[(what, name)]) for name, _ in tools}
        f = med[tools[0][0]]
        rows.append([what] + ["%.0f" % med[name] for name, _ in tools] +
                     ["%.2f" % (med[tools[1][0]] / f if f else 0),
                      "%.2f" % (med[tools[2][0]] / f if f else 0)])
        for name, _ in tools:
            notes.append("%s, %s: %s" % (what, name, ", ".join(
                "%s %.0f ns x %.2f/op" % (k, ns / n, n / dict((x[0], x[2]) for x in LOADS)[what])
                for k, (ns, n) in sorted(runs[(what, name)].items()))))
    b.table("Cost per event inside the programs (`bench/progcost.py`)",
            ["load", "floor ns/op", "llmprofd untracked ns/op", "llmprofd tracked ns/op",
             "untracked / floor", "tracked / floor"], rows, notes)


if __name__ == "__main__":
    main()
