#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
"""e2e tier: what each op did, read from the tensors its function gets (issue 32), on
real llama.cpp built from source with its defaults (OpenMP, static llama-simple;
tests/workload/build-llama.sh), decoding a random-weight model in precise mode.

The first reference is llama.cpp's own llama-eval-callback, from the same build: it prints
every node of the graph it computes, its name, op and the shapes of the node and its first
two sources. Its graph for a prompt of one token is a generated token's graph: with the
same KV cache size (-c 256, as llama-simple sizes it for 240 tokens), the generation nodes
we read must be exactly its nodes of the ops read, op, name, layer and shapes, each as many
times per generated token as it has it.

The second is the model file itself (tests/lib/ggufref.py reads its header apart from
the daemon): every layer's matrix multiplications must take exactly that layer's weights,
with their shapes and types; the bytes a multiplication reads must be its weight's size in
the file plus its input's; per generated token there must be one multiplication per weight
of the model and layer; and llmprofctl ops must show the same by op, shape, layer and
block.

On the first, bpftrace times every call of ggml_compute_forward_mul_mat by its
destination's name: each generation multiplication node's share of their time, and each
layer's, must be its.

A record of a second of each OpenMP run (Perfetto's format for Q8_0, JSON for Q4_0) is held
to the same references: on the main thread, the op spans inside each generation decode must
be llama-eval-callback's nodes, each as many times (every thread calls an op's function once
per node), named by their args; a multiplication span's bytes its weight's size in the file
plus its input's and output's, its FLOPs 2 K N T; only the spans the window cut may lack
their node.

Weights of a type ggml repacks (Q4_0 on x86 with AVX2) go to an extra buffer type whose
own compute_forward, a C++ member function, multiplies them (mul_mat_repack; AMX, where
node-llama-cpp's build uses it): its tensors are read too, held to the same file.

A mixture of experts (8, 2 used; Q4_0, so the repack buffer computes MUL_MAT_ID): its nodes
against llama-eval-callback's, and each expert multiplication's bytes against the file: of
one token, the 2 experts its ids name, not all 8.

Then ik_llama.cpp (the engine of seeds/000; its tensors have a grad and 16 sources, so
another layout), whose fused FFN multiplication (mul_mat_up_gate) takes two weights: they
must be the layer's ffn_up and ffn_gate, and its bytes both of them plus the input."""
import json
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
import ggufref  # noqa: E402
import lptest as t  # noqa: E402
import tracefmt  # noqa: E402

WORKLOAD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "workload")
# Reading begins at the first tick after each op's first calls were checked (a second)
TOKENS = 300
# ggml's extra buffer types compute MUL_MAT themselves (ops.c names them mul_mat_<type>)
EXTRA_MATMULS = ("mul_mat_amx", "mul_mat_repack", "mul_mat_kleidiai")
OPS = ("mul_mat,rms_norm,mul,add,rope,soft_max,cpy,get_rows,glu,flash_attn_ext,set_rows,cont,"
       + ",".join(EXTRA_MATMULS))
TYPE_NAMES = {0: "f32", 1: "f16", 2: "q4_0", 8: "q8_0"}
EPS = tracefmt.EPS
MATMULS = ("mul_mat",) + EXTRA_MATMULS
# A layer's matrix multiplications, by the weights llama.cpp's graph multiplies
MATMUL_WEIGHTS = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up",
                  "ffn_down")


def main():
    work = t.tmpdir("llmprofd-graph-")
    model = os.path.join(work, "medium.gguf")
    subprocess.run([sys.executable, os.path.join(WORKLOAD, "gen_gguf.py"), "--shape", "medium",
                    model], check=True, timeout=120)
    kv, weights = ggufref.read(model)
    layers = next(v for k, v in kv.items() if k.endswith(".block_count"))
    # 240 tokens: llama-simple's context (prompt and tokens) stays in one 256-cell KV cache.
    g, trace = upstream("the OpenMP build (gcc)",
                        [t.llama_simple(), "-m", model, "-n", "240", "Once upon a time"],
                        "llama-simple", weights, layers,
                        record=os.path.join(work, "gcc.perfetto-trace"), bpftrace=True)
    ref = eval_callback_graph(model, g)
    against_eval_callback(g, ref)
    against_spans("the OpenMP build (gcc)", trace, g, ref, weights)
    q4 = os.path.join(work, "medium-q4_0.gguf")
    subprocess.run([sys.executable, os.path.join(WORKLOAD, "gen_gguf.py"), "--shape", "medium",
                    "--type", "q4_0", q4], check=True, timeout=120)
    q4_weights = ggufref.read(q4)[1]
    g, trace = upstream("the OpenMP build (gcc), Q4_0 weights",
                        [t.llama_simple(), "-m", q4, "-n", "240", "Once upon a time"],
                        "llama-simple", q4_weights, layers, repacked=True,
                        record=os.path.join(work, "q4_0.json"))
    ref = eval_callback_graph(q4, g)
    against_eval_callback(g, ref)
    against_spans("the OpenMP build (gcc), Q4_0 weights", trace, g, ref, q4_weights)
    # The clang build's and node-llama-cpp's tensors are read by the daemon's code the gcc
    # runs above ran (what differs is the engines' code, the kernel reads); they took 117 s
    # of a sanitized CI run: once, in the plain build.
    if not t.SANITIZED:
        other_builds(model, weights, layers)
    ik(model, weights, layers, work)
    moe(work)


def other_builds(model, weights, layers):
    """The clang build of llama-simple and node-llama-cpp, against the model file."""
    # clang may pass a static function's arguments as it likes (argument promotion, dead
    # arguments): what is read there must fit all the same.
    upstream("the OpenMP build (clang)",
             [t.build_llama("--cc", "clang"), "-m", model, "-n", str(TOKENS),
              "Once upon a time"], "llama-simple", weights, layers)
    # node-llama-cpp: a prebuilt libggml-cpu, loaded late, ggml's own threadpool.
    # It decodes until the daemon has read 60 whole tokens of it, however fast the host
    # (an ASan daemon beside the busy host once read 27 of a fixed 300), then ends at a
    # token's end.
    upstream("node-llama-cpp", ["node", os.path.join(WORKLOAD, "driver.mjs"), "--model", model,
                                "--tokens", str(TOKENS), "--threads", "2", "--prompt", "16",
                                "--until-line"],
             "node", weights, layers, until_read=60)


