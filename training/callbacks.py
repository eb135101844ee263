"""Callbacks and a checkpoint plugin that every recipe gets from the CLI (tasks/cli.py):

- `RngStateCallback`: random-number generator states in each checkpoint, for an exact resume.
- `LoaderStateRestore`: the training loader's position reaches it on resume even when the model's
  `configure_optimizers` asked for `trainer.estimated_stepping_batches` (a Lightning bug).
- `BestAndLastCheckpoint`: Lightning's `ModelCheckpoint`, with `last.ckpt` kept up to date again and
  ties between scores going to the later checkpoint.
- `FiniteLossCheck`: stop with one clear line when the training loss becomes NaN or infinite.
- `StopOnSignal`: SIGTERM or SIGINT while training stops the run at the end of the step, with
  `last.ckpt` written there (`training/signals.py`).
- `AtomicCheckpointIO`: a checkpoint is written to a temporary file and renamed over the old one,
  so an interrupted save never leaves a truncated `last.ckpt` in place of a good one; a failed write
  (full disk, read-only folder) is one `OutputError` naming the checkpoint.
- `LogConfigCallback`: the full resolved config saved next to the logs and sent to W&B.
- `EMA`: an exponential moving average of the weights (`--ema_decay`), validated, checkpointed and
  tested in place of the training weights.
- `StepTimer`: the wall time of each training step (forward, backward, optimiser), for the summary.
"""

from __future__ import annotations

import os
import random
import re
import signal
import statistics
import time
from pathlib import Path
from typing import Any, Literal

import lightning as L
import numpy as np
import torch
import yaml
from lightning.pytorch.callbacks import Callback, EMAWeightAveraging, ModelCheckpoint
from lightning.pytorch.cli import SaveConfigCallback
from lightning.pytorch.loggers import WandbLogger
from lightning.pytorch.plugins.io import TorchCheckpointIO
from lightning.pytorch.trainer.states import TrainerFn

from datamodules.cache import process_alive

from . import signals
from .faults import OutputError, atomic_torch_save, temporary_name, write_fault
from .loggers import run_folder


class StepTimer(Callback):
    """Times each training step, from the batch's start to its end (forward, backward, optimiser step,
    the callbacks' per-step work): what the summary and the ablation table report as step time.
    Validation and data loading between steps are left out."""

    def __init__(self) -> None:
        self.durations: list[float] = []
        self._start: float | None = None

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx: int) -> None:
        self._start = time.perf_counter()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx: int) -> None:
        if self._start is not None:
            self.durations.append(time.perf_counter() - self._start)
            self._start = None

    def median_ms(self) -> float | None:
        """The median step in milliseconds, leaving out the first (warm-up) step when there are others."""
        steps = self.durations[1:] or self.durations
        return 1000 * statistics.median(steps) if steps else None


class TrainingDivergedError(RuntimeError):
    """The training loss became NaN or infinite; the message names the step and epoch."""


