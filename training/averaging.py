"""Averaging the weights of several checkpoints of one run (fairseq's `average_checkpoints.py`).

The recipes average with an EMA during training (training.callbacks.EMA); this is the other habit,
for runs that kept a checkpoint per epoch (`--checkpoint.save_top_k -1`): the mean of the last N.
"""

from __future__ import annotations

import re
from pathlib import Path

import torch

from common.checkpoints import read_checkpoint, weights_of
from common.errors import CheckpointError
from models.config import nested_hparams

STEP_IN_NAME = re.compile(r"step(\d+)")  # the recipes' file names: epoch{epoch:03d}-step{step}.ckpt
# What a checkpoint needs to load with `load_from_checkpoint` and say where it came from; the optimiser,
# loops and callback states describe one moment of training and do not average, so they are dropped.
KEPT = ("hyper_parameters", "datamodule_hyper_parameters", "pytorch-lightning_version", "epoch", "global_step")


def last_checkpoints(directory: str | Path, n: int) -> list[Path]:
    """The `n` checkpoints of `directory` with the highest step in their names, oldest first."""
    directory = Path(directory)
    if not directory.is_dir():
        raise CheckpointError(f"not a directory of checkpoints: {directory}")
    numbered = [(int(m.group(1)), p) for p in directory.glob("*.ckpt") if (m := STEP_IN_NAME.search(p.name))]
    below = sorted({str(p.parent) for p in directory.glob("*/*.ckpt")})
    if not numbered and below:  # a run's folder: its checkpoints are in checkpoints/ (checkpoints-2/, ... if resumed)
        raise CheckpointError(f"{directory} holds no checkpoints itself; pass the folder that does: {', '.join(below)}")
    if len(numbered) < n:
        raise CheckpointError(
            f"{directory} has {len(numbered)} checkpoints named with a step, fewer than the {n} asked for "
            "(keep one per epoch with --checkpoint.save_top_k -1)"
        )
    return [p for _, p in sorted(numbered)[-n:]]


def average_checkpoints(paths: list[str | Path], weights: str = "averaged") -> dict:
    """A checkpoint whose `state_dict` is the element-wise mean of the given ones' (their EMA weights, or
    with `weights="training"` the training weights an EMA run also stores); hyperparameters, tokenizers
    and version come from the last. Integer buffers are not averaged: the last one's are kept."""
    if len(paths) < 2:
        raise CheckpointError(f"averaging needs at least two checkpoints, got {len(paths)}")
    total: dict[str, torch.Tensor] = {}
    last = None
    for path in paths:
        state = read_checkpoint(path)
        if last is not None and not _same_model(state.get("hyper_parameters") or {}, last.get("hyper_parameters") or {}):
            raise CheckpointError(f"{path} is not of the same model as {paths[0]} (its hyperparameters differ)")
        current = weights_of(state, path, weights)
        if total and (current.keys() != total.keys() or any(current[k].shape != total[k].shape for k in total)):
            raise CheckpointError(f"{path} does not have the same weights (names or shapes) as {paths[0]}")
        for name, tensor in current.items():
            if tensor.is_floating_point():
                total[name] = total.get(name, 0) + tensor.double()  # float64: no rounding drift over many
            else:
                total[name] = tensor.clone()
        last = state
    dtypes = {name: t.dtype for name, t in current.items()}  # the last checkpoint's
    averaged = {name: (t / len(paths)).to(dtypes[name]) if t.is_floating_point() else t for name, t in total.items()}
    out = {k: last[k] for k in KEPT if k in last}
    out["state_dict"] = averaged
    out["averaged_from"] = [str(p) for p in paths]
    return out


def _same_model(a: dict, b: dict) -> bool:
    """Equal hyperparameters, where one checkpoint may predate `net` (its network's settings flat among the task's
    own) and the other not: a run resumed across that change averages as one."""
    if ("net" in a) != ("net" in b):
        nested = a if "net" in a else b
        a, b = nested_hparams(a, nested["net"]), nested_hparams(b, nested["net"])
    return a == b
