#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
"""/metrics as Prometheus sees it: promtool accepts the exposition, and a real Prometheus
server (Debian's package) on loopback scrapes the daemon's TCP listener, after which a
PromQL histogram_quantile over run-queue latency returns a value for the fixture."""
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import urllib.parse
import urllib.request

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
import lptest as t  # noqa: E402




def http_get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.headers, r.read().decode()


def families(text):
    """{family: type} from the # TYPE lines, and the sample lines."""
    types, samples = {}, []
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            types[name] = kind
        elif line and not line.startswith("#"):
            samples.append(line)
    return types, samples


# Prometheus's histogram_quantile() against the API's percentile of the same histogram: /metrics
# gives the bounds of every kernel bucket that counted (8 per doubling), so both fall in the
# same kernel bucket, at most 1/8 of its lower bound wide: they differ by at most 12.5 % of
# the API's value. Under 1.024 us (the first le bound) Prometheus has one bucket: skipped.
PERCENTILE_BOUND = 0.125
# Native histograms (schema 3, protobuf): each kernel bucket's count sits in the native
# bucket of its midpoint, so Prometheus answers within one native bucket of the API's
# midpoint: 2^(1/8) - 1 = 9.05 %. Where the API reports the maximum instead (it lies in
# that kernel bucket, below the midpoint), up to 1.0625 * 2^(1/8) - 1 = 15.9 %.
NATIVE_BOUND, NATIVE_BOUND_AT_MAX = 2 ** (1 / 8) - 1, 1.0625 * 2 ** (1 / 8) - 1


def check_percentiles(d, pid, prom_port, native=False):
    def doc():
        return d.get("/v1/processes/%d" % pid)["histograms"]
    before = doc()
    compared = 0
    for name, h in sorted(before.items()):
        if h["count"] < 10:
            continue
        for q in (0.5, 0.9, 0.99):
            api = h["p%d" % round(q * 100)] * 1e-9
            if api < 1.024e-6:
                continue
            query = ('histogram_quantile(%g, llmprof_%s_seconds%s{pid="%d"})' %
                     (q, name, "" if native else "_bucket", pid))
            _, _, body = http_get("http://127.0.0.1:%d/api/v1/query?query=%s" %
                                  (prom_port, urllib.parse.quote(query)))
            res = json.loads(body)["data"]["result"]
            prom = float(res[0]["value"][1]) if res else float("nan")
            err = abs(prom - api) / api
            bound = (PERCENTILE_BOUND if not native else
                     NATIVE_BOUND_AT_MAX if api == h["max"] * 1e-9 else NATIVE_BOUND)
            t.check(err <= bound + 1e-9,
                    "%s%s p%g: Prometheus %.4g s, API %.4g s (%d values): %.1f %% apart, "
                    "within %.1f %%" % ("native " if native else "", name, q * 100, prom, api,
                                        h["count"], 100 * err, 100 * bound))
            compared += 1
    t.check(doc() == before, "the fixture held still: the histograms did not move meanwhile")
    t.check(compared >= 6, "%d percentiles compared" % compared)


# Panels that must find the fixture's series (it contends for a CPU and waits on futexes),
# whether Prometheus keeps classic buckets or native histograms.
DASHBOARD_FILLED = ("Run-queue latency p99", "Futex wait p99", "Preempted")


def promql(prom_port, expr):
    _, _, body = http_get("http://127.0.0.1:%d/api/v1/query?query=%s" %
                          (prom_port, urllib.parse.quote(expr)))
    return json.loads(body)


def panel_results(prom_port, panels, workload=".*"):
    """{title: (all queries valid, all queries found series)} of the dashboard's panels, with
    $workload as given (All is .*)."""
    out = {}
    for panel in panels:
        ok, found = True, True
        for target in panel["targets"]:
            expr = (target["expr"].replace("$instance", ".*").replace("$workload", workload)
                    .replace("$__rate_interval", "1m"))
            res = promql(prom_port, expr)
            ok &= res["status"] == "success"
            found &= ok and bool(res["data"]["result"])
        out[panel["title"]] = (ok, found)
    return out


