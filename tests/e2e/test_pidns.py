#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
"""e2e tier: a daemon in a PID namespace of its own, as a container without --pid=host or a
pod without hostPID runs it (unshare --pid --fork --mount-proc: its own /proc). The
programs then number tasks as that namespace does, so that the kernel's figures meet what
the daemon reads in its /proc:

- an engine started in the namespace after the daemon (nsenter) is tracked by its pid
  there, with its threads (its /proc/PID/task there) and its tokens (the count llama-simple
  prints itself);
- the status says which namespace it sees;
- a ggml process outside the namespace is not seen;
- the same kind of engine on the host is tracked by a daemon on the host, by its host pid,
  as before."""
import os
import re
import signal
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
import lptest as t  # noqa: E402

WORKLOAD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "workload")


def ns_pid(host_pid):
    """A process's pid in its own PID namespace: the last of /proc/PID/status's NSpid."""
    with open("/proc/%d/status" % host_pid) as f:
        return int(re.search(r"^NSpid:\s+(.*)$", f.read(), re.M)[1].split()[-1])


def main():
    work = t.tmpdir("llmprofd-pidns-")
    model = os.path.join(work, "small.gguf")
    subprocess.run([sys.executable, os.path.join(WORKLOAD, "gen_gguf.py"), "--shape", "small",
                    model], check=True, timeout=120)
    simple = t.llama_simple()
    # Every kernel call of the daemon's (object reads among them) waits 0.4 s: the first
    # engine below is then gone before its binary is read, as it is on a slow host, and is
    # named from what it mapped all the same (a gone process is outside the test's cgroup).
    d = t.Daemon("--comm", "llama-simple",
                 env=dict(os.environ, LLMPROF_FAULT_KERNEL_DELAY_MS="400"),
                 wrap=["unshare", "--pid", "--fork", "--mount-proc", "--kill-child", "--"])
    d.wait_ready()
    daemon = t.child_of(d.proc.pid)
    ino = os.stat("/proc/%d/ns/pid" % daemon).st_ino
    t.check(ns_pid(daemon) == 1, "the daemon is pid 1 of its namespace (host pid %d)" % daemon)
    st = d.get("/v1/status")
    t.check(st["pid_namespace"] == {"host": False, "inode": ino} and
            "PID namespace: not the host's (pid:[%d])" % ino in d.log(),
            "the status and the log say which namespace it sees: %s" % st["pid_namespace"])

    # A ggml process on the host, outside the namespace: not seen.
    outside = t.Lpggml("--iters", "200000")
    outside.go()

    # The engine, in the namespace, after the daemon. llama-simple decodes within 0.1 s of
    # its start, before a daemon has read a new binary's symbols: the first run puts the
    # probes on the file (they stay), and --comm llama-simple tracks the next one from its
    # exec, in the kernel, which then has to name it by its pid there.
    def run(n):
        eng = subprocess.Popen(["nsenter", "--target", str(daemon), "--pid", "--mount", "--",
                                simple, "-m", model, "-n", str(n), "Once upon a time"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                               errors="replace")
        t._children.append(eng)
        return eng, t.child_of(eng.pid)

    first, first_host = run(16)
    first_pid = ns_pid(first_host)
    t.check(first_pid != first_host, "the engine's pid there, %d, is not its host pid %d"
            % (first_pid, first_host))
    first.communicate(timeout=120)
    d.wait_log("pid %d (llama-simple) runs ggml" % first_pid, timeout=60)

    eng, host_pid = run(600)
    pid = ns_pid(host_pid)

    def running():
        status, doc, _ = d.api("GET", "/v1/processes/%d" % pid)
        return status == 200 and len(doc.get("threads") or []) >= 2 and doc
    doc = t.poll("pid %d's threads" % pid, running, timeout=60, interval=0.2)
    tids = sorted(int(x) for x in os.listdir("/proc/%d/task" % host_pid))
    ns_tids = sorted(ns_pid_of_task(host_pid, x) for x in tids)
    ours = sorted(th["tid"] for th in doc["threads"])
    t.check(set(ours) <= set(ns_tids) | {pid} and not set(ours) & (set(tids) - set(ns_tids)),
            "its threads by their ids there: %s (there: %s, on the host: %s)"
            % (ours, ns_tids, tids))
    procs = [p["pid"] for p in d.get("/v1/processes")["processes"]]
    t.check(pid in procs and outside.pid not in procs and
            "pid %d " % outside.pid not in d.log(),
            "the namespace's engines are tracked: %s (the host's lpggml %d is not)"
            % (procs, outside.pid))
    _, err = eng.communicate(timeout=600)
    printed = re.search(r"decoded (\d+) tokens", err)
    rq = t.poll("its request, ended by its exit",
                lambda: (lambda x: x if x["requests"]["requests"] >= 1 else None)(
                    d.get("/v1/processes/%d/requests" % pid)), timeout=30)["requests"]
    t.check(printed and rq["requests"] == 1 and
            rq["last"][0]["output_tokens"] == int(printed.group(1)),
            "its tokens, counted from its exec: %d out, llama-simple says it decoded %s"
            % (rq["last"][0]["output_tokens"], printed and printed.group(1)))
    t.check(outside.proc.poll() is None, "the host's lpggml %d ran all along" % outside.pid)
    outside.proc.kill()
    outside.proc.wait(timeout=20)
    # unshare passes no signal on; the daemon, pid 1 there, gets SIGTERM as a container
    # runtime's stop sends it, and leaves as it does elsewhere, its state saved.
    state = os.path.join(d.state_dir, "state.json")
    before = os.stat(state).st_mtime_ns if os.path.exists(state) else 0
    os.kill(daemon, signal.SIGTERM)
    t.check(d.wait_exit() == 0 and "received SIGTERM, stopping" in d.log() and
            os.stat(state).st_mtime_ns > before,
            "the daemon, pid 1 of its namespace, stops on SIGTERM and saves its state")

    # On the host, the same engine by its host pid.
    h = t.Daemon()
    h.wait_ready()
    st = h.get("/v1/status")
    t.check(st["pid_namespace"]["host"], "a daemon on the host sees the host's: %s"
            % st["pid_namespace"])
    host = subprocess.Popen([simple, "-m", model, "-n", "4000", "Once upon a time"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    t._children.append(host)
    h.wait_log("pid %d (llama-simple) runs ggml" % host.pid, timeout=60)
    t.poll("pid %d's threads on the host" % host.pid,
           lambda: len(h.get("/v1/processes/%d" % host.pid).get("threads") or []) >= 2,
           timeout=60, interval=0.2)
    t.check(True, "and tracks an engine there by its host pid %d" % host.pid)
    host.kill()
    host.wait()
    t.check(h.stop() == 0, "the host's daemon exits 0")


def ns_pid_of_task(pid, tid):
    with open("/proc/%d/task/%d/status" % (pid, tid)) as f:
        return int(re.search(r"^NSpid:\s+(.*)$", f.read(), re.M)[1].split()[-1])


t.run(main, timeout=300)
