#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
"""e2e tier: CPython's own frames in the stacks (Debian's python3.11, and 3.12 and 3.13 where
the host has them), outside ops by Python function, and the GIL's waits, each against a
reference taken on the same run.

- pyburn.py (tests/workload), tracked by --pid: main() -> work() -> burn_a, burn_b, burn_c,
  each spinning in its own loop for 1, 2 and 3 units of its thread's CPU, timed by that
  clock. Over a profile window of the daemon's pprof: the share of samples whose innermost
  Python frame is each burn function within 3 points (or 3.5 sigma of the sampling noise,
  if larger) of its share of the process's CPU by the fixture's own clocks; every stack
  through one of them holds work, main and <module> above it, in that order; each frame's
  line inside its function's lines (inspect's), its file the fixture's. bpftrace on
  CPython's USDT function__return probe over the whole run counts each burn function's
  calls as the fixture counted them, exactly, and knows every Python function the profile
  names. The process document's outside ops by Python function: each burn function's
  share within the same bound of its CPU share over the whole run. go tool pprof -lines
  prints the functions with file:line, -traces a burn function under work, main and
  <module>; llmprofctl flame's SVG names them; every stack through a burn function walked
  to Py_RunMain.
- pyburn.py --gil: two threads spin in Python for 5 s each, contending for the GIL. Each
  thread's GIL wait (the daemon's gil_wait_ns) within 5 % of what its own clocks leave
  unaccounted: wall time less its CPU time and its run-queue wait (schedstat); doctor's
  gil_contention fires for the process.
- Every other CPython the host has among 3.12 and 3.13 (python3.12, python3.13 on the
  PATH: pyenv's, say): the burn's shares, frame order, lines and files as above (no USDT
  there: those builds have no probes) and the GIL's waits, each against the fixture's own
  clocks. A host with neither says so and checks 3.11 only. In the plain build only (this
  and the next): their frames are read by the code the 3.11 parts run under the sanitizers.
- A CPython before 3.11 (pyenv's 3.10, where the host has it): said as not read, in the
  process document, status, llmprofctl status and dump; its profile keeps the native
  frames (the interpreter's own) and names no Python function.
- The PyTorch decoder (tests/workload/decoder.py, 2 threads): a folded line reads
  python3;...;decoder.generate;...;torch.nn.modules.linear.Linear.forward;...;
  at::_ops::linear::call;...;sgemm_; the OpenMP workers' stacks (rooted at start_thread)
  hold no Python frame and keep their op label; gil_contention stays silent."""
import collections
import json
import math
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
import lptest as t  # noqa: E402
import pprofref  # noqa: E402
import torchref  # noqa: E402

PYBURN = os.path.join(torchref.WORKLOAD, "pyburn.py")
HZ = 499
BURNS = ("burn_a", "burn_b", "burn_c")


def noise(p, n):
    return 3.5 * math.sqrt(max(p * (1 - p), 1e-9) / max(1, n))


def profile(d, pid, seconds, fmt="profile"):
    """The daemon's pprof (or folded) of pid over the next seconds."""
    r = subprocess.run(["curl", "-sS", "--max-time", str(seconds + 60), "--unix-socket",
                        d.socket, "http://localhost/debug/pprof/%s?seconds=%d&pid=%d"
                        % (fmt, seconds, pid)], capture_output=True, timeout=seconds + 90)
    t.check(r.returncode == 0 and r.stdout, "the daemon's %s of pid %d: %d bytes %s"
            % (fmt, pid, len(r.stdout), r.stderr[-200:]))
    return r.stdout


