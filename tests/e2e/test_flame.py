#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
"""e2e tier: flame graphs of the sampler that always runs, against `perf record -a
--call-graph dwarf` (one cpu-clock event per CPU, as llmprofd samples: perfref.SystemWide)
on the same run, on the engines people run: llama.cpp's OpenMP llama-simple, ik_llama.cpp's
llama-cli, node-llama-cpp and llama-server.

Each engine's whole run (or, for the server, one request between idle moments) lies inside
one profile window, pprof and folded stacks asked at once (two windows: neither takes the
other's samples), so that both hold every sample the daemon counted. Then:
- the pprof passes Parca's ingestion rules (tests/lib/pprofref.py, written again) and
  speedscope's; its samples are the folded lines' and X-Llmprof-Samples, stack by stack;
- every sample carries its op group, phase and process labels, and no thread or CPU;
- each op group's samples are the op view's (GET /v1/processes/PID, the same samples
  classified once), short by no more than the samples the daemon says it lost (the
  server's view, read before and after the window, also holds what its idle threads did
  outside it: outside ops only);
- at least 90 % of the stacks reach their thread's start (_start, clone3, start_thread),
  as perf's DWARF call graphs do (printed beside);
- perf's 5 hottest leaf functions of the process (kernel frames included, as perf reports
  self time) are llmprofd's by name, each share within 3 points, or 3.5 standard errors of
  the difference where that is more, plus the share of samples the daemon's sampler could
  not take while another BPF program ran on the CPU (perfref.check_groups says why) and the
  share perf lost, its buffers full (perfref.lost_share):
  some 4,000-16,000 samples a side at 997 Hz.

And what people do with a profile: `go tool pprof` reads it (-top, -raw, -traces,
-tagfocus=phase=generation, -tagroot=op_group) and pulls one from the TCP listener as
Parca would; `llmprofctl flame -o x.svg` writes an SVG that headless Chromium renders (a
screenshot is taken) whose frames' widths are their samples.

Engine runs do not depend on the host's speed: each runs inside its window and is stopped
before the window ends (or ends before); the server's request is sized by a calibration
request that times a token."""
import collections
import math
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
import llamaserver  # noqa: E402
import lptest as t  # noqa: E402
import perfref  # noqa: E402
import pprofref  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
WORKLOAD = os.path.join(HERE, "..", "workload")
HZ = 997
TOLERANCE = 0.03
GEN_S = 4.0
WINDOW_S = 10
STOP_BEFORE_S = 3
PROMPT = " ".join(["Once upon a time there was a small model that"] * 14)
STARTS = {"_start", "clone3", "clone", "__clone", "start_thread", "__libc_start_main",
          "main"}


