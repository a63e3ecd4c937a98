# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
"""PyTorch for the tests: Debian's python3-torch, the BLAS a process's library path picks,
the decoder and fixture workloads of tests/workload, and the independent references for
llmprofd's torch figures:

- perf record -a's samples of a process, each attributed by the rule llmprofd documents for
  torch, written again here (not shared with the C code): sync where the first user frame
  outside the C library is in an OpenMP runtime; op X where a frame, innermost first, is
  at::_ops::<struct>::call or ::redispatch, X named by torch's own schemas
  (torch._C._jit_get_all_schemas(), asked of the installed torch), not by llmprofd's reading
  of the library; truncated where perf's chain stops inside an object (OpenBLAS's
  hand-written kernels have no unwind information: perf stops there, llmprofd's walk takes
  the return address a leaf left on the stack); outside ops else;
- torch.profiler's key averages (decoder.py --profile-forwards);
- bpftrace's count of each op's calls: uprobes on every at::_ops::<struct>::call of the op
  (its overloads), structs named by torch's schemas as above."""
import collections
import json
import os
import re
import subprocess
import sys
import sysconfig

import lptest
import perfref

PYTHON = os.environ.get("LLMPROF_TORCH_PYTHON", "/usr/bin/python3")
WORKLOAD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "workload")
DECODER = os.path.join(WORKLOAD, "decoder.py")
OPMIX = os.path.join(WORKLOAD, "opmix.py")


def _multiarch():
    out = subprocess.run([PYTHON, "-c", "import sysconfig; print(sysconfig.get_config_var("
                          "'MULTIARCH') or '')"], capture_output=True, text=True)
    return out.stdout.strip() or sysconfig.get_config_var("MULTIARCH") or "x86_64-linux-gnu"


LIBDIR = "/usr/lib/" + _multiarch()
# Each BLAS package keeps its libblas.so.3 in a folder of its own: the library path picks one
# per process, whatever update-alternatives made the default.
BLAS = {"reference": os.path.join(LIBDIR, "blas"),
        "openblas": os.path.join(LIBDIR, "openblas-openmp")}


def available():
    """Why torch cannot be run here, or None."""
    r = subprocess.run([PYTHON, "-c", "import torch"], capture_output=True, text=True)
    if r.returncode:
        return "%s cannot import torch: %s" % (PYTHON, r.stderr.strip()[-200:])
    for k, d in BLAS.items():
        if not os.path.exists(os.path.join(d, "libblas.so.3")):
            return "no %s BLAS in %s" % (k, d)
    return None


def env(blas="openblas", **extra):
    """An environment whose libblas.so.3 is blas's."""
    e = dict(os.environ, LD_LIBRARY_PATH=BLAS[blas], PYTHONUNBUFFERED="1")
    e.update({k: str(v) for k, v in extra.items()})
    return e


def decoder_argv(*args):
    return [PYTHON, DECODER] + [str(a) for a in args]


def result(out):
    """The workload's JSON line (its last on stdout)."""
    return json.loads(out.strip().splitlines()[-1])


def schema_names():
    """{struct: name} of every operator torch registers: at::_ops::add_Tensor is aten::add."""
    code = ("import json, torch\n"
            "print(json.dumps(sorted({s.name + ('.' + s.overload_name if s.overload_name "
            "else '') for s in torch._C._jit_get_all_schemas() if s.name.startswith('aten::')})))")
    out = subprocess.run([PYTHON, "-c", code], capture_output=True, text=True, check=True)
    names = {}
    for full in json.loads(out.stdout):
        name, _, overload = full.partition(".")
        names[(name[6:] + ("_" + overload if overload else "")).replace(".", "_")] = name
    return names


OPS_FRAME = re.compile(r"^at::_ops::([A-Za-z0-9_]+)::(call|redispatch)\b")


