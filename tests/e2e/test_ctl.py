#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
"""e2e tier: llmprofctl against a private llmprofd and real processes, as a user runs it.

- `top -b` and `dump` print the numbers the API returned: percentiles, shares, token rates
  and counts exactly (formatted as the client formats them), rates between two reads of
  the API taken around the command; the second table of `top -b` covers only its interval;
- the interactive `top` in a real terminal (tmux): keys sort, reverse, select, show a
  process's threads, help and pause; it survives resizes and a daemon that goes away;
- list, status, reset and precise do what the API says they did;
- every failure a user can meet has its message and exit status: no daemon, a stale socket,
  a daemon that does not answer or is not llmprofd, the socket's or the daemon's permission,
  an unknown pid, bad usage;
- the man pages, the bash completion and `cmake --install` agree with the binaries."""
import json
import math
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
import lptest as t  # noqa: E402

NOBODY = 65534
ROOT = os.path.normpath(os.path.join(os.path.dirname(__file__), "..", ".."))
WIDTHS = [7, 9, 3, 5, 5, 5, 5, 3, 5, 5, 5, 5, 5]
HEADER = ["PID", "COMMAND", "THR", "CPU%", "TOK/S", "MS50", "MS99", "MM%", "SPIN%", "FTX/S",
          "FTX99", "RQ99", "MAJ/S"]


# --- the client's number formats, restated (client/format.c), to compare printed text ---

def fmt_dur(ns, sig=3):
    if ns is None or (isinstance(ns, float) and math.isnan(ns)):
        return "-"
    if sig == 3 and ns >= 999.5e9:
        return "%.0fs" % (ns / 1e9)
    units = [(1, "ns"), (1e3, "us"), (1e6, "ms"), (1e9, "s")]
    for i, (div, unit) in enumerate(units):
        x = ns / div
        last = i == len(units) - 1
        if not last and x >= 1000:
            continue
        if sig == 2:
            s = ("%.1f" if x < 9.95 and i > 0 else "%.0f") % x
        else:
            s = "%.3g" % x
        if not last and float(s) >= 1000:
            continue
        return s + unit


def fmt_num5(v):
    if v is None or math.isnan(v):
        return "-"
    if v < 9.995:
        return "%.2f" % v
    if v < 99.95:
        return "%.1f" % v
    if v < 99999.5:
        return "%.0f" % v
    if v < 9999.5e3:
        return "%.0fk" % (v / 1e3)
    return "%.0fM" % (v / 1e6)


def pct(v, width):
    if v is None or math.isnan(v):
        return "-"
    return ("%.1f" if v < 99.95 and width >= 5 else "%.0f") % v


def nan_if(cond, v):
    return float("nan") if cond else v


def mm_cell(doc, ggml, c):
    """MM%, with '?' where the API says its samples rest on the stack scan."""
    v = nan_if(not ggml or c["samples"] == 0, 100 * c["samples_matmul"] / max(c["samples"], 1))
    uw = (doc.get("ggml") or {}).get("unwind")
    if isinstance(uw, dict) and not uw.get("trustworthy") and not math.isnan(v):
        return "%.0f?" % min(v, 99)
    return pct(v, 3)


def expected_row(doc):
    """The first table's row for a process document: since it was tracked."""
    c, h = doc["counters"], doc["histograms"]
    dt = doc["tracked_seconds"] * 1e9
    ggml = doc.get("ggml") is not None
    empty = lambda name: h[name]["count"] == 0  # noqa: E731
    ftx = "futex_wait_generation" if c["decode_generation_tokens"] > 0 else "futex_wait"
    return {
        "PID": str(doc["pid"]),
        "COMMAND": ("[%s]" if doc["state"] == "exited" else "%s") % doc["comm"],
        "THR": str(len(doc["threads"])),
        "CPU%": pct(100 * c["oncpu_ns"] / dt, 5),
        "TOK/S": fmt_num5(nan_if(c["decode_generation_tokens"] == 0,
                                 c["decode_generation_tokens"] * 1e9 /
                                 max(c["decode_generation_ns"], 1))),
        "MS50": fmt_num5(nan_if(empty("decode_generation"), h["decode_generation"]["p50"] / 1e6)),
        "MS99": fmt_num5(nan_if(empty("decode_generation"), h["decode_generation"]["p99"] / 1e6)),
        "MM%": mm_cell(doc, ggml, c),
        "SPIN%": pct(nan_if(not ggml or c["samples"] == 0,
                            100 * c["samples_barrier"] / max(c["samples"], 1)), 5),
        "FTX/S": fmt_num5(c["futex_waits"] * 1e9 / dt),
        # A process generating tokens: the p99 of its waits inside generation decodes.
        "FTX99": fmt_dur(nan_if(empty(ftx), h[ftx]["p99"]), 2),
        "RQ99": fmt_dur(nan_if(empty("runqueue_latency"), h["runqueue_latency"]["p99"]), 2),
        "MAJ/S": fmt_num5(c["page_faults_major"] * 1e9 / dt),
    }


RATES = ("CPU%", "FTX/S", "MAJ/S")


def half_unit(text):
    """Half the unit of the last digit printed: the rounding a printed number carries."""
    return 0.5 * 10 ** -(len(text.split(".")[1]) if "." in text else 0)


def parse_table(text):
    """Each table of `top -b` output as a list of rows (dicts by header)."""
    tables, rows = [], None
    for line in text.splitlines():
        if line.split() == HEADER:
            rows = []
            tables.append(rows)
            continue
        if rows is None or not line.strip():
            rows = None if not line.strip() else rows
            continue
        cells, pos = {}, 0
        for name, w in zip(HEADER, WIDTHS):
            cells[name] = line[pos:pos + w].strip()
            pos += w + 1
        # A finding's mark is the PID cell's first character, apart from the PID.
        cells["MARK"] = cells["PID"][0] if cells["PID"][:1] in ("!", "*", "+") else ""
        cells["PID"] = cells["PID"].lstrip("!*+ ")
        rows.append(cells)
    return tables


def ctl(*args, env=None, user=None, binary=None, timeout=60, input=None):
    cmd = (user or []) + [binary or t.LLMPROFCTL] + list(args)
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env,
                       input=input)
    return p.returncode, p.stdout, p.stderr


def expect(args, code, text, **kw):
    rc, out, err = ctl(*args, **kw)
    said = err.strip() or out.strip()
    ok = rc == code and all(x in said for x in ([text] if isinstance(text, str) else text))
    t.check(ok, "llmprofctl %s -> exit %d (want %d), says %r%s"
            % (" ".join(args), rc, code, text, "" if ok else "; said: " + said[-400:]))
    return said




def strip(doc, keys=("now_ns", "tracked_seconds", "exited_seconds_ago")):
    if isinstance(doc, dict):
        return {k: strip(v, keys) for k, v in doc.items() if k not in keys}
    if isinstance(doc, list):
        return [strip(v, keys) for v in doc]
    return doc


def differ(a, b, path=""):
    """Where two JSON documents differ: the first few paths and values."""
    if isinstance(a, dict) and isinstance(b, dict):
        return [d for k in sorted(set(a) | set(b))
                for d in differ(a.get(k), b.get(k), path + "/" + k)][:5]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b))
                for d in differ(x, y, "%s/%d" % (path, i))][:5]
    return [] if a == b else ["%s: %r / %r" % (path, a, b)]


