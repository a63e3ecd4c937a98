#!/usr/bin/python3
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
"""A decoder-only language model in plain PyTorch with random weights, built as Hugging Face
transformers builds its models (no transformers package is reachable here), and a greedy
generate() loop over it: the PyTorch CPU stack of seeds/002 for the tests and benchmarks.

Shapes:
  llama  token embedding only; RMSNorm; rotary positions; q, k, v, o projections; a
         SiLU-gated MLP (gate, up, down); a KV cache grown with torch.cat; lm_head.
  gpt2   token and learned position embeddings (wte, wpe: two embedding calls a forward);
         LayerNorm; one fused qkv projection (c_attn); GELU MLP; lm_head tied to wte.

Every forward is one call of the model with input ids of shape [batch, positions]: the
prompt (positions = prompt length), then one position per generated token. The script
prints its own counts and timings as one JSON line on stdout at the end (and, with
--progress, a line per forward on stderr, written every 0.25 s: its index in its generate(),
its ids' shape, its time and its start on CLOCK_MONOTONIC, in ns):

  prompt_tokens      batch * prompt length   (the prompt forward's ids)
  generated_tokens   batch * new tokens      (one id per sequence per generation forward)
  forwards           1 + new tokens
  gen_ns             CLOCK_MONOTONIC time inside the generation forwards (model call to
                     its return), gen_forward_ns each, and their bounds (gen_first_ns,
                     gen_last_end_ns) so a reader can time the same forwards

--profile-forwards A:B runs torch.profiler over forwards A..B-1 (counted over every
generate() call of --repeat, from 0) and writes
its key_averages (self CPU time per aten op) as JSON to --profile-out, with the profiler's
own cost per event it records (event_ns, measured after the run: see profiler_event_ns)
and the events in the window; --window A:B without
the profiler marks the same forwards. --sync-fd R,W: at the window's start and end the
script writes a byte to W and waits for one on R (a test reads the daemon then). --hold-fd N
waits for a byte on fd N before the first forward (a test starts its tracers first). The
first forward's start goes to stderr as it begins ("first forward at NS", CLOCK_MONOTONIC),
and every generation forward's start is in gen_starts_ns."""
import argparse
import json
import math
import os
import statistics
import sys
import time

import torch
from torch import nn
import torch.nn.functional as F

PROGRESS_NS = 250_000_000  # --progress: its lines written at most this often


def now_ns():
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        var = x.pow(2).mean(-1, keepdim=True)
        return self.weight * (x * torch.rsqrt(var + self.eps))


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


