# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
"""Test harness for the bpf and e2e tiers: a private llmprofd per test, the workload
fixture, polling with deadlines, and a hard timeout for the whole test.

Each test owns its daemon (own log files, own socket once there is one), waits by polling
what the daemon prints, and kills everything it started on the way out."""
import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback

LLMPROFD = os.environ.get("LLMPROFD", "build/llmprofd")
LPFIXTURE = os.environ.get("LPFIXTURE", "build/tests/lpfixture")
LPGGML = os.environ.get("LPGGML", "build/tests/lpggml")
LLMPROFCTL = os.environ.get("LLMPROFCTL", "build/llmprofctl")
SKIP = 77  # ctest SKIP_RETURN_CODE
# The daemon under test is the sanitized build's (tests/CMakeLists.txt): a test may leave out
# parts whose daemon code its other parts run.
SANITIZED = bool(os.environ.get("LLMPROF_SANITIZED"))

_children = []
_checks = {"passed": 0, "failed": 0}
_failures = []  # the failed checks' messages, repeated under the closing tally
_scratch = []  # directories and files removed at the end when the test passed


WORKLOAD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "workload")


# ik_llama.cpp's build script, beside this tree (../shared/workloads), or where
# LLMPROF_BUILD_IK says.
BUILD_IK = os.environ.get("LLMPROF_BUILD_IK",
                          os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..",
                                       "..", "shared", "workloads", "build-ik.sh"))


def _built(argv, timeout):
    """The path a build script prints last; the first build takes minutes, later ones
    reuse its cache."""
    p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise AssertionError("%s failed:\n%s" % (" ".join(argv), p.stderr[-2000:]))
    return p.stdout.strip().splitlines()[-1]


def build_llama(*args, timeout=1800):
    """The path of a llama.cpp binary tests/workload/build-llama.sh builds with args
    (llama-simple by default, llama-server with --server)."""
    return _built([os.path.join(WORKLOAD, "build-llama.sh")] + list(args), timeout)


def build_ik(timeout=1500):
    """ik_llama.cpp's llama-cli, built by BUILD_IK and cached by the snapshot's hash."""
    return _built(["bash", BUILD_IK], timeout)


def llama_simple():
    """llama.cpp's llama-simple built from source with its defaults (OpenMP), cached by
    tests/workload/build-llama.sh: its path."""
    return build_llama(timeout=1200)


class Timeout(Exception):
    pass


def poll(what, fn, timeout=10.0, interval=0.02):
    """Calls fn until it returns something truthy; raises Timeout naming what."""
    deadline = time.monotonic() + timeout
    while True:
        v = fn()
        if v:
            return v
        if time.monotonic() > deadline:
            raise Timeout("timed out after %.1fs waiting for %s" % (timeout, what))
        time.sleep(interval)


def check(cond, msg):
    if cond:
        _checks["passed"] += 1
        print("ok: " + msg)
    else:
        _checks["failed"] += 1
        _failures.append(msg)
        print("FAILED: " + msg)
    return cond


def near(value, expected, rel):
    return expected != 0 and abs(value - expected) <= rel * abs(expected)


def tmpdir(prefix="llmprof-", mode=0o755, dir=None):
    """A scratch directory, removed when the test ends well (kept, and named, when not)."""
    d = tempfile.mkdtemp(prefix=prefix, dir=dir)
    os.chmod(d, mode)
    _scratch.append(d)
    return d


def tmpfile(text, suffix=""):
    """A scratch file holding text, removed like tmpdir()'s."""
    fd, path = tempfile.mkstemp(suffix=suffix, prefix="llmprof-")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    _scratch.append(path)
    return path


def _clean_scratch(ok):
    if not ok:
        for d in _scratch:
            if os.path.exists(d):
                print("kept for inspection: " + d)
        return
    for d in _scratch:
        if os.path.isdir(d):
            shutil.rmtree(d, ignore_errors=True)
        elif os.path.exists(d):
            os.unlink(d)


def _kill_all():
    for p in _children:
        if p.poll() is None:
            p.kill()
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
    for cg in _cgroups:
        cg.remove()
    if _scope:
        _scope.remove()


_cgroups = []


