"""`torch.compile` on `Seq2SeqNet`: training steps and greedy decoding over several padded
lengths, counting the graphs Dynamo compiles, so a recompilation per new length shows up.

Training: the compiled module runs forward + cross-entropy + backward + AdamW on batches of
new source/target lengths; with `--dynamic true` (or the default automatic dynamic shapes,
which recompile once, on the second distinct length, then stay symbolic) the count of compiled
graphs must stop growing. Decoding: `encode` and `decode` are compiled and `greedy_decode` runs
unchanged with the cache (a graph for the first step, one for the cached steps), checked
token for token against eager.

    .venv/bin/python benchmarks/compile_check.py                        # toy size, CPU
    .venv/bin/python benchmarks/compile_check.py --device cuda --d-model 512 --nhead 8 --layers 6 --ff 2048
    .venv/bin/python benchmarks/compile_check.py --tiny                 # CI smoke test (compiles: tens of seconds)
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F
from _common import add_size_arguments, device_or_exit, environment, padded_ids, print_table, sized_config, sync, write_json

from models import Seq2SeqNet
from models.decoding import greedy_decode


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_size_arguments(p, d_model=64, layers=2, ff=256)
    p.add_argument("--vocab", type=int, default=100)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument(
        "--lengths",
        type=int,
        nargs="+",
        default=[9, 14, 20, 27, 33, 40],
        help="padded source lengths, one batch each (target = length + 3)",
    )
    p.add_argument("--timed-steps", type=int, default=5, help="eager vs compiled steps timed per length")
    p.add_argument("--decode-lengths", type=int, nargs="+", default=[8, 12, 20], help="greedy output lengths")
    p.add_argument(
        "--dynamic",
        default="true",
        choices=["true", "false", "auto"],
        help="torch.compile(dynamic=...): true, false, or auto (None: automatic dynamic shapes)",
    )
    p.add_argument("--backend", default="inductor", help="inductor, aot_eager, eager, ...")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"], help="bf16: autocast in the training step")
    p.add_argument("--no-decode", action="store_true")
    p.add_argument("--json", default=None)
    p.add_argument("--tiny", action="store_true", help="smallest model, 3 lengths, 1 timed step (CI smoke test)")
    args = p.parse_args(argv)
    if args.tiny:
        args.d_model, args.nhead, args.layers, args.ff, args.vocab, args.batch = 16, 2, 1, 32, 30, 2
        args.lengths, args.timed_steps, args.decode_lengths = [5, 8, 11], 1, [3, 5]
    return args


def graph_count() -> int:
    """Graphs Dynamo has compiled so far in this process (each recompilation adds one)."""
    return int(torch._dynamo.utils.counters["stats"]["unique_graphs"])


def batch(B, S, V, device, seed):
    g = torch.Generator().manual_seed(seed)
    src, tgt = padded_ids(B, S, V, 0.25, generator=g), padded_ids(B, S + 4, V, 0.25, generator=g)
    return src.to(device), tgt.to(device)


def train_check(args, device) -> tuple[list[list], list[dict]]:
    torch.manual_seed(0)
    make = lambda: Seq2SeqNet(sized_config(args, max_len=max(args.lengths) + 8)).to(device).train()
    eager = make()
    compiled_net = make()
    compiled_net.load_state_dict(eager.state_dict())
    dynamic = {"true": True, "false": False, "auto": None}[args.dynamic]
    compiled = torch.compile(compiled_net, dynamic=dynamic, backend=args.backend)
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=args.dtype == "bf16")

    def make_step(model, params):
        opt = torch.optim.AdamW(params, lr=1e-4)

        def step(src, tgt):
            opt.zero_grad(set_to_none=True)
            with autocast:
                logits = model(src, tgt[:, :-1])
                loss = F.cross_entropy(logits.flatten(0, 1).float(), tgt[:, 1:].flatten(), ignore_index=0, label_smoothing=0.1)
            loss.backward()
            opt.step()
            return loss

        return step

    steps = {"eager": make_step(eager, eager.parameters()), "compiled": make_step(compiled, compiled_net.parameters())}
    rows, results = [], []
    for i, S in enumerate(args.lengths):
        src, tgt = batch(args.batch, S, args.vocab, device, seed=i)
        before = graph_count()
        t0 = time.perf_counter()
        loss = steps["compiled"](src, tgt)
        sync(device)
        first = time.perf_counter() - t0
        new_graphs = graph_count() - before
        if not torch.isfinite(loss):
            raise RuntimeError(f"compiled training step at length {S} gave loss {loss}")
        times = {"eager": [], "compiled": []}
        for r in range(args.timed_steps):
            for name in ("eager", "compiled") if r % 2 == 0 else ("compiled", "eager"):
                sync(device)
                t0 = time.perf_counter()
                steps[name](src, tgt)
                sync(device)
                times[name].append(time.perf_counter() - t0)
        med = {k: sorted(v)[len(v) // 2] for k, v in times.items()}
        rows.append(
            [
                f"{S}/{S + 3}",
                new_graphs,
                graph_count(),
                f"{first:.2f}",
                f"{med['eager'] * 1e3:.1f}",
                f"{med['compiled'] * 1e3:.1f}",
                f"{med['eager'] / med['compiled']:.2f}",
            ]
        )
        results.append(
            {
                "src_len": S,
                "tgt_len": S + 3,
                "new_graphs": new_graphs,
                "total_graphs": graph_count(),
                "first_step_s": first,
                "eager_step_s": med["eager"],
                "compiled_step_s": med["compiled"],
            }
        )
    return rows, results


def decode_check(args, device) -> tuple[list[list], list[dict]]:
    torch.manual_seed(1)
    net = Seq2SeqNet(sized_config(args, max_len=max(args.lengths + args.decode_lengths) + 8)).to(device).eval()
    dynamic = {"true": True, "false": False, "auto": None}[args.dynamic]
    eager_encode, eager_decode = net.encode, net.decode
    compiled_encode = torch.compile(eager_encode, dynamic=dynamic, backend=args.backend)
    compiled_decode = torch.compile(eager_decode, dynamic=dynamic, backend=args.backend)
    rows, results = [], []
    for i, (S, n) in enumerate(zip(args.lengths, args.decode_lengths * len(args.lengths))):
        src, _ = batch(args.batch, S, args.vocab, device, seed=100 + i)
        net.encode, net.decode = eager_encode, eager_decode
        t0 = time.perf_counter()
        expected = greedy_decode(net, src, 1, -1, n)
        eager_s = time.perf_counter() - t0
        net.encode, net.decode = compiled_encode, compiled_decode
        before = graph_count()
        t0 = time.perf_counter()
        out = greedy_decode(net, src, 1, -1, n)
        first = time.perf_counter() - t0
        new_graphs = graph_count() - before
        t0 = time.perf_counter()
        greedy_decode(net, src, 1, -1, n)
        again = time.perf_counter() - t0
        same = bool(torch.equal(out, expected))
        rows.append(
            [
                S,
                n,
                new_graphs,
                graph_count(),
                f"{first:.2f}",
                f"{eager_s * 1e3:.1f}",
                f"{again * 1e3:.1f}",
                "yes" if same else "NO",
            ]
        )
        results.append(
            {
                "src_len": S,
                "output_tokens": n,
                "new_graphs": new_graphs,
                "total_graphs": graph_count(),
                "first_call_s": first,
                "eager_s": eager_s,
                "compiled_s": again,
                "same_as_eager": same,
            }
        )
        if len(rows) == max(len(args.decode_lengths), 2):
            break
    net.encode, net.decode = eager_encode, eager_decode
    return rows, results


def main(argv=None) -> dict:
    args = parse_args(argv)
    device = device_or_exit(args.device)
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    size = (
        f"d_model {args.d_model}, {args.nhead} heads, {args.layers}+{args.layers} layers, ff {args.ff}, "
        f"vocab {args.vocab}, batch {args.batch}; backend {args.backend}, dynamic={args.dynamic}, "
        f"{args.device} {args.dtype}; torch {torch.__version__}, {torch.get_num_threads()} threads"
    )
    train_rows, train_results = train_check(args, device)
    print_table(
        [
            "src/tgt len",
            "new graphs",
            "graphs so far",
            "first step s (incl. compile)",
            "eager ms",
            "compiled ms",
            "compiled speed-up",
        ],
        train_rows,
        f"torch.compile, training step: {size}",
    )
    decode_rows, decode_results = [], []
    if not args.no_decode:
        decode_rows, decode_results = decode_check(args, device)
        print_table(
            [
                "src len",
                "output tokens",
                "new graphs",
                "graphs so far",
                "first call s (incl. compile)",
                "eager ms",
                "compiled ms",
                "same tokens as eager",
            ],
            decode_rows,
            f"torch.compile, greedy decoding with the cache: {size}",
        )
    graph_breaks = dict(torch._dynamo.utils.counters.get("graph_break", {}))
    print(f"graph breaks: {sum(graph_breaks.values())}" + "".join(f"\n  {n} x {k[:160]}" for k, n in graph_breaks.items()))
    recompiles_after_second = sum(r["new_graphs"] for r in train_results[2:])
    verdict = (
        "no recompilation after the second length"
        if recompiles_after_second == 0
        else f"{recompiles_after_second} graphs compiled after the second length: recompiling per length"
    )
    print(f"training: {verdict}")
    payload = {
        "benchmark": "compile_check",
        "config": vars(args),
        "environment": environment(args.device),
        "train": train_results,
        "decode": decode_results,
        "train_graphs_after_second_length": recompiles_after_second,
        "train_graphs_first_length": train_results[0]["new_graphs"],
        "graph_breaks": graph_breaks,
        "recompile_reasons": dict(torch._dynamo.utils.counters.get("recompiles", {})),
    }
    write_json(args.json, payload)
    return payload


if __name__ == "__main__":
    main()
