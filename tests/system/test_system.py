#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
"""system tier: llmprofd as an administrator installs and runs it, under a real systemd.

A Debian 12 container (deploy/mkrootfs.sh's root filesystem, booted by systemd-nspawn with
systemd as its PID 1; tests/lib/machine.py) gets the project's .deb with `apt install`,
then what an administrator does and sees there:

- the package enables and starts llmprofd.socket, makes the group llmprof (sysusers.d) and
  the state directory (tmpfiles.d), installs the settings as a conffile; the service waits
  for the first connection, which starts it (Type=notify: active only once READY=1 came);
- `systemctl status` shows the STATUS= text, `journalctl -u llmprofd` the daemon's log,
  /proc of the service the sandbox systemd applied (no new privileges, a seccomp filter,
  the unit's bounding set and nothing else);
- an engine started before the daemon (found by the start-up scan) and one started after
  it (found as it maps ggml) are tracked by their pids in the container, which is a PID
  namespace of its own, with all their threads, their tokens and their ops;
- `llmprofctl top` shows them to a member of llmprof and refuses a user outside it;
- a daemon stopped with SIGSTOP is restarted by the watchdog, its totals restored from the
  last checkpoint; `systemctl restart`, an upgrade (the package installed again) and
  `stop` save them, and what was counted before is still there after;
- a bad setting fails ExecStartPre=llmprofd --check, and `systemctl status` names it;
- `apt purge` stops it and leaves nothing of it behind but the group.

Two things are set for the test's sake, as an administrator may: checkpoint-interval = 2 in
the settings, and a drop-in with WatchdogSec=6 (and TimeoutAbortSec=3), so that a stuck
daemon is restarted in seconds rather than the shipped 30."""
import json
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
import lptest as t  # noqa: E402
import machine  # noqa: E402

WORKLOAD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "workload")
SOCK = "/run/llmprofd/llmprofd.sock"
STATE = "/var/lib/llmprofd/state.json"
# linux/capability.h's numbers of the capabilities a unit may name.
CAPS = {"CAP_CHOWN": 0, "CAP_DAC_OVERRIDE": 1, "CAP_DAC_READ_SEARCH": 2, "CAP_FOWNER": 3,
        "CAP_KILL": 5, "CAP_SETGID": 6, "CAP_SETUID": 7, "CAP_NET_BIND_SERVICE": 10,
        "CAP_NET_ADMIN": 12, "CAP_NET_RAW": 13, "CAP_IPC_LOCK": 14, "CAP_SYS_CHROOT": 18,
        "CAP_SYS_PTRACE": 19, "CAP_SYS_ADMIN": 21, "CAP_SYS_NICE": 23, "CAP_SYS_RESOURCE": 24,
        "CAP_SYSLOG": 34, "CAP_PERFMON": 38, "CAP_BPF": 39}


def main():
    why = machine.missing_tools()
    if why:
        t.check(False, "the system tier can run: " + why)
        return
    work = t.tmpdir("llmprof-system-")
    models = os.path.join(work, "models")
    os.mkdir(models)
    model = os.path.join(models, "small.gguf")
    subprocess.run([sys.executable, os.path.join(WORKLOAD, "gen_gguf.py"), "--shape",
                      "small", model], check=True, timeout=120)
    os.chmod(work, 0o755)
    os.chmod(models, 0o755)
    os.chmod(model, 0o644)
    pkgdir = os.path.join(work, "pkg")
    os.mkdir(pkgdir)
    deb = machine.package(pkgdir)
    root = machine.rootfs()
    simple = t.llama_simple()
    m = machine.Machine(root, binds=[(pkgdir, "/mnt/pkg"), (models, "/srv/models"),
                                     (simple, "/opt/llama/llama-simple")],
                        work=os.path.join(work, "machine"))
    t.check(True, "a Debian 12 container booted with systemd as its PID 1 (%s)" % m.state)
    try:
        administer(m, os.path.basename(deb))
    finally:
        if t._checks["failed"]:
            print("the container's journal, last lines:")
            print(m.sh("journalctl -n 60 --no-pager", check=False).stdout)
        t.check(m.stop() == 0, "the container powers off cleanly")


