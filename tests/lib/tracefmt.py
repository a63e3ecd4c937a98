# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
"""Reading back what `llmprofctl record` writes: the Chrome Trace Event Format's rules as
Perfetto's importer applies them, and llmprofd's own (per-thread CPU tracks of disjoint
slices, properly nested spans)."""
import gzip
import os
import json
import subprocess

EPS = 0.002  # µs: the document's timestamps have three decimals
CPU_TRACK = 1000000000  # the CPU track of thread tid is tid + this (daemon/timeline/trace.h)
REQUEST_TRACK = 2000000000  # the requests of sequence s: s + this


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


def load_any(t, path):
    """The JSON format's document, from either format (by the file's name, as llmprofctl
    chooses it)."""
    if path.endswith(".json") or path.endswith(".json.gz"):
        return load(path)
    return load_perfetto(t, path)


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
    cpu = [s for (pid, tid), s in tracks.items() if CPU_TRACK <= tid < REQUEST_TRACK]
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


_PB2 = None


def _perfetto_pb2():
    """perfetto_subset.proto compiled by protoc for python3-protobuf, once per run."""
    global _PB2
    if _PB2 is None:
        import importlib
        import shutil
        import sys
        import tempfile
        here = os.path.dirname(os.path.abspath(__file__))
        out = tempfile.mkdtemp(prefix="llmprof-pb2-")
        subprocess.run(["protoc", "--proto_path=" + here, "--python_out=" + out,
                        "perfetto_subset.proto"], check=True)
        sys.path.insert(0, out)
        try:
            import google.protobuf  # noqa: F401
        except ImportError:
            # An interpreter of its own (pyenv) does not see Debian's python3-protobuf.
            sys.path.append("/usr/lib/python3/dist-packages")
        try:
            _PB2 = importlib.import_module("perfetto_subset_pb2")
        finally:
            # The module lives on in memory; its source is scratch.
            sys.path.remove(out)
            shutil.rmtree(out, ignore_errors=True)
    return _PB2


def _unknown(msg, where, bad):
    """Fields the schema does not have, or with another wire type, anywhere in msg."""
    if msg.UnknownFields():
        bad.append(where)
    for field, value in msg.ListFields():
        if field.type != field.TYPE_MESSAGE:
            continue
        for i, m in enumerate(value if field.label == field.LABEL_REPEATED else [value]):
            _unknown(m, "%s.%s[%d]" % (where, field.name, i), bad)


