#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
"""e2e tier: the findings (`llmprofctl doctor`), each provoked for real on llama.cpp built
from source (OpenMP, llama-simple) and judged against what the kernel says of the same
window (schedstat, /proc/PID/stat, /proc/PID/status, the cgroup's cpu.stat):

- two compute threads pinned to one CPU (taskset): oversubscribed, by its own threads;
- a CPU hog on the CPU of one of two bound threads: preempted (by the hog, by pid and
  name), and that thread late at the barriers, preempted;
- OMP_WAIT_POLICY=passive: the wait-policy finding, with the sleeps the kernel counted;
  OMP_WAIT_POLICY=active on free CPUs: none;
- the model's pages paged out while it generates (process_madvise MADV_PAGEOUT, what
  memory pressure does): weights not resident, with the major faults the kernel counted;
- a cgroup CPU quota of one CPU for two threads: oversubscribed under the quota;
- clean runs (the OpenMP build with as many threads as CPUs, node-llama-cpp): nothing.

Then the host's memory bandwidth against a reader written apart (tests/fixtures/lpmemread:
an unrolled XOR over the daemon's threads and buffer size), in alternating rounds, within
15 % on quiet CPUs (beside load, the lower bound the daemon says its figure then is); the
bytes a token reads against the model file read here (tests/lib/ggufref.py); `llmprofctl
diff` on runs slowed on purpose and on two clean runs; and bad input."""
import ctypes
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
import ggufref  # noqa: E402
import lptest as t  # noqa: E402

WORKLOAD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "workload")
LPMEMREAD = os.environ.get("LPMEMREAD", "build/tests/lpmemread")
CPUS = os.cpu_count()
# A window is 10-20 s; a provoked finding must show within two of them.
FIRE_TIMEOUT = 60
# Window edges: the test samples /proc every 0.25 s and the daemon's window starts at a
# snapshot taken on its own tick, so shares may differ by the activity of ~0.5 s in 10 s.
SHARE_TOL = 0.10
# How far a reference's window may lie from the daemon's at either end (wait_fired).
EDGE_S = 0.2


class History:
    """What the kernel says of a process over time: per thread CPU time and run-queue wait
    (schedstat), major faults, voluntary switches; sampled as the test polls.

    With exits=True, also the threads that exited between two samples: ggml's own thread
    pool (node-llama-cpp) starts its workers for each graph and joins them after it, so
    most of a window's compute runs in threads that /proc no longer lists at the window's
    end. bpftrace reads each exiting thread of the process as it leaves the CPU
    (sched_switch of a task with PF_EXITING: its sum_exec_runtime brought up to date by
    the switch, which it is not yet at sched_process_exit, a tick's worth short: 8 % of
    the process's CPU time here; and its run_delay: its schedstat's two figures); the last
    such switch of a thread is its final figure."""

    def __init__(self, pid, exits=False):
        self.pid, self.samples, self.bt = pid, [], None
        if exits:
            self.bt = t.bpftrace(
                'tracepoint:sched:sched_switch /pid == %d && (curtask->flags & 4)/ { '
                'printf("exit %%d %%lld %%lld %%lld\\n", tid, nsecs, '
                'curtask->se.sum_exec_runtime, curtask->sched_info.run_delay); }' % pid)

    def stop(self):
        """Ends bpftrace once it printed every exit it saw; True when it did (times() is
        then complete). Once in CI its END line had not come 180 s after SIGINT: then it
        is killed, and what it printed is kept and said."""
        if not self.bt or getattr(self.bt, "done", None) is not None:
            return bool(self.bt and self.bt.done)
        try:
            self.bt.lines = t.bpftrace_stop(self.bt, timeout=60).splitlines()
            self.bt.done = True
        except t.Timeout:
            self.bt.kill()
            print("bpftrace printed no END line 60 s after SIGINT (%s); its last lines: %s"
                  % ("still running" if self.bt.poll() is None else "exited %s"
                     % self.bt.returncode, list(self.bt.lines)[-5:]))
            self.bt.done = False
        return self.bt.done

    def sample(self):
        s = {"t": time.monotonic(), "threads": {}, "majflt": 0, "nvcsw": 0}
        try:
            for tid in os.listdir("/proc/%d/task" % self.pid):
                with open("/proc/%d/task/%s/schedstat" % (self.pid, tid)) as f:
                    on, rq = (int(x) for x in f.read().split()[:2])
                with open("/proc/%d/task/%s/status" % (self.pid, tid)) as f:
                    st = f.read()
                s["threads"][int(tid)] = (on, rq)
                s["nvcsw"] += int(re.search(r"^voluntary_ctxt_switches:\s+(\d+)", st, re.M)[1])
            st = t.proc_stat(self.pid)
            s["majflt"] = int(st[9])
            s["cpu"] = t.proc_cpu_seconds(self.pid, st)  # exited threads' included (s)
        except (OSError, TypeError):
            return
        self.samples.append(s)

    def window(self, seconds):
        """The first and last samples of the last `seconds`."""
        end = self.samples[-1]
        start = min(self.samples, key=lambda s: abs(s["t"] - (end["t"] - seconds)))
        return start, end

    def edge(self, seconds):
        """How far the samples' window of the last `seconds` is from that length (s)."""
        a, b = self.window(seconds)
        return abs(b["t"] - a["t"] - seconds)

    def times(self, seconds):
        """On-CPU and run-queue ns of all the process's threads over the last `seconds`:
        those listed at its end, and (with exits) those that exited inside it, at their
        exit; each less its figures at the window's start."""
        a, b = self.window(seconds)
        on = sum(b["threads"][k][0] - a["threads"].get(k, (0, 0))[0] for k in b["threads"])
        rq = sum(b["threads"][k][1] - a["threads"].get(k, (0, 0))[1] for k in b["threads"])
        last = {}  # tid: its last switch while exiting (time, on, rq)
        for line in list(self.bt.lines) if self.bt else []:
            f = line.split()
            if len(f) == 5 and f[0] == "exit":
                last[int(f[1])] = (int(f[2]) / 1e9, int(f[3]), int(f[4]))
        for tid, (at, x_on, x_rq) in last.items():
            if a["t"] < at <= b["t"] and tid not in b["threads"]:
                on += x_on - a["threads"].get(tid, (0, 0))[0]
                rq += x_rq - a["threads"].get(tid, (0, 0))[1]
        return on, rq, b["t"] - a["t"]

    def runq_share(self, seconds):
        on, rq, _ = self.times(seconds)
        return rq / (on + rq) if on + rq else 0