def cgroup2_mount():
    """Where the unified (v2) cgroup hierarchy is mounted, or None."""
    with open("/proc/self/mounts") as f:
        for line in f:
            dev, path, kind = line.split()[:3]
            if kind == "cgroup2":
                return path
    return None


def fresh_dir(parent, prefix):
    """Makes parent/prefix-PID-N with the first N free, and returns its path: a cgroup that
    a killed run left behind, under a pid since reused, is never taken for this one's."""
    for n in range(1000):
        path = os.path.join(parent, "%s-%d-%d" % (prefix, os.getpid(), n))
        try:
            os.mkdir(path)
            return path
        except FileExistsError:
            continue
    raise RuntimeError("no free name %s-%d-N under %s" % (prefix, os.getpid(), parent))


def remove_cgroup(path, timeout=10):
    """Removes a test's cgroup and what its processes made below it (systemd-nspawn's
    payload/ and supervisor/), deepest first, waiting while the last of them are still on
    their way out (a daemon killed at a timeout is reaped after the test's end)."""
    end = time.monotonic() + timeout
    while True:
        try:
            for top, dirs, _ in sorted(os.walk(path), key=lambda w: -w[0].count("/")):
                for sub in dirs:
                    os.rmdir(os.path.join(top, sub))
            if os.path.isdir(path):
                os.rmdir(path)
            return
        except OSError as e:
            if time.monotonic() > end:
                print("could not remove %s: %s" % (path, e))
                return
            time.sleep(0.1)


class ScopeCgroup:
    """The test's own cgroup (v2), made when the test starts: the test process moves into
    a leaf below it (test/), so that every process it starts from then on is inside, and
    each private Daemon gets --discover-cgroup with it: it discovers the test's processes
    alone, not an LLM the host runs beside the suite. At the end the test process goes back
    where it was, and the cgroup is removed."""

    def __init__(self):
        self.mount = cgroup2_mount()
        with open("/proc/self/cgroup") as f:
            self.home = [line[3:].strip() for line in f if line.startswith("0::")][0]
        self.path = fresh_dir(self.mount, "llmprof-scope")
        self.name = "/" + os.path.basename(self.path)
        os.mkdir(self.path + "/test")
        with open(self.path + "/test/cgroup.procs", "w") as f:
            f.write(str(os.getpid()))

    def outside(self, argv):
        """argv run where the test process was before (the same pid), out of the scope."""
        return ["sh", "-c", 'echo $$ > "$0" && exec "$@"',
                self.mount + self.home.rstrip("/") + "/cgroup.procs"] + list(argv)

    def remove(self):
        try:
            with open(self.mount + self.home.rstrip("/") + "/cgroup.procs", "w") as f:
                f.write(str(os.getpid()))
        except OSError as e:
            print("could not leave %s: %s" % (self.path, e))
            return
        remove_cgroup(self.path)


_scope = None


def scope():
    """The test's ScopeCgroup, or None where there is no unified hierarchy (or no root)."""
    return _scope