# bpftrace's own timing of ggml_compute_forward_mul_mat, entry to return, with its
# destination's name and rows (upstream's ggml_tensor: ne at 16, name at 256, as the log
# checked below says the daemon found): a line per call, "mm PID NAME ROWS NS ENTRY", ENTRY
# on CLOCK_MONOTONIC (bpftrace's nsecs; %d would print its low 32 bits), the daemon's clock.
BT_MATMUL = ('uprobe:%(bin)s:ggml_compute_forward_mul_mat { @s[tid] = nsecs; '
             '@n[tid] = str(arg1 + 256); @r[tid] = *(int64 *)(arg1 + 24); } '
             'uretprobe:%(bin)s:ggml_compute_forward_mul_mat /@s[tid]/ { '
             'printf("mm %%d %%s %%d %%d %%lu\\n", pid, @n[tid], @r[tid], nsecs - @s[tid], '
             '@s[tid]); delete(@s[tid]); }')


def upstream(name, argv, comm, weights, layers, repacked=False, record=None, bpftrace=False,
             until_read=None):
    """One run of an upstream build, checked against the model file; repacked: the weights
    are of a type the CPU backend repacks where the CPU has AVX2, so (where it has) their
    multiplications must be the repack buffer's. With record (a file), a timeline with op
    spans is recorded for a second once the tensors are read: returns the graph and it.
    With bpftrace, its timing of every matrix multiplication is the reference for each
    node's and layer's share of their time."""
    d = t.Daemon("--precise-duty", "1", "--precise-ops", OPS)
    d.wait_ready()
    bt = t.bpftrace(BT_MATMUL % {"bin": argv[0]}) if bpftrace else None
    # Its output to files: a pipe nobody reads while it records would stop it.
    out_f, err_f = (tempfile.TemporaryFile("w+", errors="replace") for _ in range(2))
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE if until_read else subprocess.DEVNULL,
                            stdout=out_f, stderr=err_f)
    t._children.append(proc)
    trace = None
    if until_read:
        # Told to end (a line on its stdin) once the daemon has read that many whole tokens.
        def read_enough():
            status, doc, _ = d.api("GET", "/v1/processes/%d" % proc.pid)
            graph = (doc.get("ggml") or {}).get("graph") or {} if status == 200 else {}
            return (graph.get("per_token") or {}).get("generated", 0) >= until_read
        t.poll("%d whole tokens of pid %d read" % (until_read, proc.pid), read_enough,
               timeout=400, interval=0.5)
        proc.stdin.write(b"\n")
        proc.stdin.close()
    if record:
        d.wait_log("pid %d (%s) runs ggml" % (proc.pid, comm), timeout=60)
        d.wait_log("pid %d: tensors read on" % proc.pid, timeout=60)
        rec = tracefmt.record(t, d, proc.pid, record, "--seconds", "1")
        text, err = rec.communicate(timeout=120)
        t.check(rec.returncode == 0, "%s: llmprofctl record exits 0: %r %r" % (name, text, err))
        trace = (proc.pid, tracefmt.load_any(t, record))
    proc.wait(timeout=600)
    out_f.seek(0)
    err_f.seek(0)
    out, err = out_f.read(), err_f.read()
    t.check(proc.returncode == 0, "%s decoded: %s" % (name, err.strip()[-300:]))
    if comm == "node":  # the driver says which process decoded
        pid = json.loads(out.strip().splitlines()[-1])["pid"]
    else:
        pid = proc.pid
        d.wait_log("pid %d (%s) runs ggml" % (pid, comm), timeout=60)
    d.wait_log("pid %d (%s) exited" % (pid, comm))
    t.check(re.search(r"pid %d: tensors read on \d+ op functions \(ggml_tensor: src\[\] at 152, "
                      r"view_src at 232, name at 256; \d+ threads\)" % pid, d.log()),
            "%s: the log says which layout the build's tensors have:\n%s"
            % (name, d.log()[-2000:]))
    if bt:
        # Its lines for the process, once they stop coming (it exited).
        mine = "mm %d " % pid
        t.bpftrace_settle(bt, lambda lines: any(ln.startswith(mine) for ln in lines))
        printed = t.bpftrace_stop(bt, settled=True)
        calls = [ln.split() for ln in printed.splitlines() if ln.startswith(mine)]
        lost = t.bpftrace_lost(printed)
        t.check(not lost, "%s: bpftrace lost none of its %d lines: %d lost"
                % (name, len(calls), lost))
    doc = d.get("/v1/processes/%d" % pid)
    g = doc["ggml"]["graph"]
    print("%s: ops read %s, not read %s" % (name, g["ops_read"], g["ops_not_read"]))
    # Every matmul op that ran is read: ggml's own, an extra buffer type's (a C++ member
    # function, compute_forward(this, params, op)).
    ran = [o["op"] for o in doc["ggml"]["ops"] if o["op"] in MATMULS and o.get("precise")
           and o["precise"]["calls"] > 0]
    t.check(g["tensors"] == "read" and ran and all(o in g["ops_read"] for o in ran)
            and not any(o in g["ops_not_read"] for o in MATMULS) and g["threads"] >= 1,
            "%s: the tensors are read, of every matmul op that ran (%s): %s"
            % (name, ran, {k: v for k, v in g.items() if k != "nodes"}))
    mm = [n for n in g["nodes"] if n["op"] in MATMULS]
    if repacked and "avx2" in open("/proc/cpuinfo").read().split():
        t.check({n["op"] for n in mm if n["layer"] is not None} == {"mul_mat_repack"},
                "%s: the layers' multiplications are the repack buffer's: %s"
                % (name, sorted({(n["op"], n["name"]) for n in mm})))

    # Each layer multiplies by its own weights, as the file has them: shapes and types.
    for layer in range(layers):
        ours = sorted((n["src"][0]["ne"][0], n["src"][0]["ne"][1], n["src"][0]["type"])
                      for n in mm if n["layer"] == layer)
        ref = sorted((weights["blk.%d.%s.weight" % (layer, w)][0][0],
                      weights["blk.%d.%s.weight" % (layer, w)][0][1],
                      TYPE_NAMES[weights["blk.%d.%s.weight" % (layer, w)][1]])
                     for w in MATMUL_WEIGHTS)
        t.check(ours == ref, "layer %d multiplies by its weights: %s, the file %s"
                % (layer, ours, ref))
    out = [n for n in mm if n["layer"] is None]
    ref_out = weights.get("output.weight") or weights["token_embd.weight"]
    t.check(len(out) == 1 and out[0]["name"] == "result_output" and out[0]["block"] == "output"
            and out[0]["src"][0]["ne"][:2] == ref_out[0],
            "one multiplication outside the layers, by the output weights: %s" % out)

    # Bytes: the weight's size in the file plus the input's, per multiplication.
    by_shape = {(tuple(w[0]), TYPE_NAMES.get(w[1])): w[2] for w in weights.values()
                if len(w[0]) == 2}
    for n in mm:
        w, x, y = n["src"][0], n["src"][1], n["dst"]
        wbytes = by_shape[(tuple(w["ne"][:2]), w["type"])]
        xbytes = 4 * x["ne"][0] * x["ne"][1] * x["ne"][2] * x["ne"][3]
        ybytes = 4 * y["ne"][0] * y["ne"][1] * y["ne"][2] * y["ne"][3]
        t.check(x["type"] == "f32" and y["type"] == "f32" and n["instances"] > 0
                and n["bytes_read"] == n["instances"] * (wbytes + xbytes)
                and n["bytes_written"] == n["instances"] * ybytes,
                "%s-%s: %d bytes read over %d, the weight's %d and the input's %d each"
                % (n["name"], n["layer"], n["bytes_read"], n["instances"], wbytes, xbytes))
        t.check(n["flops"] == n["instances"] * 2 * w["ne"][0] * y["ne"][0] * y["ne"][1],
                "%s-%s: FLOPs" % (n["name"], n["layer"]))

    # The ops that move only indexed rows: get_rows reads the rows it writes (a row of the
    # Q8_0 or Q4_0 token embeddings is its size in the file over its rows), set_rows writes its
    # source's rows into the KV cache's type.
    size = {"f32": 4, "f16": 2, "i32": 4, "i64": 8}
    indexed = [n for n in g["nodes"] if n["op"] in ("get_rows", "set_rows")]
    for n in indexed:
        (w, x), y, inst = n["src"][:2], n["dst"], n["instances"]
        nidx = x["ne"][0] * x["ne"][1] * x["ne"][2] * x["ne"][3]
        if n["op"] == "get_rows":
            # the token embeddings', from the file; an activation's (the last token's rows
            # of the last layer), by its type
            row = (by_shape[(tuple(w["ne"][:2]), w["type"])] // w["ne"][1]
                   if w["type"] not in size else w["ne"][0] * size[w["type"]])
            rows = y["ne"][1] * y["ne"][2] * y["ne"][3]
            want = (inst * (rows * row + nidx * size[x["type"]]),
                    inst * rows * y["ne"][0] * size[y["type"]])
        else:
            rows = w["ne"][1] * w["ne"][2] * w["ne"][3]
            want = (inst * (rows * w["ne"][0] * size[w["type"]] + nidx * size[x["type"]]),
                    inst * rows * y["ne"][0] * size[y["type"]])
        t.check((n["bytes_read"], n["bytes_written"]) == want,
                "%s %s: the rows it moved, %s and %s bytes over %d, the file's and the types' "
                "%s" % (n["op"], n["tensor"], n["bytes_read"], n["bytes_written"], inst, want))
    t.check({n["op"] for n in indexed} == {"get_rows", "set_rows"},
            "%s: get_rows and set_rows read" % name)

    # Per generated token, one multiplication per weight. Both sides count whole tokens
    # only: the generation decodes that began once the nodes were read (a token in flight
    # then is left out of both), so each must be exactly once per token. Reading begins at
    # the first tick that finds the same ops called as the tick before (at most three),
    # after discovery, which a late dlopen or a slow daemon delays: tokens are asked of
    # that part of the run only, 50 at least.
    pt = g["per_token"]
    gen = [n["generation_instances"] for n in mm if n["dst"]["ne"][1] == 1]
    per = 7 * layers + 1
    t.check(pt["generated"] >= 50 and len(gen) == per and set(gen) == {pt["generated"]},
            "%d generation multiplications, each once per generated token (%d): %s"
            % (per, pt["generated"], sorted(set(gen))))
    t.check(pt["probed_nodes"] >= per - 1 and pt["barriers"] >= 1,
            "per token: %s nodes of the ops read, %s barriers" % (pt["probed_nodes"],
                                                                  pt["barriers"]))
    # The nodes' own CPU time is the op's, over the part of its windows they were read in:
    # that part is their share of the op's calls. Tolerance a fifth: calls before the
    # reading hold the prompt's, heavier than a generation's (16 tokens of 300: about 5 % of
    # the op's CPU), and CPU per call varies with the host's load (seen here 0.97-0.99).
    for op in (o for o in doc["ggml"]["ops"] if o["op"] in ran):
        pr = op["precise"]
        nodes_ns = sum(n["oncpu_ns"] for n in mm if n["op"] == op["op"])
        part = sum(n["calls"] for n in mm if n["op"] == op["op"]) / pr["calls"]
        t.check(0.8 * part * pr["oncpu_ns"] <= nodes_ns <= pr["oncpu_ns"] and part <= 1,
                "%s's nodes' own CPU time, %d ns, is the op's, %d, over the nodes' share "
                "of its calls, %.3f" % (op["op"], nodes_ns, pr["oncpu_ns"], part))

    if bt:
        against_bpftrace(name, g, calls)

    # /metrics: the nodes' own CPU time by block, the same seconds as the nodes'.
    _, metrics, _ = d.api("GET", "/metrics")
    blocks = {}
    for n in g["nodes"]:
        blocks[n["block"]] = blocks.get(n["block"], 0) + n["oncpu_ns"] / 1e9
    for b, sec in blocks.items():
        m = re.search(r'^llmprof_block_cpu_seconds_total\{[^}]*pid="%d"[^}]*block="%s"\} (\S+)$'
                      % (pid, b), metrics, re.M)
        t.check(m and abs(float(m.group(1)) - sec) < 1e-6,
                "/metrics has block %s's %.6f s: %s" % (b, sec, m.group(0) if m else None))

    # The roofline: each op's GB/s over its nodes, as their bytes and times say, against
    # the host's measured bandwidth where it is known.
    roof(d, pid, g)

    # What a user sees.
    up = next(n for n in mm if n["name"] == "ffn_up" and n["dst"]["ne"][1] == 1)
    for by, want in (("layer", ["layer %d" % i for i in range(layers)]),
                     ("shape", ["%s [1024,2816]%s x [1024,1]f32 -> [2816,1]f32"
                                % (up["op"], up["src"][0]["type"])]),
                     ("block", ["ffn", "attention", "output"]), ("op", ran)):
        r = subprocess.run([t.LLMPROFCTL, "--socket", d.socket, "ops", "--pid", str(pid),
                            "--by", by, "--top", "100"], capture_output=True, text=True,
                           timeout=30)
        lines = r.stdout.splitlines()
        t.check(r.returncode == 0 and all(any(ln.endswith("  " + w) for ln in lines)
                                          for w in want),
                "llmprofctl ops --by %s lists %s:\n%s%s" % (by, want, r.stdout, r.stderr))
    # The longest calls, and the least efficient nodes (time per byte moved) first.
    for sort, key in (("max", lambda n: n["max_ns"]),
                      ("time-per-byte", lambda n: n["ns"] / n["calls"] * n["instances"]
                       / (n["bytes_read"] + n["bytes_written"])
                       if n["bytes_read"] is not None and n["calls"] else 0)):
        r = subprocess.run([t.LLMPROFCTL, "--socket", d.socket, "ops", "--pid", str(pid),
                            "--by", "node", "--sort", sort, "--top", "3"], capture_output=True,
                           text=True, timeout=30)
        top = sorted(g["nodes"], key=lambda n: -key(n))[0]
        rows = [ln for ln in r.stdout.splitlines() if re.match(r"^\s+\d+ ", ln)]
        want = top["tensor"] + " "
        t.check(r.returncode == 0 and len(rows) == 3 and want in rows[0],
                "llmprofctl ops --by node --sort %s: %s first:\n%s%s"
                % (sort, want, r.stdout, r.stderr))
    t.check(d.stop() == 0, "the daemon exits 0")
    return (g, trace) if record else g


