#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
"""e2e tier: doctor's findings for PyTorch's stack, each provoked for real on the decoder
(tests/workload/decoder.py) and its evidence held to what the test reads itself; a clean run
fires none. The conditions, as users hit them:

- intra_op_threads: one intra-op thread on a host with more CPUs for it (Debian's torch
  1.13 starts with 1 on a 2-CPU VM): the evidence's CPUs are its affinity's;
- reference_blas: its GEMMs in the reference BLAS (its library path picks Debian's
  libblas3): the evidence names the file it maps;
- thread_pools: LLVM's OpenMP runtime preloaded beside the libgomp libtorch needs: two
  runtimes, both named, both in its maps;
- interpreter_bound: a tiny model on one thread, whose forwards are mostly the Python
  around its ops;
- oversubscribed (the rule ggml's processes have): 4 intra-op threads on 2 CPUs;
- clean: OpenBLAS's OpenMP build, as many threads as CPUs: none of the torch rules fire,
  nor any rule about the process itself, over a 10 s window. Beside a busy host (CI's), the
  run queue behind other processes is the host's: `preempted` is shown, not judged, and
  `late_thread` whose cause is a neighbour's preemption is held to schedstat."""
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
import lptest as t  # noqa: E402
import torchref  # noqa: E402

TORCH_RULES = {"intra_op_threads", "reference_blas", "thread_pools", "interpreter_bound"}


def findings(d, pid):
    st, doc, _ = d.api("GET", "/v1/processes/%d/findings" % pid)
    return doc if st == 200 else None


def maps(pid):
    with open("/proc/%d/maps" % pid) as f:
        return f.read()


def start(d, what, environ, *args):
    if "--new" not in args:
        args = ("--new", 5000) + args
    p = torchref.run(torchref.decoder_argv("--prompt", 16, *args), environ)
    t.poll("%s tracked" % what, lambda: (d.api("GET", "/v1/processes/%d" % p.pid)[1] or {})
           .get("engine") == "torch", timeout=120, interval=0.1)
    return p


def fires(d, p, what, rule, timeout=60):
    box = {}

    def fired():
        doc = findings(d, p.pid)
        f = next((x for x in (doc or {}).get("findings", []) if x["rule"] == rule), None)
        if f:
            box["f"], box["doc"] = f, doc
        return f
    t.poll("%s: %s to fire" % (what, rule), fired, timeout=timeout, interval=0.5)
    t.check(True, "%s: %s fired: %s" % (what, rule, box["f"]["title"]))
    return box["f"]


def neighbours(f, pid):
    """Whether a finding is about the host rather than the process: the run queue behind
    other processes (a busy host's, CI's neighbours), which the clean run cannot rule
    out. A thread late behind its own threads, faulting or moving is the process's."""
    ev = f.get("evidence", {})
    return f["rule"] == "preempted" or (
        f["rule"] == "late_thread" and ev.get("cause") == "preempted" and
        ev.get("preempted_by_pid") not in (None, 0, pid))


def judge_neighbours(pid, f):
    """A host finding the clean run showed: late_thread held to the kernel's own clocks
    (the thread it names is the process's, and the run-queue wait it gives for its window
    is no more than the thread waited in its whole life: /proc/PID/task/TID/schedstat, its
    second field); preempted shown, as the test set it aside before."""
    ev = f["evidence"]
    if f["rule"] == "preempted":
        print("beside this host's neighbours: %s" % f["title"])
        return
    try:
        with open("/proc/%d/task/%d/schedstat" % (pid, ev["tid"])) as fh:
            life = int(fh.read().split()[1])
    except OSError:
        life = None
    t.check(life is not None and 0 < ev["runqueue_ns"] <= life * 1.01 + 1e6 and
            ev["runqueue_ns"] > ev["peers_median_runqueue_ns"],
            "beside this host's neighbours (pid %s): %s; its run-queue wait %.0f ms in the "
            "window, %s ms in its life" % (ev.get("preempted_by_pid"), f["title"],
                                          ev["runqueue_ns"] / 1e6,
                                          "?" if life is None else "%.0f" % (life / 1e6)))


def stop(p):
    if p.poll() is None:
        p.kill()
    p.wait(timeout=30)


