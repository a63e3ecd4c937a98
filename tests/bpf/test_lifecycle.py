# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
"""bpf tier: process lifecycle. Exited processes keep their final numbers while the kernel
state goes away with them; --comm finds processes that start later; a reused pid never
mixes two processes' data; 10,000 short-lived tracked processes leave no kernel state
behind; SIGTERM detaches everything. Each daemon tracks only the test's own processes
(--no-discover): a host that runs an LLM beside the suite leaves the maps to its process."""
import os
import signal
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
import lptest as t  # noqa: E402


def map_entries(rep):
    return {m["name"]: m["entries"] for m in rep["maps"]}


def test_exit_keeps_data():
    print("--- an exited process keeps its numbers; its kernel state is gone")
    # observe() without live: the fixture exits, and --once with only --pid targets
    # reports by itself once they are all gone.
    _, rep, res, pid = t.observe(["--futex-threads", "3", "--futex-waits", "7", "--futex-ms", "2",
                                  "--pages", "1000"])
    p = t.proc_of(rep, pid)
    t.check(p["state"] == "exited" and not p["data_lost"], "process shown as exited, data kept")
    t.check(t.futex_waits_on(p, res["futex_addrs"]) == [7, 7, 7], "exact futex waits after exit: %s"
            % t.futex_waits_on(p, res["futex_addrs"]))
    t.check(t.near(p["counters"]["page_faults_minor"], res["minflt"], 0.05),
            "minor faults after exit %d ~ %d" % (p["counters"]["page_faults_minor"], res["minflt"]))
    # Counted by the switch program in each CPU's part of the process (procs_hot), taken
    # into the final record at the exit: every 2 ms wait of the three threads slept.
    c, h = p["counters"], p["histograms"]
    t.check(h["futex_wait"]["count"] >= 21 and c["voluntary_switches"] >= 21
            and c["oncpu_ns"] > 0 and h["offcpu_blocked"]["count"] >= 21,
            "each CPU's counts in the final record: %d futex waits, %d voluntary switches, "
            "%d blocked stretches, %d ns on CPU" % (h["futex_wait"]["count"],
                                                    c["voluntary_switches"],
                                                    h["offcpu_blocked"]["count"], c["oncpu_ns"]))
    t.check(p["threads"] == [], "no per-thread state kept for an exited process")
    e = map_entries(rep)
    t.check(e["procs"] == 0 and e["procs_hot"] == 0 and e["threads"] == 0
            and e["futex_addrs"] == 0,
            "kernel maps empty after exit: %s" % e)


def spawn_with_pid(pid, args, tries=200):
    """Starts a fixture whose pid is `pid`, by setting ns_last_pid just before forking."""
    for _ in range(tries):
        with open("/proc/sys/kernel/ns_last_pid", "w") as f:
            f.write(str(pid - 1))
        fx = t.Fixture(*args)
        if fx.pid == pid:
            return fx
        fx.proc.kill()
        fx.proc.wait()
    raise AssertionError("could not get pid %d again" % pid)


def test_comm_and_pid_reuse():
    print("--- --comm finds later processes; a reused pid is a new process")
    d = t.Daemon("--once", "--no-discover", "--comm", "lpfixture")
    d.wait_ready()
    a = t.Fixture("--futex-threads", "1", "--futex-waits", "5", "--futex-ms", "1")
    d.wait_log("tracking pid %d (lpfixture) matched by comm" % a.pid)
    a.go()
    ra = a.result()
    a.release()
    d.wait_log("pid %d (lpfixture) exited" % a.pid)
    b = spawn_with_pid(a.pid, ["--futex-threads", "1", "--futex-waits", "9", "--futex-ms", "1", "--hold"])
    poll_count = lambda: d.log().count("tracking pid %d (lpfixture)" % a.pid) == 2  # noqa: E731
    t.poll("the new process with the same pid to be tracked", poll_count)
    b.go()
    rb = b.result()
    d.stop()
    b.release()
    rep = d.report()
    same = [p for p in rep["processes"] if p["pid"] == a.pid]
    t.check(len(same) == 2, "two processes with pid %d reported" % a.pid)
    if len(same) == 2:
        old, new = same
        t.check(old["state"] == "exited" and new["state"] == "running", "old exited, new running")
        t.check(old["matched_by"] == "comm" and new["matched_by"] == "comm", "both matched by comm")
        t.check(t.futex_waits_on(old, ra["futex_addrs"]) == [5], "old process: its 5 waits only")
        t.check(t.futex_waits_on(new, rb["futex_addrs"]) == [9], "new process: its 9 waits only")
        t.check(new["histograms"]["futex_wait"]["count"] < 5 + 9,
                "the new process's histogram does not hold the old one's waits")


