# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
"""bpf tier: the collectors against a workload with known behaviour, in each program
variant: tp_btf with futex waits from the scheduler (the default), tp_btf with the
syscall tracepoints, raw_tp with raw_syscalls.

The fixture sleeps on private futex words a known number of times for a known time, forces
two threads onto one CPU, spins one thread alone on another, touches fresh pages and
major-faults a file whose page cache it dropped; it reports /proc/self/stat deltas."""
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
import lptest as t  # noqa: E402

FUTEX_THREADS, FUTEX_WAITS, FUTEX_MS = 2, 20, 5
PI_WAITS, WAITV_WAITS = 4, 5
CONTEND_MS, SOLO_MS = 300, 300
PAGES, FILE_PAGES = 5000, 200

VARIANTS = [
    ("tp_btf", "scheduler", []),
    ("tp_btf", "syscall tracepoints", ["--futex-source", "tracepoint"]),
    ("raw_tp", "raw_syscalls", ["--sched-raw-tp", "--futex-source", "raw"]),
]


def run_variant(sched, futex, flags):
    print("--- variant: scheduler %s, futex %s" % (sched, futex))
    scratch = t.tmpdir("lpfixture-", dir="/var/tmp")  # a disk, not tmpfs
    fixture = ["--futex-threads", str(FUTEX_THREADS), "--futex-waits", str(FUTEX_WAITS),
               "--futex-ms", str(FUTEX_MS), "--pi-waits", str(PI_WAITS),
               "--waitv-waits", str(WAITV_WAITS), "--contend-ms", str(CONTEND_MS),
               "--solo-ms", str(SOLO_MS), "--pages", str(PAGES),
               "--file", os.path.join(scratch, "data"), "--file-pages", str(FILE_PAGES)]
    # Read while the fixture is alive: the live-map path, threads still there.
    # With the kernel's own account of each thread (schedstat), read once they are parked.
    d, rep, res, pid = t.observe(fixture, flags, live=True, read=parked)
    kernel = res["read"]
    p = t.proc_of(rep, pid)
    c, h = p["counters"], p["histograms"]

    t.check(rep["collectors"]["scheduler"] == sched, "scheduler via %s" % sched)
    t.check(rep["collectors"]["futex"] == futex, "futex via %s" % futex)
    t.check(p["state"] == "running" and p["matched_by"] == "pid", "live process matched by pid")

    # Futex: exact counts on the fixture's own words, durations within 20%.
    waits = t.futex_waits_on(p, res["futex_addrs"])
    t.check(waits == [FUTEX_WAITS] * FUTEX_THREADS,
            "futex waits per fixture word %s, expected exactly %d each" % (waits, FUTEX_WAITS))
    for f in p["futex"]["top"]:
        if f["uaddr"] in res["futex_addrs"]:
            mean = f["wait_ns"] / f["waits"] / 1e6
            t.check(t.near(mean, FUTEX_MS, 0.20), "futex %s mean wait %.2f ms ~ %d ms" % (f["uaddr"], mean, FUTEX_MS))
    # FUTEX_LOCK_PI on a lock a parked thread holds, and futex_waitv(2): exact too.
    other = t.futex_waits_on(p, [res["pi_addr"], res["waitv_addr"]])
    t.check(other == [PI_WAITS, WAITV_WAITS], "LOCK_PI and waitv waits per word %s, expected %s"
            % (other, [PI_WAITS, WAITV_WAITS]))
    t.check(c["futex_lock_pi"] == PI_WAITS and c["futex_waitv"] == WAITV_WAITS,
            "kind counters: lock_pi %d, waitv %d" % (c["futex_lock_pi"], c["futex_waitv"]))
    # Every wait of the fixture sleeps until its timeout: the syscalls' exits say so; the
    # scheduler sees no result, and says so with null rather than 0.
    timed = FUTEX_THREADS * FUTEX_WAITS + PI_WAITS + WAITV_WAITS
    if futex == "scheduler":
        t.check(c["futex_timedout"] is None and c["futex_eagain"] is None,
                "results not collected from the scheduler: %s, %s"
                % (c["futex_timedout"], c["futex_eagain"]))
    else:
        t.check(c["futex_timedout"] >= timed,
                "timed-out waits %d >= %d" % (c["futex_timedout"], timed))
    p50 = h["futex_wait"]["p50"] / 1e6
    t.check(t.near(p50, FUTEX_MS, 0.20), "futex wait p50 %.2f ms within 20%% of %d ms" % (p50, FUTEX_MS))

    # Page faults: within 5% of what /proc/self/stat counted over the same work.
    for key, ours in (("minflt", "page_faults_minor"), ("majflt", "page_faults_major")):
        t.check(t.near(c[ours], res[key], 0.05),
                "%s %d within 5%% of /proc %s %d" % (ours, c[ours], key, res[key]))
    t.check(res["minflt"] >= PAGES, "fixture made %d minor faults" % res["minflt"])
    t.check(res["majflt"] >= FILE_PAGES * 0.9, "fixture made %d major faults" % res["majflt"])

    # Run-queue latency: large exactly for the threads forced to share a CPU.
    threads = p["threads"]
    contend = [x for x in threads if x["comm"] == "contend"]
    solo = [x for x in threads if x["comm"] == "solo"]
    t.check(len(contend) == 2, "two contending threads listed")
    for x in contend:
        share = x["runqueue_ns"] / (CONTEND_MS * 1e6)
        t.check(share >= 0.25, "contending tid %d waited %.0f%% of its window for the CPU"
                % (x["tid"], 100 * share))
        t.check(x["involuntary_switches"] > 0, "contending tid %d was preempted" % x["tid"])
    if res["solo_ms"]:
        t.check(len(solo) == 1, "solo thread listed")
    # What each spinner waited is the kernel's run_delay, over its whole life (it began
    # after tracking did): alone on its CPU it waits little on a quiet host, but a host
    # busy beside the suite makes it wait, so the kernel's figure is the reference.
    for x in contend + solo:
        k = kernel.get(x["tid"], (0, -1))[1]
        t.check(abs(x["runqueue_ns"] - k) <= 0.01 * k + 50000,
                "%s tid %d waited %.2f ms for the CPU, the kernel's schedstat %.2f ms"
                % (x["comm"], x["tid"], x["runqueue_ns"] / 1e6, k / 1e6))
    t.check(h["runqueue_latency"]["count"] > 0 and h["runqueue_latency"]["p99"] > 0,
            "run-queue latency histogram filled")
    # Every preemption of a live thread ends in a switch back in before it parks, so where
    # every stretch is taken the histogram holds at least the kernel's count of them, for
    # the threads born after tracking began (the main thread ran, and could be preempted,
    # before the daemon attached: the kernel counts those too). Where busy threads'
    # stretches were taken as a sample, each counted for its gap's switch-outs, a thread
    # that both sleeps and is preempted has some of its preemptions counted as sleeps; a
    # spinner is only ever preempted until it parks, and loses only the gap it left open
    # then: at most 2N - 2 for each of those sampled.
    n = rep["collectors"]["stretch_sample"]
    spinners = contend + solo
    if c["offcpu_sampled_threads"]:
        ref, whose = (sum(x["involuntary_switches"] for x in spinners) -
                      (2 * n - 2) * min(c["offcpu_sampled_threads"], len(spinners)),
                      "the spinners' preemptions less the gaps they may have left open")
    else:
        ref, whose = (sum(x["involuntary_switches"] for x in threads if x["tid"] != pid),
                      "its workers' preemptions")
    t.check(h["offcpu_preempted"]["count"] >= ref,
            "preempted off-CPU stretches %d, %s %d (%d threads' stretches taken 1 in %d "
            "as a sample; %d switch-ins unseen)" % (h["offcpu_preempted"]["count"], whose, ref,
                                                    c["offcpu_sampled_threads"] or 0, n,
                                                    c["switch_ins_unseen"] or 0))
    t.check(h["offcpu_blocked"]["count"] >= FUTEX_THREADS * FUTEX_WAITS,
            "blocked off-CPU intervals include the futex sleeps")
    # A spinner never sleeps: it is running or waiting to run for its whole window, however
    # much of the CPU other tasks take.
    for x, window in [(x, CONTEND_MS) for x in contend] + [(x, res["solo_ms"]) for x in solo]:
        busy = (x["oncpu_ns"] + x["runqueue_ns"]) / 1e6
        t.check(x["oncpu_ns"] > 0 and busy >= 0.9 * window,
                "tid %d (%s): on-CPU + run-queue %.0f ms covers its %d ms window"
                % (x["tid"], x["comm"], busy, window))
    t.check(c["oncpu_ns"] >= sum(x["oncpu_ns"] for x in threads),
            "process on-CPU time %d ns >= the sum over its live threads" % c["oncpu_ns"])
    t.check(all(v == 0 for v in rep["lost"].values()), "nothing lost: %s" % rep["lost"])

    # Where the kernel keeps run-queue delay itself, nothing of ours runs at wakeups but a
    # new thread's (threads are made seldom): the run-queue figures above came from
    # sched_info alone.
    names = d.prog_names
    if futex == "scheduler":
        t.check(not any(n.startswith(("lp_futex", "lp_sys_e")) for n in names),
                "no program on a syscall tracepoint: %s" % names)
    if os.path.exists("/proc/self/schedstat"):
        t.check(rep["collectors"]["runqueue"] == "sched_info", "run-queue delay from sched_info")
        t.check(not any(n.startswith("lp_wakeup") and not n.startswith("lp_wakeup_new")
                        for n in names),
                "no wakeup program but the new thread's among the daemon's: %s" % names)
    # Stopping detaches everything (the kernel frees programs after an RCU grace period).
    t.check(len(d.prog_ids) >= 5, "the daemon held %d programs while running" % len(d.prog_ids))
    t.wait_unloaded(d.prog_ids)
    t.check(True, "none of its programs is loaded after it exited")


