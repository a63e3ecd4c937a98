#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
"""ggml discovery and probes, on lpggml: a process that dlopens liblpggml.so, whose
functions are named like ggml's and do known work.

- discovery by symbols: at dlopen, without --pid; a late dlopen within 1 s; a library
  rewritten in place is read again;
- precise mode: exact matmul and barrier call counts, durations, the spin/sleep split;
- llama_decode: calls, tokens per call, errors, latency;
- sampling: the shares of time, with and without the stack scan, against precise mode
  over the same window, and the always-on estimate of sleeping in barriers;
- cleanup: the per-process maps are empty once the process exits."""
import math
import os
import shutil
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from lptest import LPGGML, Daemon, Lpggml, check, near, proc_of, run  # noqa: E402
import lptest as t  # noqa: E402
import perfref  # noqa: E402

LIBDIR = os.path.dirname(os.path.abspath(LPGGML))


def daemon_run(daemon_args, fixture_args):
    """A private daemon finds lpggml by itself; the report is taken after it exited."""
    d = Daemon("--once", *daemon_args)
    d.wait_ready()
    fx = Lpggml(*fixture_args)
    d.wait_log("pid %d (lpggml) runs ggml" % fx.pid)
    if "--precise-duty" in daemon_args:
        d.wait_log("pid %d: precise mode on" % fx.pid)
    res = fx.finish()
    d.wait_log("pid %d (lpggml) exited" % fx.pid)
    check(d.stop() == 0, "llmprofd exits 0")
    return d, d.report(), res, fx.pid


def per_call(total, calls):
    return total / calls if calls else 0


def held(got, ref, over=0, under=0):
    """got within 10 % and 20 us of ref, and further by over above it or under below."""
    tol = 0.1 * ref + 20
    return -(tol + under) <= got - ref <= tol + over


