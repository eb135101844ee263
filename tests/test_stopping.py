"""The one stopper (training/stopping.StopAtStep) in process, on Lightning's own `Timer` and `max_steps`: each trigger
ends the fit at the step with one `Stopped` and last.ckpt written there, the epoch not marked done. The stops of a
real run (signals, a time limit, max_steps, each resumed bit for bit) are tests/test_faults_fit.py's."""

import pytest
import torch
from lightning.pytorch.callbacks import Callback, Timer
from lightning.pytorch.demos.boring_classes import BoringModel

from common.signals import Stopped
from tasks.schedules import adamw_with_warmup, warmup_lr_lambda
from tests.helpers import quiet_trainer
from training.checkpointing import BestCheckpoint, checkpoint_callbacks
from training.stopping import StopAtStep
from training.time_budget import MEASURED_STEPS, TimeBudget

BATCHES = 8
STEP = 3  # where each trigger fires: mid-epoch


@pytest.mark.parametrize("trigger", ["time limit", "max_steps"])
def test_each_trigger_stops_at_the_step_with_last_ckpt_there(tmp_path, trigger):
    # Lightning's own Timer (what --trainer.max_time installs) is appended after the callbacks given to the Trainer:
    # the stopper must still see its stop at the same step, not after an epoch's end and a validation.
    limit = {"max_time": {"hours": 1}} if trigger == "time limit" else {"max_steps": STEP}
    best = BestCheckpoint(dirpath=tmp_path / "checkpoints", monitor=None)
    trainer = quiet_trainer(
        tmp_path,
        callbacks=[StopAtStep(), *checkpoint_callbacks(best)],
        enable_checkpointing=True,
        max_epochs=2,
        limit_train_batches=BATCHES,
        limit_val_batches=1,
        num_sanity_val_steps=0,
        **limit,
    )
    if trigger == "time limit":  # the hour is up from step STEP on, whatever the machine's speed
        timer = next(c for c in trainer.callbacks if isinstance(c, Timer))
        timer.time_elapsed = lambda stage="train": 3600.0 if trainer.global_step >= STEP else 0.0
    with pytest.raises(Stopped) as stop:
        trainer.fit(BoringModel())
    step = STEP
    assert (stop.value.signum, stop.value.why, stop.value.epoch, stop.value.step) == (None, trigger, 0, step)
    last = tmp_path / "checkpoints" / "last.ckpt"
    assert stop.value.checkpoint == str(last)
    state = torch.load(last, weights_only=True)
    assert state["global_step"] == step
    assert state["loops"]["fit_loop"]["epoch_progress"]["current"]["completed"] == 0  # the epoch is not marked done
    assert not trainer.fit_loop.epoch_loop.val_loop.batch_progress.total.completed  # no validation at the stop


# ---------------------------------------------------------------------------------------------- the time budget

WARMUP, PEAK_LR, SECONDS_A_STEP = 5, 0.1, 8.0  # powers of two: the rate and the step the limit allows are exact


class Clock(Timer):
    """Lightning's `Timer` (what --trainer.max_time installs) whose clock reads SECONDS_A_STEP a step."""

    def __init__(self, seconds: float):
        super().__init__(duration={"seconds": seconds})
        self.trainer = None

    def on_train_start(self, trainer, pl_module):
        self.trainer = trainer
        super().on_train_start(trainer, pl_module)

    def time_elapsed(self, stage="train"):
        return SECONDS_A_STEP * self.trainer.global_step if self.trainer is not None else 0.0


class ScheduledModel(BoringModel):
    """BoringModel under one of tasks/schedules.py's schedules (warm-up, then cosine decay over the run's steps)."""

    def __init__(self, schedule: str):
        super().__init__()
        self.schedule = schedule

    def configure_optimizers(self):
        total = int(self.trainer.estimated_stepping_batches)
        return adamw_with_warmup(self, PEAK_LR, 0.0, self.schedule, WARMUP, total)


class RecordLR(Callback):
    def __init__(self):
        self.lrs = {}  # step → the learning rate of the step after it

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.lrs[trainer.global_step] = trainer.optimizers[0].param_groups[0]["lr"]


