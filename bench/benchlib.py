# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
"""Shared by the benchmarks: the machine, a private llmprofd, alternating runs, and the
result table each benchmark prints last."""
import atexit
import contextlib
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("LLMPROF_BUILD", os.path.join(ROOT, "build"))
# The tests' helpers (lptest, perfref) serve the benchmarks too.
sys.path.insert(0, os.path.join(ROOT, "tests", "lib"))
import lptest  # noqa: E402
LLMPROFD = os.environ.get("LLMPROFD", os.path.join(BUILD, "llmprofd"))
LLMPROFCTL = os.environ.get("LLMPROFCTL", os.path.join(BUILD, "llmprofctl"))

# The scratch a benchmark made with lptest.tmpdir(): removed at its exit, kept (and named)
# when it ended in an exception. Benchmarks do not run under lptest.run(), which does it
# for the tests.
_failed = []
_excepthook = sys.excepthook


def _note_failure(*exc):
    _failed.append(exc[0])
    _excepthook(*exc)


sys.excepthook = _note_failure
atexit.register(lambda: lptest._clean_scratch(not _failed))


def machine():
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
                if l.startswith("model name")), "?")
    mem = next(int(l.split()[1]) for l in open("/proc/meminfo") if l.startswith("MemTotal"))
    virt = subprocess.run(["systemd-detect-virt"], capture_output=True, text=True).stdout.strip()
    # Another llmprofd (the quick start's service) runs its programs in every configuration
    # measured here, the baseline included: say so beside the numbers.
    others = subprocess.run(["pgrep", "-x", "llmprofd"], capture_output=True,
                            text=True).stdout.split()
    return "%s, %d CPUs, %.0f GiB, Linux %s%s%s" % (
        cpu, os.cpu_count(), mem / 2**20, platform.release(),
        ", virtualised (%s)" % virt if virt and virt != "none" else "",
        "; another llmprofd was running (pid %s): ratios are against a baseline that "
        "includes it" % ",".join(others) if others else "")


def model(shape):
    """A random-weight GGUF model of that shape (tests/workload/gen_gguf.py), made once."""
    path = os.path.join(tempfile.gettempdir(), "llmprofd-bench-%s.gguf" % shape)
    if not os.path.exists(path):
        subprocess.run(["python3", os.path.join(ROOT, "tests", "workload", "gen_gguf.py"),
                        "--shape", shape, path], check=True)
    return path


def cpu_seconds(pid):
    """A process's CPU seconds (user + system), from /proc/PID/stat."""
    return lptest.proc_cpu_seconds(pid)


def need(*tools):
    missing = [t for t in tools if not shutil.which(t) and not os.path.exists(t)]
    if missing:
        raise SystemExit("missing %s: run scripts/install-deps.sh" % ", ".join(missing))


@contextlib.contextmanager
def bpf_stats():
    """kernel.bpf_stats_enabled on for the block (the kernel times every BPF program run:
    run_time_ns and run_cnt), then as it was."""
    path = "/proc/sys/kernel/bpf_stats_enabled"
    old = open(path).read().strip()
    open(path, "w").write("1")
    try:
        yield
    finally:
        open(path, "w").write(old)


def mount_tracefs():
    """bpftrace's tracepoints need tracefs; llmprofd mounts it itself."""
    if not os.path.exists("/sys/kernel/tracing/events"):
        subprocess.run(["mount", "-t", "tracefs", "nodev", "/sys/kernel/tracing"],
                       capture_output=True)


# Among a Daemon's arguments: track a sleeping process of its own (by --pid), so that the
# programs it attaches only while a process is tracked (the syscall sources' futex ones)
# are attached, while the load it measures is not tracked: the case of every other process
# on an inference server.
TRACK_OTHER = "track-other"


