#!/usr/bin/env python3
"""Tokens/s of real llama.cpp (node-llama-cpp, random-weight TinyLlama-shaped Q8_0 model)
with no daemon, with llmprofd's default always-on configuration, and with precise mode
always on; runs alternate so that drift hits every configuration alike. Prints medians and
the ratios to the no-daemon runs, with the machine described.

    sudo bench/ggml_overhead.py [--runs 5] [--tokens 48] [--threads 2] [--shape tinyllama]
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKLOAD = os.path.join(ROOT, "tests", "workload")
LLMPROFD = os.environ.get("LLMPROFD", os.path.join(ROOT, "build", "llmprofd"))

CONFIGS = [
    ("none", None),
    ("default (llama_decode probes + sampling at 199 Hz)", []),
    ("precise mode always on", ["--precise-duty", "1"]),
]


def drive(model, a):
    out = subprocess.run(["node", os.path.join(WORKLOAD, "driver.mjs"), "--model", model,
                          "--tokens", str(a.tokens), "--threads", str(a.threads), "--prompt",
                          str(a.prompt)], check=True, capture_output=True, text=True,
                         timeout=600).stdout
    return json.loads(out.strip().splitlines()[-1])["tokens_per_s"]


def run_one(model, args, a):
    if args is None:
        return drive(model, a)
    log = tempfile.NamedTemporaryFile(prefix="llmprofd-bench-", suffix=".log", delete=False)
    d = subprocess.Popen([LLMPROFD] + args, stdout=subprocess.DEVNULL, stderr=log)
    deadline = time.monotonic() + 30
    while b"ready:" not in open(log.name, "rb").read():
        if d.poll() is not None or time.monotonic() > deadline:
            raise SystemExit("llmprofd did not start: " + open(log.name).read())
        time.sleep(0.05)
    try:
        return drive(model, a)
    finally:
        d.terminate()
        d.wait(timeout=30)
        os.unlink(log.name)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--tokens", type=int, default=48)
    ap.add_argument("--prompt", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--shape", default="tinyllama")
    a = ap.parse_args()
    model = os.path.join(tempfile.gettempdir(), "llmprofd-bench-%s.gguf" % a.shape)
    if not os.path.exists(model):
        subprocess.run([sys.executable, os.path.join(WORKLOAD, "gen_gguf.py"), "--shape",
                        a.shape, model], check=True)
    results = {name: [] for name, _ in CONFIGS}
    for i in range(a.runs):
        for name, args in CONFIGS:
            results[name].append(run_one(model, args, a))
            print("run %d %-50s %.2f tokens/s" % (i + 1, name, results[name][-1]), flush=True)
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
                if l.startswith("model name")), "?")
    print("\nmachine: %s, %d CPUs, Linux %s" % (cpu, os.cpu_count(), platform.release()))
    print("workload: node-llama-cpp, %s Q8_0 random weights, %d threads, prompt %d, %d tokens"
          % (a.shape, a.threads, a.prompt, a.tokens))
    base = statistics.median(results["none"])
    for name, _ in CONFIGS:
        m = statistics.median(results[name])
        print("%-50s median %.2f tokens/s  ratio %.3f  (runs: %s)"
              % (name, m, m / base, ", ".join("%.2f" % x for x in results[name])))


if __name__ == "__main__":
    main()