class RngStateCallback(Callback):
    """Saves the torch (CPU and CUDA), Python and NumPy generator states in each checkpoint, as
    tensors and plain lists (the checkpoint still loads with `torch.load(weights_only=True)`), and
    puts them back when training resumes. Lightning restores weights, optimiser, schedulers and loop
    counters but not these, so without it dropout after a resume draws other masks.

    The states are restored in `on_train_start`, after the sanity check and the data loader setup,
    right before the first resumed step. Under DDP the checkpoint holds rank zero's states and every
    rank gets them (ranks are seeded alike by `seed_everything` anyway)."""

    def __init__(self) -> None:
        self._pending: dict[str, Any] | None = None

    def state_dict(self) -> dict[str, Any]:
        version, mt, gauss = random.getstate()
        np_kind, np_keys, np_pos, np_has_gauss, np_gauss = np.random.get_state()
        state = {
            "torch": torch.get_rng_state(),
            "python": [version, list(mt), gauss],
            "numpy": [np_kind, torch.from_numpy(np_keys.astype(np.int64)), int(np_pos), int(np_has_gauss), float(np_gauss)],
        }
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            state["cuda"] = torch.cuda.get_rng_state_all()
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._pending = state_dict

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._pending is None:
            return
        state, self._pending = self._pending, None
        torch.set_rng_state(state["torch"])
        version, mt, gauss = state["python"]
        random.setstate((version, tuple(mt), gauss))
        kind, keys, pos, has_gauss, cached = state["numpy"]
        np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, cached))
        if "cuda" in state and torch.cuda.is_available() and len(state["cuda"]) == torch.cuda.device_count():
            torch.cuda.set_rng_state_all(state["cuda"])


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
    - SIGTERM or SIGINT (`training/signals.py`): at the end of the step the signal arrived in (after
      the epoch's end and its validation, when the step ends an epoch), `last.ckpt` is written if it
      was not at that step, and `signals.Stopped` is raised.
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
        # epochs between. The running loop's results hold only what was logged since it started; the
        # validation loop's are gone by on_train_epoch_end, where Lightning usually saves, so both ends note it.
        results = trainer._results
        if self.monitor is not None and results is not None and self.monitor in results.metrics(on_step=False)["callback"]:
            self._logged_at_step = trainer.global_step

    def _save_checkpoint(self, trainer: L.Trainer, filepath: str) -> None:
        # Lightning names the first of equal best scores (dicts keep insertion order, which is the
        # order of the scores); the pick is moved before the callback's state goes into the checkpoint.
        if self.ties == "later" and self.best_k_models:
            best = self.best_model_score
            self.best_model_path = [path for path, score in self.best_k_models.items() if score == best][-1]
        super()._save_checkpoint(trainer, filepath)

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._note_if_logged(trainer)
        super().on_train_epoch_end(trainer, pl_module)
        if self._should_save_on_train_epoch_end(trainer):
            self._save_last_if_missed(trainer)
        self._stop_if_signalled(trainer)

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._note_if_logged(trainer)
        super().on_validation_end(trainer, pl_module)
        if not self._should_save_on_train_epoch_end(trainer):
            self._save_last_if_missed(trainer)

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
            self._save_last_if_missed(trainer)
        # A step followed by validation (the epoch's last, or val_check_interval's) stops after it: a
        # run resumed from a checkpoint written here would skip that validation (Lightning's rule).
        if not validation_or_epoch_end_follows(trainer):
            self._stop_if_signalled(trainer)
            self._end_if_training_ends_here(trainer)

    def _save_topk_checkpoint(self, trainer: L.Trainer, monitor_candidates: dict[str, torch.Tensor]) -> None:
        # A metric computed every n epochs (val/bleu with bleu_every_n_epochs > 1) is absent until its
        # first epoch: no best checkpoint yet, rather than Lightning's error. last.ckpt is written regardless.
        if self.monitor is not None and self.monitor not in monitor_candidates:
            return
        super()._save_topk_checkpoint(trainer, monitor_candidates)

    def _save_last_if_missed(self, trainer: L.Trainer) -> None:
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

    def _stop_if_signalled(self, trainer: L.Trainer) -> None:
        """At the end of a step: after SIGTERM or SIGINT, write last.ckpt (unless it was written at this
        step) and stop. Every rank stops at the same step (a rank that got no signal follows one that did)."""
        signum = signals.received()
        if not trainer.strategy.reduce_boolean_decision(signum is not None, all=False):
            return
        if self.last_step != trainer.global_step:
            self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))
        signals.forget()
        written = self.last_model_path if self.last_step == trainer.global_step else None
        raise signals.Stopped(signum or signal.SIGTERM, trainer.current_epoch, trainer.global_step, written)

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
        if self.last_step != trainer.global_step:
            self._save_last_checkpoint(trainer, self._monitor_candidates(trainer))
        if time_up:
            written = self.last_model_path if self.last_step == trainer.global_step else None
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