# Long enough that a run outlives its checks on any host (4,000 tokens took 12 s on one that
# decodes 337 tokens/s, and the clean run had exited before doctor read it); each check kills
# its run (stop) when done.
def llama(binary, model, env=None, tokens=20000, wrap=(), prompt="Once upon a time"):
    e = dict(os.environ)
    e.update(env or {})
    p = subprocess.Popen(list(wrap) + [binary, "-m", model, "-n", str(tokens), prompt],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=e)
    t._children.append(p)
    return p


def stop(p):
    if p.poll() is None:
        p.kill()
    p.wait(timeout=20)


def findings(d, pid):
    return d.get("/v1/processes/%d/findings" % pid)


def generated(doc):
    """Whether the findings' window holds generated tokens."""
    return (doc.get("bandwidth") or {}).get("tokens_per_s", 0) > 0


def rules(doc):
    return [f["rule"] for f in doc["findings"]]


def ours(pid):
    """Whether pid is one of this test's processes (in its cgroup; lptest.ScopeCgroup)."""
    scope = t.scope()
    try:
        with open("/proc/%d/cgroup" % pid) as f:
            return any(line.startswith("0::" + scope.name + "/") for line in f) if scope \
                else True
    except OSError:
        return False  # gone: not one the test holds


def foreign_load(f):
    """A preempted finding whose waits were mostly behind processes outside the test: a
    host busy beside the suite (an LLM decoding, a build), which the daemon rightly names.
    The test's own (its curl polls, itself) may be among them, with a small part."""
    if f["rule"] != "preempted":
        return False
    who = f["evidence"].get("preemptors", [])
    own = sum(x["wait_ns"] for x in who if ours(x["pid"]))
    return 2 * own < sum(x["wait_ns"] for x in who)


def own_rules(doc):
    """The findings but those about load from outside the test."""
    return [f["rule"] for f in doc["findings"] if not foreign_load(f)]


def finding(doc, rule):
    return next((f for f in doc["findings"] if f["rule"] == rule), None)


def wait_generating(d, pid, hist):
    def gen():
        hist.sample()
        status, doc, _ = d.api("GET", "/v1/processes/%d" % pid)
        # 404 until the daemon has found it
        return status == 200 and ((doc.get("ggml") or {}).get("tokens", {}).get("generation", {})
                                  .get("tokens", 0) > 20)
    t.poll("pid %d to generate" % pid, gen, timeout=120, interval=0.25)


def wait_fired(d, pid, rule, hist, timeout=FIRE_TIMEOUT):
    """Polls the findings, sampling /proc meanwhile, until rule fires in a document whose
    window the samples bound closely: (doc, finding). Its window ends in the GET, between
    the samples taken either side of it, and starts window_seconds before: a read that took
    long (a sanitized daemon reading a new process's objects took 1 s), or a start that
    falls in such a gap, would hold the reference to another stretch of the process's life
    (once in CI, its load on one thread: a run-queue share of 0.389 against the window's
    0.498). The finding stays while the window grows, so the next polls bound it."""
    found = {}

    def fired():
        hist.sample()
        before = hist.samples[-1]["t"] if hist.samples else 0
        status, doc, _ = d.api("GET", "/v1/processes/%d/findings" % pid)
        hist.sample()
        f = finding(doc, rule) if status == 200 else None
        if f and hist.samples[-1]["t"] - before <= EDGE_S and \
                hist.edge(doc["window_seconds"]) <= EDGE_S:
            found["doc"], found["f"] = doc, f
            return f
        return None
    t.poll("%s to fire for pid %d" % (rule, pid), fired, timeout=timeout, interval=0.25)
    return found["doc"], found["f"]


def assert_clean(d, pid, hist, what, polls=4):
    """Once the window holds 10 s of generation, polls the findings for 10 s: none may
    fire. Returns the last document."""
    wait_generating(d, pid, hist)
    t.poll("a 10 s window of %s" % what, lambda: findings(d, pid)["window_seconds"] >= 10,
           timeout=60, interval=0.5)
    seen = set()
    doc = None
    foreign = []
    for _ in range(polls):
        doc = findings(d, pid)
        seen |= set(own_rules(doc))
        foreign += [f["title"] for f in doc["findings"] if foreign_load(f)]
        time.sleep(10 / polls)
    t.check(not seen, "%s: no finding over its windows (%s)%s"
            % (what, sorted(seen) or "none", "; on this busy host, rightly: %s" % foreign[-1]
               if foreign else ""))
    return doc


def cpus_allowed(pid, tid=None):
    path = "/proc/%d/task/%d/status" % (pid, tid) if tid else "/proc/%d/status" % pid
    with open(path) as f:
        return re.search(r"^Cpus_allowed_list:\s+(\S+)", f.read(), re.M)[1]


