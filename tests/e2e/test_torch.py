#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
"""e2e tier: PyTorch's CPU stack (seeds/002), found and measured as a user runs it, each
figure against a reference taken on the same run. The workloads are tests/workload's
decoder.py (a Llama- or GPT-2-shaped decoder in plain torch, random weights, greedy
generate()) and opmix.py (known aten ops in turn, each timed by the process's own CPU
clock), on Debian's python3-torch, its GEMMs in OpenBLAS or the reference BLAS as the
library path picks them.

- Found by itself: the decoder (both shapes, batch 1 and 2, both BLAS, 2 threads) is
  tracked as engine torch within 1 s of its first forward (its own clock); a process that
  imports torch and idles, and a forked worker that runs ops but no forward, are not; nor
  is a decoder outside --discover-cgroup, of whose forwards the kernel keeps nothing.
- Tokens: prompt and generated tokens equal the decoder's own counts; generation tokens/s
  within 2 % of its own rate over the same forwards (its forwards' starts: a forward ends
  where the next begins, for the daemon as for this rate).
- Ops, 1 thread: over a window of forwards (the decoder waits while the test reads the
  daemon at its ends), the five largest ops' shares within 3 points of torch.profiler's
  self CPU time over the same window (the same quantity with one thread: the calling
  thread's time in the op less its callees'), named as it names them; the profiler's own
  cost measured (its events in the window times its CPU time per event, measured in the
  same process beside the same op without it) and under 5 %.
- Ops in OpenMP regions: opmix.py with 2 threads (OMP_WAIT_POLICY=passive: idle workers
  burn nothing), each op's share within 3 points of the share of CPU its phase took; the
  elementwise op, whose work runs only in at::parallel_for's regions, has its workers'
  samples (region_samples) and so its whole share, not the caller's half. The daemon
  finds opmix while it opens thousands of regions a second, as it does beside a server
  that was running before it; at most 5 % of the workers' samples in regions go without
  an op (one thread opens them: only a region that ends while its opener's frames are
  read has none). Twice: with GCC's runtime's thread data (the default, no probe on the
  regions; `openmp.workers_by` says so, as does llmprofctl dump), and with the regions'
  entries probed (--no-openmp-thread-data, the way of LLVM's and Intel's runtimes), the
  probes attached while the regions churn.
- Sync and leaves, 2 threads, against perf record -a over the same window: sync within 3
  points of perf's samples whose first user frame outside the C library is libgomp's; the
  five hottest leaf functions of the daemon's pprof within 3 points of perf's; with the
  reference BLAS, whose code perf can unwind, the ops whose frames perf sees (the main
  thread's: each op's samples less its workers') within 3 points.
- pprof: engine, op, op_group and phase labels; go tool pprof -tagfocus=engine=torch.
- Precise mode, 1 thread: each probed aten op's calls over 150 generation forwards equal
  bpftrace's count of its entry points (every at::_ops::<overload>::call of the op) over
  the same forwards, exactly (torch.profiler's counts are no reference: over the same
  window it counted aten::div_ 244, 295 and 278 times in three runs where both the
  dispatcher's entries numbered 300); the own on-CPU share of ops of a tenth of the time
  and more within 3 points of the profiler's self CPU.
- llmprofctl record, 2 threads: a "forward: generation" span per forward in the window,
  each begun inside the decoder's own interval of it, their lengths' sum within 1 % of
  the decoder's intervals'; slices properly nested; the per-step summary's op times (one
  thread calls the ops) within each step's time: nested aten ops counted once.

Tolerances: 3 points, or 3.5 sigma of the sampling noise of the shares compared where that
is larger (as tests/lib/perfref.py), plus perf's chains it could not follow (truncated) and
its lost samples."""
import bisect
import collections
import json
import math
import os
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
import lptest as t  # noqa: E402
import perfref  # noqa: E402
import pprofref  # noqa: E402
import torchref  # noqa: E402
import tracefmt  # noqa: E402

HZ = 499


def noise(p, n1, n2=None):
    """3.5 sigma of a share p read from n1 samples (and compared with one of n2)."""
    v = p * (1 - p) * (1 / max(1, n1) + (1 / max(1, n2) if n2 else 0))
    return 3.5 * math.sqrt(v)