def test_threads_of_one_slice():
    # 100 threads one after another, each spinning 3 ms with no system call and exiting:
    # on a free CPU a thread's whole life is one slice, none of its switches looked at
    # before its exit, where the kernel's account of it lags by what it ran since its last
    # update (a tick: 4 ms at HZ=250), and after which it runs on (exit_files,
    # exit_notify: 10-128 us a thread by bpftrace, 2.4-3.3 ms in all; counted short by
    # that, 0.990-0.996 of the reference, until its last switch-out was looked at).
    # Reference: the fixture's process CPU clock from go to its report (the kernel's own,
    # the exited threads' slices in full), within 2 %: the main thread's last fraction of a
    # millisecond not yet looked at, and what each thread runs after its release in
    # exit_notify, where the clock takes it, up to its last switch-out, where we do
    # (1.0019-1.0035 of the reference in 16 runs beside the busy host).
    print("--- threads that run and exit in one slice are counted whole")
    _, rep, res, pid = t.observe(["--futex-threads", "0", "--bursts", "100", "--burst-us",
                                  "3000"], live=True)
    ours, ref = t.proc_of(rep, pid)["counters"]["oncpu_ns"], res["cpu_ns"]
    t.check(abs(ours - ref) <= 0.02 * ref,
            "on-CPU time %.1f ms, the process's CPU clock %.1f ms" % (ours / 1e6, ref / 1e6))


def test_comm_counts_from_exec():
    print("--- --comm: counted from the exec, so fault totals match /proc/PID/stat")
    d = t.Daemon("--no-discover", "--comm", "lpfixture")
    d.wait_ready()
    fx = t.Fixture("--futex-threads", "0", "--early-pages", "100", "--hold")
    d.wait_log("tracking pid %d (lpfixture) matched by comm" % fx.pid)
    fx.go()
    fx.result()
    minflt = int(t.proc_stat(fx.pid)[7])
    ours = d.get("/v1/processes/%d" % fx.pid)["counters"]["page_faults_minor"]
    # What only /proc has: the faults of the fork and of execve up to its tracepoint, a
    # handful. The fixture faults 100 pages at once after exec: tracking from when the
    # daemon had read the exec lost those it made meanwhile.
    t.check(minflt - 8 <= ours <= minflt,
            "%d minor faults counted, /proc/PID/stat says %d" % (ours, minflt))
    fx.release()
    d.stop()


def test_exe_and_startup_scan():
    print("--- --exe matches later processes by path; --comm finds running ones at start")
    before = t.Fixture("--futex-threads", "1", "--futex-waits", "3", "--futex-ms", "1", "--hold")
    d = t.Daemon("--once", "--no-discover", "--comm", "lpfixture", "--exe", "*/tests/lpfixture")
    d.wait_ready()
    t.check("tracking pid %d (lpfixture) matched by comm" % before.pid in d.log(),
            "a process running before the daemon was found at start")
    d.stop()
    before.release()

    d = t.Daemon("--once", "--no-discover", "--exe", "*/tests/lpfixture")
    d.wait_ready()
    later = t.Fixture("--futex-threads", "1", "--futex-waits", "3", "--futex-ms", "1", "--hold")
    d.wait_log("tracking pid %d (lpfixture) matched by exe" % later.pid)
    later.go()
    res = later.result()
    d.stop()
    later.release()
    p = t.proc_of(d.report(), later.pid)
    t.check(p["matched_by"] == "exe" and p["exe"].endswith("/tests/lpfixture"),
            "matched by exe %s" % p["exe"])
    t.check(t.futex_waits_on(p, res["futex_addrs"]) == [3], "its waits counted")


def test_gone_before_read():
    print("--- processes gone before the daemon read their exec: tracked, with their numbers")
    # An earlier case's fixture may still be on its way out (a busy host): not one of these.
    before = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open("/proc/%s/comm" % pid) as f:
                if f.read().strip() == "lpfixture":
                    before.add(int(pid))
        except OSError:
            pass
    d = t.Daemon("--once", "--no-discover", "--comm", "lpfixture")
    d.wait_ready()
    # A stopped daemon reads nothing: the children exec, run and exit before it sees them,
    # as 10 ms processes do when a daemon is busy.
    d.proc.send_signal(signal.SIGSTOP)
    try:
        fx = t.Fixture("--futex-threads", "0", "--spawn", "5", "--life-ms", "10")
        fx.go()
        fx.result()
        fx.release()
    finally:
        d.proc.send_signal(signal.SIGCONT)
    d.wait_log("pid %d (lpfixture) exited" % fx.pid)
    d.stop()
    rep = d.report()
    kids = [p for p in rep["processes"]
            if p["pid"] != fx.pid and p["pid"] not in before and p["comm"] == "lpfixture"]
    t.check(len(kids) == 5, "all 5 children tracked: %d" % len(kids))
    t.check(d.log().count("exited already: its final record follows") >= 5,
            "they were gone when their exec was read")
    t.check(all(p["state"] == "exited" and not p["data_lost"] for p in kids),
            "each one exited with its final record")
    # Each joined a thread that sleeps 5 ms (a futex wait) and faulted pages in.
    t.check(all(p["histograms"]["futex_wait"]["count"] >= 1 and
                p["counters"]["page_faults_minor"] > 0 for p in kids),
            "each one's numbers kept: waits %s, faults %s"
            % ([p["histograms"]["futex_wait"]["count"] for p in kids],
               [p["counters"]["page_faults_minor"] for p in kids]))