class CpuCgroup:
    """A cgroup of the test's own with a CPU quota (cgroup v2's cpu.max where the cpu
    controller is there, else v1's cpu.cfs_quota_us), removed when the test ends: to slow
    an engine down as a container's limit or a busy host would."""

    def __init__(self):
        v2 = "/sys/fs/cgroup"
        try:
            with open(os.path.join(v2, "cgroup.controllers")) as f:
                has_v2_cpu = "cpu" in f.read().split()
        except OSError:
            has_v2_cpu = False
        self.v2 = has_v2_cpu
        # Under the test's scope where there is one, so that what runs in it is still the
        # test's own to its daemons (--discover-cgroup).
        parents = [v2] + ([_scope.path] if has_v2_cpu and _scope else [])
        for parent in parents if has_v2_cpu else []:
            # Their children get the cpu controller where it is not on yet.
            with open(os.path.join(parent, "cgroup.subtree_control")) as f:
                on = "cpu" in f.read().split()
            if not on:
                with open(os.path.join(parent, "cgroup.subtree_control"), "w") as f:
                    f.write("+cpu")
        self.path = fresh_dir(parents[-1] if has_v2_cpu else "/sys/fs/cgroup/cpu", "llmprof-test")
        _cgroups.append(self)

    def set_quota(self, cpus, period_us=100000):
        quota = max(1000, int(cpus * period_us))
        if self.v2:
            with open(os.path.join(self.path, "cpu.max"), "w") as f:
                f.write("%d %d" % (quota, period_us))
        else:
            with open(os.path.join(self.path, "cpu.cfs_period_us"), "w") as f:
                f.write(str(period_us))
            with open(os.path.join(self.path, "cpu.cfs_quota_us"), "w") as f:
                f.write(str(quota))

    def wrap(self, argv):
        """argv run inside the cgroup from its first instruction (the same pid)."""
        return ["sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', self.path] + list(argv)

    def remove(self):
        remove_cgroup(self.path)


def run(main, timeout, need_root=True):
    """Runs a test's main() under a hard timeout and prints the closing tally."""
    if need_root and os.geteuid() != 0:
        print("skipped: needs root (CAP_BPF, CAP_PERFMON)")
        sys.exit(SKIP)

    def on_alarm(signum, frame):
        raise Timeout("hard timeout of %ds reached" % timeout)

    signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(timeout)
    global _scope
    if os.geteuid() == 0 and cgroup2_mount():
        _scope = ScopeCgroup()
    ok = True
    try:
        main()
    except Exception as e:
        traceback.print_exc()
        _failures.append("%s: %s" % (type(e).__name__, e))
        ok = False
    finally:
        signal.alarm(0)
        _kill_all()
    if not ok:
        _checks["failed"] += 1
    _clean_scratch(_checks["failed"] == 0)
    print("%d passed, %d failed" % (_checks["passed"], _checks["failed"]))
    # Repeated last, where a log cut to its tail (ctest's, CI's) still shows them.
    for m in _failures:
        print("FAILED: " + m[:1000])
    sys.exit(0 if ok and _checks["failed"] == 0 else 1)


class Daemon:
    """A private llmprofd. Logs go to files in its own directory; stdout is the report."""

    def __init__(self, *args, env=None, private=True, preexec_fn=None, wrap=()):
        self.dir = tmpdir("llmprofd-test-")
        self.out_path = os.path.join(self.dir, "stdout")
        self.err_path = os.path.join(self.dir, "stderr")
        self.socket = os.path.join(self.dir, "llmprofd.sock")
        self.state_dir = os.path.join(self.dir, "state")
        args = list(args)
        # Private by default: its own socket and state, no TCP listener, and none of the
        # host's /etc/llmprofd settings. A test that wants one of them passes it.
        if private:
            given = set(args)
            defaults = [("--socket", self.socket), ("--state-directory", self.state_dir),
                        ("--metrics-address", "off"), ("--config", "/dev/null")]
            if _scope:  # the test's own processes only
                defaults.append(("--discover-cgroup", _scope.name))
            for opt, value in defaults:
                if opt in given:
                    setattr(self, {"--socket": "socket", "--state-directory": "state_dir"}
                            .get(opt, "_"), args[args.index(opt) + 1])
                else:
                    args += [opt, value]
        self.args = list(wrap) + [LLMPROFD] + args
        self.proc = subprocess.Popen(self.args, stdout=open(self.out_path, "w"),
                                     stderr=open(self.err_path, "w"), stdin=subprocess.DEVNULL,
                                     env=env, preexec_fn=preexec_fn)
        _children.append(self.proc)

    def log(self):
        with open(self.err_path) as f:
            return f.read()

    def wait_log(self, text, timeout=20):
        return self.wait_log_count(text, 1, timeout)

    def wait_log_count(self, text, n, timeout=20):
        """Waits until text is in the log n times."""
        times = "" if n == 1 else " %d times" % n

        def seen():
            if self.log().count(text) >= n:
                return True
            if self.proc.poll() is not None:
                raise AssertionError("llmprofd exited (%s) before printing %r%s; log:\n%s"
                                     % (self.proc.returncode, text, times, self.log()))
            return False
        return poll("llmprofd to log %r%s" % (text, times), seen, timeout)

    def wait_ready(self, timeout=20):
        r = self.wait_log("ready:", timeout)
        # What this daemon loaded, to judge later that it unloaded exactly that.
        self.prog_ids = prog_ids_of(self.proc.pid)
        self.prog_names = sorted(n for i, n in loaded_programs().items() if i in self.prog_ids)
        return r

    def api(self, method, path, body=None, user=None, **kw):
        return curl(self.socket, method, path, body, user, **kw)

    def get(self, path, user=None):
        status, doc, _ = self.api("GET", path, user=user)
        if status != 200:
            raise AssertionError("GET %s: %d %s" % (path, status, doc))
        return doc

    def stop(self, sig=signal.SIGINT, timeout=20):
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        return self.wait_exit(timeout)

    def wait_exit(self, timeout=20):
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise Timeout("llmprofd did not exit within %ds; log:\n%s" % (timeout, self.log()))

    def report(self):
        with open(self.out_path) as f:
            text = f.read()
        try:
            return json.loads(text)
        except ValueError:
            raise AssertionError("report is not JSON: %r\nlog:\n%s" % (text[:500], self.log()))


def copy_for_others(binary):
    """A copy of binary that any uid can execute, whatever the build directory's
    permissions."""
    d = tmpdir("llmprof-bin-")
    path = os.path.join(d, os.path.basename(binary))
    shutil.copy(binary, path)
    os.chmod(path, 0o755)
    return path


def child_of(pid, comm=None, timeout=30):
    """A child of pid (the process unshare, nsenter or systemd-nspawn forked), the first
    whose comm is comm when it is given, once it is there."""
    def find():
        for task in os.listdir("/proc/%d/task" % pid):
            with open("/proc/%d/task/%s/children" % (pid, task)) as f:
                for kid in f.read().split():
                    try:
                        with open("/proc/%s/comm" % kid) as c:
                            if comm is None or c.read().strip() == comm:
                                return int(kid)
                    except OSError:
                        pass
        return None
    return poll("a child of pid %d%s" % (pid, " named " + comm if comm else ""), find,
                timeout=timeout, interval=0.05)


def bcrypt(password):
    """A bcrypt hash of password, from libxcrypt as the daemon checks it (for the
    basic_auth_users of a web configuration file)."""
    import ctypes
    lib = ctypes.CDLL("libcrypt.so.1")
    lib.crypt_gensalt_rn.restype = ctypes.c_char_p
    lib.crypt.restype = ctypes.c_char_p
    setting = ctypes.create_string_buffer(64)
    lib.crypt_gensalt_rn(b"$2b$", 5, None, 0, setting, 64)
    return lib.crypt(password.encode(), setting.value).decode()


def as_user(uid, gid=None, groups=()):
    """A command prefix running as another uid (setpriv, from util-linux)."""
    gid = uid if gid is None else gid
    prefix = ["setpriv", "--reuid=%d" % uid, "--regid=%d" % gid]
    if groups:
        prefix.append("--groups=" + ",".join(str(g) for g in groups))
    else:
        prefix.append("--clear-groups")
    return prefix


def curl(socket_path, method, path, body=None, user=None, timeout=20, headers=()):
    """One request with curl over the Unix socket: (status, parsed JSON or text, headers)."""
    cmd = (user or []) + ["curl", "-sS", "-i", "--unix-socket", socket_path,
                          "--max-time", str(timeout)]
    cmd += ["-I"] if method == "HEAD" else ["-X", method]
    for h in headers:
        cmd += ["-H", h]
    if body is not None:
        cmd += ["-H", "Content-Type: application/json", "--data-binary", body]
    cmd.append("http://localhost" + path)
    p = subprocess.run(cmd, capture_output=True, timeout=timeout + 10)
    if p.returncode != 0:
        raise AssertionError("curl %s %s failed (%d): %s" % (method, path, p.returncode,
                                                             p.stderr.decode()))
    out = p.stdout
    # Interim "100 Continue" answers come first.
    while out.startswith(b"HTTP/1.1 100"):
        out = out.split(b"\r\n\r\n", 1)[1]
    head, _, text = out.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    status = int(lines[0].split()[1])
    hdrs = {}
    for line in lines[1:]:
        if ":" in line:
            k, v = line.split(":", 1)
            hdrs[k.strip().lower()] = v.strip()
    text = text.decode()
    if text and hdrs.get("content-type", "").startswith("application/json"):
        return status, json.loads(text), hdrs
    return status, text, hdrs


BPFTRACE_END = "lptest: bpftrace done"


def bpftrace(script, end="", at_exit_of=None):
    """bpftrace running script, its output (stderr with it) gathered by a thread;
    returned once its probes are in. Its END probe runs the statements in end (prints of
    maps, which bpftrace would otherwise print only at its exit) and then marks where
    its output is complete, so that bpftrace_stop() need not wait for the exit. Given
    at_exit_of, a pid whose exit the test knows to come after every event it needs, they
    run at that process's exit instead (its main thread's sched_process_exit), before
    bpftrace is stopped: bpftrace 0.17 runs END only once it has detached its probes, and
    on a busy host that has taken minutes (see bpftrace_stop)."""
    mark = 'printf("%s\\n");' % BPFTRACE_END
    if at_exit_of is None:
        script += " END { %s %s }" % (end, mark)
    else:
        script += (" tracepoint:sched:sched_process_exit /pid == %d && tid == %d/ { %s %s }"
                   % (at_exit_of, at_exit_of, end, mark))
    argv = ["bpftrace", "-B", "line", "-e", script]
    if "tracepoint:" in script and not os.path.isdir("/sys/kernel/tracing/events/sched"):
        # bpftrace reads a tracepoint's format from tracefs: where the host has not
        # mounted it, it is mounted in a mount namespace of bpftrace's own, gone with it.
        argv = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                'mount -t tracefs nodev /sys/kernel/tracing && exec "$@"', "sh"] + argv
    # Its per-CPU buffers, 4 MiB rather than 256 KiB: a reference that prints a line per
    # call (thousands a second) fell behind on the busy host and lost events.
    env = dict(os.environ)
    env.setdefault("BPFTRACE_PERF_RB_PAGES", "1024")
    bt = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          env=env)
    _children.append(bt)
    seen = []
    while not (seen and seen[-1].startswith("Attaching")) and len(seen) < 5:
        seen.append(bt.stdout.readline())  # a warning about RLIMIT_MEMLOCK may come first
    check(seen[-1].startswith("Attaching"), "bpftrace attached: %s" % seen)
    bt.lines, bt.at_exit = [], at_exit_of is not None
    bt.reader = threading.Thread(target=lambda: bt.lines.extend(iter(bt.stdout.readline, "")),
                                 daemon=True)
    bt.reader.start()
    time.sleep(1)  # bpftrace prints "Attaching" before the probes are in
    return bt