def now_ns():
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


class Watch(threading.Thread):
    """Polls the daemon for a pid every 10 ms: when it was first seen with engine torch."""

    def __init__(self, d, pid):
        super().__init__(daemon=True)
        self.d, self.pid, self.seen_ns, self.stop = d, pid, None, False

    def run(self):
        while not self.stop and self.seen_ns is None:
            st, doc, _ = self.d.api("GET", "/v1/processes/%d" % self.pid)
            if st == 200 and doc.get("engine") == "torch":
                self.seen_ns = now_ns()
            time.sleep(0.01)


def not_tracked(d, pids):
    listed = {p["pid"] for p in d.get("/v1/processes")["processes"]}
    return not (listed & set(pids))


def found_and_tokens(d):
    """The decoder in four configurations; an idler and a forked worker beside them."""
    idler = torchref.run([torchref.PYTHON, "-c",
                          "import torch, time; print('up', flush=True); time.sleep(120)"],
                         torchref.env())
    # The parent imports torch and forks; the child runs matmuls and softmax for a while,
    # never an embedding: a data loader's worker, say.
    forker = torchref.run([torchref.PYTHON, "-c", "\n".join([
        "import os, time, torch",
        "torch.set_num_threads(1)",
        "pid = os.fork()",
        "if pid == 0:",
        "    x = torch.randn(256, 256)",
        "    t0 = time.time()",
        "    while time.time() - t0 < 40: torch.softmax(torch.mm(x, x), -1)",
        "    os._exit(0)",
        "print('child', pid, flush=True)",
        "os.waitpid(pid, 0)"])], torchref.env())
    child = int(forker.stdout.readline().split()[1])
    configs = [("llama", 1, "openblas"), ("gpt2", 2, "openblas"),
               ("llama", 2, "reference"), ("gpt2", 1, "reference")]
    for shape, batch, blas in configs:
        name = "%s batch %d, %s BLAS" % (shape, batch, blas)
        p = torchref.run(torchref.decoder_argv("--shape", shape, "--batch", batch, "--threads",
                                               2, "--prompt", 24, "--new", 48),
                         torchref.env(blas))
        w = Watch(d, p.pid)
        w.start()
        first = None
        for line in p.stderr:
            if line.startswith("first forward at "):
                first = int(line.split()[-1])
                break
        out, err = p.communicate(timeout=300)
        w.stop = True
        w.join()
        rec = torchref.result(out)
        t.check(first and w.seen_ns and w.seen_ns - first <= 1e9,
                "%s: tracked as engine torch %.3f s after its first forward"
                % (name, (w.seen_ns - first) / 1e9 if first and w.seen_ns else -1))
        doc = t.poll("%s's figures after its exit" % name,
                     lambda: (lambda x: x if x.get("state") == "exited" else None)(
                         d.get("/v1/processes/%d" % p.pid)), timeout=30)
        tk = doc["torch"]["tokens"]
        t.check(doc["engine"] == "torch" and doc["matched_by"] == "torch" and
                doc["ggml"] is None, "%s: engine torch, found by its forward" % name)
        t.check(tk["prompt"]["tokens"] == rec["prompt_tokens"] and
                tk["prompt"]["calls"] == rec["prompt_forwards"],
                "%s: prompt tokens %d in %d forwards, the decoder's %d in %d"
                % (name, tk["prompt"]["tokens"], tk["prompt"]["calls"], rec["prompt_tokens"],
                   rec["prompt_forwards"]))
        gen = tk["generation"]
        t.check(gen["tokens"] == rec["generated_tokens"] and gen["calls"] == rec["gen_forwards"]
                and abs(gen["batch"] - batch) < 1e-9,
                "%s: generated tokens %d in %d forwards (batch %.2f), the decoder's %d in %d"
                % (name, gen["tokens"], gen["calls"], gen["batch"], rec["generated_tokens"],
                   rec["gen_forwards"]))
        # Its rate over the same forwards: each timed from its start to the next one's.
        starts = rec["gen_starts_ns"]
        own = batch * (len(starts) - 1) * 1e9 / (starts[-1] - starts[0])
        t.check(gen["timed_tokens"] == batch * (len(starts) - 1) and
                abs(gen["tokens_per_s"] - own) <= 0.02 * own,
                "%s: %.2f tokens/s over %d timed tokens, the decoder's %.2f over the same"
                % (name, gen["tokens_per_s"], gen["timed_tokens"], own))
    outside_discovery(d)
    t.check(idler.stdout.readline().strip() == "up" and idler.poll() is None and
            not_tracked(d, [idler.pid, forker.pid, child]),
            "a process that imported torch and idled (%d), and a forked worker that ran ops "
            "but no forward (%d, child of %d), were never tracked" % (idler.pid, child,
                                                                      forker.pid))
    t.check("pid %d " % idler.pid not in d.log() and "pid %d " % child not in d.log(),
            "nor named in the log")
    idler.kill()
    forker.kill()