class World:
    """The private daemon and the processes every part of the test looks at."""

    def __init__(self):
        self.d = t.Daemon("--comm", "lpfixture", "--socket-mode", "0666")
        self.d.wait_ready()
        self.env = dict(os.environ, LLMPROF_SOCKET=self.d.socket)
        # G: a ggml process that decoded and now holds, alive and quiet.
        self.g = t.Lpggml("--hold", "--threads", "2", "--iters", "150", "--gen", "12")
        self.d.wait_log("pid %d (lpggml) runs ggml" % self.g.pid)
        self.g.go()
        self.g_res = self.g.line()
        # X: the same, run to its exit.
        x = t.Lpggml("--iters", "50", "--gen", "5")
        self.x_pid = x.pid
        self.d.wait_log("pid %d (lpggml) runs ggml" % x.pid)
        x.finish()
        self.d.wait_log("pid %d (lpggml) exited" % x.pid)
        # F1, F2: futex waiters that stay with their threads parked (found by --comm).
        self.f1 = t.Fixture("--futex-threads", "3", "--futex-waits", "4", "--futex-ms", "2",
                            "--hold")
        self.f2 = t.Fixture("--futex-threads", "1", "--futex-waits", "6", "--futex-ms", "3",
                            "--hold")
        for f in (self.f1, self.f2):
            t.poll("pid %d tracked" % f.pid, lambda: self.tracked(f.pid))
            f.go()
            f.result()

    def tracked(self, pid):
        status, _, _ = self.d.api("GET", "/v1/processes/%d" % pid)
        return status == 200

    def doc(self, pid):
        return self.d.get("/v1/processes/%d" % pid)


def check_row(row, before, after, what):
    """A printed row against the API's documents read just before and after it."""
    lo, hi = expected_row(before), expected_row(after)
    bad = []
    for name in HEADER:
        if name in RATES and row[name] != "-":
            v, tol = float(row[name]), half_unit(row[name])
            a, b = float(lo[name]), float(hi[name])
            if not (min(a, b) - tol - half_unit(lo[name]) <= v <= max(a, b) + tol +
                    half_unit(hi[name])):
                bad.append("%s %s not within %s..%s" % (name, row[name], lo[name], hi[name]))
        elif row[name] not in (lo[name], hi[name]):
            bad.append("%s %r, API says %r" % (name, row[name], lo[name]))
    t.check(not bad, "%s: the row is the API's numbers %s" % (what, bad or
                                                             " ".join(row[h] for h in HEADER)))


def test_batch(w):
    print("--- top -b: the numbers the API returned")
    pids = [w.g.pid, w.f1.pid, w.f2.pid, w.x_pid]
    before = {p: w.doc(p) for p in pids}
    # -p: only the test's processes (others on the host may run ggml too).
    only = sum((["-p", str(p)] for p in pids), [])
    rc, out, err = ctl("top", "-b", "-n", "1", "-a", *only, env=w.env)
    after = {p: w.doc(p) for p in pids}
    t.check(rc == 0, "top -b -n 1 exits 0 (%s)" % err.strip())
    tables = parse_table(out)
    t.check(len(tables) == 1, "one table")
    lines = out.splitlines()
    t.check(lines[0].startswith("llmprofctl top - ") and lines[1].startswith("host  load ") and
            "since tracked" in lines[2],
            "title, host line, then the first table runs since tracking began: %r" % lines[:3])
    t.check(all(len(line) <= 79 for line in lines), "every line fits 80 columns")
    rows = {int(r["PID"]): r for r in tables[0]} if tables else {}
    t.check(sorted(rows) == sorted(pids), "a row per process, exited ones with -a: %s"
            % sorted(rows))
    for p in pids:
        if p in rows:
            check_row(rows[p], before[p], after[p], "pid %d" % p)
    g = rows.get(w.g.pid, {})
    t.check(g.get("TOK/S") not in (None, "-") and g.get("MS99") not in (None, "-"),
            "the ggml process shows tokens/s and ms per token: %s %s"
            % (g.get("TOK/S"), g.get("MS99")))
    cpu = [float(r["CPU%"]) for r in tables[0]] if tables else []
    t.check(cpu == sorted(cpu, reverse=True), "sorted by CPU%%, busiest first: %s" % cpu)

    rc, out, _ = ctl("top", "-b", "-n", "1", *only, env=w.env)
    shown = [int(r["PID"]) for r in parse_table(out)[0]]
    t.check(w.x_pid not in shown and w.g.pid in shown, "without -a, exited processes are not shown")
    rc, out, _ = ctl("top", "-b", "-n", "1", "-s", "PID", "-p", str(w.f2.pid), "-p",
                     str(w.f1.pid), env=w.env)
    shown = [int(r["PID"]) for r in parse_table(out)[0]]
    t.check(shown == sorted([w.f1.pid, w.f2.pid]), "-p selects, -s PID sorts: %s" % shown)
    rc, out, _ = ctl("top", "-b", "-n", "1", "-H", "-p", str(w.f1.pid), env=w.env)
    tids = sorted(int(x) for x in os.listdir("/proc/%d/task" % w.f1.pid))
    printed = sorted(int(line[:7].lstrip("!*+")) for line in out.splitlines()[4:]
                     if line[:7].lstrip("!*+").strip().isdigit())
    t.check(printed == sorted([w.f1.pid] + tids), "-H adds a row per thread: %s, tids %s"
            % (printed, tids))

    rc, out, _ = ctl("top", "-b", "-n", "1", "-a", "-O", "-p", str(w.x_pid), env=w.env)
    g = w.doc(w.x_pid)["ggml"]
    want = ["        op %-40s %5.1f%% of its samples"
            % (o["op"], 100.0 * o["samples"] / g["op_groups"]["samples"]) for o in g["ops"]][:5]
    got = [l for l in out.splitlines() if l.startswith("        op ")]
    t.check(rc == 0 and want and got == want,
            "-O: the leading ops under the process, shares of the API's op samples: %s" % got)

    print("--- top -b: the second table covers its interval only")
    f3 = t.Fixture("--futex-threads", "1", "--futex-waits", "20", "--futex-ms", "5", "--hold")
    t.poll("pid %d tracked" % f3.pid, lambda: w.tracked(f3.pid))
    doc0 = w.doc(f3.pid)
    p = subprocess.Popen([t.LLMPROFCTL, "top", "-b", "-n", "2", "-d", "2", "-p", str(f3.pid)],
                         stdout=subprocess.PIPE, text=True, env=w.env)
    t._children.append(p)
    first = []
    while not (first and first[-1].strip().startswith(str(f3.pid))):
        line = p.stdout.readline()
        if not line:
            break
        first.append(line)
    f3.go()  # after the first read, well before the second
    f3.result()
    # With --hold the fixture answers before its waiter has finished: wait for the count.
    doc1 = t.poll("20 futex waits counted", lambda: (lambda d: d if d["counters"]["futex_waits"]
                  - doc0["counters"]["futex_waits"] >= 20 else None)(w.doc(f3.pid)))
    rest = p.stdout.read()
    p.wait(timeout=30)
    tables = parse_table("".join(first) + rest)
    t.check(len(tables) == 2 and "every 2.0s" in rest, "two tables, the second per interval")
    row = tables[-1][0] if len(tables) == 2 and tables[-1] else {}
    # 20 waits in an interval of 2 s plus the time the reads take.
    ftxs = float(row.get("FTX/S", "0").replace("-", "0"))
    t.check(20 / 2.6 <= ftxs <= 20 / 2.0, "FTX/S is 20 waits over the interval: %s" % ftxs)
    h0, h1 = doc0["histograms"]["futex_wait"], doc1["histograms"]["futex_wait"]
    b0 = {b[0]: b[2] for b in h0["buckets"]}
    diff = [(b[0], b[1], b[2] - b0.get(b[0], 0)) for b in h1["buckets"]]
    diff = [b for b in diff if b[2] > 0]
    rank, cum, p99 = math.ceil(0.99 * sum(b[2] for b in diff)), 0, None
    for lo, hi, n in diff:
        cum += n
        if cum >= rank:
            p99 = lo + (hi - lo) // 2
            if lo <= h1["max"] < p99:
                p99 = h1["max"]
            break
    waits = doc1["counters"]["futex_waits"] - doc0["counters"]["futex_waits"]
    t.check(row.get("FTX99") == fmt_dur(p99, 2) and sum(b[2] for b in diff) == waits >= 20,
            "FTX99 is the interval's p99 from the API's buckets: %s, want %s (%d waits in "
            "the buckets, %d counted)" % (row.get("FTX99"), fmt_dur(p99, 2),
                                          sum(b[2] for b in diff), waits))
    t.check(row.get("CPU%") is not None and float(row["CPU%"]) < 5,
            "a process that only waited shows little CPU: %s" % row.get("CPU%"))
    f3.release()


