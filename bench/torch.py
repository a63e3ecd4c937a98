#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
"""PyTorch under llmprofd: what watching it costs, and what precise mode costs.

tests/workload/decoder.py (a Llama-shaped decoder in plain torch, random weights, greedy
generate(), 2 intra-op threads, GEMMs in OpenBLAS's OpenMP build) generating --new tokens
after a 16-token prompt; its rate is its own, over its generation forwards' starts.

1. tokens/s with no llmprofd and with each configuration, in paired rounds (the order
   alternating), so that drift between rounds cancels in each pair's ratio: the median of
   the ratios with a 95 % confidence interval from the order statistics (kcost.median_ci).
   The same for the rate at each run's median forward (one start to the next), which a
   pause of the VM's host does not move. Each daemon is warm: before the measured run it
   tracked a decoder until its samples counted (libtorch's symbols and 1.4 million unwind
   rows read), as an always-on daemon has long before, and that decoder stays, stopped, so
   that the rows stay in the kernel (they are given back when no running process maps
   libtorch, and read again, 1.3 s of the daemon's CPU, when one maps it again: a cost
   bench/RESULTS.md states apart). Beside them, the daemon's own CPU time over the run
   (/proc/PID/stat): on 2 CPUs with 2 intra-op threads it is the decoder's to lose.
2. The kernel side per forward: with kernel.bpf_stats_enabled, each of the daemon's
   programs' run time and runs over one measured run (default configuration), per
   generation forward and as a share of the decoder's CPU time (its rusage). The programs
   also run for the host's other events (their untracked path): on an idle machine those
   are few.

3. The default daemon's cost in steady state, from one long decoder run (--cycles, 0:
   none): windows with a warm daemon, with none, and with none after a CPU burn the size of
   the daemon's start, side by side, the order going through the six (phases()). Runs of
   their own, a daemon each, measure the host as it is over minutes: an A/A check on this
   VM (the decoder alone, run after run) read 0.87-1.34 a pair. In one run, a cycle's
   windows are seconds apart. Beside the rates: the decoder's CPU per forward in each
   window (its threads' schedstat); in the windows with the daemon, its programs' time by
   the kernel (bpf_stats), per forward and as a share of the decoder's CPU in the same
   windows; what a uprobe's traps cost on this machine (trap_costs()), times the probes
   hit per forward; and the daemon's own CPU: the cost, part by part, that does not move
   with the VM's speed.

4. The tracked decoder's cost at a fine grain (--interleave PAIRS): two decoders alike, one
   running at a time, a warm daemon tracking one of them alone, windows of a second
   alternating (interleaved()). The VM's speed moves 4-5 % between windows seconds apart
   (a decoder alone here, 1 s windows: 5.5 % standard deviation, 4.4 % between neighbours),
   so the pairs of 3. are few and wide; here a pair takes 3 s, and hundreds fit in a
   quarter of an hour. What the untracked decoder pays a daemon beside it (the programs'
   untracked runs, the embedding's probe, the daemon's CPU) is measured in its windows and
   taken off the ratio, as if all of it held up its threads, for the ratio against none.

    sudo bench/torch.py [--pairs 10] [--new 200] [--configs default,precise] [--cycles 12]
                        [--interleave 50 --blocks 4 --window 1]

Configurations: default; precise (precise mode always on: --precise-duty 1, the BLAS
GEMMs, OpenMP barriers and 13 of the decoder's aten ops probed, OPS).
"""
import argparse
import itertools
import os
import resource
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import benchlib as b
import kcost
import lptest
import probes
import progcost as pc
import torchref

# The decoder's ops by name: precise mode otherwise picks those with samples when its window
# opens, and with --precise-duty 1 that is at the first forward, before any.
OPS = ("aten::mm,aten::matmul,aten::bmm,aten::cat,aten::_softmax,aten::mul,aten::add,"
       "aten::silu,aten::mean,aten::rsqrt,aten::transpose,aten::view,aten::reshape")
CONFIGS = {"default": [], "precise": ["--precise-duty", "1", "--precise-ops", OPS]}