class Rotary(nn.Module):
    def __init__(self, head_dim, base=10000.0):
        super().__init__()
        inv = 1.0 / (base ** (torch.arange(0, head_dim, 2).float() / head_dim))
        self.register_buffer("inv_freq", inv, persistent=False)

    def forward(self, x, pos):
        freqs = torch.outer(pos.float(), self.inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos()[None, None], emb.sin()[None, None]


class LlamaAttention(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.heads, self.head_dim = heads, hidden // heads
        self.q_proj = nn.Linear(hidden, hidden, bias=False)
        self.k_proj = nn.Linear(hidden, hidden, bias=False)
        self.v_proj = nn.Linear(hidden, hidden, bias=False)
        self.o_proj = nn.Linear(hidden, hidden, bias=False)
        self.rotary = Rotary(self.head_dim)

    def forward(self, x, pos, cache):
        b, n, _ = x.shape
        q = self.q_proj(x).view(b, n, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, n, self.heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, n, self.heads, self.head_dim).transpose(1, 2)
        cos, sin = self.rotary(v, pos)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        if cache is not None:
            k = torch.cat((cache[0], k), dim=2)
            v = torch.cat((cache[1], v), dim=2)
        scores = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(self.head_dim)
        if n > 1:
            mask = torch.full((n, k.shape[2]), float("-inf")).triu(k.shape[2] - n + 1)
            scores = scores + mask
        probs = F.softmax(scores, dim=-1)
        out = torch.matmul(probs, v).transpose(1, 2).reshape(b, n, -1)
        return self.o_proj(out), (k, v)


class LlamaMLP(nn.Module):
    def __init__(self, hidden, inter):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, inter, bias=False)
        self.up_proj = nn.Linear(hidden, inter, bias=False)
        self.down_proj = nn.Linear(inter, hidden, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class LlamaLayer(nn.Module):
    def __init__(self, hidden, heads, inter):
        super().__init__()
        self.input_layernorm = RMSNorm(hidden)
        self.self_attn = LlamaAttention(hidden, heads)
        self.post_attention_layernorm = RMSNorm(hidden)
        self.mlp = LlamaMLP(hidden, inter)

    def forward(self, x, pos, cache):
        a, cache = self.self_attn(self.input_layernorm(x), pos, cache)
        x = x + a
        return x + self.mlp(self.post_attention_layernorm(x)), cache


class Gpt2Attention(nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.heads, self.head_dim = heads, hidden // heads
        self.c_attn = nn.Linear(hidden, 3 * hidden)
        self.c_proj = nn.Linear(hidden, hidden)

    def forward(self, x, pos, cache):
        b, n, h = x.shape
        q, k, v = self.c_attn(x).split(h, dim=2)
        q, k, v = (t.view(b, n, self.heads, self.head_dim).transpose(1, 2) for t in (q, k, v))
        if cache is not None:
            k = torch.cat((cache[0], k), dim=2)
            v = torch.cat((cache[1], v), dim=2)
        scores = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(self.head_dim)
        if n > 1:
            mask = torch.full((n, k.shape[2]), float("-inf")).triu(k.shape[2] - n + 1)
            scores = scores + mask
        out = torch.matmul(F.softmax(scores, dim=-1), v).transpose(1, 2).reshape(b, n, h)
        return self.c_proj(out), (k, v)


class Gpt2Layer(nn.Module):
    def __init__(self, hidden, heads, inter):
        super().__init__()
        self.ln_1 = nn.LayerNorm(hidden)
        self.attn = Gpt2Attention(hidden, heads)
        self.ln_2 = nn.LayerNorm(hidden)
        self.c_fc = nn.Linear(hidden, inter)
        self.c_proj = nn.Linear(inter, hidden)

    def forward(self, x, pos, cache):
        a, cache = self.attn(self.ln_1(x), pos, cache)
        x = x + a
        return x + self.c_proj(F.gelu(self.c_fc(self.ln_2(x)))), cache


class Decoder(nn.Module):
    def __init__(self, shape, vocab, hidden, layers, heads, inter, max_pos):
        super().__init__()
        self.shape = shape
        self.embed_tokens = nn.Embedding(vocab, hidden)
        layer = LlamaLayer if shape == "llama" else Gpt2Layer
        self.layers = nn.ModuleList(layer(hidden, heads, inter) for _ in range(layers))
        if shape == "llama":
            self.norm = RMSNorm(hidden)
            self.lm_head = nn.Linear(hidden, vocab, bias=False)
        else:
            self.wpe = nn.Embedding(max_pos, hidden)
            self.norm = nn.LayerNorm(hidden)
            self.lm_head = nn.Linear(hidden, vocab, bias=False)
            self.lm_head.weight = self.embed_tokens.weight

    def forward(self, ids, start, caches):
        pos = torch.arange(start, start + ids.shape[1])
        x = self.embed_tokens(ids)
        if self.shape == "gpt2":
            x = x + self.wpe(pos)[None]
        new = []
        for layer, cache in zip(self.layers, caches):
            x, c = layer(x, pos, cache)
            new.append(c)
        return self.lm_head(self.norm(x)), new


def profiler_event_ns(blocks=12, calls=2000):
    """torch.profiler's own CPU time per event it records: blocks of a tiny op's calls
    with and without it, in alternating order, the median difference over the events one
    block records. Its work per event (a RecordFunction's begin and end, an event kept) does
    not depend on the op's own work; pairs of blocks side by side cancel what the host's
    neighbours do to the process's speed over seconds, which timing a window of forwards
    against the forwards around it does not (their CPU time moved by a third, up and down,
    beside a busy host)."""
    x = torch.ones(8)

    def run():
        c0 = time.process_time_ns()
        for _ in range(calls):
            torch.add(x, x)
        return time.process_time_ns() - c0

    run()
    diffs, events = [], 0
    for i in range(blocks):
        took = {}
        for on in ((True, False) if i % 2 == 0 else (False, True)):
            if not on:
                took[on] = run()
                continue
            p = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
            p.__enter__()
            took[on] = run()
            p.__exit__(None, None, None)
            events = events or sum(e.count for e in p.key_averages())
        diffs.append(took[True] - took[False])
    return statistics.median(diffs) / max(1, events)


def generate(model, ids, new_tokens, on_forward, on_start):
    """Greedy decoding as transformers' generate() does it: the prompt in one forward,
    then one forward per token with the KV cache, argmax of the last position's logits."""
    caches = [None] * len(model.layers)
    start = 0
    out = [ids]
    for i in range(new_tokens + 1):
        on_start(i, ids.shape, now_ns())
        t0 = now_ns()
        logits, caches = model(ids, start, caches)
        nxt = logits[:, -1, :].argmax(dim=-1, keepdim=True)
        t1 = now_ns()
        on_forward(i, ids.shape, t0, t1)
        start += ids.shape[1]
        ids = nxt
        out.append(nxt)
    return torch.cat(out, dim=1)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", choices=("llama", "gpt2"), default="llama")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--prompt", type=int, default=32, help="prompt length, in positions")
    ap.add_argument("--new", type=int, default=64, help="tokens generated per sequence")
    ap.add_argument("--threads", type=int, default=0, help="torch.set_num_threads (0: as is)")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--inter", type=int, default=1408)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=1, help="generate() calls, one after another")
    ap.add_argument("--hold-fd", type=int, default=-1,
                    help="wait for a byte on this fd before the first forward")
    ap.add_argument("--profile-forwards", default="",
                    help="A:B: torch.profiler over forwards A..B-1 of the first generate()")
    ap.add_argument("--profile-out", default="")
    ap.add_argument("--window", default="", help="A:B: forwards A..B-1, without the profiler")
    ap.add_argument("--sync-fd", default="", help="R,W: a handshake at the window's ends")
    ap.add_argument("--progress", action="store_true")
    a = ap.parse_args()

    if a.threads:
        torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    model = Decoder(a.shape, a.vocab, a.hidden, a.layers, a.heads, a.inter,
                    a.prompt + a.new + 1).eval()
    ids = torch.randint(0, a.vocab, (a.batch, a.prompt))
    spec = a.profile_forwards or a.window
    prof_range = tuple(int(x) for x in spec.split(":")) if spec else None
    sync = tuple(int(x) for x in a.sync_fd.split(",")) if a.sync_fd else None
    if a.hold_fd >= 0:
        os.read(a.hold_fd, 1)

    rec = {"shape": a.shape, "batch": a.batch, "prompt_len": a.prompt, "new": a.new,
           "threads": torch.get_num_threads(), "prompt_tokens": 0, "generated_tokens": 0,
           "forwards": 0, "prompt_forwards": 0, "gen_forwards": 0, "gen_ns": 0,
           "gen_forward_ns": [], "gen_starts_ns": [], "gen_first_ns": 0, "gen_last_end_ns": 0,
           "first_forward_ns": 0, "window_forwards": [], "forward_ns": [],
           "start_ns": now_ns(), "pid": os.getpid()}
    prof = {"p": None, "rep": 0, "k": 0}  # k: forwards started, over every generate()

    def handshake():
        if sync:
            os.write(sync[1], b"w")
            os.read(sync[0], 1)

    def on_start(i, shape, t0):
        k = prof["k"]
        prof["k"] += 1
        if not rec["first_forward_ns"]:
            rec["first_forward_ns"] = t0
            print("first forward at %d" % t0, file=sys.stderr, flush=True)
        if prof_range and k == prof_range[0]:
            handshake()
            if a.profile_forwards:
                prof["p"] = torch.profiler.profile(activities=[
                    torch.profiler.ProfilerActivity.CPU])
                prof["p"].__enter__()
            rec["profile_begin_ns"] = now_ns()
        if prof_range and k == prof_range[1]:
            rec["profile_end_ns"] = now_ns()
            # the reader's end of the window before the profiler's own work on its events
            handshake()
            if prof["p"]:
                prof["p"].__exit__(None, None, None)

    progress, progress_at = [], [0]

    def progress_out():
        sys.stderr.write("".join(progress))
        sys.stderr.flush()
        progress.clear()

    def on_forward(i, shape, t0, t1):
        k = prof["k"] - 1
        rec["forwards"] += 1
        rec["forward_ns"].append(t1 - t0)
        if prof_range and prof_range[0] <= k < prof_range[1]:
            rec["window_forwards"].append(k)
        if shape[1] > 1 or i == 0:
            rec["prompt_forwards"] += 1
            rec["prompt_tokens"] += shape[0] * shape[1]
        else:
            rec["gen_forwards"] += 1
            rec["generated_tokens"] += shape[0]
            rec["gen_ns"] += t1 - t0
            rec["gen_forward_ns"].append(t1 - t0)
            rec["gen_starts_ns"].append(t0)
            if not rec["gen_first_ns"]:
                rec["gen_first_ns"] = t0
            rec["gen_last_end_ns"] = t1
        if a.progress:
            progress.append("forward %d: %d x %d in %.3f ms at %d\n"
                            % (i, shape[0], shape[1], (t1 - t0) / 1e6, t0))
            # Written in batches: a reader woken at every forward would add its own
            # switches (a tracked thread preempted, and back) to every forward it times.
            if t1 - progress_at[0] >= PROGRESS_NS:
                progress_out()
                progress_at[0] = t1

    with torch.no_grad():
        for r in range(a.repeat):
            prof["rep"] = r
            generate(model, ids, a.new, on_forward, on_start)
    rec["end_ns"] = now_ns()
    progress_out()
    if prof["p"] is not None and a.profile_out:
        ops = [{"name": e.key, "count": e.count, "self_cpu_us": e.self_cpu_time_total,
                "cpu_us": e.cpu_time_total}
               for e in prof["p"].key_averages()]
        with open(a.profile_out, "w") as f:
            json.dump({"ops": ops, "begin_ns": rec.get("profile_begin_ns"),
                       "end_ns": rec.get("profile_end_ns"),
                       "events": sum(o["count"] for o in ops),
                       "event_ns": profiler_event_ns()}, f)
    print(json.dumps(rec), flush=True)


if __name__ == "__main__":
    main()