def outside_discovery(d):
    """A decoder outside --discover-cgroup (the test's own cgroup, lptest's default): never
    tracked, and the kernel keeps nothing of its forwards (the embedding's probe is on
    libtorch for every process that maps it): no entry in the forwards' table."""
    scope = t.scope()
    if not scope:
        print("(no cgroup v2 scope here: the decoder outside discovery is not run)")
        return
    # The probe is attached while a process in the scope maps libtorch (found_and_tokens's
    # idler does).
    t.poll("the token embedding's probe attached",
           lambda: "lp_torch_forward" in t.attached_programs(d.proc.pid), timeout=60)
    p = torchref.run(scope.outside(torchref.decoder_argv("--threads", 1, "--prompt", 8,
                                                         "--new", 100000, "--progress")),
                     torchref.env())
    ran = False
    for line in p.stderr:  # its 50th forward (half a second here)
        if line.startswith("forward ") and int(line.split()[1].rstrip(":")) >= 50:
            ran = True
            break
    keys = t.map_keys(d.proc.pid, "fwd")
    t.check(ran and p.poll() is None and not_tracked(d, [p.pid]) and
            "pid %d " % p.pid not in d.log() and keys is not None and p.pid not in keys,
            "a decoder outside --discover-cgroup (%d) ran 50 forwards: not tracked, "
            "not named in the log, not in the kernel's forwards table (%s)"
            % (p.pid, keys if keys is None or len(keys) < 20 else "%d keys" % len(keys)))
    p.kill()
    p.wait()


def handshake_run(d, argv, environ, ready=None):
    """Runs a decoder whose window handshakes over a pipe pair; the daemon's op counts of its
    process at the window's ends, and its result. ready(pid): polled before the window
    opens, once the samples count."""
    r1, w1 = os.pipe()  # decoder -> test
    r2, w2 = os.pipe()  # test -> decoder
    p = subprocess.Popen(argv + ["--sync-fd", "%d,%d" % (r2, w1)], stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True, env=environ,
                         pass_fds=(r2, w1))
    t._children.append(p)
    os.close(r2)
    os.close(w1)
    marks = []
    for _ in range(2):
        if not os.read(r1, 1):
            break
        # The window opens once the daemon counts the process's samples (its sampling
        # table is written once libtorch's rows are in the kernel: seconds, the first time).
        if not marks:
            t.poll("pid %d's samples counted" % p.pid, lambda: d.get(
                "/v1/processes/%d" % p.pid)["torch"]["sampled"]["since_ns"] > 0, timeout=120)
            if ready:
                ready(p.pid)
        marks.append(torchref.op_samples(d.get("/v1/processes/%d" % p.pid)))
        os.write(w2, b"g")
    out, _ = p.communicate(timeout=600)
    os.close(r1)
    os.close(w2)
    return marks, torchref.result(out)