def bpftrace_lost(output):
    """The events bpftrace said it lost ("Lost N events"), in its output so far."""
    return sum(int(m.group(1)) for m in re.finditer(r"^Lost (\d+) events", output, re.M))


def bpftrace_settle(bt, done, timeout=30):
    """Waits, bpftrace still running, until done(its lines so far) holds and its output has
    been quiet for 0.3 s; False if that took longer than timeout. bpftrace reads each CPU's
    buffer as events wake it, but its Ctrl-C handler leaves what it has not read yet: on a
    busy host it can fall that far behind, so a test that knows what must come waits for it
    here (the judging is left to the test)."""
    seen = [len(bt.lines), time.monotonic()]
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if len(bt.lines) != seen[0]:
            seen[:] = [len(bt.lines), time.monotonic()]
        elif time.monotonic() - seen[1] >= 0.3 and done(list(bt.lines)):
            return True
        time.sleep(0.05)
    return False


def bpftrace_stop(bt, timeout=180, settled=False):
    """Ends a bpftrace started by bpftrace() with Ctrl-C and returns all it printed after
    attaching but its END line. Events printed on other CPUs can come after that line
    (bpftrace reads a buffer per CPU: test_requests once lost a request's last decodes
    that way), so the lines are taken once the output has been quiet for half a second
    after it. bpftrace 0.17 detaches its probes before it runs END, and detaching uprobes
    waits for RCU grace periods: over 180 s seen on a busy 2-CPU host. So when the test
    has already waited for what it needs (settled: bpftrace_settle()) and prints nothing
    at END, the lines so far are taken at once; when its END line comes at a process's
    exit (bpftrace(at_exit_of=)), it is waited for before the Ctrl-C; either way bpftrace
    is left to finish on its own (or be killed at the test's end)."""
    if not bt.at_exit:
        bt.send_signal(signal.SIGINT)
    if not settled:
        poll("bpftrace's END line",
             lambda: any(line.startswith(BPFTRACE_END) for line in bt.lines),
             timeout=timeout, interval=0.1)
        seen = [len(bt.lines), time.monotonic()]

        def quiet():
            if len(bt.lines) != seen[0]:
                seen[:] = [len(bt.lines), time.monotonic()]
            return time.monotonic() - seen[1] >= 0.5
        poll("bpftrace's output to end", quiet, timeout=30, interval=0.1)
    if bt.at_exit:
        bt.send_signal(signal.SIGINT)
    return "".join(line for line in list(bt.lines) if not line.startswith(BPFTRACE_END))