def check_dashboard(prom_port, kind, workload):
    """The shipped dashboard is what scripts/gen-dashboard.py writes; its queries are valid
    PromQL; its $workload variable lists the fixture's workload; the histogram panels find
    the fixture with that workload chosen, and nothing with another."""
    root = os.path.join(os.path.dirname(__file__), "..", "..")
    p = subprocess.run([sys.executable, os.path.join(root, "scripts", "gen-dashboard.py"),
                        "--check"], capture_output=True, text=True)
    t.check(p.returncode == 0, "examples/grafana-dashboard.json is generated %s" % p.stderr)
    with open(os.path.join(root, "examples", "grafana-dashboard.json")) as f:
        dash = json.load(f)
    panels = dash["panels"]
    bad = [title for title, (ok, _) in panel_results(prom_port, panels).items() if not ok]
    t.check(not bad, "every dashboard query is valid PromQL (%s): %s"
            % (kind, bad or "all %d" % len(panels)))
    var = next(v for v in dash["templating"]["list"] if v["name"] == "workload")
    m = re.match(r"label_values\((.*), (\w+)\)$", var["query"])
    url = "http://127.0.0.1:%d/api/v1/label/%s/values?match[]=%s" % (
        prom_port, m.group(2), urllib.parse.quote(m.group(1).replace("$instance", ".*")))
    values = t.poll("the $workload variable to list %r (%s)" % (workload, kind),
                    lambda: (lambda v: v if workload in v else None)(
                        json.loads(http_get(url)[2])["data"]), timeout=30, interval=1)
    t.check(workload in values, "$workload lists %s (%s): %s" % (workload, kind, values))
    want = [p for p in panels if p["title"].startswith(DASHBOARD_FILLED)]
    chosen = re.escape(workload).replace("\\", "\\\\")
    t.poll("the histogram panels to find the fixture (%s)" % kind,
           lambda: all(found for _, found in panel_results(prom_port, want, chosen).values()),
           timeout=30, interval=1)
    t.check(len(want) == 3, "%s histograms: %s show the fixture's workload"
            % (kind, [p["title"] for p in want]))
    none = [title for title, (_, found) in panel_results(prom_port, want, "no-such").items()
            if found]
    t.check(not none, "with another workload chosen they find nothing (%s): %s" % (kind, none))


def start_prometheus(port, *flags):
    """A Prometheus on loopback scraping llmprofd's port every second: (proc, port, dir)."""
    prom_port = t.free_port()
    work = t.tmpdir("llmprof-prom-")
    conf = os.path.join(work, "prometheus.yml")
    with open(conf, "w") as f:
        f.write("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
                "scrape_configs:\n  - job_name: llmprofd\n    static_configs:\n"
                "      - targets: ['127.0.0.1:%d']\n" % port)
    prom = subprocess.Popen(["prometheus", "--config.file=" + conf, *flags,
                             "--storage.tsdb.path=" + os.path.join(work, "data"),
                             "--web.listen-address=127.0.0.1:%d" % prom_port],
                            stdout=subprocess.DEVNULL, stderr=open(os.path.join(work, "log"), "w"))
    t._children.append(prom)
    return prom, prom_port, work


def native_prometheus(d, pid, port):
    """A Prometheus with native histograms asks for protobuf; llmprofd answers with each
    histogram as one native series (schema 3) beside its classic buckets."""
    status, headers, body = http_get_accept(
        "http://127.0.0.1:%d/metrics" % port,
        "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;"
        "encoding=delimited;q=0.7,text/plain;version=0.0.4;q=0.3")
    t.check(status == 200 and headers["Content-Type"].startswith(
        "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; "
        "encoding=delimited") and b"llmprof_runqueue_latency_seconds" in body,
            "Accept: protobuf gets the delimited MetricFamily encoding (%d bytes)" % len(body))
    prom, prom_port, work = start_prometheus(port, "--enable-feature=native-histograms")
    query = 'llmprof_runqueue_latency_seconds{pid="%d"}' % pid
    url = "http://127.0.0.1:%d/api/v1/query?query=%s" % (prom_port, urllib.parse.quote(query))

    def native():
        try:
            res = json.loads(http_get(url, timeout=2)[2])["data"]["result"]
        except OSError:
            if prom.poll() is not None:
                raise AssertionError("prometheus exited: " + open(os.path.join(work, "log")).read())
            return None
        return res and "histogram" in res[0] and res[0]
    res = t.poll("Prometheus to scrape native histograms", native, timeout=60, interval=0.5)
    count = float(res["histogram"][1]["count"])
    t.check(count == d.get("/v1/processes/%d" % pid)["histograms"]["runqueue_latency"]["count"],
            "one native series for the histogram, counting all %d values" % count)
    _, _, body = http_get("http://127.0.0.1:%d/api/v1/query?query=%s" % (
        prom_port, urllib.parse.quote('count({__name__=~"llmprof_runqueue_latency_seconds.*",'
                                      'pid="%d"})' % pid)))
    series = json.loads(body)["data"]["result"]
    t.check(series and series[0]["value"][1] == "1",
            "no _bucket series beside it: %s" % series)
    _, _, body = http_get("http://127.0.0.1:%d/api/v1/targets" % prom_port)
    health = [x["health"] for x in json.loads(body)["data"]["activeTargets"]]
    t.check(health == ["up"], "the protobuf scrape is up: %s" % health)
    check_percentiles(d, pid, prom_port, native=True)
    check_dashboard(prom_port, "native", d.get("/v1/processes/%d" % pid)["workload"])
    prom.terminate()
    prom.wait(timeout=20)
    shutil.rmtree(work, ignore_errors=True)


