#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
"""Operator attribution: accuracy against perf, and what it costs.

1. Accuracy: for each workload, one run sampled at once by llmprofd with each sampler, by
   llmprofd scanning the stack instead of walking frames by .eh_frame (--no-unwind), and
   by `perf record --call-graph dwarf`, perf's samples attributed by the same rule
   (tests/lib/perfref.py); every op group's share side by side. Workloads: omp (llama.cpp's
   OpenMP build decoding), prompt (the same build on a 300-token prompt: tinyBLAS kernels),
   node (node-llama-cpp), ik (ik_llama.cpp's llama-cli decoding, 2 threads: DRAP frames),
   lpops (the fixture).
2. Cost per sample: the BPF program's own run time per sample (kernel.bpf_stats_enabled,
   run_time_ns / run_cnt of lp_sample), with each sampler, unwinding and scanning; with
   --baseline, also an earlier build's daemon (per-thread sampler) on the same run, for a
   before and after.
3. Cost on decoding: tokens/s of llama.cpp's OpenMP build (llama-simple) with no llmprofd,
   with the default (per-CPU) sampler and with --sampler thread, in alternating rounds
   (--rounds 0: not measured).

    sudo bench/ops.py [--rounds 10] [--tokens 200] [--workloads omp,prompt,node,ik,lpops]
                      [--baseline OLD/build/llmprofd]
"""
import argparse
import json
import os
import re
import subprocess
import tempfile

import benchlib as b
import lptest
import perfref

WORKLOAD = os.path.join(b.ROOT, "tests", "workload")
LPOPS = os.environ.get("LPOPS", os.path.join(b.BUILD, "tests", "lpops"))
HZ = 499


def argv_of(workload, tokens):
    if workload == "omp":
        return [lptest.llama_simple(), "-m", b.model("medium"), "-n", str(tokens),
                "Once upon a time"]
    if workload == "prompt":
        return [lptest.llama_simple(), "-m", b.model("medium"), "-n", "4",
                " ".join(["Once upon a time there was a small model that"] * 30)]
    if workload == "ik":
        return [lptest.build_ik(), "-m", b.model("medium"), "-p", "Once upon a time", "-n",
                str(tokens), "-c", "1024", "--temp", "0", "-t", "2", "-tb", "2", "--ignore-eos"]
    if workload == "node":
        return ["node", os.path.join(WORKLOAD, "driver.mjs"), "--model", b.model("medium"),
                "--tokens", str(tokens), "--threads", "2", "--prompt", "32"]
    return [LPOPS, "--tokens", str(tokens)]


def prog_stats(pid, name):
    """(run_cnt, run_time_ns) of the daemon's program named name."""
    for prog in sorted(lptest.prog_ids_of(pid)):
        out = subprocess.run(["bpftool", "prog", "show", "id", str(prog), "--json"],
                             capture_output=True, text=True).stdout
        p = json.loads(out) if out else {}
        if p.get("name", "").startswith(name[:15]):
            return p.get("run_cnt", 0), p.get("run_time_ns", 0)
    return 0, 0


def doc_of(d, pid):
    return json.loads(subprocess.run([b.LLMPROFCTL, "--socket", d.socket, "dump", "--pid",
                                      str(pid), "--json"], capture_output=True, text=True,
                                     check=True).stdout)


