#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
"""The kernel side's cost on the engines people run, as the kernel counts it, and
tokens/s resolved to a percent.

Two measurements, in one run:

1. Program time per second of the engine's CPU time. With kernel.bpf_stats_enabled the
   kernel times every run of every BPF program. An llmprofd in each configuration tracks
   the engine (one daemon per run, the configurations alternating by round), and each of
   its programs' run time and runs over the engine's whole run are set against the
   engine's own CPU time (user + system, its rusage): what share of the engine's CPU
   the programs took, and per event. The programs also run for other tasks' events on
   the host (their untracked path, tens of ns); on an otherwise idle machine those are
   few.

2. tokens/s of llama.cpp's OpenMP build with no llmprofd and with each configuration,
   run in paired rounds (the order alternating) so that drift between rounds cancels in
   each pair's ratio. The figure is the median of the pairs' ratios with a 95 %
   confidence interval of that median from the order statistics (a sign-test interval:
   no assumption on the spread's shape), so "≥ 0.99" can be told from noise.

    sudo bench/kcost.py [--rounds 3] [--pairs 20] [--tokens 200]
                        [--workloads omp,prompt,node,ik] [--configs default,tracepoint]
                        [--warm]

Configurations: default (futex waits from the scheduler), tracepoint
(--futex-source tracepoint: the syscall tracepoints, the previous default), off
(--futex-source off), sampler-thread (--sampler thread: one cpu-clock event per thread
instead of per CPU, the default until 2026-11-27), fixed-rate (--no-sample-rephase),
no-sampling (--sample-hz 0), precise and precise-no-tensors (precise mode
always on with and without reading the ops' tensors: llmprofctl ops's cost per call).
"""
import argparse
import math
import resource
import statistics
import subprocess
import time

import benchlib as b
import lptest
import ops
import progcost as pc

PRECISE_OPS = "mul_mat,rms_norm,mul,add,rope,soft_max,get_rows,glu,flash_attn_ext,set_rows"
CONFIGS = {
    "default": [],
    "tracepoint": ["--futex-source", "tracepoint"],
    "off": ["--futex-source", "off"],
    "sampler-thread": ["--sampler", "thread"],
    "fixed-rate": ["--no-sample-rephase"],
    "no-sampling": ["--sample-hz", "0"],
    # every off-CPU stretch taken, not about one a millisecond per thread
    "every-stretch": ["--stretch-sample", "1"],
    # the daemon at the priority it was started with, not nice -4 (--priority-boost)
    "no-boost": ["--priority-boost", "0"],
    # precise mode always on, on the ops llama.cpp's graphs run, with and without reading
    # their tensors (llmprofctl ops): the cost of the reading per probed call
    "precise": ["--precise-duty", "1", "--precise-ops", PRECISE_OPS],
    "precise-no-tensors": ["--precise-duty", "1", "--precise-ops", PRECISE_OPS,
                           "--no-precise-tensors"],
}
COMMS = {"omp": "llama-simple", "prompt": "llama-simple", "ik": "llama-cli", "node": "node"}


def run_child(argv):
    """Runs argv; returns (its CPU seconds, user + system, its stderr)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                       errors="replace", timeout=1800)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode != 0:
        raise SystemExit("%s exited %d:\n%s" % (argv[0], p.returncode, p.stderr[-2000:]))
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, p.stderr


def program_cost(workload, config, tokens):
    """{program: (run_time_ns, run_cnt)} over one run of workload tracked by a daemon in
    config, and the workload's CPU seconds."""
    d = b.Daemon("--comm", COMMS[workload], *CONFIGS[config])
    try:
        ids = lptest.prog_ids_of(d.proc.pid)
        before = pc.stats(ids)
        cpu, _ = run_child(ops.argv_of(workload, tokens))
        after = pc.stats(ids)
    finally:
        d.stop()
    return pc.delta(before, after), cpu