def http_get_accept(url, accept):
    req = urllib.request.Request(url, headers={"Accept": accept})
    with urllib.request.urlopen(req, timeout=5) as r:
        return r.status, r.headers, r.read()


def main():
    for tool in ("promtool", "prometheus"):
        if not shutil.which(tool):
            raise AssertionError("%s is not installed (Debian package prometheus; "
                                 "scripts/install-deps.sh installs it)" % tool)
    port = t.free_port()
    fx = t.Fixture("--contend-ms", "300", "--futex-threads", "2", "--futex-waits", "10",
                   "--futex-ms", "1", "--hold")
    d = t.Daemon("--pid", str(fx.pid), "--metrics-address", "127.0.0.1:%d" % port)
    d.wait_ready()
    fx.go()
    res = fx.result()

    status, headers, text = http_get("http://127.0.0.1:%d/metrics" % port)
    one = d.get("/v1/processes/%d" % fx.pid)
    t.check(status == 200 and headers["Content-Type"].startswith("text/plain; version=0.0.4"),
            "TCP /metrics: 200, text format 0.0.4")
    p = subprocess.run(["promtool", "check", "metrics"], input=text, capture_output=True,
                       text=True)
    t.check(p.returncode == 0, "promtool check metrics passes: %s" % (p.stdout + p.stderr)[:500])
    types, samples = families(text)
    # The daemon's own process_* metrics, against /proc read before and after a second
    # scrape (a scrape's own allocations move its resident memory by tens of MiB).
    def statm():
        with open("/proc/%d/statm" % d.proc.pid) as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    rss0 = statm()
    _, _, text2 = http_get("http://127.0.0.1:%d/metrics" % port)
    rss1 = statm()
    own = {k: float(v) for k, v in re.findall(r"^(process_\w+) (\S+)$", text2, re.M)}
    cpu = t.proc_cpu_seconds(d.proc.pid)
    fds = len(os.listdir("/proc/%d/fd" % d.proc.pid))
    t.check(types.get("process_cpu_seconds_total") == "counter" and
            0 < own.get("process_cpu_seconds_total", 0) <= cpu and
            0.75 * min(rss0, rss1) <= own.get("process_resident_memory_bytes", 0)
            <= 1.25 * max(rss0, rss1) and
            abs(own.get("process_open_fds", 0) - fds) <= 4 and own.get("process_max_fds", 0) > 0
            and own.get("process_start_time_seconds", 0) > 1e9,
            "process_* of the daemon: %s; /proc: %.2f CPU s, %d-%d bytes resident, %d fds"
            % (own, cpu, rss0, rss1, fds))
    t.check(types.get("llmprof_runqueue_latency_seconds") == "histogram" and
            types.get("llmprof_oncpu_seconds_total") == "counter",
            "histograms and _total counters are typed")
    label = 'pid="%d",comm="lpfixture",exe="%s"' % (fx.pid, os.path.realpath(t.LPFIXTURE))
    inf = [s for s in samples if s.startswith("llmprof_futex_wait_seconds_bucket{" + label) and
           'le="+Inf"' in s]
    # The fixture's own words hold its 20 waits exactly; the histogram holds every wait of the
    # process, which may include the runtime's own (under ASan a CI rehearsal's read not 20).
    words = t.futex_waits_on(one, res["futex_addrs"])
    t.check(words == [10, 10], "the fixture's two words: %s waits, 10 made on each" % words)
    total = one["counters"]["futex_waits"]
    t.check(len(inf) == 1 and int(float(inf[0].split()[-1])) == total and total >= 20,
            "futex_wait +Inf bucket counts the process's %d waits (%s), labelled pid, comm, exe"
            % (total, inf))
    count = [s for s in samples if s.startswith("llmprof_futex_wait_seconds_count{" + label)]
    t.check(count and count[0].split()[-1] == inf[0].split()[-1], "_count equals +Inf bucket")
    status, _, api_text = d.api("GET", "/v1/status")
    t.check(status == 200, "the API is on the socket, not on TCP")
    try:
        http_get("http://127.0.0.1:%d/v1/status" % port)
        t.check(False, "TCP serves the API")
    except urllib.error.HTTPError as e:
        t.check(e.code == 404 and json.loads(e.read())["error"]["code"] == "not_found",
                "TCP refuses the API with a JSON 404")

    # A real Prometheus server scrapes it.
    prom, prom_port, work = start_prometheus(port)
    query = ('histogram_quantile(0.99, sum by (le) '
             '(llmprof_runqueue_latency_seconds_bucket{pid="%d"}))' % fx.pid)
    url = "http://127.0.0.1:%d/api/v1/query?query=%s" % (prom_port, urllib.parse.quote(query))

    def answer():
        try:
            _, _, body = http_get(url, timeout=2)
        except OSError:
            if prom.poll() is not None:
                raise AssertionError("prometheus exited: " + open(os.path.join(work, "log")).read())
            return None
        res = json.loads(body)["data"]["result"]
        return res[0]["value"][1] if res else None

    value = t.poll("Prometheus to scrape llmprofd and answer the query", answer, timeout=60,
                   interval=0.5)
    t.check(float(value) > 0, "PromQL %s = %s s" % (query, value))
    _, _, body = http_get("http://127.0.0.1:%d/api/v1/targets" % prom_port)
    health = [x["health"] for x in json.loads(body)["data"]["activeTargets"]]
    t.check(health == ["up"], "the scrape target is up: %s" % health)
    check_percentiles(d, fx.pid, prom_port)
    native_prometheus(d, fx.pid, port)
    check_dashboard(prom_port, "classic", one["workload"])
    p = subprocess.run(["promtool", "check", "config", os.path.join(
        os.path.dirname(__file__), "..", "..", "examples", "prometheus.yml")],
        capture_output=True, text=True)
    t.check(p.returncode == 0, "examples/prometheus.yml passes promtool check config")
    prom.terminate()
    prom.wait(timeout=20)
    shutil.rmtree(work, ignore_errors=True)

    fx.release()
    t.check(d.stop() == 0, "daemon exits cleanly")

    print("--- cardinality: the exported-process cap; exited processes leave /metrics")
    fxs = [t.Fixture("--futex-threads", "0", "--hold") for _ in range(3)]
    linger = 3
    d = t.Daemon(*sum([["--pid", str(f.pid)] for f in fxs], []),
                 "--metrics-address", "127.0.0.1:%d" % port, "--metrics-max-processes", "2",
                 "--metrics-exited-seconds", str(linger))
    d.wait_ready()
    _, _, text = http_get("http://127.0.0.1:%d/metrics" % port)
    shown = [f.pid for f in fxs if ('pid="%d"' % f.pid) in text]
    t.check(len(shown) == 2 and "llmprofd_processes_omitted 1" in text,
            "3 processes, cap 2: 2 exported and 1 counted as omitted")
    for f in fxs:
        f.go()
        f.result()
        f.release()
    t.poll("the three to show as exited",
           lambda: d.get("/v1/processes?state=exited")["processes"].__len__() == 3, timeout=10)
    text = http_get("http://127.0.0.1:%d/metrics" % port)[2]
    ago = max(p["exited_seconds_ago"] for p in d.get("/v1/processes")["processes"])
    t.check(ago >= linger or
            sum('llmprof_process_running{pid="%d"' % f.pid in line and line.endswith(" 0")
                for f in fxs for line in text.splitlines()) == 2,
            "just after their exit, the exited processes' last values are scraped "
            "(llmprof_process_running 0): %.1f s after the exit" % ago)
    def gone():
        text = http_get("http://127.0.0.1:%d/metrics" % port)[2]
        return text if 'pid="' not in text else None
    text = t.poll("exited processes' series to leave /metrics after %d s" % linger, gone,
                  timeout=30)
    docs = d.get("/v1/processes")["processes"]
    t.check(len(docs) == 3 and min(p["exited_seconds_ago"] for p in docs) >= linger and
            'llmprofd_processes{state="exited"} 3' in text and
            "llmprofd_processes_omitted 0" in text,
            "they leave /metrics %d s after their exit (the API keeps them for the retention, "
            "and counts them: exited 3, none omitted): %s s ago"
            % (linger, [round(p["exited_seconds_ago"], 1) for p in docs]))
    t.check(d.get("/v1/status")["config"]["metrics-exited-seconds"] == linger,
            "the setting is in the status")
    d.stop()

    print("--- cardinality: series per process, exact and coarse buckets")
    ds = {m: t.Daemon("--comm", "lpggml", "--no-discover", "--metrics-address", "off",
                      "--metrics-buckets", m, "--precise-ops", "mul_mat", "--precise-duty", "1")
          for m in ("exact", "coarse")}
    for d in ds.values():
        d.wait_ready()
    g = t.Lpggml("--hold", "--threads", "2", "--iters", "200", "--gen", "20")
    for d in ds.values():
        d.wait_log("pid %d (lpggml) runs ggml" % g.pid)
        d.wait_log("pid %d: precise probes on " % g.pid)
    g.go()
    g.line()
    series, hists = {}, {}
    for m, d in ds.items():
        text = d.api("GET", "/metrics")[1]
        mine = [line for line in text.splitlines()
                if ('pid="%d"' % g.pid) in line and not line.startswith("#")]
        series[m] = len(mine)
        hists[m] = {}
        for line in mine:
            name = line.split("{", 1)[0]
            if name.endswith("_bucket"):
                le = re.search(r'le="([^"]+)"', line).group(1)
                hists[m].setdefault(name, {})[le] = float(line.split()[-1])
    coarse = hists["coarse"]
    # Its requests (lpggml decodes through llama_decode) at the GenAI conventions' bounds,
    # whatever --metrics-buckets says: 16, 13 and 14 bounds and +Inf.
    genai = {"gen_ai_server_time_to_first_token_seconds_bucket": 17,
             "gen_ai_server_time_per_output_token_seconds_bucket": 14,
             "gen_ai_server_request_duration_seconds_bucket": 15}
    ours = {k: v for k, v in coarse.items() if k not in genai}
    t.check(len(ours) == 8 and all(len(b) == 28 for b in ours.values()) and
            all(len(coarse.get(k, {})) == n for k, n in genai.items()),
            "coarse: all 8 histograms, 28 buckets each (27 powers of two and +Inf), the "
            "requests' 3 at their bounds: %s" % {k: len(v) for k, v in coarse.items()})
    t.check(series["coarse"] <= 360 and series["coarse"] < series["exact"] <= 1810,
            "series per process, held to docs/API.md's budget: coarse %d (at most 360), exact "
            "%d (at most 1,810)" % (series["coarse"], series["exact"]))
    # At each of its bounds a coarse bucket holds exactly what the daemon's own histogram
    # holds below it (the API's buckets, the kernel's). Held against the same daemon's: the
    # other daemon times each call a few microseconds apart (its probes run beside these),
    # and the 20 decodes of one length can all sit that near a bound.
    api = ds["coarse"].get("/v1/processes/%d" % g.pid)["histograms"]["decode_generation"]
    below = {le: sum(c for _, upper, c in api["buckets"]
                     if le == "+Inf" or (upper is not None and upper <= float(le) * 1e9 + 0.5))
             for le in coarse.get("llmprof_decode_generation_seconds_bucket", {})}
    got = coarse.get("llmprof_decode_generation_seconds_bucket", {})
    t.check(got and api["count"] == 20 and all(below[le] == n for le, n in got.items()),
            "coarse keeps the exact counts at its bounds (decode, all 20 tokens): %s"
            % [(le, n, below[le]) for le, n in got.items() if below[le] != n])
    g.proc.stdin.close()
    g.proc.wait(timeout=20)
    for d in ds.values():
        d.stop()

    print("--- by workload: a restarted process keeps its series")
    d = t.Daemon("--comm", "lpfixture", "--metrics-address", "127.0.0.1:%d" % port,
                 "--metrics-labels", "workload", "--retention", "1")
    d.wait_ready()
    sets, counts = [], []
    for run in range(2):
        f = t.Fixture("--futex-threads", "1", "--futex-waits", "5", "--futex-ms", "1", "--hold")
        t.poll("run %d to be tracked" % run,
               lambda: any(p["pid"] == f.pid for p in d.get("/v1/processes")["processes"]),
               timeout=10)
        f.go()
        f.result()
        text = http_get("http://127.0.0.1:%d/metrics" % port)[2]
        sets.append(sorted({line.split("{", 1)[1].split("}")[0] for line in text.splitlines()
                            if line.startswith("llmprof_futex_wait_seconds_count{")}))
        counts.append([line.split()[-1] for line in text.splitlines()
                       if line.startswith("llmprof_workload_processes{")])
        f.release()
        t.poll("run %d's exit to pass the 1 s retention" % run,
               lambda: not d.get("/v1/processes")["processes"], timeout=10)
    t.check(sets[0] == sets[1] == ['workload="lpfixture",model=""'] and
            'pid="' not in text and counts == [["1"], ["1"]],
            "both runs are one series without pid: %s, processes %s" % (sets, counts))
    # The dashboard by workload: a Prometheus scrapes before and after the fixture works.
    f = t.Fixture("--contend-ms", "300", "--futex-threads", "2", "--futex-waits", "10",
                  "--futex-ms", "1", "--hold")
    t.poll("the fixture to be tracked",
           lambda: any(p["pid"] == f.pid for p in d.get("/v1/processes")["processes"]),
           timeout=10)
    prom, prom_port, work = start_prometheus(port)
    def scraped():
        try:
            return promql(prom_port, "llmprof_workload_processes")["data"]["result"]
        except OSError:  # not listening yet
            return None
    t.poll("Prometheus to scrape llmprofd", scraped, timeout=60, interval=0.5)
    f.go()
    f.result()
    check_dashboard(prom_port, "workload", d.get("/v1/processes/%d" % f.pid)["workload"])
    prom.terminate()
    prom.wait(timeout=20)
    shutil.rmtree(work, ignore_errors=True)
    f.release()
    d.stop()