def test_precise(fast):
    # 2 threads x 200 iterations: matmul (400 us, calling the barrier halfway) then the
    # barrier (200 us spinning, then 500 us asleep). Decoding: 32 tokens, 20 x 1, 1 x 0.
    # The probes go on the first emulated instruction, or with --no-fast-entry on the first.
    print("--- precise mode, probes %s" % ("on emulated instructions" if fast else "at entry"))
    stolen = t.stolen_ns()
    d, rep, res, pid = daemon_run(
        ["--precise-duty", "1"] + ([] if fast else ["--no-fast-entry"]),
        ["--threads", "2", "--iters", "200", "--mm-us", "400", "--bar-spin-us", "200",
         "--bar-sleep-us", "500", "--nested", "--prompt", "32", "--gen", "20",
         "--decode-us", "2000"])
    stolen = t.stolen_ns() - stolen
    p = proc_of(rep, pid)
    g = p["ggml"]
    check(p["matched_by"] == "ggml", "found by its symbols, without --pid")
    objs = [o for o in g["objects"] if o["path"].endswith("/liblpggml.so")]
    check(len(objs) == 1, "liblpggml.so is listed among the objects")
    if objs:
        o = objs[0]
        check(o["matmul"] == ["ggml_compute_forward_mul_mat"] and o["barrier"] == ["ggml_barrier"]
              and o["decode"] == ["llama_decode"],
              "found: matmul, barrier (a local symbol) and llama_decode: %s" % o)
        check(o["decode_probes"] == "attached", "llama_decode probes attached")
        sites = {s["function"]: (s["instruction"], s["offset"]) for s in o["probe_sites"]}
        check(set(sites) == {"ggml_compute_forward_mul_mat", "ggml_barrier", "llama_decode"},
              "a probe site per function: %s" % sites)
        # Built with CET: ggml_barrier starts with endbr64, then push %rbx.
        want = ("push", 4) if fast else ("entry", 0)
        check(sites.get("ggml_barrier") == want, "ggml_barrier probed at %s, expected %s"
              % (sites.get("ggml_barrier"), want))
        check(fast or all(s == ("entry", 0) for s in sites.values()),
              "--no-fast-entry: every probe on the first instruction")
    check("iqk_mul_mat" in g["missing"] and "GOMP_barrier" in g["missing"],
          "names not in this build are reported missing: %s" % g["missing"])

    pr = g["precise"]
    mm, bar = pr["matmul"], pr["barrier"]
    check(mm["calls"] == res["matmul_calls"] == 400,
          "matmul calls exact: %d of %d" % (mm["calls"], res["matmul_calls"]))
    check(bar["calls"] == res["barrier_calls"] == 800,
          "barrier calls exact, nested ones included: %d of %d" % (bar["calls"], res["barrier_calls"]))
    # Held to the fixture's own clocks around each call, on the same run (its thread's CPU
    # time, and the wall clock): within 10 % and 20 us a call (the clock reads and the
    # probes' own time, a few us a call). By construction the barrier spins 200 us and
    # sleeps 500 and matmul works 400, but a busy host stretches all three. On a VM the
    # hypervisor may take the vCPU from a running thread: its CPU clock leaves that time
    # out, the daemon's stretches between switches do not (nor do perf sched's or
    # bpftrace's). So the daemon's on-CPU time may exceed the clock, and its off-CPU time
    # fall short of the clock's, by what was stolen meanwhile (seen: 104 ticks stolen
    # during a run, matmul 443 us a call against 413, barrier sleeps 932 against 977;
    # runs with under 12 ticks agreed within 5 us).
    steal = "; %.0f ms stolen from the vCPUs meanwhile" % (stolen / 1e6)
    spin = per_call(bar["spin_ns"], bar["calls"]) / 1e3
    sleep = per_call(bar["sleep_ns"], bar["calls"]) / 1e3
    ref_spin = res["barrier_cpu_ns"] / res["barrier_calls"] / 1e3
    ref_sleep = (res["barrier_wall_ns"] - res["barrier_cpu_ns"]) / res["barrier_calls"] / 1e3
    bar_steal = per_call(stolen, bar["calls"]) / 1e3
    check(held(spin, ref_spin, over=bar_steal),
          "barrier spins %.0f us per call (on CPU inside it), the fixture's CPU clock %.0f%s"
          % (spin, ref_spin, steal))
    check(held(sleep, ref_sleep, under=bar_steal) and sleep >= 480,
          "barrier sleeps %.0f us per call (off CPU inside it), the fixture's clocks %.0f%s"
          % (sleep, ref_sleep, steal))
    excl = per_call(mm["exclusive_oncpu_ns"], mm["calls"]) / 1e3
    wall = per_call(mm["ns"], mm["calls"]) / 1e3
    ref_excl = (res["matmul_cpu_ns"] - res["nested_barrier_cpu_ns"]) / res["matmul_calls"] / 1e3
    ref_wall = res["matmul_wall_ns"] / res["matmul_calls"] / 1e3
    check(held(excl, ref_excl, over=per_call(stolen, mm["calls"]) / 1e3),
          "matmul's own CPU time %.0f us per call, the fixture's CPU clock %.0f%s"
          % (excl, ref_excl, steal))
    check(held(wall, ref_wall),
          "matmul's wall time, the barrier inside included, %.0f us per call, the fixture's "
          "clock %.0f" % (wall, ref_wall))
    h = p["histograms"]
    check(h["matmul"]["count"] == 400 and h["barrier"]["count"] == 800,
          "histograms hold every call")

    tk = g["tokens"]
    check(tk["prompt"]["calls"] == 1 and tk["prompt"]["tokens"] == 32,
          "prompt: one call of 32 tokens: %s" % tk["prompt"])
    check(tk["generation"]["tokens"] == 20, "generation: 20 tokens")
    check(tk["decoded"] == 52, "decoded tokens add up: %d" % tk["decoded"])
    check(tk["decode_errors"] == res["decode_errors"] == 1, "the empty batch is a decode error")
    # Each decode spins 2 ms by the TSC: no call takes less. The fixture's clock reads
    # around its calls hold them and a little more: where the host is busy, the thread is
    # preempted at the probes' return to user space too, outside the call (seen: 2.04 ms
    # against 2.66 beside a decoding engine). Quiet, the two bounds are 0.05 ms apart.
    ref_gen = res["gen_wall_ns"] / res["gen_tokens"] / 1e6
    check(2.0 <= tk["generation"]["ms_per_token"] <= ref_gen + 0.05,
          "ms per generated token %.3f: at least its 2 ms, at most the fixture's clock %.3f"
          % (tk["generation"]["ms_per_token"], ref_gen))
    ref_prompt = res["prompt_wall_ns"] / 1e6
    check(2.0 <= h["decode_prompt"]["sum"] / 1e6 <= ref_prompt + 0.05,
          "prompt decode latency %.3f ms (one call): at least its 2 ms, at most the "
          "fixture's clock %.3f" % (h["decode_prompt"]["sum"] / 1e6, ref_prompt))

    # The always-on estimate (where threads were switched out) against the exact split.
    est = g["sampled"]["barrier_offcpu_estimate_ns"]
    check(near(est, bar["sleep_ns"], 0.15),
          "sleeping in barriers, estimated from switch-outs: %.0f ms vs %.0f ms exact"
          % (est / 1e6, bar["sleep_ns"] / 1e6))

    maps = {m["name"]: m["entries"] for m in rep["maps"]}
    check(maps["ranges"] == 0 and maps["precise"] == 0 and maps["procs"] == 0,
          "per-process maps are empty after the exit: %s" % maps)
    check("pid %d: precise mode off" % pid in d.log(), "the precise window was closed")


