#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
"""systemd integration without systemd as PID 1: the units pass systemd-analyze verify;
systemd-socket-activate hands the daemon its socket on first use; a NOTIFY_SOCKET the test
listens on gets STATUS= while starting, READY=1 only once the programs are attached and the
socket answers, WATCHDOG=1 pings, and STOPPING=1; --check; and the unit's capability
bounding set is enough, and each capability in it is needed."""
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
import lptest as t  # noqa: E402

SRC = os.path.join(os.path.dirname(__file__), "..", "..")
BUILD = os.path.dirname(os.path.abspath(t.LLMPROFD))
LPGGML = os.environ.get("LPGGML", "build/tests/lpggml")
LPSECCOMP = os.environ.get("LPSECCOMP", "build/tests/lpseccomp")
NOBODY = 65534


def units(tmp):
    """The configured units, pointing at this build's binary."""
    with open(os.path.join(BUILD, "llmprofd.service")) as f:
        service = re.sub(r"^(ExecStart(?:Pre)?=)\S+/llmprofd", r"\g<1>" +
                         os.path.abspath(t.LLMPROFD), f.read(), flags=re.M)
    with open(os.path.join(tmp, "llmprofd.service"), "w") as f:
        f.write(service)
    shutil.copy(os.path.join(SRC, "systemd", "llmprofd.socket"), tmp)
    return service


def test_verify():
    print("--- systemd-analyze verify")
    tmp = t.tmpdir("llmprof-units-")
    service = units(tmp)
    p = subprocess.run(["systemd-analyze", "verify", "--man=no", "llmprofd.socket",
                        "llmprofd.service"], cwd=tmp, capture_output=True, text=True)
    t.check(p.returncode == 0 and not p.stderr.strip(),
            "both units verify cleanly: %s" % p.stderr.strip())
    for key in ("Type=notify", "WatchdogSec=", "NoNewPrivileges=yes", "ProtectSystem=strict",
                "SystemCallFilter=", "ProtectProc=invisible",
                "RuntimeDirectory=llmprofd", "StateDirectory=llmprofd", "ExecStartPre=",
                "CapabilityBoundingSet="):
        t.check(key in service, "the service sets %s" % key)
    # The check can fail: a broken copy is refused.
    with open(os.path.join(tmp, "llmprofd.service"), "a") as f:
        f.write("\n[Service]\nType=bogus\n")
    p = subprocess.run(["systemd-analyze", "verify", "--man=no", "llmprofd.service"], cwd=tmp,
                       capture_output=True, text=True)
    t.check("bogus" in p.stderr, "a bad unit is reported: %s" % p.stderr.strip()[:120])
    shutil.rmtree(tmp)


def test_activation_and_notify():
    print("--- socket activation, readiness, watchdog, stopping")
    tmp = t.tmpdir("llmprof-act-")
    os.chmod(tmp, 0o755)
    sock = os.path.join(tmp, "api.sock")
    notify_path = os.path.join(tmp, "notify")
    notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    notify.bind(notify_path)
    notify.settimeout(0.2)
    log = open(os.path.join(tmp, "log"), "w")
    act = subprocess.Popen(["systemd-socket-activate", "-l", sock,
                            "-E", "NOTIFY_SOCKET=" + notify_path, "-E", "WATCHDOG_USEC=1000000",
                            os.path.abspath(t.LLMPROFD), "--config", "/dev/null",
                            "--state-directory", "off", "--metrics-address", "off"],
                           stdout=log, stderr=log)
    t._children.append(act)
    t.poll("systemd-socket-activate to listen", lambda: os.path.exists(sock))
    t.check(not t.prog_ids_of(act.pid), "nothing is loaded before the first connection")
    # The first use starts the daemon; curl waits on the socket meanwhile.
    client = subprocess.Popen(["curl", "-sS", "--max-time", "60", "--unix-socket", sock,
                               "http://localhost/v1/status"], stdout=subprocess.PIPE, text=True)
    t._children.append(client)
    msgs, at_ready, held = [], None, set()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and sum(m == "WATCHDOG=1" for m in msgs) < 3:
        try:
            data = notify.recv(4096).decode()
        except socket.timeout:
            if act.poll() is not None:
                break
            continue
        for m in data.split("\n"):
            msgs.append(m)
            if m == "READY=1" and at_ready is None:
                # At this very moment: programs attached and the socket answering.
                # systemd-socket-activate execs the daemon in its own process.
                held = t.prog_ids_of(act.pid)
                at_ready = (len(held),
                            t.curl(sock, "GET", "/v1/status", timeout=5)[0])
    log.flush()
    t.check(any(m.startswith("STATUS=Loading") for m in msgs[:msgs.index("READY=1")]
                if "READY=1" in msgs), "STATUS= messages while starting: %s" % msgs[:6])
    t.check(at_ready is not None and at_ready[0] >= 5 and at_ready[1] == 200,
            "READY=1 came with %s programs attached and the API answering %s" %
            (at_ready and at_ready[0], at_ready and at_ready[1]))
    t.check(sum(m == "WATCHDOG=1" for m in msgs) >= 3, "WATCHDOG=1 pings (every 0.5 s here)")
    out, _ = client.communicate(timeout=30)
    t.check('"api":1' in out, "the activating request itself was answered")
    with open(os.path.join(tmp, "log")) as f:
        text = f.read()
    t.check("API on the socket systemd passed" in text, "the daemon used the passed socket")
    act.send_signal(15)
    rest = []
    end = time.monotonic() + 20
    while act.poll() is None or time.monotonic() < end:
        try:
            rest += notify.recv(4096).decode().split("\n")
        except socket.timeout:
            if act.poll() is not None:
                break
    t.check(act.wait(timeout=20) == 0 and "STOPPING=1" in rest, "STOPPING=1, exit status 0")
    t.wait_unloaded(held)
    t.check(True, "the %d programs it held are unloaded" % len(held))
    notify.close()
    shutil.rmtree(tmp)


