#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
"""e2e tier: one local user floods the listeners, and root, the group and a Prometheus
server are still answered at once. Three processes of an unprivileged user keep up to 900
connections each open to the TCP /metrics port, with a
partial request on each, and reconnect as they are dropped. Meanwhile root asks the API
and another user scrapes /metrics over and over: every answer within 100 ms. The flood
itself is held to its share (64 connections a listener): the kernel refuses its connect()
calls to /metrics past a rate (bpf/admit.bpf.c), the daemon closes the rest at once.
With the socket open to everyone (0666) the flood reaches it too: root is answered every
time, behind the flood's connections in the socket's backlog."""
import collections
import json
import os
import signal
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
import lptest as t  # noqa: E402

NOBODY = 65534
SCRAPER = 65533  # another unprivileged user, as a Prometheus server's would be
FLOODERS, PER_FLOODER = 3, 900
CAP = 64  # --max-connections-per-uid, read from the daemon
ROUNDS = 60  # requests of each kind during the flood, every 0.1 s: 6 s, past the 5 s
# header timeout, so that the flood's held connections are dropped and made again

FLOOD = r"""
import resource, selectors, socket, sys, time
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4096), hard))
path, port, want = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
partial = b"GET /v1/version HTTP/1.1\r\nX: "
sel = selectors.DefaultSelector()
made = dropped = 0
start = last = time.monotonic()
while True:
    n = len(sel.get_map())
    for i in range(want - n):
        try:
            if path and (made + i) % 2:
                s = socket.socket(socket.AF_UNIX)
                s.settimeout(1)
                s.connect(path)
            else:
                s = socket.create_connection(("127.0.0.1", port), timeout=1)
            s.sendall(partial)
            s.setblocking(False)
            sel.register(s, selectors.EVENT_READ)
            made += 1
        except OSError:
            break
    for key, _ in sel.select(0.01):
        try:
            data = key.fileobj.recv(4096)
        except OSError:
            data = b""
        if not data:
            sel.unregister(key.fileobj)
            key.fileobj.close()
            dropped += 1
    if time.monotonic() - last > 0.5:
        last = time.monotonic()
        print('{"made": %d, "dropped": %d, "open": %d}' % (made, dropped, len(sel.get_map())),
              flush=True)
"""

# One request on a new connection, read to its end: (seconds from connect to the whole
# answer, status; -1 when the connection failed). Run here for root and, as SCRAPE's first
# part, in another user's process.
TIMED_GET = r"""
import socket, time
def timed_get(family, address, path):
    t0 = time.monotonic()
    s = socket.socket(family)
    s.settimeout(5)
    try:
        s.connect(address)
        s.sendall(b"GET %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n" % path)
        got = b""
        while True:
            c = s.recv(65536)
            if not c:
                break
            got += c
        status = int(got.split(b" ", 2)[1]) if got.startswith(b"HTTP/") else 0
    except OSError:
        status = -1
    finally:
        s.close()
    return time.monotonic() - t0, status
"""
exec(TIMED_GET)

# Scrapes /metrics ROUNDS times, every 0.1 s; prints each one's seconds and status.
SCRAPE = TIMED_GET + r"""
import json, sys
port, rounds = int(sys.argv[1]), int(sys.argv[2])
out = []
for _ in range(rounds):
    t0 = time.monotonic()
    out.append(timed_get(socket.AF_INET, ("127.0.0.1", port), b"/metrics"))
    time.sleep(max(0, 0.1 - (time.monotonic() - t0)))
print(json.dumps(out), flush=True)
"""


def flood(d, port, unix):
    """ROUNDS requests of root on the socket and scrapes by SCRAPER during a flood by
    NOBODY on the TCP port, and the socket too when unix: (root's, the scrapes, status)."""
    flooders = []
    for _ in range(FLOODERS):
        p = subprocess.Popen(t.as_user(NOBODY) + [sys.executable, "-c", FLOOD,
                                                  d.socket if unix else "", str(port),
                                                  str(PER_FLOODER)],
                             stdout=subprocess.PIPE, text=True)
        t._children.append(p)
        flooders.append(p)
    before = d.get("/v1/status")["server"]
    start = time.monotonic()
    # Under way once they have made more connections than they may open.
    t.poll("the flood to be under way", lambda: sum(
        v - before[k] for k, v in d.get("/v1/status")["server"].items()
        if k in ("refused", "refused_in_kernel")) > 4 * CAP, timeout=20)
    scraper = subprocess.Popen(t.as_user(SCRAPER) + [sys.executable, "-c", SCRAPE, str(port),
                                                    str(ROUNDS)],
                               stdout=subprocess.PIPE, text=True)
    t._children.append(scraper)
    mine = []
    for _ in range(ROUNDS):
        t0 = time.monotonic()
        mine.append(timed_get(socket.AF_UNIX, d.socket, b"/v1/version"))  # noqa: F821
        time.sleep(max(0, 0.1 - (time.monotonic() - t0)))
    scrapes = json.loads(scraper.communicate(timeout=60)[0])
    st = d.get("/v1/status")["server"]
    made = 0
    for p in flooders:
        p.kill()
        lines = p.communicate(timeout=10)[0].splitlines()
        made += json.loads(lines[-1])["made"] if lines else 0
    t.check(st["connections"] <= (2 if unix else 1) * CAP + 8,
            "the flooding uid made %d connections and holds its share: %d open in all (%d a "
            "listener); the daemon closed %d at once, the kernel refused %d connect() calls"
            % (made, st["connections"], CAP, st["refused"] - before["refused"],
               st["refused_in_kernel"] - before["refused_in_kernel"]))
    st["seconds"] = time.monotonic() - start
    st["closed"] = st["refused"] - before["refused"]
    return mine, scrapes, st