class Daemon:
    """A private llmprofd for one measurement: its own socket, no state, no TCP listener
    unless asked."""

    def __init__(self, *args, metrics=None, binary=None):
        args = list(args)
        self.other = None
        if TRACK_OTHER in args:
            args.remove(TRACK_OTHER)
            self.other = subprocess.Popen(["sleep", "infinity"])
            args += ["--pid", str(self.other.pid)]
        self.dir = tempfile.mkdtemp(prefix="llmprofd-bench-")
        self.socket = os.path.join(self.dir, "llmprofd.sock")
        self.log = os.path.join(self.dir, "log")
        cmd = [binary or LLMPROFD, "--socket", self.socket, "--state-directory", "off", "--config",
               "/dev/null", "--metrics-address", metrics or "off"] + list(args)
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(self.log, "w"))
        try:
            self.wait_log("ready:")
            if self.other:
                self.wait_log("tracking pid %d " % self.other.pid)
                if "(attached while a process is tracked)" in self.text():
                    self.wait_log("futex programs attached")
        except BaseException:
            if self.other:
                self.other.kill()
            raise

    def text(self):
        return open(self.log).read()

    def wait_log(self, what, timeout=60):
        deadline = time.monotonic() + timeout
        while what not in self.text():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("llmprofd: no %r in its log:\n%s" % (what, self.text()))
            time.sleep(0.02)

    def wait_log_count(self, what, count, timeout=120):
        """Until what is in the log count times."""
        deadline = time.monotonic() + timeout
        while self.text().count(what) < count:
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("llmprofd: %r not %d times in its log:\n%s"
                                 % (what, count, self.text()[-3000:]))
            time.sleep(0.02)

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        self.proc.wait(timeout=60)
        if self.other:
            self.other.kill()
            self.other.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


class Tool:
    """Another tracer (runqlat, funclatency, bpftrace) running while a load is measured;
    started once it says it has attached."""

    def __init__(self, cmd, ready, timeout=60):
        self.out = tempfile.NamedTemporaryFile(prefix="bench-tool-", delete=False)
        self.proc = subprocess.Popen(cmd, stdout=self.out, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + timeout
        while ready not in open(self.out.name, errors="replace").read():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("%s did not start:\n%s" % (cmd[0], open(self.out.name).read()))
            time.sleep(0.02)

    def stop(self):
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        text = open(self.out.name, errors="replace").read()
        os.unlink(self.out.name)
        return text


def alternate(configs, rounds, measure, log=print):
    """Runs every configuration once per round, the order rotating each round so that no
    configuration always runs first (warm caches) or last; returns {name: [values]}."""
    results = {name: [] for name, _ in configs}
    for r in range(rounds):
        order = configs[r % len(configs):] + configs[:r % len(configs)]
        for name, cfg in order:
            v = measure(cfg)
            results[name].append(v)
            log("round %d/%d  %-44s %s" % (r + 1, rounds, name, fmt(v)))
    return results


def fmt(v):
    return "%.4g" % v if isinstance(v, float) else str(v)


def summary(values):
    return statistics.median(values), min(values), max(values)


def noise(values):
    """Spread of a set of runs: (max - min) / median."""
    m = statistics.median(values)
    return (max(values) - min(values)) / m if m else 0.0


def table(title, header, rows, notes=()):
    """The result table, last thing a benchmark prints (markdown, for RESULTS.md)."""
    print("\n## %s\n" % title)
    print("machine: %s\n" % machine())
    for n in notes:
        print(n)
    if notes:
        print()
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for r in rows:
        print("| " + " | ".join(str(x) for x in r) + " |")


def torch_sampled(d, p):
    """Waits until daemon d tracks decoder p and its samples count (every object read,
    libtorch's unwind rows in the kernel); False if p exits first or 180 s pass."""
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and p.poll() is None:
        got = subprocess.run([LLMPROFCTL, "--socket", d.socket, "dump", "--pid", str(p.pid),
                              "--json"], capture_output=True, text=True)
        if got.returncode == 0:
            doc = json.loads(got.stdout)
            if (doc.get("torch") or {}).get("sampled", {}).get("since_ns"):
                return True
        time.sleep(0.2)
    return False


def torch_warm(daemons):
    """A decoder tracked by each daemon until its samples count, then stopped: while it maps
    libtorch its rows stay, as an always-on daemon holds them while any process runs torch.
    Returns it, to be killed."""
    import torchref  # tests/lib: only the torch benchmarks need it

    p = subprocess.Popen(torchref.decoder_argv("--threads", 2, "--new", 100000),
                         env=torchref.env("openblas"), stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    if all(torch_sampled(d, p) for d in daemons):
        p.send_signal(signal.SIGSTOP)
        return p
    p.kill()
    p.wait()
    raise SystemExit("the warm-up decoder was not tracked within 180 s:\n%s" %
                     "\n".join(d.text() for d in daemons))
