#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
"""e2e tier: `llmprofctl record`, a timeline in Perfetto's protobuf format (streamed as it
is recorded, decoded with protoc against Perfetto's field numbers) and in the Chrome Trace
Event Format, read back.

- lpfixture with a schedule the test controls, recorded in Perfetto's format through a
  connection deadline (1 s) shorter than the window: two threads sleeping 20 ms futex
  waits on words whose addresses it prints, two threads spinning, all four pinned to CPU 0
  with a shell busy loop the test pins there too. The file must be a valid trace (every slice with its fields, slices
  properly nested on each track, timestamps increasing per track), every futex wait a
  slice naming its word and lasting what the fixture measured of that wait, the
  pinned threads' preemptions naming the shell and its pid, the threads named.
- lpops (a ggml-like process, llama_decode per token, precise probes on its ops): every
  generated token is one llama_decode span on the main thread, every op call one span,
  nested in the decode on that thread (counts exact: the window holds the whole run).
- The API around it: a second record of a running one is 409, a pid without one 404,
  bad bodies 400, an unprivileged peer 403.
- Ctrl-C during `llmprofctl record --seconds 30`: the window ends there, and the file
  written covers from its start to the Ctrl-C.
- A client that goes away: llmprofctl record killed mid-window, a raw client that asked
  with a lease and stopped asking. The daemon cancels the record once a lease passes with
  no word from it (what the log says it waited is held to the lease and the 1 s tick),
  keeps nothing, and the next record starts; one without a lease records on. A streamed
  record's client killed: cancelled within 1.5 s, nothing kept."""
import os
import re
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
import lptest as t  # noqa: E402
import tracefmt  # noqa: E402

LPOPS = os.environ.get("LPOPS", "build/tests/lpops")
EPS = tracefmt.EPS


