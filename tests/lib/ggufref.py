# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
"""What generating one token reads of a GGUF model, computed here from the file as the
reference for llmprofd's header reader (daemon/formats/gguf.c): every tensor's bytes (by ggml's
block sizes, not by the offsets the daemon uses), less the token embeddings when the model
has its own output layer, less the experts a mixture leaves out."""
import struct

# ggml type: (elements per block, bytes per block), for the types gen_gguf.py writes and
# the common quantisations.
TYPES = {0: (1, 4), 1: (1, 2), 2: (32, 18), 3: (32, 20), 6: (32, 22), 7: (32, 24),
         8: (32, 34), 10: (256, 84), 11: (256, 110), 12: (256, 144), 13: (256, 176),
         14: (256, 210), 30: (1, 2)}
SCALAR = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


def per_token_bytes(path):
    kv, tensors = read(path)
    sizes, output, embd, experts_bytes = 0, False, 0, 0
    for name, (_dims, _ttype, b) in tensors.items():
        sizes += b
        if name == "token_embd.weight":
            embd += b
        elif name == "output.weight":
            output = True
        elif name.endswith("_exps.weight"):
            experts_bytes += b
    total = sizes - (embd if output else 0)
    count = next((v for k, v in kv.items() if k.endswith(".expert_count")), 0)
    used = next((v for k, v in kv.items() if k.endswith(".expert_used_count")), 0)
    if count and used and used < count:
        total -= experts_bytes - experts_bytes // count * used
    return total


def read(path):
    """The header's key-values, and every tensor's (dims, ggml type, bytes) by name."""
    with open(path, "rb") as f:
        data = f.read(64 << 20)
    pos = 0

    def take(fmt):
        nonlocal pos
        v = struct.unpack_from("<" + fmt, data, pos)
        pos += struct.calcsize("<" + fmt)
        return v[0] if len(v) == 1 else v

    def string():
        nonlocal pos
        n = take("Q")
        s = data[pos:pos + n]
        pos += n
        return s.decode("utf-8", "replace")

    def value(t):
        nonlocal pos
        if t in SCALAR:
            v = struct.unpack_from("<" + {1: "B", 2: "H", 4: "I", 8: "Q"}[SCALAR[t]], data, pos)[0]
            pos += SCALAR[t]
            return v
        if t == 8:
            return string()
        et, n = take("I"), take("Q")
        return [value(et) for _ in range(n)]

    assert data[:4] == b"GGUF"
    pos = 4
    _version, ntensors, nkv = take("I"), take("Q"), take("Q")
    kv = {}
    for _ in range(nkv):
        k = string()
        kv[k] = value(take("I"))
    tensors = {}
    for _ in range(ntensors):
        name = string()
        dims = [take("Q") for _ in range(take("I"))]
        ttype, _off = take("I"), take("Q")
        n = 1
        for d in dims:
            n *= d
        block, size = TYPES[ttype]
        tensors[name] = (dims, ttype, n // block * size)
    return kv, tensors
