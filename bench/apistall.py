#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
"""Does the API wait for probes? Latency of GET /v1/version, asked every 10 ms over the
Unix socket, while back-to-back precise windows (and records with op spans, which use the
same probes) open and close on llama.cpp's OpenMP llama-simple, beside a CPU hog (the
probes' attach and detach wait for RCU grace periods, longer on a busy host). Each binary
(--baseline OLD runs an older llmprofd beside this tree's, alternating) gets the same
windows; printed: p50, p99 and max latency, and the time from asking for a window to its
probes being on, and from its end to the probes being off (from the daemon's log, where
it says so). --links compares this tree's two ways of holding a window's probes: a link
per probe (--uprobe-links single) and multi-uprobe links (multi), where the kernel has them.

    sudo bench/apistall.py [--windows 10] [--seconds 1] [--baseline OLD/llmprofd] [--links]
"""
import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import threading
import time

import benchlib as b
import lptest


def ask(sock_path, method, path, body=b""):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(120)
    s.connect(sock_path)
    s.sendall(("%s %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: %d\r\n"
               "\r\n" % (method, path, len(body))).encode() + body)
    chunks = []
    while True:
        x = s.recv(1 << 20)
        if not x:
            break
        chunks.append(x)
    s.close()
    data = b"".join(chunks)
    head, _, text = data.partition(b"\r\n\r\n")
    return int(head.split(b" ", 2)[1]), text


class Asker(threading.Thread):
    """GET /v1/version every 10 ms; each answer's latency in ms."""

    def __init__(self, sock_path):
        super().__init__(daemon=True)
        self.sock_path, self.lat, self.stop = sock_path, [], threading.Event()

    def run(self):
        while not self.stop.is_set():
            t0 = time.monotonic()
            ask(self.sock_path, "GET", "/v1/version")
            self.lat.append((time.monotonic() - t0) * 1e3)
            self.stop.wait(0.01)


def measure(cfg, a, model, simple):
    binary, args = cfg
    d = b.Daemon("--comm", "llama-simple", *args, binary=binary)
    hog = subprocess.Popen(["python3", "-c", "while True: pass"])
    llama = None
    try:
        llama = subprocess.Popen([simple, "-m", model, "-n", "100000", "Once upon a time"],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        d.wait_log("pid %d (llama-simple) runs ggml" % llama.pid)
        time.sleep(1)  # some samples, for precise mode to choose its ops by
        asker = Asker(d.socket)
        asker.start()
        path = "/v1/processes/%d" % llama.pid
        for w in range(a.windows):
            off = d.text().count("pid %d: precise mode off" % llama.pid)
            if w % 2 == 0:
                status, _ = ask(d.socket, "POST", path + "/precise",
                                json.dumps({"seconds": a.seconds}).encode())
            else:
                status, _ = ask(d.socket, "POST", path + "/record",
                                json.dumps({"seconds": a.seconds, "ops": True}).encode())
            if status not in (200, 202):
                raise SystemExit("window %d: %d\n%s" % (w, status, d.text()[-2000:]))
            d.wait_log_count("pid %d: precise mode off" % llama.pid, off + 1)
            if w % 2 == 1:
                lptest.poll("the record", lambda: ask(d.socket, "GET", path + "/record")[0]
                            == 200, timeout=120, interval=0.2)
        time.sleep(0.5)
        asker.stop.set()
        asker.join()
        on = [float(x) for x in re.findall(r"probes on [^\n]* in ([\d.]+) ms", d.text())]
        off = [float(x) for x in re.findall(r"probes off[^\n]* in ([\d.]+) ms", d.text())]
        return asker.lat, on, off
    finally:
        hog.kill()
        if llama:
            llama.kill()
            llama.wait()
        d.stop()


def pct(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(p / 100 * len(v)))]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--windows", type=int, default=20)
    p.add_argument("--seconds", type=float, default=1)
    p.add_argument("--rounds", type=int, default=1)
    p.add_argument("--baseline", help="an older llmprofd binary, run beside this tree's")
    p.add_argument("--links", action="store_true",
                   help="this tree with a link per probe beside multi-uprobe links")
    a = p.parse_args()
    simple = lptest.llama_simple()
    model = b.model("medium")
    configs = [("this tree", (b.LLMPROFD, []))]
    if a.baseline:
        configs.insert(0, ("baseline", (a.baseline, [])))
    if a.links:
        configs = [("a link per probe", (b.LLMPROFD, ["--uprobe-links", "single"])),
                   ("multi-uprobe links", (b.LLMPROFD, ["--uprobe-links", "multi"]))]
    # Each round's line names the configuration; its figures come in the table.
    res = b.alternate(configs, a.rounds, lambda binary: measure(binary, a, model, simple),
                      log=lambda line: print(line[:60].rstrip()))
    rows = []
    for name, _ in configs:
        lat = [x for r in res[name] for x in r[0]]
        on = [x for r in res[name] for x in r[1]]
        off = [x for r in res[name] for x in r[2]]
        rows.append([name, len(lat), "%.1f" % statistics.median(lat), "%.1f" % pct(lat, 99),
                     "%.1f" % max(lat),
                     "%.0f" % statistics.median(on) if on else "not logged",
                     "%.0f" % statistics.median(off) if off else "not logged"])
    b.table("API latency while probes come and go",
            ["binary", "answers", "p50 ms", "p99 ms", "max ms", "attach ms (median)",
             "detach ms (median)"], rows,
            notes=["%d windows of %.1f s each round (precise and record with op spans in "
                   "turn) on llama-simple (OpenMP, medium model) beside a CPU hog; "
                   "GET /v1/version every 10 ms; %d round(s)." % (a.windows, a.seconds,
                                                                   a.rounds)])


if __name__ == "__main__":
    main()
