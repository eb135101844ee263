"""Where checkpoints are written, and when: `checkpoint_callbacks`, one job a callback: the best k (`BestCheckpoint`),
`last.ckpt` (`last_checkpoints`), its rollback after a NaN (`KeepLastUntilFinite`), and `write_last` for a run that
stops at a step. Why each is as it is: docs/guide/training.md, "How the callbacks keep these promises"."""

from __future__ import annotations

import contextlib
import os
from datetime import timedelta
from pathlib import Path
from typing import Any, Literal

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback, ModelCheckpoint

from common.checkpoints import read_checkpoint
from common.errors import CheckpointError, TrainingDivergedError
from common.files import remove_stale_temporaries, temporary_name

from .checkpoint_io import check_writable
from .lightning_internals import logged_in_running_loop

LAST = "last"  # last.ckpt


class BestCheckpoint(ModelCheckpoint):
    """`ModelCheckpoint` for the best checkpoints, chosen when the monitored metric is computed; ties go to the later by default.
    A metric computed every n epochs is waited for, and killed runs' temporary files are removed at the start of fitting
    (why, and fairseq's rule for ties: docs/guide/training.md, "How the callbacks keep these promises")."""

    def __init__(
        self,
        *args: Any,
        ties: Literal["later", "earlier"] = "later",
        save_last: bool | Literal["link"] | None = True,
        every_n_train_steps: int | None = None,
        train_time_interval: timedelta | None = None,
        **kwargs: Any,
    ) -> None:
        if ties not in ("later", "earlier"):
            raise ValueError(f'ties must be "later" or "earlier", not {ties!r}')
        if every_n_train_steps is not None and every_n_train_steps < 0:
            raise ValueError(f"every_n_train_steps must be >= 0, not {every_n_train_steps}")
        super().__init__(*args, save_last=False, **kwargs)
        self.ties = ties
        self.keeps_last = bool(save_last)
        self.last_every_n_train_steps = every_n_train_steps or 0
        self.last_train_time_interval = train_time_interval
        self._logged_at_step: int | None = None  # when a loop last logged the monitored metric
        self._fitting = True

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        super().setup(trainer, pl_module, stage)
        self._fitting = stage == "fit"
        if self._fitting and trainer.is_global_zero and self.dirpath and "://" not in str(self.dirpath):
            first = f"{LAST}.ckpt" if self.keeps_last else Path(self.format_checkpoint_name({"epoch": 0, "step": 0})).name
            check_writable(self.dirpath, first)
            remove_stale_temporaries(self.dirpath)

    def check_monitor_top_k(self, trainer: L.Trainer, current: torch.Tensor | None = None) -> bool:
        if super().check_monitor_top_k(trainer, current):
            return True
        if self.ties == "earlier" or current is None:
            return False
        # Only reached with k checkpoints already kept; the decision is reduced across ranks as Lightning's is.
        tie = bool(current == self.best_k_models[self.kth_best_model_path]) and self._logged_at_step == trainer.global_step
        return trainer.strategy.reduce_boolean_decision(tie)

    def _note_if_logged(self, trainer: L.Trainer) -> bool:
        """Whether the monitored metric exists yet (no best checkpoint before it does)."""
        # Lightning's callback_metrics keep a metric's last value until it is logged again: a metric
        # computed every n epochs would tie with itself in the epochs between. The validation loop's
        # results are gone by on_train_epoch_end, where Lightning usually saves, so both ends note it.
        if self.monitor is not None and logged_in_running_loop(trainer, self.monitor):
            self._logged_at_step = trainer.global_step
        return self.monitor is None or self.monitor in trainer.callback_metrics

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._note_if_logged(trainer):
            super().on_train_epoch_end(trainer, pl_module)

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._note_if_logged(trainer):
            super().on_validation_end(trainer, pl_module)

    def state_dict(self) -> dict[str, Any]:
        # Lightning names the first of equal best scores (dicts keep insertion order, which is the order of
        # the scores); the later one is named before this state goes into the checkpoint being written.
        if self.ties == "later" and self.best_k_models:
            best = self.best_model_score
            self.best_model_path = [path for path, score in self.best_k_models.items() if score == best][-1]
        return super().state_dict()

    def on_load_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        # Checkpoints written before this class had its name keep their best scores under the old one.
        states = checkpoint.get("callbacks", {})
        if self.state_key not in states:
            old = [s for k, s in states.items() if k.startswith("BestAndLastCheckpoint{") and s.get("monitor") == self.monitor]
            if len(old) == 1:
                states[self.state_key] = old[0]

    def load_state_dict(self, state_dict: dict) -> None:
        # `trainer.test(ckpt_path="best")` loads the best checkpoint's callback states too: its idea of
        # the best so far would replace this run's in the summary.
        if not self._fitting:
            return
        # A resumed run writes to a new folder, and Lightning then forgets the best score so far: the
        # resumed run's first validation would become "the best" whatever the earlier epochs scored.
        # The scores carry over; Lightning never removes a file outside the current folder, so the
        # earlier run's checkpoints stay as they were.
        super().load_state_dict({**state_dict, "dirpath": self.dirpath})