def against_bpftrace(name, g, calls):
    """Each generation multiplication node's share of their wall time (every thread's
    calls, entry to return), and each layer's, against bpftrace's timing of the same
    function's calls by their destination's name, over the same calls: those entered once
    nodes were read (the graph's since_ns; before it, the daemon's own start-up took CPUs
    from some calls only bpftrace would count). Shares, not times: each side's probe runs
    inside the other's timing (a few microseconds of calls of 40 to 200). The tolerance,
    half a point or 5 % of the share: the calls in flight at since_ns, and a probe's cost
    that differs by the call's thread and CPU."""
    ref, ref_n, ref_all = {}, {}, {}
    since = g["since_ns"]
    for _, _, tensor, rows, ns, entry in calls:
        if int(rows) != 1:
            continue
        ref_all[tensor] = ref_all.get(tensor, 0) + 1
        if int(entry) >= since:
            ref[tensor] = ref.get(tensor, 0) + int(ns)
            ref_n[tensor] = ref_n.get(tensor, 0) + 1
    mine = [n for n in g["nodes"] if n["op"] == "mul_mat" and n["dst"]["ne"][1] == 1]
    ours = {n["tensor"]: n["ns"] for n in mine}
    # The daemon turns reading on, then takes since_ns: every call entered after it is read,
    # and none before reading began. Entered by bpftrace's clock: its handler and ours run
    # one after the other in the same trap (the kernel calls a uprobe's consumers newest
    # first: ours), so a call whose trap spans the instant reading began can be bpftrace's
    # since then and not ours. A thread is in one trap at a time: at most one such call a
    # thread, in all.
    short = {n["tensor"]: max(0, ref_n.get(n["tensor"], 0) - n["calls"]) for n in mine}
    off = [(n["tensor"], ref_n.get(n["tensor"]), n["calls"], ref_all.get(n["tensor"]))
           for n in mine if n["calls"] > ref_all.get(n["tensor"], 0)]
    t.check(since and not off and sum(short.values()) <= g["threads"],
            "%s: each generation multiplication node's calls, %d in all, at least bpftrace's "
            "entered since %d (%d) less one a thread at most (%d threads; %d short: %s), at "
            "most all of its (%d): %s"
            % (name, sum(n["calls"] for n in mine), since, sum(ref_n.values()), g["threads"],
               sum(short.values()), [(k, v) for k, v in short.items() if v][:3],
               sum(ref_all.values()), off[:3]))
    total, ref_total = sum(ours.values()), sum(ref.values())
    t.check(set(ours) == set(ref) and total and ref_total,
            "%s: bpftrace timed the same generation multiplications, %d calls of %d nodes: "
            "only ours %s, only its %s" % (name, sum(ref_n.values()), len(ref),
                                           sorted(set(ours) - set(ref))[:3],
                                           sorted(set(ref) - set(ours))[:3]))
    worst = []
    for k in ours:
        a, b = ours[k] / total, ref.get(k, 0) / ref_total
        worst.append((abs(a - b) - max(0.005, 0.05 * b), k, round(100 * a, 2),
                      round(100 * b, 2)))
    worst.sort(reverse=True)
    t.check(worst and worst[0][0] <= 0,
            "%s: each node's share of the multiplications' time is bpftrace's, within half a "
            "point or 5 %%; the furthest (ours, its %%): %s" % (name, [w[1:] for w in worst[:3]]))
    by_layer, ref_layer = {}, {}
    for n in g["nodes"]:
        if n["tensor"] in ours:
            by_layer[n["layer"]] = by_layer.get(n["layer"], 0) + ours[n["tensor"]] / total
            ref_layer[n["layer"]] = ref_layer.get(n["layer"], 0) + ref[n["tensor"]] / ref_total
    far = max(abs(by_layer[k] - ref_layer[k]) for k in by_layer)
    t.check(far <= 0.005, "%s: each layer's share too, within half a point: %s against %s"
            % (name, {k: round(100 * v, 2) for k, v in by_layer.items()},
               {k: round(100 * v, 2) for k, v in ref_layer.items()}))


