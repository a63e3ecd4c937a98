#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
"""bpf tier: the samples the kernel does not take are counted (sample.bpf.c, "Samples not
taken"). The kernel runs no BPF program on a CPU where a kprobe or a (classic) tracepoint
program runs already (bpf_prog_active): a cpu-clock timer that fires then takes no sample,
and says so nowhere. (A uprobe's program does not stop it: on this kernel uprobes run
theirs without bpf_prog_active, and a slow one there took nothing from the sampler, nor
from perf.) The test makes that happen on purpose: the fixture makes a getppid(2) call in
each matmul call, and bpftrace's program on that syscall's tracepoint takes some 14 us of
each call (a loop of map updates): four in five of the timer's firings on the fixture's
CPU come while it runs. Then, on the same run:
- the daemon's samples plus the ones it says were not taken are perf -a's count of the
  fixture's samples over the same span (perf's events run no BPF program: it takes every
  one), within TOLERANCE plus what perf itself lost, both at a fixed rate; and, at the
  daemon's default rates restarted at random (perf's too), within the noise of two such
  rates' means;
- the samples alone fall short by at least half: the count is not idle;
- the op view, /metrics, the status and the profile window's header and comment say them;
- without the slow program (the same fixture, alone), next to none are not taken.
A firing no timer made counts as not taken too, where the fixture was the CPU's task
(sample.bpf.c: interrupts off that long, the vCPU not running): a VM's host here paused
both CPUs for 33 ms three times in one run, and perf -a, whose timers stopped as well, has
no sample for those periods. At fixed rates perf's own grid shows them: the periods a
CPU's perf samples skip between two samples of the fixture on it are added to perf's count
(and allowed in the alone run's), measured on the same run.
The fixture's compute thread never sleeps in its work (it only spins and makes that
syscall), so the samples missing while it runs on are its own; those in a gap across a
switch on its CPU (it moved, its main thread ran there) are no one's for certain and count
as not known: the check allows for those, and holds them to 15 % of the run."""
import math
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
import lptest as t  # noqa: E402
import perfref  # noqa: E402
import pprofref  # noqa: E402

HZ = 997
ITERS = 60000
# Two samplings at fixed rates of one run of some 1,200 samples: each count is the run's
# time on the CPU over the period, to a few samples (the first and last periods; perf's
# samples of the thread's exit and of the main thread's answer, which the daemon's window
# of the op view counts too or not); 3 %. Not the thread's own CPU clock: the kernel
# keeps interrupt time out of it (IRQ_TIME_ACCOUNTING), and both samplers' work runs in
# the timer's interrupt: perf's count ran 5 % over it at 997 Hz.
TOLERANCE = 0.03
LIB = os.path.join(os.path.dirname(os.path.abspath(t.LPGGML)), "liblpggml.so")
# The fixture's getppid calls (one per matmul call) each run this: 500 map updates, some
# 14 us.
SLOW = ("tracepoint:syscalls:sys_enter_getppid /pid == %d/ { $i = 0; while ($i < 500) "
        "{ @x[$i & 7] = $i; $i++; } @calls = count(); }")


def perf_missing(data, pid, hz, start, end):
    """The periods perf's timers did not fire on a CPU between two of pid's samples there
    (perf -a at a fixed rate samples every task and the idle one: a gap in a CPU's samples
    is time no timer fired), within [start, end)."""
    out = subprocess.run(["perf", "script", "-i", data, "-F", "pid,cpu,time", "-G"],
                         capture_output=True, text=True, errors="replace", timeout=900).stdout
    period, last, missing = 1.0 / hz, {}, 0
    for line in out.splitlines():
        m = re.match(r"^\s*(\d+)\s+\[(\d+)\]\s+([\d.]+):", line)
        if not m:
            continue
        p, cpu, when = int(m[1]), m[2], float(m[3])
        if not start <= when < end:
            continue
        prev = last.get(cpu)
        if prev and prev[0] == pid and p == pid and when - prev[1] > 1.5 * period:
            missing += int((when - prev[1]) / period + 0.5) - 1
        last[cpu] = (p, when)
    return missing


