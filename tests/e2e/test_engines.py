#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
"""e2e tier: the engine of seeds/000, ik_llama.cpp's llama-cli built from source as its
users build it (static, OpenMP, -march=native: ../shared/workloads/build-ik.sh, cached),
decoding and processing a prompt with 2 and 4 threads while llmprofd in its default
configuration and `perf record --call-graph dwarf` sample the same run.

Its structure is what the fixtures reproduce one by one: fused ops
(ggml_compute_forward_mul_mat_up_gate, fused_rms_norm), its own iqk GEMM and flash
attention kernels, AVX-512 code that realigns the stack so that gcc describes the frame by
a DWARF expression (DRAP), OpenMP barriers in a stripped libgomp. A walk that gives up on
those frames leaves the op to the stack scan, which took flash attention's stale return
addresses for live frames: attention 30 % where perf has 2 %.

Per run: with the per-thread sampler, every op group within 3 points of perf's
(perfref.check_groups: plus the samples the kernel dropped, measured against perf's count)
and the leading op as perf has it; with either sampler, at least 98 % of the samples placed
by the instruction pointer or the walk by rows, which ggml.unwind reports, and the run
counted as trustworthy (measured here: 98.9-99.7 %; the rest are samples in libc called
from outside any op, which no object's rows cover: counted outside ops, as perf counts
them). Tolerance: some 1,500-3,000
samples a side at 997 Hz; a share near 0.4 has a standard error of 0.013 per sampler,
0.018 for the difference."""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
import lptest as t  # noqa: E402
import perfref  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
WORKLOAD = os.path.join(HERE, "..", "workload")
BUILD_IK = os.environ.get("LLMPROF_BUILD_IK",
                          os.path.join(HERE, "..", "..", "..", "shared", "workloads", "build-ik.sh"))
HZ = 997
TOLERANCE = 0.03


def ik_llama_cli():
    """ik_llama.cpp's llama-cli, built once and cached by the snapshot's hash."""
    p = subprocess.run(["bash", BUILD_IK], capture_output=True, text=True, timeout=1500)
    if p.returncode != 0:
        raise AssertionError("building ik_llama.cpp failed:\n" + p.stderr[-2000:])
    return p.stdout.strip().splitlines()[-1]


def run_once(binary, model, work, name, threads, prompt, tokens):
    """One run of llama-cli under perf and two private daemons: one with the per-thread
    sampler, which samples each thread's CPU time as perf does and is held to perf's
    shares; one in the default configuration (the per-CPU sampler, sampling rate aside),
    whose unwinding is held to the same standard and whose shares are printed beside them:
    on this VM its timer skips periods while OpenMP threads sleep and wake, which its
    coverage reports (test_llama_omp.py checks that)."""
    d = t.Daemon("--once", "--sample-hz", str(HZ), "--sampler", "thread")
    d.wait_ready()
    dcpu = t.Daemon("--once", "--sample-hz", str(HZ))
    dcpu.wait_ready()
    data = os.path.join(work, name + ".data")
    argv = [binary, "-m", model, "-p", prompt, "-n", str(tokens), "-c", "1024", "--temp", "0",
            "-t", str(threads), "-tb", str(threads), "--ignore-eos"]
    run = subprocess.run(perfref.record_args(data, HZ, ["-k", "CLOCK_MONOTONIC", "--"],
                                             stack=65528) + argv,
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True, errors="replace", timeout=600,
                         cwd=work)  # llama-cli writes main.log where it runs
    t.check(run.returncode == 0, "%s: llama-cli ran under perf: %s"
            % (name, run.stderr.strip()[-300:]))
    found = re.search(r"pid (\d+) \(llama-cli\) runs ggml", d.log())
    if not found:
        raise AssertionError("llama-cli was not found as a ggml process:\n" + d.log())
    pid = int(found.group(1))
    d.wait_log("pid %d (llama-cli) exited" % pid)
    dcpu.wait_log("pid %d (llama-cli) exited" % pid)
    t.check(d.stop() == 0 and dcpu.stop() == 0, "%s: both daemons exit 0" % name)
    g = t.proc_of(d.report(), pid)["ggml"]
    gcpu = t.proc_of(dcpu.report(), pid)["ggml"]
    print("%s: the default (per-CPU) sampler: coverage %.3f, %s" % (
        name, gcpu["sampled"]["coverage"] or 0,
        {k: round(v, 3) for k, v in gcpu["op_groups"]["share"].items()}))
    t.check(gcpu["unwind"]["unwound_share"] >= 0.98 and gcpu["unwind"]["trustworthy"],
            "%s: the default sampler's samples placed by the instruction pointer or rows: %.4f"
            % (name, gcpu["unwind"]["unwound_share"]))
    exe = [o for o in g["objects"] if o["path"] == binary]
    t.check(exe and exe[0]["unwind"] == "eh_frame" and exe[0]["unwind_rows"] > 10000,
            "%s: the executable's frames are walked by its .eh_frame: %s"
            % (name, [(o["unwind"], o["unwind_rows"], o["unwind_rows_lost"]) for o in exe]))
    uw = g["unwind"]
    print("%s: unwind %s" % (name, uw))
    t.check(uw["unwound_share"] >= 0.98 and uw["trustworthy"],
            "%s: %.4f of the samples placed by the instruction pointer or rows (scan %.4f)"
            % (name, uw["unwound_share"], uw["scan_share"]))
    counts, ours = perfref.check_groups(t, name, g, data, pid, tolerance=TOLERANCE)
    top = [o["op"] for o in g["ops"][:1]]
    ref = [k[3:] for k, _ in counts.most_common() if k.startswith("op:")][:1]
    t.check(top == ref, "%s: the leading op as perf has it: %s, %s" % (name, top, ref))
    return ours


def main():
    binary = ik_llama_cli()
    work = t.tmpdir("llmprofd-engines-")
    model = os.path.join(work, "medium.gguf")
    subprocess.run([sys.executable, os.path.join(WORKLOAD, "gen_gguf.py"), "--shape", "medium",
                    model], check=True, timeout=120)
    # About 925 tokens of prompt (the context is 1,024) and 4 generated; then generation of
    # 300 tokens after a short prompt.
    long_prompt = " ".join(["Once upon a time there was a small model that"] * 42)
    for threads in (2, 4):
        gen = run_once(binary, model, work, "ik generation -t %d" % threads, threads,
                       "Once upon a time", 300)
        t.check(gen["matmul"] > 0.3, "ik generation -t %d: matmul leads: %.3f"
                % (threads, gen["matmul"]))
        run_once(binary, model, work, "ik prompt -t %d" % threads, threads, long_prompt, 4)


t.run(main, timeout=2400)