def roof(d, pid, g):
    """doctor's roofline against the nodes it is made of, and the host's bandwidth: measured
    now, used where the CPUs were quiet (a busy host's figure is not)."""
    status, _, _ = d.api("POST", "/v1/bandwidth")
    bw = t.poll("the host's bandwidth", lambda: (lambda x: x if x["state"] == "measured"
                                                  else None)(d.get("/v1/bandwidth")),
                timeout=60, interval=0.5)
    doc = t.poll("the findings to use it", lambda: (lambda x: x if bw["contended"] or
                                                    x["peak_bytes_per_s"] else None)(
        d.get("/v1/processes/%d/findings" % pid)["op_roofline"]), timeout=30, interval=0.5)
    t.check(status == 202 and (doc["peak_bytes_per_s"] is None) == bw["contended"],
            "op_roofline's peak, %s, is the host's figure where measured on quiet CPUs (%s)"
            % (doc["peak_bytes_per_s"], bw["last_measurement"]))
    want, cpu = {}, {}
    for n in g["nodes"]:
        cpu[n["op"]] = cpu.get(n["op"], 0) + n["oncpu_ns"]
        if n["bytes_read"] is None or not n["calls"]:
            continue
        b, ns = want.get(n["op"], (0, 0))
        want[n["op"]] = (b + n["bytes_read"] + n["bytes_written"],
                         ns + n["ns"] / n["calls"] * n["instances"])
    ops = [o["op"] for o in doc["ops"]]
    t.check(ops == sorted(cpu, key=lambda o: -cpu[o])[:8],
            "op_roofline: the ops with the most own CPU time first: %s" % ops)
    peak = doc["peak_bytes_per_s"]
    for o in doc["ops"]:
        b, ns = want.get(o["op"], (0, 0))
        rate = b * 1e9 / ns if ns else None
        t.check((rate is None and o["bytes_per_s"] is None) or
                (rate and abs(o["bytes_per_s"] - rate) <= 1e-6 * rate and
                 (peak is None or abs(o["fraction"] - rate / peak) < 1e-9)),
                "op_roofline: %s %s bytes/s, its nodes' %s (of a peak %s)"
                % (o["op"], o["bytes_per_s"], rate, peak))
    r = subprocess.run([t.LLMPROFCTL, "--socket", d.socket, "doctor", "--pid", str(pid)],
                       capture_output=True, text=True, timeout=30)
    line = next((ln for ln in r.stdout.splitlines() if "ops (precise mode's nodes" in ln), "")
    t.check(ops[0] in line and re.search(r"[0-9.]+[KMG]iB/s", line),
            "doctor says each op's rate: %s" % line)


