# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
"""Reading back what llmprofd's profiles say, written apart from the daemon's code:

- profile.proto read from its wire format here (no generated code), field by field as
  github.com/google/pprof's proto/profile.proto numbers them;
- the rules Parca's ingester holds a profile to before it stores it (parcacol's
  ValidatePprofProfile), written again: the string table starts with "", ids of mappings,
  functions and locations are 1..n in order, every index in range, no label without a key,
  as many values per sample as sample types; and speedscope's: every location has a line
  with a function;
- stackcollapse's folded lines ("a;b;c 12");
- perf script's call chains, for the same window."""
import collections
import gzip
import os
import re
import subprocess


def _varint(b, i):
    v = shift = 0
    while True:
        c = b[i]
        i += 1
        v |= (c & 0x7f) << shift
        shift += 7
        if not c & 0x80:
            return v, i


def _fields(b):
    """(field, wire type, value) of one message: ints for varints, bytes for the rest."""
    i = 0
    while i < len(b):
        key, i = _varint(b, i)
        f, w = key >> 3, key & 7
        if w == 0:
            v, i = _varint(b, i)
        elif w == 1:
            v, i = int.from_bytes(b[i:i + 8], "little"), i + 8
        elif w == 2:
            n, i = _varint(b, i)
            v, i = b[i:i + n], i + n
        elif w == 5:
            v, i = int.from_bytes(b[i:i + 4], "little"), i + 4
        else:
            raise ValueError("wire type %d at %d" % (w, i))
        yield f, w, v


def _ints(w, v):
    """A repeated integer field, packed (bytes) or not."""
    if w != 2:
        return [v]
    out, i = [], 0
    while i < len(v):
        x, i = _varint(v, i)
        out.append(x)
    return out


def _msg(b, spec):
    """A sub-message as a dict: spec maps field -> (name, kind), kind 'int', 'ints' or
    'msg:<spec>'."""
    d = {name: [] if kind != "int" else 0 for name, kind in spec.values()}
    for f, w, v in _fields(b):
        if f not in spec:
            continue
        name, kind = spec[f]
        if kind == "int":
            d[name] = v
        elif kind == "ints":
            d[name] += _ints(w, v)
        else:
            d[name].append(_msg(v, kind))
    return d


VALUE_TYPE = {1: ("type", "int"), 2: ("unit", "int")}
LABEL = {1: ("key", "int"), 2: ("str", "int"), 3: ("num", "int"), 4: ("num_unit", "int")}
SAMPLE = {1: ("location_id", "ints"), 2: ("value", "ints"), 3: ("label", LABEL)}
MAPPING = {1: ("id", "int"), 2: ("memory_start", "int"), 3: ("memory_limit", "int"),
           4: ("file_offset", "int"), 5: ("filename", "int"), 6: ("build_id", "int"),
           7: ("has_functions", "int")}
LINE = {1: ("function_id", "int"), 2: ("line", "int")}
LOCATION = {1: ("id", "int"), 2: ("mapping_id", "int"), 3: ("address", "int"), 4: ("line", LINE)}
FUNCTION = {1: ("id", "int"), 2: ("name", "int"), 3: ("system_name", "int"),
            4: ("filename", "int"), 5: ("start_line", "int")}


def load(data):
    """A profile from its bytes (gzip'ed or not) as a dict of lists, as profile.proto has
    them."""
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    p = {"sample_type": [], "sample": [], "mapping": [], "location": [], "function": [],
         "string_table": [], "comment": [], "time_nanos": 0, "duration_nanos": 0,
         "period_type": None, "period": 0, "default_sample_type": 0}
    for f, w, v in _fields(data):
        if f == 1:
            p["sample_type"].append(_msg(v, VALUE_TYPE))
        elif f == 2:
            p["sample"].append(_msg(v, SAMPLE))
        elif f == 3:
            p["mapping"].append(_msg(v, MAPPING))
        elif f == 4:
            p["location"].append(_msg(v, LOCATION))
        elif f == 5:
            p["function"].append(_msg(v, FUNCTION))
        elif f == 6:
            p["string_table"].append(v.decode("utf-8"))  # raises on invalid UTF-8
        elif f == 9:
            p["time_nanos"] = v
        elif f == 10:
            p["duration_nanos"] = v
        elif f == 11:
            p["period_type"] = _msg(v, VALUE_TYPE)
        elif f == 12:
            p["period"] = v
        elif f == 13:
            p["comment"] += _ints(w, v)
        elif f == 14:
            p["default_sample_type"] = v
    return p


