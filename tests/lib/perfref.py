# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
"""The independent reference for llmprofd's sampled shares: `perf record` on the same run,
with call chains unwound by perf from DWARF (--call-graph dwarf: correct on code built
without frame pointers, which llmprofd's stack scan does not rely on either), each sample
attributed by the rule llmprofd documents:

- sync: the first user frame outside the C library is in an OpenMP runtime (libgomp,
  libomp: LLVM's waits in libc, in sched_yield and condition variables, as libgomp's in
  its own futex calls), or any user frame, innermost first, is ggml_barrier /
  GOMP_barrier / __kmpc_barrier before an op function;
- op X: the innermost user frame that is an op function (ggml_compute_forward_X, with its
  type and chunk helpers folded into X, as in daemon/engine/ops.c), or an extra buffer
  type's ggml::cpu::T::...::compute_forward, op mul_mat_T: ggml_cpu_extra_compute_forward
  hands it MUL_MAT (and MUL_MAT_ID) of weights that type laid out (AMX on a Sapphire
  Rapids, repack), and ggml_compute_forward_mul_mat is then never called;
- outside_ops: anything else.

The op naming here is written again from the rule, not shared with the C code, so that a
defect in one does not hide in both."""
import collections
import ctypes
import fcntl
import json
import math
import os
import random
import re
import select
import signal
import struct
import subprocess
import threading

import lptest

C_LIBRARY = ctypes.CDLL(None, use_errno=True)
LPHELD = os.environ.get("LPHELD", "build/tests/lpheld")
PREFIX = "ggml_compute_forward_"
VARIANTS = ("_f32", "_f16", "_bf16", "_i32", "_flt", "_q", "_bytes", "_same_cont", "_one_chunk",
            "_non_quantized", "_tiled", "_impl")
RUNTIMES = ("libgomp", "libomp", "liblpomp")
LIBC = ("/libc.so", "/libc-", "/libpthread.so", "/libpthread-")
BARRIERS = ("ggml_barrier", "GOMP_barrier", "__kmpc_barrier")
GROUPS = ("matmul", "attention", "norm", "rope", "elementwise", "copy", "other_ops", "sync",
          "outside_ops")
ELEMENTWISE = {"add", "add1", "add_id", "acc", "sub", "mul", "div", "sqr", "sqrt", "log", "sin",
               "cos", "exp", "expm1", "abs", "neg", "scale", "clamp", "unary", "glu", "silu",
               "silu_back", "gelu", "gelu_erf", "gelu_quick", "relu", "leaky_relu", "elu",
               "sigmoid", "tanh", "hardswish", "hardsigmoid", "step", "sgn", "floor", "ceil",
               "round", "trunc", "softplus", "fill", "set"}


EXTRA = re.compile(r"ggml::cpu::([A-Za-z0-9_]+)::(?:.*::)?compute_forward$")


def op_name(sym):
    """'mul_mat' for ggml_compute_forward_mul_mat_one_chunk, and so on; 'mul_mat_amx' for
    ggml::cpu::amx::tensor_traits::compute_forward; None for others. perf prints C++ names
    demangled, so a template's arguments follow a '<'."""
    m = EXTRA.match(sym)
    if m:
        return "mul_mat_" + m.group(1)
    p = sym.find(PREFIX)
    if p < 0:
        return None
    m = re.match(r"[A-Za-z0-9_]+", sym[p + len(PREFIX):])
    name = m.group(0) if m else ""
    changed = True
    while changed:
        changed = False
        for v in VARIANTS:
            if len(name) > len(v) and name.endswith(v):
                name, changed = name[:-len(v)], True
                break
    return name or None


def group_of(op):
    if "mul_mat" in op or "out_prod" in op:
        return "matmul"
    if op.startswith("flash_attn") or op.startswith("soft_max"):
        return "attention"
    if "norm" in op:
        return "norm"
    if op.startswith("rope"):
        return "rope"
    if op.startswith("get_rows") or op in ("cpy", "dup", "cont", "concat", "set_rows"):
        return "copy"
    if op in ELEMENTWISE:
        return "elementwise"
    return "other_ops"