def count_cpus(lst):
    n = 0
    for part in lst.split(","):
        a, _, b = part.partition("-")
        n += int(b or a) - int(a) + 1
    return n


def ctl(d, *args):
    return subprocess.run([t.LLMPROFCTL, "--socket", d.socket] + list(args),
                          capture_output=True, text=True, timeout=60)


def doctor_status(out):
    """The exit status doctor owes for what it printed: 7 for a critical finding, 6 for a
    warning, else 0."""
    return 7 if "  CRITICAL " in out else 6 if "  WARNING " in out else 0


def bandwidth(d, work):
    """The daemon's measurement against lpmemread's, five rounds each, alternating, each
    the best of 6 rounds of 0.2 s. Compared pair by pair (a round of the daemon's and the
    reference's right after it), the daemon's that it took on quiet CPUs (it flags the others
    itself): the median of their ratios within 15 %; where fewer than three were quiet, the
    lower bound the daemon says a figure taken under load is. This virtual machine's
    bandwidth moves by tens of per cent from one second to the next (seen: the reference at
    40.6 GB/s four times and 67.6 once; on CI the pairs' ratios 1.05-1.47 in one run), so no
    one figure of either side is the host's: the best of each had failed on a single burst
    of either."""
    ours, ref, ratios, quiet = [], [], [], []
    for _ in range(5):
        status, doc, _ = d.api("POST", "/v1/bandwidth")
        t.check(status == 202, "POST /v1/bandwidth: %d" % status)
        # Polled slowly: each poll's curl is other work on the CPUs being measured.
        time.sleep(1.5)
        doc = t.poll("the measurement", lambda: (lambda x: x if x["state"] == "measured"
                                                 else None)(d.get("/v1/bandwidth")),
                     timeout=60, interval=0.5)
        last = doc["last_measurement"]
        # The same procedure as the daemon's: its threads over its buffer (a buffer four
        # times smaller read 5-15 % faster here: fewer page walks miss the caches), the best
        # of 6 rounds of 0.2 s.
        mib = max(1, doc["buffer_bytes"] // doc["threads"] >> 20)
        r = subprocess.run([LPMEMREAD, str(doc["threads"]), str(mib), "0.2", "6"],
                           capture_output=True, text=True, timeout=60, check=True)
        ref.append(json.loads(r.stdout)["bytes_per_s"])
        ours.append(last["bytes_per_s"])
        ratios.append(last["bytes_per_s"] / ref[-1])
        quiet.append(not last["contended"])
    # Pairs taken on quiet CPUs, where there are three or more; on a host busy all along
    # (an LLM decoding beside the suite), every pair: the two sides are then both low by
    # what the load takes, and the daemon must have said that its figures are.
    pairs = [i for i in range(5) if quiet[i]] if sum(quiet) >= 3 else list(range(5))
    print("bandwidth: llmprofd %s GB/s, lpmemread %s GB/s, ratios %s, quiet %s"
          % ([round(x / 1e9, 1) for x in ours], [round(x / 1e9, 1) for x in ref],
             [round(x, 2) for x in ratios], quiet))
    mid = statistics.median(ratios[i] for i in pairs)
    if sum(quiet) >= 3:
        t.check(abs(mid - 1) <= 0.15,
                "the host's read bandwidth, the daemon's over lpmemread's measured beside it: "
                "median %.2f of %d pairs on quiet CPUs, within 15 %%" % (mid, len(pairs)))
    else:
        # Taken under load, the daemon's figure is what it says it is: a lower bound, not
        # used to judge a decode memory-bound. Beside tests/busy-host.sh this VM's
        # lpmemread read faster than on quiet CPUs (34 against 30 GB/s, over 1 GiB a
        # thread) while the daemon read 28.5 both ways, 0.84 of the reference in every
        # pair of one run: not explained. Nor does a pair see one load: the neighbour
        # decodes in bursts, and one CI run's pairs went 0.82, 1.30, 1.33, 0.91, 1.22 (the
        # daemon 14.5-23.3 GB/s, the reference 15.4-20.3). So the two sides are judged as
        # what they are: a lower bound is not above the most the reference read in the
        # same run (the host's capacity as far as this run can tell) by more than the VM's
        # noise, and is not so low beside the reference's median that it measured
        # something else.
        mid_ours, top, mid_ref = statistics.median(ours), max(ref), statistics.median(ref)
        t.check(mid_ours <= 1.15 * top and mid_ours >= 0.6 * mid_ref,
                "the host's read bandwidth on a busy host, the daemon's a lower bound: its "
                "median %.1f GB/s at most 1.15 x the reference's best %.1f, at least 0.6 x "
                "its median %.1f (pairs' ratios: median %.2f, max %.2f)"
                % (mid_ours / 1e9, top / 1e9, mid_ref / 1e9, mid, max(ratios)))
    # A figure taken on quiet CPUs is used and kept from the first one on; one taken under
    # load replaces none of those.
    if any(quiet):
        t.check(not doc["contended"] and doc["bytes_per_s"] in
                [ours[i] for i in range(5) if quiet[i]],
                "the figure in use was measured on quiet CPUs (%d of 5)" % sum(quiet))
    else:
        t.check(doc["contended"] and doc["others_cpu_share"] > 0.05,
                "busy all along (%d of 5 quiet): the figure in use says it was taken while "
                "other work used the CPUs (%.0f %% of them)"
                % (sum(quiet), 100 * doc["others_cpu_share"]))
    path = os.path.join(d.state_dir, "membw.json")
    if any(quiet):
        with open(path) as f:
            kept = json.load(f)
        t.check(kept["bytes_per_s"] == doc["bytes_per_s"], "and is kept in the state directory")
    else:
        t.check(not os.path.exists(path), "and is not kept for the next start: measured again")


def oversubscribed(d, binary, model):
    """Two OpenMP threads on one CPU."""
    p = llama(binary, model, {"OMP_THREAD_LIMIT": "2"}, wrap=("taskset", "-c", "0"))
    hist = History(p.pid)
    doc, f = wait_fired(d, p.pid, "oversubscribed", hist)
    ev, ref = f["evidence"], hist.runq_share(doc["window_seconds"])
    # Mostly behind its own threads, as the title says: on a quiet host nearly all of it
    # (over 0.9), beside a busy host's processes (they take CPU 0 too) less.
    t.check(ev["compute_threads"] == 2 and ev["cpus_allowed"] == 1 ==
            count_cpus(cpus_allowed(p.pid)) and ev["own_preemption_share"] > 0.5
            and "mostly behind its own threads" in f["title"],
            "oversubscribed: 2 threads on the 1 CPU its affinity allows, behind its own "
            "threads (%.2f of the preemptions): %s" % (ev["own_preemption_share"], f["title"]))
    t.check(abs(ev["runqueue_share"] - ref) <= SHARE_TOL,
            "run-queue share %.3f, schedstat's over the window %.3f" % (ev["runqueue_share"], ref))
    omp = finding(doc, "omp_wait_policy")
    t.check(omp is not None and "more threads than CPUs" in omp["title"],
            "and OpenMP's spinning with more threads than CPUs: %s" % (omp or {}).get("title"))
    out = ctl(d, "doctor", "--pid", str(p.pid))
    t.check(out.returncode == doctor_status(out.stdout) != 0 and re.search(r"(CRITICAL|WARNING) +oversubscribed: 2 compute "
                                              r"threads want [\d.]+ CPUs of the 1 it may use",
                                              out.stdout),
            "doctor prints it, and exits %d by its worst finding:\n%s"
            % (out.returncode, out.stdout[:600]))
    top = ctl(d, "top", "-b", "-n", "1")
    row = next((ln for ln in top.stdout.splitlines()
                if ln[:7].lstrip("!*+").strip() == str(p.pid)), "")
    t.check(row[:1] in "!*" and row[:1] != "", "top marks the process (before its PID): %r"
            % row)
    _, metrics, _ = d.api("GET", "/metrics")
    t.check(re.search(r'^llmprofd_finding\{rule="oversubscribed"\} 1$', metrics, re.M)
            is not None, "llmprofd_finding counts it")
    recent(d, p)
    stop(p)


def recent(d, p):
    """Its CPUs widened (taskset on every thread), oversubscribed leaves the window's
    findings; it stays as recent, with the process's mark, until 10 s after the last read
    it fired in, then leaves. Each read's evaluation lies between the request's start and
    its end: a read that ended less than 10 s after the last firing read began must still
    list it, one that began 10 s after that read ended must not."""
    reads = []  # (start, end, "fired" | "recent" | "gone", doc, the recent entry)

    def read():
        start = time.monotonic()
        doc = findings(d, p.pid)
        r = next((x for x in doc.get("recent", []) if x["rule"] == "oversubscribed"), None)
        state = "fired" if finding(doc, "oversubscribed") else "recent" if r else "gone"
        reads.append((start, time.monotonic(), state, doc, r))
        return state

    t.check(read() == "fired", "it fires before its CPUs are widened")
    subprocess.run(["taskset", "-a", "-p", "-c", "0-%d" % (CPUS - 1), str(p.pid)], check=True,
                   capture_output=True, timeout=30)
    t.poll("oversubscribed to leave pid %d's window once its CPUs were widened" % p.pid,
           lambda: read() != "fired", timeout=60, interval=0.25)
    first = reads[-1]
    t.check(first[2] == "recent" and first[4]["severity"] in ("critical", "warning") and
            0 < first[4]["seconds_ago"] <= first[1] - reads[-2][0],
            "out of the window, it is recent: %s, %.2f s after the read it fired in (%.2f s "
            "apart)" % (first[4], (first[4] or {}).get("seconds_ago", -1),
                        first[1] - reads[-2][0]))
    procs = d.get("/v1/processes?pid=%d" % p.pid)["processes"]
    worst = procs[0]["findings"]["worst"] if procs else None
    out = ctl(d, "doctor", "--pid", str(p.pid))
    top = ctl(d, "top", "-b", "-n", "1")
    row = next((ln for ln in top.stdout.splitlines()
                if ln[:7].lstrip("!*+").strip() == str(p.pid)), "")
    t.check(worst in ("critical", "warning") and row[:1] in "!*" and row[:1] != "" and
            re.search(r"recently: (CRITICAL|WARNING) oversubscribed, \d+ s ago", out.stdout)
            and out.returncode == doctor_status(out.stdout),
            "it keeps the process's mark (%s, top %r) and doctor lists it, its exit status "
            "by the window's findings (%d):\n%s" % (worst, row[:8], out.returncode, out.stdout))
    t.poll("oversubscribed to leave pid %d's recent findings" % p.pid,
           lambda: read() == "gone", timeout=60, interval=0.25)
    fired = max(i for i, r in enumerate(reads) if r[2] == "fired")
    f_start, f_end = reads[fired][0], reads[fired][1]
    wrong = [(round(s - f_end, 2), round(e - f_start, 2), st) for s, e, st, _, _ in
             reads[fired + 1:] if (st == "gone" and e < f_start + 10) or
             (st != "gone" and s >= f_end + 10)]
    t.check(not wrong and reads[-1][2] == "gone",
            "recent until 10 s after the last read it fired in, then gone, over %d reads: "
            "%s" % (len(reads) - fired - 1, wrong))


def hog(d, binary, model):
    """Threads bound one per CPU; a hog on CPU 1."""
    h = t.hog(1)
    p = llama(binary, model, {"OMP_THREAD_LIMIT": "2", "OMP_PROC_BIND": "true",
                              "OMP_PLACES": "cores"})
    hist = History(p.pid)
    doc, f = wait_fired(d, p.pid, "preempted", hist)
    top = f["evidence"]["preemptors"][0]
    t.check(top["pid"] == h.pid and top["comm"] == "lphog",
            "preempted: most behind the hog, pid %d: %s" % (h.pid, f["title"]))
    doc, late = wait_fired(d, p.pid, "late_thread", hist)
    ev = late["evidence"]
    t.check(ev["cause"] == "preempted" and ev["preempted_by_pid"] == h.pid and ev["cpu"] == 1
            and cpus_allowed(p.pid, ev["tid"]) == "1" and
            ev["peers_median_sync_share"] - ev["thread_sync_share"] > ev["sync_share_noise"],
            "late thread %d, bound to CPU 1 with the hog, preempted by it, waited for (its "
            "samples %.2f in sync, its peer's %.2f, more than sampling's %.2f): %s"
            % (ev["tid"], ev["thread_sync_share"], ev["peers_median_sync_share"],
               ev["sync_share_noise"], late["title"]))
    a, b = hist.window(doc["window_seconds"])
    ref = b["threads"][ev["tid"]][1] - a["threads"].get(ev["tid"], (0, 0))[1]
    t.check(abs(ev["runqueue_ns"] - ref) <= 0.15 * ref + 0.5e9,
            "its run-queue wait %.2f s, schedstat's over the window %.2f s"
            % (ev["runqueue_ns"] / 1e9, ref / 1e9))
    t.check("oversubscribed" not in rules(doc), "two bound threads on two CPUs are not "
            "oversubscribed: %s" % rules(doc))
    stop(p)
    stop(h)


def wait_policy(d, binary, model):
    p = llama(binary, model, {"OMP_THREAD_LIMIT": "2", "OMP_WAIT_POLICY": "passive"})
    hist = History(p.pid)
    doc, f = wait_fired(d, p.pid, "omp_wait_policy", hist)
    a, b = hist.window(doc["window_seconds"])
    ref = (b["nvcsw"] - a["nvcsw"]) / (b["t"] - a["t"])
    t.check("OMP_WAIT_POLICY=passive" in f["title"] and f["evidence"]["OMP_WAIT_POLICY"] ==
            "passive", "passive: %s" % f["title"])
    t.check(abs(f["evidence"]["sleeps_per_s"] - ref) <= 0.2 * ref,
            "%.0f sleeps/s, the kernel's voluntary switches %.0f/s"
            % (f["evidence"]["sleeps_per_s"], ref))
    stop(p)
    p = llama(binary, model, {"OMP_THREAD_LIMIT": "2", "OMP_WAIT_POLICY": "active"})
    assert_clean(d, p.pid, History(p.pid), "OMP_WAIT_POLICY=active on 2 CPUs")
    stop(p)


def paged_out(d, binary, model):
    """The model's pages paged out every 200 ms while it generates."""
    p = llama(binary, model, {"OMP_THREAD_LIMIT": "2"})
    hist = History(p.pid)
    wait_generating(d, p.pid, hist)
    done = threading.Event()
    libc = ctypes.CDLL(None, use_errno=True)

    class Iovec(ctypes.Structure):
        _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]

    def pageout():
        fd = os.pidfd_open(p.pid)
        while not done.is_set():
            for line in open("/proc/%d/maps" % p.pid):
                f = line.split()
                if len(f) >= 6 and f[5] == model:
                    lo, hi = (int(x, 16) for x in f[0].split("-"))
                    iov = Iovec(lo, hi - lo)
                    # process_madvise(2), MADV_PAGEOUT
                    libc.syscall(440, fd, ctypes.byref(iov), 1, 21, 0)
            done.wait(0.2)
        os.close(fd)
    th = threading.Thread(target=pageout)
    th.start()
    try:
        doc, f = wait_fired(d, p.pid, "weights_not_resident", hist)
        # The residency is read when the finding is judged, and generation faults the pages
        # back within a few tokens: a read can find them all back (1.00). While they are
        # paged out every 200 ms, some read must find them gone.
        res = {}

        def below():
            status, x, _ = d.api("GET", "/v1/processes/%d/findings" % p.pid)
            g = finding(x, "weights_not_resident") if status == 200 else None
            if g and g["evidence"]["weights_resident_share"] < 1:
                res["share"] = g["evidence"]["weights_resident_share"]
            return "share" in res
        t.poll("a residency below 1 while paged out", below, timeout=30, interval=0.25)
    finally:
        done.set()
        th.join()
    a, b = hist.window(doc["window_seconds"])
    ref = b["majflt"] - a["majflt"]
    ev = f["evidence"]
    t.check(abs(ev["major_faults"] - ref) <= 0.2 * ref + 8,
            "%d major faults in the window, /proc/PID/stat's %d: %s"
            % (ev["major_faults"], ref, f["title"]))
    # 0 is a reading too: a read right after the page-out finds none of them back yet.
    t.check(ev["weights_file"] == model and 0 <= ev["weights_resident_share"] <= 1
            and res["share"] < 1,
            "the weights' file and residency: %s, %.2f (below 1 when read again: %.2f)"
            % (ev["weights_file"], ev["weights_resident_share"], res["share"]))
    stop(p)


