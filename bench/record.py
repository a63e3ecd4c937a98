#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
"""What recording a timeline costs: tokens/s of real llama.cpp (node-llama-cpp) under a
daemon with no record, a record without op spans (--no-ops) and a record with them
(precise mode's probes for the window), in alternating rounds, each record's window
covering the whole decoding; and what a record produces: events, and bytes of JSON and of
gzip'ed JSON, per second of decoding.

--stream: a long record with the defaults (op spans), streamed in Perfetto's protobuf
format as it is recorded, against the JSON format rendered at the end, in alternating
rounds, on llama.cpp's OpenMP llama-simple (4 threads on this 2-CPU host): how long the
command took for the window asked, events, lost and dropped, bytes per second of window,
and the daemon's CPU time and peak memory (a fresh daemon per run).

    sudo bench/record.py [--rounds 6] [--tokens 64] [--shape tinyllama]
    sudo bench/record.py --stream [--window 60] [--rounds 2]
"""
import argparse
import gzip
import json
import os
import re
import subprocess
import time

import benchlib as b
import lptest

WORKLOAD = os.path.join(b.ROOT, "tests", "workload")
OPS = "mul_mat,flash_attn_ext,soft_max,rms_norm,rms_norm_mul_fused,rope,glu,add,mul,get_rows,cpy,set_rows"
CONFIGS = [("llmprofd, no record", None), ("record --no-ops", False), ("record, op spans", True)]


