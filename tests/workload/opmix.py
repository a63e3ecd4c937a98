#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
"""Known aten ops, one after another, each for a share of the run, with the process's own
CPU clock read around each: the reference for llmprofd's op shares where torch.profiler's
self CPU time is not the same quantity (its time is the calling thread's; an op's OpenMP
workers burn CPU it does not see).

A token embedding's call first (the forward that makes a process an LLM process for
llmprofd), then the phases, in a loop until --seconds of CPU have gone:

  mm         torch.mm of two square matrices (the BLAS: OpenBLAS's threads, or the
             reference BLAS on the calling thread)
  mul        an elementwise multiply of large tensors: at::parallel_for's regions, the
             work only in them (every thread, the caller's included, runs a chunk)
  softmax    torch.softmax over a large last dimension: aten::_softmax, in parallel
  python     a loop of pure Python: outside ops

Each phase's CPU time (time.process_time(): every thread's) goes to stdout as JSON at the
end, with the clock's total; --sync-fd R,W writes a byte to W and waits for one on R
before the phases (the embedding has run) and after them (a test reads the daemon then).
--churn: while it waits before the phases, it opens short parallel regions, thousands a
second (a profiler that attaches its region probes then sees regions begin and end
unpaired)."""
import argparse
import json
import os
import time

import torch


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--seconds", type=float, default=8.0, help="CPU seconds, all phases")
    ap.add_argument("--phases", default="mm,mul,softmax,python")
    ap.add_argument("--weights", default="4,3,2,1", help="relative CPU share of each phase")
    ap.add_argument("--sync-fd", default="", help="R,W: a handshake at the phases' ends")
    ap.add_argument("--churn", action="store_true",
                    help="before the phases, short parallel regions until the handshake's "
                    "byte comes (with --sync-fd)")
    a = ap.parse_args()

    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    # Each call long enough (milliseconds) that its Python and its region's wake-ups are a
    # small part of it: those count outside the op, and as sync, not in its phase's op.
    x = torch.randn(768, 768)
    y = torch.randn(768, 768)
    big = torch.randn(1 << 23)
    big2 = torch.randn(1 << 23)
    out = torch.empty(1 << 23)
    sm = torch.randn(256, 1 << 14)
    # The embedding last: the process is an LLM process from here on, its setup done.
    emb = torch.nn.Embedding(1000, 64)
    with torch.no_grad():
        emb(torch.zeros((1, 4), dtype=torch.long))
    sync = tuple(int(x) for x in a.sync_fd.split(",")) if a.sync_fd else None

    def handshake(churn=False):
        if not sync:
            return
        os.write(sync[1], b"w")
        if not churn:
            os.read(sync[0], 1)
            return
        # Until the byte comes: parallel regions of some 10 us, thousands a second (a
        # multiply of twice at::parallel_for's grain: a region of two chunks each call).
        c1, c2, co = torch.randn(1 << 16), torch.randn(1 << 16), torch.empty(1 << 16)
        os.set_blocking(sync[0], False)
        while True:
            torch.mul(c1, c2, out=co)
            try:
                if os.read(sync[0], 1):
                    break
            except BlockingIOError:
                pass
        os.set_blocking(sync[0], True)

    handshake(a.churn)

    def mm():
        torch.mm(x, y)

    def mul():
        torch.mul(big, big2, out=out)

    def softmax():
        torch.softmax(sm, dim=-1)

    def python():
        s = 0
        for i in range(100000):
            s += i * i
        return s

    run = {"mm": mm, "mul": mul, "softmax": softmax, "python": python}
    phases = a.phases.split(",")
    weights = [float(w) for w in a.weights.split(",")]
    cpu = {p: 0.0 for p in phases}
    calls = {p: 0 for p in phases}
    slice_s = 0.5  # CPU seconds of all weights' sum per round
    t0 = time.process_time()
    w0 = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    with torch.no_grad():
        while time.process_time() - t0 < a.seconds:
            for p, w in zip(phases, weights):
                want = slice_s * w / sum(weights)
                c0 = time.process_time()
                while time.process_time() - c0 < want:
                    run[p]()
                    calls[p] += 1
                cpu[p] += time.process_time() - c0
    total = time.process_time() - t0
    end = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    handshake()
    print(json.dumps({"cpu": cpu, "calls": calls, "total": total, "pid": os.getpid(),
                      "threads": torch.get_num_threads(), "begin_ns": w0,
                      "end_ns": end}), flush=True)


if __name__ == "__main__":
    main()