def api(m, path):
    status, doc, _ = t.curl(m.path(SOCK), "GET", path)
    if status != 200:
        raise AssertionError("GET %s: %d %s" % (path, status, doc))
    return doc


def engine(m, unit, tokens):
    """llama-simple as a service of the container's: its pid there."""
    # OpenMP's threads sleep rather than spin between ops (OMP_WAIT_POLICY=passive): two
    # engines spinning on this 2-CPU container made each start of the daemon (which loads
    # and verifies its programs twice) take 30-45 s.
    m.sh("systemd-run --unit=%s --property=Restart=no --setenv=OMP_WAIT_POLICY=passive "
         "/opt/llama/llama-simple -m /srv/models/small.gguf -n %d 'Once upon a time'"
         % (unit, tokens))
    pid = t.poll("%s's main pid" % unit, lambda: int(m.show(unit, "MainPID")["MainPID"]),
                 timeout=30)
    return pid


def tracked(m, pid, what):
    """Waits until the daemon shows pid with every thread /proc there shows, generation
    tokens and ops: the process document."""
    def full():
        status, doc, _ = t.curl(m.path(SOCK), "GET", "/v1/processes/%d" % pid)
        if status != 200 or not doc.get("ggml"):
            return None
        tids = set(int(x) for x in os.listdir(m.path("/proc/%d/task" % pid)))
        ours = set(th["tid"] for th in doc.get("threads") or [])
        ok = (ours == tids and doc["counters"].get("decode_generation_tokens", 0) > 0 and
              doc["ggml"].get("ops"))
        return ok and (doc, sorted(tids))
    doc, tids = t.poll("%s (pid %d there) tracked with its threads, tokens and ops"
                       % (what, pid), full, timeout=90, interval=0.5)
    t.check(True, "%s, pid %d there, tracked: its %d threads %s as its /proc there lists "
            "them, %d generation tokens, ops %s" % (
                what, pid, len(tids), tids, doc["counters"]["decode_generation_tokens"],
                [o["op"] for o in doc["ggml"]["ops"][:4]]))
    return doc


def tokens(m, pid):
    return api(m, "/v1/processes/%d" % pid)["counters"]["decode_generation_tokens"]


