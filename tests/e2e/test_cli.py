# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
"""e2e tier: what a user sees on the command line. Bad usage is refused with a message
naming the problem (exit 2); an unknown pid or missing privileges fail clearly (exit 1)."""
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
import lptest as t  # noqa: E402


def run(*args, user=None):
    # Never the host's /etc/llmprofd: a user's settings must not change what is tested.
    if args and args[0] not in ("--help", "--version"):
        args = ("--config", "/dev/null") + args
    cmd = [t.LLMPROFD] + list(args)
    if user:
        cmd = ["setpriv", "--reuid=" + user, "--regid=nogroup", "--clear-groups", t.copy_for_others(t.LLMPROFD)] + list(args)
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    return p.returncode, p.stdout, p.stderr


def expect(args, code, text, user=None):
    rc, out, err = run(*args, user=user)
    t.check(rc == code and text in err,
            "llmprofd %s -> exit %d (want %d), says %r%s"
            % (" ".join(args), rc, code, text, "" if text in err else "; said: " + err.strip()[-300:]))




def main():
    rc, out, _ = run("--help")
    t.check(rc == 0 and "Usage: llmprofd" in out and "Examples:" in out, "--help prints usage and examples")
    rc, out, _ = run("--version")
    t.check(rc == 0 and out.startswith("llmprofd "), "--version")

    expect(["--pid", "abc"], 2, "--pid: 'abc' is not a process id")
    expect(["--pid", "0"], 2, "is not a process id")
    expect(["--pid", "99999999999"], 2, "is not a process id")
    expect(["--comm", "a-name-longer-than-15"], 2, "cannot be a comm")
    expect(["--max-processes", "0"], 2, "--max-processes: '0' is not a number from 1")
    expect(["--max-threads", "12x"], 2, "is not a number")
    expect(["--once", "--seconds", "-1"], 2, "--seconds: '-1' is not a number from 0.001 to 10000000")
    expect(["--seconds", "5"], 2, "--seconds goes with --once")
    expect(["--ringbuf-kib", "100"], 2, "--ringbuf-kib: '100' is not a power of two")
    expect(["--futex-source", "kprobe"], 2, "is not auto, tracepoint, raw, off or sched")
    expect(["--mmap-source", "fentry"], 2, "is not auto, lock, tracepoint or raw")
    expect(["stray"], 2, "unexpected argument 'stray'")
    expect(["--bogus"], 2, "unrecognized option")

    if os.geteuid() == 0:
        pid = t.unused_pid()
        expect(["--once", "--pid", str(pid)], 1, "--pid %d: no such process" % pid)
        expect(["--once", "--pid", "1"], 1, "permission denied loading BPF programs", user="nobody")


t.run(main, timeout=100, need_root=False)
