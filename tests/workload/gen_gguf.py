#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
"""Write a random-weight llama-architecture GGUF model.

No weights can be downloaded on the machines llmprofd is tested on, and none are
needed: llama.cpp's speed does not depend on what the weights say, only on their
shapes and types. This writes a GGUF v3 file that llama.cpp loads as an ordinary
llama model, with an SPM ("llama") tokenizer and Q8_0 or F16 weights.

    gen_gguf.py --shape tiny --type q8_0 tiny.gguf          # ~0.4 MB, for tests
    gen_gguf.py --shape tinyllama --type q8_0 tl.gguf       # ~1.1 GB, for benchmarks

Weights are deterministic for a given --seed. Pure standard library: large
tensors are produced with bytes-level slicing, so 1.1 GB takes seconds.
"""

import argparse
import os
import random
import struct
import sys

GGUF_MAGIC = b"GGUF"
GGUF_VERSION = 3
ALIGNMENT = 32

# gguf metadata value types
T_UINT32, T_INT32, T_FLOAT32, T_BOOL, T_STRING, T_ARRAY = 4, 5, 6, 7, 8, 9

# ggml tensor types
GGML_F32, GGML_F16, GGML_Q4_0, GGML_Q8_0 = 0, 1, 2, 8
FILE_TYPE = {GGML_F16: 1, GGML_Q8_0: 7, GGML_Q4_0: 2}  # llama_ftype: MOSTLY_F16, MOSTLY_Q8_0
QK8_0 = 32

SHAPES = {
    # n_vocab, n_embd, n_layer, n_head, n_head_kv, n_ff, n_ctx
    "tiny": dict(vocab=512, embd=64, layer=2, head=4, head_kv=2, ff=192, ctx=512),
    "small": dict(vocab=2048, embd=256, layer=4, head=8, head_kv=4, ff=768, ctx=1024),
    # ~110 MB in Q8_0: tens of ms per token on 2 cores, long enough to sample
    "medium": dict(vocab=8192, embd=1024, layer=8, head=16, head_kv=4, ff=2816, ctx=1024),
    # TinyLlama-1.1B's shape
    "tinyllama": dict(vocab=32000, embd=2048, layer=22, head=32, head_kv=4, ff=5632, ctx=2048),
}

# Weights have a standard deviation of about 0.02, like a trained model's, so
# activations stay finite through any number of layers.
WEIGHT_STD = 0.02


def gguf_str(s):
    b = s.encode()
    return struct.pack("<Q", len(b)) + b


class Metadata:
    def __init__(self):
        self.items = []

    def add(self, key, vtype, payload):
        self.items.append(gguf_str(key) + struct.pack("<I", vtype) + payload)

    def u32(self, key, v):
        self.add(key, T_UINT32, struct.pack("<I", v))

    def f32(self, key, v):
        self.add(key, T_FLOAT32, struct.pack("<f", v))

    def boolean(self, key, v):
        self.add(key, T_BOOL, struct.pack("<B", 1 if v else 0))

    def string(self, key, v):
        self.add(key, T_STRING, gguf_str(v))

    def array(self, key, etype, values):
        if etype == T_STRING:
            body = b"".join(gguf_str(v) for v in values)
        else:
            fmt = {T_FLOAT32: "<f", T_INT32: "<i"}[etype]
            body = b"".join(struct.pack(fmt, v) for v in values)
        self.add(key, T_ARRAY, struct.pack("<IQ", etype, len(values)) + body)


