# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
"""Probe sites held against objdump, on every function of real x86-64 code: libc, the
node-llama-cpp ggml and llama libraries, and llmprofd itself.

For each function whose probe moves off its first instruction, objdump must agree that:
- the site is an instruction boundary, and the instruction there is the kind named;
- every instruction before it is one that falls through (no branch), writes no memory
  and leaves %rsp alone;
- no jump or call in the function targets an address after its start up to the site,
  so the probe fires once per call, as an entry probe would."""
import glob
import os
import platform
import re
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
import lptest as t  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
WORKLOAD = os.path.join(HERE, "..", "workload", "node_modules", "@node-llama-cpp")
SKIPPABLE = {"endbr64", "mov", "movzbl", "movzwl", "movsbl", "movswl", "movzbw", "movsbw",
             "movslq", "movsbq", "movswq", "movzbq", "movzwq", "movabs", "lea", "cmp", "test",
             "add", "sub", "and", "or", "xor"}
NO_WRITE = {"cmp", "test"}
RSP = {"%rsp", "%esp", "%sp", "%spl"}
KIND = {"push": lambda m: m == "push",
        "jcc": lambda m: m.startswith("j") and m != "jmp",
        "jmp": lambda m: m == "jmp",
        "call": lambda m: m == "call",
        "nop": lambda m: m.startswith("nop") or m == "xchg"}
TARGET = re.compile(r"^([0-9a-f]+) <")


def disassemble(path):
    """{address: (mnemonic, operands)} and the set of direct branch targets, per file."""
    out = subprocess.run(["objdump", "-d", "-w", "--no-show-raw-insn", "-M", "suffix", path],
                         capture_output=True, text=True, check=True).stdout
    insns, targets = {}, set()
    for line in out.splitlines():
        m = re.match(r"^\s*([0-9a-f]+):\t(\S+)\s*(.*)$", line)
        if not m:
            continue
        addr, mnem, ops = int(m.group(1), 16), m.group(2), m.group(3)
        if mnem in ("bnd", "notrack", "ds", "cs"):
            mnem, _, ops = ops.partition(" ")
        mnem = strip_suffix(mnem)
        insns[addr] = (mnem, ops)
        if (mnem.startswith("j") or mnem == "call") and not ops.startswith("*"):
            tm = TARGET.match(ops)
            if tm:
                targets.add(int(tm.group(1), 16))
    return insns, targets


def strip_suffix(mnem):
    """objdump -M suffix spells movl, pushq, jmpq: back to the base mnemonic."""
    if mnem in SKIPPABLE or mnem in ("push", "call", "jmp", "nop"):
        return mnem
    for base in ("push", "call", "jmp", "movabs", "mov", "lea", "cmp", "test", "add", "sub", "and",
                 "or", "xor", "nop"):
        if mnem[:-1] == base and mnem[-1] in "bwlq":
            return base
    return mnem


def sites(path):
    out = subprocess.run([os.environ.get("TEST_X86ENTRY", "build/tests/test_x86entry"), "--list", path],
                         capture_output=True, text=True, check=True).stdout
    for line in out.splitlines()[1:]:
        vaddr, size, skip, site, name = line.split(" ", 4)
        yield int(vaddr, 16), int(size), int(skip), site, name


def check_file(path, expect):
    insns, targets = disassemble(path)
    moved = entry = bad = 0
    kinds = {}
    seen = set()
    for vaddr, size, skip, site, name in sites(path):
        seen.add(name)
        if name in expect:
            t.check((site, skip) == expect[name], "%s: %s probed at %s+%d, expected %s+%d"
                    % (os.path.basename(path), name, site, skip, *expect[name]))
        if site == "entry":
            entry += 1
            continue
        kinds[site] = kinds.get(site, 0) + 1
        if skip == 0:
            if vaddr not in insns or not KIND[site](insns[vaddr][0]):
                bad += 1
                print("  %s: first instruction %s is not a %s" % (name, insns.get(vaddr), site))
            continue
        moved += 1
        problems = []
        at = vaddr + skip
        if at not in insns:
            problems.append("site +%d is not an instruction boundary" % skip)
        elif not KIND[site](insns[at][0]):
            problems.append("instruction at +%d is %s, not %s" % (skip, insns[at][0], site))
        a = vaddr
        while a < at and not problems:
            if a not in insns:
                problems.append("no instruction at +%d" % (a - vaddr))
                break
            mnem, ops = insns[a]
            dest = ops.split(",")[-1].strip() if ops else ""
            if mnem not in SKIPPABLE:
                problems.append("+%d: %s %s is not skippable" % (a - vaddr, mnem, ops))
            elif mnem not in NO_WRITE and mnem != "endbr64" and (dest in RSP or "(" in dest):
                problems.append("+%d: %s %s writes %s" % (a - vaddr, mnem, ops, dest))
            a = next_insn(insns, a)
        hit = [x for x in targets if vaddr < x <= at]
        if hit:
            problems.append("branch targets %s inside the skipped prologue" % [hex(x) for x in hit])
        if problems:
            bad += 1
            print("  %s (%s+%d): %s" % (name, site, skip, "; ".join(problems)))
    for name in set(expect) - seen:
        t.check(False, "%s: %s not found" % (os.path.basename(path), name))
    return moved, entry, bad, kinds


def next_insn(insns, a):
    for d in range(1, 16):
        if a + d in insns:
            return a + d
    return a + 16


def skip(why):
    print("skipped: " + why)
    sys.exit(t.SKIP)


def main():
    if platform.machine() != "x86_64":
        skip("x86-64 only")
    if not shutil.which("objdump"):
        skip("objdump (binutils) is needed")
    files = [p for p in ("/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib/x86_64-linux-gnu/libc.so.6")
             if os.path.exists(p)][:1]
    bins = os.path.join(WORKLOAD, "linux-x64", "bins", "linux-x64")
    ggml = sorted(glob.glob(os.path.join(bins, "libggml-cpu-*.so")))[:2]
    files += ggml + glob.glob(os.path.join(bins, "libllama.*so"))
    files.append(os.environ["LLMPROFD"])
    t.check(len(files) >= 5, "libc, ggml, llama and llmprofd found: %d files" % len(files))
    # ggml's hottest functions: their probes leave endbr64, which the kernel single-steps.
    expect = {"ggml": {"ggml_barrier": ("jcc", 14), "ggml_compute_forward_mul_mat": ("push", 4)},
              "llama": {"llama_decode": ("push", 4)}}
    total_moved = 0
    for path in files:
        kind = "ggml" if path in ggml else "llama" if "libllama" in path else None
        moved, entry, bad, kinds = check_file(path, expect.get(kind, {}))
        total_moved += moved
        t.check(bad == 0, "%s: %d sites moved past the first instruction, %d left there, "
                "%d wrong; kinds %s" % (os.path.basename(path), moved, entry, bad, kinds))
    t.check(total_moved > 1000, "%d probe sites moved in all" % total_moved)


t.run(main, timeout=200, need_root=False)
