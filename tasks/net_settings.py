"""A task module's `net` (its network's settings, models/config.py) from a checkpoint of any age.

Checkpoints written before the task modules took `net` hold each setting flat among the module's own
hyperparameters (`d_model: 16` beside `lr: 0.003`); Lightning passes a checkpoint's hyperparameters to `__init__`
by name and drops the names it does not take, which would build the default network. `load_with_settings`
gathers them into `net` first (`models.config.nested_hparams`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from common.checkpoints import read_checkpoint
from models.config import TransformerConfig, nested_hparams


def load_with_settings(load: Callable[..., Any], path, settings: type[TransformerConfig], *args, **kwargs):
    """`load(path, *args, **kwargs)` (Lightning's `load_from_checkpoint`) with `net` given: the checkpoint's own,
    gathered by `nested_hparams` where it predates `net`. A `net` in `kwargs`, a remote path or an open file
    (which Lightning reads itself) are passed on as they are."""
    if "net" not in kwargs and isinstance(path, (str, Path)) and "://" not in str(path):
        hparams = read_checkpoint(path, verify=False).get("hyper_parameters") or {}
        kwargs["net"] = nested_hparams(hparams, settings)["net"]
    return load(path, *args, **kwargs)