def test_dump(w):
    print("--- dump: every histogram, counter and thread the API returned")
    doc = w.doc(w.x_pid)
    rc, fine, err = ctl("dump", "--pid", str(w.x_pid), "--fine", env=w.env)
    t.check(rc == 0, "dump --fine exits 0 (%s)" % err.strip())
    lines = fine.splitlines()
    t.check(lines[0].startswith("pid %d lpggml, exited, uid 0, found by ggml" % w.x_pid),
            "the first line names the process: %r" % lines[0])
    for name, value in doc["counters"].items():
        if value is None:
            t.check(re.search(r"^  %s +- +not collected$" % re.escape(name), fine, re.M),
                    "counter %s, not collected, says so" % name)
            continue
        t.check(re.search(r"^  %s +%d\b" % (re.escape(name), value), fine, re.M) is not None,
                "counter %s = %d printed" % (name, value))
    for name, h in doc["histograms"].items():
        if h["count"] == 0:
            t.check(("%s: no values" % name) in fine, "empty histogram %s says so" % name)
            continue
        head = "%s: count %d  sum %s  max %s  p50 %s  p90 %s  p99 %s" % (
            name, h["count"], fmt_dur(h["sum"]), fmt_dur(h["max"]), fmt_dur(h["p50"]),
            fmt_dur(h["p90"]), fmt_dur(h["p99"]))
        t.check(head in fine, "%s: count, sum, max and percentiles as the API's (%s)"
                % (name, head))
        # The buckets follow the column header: between it and the head, a line saying
        # what the histogram measures, and one when its figures come from sampled
        # stretches (offcpu_sampled_threads > 0: a busy host's daemon under ASan).
        at = lines.index(head) if head in lines else 0
        start = next((i + 1 for i in range(at, len(lines))
                      if re.match(r"\s+from\s+to\s+count\s", lines[i])), 0)
        got = [re.match(r"\s*(\S+) -> (\S+)\s+(\d+) \|", l).groups() for l in
               lines[start:start + len(h["buckets"])] if re.match(r"\s*\S+ -> \S+\s+\d+ \|", l)]
        want = [(fmt_dur(lo), "inf" if hi is None else fmt_dur(hi), str(n))
                for lo, hi, n in h["buckets"]]
        t.check(got == want, "%s: every bucket with its bounds and count (%d)"
                % (name, len(want)))
    rc, grouped, _ = ctl("dump", "--pid", str(w.x_pid), env=w.env)
    h = doc["histograms"]["runqueue_latency"]
    sums = {}
    for lo, hi, n in h["buckets"]:
        k = lo.bit_length() - 1
        sums[k] = sums.get(k, 0) + n
    rows = re.findall(r"^\s*(\S+) -> (\S+)\s+(\d+) \|", grouped.split("runqueue_latency:")[1]
                      .split("offcpu_blocked")[0], re.M)
    by = {r[0]: int(r[2]) for r in rows}
    # k = -1 is the row of 0 ns (a wait the kernel counted as none).
    t.check(all(by.get(fmt_dur(1 << k if k >= 0 else 0)) == n for k, n in sums.items()) and
            sum(by.values()) == h["count"],
            "default rows are exact sums per power of two (%d rows)" % len(rows))
    obj = doc["ggml"]["objects"][0]
    t.check(obj["path"] in grouped and "matmul   ggml_compute_forward_mul_mat" in grouped and
            "barrier  ggml_barrier" in grouped and "decode   llama_decode" in grouped and
            "llama_decode probes: %s" % obj["decode_probes"] in grouped,
            "the ggml object, the functions found in it and the probes")
    sites = ", ".join("%s +%d (%s)" % (s["function"], s["offset"], s["instruction"])
                      for s in obj["probe_sites"])
    t.check(obj["probe_sites"] and "probe sites " + sites + "\n" in grouped,
            "every function's probe site as the API gives it: %s" % sites)
    t.check(("generation %d" % doc["ggml"]["tokens"]["generation"]["tokens"]) in grouped,
            "tokens as the API counted them (%d)" % doc["ggml"]["tokens"]["generation"]["tokens"])
    t.check(" ".join(doc["ggml"]["missing"]) in grouped, "the configured names found nowhere")
    g = doc["ggml"]
    t.check(g["ops"] and all(
        re.search(r"^    %-28s %-11s %5.1f%% %8d " % (re.escape(o["op"]), o["group"],
                                                      100 * o["share"], o["samples"]),
                  grouped, re.M) for o in g["ops"]),
            "top operators: a row per op with the API's group, share and samples: %s"
            % [(o["op"], o["samples"]) for o in g["ops"]])
    shown = ", ".join("%s %.1f%%" % (k.replace("_", " "), 100 * v)
                      for k, v in g["op_groups"]["share"].items() if v > 0)
    t.check("  groups      " + shown + "\n" in grouped,
            "the op groups with samples, as the API's: %s" % shown)
    t.check(("      ops: %d op functions; attribution: %s" % (obj["op_functions"],
                                                            obj["op_attribution"])) in grouped,
            "each object's op functions and how they are attributed")

    rc, out, _ = ctl("dump", "--pid", str(w.f1.pid), env=w.env)
    fdoc = w.doc(w.f1.pid)
    for th in fdoc["threads"]:
        t.check(re.search(r"^\s+%d %-15s" % (th["tid"], re.escape(th["comm"])), out, re.M)
                is not None, "thread %d has its row" % th["tid"])
    for word in fdoc["futex"]["top"]:
        t.check(re.search(r"^\s+%s\s+%d " % (word["uaddr"], word["waits"]), out, re.M)
                is not None, "futex word %s with %d waits" % (word["uaddr"], word["waits"]))
    t.check("ggml: none mapped" in out, "a process without ggml says so")

    rc, out, _ = ctl("dump", "--pid", str(w.x_pid), "--json", env=w.env)
    status, api, _ = w.d.api("GET", "/v1/processes/%d" % w.x_pid)
    t.check(rc == 0 and strip(json.loads(out)) == strip(api),
            "--json prints the API document unchanged")


