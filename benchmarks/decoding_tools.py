"""The CPU cost of the decoding tools (models.decoding) against plain beam search on the same batch:
an n-best list (N = 4 of beam 4) and an ensemble of 2 models (beam 4), in sentences per second and
as a ratio to plain beam 4.

Random weights (benchmarks/decode.py's `build`, a second seed for the ensemble's other model);
`eos_id = -1` (an id no search emits) makes every sentence run exactly --length steps in every mode,
so the modes do the same number of steps and differ only in the work per step. The three modes are
interleaved per repeat (order rotating); ratios are per repeat (paired), median and range.

    .venv/bin/python benchmarks/decoding_tools.py                 # d_model 256, 4 heads, 3+3, batch 16, 32 tokens
    .venv/bin/python benchmarks/decoding_tools.py --tiny          # seconds; what CI runs
"""

from __future__ import annotations

import argparse
import sys
from types import SimpleNamespace

import torch
from _common import (
    add_size_arguments,
    device_or_exit,
    environment,
    parse_sized,
    print_table,
    ratio_summary,
    summary,
    timed,
    write_json,
)
from decode import build

from models.beam import beam_search, beam_search_nbest

TINY = dict(d_model=32, nhead=4, layers=1, ff=64, batch=2, src_len=6, vocab=40, length=4, repeats=2)
BOS, EOS_NEVER = 1, -1


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_size_arguments(p)
    p.add_argument("--vocab", type=int, default=4000, help="source and target vocabulary size")
    p.add_argument("--batch", type=int, default=16, help="sentences decoded together")
    p.add_argument("--src-len", type=int, default=24)
    p.add_argument("--pad-frac", type=float, default=0.25)
    p.add_argument("--length", type=int, default=32, help="output tokens")
    p.add_argument("--beam-size", type=int, default=4)
    p.add_argument("--nbest", type=int, default=4)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--warmup", type=int, default=1)
    args = parse_sized(p, argv, TINY)
    if not 1 <= args.nbest <= args.beam_size:
        p.error("--nbest must be between 1 and --beam-size")
    return args


def run(args) -> dict:
    device = device_or_exit(args.device)

    def net_of(seed: int):
        config = dict(vars(args), seed=seed, lengths=[args.length], beam_lengths=[], num_kv_heads=None)
        return build(SimpleNamespace(**config), device)

    net, src = net_of(args.seed)
    other, _ = net_of(args.seed + 1)
    B, K, n = src.size(0), args.beam_size, args.length
    modes = {
        f"beam {K}": lambda: beam_search(net, src, BOS, EOS_NEVER, n, beam_size=K),
        f"{args.nbest}-best of beam {K}": lambda: beam_search_nbest(net, src, BOS, EOS_NEVER, n, beam_size=K, nbest=args.nbest),
        f"ensemble of 2, beam {K}": lambda: beam_search([net, other], src, BOS, EOS_NEVER, n, beam_size=K),
    }
    for fn in modes.values():
        for _ in range(args.warmup):
            fn()
    times: dict[str, list[float]] = {name: [] for name in modes}
    names = list(modes)
    for r in range(args.repeats):
        for name in names[r % len(names) :] + names[: r % len(names)]:  # rotate the order
            times[name].append(timed(modes[name], device))
    base = names[0]
    rows, results = [], []
    for name in names:
        s, ratio = summary(times[name]), ratio_summary(times[name], times[base])
        print(f"{name}: {s['median_s']:.3f} s", file=sys.stderr, flush=True)
        rows.append(
            [
                name,
                f"{B / s['median_s']:.2f}",
                f"{B / s['max_s']:.2f}–{B / s['min_s']:.2f}",
                f"{ratio['median']:.2f} ({ratio['min']:.2f}–{ratio['max']:.2f})",
            ]
        )
        results.append({"mode": name, "time": s, "sentences_per_s": B / s["median_s"], "time_vs_beam": ratio})
    title = (
        f"Decoding tools, {args.device}: Seq2SeqNet d_model {args.d_model}, {args.nhead} heads, "
        f"{args.layers}+{args.layers} layers, ff {args.ff}, vocab {args.vocab}, batch {B}, source {args.src_len} tokens "
        f"({args.pad_frac:.0%} padding), {n} output tokens, {args.repeats} interleaved repeats; "
        f"torch {torch.__version__}, {torch.get_num_threads()} threads"
    )
    print_table(["decoding", "sentences/s (median)", "sentences/s (min–max)", f"time / {base} (median, min–max)"], rows, title)
    return {"benchmark": "decoding_tools", "config": vars(args), "environment": environment(args.device), "results": results}


def main(argv=None) -> dict:
    args = parse_args(argv)
    payload = run(args)
    write_json(args.json, payload)
    return payload


if __name__ == "__main__":
    main()