def load_perfetto(t, path):
    """Decodes a Perfetto protobuf trace with protoc's own decoder and checks it by the
    format's rules as trace_processor applies them: one sequence whose incremental state is
    cleared before any packet needs it; interned names defined before use; every event on a
    track described before it; on each track, after sorting by timestamp (ties in file
    order), every SLICE_END closing an open SLICE_BEGIN and none left open. Returns the
    same document load() gives for the JSON format: slices as "X" events (µs from the
    window's start, CPU tracks at tid + CPU_TRACK), thread names as "M", counters as "C",
    instants as "i", and otherData from the window's slice."""
    pb2 = _perfetto_pb2()
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        trace = pb2.Trace.FromString(f.read())
    packets = list(trace.packet)
    bad = []
    _unknown(trace, "trace", bad)
    t.check(not bad, "%s: every field is one of Perfetto's, with its type: %s" % (path, bad[:3]))
    t.check(packets and packets[0].HasField("clock_snapshot") and
            {c.clock_id for c in packets[0].clock_snapshot.clocks} == {1, 3, 6} and
            packets[0].clock_snapshot.primary_trace_clock == 3,
            "%s: it begins with a snapshot of REALTIME, MONOTONIC and BOOTTIME, MONOTONIC "
            "the trace's clock" % path)
    names = {"cat": {}, "name": {}, "ann": {}}
    tracks, events, problems = {}, [], []
    cleared = False
    for i, p in enumerate(packets):
        if p.trusted_packet_sequence_id != 1:
            problems.append((i, "sequence %d" % p.trusted_packet_sequence_id))
        if p.sequence_flags & 1:
            cleared = True
            t.check(p.trace_packet_defaults.timestamp_clock_id == 3,
                    "%s: the sequence's timestamps are MONOTONIC's" % path)
        if p.sequence_flags & 2 and not cleared:
            problems.append((i, "needs incremental state before it was cleared"))
        d = p.interned_data
        for kind, entries in (("cat", d.event_categories), ("name", d.event_names),
                              ("ann", d.debug_annotation_names)):
            for e in entries:
                if names[kind].get(e.iid, e.name) != e.name:
                    problems.append((i, "iid %d of %s redefined" % (e.iid, kind)))
                names[kind][e.iid] = e.name
        if p.HasField("track_descriptor"):
            td = p.track_descriptor
            tracks[td.uuid] = td
        if not p.HasField("track_event"):
            continue
        ev = p.track_event
        if ev.track_uuid not in tracks:
            problems.append((i, "track %d not described" % ev.track_uuid))
            continue
        name = None
        if ev.HasField("name_iid"):
            name = names["name"].get(ev.name_iid)
            if name is None:
                problems.append((i, "name iid %d not interned" % ev.name_iid))
        elif ev.HasField("name"):
            name = ev.name
        cats = [names["cat"].get(c) for c in ev.category_iids]
        if None in cats:
            problems.append((i, "category iid not interned"))
        args = {}
        for a in ev.debug_annotations:
            key = names["ann"].get(a.name_iid) if a.HasField("name_iid") else a.name
            if key is None:
                problems.append((i, "annotation name iid %d not interned" % a.name_iid))
            args[key] = getattr(a, a.WhichOneof("value"))
        value = (getattr(ev, ev.WhichOneof("counter_value_field"))
                 if ev.WhichOneof("counter_value_field") else None)
        events.append((p.timestamp, i, ev.type, ev.track_uuid, name, cats, args, value))
    t.check(not problems, "%s: %d packets, one sequence, every name and track known before "
            "use: %s" % (path, len(packets), problems[:3]))
    events.sort(key=lambda e: (e[0], e[1]))
    process = [td for td in tracks.values() if td.HasField("process")]
    t.check(len(process) == 1, "%s: one process track" % path)
    pid = process[0].process.pid
    window = [e for e in events if e[3] == process[0].uuid]
    t.check(len(window) == 2 and window[0][2] == 1 and window[1][2] == 2,
            "%s: the window is a slice on the process's track" % path)
    start = window[0][0]

    def us(ts):
        return max(0, ts - start) / 1e3

    def tid_of(uuid):
        td = tracks[uuid]
        if td.HasField("thread"):
            return td.thread.tid
        parent = tracks.get(td.parent_uuid)
        if parent is not None and parent.HasField("thread"):
            return parent.thread.tid + CPU_TRACK
        if parent is not None and parent.HasField("process") and uuid >> 32 == 2:
            return REQUEST_TRACK + (uuid & 0x3fffffff)  # a sequence's requests
        return None

    out = [{"ph": "M", "pid": pid, "name": "process_name",
            "args": {"name": process[0].process.process_name}}]
    for td in tracks.values():
        if td.HasField("thread"):
            out.append({"ph": "M", "pid": pid, "tid": td.thread.tid, "name": "thread_name",
                        "args": {"name": "%s %d" % (td.thread.thread_name, td.thread.tid)}})
        elif tid_of(td.uuid) is not None:
            out.append({"ph": "M", "pid": pid, "tid": tid_of(td.uuid), "name": "thread_name",
                        "args": {"name": td.name}})
    stacks, unmatched = {}, []
    for ts, i, typ, uuid, name, cats, args, value in events:
        if uuid == process[0].uuid:
            continue
        td = tracks[uuid]
        if typ == 4:
            out.append({"ph": "C", "pid": pid, "ts": us(ts), "name": td.name,
                        "args": {"value": value}})
        elif typ == 3:
            out.append({"ph": "i", "s": "t", "cat": ",".join(cats), "pid": pid,
                        "tid": tid_of(uuid), "ts": us(ts), "name": name})
        elif typ == 1:
            stacks.setdefault(uuid, []).append((ts, name, cats, args))
        elif typ == 2:
            if not stacks.get(uuid):
                unmatched.append((i, uuid))
                continue
            b_ts, b_name, b_cats, b_args = stacks[uuid].pop()
            out.append({"ph": "X", "cat": ",".join(b_cats), "pid": pid, "tid": tid_of(uuid),
                        "ts": us(b_ts), "dur": us(ts) - us(b_ts), "name": b_name,
                        "args": dict(b_args, **args)})
    left = [(uuid, s[-1][1]) for uuid, s in stacks.items() if s]
    t.check(not unmatched and not left, "%s: every SLICE_END closes a slice and none is left "
            "open: %s %s" % (path, unmatched[:3], left[:3]))
    held = window[1][6]
    return {"otherData": {"events": held.get("events"), "events_lost": held.get("lost"),
                          "events_dropped": held.get("dropped"), "window_start_ns": start,
                          "window_seconds": (window[1][0] - start) / 1e9},
            "traceEvents": out}
