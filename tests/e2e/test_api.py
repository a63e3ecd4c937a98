#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
"""The HTTP/JSON API over the Unix socket, driven with curl as a user would: every route,
every error with its status and JSON body, access by uid and group, malformed and oversized
requests, 500 idle connections and a slow client next to a client that still gets answers,
the connection cap, retention, SIGHUP reload, and totals kept across SIGTERM and start."""
import json
import os
import signal
import socket
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
import lptest as t  # noqa: E402

NOBODY = 65534


def proc_in(doc, pid):
    return [p for p in doc["processes"] if p["pid"] == pid]


def raw(sock_path, data, timeout=5.0):
    """Sends bytes as they are and reads until the daemon closes: (status, JSON body)."""
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(timeout)
    s.connect(sock_path)
    try:
        s.sendall(data)
    except OSError:
        pass  # the daemon may refuse before reading everything; its answer is still there
    out = b""
    try:
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            out += chunk
    except (socket.timeout, ConnectionResetError):
        pass
    s.close()
    head, _, body = out.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1]) if head.startswith(b"HTTP/") else 0
    return status, body, head


def connect_many(path, n):
    """n connections that send nothing."""
    out = []
    for _ in range(n):
        s = socket.socket(socket.AF_UNIX)
        s.connect(path)
        out.append(s)
    return out


def run_to_exit(d, fx):
    """Lets a fixture do its work and exit; waits until the daemon reports it exited."""
    fx.go()
    fx.result()
    fx.release()
    t.poll("pid %d to show as exited" % fx.pid,
           lambda: d.get("/v1/processes/%d" % fx.pid)["state"] == "exited")


def is_error(doc, code):
    return isinstance(doc, dict) and doc.get("error", {}).get("code") == code and \
        doc["error"].get("message")