def test_commands(w):
    print("--- list, status, reset, precise")
    rc, out, _ = ctl("list", env=w.env)
    t.check(rc == 0 and out.splitlines()[0].split()[:3] == ["PID", "STATE", "UID"], "list")
    for pid, state in ((w.g.pid, "running"), (w.f1.pid, "running"), (w.x_pid, "exited")):
        t.check(re.search(r"^\s*%d %s " % (pid, state), out, re.M) is not None,
                "list shows %d %s" % (pid, state))
    rc, out, _ = ctl("list", "--pids", env=w.env)
    api = w.d.get("/v1/processes")
    t.check(sorted(int(x) for x in out.split()) == sorted(p["pid"] for p in api["processes"]),
            "list --pids: the pids the API lists")
    rc, out, _ = ctl("list", "--json", env=w.env)
    # Findings come and go with the window between the two reads, as the clock does.
    keys = ("now_ns", "tracked_seconds", "exited_seconds_ago", "findings")
    a, b = strip(json.loads(out), keys), strip(w.d.get("/v1/processes"), keys)
    t.check(a == b, "list --json unchanged%s" % ("" if a == b else ": %s" % differ(a, b)))
    rc, out, _ = ctl("status", env=w.env)
    st = w.d.get("/v1/status")
    t.check(rc == 0 and out.startswith("llmprofd %s (API 1" % st["version"]) and
            ("found: " + " ".join(st["kernel_features"]["found"])) in out and
            ("%d running" % st["processes"]["running"]) in out and "lost         nothing" in out,
            "status: version, features found, processes, nothing lost")
    rc, out, _ = ctl("status", "--json", env=w.env)
    t.check(rc == 0 and json.loads(out)["pid"] == st["pid"], "status --json")

    rc, out, _ = ctl("reset", "--pid", str(w.f1.pid), env=w.env)
    c = w.doc(w.f1.pid)["counters"]
    t.check(rc == 0 and ("pid %d" % w.f1.pid) in out and c["futex_waits"] == 0,
            "reset zeroes the counters: %s" % out.strip())
    rc, out, _ = ctl("precise", "--pid", str(w.g.pid), "--seconds", "30", "--no-wait",
                     env=w.env)
    t.check(rc == 0 and re.search(r"precise mode (on|attaching its probes); ?.*for 30 s", out)
            and [p for p in w.d.get("/v1/processes")["processes"] if p["pid"] == w.g.pid][0]
            ["precise_active"], "precise --seconds 30 --no-wait switches it on: %s"
            % out.strip())
    t.poll("the probes on", lambda: w.doc(w.g.pid)["ggml"]["precise"]["state"] == "on")
    rc, out, _ = ctl("precise", "--pid", str(w.g.pid), "--off", env=w.env)
    t.check(rc == 0 and "precise mode off" in out and
            not w.doc(w.g.pid)["ggml"]["precise"]["active"], "precise --off")

    # As perf stat -p PID -- sleep S: it waits for the window and prints what it measured.
    # The window lasts what was asked from when the probes are on: held to 0.2 s, the
    # loop's timer and the client's polling (0.1 s) both within it.
    before = w.doc(w.g.pid)["ggml"]["precise"]
    rc, out, err = ctl("precise", "--pid", str(w.g.pid), "--seconds", "1.5", env=w.env)
    after = w.doc(w.g.pid)["ggml"]["precise"]
    m = re.search(r"precise window of ([\d.]+) s, probes on (\d+) functions", out)
    t.check(rc == 0 and m and abs(float(m.group(1)) - 1.5) <= 0.2 and int(m.group(2)) > 0
            and after["windows"] == before["windows"] + 1
            and abs(after["seconds"] - before["seconds"] - float(m.group(1))) < 0.01
            and "matmul" in out and "barrier" in out and not after["active"],
            "precise --seconds 1.5 waits and prints the window it measured: %r %r"
            % (out[:300], err[-200:]))
    # Ctrl-C ends the window early and prints it.
    p = subprocess.Popen([t.LLMPROFCTL, "precise", "--pid", str(w.g.pid), "--seconds", "60"],
                         env=w.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    t._children.append(p)
    t.poll("the window open", lambda: w.doc(w.g.pid)["ggml"]["precise"]["state"] == "on")
    time.sleep(0.3)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=30)
    m = re.search(r"precise window of ([\d.]+) s", out)
    t.check(p.returncode == 0 and m and float(m.group(1)) < 10
            and not w.doc(w.g.pid)["ggml"]["precise"]["active"],
            "Ctrl-C ends the window and prints it: %r %r" % (out[:200], err[-200:]))
    expect(["precise", "--pid", str(w.f1.pid)], 1, "ggml", env=w.env)
    expect(["precise", "--pid", str(w.x_pid)], 1, "exited", env=w.env)


def silent_server(path, answer=None):
    """A socket that accepts and either says nothing or says answer, then closes."""
    s = socket.socket(socket.AF_UNIX)
    s.bind(path)
    s.listen(8)

    def serve():
        while True:
            try:
                c, _ = s.accept()
            except OSError:
                return
            if answer is None:
                time.sleep(5)
            else:
                c.recv(4096)
                c.sendall(answer)
            c.close()
    threading.Thread(target=serve, daemon=True).start()
    return s


def test_errors(w):
    print("--- errors: what failed, what to do, and the exit status")
    tmp = t.tmpdir("llmprofctl-err-")
    missing = os.path.join(tmp, "nothing.sock")
    # The hint names the way to start it on this host: systemctl only under systemd.
    start = ("systemctl start llmprofd" if os.path.isdir("/run/systemd/system")
             else "As root, apart from this shell (no systemd here): 'setsid -f llmprofd "
             "--foreground")
    expect(["--socket", missing, "list"], 3,
           ["cannot connect to llmprofd at %s: no such socket" % missing, start])
    expect(["list"], 3, missing, env=dict(os.environ, LLMPROF_SOCKET=missing))
    rc, _, _ = ctl("--socket", w.d.socket, "list", env=dict(os.environ, LLMPROF_SOCKET=missing))
    t.check(rc == 0, "--socket wins over $LLMPROF_SOCKET")
    rc, _, _ = ctl("list", "--socket", w.d.socket)
    t.check(rc == 0, "--socket after the command works too")
    stale = os.path.join(tmp, "stale.sock")
    s = socket.socket(socket.AF_UNIX)
    s.bind(stale)
    s.close()
    expect(["--socket", stale, "status"], 3, ["connection refused", start])
    quiet = os.path.join(tmp, "quiet.sock")
    q = silent_server(quiet)
    expect(["--socket", quiet, "--timeout", "1", "status"], 3, "did not answer within 1 s")
    q.close()
    other = os.path.join(tmp, "other.sock")
    o = silent_server(other, b"SSH-2.0-OpenSSH_9.2\r\n")
    expect(["--socket", other, "status"], 5, "not HTTP")
    o.close()

    pid = t.unused_pid()
    for cmd in (["dump", "--pid", str(pid)], ["reset", "--pid", str(pid)],
                ["precise", "--pid", str(pid)]):
        expect(cmd, 1, "pid %d is not tracked by llmprofd" % pid, env=w.env)

    print("--- errors: permissions")
    binary = t.copy_for_others(t.LLMPROFCTL)
    nobody = t.as_user(NOBODY)
    expect(["reset", "--pid", str(w.g.pid)], 4, "needs root or membership of group 'llmprof'",
           env=w.env, user=nobody, binary=binary)
    # Another user's process reads as not tracked: a 403 would say that it is one.
    expect(["dump", "--pid", str(w.g.pid)], 1, "pid %d is not tracked by llmprofd" % w.g.pid,
           env=w.env, user=nobody, binary=binary)
    rc, out, _ = ctl("list", env=w.env, user=nobody, binary=binary)
    t.check(rc == 0 and len(out.splitlines()) == 1, "nobody lists none of root's processes")
    has_group = os.system("getent group llmproftest >/dev/null") == 0
    if not has_group:
        os.system("groupadd -g 4242 llmproftest")
    try:
        shutil.chown(w.d.socket, group="llmproftest")
        os.chmod(w.d.socket, 0o660)
        expect(["list"], 4, ["permission denied on %s" % w.d.socket, "group 'llmproftest'",
                             "usermod -aG llmproftest"], env=w.env, user=nobody, binary=binary)
    finally:
        os.chmod(w.d.socket, 0o666)
        if not has_group:
            os.system("groupdel llmproftest")

    print("--- errors: usage")
    expect(["dump"], 2, "--pid is required", env=w.env)
    expect(["dump", "--pid", "abc"], 2, "--pid wants a process id, not 'abc'", env=w.env)
    expect(["dump", "--pid"], 2, "option '--pid' needs a value", env=w.env)
    expect(["dump", "--pid", "1", "--bogus"], 2, "unknown option '--bogus'", env=w.env)
    expect(["frobnicate"], 2, "unknown command 'frobnicate'")
    expect(["dumpp"], 2, "unknown command 'dumpp'; did you mean 'dump'?")
    expect(["x\x1b[2J"], 2, "unknown command 'x\\x1b[2J'")
    expect([], 2, "Usage: llmprofctl")
    expect(["top", "-n", "0"], 2, "--iterations wants a whole number from 1", env=w.env)
    # The range a message names holds the value refused: not "from 0" when 0 is refused.
    expect(["record", "--pid", "1", "--seconds", "0"], 2,
           "--seconds wants seconds above 0, at most 60, not '0'", env=w.env)
    expect(["diff", "a", "b", "--threshold", "x"], 2,
           "--threshold wants a percentage from 0 to 1000", env=w.env)
    expect(["top", "-s", "nope"], 2, "--sort wants a column name", env=w.env)
    expect(["top", "-d", "0"], 2, "--delay wants seconds from 0.1", env=w.env)
    expect(["precise", "--pid", "1", "--off", "--seconds", "3"], 2, "exclude each other")
    expect(["--timeout", "x", "list"], 2, "--timeout wants seconds")
    expect(["list", "stray"], 2, "unexpected argument 'stray'")
    rc, out, _ = ctl("--help")
    t.check(rc == 0 and "Examples:" in out and "Exit status:" in out and
            all(c in out for c in ("top", "dump", "list", "status", "reset", "precise", "record",
                                   "doctor", "diff")),
            "--help: commands, examples, exit statuses")
    for cmd in ("top", "dump", "list", "status", "reset", "precise", "record", "doctor", "diff",
                "ops", "requests"):
        rc, out, _ = ctl(cmd, "--help")
        rc2, out2, _ = ctl("help", cmd)
        t.check(rc == 0 and rc2 == 0 and out == out2 and "Examples:" in out and
                out.startswith("Usage: llmprofctl %s" % cmd), "%s --help, with examples" % cmd)
    rc, out, _ = ctl("--version")
    t.check(rc == 0 and out.startswith("llmprofctl ") and "API 1" in out, "--version")


