# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
"""The system tier's machines: a Debian 12 root filesystem made by deploy/mkrootfs.sh
(debootstrap, Debian's packages only; cached), the project's .deb (cpack, from the build
the tests run), and a container booted from that root filesystem with a real systemd as
its PID 1 (systemd-nspawn), driven from outside with nsenter as an administrator types."""
import os
import shutil
import signal
import subprocess

import lptest as t

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
CACHE = os.environ.get("LLMPROF_ROOTFS_CACHE", "/var/cache/llmprof-rootfs")


def missing_tools():
    """What the system tier needs that this host lacks, as a sentence, or None."""
    lack = [x for x in ("debootstrap", "systemd-nspawn", "nsenter", "cpack", "dpkg-shlibdeps")
            if not shutil.which(x)]
    if lack:
        return "%s not installed (scripts/install-deps.sh installs them)" % ", ".join(lack)
    return None


def rootfs():
    """deploy/mkrootfs.sh's root filesystem under CACHE: made once (about 40 s from a
    Debian mirror), then reused for as long as its package list stays the same."""
    return t._built([os.path.join(ROOT, "deploy", "mkrootfs.sh"),
                     os.path.join(CACHE, "bookworm")], timeout=1200)


def package(work):
    """The .deb of the build under test (the directory of $LLMPROFD), made with cpack into
    work (not the build directory, which other runs may be packing too)."""
    build = os.path.dirname(os.environ["LLMPROFD"])
    p = subprocess.run(["cpack", "-G", "DEB", "--config",
                        os.path.join(build, "CPackConfig.cmake"), "-B", work],
                       capture_output=True, text=True, timeout=600)
    debs = [f for f in os.listdir(work) if f.endswith(".deb")]
    if p.returncode != 0 or len(debs) != 1:
        raise AssertionError("cpack failed:\n%s%s" % (p.stdout[-2000:], p.stderr[-2000:]))
    return os.path.join(work, debs[0])


class Machine:
    """A container booted with systemd-nspawn -b from root (read-only; its writes go to a
    tmpfs overlay and vanish with it), on a network of its own (--private-network: its
    loopback's 127.0.0.1:9713 is not the host's), with every capability and the bpf and
    perf_event_open calls nspawn's filter refuses by default. binds: [(host, path there)],
    read-only."""

    def __init__(self, root, binds=(), work=None):
        self.work = work or t.tmpdir("llmprof-machine-")
        os.makedirs(self.work, exist_ok=True)
        self.console = os.path.join(self.work, "console.log")
        argv = ["systemd-nspawn", "-b", "-D", root, "--volatile=overlay", "--register=no",
                "--keep-unit", "--private-network", "--capability=all",
                "--system-call-filter=bpf perf_event_open", "-M", "lptest"]
        argv += ["--bind-ro=%s:%s" % b for b in binds]
        self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL,
                                     stdout=open(self.console, "w"), stderr=subprocess.STDOUT)
        t._children.append(self.proc)
        self.leader = t.child_of(self.proc.pid, comm="systemd", timeout=60)

        def booted():
            if self.proc.poll() is not None:
                raise AssertionError("systemd-nspawn exited (%d):\n%s"
                                     % (self.proc.returncode, self.console_text()[-3000:]))
            state = self.sh("systemctl is-system-running", check=False).stdout.strip()
            return state in ("running", "degraded") and state
        self.state = t.poll("the container's systemd to finish booting", booted, timeout=120,
                            interval=0.5)

    def console_text(self):
        with open(self.console, errors="replace") as f:
            return f.read()

    def sh(self, cmd, user=None, check=True, timeout=120):
        """cmd run by sh in the container, in all its namespaces, from /, as root or as
        user (runuser): a CompletedProcess with text output."""
        if user:
            cmd = "runuser -u %s -- sh -c '%s'" % (user, cmd.replace("'", "'\\''"))
        p = subprocess.run(["nsenter", "-t", str(self.leader), "-a", "--", "sh", "-c",
                            "cd / && " + cmd], capture_output=True, text=True,
                           errors="replace", timeout=timeout)
        if check and p.returncode != 0:
            raise AssertionError("in the container: %s: exit %d\n%s%s"
                                 % (cmd, p.returncode, p.stdout[-3000:], p.stderr[-3000:]))
        return p

    def path(self, p):
        """p in the container's file system, as the host reaches it."""
        return "/proc/%d/root%s" % (self.leader, p)

    def show(self, unit, *props):
        """systemctl show's properties of unit, as a dict."""
        out = self.sh("systemctl show %s -p %s" % (unit, ",".join(props))).stdout
        return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)

    def stop(self, timeout=60):
        """Powers the container off as nspawn does at SIGTERM (systemd's shutdown)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                return self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise AssertionError("the container did not power off within %ds" % timeout)
        return self.proc.returncode
