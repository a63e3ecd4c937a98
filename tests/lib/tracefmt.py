# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
"""Reading back what `llmprofctl record` writes: the Chrome Trace Event Format's rules as
Perfetto's importer applies them, and llmprofd's own (per-thread CPU tracks of disjoint
slices, properly nested spans)."""
import gzip
import json
import subprocess

EPS = 0.002  # µs: the document's timestamps have three decimals
CPU_TRACK = 1000000000  # the CPU track of thread tid is tid + this (daemon/trace.h)


def record(t, d, pid, out, *extra):
    """Runs `llmprofctl record` in the background; returns it once the daemon records."""
    p = subprocess.Popen([t.LLMPROFCTL, "--socket", d.socket, "record", "--pid", str(pid),
                          "-o", out] + list(extra), stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
    t._children.append(p)
    d.wait_log("pid %d: recording a timeline" % pid)
    return p


def load(path):
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f)


def valid(t, doc, what):
    """The format's rules as Perfetto's importer applies them, and ours on top."""
    ev = doc.get("traceEvents")
    t.check(isinstance(ev, list) and ev, "%s: traceEvents is a list of events" % what)
    bad = [e for e in ev if e.get("ph") not in ("X", "M", "C", "i")
           or not isinstance(e.get("pid"), int) or not isinstance(e.get("name"), str)
           or (e["ph"] != "M" and not (isinstance(e.get("ts"), (int, float)) and e["ts"] >= 0))
           or (e["ph"] == "X" and not (isinstance(e.get("dur"), (int, float)) and e["dur"] >= 0))
           or (e["ph"] in ("X", "i") and not isinstance(e.get("tid"), int))]
    t.check(not bad, "%s: every event has its phase's fields: %s" % (what, bad[:3]))
    tracks = {}
    for e in ev:
        if e["ph"] == "X":
            tracks.setdefault((e["pid"], e["tid"]), []).append(e)
    unnested = []
    for key, slices in tracks.items():
        slices.sort(key=lambda e: (e["ts"], -e["dur"]))
        open_ends = []
        for e in slices:
            while open_ends and open_ends[-1] <= e["ts"] + EPS:
                open_ends.pop()
            if open_ends and e["ts"] + e["dur"] > open_ends[-1] + EPS:
                unnested.append((key, e["name"], e["ts"]))
            open_ends.append(e["ts"] + e["dur"])
    t.check(not unnested, "%s: slices are properly nested on each of %d tracks: %s"
            % (what, len(tracks), unnested[:3]))
    cpu = [s for (pid, tid), s in tracks.items() if tid >= CPU_TRACK]
    overlap = [(a["name"], b["name"], b["ts"]) for s in cpu for a, b in zip(s, s[1:])
               if b["ts"] + EPS < a["ts"] + a["dur"]]
    t.check(cpu and not overlap, "%s: each CPU track is one slice after another, in time "
            "order: %s" % (what, overlap[:3]))
    series = {}
    for e in ev:
        if e["ph"] == "C":
            series.setdefault(e["name"], []).append(e["ts"])
    t.check(all(a <= b for s in series.values() for a, b in zip(s, s[1:])),
            "%s: each counter's timestamps increase: %s" % (what, sorted(series)))
    return ev


def decodes(ev, tid):
    """The llama_decode spans of thread tid: (generation, prompt) lists."""
    spans = [e for e in ev if e["ph"] == "X" and e["tid"] == tid and e.get("cat") == "decode"]
    return ([e for e in spans if e["name"] == "llama_decode: generation"],
            [e for e in spans if e["name"].startswith("llama_decode: prompt")])
