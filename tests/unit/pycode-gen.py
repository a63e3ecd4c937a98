# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
"""The data of tests/unit/test_pycode.c: two functions' 3.11 location tables and what
co_lines() says of each instruction, printed as C. Run with the python3.11 they describe."""
import sys
src = '''
def f(x):
    y = x + 1
    for i in range(3):
        y += i
    return y

def g(a,
      b):
    s = [i * a
         for i in range(b)]
    if a > 2:
        pass
''' + "\n" * 300 + '''
    return sum(s)
'''
ns = {}
exec(compile(src, "t.py", "exec"), ns)
out = []
for name in ("f", "g"):
    co = ns[name].__code__
    lt = co.co_linetable
    exp = []
    for start, end, line in co.co_lines():
        for off in range(start, end, 2):
            exp.append((off, line if line is not None else co.co_firstlineno))
    out.append((name, co.co_firstlineno, lt, exp))
for name, first, lt, exp in out:
    print("static const uint8_t lt_%s[] = {%s};" % (name, ", ".join(str(b) for b in lt)))
    print("static const int want_%s[][2] = {%s};" % (name, ", ".join("{%d, %d}" % e for e in exp)))
    print("/* firstline %d */" % first)
print(sys.version)
