"""A task module from its checkpoint, through `inference.networks.read_network` first: a checkpoint of the other
task, or one whose network settings hold a name this version does not know, is one `CheckpointError` line
(rather than Lightning's "blocked to prevent arbitrary code execution" or a jsonargparse traceback), and the
settings of a checkpoint written before the task modules took `net` are gathered into it (Lightning passes a
checkpoint's hyperparameters to `__init__` by name and drops those it does not take, which would build the
default network)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from inference.networks import read_network


def load_task(load: Callable[..., Any], task: str, path, *args, **kwargs):
    """`load(path, *args, **kwargs)` (Lightning's `load_from_checkpoint`) with `net` given: the checkpoint's own,
    checked. A `net` in `kwargs` replaces it; a remote path or an open file (which Lightning reads itself) is
    passed on as it is."""
    if isinstance(path, (str, Path)) and "://" not in str(path):
        kwargs.setdefault("net", read_network(path, task, verify=False).hparams["net"])
    return load(path, *args, **kwargs)
