#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
"""e2e tier: the engines people run, built as their users get them, each sampled by
llmprofd in its default configuration and `perf record -a --call-graph dwarf` (one
cpu-clock event per CPU, as llmprofd samples; perfref.SystemWide) on the same run:

- the engine of seeds/000, ik_llama.cpp's llama-cli (static, OpenMP, -march=native:
  ../shared/workloads/build-ik.sh, cached), a prompt and generation with 2 and 4 threads;
- node-llama-cpp (prebuilt libggml-cpu, ggml's own threadpool), the same four runs;
- llama.cpp's llama-server from node-llama-cpp's bundle (static, OpenMP, gcc;
  tests/workload/build-llama.sh --server), answering a completion request over HTTP, a
  prompt and generation with 2 and 4 threads;
- llama.cpp's llama-simple from the same bundle built with clang, whose OpenMP runtime is
  LLVM's libomp, which waits in libc (gcc's build is test_llama_omp.py's).

ik_llama.cpp's structure is what the fixtures reproduce one by one: fused ops
(ggml_compute_forward_mul_mat_up_gate, fused_rms_norm), its own iqk GEMM and flash
attention kernels, AVX-512 code that realigns the stack so that gcc describes the frame by
a DWARF expression (DRAP), OpenMP barriers in a stripped libgomp. A walk that gives up on
those frames leaves the op to the stack scan, which took flash attention's stale return
addresses for live frames: attention 30 % where perf has 2 %. On the clang build, a walk
that stopped in libc put libomp's waits outside ops: sync 0.04 where perf has 0.58.

Per run: every op group within 3 points of perf's, or 3.5 standard errors of the
difference where that is more (perfref.check_groups: plus the samples the kernel dropped,
measured against perf's count), and the leading op as perf has it or within 3 points of
it; at least 98 % of the samples placed by the instruction pointer or the walk by rows, or
nowhere (node's JIT code), at most 1 % by the stack scan, and the objects with ops and
libc walked by their rows with none lost. Tolerance: some 1,100-7,000 samples a side at
997 Hz; a share near 0.4 has a standard error of 0.006-0.015 per sampler, up to 0.02 for
the difference. In generation a residual of 0.01 is added to every bound
(GENERATION_RESIDUAL below). The per-thread sampler (--sampler thread) is held to
`perf record -p` in test_llama_omp.py and to `perf record -- CMD` in test_ops.py."""
import json
import os
import signal
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
import llamaserver  # noqa: E402
import lptest as t  # noqa: E402
import perfref  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
WORKLOAD = os.path.join(HERE, "..", "workload")
HZ = 997
TOLERANCE = 0.03
# In generation the per-thread sampler's matmul share read under perf's (sampling the same
# way) more often than noise explains, and its sync over: under it by 0.002-0.030 in 10 of
# 11 generation runs on this VM (2026-11-27), by 0.031 and 0.034 on a Sapphire Rapids VM.
# The bound carries it, so that the check still catches an attribution gone wrong (the
# failures it was built for were 0.14-0.54) without failing on this.
GENERATION_RESIDUAL = 0.01


def placed(name, uw):
    """At least 98 % of the samples placed by the instruction pointer or by rows, or placed
    nowhere (no op on the way: node's JIT code, which has no CFI, outside ops as perf has
    it), and at most 1 % by the stack scan."""
    outside = uw["by"]["none"] / uw["samples"] if uw["samples"] else 0
    t.check(uw["unwound_share"] + outside >= 0.98 and uw["scan_share"] <= 0.01
            and uw["trustworthy"],
            "%s: %.4f of the samples placed by the instruction pointer or rows, %.4f "
            "nowhere, %.4f by the scan" % (name, uw["unwound_share"], outside,
                                                   uw["scan_share"]))