def hog(cpu=None):
    """A busy loop named lphog, on one CPU or where the scheduler puts it; returned once
    its name is set."""
    pin = ["taskset", "-c", str(cpu)] if cpu is not None else []
    p = subprocess.Popen(pin + [sys.executable, "-c",
                                "import ctypes\nctypes.CDLL(None).prctl(15, b'lphog', 0, 0, 0)\n"
                                "while True: pass"])
    _children.append(p)
    poll("the hog's name", lambda: open("/proc/%d/comm" % p.pid).read().strip() == "lphog")
    return p


def proc_stat(pid, tid=None):
    """The fields of /proc/PID/stat (or of a thread's) after the command name: [0] is the
    state, field N of proc(5) is [N - 3]."""
    path = "/proc/%d/stat" % pid if tid is None else "/proc/%d/task/%s/stat" % (pid, tid)
    with open(path) as f:
        return f.read().rsplit(")", 1)[1].split()


def proc_state(pid, tid=None):
    """The state letter of a process or one of its threads (R, S, D, T, ...)."""
    return proc_stat(pid, tid)[0]


def proc_cpu_seconds(pid, stat=None):
    """A process's CPU seconds (utime + stime, its exited threads' included), from
    /proc/PID/stat or from fields proc_stat() already read."""
    st = stat or proc_stat(pid)
    return (int(st[11]) + int(st[12])) / os.sysconf("SC_CLK_TCK")