def summary(got):
    ms = sorted(x[0] * 1e3 for x in got)
    return dict(collections.Counter(x[1] for x in got)), ms[len(ms) // 2], ms[-1]


# Connects n times at once to the port, holding each; prints how many connect() let through.
BURST = r"""
import socket, sys
port, n = int(sys.argv[1]), int(sys.argv[2])
held, ok = [], 0
for _ in range(n):
    try:
        held.append(socket.create_connection(("127.0.0.1", port), timeout=2))
        ok += 1
    except OSError:
        pass
print(ok, flush=True)
"""


def burst(port, n):
    out = subprocess.run(t.as_user(NOBODY) + [sys.executable, "-c", BURST, str(port), str(n)],
                         capture_output=True, text=True, timeout=60).stdout
    return int(out.strip() or -1)


def reload_rate():
    print("--- the kernel's share follows --max-connections-per-uid through a reload")
    port = t.free_port()
    conf = t.tmpfile("[service]\nmax-connections-per-uid = 8\n", ".conf")
    d = t.Daemon("--no-discover", "--pid", str(os.getpid()), "--config", conf,
                 "--metrics-address", "127.0.0.1:%d" % port)
    d.wait_ready()
    if d.get("/v1/status")["server"]["kernel_admission"] != "on":
        t.check(True, "no kernel admission here: nothing to reload")
        d.stop()
        return
    # Each burst takes well under the 1/8 s one more connection's credit needs.
    got = burst(port, 30)
    t.check(8 <= got <= 9, "30 connects at once with a share of 8: %d let through" % got)
    with open(conf, "w") as f:
        f.write("[service]\nmax-connections-per-uid = 20\n")
    os.kill(d.proc.pid, signal.SIGHUP)
    d.wait_log("reloaded the configuration")
    time.sleep(1.2)  # the credit refills to the new burst at the new rate: 20 in 1 s
    got = burst(port, 30)
    t.check(20 <= got <= 21, "after a reload to 20: %d let through" % got)
    t.check(d.stop() == 0, "llmprofd exits 0")


def main():
    global CAP
    port = t.free_port()
    print("--- the default socket (root and the group): %d processes of uid %d flood the TCP "
          "port with partial requests" % (FLOODERS, NOBODY))
    d = t.Daemon("--no-discover", "--pid", str(os.getpid()),
                 "--metrics-address", "127.0.0.1:%d" % port)
    d.wait_ready()
    st = d.get("/v1/status")
    CAP = st["config"]["max-connections-per-uid"]
    admission = st["server"]["kernel_admission"]
    t.check(admission == "on" or "cgroup" in admission,
            "connections to /metrics admitted in the kernel: %s" % admission)
    mine, scrapes, st = flood(d, port, unix=False)
    if admission == "on":
        # What gets past the kernel: CAP at once, then CAP a second.
        t.check(st["refused_in_kernel"] > 0 and st["closed"] <= CAP * (1 + st["seconds"]),
                "the kernel refused %d connect() calls; %d got through to be closed in %.1f s "
                "(at most %d at once and %d a second)"
                % (st["refused_in_kernel"], st["closed"], st["seconds"], CAP, CAP))
    for who, got in (("root on the socket", mine),
                     ("uid %d scraping /metrics" % SCRAPER, scrapes)):
        statuses, median, worst = summary(got)
        t.check(statuses == {200: len(got)} and worst < 100,
                "%s: %s; median %.1f ms, slowest %.1f ms" % (who, statuses, median, worst))
    t.check(d.stop() == 0, "llmprofd exits 0")

    print("--- a socket open to every user (0666): the flood on both listeners")
    d = t.Daemon("--no-discover", "--pid", str(os.getpid()), "--socket-mode", "0666",
                 "--metrics-address", "127.0.0.1:%d" % port)
    d.wait_ready()
    mine, scrapes, st = flood(d, port, unix=True)
    # Root's connection waits in the socket's backlog behind the flood's, each of which
    # the daemon accepts and closes: slower, but answered (see docs/API.md).
    statuses, median, worst = summary(mine)
    t.check(statuses == {200: len(mine)},
            "root on the socket: %s; median %.1f ms, slowest %.1f ms"
            % (statuses, median, worst))
    statuses, median, worst = summary(scrapes)
    t.check(statuses == {200: len(scrapes)} and (admission != "on" or worst < 100),
            "uid %d scraping /metrics: %s; median %.1f ms, slowest %.1f ms"
            % (SCRAPER, statuses, median, worst))
    t.check(d.stop() == 0, "llmprofd exits 0")
    reload_rate()


t.run(main, timeout=180)
