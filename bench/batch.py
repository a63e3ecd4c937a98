#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0-only OR BSD-2-Clause
"""The cost of reading llama_decode's batch (per-request figures), against the decode's
own time.

lp_decode_batch walks the batch at each llama_decode entry: five bpf_probe_read_user a
token (its position, sequence count, sequence pointer and id, and whether its logits are
wanted), up to 8,192 tokens. With kernel.bpf_stats_enabled the kernel times every run of
it. llama.cpp's llama-server (one slot, batches of 2,048, tracked alone: --no-discover),
whose batches give every array, decodes a prompt of N tokens in one batch and then one
token a decode. Per round and size: the program's time over the request, and the
decodes' own time from the daemon's requests (the prompt's prefill, the generation's time
per token), in one table: the batch read as a share of the decode it rides on.

    sudo bench/batch.py [--rounds 3] [--sizes 32,512,2048] [--tokens 16]
"""
import argparse
import os
import statistics
import subprocess

import benchlib as b
import llamaserver
import lptest
import progcost as pc

PHRASE = "Once upon a time there was a small model that"


def prompt_of(tokens):
    """A prompt of about that many tokens of the medium model's vocabulary (its pieces
    are two or three letters: some 2.2 tokens a word of the phrase)."""
    words = PHRASE.split()
    return " ".join(words[i % len(words)] for i in range(max(1, int(tokens / 2.2))))


def complete(srv, tokens, gen):
    """A request of a prompt of that many tokens, decoded whole (cache_prompt off)."""
    return srv.complete(prompt_of(tokens), gen, cache_prompt=False, timeout=1800)


def requests_of(d, pid):
    doc = lptest.curl(d.socket, "GET", "/v1/processes/%d/requests" % pid)[1]
    return doc.get("requests", {}) if isinstance(doc, dict) else {}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sizes", default="32,512,2048")
    ap.add_argument("--tokens", type=int, default=16, help="tokens generated a run")
    a = ap.parse_args()
    b.need("bpftool", b.LLMPROFD)
    # The medium shape with a context of 4,096 (its own is 1,024): batches of 2,048.
    model = os.path.join(b.tempfile.gettempdir(), "llmprofd-bench-medium-4k.gguf")
    if not os.path.exists(model):
        subprocess.run(["python3", os.path.join(b.ROOT, "tests", "workload", "gen_gguf.py"),
                        "--shape", "medium", "--ctx", "4096", model], check=True)
    sizes = [int(x) for x in a.sizes.split(",")]
    rows = []
    with b.bpf_stats():
        # Only the server: a discovered engine beside it (a busy host's) would run the
        # program too.
        # One slot, batches of 2,048.
        srv = llamaserver.Server(lptest.build_llama("--server"), model, ctx=4096,
                                 extra=["-b", "2048", "-ub", "2048"])
        d = b.Daemon("--pid", str(srv.proc.pid), "--no-discover")
        try:
            ids = lptest.prog_ids_of(d.proc.pid)
            # Its probes go on once the daemon has read the binary: a request until one is
            # seen.
            lptest.poll("the daemon to see a decode's batch",
                        lambda: complete(srv, 8, 2) and requests_of(d, srv.proc.pid)
                        .get("decodes", 0) > 0, timeout=120, interval=0.5)
            per = {n: [] for n in sizes}
            for r in range(a.rounds):
                for n in sizes[r % len(sizes):] + sizes[:r % len(sizes)]:
                    seen = requests_of(d, srv.proc.pid).get("requests", 0)
                    before = pc.stats(ids)
                    answer = complete(srv, n, a.tokens)
                    cost = pc.delta(before, pc.stats(ids)).get("lp_decode_batch", (0, 0))
                    # Over when idle 2 s (the one before it ended at its start).
                    rq = lptest.poll("the request over", lambda: (lambda x: x if x.get(
                        "requests", 0) > seen and not x.get("in_flight_now") else None)(
                        requests_of(d, srv.proc.pid)), timeout=30, interval=0.2)
                    q = rq["last"][0]
                    if not cost[1] or q["prompt_tokens"] != answer["timings"]["prompt_n"]:
                        raise SystemExit("request of %d tokens: %s runs, %s" % (n, cost, q))
                    per[n].append((cost, q))
                    print("round %d/%d  %5d tokens: %d runs, %.1f us in all; prompt %d tokens "
                          "in %.1f ms" % (r + 1, a.rounds, n, cost[1], cost[0] / 1e3,
                                          q["prompt_tokens"], q["prefill_ns"] / 1e6))
        finally:
            d.stop()
            srv.stop()
    for n in sizes:
        # Each run: one prompt decode and tokens - 1 generation decodes. The prompt's share
        # of the program time is what is left after the generation decodes' at their own
        # per-run cost, measured at the smallest size (a one-token walk each).
        runs = statistics.median(c[1] for c, _ in per[n])
        per_run = statistics.median(c[0] / c[1] for c, _ in per[n])
        prompt_tokens = statistics.median(q["prompt_tokens"] for _, q in per[n])
        prefill = statistics.median(q["prefill_ns"] for _, q in per[n])
        gen = statistics.median(q["decode_ns"] / max(1, q["output_tokens"] - 1)
                                for _, q in per[n])
        total = statistics.median(c[0] for c, _ in per[n])
        small = statistics.median(c[0] / c[1] for c, _ in per[sizes[0]])
        prompt_read = max(0.0, total - small * (runs - 1))
        rows.append((n, int(prompt_tokens), "%.1f" % (prompt_read / 1e3),
                     "%.2f" % (prefill / 1e6), "%.4f %%" % (100 * prompt_read / prefill),
                     "%.2f" % (small / 1e3), "%.2f" % (gen / 1e6),
                     "%.4f %%" % (100 * small / gen), "%.2f" % (per_run / 1e3)))
    b.table("The batch read per decode (lp_decode_batch), llama-server on the medium model",
            ["prompt asked", "prompt tokens", "read of the prompt batch (us)",
             "prompt decode (ms)", "share", "read of a 1-token batch (us)",
             "generation decode (ms)", "share", "mean per run (us)"], rows,
            notes=["%d rounds, sizes alternating; medians. The read's time is the kernel's "
                   "(bpf_stats_enabled), the decodes' the daemon's requests' (prefill, and "
                   "decode time per generated token, the gaps between decodes included)."
                   % a.rounds])


if __name__ == "__main__":
    main()