def thread_schedstat(pid):
    """{tid: (on-CPU ns, run-queue ns)}: the kernel's own account of each live thread of
    pid (/proc/PID/task/TID/schedstat); a thread that exits meanwhile is left out."""
    out = {}
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/schedstat" % (pid, tid)) as f:
                on, rq = (int(x) for x in f.read().split()[:2])
        except OSError:
            continue
        out[int(tid)] = (on, rq)
    return out


def stolen_ns():
    """The time the hypervisor has taken from this machine's vCPUs, all of them together,
    in ns (/proc/stat's steal, in clock ticks). A thread's CPU clock leaves it out
    (CONFIG_PARAVIRT_TIME_ACCOUNTING); times between its switches include it."""
    with open("/proc/stat") as f:
        fields = f.readline().split()
    return int(fields[8]) * 1e9 / os.sysconf("SC_CLK_TCK") if len(fields) > 8 else 0.0


def read_json_line(proc, what, timeout=60):
    """The next line a child prints on its stdout pipe, parsed as JSON."""
    r, _, _ = select.select([proc.stdout], [], [], timeout)
    if not r:
        raise Timeout("%s printed nothing within %ds" % (what, timeout))
    line = proc.stdout.readline()
    if not line:
        raise AssertionError("%s exited with %s before printing" % (what, proc.wait()))
    return json.loads(line)