def shares(d):
    return (d["matmul"], d["barrier"], d["other"])


def test_sampling():
    # Spinning only: matmul 3 ms, barrier 1 ms per iteration on average, so 3/4 and 1/4
    # of the compute threads' time; the jitter keeps the work out of step with sampling.
    # Precise mode runs over the same window to compare.
    args = ["--threads", "2", "--iters", "150", "--mm-us", "3000", "--bar-spin-us", "1000",
            "--jitter", "40", "--gen", "0", "--prompt", "1"]
    _, rep, _, pid = daemon_run(["--precise-duty", "1", "--sample-hz", "499"], args)
    g = proc_of(rep, pid)["ggml"]
    s = g["sampled"]
    mm, bar, other = shares(s["share"])
    print("sampled shares: matmul %.3f barrier %.3f other %.3f of %d samples"
          % (mm, bar, other, s["samples"]))
    check(s["samples"] > 300, "enough samples: %d" % s["samples"])
    check(abs(mm - 0.75) < 0.08, "sampled matmul share near 0.75: %.3f" % mm)
    check(abs(bar - 0.25) < 0.08, "sampled barrier share near 0.25: %.3f" % bar)
    pmm, pbar, _ = shares(g["precise"]["share"])
    print("precise shares: matmul %.3f barrier %.3f" % (pmm, pbar))
    check(abs(pmm - 0.75) < 0.08 and abs(pbar - 0.25) < 0.08,
          "precise shares near 0.75 and 0.25: %.3f %.3f" % (pmm, pbar))
    check(abs(pmm - mm) < 0.1 and abs(pbar - bar) < 0.1,
          "sampling agrees with precise mode within 0.1")

    # The spinning is in a helper: by instruction pointer alone it is "other".
    _, rep, _, pid = daemon_run(["--no-stack-scan", "--sample-hz", "499"], args)
    mm2, _, other2 = shares(proc_of(rep, pid)["ggml"]["sampled"]["share"])
    check(mm2 < 0.2 and other2 > 0.6,
          "without the stack scan, time in callees is missed: matmul %.3f other %.3f"
          % (mm2, other2))


