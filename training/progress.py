"""Progress as lines, for output that is not a terminal (README.md's "Output to a file" shows them): under `nohup`,
SLURM or CI a progress bar is either silent or thousands of carriage returns, so `ProgressLog` prints one line every
N steps, at least one every `--log_every_n_seconds`, and one after each validation with what it logged. The ETA is
the sooner of the steps left at the rate so far and the time left of `--trainer.max_time`. `EpochBar` is the bar on
a terminal."""

from __future__ import annotations

import math
import sys
import time
from datetime import timedelta

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback, RichProgressBar, Timer
from lightning.pytorch.trainer.states import TrainerFn

from common.progress import eta, is_terminal, progress_line
from datamodules.vocab import PAD

from .lightning_internals import logged_in_running_loop


def units_in(batch, pad_id: int = PAD) -> tuple[int, str]:
    """What a batch holds for the throughput: target tokens (a translation batch; neither padding nor the
    start token counted), else examples (MNIST's images)."""
    tgt = getattr(batch, "tgt", None)
    if isinstance(tgt, torch.Tensor):
        return int(tgt[:, 1:].ne(pad_id).sum()), "tok"
    first = batch[0] if isinstance(batch, list | tuple) else batch
    return (len(first), "ex") if hasattr(first, "__len__") else (0, "ex")


def time_limit(trainer: L.Trainer) -> Timer | None:
    """The timer of `--trainer.max_time`, if it was given."""
    return next((c for c in trainer.callbacks if isinstance(c, Timer) and c.time_remaining() is not None), None)


def time_limit_given(timer: Timer) -> timedelta:
    """The duration `--trainer.max_time` gave, to the second (it counts the runs a resumed one continues)."""
    return timedelta(seconds=round(timer.time_elapsed("train") + timer.time_remaining()))


def max_time_value(seconds: float) -> str:
    """`seconds`, rounded up, as `--trainer.max_time` takes a duration: DD:HH:MM:SS."""
    seconds = math.ceil(seconds)
    return f"{seconds // 86400:02d}:{seconds // 3600 % 24:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


class ProgressLog(Callback):
    """One line at the first step, one every `every_n_steps` optimizer steps (default: the trainer's
    `log_every_n_steps`), and one whenever `every_n_seconds` have passed since the last (0: by steps only), on
    standard error, when that is not a terminal (`always=True` prints it regardless): epoch, step (of the run's
    estimated total), the last logged `train/loss`, the learning rate, throughput, elapsed time and the time left.
    Rank zero only."""

    def __init__(self, every_n_steps: int | None = None, every_n_seconds: float = 30.0, always: bool = False) -> None:
        self.every_n_steps, self.every_n_seconds, self.always = every_n_steps, every_n_seconds, always
        self._start = self._printed_at = 0.0
        self._start_step = 0
        self._units, self._unit = 0, "ex"
        self._printed_step = -1

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._start, self._start_step, self._units = time.monotonic(), trainer.global_step, 0
        self._printed_at = self._start

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs, batch, batch_idx: int) -> None:
        n, self._unit = units_in(batch, getattr(pl_module, "pad_id", PAD))
        self._units += n
        every = self.every_n_steps or trainer.log_every_n_steps or 50
        step = trainer.global_step  # the same for every micro-batch of an accumulated step: printed once
        now = time.monotonic()
        # The first step's line too: a run says it is training as soon as it is, not 30 s or 50 steps later.
        first = step == self._start_step + 1
        due = first or step % every == 0 or (self.every_n_seconds > 0 and now - self._printed_at >= self.every_n_seconds)
        if not due or step in (self._start_step, self._printed_step) or not trainer.is_global_zero:
            return
        if self.always or not is_terminal():
            self._printed_step, self._printed_at = step, now
            print(self.line(trainer), file=sys.stderr, flush=True)

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        fitting = trainer.state.fn == TrainerFn.FITTING and not trainer.sanity_checking
        if not fitting or not trainer.is_global_zero or not (self.always or not is_terminal()):
            return
        # The metrics this validation logged (callback_metrics keep the last value of those it did not).
        logged = sorted(k for k in trainer.callback_metrics if k.startswith("val/") and logged_in_running_loop(trainer, k))
        if logged:
            values = [f"{name} {float(trainer.callback_metrics[name]):.4f}" for name in logged]
            print(" | ".join([self._where(trainer), "validation", *values]), file=sys.stderr, flush=True)

    def _where(self, trainer: L.Trainer) -> str:
        total = trainer.estimated_stepping_batches
        return f"epoch {trainer.current_epoch} step {trainer.global_step}" + (f"/{int(total)}" if total < float("inf") else "")

    def line(self, trainer: L.Trainer) -> str:
        elapsed = time.monotonic() - self._start
        step, total = trainer.global_step, trainer.estimated_stepping_batches
        parts = [self._where(trainer)]
        loss = trainer.callback_metrics.get("train/loss")
        if loss is not None:
            parts.append(f"loss {float(loss):.3f}")
        if trainer.optimizers:
            parts.append(f"lr {trainer.optimizers[0].param_groups[0]['lr']:.2e}")
        timer = time_limit(trainer)
        left = eta(step - self._start_step, total - self._start_step, elapsed, timer.time_remaining() if timer else None)
        return progress_line(" | ".join(parts), elapsed, {self._unit: self._units}, left)


class EpochBar(RichProgressBar):
    """Lightning's rich bar (on a terminal), whose "Epoch 3/24" (the last epoch's index) reads "Epoch 0/-2"
    when `max_epochs` is -1 (a recipe bounded by `max_steps`, as WMT's): there, "Epoch 0" alone. The task
    Lightning names is renamed through rich's `Progress.update`, where Lightning names it: at an epoch's
    start, and at a step's end when a run resumed mid-epoch has no task yet."""

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        super().on_train_epoch_start(trainer, pl_module)
        self._count_no_epochs(trainer)

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs, batch, batch_idx: int) -> None:
        super().on_train_batch_end(trainer, pl_module, outputs, batch, batch_idx)
        self._count_no_epochs(trainer)

    def _count_no_epochs(self, trainer: L.Trainer) -> None:
        if trainer.max_epochs is None or trainer.max_epochs >= 0 or self.progress is None:
            return
        bound = f"Epoch {trainer.current_epoch}/{trainer.max_epochs - 1}"
        for task in self.progress.tasks:
            if task.id == self.train_progress_bar_id and bound in task.description:
                self.progress.update(task.id, description=task.description.replace(bound, f"Epoch {trainer.current_epoch}"))
