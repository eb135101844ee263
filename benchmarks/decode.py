"""Decoding throughput of `models.Seq2SeqNet`: greedy with the key/value cache against greedy
recomputing the whole prefix every step, and beam search (beam 4, cached).

Random weights; `eos_id = -1` (an id argmax never returns) makes every sentence run exactly
`max_len` steps, so each output length is measured as asked. Cached and uncached runs are
interleaved per repeat (order alternating); the table gives sentences per second (median over
repeats), the spread, and the per-repeat paired speed-up of the cache.

    .venv/bin/python benchmarks/decode.py                          # d_model 256, 4 heads, 3+3, lengths 16/64/128
    .venv/bin/python benchmarks/decode.py --d-model 512 --nhead 8 --layers 6 --ff 2048 --vocab 8000   # base size
    .venv/bin/python benchmarks/decode.py --num-kv-heads 1         # multi-query attention: its smaller cache
    .venv/bin/python benchmarks/decode.py --tiny                   # seconds; what CI runs
"""

from __future__ import annotations

import argparse
import sys

import torch
from _common import (
    add_size_arguments,
    device_or_exit,
    environment,
    padded_ids,
    parse_sized,
    print_table,
    ratio_summary,
    sized_config,
    summary,
    timed,
    write_json,
)

from models import Seq2SeqNet
from models.beam import beam_search
from models.decoding import greedy_decode

TINY = dict(d_model=32, nhead=4, layers=1, ff=64, batch=2, src_len=6, vocab=40, lengths=[4, 8], repeats=2, beam_lengths=[4])


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    # Defaults: the size tasks/seq2seq.py trains (an uncached 128-token decode of a 512-wide
    # 6+6 model takes minutes per repeat on a 2-core CPU; pass its sizes for a GPU).
    add_size_arguments(p, "num_kv_heads")
    p.add_argument("--vocab", type=int, default=4000, help="source and target vocabulary size")
    p.add_argument("--batch", type=int, default=4, help="sentences decoded together")
    p.add_argument("--src-len", type=int, default=32)
    p.add_argument("--pad-frac", type=float, default=0.25)
    p.add_argument("--lengths", type=int, nargs="+", default=[16, 64, 128], help="output tokens")
    p.add_argument("--beam-size", type=int, default=4)
    p.add_argument(
        "--beam-lengths",
        type=int,
        nargs="*",
        default=None,
        help="output lengths for beam search (default: all of --lengths; none: skip beam search)",
    )
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    args = parse_sized(p, argv, TINY)
    if args.beam_lengths is None:
        args.beam_lengths = list(args.lengths)
    return args


BOS, EOS_NEVER, PAD = 1, -1, 0


def build(args, device):
    torch.manual_seed(args.seed)
    max_pos = max(args.lengths + args.beam_lengths + [args.src_len]) + 2
    net = Seq2SeqNet(sized_config(args, max_len=max(256, max_pos), pad_id=PAD)).to(device).eval()
    return net, padded_ids(args.batch, args.src_len, args.vocab, args.pad_frac, PAD).to(device)


def cache_mib(net, src: torch.Tensor, n: int) -> float:
    """MiB the key/value cache holds once `n` output tokens are decoded (self- and cross-attention)."""
    with torch.no_grad():
        memory, src_pad = net.encode(src)
        cache = net.core.new_cache()
        net.decode(torch.full((src.size(0), n), BOS, device=src.device), memory, src_pad, cache)
    return cache.nbytes() / 2**20


def run(args) -> dict:
    device = device_or_exit(args.device)
    net, src = build(args, device)
    B = src.size(0)

    def greedy(n, cache):
        return lambda: greedy_decode(net, src, BOS, EOS_NEVER, n, use_cache=cache)

    def beam(n):
        return lambda: beam_search(net, src, BOS, EOS_NEVER, n, beam_size=args.beam_size, use_cache=True)

    rows, results = [], []
    for n in args.lengths:
        cached, uncached = greedy(n, True), greedy(n, False)
        out_c, out_u = cached(), uncached()  # warm-up, and a check of the outputs
        if out_c.shape != (B, n + 1):
            raise RuntimeError(f"greedy_decode returned {tuple(out_c.shape)}, expected {(B, n + 1)}")
        same = (out_c == out_u).all(dim=1).float().mean().item()
        for _ in range(args.warmup - 1):
            cached(), uncached()
        t_c, t_u = [], []
        for r in range(args.repeats):
            pair = [(cached, t_c), (uncached, t_u)]
            for fn, times in pair if r % 2 == 0 else pair[::-1]:
                times.append(timed(fn, device))
        s_c, s_u = summary(t_c), summary(t_u)
        print(f"{n} tokens: cached {s_c['median_s']:.2f} s, uncached {s_u['median_s']:.2f} s", file=sys.stderr, flush=True)
        speedup = ratio_summary(t_u, t_c)
        mib = cache_mib(net, src, n)
        for name, s in (("greedy, cached", s_c), ("greedy, uncached", s_u)):
            rows.append(
                [
                    n,
                    name,
                    f"{B / s['median_s']:.2f}",
                    f"{B / s['max_s']:.2f}–{B / s['min_s']:.2f}",
                    f"{speedup['median']:.2f} ({speedup['min']:.2f}–{speedup['max']:.2f})" if "un" not in name else "1",
                    f"{same:.0%}",
                    f"{mib:.2f}" if "un" not in name else "",
                ]
            )
        results.append(
            {
                "output_tokens": n,
                "mode": "greedy_cached",
                "time": s_c,
                "sentences_per_s": B / s_c["median_s"],
                "speedup_vs_uncached": speedup,
                "rows_identical_to_uncached": same,
                "cache_mib": mib,
            }
        )
        results.append({"output_tokens": n, "mode": "greedy_uncached", "time": s_u, "sentences_per_s": B / s_u["median_s"]})

    for n in args.beam_lengths:
        fn = beam(n)
        for _ in range(args.warmup):
            fn()
        times = [timed(fn, device) for _ in range(args.repeats)]
        s = summary(times)
        rows.append(
            [
                n,
                f"beam {args.beam_size}, cached",
                f"{B / s['median_s']:.2f}",
                f"{B / s['max_s']:.2f}–{B / s['min_s']:.2f}",
                "",
                "",
                "",
            ]
        )
        results.append(
            {"output_tokens": n, "mode": f"beam{args.beam_size}_cached", "time": s, "sentences_per_s": B / s["median_s"]}
        )

    title = (
        f"Decoding, {args.device}: Seq2SeqNet d_model {args.d_model}, {args.nhead} heads, {args.layers}+{args.layers} layers, "
        f"ff {args.ff}, {args.num_kv_heads or args.nhead} key/value heads, vocab {args.vocab}, batch {B}, "
        f"source {args.src_len} tokens ({args.pad_frac:.0%} padding), "
        f"{args.repeats} interleaved repeats; torch {torch.__version__}, {torch.get_num_threads()} threads"
    )
    print_table(
        [
            "output tokens",
            "decoder",
            "sentences/s (median)",
            "sentences/s (min–max)",
            "cached / uncached speed (median, min–max)",
            "same output as uncached",
            "cache MiB",
        ],
        rows,
        title,
    )
    return {"benchmark": "decode", "config": vars(args), "environment": environment(args.device), "results": results}


def main(argv=None) -> dict:
    args = parse_args(argv)
    payload = run(args)
    write_json(args.json, payload)
    return payload


if __name__ == "__main__":
    main()
