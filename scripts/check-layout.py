#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
"""The daemon's floor plan, as daemon/README.md states it, held against its #include lines.

A room is a .c file with its .h (daemon/<folder>/<room>.[ch]; main.c and options at the
top). Fails, naming what to change, when:
- a room includes a daemon header by its bare name (every include names its folder, so
  that the tree and the dependencies say the same);
- two rooms include each other, directly or around a longer loop;
- a folder reaches a folder that reaches it back, or one after it in daemon/README.md's
  table (the folders are stages: each may use the ones before it, never the ones after),
  or one its own README's "May use:" line does not name;
- a folder has no README.md, or a .c file of more than LIMIT lines is not named in its
  folder's README with the reason it stays whole.
Exit status 0 when the plan holds, 1 otherwise."""
import os
import re
import sys

LIMIT = 650  # "about 600": a room that grew a little past it is not yet two rooms
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "daemon")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def rooms():
    """{room: folder} ('' for the top) and {room: [paths]}."""
    where, paths = {}, {}
    for folder, _, files in os.walk(ROOT):
        rel = os.path.relpath(folder, ROOT)
        rel = "" if rel == "." else rel
        for f in files:
            name, ext = os.path.splitext(f)
            if ext in (".c", ".h"):
                key = (rel + "/" if rel else "") + name
                where[key] = rel
                paths.setdefault(key, []).append(os.path.join(folder, f))
    return where, paths


def cycles(graph):
    """Strongly connected components of more than one node (Tarjan, iterative)."""
    index, low, on, stack, out, n = {}, {}, set(), [], [], [0]
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = n[0]
        n[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = n[0]
                    n[0] += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(graph.get(w, ())))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(sorted(comp))
    return out


def main():
    where, paths = rooms()
    bare = {k.rsplit("/", 1)[-1]: k for k in where}
    problems = []
    graph = {k: set() for k in where}
    for room, files in sorted(paths.items()):
        for path in files:
            for inc in INCLUDE.findall(open(path, encoding="utf-8").read()):
                target = inc[:-2] if inc.endswith(".h") else None
                if target is None:
                    continue
                if target in where:
                    if target != room:
                        graph[room].add(target)
                elif "/" not in target and target in bare:
                    problems.append('%s: #include "%s" names no folder: "%s.h"'
                                    % (os.path.relpath(path, ROOT), inc, bare[target]))
    for comp in cycles(graph):
        problems.append("rooms that include each other: " + " <-> ".join(comp))
    folders = {}
    for room, deps in graph.items():
        for d in deps:
            a, b = where[room] or "(top)", where[d] or "(top)"
            if a != b:
                folders.setdefault(a, set()).add(b)
    for comp in cycles(folders):
        why = ["%s -> %s" % (room, d) for room, deps in sorted(graph.items())
               for d in sorted(deps) if (where[room] or "(top)") in comp and
               (where[d] or "(top)") in comp and where[room] != where[d]]
        problems.append("folders that reach each other: %s (%s)"
                        % (" <-> ".join(comp), ", ".join(why)))
    # The stages in daemon/README.md's order; each folder's own "May use:" line.
    top = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    order = re.findall(r"^\| `([a-z]+)/` \|", top, re.M)
    for f in sorted(set(where.values()) - {""} - set(order)):
        problems.append("daemon/%s/ is not in daemon/README.md's table of folders" % f)
    for a, deps in sorted(folders.items()):
        if a == "(top)" or a not in order:
            continue
        readme = os.path.join(ROOT, a, "README.md")
        may = re.search(r"^May use: (.*)$", open(readme, encoding="utf-8").read(), re.M) \
            if os.path.exists(readme) else None
        allowed = set(re.findall(r"`([a-z]+)/`", may[1])) if may else set()
        for b in sorted(deps):
            why = ", ".join("%s -> %s" % (room, d) for room, ds in sorted(graph.items())
                            for d in sorted(ds) if where[room] == a and where[d] == b)
            if b == "(top)" or b not in order or order.index(b) > order.index(a):
                problems.append("daemon/%s/ uses daemon/%s/, a later stage (%s)"
                                % (a, b if b != "(top)" else ".", why))
            elif b not in allowed:
                problems.append("daemon/%s/ uses daemon/%s/, which its README's \"May use:\" "
                                "does not name (%s)" % (a, b, why))
    for folder in sorted(set(where.values())):
        readme = os.path.join(ROOT, folder, "README.md")
        if not os.path.exists(readme):
            problems.append("daemon/%s has no README.md: what it owns, what it may use"
                            % (folder or "."))
            continue
        text = open(readme, encoding="utf-8").read()
        for f in sorted(os.listdir(os.path.join(ROOT, folder))):
            if not f.endswith(".c"):
                continue
            n = sum(1 for _ in open(os.path.join(ROOT, folder, f), encoding="utf-8"))
            if n > LIMIT and "`%s`" % f not in text:
                where_ = "daemon/" + (folder + "/" if folder else "")
                problems.append("%s%s has %d lines: split it, or say in %sREADME.md why it "
                                "stays whole" % (where_, f, n, where_))
    for p in problems:
        print("check-layout: " + p, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