def schedstat(pid):
    """{tid: (sum_exec_runtime, run_delay)}: the kernel's own account of each thread."""
    out = {}
    for tid in os.listdir("/proc/%d/task" % pid):
        a = open("/proc/%d/task/%s/schedstat" % (pid, tid)).read().split()
        out[int(tid)] = (int(a[0]), int(a[1]))
    return out


def parked(pid):
    """schedstat(pid) once every thread sleeps and has not run for two reads in a row: no
    slice in flight at the read."""
    def still():
        asleep = all(t.proc_state(pid, tid) in "SD" for tid in os.listdir("/proc/%d/task" % pid))
        now = schedstat(pid)
        ok = asleep and now == still.last
        still.last = now
        return ok
    still.last = None
    t.poll("the fixture's threads parked", still, timeout=20, interval=0.02)
    return schedstat(pid)


def voluntary(pid):
    """{tid: voluntary switches}: the kernel's count of each thread's sleeps."""
    out = {}
    for tid in os.listdir("/proc/%d/task" % pid):
        for line in open("/proc/%d/task/%s/status" % (pid, tid)):
            if line.startswith("voluntary_ctxt_switches:"):
                out[int(tid)] = int(line.split()[1])
    return out


def against_schedstat():
    """Threads that block and wake thousands of times: on-CPU time and run-queue delay as
    the kernel counts them. Timed from the tracepoints, this workload read 40 % low on CPU
    and 6 times high on the run queue: the boundary between the two falls microseconds
    apart in the two accounts, every slice. The totals are the kernel's own account, so
    they stay exact although these threads switch thousands of times a second and the
    program takes one of their off-CPU stretches in 16 (--stretch-sample's default); the
    stretches' figures are then estimates, held here against the kernel's counts."""
    print("--- on-CPU and run-queue time against /proc/PID/task/TID/schedstat")
    fx = t.Fixture("--futex-threads", "2", "--futex-waits", "5000", "--futex-ms", "0",
                   "--hold")
    d = t.Daemon("--pid", str(fx.pid))
    d.wait_ready()
    t.poll("the fixture tracked", lambda: any(p["pid"] == fx.pid for p in
                                              d.get("/v1/processes")["processes"]))
    before = parked(fx.pid)  # its threads are parked until "go"
    nv_before = voluntary(fx.pid)
    fx.go()
    res = fx.result()
    # The result comes from the main thread; the others may still be on their way to
    # parking (runnable on a busy host, their last run-queue wait counted by the kernel
    # and not yet by the daemon, which reads it at their switch-out).
    after = parked(fx.pid)
    nv_after = voluntary(fx.pid)
    doc = d.get("/v1/processes/%d" % fx.pid)
    status = d.get("/v1/status")
    dump = subprocess.run([t.LLMPROFCTL, "--socket", d.socket, "dump", "--pid", str(fx.pid)],
                          capture_output=True, text=True, timeout=60)
    fx.release()
    t.check(d.stop() == 0, "llmprofd exits 0")
    t.check(status["collectors"]["stretch_sample"] == 16,
            "stretches taken 1 in %s" % status["collectors"]["stretch_sample"])
    sampled = doc["counters"]["offcpu_stretches_sampled"]
    busy = doc["counters"]["offcpu_sampled_threads"]
    t.check(sampled > 100, "%d stretches of the busy threads taken as a sample" % sampled)
    t.check(busy >= 2, "%d threads' stretches taken as a sample, the two busy ones among them"
            % busy)
    # What rests on the sample says so where a user reads it.
    said = dump.stdout.split("offcpu_blocked:")[1].split("\n")[:3] if dump.returncode == 0 \
        and "offcpu_blocked:" in dump.stdout else []
    t.check(any(line.strip().startswith("estimated: from %d stretches of %d busy threads"
                                        % (sampled, busy)) for line in said),
            "dump says the off-CPU histogram is estimated: %s" % said)
    nv = {tid: nv_after[tid] - nv_before.get(tid, 0) for tid in nv_after}
    # Switch counts are the kernel's, taken at each look: exact but for the switches
    # since a parked thread's last look (fewer than a gap, 31) and the first look at a
    # thread that existed before tracking, which only takes the starting point.
    for x in doc["threads"]:
        if x["tid"] in nv:
            t.check(0 <= nv[x["tid"]] - x["voluntary_switches"] <= 32,
                    "tid %d: %d voluntary switches, the kernel's %d"
                    % (x["tid"], x["voluntary_switches"], nv[x["tid"]]))
    # Estimates from the sample: each stretch taken counts for its gap's switch-outs, so
    # the counts are exact but for each thread's last gap (under 31) and for the few
    # sleeps that are not futex waits or end preempted; 5 % holds them with room.
    slept = sum(nv.values())
    blocked = doc["histograms"]["offcpu_blocked"]["count"]
    t.check(abs(blocked - slept) <= 0.05 * slept + 100,
            "off-CPU blocked stretches estimated %d, the kernel's voluntary switches %d"
            % (blocked, slept))
    words = t.futex_waits_on(doc, res["futex_addrs"])
    busy_nv = sum(nv[x["tid"]] for x in doc["threads"] if x["voluntary_switches"] >= 4000)
    t.check(abs(sum(words) - busy_nv) <= 0.05 * busy_nv + 100,
            "futex waits on the fixture's words estimated %s, its threads slept %d times"
            % (words, busy_nv))
    busy = [x for x in doc["threads"] if x["voluntary_switches"] >= 4000]
    t.check(len(busy) == 2, "two threads switched 4,000 times or more: %s"
            % [x["voluntary_switches"] for x in doc["threads"]])
    for x in busy:
        k = [after[x["tid"]][i] - before.get(x["tid"], (0, 0))[i] for i in (0, 1)]
        # Exact but for the slice in flight at either read: the threads are parked then.
        t.check(abs(x["oncpu_ns"] - k[0]) <= 0.01 * k[0] + 50000,
                "tid %d: on-CPU %.2f ms, the kernel's %.2f ms" % (x["tid"], x["oncpu_ns"] / 1e6,
                                                                    k[0] / 1e6))
        t.check(abs(x["runqueue_ns"] - k[1]) <= 0.01 * k[1] + 50000,
                "tid %d: run-queue %.2f ms, the kernel's %.2f ms"
                % (x["tid"], x["runqueue_ns"] / 1e6, k[1] / 1e6))