def fixture(d, iters):
    """lpggml, tracked, waiting for "go": iters matmul calls of 1 us and a getppid each."""
    fx = subprocess.Popen([t.LPGGML, "--wait-go", "--threads", "1", "--iters", str(iters),
                           "--mm-us", "1", "--bar-spin-us", "1", "--syscalls", "1"],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    t._children.append(fx)
    t.read_json_line(fx, "the fixture", 30)
    d.wait_log("pid %d (lpggml) runs ggml" % fx.pid, timeout=30)
    return fx


def run(d, slow, work, tag, iters=ITERS, rephased=False):
    """The fixture's run of iters calls (a slow tracepoint program on each where slow),
    under perf -a (its timers restarted at random as the daemon's are, where rephased):
    (its op view, perf's count of its samples, perf's lost share, its CPU time)."""
    fx = fixture(d, iters)
    bt = t.bpftrace(SLOW % fx.pid, end="print(@calls);") if slow else None
    data = os.path.join(work, tag + ".data")
    perf = (perfref.SystemWide(data, HZ, stack=1024) if rephased
            else perfref.Recording(data, HZ, ["-a"], stack=1024))
    unknown = d.get("/v1/status")["profiles"]["samples_not_taken_unattributed"]
    since = time.monotonic()
    fx.stdin.write("go\n")
    fx.stdin.flush()
    res = t.read_json_line(fx, "the fixture's result", 300)
    until = time.monotonic()
    unknown = d.get("/v1/status")["profiles"]["samples_not_taken_unattributed"] - unknown
    # Its compute thread's CPU time in its calls, by its own clock: all but the loop's
    # few instructions around them.
    cpu = res["matmul_cpu_ns"] + res["barrier_cpu_ns"]
    perf.stop()
    if bt:
        out = t.bpftrace_stop(bt)
        calls = [int(x) for x in re.findall(r"^@calls: (\d+)", out, re.M)]
        t.check(calls[-1:] == [iters], "bpftrace ran its program on every call: %s" % calls)
    t.check(res["matmul_calls"] == iters, "the fixture made its %d calls" % iters)
    doc = d.get("/v1/processes/%d" % fx.pid)
    fx.stdin.close()
    fx.wait(timeout=30)
    n = len(pprofref.perf_stacks(data, fx.pid, since, until))
    missing = 0 if rephased else perf_missing(data, fx.pid, HZ, since, until)
    return doc, n, perfref.lost_share(data), cpu, unknown, missing


def check_count(taken, skipped, unknown, nperf, bound, what):
    """Samples and samples not taken against perf's count: never more than it (beyond
    bound), and less by no more than bound plus the samples missing on the host whose
    process is not known (a gap across a switch on the CPU: the thread moved, or its main
    thread ran there; counted host-wide over the run)."""
    t.check(taken + skipped <= (1 + bound) * nperf and
            taken + skipped >= (1 - bound) * nperf - unknown,
            "%s: samples and samples not taken, %d + %d, are perf's %d within %.3f and the "
            "%d whose process is not known" % (what, taken, skipped, nperf, bound, unknown))
    t.check(unknown <= 0.15 * nperf, "%s: of the samples missing, %d of a process not known "
            "(at most 15 %% of perf's)" % (what, unknown))


def fixed_rate(work):
    """Timers at a fixed rate, the daemon's and perf's: each count is the CPU time over
    the period, to a sample or two."""
    d = t.Daemon("--sample-hz", str(HZ), "--no-sample-rephase")
    d.wait_ready()

    print("--- a slow tracepoint program on every matmul call (fixed rates)")
    doc, nperf, perf_lost, cpu, unknown, missing = run(d, True, work, "slow")
    sm = doc["ggml"]["sampled"]
    taken, skipped = sm["samples"], sm["not_taken"]
    print("samples %d, not taken %d (%d not known); perf %d (lost %.3f, %d periods no "
          "timer fired while the fixture was the CPU's task); CPU time %.2f s"
          % (taken, skipped, unknown, nperf, perf_lost, missing, cpu / 1e9))
    # Both counts run from before "go" to after the result: the fixture idles (parked)
    # around its work, so the spans' edges hold no sample of it.
    check_count(taken, skipped, unknown, nperf + missing, TOLERANCE + perf_lost,
                "fixed rates")
    t.check(skipped >= 0.5 * nperf, "the slow program took %d of perf's %d samples from the "
            "sampler (at least half)" % (skipped, nperf))
    t.check(doc["counters"]["samples_skipped"] == skipped,
            "the counter is the op view's: %s" % doc["counters"].get("samples_skipped"))
    status = d.get("/v1/status")
    t.check(status["profiles"]["samples_not_taken"] >= skipped,
            "the status counts them host-wide: %s" % status["profiles"])
    _, metrics, _ = t.curl(d.socket, "GET", "/metrics")
    m = re.search(r'^llmprof_cpu_samples_not_taken_total\{[^}]*pid="%d"[^}]*\} (\d+)'
                  % doc["pid"], metrics, re.M)
    t.check(m and int(m.group(1)) == skipped, "/metrics has them: %s" % (m and m.group(0)))
    t.check(re.search(r'^llmprofd_samples_not_taken_total\{attributed="yes"\} \d+', metrics,
                      re.M), "/metrics counts them host-wide")
    out = subprocess.run([t.LLMPROFCTL, "--socket", d.socket, "dump", "--pid",
                          str(doc["pid"])], capture_output=True, text=True, timeout=60).stdout
    t.check("%d more samples the kernel did not take" % skipped in out,
            "dump says them: %s" % [ln for ln in out.splitlines() if "sampled" in ln])

    print("--- a profile window over a slow run: its header and comment")
    fx = fixture(d, ITERS)
    bt = t.bpftrace(SLOW % fx.pid, end="print(@calls);")
    hdr = os.path.join(work, "window.headers")
    win = subprocess.Popen(["curl", "-sS", "--unix-socket", d.socket, "-D", hdr, "-o",
                            os.path.join(work, "window.pb.gz"),
                            "http://localhost/debug/pprof/profile?seconds=60&pid=%d" % fx.pid])
    t._children.append(win)
    t.poll("the window to open",
           lambda: d.get("/v1/status")["profiles"]["windows_open"] >= 1, timeout=10)
    fx.stdin.write("go\n")
    fx.stdin.flush()
    t.read_json_line(fx, "the fixture's result", 300)
    calls = [int(x) for x in re.findall(r"^@calls: (\d+)", t.bpftrace_stop(bt), re.M)]
    t.check(calls[-1:] == [ITERS], "bpftrace ran its program on every call: %s" % calls)
    fx.stdin.close()
    fx.wait(timeout=30)
    win.wait(timeout=120)
    with open(hdr) as f:
        h = f.read()
    prof = pprofref.load(open(os.path.join(work, "window.pb.gz"), "rb").read())
    comments = [prof["string_table"][i] for i in prof.get("comment", [])]
    m = re.search(r"^X-Llmprof-Samples-Not-Taken: (\d+) (\d+)", h, re.M | re.I)
    n = next((int(x.group(1)) for x in (re.match(r"llmprofd: (\d+) samples in", c)
                                         for c in comments) if x), None)
    # As in the run above, judged within the window: the slow program took at least half of
    # the firings on the fixture (its samples, those not taken, those of no known process).
    t.check(m and n is not None and int(m.group(1)) >= 0.5 * (n + int(m.group(1))
                                                             + int(m.group(2))),
            "the window's header counts them: %s, beside %s samples in the window"
            % (m and m.group(0), n))
    t.check(any("did not take" in c for c in comments), "and its comment: %s" % comments)

    print("--- the same fixture alone")
    doc, nperf, perf_lost, cpu, _, missing = run(d, False, work, "alone")
    sm = doc["ggml"]["sampled"]
    print("samples %d, not taken %d; perf %d (%d periods no timer fired)"
          % (sm["samples"], sm["not_taken"], nperf, missing))
    t.check(sm["not_taken"] <= 0.01 * nperf + missing, "alone, next to none not taken: %d "
            "of %d (%d periods no timer fired)" % (sm["not_taken"], nperf, missing))
    t.check(abs(sm["samples"] - nperf) <= (TOLERANCE + perf_lost) * nperf + 2,
            "alone, the samples are perf's within %.0f %%: %d, %d"
            % (100 * TOLERANCE, sm["samples"], nperf))
    t.check(d.stop() == 0, "the daemon exits 0")


def rephased(work):
    """The daemon's default: each CPU's timer restarted at a random rate every 50-150 ms,
    a new grid each time. The gaps across a restart are counted too (sample.bpf.c). Each
    count's own rate is then the mean of the segments' rates, uniform in [0.75, 1.25] of
    HZ: over n segments its relative deviation is 0.144 / sqrt(n), independent between the
    daemon's and perf's timers; bound: 3.5 sigma of the difference, plus TOLERANCE."""
    d = t.Daemon("--sample-hz", str(HZ))
    d.wait_ready()
    print("--- a slow tracepoint program on every matmul call (rates restarted at random)")
    doc, nperf, perf_lost, cpu, unknown, _ = run(d, True, work, "rephased", ITERS * 3,
                                              rephased=True)
    sm = doc["ggml"]["sampled"]
    taken, skipped = sm["samples"], sm["not_taken"]
    segments = max(1.0, cpu / 1e9 / 0.1)
    bound = TOLERANCE + perf_lost + 3.5 * math.sqrt(2) * 0.144 / math.sqrt(segments)
    print("samples %d, not taken %d (%d not known); perf %d (lost %.3f); %.0f segments"
          % (taken, skipped, unknown, nperf, perf_lost, segments))
    check_count(taken, skipped, unknown, nperf, bound, "rates restarted at random")
    t.check(taken < 0.5 * nperf, "and the samples alone are not: %d" % taken)
    t.check(d.stop() == 0, "the daemon exits 0")


def main():
    work = t.tmpdir("llmprofd-notaken-")
    fixed_rate(work)
    rephased(work)


t.run(main, timeout=280)