def run_decoder(new):
    """One decoder run: (its generation tokens/s by its own clock, its CPU seconds, its
    generation forwards, its tokens/s at its median forward)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run(torchref.decoder_argv("--threads", 2, "--prompt", 16, "--new", new),
                       env=torchref.env("openblas"), capture_output=True, text=True,
                       timeout=1800)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if p.returncode:
        raise SystemExit("decoder.py exited %d:\n%s" % (p.returncode, p.stderr[-2000:]))
    rec = torchref.result(p.stdout)
    starts = rec["gen_starts_ns"]
    rate = (len(starts) - 1) * rec["batch"] * 1e9 / (starts[-1] - starts[0])
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    # A forward is one start to the next: the median is the typical forward's, which a
    # pause of the VM's host (some 30 ms, now and then here) does not move.
    steps = [b - a for a, b in zip(starts, starts[1:])]
    return rate, cpu, rec["gen_forwards"], rec["batch"] * 1e9 / statistics.median(steps)


class Forwards:
    """A decoder's --progress lines, read as it runs: (index in its generate(), start ns)."""

    def __init__(self, p):
        self.v, self.p = [], p
        self.t = threading.Thread(target=self.read, daemon=True)
        self.t.start()

    def read(self):
        for line in self.p.stderr:
            m = re.match(r"forward (\d+): \d+ x \d+ in [\d.]+ ms at (\d+)$", line.strip())
            if m:
                self.v.append((int(m[1]), int(m[2])))

    def started(self, timeout=120):
        """Waits for the decoder's first forward; exits the benchmark if none comes."""
        deadline = time.monotonic() + timeout
        while not self.v and self.p.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        if not self.v:
            raise SystemExit("the decoder made no forward within %d s" % timeout)

    def past(self, t, timeout=5):
        """Waits until the lines past t (monotonic seconds) are in (the decoder writes them
        every 0.25 s), or timeout s have passed."""
        deadline = time.monotonic() + timeout
        while ((not self.v or self.v[-1][1] < t * 1e9) and self.p.poll() is None
               and time.monotonic() < deadline):
            time.sleep(0.02)

    def steps_at(self, t0, t1):
        """The generation steps (one forward's start to the next's, in one generate()) that
        start and end inside [t0, t1] (monotonic seconds): (the first forward's index in
        its generate(), ns), once the lines past t1 are in."""
        lo, hi = t0 * 1e9, t1 * 1e9
        self.past(t1)
        v = list(self.v)
        return [(i, b_ - a_) for (i, a_), (j, b_) in zip(v, v[1:])
                if i >= 1 and j == i + 1 and lo <= a_ and b_ <= hi]

    def steps(self, t0, t1):
        """steps_at()'s, in ns alone."""
        return [ns for _, ns in self.steps_at(t0, t1)]


TRACEFS = "/sys/kernel/tracing"
EMULATED = ("push", "j", "call", "nop")  # the kernel emulates these at a uprobe


def first_emulated(path, fn):
    """The file offset of fn's first instruction a uprobe there is emulated at, where
    llmprofd puts its probes (x86entry.h)."""
    dis = subprocess.run(["objdump", "-d", "--no-show-raw-insn", path], capture_output=True,
                         text=True, check=True).stdout
    body = dis.split("<%s>:\n" % fn, 1)[1].split("\n\n", 1)[0]
    for line in body.splitlines():
        m = re.match(r"\s*([0-9a-f]+):\s+(\S+)", line)
        if m and m[2].startswith(EMULATED):
            vaddr = int(m[1], 16)
            break
    else:
        raise SystemExit("%s: no emulated instruction in %s" % (path, fn))
    for line in subprocess.run(["readelf", "-lW", path], capture_output=True, text=True,
                               check=True).stdout.splitlines():
        f = line.split()
        if f and f[0] == "LOAD" and int(f[2], 16) <= vaddr < int(f[2], 16) + int(f[5], 16):
            return vaddr - int(f[2], 16) + int(f[1], 16)
    raise SystemExit("%s: 0x%x in no segment" % (path, vaddr))


