"""Where a training step's time goes: torch.profiler over `Seq2SeqNet` forward → label-smoothed
cross-entropy → backward → AdamW, at the toy size (d_model 64, 2+2 layers, batch 3) and at
the benchmark size (d_model 512, 8 heads, 6+6 layers, batch 16).

Prints, per size: the top ops by self CPU time, the share of the step spent inside aten ops
against the wall time (the rest is Python and dispatch overhead), how many mask-building ops
run per step (they should not scale with the layer count), and the host-device sync points
(`aten::item` / `aten::_local_scalar_dense`: each one stalls a GPU).

    .venv/bin/python benchmarks/profile_step.py                  # both sizes
    .venv/bin/python benchmarks/profile_step.py --sizes toy --trace out/toy_trace.json   # Chrome trace
    .venv/bin/python benchmarks/profile_step.py --tiny           # CI smoke test
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F
from _common import device_or_exit, environment, padded_ids, print_table, write_json
from torch.profiler import ProfilerActivity, profile

from models import Seq2SeqConfig, Seq2SeqNet

SIZES = {
    "toy": dict(d_model=64, nhead=4, layers=2, ff=256, batch=3, src_len=12, tgt_len=12, vocab=100),
    "benchmark": dict(d_model=512, nhead=8, layers=6, ff=2048, batch=16, src_len=32, tgt_len=32, vocab=8000),
    "tiny": dict(d_model=16, nhead=2, layers=1, ff=32, batch=2, src_len=5, tgt_len=5, vocab=20),
}
MASK_OPS = ("aten::tril", "aten::triu", "aten::logical_not", "aten::bitwise_not", "aten::any", "aten::eq")
SYNC_OPS = ("aten::item", "aten::_local_scalar_dense", "aten::nonzero", "cudaStreamSynchronize", "cudaDeviceSynchronize")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", nargs="+", default=["toy", "benchmark"], choices=sorted(SIZES))
    p.add_argument("--steps", type=int, default=3, help="profiled steps (after --warmup)")
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--top", type=int, default=15, help="rows of the op table")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--trace", default=None, help="write a Chrome trace of the last size here")
    p.add_argument("--json", default=None)
    p.add_argument("--tiny", action="store_true", help="one tiny size, one step (CI smoke test)")
    args = p.parse_args(argv)
    if args.tiny:
        args.sizes, args.steps, args.warmup, args.top = ["tiny"], 1, 1, 8
    return args


def make_step(size: dict, device):
    torch.manual_seed(0)
    net = (
        Seq2SeqNet(
            Seq2SeqConfig(
                src_vocab_size=size["vocab"],
                tgt_vocab_size=size["vocab"],
                d_model=size["d_model"],
                nhead=size["nhead"],
                num_encoder_layers=size["layers"],
                num_decoder_layers=size["layers"],
                dim_feedforward=size["ff"],
            )
        )
        .to(device)
        .train()
    )
    opt = torch.optim.AdamW(net.parameters(), lr=1e-4)
    B, S, T, V = size["batch"], size["src_len"], size["tgt_len"], size["vocab"]
    src, tgt = padded_ids(B, S, V, 0.25).to(device), padded_ids(B, T + 1, V, 0.25).to(device)

    def step():
        opt.zero_grad(set_to_none=True)
        logits = net(src, tgt[:, :-1])
        loss = F.cross_entropy(logits.flatten(0, 1), tgt[:, 1:].flatten(), ignore_index=0, label_smoothing=0.1)
        loss.backward()
        opt.step()
        return loss

    return step


def profile_size(name: str, size: dict, args) -> dict:
    device = torch.device(args.device)
    step = make_step(size, device)
    for _ in range(args.warmup):
        step()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities, record_shapes=False) as prof:
        start = time.perf_counter()
        for _ in range(args.steps):
            step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        wall = (time.perf_counter() - start) / args.steps
    averages = prof.key_averages()
    ops = sorted(averages, key=lambda e: e.self_cpu_time_total, reverse=True)
    total_self_us = sum(e.self_cpu_time_total for e in averages if e.key.startswith("aten::"))
    rows = []
    for e in ops[: args.top]:
        rows.append(
            [
                e.key,
                f"{e.self_cpu_time_total / args.steps / 1e3:.2f}",
                f"{100 * e.self_cpu_time_total / max(1, sum(x.self_cpu_time_total for x in averages)):.1f}",
                f"{e.count / args.steps:g}",
            ]
        )
    counts = {e.key: e.count / args.steps for e in averages}
    mask_ops = {k: counts[k] for k in MASK_OPS if k in counts}
    sync_ops = {k: counts[k] for k in SYNC_OPS if k in counts}
    scalar_reads = [e for e in prof.events() if e.name == "aten::_local_scalar_dense"]
    in_optimizer = sum(1 for e in scalar_reads if _under(e, "Optimizer.step")) / args.steps
    print_table(
        ["op", "self CPU ms / step", "% of profiled self time", "calls / step"],
        rows,
        f"Profile, {name} size {size}, {args.device}, {args.steps} steps (profiled wall {wall * 1e3:.1f} ms/step)",
    )
    aten_share = total_self_us / 1e6 / args.steps / wall
    print(
        f"aten ops' self time: {total_self_us / 1e3 / args.steps:.1f} ms/step = {aten_share:.0%} of the "
        f"profiled wall time; the rest is Python, autograd and dispatch overhead (and the profiler's own)"
    )
    print(f"mask-building ops per step: {mask_ops or 'none'}")
    print(
        f"host-device sync ops per step: {sync_ops or 'none'}; {in_optimizer:g} of them inside Optimizer.step "
        f"(AdamW's single-tensor path reads each param's step count; CUDA tensors default to foreach, no sync)"
    )
    if args.trace:
        prof.export_chrome_trace(args.trace)
        print(f"wrote {args.trace}")
    return {
        "size": name,
        "config": size,
        "profiled_wall_ms_per_step": wall * 1e3,
        "aten_self_ms_per_step": total_self_us / 1e3 / args.steps,
        "aten_share_of_wall": aten_share,
        "top_ops": [
            {"op": r[0], "self_cpu_ms_per_step": float(r[1]), "percent": float(r[2]), "calls_per_step": float(r[3])} for r in rows
        ],
        "mask_ops_per_step": mask_ops,
        "sync_ops_per_step": sync_ops,
        "sync_ops_in_optimizer_per_step": in_optimizer,
    }


def _under(event, prefix: str) -> bool:
    parent = event.cpu_parent
    while parent is not None:
        if parent.name.startswith(prefix):
            return True
        parent = parent.cpu_parent
    return False


def main(argv=None) -> dict:
    args = parse_args(argv)
    device_or_exit(args.device)
    results = [profile_size(name, SIZES[name], args) for name in args.sizes]
    payload = {"benchmark": "profile_step", "config": vars(args), "environment": environment(args.device), "results": results}
    write_json(args.json, payload)
    return payload


if __name__ == "__main__":
    main()