def ops_vs_profiler(d):
    """1 thread: the daemon's op shares over a window against torch.profiler's. The window
    holds prompt forwards (384 positions): ops long enough that the profiler's own work on
    each call is a few percent of it (on generation's 50 us ops it doubled the time).
    OMP_NUM_THREADS=1: OpenBLAS's OpenMP build runs its GEMMs on the threads it counted at
    its start whatever torch.set_num_threads(1) says later, threads the profiler does not
    see."""
    prof = t.tmpfile("", suffix=".json")
    # generate() calls, each a prompt and one token; the window ends as call `last` begins
    reps, first, last = 21, 4, 20
    marks, _ = handshake_run(d, torchref.decoder_argv(
        "--threads", 1, "--prompt", 384, "--new", 1, "--repeat", reps, "--profile-forwards",
        "%d:%d" % (2 * first, 2 * last), "--profile-out", prof),
        torchref.env("openblas", OMP_NUM_THREADS=1))
    t.check(len(marks) == 2, "the window's two ends read")
    (a, na, _), (b, nb, _) = marks
    n = nb - na
    ours = {k: (b[k] - a.get(k, 0)) / n for k in b if n}
    with open(prof) as f:
        ref = json.load(f)
    wall_us = (ref["end_ns"] - ref["begin_ns"]) / 1e3
    theirs = {o["name"]: o["self_cpu_us"] / wall_us for o in ref["ops"]}
    # Its cost: the CPU time of its own work on the events it recorded in the window (its
    # work per event measured in the same process, with and without it side by side; see
    # decoder.py's profiler_event_ns) over the window's time.
    cost = ref["events"] * ref["event_ns"] / (wall_us * 1e3)
    t.check(cost < 0.05, "torch.profiler's own cost: %.1f %% of the window (%d events at "
            "%.2f us)" % (100 * cost, ref["events"], ref["event_ns"] / 1e3))
    top = sorted(ours, key=lambda k: -ours[k])[:5]
    print("ours (%d samples, %.2f s at %d Hz; the window %.2f s): %s"
          % (n, n / HZ, HZ, wall_us / 1e6, {k: round(ours[k], 3) for k in top}))
    print("their sum of self CPU over the window: %.3f" % sum(theirs.values()))
    print("torch.profiler: %s" % {k: round(theirs.get(k, 0), 3) for k in top})
    t.check(n > 1000, "enough samples in the window: %d" % n)
    for k in top:
        bound = max(0.03, noise(ours[k], n)) + max(0.0, cost)
        t.check(k in theirs and abs(ours[k] - theirs[k]) <= bound,
                "1 thread: %s %.3f within %.3f of torch.profiler's self CPU %.3f"
                % (k, ours[k], bound, theirs.get(k, -1)))