class Tmux:
    """A private tmux server running one command in a window of 80x24 (or as given)."""

    def __init__(self, cmd, x=80, y=24):
        self.name = "llmprofctl-test-%d-%d" % (os.getpid(), x)
        conf = t.tmpfile("set -g remain-on-exit on\nset -g status off\n", ".conf")
        self.base = ["tmux", "-L", self.name, "-f", conf]
        subprocess.run(self.base + ["new-session", "-d", "-s", "top", "-x", str(x), "-y",
                                    str(y), cmd], check=True, timeout=20)

    def tmux(self, *args):
        return subprocess.run(self.base + list(args), capture_output=True, text=True,
                              timeout=20).stdout

    def screen(self):
        return self.tmux("capture-pane", "-p", "-t", "top")

    def reversed_text(self, line_no):
        """The text of a screen line shown in reverse video (SGR 7), as tmux captures it
        with its attributes."""
        line = self.tmux("capture-pane", "-p", "-e", "-t", "top").splitlines()[line_no]
        out, on = [], False
        for part in re.split(r"(\x1b\[[0-9;]*m)", line):
            if part.startswith("\x1b["):
                codes = part[2:-1].split(";")
                if codes in ([""], ["0"]):
                    on = False
                elif "7" in codes:
                    on = True
                elif "27" in codes:
                    on = False
            elif on:
                out.append(part)
        return "".join(out)

    def keys(self, *keys, literal=False):
        self.tmux("send-keys", "-t", "top", *((["-l"] if literal else []) + list(keys)))

    def wait(self, what, fn, timeout=15):
        last = [""]

        def seen():
            last[0] = self.screen()
            return fn(last[0])
        try:
            return t.poll(what, seen, timeout)
        except t.Timeout:
            print("screen:\n" + last[0])
            raise

    def dead(self):
        return self.tmux("display", "-p", "-t", "top", "#{pane_dead}").strip() == "1"

    def close(self):
        subprocess.run(self.base + ["kill-server"], capture_output=True, timeout=20)


def header_line(screen):
    return next(i for i, l in enumerate(screen.splitlines()) if l.split()[:2] == ["PID", "COMMAND"])


def order(screen):
    """The pids of the process rows, top to bottom."""
    lines = screen.splitlines()
    start = next((i for i, l in enumerate(lines) if l.split()[:2] == ["PID", "COMMAND"]), None)
    if start is None:
        return []
    return [int(l[:7].lstrip("!*+")) for l in lines[start + 1:]
            if l[:7].lstrip("!*+").strip().isdigit() and l[8:9] != " "]


def thread_rows(screen):
    return [int(l[:7]) for l in screen.splitlines() if l[:7].strip().isdigit() and
            l[8:10] == "  "]


def test_interactive(w):
    print("--- interactive top in tmux: sort, reverse, select, threads, help, pause, resize")
    pids = sorted([w.g.pid, w.f1.pid, w.f2.pid])
    env = " ".join("%s=%s" % (k, os.environ[k]) for k in ("ASAN_OPTIONS", "UBSAN_OPTIONS")
                   if k in os.environ)
    errors = os.path.join(w.d.dir, "top.stderr")
    status = os.path.join(w.d.dir, "top.status")
    tm = Tmux("env %s LLMPROF_SOCKET=%s %s top -d 0.5 %s 2>%s; echo $? >%s" % (
        env, w.d.socket, t.LLMPROFCTL, " ".join("-p %d" % p for p in pids), errors, status))
    try:
        tm.wait("all three processes on screen", lambda s: sorted(order(s)) == pids)
        tm.wait("the first refresh", lambda s: "every 0.5s" in s.splitlines()[2])
        t.check(tm.screen().splitlines()[1].startswith("host  load "),
                "the host line under the title: %r" % tm.screen().splitlines()[1])
        t.check(True, "the second screen covers the last interval")
        header = next(l for l in tm.screen().splitlines() if l.split()[:2] == ["PID", "COMMAND"])
        t.check(header.rstrip() == " ".join(h.rjust(wd) if h != "COMMAND" else h.ljust(wd)
                                            for h, wd in zip(HEADER, WIDTHS)).rstrip(),
                "the whole header fits 80 columns: %r" % header)
        tm.keys("p")
        tm.wait("pid order", lambda s: order(s) == pids and "sort PID" in s)
        t.check(True, "p sorts by PID: %s" % pids)
        hl = header_line(tm.screen())
        t.check(tm.reversed_text(hl).strip() == "PID",
                "the sort column's heading is shown reversed: %r" % tm.reversed_text(hl))
        tm.keys("W")
        tm.wait("the word that WORKLOAD is hidden",
                lambda s: "W: WORKLOAD is not shown at 80 columns" in s and "sort PID" in s)
        t.check(True, "W at 80 columns, where WORKLOAD is hidden: said so, the sort kept")
        tm.keys("R")
        tm.wait("reversed", lambda s: order(s) == pids[::-1] and "(reversed)" in s)
        t.check(True, "R reverses the order")
        tm.keys("R")
        tm.keys(">", ">", literal=True)
        threads = {p: len(w.doc(p)["threads"]) for p in pids}
        by_thr = sorted(pids, key=lambda p: (-threads[p], p))
        tm.wait("THR order", lambda s: order(s) == by_thr and "sort THR" in s)
        t.check(by_thr[0] == w.f1.pid, "> > moves the sort to THR: %s (threads %s)"
                % (by_thr, threads))
        tm.keys("k", "k", "k", "H")
        tids = sorted(int(x) for x in os.listdir("/proc/%d/task" % w.f1.pid))
        tm.wait("the threads of the first process", lambda s: sorted(thread_rows(s)) == tids)
        t.check(True, "k selects the first row; H shows its %d threads" % len(tids))
        tm.keys("H")
        tm.wait("threads hidden", lambda s: not thread_rows(s))
        tm.keys("h")
        tm.wait("help", lambda s: "llmprofctl top: keys" in s and "run-queue latency" in s)
        t.check(all(re.search(r"^\s+\S?\s+%s " % re.escape(c), tm.screen(), re.M)
                    for c in HEADER + ["WTOK/S", "MODEL", "WORKLOAD"]),
                "the help fits 24 rows: a line for every column, WORKLOAD the last:\n%s"
                % tm.screen())
        tm.keys("x")
        tm.wait("help closed", lambda s: "llmprofctl top: keys" not in s and order(s))
        t.check(True, "h shows the keys and columns; any key returns")
        tm.keys("Space")
        tm.wait("paused", lambda s: "[paused]" in s)
        tm.keys("Space")
        tm.wait("resumed", lambda s: "[paused]" not in s and order(s))
        t.check(True, "space pauses and resumes")
        tm.tmux("resize-window", "-t", "top", "-x", "50", "-y", "8")
        tm.wait("a narrow window", lambda s: max(len(l) for l in s.splitlines()) <= 50 and
                "PID COMMAND" in s)
        t.check(not tm.dead(), "a 50x8 window: still running")
        tm.tmux("resize-window", "-t", "top", "-x", "80", "-y", "24")
        tm.wait("back to 80 columns", lambda s: any(l.rstrip().endswith("MAJ/S") for l in
                                                    s.splitlines()) and len(order(s)) == 3)
        t.check(True, "resized back, the table is whole again")
        w.d.stop()
        tm.wait("the daemon gone", lambda s: ("cannot connect to llmprofd at %s" % w.d.socket)
                in s and len(order(s)) == 3)
        flat = "".join(tm.screen().split())
        t.check("orpoint--socketor$LLMPROF_SOCKETatitssocket" in flat,
                "when the daemon goes away, the whole reason shows (wrapped, not cut at 80 "
                "columns) and the last rows stay")
        tm.keys("q")
        code = t.poll("top to quit", lambda: os.path.exists(status) and open(status).read(), 20)
        t.check(code.strip() == "0", "q quits with status 0 (%s) %s" % (code.strip(),
                                                                     open(errors).read()))
    finally:
        tm.close()