def run(model, a, ops, produced):
    # The ops to probe by name: precise mode otherwise picks those with samples, and the
    # driver has none before "go". Names it lacks are only logged.
    d = b.Daemon("--sample-hz", "199", "--precise-ops", OPS)
    drv = subprocess.Popen(["node", os.path.join(WORKLOAD, "driver.mjs"), "--model", model,
                            "--tokens", str(a.tokens), "--threads", "2", "--prompt", "16",
                            "--wait-go"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        pid = json.loads(drv.stdout.readline())["pid"]
        d.wait_log("pid %d (node) runs ggml" % pid)
        path = "/v1/processes/%d/record" % pid
        if ops is not None:
            body = json.dumps({"seconds": a.window, "ops": ops})
            subprocess.run(["curl", "-sf", "--unix-socket", d.socket, "-X", "POST", "-d", body,
                            "http://localhost" + path], check=True, capture_output=True)
            d.wait_log("pid %d: recording a timeline" % pid)
            if ops:
                d.wait_log("pid %d: precise probes on " % pid)
        drv.stdin.write(b"go\n")
        drv.stdin.flush()
        res = json.loads(drv.stdout.readline())
        drv.stdin.close()
        drv.wait(timeout=60)
        if ops is not None:
            deadline = time.monotonic() + a.window + 30
            while True:
                out = subprocess.run(["curl", "-s", "-o", "-", "-w", "\n%{http_code}",
                                      "--unix-socket", d.socket, "http://localhost" + path],
                                     capture_output=True, check=True).stdout
                text, _, code = out.rpartition(b"\n")
                if code == b"200" or time.monotonic() > deadline:
                    break
                time.sleep(0.5)
            doc = json.loads(text)
            decode = [e for e in doc["traceEvents"] if e["ph"] == "X"
                      and e.get("cat") == "decode"]
            busy = (max(e["ts"] + e["dur"] for e in decode) - min(e["ts"] for e in decode)) / 1e6
            produced.setdefault(ops, []).append(
                (doc["otherData"]["events"] / busy, len(text) / busy,
                 len(gzip.compress(text, 6)) / busy, doc["otherData"]["events_lost"]))
        return res["tokens_per_s"]
    finally:
        if drv.poll() is None:
            drv.kill()
        d.stop()


def proc_stat(pid):
    """(user + system CPU seconds, peak resident MiB) of pid."""
    with open("/proc/%d/status" % pid) as f:
        hwm = next(int(l.split()[1]) for l in f if l.startswith("VmHWM:"))
    return b.cpu_seconds(pid), hwm / 1024


def streamed(simple, model, a, fmt, work):
    """One long record of llama-simple in format fmt, by llmprofctl as a user runs it."""
    d = b.Daemon("--comm", "llama-simple")
    llama = subprocess.Popen([simple, "-m", model, "-n", "100000", "Once upon a time"],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        d.wait_log("pid %d (llama-simple) runs ggml" % llama.pid)
        # Decoding, not loading: a CPU second of the engine's, then the window.
        lptest.poll("llama-simple decoding", lambda: proc_stat(llama.pid)[0] > 1,
                    timeout=120, interval=0.1)
        out = os.path.join(work, "rec.%s" % ("json.gz" if fmt == "json" else "perfetto-trace"))
        cpu0, _ = proc_stat(d.proc.pid)
        t0 = time.monotonic()
        p = subprocess.run([b.LLMPROFCTL, "--socket", d.socket, "record", "--pid",
                            str(llama.pid), "--seconds", str(a.window), "-o", out],
                           capture_output=True, text=True, timeout=a.window * 3 + 120)
        took = time.monotonic() - t0
        cpu1, hwm = proc_stat(d.proc.pid)
        m = re.search(r"wrote .*: (?:\d+ trace events from )?(\d+) kernel events "
                      r"\((\d+) lost, (\d+) dropped\)", p.stdout)
        if p.returncode or not m:
            raise RuntimeError("llmprofctl record: %r %r" % (p.stdout, p.stderr))
        size = os.path.getsize(out)
        os.unlink(out)
        return {"took": took, "events": int(m.group(1)), "lost": int(m.group(2)),
                "dropped": int(m.group(3)), "bytes": size, "cpu": cpu1 - cpu0, "hwm": hwm}
    finally:
        llama.kill()
        llama.wait()
        d.stop()


def stream_main(a):
    b.need(b.LLMPROFD, b.LLMPROFCTL)
    simple = lptest.llama_simple()
    model = b.model("medium")
    work = lptest.tmpdir("llmprof-bench-record-")
    configs = [("Perfetto, streamed", "perfetto"), ("JSON, at the end", "json")]
    res = b.alternate(configs, a.rounds, lambda fmt: streamed(simple, model, a, fmt, work))

    def med(name, key):
        v = sorted(r[key] for r in res[name])
        return v[len(v) // 2]
    b.table("A %g s record with op spans of llama-simple, by format" % a.window,
            ["format", "command took (s)", "events", "events/s", "lost", "dropped",
             "bytes/s of window", "daemon CPU s/s", "daemon peak RSS MiB"],
            [(n, "%.1f" % med(n, "took"), "%d" % med(n, "events"),
              "%.0f" % (med(n, "events") / a.window), "%d" % med(n, "lost"),
              "%d" % med(n, "dropped"), "%.0f" % (med(n, "bytes") / a.window),
              "%.3f" % (med(n, "cpu") / a.window), "%.0f" % med(n, "hwm"))
             for n, _ in configs],
            ["llama.cpp llama-simple (OpenMP, its default 4 threads), medium random-weight "
             "model, `llmprofctl record --seconds %g` with the defaults (op spans); a fresh "
             "daemon per run, %d alternating rounds, medians; JSON gzip'ed as llmprofctl "
             "writes it by default for .json.gz, Perfetto's trace as it comes"
             % (a.window, a.rounds)])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--shape", default="tinyllama")
    ap.add_argument("--window", type=float, default=12, help="seconds recorded per run")
    ap.add_argument("--stream", action="store_true", help="the streamed format against JSON")
    a = ap.parse_args()
    if a.stream:
        stream_main(a)
        return
    b.need("node", "curl", b.LLMPROFD)
    model = b.model(a.shape)
    produced = {}
    res = b.alternate(CONFIGS, a.rounds, lambda ops: run(model, a, ops, produced))
    base = b.summary(res[CONFIGS[0][0]])[0]
    b.table("Tokens/s while a timeline is recorded",
            ["configuration", "median tokens/s", "min-max", "spread", "ratio"],
            [(n, "%.2f" % b.summary(res[n])[0], "%.2f-%.2f" % b.summary(res[n])[1:],
              "%.1f%%" % (100 * b.noise(res[n])), "%.3f" % (b.summary(res[n])[0] / base))
             for n, _ in CONFIGS],
            ["node-llama-cpp, %s random-weight Q8_0, 2 threads, prompt 16, %d generated "
             "tokens, %d alternating rounds; each record's window (%g s) holds the whole "
             "decoding" % (a.shape, a.tokens, a.rounds, a.window)])

    def med(v):
        v = sorted(v)
        return v[len(v) // 2] if v else 0
    b.table("What a record produces, per second of decoding",
            ["configuration", "events/s", "JSON bytes/s", "gzip'ed bytes/s", "events lost"],
            [(n, "%.0f" % med([x[0] for x in produced.get(ops, [])]),
              "%.0f" % med([x[1] for x in produced.get(ops, [])]),
              "%.0f" % med([x[2] for x in produced.get(ops, [])]),
              "%d" % sum(x[3] for x in produced.get(ops, [])))
             for n, ops in CONFIGS[1:]],
            ["medians over the rounds; seconds of decoding from the first llama_decode span's "
             "start to the last one's end"])


if __name__ == "__main__":
    main()