# Where every thread's chain begins: a chain that ends elsewhere was cut short (perf copies
# at most 64 KiB of stack at a sample and unwinds only within it).
ENTRIES = ("_start", "clone3", "clone", "__clone", "start_thread", "__libc_start_main",
           "__libc_start_call_main")


def attribute(frames, kernels=()):
    """frames: (symbol, dso) pairs of user code, innermost first. kernels: matmul kernel
    names counted as their own op when no op function is above them. A chain cut short
    with no op, barrier or kernel in what perf unwound is "truncated": perf cannot say
    where it was."""
    user = frames
    if not user:
        return "outside_ops"
    first = next((f for f in user if not any(c in f[1] for c in LIBC)), None)
    if first and any(r in first[1] for r in RUNTIMES):
        return "sync"
    kernel = None
    for sym, _ in user:
        if any(sym.startswith(b) for b in BARRIERS):
            return "sync"
        op = op_name(sym)
        if op:
            return "op:" + op
        if kernel is None and sym in kernels:
            kernel = sym
    if kernel:
        return "op:" + kernel
    # Cut short inside an object's code; a chain that runs into code perf has no unwind
    # information for (a JIT's, "[unknown]") ends there for perf and llmprofd alike.
    if not any(user[-1][0].startswith(e) for e in ENTRIES) and "unknown" not in user[-1][0] \
            and "unknown" not in user[-1][1]:
        return "truncated"
    return "outside_ops"


def mmap_pages(hz, stack):
    """perf's ring buffer per CPU, in pages (a power of two): a quarter of a second of
    samples of stack bytes each.

    perf's reader is woken by the samples themselves, when a CPU's buffer fills past its
    watermark, and takes the CPU from whatever ran there. With perf's default 512 KiB a
    CPU, which holds 8 samples of a 64 KiB stack, it woke some 350 times a second, each
    time just after one of its own samples, and ran for about half a millisecond: less
    than its sampling period. The other CPU's thread spun at the barrier meanwhile, and
    perf's next sample there came after that: perf never saw the spin it caused, which
    llmprofd's timers, independent of perf's, did. On llama-server (2 threads, beside the
    busy host) its libgomp leaf share read 2.8-4.4 points below llmprofd's and a light
    perf's (4 KiB stacks: within 0.3); with 16 MiB a CPU, the same 64 KiB stacks, within
    0.2 (3 runs), though perf took as much CPU time from the engine."""
    need = (stack + 1024) * hz / 4 / os.sysconf("SC_PAGE_SIZE")
    return 1 << max(0, math.ceil(math.log2(max(1, need))))


def record_args(data, hz, extra=(), stack=16384):
    """perf record's arguments; stack: the bytes of stack copied at each sample, from which
    perf unwinds (65528 at most). A chain whose frames hold more ends there, its op
    unknown: ik_llama.cpp's flash attention kernels keep over 16 KiB of tiles on the
    stack, and with 16 KiB perf put 0.22 of a prompt's samples outside ops that 64 KiB
    found in flash attention. stack 0: frame pointers instead (the kernel's chain and the
    user-space instruction pointer, what a sample's first user-space frame needs; callers
    where the code keeps frame pointers). Its buffers: mmap_pages()."""
    graph = "dwarf,%d" % stack if stack else "fp"
    return ["perf", "record", "-q", "-e", "cpu-clock", "-F", str(hz), "--call-graph",
            graph, "-m", str(mmap_pages(hz, stack)), "-o", data] + list(extra)


def held(argv):
    """argv to start held before its exec, until SystemWide(held=) releases it once perf
    runs. perf keeps the maps a process had before exec and those of the process that
    forked it, and places an object's unwind table by the lowest map of it; a workload
    started by the test would carry python's libc.so.6 too, and where python's lies lower
    perf's chains from libc and libm end there. tests/fixtures/lpheld.c, static, maps no
    shared object: started before perf, it is what perf reads from /proc."""
    return [LPHELD] + list(argv)


