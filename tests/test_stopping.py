"""The one stopper (training/stopping.StopAtStep) in process, on Lightning's own `Timer` and `max_steps`: each trigger
ends the fit at the step with one `Stopped` and last.ckpt written there, the epoch not marked done. The stops of a
real run (signals, a time limit, max_steps, each resumed bit for bit) are tests/test_faults_fit.py's."""

import pytest
import torch
from lightning.pytorch.callbacks import Timer
from lightning.pytorch.demos.boring_classes import BoringModel

from tests.helpers import quiet_trainer
from training.checkpointing import BestCheckpoint, checkpoint_callbacks
from training.signals import Stopped
from training.stopping import StopAtStep

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