class Window:
    """GET of a profile route over the daemon's socket, in a thread: headers and body."""

    def __init__(self, d, route, query, work, name):
        self.out = os.path.join(work, name)
        self.hdr = self.out + ".headers"
        self.proc = subprocess.Popen(
            ["curl", "-sS", "--max-time", "400", "--unix-socket", d.socket, "-D", self.hdr,
             "-o", self.out, "http://localhost%s?%s" % (route, query)],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        t._children.append(self.proc)

    def result(self):
        _, err = self.proc.communicate(timeout=420)
        t.check(self.proc.returncode == 0, "curl %s: %s" % (self.out, err.decode()[-200:]))
        with open(self.hdr) as f:
            text = f.read()
        headers = {k.lower(): v.strip() for k, _, v in
                   (ln.partition(":") for ln in text.splitlines()[1:]) if v}
        status = int(text.split()[1]) if text else 0
        with open(self.out, "rb") as f:
            return status, headers, f.read()


def sized(per, load, most=900):
    """Tokens for GEN_S seconds of generation (at most most: what the context holds), and a
    window that holds the run twice over."""
    n = max(40, min(most, int(GEN_S / per)))
    return n, min(120, math.ceil(2 * (load + n * per)) + 4)


def settled_counts(d, pid):
    """The op view's counts of an idle process once two reads a tick apart agree: the
    samples of its last work (an OpenMP team spins on after an answer) reach the view at
    the daemon's tick, after a read that came sooner."""
    last = [None]

    def same():
        now = group_counts(d.get("/v1/processes/%d" % pid))
        if now == last[0]:
            return now
        last[0] = now
    return t.poll("pid %d's op view to settle" % pid, same, timeout=30, interval=1.1)


def open_windows(d, pid, seconds, work, tag):
    q = "seconds=%d%s" % (seconds, "&pid=%d" % pid if pid else "")
    w = (Window(d, "/debug/pprof/profile", q, work, tag + ".pb.gz"),
         Window(d, "/debug/pprof/folded", q, work, tag + ".folded"))
    # Both open before the engine does anything.
    t.poll("the two windows to open",
           lambda: d.get("/v1/status")["profiles"]["windows_open"] >= 2, timeout=10)
    return w


def sampled_since(doc):
    """When the daemon began to count the process's samples (CLOCK_MONOTONIC seconds)."""
    since = doc["ggml"]["sampled"]["since_ns"]
    t.check(since > 0, "pid %d: its samples count from %d ns" % (doc["pid"], since))
    return since / 1e9


def group_counts(doc):
    g = doc["ggml"]["op_groups"]
    return {k: round(v * g["samples"]) for k, v in g["share"].items()}


def judge(name, pid, windows, perf_data, opview, since, bracket=False):
    """What the two windows answered, against each other, the op view's counts (opview:
    {group: samples}) and perf's chains of pid from since (CLOCK_MONOTONIC seconds: the
    process's sampled.since_ns, when the daemon began to count its samples). bracket: the
    op view's counts are over a span that holds the window, not the process's life."""
    (ps, ph, pbody), (fs, fh, fbody) = windows[0].result(), windows[1].result()
    t.check(ps == 200 and fs == 200 and ph.get("content-type") == "application/octet-stream"
            and pbody[:2] == b"\x1f\x8b", "%s: pprof answered, gzip'ed (%d %s)"
            % (name, ps, ph.get("content-type")))
    prof = pprofref.load(pbody)
    bad = pprofref.validate(prof)
    t.check(not bad, "%s: the profile passes Parca's and speedscope's rules: %s" % (name, bad[:5]))
    st = prof["string_table"]
    t.check([(st[x["type"]], st[x["unit"]]) for x in prof["sample_type"]] ==
            [("samples", "count"), ("cpu", "nanoseconds")] and
            st[prof["default_sample_type"]] == "cpu" and prof["period"] == 10**9 // HZ and
            prof["time_nanos"] > 0 and prof["duration_nanos"] > 0,
            "%s: sample types, period %d ns, time and duration" % (name, prof["period"]))
    stacks = pprofref.stacks(prof)
    total = sum(n for _, n, _ in stacks)
    fold = pprofref.folded(fbody.decode("utf-8"))
    lost = int(ph.get("x-llmprof-samples-lost", "0"))
    t.check(total == sum(fold.values()) == int(ph.get("x-llmprof-samples", -1)) ==
            int(fh.get("x-llmprof-samples", -1)) and total > 1000,
            "%s: %d samples in the pprof, %d in the folded lines, %s and %s in the headers"
            % (name, total, sum(fold.values()), ph.get("x-llmprof-samples"),
               fh.get("x-llmprof-samples")))
    as_folded = collections.Counter()
    for names, n, labels in stacks:
        as_folded[tuple([labels.get("comm", "")] + [x.replace(";", ":")
                                                   for x in reversed(names)])] += n
    t.check(as_folded == fold, "%s: the folded lines are the pprof's stacks, %d of them: "
            "only in the pprof %s" % (name, len(fold), list((as_folded - fold).items())[:2]))
    keys = collections.Counter(k for _, _, lb in stacks for k in lb)
    t.check(all(keys[k] == len(stacks) for k in ("op_group", "phase", "pid", "comm")) and
            not {"tid", "thread", "cpu", "time"} & set(keys),
            "%s: every sample has op_group, phase, pid and comm, none a thread or CPU: %s"
            % (name, dict(keys)))
    ours = collections.Counter()
    for _, n, lb in stacks:
        ours[lb["op_group"]] += n
    # An idle server's threads (its HTTP listener, its task loop) wake now and then, outside
    # any op; between the op view's reads and the window's bounds they add to outside_ops,
    # whose excess has then no upper bound.
    excess = {k: opview.get(k, 0) - ours[k] for k in set(opview) | set(ours)}
    t.check(all(0 <= v and (v <= lost or (bracket and k == "outside_ops"))
                for k, v in excess.items()),
            "%s: each op group's samples are the op view's (%d lost; %d outside ops outside "
            "the window): %s against %s"
            % (name, lost, excess.get("outside_ops", 0) if bracket else 0, dict(ours),
               {k: v for k, v in opview.items() if v}))
    whole = sum(n for names, n, _ in stacks
                if [x for x in names if not x.endswith("_[k]")][-1:] and
                [x for x in names if not x.endswith("_[k]")][-1] in STARTS)
    # perf's samples of the window, by the window's own bounds (CLOCK_MONOTONIC, perf's
    # clock here): an OpenMP team spins on after a request's answer, inside it. Not before
    # the daemon counted the process's samples: it finds an engine 0.1-0.3 s after its
    # start (node-llama-cpp's once node has loaded ggml), and its samples begin then.
    start, end = (int(x) / 1e9 for x in ph["x-llmprof-window"].split())
    chains = pprofref.perf_stacks(perf_data, pid, max(start, since), end)
    user_roots = [[x for x in c if not x.endswith("_[k]")][-1:] for c in chains]
    perf_whole = sum(1 for r in user_roots if r and r[0] in STARTS)
    t.check(whole >= 0.90 * total,
            "%s: %.3f of the stacks reach their thread's start (perf's DWARF chains: %.3f)"
            % (name, whole / total, perf_whole / max(1, len(chains))))
    # Leaf functions: perf's 5 hottest against ours, by name; a frame neither names (a
    # stripped library's static function) by its object.
    theirs = collections.Counter(pprofref.unnamed(c[0]) for c in chains if c)
    mine = collections.Counter()
    for names, n, _ in stacks:
        mine[pprofref.unnamed(names[0])] += n
    nperf = sum(theirs.values())
    # What each side could not take: perf's lost samples (its buffers full), and the
    # daemon's shortfall against what perf would have counted without them.
    perf_lost = perfref.lost_share(perf_data)
    dropped = perfref.shortfall(total, nperf, perf_lost) + perf_lost
    for fn, k in theirs.most_common(5):
        a, b = mine[fn] / total, k / nperf
        p = (a + b) / 2
        bound = max(TOLERANCE, 3.5 * math.sqrt(p * (1 - p) * (1 / total + 1 / nperf))) + dropped
        t.check(abs(a - b) <= bound, "%s: leaf %s %.3f within %.3f of perf's %.3f"
                % (name, fn, a, bound, b))
    print("%s: llmprofd %d samples, perf %d; hottest leaves %s" % (
        name, total, nperf, [(fn, round(mine[fn] / total, 3)) for fn, _ in mine.most_common(5)]))
    return prof, pbody


def run_engine(d, name, comm, argv, work, node=False):
    """The engine run inside one window of WINDOW_S seconds under perf -a, stopped
    (SIGTERM) STOP_BEFORE_S before the window ends, or done before: its whole life is in
    the window, however fast the host. Returns the pprof."""
    data = os.path.join(work, name.replace(" ", "-") + ".data")
    windows = open_windows(d, 0, WINDOW_S, work, name.replace(" ", "-"))
    opened = time.monotonic()
    proc = subprocess.Popen(perfref.held(argv), stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            cwd=work)
    t._children.append(proc)
    system_wide = perfref.SystemWide(data, HZ, stack=65528, held=proc)
    pid = proc.pid
    if node:  # the driver says which process decodes
        pid = t.read_json_line(proc, "the driver", 60)["pid"]
    try:
        proc.wait(timeout=max(1, opened + WINDOW_S - STOP_BEFORE_S - time.monotonic()))
    except subprocess.TimeoutExpired:
        proc.terminate()
        proc.wait(timeout=60)
    system_wide.stop()
    d.wait_log("pid %d (%s) exited" % (pid, comm), timeout=60)
    doc = d.get("/v1/processes/%d" % pid)
    return judge(name, pid, windows, data, group_counts(doc), sampled_since(doc))


def go_pprof(path, *args):
    p = subprocess.run(["go", "tool", "pprof"] + list(args) + [path], capture_output=True,
                       text=True, timeout=300, env=dict(os.environ, HOME=os.path.dirname(path),
                                                        PPROF_TMPDIR=os.path.dirname(path)))
    return p.returncode, p.stdout, p.stderr


def check_go_pprof(path, prof):
    stacks = pprofref.stacks(prof)
    gen = sum(n for _, n, lb in stacks if lb["phase"] == "generation")
    total = sum(n for _, n, _ in stacks)
    for args in (["-top"], ["-raw"], ["-traces"]):
        rc, out, err = go_pprof(path, *args)
        t.check(rc == 0 and out.strip(), "go tool pprof %s reads it: %s" % (args[0], err[-200:]))
    rc, out, err = go_pprof(path, "-raw", "-tagfocus=phase=generation")
    kept = sum(int(m) for m in re.findall(r"^\s+(\d+)\s+\d+:", out, re.M))
    t.check(rc == 0 and kept == gen < total,
            "-tagfocus=phase=generation keeps the %d generation samples of %d (it kept %d)"
            % (gen, total, kept))
    rc, out, err = go_pprof(path, "-traces", "-tagroot=op_group")
    # each trace's last frame, the root
    roots = collections.Counter(
        [ln for ln in block.strip().splitlines() if not ln.startswith("-")][-1].strip()
        for block in out.split("-----------+")[1:] if block.strip().strip("-"))
    groups = {lb["op_group"] for _, _, lb in stacks}
    t.check(rc == 0 and roots and set(roots) <= groups and "matmul" in roots,
            "-tagroot=op_group roots every stack at its op group: %s" % dict(roots))


def check_svg(path, folded_total, work):
    root = ET.parse(path).getroot()
    ns = {"s": "http://www.w3.org/2000/svg"}
    frames = root.findall("s:g[@class='f']", ns)
    top = frames[0]
    width = float(top.find("s:rect", ns).get("width"))
    n = int(top.get("data-n"))
    px = width / n
    kids = [g for g in frames if g.get("data-d") == "1"]
    t.check(n > 1000 and abs(n - folded_total) <= 0.02 * folded_total,
            "the SVG's root frame holds the window's %d samples (the folded window: %d)"
            % (n, folded_total))
    t.check(all(abs(float(g.find("s:rect", ns).get("width")) - int(g.get("data-n")) * px) < 0.01
                for g in frames) and
            abs(sum(float(g.find("s:rect", ns).get("width")) for g in kids) - width) <= 0.5,
            "every frame's width is its samples, and the root's children fill it")
    shot = os.path.join(work, "flame.png")
    chrome = shutil.which("chromium")
    if not chrome:
        t.check(False, "chromium is installed (scripts/install-deps.sh)")
        return
    base = [chrome, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
            "--no-first-run", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", "--user-data-dir=" + os.path.join(work, "chromium")]
    p = subprocess.run(base + ["--screenshot=" + shot, "--window-size=1200,900",
                               "file://" + path], capture_output=True, timeout=120)
    t.check(os.path.exists(shot) and os.path.getsize(shot) > 10000,
            "headless Chromium renders it (screenshot %s, %d bytes)"
            % (shot, os.path.getsize(shot) if os.path.exists(shot) else 0))
    # Its script ran: the frames' labels are written by it, to fit their widths.
    p = subprocess.run(base + ["--dump-dom", "file://" + path], capture_output=True, text=True,
                       timeout=120)
    filled = re.findall(r"<text x=\"[\d.]+\" y=\"\d+\">([^<]+)</text>", p.stdout)
    t.check(any("start_thread" in x or "clone3" in x for x in filled),
            "and its script labels the frames that have room: %s" % filled[:5])


def main():
    work = t.tmpdir("llmprofd-flame-")
    model = os.path.join(work, "medium.gguf")
    subprocess.run([sys.executable, os.path.join(WORKLOAD, "gen_gguf.py"), "--shape", "medium",
                    model], check=True, timeout=120)
    port = t.free_port()
    d = t.Daemon("--sample-hz", str(HZ), "--metrics-address", "127.0.0.1:%d" % port)
    d.wait_ready()

    run_engine(d, "llama-simple (OpenMP)", "llama-simple",
               [t.llama_simple(), "-m", model, "-n", "4000", "Once upon a time"], work)
    run_engine(d, "ik_llama.cpp", "llama-cli",
               [t.build_ik(), "-m", model, "-p", "Once upon a time", "-n", "100000", "-c",
                "1024", "--temp", "0", "-t", "2", "-tb", "2", "--ignore-eos"], work)
    run_engine(d, "node-llama-cpp", "node",
               ["node", os.path.join(WORKLOAD, "driver.mjs"), "--model", model, "--tokens",
                "100000", "--threads", "2", "--prompt", "16", "--wait-go"], work, node=True)

    # llama-server: one request between idle moments, inside the window; the op view's
    # counts over the same span (read before and after it); a third window at once, over
    # TCP, pulled by go tool pprof as Parca pulls it, and a fourth by llmprofctl flame.
    server = llamaserver.Server(t.build_llama("--server"), model, threads=2, cwd=work,
                                timeout=120)
    try:
        pid = server.proc.pid
        d.wait_log("pid %d (llama-server) runs ggml" % pid, timeout=60)
        # Timed under perf as it will run: its 64 KiB copies at 997 Hz a CPU slowed the
        # server's tokens from 7.4 to 28 ms on this 2-vCPU VM (2026-12-02), and a window
        # sized without them ended before the request (the op view then held more).
        calibration = os.path.join(work, "calibration.data")
        system_wide = perfref.SystemWide(calibration, HZ, stack=65528)
        t0 = time.monotonic()
        server.complete("Once upon a time", 8, cache_prompt=False)
        t8 = time.monotonic() - t0
        t0 = time.monotonic()
        server.complete("Once upon a time", 40, cache_prompt=False)
        per = max(1e-3, (time.monotonic() - t0 - t8) / 32)
        system_wide.stop()
        os.unlink(calibration)
        # A prompt of some 300 tokens before the generation: both phases in the window.
        n, seconds = sized(per, 2.0, most=600)
        before = settled_counts(d, pid)
        windows = open_windows(d, pid, seconds, work, "llama-server")
        gopp = subprocess.Popen(["go", "tool", "pprof", "-raw", "-seconds", str(seconds),
                                 "http://127.0.0.1:%d/debug/pprof/profile?pid=%d" % (port, pid)],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                env=dict(os.environ, HOME=work, PPROF_TMPDIR=work))
        t._children.append(gopp)
        svg = os.path.join(work, "server.svg")
        flame = subprocess.Popen([t.LLMPROFCTL, "--socket", d.socket, "flame", "--pid",
                                  str(pid), "--seconds", str(seconds), "-o", svg],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        t._children.append(flame)
        t.poll("four windows open", lambda: d.get("/v1/status")["profiles"]["windows_open"] >= 4,
               timeout=20)
        data = os.path.join(work, "server.data")
        system_wide = perfref.SystemWide(data, HZ, stack=65528)
        answer = server.complete(PROMPT, n, cache_prompt=False)
        t.check(answer.get("tokens_predicted") == n, "llama-server predicted %d tokens: %s"
                % (n, {k: answer.get(k) for k in ("tokens_predicted", "stop_type",
                                                  "tokens_evaluated")}))
        status, headers, _ = windows[0].result()
        system_wide.stop()
        after = settled_counts(d, pid)
        prof, _ = judge("llama-server", pid, windows, data,
                        {k: after.get(k, 0) - before.get(k, 0) for k in after},
                        sampled_since(d.get("/v1/processes/%d" % pid)), bracket=True)
        phases = collections.Counter()
        for _, k, lb in pprofref.stacks(prof):
            phases[lb["phase"]] += k
        t.check(phases["prompt"] > 0 and phases["generation"] > phases["prompt"],
                "llama-server: prompt and generation samples told apart: %s" % dict(phases))
        check_go_pprof(windows[0].out, prof)
        out, err = gopp.communicate(timeout=seconds + 120)
        t.check(gopp.returncode == 0 and "Samples:" in out and "op_group:" in out,
                "go tool pprof pulls a profile from the TCP listener as Parca would: %s"
                % err.strip()[-300:])
        out, err = flame.communicate(timeout=seconds + 120)
        t.check(flame.returncode == 0 and os.path.exists(svg),
                "llmprofctl flame -o %s: %s" % (svg, err.strip()[-300:]))
        folded_total = sum(pprofref.folded(open(windows[1].out).read()).values())
        if flame.returncode == 0:
            check_svg(svg, folded_total, work)
    finally:
        server.stop()
    t.check(d.stop() == 0, "the daemon exits 0")
    shutil.rmtree(work, ignore_errors=True)


t.run(main, timeout=1500)