# llama-eval-callback's node lines: "common_debug_cb_eval:  ffn_up-0 = (f32)  MUL_MAT(
# blk.0.ffn_up.weight{1024, 2816, 1, 1}, ffn_norm-0{1024, 1, 1, 1}}) = {2816, 1, 1, 1}"
# Read by its structure: llama.cpp's logger thread can write the callback's prefix twice (a
# line begun, then begun again), and no node's name holds it: the node is what follows the
# last prefix.
ECB_PREFIX = "common_debug_cb_eval:"
ECB_LINE = re.compile(r"^\s*(.+?) = \((\w+)\)\s+(\w+)\((.*)\) = \{([\d, ]+)\}$")


def ecb_match(line):
    """A node line of llama-eval-callback's, from its last prefix on; None for another."""
    at = line.rfind(ECB_PREFIX)
    return ECB_LINE.match(line[at + len(ECB_PREFIX):]) if at >= 0 else None


def ecb_nodes(text):
    """llama-eval-callback's nodes, in order: each one's line, counted once its tensor's
    print ends ("sum = ": every node here is of a type it prints). The logger's thread
    writes and flushes each entry while the main thread's exit() flushes stdout too, without
    the stream's lock (glibc's _IO_cleanup): an entry can be written twice, the second
    copy of a node's line right after the first (the last layer's ffn_moe_out, once). A
    line whose print has not ended when the next node's line begins is that first copy."""
    pending = None
    for line in text.splitlines():
        m = ecb_match(line)
        if m:
            pending = m
        elif pending and line.strip().startswith("sum = "):
            yield pending
            pending = None


ECB_SRC = re.compile(r"\{(\d+), (\d+), (\d+), (\d+)\}")