def test_precise_exited_threads():
    print("--- precise mode: on-CPU time of threads that exited within the window counts")
    d = Daemon("--sample-hz", "0")
    d.wait_ready()
    fx = Lpggml("--hold", "--threads", "2", "--iters", "100", "--mm-us", "3000",
                "--bar-spin-us", "1000")
    d.wait_log("pid %d (lpggml) runs ggml" % fx.pid)
    status, _, _ = d.api("POST", "/v1/processes/%d/precise" % fx.pid, '{"seconds": 0}')
    check(status == 200, "precise mode on until switched off")
    fx.go()
    fx.line()  # the work is done and its two threads have exited; the process stays
    status, _, _ = d.api("POST", "/v1/processes/%d/precise" % fx.pid, '{"enable": false}')
    pr = d.get("/v1/processes/%d" % fx.pid)["ggml"]["precise"]
    busy = pr["matmul"]["exclusive_oncpu_ns"] + pr["barrier"]["spin_ns"]
    print("precise window: on-CPU %.3f s, matmul own + barrier spin %.3f s, shares %s"
          % (pr["oncpu_ns"] / 1e9, busy / 1e9, pr["share"]))
    check(pr["oncpu_ns"] >= 0.98 * busy and pr["oncpu_ns"] <= 1.1 * busy + 50e6,
          "the window's on-CPU time %.3f s covers the exited threads' %.3f s"
          % (pr["oncpu_ns"] / 1e9, busy / 1e9))
    check(pr["share"]["other"] >= 0 and
          abs(pr["share"]["matmul"] + pr["share"]["barrier"] + pr["share"]["other"] - 1) < 0.01,
          "shares add up to 1 with other >= 0: %s" % pr["share"])
    fx.proc.stdin.close()
    fx.proc.wait(timeout=20)
    d.stop()


def test_sampling_openmp():
    print("--- sampling an OpenMP build: the barrier tail-calls into a stripped runtime")
    lib = os.path.join(LIBDIR, "liblpggml-omp.so")
    # The structure under test, checked: ggml_barrier leaves through a jmp to GOMP_barrier,
    # and the runtime that spins has no .symtab.
    dis = t.subprocess.run(["objdump", "-d", "--no-show-raw-insn", lib], capture_output=True,
                           text=True).stdout
    body = dis.split("<ggml_barrier>:", 1)[1].split("\n\n", 1)[0]
    # Its last instruction, the alignment padding to the next function left out.
    last = [line for line in body.splitlines() if ":\t" in line and "nop" not in line][-1]
    check("jmp" in last and "GOMP_barrier@plt" in last,
          "ggml_barrier tail-calls GOMP_barrier: %s" % last.strip())
    secs = t.subprocess.run(["readelf", "-S", os.path.join(LIBDIR, "liblpomp.so")],
                            capture_output=True, text=True).stdout
    check(".symtab" not in secs, "liblpomp.so is stripped")
    args = ["--lib", lib, "--threads", "2", "--iters", "150", "--mm-us", "3000",
            "--bar-spin-us", "1000", "--jitter", "40", "--gen", "0", "--prompt", "1"]
    _, rep, _, pid = daemon_run(["--sample-hz", "499"], args)
    g = proc_of(rep, pid)["ggml"]
    mm, bar, other = shares(g["sampled"]["share"])
    print("sampled shares: matmul %.3f barrier %.3f other %.3f of %d samples"
          % (mm, bar, other, g["sampled"]["samples"]))
    check(abs(mm - 0.75) < 0.08, "matmul share near 0.75: %.3f" % mm)
    check(abs(bar - 0.25) < 0.08, "barrier share near 0.25 (the runtime's spinning): %.3f"
          % bar)
    rt = [o for o in g["objects"] if o["path"].endswith("/liblpomp.so")]
    check(rt and rt[0]["openmp_runtime"] and rt[0]["stripped"],
          "the report names liblpomp.so an OpenMP runtime, stripped: %s" % rt)
    check(not [o for o in g["objects"] if o["openmp_runtime"] and "lpggml" in o["path"]],
          "the ggml library itself is not taken for a runtime")