def test_check():
    print("--- --check")
    # --check lives too briefly to read its fds: program ids are never reused, so anything
    # named lp_* with an id above every id loaded before is what it left (a user's llmprofd
    # running beside the tests loaded its programs before).
    before = t.loaded_programs()
    p = subprocess.run([t.LLMPROFD, "--check", "--config", "/dev/null", "--state-directory",
                        "off", "--metrics-address", "off", "--socket",
                        os.path.join(t.tmpdir(), "check.sock")], capture_output=True,
                       text=True, timeout=60)
    t.check(p.returncode == 0 and "check: ok" in p.stderr, "--check: exit 0, 'check: ok'")
    t.poll("--check's programs to be unloaded", lambda: not t.new_lp_programs(before))
    t.check(True, "--check leaves nothing loaded")
    p = subprocess.run(t.as_user(NOBODY) + [os.path.abspath(t.LLMPROFD), "--check", "--config",
                                             "/dev/null"], capture_output=True, text=True,
                       timeout=60)
    t.check(p.returncode == 1 and "CAP_BPF" in p.stderr,
            "--check without privileges: exit 1 naming the capabilities")


def bounding_set():
    with open(os.path.join(BUILD, "llmprofd.service")) as f:
        line = [x for x in f if x.startswith("CapabilityBoundingSet=")][0]
    return [c[4:].lower() for c in line.split("=", 1)[1].split()]


