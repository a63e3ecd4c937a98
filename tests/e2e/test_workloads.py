#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
"""Two node-llama-cpp apps on one host, as a fleet operator sees them: both are `node`
running /usr/bin/node, so only what they run tells them apart. Each maps its own random
model; the API, list, dump, a wide `top` and /metrics must name each one's model (file,
size, architecture, type: checked against the files and their GGUF headers).

Then the thread view of one of them while it decodes: this ggml build starts a worker
thread per token that exits within milliseconds, so the live threads hold about half of
the process's CPU time. `top -b -H` must show a '- (exited)' row, and its rows must add up
to the process row within 5 % of it; the exited row itself is checked against /proc over
the same interval: the process's CPU time (/proc/PID/stat, which keeps what exited threads
used) less its live threads' (/proc/PID/task/TID/schedstat). Tolerance: 5 % of the process's
CPU, for the few milliseconds between top's reads and ours and /proc/PID/stat's 10 ms ticks
(over 3 s of two busy threads: 0.2 %)."""
import json
import os
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
import lptest as t  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
WORKLOAD = os.path.join(HERE, "..", "workload")
TOLERANCE = 0.05


def driver(model, tokens, forever=False):
    drv = subprocess.Popen(["node", os.path.join(WORKLOAD, "driver.mjs"), "--model", model,
                            "--tokens", str(tokens), "--threads", "2", "--prompt", "8",
                            "--wait-go"] + (["--forever"] if forever else []),
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    t._children.append(drv)
    return drv, t.read_json_line(drv, "the driver", 60)["pid"]


def proc_cpu(pid):
    """(the process's CPU seconds from /proc/PID/stat, {tid: CPU seconds of live threads})."""
    total = t.proc_cpu_seconds(pid)
    return total, {tid: on / 1e9 for tid, (on, _) in t.thread_schedstat(pid).items()}


def cell(header, line, name):
    """The text of a right-aligned column of top's fixed-width table."""
    end = header.index(name) + len(name)
    width = max(len(name), 5)
    return line[end - width:end].strip()


def main():
    if not os.path.isdir(os.path.join(WORKLOAD, "node_modules", "node-llama-cpp")):
        raise AssertionError("node-llama-cpp is not installed: run npm ci in tests/workload")
    tmp = t.tmpdir("llmprofd-models-")
    models = {}
    for name, shape, kind in (("alpha-small.gguf", "small", "q8_0"),
                              ("beta-small.gguf", "small", "f16")):
        models[name] = os.path.join(tmp, name)
        subprocess.run([sys.executable, os.path.join(WORKLOAD, "gen_gguf.py"), "--shape", shape,
                        "--type", kind, models[name]], check=True, timeout=60,
                       capture_output=True)
    port = t.free_port()
    # Exited processes stay in /metrics for the whole test, however slow the host: the
    # restart's checks read them there (by default they leave 120 s after their exit,
    # and on a slow host the first driver had exited that long before the restart).
    keep = ("--metrics-exited-seconds", "3600")
    d = t.Daemon("--metrics-address", "127.0.0.1:%d" % port, *keep)
    d.wait_ready()
    apps = {}
    for name in models:
        # beta decodes until it is stopped, however fast the host: the thread view needs it
        # busy through two of top's intervals
        drv, pid = driver(models[name], 400 if name.startswith("beta") else 50,
                          forever=name.startswith("beta"))
        apps[name] = (drv, pid)

    print("--- two node apps told apart by their models")

    def named():
        got = {p["pid"]: (p.get("model") or {}).get("name")
               for p in d.get("/v1/processes")["processes"]}
        return all(got.get(pid) == name for name, (_, pid) in apps.items()) and got
    t.poll("both processes to be tracked with their models", named, timeout=30, interval=0.5)
    for name, (_, pid) in apps.items():
        doc = d.get("/v1/processes/%d" % pid)
        m = doc["model"]
        t.check(doc["comm"] == "node" and m["path"] == os.path.realpath(models[name]) and
                m["bytes"] == os.path.getsize(models[name]) and m["architecture"] == "llama" and
                m["type"] == ("Q8_0" if "alpha" in name else "F16"),
                "pid %d (node): %s" % (pid, m))
        t.check("driver.mjs --model %s" % models[name] in doc["cmdline"],
                "its command line: %s" % doc["cmdline"][:100])
        t.check([p["pid"] for p in d.get("/v1/processes?model=%s" % name)["processes"]] == [pid],
                "?model=%s selects it alone" % name)
    env = dict(os.environ, LLMPROF_SOCKET=d.socket)
    out = subprocess.run([t.LLMPROFCTL, "list"], capture_output=True, text=True, env=env).stdout
    rows = {int(l.split()[0]): l for l in out.splitlines()[1:]}
    t.check(all(name in rows.get(pid, "") for name, (_, pid) in apps.items()),
            "list names each one's model:\n%s" % out)
    out = subprocess.run([t.LLMPROFCTL, "top", "-b", "-n", "1"], capture_output=True, text=True,
                         env=dict(env, COLUMNS="140")).stdout
    lines = out.splitlines()
    header = next(l for l in lines if l.lstrip().startswith("PID COMMAND"))
    t.check("MODEL" in header and max(len(l) for l in lines) < 140,
            "top in 140 columns adds MODEL: %r" % header)
    for name, (_, pid) in apps.items():
        # The PID column is 7 wide; a finding's mark may follow it.
        row = [l for l in lines if l[:7].lstrip("!*+").strip() == str(pid)]
        t.check(row and row[0][header.index("MODEL"):].split()[0] == name,
                "top's MODEL for pid %d: %s" % (pid, row))
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10) as r:
        text = r.read().decode()
    for name, (_, pid) in apps.items():
        info = [l for l in text.splitlines()
                if l.startswith('llmprof_process_info{pid="%d",' % pid)]
        t.check(len(info) == 1 and 'model="%s"' % name in info[0] and
                'model_type="%s"' % ("Q8_0" if "alpha" in name else "F16") in info[0] and
                'cmdline=' not in info[0],
                "/metrics: llmprof_process_info of pid %d names %s, not its command line"
                % (pid, name))
    out = subprocess.run([t.LLMPROFCTL, "dump", "--pid", str(apps["beta-small.gguf"][1])],
                         capture_output=True, text=True, env=env).stdout
    t.check("model beta-small.gguf (llama, F16, 8 MB)" in out, "dump names the model: %s" %
            [l for l in out.splitlines() if l.startswith("model")])
    drv, _ = apps["alpha-small.gguf"]
    drv.stdin.close()
    drv.wait(timeout=30)

    print("--- the thread view of a process whose workers exit per token")
    drv, pid = apps["beta-small.gguf"]
    drv.stdin.write(b"go\n")
    drv.stdin.flush()
    time.sleep(1)  # past the prompt
    top = subprocess.Popen([t.LLMPROFCTL, "top", "-b", "-H", "-n", "2", "-d", "3", "-p",
                            str(pid)], stdout=subprocess.PIPE, text=True, env=env)
    t._children.append(top)
    tables, refs, cur = [], [], None
    for line in top.stdout:
        if line.startswith("llmprofctl top - "):
            refs.append((time.monotonic(), proc_cpu(pid)))  # the read it just made
            cur = []
            tables.append(cur)
        elif cur is not None:
            cur.append(line.rstrip("\n"))
    top.wait(timeout=30)
    t.check(len(tables) == 2 and len(refs) == 2, "top printed two tables")
    lines = tables[1]
    header = next(l for l in lines if l.lstrip().startswith("PID COMMAND"))
    # The process's row: its PID cell may lead with a finding's mark (a thread row holds
    # the main thread's tid, the same number, with none).
    prow = next(l for l in lines if l[:7].lstrip("!*+").strip() == str(pid))
    threads = lines[lines.index(prow) + 1:]
    exited = [l for l in threads if l.split()[:2] == ["-", "(exited)"]]
    cpu = float(cell(header, prow, "CPU%"))
    parts = [float(cell(header, l, "CPU%")) for l in threads if cell(header, l, "CPU%")]
    t.check(exited, "a '- (exited)' row: %s" % exited)
    t.check(abs(sum(parts) - cpu) <= TOLERANCE * cpu,
            "thread rows add up to the process: %.1f%% vs %.1f%% (%d rows)"
            % (sum(parts), cpu, len(parts)))
    (t0, (p0, th0)), (t1, (p1, th1)) = refs
    live = sum(s - th0.get(tid, 0) for tid, s in th1.items())
    ref_exited = 100 * ((p1 - p0) - live) / (t1 - t0)
    ours = float(cell(header, exited[0], "CPU%")) if exited else 0
    t.check(abs(ours - ref_exited) <= TOLERANCE * cpu,
            "the exited row %.1f%%, /proc says %.1f%% (process %.1f%%, live threads %.1f%%)"
            % (ours, ref_exited, cpu, 100 * live / (t1 - t0)))
    t.check(ref_exited > 0.2 * cpu, "exited threads took a real part: %.1f%% of %.1f%%"
            % (ref_exited, cpu))
    t.check(drv.poll() is None, "the driver decoded through both intervals")
    drv.terminate()
    drv.wait(timeout=30)
    t.poll("pid %d's exit to be read" % pid,
           lambda: d.get("/v1/processes/%d" % pid)["state"] == "exited", timeout=30)
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10) as r:
        mine = [l for l in r.read().decode().splitlines() if 'pid="%d"' % pid in l]
    fine = [l for l in mine if "_bucket{" in l]
    print("series of the decoding process in /metrics: %d, of which %d histogram buckets"
          % (len(mine), len(fine)))
    # A sanity bound, not a measurement: docs/API.md gives the count measured here.
    t.check(len(mine) < 1000, "%d series for a decoding process (docs/API.md: about 700 "
            "with classic buckets)" % len(mine))
    before = {pid: d.get("/v1/processes/%d" % pid) for _, (_, pid) in apps.items()}
    t.check(d.stop() == 0, "llmprofd exits 0")

    print("--- after a restart, the exited processes are still who they were")
    d = t.Daemon("--state-directory", d.state_dir, "--metrics-address",
                 "127.0.0.1:%d" % port, *keep)
    d.wait_ready()
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10) as r:
        text = r.read().decode()
    for name, (_, pid) in apps.items():
        doc, old = d.get("/v1/processes/%d" % pid), before[pid]
        t.check(doc["state"] == "exited" and doc["model"] == old["model"] and
                doc["cmdline"] == old["cmdline"] and doc["workload"] == old["workload"],
                "pid %d restored with its model %s and command line" % (pid, name))
        g = doc.get("ggml") or {}
        t.check(g.get("tokens", {}).get("generation") == old["ggml"]["tokens"]["generation"],
                "and its tokens: %s" % g.get("tokens", {}).get("generation"))
        info = [l for l in text.splitlines()
                if l.startswith('llmprof_process_info{pid="%d",' % pid)]
        t.check(len(info) == 1 and 'model="%s"' % name in info[0],
                "/metrics names its model after the restart: %s" % info)
    t.check(d.stop() == 0, "llmprofd exits 0 after the restart")


if __name__ == "__main__":
    t.run(main, timeout=480)