def timed_run(tmp_path, seconds: float, fit_schedule: bool, schedule: str = "cosine") -> tuple[dict, int]:
    """64 steps (2 epochs of 32) under a time limit of `seconds` at SECONDS_A_STEP: the learning rates and last step."""
    record = RecordLR()
    callbacks = [TimeBudget(fit_schedule=fit_schedule), record, StopAtStep(), Clock(seconds)]
    trainer = quiet_trainer(
        tmp_path, callbacks=callbacks, max_epochs=2, limit_train_batches=32, limit_val_batches=1, num_sanity_val_steps=0
    )
    try:
        trainer.fit(ScheduledModel(schedule))
    except Stopped as stop:
        assert stop.why == "time limit"
    return record.lrs, trainer.global_step


def plain_lr(step: int, total: int = 64, schedule: str = "cosine") -> float:
    return PEAK_LR * warmup_lr_lambda(schedule, WARMUP, total)(step)


def test_a_time_limit_that_stops_the_schedule_says_where_and_what_to_do(tmp_path, capsys):
    lrs, last = timed_run(tmp_path, 240.0, fit_schedule=False)  # 240 s at 8 s a step: 30 of the 64 steps
    assert last == 30
    assert lrs == pytest.approx({s: plain_lr(s) for s in range(1, 31)}, rel=1e-12)  # the schedule as written
    (line,) = [line for line in capsys.readouterr().err.splitlines() if "--trainer.max_time" in line]
    assert line == (
        "at 8 s a step (validation not counted yet), --trainer.max_time 0:04:00 stops training near step 30 of 64, "
        "before the learning-rate schedule ends: raise --trainer.max_time (to about 00:00:08:32 at this rate), "
        "or pass --fit_schedule_to_time true to end the schedule there"
    )
    # Either, as printed: the limit it names trains the whole schedule, without the line.
    lrs, last = timed_run(tmp_path / "raised", 8 * 60 + 32, fit_schedule=False)
    assert last == 64 and lrs[64] == 0.0
    assert "--trainer.max_time" not in capsys.readouterr().err


def test_fit_schedule_to_time_ends_the_decay_at_the_time_limit(tmp_path, capsys):
    lrs, last = timed_run(tmp_path, 240.0, fit_schedule=True)
    assert last == 30
    measured = 1 + MEASURED_STEPS  # the rate is known from here on; the schedule as written until then
    assert [lrs[s] for s in range(1, measured + 1)] == pytest.approx([plain_lr(s) for s in range(1, measured + 1)], rel=1e-12)
    fitted = [lrs[s] for s in range(measured, 31)]
    assert all(a > b for a, b in zip(fitted, fitted[1:])), fitted  # decaying faster than written, down to
    assert lrs[30] == 0.0 < plain_lr(30)  # the schedule's end at the step the limit stops
    assert all(lrs[s] < plain_lr(s) for s in range(measured + 1, 31))
    (line,) = [line for line in capsys.readouterr().err.splitlines() if "--trainer.max_time" in line]
    assert line.endswith(
        "stops training near step 30 of 64: the learning-rate schedule after step 21 now ends at step 30 (--fit_schedule_to_time)"
    ), line
    # The validation at step 32 never comes; one that measures the same rate changes nothing (the fit is refitted
    # only when the step the limit allows moves): a run longer than the first epoch refits at its end, bit for bit.
    lrs_long, last = timed_run(tmp_path / "long", 8.0 * 40, fit_schedule=True)
    assert last == 40 and lrs_long[40] == 0.0


def test_fit_schedule_to_time_leaves_a_constant_schedule_as_it_is(tmp_path, capsys):
    lrs, last = timed_run(tmp_path, 240.0, fit_schedule=True, schedule="constant")
    assert last == 30
    assert lrs == pytest.approx({s: plain_lr(s, schedule="constant") for s in range(1, 31)}, rel=1e-12)
    (line,) = [line for line in capsys.readouterr().err.splitlines() if "--trainer.max_time" in line]
    assert line.endswith(
        "stops training near step 30 of 64; the learning-rate schedule never falls: --fit_schedule_to_time leaves it as it is"
    ), line
