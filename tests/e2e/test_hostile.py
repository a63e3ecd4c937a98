#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
"""e2e tier: input from people who are not the administrator. A process whose name and
directory hold terminal escapes, newlines and a byte that is not UTF-8 reaches neither the
terminal (list, top -b, dump, dump --json) nor the log raw; every route's answer, /metrics
and state.json are UTF-8 with the name escaped once, and a restart shows the same name. A state file that is corrupt, of another version, too
large, or full of impossible values is refused record by record with a reason, and never
becomes counts; a FIFO in its place does not hold the start; a link planted under the
temporary file's name is not written through; a directory others may write is refused at
start; a full disk shows in status and /metrics; totals survive a SIGKILL through checkpoints; a state directory that cannot
take the totals is an error at start, and a failed save at exit is a non-zero status. A
--config that names a directory is an error, at start and at reload."""
import json
import os
import shutil
import signal
import subprocess
import sys
import urllib.parse

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
import lptest as t  # noqa: E402

# Sets the window title, clears the screen, starts a new line, and a byte that is not UTF-8
# (a file's name is any byte but NUL and '/'): what must not get through.
EVIL_NAME = "x\x1b[2J\ny\udcff"
EVIL_DIR = "d\x1b]0;pwned\x07\nz"


def escaped(name):
    """What lp_escape makes of a name of ASCII and stray bytes: \\xNN, and \\\\."""
    out = ""
    for b in os.fsencode(name):
        if b == 0x5c:
            out += "\\\\"
        elif 0x20 <= b < 0x7f:
            out += chr(b)
        else:
            out += "\\x%02x" % b
    return out


def ctl(d, *args):
    p = subprocess.run([t.LLMPROFCTL, "--socket", d.socket] + list(args), capture_output=True,
                       timeout=30)
    return p.returncode, p.stdout, p.stderr


def test_names():
    print("--- a process named with escapes and newlines")
    top = t.tmpdir("llmprof-evil-")
    evil_dir = os.path.join(top, EVIL_DIR)
    os.mkdir(evil_dir)
    exe = os.path.join(evil_dir, EVIL_NAME)
    shutil.copy(t.LPFIXTURE, exe)
    fx = subprocess.Popen([exe, "--wait-go", "--futex-threads", "1", "--futex-waits", "3",
                           "--futex-ms", "1", "--hold"], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE)
    t._children.append(fx)
    d = t.Daemon("--pid", str(fx.pid))
    d.wait_ready()
    fx.stdin.write(b"go\n")
    fx.stdin.flush()
    t.read_json_line(fx, "the fixture")
    # Every answer is UTF-8 (curl's text is decoded strictly): the name and the path are
    # escaped once, as ps and systemd do, and read back to their bytes.
    doc = d.get("/v1/processes/%d" % fx.pid)
    t.check(doc["comm"] == escaped(EVIL_NAME) and doc["exe"] == escaped(exe),
            "the API sends the name and the path escaped once: %r %r"
            % (doc["comm"], doc["exe"]))
    for route in ("/v1/status", "/v1/processes", "/v1/processes/%d/findings" % fx.pid,
                  "/v1/processes?pid=%d" % fx.pid):
        doc_r = d.get(route)  # decoded as UTF-8 strictly, parsed as JSON
        t.check("\x1b" not in json.dumps(doc_r, ensure_ascii=False),
                "%s: UTF-8 and JSON, no raw ESC in any string" % route)
    listed_comm = [p["comm"] for p in d.get("/v1/processes?comm=" +
                                           urllib.parse.quote(escaped(EVIL_NAME)))["processes"]]
    t.check(listed_comm == [escaped(EVIL_NAME)], "comm= selects it by the name it is shown "
            "by: %s" % listed_comm)
    _, metrics, _ = d.api("GET", "/metrics")
    label = 'comm="%s"' % escaped(EVIL_NAME).replace("\\", "\\\\")
    t.check(label in metrics and "\x1b" not in metrics,
            "/metrics: UTF-8, the label escaped once, then as the exposition format wants: "
            "%s" % [ln for ln in metrics.splitlines() if "comm=" in ln][:1])
    want = b"x\\x1b[2J\\x0ay\\xff"
    for args in (["list"], ["top", "-b", "-n", "1"], ["dump", "--pid", str(fx.pid)]):
        rc, out, err = ctl(d, *args)
        t.check(rc == 0 and b"\x1b" not in out and b"\x07" not in out,
                "llmprofctl %s: no ESC or BEL byte on the terminal" % args[0])
        # top's COMMAND column is narrower than the escaped name: it shows its start.
        t.check((want if args[0] != "top" else want[:8]) in out,
                "llmprofctl %s shows the name escaped: %s" %
                (args[0], [line for line in out.split(b"\n") if b"\\x1b" in line][:1]))
        t.check(not any(line.startswith(b"y") for line in out.split(b"\n")),
                "llmprofctl %s: the name's newline breaks no line" % args[0])
    rc, out, _ = ctl(d, "dump", "--pid", str(fx.pid), "--json")
    t.check(rc == 0 and b"\x1b" not in out and json.loads(out)["comm"] == escaped(EVIL_NAME),
            "dump --json: the same document, escaped once, not twice")
    d.stop()
    fx.stdin.close()
    fx.wait(timeout=20)
    log = open(d.err_path, "rb").read()
    t.check(b"\x1b" not in log and b"\x07" not in log, "the log has no ESC or BEL byte")
    t.check(b"(x\\x1b[2J\\x0ay\\xff)" in log and not any(l.startswith(b"y)") for l in log.split(b"\n")),
            "the log escapes the name, and its newline forges no line")
    # The state file is UTF-8 too, the name escaped once; read back, it is the same name.
    raw = open(os.path.join(d.state_dir, "state.json"), "rb").read()
    saved = [p for p in json.loads(raw.decode("utf-8"))["processes"]
             if int(p["pid"]) == fx.pid]
    t.check(saved and saved[0]["comm"] == escaped(EVIL_NAME) and
            saved[0]["exe"] == escaped(exe), "state.json keeps it escaped once: %r"
            % (saved and saved[0]["comm"]))
    d2 = t.Daemon("--state-directory", d.state_dir)
    d2.wait_ready()
    back = [p for p in d2.get("/v1/processes")["processes"] if p["pid"] == fx.pid]
    t.check(back and back[0]["comm"] == escaped(EVIL_NAME) and back[0]["exe"] == escaped(exe),
            "and after a restart the API shows it as before, not escaped twice: %r"
            % (back and back[0]["comm"]))
    d2.stop()


