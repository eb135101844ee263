"""How a run resumes (docs/guide/training.md, "Checkpoints and exact resume"): `--ckpt_path` resolved and checked before
anything is trained (`prepare_resume`), and the one answer to "which is the last checkpoint" (`last_checkpoint`) that
`--ckpt_path last`, the stop lines and the NaN line all give. What a resume restores beyond Lightning's own state:
the RNG states and the loader's position (training/callbacks.py), the best scores so far
(training/checkpointing.BestCheckpoint)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import lightning as L
from lightning.pytorch.callbacks import EarlyStopping
from lightning.pytorch.utilities import rank_zero_info

from common.checkpoints import read_checkpoint
from common.errors import CheckpointError
from common.files import remove_stale_temporaries
from common.runs import run_folder

from .checkpointing import last_path
from .loggers import continue_wandb_run
from .progress import time_limit


class NothingToTrain(Exception):
    """A resumed run whose checkpoint already reached `--trainer.max_steps`, `max_epochs` or `max_time`:
    scripts/fit.py says so in one line and exits with `common.exits.EXIT_NOTHING_TO_DO`, before any folder is made."""


def last_checkpoint(trainer: L.Trainer) -> str | None:
    """The checkpoint `--ckpt_path last` resumes from: the newest of the `last*.ckpt` files under the trainer's root
    directory (each run writes its own, in a folder of its own) and this run's `last.ckpt` wherever
    `--checkpoint.dirpath` puts it. The one answer to "which is the last checkpoint": what `--ckpt_path last` takes,
    and what the lines that end a run (a signal, a time limit, a NaN loss) name beside the command that resumes."""
    candidates = list(Path(trainer.default_root_dir).rglob("last*.ckpt"))
    own = last_path(trainer)
    if own is not None and own.is_file():
        candidates.append(own)
    return str(max(candidates, key=lambda p: p.stat().st_mtime)) if candidates else None


def prepare_resume(trainer: L.Trainer, model: L.LightningModule, ckpt_path: str | None) -> str | None:
    """Everything a resume needs before `fit`: "last" resolved to `last_checkpoint`, the file checked
    (`check_resume_checkpoint`), `NothingToTrain` when it has nothing left (`check_something_left`), a killed save's
    temporary files removed, the W&B run continued in its folder (`keep_earlier_checkpoints`); the path `fit` gets."""
    if ckpt_path == "last":  # each run logs to a new version folder: Lightning's own "last" would look in an empty one
        ckpt_path = last_checkpoint(trainer)
        if ckpt_path is None:
            raise CheckpointError(f"--ckpt_path last: no last.ckpt under {trainer.default_root_dir} to resume from")
        rank_zero_info(f"Resuming the run in {Path(ckpt_path).parent.parent} from {ckpt_path}")
    if ckpt_path is None:
        return None
    state = check_resume_checkpoint(ckpt_path, model)
    if state is None:
        return ckpt_path
    check_something_left(state, trainer, ckpt_path)
    if trainer.is_global_zero:
        remove_stale_temporaries(Path(ckpt_path).parent)  # the resumed run's, if it was killed mid-save
    run_id = continue_wandb_run(trainer.loggers, state)
    if run_id:
        rank_zero_info(f"Continuing W&B run {run_id}")
        keep_earlier_checkpoints(trainer)
    return ckpt_path


def check_resume_checkpoint(path: str, model: L.LightningModule) -> dict | None:
    """One clear `CheckpointError` before training, rather than a traceback from inside `fit`, when
    `--ckpt_path` is missing, unreadable, of another task, or of another model size. Returns the
    checkpoint's contents (tensors memory-mapped), or None for a remote path."""
    if "://" in path:
        return None  # remote: Lightning reads it
    state = read_checkpoint(path)
    if "loops" not in state:
        raise CheckpointError(f"--ckpt_path {path} is not a Lightning training checkpoint (no loop state to resume)")
    found = (state.get("hyper_parameters") or {}).get("_class_path", "")
    if found and found.rsplit(".", 1)[-1] != type(model).__name__:
        raise CheckpointError(f"--ckpt_path {path} holds a {found} checkpoint, but this run trains a {type(model).__name__}")
    ours = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    theirs = {k: tuple(v.shape) for k, v in state["state_dict"].items()}
    if set(ours) != set(theirs):
        raise CheckpointError(f"--ckpt_path {path} holds a checkpoint of another model: its parameter names differ")
    if ours != theirs:
        name = next(k for k in ours if ours[k] != theirs[k])
        raise CheckpointError(
            f"--ckpt_path {path} does not fit this model's sizes ({name}: {theirs[name]} in the checkpoint, {ours[name]} here)"
        )
    return state


def check_something_left(state: dict, trainer: L.Trainer, path: str) -> None:
    """`NothingToTrain` when the checkpoint being resumed has already reached `max_steps`, `max_epochs` or
    `max_time` (Lightning counts the time of the earlier runs: it would train nothing, test again and exit
    0 as if it had trained)."""
    steps = state.get("global_step", 0)
    if 0 <= trainer.max_steps <= steps:
        raise _nothing_left("trainer.max_steps", trainer.max_steps, path, f"has already trained {steps} steps")
    # `processed`: a checkpoint written at an epoch's end (last.ckpt) counts that epoch as processed, not yet completed.
    epochs = state["loops"]["fit_loop"]["epoch_progress"]["current"]["processed"]
    if trainer.max_epochs is not None and 0 <= trainer.max_epochs <= epochs:
        raise _nothing_left("trainer.max_epochs", trainer.max_epochs, path, f"has already trained {epochs} epochs")
    for stopper in (cb for cb in trainer.callbacks if isinstance(cb, EarlyStopping)):
        saved = (state.get("callbacks", {}).get(stopper.state_key) or {}).get("wait_count", 0)
        if saved >= stopper.patience:  # it stopped there: resumed, it would train another epoch only to stop again
            why = f"stopped early ({stopper.monitor} did not improve for {saved} validations)"
            raise _nothing_left("early_stopping.patience", stopper.patience, path, why)
    timer = time_limit(trainer)
    if timer is not None:
        limit = timer.time_remaining()  # before fitting, the whole duration
        elapsed = (state.get("callbacks", {}).get(timer.state_key) or {}).get("time_elapsed", {}).get("train", 0.0)
        if elapsed >= limit:
            counted = "a resumed run's time limit counts the time already trained"
            why = f"has already trained for {timedelta(seconds=int(elapsed))} ({counted})"
            raise _nothing_left("trainer.max_time", timedelta(seconds=int(limit)), path, why)


def _nothing_left(option: str, value, path: str, why: str) -> NothingToTrain:
    return NothingToTrain(f"--{option} {value}: {path} {why}; pass a larger --{option} to train on")


def keep_earlier_checkpoints(trainer: L.Trainer) -> None:
    """A run that continues its W&B run also continues its log folder (`<project>/<run id>/`), where
    Lightning would write the resumed run's checkpoints over the earlier ones: they go to the first
    free `checkpoints-<n>` beside `checkpoints` instead (`--ckpt_path last` takes the newest)."""
    if not trainer.loggers:
        return
    folder = run_folder(trainer)
    for callback in trainer.checkpoint_callbacks:
        if callback.dirpath is None and (folder / "checkpoints").exists():
            n = 2
            while (folder / f"checkpoints-{n}").exists():
                n += 1
            callback.dirpath = str(folder / f"checkpoints-{n}")
