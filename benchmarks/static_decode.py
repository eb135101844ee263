"""The decoding fast path (models/static_cache.py) against today's growing key/value cache: greedy and
beam search of `models.Seq2SeqNet`, sentences per second, with the outputs checked token for token.

Contenders, interleaved per repeat (order rotating): the growing cache (`greedy_decode` / `beam_search`
as translate() runs them), the static cache eager, the static cache under `torch.compile` (the
inductor; mode "reduce-overhead", i.e. CUDA graphs, on a GPU) and, on a GPU, the eager step captured
in CUDA graphs. Random weights; `eos_id = -1` (never chosen) makes every sentence run exactly
`--out-len` steps. The first call of a compiled contender (its compilation) is timed apart.

    .venv/bin/python benchmarks/static_decode.py                                   # d_model 256, 4 heads, 3+3, CPU
    .venv/bin/python benchmarks/static_decode.py --device cuda --d-model 512 --nhead 8 --layers 6 --ff 2048 --batch 64
    .venv/bin/python benchmarks/static_decode.py --tiny                            # seconds; what CI runs (aot_eager)
"""

from __future__ import annotations

import argparse
import sys
import time

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
    sync,
    timed,
    write_json,
)

from models import Seq2SeqNet
from models.beam import beam_search
from models.decoding import greedy_decode
from models.static_cache import StaticDecoder

TINY = dict(d_model=32, nhead=4, layers=1, ff=64, vocab=40, batch=2, src_len=6, out_len=6, repeats=2, backend="aot_eager")
BOS, EOS_NEVER, PAD = 1, -1, 0


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_size_arguments(p)
    p.add_argument("--vocab", type=int, default=8000)
    p.add_argument("--batch", type=int, default=8, help="sentences decoded together")
    p.add_argument("--src-len", type=int, default=24)
    p.add_argument("--pad-frac", type=float, default=0.25)
    p.add_argument("--out-len", type=int, default=32, help="decoded tokens per sentence")
    p.add_argument("--beam-size", type=int, default=4)
    p.add_argument("--searches", nargs="+", default=["greedy", "beam"], choices=["greedy", "beam"])
    p.add_argument("--no-compile", action="store_true", help="leave out the torch.compile contender")
    p.add_argument("--backend", default="inductor", help="torch.compile backend (inductor; aot_eager for smoke tests)")
    p.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"], help="the network's weights and activations")
    p.add_argument("--repeats", type=int, default=5)
    args = parse_sized(p, argv, TINY)
    return args


def contenders(args, net, device) -> dict:
    """Name → a function (search, src) → ids; the static decoders are built once, so their buffers and
    compiled steps are reused across repeats as translate() reuses them."""
    beam_kwargs = dict(beam_size=args.beam_size, length_penalty=1.0)

    def growing(search, src):
        if search == "greedy":
            return greedy_decode(net, src, BOS, EOS_NEVER, args.out_len)
        return beam_search(net, src, BOS, EOS_NEVER, args.out_len, **beam_kwargs)

    def static(decoder):
        def run(search, src):
            if search == "greedy":
                return decoder.greedy(src, BOS, EOS_NEVER, args.out_len)
            return decoder.beam(src, BOS, EOS_NEVER, args.out_len, **beam_kwargs)

        return run

    out = {"growing cache (today)": growing, "static cache, eager": static(StaticDecoder(net, "eager"))}
    if not args.no_compile:
        mode = "reduce-overhead" if device.type == "cuda" else "default"
        out[f"static cache, torch.compile ({args.backend}, {mode})"] = static(StaticDecoder(net, "compile", backend=args.backend))
    if device.type == "cuda":
        out["static cache, CUDA graphs"] = static(StaticDecoder(net, "cuda-graph"))
    return out


def run(args) -> dict:
    device = device_or_exit(args.device)
    torch.manual_seed(args.seed)
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[args.dtype]
    config = sized_config(args, dropout=0.0, max_len=max(256, args.out_len + 2), pad_id=PAD)
    net = Seq2SeqNet(config)
    net = net.to(device, dtype).eval()
    src = padded_ids(args.batch, args.src_len, args.vocab, args.pad_frac, PAD).to(device)
    decoders = contenders(args, net, device)
    names = list(decoders)
    rows, results = [], []
    with torch.inference_mode():
        for search in args.searches:
            reference = decoders[names[0]](search, src)
            first_call = {}
            for name in names:  # warm-up (and compilation), and the check of each output
                sync(device)
                start = time.perf_counter()
                out = decoders[name](search, src)
                sync(device)
                first_call[name] = time.perf_counter() - start
                if not torch.equal(out, reference):
                    raise RuntimeError(f"{name}: {search} output differs from the growing cache's")
            times = {name: [] for name in names}
            for r in range(args.repeats):
                order = names[r % len(names) :] + names[: r % len(names)]
                for name in order:
                    times[name].append(timed(lambda name=name, search=search: decoders[name](search, src), device))
            print(f"{search}: {args.repeats} repeats done", file=sys.stderr, flush=True)
            base = times[names[0]]
            for name in names:
                s, speed = summary(times[name]), ratio_summary(base, times[name])  # > 1: faster than today
                rows.append(
                    [
                        search if search == "greedy" else f"beam {args.beam_size}",
                        name,
                        f"{s['median_s'] * 1e3:.1f}",
                        f"{args.batch / s['median_s']:.1f}",
                        "1 (reference)" if name == names[0] else f"{speed['median']:.2f} ({speed['min']:.2f}–{speed['max']:.2f})",
                        f"{first_call[name]:.1f}",
                    ]
                )
                results.append(
                    {
                        "search": search,
                        "name": name,
                        "time": s,
                        "sentences_per_s": args.batch / s["median_s"],
                        "speedup_vs_growing": speed,
                        "first_call_s": first_call[name],
                        "same_output": True,
                    }
                )
    title = (
        f"Decoding with the static cache, {args.device} {args.dtype}: d_model {args.d_model}, {args.nhead} heads, "
        f"{args.layers}+{args.layers} layers, ff {args.ff}, vocab {args.vocab}, batch {args.batch}, {args.src_len}-token "
        f"sources ({args.pad_frac:.0%} padding), exactly {args.out_len} output tokens, every output identical to the "
        f"growing cache's; {args.repeats} interleaved repeats, torch {torch.__version__}, {torch.get_num_threads()} threads"
    )
    headers = ["search", "decoder", "ms (median)", "sentences/s", "speed vs growing cache (median, min–max)", "first call s"]
    table = print_table(headers, rows, title)
    return {"benchmark": "static_decode", "config": vars(args), "environment": environment(args.device), "table": table,
            "results": results}  # fmt: skip


def main(argv=None) -> dict:
    args = parse_args(argv)
    payload = run(args)
    write_json(args.json, payload)
    return payload


if __name__ == "__main__":
    main()