# Each sampler against the fixture's exact account, on its own run: the threads' CPU time
# inside the barrier over their time in the barrier and matmul (their CPU-time clocks around
# every call). Some 5,500 samples with a sync share near 0.2: a standard error of 0.005.
#
# Timer sampling reads a barrier that sleeps low: a cpu-clock timer cannot fire while
# interrupts are off, and the switches of a thread that sleeps and wakes run with them
# off; a sample due then is taken after the switch, on whatever runs next, while the time
# is charged to the thread's barrier. The shortfall is so much per sleep (the threads'
# voluntary switches, their rusage): quiet, the per-CPU sampler read 0.012-0.025 under the
# clocks here, some 2 us a sleep, the per-thread one 0.034-0.043; beside
# tests/busy-host.sh, where every switch is to or from another task whose state is saved
# and restored, the barrier took 0.24-0.31 of the CPU instead of 0.18-0.24 and the
# per-CPU sampler read 0.065-0.105 under, 8-10 us a sleep, the per-thread one 11-12 (under
# SCHED_FIFO too: the switches, not preemption). perf record -a reads the same. On a
# slower VM (AMD EPYC under docker, 2026-11-27), where a switch costs more, beside
# tests/busy-host.sh: 12-24 us a sleep (0.09-0.12 under), the same for llmprofd's build
# before its switch program was cut to 0.4 of its time as after. So a sampler may read
# under the clocks by up to BLIND_NS a sleep and noise (3.5 standard errors), over by
# noise only; and the default is held to perf record -a on the same run, with the same
# blind spot, within noise (3.5 standard errors of the difference, 0.02 at least).
BLIND_NS = 30000


def test_sampling_truth():
    print("--- sampling threads that sleep and wake in barriers, against their own clocks")
    work = t.tmpdir("llmprofd-truth-")
    # libgomp's barrier (a team barrier: spin at most 10 us, then futex until the last
    # thread wakes the others) after 20-60 us of matmul: llama.cpp's OpenMP build decoding,
    # whose threads sleep and wake some 40,000 times a CPU-second. And the same at a steady
    # pace, as a decode repeats its graph: 40 us of matmul on one thread and 20 on the
    # other every time. A timer of fixed rate aliases with that (measured here: -0.079 to
    # +0.045 against the clocks over six runs); the default's, restarted at random rates,
    # as the test restarts perf's, does not (-0.017 to -0.040).
    truth = {}
    for sampler, jitter in (("cpu", 50), ("thread", 50), ("cpu", 0)):
        name = "--sampler %s, %s" % (sampler, "jittered" if jitter else "at a steady pace")
        d = Daemon("--once", "--sample-hz", "997", *(["--sampler", sampler]
                                                    if sampler == "thread" else []))
        d.wait_ready()
        fx = Lpggml(*t.team_barrier_args(steady=not jitter))
        d.wait_log("pid %d (lpggml) runs ggml" % fx.pid)
        data = os.path.join(work, "perf-%s-%d.data" % (sampler, jitter))
        system_wide = perfref.SystemWide(data, 997) if sampler == "cpu" else None
        t0 = time.monotonic()
        res = fx.finish()
        wall = time.monotonic() - t0
        if system_wide:
            system_wide.stop()
        d.wait_log("pid %d (lpggml) exited" % fx.pid)
        check(d.stop() == 0, "llmprofd exits 0")
        g = proc_of(d.report(), fx.pid)["ggml"]
        check(g["sampled"]["sampler"] == sampler, "%s: sampled so" % name)
        sh, n = g["op_groups"]["share"], g["op_groups"]["samples"]
        exact, cpu_ns = t.barrier_share(res)
        got = t.sampled_barrier_share(sh)
        truth[sampler, jitter] = (exact, wall)
        print("%s: sync %.3f of sync and matmul over %d samples; the threads' clocks %.3f; "
              "%.2f s of CPU in %.2f s" % (name, got, n, exact, cpu_ns / 1e9, wall))
        check(n > 2000, "%s: enough samples: %d" % (name, n))
        noise = 3.5 * math.sqrt(exact * (1 - exact) / n)
        blind = res["nvcsw"] * BLIND_NS / cpu_ns
        print("%s: %d sleeps; under the clocks by %.1f us a sleep" % (
            name, res["nvcsw"], (exact - got) * cpu_ns / max(1, res["nvcsw"]) / 1e3))
        check(exact - blind - noise <= got <= exact + noise,
              "%s: the barrier's share %.3f at most %.3f under (%d sleeps) and %.3f over "
              "the threads' own clocks, %.3f" % (name, got, blind + noise, res["nvcsw"],
                                                 noise, exact))
        if system_wide:
            theirs, m = perfref.group_shares(perfref.samples(data, fx.pid))
            ref = t.sampled_barrier_share(theirs)
            p = (got + ref) / 2
            bound = max(0.02, 3.5 * math.sqrt(p * (1 - p) * (1 / n + 1 / max(1, m))))
            check(abs(got - ref) <= bound,
                  "%s: the barrier's share %.3f within %.3f of perf record -a's %.3f "
                  "(%d samples) on the same run" % (name, got, bound, ref, m))
    # What per-thread sampling costs these threads: a timer stopped and started at each
    # switch, charged to the barrier it sleeps and wakes in (printed: a VM's figure).
    print("the threads' own barrier share: %.3f sampled per CPU, %.3f per thread; wall "
          "time %.2f s against %.2f" % (truth["cpu", 50][0], truth["thread", 50][0],
                                       truth["thread", 50][1], truth["cpu", 50][1]))