def administer(m, deb):
    # Installed as a package: the socket enabled and listening, the service not yet.
    m.sh("cp /mnt/pkg/%s /root/" % deb)
    p = m.sh("cd /root && DEBIAN_FRONTEND=noninteractive apt-get install -y ./%s" % deb,
             check=False, timeout=300)
    t.check(p.returncode == 0, "apt install ./%s, offline: %s" % (deb, p.stdout[-300:] +
                                                                   p.stderr[-500:]))
    sock = m.show("llmprofd.socket", "UnitFileState", "ActiveState")
    svc = m.show("llmprofd.service", "ActiveState", "Type")
    t.check(sock == {"UnitFileState": "enabled", "ActiveState": "active"} and
            svc["ActiveState"] == "inactive" and os.path.exists(m.path(SOCK)),
            "the package enabled and started llmprofd.socket (%s); the service waits for a "
            "connection (%s)" % (sock, svc["ActiveState"]))
    group = m.sh("getent group llmprof", check=False).stdout.strip()
    st = os.stat(m.path("/var/lib/llmprofd"))
    t.check(group.startswith("llmprof:") and oct(st.st_mode & 0o777) == "0o700" and
            os.path.exists(m.path("/etc/llmprofd/llmprofd.conf")),
            "the group (%s), the state directory (mode %o) and the settings are there"
            % (group, st.st_mode & 0o777))
    conffiles = m.sh("dpkg-query -W -f='${Conffiles}' llmprofd").stdout
    t.check("/etc/llmprofd/llmprofd.conf" in conffiles,
            "the settings are a conffile: %s" % conffiles.strip())

    # What an administrator may set: checkpoints every 2 s, a watchdog of 6 s.
    with open(m.path("/etc/llmprofd/llmprofd.conf"), "a") as f:
        f.write("\n[service]\ncheckpoint-interval = 2\n")
    os.makedirs(m.path("/etc/systemd/system/llmprofd.service.d"))
    with open(m.path("/etc/systemd/system/llmprofd.service.d/watchdog.conf"), "w") as f:
        f.write("[Service]\nWatchdogSec=6\nTimeoutAbortSec=3\n")
    m.sh("systemctl daemon-reload")

    before = engine(m, "engine-before", 30000)
    t.poll("engine-before decoding", lambda: len(os.listdir(m.path("/proc/%d/task" % before)))
           >= 2, timeout=30)

    # The first connection starts the service. The daemon answers once its socket
    # listens, just after it sent READY=1, which systemd reads a moment later.
    t0 = time.monotonic()
    p = m.sh("llmprofctl status", check=False)
    first = time.monotonic() - t0
    svc = t.poll("systemd to read READY=1", lambda: (
        lambda x: x["ActiveState"] != "activating" and x)(
            m.show("llmprofd.service", "ActiveState", "SubState", "Type", "StatusText",
                   "MainPID", "NRestarts", "TriggeredBy")), timeout=30, interval=0.2)
    t.check(p.returncode == 0 and "llmprofd " in p.stdout and svc["ActiveState"] == "active"
            and svc["Type"] == "notify" and svc["TriggeredBy"] == "llmprofd.socket",
            "the first connection (llmprofctl status, exit %d%s, answered in %.1f s) "
            "started it: %s" % (p.returncode, (": " + p.stderr.strip()[-300:])
                                if p.returncode else "", first, svc))
    status = m.sh("systemctl status llmprofd --no-pager -n 0", check=False).stdout
    t.check(re.search(r"Active: active \(running\)", status) and
            re.search(r'Status: "%s"' % re.escape(svc["StatusText"]), status) and
            svc["StatusText"],
            "systemctl status: running (READY=1 came), its STATUS= text \"%s\""
            % svc["StatusText"])
    pid = int(svc["MainPID"])
    journal = journal_has(m, "ready: tracking")
    t.check("ready: tracking" in journal and "PID namespace: not the host's" in journal,
            "journalctl -u llmprofd has the daemon's log: %s" % [
                x for x in journal.splitlines() if x.startswith(("ready", "PID namespace"))])

    # The sandbox, as systemd applied it.
    with open(m.path("/proc/%d/status" % pid)) as f:
        proc = dict(x.split(":", 1) for x in f.read().splitlines() if ":" in x)
    with open(m.path("/lib/systemd/system/llmprofd.service")) as f:
        unit = f.read()
    names = re.search(r"^CapabilityBoundingSet=(.*)$", unit, re.M)[1].split()
    mask = sum(1 << CAPS[n] for n in names)
    t.check(proc["NoNewPrivs"].strip() == "1" and proc["Seccomp"].strip() == "2" and
            int(proc["CapBnd"], 16) == mask and int(proc["CapEff"], 16) == mask,
            "its sandbox as systemd applied it: NoNewPrivs %s, Seccomp %s (a filter), bounding "
            "and effective sets %s = %s" % (proc["NoNewPrivs"].strip(), proc["Seccomp"].strip(),
                                            proc["CapBnd"].strip(), names))
    with open(m.path("/proc/%d/mountinfo" % pid)) as f:
        mounts = [x.split() for x in f]
    # The mount /usr is on (the last of the longest mount points it is under).
    usr = max((x for x in mounts if "/usr/".startswith(x[4].rstrip("/") + "/")),
              key=lambda x: len(x[4]))
    t.check("ro" in usr[5].split(","),
            "ProtectSystem=strict: /usr is read-only to it (on %s, %s)" % (usr[4], usr[5]))

    # Both engines, by their pids in the container.
    tracked(m, before, "an engine started before the daemon")
    after = engine(m, "engine-after", 30000)
    tracked(m, after, "an engine started after it")
    procs = sorted(x["pid"] for x in api(m, "/v1/processes")["processes"])
    t.check(procs == sorted([before, after]),
            "it tracks the container's two engines and nothing of the host: %s" % procs)

    # The group.
    m.sh("useradd --no-create-home -G llmprof alice && useradd --no-create-home mallory")
    p = m.sh("llmprofctl top -b -n 1", user="alice", check=False)
    t.check(p.returncode == 0 and re.search(r"^\s*%d\s" % before, p.stdout, re.M) and
            re.search(r"^\s*%d\s" % after, p.stdout, re.M),
            "llmprofctl top as alice (group llmprof) lists both: %s" % p.stdout[:600])
    p = m.sh("llmprofctl top -b -n 1", user="mallory", check=False)
    t.check(p.returncode != 0 and "permission denied" in p.stderr and "llmprof" in p.stderr,
            "and refuses mallory (not in it): exit %d, %s" % (p.returncode, p.stderr.strip()))

    # engine-after has shown what it was for; engine-before's totals are followed below.
    m.sh("systemctl stop engine-after")

    # The watchdog: a stopped daemon is restarted; its totals come from the last
    # checkpoint, at most 2 s old.
    n0 = tokens(m, before)
    t.poll("a checkpoint with engine-before's %d tokens" % n0,
           lambda: count_in_state(m, before) >= n0, timeout=30, interval=0.5)
    restarts = int(svc["NRestarts"])
    m.sh("kill -STOP %d" % pid)
    saved = count_in_state(m, before)
    new = t.poll("the watchdog's restart", lambda: (lambda s: s["ActiveState"] == "active" and
                                                   int(s["MainPID"]) not in (0, pid) and s)(
        m.show("llmprofd.service", "ActiveState", "MainPID", "NRestarts", "Result")),
        timeout=60, interval=0.5)
    journal = journal_has(m, "restored 2 process(es)")
    n1 = tokens(m, before)
    t.check(int(new["NRestarts"]) == restarts + 1 and "Watchdog timeout" in journal and
            journal.count("restored 2 process(es)") == 1 and n1 >= saved,
            "SIGSTOP: the watchdog restarted it (NRestarts %s, pid %s), the two engines' "
            "totals restored: %d generation tokens of engine-before, %d at the last "
            "checkpoint" % (new["NRestarts"], new["MainPID"], n1, saved))
    tracked(m, before, "the engine, after the watchdog's restart")

    # systemctl restart: saved at stop, read back at start.
    pid = int(new["MainPID"])
    n0 = tokens(m, before)
    m.sh("systemctl restart llmprofd")
    s = m.show("llmprofd.service", "ActiveState", "MainPID")
    n1 = tokens(m, before)
    journal = journal_has(m, "restored 2 process(es)", 2)
    t.check(s["ActiveState"] == "active" and int(s["MainPID"]) != pid and n1 >= n0 and
            journal.count("restored 2 process(es)") == 2,
            "systemctl restart: a new daemon (pid %s) with the totals: %d tokens, %d before"
            % (s["MainPID"], n1, n0))
    procs = {x["pid"]: x["state"] for x in api(m, "/v1/processes")["processes"]}
    t.check(procs == {before: "running", after: "exited"},
            "and the same processes, by the same pids there: %s" % procs)

    # An upgrade (the same package again): the running service restarts on the new files,
    # its totals saved at stop and read back.
    pid = int(s["MainPID"])
    n0 = tokens(m, before)
    p = m.sh("cd /root && DEBIAN_FRONTEND=noninteractive apt-get install -y --reinstall ./%s"
             % deb, check=False, timeout=300)
    s = t.poll("the service back after the upgrade", lambda: (
        lambda x: x["ActiveState"] == "active" and int(x["MainPID"]) not in (0, pid) and x)(
            m.show("llmprofd.service", "ActiveState", "MainPID")), timeout=60, interval=0.5)
    journal = journal_has(m, "restored 2 process(es)", 3)
    n1 = tokens(m, before)
    t.check(p.returncode == 0 and journal.count("restored 2 process(es)") == 3 and n1 >= n0 and
            m.show("llmprofd.socket", "UnitFileState")["UnitFileState"] == "enabled",
            "an upgrade (apt install --reinstall): restarted (pid %s), the totals kept (%d "
            "tokens, %d before), the socket still enabled" % (s["MainPID"], n1, n0))

    # systemctl stop: the state saved, a clean result.
    mtime = os.stat(m.path(STATE)).st_mtime_ns
    n0 = tokens(m, before)
    m.sh("systemctl stop llmprofd.service")
    s = m.show("llmprofd.service", "ActiveState", "Result")
    journal = journal_has(m, "received SIGTERM, stopping")
    t.check(s == {"ActiveState": "inactive", "Result": "success"} and
            os.stat(m.path(STATE)).st_mtime_ns > mtime and count_in_state(m, before) >= n0 and
            "received SIGTERM, stopping" in journal,
            "systemctl stop: %s, the totals saved (%d tokens of engine-before in the state)"
            % (s, count_in_state(m, before)))

    # A bad setting: ExecStartPre=llmprofd --check fails, and status says which.
    with open(m.path("/etc/llmprofd/llmprofd.conf"), "a") as f:
        f.write("sample-hz = lots\n")
    p = m.sh("systemctl start llmprofd.service", check=False)
    # The daemon's words reach the journal a moment after systemd's own.
    # Not restarted (Restart=on-abnormal): the status keeps the try that says why.
    status = t.poll("the bad setting's message in systemctl status", lambda: (
        lambda x: "sample-hz" in x and "Active: failed" in x and x)(
            m.sh("systemctl status llmprofd --no-pager -n 50", check=False).stdout),
        timeout=60, interval=0.5)
    t.check(p.returncode != 0 and "ExecStartPre" in status and "status=2" in status,
            "a bad setting: the start fails at ExecStartPre, and systemctl status names it: %s"
            % [x.strip() for x in status.splitlines() if "sample-hz" in x or "ExecStartPre" in
               x][:3])
    m.sh("sed -i '/^sample-hz = lots$/d' /etc/llmprofd/llmprofd.conf && "
         "systemctl reset-failed llmprofd.socket llmprofd.service && "
         "systemctl start llmprofd.service")
    t.check(m.show("llmprofd.service", "ActiveState")["ActiveState"] == "active",
            "fixed, it starts again")

    # Purged: nothing of it left but the group.
    m.sh("systemctl stop engine-before", check=False)
    p = m.sh("DEBIAN_FRONTEND=noninteractive apt-get purge -y llmprofd", check=False,
             timeout=300)
    left = [x for x in ("/usr/sbin/llmprofd", "/usr/bin/llmprofctl",
                        "/lib/systemd/system/llmprofd.service",
                        "/lib/systemd/system/llmprofd.socket", "/etc/llmprofd",
                        "/var/lib/llmprofd", SOCK,
                        "/etc/systemd/system/sockets.target.wants/llmprofd.socket")
            if os.path.lexists(m.path(x))]
    running = m.sh("pgrep -x llmprofd", check=False).stdout.split()
    t.check(p.returncode == 0 and not left and not running and
            m.show("llmprofd.socket", "LoadState")["LoadState"] == "not-found",
            "apt purge: stopped, and nothing left (%s; running: %s)" % (left, running))


def journal_has(m, text, n=1):
    """journalctl -u llmprofd once it holds text n times (journald takes what a service
    writes a moment after systemd's own view of it changed), or as it is after 30 s."""
    def read():
        out = m.sh("journalctl -u llmprofd --no-pager -o cat").stdout
        return (out.count(text) >= n, out)
    try:
        return t.poll("%r in the journal" % text, lambda: (lambda r: r[0] and r[1])(read()),
                      timeout=30, interval=0.5)
    except t.Timeout:
        return read()[1]


def count_in_state(m, pid):
    """pid's generation tokens in the saved state, 0 when it is not there."""
    try:
        with open(m.path(STATE)) as f:
            doc = json.load(f)
    except (OSError, ValueError):
        return 0
    for p in doc.get("processes", []):
        if int(p.get("pid", 0)) == pid:  # saved as text
            return int((p.get("counters") or {}).get("decode_generation_tokens", 0))
    return 0


t.run(main, timeout=900)
