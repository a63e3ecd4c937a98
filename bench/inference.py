#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
"""Overhead on inference: tokens/s of real llama.cpp (node-llama-cpp, random-weight GGUF
models) with no llmprofd, with llmprofd's default configuration, and with precise mode
always on, its probes on the first emulated instruction (the default) and on the first
instruction (--no-fast-entry), in alternating rounds. For the precise runs it also reads, through llmprofctl,
how many matmul and barrier calls were probed per generated token: with the measured cost
of one probe hit (bench/probes.py) that accounts for the loss.

    sudo bench/inference.py [--rounds 10] [--tokens 48] [--threads 2] [--shapes tinyllama,tiny]
                            [--configs default]   (no llmprofd and the default only)
"""
import argparse
import json
import os
import subprocess

import benchlib as b

WORKLOAD = os.path.join(b.ROOT, "tests", "workload")
CONFIGS = [
    ("no llmprofd", None),
    ("llmprofd, default", []),
    ("llmprofd, precise mode always on", ["--precise-duty", "1"]),
    ("llmprofd, precise, --no-fast-entry", ["--precise-duty", "1", "--no-fast-entry"]),
]


def drive(model, a):
    out = subprocess.run(["node", os.path.join(WORKLOAD, "driver.mjs"), "--model", model,
                          "--tokens", str(a.tokens), "--threads", str(a.threads), "--prompt",
                          str(a.prompt)], check=True, capture_output=True, text=True,
                         timeout=900).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=10)
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--prompt", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--shapes", default="tinyllama,tiny")
    ap.add_argument("--configs", choices=("all", "default"), default="all")
    a = ap.parse_args()
    configs = CONFIGS if a.configs == "all" else CONFIGS[:2]
    b.need("node", b.LLMPROFD, b.LLMPROFCTL)
    rows, notes = [], []
    for shape in a.shapes.split(","):
        model = b.model(shape)
        probed, untracked = {}, {}

        def measure(args):
            if args is None:
                return drive(model, a)["tokens_per_s"]
            d = b.Daemon(*args)
            try:
                res = drive(model, a)
                how = " ".join(args)
                if "--precise-duty" in args:
                    # A run of a few tokens can end before the daemon has read the objects
                    # node loaded late: not tracked, it has no probe count to give. Said in
                    # the notes, not taken for a failure of the daemon's overhead figure.
                    got = subprocess.run(
                        [b.LLMPROFCTL, "--socket", d.socket, "dump", "--pid", str(res["pid"]),
                         "--json"], capture_output=True, text=True, timeout=60)
                    if got.returncode == 1:
                        untracked.setdefault(how, []).append(
                            got.stderr.strip().encode("ascii", "backslashreplace").decode())
                        return res["tokens_per_s"]
                    got.check_returncode()
                    doc = json.loads(got.stdout)
                    # Tracked (by its comm), but gone before its objects were read: no
                    # engine, no probe count either.
                    if not doc.get("ggml"):
                        untracked.setdefault(how, []).append(
                            "pid %d exited before its engine was known" % res["pid"])
                        return res["tokens_per_s"]
                    p = doc["ggml"]["precise"]
                    probed.setdefault(how, []).append(
                        (p["matmul"]["calls"] + p["barrier"]["calls"],
                         res["generated_tokens"] + res["prompt_tokens"]))
                return res["tokens_per_s"]
            finally:
                d.stop()
        print("# %s model" % shape, flush=True)
        res = b.alternate(configs, a.rounds, measure)
        base = b.summary(res[configs[0][0]])[0]
        for name, _ in configs:
            med, lo, hi = b.summary(res[name])
            rows.append((shape, name, "%.2f" % med, "%.2f-%.2f" % (lo, hi),
                         "%.1f%%" % (100 * b.noise(res[name])), "%.3f" % (med / base),
                         "%+.1f%%" % (100 * (med / base - 1))))
        for how, runs in probed.items():
            calls = sum(c for c, _ in runs) / len(runs)
            tokens = sum(t for _, t in runs) / len(runs)
            notes.append("%s, %s: precise mode probed %.0f matmul+barrier calls per run, %.0f "
                         "per decoded token (%.0f tokens, %d runs)"
                         % (shape, how, calls, calls / tokens, tokens, len(runs)))
        for how, errs in untracked.items():
            notes.append("%s, %s: %d runs ended before the daemon knew their engine, no probe "
                         "count (%s)" % (shape, how, len(errs), errs[0]))
    notes.insert(0, "workload: node-llama-cpp (tests/workload/driver.mjs), random-weight Q8_0 "
                 "GGUF, %d threads, prompt %d, %d generated tokens, %d alternating rounds; "
                 "tokens/s of generation as llama.cpp reports it"
                 % (a.threads, a.prompt, a.tokens, a.rounds))
    b.table("Overhead on inference", ["model", "configuration", "median tokens/s", "min-max",
                                      "spread", "ratio", "change"], rows, notes)


if __name__ == "__main__":
    main()
