"""Where a run's own records go (`run_folder`): its `config.yaml`, `summary.json`, figures and, unless
`--checkpoint.dirpath` says otherwise, `checkpoints/`. Below every layer: the task modules save their figures
there and the training layer everything else, without either importing the other. Reads only a trainer's
public attributes (its loggers, their `save_dir`, `name` and `version`).
"""

from __future__ import annotations

import contextlib
import json
import os
import weakref
from pathlib import Path


def run_folder(trainer) -> Path:
    """The folder of this run's own records (`config.yaml`, `summary.json`, the figures, `checkpoints/`), one per run
    whatever the logger (README, "Training": W&B's `<root>/<project>/<run id>`, else `<root>/version_<n>`). Not
    `trainer.log_dir`, which for W&B is shared by every run of the root directory, and for no logger is the root
    directory itself. Ask on rank zero (the W&B run id exists there)."""
    logger = trainer.loggers[0] if trainer.loggers else None
    if logger is None:
        return _UNLOGGED_RUN_FOLDERS.get(trainer, Path(trainer.default_root_dir))
    save_dir = logger.save_dir if logger.save_dir is not None else trainer.default_root_dir
    version = logger.version if isinstance(logger.version, str) else f"version_{logger.version}"
    return Path(save_dir) / str(logger.name) / version


# The folder `claim_run_folder` chose for each trainer without a logger (a logger's version says it otherwise).
_UNLOGGED_RUN_FOLDERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def claim_run_folder(trainer) -> None:
    """Before fitting, a run without a logger takes the next `<root>/version_<n>` (n one past the highest in the
    root directory, as CSVLogger and TensorBoardLogger number theirs) as its `run_folder`, and its checkpoints
    go to the `checkpoints/` there rather than to Lightning's `<root>/checkpoints`, which every such run would
    share. Nothing is created here: a run refused before it trains leaves no folder behind."""
    if trainer.loggers:
        return
    root = Path(trainer.default_root_dir)
    taken = [int(p.name[len("version_") :]) for p in root.glob("version_*") if p.name[len("version_") :].isdigit()]
    folder = root / f"version_{max(taken, default=-1) + 1}"
    _UNLOGGED_RUN_FOLDERS[trainer] = folder
    for callback in trainer.checkpoint_callbacks:
        if callback.dirpath is None:
            callback.dirpath = str(folder / "checkpoints")


def run_record(ckpt: Path | None) -> dict:
    """What the training run left beside its checkpoint: its summary.json (the test scores) and config.yaml."""
    record: dict = {}
    if ckpt is None:
        return record
    for folder in list(ckpt.resolve().parents)[:3]:
        summary, config = folder / "summary.json", folder / "config.yaml"
        if "summary" not in record and summary.is_file():
            with contextlib.suppress(OSError, ValueError):
                record["summary"] = json.loads(summary.read_text(encoding="utf-8"))
        if "config" not in record and config.is_file():
            with contextlib.suppress(OSError):
                record["config"] = config.read_text(encoding="utf-8")
    return record


def data_settings(config_yaml: str) -> dict:
    """The data settings worth a card (languages, corpus, vocabulary) from a run's config.yaml."""
    if not config_yaml:
        return {}
    import yaml

    try:
        data = (yaml.safe_load(config_yaml) or {}).get("data", {}) or {}
    except yaml.YAMLError:
        return {}
    args = data.get("init_args", data) if isinstance(data, dict) else {}
    keys = ("data_dir", "src_lang", "tgt_lang", "train_prefix", "test_prefix", "src_tokenizer", "src_vocab_size", "shared_vocab")
    return {k: args[k] for k in keys if isinstance(args, dict) and args.get(k) is not None}


def launcher_pid(trainer) -> int | None:
    """In a DDP process that Lightning started (rank > 0 on this node, Lightning's own environment rather than
    torchrun's or SLURM's), the pid of the process that started it (local rank 0); None elsewhere."""
    if trainer.local_rank > 0 and type(trainer.strategy.cluster_environment).__name__ == "LightningEnvironment":
        return os.getppid()
    return None