def state_doc(records, fmt=1):
    return {"format": fmt, "hist_sub_bits": 3, "hist_buckets": 288, "boot_id": "other-boot",
            "saved_at": 1.0, "processes": records}


def record(number, **kw):
    r = {"pid": str(number), "starttime": "100", "comm": "saved", "uid": "0", "matched_by": "pid",
         "exited": True, "data_lost": False, "tracked_for_ns": "1000000000",
         "exited_ago_ns": "1000000", "counters": {"page_faults_minor": "7"},
         "histograms": {"futex_wait": {"sum": "3000", "max": "1500",
                                       "buckets": {"67": "2"}}},
         "futex": [], "futex_addresses": "0"}
    r.update(kw)
    return r


def start_with_state(text, *args):
    d = t.Daemon(*args, private=True)
    # The daemon was started before the file existed: stop it, write the file, start again.
    d.stop()
    os.makedirs(d.state_dir, exist_ok=True)
    with open(os.path.join(d.state_dir, "state.json"), "w") as f:
        f.write(text)
    d2 = t.Daemon("--state-directory", d.state_dir, *args)
    d2.wait_ready()
    return d2


def listed(d):
    return {p["pid"]: p for p in d.get("/v1/processes")["processes"]}


def test_newline_path():
    print("--- a ggml process whose path holds a newline: probed like any other")
    top = t.tmpdir("llmprof-nl-")
    where = os.path.join(top, "dir\nname")
    os.mkdir(where)
    exe = os.path.join(where, "lpops")
    shutil.copy(os.environ.get("LPOPS", "build/tests/lpops"), exe)
    d = t.Daemon("--precise-duty", "1")
    d.wait_ready()
    pid, _ = t.run_found([exe, "--wait-go", "--tokens", "40"], d, "lpops",
                         then=("pid %d: precise mode on",))
    d.wait_log("pid %d (lpops) exited" % pid)
    doc = d.get("/v1/processes/%d" % pid)
    g = doc.get("ggml") or {}
    t.check(g.get("tokens", {}).get("generation", {}).get("tokens") == 40,
            "llama_decode's probes are on it: %s generated tokens of 40"
            % g.get("tokens", {}).get("generation", {}).get("tokens"))
    pr = g.get("precise") or {}
    t.check(pr.get("generation", {}).get("tokens_inside") == 40
            and pr.get("matmul", {}).get("calls", 0) > 0,
            "and precise mode's: %s tokens inside its windows, %s matmul calls"
            % (pr.get("generation", {}).get("tokens_inside"),
               pr.get("matmul", {}).get("calls")))
    paths = [o["path"] for o in g.get("objects", [])]
    t.check(any(p.endswith("dir\\x0aname/lpops") for p in paths)
            and not any("\\012" in p or "\n" in p for p in paths),
            "its path is escaped once, from the file's own name: %s" % paths)
    rc, out, _ = ctl(d, "dump", "--pid", str(pid))
    t.check(rc == 0 and b"dir\\x0aname/lpops\n" in out,
            "dump shows it escaped, on one line")
    t.check(d.stop() == 0, "llmprofd exits 0")