def fixture(work):
    print("--- lpfixture: futex waits of 20 ms, two threads pinned with a busy loop")
    # The hog has a larger share of CPU 0 (nice -10) than the pinned threads: it takes the
    # CPU from each of them many times over their 400 ms, not only from one.
    hog = subprocess.Popen(["nice", "-n", "-10", "taskset", "-c", "0", "sh", "-c",
                            "while :; do :; done"])
    t._children.append(hog)
    # The futex threads share CPU 0 with the hog too: each wait's end then competes for the
    # CPU, and about one wakeup in 200 the kernel runs the thread with no sched_switch
    # naming it (bpftrace sees none either); the wait still ends where the kernel's own
    # account of the next slice says it began.
    fx = t.Fixture("--futex-threads", "2", "--futex-waits", "10", "--futex-ms", "20",
                   "--contend-ms", "400", "--hold", "--futex-cpu", "0")
    # Others may connect; a connection's deadline (1 s) shorter than the record, which is
    # streamed to its client past it, silent while the fixture waits for "go".
    d = t.Daemon("--pid", str(fx.pid), "--socket-mode", "0666", "--http-timeout", "1")
    d.wait_ready()
    out = os.path.join(work, "fixture.perfetto-trace")
    # A window longer than the work, ended by Ctrl-C once the fixture is done: the checks
    # below take seconds on a busy host, and the fixture starts after them.
    rec = tracefmt.record(t, d, fx.pid, out, "--seconds", "60", "--no-ops")

    # The API around a running record.
    st, doc, _ = t.curl(d.socket, "POST", "/v1/processes/%d/record" % fx.pid, "{}")
    t.check(st == 409 and doc["error"]["code"] == "busy", "a second record is refused: %d %s"
            % (st, doc))
    st, doc, _ = t.curl(d.socket, "GET", "/v1/processes/%d/record" % fx.pid)
    t.check(st == 202 and doc["recording"] and 0 < doc["remaining_seconds"] <= 60,
            "GET while it records: 202, %s s left" % doc.get("remaining_seconds"))
    for body in ('{"seconds": 0}', '{"seconds": 61}', '{"ops": 1}', '{"seconds": 1, "x": 2}',
                 "[]"):
        st, doc, _ = t.curl(d.socket, "POST", "/v1/processes/%d/record" % t.unused_pid(), body)
        t.check(st == 400, "bad body %s: 400 (%s)" % (body, doc["error"]["message"]))
    st, doc, _ = t.curl(d.socket, "GET", "/v1/processes/%d/record" % t.unused_pid())
    t.check(st == 404, "no record of a pid: 404")
    st, doc, _ = t.curl(d.socket, "POST", "/v1/processes/%d/record" % fx.pid, "{}",
                        user=t.as_user(65534))
    t.check(st == 403, "an unprivileged peer: 403 (%s)" % doc["error"]["message"])

    fx.go()
    res = fx.result()
    rec.send_signal(signal.SIGINT)
    out_text, err = rec.communicate(timeout=30)
    t.check(rec.returncode == 0 and "wrote " + out in out_text,
            "llmprofctl record exits 0 and says where: %r %r" % (out_text, err))
    hog.kill()
    hog.wait()
    t.check("Perfetto's protobuf trace" in out_text, "by default Perfetto's format: %r"
            % out_text)
    doc = tracefmt.load_any(t, out)
    t.check(doc["otherData"]["events_lost"] == 0 and doc["otherData"]["events_dropped"] == 0,
            "nothing lost: %s" % doc["otherData"])
    ev = tracefmt.valid(t, doc, "fixture")

    # Every futex wait: a slice naming its word, no shorter than its 20 ms timeout (the
    # kernel does not time a wait out early) and no longer than the fixture measured it by
    # the clock read around the syscall (the syscall lies inside; 0.1 ms for the reads). A
    # thread preempted around the syscall makes the fixture's figure the longer one; sorted,
    # each slice stays below its own wait's figure.
    for addr, mine in zip(res["futex_addrs"], res["futex_wait_us"]):
        waits = [e for e in ev if e["ph"] == "X" and e["name"] == "futex wait " + addr]
        durs = sorted(round(e["dur"] / 1e3, 3) for e in waits)
        ref = sorted(round(x / 1e3, 3) for x in mine)
        t.check(len(waits) == res["futex_waits"] and
                all(res["futex_ms"] <= x <= y + 0.1 for x, y in zip(durs, ref)),
                "futex word %s: %d waits, each from its %d ms timeout to what the fixture "
                "measured of it: %s against %s ms" % (addr, len(waits), res["futex_ms"], durs,
                                                      ref))
    unseen = d.get("/v1/processes/%d" % fx.pid)["counters"]["switch_ins_unseen"]
    print("switch-ins the kernel did not report, made up from its account: %d" % unseen)
    # The pinned threads were preempted, each slice naming who took the CPU (its
    # comm and pid, the pid in its args): the shell, or the futex threads waking on CPU 0
    # too, or the other spinner; the shell among them.
    names = {e["tid"]: e["args"]["name"] for e in ev if e["ph"] == "M"
             and e["name"] == "thread_name"}
    by_sh = 0
    for tid in res["spin_tids"]:
        if not names.get(tid, "").startswith("contend"):
            continue
        by = [e for e in ev if e["ph"] == "X" and e["tid"] == tid + tracefmt.CPU_TRACK
              and e["name"].startswith("preempted by ")]
        # (Before it pins itself a spinner may be preempted on the other CPU.)
        bad = [e["name"] for e in by if not e["name"].endswith(" %d" % e["args"]["by_pid"])]
        sh = [e for e in by if e["name"] == "preempted by sh %d" % hog.pid
              and e["args"]["cpu"] == 0]
        by_sh += len(sh)
        t.check(by and not bad, "contend %d: preempted %d times, %d by sh %d on CPU 0, each "
                "slice naming who took the CPU: %s" % (tid, len(by), len(sh), hog.pid, bad))
        t.check(names.get(tid + tracefmt.CPU_TRACK) == "contend %d CPU" % tid,
                "its CPU track is named: %s" % names.get(tid + tracefmt.CPU_TRACK))
    t.check(by_sh > 0, "the shell among who preempted them: %d times" % by_sh)
    # Ctrl-C, as with perf record: the window ends there and what it recorded is written.
    st, doc, _ = t.curl(d.socket, "POST", "/v1/processes/%d/record" % fx.pid, '{"stop": true}')
    t.check(st == 409 and doc["error"]["code"] == "not_recording",
            "stop with no record running: 409 not_recording (%s)" % doc["error"]["message"])
    st, doc, _ = t.curl(d.socket, "POST", "/v1/processes/%d/record" % fx.pid,
                        '{"stop": true, "seconds": 3}')
    t.check(st == 400, "stop with anything beside it: 400 (%s)" % doc["error"]["message"])
    out2 = os.path.join(work, "interrupted.perfetto-trace.gz")
    rec = tracefmt.record(t, d, fx.pid, out2, "--seconds", "30", "--no-ops")
    t0 = time.monotonic()
    time.sleep(1)
    rec.send_signal(signal.SIGINT)
    out_text, err = rec.communicate(timeout=20)
    waited = time.monotonic() - t0
    t.check(rec.returncode == 0 and "wrote " + out2 in out_text and "stopped" in err,
            "Ctrl-C: llmprofctl record stops the window and writes it: %r %r"
            % (out_text, err))
    seconds = tracefmt.load_any(t, out2)["otherData"]["window_seconds"]
    t.check(0.5 <= seconds <= waited,
            "the trace covers until Ctrl-C: %.3f s of the 30 asked (the command took %.2f s)"
            % (seconds, waited))
    t.check("pid %d: recording stopped by a client" % fx.pid in d.log(),
            "the daemon says the record was stopped")
    gone(d, fx.pid, work)
    gone_streamed(d, fx.pid, work)
    fx.release()
    t.check(d.stop() == 0, "llmprofd exits 0")