def judge(name, comm, d, data, pid, runtime=None, shortfall_allowed=True):
    """The daemon's report on the run of comm, process pid, against perf's samples in
    data."""
    d.wait_log("pid %d (%s) runs ggml" % (pid, comm), timeout=60)
    d.wait_log("pid %d (%s) exited" % (pid, comm))
    t.check(d.stop() == 0, "%s: the daemon exits 0" % name)
    g = t.proc_of(d.report(), pid)["ggml"]
    t.check(g["sampled"]["sampler"] == "cpu", "%s: sampled per CPU, the default" % name)
    # Every object with ops (the executable of a static build, node-llama-cpp's
    # libggml-cpu) walked by its rows, none lost; and the C library a runtime waits in.
    ops = [o for o in g["objects"] if o["op_functions"]]
    t.check(ops and all(o["unwind"] == "eh_frame" and o["unwind_rows"] > 1000
                        and not any(o["unwind_rows_lost"].values()) for o in ops),
            "%s: the objects with ops are walked by their .eh_frame, no row lost: %s"
            % (name, [(o["path"], o["unwind"], o["unwind_rows"], o["unwind_rows_lost"])
                      for o in ops]))
    if runtime:
        omp = [o["path"] for o in g["objects"] if o["openmp_runtime"]]
        t.check(any(runtime in p for p in omp), "%s: its OpenMP runtime is %s: %s"
                % (name, runtime, omp))
    libc = [o for o in g["unwind"]["walked_through"] if "/libc.so" in o["path"]]
    t.check(libc and libc[0]["unwind_rows"] > 1000,
            "%s: the C library's frames are walked too: %s" % (name, libc))
    print("%s: unwind %s" % (name, g["unwind"]))
    placed(name, g["unwind"])
    counts, ours = perfref.check_groups(t, name, g, data, pid, tolerance=TOLERANCE,
                                        residual=GENERATION_RESIDUAL if "generation" in name
                                        else 0.0, shortfall_allowed=shortfall_allowed)
    # The leading op as perf has it, or one perf has within the tolerance of it (ik's
    # mul_mat and fused mul_mat_up_gate come close in generation with 4 threads).
    top = g["ops"][0]["op"] if g["ops"] else None
    ref = [k[3:] for k, _ in counts.most_common() if k.startswith("op:")][:1]
    total = sum(counts.values())
    t.check(ref and top is not None and
            (counts["op:" + ref[0]] - counts["op:" + top]) / total <= TOLERANCE,
            "%s: the leading op, %s, leads in perf's samples too or comes within %.2f: %s %s"
            % (name, top, TOLERANCE, ref, {k: round(counts["op:" + k] / total, 3)
                                           for k in ref + [top] if k}))
    return ours


def daemon():
    d = t.Daemon("--once", "--sample-hz", str(HZ))  # the default: per CPU
    d.wait_ready()
    return d


def server(binary, model, work, threads, phase, prompt, tokens):
    """llama-server sampled by perf -a: one completion asked over HTTP, then SIGINT."""
    name = "llama-server %s -t %d" % (phase, threads)
    d = daemon()
    data = os.path.join(work, "server-%s-%d.data" % (phase, threads))
    perf = []
    srv = llamaserver.Server(binary, model, threads=threads, cwd=work, timeout=120,
                             prefix=perfref.held([]), started=lambda p: perf.append(
                                 perfref.SystemWide(data, HZ, stack=65528, held=p)))
    system_wide = perf[0]
    proc = srv.proc
    answer = srv.complete(prompt, tokens)
    t.check(answer.get("tokens_predicted") == tokens, "%s: %d tokens predicted: %s"
            % (name, tokens, {k: answer.get(k) for k in ("tokens_predicted", "stop_type")}))
    proc.send_signal(signal.SIGINT)
    t.check(proc.wait(timeout=120) == 0, "%s: llama-server exits 0" % name)
    system_wide.stop()
    return judge(name, "llama-server", d, data, proc.pid)