def attribute(frames, names):
    """frames: (symbol, dso) of user code, innermost first."""
    if not frames:
        return "outside_ops"
    first = next((f for f in frames if not any(c in f[1] for c in perfref.LIBC)), None)
    if first and any(r in first[1] for r in perfref.RUNTIMES):
        return "sync"
    for sym, _ in frames:
        m = OPS_FRAME.match(sym)
        if m:
            return "op:" + names.get(m[1], "aten::" + m[1])
    if not any(frames[-1][0].startswith(e) for e in perfref.ENTRIES) and \
            "unknown" not in frames[-1][1]:
        return "truncated"
    if "unknown" in frames[-1][0] and "unknown" in frames[-1][1] and len(frames) > 1:
        return "truncated"
    return "outside_ops"


def samples(data, pid, names, since=None, until=None):
    """Counters of pid's samples: by attribution, by leaf function (perf's name, as pprof's
    'flat' names a function) and by thread."""
    out = subprocess.run(["perf", "script", "--no-inline", "-i", data, "-F",
                          "pid,tid,time,ip,sym,dso"], capture_output=True, text=True,
                         errors="replace", timeout=600).stdout
    by, leaf, tids = collections.Counter(), collections.Counter(), collections.Counter()
    for block in out.split("\n\n"):
        lines = block.strip().splitlines()
        head = lines[0].split() if lines else []
        if len(head) < 2:
            continue
        ptid = head[0].split("/")
        if ptid[0] != str(pid):
            continue
        ts = float(head[1].rstrip(":"))
        if (since is not None and ts < since) or (until is not None and ts >= until):
            continue
        frames, first = [], None
        for line in lines[1:]:
            f = line.split(None, 1)
            if len(f) < 2 or "(" not in f[1]:
                continue
            rest = f[1]
            sym = re.sub(r"\+0x[0-9a-f]+$", "", rest[:rest.rfind("(")].strip())
            if first is None:
                first = sym
            if int(f[0], 16) >= 1 << 63:
                continue
            frames.append((sym, rest[rest.rfind("("):]))
        a = attribute(frames, names)
        by[a] += 1
        leaf[first or "?"] += 1
        tids[ptid[-1]] += 1
    return by, leaf, tids


def op_samples(doc):
    """{op: samples}, the total and the sync samples of a process document's torch figures."""
    g = doc["torch"]
    return ({o["op"]: o["samples"] for o in g["ops"]}, g["op_groups"]["samples"],
            g["op_groups"]["share"]["sync"] * g["op_groups"]["samples"])


def run(argv, environ, timeout=600):
    """Starts a workload; its Popen (stdout, stderr piped, text)."""
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         errors="replace", env=environ)
    lptest._children.append(p)
    return p


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def libtorch(pid):
    """The libtorch_cpu a process maps (its path as the process sees it)."""
    with open("/proc/%d/maps" % pid) as f:
        for line in f:
            path = line.split(None, 5)[-1].strip()
            if "/libtorch_cpu.so" in path:
                return path
    return None


def call_counter(pid, ops, names, stop_fd):
    """bpftrace counting the calls of each of ops (aten names) by pid: entries to every
    at::_ops::<struct>::call whose struct torch names so (names: schema_names()), from now
    to pid's first write(2) to stop_fd. Started while pid waits; its counts print at pid's
    exit (read them with call_counts)."""
    lib = libtorch(pid)
    by_op = collections.defaultdict(list)
    for struct, name in names.items():
        if name in ops:
            by_op[name].append(struct)
    script = ["tracepoint:syscalls:sys_enter_write /pid == %d && args->fd == %d/ { @stop = 1; }"
              % (pid, stop_fd), 'BEGIN { printf("counting\\n"); }']
    for op, structs in sorted(by_op.items()):
        probes = ",".join("uprobe:%s:_ZN2at4_ops%d%s4callE*" % (lib, len(st), st)
                          for st in sorted(structs))
        script.append('%s /pid == %d && @stop == 0/ { @calls["%s"] = count(); }'
                      % (probes, pid, op))
    bt = lptest.bpftrace(" ".join(script), end="print(@calls);", at_exit_of=pid)
    lptest.poll("bpftrace counting", lambda: any(x.startswith("counting") for x in bt.lines),
                timeout=120)
    return bt


def call_counts(bt):
    """{op: calls} that call_counter's bpftrace printed."""
    out = lptest.bpftrace_stop(bt, timeout=120)
    return {m[1]: int(m[2]) for m in re.finditer(r"^@calls\[(.+?)\]: (\d+)$", out, re.M)}

