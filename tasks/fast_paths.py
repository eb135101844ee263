"""Training fast paths of `Seq2SeqTransformer`, each behind a flag that is off by default:
  - length bucketing (`pad_to_multiple`): every batch's source and target lengths padded up to a
    multiple of m by the data module's collate function (`datamodules.batching.bucket_batch`, the data
    module's `pad_to_multiple` linked to the task's by scripts/fit.py). The extra positions are padding,
    which the masks hide and the loss ignores, so the loss and the gradients are those of the unpadded
    batch (tests/test_fast_paths.py);
  - `torch.compile` over those buckets: the lengths stay static and only the batch size is symbolic,
    so the compiled graphs number at most (source buckets) × (target buckets), counted by
    `compiled_graphs()`; without bucketing the task compiles with dynamic shapes (`dynamic=True`);
  - fused AdamW (tasks.schedules.adamw_with_warmup's `fused`): one kernel for the update of every
    parameter instead of a handful per parameter; refused with one line where torch has none.
bf16 is the trainer's (`--trainer.precision bf16-mixed`); it needs nothing here.
"""

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