def validate(p):
    """Parca's ingestion rules and speedscope's need, as a list of what breaks them."""
    bad = []
    st = p["string_table"]
    n = len(st)
    if n and st[0] != "":
        bad.append("string_table[0] is %r, not empty" % st[0])
    for kind, fields in (("mapping", ("filename", "build_id")),
                         ("function", ("name", "system_name", "filename"))):
        for i, x in enumerate(p[kind]):
            if x["id"] != i + 1:
                bad.append("%s %d has id %d: not sequential" % (kind, i + 1, x["id"]))
            bad += ["%s %d: %s index %d out of range" % (kind, x["id"], f, x[f])
                    for f in fields if x[f] >= n]
    for i, loc in enumerate(p["location"]):
        if loc["id"] != i + 1:
            bad.append("location %d has id %d: not sequential" % (i + 1, loc["id"]))
        if loc["mapping_id"] > len(p["mapping"]):
            bad.append("location %d: mapping %d" % (loc["id"], loc["mapping_id"]))
        if not loc["line"] or any(not ln["function_id"] for ln in loc["line"]):
            bad.append("location %d has no line with a function" % loc["id"])
        bad += ["location %d: function %d" % (loc["id"], ln["function_id"])
                for ln in loc["line"] if ln["function_id"] > len(p["function"])]
    if p["sample"] and not p["sample_type"]:
        bad.append("samples but no sample types")
    for i, s in enumerate(p["sample"]):
        if len(s["value"]) != len(p["sample_type"]):
            bad.append("sample %d: %d values for %d types" % (i, len(s["value"]),
                                                              len(p["sample_type"])))
        if any(x == 0 or x > len(p["location"]) for x in s["location_id"]):
            bad.append("sample %d: a location id out of range" % i)
        for lb in s["label"]:
            if lb["key"] == 0 or lb["key"] >= n or lb["str"] >= n:
                bad.append("sample %d: label %s out of range or without a key" % (i, lb))
    return bad


def stacks(p):
    """[(names leaf first, samples, {label: value})] of the profile's samples."""
    st = p["string_table"]
    fn = {f["id"]: st[f["name"]] for f in p["function"]}
    loc = {x["id"]: fn[x["line"][0]["function_id"]] for x in p["location"]}
    kernel = {x["id"] for x in p["location"]
              if x["mapping_id"] and st[p["mapping"][x["mapping_id"] - 1]["filename"]]
              == "[kernel.kallsyms]"}
    out = []
    for s in p["sample"]:
        names = [loc[i] + ("_[k]" if i in kernel else "") for i in s["location_id"]]
        out.append((names, s["value"][0], {st[lb["key"]]: st[lb["str"]] for lb in s["label"]}))
    return out


def frames(p):
    """[(frames leaf first, samples, {label: value})], each frame (function, file, line): a
    Python frame's file and line as the profile has them, a native frame's ("", 0)."""
    st = p["string_table"]
    fn = {f["id"]: (st[f["name"]], st[f["filename"]]) for f in p["function"]}
    loc = {}
    for x in p["location"]:
        name, file = fn[x["line"][0]["function_id"]]
        loc[x["id"]] = (name, file, x["line"][0]["line"])
    return [([loc[i] for i in s["location_id"]], s["value"][0],
             {st[lb["key"]]: st[lb["str"]] for lb in s["label"]}) for s in p["sample"]]


FOLDED = re.compile(r"^(\S.*) (\d+)$")


def folded(text):
    """{(frames root first): samples} of stackcollapse lines; raises on a line that is not
    one, or an empty frame."""
    out = collections.Counter()
    for n, line in enumerate(text.splitlines(), 1):
        m = FOLDED.match(line)
        if not m or "" in m.group(1).split(";"):
            raise ValueError("folded line %d is not one: %r" % (n, line[:200]))
        out[tuple(m.group(1).split(";"))] += int(m.group(2))
    return out


def unnamed(frame):
    """object+0xoffset (ours) and [unknown] in object (perf's, as perf_stacks() names it) as
    "object+?"."""
    m = re.match(r"^(.*)\+0x[0-9a-f]+(_\[k\])?$", frame)
    return m.group(1) + "+?" if m else frame


def perf_stacks(data, pid, start=None, end=None):
    """[(names leaf first, kernel frames marked _[k])] of pid's samples in perf's data
    (perf record -k CLOCK_MONOTONIC: times in seconds of that clock), within [start, end)."""
    out = subprocess.run(["perf", "script", "--no-inline", "-i", data, "-F",
                          "pid,time,ip,sym,dso"], capture_output=True, text=True,
                         errors="replace", timeout=900).stdout
    chains = []
    for block in out.split("\n\n"):
        lines = block.strip().splitlines()
        head = lines[0].split() if lines else []
        if len(head) < 2 or head[0] != str(pid):
            continue
        when = float(head[1].rstrip(":"))
        if (start is not None and when < start) or (end is not None and when >= end):
            continue
        names = []
        for line in lines[1:]:
            f = line.split(None, 1)
            if len(f) < 2 or "(" not in f[1]:
                continue
            rest = f[1]
            sym = re.sub(r"\+0x[0-9a-f]+$", "", rest[:rest.rfind("(")].strip())
            if sym == "[unknown]":  # named by its object, as llmprofd names it (+?)
                dso = rest[rest.rfind("(") + 1:].rstrip(")")
                sym = os.path.basename(dso) + "+?" if dso.startswith("/") else sym
            names.append(sym + ("_[k]" if int(f[0], 16) >= 1 << 63 else ""))
        chains.append(names)
    return chains