MMAP_PROGRAMS = ("lp_mmap_lock_btf", "lp_mmap_lock_raw", "lp_mmap_enter_tp", "lp_sys_enter_raw")


def test_late_dlopen(flags, program, source):
    print("--- a late dlopen is found by %s (%s)" % (program, source))
    d = Daemon("--once", *flags)
    d.wait_ready()
    # Nothing tracked yet, so no futex program either: only the source asked for runs.
    attached = [n for n in t.attached_programs(d.proc.pid) if n in MMAP_PROGRAMS]
    if "ready: tracking 0 process" in d.log():
        check(attached == [program], "of the mapping sources, %s alone attached: %s"
              % (program, attached))
    check("new mappings via %s," % source in d.log(), "the log says: via %s" % source)
    fx = Lpggml("--late", "--hold", "--iters", "20", "--gen", "2")
    time.sleep(0.3)  # give discovery every chance to be wrong
    check("pid %d" % fx.pid not in d.log(), "not tracked before it loads ggml")
    t0 = time.monotonic()
    fx.go()
    d.wait_log("pid %d (lpggml) runs ggml" % fx.pid, timeout=5)
    took = time.monotonic() - t0
    check(took < 1.0, "found %.3f s after the dlopen" % took)
    fx.line()
    fx.proc.stdin.close()
    fx.proc.wait(timeout=20)
    d.wait_log("pid %d (lpggml) exited" % fx.pid)
    d.stop()
    p = proc_of(d.report(), fx.pid)
    check(p["ggml"] is not None and p["matched_by"] == "ggml", "reported as a ggml process")


def test_replaced_library():
    tmp = t.tmpdir("lpggml-")
    lib = os.path.join(tmp, "libggml-cpu-test.so")
    shutil.copyfile(os.path.join(LIBDIR, "liblpggml.so"), lib)
    d = Daemon("--once")
    d.wait_ready()

    def one():
        fx = Lpggml("--lib", lib, "--iters", "5", "--gen", "1")
        d.wait_log("pid %d (lpggml) runs ggml" % fx.pid)
        fx.finish()
        d.wait_log("pid %d (lpggml) exited" % fx.pid)
        return fx.pid

    first = one()
    ino = os.stat(lib).st_ino
    # Rewritten in place: same inode, new mtime, and no ggml_barrier any more.
    time.sleep(0.01)
    with open(os.path.join(LIBDIR, "liblpggml-renamed.so"), "rb") as src, open(lib, "r+b") as dst:
        data = src.read()
        dst.truncate(0)
        dst.write(data)
    check(os.stat(lib).st_ino == ino, "same inode")
    second = one()
    d.stop()
    rep = d.report()
    o1 = proc_of(rep, first)["ggml"]["objects"][0]
    o2 = proc_of(rep, second)["ggml"]["objects"][0]
    check(o1["barrier"] == ["ggml_barrier"], "first run: ggml_barrier found")
    check(o2["barrier"] == [] and "ggml_barrier" in proc_of(rep, second)["ggml"]["missing"],
          "after the rewrite: ggml_barrier reported missing")
    check("changed on disk, reading it again" in d.log(), "the change is logged")
    shutil.rmtree(tmp)