def last_checkpoints(best: BestCheckpoint) -> list[ModelCheckpoint]:
    """The plain `ModelCheckpoint`s that write `best`'s folder's `last.ckpt` (none when `best.keeps_last` is off):
    where Lightning checks for the best, and every `every_n_train_steps` / `train_time_interval` if `best` has them
    (docs/guide/training.md, "How the callbacks keep these promises")."""
    if not best.keeps_last:
        return []
    same = dict(dirpath=best.dirpath, filename=LAST, monitor=None, save_top_k=1, enable_version_counter=False)
    lasts = [ModelCheckpoint(**same, every_n_epochs=1)]
    if best.last_every_n_train_steps:
        lasts.append(ModelCheckpoint(**same, every_n_train_steps=best.last_every_n_train_steps))
    if best.last_train_time_interval is not None:
        lasts.append(ModelCheckpoint(**same, train_time_interval=best.last_train_time_interval))
    return lasts


def checkpoint_callbacks(best: BestCheckpoint) -> list[Callback]:
    """Every callback that writes this run's checkpoints, in the order they must run: the one that acts
    before a save (`ModelCheckpoint`s run after all other callbacks of a hook), then the checkpoints."""
    return [KeepLastUntilFinite(), best, *last_checkpoints(best)]


def last_path(trainer: L.Trainer) -> Path | None:
    """Where this run writes `last.ckpt` (the file may not exist yet); None when it writes none, or before
    the checkpoint folder is known (Lightning sets it up when fitting starts). Which checkpoint a run resumes
    from is training/resume.last_checkpoint."""
    for callback in trainer.checkpoint_callbacks:
        if callback.monitor is None and callback.filename == LAST and callback.dirpath:
            return Path(callback.dirpath) / f"{LAST}.ckpt"
    return None


def checkpoint_step(path: str | Path) -> int | None:
    """The global step a checkpoint file was written at (read memory-mapped: no tensor is loaded), or None
    when there is no readable checkpoint there."""
    try:
        return int(read_checkpoint(path, verify=False)["global_step"])
    except (CheckpointError, KeyError, TypeError, ValueError):
        return None


def write_last(trainer: L.Trainer) -> str | None:
    """Write `last.ckpt` at this step unless it holds this step already; its path, or None when the run writes
    no last.ckpt. Called on every rank (a save is collective); rank zero, which owns the file, decides."""
    path = last_path(trainer)
    if path is None:
        return None
    written = trainer.is_global_zero and checkpoint_step(path) == trainer.global_step
    if not trainer.strategy.broadcast(written):
        trainer.save_checkpoint(path, weights_only=False)  # a full checkpoint, resumable (Lightning logs its guess otherwise)
    return str(path)


class KeepLastUntilFinite(Callback):
    """`last.ckpt` always holds weights whose training loss was seen finite: the file in place is kept as a hard
    link before each save, and put back when the loss of the step it was written at diverges; rank zero only
    (docs/guide/training.md, "How the callbacks keep these promises")."""

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        if isinstance(exception, TrainingDivergedError):
            self._go_back(trainer)
        self._drop(trainer)

    def _keep(self, trainer: L.Trainer, *hook_args) -> None:
        path = last_path(trainer)
        if path is None or not trainer.is_global_zero or not path.is_file():
            return
        kept = temporary_name(path, "prev")
        if kept.is_file() and os.path.samefile(kept, path):
            return
        # Written at this very step already (by the step's checkpoint, before the epoch's): its loss is yet
        # to be seen, and the one kept before it stays.
        if checkpoint_step(path) == trainer.global_step:
            return
        kept.unlink(missing_ok=True)
        with contextlib.suppress(OSError):  # no hard links on this file system: no going back
            os.link(path, kept)

    def _go_back(self, trainer: L.Trainer) -> None:
        path = last_path(trainer)
        if path is None or not trainer.is_global_zero or checkpoint_step(path) != trainer.global_step:
            return
        kept = temporary_name(path, "prev")
        if kept.is_file() and not os.path.samefile(kept, path):
            os.replace(kept, path)
        else:
            path.unlink(missing_ok=True)

    def _drop(self, trainer: L.Trainer, *hook_args) -> None:
        path = last_path(trainer)
        if path is not None and trainer.is_global_zero:
            temporary_name(path, "prev").unlink(missing_ok=True)

    # Lightning calls a callback's hooks as hook(trainer, pl_module, *the hook's own arguments).
    on_train_batch_end = on_train_epoch_end = on_validation_end = _keep
    on_train_end = _drop
