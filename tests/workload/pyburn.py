#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
"""A CPython process of known work, for tests/e2e/test_python.py. It prints its pid and its
functions' first and last lines as JSON, waits for a line on stdin, works, prints what it
measured as JSON, and (--hold) waits for stdin to close before it exits.

Default: main() calls work(), which calls burn_a, burn_b and burn_c in turn, each spinning
in its own loop (its own frame the innermost Python frame) for 1, 2 and 3 units of its
thread's CPU time, timing itself by that clock; for --seconds of CPU in all. It reports
each function's CPU and calls, and the process's CPU over the work.

--gil: two threads spin in Python for --seconds of wall time each, contending for the GIL;
each reports its wall time, its CPU time and its run-queue wait (schedstat's second field)
over its spin: what is left of its wall time is waiting for the GIL. They stay (asleep)
until the process exits."""
import argparse
import inspect
import json
import os
import sys
import threading
import time

UNIT_NS = 400000  # a unit of burn: 0.4 ms of thread CPU


def burn_a(units):
    end = time.thread_time_ns() + units * UNIT_NS
    n = 0
    while time.thread_time_ns() < end:
        n += 1
    return n


def burn_b(units):
    end = time.thread_time_ns() + units * UNIT_NS
    n = 0
    while time.thread_time_ns() < end:
        n += 1
    return n


def burn_c(units):
    end = time.thread_time_ns() + units * UNIT_NS
    n = 0
    while time.thread_time_ns() < end:
        n += 1
    return n


FUNCS = {"burn_a": (burn_a, 1), "burn_b": (burn_b, 2), "burn_c": (burn_c, 3)}


def work(seconds, cpu, calls):
    end = time.thread_time_ns() + int(seconds * 1e9)
    while time.thread_time_ns() < end:
        for name, (fn, units) in FUNCS.items():
            t0 = time.thread_time_ns()
            fn(units)
            cpu[name] += time.thread_time_ns() - t0
            calls[name] += 1


def schedstat():
    """(on-CPU ns, run-queue wait ns) of the calling thread, by the kernel."""
    with open("/proc/thread-self/schedstat") as f:
        on, wait, _ = f.read().split()
    return int(on), int(wait)


def spin_thread(seconds, out, start, done, release):
    start.wait()
    w0, c0, (_, q0) = time.monotonic_ns(), time.thread_time_ns(), schedstat()
    n = 0
    while time.monotonic_ns() - w0 < seconds * 1e9:
        n += 1
    w1, c1, (_, q1) = time.monotonic_ns(), time.thread_time_ns(), schedstat()
    out[threading.get_native_id()] = {"wall_ns": w1 - w0, "cpu_ns": c1 - c0,
                                      "runq_ns": q1 - q0}
    done.release()
    release.wait()  # alive while the test reads its figures


def lines(fn):
    src, first = inspect.getsourcelines(fn)
    return [first, first + len(src) - 1]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=6)
    ap.add_argument("--gil", action="store_true")
    ap.add_argument("--hold", action="store_true")
    a = ap.parse_args()
    print(json.dumps({"pid": os.getpid(), "tid": threading.get_native_id(),
                      "lines": {n: lines(f) for n, (f, _) in FUNCS.items()}
                      | {"work": lines(work), "main": lines(main)}}), flush=True)
    sys.stdin.readline()
    ts = []
    if a.gil:
        out, start, done, release = {}, threading.Event(), threading.Semaphore(0), \
            threading.Event()
        ts = [threading.Thread(target=spin_thread, args=(a.seconds, out, start, done, release))
              for _ in range(2)]
        for t in ts:
            t.start()
        start.set()
        for t in ts:
            done.acquire()
        res = {"threads": out}
    else:
        cpu = {n: 0 for n in FUNCS}
        calls = {n: 0 for n in FUNCS}
        p0 = time.process_time_ns()
        work(a.seconds, cpu, calls)
        res = {"cpu_ns": cpu, "calls": calls, "process_cpu_ns": time.process_time_ns() - p0}
    print(json.dumps(res), flush=True)
    if a.hold:
        sys.stdin.read()
    if ts:
        release.set()
        for t in ts:
            t.join()


if __name__ == "__main__":
    main()