def validation_or_epoch_end_follows(trainer: L.Trainer) -> bool:
    """Whether, in a run not asked to stop, this step would be followed by the epoch's end or a validation
    (`val_check_interval`): a stop decided here then waits for them. The one place that reads Lightning's
    private loop methods (`_num_ready_batches_reached`, `_should_check_val_fx`, `_data_fetcher`); they have
    no public equivalent, and `tests/test_faults_fit.py`'s signal and time-limit resume tests fail at once if
    they change. `_should_check_val_fx` also answers True for any step once a stop was asked for, so the
    question is put with `should_stop` cleared."""
    loop, should_stop = trainer.fit_loop.epoch_loop, trainer.should_stop
    trainer.should_stop = False
    try:
        return loop._num_ready_batches_reached() or loop._should_check_val_fx(trainer.fit_loop._data_fetcher)
    finally:
        trainer.should_stop = should_stop


class LoaderStateRestore(Callback):
    """Works around Lightning issue #20550 (open in 2.6): when `configure_optimizers` reads
    `trainer.estimated_stepping_batches`, the training loader is set up before the checkpoint is
    restored, and the loader states the checkpoint holds are never handed to it, so a run resumed
    mid-epoch starts that epoch over. Here they are handed over in `on_train_start`, which comes before
    the epoch's first batch is drawn (`ResumableDataLoader` reads its state when iteration starts)."""

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        fit_loop = trainer.fit_loop
        states = getattr(fit_loop, "_combined_loader_states_to_load", None)
        loader = getattr(fit_loop, "_combined_loader", None)
        if states and loader is not None:
            loader._load_state_dicts(states)
            fit_loop._combined_loader_states_to_load = []


class FiniteLossCheck(Callback):
    """Raises `TrainingDivergedError` ("the training loss became nan at step N (epoch E)") before the
    backward pass of a step whose loss is NaN or infinite, so no NaN update is applied and no
    checkpoint of a diverged model is saved.

    The check reads one boolean from the device: free on a CPU, one host–device sync per checked
    step on a GPU (cheap next to a step, but it stops the CPU running ahead of the GPU). Set
    `every_n_steps` > 1 to check less often, or 0 to switch the check off."""

    def __init__(self, every_n_steps: int = 1) -> None:
        self.every_n_steps = every_n_steps

    def on_before_backward(self, trainer: L.Trainer, pl_module: L.LightningModule, loss: torch.Tensor) -> None:
        if not self.every_n_steps or trainer.global_step % self.every_n_steps:
            return
        if not bool(torch.isfinite(loss.detach()).all()):
            raise TrainingDivergedError(
                f"the training loss became {loss.detach().float().mean().item()} at step {trainer.global_step} "
                f"(epoch {trainer.current_epoch}); try a lower --model.init_args.lr, a longer warm-up, "
                "or --trainer.gradient_clip_val 1.0"
            )


class StopOnSignal(Callback):
    """While training, the first SIGTERM or SIGINT is only noted (`training/signals.py`);
    `BestAndLastCheckpoint` acts on it at the end of the step. Outside training, and for a second
    signal, the signal stops the run at once."""

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        signals.defer_while_training()

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        signals.stop_deferring()

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        signals.stop_deferring()


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


_TEMPORARY = re.compile(r"^\..+\.(?:tmp|prev)-(\d+)$")


def remove_stale_temporaries(folder: str | Path) -> list[Path]:
    """Remove the files that saves of dead processes left in `folder`: `.<name>.tmp-<pid>` of an atomic
    save killed mid-write (SIGKILL, power loss), `.<name>.prev-<pid>` kept for going back after a NaN.
    A live process's files are left alone, except this process's own: nothing is being saved yet, so
    they are an earlier process's that had the same pid (in a container, each run may get the same
    one). Returns the removed paths."""
    folder, removed = Path(folder), []
    if not folder.is_dir():
        return removed
    for path in folder.iterdir():
        match = _TEMPORARY.match(path.name)
        if match and path.is_file() and (int(match[1]) == os.getpid() or not process_alive(int(match[1]))):
            try:
                path.unlink()
            except OSError:  # a read-only folder: its writability is checked, and reported, on its own
                continue
            removed.append(path)
    return removed


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