def quota(d, binary, model):
    # lptest's CPU cgroup: v2's cpu controller where it is there (below the test's own
    # cgroup, so the engine is still the test's), else v1's cpu hierarchy.
    cg = t.CpuCgroup()
    cg.set_quota(0.5)
    p = llama(binary, model, {"OMP_THREAD_LIMIT": "2"}, wrap=cg.wrap([]))
    hist = History(p.pid)
    doc, f = wait_fired(d, p.pid, "oversubscribed", hist)
    ev = f["evidence"]
    # Half a CPU: the quota bites on a busy host too, where the two threads get less than
    # a CPU each anyway (a quota of 1 was never reached beside a decoding engine).
    t.check(ev["quota_cpus"] == 0.5 and ev["compute_threads"] == 2 and
            ev["throttled_periods"] > 0 and "quota of 0.50" in f["title"],
            "under a quota of half a CPU (%s): %s" % (cg.path, f["title"]))
    t.check("preempted" not in own_rules(doc), "throttling is not another process: %s"
            % [(f["rule"], f["evidence"].get("preemptors")) for f in doc["findings"]])
    stop(p)


def clean_omp(d, binary, model):
    p = llama(binary, model, {"OMP_THREAD_LIMIT": str(CPUS)})
    doc = assert_clean(d, p.pid, History(p.pid), "the OpenMP build, %d threads" % CPUS)
    bw = doc["bandwidth"]
    ref = ggufref.per_token_bytes(model)
    t.check(bw["bytes_per_token"] == ref and doc["context"]["weights"]["file"] == model,
            "a token reads %d bytes of the model, as its file says: %d" % (bw["bytes_per_token"], ref))
    quiet = not d.get("/v1/bandwidth")["contended"]
    t.check(abs(bw["stream_bytes_per_s"] - ref * bw["tokens_per_s"]) < 1
            and (bw["fraction"] or 0) > 0 if quiet else bw["fraction"] is None,
            "decode streams %.2f GB/s, %s"
            % (bw["stream_bytes_per_s"] / 1e9, "%.0f %% of the host's %.1f GB/s"
               % (100 * bw["fraction"], bw["peak_bytes_per_s"] / 1e9) if quiet else
               "no share of a host bandwidth measured on busy CPUs: %s" % bw["fraction"]))
    out = ctl(d, "doctor", "--pid", str(p.pid))
    t.check(out.returncode == doctor_status(out.stdout) and "memory:" in out.stdout and
            ("nothing found" in out.stdout or not own_rules(findings(d, p.pid))),
            "doctor says nothing was found (or only a busy host's), and whether it is "
            "memory-bound:\n" + out.stdout)
    stop(p)