def test_state_values():
    print("--- state file: impossible values are refused, one record at a time")
    hist = lambda s, m, b: {"futex_wait": {"sum": s, "max": m, "buckets": b}}  # noqa: E731
    bad = [
        record(901, counters={"page_faults_minor": "abc"}),
        record(902, counters={"page_faults_minor": "-1"}),
        record(903, counters={"page_faults_minor": "100000000000000000000000000"}),
        record(904, counters={"page_faults_minor": 5}),
        record(905, histograms=hist("18000000000000000000", "1500", {"67": "2"})),
        record(912, histograms=hist("1000000000000", "1500", {"67": "2"})),
        record(906, histograms=hist("3000", "1500", {"999": "1"})),
        record(907, histograms=hist("5", "0", {})),
        record(908, comm=42),
        record(909, pid="0"),
        record(910, exited="yes"),
        record(911, histograms={"no_such_histogram": {"sum": "1", "max": "1",
                                                      "buckets": {"1": "1"}}}),
    ]
    good = record(950)
    dup = record(950, counters={"page_faults_minor": "9"})
    d = start_with_state(json.dumps(state_doc([good] + bad + [dup])))
    procs = listed(d)
    t.check(set(procs) == {950}, "only the good record is restored: %s" % sorted(procs))
    one = d.get("/v1/processes/950")
    t.check(one["counters"]["page_faults_minor"] == 7 and one["state"] == "exited" and
            one["counters"]["futex_waits"] == 2 and one["histograms"]["futex_wait"]["max"] == 1500,
            "its values are the first copy's (7 faults, 2 waits), not the duplicate's")
    log = d.log()
    for why in ("'page_faults_minor' is not a decimal number", "is out of range",
                "is not a string of digits", "sum 1000000000000 ns does not fit", "'sum' = 18000000000000000000 is out of range",
                "no bucket '999'", "has a sum or maximum but no samples", "'comm' is not a name",
                "'pid' is 0", "saved twice"):
        t.check(why in log, "the log gives the reason: %r" % why)
    t.check("record(s) refused in all" in log and "13 record(s) refused" in log,
            "the log counts every refused record")
    d.stop()


def starttime(pid):
    return t.proc_stat(pid)[19]


def test_state_adoption():
    print("--- state file: a record of a running process is adopted only if a rule tracks it")
    with open("/proc/sys/kernel/random/boot_id") as f:
        boot = f.read().strip()
    other = subprocess.Popen(["sleep", "120"])
    t._children.append(other)
    g = t.Lpggml("--hold", "--iters", "1")
    running = dict(exited=False, exited_ago_ns="0")
    doc = state_doc([record(1, starttime=starttime(1), matched_by="ggml", **running),
                     record(other.pid, starttime=starttime(other.pid), **running),
                     record(g.pid, starttime=starttime(g.pid), matched_by="ggml", **running)])
    doc["boot_id"] = boot
    d = start_with_state(json.dumps(doc))
    d.wait_log("tracking pid %d" % g.pid)
    procs = listed(d)
    t.check(1 not in procs and other.pid not in procs,
            "pid 1 and a sleep of the test's, running with the saved start times, are not "
            "tracked: %s" % sorted(procs))
    for pid in (1, other.pid):
        t.check("pid %d is running but is not a process this daemon tracks now" % pid
                in d.log(), "the log says why pid %d was not adopted" % pid)
    mine = d.get("/v1/processes/%d" % g.pid)
    t.check(mine["state"] == "running" and mine["counters"]["page_faults_minor"] >= 7
            and mine["counters"]["futex_waits"] >= 2,
            "the ggml process is adopted with its saved totals as a base: %d faults, %d waits"
            % (mine["counters"]["page_faults_minor"], mine["counters"]["futex_waits"]))
    g.finish()
    other.kill()
    other.wait()
    d.stop()