def trap_costs(calls=200000):
    """What a uprobe's traps cost on this machine, without a BPF program: tracefs probes on
    bench/hotloop's ggml_barrier at its first emulated instruction, as llmprofd places
    its own (the region entry's in GOMP_parallel is a push): an entry probe alone (the
    embedding's), and an entry and a return probe at one site (a region's: one breakpoint
    for both). Each less the loop alone, in us per call, the median of 3 rounds; the trace
    event each writes is in it (a few hundred ns at most)."""
    off = first_emulated(probes.HOTLOOP, "ggml_barrier")
    events = os.path.join(TRACEFS, "uprobe_events")

    def add(spec):  # appended: a user's own probes stay
        fd = os.open(events, os.O_WRONLY | os.O_APPEND)
        try:
            os.write(fd, (spec + "\n").encode())
        finally:
            os.close(fd)

    def enable(name, on):
        with open(os.path.join(TRACEFS, "events/uprobes", name, "enable"), "w") as f:
            f.write("1" if on else "0")

    def timed(kinds):
        names = ["lptrap_%s" % k for k in kinds]
        for k, n_ in zip(kinds, names):
            add("%s:%s %s:0x%x" % (k, n_, probes.HOTLOOP, off))
        try:
            for n_ in names:
                enable(n_, True)
            return probes.run_loop(calls, lambda pid: None)
        finally:
            for n_ in names:
                enable(n_, False)
                add("-:%s" % n_)

    b.mount_tracefs()
    got = {"none": [], "entry": [], "pair": []}
    for _ in range(3):
        got["none"].append(probes.run_loop(calls, lambda pid: None))
        got["entry"].append(timed(["p"]))
        got["pair"].append(timed(["p", "r"]))
    none = statistics.median(got["none"])
    return {k: (statistics.median(v) - none) / 1e3 for k, v in got.items() if k != "none"}