def family(op):
    """An op as both name it: ggml_op_desc's upper case (a GLU op by its kind), ours by
    function (an extra buffer type's matmul is a MUL_MAT)."""
    op = op.lower()
    if op.startswith("mul_mat") and op != "mul_mat_id":
        return "mul_mat"
    if op in ("swiglu", "geglu", "reglu", "swiglu_oai", "geglu_erf", "geglu_quick"):
        return "glu"
    return op


def stem_layer(name):
    """A node name as the kernel keys it (bpf/precise.bpf.c name_parse): the layer from a
    "-N" suffix, the rest cut to 23 bytes."""
    m = re.match(r"^(.*)-(\d{1,4})$", name)
    stem, layer = (m.group(1), int(m.group(2))) if m else (name, None)
    return stem[:23], layer


def ecb_key(op, name, layer, dst, srcs):
    """A node as both sides are compared: its op's family, name stem and layer, and the
    shapes of it and its first two sources. An extra buffer type's matmul of three
    sources computes a MUL_MAT_ID (experts, input, ids)."""
    fam = family(op)
    if fam == "mul_mat" and len(srcs) == 3:
        fam = "mul_mat_id"
    return (fam, stem_layer(name)[0], layer, tuple(dst)) + tuple(tuple(s) for s in srcs[:2])


def ecb_layer(name, src0):
    """A node's layer as llmprofd takes it (bpf/precise.bpf.c): from a "-N" ending its name;
    for one whose name ggml made (node_N for one the graph's builder left unnamed, a
    view's "cache_k_l0 (view)"), from its first source's name, "-N" at its end or before a
    view's suffix: "Qcur-0 (view) (permuted)"."""
    layer = stem_layer(name)[1]
    if layer is None and (re.match(r"^node_\d+$", name) or name.endswith(")")):
        m = re.match(r"^.*-(\d{1,4})$", src0.split(" (")[0] if src0 else "")
        layer = int(m.group(1)) if m else None
    return layer


def eval_callback_graph(model, g):
    """llama-eval-callback's graph of a one-token prompt: its nodes of the ops g read
    (ecb_key), each with how many times the graph has it."""
    ecb = t.build_llama("--eval-callback")
    # It prints through llama.cpp's logger, whose thread writes behind the main one and
    # which exit does not wait for (llama.cpp issue 22142): the tail of the graph was cut
    # off on every run of a small model. strace holds its exit_group half a second, for the
    # logger to finish. A whole print ends with the graph's last node, the logits llama.cpp
    # names result_output, and that tensor's sum. Its stdout unbuffered (stdbuf -o0): exit()
    # flushes a buffered stdout without the stream's lock while the logger's thread writes
    # into it, which garbled lines near the end (a CI run lost the last layer's attention
    # node so); unbuffered, exit has nothing to flush, and 8 runs here printed the same bytes.
    for _ in range(5):
        run = subprocess.run(["stdbuf", "-o0",
                              "strace", "-f", "-qq", "-o", "/dev/null", "-e", "trace=exit_group",
                              "-e", "inject=exit_group:delay_enter=500000",
                              ecb, "-m", model, "-p", "", "-c", "256", "-t", "2"],
                             stdin=subprocess.DEVNULL, capture_output=True, text=True,
                             errors="replace", timeout=300)
        if re.search(r" result_output = .*\n(.*\n)*\s*sum = ", run.stdout):
            break
        print("llama-eval-callback's print was cut short (%d lines); again"
              % len(run.stdout.splitlines()))
    read = {family(o) for o in g["ops_read"]}
    if set(g["ops_read"]) & set(EXTRA_MATMULS):  # their compute_forward does MUL_MAT_ID too
        read.add("mul_mat_id")
    ref, prev = {}, (None, None)
    for m in ecb_nodes(run.stdout):
        # Its callback has each node computed alone; a run computes an RMS_NORM and the MUL
        # of its output that follows it in one call (ggml_cpu_try_fuse_ops): no MUL node.
        fused = m.group(3) == "MUL" and prev[0] == "RMS_NORM" and \
            m.group(4).startswith(prev[1] + "{")
        prev = (m.group(3), m.group(1))
        if fused or family(m.group(3)) not in read:
            continue
        srcs = [tuple(int(x) for x in s) for s in ECB_SRC.findall(m.group(4))]
        layer = ecb_layer(m.group(1), m.group(4).split("{")[0])
        key = ecb_key(m.group(3), m.group(1), layer, [int(x) for x in m.group(5).split(",")],
                      srcs)
        ref[key] = ref.get(key, 0) + 1
    t.check(run.returncode == 0 and len(ref) > 50,
            "llama-eval-callback printed the graph of a one-token prompt: %d nodes of the ops "
            "read %s: %s" % (sum(ref.values()), sorted(read), run.stderr[-300:]))
    return ref


def against_eval_callback(g, ref):
    """The generation nodes read against llama-eval-callback's graph of a one-token prompt."""
    gen = g["per_token"]["generated"]
    ours = {}
    for n in g["nodes"]:
        if not n["generation_instances"]:
            continue
        key = ecb_key(n["op"], n["name"], n["layer"], n["dst"]["ne"], [s["ne"] for s in n["src"]])
        ours[key] = ours.get(key, 0) + n["generation_instances"]
    only_ref = sorted(set(ref) - set(ours), key=str)
    only_ours = sorted(set(ours) - set(ref), key=str)
    t.check(not only_ref and not only_ours,
            "the generation nodes read are llama-eval-callback's (%d): only its %s; only ours "
            "%s" % (len(ref), only_ref[:5], only_ours[:5]))
    # Whole tokens on both sides: exactly as many per token as its graph has.
    wrong = [(k, ours[k], ref[k]) for k in ref if k in ours and ours[k] != ref[k] * gen]
    t.check(not wrong, "each as many times per generated token (%d) as in its graph: %s"
            % (gen, wrong[:5]))


SHAPE = re.compile(r"^\[([\d,]+)\](\w+)$")