def ops_in_regions(d, probes=False):
    """opmix.py, 2 threads: each phase's op against the CPU its phase took, the daemon's
    counts read at the phases' ends (opmix waits). Before its phases it opens short regions,
    thousands a second, while the daemon finds it (an always-on daemon started, or
    restarted, beside a running server). With GCC's runtime a worker's op is found from its
    own thread data, no probe on the regions: regions that end while a worker's sample
    reads its master's frames must stay few. probes: a daemon that probes the regions'
    entries instead (--no-openmp-thread-data, as it does LLVM's and Intel's runtimes):
    regions whose entry or return alone was probed, as the probes attach, must not leave
    the process counted with a region open for good."""
    how = "region_probes" if probes else "thread_data"

    def placing(pid):
        def ready(g):
            omp, ow = g["openmp"], g["unwind"]["openmp_workers"]
            if probes:
                return omp.get("region_probes", 0) > 0 and omp.get("regions", 0) >= 2000
            return omp["workers_by"] == how and ow["region_op"] >= 50
        t.poll("pid %d's workers' samples placed (%s)" % (pid, how),
               lambda: ready(d.get("/v1/processes/%d" % pid)["torch"]), timeout=60)

    marks, rec = handshake_run(d, [torchref.PYTHON, torchref.OPMIX, "--threads", "2",
                                   "--seconds", "8", "--churn"],
                               torchref.env("openblas", OMP_WAIT_POLICY="passive"), placing)
    t.check(len(marks) == 2, "opmix's phases' two ends read")
    (a, na, sa), (b, nb, sb) = marks
    n = nb - na
    ours = {k: (b[k] - a.get(k, 0)) / max(1, n) for k in b}
    total = rec["total"]
    want = {"aten::mm": "mm", "aten::mul": "mul", "aten::_softmax": "softmax"}
    print("opmix: %d samples (%.2f s at %d Hz), its CPU clock %.2f s; ours %s; its phases %s"
          % (n, n / HZ, HZ, total, {k: round(ours.get(k, 0), 3) for k in want},
             {k: round(v / total, 3) for k, v in rec["cpu"].items()}))
    for op, phase in want.items():
        ref = rec["cpu"][phase] / total
        bound = max(0.03, noise(ref, n))
        t.check(abs(ours.get(op, 0) - ref) <= bound, "opmix, 2 threads, %s: %s %.3f within "
                "%.3f of its phase's CPU %.3f" % (how, op, ours.get(op, 0), bound, ref))
    doc = t.poll("opmix's figures after its exit",
                 lambda: (lambda x: x if x.get("state") == "exited" else None)(
                     d.get("/v1/processes/%d" % rec["pid"])), timeout=30)
    ow = doc["torch"]["unwind"]["openmp_workers"]
    # Only a region that ended while a worker's sample read its master's frames has no op
    # (regions_open: the frames not found below the region's data); none_open, a worker's
    # first region (its thread data holds none yet): one a thread.
    placed = ow["region_op"] + ow["regions_open"] + ow["none_open"]
    t.check(ow["regions_open"] + ow["none_open"] <= 0.05 * max(1, placed),
            "opmix's workers' samples given their region's op (%s): %s" % (how, ow))
    # (region_probes: those attached now; let go at the process's exit)
    omp = doc["torch"]["openmp"]
    t.check(omp["workers_by"] == how and (omp["regions"] > 0) == probes,
            "GCC's runtime: the workers' regions found by %s: %s" % (how, omp))
    dump = subprocess.run([t.LLMPROFCTL, "--socket", d.socket, "dump", "--pid",
                           str(rec["pid"])], capture_output=True, text=True, timeout=60)
    line = next((x for x in dump.stdout.splitlines() if x.strip().startswith("workers")), "")
    t.check(dump.returncode == 0 and "%d samples of OpenMP workers" % ow["region_op"] in line
            and (probes or "found from their thread data" in dump.stdout),
            "llmprofctl dump says how the workers' samples were placed: %r" % line)
    mul = next((o for o in doc["torch"]["ops"] if o["op"] == "aten::mul"), None)
    t.check(mul and mul["region_samples"] >= 0.3 * mul["samples"],
            "aten::mul's work is only in parallel regions: %d of its %d samples its workers'"
            % (mul["region_samples"] if mul else 0, mul["samples"] if mul else 0))
    outside = 1 - sum(ours.values()) - (sb - sa) / max(1, n)
    ref = rec["cpu"]["python"] / total
    t.check(abs(outside - ref) <= max(0.03, noise(ref, n)),
            "opmix: outside ops %.3f, its Python phase's CPU %.3f" % (outside, ref))


class Pull(threading.Thread):
    """The daemon's pprof of a process over the next `seconds`, in a thread: its window's
    bounds (the X-Llmprof-Window header) and body."""

    def __init__(self, d, pid, seconds):
        super().__init__(daemon=True)
        self.d, self.pid, self.seconds, self.body, self.window = d, pid, seconds, None, None

    def run(self):
        work = t.tmpdir()
        hdr, out = os.path.join(work, "h"), os.path.join(work, "p.pb.gz")
        r = subprocess.run(["curl", "-sS", "--max-time", "200", "--unix-socket", self.d.socket,
                            "-D", hdr, "-o", out, "http://localhost/debug/pprof/profile?"
                            "seconds=%d&pid=%d" % (self.seconds, self.pid)],
                           capture_output=True, timeout=260)
        if r.returncode == 0:
            with open(hdr) as f:
                for line in f:
                    if line.lower().startswith("x-llmprof-window:"):
                        self.window = [int(x) / 1e9 for x in line.split(":", 1)[1].split()]
            with open(out, "rb") as f:
                self.body = f.read()