def run_found(argv, d, comm, timeout=300, then=()):
    """Runs a workload that prints {"pid": N} and then waits for "go" on stdin (lpops,
    lpops-noops): once daemon d has found it running ggml (and logged each line of then, a
    format of the pid, such as "pid %d: precise mode on": the prober attaches on its own
    thread, after the find), says go, and returns its pid and the last JSON line it
    printed, after it exited."""
    p = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    _children.append(p)
    pid = read_json_line(p, comm, 30)["pid"]
    d.wait_log("pid %d (%s) runs ggml" % (pid, comm))
    for line in then:
        d.wait_log(line % pid)
    p.stdin.write(b"go\n")
    p.stdin.flush()
    last = read_json_line(p, comm, timeout)
    p.stdin.close()
    p.wait(timeout=60)
    return pid, last


class Fixture:
    """tests/fixtures/lpfixture: waits for "go" on stdin, prints one JSON line of what it
    did, and with --hold stays alive (threads parked) until released."""

    def __init__(self, *args):
        self.proc = subprocess.Popen([LPFIXTURE, "--wait-go"] + list(args),
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        _children.append(self.proc)
        self.pid = self.proc.pid

    def go(self):
        self.proc.stdin.write(b"go\n")
        self.proc.stdin.flush()

    def result(self, timeout=60):
        return read_json_line(self.proc, "the fixture", timeout)

    def release(self, timeout=20):
        try:
            self.proc.stdin.write(b"exit\n")
            self.proc.stdin.close()
        except BrokenPipeError:
            pass
        return self.proc.wait(timeout=timeout)


def team_barrier_args(iters=60000, steady=False):
    """lpggml's arguments for libgomp's kind of barrier (liblpggml-omp.so with --team: spin
    at most 10 us, then futex until the last thread of the team wakes the others) after 40
    us of matmul on two threads: jittered by +-50 %, or at a steady pace (40 us on one
    thread, 20 on the other, every time), as a decode repeats its graph."""
    return ["--lib", os.path.join(os.path.dirname(os.path.abspath(LPGGML)),
                                  "liblpggml-omp.so"),
            "--team", "--threads", "2", "--iters", str(iters), "--mm-us", "40",
            "--bar-spin-us", "10", "--gen", "0", "--prompt", "1"] + (
                ["--skew", "50"] if steady else ["--jitter", "50"])


def barrier_share(res):
    """The barrier's share of lpggml's compute threads' CPU time, barrier and matmul, by
    their own clocks (its result line), and that CPU time in ns."""
    cpu_ns = res["barrier_cpu_ns"] + res["matmul_cpu_ns"]
    return res["barrier_cpu_ns"] / cpu_ns, cpu_ns


def sampled_barrier_share(shares):
    """The same share as sampled: sync over sync and matmul, of op group shares."""
    both = shares["sync"] + shares["matmul"]
    return shares["sync"] / both if both else 0.0


class Lpggml:
    """tests/fixtures/lpggml: dlopens liblpggml.so (functions named like ggml's), prints its
    pid, waits for "go", does known matmul, barrier and decode work, prints what it did;
    with --hold it then stays alive (one thread, blocked) until its stdin closes."""

    def __init__(self, *args, wrap=lambda argv: argv):
        self.proc = subprocess.Popen(wrap([LPGGML, "--wait-go"] + list(args)),
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        _children.append(self.proc)
        self.pid = self.line()["pid"]

    def line(self, timeout=60):
        return read_json_line(self.proc, "lpggml", timeout)

    def go(self):
        self.proc.stdin.write(b"go\n")
        self.proc.stdin.flush()

    def finish(self):
        self.go()
        res = self.line()
        self.proc.stdin.close()
        self.proc.wait(timeout=20)
        return res


def observe(fixture_args, daemon_args=(), live=False, read=None):
    """Runs the fixture under a private `llmprofd --once --pid`. With live, the report is
    taken while the fixture is still alive (threads parked: the live-map path); otherwise
    the fixture exits first and the daemon reports by itself (the exit-record path). The
    daemon tracks the fixture alone, not an LLM the host runs beside the suite. With live,
    read(pid) is called just before the report, and what it returns is res["read"].
    Returns (daemon, report, the fixture's own account, the fixture's pid)."""
    fx = Fixture(*(list(fixture_args) + (["--hold"] if live else [])))
    d = Daemon("--once", "--no-discover", "--pid", str(fx.pid), *daemon_args)
    d.wait_ready()
    fx.go()
    res = fx.result()
    if live:
        if read:
            res["read"] = read(fx.pid)
        d.stop()
        fx.release()
    else:
        fx.release()
        if d.wait_exit() != 0:
            raise AssertionError("llmprofd failed:\n" + d.log())
    return d, d.report(), res, fx.pid


def futex_waits_on(proc, addrs):
    """The wait counts the report gives for each of the fixture's futex words."""
    by = {f["uaddr"]: f["waits"] for f in proc["futex"]["top"]}
    return [by.get(a, 0) for a in addrs]


def proc_of(report, pid):
    for p in report["processes"]:
        if p["pid"] == pid:
            return p
    raise AssertionError("pid %d not in report: %s" % (pid, [p["pid"] for p in report["processes"]]))


def unused_pid():
    """A pid no process has now (from the top of the range, so not reused soon)."""
    pid_max = int(open("/proc/sys/kernel/pid_max").read())
    for pid in range(pid_max - 1, 1, -1):
        if not os.path.exists("/proc/%d" % pid):
            return pid


def free_port():
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def fdinfo_ids(pid, field):
    """The ids after field ("prog_id:", "map_id:") in process pid's /proc/PID/fdinfo: the
    BPF programs or maps it holds open (its own daemon's, never a user's llmprofd that may
    run beside the tests). Debian's bpftool 7.1 prints no owning pids."""
    ids = set()
    d = "/proc/%d/fdinfo" % pid
    try:
        names = os.listdir(d)
    except OSError:
        return ids
    for fd in names:
        try:
            with open(os.path.join(d, fd)) as f:
                for line in f:
                    if line.startswith(field):
                        ids.add(int(line.split()[1]))
        except OSError:
            pass
    return ids


def prog_ids_of(pid):
    """The ids of the BPF programs process pid holds open."""
    return fdinfo_ids(pid, "prog_id:")


def map_keys(pid, name):
    """The keys of the map called name that process pid holds open, as bpftool formats them
    from the map's BTF (a __u32 key: an int); None if it holds no such map."""
    ids = fdinfo_ids(pid, "map_id:")
    out = subprocess.run(["bpftool", "-j", "map", "show"], capture_output=True, text=True,
                         check=True).stdout
    for m in json.loads(out):
        if m.get("id") in ids and m.get("name") == name:
            got = subprocess.run(["bpftool", "-j", "map", "dump", "id", str(m["id"])],
                                 capture_output=True, text=True, check=True)
            return [e["formatted"]["key"] for e in json.loads(got.stdout)]
    return None


def attached_programs(pid):
    """Sorted names of the programs process pid has attached now, as the kernel has it: the
    programs of the bpf_link fds it holds (its program fds stay open while detached)."""
    names = loaded_programs()
    out = []
    fds = "/proc/%d/fd" % pid
    for fd in os.listdir(fds):
        try:
            if os.readlink(os.path.join(fds, fd)) != "anon_inode:bpf_link":
                continue
            with open("/proc/%d/fdinfo/%s" % (pid, fd)) as f:
                out += [names.get(int(x.split()[1]), "") for x in f if x.startswith("prog_id:")]
        except OSError:
            continue
    return sorted(out)


def loaded_programs():
    """{id: name} of every BPF program loaded on the host."""
    out = subprocess.run(["bpftool", "-j", "prog", "show"], capture_output=True, text=True,
                         check=True).stdout
    return {p["id"]: p.get("name", "") for p in json.loads(out)}


def wait_unloaded(ids, what="our daemon's BPF programs", timeout=10):
    """Polls until none of the program ids is loaded (the kernel frees programs after an
    RCU grace period). Ids are never reused, so this judges only those programs."""
    poll("%s (%d) to be unloaded" % (what, len(ids)),
         lambda: not (set(ids) & set(loaded_programs())), timeout=timeout)
    return True


def new_lp_programs(before):
    """Our programs (named lp_*) loaded now that were not loaded at `before` (a dict from
    loaded_programs()): what a short-lived daemon started in between left behind."""
    top = max(before) if before else 0
    return [i for i, n in loaded_programs().items() if n.startswith("lp_") and i > top]
