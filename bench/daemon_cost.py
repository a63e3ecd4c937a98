#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
"""The daemon itself: resident memory and kernel map memory with 1, 100 and 1,000 tracked
processes; its CPU use while idle and while Prometheus scrapes /metrics every second; and
the time of `llmprofctl dump`, `llmprofctl list`, `llmprofctl top -b -n 1`, `llmprofctl
doctor` (every process's findings: their context read from /proc) and /metrics at those
sizes. The tracked processes are idle copies of sleep(1) found by --comm.

    sudo bench/daemon_cost.py [--sizes 1,100,1000] [--window 10] [--repeat 10]
"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time
import urllib.request

import benchlib as b

COMM = "lpbench-idle"
PORT = 9799


def cpu_seconds(pid):
    f = open("/proc/%d/stat" % pid).read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")


def rss_kib(pid):
    return next(int(l.split()[1]) for l in open("/proc/%d/status" % pid)
                if l.startswith("VmRSS"))


def timed(fn, repeat):
    times = []
    for _ in range(repeat):
        t0 = time.monotonic()
        fn()
        times.append(time.monotonic() - t0)
    return statistics.median(times) * 1e3


def ctl(d, *args):
    subprocess.run([b.LLMPROFCTL, "--socket", d.socket] + list(args), check=True,
                   stdout=subprocess.DEVNULL, timeout=120)


def scrape():
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % PORT, timeout=60) as r:
        return r.read()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1,100,1000")
    ap.add_argument("--window", type=float, default=10, help="seconds per CPU measurement")
    ap.add_argument("--repeat", type=int, default=10)
    a = ap.parse_args()
    b.need(b.LLMPROFD, b.LLMPROFCTL)
    tmp = tempfile.mkdtemp(prefix="lpbench-")
    idle = os.path.join(tmp, COMM)
    shutil.copy(shutil.which("sleep"), idle)
    rows = []
    for n in [int(x) for x in a.sizes.split(",")]:
        d = b.Daemon("--comm", COMM, "--max-processes", str(max(256, n + 64)),
                     "--metrics-max-processes", str(n), metrics="127.0.0.1:%d" % PORT)
        procs = [subprocess.Popen([idle, "3600"]) for _ in range(n)]
        try:
            deadline = time.monotonic() + 120
            while True:
                st = subprocess.run([b.LLMPROFCTL, "--socket", d.socket, "status", "--json"],
                                    capture_output=True, text=True, check=True).stdout

                st = json.loads(st)
                if st["processes"]["running"] >= n:
                    break
                if time.monotonic() > deadline:
                    raise SystemExit("only %d of %d tracked" % (st["processes"]["running"], n))
                time.sleep(0.2)
            time.sleep(1)
            c0 = cpu_seconds(d.proc.pid)
            time.sleep(a.window)
            idle_cpu = (cpu_seconds(d.proc.pid) - c0) / a.window
            c0, t0, size = cpu_seconds(d.proc.pid), time.monotonic(), 0
            while time.monotonic() - t0 < a.window:
                size = len(scrape())
                time.sleep(max(0, 1 - (time.monotonic() - t0) % 1))
            scrape_cpu = (cpu_seconds(d.proc.pid) - c0) / (time.monotonic() - t0)
            pid = str(procs[0].pid)
            rows.append((n, "%.1f" % (rss_kib(d.proc.pid) / 1024),
                         "%.1f" % (st["kernel_memory_bytes"] / 2**20),
                         "%.2f%%" % (100 * idle_cpu), "%.2f%%" % (100 * scrape_cpu),
                         "%.1f" % timed(lambda: ctl(d, "dump", "--pid", pid), a.repeat),
                         "%.1f" % timed(lambda: ctl(d, "list"), a.repeat),
                         "%.1f" % timed(lambda: ctl(d, "top", "-b", "-n", "1"),
                                        max(1, a.repeat // 5)),
                         "%.1f" % timed(lambda: ctl(d, "doctor"), max(1, a.repeat // 5)),
                         "%.1f" % timed(scrape, a.repeat), "%.0f" % (size / 1024)))
            print("size %d done" % n, flush=True)
        finally:
            for p in procs:
                p.kill()
            for p in procs:
                p.wait()
            d.stop()
    shutil.rmtree(tmp, ignore_errors=True)
    b.table("The daemon itself", ["tracked processes", "daemon RSS MiB", "kernel maps MiB",
                                  "CPU idle", "CPU, 1 scrape/s", "dump ms", "list ms",
                                  "top -b -n 1 ms", "doctor ms", "/metrics ms", "/metrics KiB"],
            rows,
            ["tracked: idle processes found by --comm (no ggml: their documents have every "
             "histogram and counter, but no ggml objects); --max-processes raised to fit; "
             "/metrics exports every process (--metrics-max-processes = size); CPU from "
             "/proc/PID/stat over %g s; times are medians of %d runs (top, doctor: %d)"
             % (a.window, a.repeat, max(1, a.repeat // 5))])


if __name__ == "__main__":
    main()