def attached_futex_programs(d):
    return [n for n in t.attached_programs(d.proc.pid) if n.startswith(("lp_futex", "lp_sys_e"))]


def futex_on_demand(flags, programs):
    """Any program on a syscall tracepoint sends every syscall of every task on the host
    through the kernel's slow path: the futex programs are attached while a process is
    tracked, and detached 10 s after the last one left."""
    print("--- futex programs attached only while a process is tracked (%s)" % " ".join(flags))
    d = t.Daemon(*flags)
    d.wait_ready()

    def state():
        return d.get("/v1/status")["collectors"]["futex_attached"]
    # Judged only when nothing on the host is an LLM process this daemon tracks.
    if d.get("/v1/status")["processes"]["running"] == 0:
        t.check(state() == "while a process is tracked: not now", "idle: %s" % state())
        t.check(attached_futex_programs(d) == [], "idle: no futex program attached: %s"
                % attached_futex_programs(d))
    for round in (1, 2):
        fx = t.Lpggml("--hold", "--iters", "2")
        d.wait_log("pid %d (lpggml) runs ggml" % fx.pid)
        t.check(state() == "while a process is tracked: now", "tracked: %s" % state())
        t.check(attached_futex_programs(d) == programs, "round %d, tracked: the kernel has %s "
                "attached, expected %s" % (round, attached_futex_programs(d), programs))
        fx.finish()
        if d.get("/v1/status")["processes"]["running"] == 0:
            t.poll("futex programs detached", lambda: not attached_futex_programs(d), 40)
            t.check(state() == "while a process is tracked: not now",
                    "round %d, none tracked: %s" % (round, state()))
            d.wait_log("futex programs detached")
    d.stop()


def main():
    for v in VARIANTS:
        run_variant(*v)
    against_schedstat()
    futex_on_demand(["--futex-source", "tracepoint"], ["lp_futex_enter_tp", "lp_futex_exit_tp", "lp_futex_waitv_enter_tp",
                         "lp_futex_waitv_exit_tp"])
    futex_on_demand(["--futex-source", "raw"], ["lp_sys_enter_raw", "lp_sys_exit_raw"])


t.run(main, timeout=300)
