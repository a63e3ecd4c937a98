#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
"""What reading CPython's frames costs the sampler, as the kernel times it.

tests/workload/pyburn.py (a CPython 3.11 process whose main thread spins in Python,
main -> work -> burn_*: some ten interpreter frames deep with the module's) tracked by
--pid, at 499 Hz, in four configurations, the order rotating by round:

  - native: --no-python-frames, no profile window (the sampler places each sample);
  - outside: the default, no window: a sample outside ops is also counted for its
    innermost Python function (its thread state found, one frame read);
  - native stacks: --no-python-frames with a profile window open (each sample's native
    frames walked and sent);
  - python stacks: the default with a window open (its interpreter frames read too).

With kernel.bpf_stats_enabled, lp_sample's run time per run over each run (the programs'
runs for other tasks' samples are a few on an idle machine), and the Python frames a
stack held.

    sudo bench/python.py [--rounds 3] [--seconds 8]"""
import argparse
import json
import os
import statistics
import subprocess

import benchlib as b
import ops
import torchref

PYBURN = os.path.join(b.ROOT, "tests", "workload", "pyburn.py")
CONFIGS = [("native", ["--no-python-frames"], False), ("outside", [], False),
           ("native stacks", ["--no-python-frames"], True), ("python stacks", [], True)]


def run(args, window, seconds):
    """lp_sample's (runs, ns) over one pyburn run tracked by a daemon with args."""
    p = subprocess.Popen([torchref.PYTHON, PYBURN, "--seconds", str(seconds)],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    pid = json.loads(p.stdout.readline())["pid"]
    d = b.Daemon("--pid", str(pid), "--sample-hz", "499", *args)
    try:
        if "--no-python-frames" not in args:
            d.wait_log("pid %d (python3) runs CPython" % pid)
        d.wait_log("tracking pid %d" % pid)
        w = None
        if window:
            w = subprocess.Popen(["curl", "-s", "-o", "/dev/null", "--max-time",
                                  str(seconds + 60), "--unix-socket", d.socket,
                                  "http://localhost/debug/pprof/profile?seconds=%d&pid=%d"
                                  % (seconds + 5, pid)])
        before = ops.prog_stats(d.proc.pid, "lp_sample")
        p.stdin.write("go\n")
        p.stdin.flush()
        p.stdout.readline()
        after = ops.prog_stats(d.proc.pid, "lp_sample")
        p.stdin.close()
        p.wait(timeout=60)
        if w:
            w.kill()
            w.wait()
    finally:
        d.stop()
    return after[0] - before[0], after[1] - before[1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=8)
    a = ap.parse_args()
    why = torchref.available()
    if why:
        raise SystemExit("CPython 3.11: %s" % why)
    b.need(b.LLMPROFD, "bpftool", "curl")
    per = {name: [] for name, _, _ in CONFIGS}
    with b.bpf_stats():
        for r in range(a.rounds):
            order = CONFIGS[r % len(CONFIGS):] + CONFIGS[:r % len(CONFIGS)]
            for name, args, window in order:
                runs, ns = run(args, window, a.seconds)
                per[name].append(ns / max(1, runs) / 1e3)
                print("round %d/%d  %-14s %d runs, %.2f us each" % (
                    r + 1, a.rounds, name, runs, per[name][-1]), flush=True)
    base = statistics.median(per["native"])
    rows = [(name, "%.2f" % statistics.median(v), "%.2f-%.2f" % (min(v), max(v)),
             "%.2f" % (statistics.median(v) / base)) for name, v in per.items()]
    b.table("Reading CPython's frames", ["configuration", "lp_sample us/run (median)",
                                         "min-max", "ratio to native"], rows,
            ["workload: tests/workload/pyburn.py, %.0f s of CPU per run, 499 Hz, %d rounds"
             % (a.seconds, a.rounds)])


if __name__ == "__main__":
    main()