def test_wide():
    print("--- top at 200x50: whole command names, the wider columns, ops under their name")
    work = t.tmpdir("llmprofctl-wide-")
    exe = os.path.join(work, "lpggml-long-name")  # comm: its first 15 characters
    shutil.copy(t.LPGGML, exe)
    lib = os.path.join(os.path.dirname(os.path.realpath(t.LPGGML)), "liblpggml.so")
    g = t.Lpggml("--hold", "--iters", "100", "--gen", "10", "--lib", lib,
                 wrap=lambda argv: [exe] + argv[1:])
    d = t.Daemon("--pid", str(g.pid))
    d.wait_ready()
    d.wait_log("pid %d (lpggml-long-nam) runs ggml" % g.pid)
    g.go()
    g.line()
    t.poll("its ops sampled", lambda: d.get("/v1/processes/%d" % g.pid)["ggml"]["ops"])
    tm = Tmux("LLMPROF_SOCKET=%s %s top -d 0.5 -p %d" % (d.socket, t.LLMPROFCTL, g.pid),
              x=200, y=50)
    try:
        head = tm.wait("the table", lambda s: next((l for l in s.splitlines()
                                                     if l.split()[:2] == ["PID", "COMMAND"]),
                                                    None))
        wide = ["WTOK/S", "MODEL", "WORKLOAD", "REQ/S", "TTFT99", "TPOT99", "OCC"]
        t.check(head.split()[-len(wide):] == wide,
                "200 columns add %s: %r" % (", ".join(wide), head.split()))
        row = tm.wait("its row", lambda s: next((l for l in s.splitlines()
                                                  if l[:7].lstrip("!*+").strip() == str(g.pid)),
                                                 None))
        t.check(row[8:23] == "lpggml-long-nam" and row[23] == " ",
                "COMMAND shows the whole name where there is room: %r" % row[8:24])
        tm.keys("W")
        tm.wait("sorted by WORKLOAD", lambda s: "sort WORKLOAD" in s)
        t.check(tm.reversed_text(header_line(tm.screen())).strip() == "WORKLOAD",
                "W sorts by WORKLOAD, shown at 200 columns, its heading reversed")
        tm.keys("O")
        ops = tm.wait("the ops under the process",
                      lambda s: [l for l in s.splitlines() if l.startswith("        op ")])
        doc = d.get("/v1/processes/%d" % g.pid)["ggml"]
        first = doc["ops"][0]
        want = "        op %-40s %5.1f%% of its samples" % (
            first["op"], 100.0 * first["samples"] / doc["op_groups"]["samples"])
        t.check(ops[0] == want, "O: the leading op, its share named as one: %r (want %r)"
                % (ops[0], want))
        tm.keys("q")
    finally:
        tm.close()
        g.proc.stdin.close()
        g.proc.wait(timeout=20)
        d.stop()
        shutil.rmtree(work, ignore_errors=True)


def test_config_file():
    print("--- etc/llmprofd.conf: every setting of --help, each default the daemon's own")
    helptext = subprocess.run([t.LLMPROFD, "--help"], capture_output=True, text=True).stdout
    cli_only = {"once", "seconds", "config", "check", "foreground", "help", "version",
                "unix-socket", "web.config.file"}  # the last two: curl's, and an alias
    opts = {o[2:] for o in re.findall(r"--[a-z][a-z.-]+", helptext)}
    opts = {o[3:] if o.startswith("no-") else o for o in opts} - cli_only
    conf = open(os.path.join(ROOT, "etc", "llmprofd.conf")).read()
    lines = re.findall(r"^# ([a-z][a-z-]*) = (.*?)(?:\s{2,}\((.*)\))?$", conf, re.M)
    named = {name for name, _, _ in lines}
    t.check(opts == named, "the file names every setting of --help: missing %s, unknown %s"
            % (sorted(opts - named), sorted(named - opts)))
    d = t.Daemon()
    d.wait_ready()
    cfg = d.get("/v1/status")["config"]
    d.stop()
    given = {"socket", "state-directory", "metrics-address", "discover-cgroup"}  # by t.Daemon
    bad = []
    for name, value, note in lines:
        if name in given or "for example" in (note or ""):
            continue
        have = cfg.get(name)
        if isinstance(have, bool):
            have = "yes" if have else "no"
        elif isinstance(have, list):
            have = ", ".join(have)
        elif isinstance(have, (int, float)):
            have = "%g" % have
        if have != value:
            bad.append((name, value, have))
    t.check(not bad, "each default the file shows is the daemon's (file, daemon): %s" % bad)


def test_docs_and_install():
    print("--- man pages, bash completion, cmake --install")
    for page in ("llmprofctl.1", "llmprofd.8"):
        p = subprocess.run(["groff", "-t", "-man", "-ww", "-z", os.path.join(ROOT, "man", page)],
                           capture_output=True, text=True)
        t.check(p.returncode == 0 and not p.stderr, "%s renders without warnings %s"
                % (page, p.stderr.strip()[:200]))
    daemon_opts = set(re.findall(r"--[a-z][a-z-]+", subprocess.run(
        [t.LLMPROFD, "--help"], capture_output=True, text=True).stdout))
    page = open(os.path.join(ROOT, "man", "llmprofd.8")).read().replace("\\-", "-")
    t.check(not [o for o in daemon_opts if o not in page],
            "llmprofd(8) has every option of --help: missing %s"
            % [o for o in daemon_opts if o not in page])
    page = open(os.path.join(ROOT, "man", "llmprofctl.1")).read().replace("\\-", "-")
    completion = os.path.join(ROOT, "client", "llmprofctl.bash")
    for cmd in ("top", "dump", "list", "status", "reset", "precise", "record", "doctor", "diff",
                "flame"):
        rc, helptext, _ = ctl(cmd, "--help")
        opts = set(re.findall(r"^\s+(?:-\w, )?(--[a-z-]+)", helptext, re.M))
        missing = {sh: sorted(opts - set(complete_in(sh, [t.LLMPROFCTL, cmd, "--"])))
                   for sh in SHELLS}
        t.check(rc == 0 and opts and not any(missing.values()) and
                not [o for o in opts if o not in page],
                "%s: every option is completed (bash, zsh, fish) and in llmprofctl(1): %s %s"
                % (cmd, sorted(opts), {k: v for k, v in missing.items() if v}))
    # Figures the docs state come from one source: the probe cost from bench/RESULTS.md's
    # headline, the kernel memory from what the daemon itself prints with the defaults.
    results = open(os.path.join(ROOT, "bench", "RESULTS.md")).read()
    cost = re.search(r"gives ([\d.]+) µs per probed call with the probes on the instruction "
                     r"the kernel emulates, ([\d.]+) µs on the first instruction", results)
    t.check(cost is not None, "bench/RESULTS.md states the cost of a probed call")
    texts = {name: open(os.path.join(ROOT, name)).read() for name in
             ("README.md", "docs/API.md", "man/llmprofd.8", "man/llmprofctl.1")}
    texts["llmprofd --help"] = subprocess.run([t.LLMPROFD, "--help"], capture_output=True,
                                              text=True).stdout
    stated = {(name, x) for name, text in texts.items()
              for x in re.findall(r"([\d.]+) (?:µs|us) per probed call", " ".join(text.split()))}
    t.check(cost and stated and all(x in cost.groups() for _, x in stated),
            "every probe cost the docs state is RESULTS.md's %s: %s"
            % (cost and cost.groups(), sorted(stated)))
    check = subprocess.run([t.LLMPROFD, "--check", "--config", "/dev/null", "--socket",
                            os.path.join(t.tmpdir("llmprofd-check-"), "s.sock"),
                            "--state-directory", "off", "--metrics-address", "off"],
                           capture_output=True, text=True, timeout=60)
    logged = re.search(r"([\d.]+) MiB locked in all", check.stderr)
    readme = re.search(r"([\d.]+) MiB by default", " ".join(texts["README.md"].split()))
    t.check(logged and readme and logged.group(1) == readme.group(1),
            "README's kernel memory %s MiB is what llmprofd --check prints with the defaults "
            "(%s)" % (readme and readme.group(1), logged and logged.group(1)))
    # top's columns and sort keys: the same in --help, the man page and the binary's table.
    helptext = ctl("top", "--help")[1]
    keys = re.search(r"up/down select; ([\w ]+?) sort by ([^.]+)\.", helptext.replace("\n", " "))
    t.check(keys is not None, "top --help lists its sort keys")
    if keys:
        letters, names = keys.group(1).split(), " ".join(keys.group(2).split()).split()
        t.check(".B %s\nsort by %s" % (" ".join(letters), ", ".join(names[:9])) in page and
                all(".B %s\n" % n in page.replace(".B MS50, MS99", ".B MS50\n.B MS99")
                    for n in names),
                "llmprofctl(1) has top's sort keys %s and a paragraph per column %s"
                % (letters, names))
    return completion