class LogConfigCallback(SaveConfigCallback):
    """LightningCLI's config.yaml in the run's folder (`loggers.run_folder`, beside its checkpoints: not
    Lightning's `trainer.log_dir`, which W&B runs of one root directory share), and the same resolved config
    with the W&B run: in its config (searchable, under `config`) and as the file `lightning_config.yaml`
    among the run's files (`fit.py --config lightning_config.yaml` reruns it; wandb's own `config.yaml` is
    its flat run config). Rank zero only, as Lightning's."""

    FILENAME = "lightning_config.yaml"

    def __init__(self, *args: Any, save_to_log_dir: bool = True, **kwargs: Any) -> None:
        super().__init__(*args, save_to_log_dir=False, **kwargs)  # written here, to the run's folder
        self.save_to_run_folder = save_to_log_dir

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if not self.already_saved and self.save_to_run_folder and trainer.is_global_zero:
            folder = run_folder(trainer)
            if "://" not in str(folder):
                # jsonargparse refuses an unwritable folder with a traceback of its own: one line naming it.
                check_writable(folder, self.config_filename)
            self.parser.save(
                self.config, str(folder / self.config_filename), skip_none=False, overwrite=True, multifile=self.multifile
            )
        super().setup(trainer, pl_module, stage)

    def save_config(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        loggers = [lg for lg in trainer.loggers if isinstance(lg, WandbLogger)]
        if not loggers:
            return
        text = self.parser.dump(self.config, skip_none=False, skip_check=True)
        config = yaml.safe_load(text)
        for logger in loggers:
            run = logger.experiment
            run.config.update({"config": config}, allow_val_change=True)
            if not getattr(run, "disabled", False):
                path = Path(run.dir) / self.FILENAME
                path.write_text(text)
                run.save(str(path), base_path=run.dir, policy="now")


class EMA(EMAWeightAveraging):
    """Lightning's `EMAWeightAveraging` with two fixes that matter for evaluation:

    - The average stays swapped in until `on_validation_end` (Lightning swaps it back in
      `on_validation_epoch_end`, and callbacks' hooks run before the module's, so the module's own
      epoch-end work, here BLEU on the decoded validation set, would score the training weights).
      `ModelCheckpoint`s run after every other callback, so checkpoints still store the training
      weights as `current_model_state` and the average as `state_dict`.
    - Outside fitting (`trainer.test(ckpt_path="best")`, `trainer.validate`), the checkpoint's
      `state_dict` (the average) is what gets evaluated; Lightning would load the training weights
      over it, and `validate` would swap in the stale average left from fitting.

    `load_from_checkpoint` reads `state_dict`, so a reloaded model translates with the averaged weights.

    The decay warms up as min(decay, (1 + n) / (10 + n)) after n updates (TensorFlow's and timm's
    convention): with a fixed 0.999 the average would still hold 0.999^500 ≈ 60 % of the random
    initial weights after 500 steps, and the first epochs' validation scores would be noise.
    """

    def __init__(self, decay: float = 0.999, **kwargs: Any) -> None:
        super().__init__(decay=decay, **kwargs)
        self._kwargs["avg_fn"] = _ema_with_warmup(decay)

    def on_validation_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.state.fn == TrainerFn.FITTING:  # trainer.validate() after fit evaluates what it loaded
            super().on_validation_epoch_start(trainer, pl_module)

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        pass  # swapped back in on_validation_end

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._average_model is not None and trainer.state.fn == TrainerFn.FITTING:
            self._swap_models(pl_module)

    def on_load_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        if trainer.state.fn == TrainerFn.FITTING:
            super().on_load_checkpoint(trainer, pl_module, checkpoint)


def _ema_with_warmup(decay: float):
    def average(averaged: torch.Tensor, current: torch.Tensor, num_averaged: torch.Tensor) -> torch.Tensor:
        n = num_averaged.to(averaged.dtype)
        d = torch.clamp((1 + n) / (10 + n), max=decay)
        return averaged + (1 - d) * (current - averaged)

    return average