def gone(d, pid, work):
    """A client that goes away cancels its record: llmprofctl record killed mid-window
    (as a closed terminal would), and a raw client that stops asking."""
    path = "/v1/processes/%d/record" % pid
    for body in ('{"lease": 0}', '{"lease": 61}', '{"lease": "5"}', '{"lease": 5, "lease": 5}'):
        st, doc, _ = t.curl(d.socket, "POST", path, body)
        t.check(st == 400, "lease %s: 400 (%s)" % (body, doc["error"]["message"]))
    started = "pid %d: recording a timeline for " % pid
    n = d.log().count(started)
    rec = subprocess.Popen([t.LLMPROFCTL, "--socket", d.socket, "record", "--pid", str(pid),
                            "-o", os.path.join(work, "killed.json"), "--seconds", "30"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    t._children.append(rec)
    d.wait_log_count(started, n + 1)
    rec.kill()
    rec.wait(timeout=10)
    cancelled = "pid %d: recording cancelled: its client has not asked for it for " % pid
    d.wait_log(cancelled, timeout=15)
    idle = float(re.search(re.escape(cancelled) + r"([\d.]+) s", d.log()).group(1))
    t.check(5 <= idle <= 7, "llmprofctl record killed: the daemon cancels its record after "
            "%.1f s without a word from it (lease 5 s, ticks of 1 s)" % idle)
    st, doc, _ = t.curl(d.socket, "GET", path)
    t.check(st == 404, "nothing of it is kept: GET is %d" % st)
    st, doc, _ = t.curl(d.socket, "POST", path, '{"seconds": 30, "lease": 1}')
    t.check(st == 202 and doc.get("lease") == 1, "the next record starts at once: %d %s"
            % (st, doc))
    # A raw client: it started a record with a lease of 1 s and never asks again.
    d.wait_log_count(cancelled, 2, timeout=10)
    # Without a lease the record stays the API's as before: still recording 2 s on.
    st, doc, _ = t.curl(d.socket, "POST", path, '{"seconds": 3, "ops": false}')
    t.check(st == 202 and "lease" not in doc, "a record without a lease: %d %s" % (st, doc))
    time.sleep(2)
    st, doc, _ = t.curl(d.socket, "GET", path)
    t.check(st == 202 and doc["recording"], "without a lease it records on: %d %s"
            % (st, doc))
    t.poll("the record without a lease", lambda: t.curl(d.socket, "GET", path)[0] == 200,
           timeout=20, interval=0.2)


def gone_streamed(d, pid, work):
    """A streamed record's client that goes away cancels it at once: the answer was its
    lease."""
    path = "/v1/processes/%d/record" % pid
    started = "pid %d: recording a timeline for " % pid
    n = d.log().count(started)
    out = os.path.join(work, "killed.perfetto-trace")
    rec = subprocess.Popen([t.LLMPROFCTL, "--socket", d.socket, "record", "--pid", str(pid),
                            "-o", out, "--seconds", "30", "--no-ops"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    t._children.append(rec)
    d.wait_log_count(started, n + 1)
    t.poll("the stream's first bytes", lambda: os.path.exists(out) and os.path.getsize(out) > 0,
           timeout=10, interval=0.05)
    t0 = time.monotonic()
    rec.kill()
    rec.wait(timeout=10)
    d.wait_log("pid %d: recording cancelled: its client went away" % pid, timeout=10)
    waited = time.monotonic() - t0
    t.check(waited < 1.5, "llmprofctl record (streamed) killed: cancelled %.2f s later (the "
            "daemon reads the ring every 0.1 s)" % waited)
    st, doc, _ = t.curl(d.socket, "GET", path)
    t.check(st == 404, "nothing of it is kept: GET is %d" % st)
    for body in ('{"format": "protobuf"}', '{"format": 1}'):
        st, doc, _ = t.curl(d.socket, "POST", path, body)
        t.check(st == 400, "format %s: 400 (%s)" % (body, doc["error"]["message"]))


KINDS = (("matmul_ms", "MATMUL", "mul_mat_up_gate"), ("attention_ms", "ATTN", "soft_max"),
         ("norm_ms", "NORM", "rms_norm"), ("barrier_ms", "BARRIER", "barrier"))


def own_per_token(ev, gen, op):
    """For each generation decode span, the CPU time of op's spans within it, summed over
    threads, less each span's thread's time off CPU within it: the summary's definition,
    computed again from the file (ms)."""
    spans = [e for e in ev if e["ph"] == "X" and e["tid"] < tracefmt.CPU_TRACK
             and e["name"] == op]
    off = {}
    for e in ev:
        if e["ph"] == "X" and e["tid"] >= tracefmt.CPU_TRACK and e["name"] != "running":
            off.setdefault(e["tid"] - tracefmt.CPU_TRACK, []).append(e)

    def within(e, a, b):
        return max(0.0, min(e["ts"] + e["dur"], b) - max(e["ts"], a))
    own = []
    for g in gen:
        a, b = g["ts"], g["ts"] + g["dur"]
        inside = [e for e in spans if e["ts"] < b and e["ts"] + e["dur"] > a]
        own.append(sum(within(e, a, b) - sum(within(o, max(a, e["ts"]),
                                                    min(b, e["ts"] + e["dur"]))
                                             for o in off.get(e["tid"], []))
                       for e in inside) / 1e3)
    return own


def check_rows(ev, gen, rows, which, slack, what):
    """Each summary row's op times (rows[i][KINDS[k][which]]) against the file: within slack
    (the printed precision) and 0.5 %."""
    for kind in KINDS:
        own = own_per_token(ev, gen, kind[2])
        bad = [(i, r.get(kind[which]), round(x, 3)) for i, (r, x) in enumerate(zip(rows, own))
               if abs(r.get(kind[which], 0) - x) > slack + 0.005 * x]
        t.check(not bad, "%s: %s per token is the op's own CPU time in the file: %s"
                % (what, kind[which], bad[:3]))


def run_lpops(d, work, name, tokens, *extra):
    """lpops decoding tokens while `llmprofctl record` records it into work/name."""
    proc = subprocess.Popen([os.path.realpath(LPOPS), "--wait-go", "--tokens", str(tokens)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    t._children.append(proc)
    pid = t.read_json_line(proc, "lpops", 30)["pid"]
    d.wait_log("pid %d (lpops) runs ggml" % pid)
    out = os.path.join(work, name)
    rec = tracefmt.record(t, d, pid, out, "--seconds", "6", "--summary", *extra)
    d.wait_log("pid %d: precise probes on " % pid)
    proc.stdin.write(b"go\n")
    proc.stdin.flush()
    done = t.read_json_line(proc, "lpops", 60)
    proc.stdin.close()
    proc.wait(timeout=30)
    out_text, err = rec.communicate(timeout=30)
    t.check(rec.returncode == 0, "llmprofctl record exits 0: %r %r" % (out_text, err))
    t.check("pid %d: precise mode off" % pid in d.log(),
            "precise mode, switched on for the window, is off again")
    return pid, out, out_text, done


def ops(work):
    print("--- lpops: llama_decode, op and barrier spans")
    tokens = 150
    # The ops to probe by name: precise mode otherwise picks those with samples, and lpops
    # has none before "go".
    d = t.Daemon("--sample-hz", "99", "--precise-ops", "mul_mat_up_gate,rms_norm,soft_max")
    d.wait_ready()
    pid, out, out_text, done = run_lpops(d, work, "lpops.json", tokens, "--json")
    doc = tracefmt.load(out)
    said = t.json.loads(out_text)
    t.check(said["file"] == out and said["format"] == "json" and
            said["trace_events"] == len(doc["traceEvents"]) and
            said["kernel_events"] == doc["otherData"]["events"] and
            said["bytes"] == os.path.getsize(out) and
            said["window_seconds"] == doc["otherData"]["window_seconds"],
            "--json says what it wrote: the file's trace events, kernel events and bytes: %s"
            % {k: v for k, v in said.items() if k != "tokens"})
    ev = tracefmt.valid(t, doc, "lpops")
    spans = [e for e in ev if e["ph"] == "X" and e["tid"] < tracefmt.CPU_TRACK]
    gen = [e for e in spans if e["name"] == "llama_decode: generation" and e["tid"] == pid]
    t.check(len(gen) == tokens and all(e["args"]["tokens"] == 1 for e in gen),
            "every generated token is one llama_decode span on the main thread: %d of %d"
            % (len(gen), tokens))
    for op in ("mul_mat_up_gate", "rms_norm", "soft_max"):
        calls = [e for e in spans if e["name"] == op]
        t.check(len(calls) == 2 * tokens and {e["tid"] for e in calls} == {
            e["tid"] for e in spans if e["name"] == "barrier"} and len({e["tid"] for e in calls}) == 2,
            "%s: a span per call on each of the 2 threads: %d of %d" % (op, len(calls), 2 * tokens))
    main_ops = [e for e in spans if e["tid"] == pid and e["name"] == "mul_mat_up_gate"]
    inside = [e for e in main_ops if any(g["ts"] <= e["ts"] + EPS and
                                         e["ts"] + e["dur"] <= g["ts"] + g["dur"] + EPS
                                         for g in gen)]
    t.check(len(inside) == len(main_ops), "the main thread's op spans lie inside its decode spans")
    tps = [e for e in ev if e["ph"] == "C" and e["name"] == "tokens/s"]
    rates = sorted(e["args"]["value"] for e in tps)
    t.check(len(tps) == tokens - 1 and 30 < rates[len(rates) // 2] < 200,
            "a tokens/s point per token after the first: %d, median %.1f"
            % (len(tps), rates[len(rates) // 2] if rates else 0))
    t.check(re.search(r"pid %d: timeline recorded: \d+ events" % pid, d.log()) is not None,
            "the log says what was recorded")
    # --summary --json: a row per generated token, an op's own CPU time (its span less its
    # thread's time off CPU within it), computed again here from the file, within 1 us and
    # 0.5 % (the file's timestamps are in us with 3 decimals). Each op's spans against
    # lpops' own wall time of its calls, call to return by its TSC (preemptions included,
    # as in a span), within 2 % and 20 us a call (the probes' own time inside the span,
    # about 2 us a call here, 10 on endbr64), over the calls its thread was not preempted
    # around: a preemption in the microseconds between a probe's clock and lpops' own is
    # in the call's time but not in its span (the k-th span of an op on a thread is that
    # thread's k-th call). A busy host preempts most of the 4 ms calls: ten are enough.
    rows = said.get("tokens", [])
    gen.sort(key=lambda e: e["ts"])
    t.check(len(rows) == tokens and all(abs(r["ms"] - g["dur"] / 1e3) < 1e-3
                                        for r, g in zip(rows, gen)),
            "--summary --json: a row per generated token, its decode's time: %d" % len(rows))
    check_rows(ev, gen, rows, 0, 0.001, "--summary --json")
    for _, _, op in KINDS:
        total, quiet = 0, 0
        for th in done["threads"]:
            calls = sorted((e for e in spans if e["name"] == op and e["tid"] == th["tid"]),
                           key=lambda e: e["ts"])
            skip = set(th["preempted"][op])
            total += sum(e["dur"] for k, e in enumerate(calls) if k not in skip) / 1e3
            quiet += len(calls) - len(skip)
        want = done["quiet_wall_ms"][op]
        t.check(quiet >= 10 and abs(total - want) <= 0.02 * want + 0.02 * quiet,
                "%s: %.1f ms of spans, lpops measured %.1f ms, over its %d calls not "
                "preempted (of %d)" % (op, total, want, quiet, 2 * tokens))

    print("--- lpops: the summary as a table")
    tokens = 20
    pid, out, out_text, _ = run_lpops(d, work, "lpops-text.json", tokens)
    doc = tracefmt.load(out)
    said = re.search(r"wrote \S+: (\d+) trace events from (\d+) kernel events", out_text)
    t.check(said and int(said.group(1)) == len(doc["traceEvents"]) and
            int(said.group(2)) == doc["otherData"]["events"],
            "it says how many trace events the file holds, and from how many kernel events: "
            "%s, the file %d and %d" % (said and said.group(0), len(doc["traceEvents"]),
                                        doc["otherData"]["events"]))
    ev = tracefmt.valid(t, doc, "lpops")
    gen = sorted((e for e in ev if e["ph"] == "X" and e["tid"] == pid and
                  e["name"] == "llama_decode: generation"), key=lambda e: e["ts"])
    lines = out_text.splitlines()
    head = next((i for i, l in enumerate(lines) if l.split()[:2] == ["TOKEN", "MS"]), None)
    t.check(head is not None, "--summary prints the per-token table:\n%s" % out_text[-600:])
    cols = lines[head].split() if head is not None else []
    rows = [dict(zip(cols, map(float, l.split()))) for l in lines[head + 1:] if l.strip()] \
        if head is not None else []
    t.check(len(rows) == tokens == len(gen), "a row per generated token: %d" % len(rows))
    check_rows(ev, gen, rows, 1, 0.006, "--summary, to the 2 decimals printed")
    t.check(d.stop() == 0, "llmprofd exits 0")


def main():
    work = t.tmpdir("llmprof-record-")
    fixture(work)
    ops(work)


t.run(main, timeout=240)
