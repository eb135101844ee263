"""A time-limited run against its learning-rate schedule: `TimeBudget`, every run's (training/cli.py), says once the
step rate is known where `--trainer.max_time` will stop the schedule, or with `--fit_schedule_to_time true` fits the
schedule to the limit, the fit kept in checkpoints (docs/guide/training.md, "Checkpoints and exact resume" and
"How the callbacks keep these promises")."""

from __future__ import annotations

import sys

import lightning as L
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.trainer.states import TrainerFn
from torch.optim.lr_scheduler import LambdaLR

from .progress import max_time_value, time_limit, time_limit_given

MEASURED_STEPS = 20  # steps after the first whose time gives the first estimate of the rate


class TimeBudget(Callback):
    """The line on where `--trainer.max_time` stops the schedule, and `fit_schedule` (`--fit_schedule_to_time`)
    (the module's docstring)."""

    def __init__(self, fit_schedule: bool = False) -> None:
        self.fit_schedule = fit_schedule
        self.start, self.at, self.scale = 0, 0.0, 1.0  # the schedule sees at + (step - start) * scale from start on
        self.target: int | None = None  # the step the fit ends the schedule at
        self._first: tuple[int, float] | None = None  # (step, seconds) at the end of this run's first step
        self._schedules: list = []  # the unfitted multipliers of the LambdaLRs
        self._measured = False

    def state_dict(self) -> dict:
        fitted = self.target is not None
        return {"start": self.start, "at": self.at, "scale": self.scale, "target": self.target} if fitted else {}

    def load_state_dict(self, state_dict: dict) -> None:
        self.start, self.at, self.scale, self.target = (state_dict[k] for k in ("start", "at", "scale", "target"))

    def step_seen(self, step: int) -> float:
        """The step the schedule's multiplier sees at training step `step` (the step itself until a fit)."""
        return step if self.target is None or step <= self.start else self.at + (step - self.start) * self.scale

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._first, self._measured, self._schedules = None, False, []
        for config in trainer.lr_scheduler_configs:
            if isinstance(config.scheduler, LambdaLR):
                self._schedules += config.scheduler.lr_lambdas
                # Plain functions: LambdaLR's state_dict stores None for them (checkpoints stay plain data).
                config.scheduler.lr_lambdas = [self._fitted(f) for f in config.scheduler.lr_lambdas]

    def _fitted(self, schedule):
        def multiplier(step: int) -> float:
            return schedule(self.step_seen(step))

        return multiplier

    def on_train_batch_end(self, trainer: L.Trainer, pl_module: L.LightningModule, outputs, batch, batch_idx: int) -> None:
        timer, step = time_limit(trainer), trainer.global_step
        if timer is None or self._measured or not _bounded(trainer):
            return
        if self._first is None:
            self._first = (step, timer.time_elapsed("train"))
        elif step >= self._first[0] + MEASURED_STEPS:
            self._measured = True
            self._budget(trainer, first=True)

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self.fit_schedule and self._measured and trainer.state.fn == TrainerFn.FITTING and not trainer.sanity_checking:
            self._budget(trainer, first=False)

    def _budget(self, trainer: L.Trainer, first: bool) -> None:
        """Where the time limit stops training at the rate since this run's first step (rank zero's, on every
        rank): said the first time, and with `fit_schedule` the schedule fitted to it."""
        timer, step, total = time_limit(trainer), trainer.global_step, int(trainer.estimated_stepping_batches)
        rate = (timer.time_elapsed("train") - self._first[1]) / (step - self._first[0])  # seconds a step
        stop = trainer.strategy.broadcast(step + round(timer.time_remaining() / rate) if rate > 0 else total, src=0)
        if (stop >= total and self.target is None) or self.step_seen(step) >= total:
            return  # the limit leaves time for the whole schedule, or a fit has already ended it
        limit = time_limit_given(timer)
        counted = "validation not counted yet" if first else "validation included"
        where = f"at {rate:.3g} s a step ({counted}), --trainer.max_time {limit} stops training near step {stop:,} of {total:,}"
        if not self.fit_schedule:
            needed = max_time_value(timer.time_elapsed("train") + rate * (total - step))
            _say(
                trainer,
                f"{where}, before the learning-rate schedule ends: raise --trainer.max_time (to about {needed} at this "
                "rate), or pass --fit_schedule_to_time true to end the schedule there",
            )
        elif stop != self.target:
            start = max(step, _peak(self._schedules, total))  # from here, or from the peak if still warming up
            if start >= total:  # a constant schedule
                self.fit_schedule = False
                _say(trainer, f"{where}; the learning-rate schedule never falls: --fit_schedule_to_time leaves it as it is")
                return
            self._fit(start, min(stop, total), total)
            fitted = f"the learning-rate schedule after step {self.start:,} now ends at step {self.target:,}"
            _say(trainer, f"{where}: {fitted} (--fit_schedule_to_time)")

    def _fit(self, start: int, stop: int, total: int) -> None:
        """The schedule runs from `start` to its last step by `stop`: faster than as written, or again slower (down
        to as written, at `total`) when the machine turned out faster than a fit before thought."""
        at = self.step_seen(start)
        self.start, self.at = start, at
        self.scale = (total - at) / max(1, stop - start)
        self.target = stop


def _bounded(trainer: L.Trainer) -> bool:
    return trainer.estimated_stepping_batches < float("inf") and bool(trainer.lr_scheduler_configs)


def _peak(schedules: list, total: int) -> int:
    """The first step after which a multiplier falls (the warm-up's end); `total` where none ever does."""
    falls = [next((k for k in range(total) if f(k + 1) < f(k)), total) for f in schedules]
    return min(falls, default=total)


def _say(trainer: L.Trainer, line: str) -> None:
    if trainer.is_global_zero:
        print(line, file=sys.stderr, flush=True)