def test_routes():
    print("--- every route and every error, with curl")
    fx = t.Fixture("--futex-threads", "2", "--futex-waits", "20", "--futex-ms", "1",
                   "--contend-ms", "200", "--hold")
    d = t.Daemon("--pid", str(fx.pid), "--socket-mode", "0666")
    d.wait_ready()
    fx.go()
    fx.result()

    st = d.get("/v1/status")
    t.check(st["api"] == 1 and st["version"] and st["uptime_seconds"] >= 0,
            "status: version, api and uptime")
    t.check("tp_btf" in st["kernel_features"]["found"] + st["kernel_features"]["missing"],
            "status: kernel features found and missing: %s" % st["kernel_features"])
    # sched_switch, exec, exit and the mmap hook at least (and the per-CPU sampler's
    # events, one per CPU)
    t.check(st["probes"]["core_links"] >= 4 and len(st["maps"]) >= 5 and "lost" in st,
            "status: probes attached, map fill and losses")
    t.check(st["processes"]["running"] == 1 and st["peer"]["privileged"],
            "status: one process, root is privileged")

    lst = d.get("/v1/processes")
    mine = proc_in(lst, fx.pid)
    t.check(len(mine) == 1 and mine[0]["threads"] >= 3, "list: the fixture with its threads")
    fw = mine[0]["counters"]["futex_waits"] if mine else -1
    t.check(fw >= 40, "list: futex waits summed (%d of the 40 the fixture made)" % fw)
    t.check(mine and mine[0]["histograms"]["runqueue_latency"]["p99"] > 0,
            "list: run-queue p99 of a contended process is > 0")

    one = d.get("/v1/processes/%d" % fx.pid)
    h = one["histograms"]["futex_wait"]
    t.check(h["count"] >= 40 and h["buckets"] and h["p50"] > 0, "process: histogram in full")
    t.check(len(one["threads"]) >= 3 and one["futex"]["top"], "process: threads and futex words")

    t.check(one["api"] == 1 and one["cmdline"].startswith(t.LPFIXTURE) and
            one["workload"] == "lpfixture" and one["model"] is None and "unit" in one,
            "process: api version, command line, workload; no model mapped")
    ver = d.get("/v1/version")
    t.check(ver["api"] == 1 and ver["min_api"] == 1 and ver["version"] == st["version"],
            "version: %s" % ver)
    # Filters on the list, as users try them; anything else is a 400, not ignored.
    for query, want in (("pid=%d" % fx.pid, [fx.pid]), ("pid=1&pid=%d" % fx.pid, [fx.pid]),
                        ("pid=1", []), ("state=running&comm=lpfixture", [fx.pid]),
                        ("state=exited", []), ("workload=lpfixture", [fx.pid]),
                        ("comm=lp%66ixture", [fx.pid]), ("model=none.gguf", [])):
        got = [p["pid"] for p in d.get("/v1/processes?" + query)["processes"]]
        t.check(got == want, "GET /v1/processes?%s: %s" % (query, got))
    for path in ("/v1/processes?pid=abc", "/v1/processes?bogus=1", "/v1/processes?pid",
                 "/v1/processes?state=zombie", "/v1/processes?comm=%zz",
                 "/v1/status?verbose=1", "/v1/processes/%d?x=1" % fx.pid):
        status, doc, _ = d.api("GET", path)
        t.check(status == 400 and is_error(doc, "bad_request"),
                "GET %s: 400 %s" % (path, doc.get("error", {}).get("message") if
                                    isinstance(doc, dict) else doc))

    status, doc, hdrs = d.api("HEAD", "/v1/status")
    t.check(status == 200, "HEAD /v1/status: 200")
    # HEAD then GET on one connection: the HEAD answer has GET's Content-Length and no body,
    # so the GET's answer is read as the second response.
    _, body, head = raw(d.socket, b"HEAD /v1/processes HTTP/1.1\r\nHost: x\r\n\r\n"
                        b"GET /v1/processes HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    def content_length(h):
        return [int(x.split(b":")[1]) for x in h.split(b"\r\n")
                if x.lower().startswith(b"content-length:")]
    length = content_length(head)
    second, _, rest = body.partition(b"\r\n\r\n")
    # The list changes between the two requests (clocks, counters): each answer is judged
    # by its own length.
    t.check(length and length[0] > 100 and second.startswith(b"HTTP/1.1 200") and
            content_length(second) == [len(rest)] and t.json.loads(rest)["api"] == 1,
            "HEAD: Content-Length %s and no body; the next response follows it (%r)"
            % (length, body[:60]))

    status, doc, _ = d.api("POST", "/v1/processes/%d/reset" % fx.pid)
    t.check(status == 200 and doc == {"pid": fx.pid, "reset": True}, "reset: %s" % doc)
    after = d.get("/v1/processes/%d" % fx.pid)
    t.check(after["histograms"]["futex_wait"]["count"] == 0 and
            after["counters"]["futex_waits"] == 0 and not after["futex"]["top"] and
            after["counters"]["voluntary_switches"] < one["counters"]["voluntary_switches"],
            "reset: counters, histograms and futex words start from zero")

    # Errors, each with its status and a JSON body naming it.
    cases = [
        ("GET", "/v1/processes/abc", None, 400, "bad_request"),
        ("GET", "/v1/processes/0", None, 400, "bad_request"),
        ("GET", "/v1/processes/4194304", None, 404, "no_such_process"),
        ("GET", "/v1/nope", None, 404, "not_found"),
        ("GET", "/v1/processes/%d/other" % fx.pid, None, 404, "not_found"),
        ("DELETE", "/v1/status", None, 405, "method_not_allowed"),
        ("GET", "/v1/processes/%d/reset" % fx.pid, None, 405, "method_not_allowed"),
        ("POST", "/v1/processes/4194304/reset", None, 404, "no_such_process"),
        ("POST", "/v1/processes/%d/precise" % fx.pid, "{nope", 400, "bad_request"),
        ("POST", "/v1/processes/%d/precise" % fx.pid, '{"secs": 5}', 400, "bad_request"),
        ("POST", "/v1/processes/%d/precise" % fx.pid, '{"seconds": -1}', 400, "bad_request"),
        ("POST", "/v1/processes/%d/precise" % fx.pid, "[1]", 400, "bad_request"),
        ("POST", "/v1/processes/%d/precise" % fx.pid, '{"seconds": 5}', 409,
         "not_an_llm_process"),
        ("POST", "/v1/processes/%d/precise" % fx.pid, "x" * 5000, 413, "too_large"),
        # One JSON object, nothing after it, no NUL hidden in a key, no key twice.
        ("POST", "/v1/processes/%d/precise" % fx.pid, '{"seconds": 3} xyz', 400,
         "bad_request"),
        ("POST", "/v1/processes/%d/precise" % fx.pid, '{"seconds": 3}{"seconds": 4}', 400,
         "bad_request"),
        ("POST", "/v1/processes/%d/precise" % fx.pid, '{"seconds\\u0000x": 3}', 400,
         "bad_request"),
        ("POST", "/v1/processes/%d/precise" % fx.pid, '{"seconds": 3, "seconds": 4}', 400,
         "bad_request"),
        ("POST", "/v1/processes/%d/precise" % fx.pid, '{"seconds": 3}\n', 409,
         "not_an_llm_process"),
    ]
    for method, path, body, want, code in cases:
        status, doc, hdrs = d.api(method, path, body)
        t.check(status == want and is_error(doc, code),
                "%s %s -> %d %s (%s)" % (method, path[:40], want, code,
                                         doc if status != want else "ok"))
        if want == 405:
            t.check(hdrs.get("allow") in ("GET", "POST"), "405 names what is allowed")

    # Requests curl would not send: malformed and oversized, straight on the socket.
    for name, data, want, code in [
            ("garbage request line", b"HELLO\r\n\r\n", 400, "bad_request"),
            # RFC 9110 15.6.2: 501 for a method the server does not know (405 names
            # what is allowed: only for methods it knows, by the router).
            ("unknown method", b"BREW /v1/status HTTP/1.1\r\nHost: x\r\n\r\n", 501,
             "not_implemented"),
            ("white space before a header's colon", b"GET /v1/status HTTP/1.1\r\nHost: x\r\n"
             b"Foo : bar\r\n\r\n", 400, "bad_request"),
            ("an empty header name", b"GET /v1/status HTTP/1.1\r\nHost: x\r\n: bar\r\n\r\n",
             400, "bad_request"),
            ("Content-Length +2", b"POST /v1/bandwidth HTTP/1.1\r\nHost: x\r\n"
             b"Content-Length: +2\r\n\r\n{}", 400, "bad_request"),
            ("a chunk extension", b"POST /v1/bandwidth HTTP/1.1\r\nHost: x\r\n"
             b"Transfer-Encoding: chunked\r\n\r\n2;x=y\r\n{}\r\n0\r\n\r\n", 400,
             "bad_request"),
            ("a number with a leading zero", b"POST /v1/processes/1/precise HTTP/1.1\r\n"
             b"Host: x\r\nContent-Length: 15\r\n\r\n{\"seconds\": 05}", 400, "bad_request"),
            ("a NUL after the body", b"POST /v1/processes/1/precise HTTP/1.1\r\nHost: x\r\n"
             b"Content-Length: 3\r\n\r\n{}\x00", 400, "bad_request"),
            ("a byte order mark", b"POST /v1/processes/1/precise HTTP/1.1\r\nHost: x\r\n"
             b"Content-Length: 5\r\n\r\n\xef\xbb\xbf{}", 400, "bad_request"),
            ("a body where none is taken", b"POST /v1/bandwidth HTTP/1.1\r\nHost: x\r\n"
             b"Content-Length: 7\r\n\r\ngarbage", 400, "bad_request"),
            ("raw bytes in the target", b"GET /v1/\xff\x1b[2J HTTP/1.1\r\nHost: x\r\n\r\n",
             404, "not_found"),
            ("headers over 8 KiB",
             b"GET /v1/status HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 9000 + b"\r\n\r\n",
             400, "bad_request"),
            ("body over 4 KiB", b"POST /v1/processes/1/precise HTTP/1.1\r\nHost: x\r\n"
             b"Content-Length: 100000\r\n\r\n" + b"{" * 200, 413, "too_large"),
            ("bad Content-Length", b"POST /v1/processes/1/precise HTTP/1.1\r\nHost: x\r\n"
             b"Content-Length: -5\r\n\r\n", 400, "bad_request"),
            # RFC 9112 framing that evhttp lets through
            ("two different Content-Lengths", b"POST /v1/processes/1/precise HTTP/1.1\r\n"
             b"Host: x\r\nContent-Length: 2\r\nContent-Length: 14\r\n\r\n{}", 400,
             "bad_request"),
            ("Content-Length and Transfer-Encoding", b"POST /v1/processes/1/precise "
             b"HTTP/1.1\r\nHost: x\r\nContent-Length: 7\r\nTransfer-Encoding: chunked\r\n"
             b"\r\n2\r\n{}\r\n0\r\n\r\n", 400, "bad_request"),
            ("chunk size zz", b"POST /v1/processes/1/precise HTTP/1.1\r\nHost: x\r\n"
             b"Transfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n", 400,
             "bad_request"),
            ("chunk size -1", b"POST /v1/processes/1/precise HTTP/1.1\r\nHost: x\r\n"
             b"Transfer-Encoding: chunked\r\n\r\n2\r\n{}\r\n-1\r\n\r\n", 400,
             "bad_request"),
            ("a chunk over the body limit", b"POST /v1/processes/1/precise HTTP/1.1\r\n"
             b"Host: x\r\nTransfer-Encoding: chunked\r\n\r\n100000\r\n{}", 413,
             "too_large"),
            ("Transfer-Encoding: gzip, chunked", b"POST /v1/processes/1/precise HTTP/1.1\r\n"
             b"Host: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
             501, "not_implemented"),
            # RFC 9110 5.5: a NUL in a field value is refused (evhttp would cut the value
            # there), wherever it lies; a body here is JSON, which holds none either.
            ("a NUL in a header value", b"GET /v1/status HTTP/1.1\r\nHost: x\r\n"
             b"X-A: a\x00b\r\n\r\n", 400, "bad_request"),
            ("a NUL in Content-Length", b"POST /v1/bandwidth HTTP/1.1\r\nHost: x\r\n"
             b"Content-Length: 2\x0099\r\n\r\n{}", 400, "bad_request"),
            ("a NUL in the second pipelined request",
             b"GET /v1/version HTTP/1.1\r\nHost: x\r\n\r\nGET /v1/status HTTP/1.1\r\n"
             b"Host: x\r\nX-A: \x00\r\n\r\n", 400, "bad_request"),
            # found by the fuzzer: a malformed request after a good one on one connection
            ("malformed after a pipelined request",
             b"GET /v1/processes/x HTTP/1.1\r\nHost: x\r\n\r\nnt-Length: 15\r\n\r\n", 400,
             "bad_request")]:
        status, body, head = raw(d.socket, data)
        if b"pipelined" in name.encode():
            if b"NUL" in name.encode():
                t.check(status == 200, "%s: the first is answered (%d)" % (name, status))
            # The second answer is the one under test.
            _, _, rest = body.partition(b"\nHTTP/1.1 ")
            head, _, body = rest.partition(b"\r\n\r\n")
            status = int(head.split(b" ", 1)[0]) if head else 0
        # Strictly: UTF-8, and no control character in any string (an escaped target).
        doc = t.json.loads(body.decode("utf-8")) if body else None
        t.check(status == want and b"application/json" in head and is_error(doc, code)
                and not any(ord(ch) < 32 for ch in doc["error"]["message"]),
                "%s -> %d %s in JSON (got %d %r)" % (name, want, code, status, body[:80]))
    # A long ?model= filter: any target that fits the headers' 8 KiB.
    status, doc, _ = d.api("GET", "/v1/processes?model=" + "a" * 2000)
    t.check(status == 200 and doc["processes"] == [],
            "a 2 KiB filter is a filter (nothing matches): %d" % status)
    t.check(d.get("/v1/status")["server"]["http_errors_rewritten"] >= 5,
            "evhttp's own error pages were all turned into JSON")

    # The daemon still serves, and /metrics is on the socket too.
    status, text, hdrs = d.api("GET", "/metrics")
    t.check(status == 200 and hdrs["content-type"].startswith("text/plain; version=0.0.4") and
            ('pid="%d"' % fx.pid) in text, "/metrics on the socket")
    fx.release()
    t.poll("the fixture to show as exited",
           lambda: d.get("/v1/processes/%d" % fx.pid)["state"] == "exited")
    status, doc, _ = d.api("POST", "/v1/processes/%d/precise" % fx.pid, '{"seconds": 5}')
    t.check(status == 409 and is_error(doc, "process_exited"), "precise on an exited process")
    t.check(d.stop() == 0, "daemon exits cleanly")


def test_access():
    print("--- access: other uids see their own processes; changes need root or the group")
    gid = 4242
    mine = t.Fixture("--futex-threads", "0", "--hold")
    theirs_cmd = t.as_user(NOBODY) + [t.LPFIXTURE, "--wait-go", "--futex-threads", "0", "--hold"]
    theirs = t.subprocess.Popen(theirs_cmd, stdin=t.subprocess.PIPE, stdout=t.subprocess.PIPE)
    t._children.append(theirs)
    d = t.Daemon("--pid", str(mine.pid), "--pid", str(theirs.pid), "--socket-mode", "0666",
                 "--socket-group", "llmproftest")
    d.wait_ready()
    nobody = t.as_user(NOBODY)
    member = t.as_user(NOBODY + 1, NOBODY + 1, groups=[gid])
    has_group = os.system("getent group llmproftest >/dev/null") == 0
    if not has_group:
        os.system("groupadd -g %d llmproftest" % gid)
    try:
        # The daemon looked the group up at start; restart it now that the group exists.
        if not has_group:
            d.stop()
            d = t.Daemon("--pid", str(mine.pid), "--pid", str(theirs.pid), "--socket-mode",
                         "0666", "--socket-group", "llmproftest")
            d.wait_ready()
        seen = [p["pid"] for p in d.get("/v1/processes", user=nobody)["processes"]]
        t.check(seen == [theirs.pid], "uid %d sees only its own process: %s" % (NOBODY, seen))
        # Someone else's process answers exactly as a pid nobody tracks: a 403 would tell
        # an unprivileged user that the pid is an LLM process.
        status, doc, _ = d.api("GET", "/v1/processes/%d" % mine.pid, user=nobody)
        untracked = t.unused_pid()
        s2, doc2, _ = d.api("GET", "/v1/processes/%d" % untracked, user=nobody)
        t.check(status == s2 == 404 and is_error(doc, "no_such_process") and
                json.dumps(doc).replace(str(mine.pid), "N") ==
                json.dumps(doc2).replace(str(untracked), "N"),
                "someone else's process: the same 404 as a pid that is not tracked")
        status, doc, _ = d.api("POST", "/v1/processes/%d/reset" % theirs.pid, user=nobody)
        t.check(status == 403 and is_error(doc, "forbidden"),
                "reset of even its own process needs the group")
        st = d.get("/v1/status", user=nobody)
        t.check(not st["peer"]["privileged"] and st["peer"]["uid"] == NOBODY,
                "status tells the peer it is unprivileged")
        t.check(st["processes"]["running"] == 1 and "probes" not in st and
                all("entries" not in m for m in st["maps"]),
                "status counts only its own processes and shows no map fill or probe counts")
        metrics = d.api("GET", "/metrics", user=nobody)[1]
        t.check("llmprofd_map_entries{" not in metrics and
                'llmprofd_processes{state="running"} 1' in metrics,
                "nor does /metrics: %s" % [x for x in metrics.splitlines()
                                           if x.startswith("llmprofd_processes{")])
        seen = sorted(p["pid"] for p in d.get("/v1/processes", user=member)["processes"])
        t.check(seen == sorted([mine.pid, theirs.pid]),
                "a member of the group (supplementary) sees every process")
        status, _, _ = d.api("POST", "/v1/processes/%d/reset" % mine.pid, user=member)
        t.check(status == 200, "and may reset")
        metrics = d.api("GET", "/metrics", user=nobody)[1]
        t.check(('pid="%d"' % theirs.pid) in metrics and ('pid="%d"' % mine.pid) not in metrics,
                "/metrics on the socket follows the same rule")
    finally:
        if not has_group:
            os.system("groupdel llmproftest")
    d.stop()
    # The default mode keeps everyone else out, at connect time.
    d = t.Daemon("--pid", str(mine.pid))
    d.wait_ready()
    mode = os.stat(d.socket).st_mode & 0o777
    t.check(mode == 0o660, "the socket is 0660 by default (%o)" % mode)
    p = t.subprocess.run(nobody + [sys.executable, "-c", "import socket, sys; "
                                   "socket.socket(socket.AF_UNIX).connect(sys.argv[1])",
                                   d.socket], capture_output=True, text=True)
    t.check(p.returncode != 0 and "PermissionError" in p.stderr,
            "a non-member cannot connect: %s" % p.stderr.strip().splitlines()[-1:])
    d.stop()
    mine.go()
    mine.result()
    mine.release()
    theirs.stdin.write(b"go\n")
    theirs.stdin.flush()
    theirs.stdin.close()
    theirs.kill()


def test_connections():
    print("--- 500 idle connections and a slow client do not stop another client")
    d = t.Daemon("--no-discover", "--pid", str(os.getpid()), "--http-timeout", "5")
    d.wait_ready()
    idle = connect_many(d.socket, 500)
    slow = connect_many(d.socket, 1)[0]
    request = b"GET /v1/status HTTP/1.1\r\nHost: x\r\n\r\n"
    start = time.monotonic()
    answered = 0
    for i in range(3):
        slow.send(request[i:i + 1])  # one byte a second
        st = d.get("/v1/status")
        answered += st["api"] == 1
        time.sleep(1)
    t.check(answered == 3, "another client got all 3 answers while 501 connections were open")
    t.check(st["server"]["connections"] >= 500, "the daemon held them (%d open)" %
            st["server"]["connections"])
    slow.settimeout(10)
    try:
        got = slow.recv(100)
    except OSError:
        got = b""
    t.check(got == b"" and 4 < time.monotonic() - start < 9,
            "the slow client was dropped at the 5 s deadline (after %.1f s)" %
            (time.monotonic() - start))
    t.poll("the idle connections to be dropped too",
           lambda: d.get("/v1/status")["server"]["connections"] <= 2, timeout=15)
    t.check(d.get("/v1/status")["server"]["timed_out"] >= 1, "the deadline drop is counted")
    for s in idle + [slow]:
        s.close()
    d.stop()

    print("--- over the connection cap: 503 in JSON, and the rest keep working")
    d = t.Daemon("--no-discover", "--pid", str(os.getpid()), "--max-connections", "8")
    d.wait_ready()
    held = connect_many(d.socket, 8)
    time.sleep(0.2)  # the daemon accepts them in its own time
    status, doc, _ = d.api("GET", "/v1/status")
    t.check(status == 503 and is_error(doc, "too_many_connections"),
            "the 9th connection gets 503 too_many_connections")
    for s in held:
        s.close()
    t.poll("a slot to free up", lambda: d.api("GET", "/v1/status")[0] == 200, timeout=10)
    t.check(True, "after they close, requests are served again")
    d.stop()

    print("--- one local user cannot hold every connection")
    d = t.Daemon("--no-discover", "--pid", str(os.getpid()), "--socket-mode", "0666",
                 "--max-connections", "64", "--max-connections-per-uid", "8")
    d.wait_ready()
    # 60 connections of one user: 8 are kept, the others closed as soon as they are
    # accepted, with a 503 in their input. Each says which: open, answered or closed.
    hog = t.subprocess.Popen(t.as_user(NOBODY) + [sys.executable, "-c", (
        "import socket, sys, time\n"
        "s = [socket.socket(socket.AF_UNIX) for _ in range(60)]\n"
        "[x.connect(sys.argv[1]) for x in s]\n"
        "time.sleep(1)\n"
        "[x.setblocking(False) for x in s]\n"
        "def state(x):\n"
        "    try:\n"
        "        return 'closed' if x.recv(4096) == b'' else 'answered'\n"
        "    except BlockingIOError:\n"
        "        return 'open'\n"
        "    except OSError:\n"
        "        return 'closed'\n"
        "print(' '.join(state(x) for x in s), flush=True)\n"
        "x = socket.socket(socket.AF_UNIX)\n"
        "x.connect(sys.argv[1])\n"
        "try:\n"
        "    x.sendall(b'GET /v1/status HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n')\n"
        "    got = x.recv(65536)\n"
        "except OSError:\n"
        "    got = b''\n"
        "print(got.split(b'\\r\\n')[0].decode() or 'closed', flush=True)\n"
        "print(got.split(b'\\r\\n\\r\\n', 1)[-1].decode(), flush=True)\n"
        "time.sleep(60)"), d.socket], stdout=t.subprocess.PIPE, text=True)
    t._children.append(hog)
    states = hog.stdout.readline().split()
    t.check(states.count("open") == 8 and len(states) == 60,
            "uid %d opened 60 connections: 8 kept open, the other 52 closed at once, a "
            "503 written first (%s)" % (NOBODY, {k: states.count(k) for k in set(states)}))
    line, body = hog.stdout.readline().strip(), hog.stdout.readline().strip()
    t.check(line == "closed" or (line.startswith("HTTP/1.1 503")
                                 and is_error(json.loads(body), "too_many_connections")),
            "its next connection is closed too: %s (none, or 503 when its request was in "
            "first) %s" % (line, body))
    status, doc, _ = d.api("GET", "/v1/status", user=t.as_user(NOBODY - 1))
    t.check(status == 200, "another unprivileged user still gets in (%d)" % status)
    st = d.get("/v1/status")
    t.check(st["api"] == 1, "root still gets in")
    t.check(st["server"]["over_uid_cap"] >= 53 and st["server"]["refused"] >= 53,
            "the refusals are counted: %d over the per-uid cap, %d closed at once"
            % (st["server"]["over_uid_cap"], st["server"]["refused"]))
    hog.kill()
    hog.wait()
    d.stop()


def test_retention_and_reload():
    print("--- retention: an exited process goes after the retention period; SIGHUP reload")
    conf = t.tmpfile("[service]\nretention = 3600\nmetrics-max-processes = 50\n", ".conf")
    fx = t.Fixture("--futex-threads", "1", "--futex-waits", "5", "--futex-ms", "1")
    d = t.Daemon("--pid", str(fx.pid), "--config", conf)
    d.wait_ready()
    run_to_exit(d, fx)
    waits = d.get("/v1/processes/%d" % fx.pid)["counters"]["futex_waits"]
    t.check(waits >= 5, "exited process kept with its data (%d futex waits)" % waits)

    with open(conf, "w") as f:
        f.write("# shorter retention\n[service]\nretention = 1\nmetrics-max-processes = 7\n"
                "[ggml]\nsample-hz = 49\n")
    os.kill(d.proc.pid, signal.SIGHUP)
    d.wait_log("reloaded the configuration")
    t.check("sample-hz = 49 takes effect at the next restart" in d.log(),
            "a setting that needs a restart is named")
    cfg = d.get("/v1/status")["config"]
    t.check(cfg["retention"] == 1 and cfg["metrics-max-processes"] == 7 and
            cfg["sample-hz"] == 99, "reload applied retention and the metrics cap only")
    t.poll("the exited process to be forgotten",
           lambda: d.api("GET", "/v1/processes/%d" % fx.pid)[0] == 404, timeout=5)
    t.check("forgotten, exited" in d.log(), "forgetting is logged")

    with open(conf, "w") as f:
        f.write("[service]\nretention = soon\n")
    os.kill(d.proc.pid, signal.SIGHUP)
    d.wait_log("keeping the current one")
    t.check(d.get("/v1/status")["config"]["retention"] == 1,
            "a bad file on reload keeps the running settings")
    t.check(d.stop() == 0, "daemon exits cleanly")

    print("--- bad configuration at start: file and line")
    conf = t.tmpfile("[service]\nretention = 60\nno-such-thing = 1\n", ".conf")
    d = t.Daemon("--config", conf)
    t.check(d.wait_exit() == 2, "exit status 2")
    t.check("%s:3" % conf in d.log() and "no-such-thing: unknown setting" in d.log(),
            "the message names the file, the line and the key: %s" % d.log().strip())


def test_restart_keeps_totals():
    print("--- SIGTERM, then start: totals kept")
    live = t.Fixture("--futex-threads", "1", "--futex-waits", "7", "--futex-ms", "1", "--hold")
    gone = t.Fixture("--futex-threads", "1", "--futex-waits", "3", "--futex-ms", "1")
    d = t.Daemon("--pid", str(live.pid), "--pid", str(gone.pid))
    d.wait_ready()
    state_dir = d.state_dir
    live.go()
    live.result()
    run_to_exit(d, gone)
    gone_waits = d.get("/v1/processes/%d" % gone.pid)["counters"]["futex_waits"]
    before = d.get("/v1/processes/%d" % live.pid)
    t.check(d.stop(signal.SIGTERM) == 0, "SIGTERM: exit status 0")
    t.check("saved the totals of 2 process(es)" in d.log(), "the totals were saved")

    # Started again as a service is, with the rule that tracks the live one (a saved
    # process still running is adopted only when a rule in force selects it).
    d = t.Daemon("--state-directory", state_dir, "--pid", str(live.pid))
    d.wait_ready()
    t.check("restored 2 process(es)" in d.log(), "and read back")
    after = d.get("/v1/processes/%d" % live.pid)
    t.check(after["state"] == "running" and
            after["counters"]["futex_waits"] == before["counters"]["futex_waits"] == 7,
            "the running process keeps its totals (7 futex waits)")
    t.check(after["histograms"]["futex_wait"]["count"] == 7 and
            after["counters"]["oncpu_ns"] >= before["counters"]["oncpu_ns"],
            "histograms and on-CPU time carried over")
    old = d.get("/v1/processes/%d" % gone.pid)
    t.check(old["state"] == "exited" and old["counters"]["futex_waits"] == gone_waits >= 3,
            "the exited process is back with its %d waits" % gone_waits)
    d.stop(signal.SIGTERM)
    live.release()


def main():
    test_routes()
    test_access()
    test_connections()
    test_retention_and_reload()
    test_restart_keeps_totals()


t.run(main, timeout=280)
