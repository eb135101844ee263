"""How a run stops early (docs/guide/training.md says what a user sees): `StopAtStep`, the one stopper, at the step
boundary, and `report_time_limit`, the line a time limit ends with. Its triggers: a signal noted while training
(common/signals.py, home of `Stopped`, the exception every stop raises; the script then ends with status 143 or 130),
the time limit (Lightning's `Timer`, or any callback, sets `trainer.should_stop`) and `max_steps`, which
`training.cli.run_fit` takes as the end of fitting. Lightning alone would end the epoch there, run a validation an
uninterrupted run never runs, and write last.ckpt with the epoch marked done, so that a resumed run skipped the rest
of it; here last.ckpt is written at the step, and a resume continues at the next batch, bit for bit."""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable
from datetime import timedelta

import lightning as L
from lightning.pytorch.callbacks import Callback

from common import signals
from common.runs import launcher_pid

from .checkpointing import write_last
from .lightning_internals import validation_or_epoch_end_follows
from .progress import max_time_value, time_limit, time_limit_given
from .resume import last_checkpoint


class StopAtStep(Callback):
    """Stops training at the end of a step, with last.ckpt written there, when a trigger (the module's docstring)
    asks to. A step followed by validation (the epoch's last, or `val_check_interval`'s) stops after it, as
    Lightning does: a run resumed from a checkpoint written before it would skip that validation. A time limit
    or `max_steps` reached there ends the fit as Lightning ends it; a signal noted there waits for the next
    epoch's start (after every callback's end-of-epoch saves) or the end of training. Every rank stops at the
    same step (a rank that got no signal follows one that did).

    Signals are deferred from `on_train_start` to `on_train_end` (`signals.defer`). Last among the
    callbacks (Lightning moves the `ModelCheckpoint`s to the end when fit starts, before `setup`): a stop comes
    after every checkpoint of its step is written and after the `Timer` has looked at the clock."""

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        signals.watch(trainer)
        trainer.callbacks = [c for c in trainer.callbacks if c is not self] + [self]

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # Each rank notes its own signals (a group's reaches them all; the stop is agreed at the step's end); a stop
        # at once is rank 0's, which ends the others.
        signals.defer(getattr(trainer.strategy.launcher, "procs", ()), launcher=launcher_pid(trainer))

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs, batch, batch_idx: int) -> None:
        if validation_or_epoch_end_follows(trainer):
            return
        self._stop_if_signalled(trainer)
        if trainer.should_stop or 0 <= trainer.max_steps <= trainer.global_step:
            timer = time_limit(trainer)
            why = "max_steps" if 0 <= trainer.max_steps <= trainer.global_step else "time limit"
            why = why if why == "max_steps" or (timer and timer.time_remaining() <= 0) else "trainer.should_stop"
            raise signals.Stopped(None, trainer.current_epoch, trainer.global_step, write_last(trainer), why)

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._stop_if_signalled(trainer)

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        signals.stop_deferring()
        self._stop_if_signalled(trainer)

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        signals.stop_deferring()

    def _stop_if_signalled(self, trainer: L.Trainer) -> None:
        signum = signals.received()
        if not trainer.strategy.reduce_boolean_decision(signum is not None, all=False):
            return
        written = write_last(trainer)
        signals.forget()
        raise signals.Stopped(signum or signal.SIGTERM, trainer.current_epoch, trainer.global_step, written)


def report_time_limit(trainer: L.Trainer, resume: Callable[[dict[str, str]], str]) -> None:
    """After fitting: when `--trainer.max_time` ended it, one line with where it stopped, the checkpoint to
    resume and the command that does, with a limit larger by the one just reached (the time limit counts the
    training time of the runs a resumed one continues: the same limit would train nothing)."""
    timer = time_limit(trainer)
    if timer is None or timer.time_remaining() > 0:
        return
    last = last_checkpoint(trainer) or "none written"
    elapsed = timedelta(seconds=int(timer.time_elapsed("train")))
    limit = time_limit_given(timer)
    command = resume({"--trainer.max_time": max_time_value((elapsed + limit).total_seconds())})
    print(
        f"time limit reached (--trainer.max_time; {elapsed} of training, counting the runs this one resumes) at "
        f"step {trainer.global_step}; last checkpoint: {last}; resume with a larger --trainer.max_time (another "
        f"{limit} of training): {command}",
        file=sys.stderr,
        flush=True,
    )
