"""Training-step throughput: our `models.Transformer` against `torch.nn.Transformer`.

Both cores get identical shapes, weights (`Transformer.from_torch`), inputs (random (B, S, D)
embeddings, right-padded) and masks; each step is forward → linear head → cross-entropy →
backward → AdamW. A third row runs our core with SDPA replaced by a plain matmul-softmax
attention (patched in this script only), to show what the fused kernel buys; on a CPU in bf16 without
dropout a fourth lets SDPA choose its own (flash) kernel for the backward pass, which models.attention avoids.

Runs are interleaved (ours / reference / matmul, the order rotating every repeat), so the load
of other jobs on a shared machine hits every contender alike; the table gives medians, the
spread, and the per-repeat paired ratio to torch.nn.Transformer.

    .venv/bin/python benchmarks/train_step.py                        # d_model 512, 8 heads, 6+6, CPU fp32
    .venv/bin/python benchmarks/train_step.py --device cuda --dtype bf16 --json out/train_bf16.json
    .venv/bin/python benchmarks/train_step.py --tiny                 # seconds; what CI runs
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import math
import sys
import types

import torch
import torch.nn.functional as F
from _common import (
    add_size_arguments,
    device_or_exit,
    environment,
    padding,
    peak_cpu_bytes,
    print_table,
    ratio_summary,
    summary,
    sync,
    timed,
    write_json,
)
from torch import nn

import models.attention
from models import Transformer

TINY = dict(d_model=32, nhead=4, layers=1, ff=64, batch=4, src_len=8, tgt_len=8, vocab=50, repeats=3, warmup=1)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_size_arguments(p, "dropout", d_model=512, nhead=8, layers=6, ff=2048)  # the paper's base model
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--src-len", type=int, default=32)
    p.add_argument("--tgt-len", type=int, default=32)
    p.add_argument("--pad-frac", type=float, default=0.25, help="mean fraction of padded positions per row")
    p.add_argument("--vocab", type=int, default=1000, help="classes of the linear head")
    p.add_argument(
        "--tgt-key-padding",
        action="store_true",
        help="also pass a target key padding mask to both (default: none, as Seq2SeqNet trains: "
        "targets are right-padded, the causal mask hides pads, the loss ignores them)",
    )
    p.add_argument("--repeats", type=int, default=10)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument(
        "--dtype",
        default="fp32",
        choices=["fp32", "bf16"],
        help="bf16: autocast (weights and AdamW in fp32), as mixed-precision training runs",
    )
    p.add_argument("--no-matmul", action="store_true", help="skip the matmul-softmax row")
    p.add_argument("--no-memory", action="store_true", help="skip the peak-memory measurement")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--progress", action="store_true", help="print each repeat's times to stderr")
    p.add_argument("--json", default=None, help="write the results to this path")
    p.add_argument("--tiny", action="store_true", help="a few seconds at a toy size (CI smoke test)")
    args = p.parse_args(argv)
    if args.tiny:
        for k, v in TINY.items():
            setattr(args, k, v)
    return args


# ------------------------------------------------------------------------------------------
# The plain attention of the third row


def matmul_softmax_attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
    """`F.scaled_dot_product_attention`'s semantics (bool mask True = attend; `is_causal`
    aligned top-left) in explicit matmul → mask → softmax → dropout → matmul."""
    scale = 1.0 / math.sqrt(q.size(-1)) if scale is None else scale
    scores = (q @ k.transpose(-2, -1)) * scale
    T, S = scores.shape[-2:]
    if is_causal:
        scores = scores.masked_fill(torch.ones(T, S, dtype=torch.bool, device=q.device).triu(1), float("-inf"))
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attn_mask, float("-inf"))
        else:
            scores = scores + attn_mask
    weights = scores.softmax(dim=-1)
    if dropout_p > 0:
        weights = F.dropout(weights, dropout_p)
    return weights @ v


@contextlib.contextmanager
def plain_attention():
    """Within the block, `models.attention` calls `matmul_softmax_attention` instead of SDPA
    (the module's `F` is swapped for a copy of the namespace; nothing else is touched)."""
    patched = types.SimpleNamespace(**{name: getattr(F, name) for name in dir(F) if not name.startswith("__")})
    patched.scaled_dot_product_attention = matmul_softmax_attention
    original = models.attention.F
    models.attention.F = patched
    try:
        yield
    finally:
        models.attention.F = original


@contextlib.contextmanager
def sdpa_own_kernel_choice():
    """Within the block, SDPA picks its kernel on a CPU in bf16 as it would by itself (the flash kernel when there
    is no dropout) instead of `models.attention` routing a differentiated pass to the math kernel: the fourth row
    shows what that routing buys."""
    original = models.attention._slow_cpu_backward
    models.attention._slow_cpu_backward = lambda q, dropout_p: False
    try:
        yield
    finally:
        models.attention._slow_cpu_backward = original


# ------------------------------------------------------------------------------------------
# Inputs and steps


def make_batch(args, device, generator):
    """Random embeddings, right-padded: row lengths spread evenly from full length down to
    (1 - 2 * pad_frac) of it, so the mean padded fraction is `pad_frac`."""
    B, S, T, D = args.batch, args.src_len, args.tgt_len, args.d_model
    src_pad, tgt_pad = padding(B, S, args.pad_frac), padding(B, T, args.pad_frac)
    src = torch.randn(B, S, D, generator=generator)
    tgt = torch.randn(B, T, D, generator=generator)
    labels = torch.randint(0, args.vocab, (B, T), generator=generator).masked_fill(tgt_pad, -100)
    tokens = int((~src_pad).sum() + (~tgt_pad).sum())
    batch = [t.to(device) for t in (src, tgt, src_pad, tgt_pad, labels)]
    return batch, tokens


class Contender:
    """A core + its own linear head and AdamW; `step()` runs one full training step."""

    def __init__(self, name, core, head, batch, args, device, is_torch: bool, patch=None):
        self.name, self.core, self.head, self.is_torch = name, core, head, is_torch
        self.patch = patch or contextlib.nullcontext
        self.src, self.tgt, self.src_pad, self.tgt_pad, self.labels = batch
        self.tgt_pad_arg = self.tgt_pad if args.tgt_key_padding else None
        self.params = list(core.parameters()) + list(head.parameters())
        self.opt = torch.optim.AdamW(self.params, lr=1e-4)
        self.autocast = (
            torch.autocast(device_type=torch.device(device).type, dtype=torch.bfloat16)
            if args.dtype == "bf16"
            else contextlib.nullcontext()
        )
        T = self.tgt.size(1)
        self.causal = nn.Transformer.generate_square_subsequent_mask(T, device=device) if is_torch else None
        self.times: list[float] = []
        self.peak_bytes = None

    def forward(self):
        if self.is_torch:
            return self.core(
                self.src,
                self.tgt,
                tgt_mask=self.causal,
                src_key_padding_mask=self.src_pad,
                tgt_key_padding_mask=self.tgt_pad_arg,
                memory_key_padding_mask=self.src_pad,
                tgt_is_causal=True,
            )
        return self.core(self.src, self.tgt, self.src_pad, self.tgt_pad_arg)

    def step(self):
        self.opt.zero_grad(set_to_none=True)
        with self.patch(), self.autocast:
            out = self.forward()
            logits = self.head(out)
            loss = F.cross_entropy(logits.flatten(0, 1).float(), self.labels.flatten())
        loss.backward()
        self.opt.step()
        return loss


def build(args, device):
    torch.manual_seed(args.seed)
    ref = nn.Transformer(
        d_model=args.d_model,
        nhead=args.nhead,
        num_encoder_layers=args.layers,
        num_decoder_layers=args.layers,
        dim_feedforward=args.ff,
        dropout=args.dropout,
        batch_first=True,
    ).to(device)
    ours = Transformer.from_torch(ref)
    head = nn.Linear(args.d_model, args.vocab).to(device)
    batch, tokens = make_batch(args, device, torch.Generator().manual_seed(args.seed))
    contenders = [
        Contender("ours (SDPA)", ours, copy.deepcopy(head), batch, args, device, is_torch=False),
        Contender("torch.nn.Transformer", ref, copy.deepcopy(head), batch, args, device, is_torch=True),
    ]

    def patched(name: str, patch) -> Contender:  # ours again, with attention swapped by `patch`
        return Contender(name, copy.deepcopy(ours), copy.deepcopy(head), batch, args, device, is_torch=False, patch=patch)

    if not args.no_matmul:
        contenders.append(patched("ours (matmul-softmax)", plain_attention))
    if device.type == "cpu" and args.dtype == "bf16" and args.dropout == 0:  # the only case the routing changes
        contenders.append(patched("ours (SDPA's own kernel)", sdpa_own_kernel_choice))
    for c in contenders:
        c.core.train()
    return contenders, tokens


def peak_step_memory(contender, device) -> int | None:
    """Bytes: on CUDA the peak allocated during one step (weights and AdamW state included);
    on the CPU the peak of the profiler-tracked allocations during one step above what was
    live before it (activations, gradients, temporaries: weights and AdamW state excluded)."""
    if torch.device(device).type == "cuda":
        sync(device)
        torch.cuda.reset_peak_memory_stats()
        contender.step()
        sync(device)
        return torch.cuda.max_memory_allocated()
    return peak_cpu_bytes(contender.step)


def run(args) -> dict:
    device = device_or_exit(args.device)
    contenders, tokens = build(args, device)
    for _ in range(args.warmup):
        for c in contenders:
            c.step()
    n = len(contenders)
    for r in range(args.repeats):
        order = [contenders[(r + i) % n] for i in range(n)]  # rotate who goes first
        if r % 2:
            order.reverse()
        for c in order:
            c.times.append(timed(c.step, device))
        if args.progress:
            print(
                f"repeat {r + 1}/{args.repeats}: " + ", ".join(f"{c.name} {c.times[-1] * 1e3:.0f} ms" for c in contenders),
                file=sys.stderr,
                flush=True,
            )
    if not args.no_memory:
        for c in contenders:
            c.peak_bytes = peak_step_memory(c, device)

    ref = contenders[1]
    rows, results = [], []
    for c in contenders:
        s = summary(c.times)
        ratio = ratio_summary(ref.times, c.times)  # > 1: faster than torch.nn.Transformer
        tok_s = tokens / s["median_s"]
        mem = "n/a" if c.peak_bytes is None else f"{c.peak_bytes / 2**20:.1f}"
        rows.append(
            [
                c.name,
                f"{s['median_s'] * 1e3:.1f}",
                f"{s['min_s'] * 1e3:.1f}–{s['max_s'] * 1e3:.1f}",
                f"{tok_s:,.0f}",
                f"{ratio['median']:.3f} ({ratio['min']:.2f}–{ratio['max']:.2f})",
                mem,
            ]
        )
        results.append(
            {
                "name": c.name,
                "step": s,
                "tokens_per_s": tok_s,
                "speed_vs_torch": ratio,
                "peak_step_memory_bytes": c.peak_bytes,
            }
        )
    mem_note = (
        "peak allocated during a step (CUDA)"
        if device.type == "cuda"
        else "CPU: peak of profiler-tracked allocations during one step, above weights and AdamW state"
    )
    title = (
        f"Training step, {args.device} {args.dtype}: d_model {args.d_model}, {args.nhead} heads, "
        f"{args.layers}+{args.layers} layers, ff {args.ff}, dropout {args.dropout}, batch {args.batch}, "
        f"src/tgt {args.src_len}/{args.tgt_len}, pad {args.pad_frac:.0%} ({tokens} real tokens/step), "
        f"{args.repeats} interleaved repeats; torch {torch.__version__}, {torch.get_num_threads()} threads"
    )
    print_table(
        ["model", "step ms (median)", "step ms (min–max)", "tokens/s", "speed vs torch (median, min–max)", "peak MiB"],
        rows,
        title,
    )
    print(f"peak MiB: {mem_note}")
    payload = {
        "benchmark": "train_step",
        "config": vars(args),
        "tokens_per_step": tokens,
        "environment": environment(args.device),
        "memory_note": mem_note,
        "results": results,
    }
    return payload


def main(argv=None) -> dict:
    args = parse_args(argv)
    payload = run(args)
    write_json(args.json, payload)
    return payload


if __name__ == "__main__":
    main()
