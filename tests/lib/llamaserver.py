# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
"""llama-server for the tests and benches: built from node-llama-cpp's bundle
(lptest.build_llama("--server"), cached), started on a free port, asked for completions
over HTTP, stopped. test_requests, test_engines and bench/batch.py share it."""
import json
import subprocess
import time
import urllib.request

import lptest


class Server:
    """binary serving model with the given threads, context and slots (extra: more of its
    options); prefix: a command it runs under (perf record ... --). Ready once /health
    answers 200; an exit before that is an error. started(proc) is called once the process
    is (perfref.SystemWide's held=, with prefix perfref.held([]))."""

    def __init__(self, binary, model, threads=2, ctx=1024, slots=1, extra=(), prefix=(),
                 cwd=None, timeout=300, started=None):
        self.port = lptest.free_port()
        self.base = "http://127.0.0.1:%d" % self.port
        self.proc = subprocess.Popen(
            list(prefix) + [binary, "-m", model, "--host", "127.0.0.1", "--port",
                            str(self.port), "-t", str(threads), "-tb", str(threads), "-c",
                            str(ctx), "-np", str(slots)] + list(extra),
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            cwd=cwd)
        lptest._children.append(self.proc)
        if started:
            started(self.proc)
        lptest.poll("llama-server to answer /health", self.healthy, timeout=timeout,
                    interval=0.2)

    def healthy(self):
        try:
            with urllib.request.urlopen(self.base + "/health", timeout=2) as r:
                return r.status == 200
        except (OSError, ValueError):
            if self.proc.poll() is not None:
                raise AssertionError("llama-server exited: %s" % self.proc.returncode)
            return False

    def complete(self, prompt, tokens, stream=False, cache_prompt=True, timeout=300):
        """One /completion of tokens tokens after prompt, greedy, past any end of text: its
        answer (streamed: the last chunk, which carries the timings), with the
        CLOCK_MONOTONIC times it was sent and received (bpf_ktime_get_ns()'s and ggml's
        clock) as sent_ns and received_ns."""
        body = json.dumps({"prompt": prompt, "n_predict": tokens, "temperature": 0,
                           "ignore_eos": True, "stream": stream,
                           "cache_prompt": cache_prompt}).encode()
        req = urllib.request.Request(self.base + "/completion", data=body,
                                     headers={"Content-Type": "application/json"})
        sent = time.monotonic_ns()
        with urllib.request.urlopen(req, timeout=timeout) as r:
            if not stream:
                a = json.loads(r.read())
            else:
                a = None
                for line in r:
                    line = line.decode().strip()
                    if line.startswith("data: ") and line[6:] != "[DONE]":
                        a = json.loads(line[6:])
        a["sent_ns"], a["received_ns"] = sent, time.monotonic_ns()
        return a

    def metrics(self):
        """Its own /metrics (with --metrics) as {series: value}."""
        with urllib.request.urlopen(self.base + "/metrics", timeout=10) as r:
            out = {}
            for line in r.read().decode().splitlines():
                if line and not line.startswith("#"):
                    name, value = line.rsplit(" ", 1)
                    out[name] = float(value)
            return out

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=60)