def llc_bytes(pid):
    """The last-level caches of the CPUs pid may run on, each instance once, read from sysfs
    here: per CPU the highest cache level that holds data, and the CPUs that share it."""
    cpus = expand(cpus_allowed(pid))
    seen, total = set(), 0
    for c in cpus:
        best = None
        base = "/sys/devices/system/cpu/cpu%d/cache" % c
        for idx in sorted(os.listdir(base)) if os.path.isdir(base) else []:
            if not idx.startswith("index"):
                continue
            rd = lambda f: open(os.path.join(base, idx, f)).read().strip()  # noqa: E731
            if rd("type") == "Instruction":
                continue
            level, size, shared = int(rd("level")), rd("size"), rd("shared_cpu_list")
            mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(size[-1], 1)
            if best is None or level >= best[0]:
                best = (level, int(size.rstrip("KMG")) * mult, shared)
        if best and best[2] not in seen:
            seen.add(best[2])
            total += best[1]
    return total


def expand(lst):
    out = []
    for part in lst.split(","):
        a, _, b = part.partition("-")
        out += range(int(a), int(b or a) + 1)
    return out


def llc(d, binary, work, medium):
    """memory_bound knows where the weights come from: a model whose token reads fit in the
    last-level caches of its CPUs (sysfs, read here) is not judged against the memory's
    bandwidth, and says why; one that does not fit is judged. A host whose caches hold even
    the medium model's token leaves the second side untested, and says so."""
    small = os.path.join(work, "small.gguf")
    subprocess.run([sys.executable, os.path.join(WORKLOAD, "gen_gguf.py"), "--shape", "small",
                    small], check=True, timeout=120)
    sides = [(small, True)]
    p = llama(binary, small, tokens=1000000)
    cache = None
    try:
        wait_generating(d, p.pid, History(p.pid))
        cache = llc_bytes(p.pid)
    finally:
        stop(p)
    if ggufref.per_token_bytes(medium) > cache:
        sides.append((medium, False))
    else:
        print("note: this host's last-level caches (%.0f MiB) hold the medium model's token "
              "(%.0f MiB): the side that streams from memory is not tested here"
              % (cache / 2**20, ggufref.per_token_bytes(medium) / 2**20))
    for model, fits in sides:
        p = llama(binary, model, tokens=1000000)
        hist = History(p.pid)
        wait_generating(d, p.pid, hist)
        doc = t.poll("pid %d's bandwidth line, over 3 s of generation" % p.pid,
                     lambda: (lambda x: x if generated(x) and x["window_seconds"] >= 3
                              else None)(findings(d, p.pid)), timeout=60, interval=0.5)
        bw, why = doc["bandwidth"], doc["not_evaluated"].get("memory_bound", "")
        ref = ggufref.per_token_bytes(model)
        t.check(bw["llc_bytes"] == llc_bytes(p.pid) and bw["fits_llc"] == fits and
                (("fit in the last-level caches" in why and not finding(doc, "memory_bound"))
                 if fits else "last-level" not in why),
                "%s: a token reads %.1f MiB, its CPUs' last-level caches hold %.1f MiB (sysfs:"
                " %.1f): %s" % (os.path.basename(model), ref / 2**20, bw["llc_bytes"] / 2**20,
                                llc_bytes(p.pid) / 2**20,
                                why or "judged against the memory's bandwidth"))
        stop(p)