def run_with_caps(caps, lib, sandbox=(), args=()):
    fx = subprocess.Popen(t.as_user(NOBODY) + [os.path.abspath(LPGGML), "--lib", lib,
                                                "--wait-go", "--hold", "--iters", "20",
                                                "--prompt", "4", "--gen", "6"],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    t._children.append(fx)
    pid = t.read_json_line(fx, "lpggml")["pid"]
    bset = "-all," + ",".join("+" + c for c in caps)
    # LeakSanitizer stops the world with ptrace(2), which the syscall filter refuses: in the
    # sanitizer build the sandboxed daemon skips the leak check (every other test does it).
    env = dict(os.environ, ASAN_OPTIONS=os.environ.get("ASAN_OPTIONS", "") + ":detect_leaks=0")
    d = t.Daemon("--sample-hz", "0", *args, env=env if sandbox else None,
                 wrap=list(sandbox) + ["setpriv", "--bounding-set=" + bset])
    try:
        d.wait_ready()
    except AssertionError:  # exited: it says why
        fx.kill()
        fx.wait()
        return 0, None, d.log()
    fx.stdin.write(b"go\n")
    fx.stdin.flush()
    t.read_json_line(fx, "lpggml")
    status, doc, _ = d.api("GET", "/v1/processes/%d" % pid)
    if sandbox:
        doc = {"process": doc, "metrics": metrics_of(args), "stopped": d.stop(signal.SIGTERM),
               "saved": os.path.exists(os.path.join(d.state_dir, "state.json"))}
    else:
        d.stop()
    fx.stdin.close()
    fx.kill()
    fx.wait()
    return status, doc, d.log()


def metrics_of(args):
    """/metrics over TCP from the daemon's --metrics-address in args, as root."""
    addr = list(args)[list(args).index("--metrics-address") + 1]
    p = subprocess.run(["curl", "-sS", "--max-time", "10", "http://%s/metrics" % addr],
                       capture_output=True, text=True, timeout=20)
    return p.stdout


def unit_setting(key):
    with open(os.path.join(BUILD, "llmprofd.service")) as f:
        return [x.split("=", 1)[1].strip() for x in f if x.startswith(key + "=")]


def syscalls(item, seen=None):
    """The syscall names an entry of SystemCallFilter= stands for, as systemd resolves
    them (groups nest)."""
    if not item.startswith("@"):
        return {item}
    seen = seen if seen is not None else set()
    if item in seen:
        return set()
    seen.add(item)
    out = subprocess.run(["systemd-analyze", "syscall-filter", item], capture_output=True,
                         text=True, check=True).stdout
    names = set()
    for line in out.splitlines()[1:]:
        word = line.strip()
        if word and not word.startswith("#"):
            names |= syscalls(word, seen)
    return names


def unit_syscall_filter():
    """The unit's allow list: the first SystemCallFilter= line less every ~ line after it."""
    allowed = set()
    for i, line in enumerate(unit_setting("SystemCallFilter")):
        deny = line.startswith("~")
        names = set().union(*(syscalls(x) for x in line.lstrip("~").split()))
        allowed = allowed - names if deny else allowed | names
    return allowed


def test_sandbox():
    print("--- the unit's sandbox: exposure score, syscall filter and ProtectProc, for real")
    p = subprocess.run(["systemd-analyze", "security", "--offline=true", "--no-pager",
                        os.path.join(BUILD, "llmprofd.service")], capture_output=True,
                       text=True)
    m = re.search(r"Overall exposure level for \S+: ([0-9.]+)", p.stdout + p.stderr)
    # 2.6 with ProtectKernelLogs=, which the unit cannot set (it takes CAP_SYSLOG, which
    # kallsyms needs, out of the bounding set): its 0.2 added, and what it guards checked.
    t.check(m and float(m.group(1)) <= 2.8,
            "systemd-analyze security: exposure %s <= 2.8" % (m and m.group(1)))
    t.check("syslog" not in unit_syscall_filter() and
            "/proc/kmsg" in " ".join(unit_setting("InaccessiblePaths")) and
            unit_setting("PrivateDevices") == ["yes"] and not unit_setting("ProtectKernelLogs"),
            "the kernel log stays out of reach without ProtectKernelLogs=: syslog(2) outside "
            "the filter, /proc/kmsg inaccessible, /dev/kmsg outside PrivateDevices=")
    for key in ("SystemCallFilter", "SystemCallErrorNumber", "PrivateTmp", "PrivateDevices",
                "Nice", "ProtectProc", "IPAddressDeny", "IPAddressAllow", "ProtectHome"):
        t.check(unit_setting(key), "the unit sets %s=" % key)
    allowed = unit_syscall_filter()
    t.check({"bpf", "perf_event_open", "socket", "epoll_wait"} <= allowed and
            "setrlimit" not in allowed, "the filter allows %d calls, bpf and perf_event_open "
            "among them" % len(allowed))
    work = t.tmpdir("llmprof-sandbox-")
    allow_file = os.path.join(work, "allowed")
    with open(allow_file, "w") as f:
        f.write("\n".join(sorted(allowed)) + "\n")
    # ProtectProc=invisible: systemd mounts a procfs instance with hidepid=invisible in the
    # service's mount namespace; so does this, then applies the filter and the bounding set.
    # Nice= first, as systemd does before it drops the capabilities: the daemon, which
    # wants nice -4 and may not set it there, must find it set.
    def sandbox(allow):
        return ["nice", "-n", unit_setting("Nice")[0],
                "unshare", "-m", "--propagation", "private", "sh", "-c",
                'mount -t proc -o hidepid=invisible proc /proc && exec "$@"', "sh",
                LPSECCOMP, allow, "--"]
    home = t.tmpdir("llmprof-nobody-", mode=0o700)
    lib = os.path.join(home, "libggml-cpu-test.so")
    shutil.copy(os.path.join(os.path.dirname(os.path.abspath(LPGGML)), "liblpggml.so"), lib)
    os.chown(home, NOBODY, NOBODY)
    os.chown(lib, NOBODY, NOBODY)
    port = t.free_port()
    args = ["--metrics-address", "127.0.0.1:%d" % port]
    status, doc, log = run_with_caps(bounding_set(), lib, sandbox(allow_file), args)
    proc = doc and doc["process"]
    t.check(status == 200 and proc["ggml"] and proc["ggml"]["tokens"]["decoded"] >= 6,
            "inside the sandbox another user's ggml process is found and its tokens counted: "
            "%s" % (log[-600:] if status != 200 else proc["ggml"] and proc["ggml"]["tokens"]))
    t.check(doc and 'pid="%d"' % proc["pid"] in doc["metrics"],
            "TCP /metrics knows the local root peer (sock_diag allowed)")
    t.check(doc and doc["stopped"] == 0 and doc["saved"], "SIGTERM: totals saved, exit 0")
    # Refusals expected anyway: fentry is missing on this VM whatever the sandbox, and
    # the daemon binds its own socket here, which under systemd llmprofd.socket does (its
    # chown needs CAP_CHOWN, outside the bounding set).
    refused = [x for x in log.splitlines() if "not permitted" in x and "fentry" not in x and
               "chown" not in x]
    t.check(not refused, "nothing else it does is refused: %s" % refused[:3])
    # The filter is really there: without bpf in it the daemon cannot start.
    no_bpf = os.path.join(work, "no-bpf")
    with open(no_bpf, "w") as f:
        f.write("\n".join(sorted(allowed - {"bpf"})) + "\n")
    status, _, log = run_with_caps(bounding_set(), lib, sandbox(no_bpf), args)
    t.check(status == 0 and "permission denied loading BPF programs" in log,
            "the same sandbox less bpf(2) fails to start: %s" % log.strip().splitlines()[-1:])


def kernel_names(caps):
    """A profile of a process waiting in futex calls names its kernel frames with the unit's
    bounding set, and not without CAP_SYSLOG (where perf_event_paranoid is over 1, as
    distributions set it, /proc/kallsyms shows the kernel's addresses only to it)."""
    with open("/proc/sys/kernel/perf_event_paranoid") as f:
        paranoid = int(f.read())
    for with_syslog in (True, False):
        bset = "-all," + ",".join("+" + c for c in caps if with_syslog or c != "syslog")
        d = t.Daemon("--sample-hz", "499", wrap=["setpriv", "--bounding-set=" + bset])
        d.wait_ready()
        fx = t.Lpggml(*t.team_barrier_args(iters=2000000))
        d.wait_log("pid %d (lpggml) runs ggml" % fx.pid)
        fx.go()
        _, body, _ = t.curl(d.socket, "GET", "/debug/pprof/folded?seconds=2&pid=%d" % fx.pid)
        fx.proc.kill()
        fx.proc.wait()
        d.stop()
        frames = [f for line in body.splitlines() for f in line.rsplit(" ", 1)[0]
                  .split(";") if f.endswith("_[k]")]
        named = [f for f in frames if not f.startswith("[kernel.kallsyms]+0x")]
        if with_syslog:
            t.check(frames and len(named) == len(frames),
                    "with CAP_SYSLOG the profile's kernel frames are named: %s" % named[:3])
        elif paranoid > 1:
            t.check(frames and not named and "no CAP_SYSLOG" in d.log(),
                    "without it (perf_event_paranoid %d) they are by address, and the log "
                    "says why: %s" % (paranoid, frames[:2]))
        else:
            print("perf_event_paranoid is %d here: kallsyms shows addresses without "
                  "CAP_SYSLOG, which is needed where it is 2 or more" % paranoid)


def test_capabilities():
    print("--- the unit's capabilities are enough, and each is needed")
    caps = bounding_set()
    t.check(sorted(caps) == ["bpf", "dac_read_search", "perfmon", "sys_admin", "sys_ptrace",
                             "syslog"], "bounding set: %s" % caps)
    # Someone else's process, its library in a directory only that user can read.
    home = t.tmpdir("llmprof-nobody-")
    lib = os.path.join(home, "libggml-cpu-test.so")
    shutil.copy(os.path.join(os.path.dirname(os.path.abspath(LPGGML)), "liblpggml.so"), lib)
    os.chown(home, NOBODY, NOBODY)
    os.chown(lib, NOBODY, NOBODY)
    os.chmod(home, 0o700)
    status, doc, log = run_with_caps(caps, lib)
    ok = status == 200 and doc["ggml"] and doc["ggml"]["tokens"]["decoded"] >= 6
    t.check(ok, "with exactly %s: another user's ggml process is found and its tokens "
            "counted (%s)" % (caps, doc["ggml"]["tokens"] if status == 200 and doc["ggml"]
                              else (status, doc, log[-800:])))
    # CAP_SYSLOG names the profiles' kernel frames (kallsyms), and is judged by that.
    kernel_names(caps)
    for cap in [c for c in caps if c != "syslog"]:
        # CAP_SYS_ADMIN also grants what CAP_BPF and CAP_PERFMON grant: those two are
        # needed where it is absent.
        drop = {cap, "sys_admin"} if cap in ("bpf", "perfmon") else {cap}
        fewer = [c for c in caps if c not in drop]
        status, doc, log = run_with_caps(fewer, lib)
        found = status == 200 and doc.get("ggml") and doc["ggml"]["tokens"]["decoded"] >= 6
        if not found and status == 200:
            log += "\n(tracked: %s)" % (doc.get("ggml") or {}).get("tokens")
        t.check(not found, "without %s it is not: %s" % ("+".join(sorted(drop)),
                                                         (log.strip().splitlines()
                                                          or ["?"])[-1][:150]))
    shutil.rmtree(home)


def main():
    test_verify()
    test_check()
    test_activation_and_notify()
    test_capabilities()
    test_sandbox()


t.run(main, timeout=280)