def tick_cost(seconds=2.0, hz=10000):
    """What a sampling timer's interrupt costs the task it interrupts on this machine,
    beyond any program's time: bench/hotloop pinned to CPU 0, alone and sampled there by
    `perf record -e cpu-clock` at hz (perf itself on CPU 1; its samples, a few dozen bytes
    each, are its handler's only work), the median of 3 rounds each, in us per sample. A
    VM takes an exit to reprogram the timer at each; perf's own output is in it, which
    makes it an upper bound for the interrupt alone."""
    def pin(pid):
        os.sched_setaffinity(pid, {0})

    def sampled(pid):
        pin(pid)
        out = os.path.join(tempfile.mkdtemp(prefix="bench-tick-"), "perf.data")
        perf = subprocess.Popen(["taskset", "-c", "1", "perf", "record", "-q", "-e",
                                 "cpu-clock", "-c", str(10 ** 9 // hz), "-C", "0", "-o", out,
                                 "--", "sleep", "600"], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 30
        while (not os.path.exists(out) or os.path.getsize(out) == 0) and \
                perf.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        time.sleep(0.2)  # its events enabled after the file's header

        def done():
            perf.send_signal(signal.SIGINT)
            perf.wait(timeout=60)
            shutil.rmtree(os.path.dirname(out), ignore_errors=True)
        return done

    calls = int(seconds * 1e9 / probes.run_loop(1000000, pin))
    got = {"none": [], "perf": []}
    for _ in range(3):
        got["none"].append(probes.run_loop(calls, pin))
        got["perf"].append(probes.run_loop(calls, sampled))
    none, perf = statistics.median(got["none"]), statistics.median(got["perf"])
    return max(0.0, (perf - none) / perf) / hz * 1e6


def task_ns(pid):
    """A process's CPU time in ns, exact: its threads' schedstat run times (the decoder's
    threads live as long as it does)."""
    return sum(on for on, _ in lptest.thread_schedstat(pid).values())


def summed(deltas):
    """pc.delta()s added up by program ({name: [run ns, runs]}), and all their run ns."""
    progs = {}
    for delta in deltas:
        for name, (ns, cnt) in delta.items():
            t = progs.setdefault(name, [0, 0])
            t[0] += ns
            t[1] += cnt
    return progs, sum(ns for ns, _ in progs.values())


def by_program(progs, fwd):
    """Note lines for the 8 programs that took the most, over fwd forwards."""
    return ["  %s: %.2f runs per forward, %.2f us each, %.1f us per forward"
            % (name, cnt / max(1, fwd), ns / cnt / 1e3, ns / 1e3 / max(1, fwd))
            for name, (ns, cnt) in sorted(progs.items(), key=lambda kv: -kv[1][0])[:8] if cnt]


def burn(seconds):
    """seconds of CPU on one thread, in a child process."""
    subprocess.run([sys.executable, "-c", "import time\nt = time.process_time()\n"
                    "while time.process_time() - t < %f:\n    pass" % seconds], check=True)


LEGS = list(itertools.permutations(("none", "burn", "with")))


def phases(n, hold, new):
    """The default daemon's cost in steady state, from one decoder run: n cycles, each a
    window of `hold` s with a warm daemon tracking the decoder ("with"), one with none
    ("none"), and one with none after as much CPU burnt as the daemon's start took
    ("burn"), their order going through the six orders, windows side by side so that the
    host's drift over minutes cancels in each cycle's ratios. A window with the daemon
    opens once it has read every object of the decoder and its samples count, and 2 s more
    (its start is not its steady state); one after a burn, 2 s after it; one with neither,
    1 s after the last window. The burn tells the daemon's cost from a window made slower by
    CPU spent just before it (a VM's host may charge for it): burn against none says how
    much that is, an A/A check of the whole setup as well. Short generate()
    calls (`new` tokens each), many a window, so that each window averages the same
    positions. Returns a (none, burn, with) triple a cycle, each (its rate, its rate at the
    median step, the daemon's CPU seconds over the window, the steps in it, the decoder's
    CPU ns per forward, the daemon's programs' (run ns, runs) by name over the window (with
    bpf_stats), the window's forwards: its length over the mean step)."""
    p = subprocess.Popen(torchref.decoder_argv("--threads", 2, "--prompt", 16, "--new", new,
                                               "--repeat", 1000000, "--progress"),
                         env=torchref.env("openblas"), stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE, text=True)
    fw = Forwards(p)
    out = []
    try:
        fw.started()
        # A daemon's start before the cycles: the CPU it takes, burnt in the burn legs
        # (updated at each start), and the page cache warm for every later start.
        d = b.Daemon()
        try:
            if not b.torch_sampled(d, p):
                raise SystemExit("the decoder was not tracked:\n%s" % d.text())
            start_cpu = lptest.proc_cpu_seconds(d.proc.pid)
        finally:
            d.stop()
        time.sleep(3)
        for k in range(n):
            rates = {}
            for what in LEGS[k % len(LEGS)]:
                dcpu, progs = 0.0, {}
                if what == "with":
                    d = b.Daemon()
                    try:
                        if not b.torch_sampled(d, p):
                            raise SystemExit("the decoder was not tracked:\n%s" % d.text())
                        time.sleep(2)
                        ids = lptest.prog_ids_of(d.proc.pid)
                        with b.bpf_stats():
                            s0 = pc.stats(ids)
                            c0, t0 = lptest.proc_cpu_seconds(d.proc.pid), time.monotonic()
                            x0 = task_ns(p.pid)
                            time.sleep(hold)
                            x1 = task_ns(p.pid)
                            t1 = time.monotonic()
                            dcpu = lptest.proc_cpu_seconds(d.proc.pid) - c0
                            progs = pc.delta(s0, pc.stats(ids))
                        start_cpu = c0
                    finally:
                        d.stop()
                else:
                    if what == "burn":
                        burn(start_cpu)
                        time.sleep(2)
                    else:
                        time.sleep(1)
                    t0, x0 = time.monotonic(), task_ns(p.pid)
                    time.sleep(hold)
                    x1, t1 = task_ns(p.pid), time.monotonic()
                st = fw.steps(t0, t1)
                if p.poll() is not None or len(st) < 10:
                    raise SystemExit("the decoder stopped (%d steps in a window)" % len(st))
                # the window's forwards: its steps' count, and its CPU per step over them
                fwd = len(st) * (t1 - t0) * 1e9 / sum(st)
                rates[what] = (len(st) * 1e9 / sum(st), 1e9 / statistics.median(st), dcpu,
                               len(st), (x1 - x0) / fwd, progs, fwd)
            none, burnt, ours = rates["none"], rates["burn"], rates["with"]
            out.append((none, burnt, ours))
            print("cycle %d/%d  tokens/s: none %.2f, after a burn of %.2f s %.2f, llmprofd "
                  "%.2f: llmprofd/burn %.4f, llmprofd/none %.4f, burn/none %.4f"
                  % (k + 1, n, none[0], start_cpu, burnt[0], ours[0], ours[0] / burnt[0],
                     ours[0] / none[0], burnt[0] / none[0]), flush=True)
    finally:
        p.kill()
        p.wait()
    return out


def interleaved(blocks, pairs, win, new):
    """The tracked decoder's cost at a fine grain: two decoders alike (A and B), one of them
    running at a time (SIGSTOP, SIGCONT), and a daemon tracking one of them alone
    (--no-discover --pid) and warm, as the default daemon tracks a decoder it found; their
    windows of `win` s alternate, a pair of them a few seconds long, so that the VM's speed,
    which moves 4-5 % between windows seconds apart here and more over minutes, moves both
    sides of a pair alike. The roles change at each of `blocks` blocks (a daemon each), so
    that what tells A from B (its memory's placement) cancels. A step's time depends on its
    position in generate() (the cache it attends over): each window's time is its steps'
    over the median steps at the same positions (all windows'), so that windows that hold
    different positions compare. The untracked decoder runs beside a daemon: it pays what
    the programs cost an event of a process not tracked (they run for the host's every
    event), the embedding's probe (attached for every process that maps libtorch, to find
    a new one) and the daemon's own CPU; these are measured in its windows (bpf_stats, the
    daemon's schedstat) and stated as what the pairs' ratio leaves out against no daemon.
    Returns (the pairs: (untracked, tracked), each (normalised time, tokens/s, steps);
    per block the median ratio; in the untracked windows: (the programs' summed(), daemon
    CPU ns, forwards); in the tracked ones the same)."""
    argv = torchref.decoder_argv("--threads", 2, "--prompt", 16, "--new", new, "--repeat",
                                 1000000, "--progress")
    procs = [subprocess.Popen(argv, env=torchref.env("openblas"), stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True) for _ in range(2)]
    fws = [Forwards(p) for p in procs]
    windows = []  # (block, pair, tracked?, steps_at)
    cost = {False: [[], 0, 0.0], True: [[], 0, 0.0]}  # pc.delta()s, daemon ns, forwards
    try:
        for p, fw in zip(procs, fws):
            fw.started()
            p.send_signal(signal.SIGSTOP)
        for blk in range(blocks):
            t_ = blk % 2  # the tracked one
            d = b.Daemon("--no-discover", "--pid", str(procs[t_].pid))
            try:
                procs[t_].send_signal(signal.SIGCONT)
                if not b.torch_sampled(d, procs[t_]):
                    raise SystemExit("the decoder was not tracked:\n%s" % d.text())
                time.sleep(2)
                procs[t_].send_signal(signal.SIGSTOP)
                ids = lptest.prog_ids_of(d.proc.pid)
                with b.bpf_stats():
                    for k in range(pairs):
                        for tracked in ((False, True) if k % 2 == 0 else (True, False)):
                            i = t_ if tracked else 1 - t_
                            s0, d0 = pc.stats(ids), task_ns(d.proc.pid)
                            tc = time.monotonic()
                            procs[i].send_signal(signal.SIGCONT)
                            time.sleep(0.25)  # its first forward after a stop left out
                            t0 = time.monotonic()
                            time.sleep(win)
                            t1 = time.monotonic()
                            fws[i].past(t1, 3)
                            procs[i].send_signal(signal.SIGSTOP)
                            ts = time.monotonic()
                            st = fws[i].steps_at(t0, t1)
                            if procs[i].poll() is not None or len(st) < 10:
                                raise SystemExit("a decoder stopped (%d steps in a window)"
                                                 % len(st))
                            c = cost[tracked]
                            c[0].append(pc.delta(s0, pc.stats(ids)))
                            c[1] += task_ns(d.proc.pid) - d0
                            # the forwards it ran while the programs' times were read
                            c[2] += len(st) * (ts - tc) * 1e9 / sum(ns for _, ns in st)
                            windows.append((blk, k, tracked, st))
            finally:
                d.stop()
            print("block %d/%d: %d pairs, decoder %s tracked" % (blk + 1, blocks, pairs, "AB"[t_]),
                  flush=True)
    finally:
        for p in procs:
            p.send_signal(signal.SIGCONT)
            p.kill()
            p.wait()
    by_pos = {}
    for *_, st in windows:
        for i, ns in st:
            by_pos.setdefault(i, []).append(ns)
    ref = {i: statistics.median(v) for i, v in by_pos.items()}
    side = {}
    for blk, k, tracked, st in windows:
        side[blk, k, tracked] = (sum(ns for _, ns in st) / sum(ref[i] for i, _ in st),
                                 len(st) * 1e9 / sum(ns for _, ns in st), len(st))
    out = [(side[blk, k, False], side[blk, k, True]) for blk in range(blocks)
           for k in range(pairs)]
    per_block = [statistics.median(u[0] / t[0] for u, t in out[blk * pairs:(blk + 1) * pairs])
                 for blk in range(blocks)]
    return out, per_block, *((summed(c[0]), c[1], c[2]) for c in (cost[False], cost[True]))


def ratio_rows(label, pairs, fields, fmt, unit):
    """Table rows of (without, with) pairs, one a field (index, label suffix): the medians
    of both sides, the median ratio with its 95 % interval (kcost.median_ci), the pairs."""
    rows = []
    for k, what in fields:
        med, lo, hi = kcost.median_ci([o[k] / n[k] for n, o in pairs])
        rows.append((label + what, "%.2f" % statistics.median(n[k] for n, _ in pairs),
                     "%.2f" % statistics.median(o[k] for _, o in pairs), fmt % med,
                     (fmt + "-" + fmt) % (lo, hi) if lo is not None
                     else "n/a (too few %s)" % unit, len(pairs)))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=10)
    ap.add_argument("--new", type=int, default=200)
    ap.add_argument("--configs", default="default,precise")
    ap.add_argument("--cycles", type=int, default=12,
                    help="cycles of the steady-state measurement (0: none)")
    ap.add_argument("--hold", type=float, default=8, help="seconds of each of its windows")
    ap.add_argument("--interleave", type=int, default=50, metavar="PAIRS",
                    help="pairs of windows a block of the interleaved measurement (0: none)")
    ap.add_argument("--blocks", type=int, default=4, help="its blocks (the roles change)")
    ap.add_argument("--window", type=float, default=1.0, help="seconds of each of its windows")
    a = ap.parse_args()
    configs = [c for c in a.configs.split(",") if c]
    for c in configs:
        if c not in CONFIGS:
            raise SystemExit("unknown configuration %r: %s" % (c, ", ".join(CONFIGS)))
    why = torchref.available()
    if why:
        raise SystemExit("PyTorch: %s (scripts/install-deps.sh installs it)" % why)
    b.need(b.LLMPROFD, b.LLMPROFCTL, "bpftool")
    rows, notes = [], []
    cost, trap, tick = {}, None, None
    for c in configs if a.pairs else ():
        pairs = []  # (no llmprofd, llmprofd): run_decoder's
        for i in range(a.pairs):
            pair = {}
            # the order alternates: no configuration always runs first
            if i % 2:
                pair["none"] = run_decoder(a.new)
            d = b.Daemon(*CONFIGS[c])
            held = None
            try:
                held = b.torch_warm([d])
                ids = lptest.prog_ids_of(d.proc.pid)
                with b.bpf_stats():
                    before, dcpu = pc.stats(ids), lptest.proc_cpu_seconds(d.proc.pid)
                    pair["ours"] = run_decoder(a.new)
                    cpu, fwd = pair["ours"][1], pair["ours"][2]
                    after, dcpu = pc.stats(ids), lptest.proc_cpu_seconds(d.proc.pid) - dcpu
                cost.setdefault(c, []).append((pc.delta(before, after), cpu, fwd, dcpu))
            finally:
                if held:
                    held.kill()
                    held.wait()
                d.stop()
            if not i % 2:
                pair["none"] = run_decoder(a.new)
            none, ours = pair["none"], pair["ours"]
            pairs.append((none, ours))
            print("pair %d/%d  %-8s no llmprofd %.2f, llmprofd %.2f tokens/s: %.3f; at the "
                  "median forward %.2f, %.2f: %.3f"
                  % (i + 1, a.pairs, c, none[0], ours[0], ours[0] / none[0], none[3], ours[3],
                     ours[3] / none[3]), flush=True)
        # the mean rate (field 0 of run_decoder's) and the rate at the median forward (3)
        rows += ratio_rows(c, pairs, ((0, ""), (3, " (median forward)")), "%.3f", "pairs")
    if a.cycles:
        trip = phases(a.cycles, a.hold, 50)
        cyc = [(n_, o) for n_, _, o in trip]  # with the daemon against none
        for label, pairs in (("default, steady state", cyc),
                             ("default, steady state, against a burn",
                              [(nb, o) for _, nb, o in trip]),
                             ("A/A: a burn against none", [(n_, nb) for n_, nb, _ in trip])):
            rows += ratio_rows(label, pairs, ((0, ""), (1, " (median step)")), "%.4f",
                               "cycles")
        notes.append("steady state in one run: one decoder (generate() of 50 tokens after a "
                     "16-token prompt, again and again), windows of %.0f s with a warm default "
                     "daemon, with none after as much CPU burnt as its start took, and with "
                     "none, side by side, %d cycles; the daemon's own CPU in its windows: "
                     "%.0f us per generation forward" % (
                         a.hold, len(cyc), 1e6 * sum(o[2] for _, o in cyc) /
                         max(1, sum(o[3] for _, o in cyc))))
        cpu, fwd = sum(o[4] * o[6] for _, o in cyc), sum(o[6] for _, o in cyc)
        progs, total = summed(o[5] for _, o in cyc)
        prog_us = total / 1e3 / max(1, fwd)
        med, lo, hi = kcost.median_ci([o[4] / n[4] for n, o in cyc])
        notes.append("steady state: the decoder's CPU per forward (its threads' schedstat), "
                     "with the daemon against none: median ratio %.4f, 95%% CI %s"
                     % (med, "%.4f-%.4f" % (lo, hi) if lo is not None else "n/a"))
        notes.append("steady state: the programs took %.1f us per forward, %.3f %% of the "
                     "decoder's CPU in the same windows; by program:"
                     % (prog_us, 100 * total / max(cpu, 1)))
        notes += by_program(progs, fwd)
        # The uprobes' traps, which no program's time holds: a region's entry and return
        # share a breakpoint; the embedding's is an entry alone.
        trap = trap_costs()
        regions = progs.get("lp_omp_fork_enter", (0, 0))[1] / max(1, fwd)
        entries = progs.get("lp_torch_forward", (0, 0))[1] / max(1, fwd)
        traps = regions * trap["pair"] + entries * trap["entry"]
        # The sampling timer's interrupts, which no program's time holds either.
        tick = tick_cost()
        ticks = progs.get("lp_sample", (0, 0))[1] / max(1, fwd) * tick
        dcpu = sum(o[2] for _, o in cyc) * 1e6 / max(1, fwd)
        step = 1e6 / statistics.median(o[0] for _, o in cyc)
        notes.append("steady state: a uprobe's traps on this machine (tracefs probes on "
                     "bench/hotloop): an entry %.2f us, an entry and a return at one site "
                     "%.2f us; %.2f regions and %.2f embeddings a forward: %.1f us of traps "
                     "per forward" % (trap["entry"], trap["pair"], regions, entries, traps))
        notes.append("steady state: the sampling timer's interrupt on this machine "
                     "(tick_cost(): perf's cpu-clock on bench/hotloop): %.2f us each; %.1f us "
                     "per forward" % (tick, ticks))
        parts = prog_us + traps + ticks + dcpu
        notes.append("steady state: in all, the programs %.1f + the traps %.1f + the timer's "
                     "interrupts %.1f + the daemon's CPU %.1f = %.1f us per forward, %.2f %% of "
                     "a forward's %.0f us (the cost if all of it held up the forward's "
                     "threads, no more than that on 2 CPUs where the daemon's time is the "
                     "decoder's to lose)"
                     % (prog_us, traps, ticks, dcpu, parts, 100 * parts / step, step))
    if a.interleave:
        got, per_block, quiet, busy = interleaved(a.blocks, a.interleave, a.window, 50)
        trap = trap or trap_costs()
        tick = tick if tick is not None else tick_cost()
        ratios = [u[0] / t_[0] for u, t_ in got]  # times: lower is faster
        med, lo, hi = kcost.median_ci(ratios)
        rows.append(("default, interleaved: tracked against untracked (positions matched)",
                     "%.2f" % statistics.median(u[1] for u, _ in got),
                     "%.2f" % statistics.median(t_[1] for _, t_ in got), "%.4f" % med,
                     "%.4f-%.4f" % (lo, hi) if lo is not None else "n/a", len(got)))
        rows += ratio_rows("default, interleaved: tokens/s", got, ((1, ""),), "%.4f", "pairs")
        mean = statistics.mean(ratios)
        sd = statistics.stdev(ratios) if len(ratios) > 1 else float("nan")
        fwd = quiet[2]
        progs, progs_ns = quiet[0]
        entries = progs.get("lp_torch_forward", (0, 0))[1]
        samples = progs.get("lp_sample", (0, 0))[1]
        step = 1e9 / statistics.median(u[1] for u, _ in got)  # ns per forward, untracked
        resid = (progs_ns + quiet[1] + (entries * trap["entry"] + samples * tick) * 1e3) / \
            max(1, fwd)
        share = resid / step
        notes.append("interleaved: two decoders alike (generate() of 50 tokens after a "
                     "16-token prompt, again and again), one running at a time, windows of "
                     "%.1f s alternating, a daemon tracking one of them (--no-discover --pid), "
                     "%d blocks of %d pairs, the roles changed at each block; each window's "
                     "time is its steps' over the median steps at the same positions"
                     % (a.window, a.blocks, a.interleave))
        notes.append("interleaved: the pairs' ratios (tracked tokens/s over untracked, "
                     "positions matched): median %.4f, mean %.4f (sd %.4f, standard error "
                     "%.4f); by block: %s" % (med, mean, sd, sd / len(ratios) ** 0.5,
                                             ", ".join("%.4f" % v for v in per_block)))
        notes.append("interleaved: what the untracked decoder paid the daemon, per forward "
                     "(%.0f forwards in its windows, %.0f us each): the programs %.1f us, the "
                     "daemon's CPU %.1f us, the embedding's trap %.1f us, the sampling "
                     "timer's interrupts %.1f us (%.2f a forward, %.2f us each: tick_cost()): "
                     "%.1f us, %.3f %% of a forward (all of it, if all held up its threads)"
                     % (fwd, step / 1e3, progs_ns / 1e3 / max(1, fwd),
                        quiet[1] / 1e3 / max(1, fwd), entries * trap["entry"] / max(1, fwd),
                        samples * tick / max(1, fwd), samples / max(1, fwd), tick, resid / 1e3,
                        100 * share))
        notes += by_program(progs, fwd)
        notes.append("interleaved: against no daemon, the pairs' median less that: %.4f "
                     "(95 %% CI %s)" % (med * (1 - share),
                                        "%.4f-%.4f" % (lo * (1 - share), hi * (1 - share))
                                        if lo is not None else "n/a"))
        notes.append("interleaved: in the tracked decoder's windows, per forward: the "
                     "programs %.1f us, the daemon's CPU %.1f us; by program:"
                     % (busy[0][1] / 1e3 / max(1, busy[2]), busy[1] / 1e3 / max(1, busy[2])))
        notes += by_program(busy[0][0], busy[2])
    for c, runs in cost.items():
        progs, total = summed(delta for delta, _, _, _ in runs)
        cpu, fwd, dcpu = (sum(r[k] for r in runs) for k in (1, 2, 3))
        notes.append("%s: the programs took %.0f us per generation forward, %.3f %% of the "
                     "decoder's CPU time (%d forwards, %.1f CPU s); by program:"
                     % (c, total / 1e3 / max(1, fwd), 100 * total / 1e9 / max(cpu, 1e-9), fwd,
                        cpu))
        notes.append("%s: the daemon's own CPU time while the decoder ran: %.0f us per "
                     "generation forward, %.3f %% of the decoder's" % (
                         c, dcpu * 1e6 / max(1, fwd), 100 * dcpu / max(cpu, 1e-9)))
        notes += by_program(progs, fwd)
    notes.insert(0, "workload: tests/workload/decoder.py, llama shape, 2 threads, OpenBLAS "
                 "(openmp), prompt 16, %d generated tokens; tokens/s by the decoder's own "
                 "clock; %d pairs per configuration, each daemon warm" % (a.new, a.pairs))
    b.table("PyTorch: overhead on generation", ["configuration", "no llmprofd tokens/s",
                                                  "llmprofd tokens/s", "median ratio",
                                                  "95% CI", "pairs"], rows, notes)


if __name__ == "__main__":
    main()
