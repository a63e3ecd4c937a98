#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
"""e2e tier: real llama.cpp built from source with its defaults (OpenMP, static
llama-simple; tests/workload/build-llama.sh), decoding a random-weight model while
llmprofd and `perf record` sample the same run. There ggml_barrier is `#pragma omp
barrier`, a tail call into libgomp, which spins in stripped code: llmprofd must find
libgomp, call it an OpenMP runtime, and put the time spent in it into the barrier share,
near what perf attributes to libgomp and ggml_barrier."""
import collections
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
import lptest as t  # noqa: E402

WORKLOAD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "workload")
TOKENS = 400
# Two samplers of the same run at 499 Hz each: with about 2,000 samples of each, a share
# of 0.1 has a standard error near 0.007 per sampler, so 0.05 is some 5 standard errors of
# the difference; the rest is what each attributes differently (perf's symbol resolution
# of the static binary against llmprofd's ranges).
TOLERANCE = 0.05


def perf_shares(data, pid):
    """Shares of perf's samples of pid, each classified by where its user code was (the
    first user frame of its call chain: the instruction pointer, or for a sample taken in
    the kernel the place the thread entered it), as llmprofd classifies by the user
    instruction pointer: sync (libgomp, ggml_barrier), the rest."""
    out = subprocess.run(["perf", "script", "-i", data, "-F", "pid,ip,sym,dso"],
                         capture_output=True, text=True, errors="replace", timeout=300).stdout
    n = collections.Counter()
    for block in out.split("\n\n"):
        lines = block.strip().splitlines()
        if not lines or lines[0].split()[:1] != [str(pid)]:
            continue
        for frame in lines[1:]:
            if "[kernel.kallsyms]" in frame:
                continue
            f = frame.split()
            sym, dso = (f[1] if len(f) > 2 else ""), f[-1]
            n["sync" if "libgomp" in dso or sym.startswith("ggml_barrier") else "rest"] += 1
            break
    total = sum(n.values())
    return {k: v / total for k, v in n.items()} if total else {}, total


def main():
    llama = subprocess.run([os.path.join(WORKLOAD, "build-llama.sh")], capture_output=True,
                           text=True, timeout=1200)
    if llama.returncode != 0:
        raise AssertionError("building llama.cpp failed:\n" + llama.stderr[-2000:])
    binary = llama.stdout.strip().splitlines()[-1]
    work = t.tmpdir("llmprofd-omp-")
    model = os.path.join(work, "medium.gguf")
    subprocess.run([sys.executable, os.path.join(WORKLOAD, "gen_gguf.py"), "--shape", "medium",
                    model], check=True, timeout=120)
    d = t.Daemon("--once", "--sample-hz", "499")
    d.wait_ready()
    data = os.path.join(work, "perf.data")
    run = subprocess.run(["perf", "record", "-q", "-e", "cpu-clock", "-F", "499", "-g", "-o", data,
                          "--", binary, "-m", model, "-n", str(TOKENS), "Once upon a time"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                         errors="replace", timeout=300)
    t.check(run.returncode == 0, "llama-simple decoded %d tokens under perf: %s"
            % (TOKENS, run.stderr.strip()[-300:]))
    found = re.search(r"pid (\d+) \(llama-simple\) runs ggml", d.log())
    if not found:
        raise AssertionError("llama-simple was not found as a ggml process:\n" + d.log())
    pid = int(found.group(1))
    d.wait_log("pid %d (llama-simple) exited" % pid)
    t.check(d.stop() == 0, "llmprofd exits 0")
    p = t.proc_of(d.report(), pid)
    g = p["ggml"]
    gomp = [o for o in g["objects"] if "libgomp" in o["path"]]
    t.check(gomp and gomp[0]["openmp_runtime"] and "GOMP_barrier" in gomp[0]["barrier"],
            "libgomp is found and taken for an OpenMP runtime: %s"
            % [(o["path"], o["openmp_runtime"]) for o in gomp])
    ours = g["sampled"]["share"]
    theirs, nperf = perf_shares(data, pid)
    print("llmprofd: %s of %d samples; perf: %s of %d samples"
          % (ours, g["sampled"]["samples"], theirs, nperf))
    t.check(g["sampled"]["samples"] > 500 and nperf > 500, "enough samples on both sides")
    t.check(ours["barrier"] > 0.01, "the OpenMP sync share is there: %.3f" % ours["barrier"])
    t.check(abs(ours["barrier"] - theirs.get("sync", 0)) <= TOLERANCE,
            "barrier share %.3f within %.2f of perf's libgomp + ggml_barrier %.3f"
            % (ours["barrier"], TOLERANCE, theirs.get("sync", 0)))


t.run(main, timeout=1500)