def test_state_files():
    print("--- state file: corrupt, another version, too large, too many records")
    d = start_with_state("{\"format\": 1, \"processes\": [")
    t.check("is corrupt" in d.log(), "a truncated file is called corrupt")
    t.check(os.path.exists(os.path.join(d.state_dir, "state.json.corrupt")),
            "and kept aside as state.json.corrupt")
    t.check(d.get("/v1/status")["processes"]["exited"] == 0, "nothing came from it")
    d.stop()
    t.check(os.path.exists(os.path.join(d.state_dir, "state.json")), "a new file was saved")

    d = start_with_state(json.dumps(state_doc([record(960)], fmt=99)))
    t.check("written by another version of llmprofd (state format 99" in d.log(),
            "another version's file is told apart: %s" % d.log().splitlines()[-3:])
    t.check(os.path.exists(os.path.join(d.state_dir, "state.json.format-99")),
            "and kept aside as state.json.format-99")
    d.stop()

    big = json.dumps(state_doc([record(1000 + i) for i in range(100)]))
    big += " " * (2 << 20)
    d = start_with_state(big, "--max-processes", "8")
    t.check("over the" in d.log() and "not restored" in d.log(),
            "a file larger than --max-processes allows is not read")
    t.check(not listed(d), "nothing came from it")
    d.stop()

    d = start_with_state(json.dumps(state_doc([record(2000 + i) for i in range(100)])),
                         "--max-processes", "8")
    n = len(listed(d))
    t.check(n == 8, "100 exited records, --max-processes 8: %d kept" % n)
    t.check("more than 16 records" in d.log(), "records past twice --max-processes are not read")
    d.stop()


def test_checkpoint_and_save_errors():
    print("--- checkpoints survive SIGKILL; a state directory that cannot be written")
    fx = t.Fixture("--futex-threads", "1", "--futex-waits", "6", "--futex-ms", "1", "--hold")
    d = t.Daemon("--pid", str(fx.pid), "--checkpoint-interval", "1")
    d.wait_ready()
    fx.go()
    fx.result()
    path = os.path.join(d.state_dir, "state.json")

    def saved_waits():
        try:
            doc = json.load(open(path))
        except (OSError, ValueError):
            return 0
        for p in doc["processes"]:
            if p["pid"] == str(fx.pid):
                h = p["histograms"].get("futex_wait", {"buckets": {}})
                return sum(int(v) for v in h["buckets"].values())
        return 0
    t.poll("a checkpoint with the fixture's 6 waits", lambda: saved_waits() >= 6, timeout=10)
    d.proc.kill()
    d.wait_exit()
    d2 = t.Daemon("--pid", str(fx.pid), "--state-directory", d.state_dir)
    d2.wait_ready()
    waits = d2.get("/v1/processes/%d" % fx.pid)["counters"]["futex_waits"]
    t.check(waits >= 6, "after SIGKILL and a restart the running process keeps its %d waits"
            % waits)

    # The directory disappears under the daemon (a file in its place): saving fails.
    shutil.rmtree(d.state_dir)
    open(d.state_dir, "w").close()
    t.check(d2.stop(signal.SIGTERM) == 1, "a failed save at exit: exit status 1")
    t.check("save the totals to" in d2.log(), "and the log says the totals were not saved")
    os.unlink(d.state_dir)
    fx.release()

    blocked = os.path.join(t.tmpdir(), "file")
    open(blocked, "w").close()
    d3 = t.Daemon("--state-directory", os.path.join(blocked, "state"))
    t.check(d3.wait_exit() == 1, "a state directory that cannot be created: exit 1 at start")
    t.check("state directory" in d3.log() and "--state-directory off" in d3.log(),
            "the message names it and the way out: %s" % d3.log().strip().splitlines()[-1:])