def parse_shape(text):
    """A span's shape arg, "[1024,2816]q8_0 x [1024,1]f32 -> [2816,1]f32": the sources'
    and the destination's (ne padded to 4, type)."""
    srcs, _, dst = text.partition(" -> ")

    def one(s):
        m = SHAPE.match(s)
        ne = [int(x) for x in m.group(1).split(",")]
        return ne + [1] * (4 - len(ne)), m.group(2)
    return [one(s) for s in srcs.split(" x ")] if srcs else [], one(dst)


def against_spans(name, trace, g, ref, weights):
    """A record's op spans against llama-eval-callback's graph and the model file: on the
    main thread, the op spans inside each generation decode are the graph's nodes of the
    ops read, each as many times (every thread calls an op's function once per node); a
    matrix multiplication's bytes are its weight's size in the file and its input's and
    output's, its FLOPs 2 K N T."""
    pid, doc = trace
    ev = tracefmt.valid(t, doc, name)
    read = set(g["ops_read"])
    spans = [e for e in ev if e["ph"] == "X" and e["tid"] < tracefmt.CPU_TRACK
             and e["cat"] == "op" and e["name"] in read]
    # The kernel names the node at the call's return: the spans the window's edges cut
    # have none, every other does.
    end = doc["otherData"]["window_seconds"] * 1e6
    bare = [e for e in spans if "tensor" not in e["args"]]
    inner = [e for e in bare if e["ts"] > EPS and e["ts"] + e["dur"] < end - EPS]
    t.check(spans and not inner,
            "%s: the op spans of the ops read name their node, but for %d the window cut "
            "(of %d): %s" % (name, len(bare) - len(inner), len(spans), inner[:2]))
    gen = [e for e in ev if e["ph"] == "X" and e["tid"] == pid
           and e["name"] == "llama_decode: generation"]
    main = [e for e in spans if e["tid"] == pid and "tensor" in e["args"]]
    wrong, whole = [], 0
    for dec in gen:
        if dec["ts"] <= 0 or dec["ts"] + dec["dur"] >= end:
            continue
        whole += 1
        ours = {}
        for e in main:
            if dec["ts"] - EPS <= e["ts"] and e["ts"] + e["dur"] <= dec["ts"] + dec["dur"] + EPS:
                srcs, dst = parse_shape(e["args"]["shape"])
                key = ecb_key(e["name"], e["args"]["tensor"], e["args"].get("layer"), dst[0],
                              [s[0] for s in srcs])
                ours[key] = ours.get(key, 0) + 1
        if ours != ref:
            wrong.append((dec["ts"], sorted(set(ref) - set(ours), key=str)[:3],
                          sorted(set(ours) - set(ref), key=str)[:3],
                          [(k, ours[k], ref[k]) for k in ref if k in ours and ours[k] != ref[k]][:3]))
    t.check(whole >= 5 and not wrong,
            "%s: in each of %d generation decodes the main thread's op spans are "
            "llama-eval-callback's nodes (%d), each as many times: %s"
            % (name, whole, sum(ref.values()), wrong[:2]))
    by_shape = {(tuple(w[0]), TYPE_NAMES.get(w[1])): w[2] for w in weights.values()
                if len(w[0]) == 2}
    bad, mm = [], 0
    for e in spans:
        if family(e["name"]) != "mul_mat" or "tensor" not in e["args"]:
            continue
        mm += 1
        srcs, (y, yt) = parse_shape(e["args"]["shape"])
        (w, wt), (x, xt) = srcs[:2]
        want = (by_shape.get((tuple(w[:2]), wt), -1) + 4 * x[0] * x[1] * x[2] * x[3]
                + 4 * y[0] * y[1] * y[2] * y[3])
        if (xt, yt) != ("f32", "f32") or e["args"].get("bytes") != want or \
                e["args"].get("flops") != 2 * w[0] * y[0] * y[1] or \
                e["args"].get("layer") != stem_layer(e["args"]["tensor"])[1]:
            bad.append((e["args"], want))
    t.check(mm and not bad, "%s: %d matmul spans, each with its weight's bytes in the file, "
            "its input's and output's, its FLOPs and layer: %s" % (name, mm, bad[:2]))


def decoded(d, name, argv, comm, cwd=None):
    """Runs an engine to its end beside daemon d: its pid, once d saw it exit. The daemon
    must have found it as a ggml process while it ran (the run is long enough for that)."""
    err_f = tempfile.TemporaryFile("w+", errors="replace")
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=err_f, cwd=cwd)
    t._children.append(proc)
    d.wait_log("pid %d (%s) runs ggml" % (proc.pid, comm), timeout=120)
    proc.wait(timeout=600)
    err_f.seek(0)
    t.check(proc.returncode == 0, "%s decoded: %s" % (name, err_f.read().strip()[-300:]))
    d.wait_log("pid %d (%s) exited" % (proc.pid, comm))
    return proc.pid