SHELLS = ("bash", "zsh", "fish")
ZSH_HARNESS = """file=$1; shift
words=("$@"); CURRENT=$#; PREFIX=${words[-1]}
_describe() { local -a a; a=("${(@P)2}"); print -l -- "${a[@]%%:*}" }
compadd() { while [[ $1 == -* && $1 != -- ]]; do shift; done; [[ $1 == -- ]] && shift; print -l -- "$@" }
_files() { print -- "<files>" }
source $file
"""


def complete_in(shell, words, env=None):
    """What shell's completion of llmprofctl offers for the last of words (the word being
    completed), through the same files as installed: bash's and fish's completion
    machinery, zsh's with its completion builtins stood in for."""
    if shell == "bash":
        return complete(words, os.path.join(ROOT, "client", "llmprofctl.bash"), env)
    if shutil.which(shell) is None:
        raise AssertionError("%s is not installed (scripts/install-deps.sh installs it)" % shell)
    if shell == "fish":
        line = " ".join(words)
        p = subprocess.run(["fish", "--no-config", "-c", "source %s; complete -C %s" % (
            os.path.join(ROOT, "client", "llmprofctl.fish"), shlex.quote(line))],
            capture_output=True, text=True, env=env, timeout=30)
        got = [x.split("\t")[0] for x in p.stdout.splitlines()]
    else:
        p = subprocess.run(["zsh", "-f", "-c", ZSH_HARNESS, "zsh",
                            os.path.join(ROOT, "client", "_llmprofctl")] + list(words),
                           capture_output=True, text=True, env=env, timeout=30)
        got = [x for x in p.stdout.splitlines() if x.startswith(words[-1])]
    return got


def complete(words, completion, env=None):
    script = ('source %s; COMP_WORDS=(%s); COMP_CWORD=%d; _llmprofctl; printf "%%s\\n" '
              '"${COMPREPLY[@]}"' % (completion, " ".join("'%s'" % x for x in words),
                                     len(words) - 1))
    p = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env,
                       timeout=30)
    return p.stdout.split()


def top_columns(env):
    """The headers of every column top has: -o's list in its --help, as top prints them."""
    helptext = " ".join(ctl("top", "--help")[1].split())
    ids = re.search(r"as ps -o: ([a-z0-9, ]+)", helptext).group(1).replace(" ", "")
    out = ctl("top", "-b", "-n", "1", "-o", ids, "-p", "1", env=env)[1]
    return next(l.split() for l in out.splitlines() if l.split()[:1] == ["PID"])


def test_completion_live(w, completion):
    want = sorted(str(p["pid"]) for p in w.d.get("/v1/processes")["processes"])
    columns = top_columns(w.env)
    for sh in SHELLS:
        got = complete_in(sh, [t.LLMPROFCTL, "d"])
        t.check(sorted(got) == ["diff", "doctor", "dump"], "%s: completion of a command: %s"
                % (sh, got))
        got = complete_in(sh, [t.LLMPROFCTL, "--socket", w.d.socket, "dump", "--pid", ""])
        t.check(sorted(got) == want, "%s: --pid completes the pids the daemon tracks: %s"
                % (sh, got))
        got = complete_in(sh, [t.LLMPROFCTL, "top", "-s", "RQ"])
        t.check(got == ["RQ99"], "%s: --sort completes column names: %s" % (sh, got))
        got = complete_in(sh, [t.LLMPROFCTL, "top", "-s", ""])
        t.check(sorted(got) == sorted(columns), "%s: --sort offers every column top has: %s"
                % (sh, sorted(set(got) ^ set(columns))))

    prefix = t.tmpdir("llmprofd-install-")
    build = os.path.dirname(t.LLMPROFCTL)
    p = subprocess.run(["cmake", "--install", build, "--prefix", prefix], capture_output=True,
                       text=True, timeout=120)
    files = ["bin/llmprofctl", "sbin/llmprofd", "share/man/man1/llmprofctl.1",
             "share/man/man8/llmprofd.8", "share/bash-completion/completions/llmprofctl",
             "share/zsh/vendor-completions/_llmprofctl",
             "share/fish/vendor_completions.d/llmprofctl.fish"]
    t.check(p.returncode == 0 and all(os.path.exists(os.path.join(prefix, f)) for f in files),
            "cmake --install puts in place %s" % files)
    out = subprocess.run(["man", "-l", os.path.join(prefix, "share/man/man1/llmprofctl.1")],
                         capture_output=True, text=True, env=dict(os.environ, MANWIDTH="80"),
                         timeout=60).stdout
    t.check("EXIT STATUS" in out and "LLMPROF_SOCKET" in out, "man shows the installed page")
    page = open(os.path.join(prefix, "share/man/man8/llmprofd.8")).read()
    docs = re.findall(r"\.IR (\S+/(?:API\.md|examples/llmprofd\.conf))", page)
    t.check(len(docs) == 2 and all(d.startswith(prefix + "/") and os.path.exists(d) for d in docs),
            "llmprofd(8) as installed names the files where they were installed: %s" % docs)
    shutil.rmtree(prefix, ignore_errors=True)


def documented_fields():
    """docs/API.md's "llmprofctl --json" field lists: {"top.processes[]": [...], ...}."""
    text = open(os.path.join(ROOT, "docs", "API.md")).read()
    sec = text[text.index("## llmprofctl --json"):]
    block = sec[sec.index("```text\n") + 8:]
    block = block[:block.index("```")]
    return {name.strip(): [k.strip() for k in keys.split(",")]
            for name, keys in (line.split(":", 1) for line in block.strip().splitlines())}


def shape(fields, doc, name, bad):
    """Every object under name holds the documented members and no others (recursively;
    "member?" only with the option that asks for it)."""
    if isinstance(doc, list):
        for x in doc:
            shape(fields, x, name + "[]", bad)
        return
    if name not in fields or not isinstance(doc, dict):
        return
    need = {k for k in fields[name] if not k.endswith("?")}
    may = need | {k[:-1] for k in fields[name] if k.endswith("?")}
    if not need <= set(doc) <= may:
        bad.append("%s: %s" % (name, sorted((set(doc) - may) | (need - set(doc)))))
    for k, v in doc.items():
        shape(fields, v, name + "." + k, bad)


