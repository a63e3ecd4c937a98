#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
"""examples/grafana-dashboard.json, written from the panel table below.

Every query works whichever way llmprofd labels its series (--metrics-labels pid or
workload) and whichever way Prometheus scrapes histograms (classic buckets or native):
each is the `or` of its forms, and a form finds nothing where its labels are not there.
The $workload variable reads the `workload` label from llmprof_process_info (by pid) or
llmprof_workload_processes (by workload); by pid a series is selected through its
process's info series. tests/e2e/test_prometheus.py runs every query against a real
Prometheus in both label modes and both histogram formats.

    scripts/gen-dashboard.py          write the file
    scripts/gen-dashboard.py --check  exit 1 when the file is not what this writes"""
import json
import os
import sys

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "examples",
                   "grafana-dashboard.json")
RATE = "[$__rate_interval]"
INST = 'instance=~"$instance"'
# By pid: the processes of the chosen workloads (llmprof_process_info carries workload).
OF_WORKLOAD = ('and on(instance, pid) llmprof_process_info{%s,workload=~"$workload"}' % INST)
# By workload: only series that carry a workload label (".*" would match the pid series).
WL = 'workload=~"$workload",workload!=""'
BY_PID = "instance, comm, pid"
BY_WL = "instance, workload, model"
LEGEND = "{{instance}} {{comm}} {{pid}}{{workload}} {{model}}"
# Each label mode: what its series are summed by, its matchers, and what selects them after.
MODES = ((BY_PID, INST, " " + OF_WORKLOAD), (BY_WL, INST + "," + WL, ""))


def sel(*matchers):
    return "{" + ",".join(m for m in matchers if m) + "}"


def rate_sum(metric, match="", by=""):
    """sum of a counter's rate per process, or per workload and model."""
    extra = ", " + by if by else ""
    return tuple("sum by (%s%s) (rate(%s%s%s)%s)" % (mby, extra, metric, sel(match, mmatch), RATE,
                                                       of) for mby, mmatch, of in MODES)


def either(pair):
    return "(%s) or (%s)" % pair


def ratio(num, den, on=""):
    """num / den in each label mode (den summed without on's label, matched group_left)."""
    if on:
        return ["(%s / ignoring(%s) group_left %s)" % (n, on, d) for n, d in zip(num, den)]
    return ["(%s / %s)" % (n, d) for n, d in zip(num, den)]


def quantile(metric, q=0.99):
    """histogram_quantile over classic buckets or native histograms, in either label mode."""
    forms = []
    for by, match, of in MODES:
        forms.append("histogram_quantile(%g, sum by (%s, le) (rate(%s_bucket{%s}%s)%s))"
                     % (q, by, metric, match, RATE, of))
        forms.append("histogram_quantile(%g, sum by (%s) (rate(%s{%s}%s)%s))"
                     % (q, by, metric, match, RATE, of))
    return " or ".join(forms)


def seconds_sum(metric):
    """Seconds per second in a histogram: its classic _sum's rate or the native one's."""
    forms = []
    for by, match, of in MODES:
        forms.append("sum by (%s) (rate(%s_sum{%s}%s)%s)" % (by, metric, match, RATE, of))
        forms.append("sum by (%s) (histogram_sum(rate(%s{%s}%s))%s)"
                     % (by, metric, match, RATE, of))
    return " or ".join(forms)


def processes_by_model():
    pid = ("count by (instance, model, workload) (llmprof_process_info{%s,workload=~"
           '"$workload"} and on(instance, pid) (llmprof_process_running == 1))' % INST)
    wl = "sum by (instance, model, workload) (llmprof_workload_processes%s)" % sel(INST, WL)
    return "(%s) or (%s)" % (pid, wl)


def target(expr, legend=LEGEND, ref="A"):
    return {"refId": ref, "expr": expr, "legendFormat": legend}


samples = rate_sum("llmprof_cpu_samples_total", by="region")
samples_all = rate_sum("llmprof_cpu_samples_total")
tokens = rate_sum("llmprof_decode_tokens_total", 'phase="generation"')
in_decode = rate_sum("llmprof_decode_seconds_total", 'phase="generation"')