def spm_vocab(n_vocab):
    """<unk> <s> </s>, the 256 byte tokens, then distinct word pieces."""
    tokens = ["<unk>", "<s>", "</s>"] + ["<0x%02X>" % b for b in range(256)]
    types = [2, 3, 3] + [6] * 256  # UNKNOWN, CONTROL, BYTE
    letters = "etaoinshrdlucmfwypvbgkqjxz"
    pieces = ["\u2581"] + list(letters) + ["\u2581" + c for c in letters]
    n = 0
    while len(pieces) < n_vocab:  # two- and three-letter pieces, with and without "▁"
        a, b = letters[n % 26], letters[(n // 26) % 26]
        c = letters[(n // 676) % 26] if n >= 676 else ""
        pieces.append(a + b + c)
        pieces.append("\u2581" + a + b + c)
        n += 1
    need = n_vocab - len(tokens)
    if need < 0:
        sys.exit("gen_gguf: vocabulary must hold at least %d tokens" % len(tokens))
    tokens += pieces[:need]
    types += [1] * need  # NORMAL
    scores = [0.0] * 259 + [-float(i) for i in range(need)]
    return tokens, scores, types


def tensor_bytes(ttype, n):
    if ttype == GGML_F32:
        return 4 * n
    if ttype == GGML_F16:
        return 2 * n
    if ttype == GGML_Q4_0:
        return n // QK8_0 * (2 + QK8_0 // 2)
    return n // QK8_0 * (2 + QK8_0)


def gen_data(rng, ttype, n, fill=None):
    if fill is not None:  # norm weights: all ones
        return struct.pack("<f", fill) * n
    if ttype == GGML_Q8_0:
        # 34-byte blocks: f16 scale, 32 int8 quants uniform in [-128, 127]
        nblk = n // QK8_0
        buf = bytearray(rng.randbytes(nblk * 34))
        scale = struct.pack("<e", WEIGHT_STD / 73.9)  # uniform int8 has std 73.9
        buf[0::34] = scale[0:1] * nblk
        buf[1::34] = scale[1:2] * nblk
        return bytes(buf)
    if ttype == GGML_Q4_0:
        # 18-byte blocks: f16 scale, 32 4-bit quants (q - 8) uniform in [-8, 7]
        nblk = n // QK8_0
        buf = bytearray(rng.randbytes(nblk * 18))
        scale = struct.pack("<e", WEIGHT_STD / 4.61)  # uniform in [-8, 7] has std 4.61
        buf[0::18] = scale[0:1] * nblk
        buf[1::18] = scale[1:2] * nblk
        return bytes(buf)
    if ttype == GGML_F16:
        # random sign and mantissa, exponent fixed at 2^-6: |w| in [0.0156, 0.031)
        lo = rng.randbytes(n)
        hi = rng.randbytes(n).translate(bytes((b & 0x83) | (9 << 2) for b in range(256)))
        buf = bytearray(2 * n)
        buf[0::2] = lo
        buf[1::2] = hi
        return bytes(buf)
    if ttype == GGML_F32:  # a router's weights: small, written value by value
        return struct.pack("<%df" % n, *(rng.gauss(0, WEIGHT_STD) for _ in range(n)))
    raise ValueError(ttype)


def build(shape, wtype, experts=None):
    """The tensors and metadata; experts (E, U): a mixture of experts, as Mixtral has it in
    llama's architecture: each layer's FFN is E experts (ffn_*_exps, [K, N, E]) of which a
    router (ffn_gate_inp) picks U per token."""
    s = SHAPES[shape]
    embd, ff, head, head_kv = s["embd"], s["ff"], s["head"], s["head_kv"]
    head_dim = embd // head
    embd_kv = head_dim * head_kv
    tensors = [  # name, dims (ne0 first, as ggml has them), type, fill
        ("token_embd.weight", (embd, s["vocab"]), wtype, None),
        ("output_norm.weight", (embd,), GGML_F32, 1.0),
        ("output.weight", (embd, s["vocab"]), wtype, None),
    ]
    for i in range(s["layer"]):
        b = "blk.%d." % i
        tensors += [
            (b + "attn_norm.weight", (embd,), GGML_F32, 1.0),
            (b + "attn_q.weight", (embd, embd), wtype, None),
            (b + "attn_k.weight", (embd, embd_kv), wtype, None),
            (b + "attn_v.weight", (embd, embd_kv), wtype, None),
            (b + "attn_output.weight", (embd, embd), wtype, None),
            (b + "ffn_norm.weight", (embd,), GGML_F32, 1.0),
        ]
        if experts:
            e = experts[0]
            tensors += [
                (b + "ffn_gate_inp.weight", (embd, e), GGML_F32, None),
                (b + "ffn_gate_exps.weight", (embd, ff, e), wtype, None),
                (b + "ffn_up_exps.weight", (embd, ff, e), wtype, None),
                (b + "ffn_down_exps.weight", (ff, embd, e), wtype, None),
            ]
        else:
            tensors += [
                (b + "ffn_gate.weight", (embd, ff), wtype, None),
                (b + "ffn_up.weight", (embd, ff), wtype, None),
                (b + "ffn_down.weight", (ff, embd), wtype, None),
            ]

    md = Metadata()
    md.string("general.architecture", "llama")
    md.string("general.name", "llmprofd-random-" + shape)
    md.u32("general.file_type", FILE_TYPE[wtype])
    md.u32("general.alignment", ALIGNMENT)
    md.u32("llama.context_length", s["ctx"])
    md.u32("llama.embedding_length", embd)
    md.u32("llama.block_count", s["layer"])
    md.u32("llama.feed_forward_length", ff)
    md.u32("llama.rope.dimension_count", head_dim)
    md.u32("llama.attention.head_count", head)
    md.u32("llama.attention.head_count_kv", head_kv)
    md.f32("llama.attention.layer_norm_rms_epsilon", 1e-5)
    md.u32("llama.vocab_size", s["vocab"])
    if experts:
        md.u32("llama.expert_count", experts[0])
        md.u32("llama.expert_used_count", experts[1])
    tokens, scores, types = spm_vocab(s["vocab"])
    md.string("tokenizer.ggml.model", "llama")
    md.array("tokenizer.ggml.tokens", T_STRING, tokens)
    md.array("tokenizer.ggml.scores", T_FLOAT32, scores)
    md.array("tokenizer.ggml.token_type", T_INT32, types)
    md.u32("tokenizer.ggml.unknown_token_id", 0)
    md.u32("tokenizer.ggml.bos_token_id", 1)
    md.u32("tokenizer.ggml.eos_token_id", 2)
    md.boolean("tokenizer.ggml.add_bos_token", True)
    md.boolean("tokenizer.ggml.add_eos_token", False)
    return tensors, md


def align(n):
    return (n + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT


def write(path, shape, wtype, seed, experts=None):
    tensors, md = build(shape, wtype, experts)
    rng = random.Random(seed)
    infos, offset = [], 0
    for name, dims, ttype, _ in tensors:
        n = 1
        for d in dims:
            n *= d
        if ttype in (GGML_Q8_0, GGML_Q4_0) and dims[0] % QK8_0:
            sys.exit("gen_gguf: %s: row length %d is not a multiple of 32" % (name, dims[0]))
        infos.append(
            gguf_str(name)
            + struct.pack("<I", len(dims))
            + b"".join(struct.pack("<Q", d) for d in dims)
            + struct.pack("<IQ", ttype, offset)
        )
        offset = align(offset + tensor_bytes(ttype, n))

    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(GGUF_MAGIC + struct.pack("<IQQ", GGUF_VERSION, len(tensors), len(md.items)))
        for item in md.items:
            f.write(item)
        for info in infos:
            f.write(info)
        f.write(b"\0" * (align(f.tell()) - f.tell()))
        base = f.tell()
        for name, dims, ttype, fill in tensors:
            n = 1
            for d in dims:
                n *= d
            f.write(gen_data(rng, ttype, n, fill))
            f.write(b"\0" * (align(f.tell() - base) - (f.tell() - base)))
    os.replace(tmp, path)
    return os.path.getsize(path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", choices=sorted(SHAPES), default="tiny")
    ap.add_argument("--type", choices=["q8_0", "q4_0", "f16"], default="q8_0")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--ctx", type=int, help="the context it was trained on (the shape's)")
    ap.add_argument("--experts", metavar="E,U",
                    help="a mixture of E experts, U used per token (Mixtral's 8,2)")
    ap.add_argument("output")
    a = ap.parse_args()
    experts = tuple(int(x) for x in a.experts.split(",")) if a.experts else None
    wtype = {"q8_0": GGML_Q8_0, "q4_0": GGML_Q4_0, "f16": GGML_F16}[a.type]
    if a.ctx:
        SHAPES[a.shape] = dict(SHAPES[a.shape], ctx=a.ctx)
    size = write(a.output, a.shape, wtype, a.seed, experts)
    print("%s: %s %s%s, %d bytes" % (a.output, a.shape, a.type,
                                     " %d experts, %d used" % experts if experts else "", size))


if __name__ == "__main__":
    main()
