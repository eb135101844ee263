"""Callbacks that every recipe gets from the CLI (training/cli.py), one job each, said in its docstring: RNG states and
the loader's position for an exact resume, the NaN check, the resolved config, `EMA`, early stopping on the best
checkpoint's metric, the model summary; and `evaluated_label`, what a test scored. Where checkpoints are written is
training/checkpointing.py, where a run stops training/stopping.py, its step times training/records.py."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
import torch
import yaml
from lightning.pytorch.callbacks import Callback, EarlyStopping, EMAWeightAveraging, RichModelSummary, WeightAveraging
from lightning.pytorch.cli import SaveConfigCallback
from lightning.pytorch.loggers import WandbLogger
from lightning.pytorch.trainer.states import TrainerFn

from common.errors import TrainingDivergedError
from common.runs import run_folder
from common.signals import Stopped

from .checkpoint_io import check_writable
from .lightning_internals import hand_over_loader_states, logged_in_running_loop


class RngStateCallback(Callback):
    """Saves the torch (CPU and CUDA), Python and NumPy generator states in each checkpoint and puts them back when
    training resumes (Lightning does not), so dropout after a resume draws the same masks (docs/guide/training.md,
    "How the callbacks keep these promises")."""

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


class LoaderStateRestore(Callback):
    """Works around Lightning issue #20550 (open in 2.6): when `configure_optimizers` reads
    `trainer.estimated_stepping_batches`, the training loader is set up before the checkpoint is
    restored, and the loader states the checkpoint holds are never handed to it, so a run resumed
    mid-epoch starts that epoch over. Here they are handed over in `on_train_start`, which comes before
    the epoch's first batch is drawn (`ResumableDataLoader` reads its state when iteration starts)."""

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        hand_over_loader_states(trainer)


class FiniteLossCheck(Callback):
    """Raises `TrainingDivergedError` ("the training loss became nan at step N (epoch E)") before the backward pass of a
    step whose loss is NaN or infinite, so no NaN update is applied and no checkpoint of a diverged model is saved; its
    cost on a GPU and `every_n_steps`: docs/guide/training.md, "How the callbacks keep these promises"."""

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


class LogConfigCallback(SaveConfigCallback):
    """LightningCLI's config.yaml in the run's folder (`records.run_folder`, beside its checkpoints: not
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


class EMA(WeightAveraging):
    """An exponential moving average of the weights, updated after every optimiser step, with a decay warm-up: Lightning's
    `WeightAveraging` through its public hooks, with the average kept in for the module's own validation BLEU and
    evaluated from the checkpoint outside fitting (docs/guide/training.md, "How the callbacks keep these promises")."""

    def __init__(self, decay: float = 0.999, **kwargs: Any) -> None:
        super().__init__(avg_fn=_ema_with_warmup(decay), **kwargs)  # kwargs: device, use_buffers

    def on_validation_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.state.fn == TrainerFn.FITTING:  # trainer.validate() after fit evaluates what it loaded
            super().on_validation_epoch_start(trainer, pl_module)  # the average in

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        pass  # swapped back in on_validation_end, after the module's own epoch-end hook has scored the average

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.state.fn == TrainerFn.FITTING:
            super().on_validation_epoch_end(trainer, pl_module)  # the training weights back

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        # A stop at a step (a time limit, max_steps, a signal: training/stopping.py) ends training as its end
        # does: the model is left holding the average.
        if isinstance(exception, Stopped):
            self.on_train_end(trainer, pl_module)

    def on_load_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict[str, Any]) -> None:
        if trainer.state.fn == TrainerFn.FITTING:
            super().on_load_checkpoint(trainer, pl_module, checkpoint)


class EarlyStoppingWhenComputed(EarlyStopping):
    """Lightning's `EarlyStopping`, its checks, counts, reasons and checkpointed state unchanged, asked only after a
    validation that computed its metric, at the validation's end, before that validation's checkpoints are written
    (docs/guide/training.md, "How the callbacks keep these promises"); resumed, it keeps the patience it was given."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._computed_at: int | None = None  # the step of the last validation that logged the metric

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # The validation loop's results are gone by on_train_epoch_end, where Lightning checks after an epoch's
        # validation: noted here for both.
        if logged_in_running_loop(trainer, self.monitor) and not trainer.sanity_checking:
            self._computed_at = trainer.global_step
            super().on_validation_end(trainer, pl_module)

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._computed_at == trainer.global_step:
            super().on_train_epoch_end(trainer, pl_module)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        # Lightning restores the patience too, so a run resumed with a larger --early_stopping.patience (what a
        # stopped run is told to pass) would stop again one validation later: the count resumes, the setting is this run's.
        patience = self.patience
        super().load_state_dict(state_dict)
        self.patience = patience


class ModelSummaryWithoutZeroFlops(RichModelSummary):
    """Lightning's rich model summary, without the FLOPs it did not count: Lightning counts them only for a
    model with an `example_input_array`, which ours have not (a translation's cost depends on its lengths),
    and prints `Total FLOPs: 0` and a column of zeros otherwise."""

    @staticmethod
    def summarize(summary_data, *args, total_flops: int = 0, **kwargs) -> None:
        if total_flops:
            return RichModelSummary.summarize(summary_data, *args, total_flops=total_flops, **kwargs)
        summary_data = [(name, ["-"] * len(values) if name == "FLOPs" else values) for name, values in summary_data]
        from rich import get_console

        console = get_console()
        with console.capture() as captured:
            RichModelSummary.summarize(summary_data, *args, total_flops=total_flops, **kwargs)
        text = "".join(line for line in captured.get().splitlines(keepends=True) if "Total FLOPs" not in line)
        console.file.write(text)
        console.file.flush()


def evaluated_label(trainer: L.Trainer) -> str:
    """What `trainer.test` (or `validate`) scored, for the lines that report it: the checkpoint file (the
    trainer's own epoch and step are the run's last, not the tested checkpoint's), which weights (with
    `EMA`, the average the checkpoint stores as its weights) and the precision. evaluate_mnist.py and
    evaluate.py print the same three, so that their figures can be matched with fit's."""
    ckpt = getattr(trainer, "ckpt_path", None)
    where = f"checkpoint {Path(ckpt).name}" if ckpt else f"the weights at the end of training (step {trainer.global_step})"
    # Lightning's own EMA too (`--trainer.callbacks EMAWeightAveraging`): its checkpoints also store the average.
    ema = any(isinstance(c, (EMA, EMAWeightAveraging)) for c in trainer.callbacks)
    return f"{where}, {'EMA weights' if ema else 'its only weights (no EMA)'}, precision {trainer.precision}"


def _ema_with_warmup(decay: float):
    def average(averaged: torch.Tensor, current: torch.Tensor, num_averaged: torch.Tensor) -> torch.Tensor:
        n = num_averaged.to(averaged.dtype)
        d = torch.clamp((1 + n) / (10 + n), max=decay)
        return averaged + (1 - d) * (current - averaged)

    return average