def accuracy(workload, tokens, rows, cost, baseline=None):
    """One run under both samplers and perf; a row per source."""
    daemons = {"thread": b.Daemon("--sample-hz", str(HZ), "--sampler", "thread"),
               "cpu": b.Daemon("--sample-hz", str(HZ), "--sampler", "cpu"),
               "thread --no-unwind": b.Daemon("--sample-hz", str(HZ), "--sampler", "thread",
                                              "--no-unwind")}
    if baseline:
        daemons["thread, baseline build"] = b.Daemon("--sample-hz", str(HZ), "--sampler",
                                                     "thread", binary=baseline)
    data = os.path.join(tempfile.gettempdir(), "llmprofd-bench-ops.data")
    wrapped = argv_of(workload, tokens)
    try:
        p = subprocess.run(perfref.record_args(data, HZ, ["-k", "CLOCK_MONOTONIC", "--"],
                                               stack=65528 if workload == "ik" else 16384) +
                           wrapped, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                           text=True, errors="replace", timeout=900,
                           cwd=tempfile.gettempdir())  # llama-cli writes main.log there
        if p.returncode:
            raise SystemExit("%s failed: %s" % (workload, p.stderr[-500:]))
        for name, d in daemons.items():
            m = re.findall(r"pid (\d+) \((llama-simple|llama-cli|node|lpops)\) runs ggml",
                           d.text())
            if not m:
                raise SystemExit("%s: not found by llmprofd:\n%s" % (workload, d.text()))
            pid = int(m[-1][0])
            d.wait_log("pid %d (%s) exited" % (pid, m[-1][1]))
            g = doc_of(d, pid)["ggml"]
            runs, ns = prog_stats(d.proc.pid, "lp_sample")
            cost.append((workload, name, runs, ns / runs if runs else 0))
            if name.endswith("baseline build"):
                continue  # its cost only: its report is an earlier version's
            sh = g["op_groups"]["share"]
            cov = g["sampled"]["coverage"]
            rows.append([workload, "llmprofd --sampler " + name, g["op_groups"]["samples"],
                         "-" if cov is None else "%.3f" % cov] +
                        ["%.3f" % sh[k] for k in perfref.GROUPS])
            since = g["sampled"]["since_ns"] / 1e9
        theirs, n = perfref.group_shares(perfref.samples(data, pid, since=since,
                                                         kernels=("iqk_mul_mat",)))
        rows.append([workload, "perf record --call-graph dwarf", n, "-"] +
                    ["%.3f" % theirs[k] for k in perfref.GROUPS])
    finally:
        for d in daemons.values():
            d.stop()
        if os.path.exists(data):
            os.unlink(data)


def tokens_per_s(argv):
    err = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                         errors="replace", timeout=900).stderr
    m = re.findall(r"([\d.]+) tokens per second", err)
    if not m:
        raise SystemExit("no tokens/s in llama-simple's output:\n" + err[-1000:])
    return float(m[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--tokens", type=int, default=200)
    ap.add_argument("--workloads", default="omp,prompt,node,ik,lpops")
    ap.add_argument("--baseline", help="an earlier build's llmprofd, for the cost per sample")
    a = ap.parse_args()
    b.need(b.LLMPROFD, b.LLMPROFCTL, "perf", "bpftool")
    rows, cost = [], []
    with b.bpf_stats():
        for w in a.workloads.split(","):
            print("# accuracy: %s" % w, flush=True)
            accuracy(w, a.tokens, rows, cost, a.baseline)
    b.table("Operator attribution against perf (share of the process's samples, one run each)",
            ["workload", "source", "samples", "coverage"] + list(perfref.GROUPS), rows,
            ["perf attributes each sample by its DWARF-unwound call chain under the rule of "
             "tests/lib/perfref.py; llmprofd with both samplers on the same run, %d Hz" % HZ])
    b.table("Cost of one sample (lp_sample: classification by unwinding or by the 8 KiB "
            "stack scan, op counts)",
            ["workload", "sampler", "samples", "ns per sample"],
            [(w, s, n, "%.0f" % ns) for w, s, n, ns in cost],
            ["kernel.bpf_stats_enabled=1: the program's own run time per run, the perf "
             "event's interrupt not included; per CPU it also runs, and returns at once, "
             "for whatever else the CPU was running"])
    if a.rounds == 0:
        return

    argv = argv_of("omp", a.tokens)
    configs = [("no llmprofd", None), ("llmprofd, default (per-CPU sampler)", []),
               ("llmprofd, --sampler thread", ["--sampler", "thread"])]

    def measure(args):
        if args is None:
            return tokens_per_s(argv)
        d = b.Daemon(*args)
        try:
            return tokens_per_s(argv)
        finally:
            d.stop()
    res = b.alternate(configs, a.rounds, measure)
    base = b.summary(res[configs[0][0]])[0]
    b.table("Cost on decoding: llama.cpp's OpenMP build",
            ["configuration", "median tokens/s", "min-max", "spread", "ratio"],
            [(n, "%.2f" % b.summary(res[n])[0], "%.2f-%.2f" % b.summary(res[n])[1:],
              "%.1f%%" % (100 * b.noise(res[n])), "%.3f" % (b.summary(res[n])[0] / base))
             for n, _ in configs],
            ["llama-simple from source (OpenMP, static), ~110 MB Q8_0 random weights, %d "
             "tokens, default threads, %d alternating rounds" % (a.tokens, a.rounds)])


if __name__ == "__main__":
    main()
