"""Lightning's private state that training/ reads (training/lightning_internals.py), by name and type on the
installed Lightning, and what each function of lightning_internals answers against what a run of known shape
must give; and the documented `ModelCheckpoint` behaviour training/checkpointing.py builds on. An upgrade that
changes any of them fails here, by name, rather than making checkpoints or resumes wrong in silence."""

import lightning as L
import torch
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from lightning.pytorch.demos.boring_classes import BoringModel
from lightning.pytorch.plugins.io import CheckpointIO
from lightning.pytorch.trainer.connectors.logger_connector.result import _ResultCollection
from lightning.pytorch.utilities import CombinedLoader

from training import lightning_internals

BATCHES = 5


class LogsEveryOtherEpoch(BoringModel):
    def validation_step(self, batch, batch_idx):
        loss = super().validation_step(batch, batch_idx)["x"]
        if self.current_epoch % 2 == 0:
            self.log("val/sometimes", loss)
        return loss


class Probe(Callback):
    """Records, at each training step's end and each validation's end, the private attributes' types and
    what lightning_internals answers."""

    def __init__(self) -> None:
        self.follows: list[tuple[int, bool]] = []
        self.logged: list[tuple[int, bool]] = []
        self.types: dict[str, type] = {}

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        loop = trainer.fit_loop.epoch_loop
        self.types.update(
            results=type(trainer._results),
            ready=type(loop._num_ready_batches_reached()),
            check_val=type(loop._should_check_val_fx(trainer.fit_loop._data_fetcher)),
            states=type(trainer.fit_loop._combined_loader_states_to_load),
            loader=type(trainer.fit_loop._combined_loader),
        )
        self.follows.append((batch_idx, lightning_internals.validation_or_epoch_end_follows(trainer)))

    def on_validation_end(self, trainer, pl_module):
        if not trainer.sanity_checking:
            self.logged.append((trainer.current_epoch, lightning_internals.logged_in_running_loop(trainer, "val/sometimes")))


def test_the_private_state_read_is_there_and_answers_right(tmp_path):
    probe = Probe()
    trainer = L.Trainer(
        default_root_dir=tmp_path,
        max_epochs=3,
        limit_train_batches=BATCHES,
        limit_val_batches=2,
        val_check_interval=2,  # a validation after batches 2 and 4 of each epoch; none at its end (5 batches)
        callbacks=[probe],
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
    )
    assert isinstance(trainer.strategy._checkpoint_io, (type(None), CheckpointIO))
    assert lightning_internals.checkpoint_io_chosen(trainer) is False
    trainer.fit(LogsEveryOtherEpoch())
    assert probe.types == {
        "results": _ResultCollection,
        "ready": bool,
        "check_val": bool,
        "states": list,
        "loader": CombinedLoader,
    }
    # Validation follows batches 1 and 3 (val_check_interval) and the epoch ends after batch 4.
    assert probe.follows == [(i, i in (1, 3, 4)) for i in range(BATCHES)] * 3
    # Two validations an epoch, the metric logged in epochs 0 and 2 only.
    assert probe.logged == [(e, e % 2 == 0) for e in range(3) for _ in range(2)]
    assert callable(trainer.fit_loop._combined_loader._load_state_dicts)
    trainer_with_io = L.Trainer(plugins=[ChosenIO()], logger=False)
    assert lightning_internals.checkpoint_io_chosen(trainer_with_io) is True


class ChosenIO(CheckpointIO):
    def save_checkpoint(self, checkpoint, path, storage_options=None):
        torch.save(checkpoint, path)

    def load_checkpoint(self, path, map_location=None):
        return torch.load(path, map_location=map_location)

    def remove_checkpoint(self, path):
        pass


# What training/checkpointing.py takes from Lightning's documented behaviour, checked here so that an upgrade
# that changes it fails by name.


class SeesLast(Callback):
    """Records, in each hook where a checkpoint may be written, the step last.ckpt holds at that moment."""

    def __init__(self, folder):
        self.folder, self.seen = folder, []

    def _see(self, trainer, hook):
        path = self.folder / "last.ckpt"
        step = torch.load(path, weights_only=True)["global_step"] if path.exists() else None
        self.seen.append((hook, trainer.global_step, step))

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self._see(trainer, "batch")

    def on_train_epoch_end(self, trainer, pl_module):
        self._see(trainer, "epoch")


def test_a_plain_model_checkpoint_keeps_one_last_file_and_runs_after_other_callbacks(tmp_path):
    # checkpointing.last_checkpoints: no monitor, save_top_k=1, no version counter: one file, last.ckpt,
    # overwritten at each epoch's end and every n steps; KeepLastUntilFinite: a
    # ModelCheckpoint runs after every other callback of a hook, whatever the order it was given in.
    same = dict(dirpath=tmp_path, filename="last", monitor=None, save_top_k=1, enable_version_counter=False)
    epochs = ModelCheckpoint(**same, every_n_epochs=1)
    steps = ModelCheckpoint(**same, every_n_train_steps=3)
    probe = SeesLast(tmp_path)
    trainer = L.Trainer(
        default_root_dir=tmp_path,
        max_epochs=2,
        limit_train_batches=BATCHES,
        limit_val_batches=1,
        callbacks=[epochs, steps, probe],
        logger=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
    )
    trainer.fit(BoringModel())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.ckpt"]
    assert torch.load(tmp_path / "last.ckpt", weights_only=True)["global_step"] == 2 * BATCHES
    # Each hook sees last.ckpt as it was before that hook's saves: steps 3, 6 and 9 by `steps`, 5 and 10 by `epochs`.
    expected, last = [], None
    for step in range(1, 2 * BATCHES + 1):
        expected.append(("batch", step, last))
        last = step if step % 3 == 0 else last
        if step % BATCHES == 0:
            expected.append(("epoch", step, last))
            last = step
    assert probe.seen == expected


def test_the_wandb_loggers_private_state_is_there_and_answers_right(tmp_path, monkeypatch):
    from lightning.pytorch.loggers import WandbLogger

    monkeypatch.setenv("WANDB_MODE", "offline")
    logger = WandbLogger(save_dir=str(tmp_path), offline=True)
    assert lightning_internals.wandb_run_started(logger) is False
    assert lightning_internals.wandb_offline(logger) is True
    assert isinstance(logger._wandb_init, dict)
    lightning_internals.continue_wandb_run_id(logger, "abc123xy")
    assert logger.version == "abc123xy"  # the public name of the run it will start
    assert lightning_internals.wandb_run_started(logger) is False  # and it has not started it
    assert lightning_internals.wandb_offline(WandbLogger(save_dir=str(tmp_path), offline=False)) is False