def median_ci(values):
    """The median and a 95 % confidence interval for it from the order statistics: the
    k-th smallest and largest, k the largest with P(Binomial(n, 1/2) < k) <= 2.5 %."""
    v = sorted(values)
    n = len(v)
    k, acc = 0, 0.0
    while True:
        p = math.comb(n, k) / 2 ** n
        if acc + p > 0.025:
            break
        acc += p
        k += 1
    if k == 0:
        return statistics.median(v), None, None
    return statistics.median(v), v[k - 1], v[n - k]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3, help="runs per workload and config")
    ap.add_argument("--pairs", type=int, default=20, help="tokens/s pairs per config")
    ap.add_argument("--tokens", type=int, default=200)
    ap.add_argument("--workloads", default="omp,prompt,node,ik")
    ap.add_argument("--configs", default="default,tracepoint")
    ap.add_argument("--warm", action="store_true",
                    help="tokens/s pairs: the daemon has seen the engine's binary once "
                    "before the measured run (an always-on daemon has): its symbols are read")
    a = ap.parse_args()
    configs = a.configs.split(",")
    for c in configs:
        if c not in CONFIGS:
            raise SystemExit("unknown configuration %r: %s" % (c, ", ".join(CONFIGS)))
    workloads = a.workloads.split(",")
    b.need(b.LLMPROFD, "bpftool")
    b.mount_tracefs()

    # 1. The programs' time against the engine's CPU time.
    cost = {}
    with b.bpf_stats():
        for w in workloads:
            for r in range(a.rounds):
                for c in (configs if r % 2 == 0 else configs[::-1]):
                    progs, cpu = program_cost(w, c, a.tokens)
                    cost.setdefault((w, c), []).append((progs, cpu))
                    total = sum(ns for ns, _ in progs.values())
                    print("round %d/%d  %-6s %-10s engine %.2f CPU s, programs %.3f ms (%.3f %%)"
                          % (r + 1, a.rounds, w, c, cpu, total / 1e6,
                             100 * total / 1e9 / cpu), flush=True)
    rows, notes = [], []
    for (w, c), runs in cost.items():
        share = [sum(ns for ns, _ in p.values()) / 1e9 / cpu for p, cpu in runs]
        rows.append((w, c, "%.2f" % statistics.median(cpu for _, cpu in runs),
                     "%.3f %%" % (100 * statistics.median(share)),
                     "%.3f-%.3f %%" % (100 * min(share), 100 * max(share))))
        # Per program: summed over the rounds.
        sums = {}
        for p, _ in runs:
            for k, (ns, n) in p.items():
                s = sums.setdefault(k, [0, 0])
                s[0] += ns
                s[1] += n
        cpu = sum(cpu for _, cpu in runs)
        notes.append("%s, %s: %s" % (w, c, ", ".join(
            "%s %.0f ns x %.0f/CPU-s = %.3f %%" % (k, ns / n, n / cpu, 100 * ns / 1e9 / cpu)
            for k, (ns, n) in sorted(sums.items(), key=lambda x: -x[1][0]) if n)))
    b.table("The programs' time per second of the engine's CPU time (`bench/kcost.py`)",
            ["workload", "configuration", "engine CPU s (median)",
             "programs / engine CPU (median)", "min-max"], rows,
            ["kernel.bpf_stats_enabled=1; %d runs each, %d tokens; per program: ns per run x "
             "runs per second of the engine's CPU = share" % (a.rounds, a.tokens)] + notes)
    if a.pairs == 0:
        return

    # 2. tokens/s in pairs, no llmprofd against each configuration.
    argv = ops.argv_of("omp", a.tokens)
    ratios = {c: [] for c in configs}
    daemon_cpu = {c: [] for c in configs}  # the daemon's own CPU over the engine's
    for i in range(a.pairs):
        for c in configs:
            def none():
                return ops.tokens_per_s(argv)

            def traced():
                d = b.Daemon("--comm", COMMS["omp"], *CONFIGS[c])
                try:
                    if a.warm:  # its first sight of the binary, outside the measured run
                        ops.tokens_per_s(ops.argv_of("omp", 4))
                    before, ru = b.cpu_seconds(d.proc.pid), resource.getrusage(
                        resource.RUSAGE_CHILDREN)
                    tps = ops.tokens_per_s(argv)
                    after, ru2 = b.cpu_seconds(d.proc.pid), resource.getrusage(
                        resource.RUSAGE_CHILDREN)
                    engine = (ru2.ru_utime - ru.ru_utime) + (ru2.ru_stime - ru.ru_stime)
                    daemon_cpu[c].append((after - before) / engine)
                    return tps
                finally:
                    d.stop()
            if i % 2 == 0:
                x, y = none(), traced()
            else:
                y, x = traced(), none()
            ratios[c].append(y / x)
            print("pair %d/%d  %-10s no llmprofd %.2f, llmprofd %.2f tokens/s: %.4f"
                  % (i + 1, a.pairs, c, x, y, y / x), flush=True)
            time.sleep(0.5)
    rows = []
    for c in configs:
        m, lo, hi = median_ci(ratios[c])
        rows.append((c, len(ratios[c]), "%.4f" % m,
                     "%.4f-%.4f" % (lo, hi) if lo is not None else "too few pairs",
                     "%.4f-%.4f" % (min(ratios[c]), max(ratios[c])),
                     "%.3f %%" % (100 * statistics.median(daemon_cpu[c]))))
    b.table("tokens/s with llmprofd / without, in pairs: llama.cpp's OpenMP build",
            ["configuration", "pairs", "median ratio", "95 % CI of the median", "min-max",
             "daemon CPU / engine CPU (median)"],
            rows, ["llama-simple from source (OpenMP, static), Q8_0 random weights, %d tokens, "
                   "default threads; each pair one run without and one with llmprofd, the "
                   "order alternating; the daemon's own CPU time (user + system, "
                   "/proc/PID/stat) over the engine's run, against the engine's" % a.tokens])


if __name__ == "__main__":
    main()
