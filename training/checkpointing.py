"""Where checkpoints are written, and when: the one checkpoint callback every recipe gets from the CLI
(training/cli.py), and how a checkpoint reaches the disk.

- `BestAndLastCheckpoint`: Lightning's `ModelCheckpoint`, with `last.ckpt` kept up to date every epoch,
  ties between scores going to the later checkpoint, metrics not logged every epoch waited for, a
  diverged `last.ckpt` rolled back, the stops at a step (a time limit, `max_steps`), and `write_last`
  for the stop on a signal (training/signals.py).
- `AtomicCheckpointIO`: a checkpoint is written to a temporary file and renamed over the old one,
  so an interrupted save never leaves a truncated `last.ckpt` in place of a good one; a failed write
  (full disk, read-only folder) is one `OutputError` naming the checkpoint.
- `check_writable`: a folder's writability, checked before a run writes there.

`BestAndLastCheckpoint` overrides and calls protected `ModelCheckpoint` methods (`_save_topk_checkpoint`,
`_save_last_checkpoint`, `_should_save_on_train_epoch_end`, `_monitor_candidates`): Lightning 2.6 has no
public way to rewrite last.ckpt every epoch or to skip a metric not logged yet. They and Lightning's private
loop state (training/lightning_internals.py, the only other such place) are checked by name and signature in
tests/test_lightning_internals.py.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Literal

import lightning as L
import torch
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.plugins.io import TorchCheckpointIO

from models.files import remove_stale_temporaries, temporary_name

from .faults import OutputError, atomic_torch_save, write_fault
from .lightning_internals import logged_in_running_loop, validation_or_epoch_end_follows


class TrainingDivergedError(RuntimeError):
    """The training loss became NaN or infinite; the message names the step and epoch."""


class BestAndLastCheckpoint(ModelCheckpoint):
    """`ModelCheckpoint` whose `last.ckpt` follows every epoch again, and that waits for a monitored
    metric that is not computed every epoch.

    Since Lightning 2.6, the end-of-epoch `last.ckpt` is written only when a top-k checkpoint is
    written at the same step: with `save_top_k=1` it stays at the best epoch, and `--ckpt_path last`
    would silently throw away every epoch since (seen here: a 2-hour run's last.ckpt stuck at epoch 7
    of 24). Here, at the end of each epoch, `last.ckpt` is written if nothing was saved at that step.

    `ties="later"` (the default) lets a score equal to the k-th best replace it, and makes the latest of
    equally good checkpoints the best one, as fairseq's `checkpoint_best.pt` does (`is_better` is
    `a >= b` in fairseq/checkpoint_utils.py); Lightning keeps the earliest (`ties="earlier"`). Coarse
    metrics tie often (accuracy on 500 images moves in steps of 0.2 %), and the earliest of a run of
    equal scores is the checkpoint that has trained and averaged least.

    It also owns what happens to its files when training stops early:
    - SIGTERM or SIGINT: `training/signals.py` decides where the run stops and has `write_last` write
      `last.ckpt` there.
    - A loss that is not finite (`FiniteLossCheck`): the weights of a checkpoint show their loss only
      at the next step, so the previous `last.ckpt` is kept (a hard link, `.last.ckpt.prev-<pid>`)
      until the next one is written; when the loss of the weights in `last.ckpt` is NaN or infinite,
      that previous one becomes `last.ckpt` again. `last.ckpt` thus always holds weights whose
      training loss was seen finite (with the check on every step, its default).
    - At the start of fitting, temporary files that killed runs left in its folder are removed
      (`remove_stale_temporaries`)."""

    def __init__(self, *args: Any, ties: Literal["later", "earlier"] = "later", **kwargs: Any) -> None:
        if ties not in ("later", "earlier"):
            raise ValueError(f'ties must be "later" or "earlier", not {ties!r}')
        super().__init__(*args, **kwargs)
        self.ties = ties
        self._logged_at_step: int | None = None  # when a loop last logged the monitored metric
        self._fitting = True
        self.last_step: int | None = None  # the global step of the weights in last_model_path, when written by this run
        self._previous_last: tuple[str, int | None, str | None] | None = None  # (path, step, kept hard link)

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        super().setup(trainer, pl_module, stage)
        self._fitting = stage == "fit"
        if self._fitting and trainer.is_global_zero and self.dirpath and "://" not in str(self.dirpath):
            check_writable(self.dirpath, "last.ckpt")
            remove_stale_temporaries(self.dirpath)

    def check_monitor_top_k(self, trainer: L.Trainer, current: torch.Tensor | None = None) -> bool:
        if super().check_monitor_top_k(trainer, current):
            return True
        if self.ties == "earlier" or current is None:
            return False
        # Only reached with k checkpoints already kept; the decision is reduced across ranks as Lightning's is.
        tie = bool(current == self.best_k_models[self.kth_best_model_path]) and self._logged_at_step == trainer.global_step
        return trainer.strategy.reduce_boolean_decision(tie)

    def _note_if_logged(self, trainer: L.Trainer) -> None:
        # Lightning's callback_metrics keep a metric's last value until it is logged again: a metric
        # computed every n epochs (val/bleu with bleu_every_n_epochs > 1) would tie with itself in the
        # epochs between. The validation loop's results are gone by on_train_epoch_end, where Lightning
        # usually saves, so both ends note it.
        if self.monitor is not None and logged_in_running_loop(trainer, self.monitor):
            self._logged_at_step = trainer.global_step

    def state_dict(self) -> dict[str, Any]:
        # Lightning names the first of equal best scores (dicts keep insertion order, which is the order of
        # the scores); the later one is named before this state goes into the checkpoint being written.
        if self.ties == "later" and self.best_k_models:
            best = self.best_model_score
            self.best_model_path = [path for path, score in self.best_k_models.items() if score == best][-1]
        return super().state_dict()

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._note_if_logged(trainer)
        super().on_train_epoch_end(trainer, pl_module)
        if self._should_save_on_train_epoch_end(trainer):
            self._write_last_if_missed(trainer)

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._note_if_logged(trainer)
        super().on_validation_end(trainer, pl_module)
        if not self._should_save_on_train_epoch_end(trainer):
            self._write_last_if_missed(trainer)

    def load_state_dict(self, state_dict: dict) -> None:
        # `trainer.test(ckpt_path="best")` loads the best checkpoint's callback states too: its idea of
        # the last checkpoint (none yet, after a one-epoch run) would replace this run's in the summary.
        if not self._fitting:
            return
        # A resumed run writes to a new folder, and Lightning then forgets the best score so far: the
        # resumed run's first validation would become "the best" whatever the earlier epochs scored.
        # The scores carry over; Lightning never removes a file outside the current folder, so the
        # earlier run's checkpoints stay as they were.
        super().load_state_dict({**state_dict, "dirpath": self.dirpath})

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs, batch, batch_idx: int) -> None:
        super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
        # While the monitored metric does not exist yet (val/bleu before its first epoch), Lightning puts
        # off the whole every-n-steps save, last.ckpt included, to the next validation: a run killed
        # before then would lose every step since the last epoch. last.ckpt is written on time.
        every = self._every_n_train_steps
        if (
            every >= 1
            and trainer.global_step % every == 0
            and self.monitor is not None
            and self.monitor not in self._monitor_candidates(trainer)
        ):
            self._write_last_if_missed(trainer)
        # A step followed by validation (the epoch's last, or val_check_interval's) stops after it: a
        # run resumed from a checkpoint written here would skip that validation (Lightning's rule).
        if not validation_or_epoch_end_follows(trainer):
            self._end_if_training_ends_here(trainer)

    def _save_topk_checkpoint(self, trainer: L.Trainer, monitor_candidates: dict[str, torch.Tensor]) -> None:
        # A metric computed every n epochs (val/bleu with bleu_every_n_epochs > 1) is absent until its
        # first epoch: no best checkpoint yet, rather than Lightning's error. last.ckpt is written regardless.
        if self.monitor is not None and self.monitor not in monitor_candidates:
            return
        super()._save_topk_checkpoint(trainer, monitor_candidates)

    def _write_last_if_missed(self, trainer: L.Trainer) -> None:
        # `_should_skip_saving_checkpoint` is also true when a checkpoint was already saved at this step.
        if self.save_last and not self._should_skip_saving_checkpoint(trainer):
            self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))

    def _save_last_checkpoint(self, trainer: L.Trainer, monitor_candidates: dict[str, torch.Tensor]) -> None:
        if not self.save_last:
            return
        # Keep the last checkpoint until the new one's weights have shown a finite loss (see the class's
        # docstring): a hard link costs no copy, only the old file's space until the next save. The last
        # checkpoint of a resumed run lies in the earlier run's folder, which nothing here overwrites.
        self._drop_previous_last()
        previous, kept = self.last_model_path, None
        if previous and trainer.is_global_zero and os.path.isfile(previous):
            if os.path.samefile(os.path.dirname(previous), self.dirpath):
                kept = temporary_name(previous, "prev")
                try:
                    os.link(previous, kept)
                except OSError:  # no hard links on this file system: no going back
                    kept = None
            self._previous_last = (previous, self.last_step, kept)
        super()._save_last_checkpoint(trainer, monitor_candidates)
        self.last_step = trainer.global_step

    def _drop_previous_last(self) -> None:
        if self._previous_last and self._previous_last[2]:
            Path(self._previous_last[2]).unlink(missing_ok=True)
        self._previous_last = None

    def _go_back_to_previous_last(self, trainer: L.Trainer) -> None:
        """`last.ckpt` holds the weights whose loss was just found NaN or infinite: the one before it
        (or none) becomes the last checkpoint again."""
        diverged = self.last_model_path
        if not diverged or self.last_step != trainer.global_step or not trainer.is_global_zero:
            return
        path, step, kept = self._previous_last or ("", None, None)
        same = bool(path) and os.path.abspath(path) == os.path.abspath(diverged)
        if kept:
            os.replace(kept, path)
        elif same:
            path = ""  # overwritten, and no link kept: nothing to go back to
        if not (kept and same):
            Path(diverged).unlink(missing_ok=True)
        self._previous_last = None
        self.last_model_path, self.last_step = (path, step) if path and os.path.isfile(path) else ("", None)

    def write_last(self, trainer: L.Trainer) -> str | None:
        """Write last.ckpt at this step unless it was written here already (a stop at this step: a signal,
        a time limit, `max_steps`); its path, or None when `--checkpoint.save_last` is off."""
        if self.last_step != trainer.global_step:
            self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))
        return self.last_model_path if self.last_step == trainer.global_step else None

    def _end_if_training_ends_here(self, trainer: L.Trainer) -> None:
        """Training ends at this step, in the middle of an epoch: `--trainer.max_steps` is reached, or the
        `--trainer.max_time` timer (any callback setting `trainer.should_stop`) asked to stop. Lightning
        would then end the epoch and write last.ckpt with the epoch marked done, and a resumed run would
        skip the rest of it; a time limit would also run a validation that an uninterrupted run never
        does. Here last.ckpt is written at the step, as for a signal, so the resume continues the epoch
        at the next batch; a time-limit stop raises `StoppedMidEpoch` (the CLI tests and reports as
        after any end of training)."""
        time_up = trainer.should_stop
        if not (time_up or 0 <= trainer.max_steps <= trainer.global_step):
            return
        written = self.write_last(trainer)
        if time_up:
            raise StoppedMidEpoch(trainer.current_epoch, trainer.global_step, written)

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        if isinstance(exception, TrainingDivergedError):
            self._go_back_to_previous_last(trainer)  # and no save_on_exception of a diverged model
            return
        self._drop_previous_last()
        super().on_exception(trainer, pl_module, exception)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        super().on_train_end(trainer, pl_module)
        self._drop_previous_last()


class StoppedMidEpoch(BaseException):
    """Training stopped at the end of step `step` in the middle of epoch `epoch` because
    `trainer.should_stop` was set (the `--trainer.max_time` timer), with last.ckpt written there
    (`checkpoint`, None when --checkpoint.save_last is off). A BaseException like `signals.Stopped`, so
    that it leaves `trainer.fit` the way Lightning lets a stop leave it, and no `except Exception` on the
    way swallows it; `training.cli.run_fit` catches it and goes on as after a finished fit."""

    def __init__(self, epoch: int, step: int, checkpoint: str | None):
        super().__init__(f"stopped at epoch {epoch} step {step}")
        self.epoch, self.step, self.checkpoint = epoch, step, checkpoint


class AtomicCheckpointIO(TorchCheckpointIO):
    """`TorchCheckpointIO` that writes `<dir>/.<name>.tmp-<pid>`, flushes it to disk and renames it
    onto `<name>` (`os.replace` is atomic within a file system): a reader, or a resume after a crash,
    sees the old checkpoint or the new one, never half of one. A write that fails (full disk, file-size
    limit, read-only folder, a file where a folder should be) removes the temporary file and raises
    `faults.OutputError` naming the checkpoint. Remote paths (s3://…) keep the default behaviour."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options: Any | None = None) -> None:
        if storage_options is not None:
            raise TypeError(f"{type(self).__name__}.save_checkpoint takes no storage_options, got {storage_options}")
        if "://" in str(path):
            return super().save_checkpoint(checkpoint, path, storage_options)
        path = Path(path)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise OutputError(write_fault(err, path), err.errno) from None
        atomic_torch_save(checkpoint, path)


def check_writable(folder: str | Path, name: str) -> None:
    """Make `folder` and write a file there, so that a read-only place, or a path under a regular file,
    is one `OutputError` (naming `folder/name`, the file to come) before training rather than after
    its first epoch."""
    folder = Path(folder)
    probe = temporary_name(folder / "write-check", "tmp")
    try:
        folder.mkdir(parents=True, exist_ok=True)
        probe.open("wb").close()
        probe.unlink()
    except OSError as err:
        raise OutputError(write_fault(err, folder / name), err.errno) from None