def clean_node(d, model):
    """A clean generation finds nothing (but an oversubscription schedstat confirms: node's
    own threads beside ggml's). Judged over windows that lie inside the generation
    (from a read's time back over its window_seconds, after "go"): a window that also holds
    the process's start holds the daemons' own work of finding it (reading its objects'
    symbols and frame rows, 0.8 s of a CPU for a fresh daemon), which the preempted rule
    rightly names, and which is not the clean run this judges."""
    drv = subprocess.Popen(["node", os.path.join(WORKLOAD, "driver.mjs"), "--model", model,
                            "--tokens", "4000", "--threads", str(CPUS), "--prompt", "16",
                            "--wait-go"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                           text=True)
    t._children.append(drv)
    pid = t.read_json_line(drv, "the driver", 120)["pid"]
    d.wait_log("pid %d (node) runs ggml" % pid, 60)
    hist = History(pid, exits=True)
    drv.stdin.write("go\n")
    drv.stdin.flush()
    go = time.monotonic()
    inside = []

    def two_inside():
        hist.sample()
        doc = findings(d, pid)
        hist.sample()
        if generated(doc) and time.monotonic() - doc["window_seconds"] >= go:
            inside.append(doc)
        if drv.poll() is not None:
            raise AssertionError("the driver ended before two windows inside its generation"
                                 " were read: make it generate longer")
        return len(inside) >= 2
    t.poll("two findings windows inside pid %d's generation" % pid, two_inside, timeout=150,
           interval=0.5)
    drv.kill()
    drv.wait(timeout=30)
    complete = hist.stop()
    # With --threads equal to the CPUs, node's event loop and its other libuv workers
    # compete with ggml's threads, and on a busy host the process can want more than its
    # CPUs. Oversubscribed is then no false alarm if the kernel says so over the window:
    # schedstat's demand (on CPU and waiting, ggml's workers that exited in the window
    # included) above the CPUs, less the window edges' 0.1, and its run-queue share within
    # SHARE_TOL of the finding's.
    for doc in inside:
        on, rq, span = hist.times(doc["window_seconds"])
        a, b = hist.window(doc["window_seconds"])
        if complete:
            t.check(abs(on / 1e9 - (b["cpu"] - a["cpu"])) <= 0.03 * (b["cpu"] - a["cpu"])
                    + 0.02, "the reference, schedstat and the exited threads: %.3f s on CPU "
                    "over %.1f s, /proc/PID/stat's %.3f s" % (on / 1e9, span,
                                                              b["cpu"] - a["cpu"]))
        f = finding(doc, "oversubscribed")
        if not f:
            continue
        t.check(complete, "node-llama-cpp: oversubscribed, and a reference to judge it by "
                "(bpftrace's exits complete)")
        demand = (on + rq) / max(1e-9, span * 1e9)
        ref = rq / (on + rq) if on + rq else 0  # runq_share's, from the same figures
        true = demand > CPUS + 0.05 - 0.1 and \
            abs(f["evidence"]["runqueue_share"] - ref) <= SHARE_TOL
        t.check(true, "node-llama-cpp: oversubscribed, as schedstat says: it wanted %.2f CPUs "
                "(the finding %.2f), waited %.2f of its time (the finding %.2f)"
                % (demand, f["evidence"]["cpus_wanted"], ref,
                   f["evidence"]["runqueue_share"]))
        doc["findings"] = [x for x in doc["findings"] if x["rule"] != "oversubscribed"]
    # Preempted likewise, where the busy host's neighbours took its CPUs: no false alarm if
    # its run-queue share is the kernel's (schedstat, within SHARE_TOL) and the waits it
    # puts behind others are a part of it.
    for doc in inside:
        f = finding(doc, "preempted")
        if not f:
            continue
        on, rq, span = hist.times(doc["window_seconds"])
        ref = rq / (on + rq) if on + rq else 0
        ev = f["evidence"]
        t.check(complete and abs(ev["runqueue_share"] - ref) <= SHARE_TOL
                and ev["waited_behind_others_share"] <= ev["runqueue_share"] + 1e-9,
                "node-llama-cpp: preempted (%.3f of its time behind others), as schedstat "
                "says: it waited %.3f of its time for a CPU (the finding %.3f)"
                % (ev["waited_behind_others_share"], ref, ev["runqueue_share"]))
        doc["findings"] = [x for x in doc["findings"] if x["rule"] != "preempted"]
    seen = sorted(set(r for doc in inside for r in rules(doc)))
    t.check(not seen,
            "node-llama-cpp, %d threads: nothing found over %d windows of %s s inside its "
            "generation: %s %s" % (CPUS, len(inside), [round(doc["window_seconds"], 1)
                                                      for doc in inside],
                                   seen, [(f["title"], f["evidence"].get("preemptors"))
                                          for doc in inside for f in doc["findings"]][:3]))


def diff(d, binary, model, work):
    """Two clean runs of one configuration, and slower ones: both threads on one CPU, and a
    hog."""
    def run(name, env=None, wrap=()):
        p = llama(binary, model, dict({"OMP_THREAD_LIMIT": str(CPUS)}, **(env or {})),
                  tokens=300, wrap=wrap)
        p.wait(timeout=300)
        d.wait_log("pid %d (llama-simple) exited" % p.pid)
        path = os.path.join(work, name + ".json")
        with open(path, "w") as f:
            f.write(ctl(d, "dump", "--pid", str(p.pid), "--json").stdout)
        return path
    def rate(path):
        with open(path) as f:
            return json.load(f)["ggml"]["tokens"]["generation"]["wall_tokens_per_s"]
    # The base is the faster of two clean runs: on a busy host one run can be held back by
    # its neighbours (CI: 121 tokens/s with a 96 ms token, where the next clean run read
    # 199), and a base slowed so is no base: a run slowed on purpose then read faster than
    # it. The other clean run is the first to set against it.
    first, second = run("base"), run("again-0")
    base, other = (first, second) if rate(first) >= rate(second) else (second, first)
    # Slowed on purpose by more than this VM's noise: one thread instead of two was not
    # (a run with one thread once decoded as fast as the clean one had, 195 against 198
    # tokens/s, where it is 1.4x slower on a quiet host); both threads on one CPU are 3-4x.
    slow = run("one-cpu", wrap=("taskset", "-c", "0"))
    h = t.hog(1)
    hogged = run("hog", {"OMP_PROC_BIND": "true", "OMP_PLACES": "cores"})
    stop(h)
    # Two runs of one configuration differ by the host's noise: up to 12.5 % in tokens/s on
    # this shared VM on a busy day (a CI rehearsal under ASan). A CI gate sets its
    # threshold above that noise; the slowed runs below must trip the default 10 %. A
    # build beside the suite once halved a run (run-queue share 5.5 % against 28.3 %, and
    # the diff said so, rightly): then that pair was not clean, and the run is made again,
    # up to three times. A diff that always cried regression fails all three.
    for attempt in range(3):
        same = ctl(d, "diff", base, other if attempt == 0 else run("again-%d" % attempt),
                   "--threshold", "25")
        if same.returncode == 0:
            break
        print("the host's noise over 25 %% (attempt %d of 3):\n%s" % (attempt + 1, same.stdout))
    t.check(same.returncode == 0 and "no regression" in same.stdout,
            "diff of two clean runs exits 0 at a threshold above the noise (25 %):\n"
            + same.stdout)
    for name, path in (("both threads on one CPU", slow), ("a hog", hogged)):
        r = ctl(d, "diff", base, path)
        t.check(r.returncode == 1 and "REGRESSION" in r.stdout,
                "diff exits 1 on the run with %s:\n%s" % (name, r.stdout))
    r = ctl(d, "diff", base, slow, "--json")
    doc = json.loads(r.stdout)
    t.check(r.returncode == 1 and doc["regression"] and
            any(f["figure"].startswith("tokens/s") and f["verdict"] == "REGRESSION"
                for f in doc["figures"]), "diff --json says which figure regressed")
    # Bad input: another format, not JSON, not a report, missing.
    other = os.path.join(work, "other.json")
    with open(base) as f:
        doc = json.load(f)
    doc["report_format"] = 99
    with open(other, "w") as f:
        json.dump(doc, f)
    garbage = t.tmpfile("{not json")
    for args, want in (((base, other), "report format 99"), ((garbage, base), "not JSON"),
                       (("/etc/hostname", base), "not"), ((base, "/nonexistent"), "cannot read"),
                       ((base,), "two reports")):
        r = ctl(d, "diff", *args)
        t.check(r.returncode == 2 and want in r.stderr, "diff %s: exit 2, %r: %s"
                % (" ".join(os.path.basename(a) for a in args), want, r.stderr.strip()))


def bad_input(d, binary, model):
    pid = t.unused_pid()
    status, doc, _ = d.api("GET", "/v1/processes/%d/findings" % pid)
    t.check(status == 404 and doc["error"]["code"] == "no_such_process",
            "findings of an unknown pid: 404")
    r = ctl(d, "doctor", "--pid", str(pid))
    t.check(r.returncode == 1, "doctor --pid of an unknown pid exits 1: %s" % r.stderr.strip())
    status, _, _ = d.api("PUT", "/v1/processes/%d/findings" % pid)
    t.check(status == 405, "PUT findings: 405")
    # Processes that exit while their findings are read: every answer is 200 or 404.
    codes = set()
    for _ in range(5):
        p = llama(binary, model, {"OMP_THREAD_LIMIT": "2"}, tokens=3)
        while p.poll() is None:
            codes.add(d.api("GET", "/v1/processes/%d/findings" % p.pid)[0])
        codes.add(d.api("GET", "/v1/processes/%d/findings" % p.pid)[0])
    t.check(codes <= {200, 404}, "findings of processes exiting meanwhile: %s" % codes)
    exited = next(x for x in d.get("/v1/processes")["processes"] if x["state"] == "exited")
    r = ctl(d, "doctor", "--pid", str(exited["pid"]))
    t.check(r.returncode == 0 and "not evaluated (the process is gone" in r.stdout,
            "doctor of an exited process says what it cannot judge:\n" + r.stdout)
    t.check(d.proc.poll() is None, "the daemon keeps serving")


def main():
    binary = t.llama_simple()
    # On disk, not tmpfs: paged-out pages must be read back from a file.
    work = t.tmpdir("llmprofd-findings-", dir="/var/tmp")
    model = os.path.join(work, "medium.gguf")
    subprocess.run([sys.executable, os.path.join(WORKLOAD, "gen_gguf.py"), "--shape", "medium",
                    model], check=True, timeout=120)
    d = t.Daemon("--sample-hz", "99")
    d.wait_ready()
    # First: a measurement on quiet CPUs, which the later phases then use.
    bandwidth(d, work)
    clean_omp(d, binary, model)
    llc(d, binary, work, model)
    oversubscribed(d, binary, model)
    hog(d, binary, model)
    wait_policy(d, binary, model)
    paged_out(d, binary, model)
    quota(d, binary, model)
    clean_node(d, model)
    diff(d, binary, model, work)
    bad_input(d, binary, model)
    d.stop()


if __name__ == "__main__":
    t.run(main, timeout=850)