def wait_held(proc, timeout=30):
    """Polls until proc (started with held()) has stopped itself."""
    def stopped():
        if proc.poll() is not None:
            raise RuntimeError("lpheld exited %s before it was released" % proc.returncode)
        return lptest.proc_state(proc.pid) == "T"
    lptest.poll("lpheld to stop itself", stopped, timeout, interval=0.01)


# PERF_EVENT_IOC_PERIOD: _IOW('$', 4, __u64)
IOC_PERIOD = 0x40082404


class Recording:
    """`perf record` over target (its arguments: -a, -p PID), --call-graph dwarf, started
    disabled and enabled over its control fifo: it samples from the constructor's return.
    held: a process started with held(), released once perf runs (see held())."""

    what = "perf record"

    def __init__(self, data, hz, target, stack=16384, timeout=60, held=None):
        if held is not None:
            wait_held(held, timeout)
        ctl, ack = data + ".ctl", data + ".ack"
        for f in (ctl, ack):
            if os.path.exists(f):
                os.unlink(f)
            os.mkfifo(f)
        self.proc = subprocess.Popen(record_args(data, hz, list(target) + [
            "-k", "CLOCK_MONOTONIC", "-D", "-1", "--control", "fifo:%s,%s" % (ctl, ack)], stack),
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True, errors="replace")
        self.files = (ctl, ack)
        # Opened read-write, neither end waits for perf's; perf answers "ack" once enabled.
        c, a = os.open(ctl, os.O_RDWR), os.open(ack, os.O_RDWR)
        try:
            os.write(c, b"enable\n")
            ready = select.select([a], [], [], timeout)[0]
            if not ready or not os.read(a, 64).startswith(b"ack"):
                self.proc.kill()
                raise RuntimeError("%s did not start: %s"
                                   % (self.what, self.proc.communicate()[1][-300:]))
        finally:
            os.close(c)
            os.close(a)
        if held is not None:
            os.kill(held.pid, signal.SIGCONT)

    def stop(self):
        """Stops perf (a perf -p whose process exited has stopped by itself)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        err = self.proc.communicate(timeout=300)[1]
        for f in self.files:
            os.unlink(f)
        if self.proc.returncode not in (0, -signal.SIGINT):
            raise RuntimeError("%s exited %d: %s" % (self.what, self.proc.returncode,
                                                     err[-300:]))


class Attached(Recording):
    """`perf record -p PID`: a cpu-clock event per thread of the process, the threads it
    starts inheriting it, the way llmprofd's --sampler thread samples (and perf record --
    CMD)."""

    what = "perf record -p"

    def __init__(self, data, hz, pid, stack=16384, timeout=60, held=None):
        super().__init__(data, hz, ["-p", str(pid)], stack, timeout, held)


class SystemWide(Recording):
    """`perf record -a`: one cpu-clock event per CPU, the way llmprofd's default sampler
    samples, from the constructor's return (perf says so over its control fifo) until
    stop(). The reference for a per-CPU sampler: `perf record -p` and `-- CMD` sample each
    thread's own CPU time, which reads otherwise where threads sleep and wake often
    (README, "Which sampler").

    As llmprofd does, its timers are restarted at a rate drawn at random in [0.75, 1.25] of
    hz every 50-150 ms: a strictly periodic timer aliases with a decode that repeats one
    graph at a steady pace (four such samplers of one OpenMP run read sync 0.249-0.338;
    restarted at random, 0.254-0.262). The test takes perf's event descriptors
    (pidfd_getfd) to do it; the events whose period is a frequency (its side-band dummy)
    refuse the value and are left alone.

    held: a process started with held(), released once perf runs. A process the test
    starts after perf is unwound wrong from libc (see held()); one started before, whose
    image is final (a fixture waiting for "go"), needs no holding."""

    what = "perf record -a"

    def __init__(self, data, hz, stack=16384, timeout=60, held=None):
        super().__init__(data, hz, ["-a"], stack, timeout, held)
        self.stopping = threading.Event()
        self.rephased = 0
        self.fds = self._events()
        self.thread = threading.Thread(target=self._rephase, args=(hz,), daemon=True)
        self.thread.start()

    def _events(self):
        """perf's perf-event descriptors, duplicated into this process."""
        pidfd = os.pidfd_open(self.proc.pid)
        fds = []
        try:
            for name in os.listdir("/proc/%d/fd" % self.proc.pid):
                try:
                    if "perf_event" not in os.readlink("/proc/%d/fd/%s" % (self.proc.pid, name)):
                        continue
                except OSError:
                    continue
                fd = C_LIBRARY.syscall(438, pidfd, int(name), 0)  # pidfd_getfd
                if fd < 0:
                    raise OSError(ctypes.get_errno(), "pidfd_getfd of perf's descriptor")
                fds.append(fd)
        finally:
            os.close(pidfd)
        return fds

    def _rephase(self, hz):
        rng = random.Random()
        while not self.stopping.wait(rng.uniform(0.05, 0.15)):
            for fd in self.fds:
                period = int(1e9 / (hz * rng.uniform(0.75, 1.25)))
                try:
                    fcntl.ioctl(fd, IOC_PERIOD, struct.pack("Q", period))
                    self.rephased += 1
                except OSError:
                    pass

    def stop(self):
        self.stopping.set()
        self.thread.join()
        for fd in self.fds:
            os.close(fd)
        super().stop()
        if not self.rephased:
            raise RuntimeError("perf record -a: no timer of perf's was restarted")