# (title, unit, targets)
PANELS = [
    ("Wall tokens/s (generated tokens per second of elapsed time)", "none",
     [target(either(tokens))]),
    ("Generation latency p99 (seconds per token)", "s",
     [target(quantile("llmprof_decode_generation_seconds"))]),
    ("Prompt tokens/s (wall)", "none",
     [target(either(rate_sum("llmprof_decode_tokens_total", 'phase="prompt"')))]),
    ("CPU cores used", "none", [target(either(rate_sum("llmprof_oncpu_seconds_total")))]),
    ("Share of CPU in matmul / barrier (sampled)", "percentunit",
     [target(" or ".join(ratio(samples, samples_all, on="region")), LEGEND + " {{region}}")]),
    ("Run-queue latency p99", "s", [target(quantile("llmprof_runqueue_latency_seconds"))]),
    ("Involuntary context switches/s", "none",
     [target(either(rate_sum("llmprof_context_switches_total", 'kind="involuntary"')))]),
    ("Futex wait p99", "s", [target(quantile("llmprof_futex_wait_seconds"))]),
    ("Major page faults/s", "none",
     [target(either(rate_sum("llmprof_page_faults_total", 'kind="major"')))]),
    ("llmprofd: data lost/s and omitted processes", "none",
     [target("sum by (instance, reason) (rate(llmprofd_lost_total{%s}%s)) or "
             "llmprofd_processes_omitted{%s}" % (INST, RATE, INST), "{{instance}} {{reason}}")]),
    ("CPU cores by op group (sampled)", "percentunit",
     [target(either(rate_sum("llmprof_op_group_cpu_seconds_total", by="group")),
             LEGEND + " {{group}}")]),
    ("CPU cores by operator (sampled, 10 leading ops per process)", "percentunit",
     [target(either(rate_sum("llmprof_op_cpu_seconds_total", by="op")), LEGEND + " {{op}}")]),
    ("Decode tokens/s (generated tokens per second inside llama_decode)", "none",
     [target(" or ".join(ratio(tokens, in_decode)))]),
    ("Preempted: threads waiting for a CPU (seconds per second)", "none",
     [target(seconds_sum("llmprof_runqueue_latency_seconds"), "run queue " + LEGEND),
      target(seconds_sum("llmprof_offcpu_preempted_seconds"), "off-CPU preempted " + LEGEND,
             "B")]),
    ("Barrier off-CPU time (seconds per second, always on)", "none",
     [target(either(rate_sum("llmprof_barrier_offcpu_estimate_seconds_total")))]),
    ("Processes by model", "none",
     [target(processes_by_model(), "{{model}} ({{workload}}) {{instance}}")]),
    ("Findings: running processes each rule fires for (llmprofctl doctor says why)", "none",
     [target("sum by (instance, rule) (llmprofd_finding{%s}) > 0" % INST,
             "{{instance}} {{rule}}")]),
]


def variable(name, label, query):
    return {"name": name, "type": "query", "label": label,
            "datasource": {"type": "prometheus", "uid": "${datasource}"},
            "query": query, "refresh": 2, "multi": True, "includeAll": True,
            "current": {"text": "All", "value": "$__all"}}


def dashboard():
    panels = []
    for i, (title, unit, targets) in enumerate(PANELS):
        panels.append({"id": i + 1, "type": "timeseries", "title": title,
                       "gridPos": {"x": 12 * (i % 2), "y": 8 * (i // 2), "w": 12, "h": 8},
                       "datasource": {"type": "prometheus", "uid": "${datasource}"},
                       "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
                       "targets": targets})
    return {
        "title": "llmprofd: LLM inference on CPU (fleet)", "uid": "llmprofd-fleet",
        "schemaVersion": 38, "version": 2, "editable": True,
        "time": {"from": "now-1h", "to": "now"}, "refresh": "30s",
        "tags": ["llmprofd", "llama.cpp", "ebpf"],
        "templating": {"list": [
            {"name": "datasource", "type": "datasource", "query": "prometheus",
             "label": "Prometheus"},
            variable("instance", "Host", "label_values(llmprofd_build_info, instance)"),
            variable("workload", "Workload",
                     'label_values({__name__=~"llmprof_process_info|llmprof_workload_processes"'
                     ',instance=~"$instance"}, workload)')]},
        "panels": panels,
    }


def main():
    text = json.dumps(dashboard(), indent=1) + "\n"
    if sys.argv[1:] == ["--check"]:
        with open(OUT) as f:
            if f.read() != text:
                print("%s is not what scripts/gen-dashboard.py writes: run it" % OUT,
                      file=sys.stderr)
                return 1
        return 0
    with open(OUT, "w") as f:
        f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