def run_once(argv, work, name, comm, runtime=None, shortfall_allowed=True):
    """One run of the engine sampled by perf -a and a private daemon in the default
    configuration (sampling rate aside)."""
    d = daemon()
    data = os.path.join(work, name.replace(" ", "-") + ".data")
    # llama-cli writes main.log where it runs
    run, out, err = perfref.run_system_wide(argv, data, HZ, stack=65528, cwd=work)
    t.check(run.returncode == 0, "%s: %s ran: %s" % (name, comm, err.strip()[-300:]))
    # node-llama-cpp's driver says which process decoded (node-llama-cpp may start
    # others that load ggml, to test its binaries); the others are the engine itself.
    pid = run.pid
    if comm == "node":
        pid = json.loads(out.strip().splitlines()[-1])["pid"]
    return judge(name, comm, d, data, pid, runtime, shortfall_allowed)


def ik(binary, model, threads, prompt, tokens):
    return [binary, "-m", model, "-p", prompt, "-n", str(tokens), "-c", "1024", "--temp", "0",
            "-t", str(threads), "-tb", str(threads), "--ignore-eos"]


def node(model, threads, prompt, tokens, repeat=1):
    return ["node", os.path.join(WORKLOAD, "driver.mjs"), "--model", model, "--tokens",
            str(tokens), "--threads", str(threads), "--prompt", str(prompt), "--repeat",
            str(repeat)]


def main():
    # LLMPROF_ENGINES=ik,node,server,clang runs only those (all by default).
    only = set(filter(None, os.environ.get("LLMPROF_ENGINES", "").split(",")))

    def wanted(engine):
        return not only or engine in only
    work = t.tmpdir("llmprofd-engines-")
    model = os.path.join(work, "medium.gguf")
    subprocess.run([sys.executable, os.path.join(WORKLOAD, "gen_gguf.py"), "--shape", "medium",
                    model], check=True, timeout=120)
    # About 925 tokens of prompt (the context is 1,024) and 4 generated; then generation of
    # 300 tokens after a short prompt.
    long_prompt = " ".join(["Once upon a time there was a small model that"] * 42)
    for threads in (2, 4) if wanted("ik") else ():
        binary = t.build_ik()
        # No allowance for the samples the daemon did not take (issue 54: its sync read
        # low on the AMD VM in half the runs); measured on the Intel VM (2026-12-02), each
        # op group within 0.024 of perf's, 4 threads' prompt 5.8 % short of perf's count.
        run_once(ik(binary, model, threads, "Once upon a time", 300), work,
                 "ik generation -t %d" % threads, "llama-cli", shortfall_allowed=False)
        run_once(ik(binary, model, threads, long_prompt, 4), work, "ik prompt -t %d" % threads,
                 "llama-cli", shortfall_allowed=False)
    # node-llama-cpp: ggml's own threadpool in a prebuilt, late-loaded libggml-cpu; its
    # context holds 512 tokens. Its threads spin at barriers: 4 of them on 2 CPUs decode
    # about a token a second here, so 30 tokens.
    for threads in (2, 4) if wanted("node") else ():
        run_once(node(model, threads, 16, 300 if threads <= os.cpu_count() else 30), work,
                 "node-llama-cpp generation -t %d" % threads, "node")
        # Four times over: with AMX (libggml-cpu-sapphirerapids.so) 480 tokens of prompt
        # took 0.3 s, 283 samples, too few to judge shares by.
        run_once(node(model, threads, 480, 4, repeat=4), work,
                 "node-llama-cpp prompt -t %d" % threads, "node")
    for threads in (2, 4) if wanted("server") else ():
        llama_server = t.build_llama("--server")
        server(llama_server, model, work, threads, "generation", "Once upon a time", 200)
        server(llama_server, model, work, threads, "prompt", long_prompt, 4)
    # llama-simple takes its thread count from the host, as its users get it.
    if wanted("clang"):
        simple = t.build_llama("--cc", "clang")
        run_once([simple, "-m", model, "-n", "300", "Once upon a time"], work,
                 "llama-simple (clang) generation", "llama-simple", runtime="libomp")


t.run(main, timeout=2400)
