#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
"""Clients that hang up mid-answer end their own request, never the daemon.

The daemon runs as a container runs it: in the foreground, with the signal dispositions a
process inherits by default (SIGPIPE's default kills; subprocess restores it for the child).
A tracked lpggml gives the answers their weight. On both listeners (the Unix socket and the
TCP /metrics one), 1,000 requests of every size are half-read: closed before a byte is
read, after a few bytes, after part of the answer; some closed with a reset. The daemon must
still be running, answer every request in full, and have lost nothing it had collected:
the process's counters afterwards are at least what they were before.

A daemon that ends says why: its log lines carry the time (they go to a file here, not the
journal), and one killed by a fatal signal says which, and from whom, before it dies of it."""
import os
import re
import signal
import socket
import struct
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lib"))
import lptest as t  # noqa: E402

ROUNDS = 1000


def connect_unix(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(10)
    s.connect(path)
    return s


def connect_tcp(port):
    s = socket.create_connection(("127.0.0.1", port), timeout=10)
    return s


def half_read(connect, path, size, i):
    """One request on a new connection, closed after reading a part of its answer (of size
    bytes) that depends on i: nothing, a few bytes, a chunk, half of it; every third one
    closed with a reset."""
    try:
        s = connect()
    except OSError:
        return  # the daemon's fate is judged by the caller
    try:
        s.sendall(("GET %s HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
                   % path).encode())
        want = (0, 1, 100, min(4096, size // 2), size // 2)[i % 5]
        got = 0
        while got < want:
            b = s.recv(min(65536, want - got))
            if not b:
                break
            got += len(b)
        if i % 3 == 0:
            # SO_LINGER with a zero timeout: close() sends a reset, not a FIN.
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        pass
    finally:
        s.close()


def whole(connect, path):
    """One request read to its end: the status and the body's length."""
    s = connect()
    try:
        s.sendall(("GET %s HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
                   % path).encode())
        data = b""
        while True:
            b = s.recv(65536)
            if not b:
                break
            data += b
    finally:
        s.close()
    head, _, body = data.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1]) if head else 0
    return status, body


def main():
    port = t.free_port()
    g = t.Lpggml("--hold")
    d = t.Daemon("--foreground", "--pid", str(g.pid), "--metrics-address",
                 "127.0.0.1:%d" % port)
    d.wait_ready()
    g.go()
    g.line()  # its work done: the counters below have something in them
    before = d.get("/v1/processes/%d" % g.pid)
    unix_paths = ["/v1/version", "/v1/status", "/v1/processes", "/metrics",
                  "/v1/processes/%d" % g.pid]
    sizes = {p: len(whole(lambda: connect_unix(d.socket), p)[1]) for p in unix_paths}
    print("answer sizes on the socket: %s" % sizes)
    t.check(max(sizes.values()) > 8192, "answers up to %d bytes" % max(sizes.values()))

    for name, connect, paths in (
            ("the Unix socket", lambda: connect_unix(d.socket), unix_paths),
            ("the TCP listener", lambda: connect_tcp(port), ["/metrics"])):
        for i in range(ROUNDS):
            half_read(connect, paths[i % len(paths)], sizes[paths[i % len(paths)]], i)
            if d.proc.poll() is not None:
                break
        # A death shows as an exit status once the process is reaped: waited for briefly.
        try:
            d.proc.wait(timeout=1)
        except Exception:
            pass
        t.check(d.proc.poll() is None,
                "%s: llmprofd still runs after %d half-read answers (exit status %s)"
                % (name, ROUNDS, d.proc.returncode))
        if d.proc.poll() is not None:
            print(d.log()[-2000:])
            return
        for p in paths:
            status, body = t.poll("a whole answer to %s" % p,
                                  lambda: (lambda r: r if r[0] == 200 else None)(
                                      whole(connect, p)), timeout=20)
            t.check(status == 200 and len(body) > 0,
                    "%s: %s answered in full afterwards (%d bytes)" % (name, p, len(body)))

    after = d.get("/v1/processes/%d" % g.pid)
    for k in ("oncpu_ns", "voluntary_switches", "decode_generation_tokens"):
        b, a = before["counters"].get(k), after["counters"].get(k)
        t.check(b is not None and a is not None and a >= b,
                "nothing collected was lost: %s %s before, %s after" % (k, b, a))
    g.proc.stdin.close()
    t.check(d.stop() == 0, "llmprofd exits 0 on SIGINT")
    t.check("killed by" not in d.log(), "no fatal signal in the log")
    lines = d.log().splitlines()
    stamped = [x for x in lines if re.match(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z llmprofd: ", x)]
    t.check(lines and len(stamped) == len(lines),
            "every log line starts with the time in UTC: %d of %d, e.g. %r"
            % (len(stamped), len(lines), lines[0] if lines else None))

    d2 = t.Daemon("--foreground")
    d2.wait_ready()
    d2.proc.send_signal(signal.SIGABRT)
    rc = d2.wait_exit()
    t.check(rc == -signal.SIGABRT, "killed with SIGABRT, it dies of it: %s" % rc)
    t.check("llmprofd: killed by SIGABRT from pid %d" % os.getpid() in d2.log(),
            "and says so in its log first: %r" % d2.log().splitlines()[-1:])


if __name__ == "__main__":
    t.run(main, timeout=240)