def run_system_wide(argv, data, hz, stack=16384, timeout=600, **popen):
    """Runs argv to its end under SystemWide, held until perf samples (held()): the finished
    Popen, its stdout and its stderr (text). popen: more of Popen's arguments (cwd)."""
    proc = subprocess.Popen(held(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, errors="replace", **popen)
    lptest._children.append(proc)
    system_wide = SystemWide(data, hz, stack, held=proc)
    out, err = proc.communicate(timeout=timeout)
    system_wide.stop()
    return proc, out, err


def samples(data, pid, since=None, kernels=()):
    """Counter of attributions of pid's samples (at or after perf time `since`, seconds)."""
    # --no-inline: an op inlined into its caller is no function on either side, and
    # resolving inlines runs addr2line over every binary (minutes on node).
    out = subprocess.run(["perf", "script", "--no-inline", "-i", data, "-F",
                          "pid,time,ip,sym,dso"], capture_output=True, text=True,
                         errors="replace", timeout=600).stdout
    n = collections.Counter()
    for block in out.split("\n\n"):
        lines = block.strip().splitlines()
        head = lines[0].split() if lines else []
        if len(head) < 2 or head[0] != str(pid):
            continue
        if since is not None and float(head[1].rstrip(":")) < since:
            continue
        frames = []
        for line in lines[1:]:
            f = line.split(None, 1)
            if len(f) < 2 or "(" not in f[1]:
                continue
            # Kernel frames (BPF programs among them) are above the user ones.
            if int(f[0], 16) >= 1 << 63:
                continue
            rest = f[1]
            sym = re.sub(r"\+0x[0-9a-f]+$", "", rest[:rest.rfind("(")].strip())
            frames.append((sym, rest[rest.rfind("("):]))
        n[attribute(frames, kernels)] += 1
    return n


def lost_share(data):
    """The share of its samples perf lost (its ring buffers full: LOST and LOST_SAMPLES
    records, which `perf report --stats` adds up per event), of all it should have taken.
    perf writes each sample's copy of the stack, 64 KiB here: on a busy host it falls behind
    (seen 0.95 % of a llama-server run's samples)."""
    out = subprocess.run(["perf", "report", "-i", data, "--stats"], capture_output=True,
                         text=True, errors="replace", timeout=300).stdout
    _, _, own = out.partition("cpu-clock stats:")
    taken = re.search(r"^\s*SAMPLE events:\s+(\d+)", own, re.M)
    lost = re.search(r"^\s*LOST_SAMPLES events:\s+(\d+)", own, re.M)
    if not taken:
        raise RuntimeError("perf report --stats: no cpu-clock samples in %s" % data)
    n, k = int(taken.group(1)), int(lost.group(1)) if lost else 0
    return k / (n + k)


def shortfall(ours, nperf, perf_lost):
    """The share of samples the daemon did not take, against what perf, which took nperf
    and lost perf_lost (lost_share) of its own, would have counted without its losses."""
    return max(0.0, 1 - ours * (1 - perf_lost) / max(1, nperf))


def group_shares(counts):
    """{group: share} over every sample, in llmprofd's op_groups keys (truncated chains
    count in the total, in no group)."""
    total = sum(counts.values())
    g = collections.Counter()
    for k, v in counts.items():
        g[group_of(k[3:]) if k.startswith("op:") else k] += v
    return {k: (g[k] / total if total else 0.0) for k in GROUPS}, total


def check_groups(t, name, g, data, pid, kernels=(), tolerance=0.03, enough=500, residual=0.0,
                 shortfall_allowed=True):
    """Checks (with lptest t) each op group's share in the report's ggml section g against
    perf's on the same run, from the daemon's first sample on. Returns perf's attribution
    counts and our shares. residual: a difference measured between the two samplings
    beyond their noise, whose cause is not known, added to every bound (the caller says
    why).

    The kernel runs no BPF program at a sample while a tracepoint or uprobe program runs on
    that CPU (bpf_prog_active): ours, and any other BPF tool's (the quick start's service
    in CI), run in every futex call of a barrier, so the samples lost are sync samples.
    The shortfall against what perf would have counted, measured, widens the tolerance
    (seen 0.3-7 %); so does the share perf itself lost (lost_share), and the share of
    perf's chains cut short with no op in what it unwound (a frame larger than the 64 KiB
    it copies: ik_llama.cpp's flash attention helper keeps 68,032 bytes; llmprofd's walk
    reads the CFA where the frame saved it). shortfall_allowed=False holds the shares without
    that first allowance: a share cannot be right if the sampler's misses fall on one op
    group (the daemon now counts the samples the kernel did not take: sample.bpf.c)."""
    counts = samples(data, pid, since=g["sampled"]["since_ns"] / 1e9, kernels=kernels)
    theirs, nperf = group_shares(counts)
    ours = g["op_groups"]["share"]
    for who, n, x in (("llmprofd", g["op_groups"]["samples"], ours), ("perf    ", nperf, theirs)):
        print("%s: %s (%d samples): %s" % (name, who, n,
                                           json.dumps({k: round(v, 3) for k, v in x.items()})))
    t.check(g["op_groups"]["samples"] > enough and nperf > enough,
            "%s: enough samples on both sides" % name)
    perf_lost = lost_share(data)
    lost = shortfall(g["op_groups"]["samples"], nperf, perf_lost)
    cut = counts["truncated"] / nperf if nperf else 0.0
    # Four OpenMP threads on two CPUs wait in futex calls without end, each running both
    # daemons' programs (this one's and the Quick start's): 0.077-0.087 lost there, 0.000-0.016
    # with as many threads as CPUs. The bound catches a sampler that lost its way, not that.
    t.check(lost <= 0.15, "%s: samples dropped, against perf's count: %.3f" % (name, lost))
    t.check(cut <= 0.05, "%s: perf's chains cut short with no op: %.3f" % (name, cut))
    n1, n2 = max(1, g["op_groups"]["samples"]), max(1, nperf)
    for k in GROUPS:
        # Two samplings of one run, at instants of their own: their shares differ by
        # sampling noise alone by sigma, that of a difference of two binomial shares
        # (0.0127 at a half and 3,100 samples each, where 0.03 is 2.4 sigma: seen to fail
        # once, 0.032 on llama-server). 3.5 sigma: about 1 in 2,000 checks by chance.
        p = (ours[k] + theirs[k]) / 2
        noise = 3.5 * math.sqrt(p * (1 - p) * (1 / n1 + 1 / n2))
        bound = (max(tolerance, noise) + (lost if shortfall_allowed else 0.0) + perf_lost + cut +
                 residual)
        t.check(abs(ours[k] - theirs[k]) <= bound,
                "%s: %s %.3f within %.3f of perf's %.3f"
                % (name, k, ours[k], bound, theirs[k]))
    return counts, ours
