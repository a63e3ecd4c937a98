#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
"""The daemon itself: resident memory (steady, peak, and once the processes have exited and
only their records are kept) and kernel map memory with 1, 100 and 1,000 tracked
processes, and the peak a bandwidth measurement adds (its buffer is mapped for the
measurement and unmapped after it); its CPU use while idle and while Prometheus scrapes
/metrics every second; and
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


def rss_kib(pid, field="VmRSS"):
    """VmRSS, or VmHWM: the peak resident set since the process started."""
    return next(int(l.split()[1]) for l in open("/proc/%d/status" % pid)
                if l.startswith(field + ":"))


def api(d, method, path):
    out = subprocess.run(["curl", "-sS", "--unix-socket", d.socket, "-X", method,
                          "http://localhost" + path], capture_output=True, text=True,
                         check=True, timeout=60).stdout
    return json.loads(out)


def status(d):
    return json.loads(subprocess.run([b.LLMPROFCTL, "--socket", d.socket, "status", "--json"],
                                     capture_output=True, text=True, check=True).stdout)


def wait(what, cond, timeout=120):
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            raise SystemExit("timed out waiting for " + what)
        time.sleep(0.2)


def bandwidth_peak(d):
    """RSS before, peak during and RSS after one POST /v1/bandwidth (MiB), and the buffer."""
    before = rss_kib(d.proc.pid)
    api(d, "POST", "/v1/bandwidth")
    wait("the bandwidth measurement",
         lambda: api(d, "GET", "/v1/bandwidth")["state"] in ("measured", "failed"))
    bw = api(d, "GET", "/v1/bandwidth")
    return (before / 1024, rss_kib(d.proc.pid, "VmHWM") / 1024, rss_kib(d.proc.pid) / 1024,
            bw.get("buffer_bytes", 0) / 2**20, bw["state"])


def timed(fn, repeat):
    times = []
    for _ in range(repeat):
        t0 = time.monotonic()
        fn()
        times.append(time.monotonic() - t0)
    return statistics.median(times) * 1e3


def ctl(d, *args):
    """Runs llmprofctl; doctor's own statuses (6, 7: its worst finding) are not failures."""
    p = subprocess.run([b.LLMPROFCTL, "--socket", d.socket] + list(args),
                       stdout=subprocess.DEVNULL, timeout=120)
    if p.returncode not in ((0, 6, 7) if args[0] == "doctor" else (0,)):
        raise subprocess.CalledProcessError(p.returncode, p.args)


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
    rows, mem, bw = [], [], None
    for n in [int(x) for x in a.sizes.split(",")]:
        # Only its own idle processes: a host's LLM processes would be found too.
        d = b.Daemon("--no-discover", "--comm", COMM, "--max-processes", str(max(256, n + 64)),
                     "--metrics-max-processes", str(n), metrics="127.0.0.1:%d" % PORT)
        procs = [subprocess.Popen([idle, "3600"]) for _ in range(n)]
        try:
            wait("%d processes tracked" % n, lambda: status(d)["processes"]["running"] >= n)
            st = status(d)
            time.sleep(1)
            c0 = b.cpu_seconds(d.proc.pid)
            time.sleep(a.window)
            idle_cpu = (b.cpu_seconds(d.proc.pid) - c0) / a.window
            c0, t0, size = b.cpu_seconds(d.proc.pid), time.monotonic(), 0
            while time.monotonic() - t0 < a.window:
                size = len(scrape())
                time.sleep(max(0, 1 - (time.monotonic() - t0) % 1))
            scrape_cpu = (b.cpu_seconds(d.proc.pid) - c0) / (time.monotonic() - t0)
            pid = str(procs[0].pid)
            steady = rss_kib(d.proc.pid) / 1024
            rows.append((n, "%.1f" % steady,
                         "%.1f" % (st["kernel_memory_bytes"] / 2**20),
                         "%.2f%%" % (100 * idle_cpu), "%.2f%%" % (100 * scrape_cpu),
                         "%.1f" % timed(lambda: ctl(d, "dump", "--pid", pid), a.repeat),
                         "%.1f" % timed(lambda: ctl(d, "list"), a.repeat),
                         "%.1f" % timed(lambda: ctl(d, "top", "-b", "-n", "1"),
                                        max(1, a.repeat // 5)),
                         "%.1f" % timed(lambda: ctl(d, "doctor"), max(1, a.repeat // 5)),
                         "%.1f" % timed(scrape, a.repeat), "%.0f" % (size / 1024)))
            # The peak of all of it, then the records of the same processes once exited.
            peak = rss_kib(d.proc.pid, "VmHWM") / 1024
            for p in procs:
                p.kill()
            for p in procs:
                p.wait()
            wait("%d processes exited" % n, lambda: status(d)["processes"]["running"] == 0)
            mem.append((n, "%.1f" % steady, "%.1f" % peak,
                        "%.1f" % (rss_kib(d.proc.pid) / 1024)))
            if n == min(int(x) for x in a.sizes.split(",")):
                bw = bandwidth_peak(d)
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
    b.table("The daemon's resident memory", ["tracked processes", "steady RSS MiB",
                                             "peak RSS MiB", "RSS MiB, all of them exited"],
            mem, ["steady: after the measurements above; peak: VmHWM, the most resident at "
                  "once since the daemon started; exited: their records kept, the "
                  "processes gone"])
    if bw:
        b.table("A bandwidth measurement", ["RSS before MiB", "peak RSS MiB", "RSS after MiB",
                                            "buffer MiB", "state"],
                [("%.1f" % bw[0], "%.1f" % bw[1], "%.1f" % bw[2], "%.0f" % bw[3], bw[4])],
                ["POST /v1/bandwidth with %d tracked processes: the buffer is mapped for "
                 "the measurement and unmapped after it" % min(int(x) for x in
                                                                a.sizes.split(","))])


if __name__ == "__main__":
    main()