def tcp_pids(port, user, pids):
    """The fixture pids /metrics shows over TCP to a curl run as user."""
    p = subprocess.run(user + ["curl", "-sS", "--max-time", "10",
                               "http://127.0.0.1:%d/metrics" % port],
                       capture_output=True, text=True, timeout=20)
    return sorted(x for x in pids if 'pid="%d"' % x in p.stdout), p.stdout


def test_tcp_access():
    print("--- TCP /metrics follows the socket's rule for local users")
    nobody = 65534
    mine = t.Fixture("--futex-threads", "0", "--hold")
    theirs = subprocess.Popen(t.as_user(nobody) + [t.LPFIXTURE, "--wait-go", "--futex-threads",
                                                   "0", "--hold"],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    t._children.append(theirs)
    pids = [mine.pid, theirs.pid]
    # A user in the group by the user database, as `usermod -aG llmprof prometheus` makes.
    group, user = "llmproftcp", "llmproftcp"
    subprocess.run(["groupadd", "--system", group], capture_output=True)
    subprocess.run(["useradd", "--system", "--no-create-home", "-N", "-G", group, user],
                   capture_output=True)
    try:
        uid = int(subprocess.run(["id", "-u", user], capture_output=True, text=True,
                                 check=True).stdout)
        port = t.free_port()
        d = t.Daemon("--pid", str(mine.pid), "--pid", str(theirs.pid), "--socket-group", group,
                     "--metrics-address", "127.0.0.1:%d" % port)
        d.wait_ready()
        t.check(tcp_pids(port, [], pids)[0] == sorted(pids), "root sees every process")
        seen, text = tcp_pids(port, t.as_user(nobody), pids)
        t.check(seen == [theirs.pid], "uid %d sees its own process only: %s" % (nobody, seen))
        t.check("llmprofd_map_entries{" not in text, "and no map fill")
        seen, _ = tcp_pids(port, ["setpriv", "--reuid=%d" % uid, "--regid=%d" % uid,
                                  "--init-groups"], pids)
        t.check(seen == sorted(pids), "a member of the group sees every process: %s" % seen)
        seen, _ = tcp_pids(port, t.as_user(nobody - 1), pids)
        t.check(seen == [], "another uid sees none: %s" % seen)
        d.stop()
    finally:
        subprocess.run(["userdel", user], capture_output=True)
        subprocess.run(["groupdel", group], capture_output=True)
    mine.release()
    theirs.kill()
    theirs.wait()


def curl_tcp(url, *args, netns=None):
    """(status, headers text, body) of one request over TCP with curl."""
    cmd = ["curl", "-sS", "--max-time", "10", "-D", "-"] + list(args) + [url]
    if netns:
        cmd = ["ip", "netns", "exec", netns] + cmd
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
    head, _, body = p.stdout.partition("\n\n")  # text mode turned CRLF into LF
    status = int(head.split()[1]) if head.startswith("HTTP/") else 0
    return status, head, body


class Netns:
    """A test host of our own: a network namespace joined to this one by a veth pair
    (198.18.0.1 here, 198.18.0.2 there), so that a peer is not on loopback."""

    def __init__(self):
        self.name = "lpt%d" % os.getpid()
        self.host, self.peer = "198.18.0.1", "198.18.0.2"
        steps = [["ip", "netns", "add", self.name],
                 ["ip", "link", "add", self.name + "a", "type", "veth", "peer", "name",
                  self.name + "b", "netns", self.name],
                 ["ip", "addr", "add", self.host + "/30", "dev", self.name + "a"],
                 ["ip", "link", "set", self.name + "a", "up"],
                 ["ip", "-n", self.name, "addr", "add", self.peer + "/30", "dev",
                  self.name + "b"],
                 ["ip", "-n", self.name, "link", "set", self.name + "b", "up"],
                 ["ip", "-n", self.name, "link", "set", "lo", "up"]]
        for s in steps:
            subprocess.run(s, check=True, capture_output=True)

    def close(self):
        subprocess.run(["ip", "link", "del", self.name + "a"], capture_output=True)
        subprocess.run(["ip", "netns", "del", self.name], capture_output=True)


def test_web_config():
    print("--- --web.config.file: TLS and basic auth for scrapes from other hosts")
    work = t.tmpdir("llmprof-web-")
    cert, key = os.path.join(work, "cert.pem"), os.path.join(work, "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key,
                    "-out", cert, "-days", "2", "-subj", "/CN=localhost", "-addext",
                    "subjectAltName=DNS:localhost,IP:127.0.0.1"], check=True,
                   capture_output=True)
    web = os.path.join(work, "web.yml")
    with open(web, "w") as f:
        f.write("tls_server_config:\n  cert_file: cert.pem\n  key_file: key.pem\n"
                "basic_auth_users:\n  prom: %s\nhttp_server_config:\n  headers:\n"
                "    X-Content-Type-Options: nosniff\n" % t.bcrypt("sekrit"))
    p = subprocess.run(["promtool", "check", "web-config", web], capture_output=True, text=True)
    t.check(p.returncode == 0, "promtool accepts the same file: %s" % (p.stdout + p.stderr))
    p = subprocess.run([t.LLMPROFD, "--check", "--config", "/dev/null", "--web.config.file",
                        web], capture_output=True, text=True, timeout=60)
    t.check(p.returncode == 0 and "web configuration %s is usable" % web in p.stderr,
            "--check loads it")
    # The shipped example, with this test's certificate: both tools accept it.
    with open(os.path.join(os.path.dirname(__file__), "..", "..", "examples",
                           "web-config.yml")) as f:
        example = f.read().replace("/etc/llmprofd/tls/server.crt", cert).replace(
            "/etc/llmprofd/tls/server.key", key)
    ex = os.path.join(work, "example.yml")
    with open(ex, "w") as f:
        f.write(example)
    p1 = subprocess.run(["promtool", "check", "web-config", ex], capture_output=True, text=True)
    p2 = subprocess.run([t.LLMPROFD, "--check", "--config", "/dev/null", "--web-config-file",
                         ex], capture_output=True, text=True, timeout=60)
    t.check(p1.returncode == 0 and p2.returncode == 0,
            "examples/web-config.yml passes promtool and llmprofd --check: %s" %
            (p1.stdout + p1.stderr + p2.stderr[-200:] if p1.returncode or p2.returncode
             else "ok"))
    bad = os.path.join(work, "bad.yml")
    with open(bad, "w") as f:
        f.write("basic_auth_users:\n  prom: sekrit\n")
    p = subprocess.run([t.LLMPROFD, "--check", "--config", "/dev/null", "--web-config-file",
                        bad], capture_output=True, text=True, timeout=60)
    t.check(p.returncode == 1 and "bad.yml:2: a password is not a bcrypt hash" in p.stderr,
            "--check refuses a plain password, naming the line: %s" % p.stderr.strip()[-120:])

    fx = t.Fixture("--futex-threads", "0", "--hold")
    port = t.free_port()
    d = t.Daemon("--pid", str(fx.pid), "--metrics-address", "127.0.0.1:%d" % port,
                 "--web.config.file", web)
    d.wait_ready()
    url = "https://127.0.0.1:%d/metrics" % port
    status, head, _ = curl_tcp(url, "--cacert", cert)
    t.check(status == 401 and 'www-authenticate: basic realm="llmprofd"' in head.lower(),
            "no credentials: 401 with a Basic challenge")
    status, _, _ = curl_tcp(url, "--cacert", cert, "-u", "prom:wrong")
    t.check(status == 401, "a wrong password: 401")
    status, head, body = curl_tcp(url, "--cacert", cert, "-u", "prom:sekrit")
    t.check(status == 200 and 'pid="%d"' % fx.pid in body and
            "x-content-type-options: nosniff" in head.lower(),
            "the right password over TLS: 200, every process, the configured header")
    status, _, _ = curl_tcp("http://127.0.0.1:%d/metrics" % port)
    t.check(status != 200, "plain HTTP gets nothing from the TLS listener")

    # A real Prometheus scrapes it over TLS with basic auth.
    prom_port = t.free_port()
    conf = os.path.join(work, "prometheus.yml")
    with open(conf, "w") as f:
        f.write("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
                "scrape_configs:\n  - job_name: llmprofd\n    scheme: https\n"
                "    tls_config:\n      ca_file: %s\n    basic_auth:\n      username: prom\n"
                "      password: sekrit\n    static_configs:\n"
                "      - targets: ['127.0.0.1:%d']\n" % (cert, port))
    prom = subprocess.Popen(["prometheus", "--config.file=" + conf,
                             "--storage.tsdb.path=" + os.path.join(work, "data"),
                             "--web.listen-address=127.0.0.1:%d" % prom_port],
                            stdout=subprocess.DEVNULL,
                            stderr=open(os.path.join(work, "log"), "w"))
    t._children.append(prom)
    q = "http://127.0.0.1:%d/api/v1/query?query=%s" % (
        prom_port, urllib.parse.quote('llmprof_process_running{pid="%d"}' % fx.pid))

    def scraped():
        try:
            res = json.loads(http_get(q, timeout=2)[2])["data"]["result"]
        except OSError:
            return None
        return res and res[0]["value"][1]
    t.check(t.poll("Prometheus to scrape over TLS with basic auth", scraped, timeout=60,
                   interval=0.5) == "1", "Prometheus scraped the fixture's series")
    prom.terminate()
    prom.wait(timeout=20)

    # SIGHUP reads the file again: a new password applies at once.
    with open(web, "w") as f:
        f.write("tls_server_config:\n  cert_file: cert.pem\n  key_file: key.pem\n"
                "basic_auth_users:\n  prom: %s\n" % t.bcrypt("changed"))
    os.kill(d.proc.pid, 1)
    d.wait_log("reloaded the configuration")
    t.check(curl_tcp(url, "--cacert", cert, "-u", "prom:sekrit")[0] == 401 and
            curl_tcp(url, "--cacert", cert, "-u", "prom:changed")[0] == 200,
            "after a reload the old password is refused and the new one works")
    d.stop()

    print("--- a peer on another host: refused without credentials")
    ns = Netns()
    try:
        port = t.free_port()
        d = t.Daemon("--pid", str(fx.pid), "--metrics-address", "%s:%d" % (ns.host, port))
        d.wait_ready()
        status, _, body = curl_tcp("http://%s:%d/metrics" % (ns.host, port), netns=ns.name)
        t.check(status == 403 and "web-config-file" in body,
                "no web configuration: 403 naming the way to allow it (%d)" % status)
        d.stop()
        plain = os.path.join(work, "auth.yml")
        with open(plain, "w") as f:
            f.write("basic_auth_users:\n  prom: %s\n" % t.bcrypt("sekrit"))
        d = t.Daemon("--pid", str(fx.pid), "--metrics-address", "%s:%d" % (ns.host, port),
                     "--web-config-file", plain)
        d.wait_ready()
        status, _, body = curl_tcp("http://%s:%d/metrics" % (ns.host, port), "-u",
                                   "prom:sekrit", netns=ns.name)
        t.check(status == 200 and 'pid="%d"' % fx.pid in body,
                "with basic auth: 200 and every process")
        d.stop()
    finally:
        ns.close()
    fx.release()


def all_tests():
    main()
    test_tcp_access()
    test_web_config()


t.run(all_tests, timeout=240)
