"""The one place in the project that reads or writes Lightning's private state. Each function answers one
question Lightning's public API has no answer for on the version pinned in pyproject.toml (lightning>=2.6.6,<2.7),
and says why. tests/test_lightning_internals.py checks every attribute used here, by name and type, so an
upgrade that renames or retypes one fails there at once rather than making checkpoints or resumes wrong in
silence."""

from __future__ import annotations

import lightning as L
from lightning.pytorch.loggers import WandbLogger


def validation_or_epoch_end_follows(trainer: L.Trainer) -> bool:
    """Whether, in a run not asked to stop, this step would be followed by the epoch's end or a validation
    (`val_check_interval`), which a stop at the step waits for (a resumed run would skip that validation).
    `_should_check_val_fx` also answers True for any step once a stop was asked for, so the question is put with
    `should_stop` cleared."""
    loop, should_stop = trainer.fit_loop.epoch_loop, trainer.should_stop
    trainer.should_stop = False
    try:
        return loop._num_ready_batches_reached() or loop._should_check_val_fx(trainer.fit_loop._data_fetcher)
    finally:
        trainer.should_stop = should_stop


def logged_in_running_loop(trainer: L.Trainer, name: str) -> bool:
    """Whether `name` was logged with `on_epoch=True` since the running loop (training or validation) started:
    the loop's results hold only that, where `callback_metrics` keep every metric's last value."""
    results = trainer._results
    return results is not None and name in results.metrics(on_step=False)["callback"]


def hand_over_loader_states(trainer: L.Trainer) -> None:
    """Give the training loader the states the resumed checkpoint holds, if Lightning has not (issue #20550:
    the loader was set up before the checkpoint was restored). Before the epoch's first batch is drawn
    (`on_train_start`), as `ResumableDataLoader` reads its state when iteration starts."""
    fit_loop = trainer.fit_loop
    states = fit_loop._combined_loader_states_to_load
    loader = fit_loop._combined_loader
    if states and loader is not None:
        loader._load_state_dicts(states)
        fit_loop._combined_loader_states_to_load = []


def checkpoint_io_chosen(trainer: L.Trainer) -> bool:
    """Whether the run was given a CheckpointIO plugin on purpose (`--trainer.plugins`): the public
    `strategy.checkpoint_io` makes a default one when none was."""
    return trainer.strategy._checkpoint_io is not None


def wandb_run_started(logger: WandbLogger) -> bool:
    """Whether the W&B run has started (reading `logger.experiment` would start it)."""
    return logger._experiment is not None


def wandb_offline(logger: WandbLogger) -> bool:
    """Whether the logger writes an offline run (`offline=True`, or WANDB_MODE=offline as AutoWandbLogger sets)."""
    return bool(logger._offline)


def continue_wandb_run_id(logger: WandbLogger, run_id: str) -> None:
    """Make a logger whose run has not started continue the run `run_id` when it starts: `WandbLogger` takes a run id
    only in its constructor, and a resumed run learns it from the checkpoint after the loggers are built."""
    logger._wandb_init.update(id=run_id, resume="allow")
    logger._id = run_id
