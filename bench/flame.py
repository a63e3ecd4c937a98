#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
"""What flame graphs cost: the sampler's call stacks, sent only while a profile window is
open (llmprofctl flame, /debug/pprof/profile).

1. tokens/s of llama.cpp's OpenMP build under one llmprofd with a profile window open over
   the whole run (stacks kept) and without one (stacks not kept), in pairs, the order
   alternating, at the default 99 Hz: the median of the pairs' ratios with a 95 %
   confidence interval (kcost.median_ci). The goal: at least 0.99.
2. The sampler's time per sample as the kernel times it (kernel.bpf_stats_enabled,
   lp_sample's run_time_ns / run_cnt) over those runs, with and without stacks.
3. The daemon's own CPU (per second of wall time) and its RSS while a scraper keeps a
   window open (one 10 s window after another, as Parca's delta scrapes do), with 1 and 8
   busy ggml processes (tests/fixtures/lpops), at 99 Hz.

    sudo bench/flame.py [--pairs 10] [--tokens 200] [--seconds 30] [--procs 1,8]"""
import argparse
import os
import statistics
import subprocess
import time

import benchlib as b
import kcost
import lptest
import ops

LPOPS = os.environ.get("LPOPS", os.path.join(b.BUILD, "tests", "lpops"))


def window(d, seconds):
    """A profile window held open by a client, as a scraper holds one."""
    return subprocess.Popen(["curl", "-s", "-o", "/dev/null", "--max-time", str(seconds + 30),
                             "--unix-socket", d.socket,
                             "http://localhost/debug/pprof/profile?seconds=%d" % seconds])


def sample_stats(d):
    return ops.prog_stats(d.proc.pid, "lp_sample")


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        return {k: int(v.split()[0]) for k, v in (line.split(":", 1) for line in f)
                if k in ("VmRSS", "VmHWM")}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=10)
    ap.add_argument("--tokens", type=int, default=200)
    ap.add_argument("--seconds", type=int, default=30, help="of each daemon measurement")
    ap.add_argument("--procs", default="1,8")
    a = ap.parse_args()
    b.need(b.LLMPROFD, "bpftool", "curl", LPOPS)
    argv = ops.argv_of("omp", a.tokens)

    # 1 and 2: pairs, one daemon for both of a pair's runs.
    ratios, per_sample = [], {"stacks": [], "none": []}
    with b.bpf_stats():
        for i in range(a.pairs):
            d = b.Daemon("--comm", "llama-simple")
            try:
                ops.tokens_per_s(ops.argv_of("omp", 4))  # its symbols read once, outside
                res = {}
                for kept in ((False, True) if i % 2 == 0 else (True, False)):
                    w = window(d, 300) if kept else None
                    if w:
                        lptest.poll("the window to open", lambda: lptest.curl(
                            d.socket, "GET", "/v1/status")[1]["profiles"]["windows_open"],
                                    timeout=10)
                    n0, t0 = sample_stats(d)
                    res[kept] = ops.tokens_per_s(argv)
                    n1, t1 = sample_stats(d)
                    if w:
                        w.kill()
                        w.wait()
                    per_sample["stacks" if kept else "none"].append((t1 - t0) / max(1, n1 - n0))
                ratios.append(res[True] / res[False])
                print("pair %d/%d  without stacks %.2f, with %.2f tokens/s: %.4f"
                      % (i + 1, a.pairs, res[False], res[True], ratios[-1]), flush=True)
            finally:
                d.stop()
    m, lo, hi = kcost.median_ci(ratios)
    b.table("tokens/s with a profile window open / without: llama.cpp's OpenMP build "
            "(`bench/flame.py`)",
            ["pairs", "median ratio", "95 % CI of the median", "min-max",
             "lp_sample ns/run without stacks", "with stacks"],
            [(len(ratios), "%.4f" % m, "%.4f-%.4f" % (lo, hi) if lo is not None else "too few",
              "%.4f-%.4f" % (min(ratios), max(ratios)),
              "%.0f" % statistics.median(per_sample["none"]),
              "%.0f" % statistics.median(per_sample["stacks"]))],
            ["llama-simple from source (OpenMP), Q8_0 medium random weights, %d tokens, default "
             "threads, 99 Hz per CPU; each pair under one daemon, one run with a 300 s "
             "profile window open and one without, the order alternating; lp_sample's time "
             "per run as the kernel times it (kernel.bpf_stats_enabled)" % a.tokens])

    # 3. The daemon's CPU and memory while a scraper keeps windows open.
    rows = []
    for n in (int(x) for x in a.procs.split(",")):
        d = b.Daemon()
        procs = [subprocess.Popen([LPOPS, "--tokens", "100000000"], stdout=subprocess.DEVNULL)
                 for _ in range(n)]
        try:
            d.wait_log_count("runs ggml", n)
            time.sleep(2)
            c0, t0 = b.cpu_seconds(d.proc.pid), time.monotonic()
            end = t0 + a.seconds
            while time.monotonic() < end:
                w = window(d, 10)
                w.wait()
            c1, t1 = b.cpu_seconds(d.proc.pid), time.monotonic()
            mem = rss_kib(d.proc.pid)
            rows.append((n, "%.2f %%" % (100 * (c1 - c0) / (t1 - t0)),
                         "%.1f MiB" % (mem["VmRSS"] / 1024), "%.1f MiB" % (mem["VmHWM"] / 1024)))
            print("%d busy processes: daemon CPU %s, RSS %s, peak %s" % rows[-1], flush=True)
        finally:
            for p in procs:
                p.kill()
                p.wait()
            d.stop()
    b.table("The daemon while a scraper keeps profile windows open (`bench/flame.py`)",
            ["busy ggml processes", "daemon CPU / wall", "RSS at the end", "peak RSS"], rows,
            ["99 Hz per CPU; tests/fixtures/lpops busy on every thread; one 10 s window after "
             "another for %d s, as a delta scrape every 10 s; the daemon's user + system time "
             "(/proc/PID/stat) over wall time" % a.seconds])


if __name__ == "__main__":
    main()