def against_perf(d, blas):
    """2 threads under perf record -a: sync, leaves, and (reference BLAS) the ops."""
    data = os.path.join(t.tmpdir(), "perf.data")
    names = torchref.schema_names()
    argv = torchref.decoder_argv("--threads", 2, "--new", 700 if blas == "openblas" else 400)
    proc = subprocess.Popen(perfref.held(argv), stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env=torchref.env(blas))
    t._children.append(proc)
    rec_perf = perfref.SystemWide(data, 199, stack=4096, held=proc)
    t.poll("the decoder tracked", lambda: d.api("GET", "/v1/processes/%d" % proc.pid)[0] == 200
           and d.get("/v1/processes/%d" % proc.pid).get("engine") == "torch", timeout=60)
    pull = Pull(d, proc.pid, 5)
    pull.start()
    out, _ = proc.communicate(timeout=600)
    pull.join()
    rec_perf.stop()
    doc = d.get("/v1/processes/%d" % proc.pid)
    g = doc["torch"]
    since = g["sampled"]["since_ns"] / 1e9
    by, _, _ = torchref.samples(data, proc.pid, names, since=since)
    nperf = sum(by.values())
    trunc = by["truncated"] / max(1, nperf)
    n = g["op_groups"]["samples"]
    ours_sync = g["op_groups"]["share"]["sync"]
    theirs_sync = by["sync"] / max(1, nperf)
    lost = perfref.lost_share(data)
    bound = max(0.03, noise((ours_sync + theirs_sync) / 2, n, nperf)) + lost
    print("%s BLAS: perf %d samples %s; llmprofd %d samples %s" % (
        blas, nperf, {k: round(v / max(1, nperf), 3) for k, v in by.most_common(8)}, n,
        {k: round(v, 3) for k, v in g["op_groups"]["share"].items() if v}))
    t.check(abs(ours_sync - theirs_sync) <= bound,
            "%s BLAS: sync %.3f within %.3f of perf -a's %.3f (%d and %d samples)"
            % (blas, ours_sync, bound, theirs_sync, n, nperf))
    if blas == "reference":
        for o in g["ops"][:5]:
            mine = (o["samples"] - o["region_samples"]) / n
            theirs = by["op:" + o["op"]] / max(1, nperf)
            b = max(0.03, noise((mine + theirs) / 2, n, nperf)) + trunc + lost
            t.check(abs(mine - theirs) <= b,
                    "%s BLAS: %s on the main thread %.3f within %.3f of perf's %.3f"
                    % (blas, o["op"], mine, b, theirs))
    # The leaves of the daemon's profile against perf's over its window.
    t.check(pull.body is not None and pull.window, "%s BLAS: the daemon's pprof of the "
            "decoder and its window" % blas)
    if pull.body is None or not pull.window:
        return
    prof = pprofref.load(pull.body)
    t.check(not pprofref.validate(prof), "%s BLAS: the pprof passes Parca's rules" % blas)
    stacks = pprofref.stacks(prof)
    mine = collections.Counter()
    for fr, c, _ in stacks:
        mine[pprofref.unnamed(fr[0])] += c
    chains = pprofref.perf_stacks(data, proc.pid, max(pull.window[0], since), pull.window[1])
    theirs = collections.Counter(pprofref.unnamed(c[0]) for c in chains if c)
    total, ptot = sum(mine.values()), sum(theirs.values())
    for fn, k in theirs.most_common(5):
        a, b = mine[fn] / max(1, total), k / max(1, ptot)
        bd = max(0.03, noise((a + b) / 2, total, ptot)) + lost
        t.check(abs(a - b) <= bd, "%s BLAS: leaf %s %.3f within %.3f of perf's %.3f"
                % (blas, fn[:60], a, bd, b))
    labels = set()
    for _, _, lb in stacks:
        labels |= set(lb)
    t.check({"engine", "op", "op_group", "phase"} <= labels and
            all(lb.get("engine") == "torch" for _, _, lb in stacks),
            "%s BLAS: pprof labels engine (torch), op, op_group, phase: %s"
            % (blas, sorted(labels)))
    path = os.path.join(t.tmpdir(), "torch.pb.gz")
    with open(path, "wb") as f:
        f.write(pull.body)
    top = subprocess.run(["go", "tool", "pprof", "-tagfocus=engine=torch", "-top", path],
                         capture_output=True, text=True, timeout=120)
    t.check(top.returncode == 0 and "flat%" in top.stdout and
            len(top.stdout.strip().splitlines()) > 6,
            "%s BLAS: go tool pprof -tagfocus=engine=torch -top lists its functions: %s"
            % (blas, top.stderr[-200:]))