def moe(work):
    """A mixture of experts (8, 2 used per token; Q4_0, which the CPU backend repacks where
    it has AVX2, MUL_MAT_ID then computed by the repack buffer's compute_forward): the
    nodes read against llama-eval-callback's graph, and each expert multiplication's
    bytes against the file: of one token, the 2 experts its ids name, not all 8."""
    model = os.path.join(work, "moe-q4_0.gguf")
    # The medium shape: 20 ms a token here, so the run lasts seconds and the daemon (under
    # ASan, 0.7 s to read a new process's objects) reads it long before its end. A longer
    # run of a smaller model would not do: the graph's shapes follow the context, which
    # must be llama-eval-callback's 256.
    subprocess.run([sys.executable, os.path.join(WORKLOAD, "gen_gguf.py"), "--shape", "medium",
                    "--type", "q4_0", "--experts", "8,2", model], check=True, timeout=300)
    kv, weights = ggufref.read(model)
    experts = next(v for k, v in kv.items() if k.endswith(".expert_count"))
    used = next(v for k, v in kv.items() if k.endswith(".expert_used_count"))
    layers = next(v for k, v in kv.items() if k.endswith(".block_count"))
    d = t.Daemon("--precise-duty", "1", "--precise-ops", OPS)
    d.wait_ready()
    pid = decoded(d, "the MoE model", [t.llama_simple(), "-m", model, "-n", "240",
                                       "Once upon a time"], "llama-simple")
    g = d.get("/v1/processes/%d" % pid)["ggml"]["graph"]
    print("MoE: ops read %s, not read %s" % (g["ops_read"], g["ops_not_read"]))
    if "avx2" not in open("/proc/cpuinfo").read().split():
        print("MoE: no AVX2, no repacking: its MUL_MAT_ID is not read here")
        return
    ids = [n for n in g["nodes"] if family(n["op"]) == "mul_mat" and len(n["src"]) == 3]
    gen = [n for n in ids if n["dst"]["ne"][2] == 1]
    t.check(len(gen) == 3 * layers and {n["op"] for n in gen} == {"mul_mat_repack"},
            "MoE: the repack buffer's MUL_MAT_ID nodes, gate, up and down in each of %d "
            "layers: %s" % (layers, sorted((n["op"], n["tensor"]) for n in gen)))
    for n in ids:
        w, x, c = n["src"]
        size = weights["blk.%d.ffn_%s_exps.weight" % (n["layer"], n["name"][8:])][2] \
            if n["name"].startswith("ffn_moe_") else None
        vol = [s["ne"][0] * s["ne"][1] * s["ne"][2] * s["ne"][3] for s in (x, c, n["dst"])]
        one = n["dst"]["ne"][2] == 1
        want = n["instances"] * (used * size // experts + 4 * vol[0] + 4 * vol[1]) \
            if one and size else None
        t.check(size and w["ne"][2] == experts and c["ne"][0] == used
                and n["bytes_read"] == want
                and (n["bytes_written"] == n["instances"] * 4 * vol[2] if one else True)
                and n["flops"] == n["instances"] * 2 * w["ne"][0] * w["ne"][1] * used
                * n["dst"]["ne"][2],
                "MoE %s, %d tokens: %s bytes read over %d, %s: %d of %d experts of %s bytes in "
                "the file, the input's and the ids'" % (n["tensor"], n["dst"]["ne"][2],
                                                        n["bytes_read"], n["instances"],
                                                        want, used, experts, size))
    against_eval_callback(g, eval_callback_graph(model, g))
    t.check(d.stop() == 0, "the daemon exits 0")


def ik(model, weights, layers, work):
    binary = t.build_ik()
    d = t.Daemon("--precise-duty", "1", "--precise-ops", OPS + ",mul_mat_up_gate,fused_rms_norm")
    d.wait_ready()
    # It generates (shifting its context) until every layer's fused multiplication has been
    # read 20 times, however fast the host (here it decodes 300 tokens in under 2 s).
    proc = subprocess.Popen([binary, "-m", model, "-p", "Once upon a time", "-n", "1000000",
                             "-c", "1024", "--temp", "0", "-t", "2", "-tb", "2",
                             "--ignore-eos"], stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            cwd=work)  # llama-cli writes main.log where it runs
    t._children.append(proc)
    pid = proc.pid
    d.wait_log("pid %d (llama-cli) runs ggml" % pid, timeout=120)

    def read_enough():
        status, doc, _ = d.api("GET", "/v1/processes/%d" % pid)
        nodes = ((doc.get("ggml") or {}).get("graph") or {}).get("nodes", []) \
            if status == 200 else []
        per_layer = {n["layer"]: n["instances"] for n in nodes if n["op"] == "mul_mat_up_gate"}
        return len(per_layer) == layers and min(per_layer.values()) >= 20
    t.poll("every layer's fused multiplication read 20 times", read_enough, timeout=300,
           interval=0.5)
    t.check(proc.poll() is None, "ik_llama.cpp generated until then")
    proc.terminate()
    proc.wait(timeout=60)
    d.wait_log("pid %d (llama-cli) exited" % pid)
    t.check(re.search(r"pid %d: tensors read on \d+ op functions \(ggml_tensor: src\[\] at 160, "
                      r"view_src at 288, name at 312; 2 threads\)" % pid, d.log()),
            "ik_llama.cpp's layout is found:\n%s" % d.log()[-2000:])
    g = d.get("/v1/processes/%d" % pid)["ggml"]["graph"]
    fused = [n for n in g["nodes"] if n["op"] == "mul_mat_up_gate"]
    t.check(sorted(n["layer"] for n in fused) == list(range(layers)),
            "one fused FFN multiplication per layer: %s" % [n["layer"] for n in fused])
    for n in fused:
        up = weights["blk.%d.ffn_up.weight" % n["layer"]]
        gate = weights["blk.%d.ffn_gate.weight" % n["layer"]]
        x = n["src"][2]
        xbytes = 4 * x["ne"][0] * x["ne"][1] * x["ne"][2] * x["ne"][3]
        t.check(len(n["src"]) == 3 and n["block"] == "ffn"
                and [s["ne"][:2] for s in n["src"][:2]] == [up[0], gate[0]]
                and [s["type"] for s in n["src"][:2]] == [TYPE_NAMES[up[1]], TYPE_NAMES[gate[1]]]
                and n["bytes_read"] == n["instances"] * (up[2] + gate[2] + xbytes),
                "%s-%d takes the layer's ffn_up and ffn_gate, and reads both: %s"
                % (n["name"], n["layer"], n))
    for n in g["nodes"]:
        if n["op"] == "mul_mat" and n["layer"] is not None:
            shapes = [(w[0], TYPE_NAMES[w[1]]) for k, w in weights.items()
                      if k.startswith("blk.%d." % n["layer"])]
            t.check((n["src"][0]["ne"][:2], n["src"][0]["type"]) in shapes,
                    "%s-%d multiplies by a weight of its layer" % (n["name"], n["layer"]))
    t.check(d.stop() == 0, "the daemon exits 0")


if __name__ == "__main__":
    t.run(main, timeout=900)