def test_state_directory():
    print("--- the state directory: planted links, a FIFO, others' write access, a full disk")
    # A link planted under the temporary file's name: root must not write through it.
    victim = t.tmpfile("precious\n")
    os.chmod(victim, 0o600)
    sd = t.tmpdir(mode=0o700)
    os.symlink(victim, os.path.join(sd, ".state.json.tmp"))
    d = t.Daemon("--state-directory", sd, "--checkpoint-interval", "1")
    d.wait_ready()
    t.poll("a checkpoint", lambda: os.path.isfile(os.path.join(sd, "state.json")), timeout=10)
    with open(victim) as f:
        kept = f.read()
    t.check(kept == "precious\n" and not os.path.islink(os.path.join(sd, "state.json")),
            "a link planted as .state.json.tmp: the checkpoint went around it, its target "
            "untouched (%r)" % kept)
    t.check(d.stop() == 0, "llmprofd exits 0")

    # A FIFO named state.json: the start does not wait on it.
    sd = t.tmpdir(mode=0o700)
    os.mkfifo(os.path.join(sd, "state.json"))
    d = t.Daemon("--state-directory", sd)
    d.wait_ready(timeout=10)
    t.check("is not a regular file" in d.log(), "a FIFO as state.json: said, not waited on")
    t.check(d.stop() == 0 and os.path.isfile(os.path.join(sd, "state.json")),
            "and the totals are saved over it at exit")

    # Others may write the directory: refused at start, with the way out.
    for mode in (0o777, 0o770):
        sd = t.tmpdir(mode=mode)
        d = t.Daemon("--state-directory", sd)
        t.check(d.wait_exit() == 1 and "writable by others" in d.log()
                and "chmod go-w" in d.log(),
                "a state directory of mode %04o: exit 1 at start: %s"
                % (mode, d.log().strip().splitlines()[-1:]))

    # A full disk: every save fails, and status and /metrics say so, not only the log.
    sd = t.tmpdir(mode=0o700)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k,mode=0700", "lptest", sd],
                   check=True)
    try:
        with open(os.path.join(sd, "filler"), "wb", buffering=0) as f:
            try:
                while True:
                    f.write(b"x" * 4096)
            except OSError:
                pass
        d = t.Daemon("--state-directory", sd, "--checkpoint-interval", "1")
        d.wait_ready()
        t.poll("a failed checkpoint in status",
               lambda: d.get("/v1/status")["state"]["saves_failed"] >= 1, timeout=10)
        st = d.get("/v1/status")["state"]
        _, metrics, _ = d.api("GET", "/metrics")
        line = [l for l in metrics.splitlines()
                if l.startswith("llmprofd_state_saves_failed_total ")]
        t.check(st["last_error"] == "No space left on device" and line
                and float(line[0].split()[1]) >= 1,
                "a full disk: status %s, /metrics %s" % (st, line))
        t.check(d.stop(signal.SIGTERM) == 1, "the save at exit fails too: exit status 1")
    finally:
        subprocess.run(["umount", sd])


def test_config_directory():
    print("--- --config naming a directory")
    conf_dir = t.tmpdir()
    d = t.Daemon("--config", conf_dir)
    t.check(d.wait_exit() == 2 and "is a directory" in d.log(),
            "at start: exit 2, 'is a directory'")
    conf = os.path.join(t.tmpdir(), "llmprofd.conf")
    with open(conf, "w") as f:
        f.write("[service]\nretention = 77\n")
    d = t.Daemon("--config", conf)
    d.wait_ready()
    os.unlink(conf)
    os.mkdir(conf)
    os.kill(d.proc.pid, signal.SIGHUP)
    d.wait_log("keeping the current one")
    t.check(d.get("/v1/status")["config"]["retention"] == 77,
            "at reload: refused, the running settings stay")
    d.stop()


def main():
    test_names()
    test_newline_path()
    test_state_values()
    test_state_adoption()
    test_state_files()
    test_checkpoint_and_save_errors()
    test_state_directory()
    test_config_directory()


t.run(main, timeout=200)
