"""Training fast paths of `Seq2SeqTransformer`, each behind a flag that is off by default: `torch.compile` over the
length buckets of `pad_to_multiple` (graphs counted by `compiled_graphs()`), or with dynamic shapes without them.
Fused AdamW is tasks.schedules.adamw_with_warmup's; bf16 is the trainer's (docs/guide/speed.md, "Fast paths")."""

from __future__ import annotations

import torch


def mark_bucketed(*tensors: torch.Tensor) -> None:
    """For a net compiled over length buckets: the batch dimension symbolic, the length dimension static."""
    for t in tensors:
        torch._dynamo.maybe_mark_dynamic(t, 0)
        torch._dynamo.mark_static(t, 1)


def compile_net(net: torch.nn.Module, max_len: int, multiple: int, backend: str = "inductor") -> None:
    """Compile `net` in place (parameter names and checkpoints unchanged): over length buckets when
    `multiple` > 1 (the recompile limit raised to the number of buckets, so no bucket falls back to
    eager), with dynamic shapes otherwise."""
    if multiple > 1:
        buckets = -(-max_len // multiple)
        torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, buckets * buckets + 1)
        net.compile(dynamic=None, backend=backend)
    else:
        net.compile(dynamic=True, backend=backend)


def compiled_graphs() -> int:
    """Graphs Dynamo has compiled in this process so far (a recompilation adds one)."""
    from torch._dynamo.utils import counters

    return int(counters["stats"]["unique_graphs"])
