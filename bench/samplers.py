#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
"""Which sampler: each way of sampling against the truth, what it does to the threads it
samples, and how far samplers of one run spread.

1. The truth. tests/fixtures' lpggml with the OpenMP build's barrier (liblpomp --team:
   spin up to 10 us, then futex until the last thread of the team wakes the others) after
   20-60 us of matmul, two threads: each thread reads its own CPU-time clock around every
   call, so the barrier's share of their CPU time is known exactly, on each run. Sampled at
   997 Hz by llmprofd per CPU (the default), llmprofd per thread (--sampler thread),
   `perf record -a` (its timers restarted at random rates as llmprofd's are) and
   `perf record -- CMD`, one per run, the order rotating each round; and at a steady pace
   (40 us of matmul on one thread, 20 on the other, every time) by llmprofd with its timers
   restarted at random and at a fixed rate. Printed: the sampled share minus the clocks',
   and the clocks' share and wall time under each (what the sampler does to the threads).

2. The spread. Four llmprofd daemons sample one decode of llama.cpp's OpenMP build
   (400 tokens, 499 Hz), once with fixed-rate per-CPU timers (--no-sample-rephase) and once
   restarted at random (the default), alternating: the range of the four sync shares of
   each run. A fixed-rate timer aliases with a decode, which runs the same graph at a
   steady pace.

    sudo bench/samplers.py [--rounds 3] [--iters 60000] [--runs 3] [--tokens 400]
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import time

import benchlib as b
import lptest
import perfref

HZ = 997
LIB = os.path.join(b.BUILD, "tests", "liblpggml-omp.so")


def truth_run(who, iters, work):
    """One fixture run sampled by who: (sampled share - clocks' share, clocks' share, wall s)."""
    data = os.path.join(work, "truth.data")
    d = system_wide = None
    wrap = list
    if who.startswith("llmprofd"):
        d = lptest.Daemon("--once", "--sample-hz", str(HZ),
                          *(["--sampler", "thread"] if "thread" in who else []),
                          *(["--no-sample-rephase"] if "fixed" in who else []))
        d.wait_ready()
    elif who != "perf record -a":
        def wrap(argv):
            return perfref.record_args(data, HZ, ["-k", "CLOCK_MONOTONIC", "--"]) + argv
    fx = lptest.Lpggml(*lptest.team_barrier_args(iters, "steady" in who), wrap=wrap)
    pid = fx.pid
    if who == "perf record -a":
        # Once the fixture runs its final image (perfref.held()); it waits for "go".
        system_wide = perfref.SystemWide(data, HZ)
    if d:
        d.wait_log("pid %d (lpggml) runs ggml" % pid)
    t0 = time.monotonic()
    res = fx.finish()
    wall = time.monotonic() - t0
    if system_wide:
        system_wide.stop()
    if d:
        d.wait_log("pid %d (lpggml) exited" % pid)
        d.stop()
        sh = lptest.proc_of(d.report(), pid)["ggml"]["op_groups"]["share"]
    else:
        sh = perfref.group_shares(perfref.samples(data, pid))[0]
    clocks, cpu_ns = lptest.barrier_share(res)
    sampled = lptest.sampled_barrier_share(sh)
    # The shortfall per sleep (the threads' voluntary switches): time no timer can sample.
    per_sleep = (clocks - sampled) * cpu_ns / max(1, res["nvcsw"]) / 1e3
    return sampled - clocks, clocks, wall, per_sleep


def spread_run(rephase, tokens, binary, model):
    """Four daemons on one decode: their sync shares."""
    extra = [] if rephase else ["--no-sample-rephase"]
    ds = [lptest.Daemon("--once", "--sample-hz", "499", *extra) for _ in range(4)]
    for d in ds:
        d.wait_ready()
    run = subprocess.run([binary, "-m", model, "-n", str(tokens), "Once upon a time"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=600)
    if run.returncode:
        raise SystemExit("llama-simple failed")
    pid = int(re.search(r"pid (\d+) \(llama-simple\) runs ggml", ds[0].log()).group(1))
    shares = []
    for d in ds:
        d.wait_log("pid %d (llama-simple) exited" % pid)
        d.stop()
        shares.append(lptest.proc_of(d.report(), pid)["ggml"]["op_groups"]["share"]["sync"])
    return shares


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iters", type=int, default=60000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--tokens", type=int, default=400)
    a = ap.parse_args()
    b.need("perf", LIB, b.LLMPROFD)
    os.environ.setdefault("LLMPROFD", b.LLMPROFD)
    os.environ.setdefault("LPGGML", os.path.join(b.BUILD, "tests", "lpggml"))
    lptest.LLMPROFD = os.environ["LLMPROFD"]
    lptest.LPGGML = os.environ["LPGGML"]
    work = lptest.tmpdir("llmprofd-samplers-")

    who = ["llmprofd (per CPU, the default)", "llmprofd --sampler thread", "perf record -a",
           "perf record -- CMD", "steady: llmprofd (per CPU, the default)",
           "steady: llmprofd --no-sample-rephase"]
    res = b.alternate([(w, w) for w in who], a.rounds, lambda w: truth_run(w, a.iters, work),
                      log=lambda line: print(line, flush=True))
    rows = []
    for w in who:
        diffs = [x[0] for x in res[w]]
        rows.append([w, len(diffs), "%+.3f" % statistics.median(diffs),
                     "%+.3f to %+.3f" % (min(diffs), max(diffs)),
                     "%.1f" % statistics.median(x[3] for x in res[w]),
                     "%.3f" % statistics.median(x[1] for x in res[w]),
                     "%.2f" % statistics.median(x[2] for x in res[w])])

    binary = lptest.llama_simple()
    model = b.model("medium")
    spreads = {True: [], False: []}
    for r in range(a.runs):
        for rephase in ((True, False) if r % 2 else (False, True)):
            shares = spread_run(rephase, a.tokens, binary, model)
            spreads[rephase].append(shares)
            print("run %d/%d  %-28s sync %s" % (r + 1, a.runs,
                                               "restarted at random" if rephase else
                                               "fixed rate", " ".join("%.3f" % s for s in shares)),
                  flush=True)
    b.table("Which sampler: the barrier's share against the threads' own clocks",
            ["sampler", "runs", "sampled minus clocks (median)", "range",
             "under by, us a sleep", "clocks' barrier share under it", "wall s"], rows,
            notes=["fixture: lpggml, liblpomp's team barrier (spin 10 us, then futex), "
                   "matmul 40 us +-50 %%, 2 threads, %d iterations, %d Hz; \"steady\": "
                   "40 us on one thread and 20 on the other every time" % (a.iters, HZ)])
    b.table("Which sampler: four per-CPU samplers of one OpenMP decode",
            ["per-CPU timers", "runs", "sync shares of the four, per run",
             "range per run (median)"],
            [[("restarted at random (default)" if k else "fixed rate (--no-sample-rephase)"),
              len(v), "; ".join(" ".join("%.3f" % s for s in x) for x in v),
              "%.3f" % statistics.median(max(x) - min(x) for x in v)]
             for k, v in ((False, spreads[False]), (True, spreads[True]))],
            notes=["llama.cpp's OpenMP build (llama-simple, medium random-weight Q8_0), "
                   "%d tokens, 499 Hz" % a.tokens])


if __name__ == "__main__":
    lptest.run(main, timeout=3600)