def test_sites_beside_probes():
    print("--- probe sites are read from the file, whatever uprobes others hold on it")
    lib = os.path.join(os.path.dirname(os.path.abspath(LPGGML)), "liblpggml.so")
    tool = os.environ.get("TEST_X86ENTRY", "build/tests/test_x86entry")

    def listing():
        return t.subprocess.run([tool, "--list", lib], capture_output=True, text=True,
                                check=True).stdout
    before = listing()
    # Another daemon's uprobes on the same file (llama_decode always, matmul and barrier in
    # precise mode): the kernel writes their int3 into every executable mapping of it.
    fx = Lpggml("--hold", "--iters", "4")
    d = Daemon("--precise-duty", "1")
    d.wait_ready()
    d.wait_log("pid %d: precise mode on" % fx.pid)
    after = listing()
    changed = [a for a, b in zip(before.splitlines(), after.splitlines()) if a != b]
    check(before == after, "the same sites with the file probed: %s" % (changed[:3] or "same"))
    fx.finish()
    d.stop()


def test_futex_in_generation():
    # 20 generation decodes, each with a 2 ms futex wait inside it and one of 100 ms after
    # it: the waits inside one generation decode are its histogram's, exactly; the others
    # (and pthread_join's) only the process's. Durations from the scheduler: each asleep
    # from its switch-out to its switch-in, so its timeout and a wakeup's latency.
    print("--- futex waits inside generation decodes, apart from those between them")
    gen, inside, between = 20, 2000, 100000
    d = Daemon()
    d.wait_ready()
    fx = Lpggml("--hold", "--threads", "1", "--iters", "2", "--prompt", "4", "--gen", str(gen),
                "--decode-us", "100", "--decode-futex-us", str(inside), "--between-futex-us",
                str(between))
    d.wait_log("pid %d (lpggml) runs ggml" % fx.pid)
    fx.go()
    fx.line()
    doc = d.get("/v1/processes/%d" % fx.pid)
    h, all_ = doc["histograms"]["futex_wait_generation"], doc["histograms"]["futex_wait"]
    check(h["count"] == gen, "one wait inside each of the %d generation decodes: %d (switch-ins "
          "not seen: %d)" % (gen, h["count"], doc["counters"]["switch_ins_unseen"]))
    check(all_["count"] >= 2 * gen, "the process's histogram has the waits between them too: "
          "%d" % all_["count"])
    check(inside * 1000 <= h["p50"] and h["max"] < between * 1000,
          "each inside one lasted its 2 ms timeout or more, none the 100 ms of those between "
          "(p50 %.2f ms, max %.2f ms)" % (h["p50"] / 1e6, h["max"] / 1e6))
    check(all_["max"] >= between * 1000, "the process's own longest is one between them: "
          "%.1f ms" % (all_["max"] / 1e6))
    out = t.subprocess.run([t.LLMPROFCTL, "--socket", d.socket, "top", "--json", "-n", "1",
                            "-p", str(fx.pid)], capture_output=True, text=True, timeout=60)
    row = t.json.loads(out.stdout)["processes"][0]
    check(row["futex_wait_p99_ns"] == d.get("/v1/processes/%d" % fx.pid)["histograms"]
          ["futex_wait_generation"]["p99"],
          "top's FTX99 of a process generating tokens is the p99 of the waits inside its "
          "generation decodes: %.2f ms" % (row["futex_wait_p99_ns"] / 1e6))
    fx.proc.stdin.close()
    fx.proc.wait(timeout=20)
    check(d.stop() == 0, "llmprofd exits 0")


def main():
    test_futex_in_generation()
    test_sites_beside_probes()
    test_precise(True)
    test_precise(False)
    test_sampling()
    test_sampling_openmp()
    test_sampling_truth()
    test_precise_exited_threads()
    test_late_dlopen([], "lp_mmap_lock_btf", "mmap lock tracepoint")
    test_late_dlopen(["--sched-raw-tp"], "lp_mmap_lock_raw", "mmap lock tracepoint")
    test_late_dlopen(["--mmap-source", "tracepoint"], "lp_mmap_enter_tp", "syscall tracepoint")
    test_late_dlopen(["--mmap-source", "raw", "--futex-source", "tracepoint"],
                     "lp_sys_enter_raw", "raw_syscalls")
    test_replaced_library()


if __name__ == "__main__":
    run(main, timeout=200)
