#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
"""Cost of the probes: the time one probed call of a hot function costs, from a tight loop
over a function named ggml_barrier (bench/hotloop.c) with no tracer, with llmprofd in its
default configuration (no per-call probes), with llmprofd's precise mode (uprobe and
uretprobe on every matmul and barrier function) with its probes on the first emulated
instruction and, with --no-fast-entry, on the first instruction, with `funclatency` from
libbpf-tools, and with a bpftrace uprobe/uretprobe pair building the same histogram;
alternating rounds.

    sudo bench/probes.py [--rounds 5] [--calls 1000000]
"""
import argparse
import json
import os
import subprocess

import benchlib as b

HOTLOOP = os.environ.get("HOTLOOP", os.path.join(b.BUILD, "hotloop"))


def run_loop(calls, attach):
    """Starts the loop, lets attach(pid) set a tracer up, then times the calls."""
    p = subprocess.Popen([HOTLOOP, str(calls)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         text=True)
    pid = json.loads(p.stdout.readline())["pid"]
    done = attach(pid)
    try:
        p.stdin.write("go\n")
        p.stdin.flush()
        res = json.loads(p.stdout.readline())
        p.wait(timeout=60)
    finally:
        if done:
            done()
    return res["ns_per_call"]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=1000000)
    a = ap.parse_args()
    b.need(HOTLOOP, "/usr/sbin/funclatency", "bpftrace", b.LLMPROFD)
    # BEGIN runs once every probe is attached: its line is the signal to start.
    bt = ("BEGIN { printf(\"attached\\n\"); } uprobe:%s:ggml_barrier { @start[tid] = nsecs; } "
          "uretprobe:%s:ggml_barrier /@start[tid]/ { @ns = hist(nsecs - @start[tid]); "
          "delete(@start[tid]); }" % (HOTLOOP, HOTLOOP))
    # The entry probe alone: how the pair's cost splits between entry and return.
    entry = ("BEGIN { printf(\"attached\\n\"); } uprobe:%s:ggml_barrier { @calls = count(); }"
             % HOTLOOP)

    def measure(cfg):
        kind = cfg[0]
        if kind == "none":
            return run_loop(a.calls, lambda pid: None)
        if kind == "llmprofd":
            d = b.Daemon(*cfg[1])

            def attach(pid):
                d.wait_log("pid %d (hotloop) runs ggml" % pid)
                if "--precise-duty" in cfg[1]:
                    d.wait_log("pid %d: precise mode on" % pid)
                return d.stop
            return run_loop(a.calls, attach)
        if kind == "funclatency":
            return run_loop(a.calls, lambda pid: b.Tool(
                ["stdbuf", "-oL", "/usr/sbin/funclatency", "-p", str(pid),
                 ":ggml_barrier"], "Tracing").stop)
        return run_loop(a.calls, lambda pid: b.Tool(["bpftrace", "-e", cfg[1]], "attached").stop)
    configs = [
        ("no tracer", ("none",)),
        ("llmprofd, default (no per-call probes)", ("llmprofd", [])),
        ("llmprofd, precise mode", ("llmprofd", ["--precise-duty", "1"])),
        ("llmprofd, precise mode, --no-fast-entry",
         ("llmprofd", ["--precise-duty", "1", "--no-fast-entry"])),
        ("funclatency (libbpf-tools)", ("funclatency",)),
        ("bpftrace uprobe+uretprobe, hist", ("bpftrace", bt)),
        ("bpftrace uprobe only (a count)", ("bpftrace", entry)),
    ]
    res = b.alternate(configs, a.rounds, measure)
    base = b.summary(res[configs[0][0]])[0]
    rows = []
    for name, _ in configs:
        med, lo, hi = b.summary(res[name])
        rows.append((name, "%.1f" % med, "%.1f-%.1f" % (lo, hi), "%.2f" % ((med - base) / 1e3),
                     "%.1f" % (med / base)))
    b.table("Cost of one probed call", ["tracer", "median ns per call", "min-max",
                                         "added us per call", "times slower"], rows,
            ["load: bench/hotloop.c, %d calls of a ggml_barrier() that returns at once, in a "
             "tight loop, %d alternating rounds; a probed call takes an entry and a return "
             "probe. Its code starts as llama.cpp's does: endbr64, then a compare and jcc. "
             "The other tracers probe the first instruction." % (a.calls, a.rounds)])


if __name__ == "__main__":
    main()