def start_pyburn(python, *args):
    p = subprocess.Popen([python, PYBURN, "--hold"] + list(args),
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    t._children.append(p)
    return p, json.loads(p.stdout.readline())


def others(minors=(12, 13)):
    """The CPythons 3.N (N in minors) the host has, on the PATH or among pyenv's versions:
    {"3.12": executable}."""
    cands = [shutil.which("python3.%d" % m) for m in minors]
    if shutil.which("pyenv"):
        r = subprocess.run(["pyenv", "versions", "--bare"], capture_output=True, text=True,
                           timeout=60)
        for v in r.stdout.split():
            m = re.match(r"^3\.(\d+)\.\d+$", v)
            pre = m and int(m[1]) in minors and subprocess.run(
                ["pyenv", "prefix", v], capture_output=True, text=True,
                timeout=60).stdout.strip()
            if pre:
                cands.append(os.path.join(pre, "bin", "python3.%s" % m[1]))
    found = {}
    for exe in filter(None, cands):
        # a shim runs the interpreter: its own path, to be the process
        r = subprocess.run([exe, "-c", "import sys; print(sys.executable); "
                            "print('%d.%d' % sys.version_info[:2])"],
                           capture_output=True, text=True, timeout=60)
        lines = r.stdout.split()
        if r.returncode == 0 and len(lines) == 2 and \
                lines[1] in ["3.%d" % m for m in minors]:
            found.setdefault(lines[1], lines[0])
    return found


def tracked_cpython(d, pid, version):
    t.poll("llmprofd to read pid %d's CPython %s" % (pid, version),
           lambda: re.search(r"pid %d \(.*\) runs CPython %s\.\d+ .*its frames are read"
                             % (pid, re.escape(version)), d.log()), timeout=60)


def burn(python=None, version="3.11"):
    python = python or torchref.PYTHON
    print("--- pyburn under CPython %s (%s): Python functions of known CPU" % (version, python))
    p, info = start_pyburn(python, "--seconds", "12")
    pid = info["pid"]
    d = t.Daemon("--pid", str(pid), "--sample-hz", str(HZ))
    d.wait_ready()
    tracked_cpython(d, pid, version)
    # CPython's return probe, each call of the fixture's functions by name (Debian's
    # python3.11 has the probes; pyenv's builds do not)
    bt = None
    if version == "3.11":
        bt = t.bpftrace('usdt:/usr/bin/python3.11:python:function__return /pid == %d/ '
                        '{ @calls[str(arg1)] = count(); }' % pid, end="print(@calls);",
                        at_exit_of=pid)
    p.stdin.write("go\n")
    p.stdin.flush()
    svg = flame_svg(d, pid, 6)
    body = profile(d, pid, 6)
    titles = svg()
    prof = pprofref.load(body)
    res = json.loads(p.stdout.readline())
    doc = d.get("/v1/processes/%d" % pid)
    status = d.get("/v1/status")["python"]
    p.stdin.close()
    p.wait(timeout=60)
    usdt = None
    if bt:
        out = t.bpftrace_stop(bt, timeout=120)
        usdt = {m[1]: int(m[2])
                for m in re.finditer(r"^@calls\[(.+?)\]: (\d+)$", out, re.M)}

    total_cpu = res["process_cpu_ns"]
    want = {n: res["cpu_ns"][n] / total_cpu for n in BURNS}
    samples = pprofref.frames(prof)
    n = sum(c for _, c, _ in samples)
    inner = collections.Counter()
    order_bad, line_bad, file_bad, names = [], [], [], set()
    rooted = through = 0
    for fr, c, _ in samples:
        py = [f for f in fr if f[1]]
        names |= {f[0] for f in py}
        if not py:
            continue
        inner[py[0][0]] += c
        short = [f[0].rsplit(".", 1)[-1] for f in py]
        if short[0] in BURNS:
            # walked whole: from the clock's system call in the C library through the
            # interpreter to the process's main
            through += c
            rooted += c * any(f[0] == "Py_RunMain" for f in fr)
            if short[:4] != [short[0], "work", "main", "<module>"]:
                order_bad.append(short[:6])
            first, last = info["lines"][short[0]]
            if not first <= py[0][2] <= last:
                line_bad.append((short[0], py[0][2]))
            if os.path.realpath(py[0][1]) != os.path.realpath(PYBURN):
                file_bad.append(py[0][1])
    pprof_lines(body)
    print("profile: %d samples; innermost Python frames %s; the fixture's CPU shares %s"
          % (n, {k: round(v / n, 3) for k, v in inner.most_common(5)},
             {k: round(v, 3) for k, v in want.items()}))
    t.check(n > 1000, "enough samples: %d" % n)
    for name in BURNS:
        ours = inner["pyburn." + name] / max(1, n)
        bound = max(0.03, noise(want[name], n))
        t.check(abs(ours - want[name]) <= bound,
                "pyburn.%s: %.3f of the samples its innermost Python frame, its CPU share "
                "%.3f by its own clock (within %.3f)" % (name, ours, want[name], bound))
    t.check(not order_bad, "every stack through a burn function holds work, main and "
            "<module> above it, in order: %s" % order_bad[:3])
    t.check(rooted >= 0.99 * through, "the stacks through a burn function walked to "
            "Py_RunMain: %d of %d" % (rooted, through))
    t.check(not line_bad and not file_bad, "each burn frame's line is inside its function "
            "and its file is the fixture's: %s %s" % (line_bad[:3], file_bad[:3]))
    if usdt is not None:
        t.check(all(usdt.get(k) == res["calls"][k] for k in BURNS),
                "USDT function__return counted each burn function's calls as the fixture "
                "did: %s, the fixture %s" % ({k: usdt.get(k) for k in BURNS}, res["calls"]))
        unknown = {x for x in names if x.rsplit(".", 1)[-1] not in usdt}
        t.check(not unknown, "every Python function the profile names, CPython's probe saw "
                "return: %s" % sorted(unknown)[:5])
    t.check({"pyburn." + x for x in BURNS + ("work", "main")} <= titles,
            "llmprofctl flame's SVG has the Python functions: %s"
            % sorted(x for x in titles if x.startswith("pyburn")))
    # the window is within the work: the fixture's functions only, no interpreter call's
    # own frame (3.12 on: its shim) among them
    want_names = {"pyburn." + x for x in BURNS + ("work", "main", "<module>")}
    t.check(names == want_names, "the profile names the fixture's functions and no other: "
            "missing %s, others %s" % (sorted(want_names - names), sorted(names - want_names)))

    # The process document's outside ops by Python function: since tracked (all the run).
    t.check(doc.get("engine") is None, "pyburn runs no engine: engine null")
    py = doc["python"]
    t.check(py and py["version"].startswith(version + ".") and py["frames"] == "read",
            "its CPython said: %s" % {k: py.get(k) for k in ("version", "frames")})
    funcs = {f["function"]: f for f in py["outside_ops"]["functions"]}
    whole = {k: res["cpu_ns"][k] / total_cpu for k in BURNS}
    nall = doc["counters"]["samples"]
    for name in BURNS:
        f = funcs.get("pyburn." + name, {})
        bound = max(0.03, noise(whole[name], nall))
        t.check(f and abs(f["share"] - whole[name]) <= bound and
                f["line"] == info["lines"][name][0] and
                os.path.realpath(f["file"]) == os.path.realpath(PYBURN),
                "outside ops by Python function: pyburn.%s %.3f of %d samples, its CPU "
                "share %.3f (within %.3f), at its first line" % (
                    name, f.get("share", -1), nall, whole[name], bound))
    t.check(version in status["versions_read"] and status["enabled"] and
            status["processes"] == 1 and status["functions_named"] >= 5,
            "the status says which versions it reads and what it named: %s" % status)
    t.check(d.stop() == 0, "llmprofd exits 0")


def pprof_lines(prof_bytes):
    path = os.path.join(t.tmpdir(), "py.pb.gz")
    with open(path, "wb") as fh:
        fh.write(prof_bytes)
    top = subprocess.run(["go", "tool", "pprof", "-lines", "-top", path],
                         capture_output=True, text=True, timeout=120)
    t.check(top.returncode == 0 and re.search(r"pyburn\.burn_c \S*pyburn\.py:\d+", top.stdout),
            "go tool pprof -lines -top shows the Python functions with file:line: %s"
            % (top.stdout[-600:] + top.stderr[-200:]))
    tr = subprocess.run(["go", "tool", "pprof", "-traces", path], capture_output=True,
                        text=True, timeout=120)
    # a trace: leaf first, one frame a line
    trace = re.search(r"^\s*(?:\S+\s+)?pyburn\.burn_[abc]\n\s+pyburn\.work\n\s+pyburn\.main\n"
                      r"\s+pyburn\.<module>\n", tr.stdout, re.M)
    t.check(tr.returncode == 0 and trace, "go tool pprof -traces shows a burn function "
            "under work, main and <module>: %s" % (tr.stdout[:600] + tr.stderr[-200:]))


def flame_svg(d, pid, seconds):
    """llmprofctl flame's SVG of pid over the next seconds, started now: a function that
    waits for it and returns its frames' titles."""
    path = os.path.join(t.tmpdir(), "py.svg")
    p = subprocess.Popen([t.LLMPROFCTL, "--socket", d.socket, "flame", "--pid", str(pid),
                          "--seconds", str(seconds), "-o", path],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    t._children.append(p)

    def titles():
        _, err = p.communicate(timeout=seconds + 120)
        t.check(p.returncode == 0, "llmprofctl flame -o py.svg: %s" % err[-300:])
        root = ET.parse(path).getroot()
        ns = {"s": "http://www.w3.org/2000/svg"}
        return {g.find("s:title", ns).text.split(" (")[0]
                for g in root.findall("s:g[@class='f']", ns)}
    return titles


def gil(python=None, version="3.11"):
    python = python or torchref.PYTHON
    print("--- pyburn --gil under CPython %s: two threads contending for the GIL" % version)
    p, info = start_pyburn(python, "--gil", "--seconds", "5")
    pid = info["pid"]
    d = t.Daemon("--pid", str(pid), "--sample-hz", str(HZ))
    d.wait_ready()
    tracked_cpython(d, pid, version)
    p.stdin.write("go\n")
    p.stdin.flush()
    res = json.loads(p.stdout.readline())
    doc = d.get("/v1/processes/%d" % pid)
    threads = {th["tid"]: th for th in doc["threads"]}
    for tid, r in res["threads"].items():
        th = threads.get(int(tid), {})
        ref = r["wall_ns"] - r["cpu_ns"] - r["runq_ns"]
        t.check(th and abs(th["gil_wait_ns"] - ref) <= 0.05 * ref,
                "thread %s: %.3f s waiting for the GIL (%d waits), its clocks leave %.3f s "
                "(wall %.3f, CPU %.3f, run queue %.3f)" % (
                    tid, th.get("gil_wait_ns", -1) / 1e9, th.get("gil_waits", -1), ref / 1e9,
                    r["wall_ns"] / 1e9, r["cpu_ns"] / 1e9, r["runq_ns"] / 1e9))
    t.check(doc["python"]["gil"]["wait_ns"] >= sum(th.get("gil_wait_ns", 0)
                                                    for th in threads.values()),
            "the process's GIL wait holds its threads'")
    found = d.get("/v1/processes/%d/findings" % pid)["findings"]
    t.check(any(f["rule"] == "gil_contention" for f in found),
            "gil_contention fires: %s" % [(f["rule"], f["title"]) for f in found])
    p.stdin.close()
    p.wait(timeout=60)
    t.check(d.stop() == 0, "llmprofd exits 0")


def decoder():
    print("--- the decoder: Python, native and op frames in one stack")
    d = t.Daemon("--sample-hz", str(HZ))
    d.wait_ready()
    p = torchref.run(torchref.decoder_argv("--threads", 2, "--prompt", 16, "--new", 1500),
                     torchref.env("openblas"))
    path = "/v1/processes/%d" % p.pid
    t.poll("the decoder tracked", lambda: d.api("GET", path)[0] == 200 and
           d.get(path).get("engine") == "torch", timeout=60)
    t.poll("its samples counted", lambda: d.get(path)["torch"]["sampled"]["samples"] >= 200,
           timeout=120)
    lines = pprofref.folded(profile(d, p.pid, 4, "folded").decode())
    want = re.compile(r"^python3;.*;decoder\.generate;.*;torch\.nn\.modules\.linear\."
                      r"Linear\.forward;.*;at::_ops::linear::call;.*;sgemm_")
    t.check(any(want.match(";".join(fr)) for fr in lines),
            "a folded line reads python3;...;decoder.generate;...;Linear.forward;...;"
            "at::_ops::linear::call;...;sgemm_: %s"
            % ";".join(next((fr for fr in lines if want.match(";".join(fr))),
                            next(iter(lines), ()))))
    workers = [fr for fr in lines if len(fr) > 1 and fr[1] == "start_thread"]
    t.check(workers and not any(any(x.startswith("decoder.") for x in fr) for fr in workers),
            "the OpenMP workers' %d stacks hold no Python frame" % len(workers))
    prof = pprofref.load(profile(d, p.pid, 3))
    ops = [lb.get("op") for fr, _, lb in pprofref.frames(prof)
           if fr and fr[-1][0] == "start_thread" and lb.get("op")]
    t.check(ops, "and keep their op: %s" % collections.Counter(ops).most_common(3))
    doc = d.get(path)
    rules = [f["rule"] for f in d.get(path + "/findings")["findings"]]
    t.check("gil_contention" not in rules and doc["python"]["gil"]["wait_ns"] == 0,
            "one Python thread: no GIL wait, gil_contention silent: %s" % rules)
    p.kill()
    t.check(d.stop() == 0, "llmprofd exits 0")


def versions():
    found = others()
    if not found:
        print("no CPython 3.12 or 3.13 on this host's PATH: 3.11 alone is checked")
    for version, python in sorted(found.items()):
        burn(python, version)
        gil(python, version)


def older():
    found = others((10,))
    if not found:
        print("no CPython 3.10 on this host: the refusal of an older one is not checked")
        return
    python = found["3.10"]
    print("--- pyburn under CPython 3.10 (%s): not read, and said" % python)
    p, info = start_pyburn(python, "--seconds", "6")
    pid = info["pid"]
    d = t.Daemon("--pid", str(pid), "--sample-hz", str(HZ))
    d.wait_ready()
    d.wait_log("pid %d (python3.10) runs a CPython before 3.11" % pid, timeout=60)
    p.stdin.write("go\n")
    p.stdin.flush()
    prof = pprofref.load(profile(d, pid, 3))
    doc = d.get("/v1/processes/%d" % pid)
    status = d.get("/v1/status")["python"]
    st = subprocess.run([t.LLMPROFCTL, "--socket", d.socket, "status"], capture_output=True,
                        text=True, timeout=60)
    dump = subprocess.run([t.LLMPROFCTL, "--socket", d.socket, "dump", "--pid", str(pid)],
                          capture_output=True, text=True, timeout=60)
    p.stdin.close()
    p.wait(timeout=60)
    py = doc["python"]
    t.check(py and py["version"] is None and py["frames"].startswith(
        "not read: a CPython before 3.11"), "its CPython said not read: %s"
        % {k: py.get(k) for k in ("version", "frames")})
    t.check(status["processes"] == 0 and status["processes_unknown_version"] == 1,
            "the status counts it as of a version not read: %s" % status)
    t.check(st.returncode == 0 and re.search(r"^python +reads CPython 3\.11.*: 0 processes "
                                             r"read, 1 of a version not read", st.stdout, re.M),
            "llmprofctl status says so: %s" % st.stdout[-600:])
    t.check(dump.returncode == 0 and "python: CPython of a version not stated, frames not "
            "read: a CPython before 3.11" in dump.stdout,
            "llmprofctl dump says so: %s" % re.findall(r"^python:.*$", dump.stdout, re.M))
    samples = pprofref.frames(prof)
    pyframes = sum(c for fr, c, _ in samples if any(f[1] for f in fr))
    native = sum(c for fr, c, _ in samples
                 if any(f[0] == "_PyEval_EvalFrameDefault" for f in fr))
    n = sum(c for _, c, _ in samples)
    t.check(n > 300 and pyframes == 0 and native >= 0.9 * n,
            "its profile keeps the native frames: %d of %d samples through "
            "_PyEval_EvalFrameDefault, %d with a Python frame" % (native, n, pyframes))
    t.check(d.stop() == 0, "llmprofd exits 0")


def main():
    why = torchref.available()
    if why:
        t.check(False, "CPython 3.11 and PyTorch for this test: %s" % why)
        return
    parts = ("burn", "gil", "versions", "older", "decoder")
    if t.SANITIZED:
        # the other CPythons' frames are read by the code burn and gil run: once, plain
        parts = ("burn", "gil", "decoder")
    for part in sys.argv[1:] or parts:
        globals()[part]()


t.run(main, timeout=900)