def precise_calls(d):
    """Precise mode, 1 thread, over a window of generation forwards (the decoder waits at
    both ends while the test switches precise mode on and reads the daemon): each probed
    aten op's calls against bpftrace's count of the same entry points over the same
    forwards; its own time against torch.profiler's self CPU."""
    prof = t.tmpfile("", suffix=".json")
    first, last = 400, 550
    r1, w1 = os.pipe()
    r2, w2 = os.pipe()
    p = subprocess.Popen(torchref.decoder_argv(
        "--threads", 1, "--prompt", 16, "--new", 600, "--profile-forwards",
        "%d:%d" % (first, last), "--profile-out", prof, "--sync-fd", "%d,%d" % (r2, w1)),
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        env=torchref.env("openblas", OMP_NUM_THREADS=1), pass_fds=(r2, w1))
    t._children.append(p)
    os.close(r2)
    os.close(w1)
    path = "/v1/processes/%d" % p.pid
    calls, bt = [], None
    for k in range(2):
        if not os.read(r1, 1):
            break
        if k == 0:
            # Precise mode probes the ops with samples so far: the first forwards' must
            # be counted (the sampling table is in the kernel) before it starts.
            g = d.get(path)["torch"]
            t.check(g["sampled"]["samples"] >= 300, "%d samples before the window: the ops "
                    "precise mode will probe are known" % g["sampled"]["samples"])
            st, doc, _ = d.api("POST", path + "/precise", json.dumps({"seconds": 300}))
            t.check(st == 200, "precise mode on: %s %s" % (st, doc))
            t.poll("precise mode on pid %d" % p.pid,
                   lambda: d.get(path)["torch"]["precise"]["state"] == "on", timeout=60)
        g = d.get(path)["torch"]
        calls.append({o["op"]: o.get("precise", {}).get("calls", 0) for o in g["ops"]
                      if o["op"] in g["precise"]["ops_probed"]})
        if k == 0:
            # counts to the decoder's next handshake: the window's end
            bt = torchref.call_counter(p.pid, set(calls[0]), torchref.schema_names(), w1)
        os.write(w2, b"g")
    st, _, _ = d.api("POST", path + "/precise", json.dumps({"enable": False}))
    t.check(st == 200, "precise mode off again: %s" % st)
    p.communicate(timeout=600)
    os.close(r1)
    os.close(w2)
    if len(calls) != 2 or bt is None:
        t.check(False, "the window's two ends read")
        return
    theirs = torchref.call_counts(bt)
    ours = {k: calls[1][k] - calls[0].get(k, 0) for k in calls[1]}
    bad = {k: (ours.get(k), theirs.get(k)) for k in set(ours) | set(theirs)
           if ours.get(k, 0) != theirs.get(k, 0)}
    t.check(len(ours) >= 10 and not bad,
            "precise mode: each of the %d probed aten ops' calls over %d forwards is "
            "bpftrace's count of its entry points exactly: %s"
            % (len(ours), last - first, bad or sorted(ours.items())[:6]))
    # Own time over the same window: the profiler's self CPU, one thread. Each tool's own
    # work on a call is inside what it times; on ops of a tenth of the time and more that
    # is within the bound.
    with open(prof) as f:
        ref = json.load(f)
    wall_us = (ref["end_ns"] - ref["begin_ns"]) / 1e3
    prof_ops = {o["name"]: o for o in ref["ops"]}
    g = d.get(path)["torch"]
    for o in g["ops"]:
        ref_share = prof_ops.get(o["op"], {}).get("self_cpu_us", 0) / wall_us
        if "precise" not in o or ref_share < 0.1:
            continue
        t.check(abs(o["precise"]["share"] - ref_share) <= 0.03,
                "precise mode: %s's own on-CPU share %.3f within 0.03 of torch.profiler's "
                "self CPU %.3f" % (o["op"], o["precise"]["share"], ref_share))
    gen = g["precise"]["generation"]
    print("precise mode's cost: %.1f tokens/s inside its window, %.1f outside"
          % (gen["tokens_per_s_inside"], gen["tokens_per_s_outside"]))