def test_many_short_lived():
    print("--- 10,000 short-lived tracked processes leave no kernel state behind")
    n, keep = 10000, 64
    d = t.Daemon("--once", "--no-discover", "--comm", "lpfixture", "--max-processes", str(keep))
    d.wait_ready()
    # Exit records are read in time beside the busy host because the daemon runs at nice -4
    # (at nice 0 an ASan daemon lost 722 of 10,001 from 512 KiB; README, Exit).
    nices = [int(t.proc_stat(d.proc.pid, tid)[16])
             for tid in os.listdir("/proc/%d/task" % d.proc.pid)]
    t.check(set(nices) == {-4}, "every thread of the daemon runs at nice -4: %s" % nices)
    fx = t.Fixture("--futex-threads", "0", "--spawn", str(n), "--spawn-parallel", "16",
                   "--life-ms", "10")
    fx.go()
    fx.result(timeout=180)
    fx.release()
    d.wait_log("pid %d (lpfixture) exited" % fx.pid, timeout=30)
    tracked = d.log().count("matched by comm")
    d.stop()
    rep = d.report()
    e = map_entries(rep)
    # Exact: a process the exec hook tracked is adopted from its exec record even when it
    # is gone by the time the daemon reads it (a CI machine's ASan daemon adopted 42 %).
    t.check(tracked == n + 1 or rep["lost"]["ring_buffer_full"] > 0,
            "%d of %d short-lived processes were tracked" % (tracked, n + 1))
    t.check(e["procs"] == 0 and e["threads"] == 0 and e["futex_addrs"] == 0,
            "kernel maps empty afterwards: %s" % e)
    t.check(len(rep["processes"]) <= keep, "at most --max-processes exited processes kept (%d)"
            % len(rep["processes"]))
    t.check(rep["lost"]["exited_evicted"] + len(rep["processes"]) == tracked,
            "every forgotten process counted: %d evicted + %d kept == %d tracked"
            % (rep["lost"]["exited_evicted"], len(rep["processes"]), tracked))
    t.check(rep["lost"]["ring_buffer_full"] == 0, "no exit record lost")


def test_lost_exit_records():
    print("--- exit records that do not fit the ring buffer: counted, kernel state still freed")
    # One ~9 KiB record fits.
    d = t.Daemon("--once", "--no-discover", "--comm", "lpfixture", "--ringbuf-kib", "16")
    d.wait_ready()
    fxs = [t.Fixture("--futex-threads", "1", "--futex-waits", "4", "--futex-ms", "1", "--hold")
           for _ in range(3)]
    for fx in fxs:
        d.wait_log("tracking pid %d (lpfixture)" % fx.pid)
        fx.go()
    results = [fx.result() for fx in fxs]
    # With the daemon stopped, nobody drains the ring buffer while all three exit.
    d.proc.send_signal(signal.SIGSTOP)
    for fx in fxs:
        fx.release()
    d.proc.send_signal(signal.SIGCONT)
    d.stop()
    rep = d.report()
    procs = [t.proc_of(rep, fx.pid) for fx in fxs]
    lost = [p for p in procs if p["data_lost"]]
    t.check(all(p["state"] == "exited" for p in procs), "all three shown as exited")
    t.check(len(lost) >= 2 and rep["lost"]["ring_buffer_full"] >= len(lost),
            "%d processes marked data_lost, %d records counted as lost"
            % (len(lost), rep["lost"]["ring_buffer_full"]))
    for p, res in zip(procs, results):
        t.check(t.futex_waits_on(p, res["futex_addrs"]) == [4],
                "pid %d keeps its futex addresses (data_lost %s)" % (p["pid"], p["data_lost"]))
    e = map_entries(rep)
    t.check(e["procs"] == 0 and e["procs_hot"] == 0 and e["threads"] == 0
            and e["futex_addrs"] == 0, "kernel maps empty all the same: %s" % e)
    t.check("final record was lost" in d.log(), "the loss is logged")


def test_sigterm_detaches():
    print("--- SIGTERM detaches everything")
    fx = t.Fixture("--futex-threads", "0", "--hold")
    d = t.Daemon("--no-discover", "--pid", str(fx.pid))
    d.wait_ready()
    t.check(len(d.prog_ids) >= 5, "programs loaded while running: %d" % len(d.prog_ids))
    t.check(d.prog_ids <= set(t.loaded_programs()), "they are loaded on the host")
    t.check(d.stop(signal.SIGTERM) == 0, "exit status 0 on SIGTERM")
    t.wait_unloaded(d.prog_ids)
    t.check(True, "none of its programs is loaded after SIGTERM")
    fx.go()
    fx.result()
    fx.release()


def main():
    test_exit_keeps_data()
    test_threads_of_one_slice()
    test_comm_and_pid_reuse()
    test_comm_counts_from_exec()
    test_exe_and_startup_scan()
    test_gone_before_read()
    test_many_short_lived()
    test_lost_exit_records()
    test_sigterm_detaches()


t.run(main, timeout=280)