def main():
    why = torchref.available()
    if why:
        t.check(False, "PyTorch for this test: %s (scripts/install-deps.sh installs it)" % why)
        return
    ncpu = len(os.sched_getaffinity(0))
    d = t.Daemon()
    d.wait_ready()

    if ncpu >= 2:
        p = start(d, "1 thread", torchref.env("openblas"), "--threads", 1)
        f = fires(d, p, "1 thread", "intra_op_threads")
        ev = f["evidence"]
        t.check(ev["compute_threads"] == 1 and
                ev["cpus_allowed"] == len(os.sched_getaffinity(p.pid)) and
                ev["spare_cpus"] >= 0.5 and "set_num_threads(%d)" % ev["cpus_allowed"]
                in f["action"], "intra_op_threads: 1 thread of %d CPUs, %.2f spare; %s"
                % (ev["cpus_allowed"], ev["spare_cpus"], f["action"]))
        stop(p)
    else:
        t.check(True, "intra_op_threads: one CPU here, no condition to make")

    p = start(d, "reference BLAS", torchref.env("reference"), "--threads", 2)
    f = fires(d, p, "reference BLAS", "reference_blas")
    path = f["evidence"]["blas"]
    t.check(os.path.dirname(os.path.realpath(path)) == os.path.realpath(torchref.BLAS["reference"])
            and path in maps(p.pid) and f["evidence"]["matmul_share"] >= 0.10,
            "reference_blas: %s, in its maps; matmul %.2f" % (path, f["evidence"]["matmul_share"]))
    stop(p)

    libomp = os.path.join(torchref.LIBDIR, "libomp.so.5")
    p = start(d, "two runtimes", torchref.env("openblas", LD_PRELOAD=libomp), "--threads", 2)
    f = fires(d, p, "two runtimes", "thread_pools")
    m = maps(p.pid)
    named = [f["evidence"].get("runtime", ""), f["evidence"].get("other_runtime", "")]
    t.check(all(n and n in m for n in named) and any("libgomp" in n for n in named) and
            any("libomp" in n for n in named),
            "thread_pools: both runtimes named and mapped: %s" % named)
    stop(p)

    # One thread (no OpenMP team spinning beside it), short sequences one after another
    # (no KV cache to copy at length): the forwards are their Python.
    p = start(d, "a tiny model", torchref.env("openblas"), "--threads", 1, "--new", 100,
              "--repeat", 1000, "--layers", 2, "--hidden", 32, "--heads", 2, "--inter", 64,
              "--vocab", 256)
    f = fires(d, p, "a tiny model", "interpreter_bound")
    t.check(f["evidence"]["outside_share"] >= 0.33 and
            f["evidence"]["generation_samples"] >= 100,
            "interpreter_bound: %.2f of %d samples outside ops"
            % (f["evidence"]["outside_share"], f["evidence"]["generation_samples"]))
    stop(p)

    p = start(d, "4 threads on %d CPUs" % ncpu, torchref.env("openblas"), "--threads",
              2 * ncpu)
    f = fires(d, p, "4 threads", "oversubscribed")
    t.check(f["evidence"]["compute_threads"] > f["evidence"]["cpus_allowed"],
            "oversubscribed: %d compute threads on %d CPUs"
            % (f["evidence"]["compute_threads"], f["evidence"]["cpus_allowed"]))
    stop(p)

    p = start(d, "clean", torchref.env("openblas"), "--threads", ncpu)
    t.poll("a 10 s window of the clean run", lambda: (findings(d, p.pid) or {}).get(
        "window_seconds", 0) >= 10, timeout=90, interval=0.5)
    seen, host = set(), {}
    for _ in range(4):
        doc = findings(d, p.pid)
        for x in doc["findings"]:
            if neighbours(x, p.pid):
                host[x["rule"]] = x
            else:
                seen.add(x["rule"])
        t.poll("a second", lambda: True, timeout=1)
    for x in host.values():
        judge_neighbours(p.pid, x)
    t.check(not seen & TORCH_RULES and not seen - {"memory_bound"},
            "the clean run (OpenBLAS, %d threads) fired nothing: %s" % (ncpu, sorted(seen)))
    stop(p)
    t.check(not re.search(r"ERROR|AddressSanitizer", d.log()), "the daemon logged no error")
    t.check(d.stop() == 0, "the daemon exits 0")


t.run(main, timeout=900)