def record_steps(d):
    """llmprofctl record on the decoder, 2 threads: a span per forward named after torch's
    step, where the decoder's own clock puts it; spans properly nested (an op's probe and
    the step's on the embedding's entry run in no set order: the step's function is not
    probed as an op); the per-step summary counts a time once where aten ops nest."""
    p = torchref.run(torchref.decoder_argv("--threads", 2, "--prompt", 16, "--new", 600),
                     torchref.env("openblas"))
    path = "/v1/processes/%d" % p.pid
    t.poll("the decoder tracked", lambda: d.api("GET", path)[0] == 200 and
           d.get(path).get("engine") == "torch", timeout=60)
    t.poll("its samples counted", lambda: d.get(path)["torch"]["sampled"]["samples"] >= 300,
           timeout=120)
    out = os.path.join(t.tmpdir(), "torch.json")
    rec = tracefmt.record(t, d, p.pid, out, "--seconds", "2", "--summary", "--json")
    text, err = rec.communicate(timeout=120)
    own = torchref.result(p.communicate(timeout=600)[0])
    t.check(rec.returncode == 0, "llmprofctl record exits 0: %s" % err[-300:])
    doc = tracefmt.load(out)
    ev = tracefmt.valid(t, doc, "torch's record")
    base = doc["otherData"]["window_start_ns"]
    gen = sorted((e for e in ev if e["ph"] == "X" and e["tid"] == p.pid and
                  e["name"] == "forward: generation"), key=lambda e: e["ts"])
    starts = own["gen_starts_ns"]
    # Each span against the decoder's forward it begins in: after the decoder's own clock
    # read at its start (then the Python to the embedding, ~0.1 ms, preemptions included)
    # and before the next forward's. Their lengths against the decoder's intervals to the
    # next forward over the same forwards: the sums differ by the first and the last
    # offset only (the window's last span, cut at its end, left out).
    idx, late, ours, theirs = [], [], 0, 0
    for g in gen:
        a = base + g["ts"] * 1000
        i = bisect.bisect_right(starts, a) - 1
        idx.append(i)
        late.append((a - starts[i]) / 1e6 if 0 <= i < len(starts) - 1 and
                    a < starts[i + 1] else -1)
        if g is not gen[-1] and 0 <= i < len(starts) - 1:
            ours += g["dur"] / 1e3
            theirs += (starts[i + 1] - starts[i]) / 1e6
    t.check(len(gen) >= 20 and idx == list(range(idx[0], idx[0] + len(idx))) and
            min(late) >= 0, "a span per generation forward in the window, each begun inside "
            "it (%d spans, %.3f to %.3f ms after the decoder's start)"
            % (len(gen), min(late, default=-1), max(late, default=-1)))
    t.check(abs(ours - theirs) <= 0.01 * theirs, "the spans' lengths: %.1f ms in all, the "
            "decoder's intervals %.1f ms" % (ours, theirs))
    rows = json.loads(text).get("tokens", [])
    ops = ("matmul_ms", "attention_ms", "norm_ms", "rope_ms", "elementwise_ms", "copy_ms",
           "other_ops_ms")
    over = [(round(r["ms"], 2), round(sum(r[k] for k in ops), 2)) for r in rows
            if sum(r[k] for k in ops) > r["ms"] + 0.001]
    t.check(len(rows) == len(gen) and not over,
            "--summary: a row per step (%d), its ops' own time (one thread calls them) "
            "within the step's: %s" % (len(rows), over[:3]))


def main():
    why = torchref.available()
    if why:
        t.check(False, "PyTorch for this test: %s (scripts/install-deps.sh installs it)" % why)
        return
    d = t.Daemon("--sample-hz", str(HZ))
    d.wait_ready()
    found_and_tokens(d)
    ops_vs_profiler(d)
    ops_in_regions(d)
    against_perf(d, "openblas")
    against_perf(d, "reference")
    precise_calls(d)
    record_steps(d)
    t.check(d.stop() == 0, "the daemon exits 0")
    d = t.Daemon("--sample-hz", str(HZ), "--no-openmp-thread-data")
    d.wait_ready()
    ops_in_regions(d, probes=True)
    t.check(d.stop() == 0, "the daemon that probes the regions exits 0")


t.run(main, timeout=1500)
