#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
"""Two llmprofd builds' programs side by side, per run, on the same events.

A change to a collector's hot path is worth tens of nanoseconds per event, which neither
the throughput benches nor two progcost.py runs minutes apart resolve on a VM. Here two
daemons, one of each build, track the same loads at once: every event runs both builds'
programs, and the kernel times each run (kernel.bpf_stats_enabled).

The program attached second to a tracepoint runs with the first's cache lines warm (the
task's fields, the maps' buckets): an identical build read 10-20 % cheaper in second place.
So each round starts both daemons afresh, in the other order than the round before, and
the figure is the median over rounds; with an even number of rounds each build is first
as often as second. Two copies of one build agree within 1 % this way on the scheduler's
program, within 5 % on programs that run only a few thousand times a round.

    sudo bench/progab.py [OLD_LLMPROFD [NEW_LLMPROFD]] [--rounds 4]
                         [--workloads pipe,pingpong,lpops,omp]

Either build left out is this tree's: with neither, the two are copies of one build, and
how far apart they read is the method's own noise.

Workloads, each pinned to one CPU but omp and torch: pipe (`perf bench sched pipe`),
pingpong (lpsysbench's FUTEX_WAIT/WAKE between two threads), lpops (the ggml-like fixture),
omp (llama.cpp's OpenMP build decoding a random-weight model, 2 threads; built once by
tests/workload/build-llama.sh), torch (tests/workload/decoder.py, 2 threads, OpenBLAS,
1,200 tokens; found by each daemon at its first forward, as a default daemon finds it).
With torch, each round first has both daemons track a decoder until its samples count
(libtorch's rows read) and keeps it stopped, as bench/torch.py warms its daemon: the
measured run is walked by rows already in the kernel, as an always-on daemon's are.
"""
import argparse
import statistics
import subprocess

import benchlib as b
import lptest
import ops
import progcost as pc
import torchref

LOADS = {
    "pipe": (["taskset", "-c", "0", "perf", "bench", "sched", "pipe", "-l", "100000"], "perf"),
    "pingpong": (["taskset", "-c", "0", pc.BENCH, "pingpong", "50000"], "lpsysbench"),
    "lpops": (None, "lpops"),
    "omp": (None, "llama-simple"),
    "torch": (None, None),  # found by its first forward
}


def argv(workload):
    cmd = LOADS[workload][0]
    if cmd:
        return cmd
    if workload == "torch":
        return torchref.decoder_argv("--threads", 2, "--prompt", 16, "--new", 1200)
    return (["taskset", "-c", "0"] if workload == "lpops" else []) + ops.argv_of(workload, 300)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old", nargs="?", default=b.LLMPROFD)
    ap.add_argument("new", nargs="?", default=b.LLMPROFD)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--workloads", default="pipe,pingpong,lpops,omp")
    a = ap.parse_args()
    workloads = a.workloads.split(",")
    for w in workloads:
        if w not in LOADS:
            raise SystemExit("unknown workload %r: %s" % (w, ", ".join(LOADS)))
    b.need("perf", "bpftool", a.old, a.new, pc.BENCH, ops.LPOPS)
    b.mount_tracefs()
    cmds = {w: argv(w) for w in workloads}
    comms = [x for w in workloads if LOADS[w][1] for x in ("--comm", LOADS[w][1])]
    builds = (a.old, a.new)
    per_run = {}
    with b.bpf_stats():
        for r in range(a.rounds):
            daemons, warmed = {}, None
            try:
                for k in ((0, 1) if r % 2 == 0 else (1, 0)):
                    b.LLMPROFD = builds[k]
                    daemons[k] = b.Daemon(*comms)
                if "torch" in workloads:
                    warmed = b.torch_warm(list(daemons.values()))
                ids = {k: lptest.prog_ids_of(d.proc.pid) for k, d in daemons.items()}
                for w in workloads:
                    before = {k: pc.stats(ids[k]) for k in daemons}
                    subprocess.run(cmds[w], stdout=subprocess.DEVNULL,
                                   stderr=subprocess.DEVNULL, check=True, timeout=600,
                                   env=torchref.env("openblas") if w == "torch" else None)
                    for k in daemons:
                        for prog, (ns, n) in pc.delta(before[k], pc.stats(ids[k])).items():
                            if n >= 1000:
                                per_run.setdefault((w, prog), ([], []))[k].append(ns / n)
                    print("round %d/%d  %s: %s" % (r + 1, a.rounds, w, ", ".join(
                        "%s %.0f/%.0f" % (prog, v[0][-1], v[1][-1])
                        for (ww, prog), v in sorted(per_run.items())
                        if ww == w and len(v[0]) == len(v[1]) == r + 1)))
            finally:
                if warmed:
                    warmed.kill()
                    warmed.wait()
                for d in daemons.values():
                    d.stop()
    rows = []
    for (w, prog), (va, vb) in sorted(per_run.items()):
        if len(va) != a.rounds or len(vb) != a.rounds:
            continue  # ran in some rounds only (a fault program on a few events)
        ma, mb = statistics.median(va), statistics.median(vb)
        rows.append([w, prog, "%.0f" % ma, "%.0f" % mb, "%.2f" % (mb / ma)])
    b.table("Two builds' programs on the same events (`bench/progab.py`)",
            ["load", "program", "old ns/run", "new ns/run", "new / old"], rows,
            ["old: %s; new: %s" % builds,
             "median of %d rounds, the attach order alternating; programs that ran at least "
             "1000 times in every round" % a.rounds])


if __name__ == "__main__":
    main()