def test_json(w):
    print("--- --json: JSON alone on stdout, in the shape docs/API.md lists, the API's figures")
    fields = documented_fields()
    pids = [w.g.pid, w.x_pid]
    only = sum((["-p", str(p)] for p in pids), [])
    rc, out, err = ctl("top", "--json", "-n", "2", "-d", "0.5", "-a", "-H", "-O", *only,
                       env=w.env)
    lines = out.splitlines()
    docs = [json.loads(line) for line in lines]
    bad = []
    for doc in docs:
        shape(fields, doc, "top", bad)
    t.check(rc == 0 and len(docs) == 2 and not bad,
            "top --json -n 2: two lines of JSON, each as documented %s %s" % (bad, err.strip()))
    t.check(docs and docs[0]["since_tracked"] and not docs[-1]["since_tracked"] and
            docs[0]["host"]["busy_percent"] is None and
            docs[-1]["host"]["busy_percent"] is not None,
            "the first refresh runs since tracking began, the second over its interval")
    x = w.doc(w.x_pid)
    row = next((r for r in docs[0]["processes"] if r["pid"] == w.x_pid), {}) if docs else {}
    c, h = x["counters"], x["histograms"]
    want = {"comm": x["comm"], "exited": True, "live_threads": len(x["threads"]),
            "ms_per_token_p50": h["decode_generation"]["p50"] / 1e6,
            "ms_per_token_p99": h["decode_generation"]["p99"] / 1e6,
            "decode_tokens_per_s": c["decode_generation_tokens"] * 1e9 /
            c["decode_generation_ns"],
            "matmul_percent": 100 * c["samples_matmul"] / c["samples"],
            "spin_percent": 100 * c["samples_barrier"] / c["samples"],
            "runqueue_latency_p99_ns": h["runqueue_latency"]["p99"] or None}
    off = {k: (row.get(k), v) for k, v in want.items()
           if not (row.get(k) == v or (isinstance(v, float) and row.get(k) is not None and
                                       abs(row[k] - v) <= 1e-9 * abs(v)))}
    t.check(row and not off, "the exited process's row holds the API's figures: %s" % off)
    t.check(all(th["tid"] is not None or th["comm"] is None for r in docs[-1]["processes"]
                for th in r["threads"]) and
            any(r["ops"] for r in docs[0]["processes"]),
            "-H and -O add threads and ops to the rows")

    # diff: two saved reports; each figure named, with its unit and the API's value.
    work = t.tmpdir("llmprofctl-json-")
    paths = []
    for pid in (w.x_pid, w.g.pid):
        rc, out, _ = ctl("dump", "--pid", str(pid), "--json", env=w.env)
        paths.append(os.path.join(work, "%d.json" % pid))
        with open(paths[-1], "w") as f:
            f.write(out)
    rc, out, err = ctl("diff", paths[0], paths[1], "--json")
    doc = json.loads(out)
    bad = []
    shape(fields, doc, "diff", bad)
    a, b = (json.load(open(p)) for p in paths)
    fig = {f["id"]: f for f in doc["figures"]}

    def gen(d):
        return d["ggml"]["tokens"]["generation"]
    checks = [("wall_tokens_per_s", "tokens/s", gen(a)["wall_tokens_per_s"],
               gen(b)["wall_tokens_per_s"]),
              ("ms_per_token_p99", "ms", a["histograms"]["decode_generation"]["p99"] / 1e6,
               b["histograms"]["decode_generation"]["p99"] / 1e6),
              ("share_matmul", "share", a["ggml"]["op_groups"]["share"]["matmul"],
               b["ggml"]["op_groups"]["share"]["matmul"])]
    for fid, unit, base, cur in checks:
        f = fig.get(fid, {})
        change = (cur - base) if unit == "share" else (cur - base) / abs(base)
        if not (f.get("unit") == unit and f.get("base") == base and f.get("current") == cur
                and abs(f.get("change", 0) - change) < 1e-12 and
                f.get("change_is") == ("difference" if unit == "share" else "relative")):
            bad.append((fid, f))
    t.check(rc in (0, 1) and not bad and doc["regression"] == (rc == 1),
            "diff --json: as documented, each figure with its id, unit and the reports' "
            "values: %s %s" % (bad, err.strip()))

    # precise: the window's figures, the growth of the API's totals.
    before = w.doc(w.g.pid)["ggml"]["precise"]
    rc, out, err = ctl("precise", "--pid", str(w.g.pid), "--seconds", "1", "--json", env=w.env)
    after = w.doc(w.g.pid)["ggml"]["precise"]
    doc = json.loads(out)
    bad = []
    shape(fields, doc, "precise", bad)
    t.check(rc == 0 and not bad and
            abs(doc["seconds"] - (after["seconds"] - before["seconds"])) < 1e-6 and
            doc["matmul"]["calls"] == after["matmul"]["calls"] - before["matmul"]["calls"],
            "precise --json: the window as documented, the growth of the API's totals: %s %s"
            % (bad, err.strip()[-200:]))
    rc, out, _ = ctl("precise", "--pid", str(w.g.pid), "--off", "--json", env=w.env)
    doc = json.loads(out)
    t.check(rc == 0 and doc["pid"] == w.g.pid and doc["precise"]["active"] is False,
            "precise --off --json: the daemon's answer")

    # record: what was written, in either format.
    for fmt, name in (("perfetto", "r.perfetto-trace"), ("json", "r.json")):
        path = os.path.join(work, name)
        rc, out, err = ctl("record", "--pid", str(w.g.pid), "--seconds", "0.5", "--no-ops",
                           "-o", path, "--json", env=w.env)
        doc = json.loads(out)
        bad = []
        shape(fields, doc, "record", bad)
        t.check(rc == 0 and not bad and doc["format"] == fmt and doc["file"] == path and
                doc["bytes"] == os.path.getsize(path) and
                (doc["trace_events"] is None) == (fmt == "perfetto"),
                "record --json (%s): what it wrote, as documented: %s %s"
                % (fmt, bad, err.strip()[-200:]))
    shutil.rmtree(work, ignore_errors=True)


def test_doctor_json(w):
    print("--- doctor --json: JSON and nothing else on stdout; the exit status by the worst "
          "finding")
    for args in ((), ("--all",)):
        rc, out, err = ctl("doctor", "--json", *args, env=w.env)
        docs = json.loads(out)
        sev = [f["severity"] for doc in docs for f in doc["findings"]]
        want = 7 if "critical" in sev else 6 if "warning" in sev else 0
        t.check(isinstance(docs, list) and rc == want,
                "doctor --json %s: a list of %d documents, exit %d for %s (%s)"
                % (" ".join(args), len(docs), rc, sev, err.strip()))
    d = t.Daemon("--no-discover", "--comm", "lp-none-such")
    d.wait_ready()
    rc, out, err = ctl("--socket", d.socket, "doctor", "--json")
    t.check(rc == 0 and json.loads(out) == [] and "no running LLM processes" in err,
            "nothing to examine: [] on stdout, the words on stderr: %r, %r" % (out, err))
    rc, out, err = ctl("--socket", d.socket, "doctor")
    t.check(rc == 0 and out == "no running LLM processes to examine\n",
            "nothing to examine, as text: %r" % out)
    d.stop()


def main():
    completion = test_docs_and_install()
    test_config_file()
    w = World()
    try:
        test_batch(w)
        test_dump(w)
        test_doctor_json(w)
        test_json(w)
        test_commands(w)
        test_completion_live(w, completion)
        test_errors(w)
        test_wide()
        test_interactive(w)  # last: it stops the daemon
    finally:
        for f in (w.f1, w.f2):
            f.release()
        w.g.proc.stdin.close()
        w.g.proc.wait(timeout=20)


t.run(main, timeout=280)
