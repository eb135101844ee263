"""The LightningCLI behind scripts/fit.py: recipe defaults, data → model wiring, the end-of-run summary."""

from __future__ import annotations

import contextlib
import json
import sys
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import lightning as L
from lightning.pytorch.callbacks import ModelSummary, ProgressBar
from lightning.pytorch.cli import LightningCLI
from lightning.pytorch.utilities import rank_zero_info
from lightning.pytorch.utilities.exceptions import MisconfigurationException

from common.checkpoints import read_checkpoint
from common.errors import CheckpointError, HyperparameterError
from common.files import remove_stale_temporaries
from datamodules.progress import is_terminal

from . import signals
from .callbacks import (
    EMA,
    FiniteLossCheck,
    LoaderStateRestore,
    LogConfigCallback,
    ModelSummaryWithoutZeroFlops,
    RngStateCallback,
    StepTimer,
    evaluated_label,
)
from .checkpoint_io import AtomicCheckpointIO
from .checkpointing import BestCheckpoint, StoppedMidEpoch, checkpoint_callbacks, last_checkpoint, last_path
from .lightning_internals import checkpoint_io_chosen
from .loggers import (
    AutoWandbLogger,
    WandbRunId,
    claim_run_folder,
    continue_wandb_run,
    run_dir,
    run_folder,
    sync_command,
)
from .precision import machine_precision, precision_line
from .progress import EpochBar, ProgressLog, time_limit

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CONFIG = ROOT / "configs" / "toy_translation.yaml"
# Checkpoint names, with auto_insert_metric_name=False: epoch024-step400.ckpt (the notebook names them so too).
CHECKPOINT_FILENAME = "epoch{epoch:03d}-step{step}"


def _tokenizers_of(datamodule) -> dict | None:
    return getattr(datamodule, "tokenizers", None)


def _check_pad_to_multiple(parser, config) -> None:
    """The model's `pad_to_multiple` is the data module's (linked at instantiation, which would replace a value
    given to the model without a word): one usage line for a model's that differs, naming the data's flag."""
    model = config.model.get("init_args") or {}
    data = config.data.get("init_args") or {}
    given = model.get("pad_to_multiple")
    if "pad_to_multiple" in data and given not in (None, 1, data["pad_to_multiple"]):
        parser.error(
            f"--model.init_args.pad_to_multiple {given}: the batches are padded where they are collated; pass "
            f"--data.init_args.pad_to_multiple {given} (scripts/fit.py gives the model the data module's)"
        )


class TransformerCLI(LightningCLI):
    """Every recipe gets, without a line of YAML: W&B logging that goes offline by itself
    (`--trainer.logger CSVLogger` / `TensorBoardLogger` switch it), best and last checkpoints
    (`--checkpoint.*`), RNG states in checkpoints for an exact resume, a stop with one line on a NaN
    loss, a stop with a checkpoint on SIGTERM or SIGINT, and checkpoints written atomically."""

    def __init__(self, args=None, **kwargs):
        kwargs.setdefault("save_config_kwargs", {"overwrite": True})
        kwargs.setdefault("save_config_callback", LogConfigCallback)
        trainer_defaults = kwargs.setdefault("trainer_defaults", {})
        # Persistent callbacks: always present, whatever --trainer.callbacks adds.
        trainer_defaults.setdefault(
            "callbacks",
            [
                RngStateCallback(),
                LoaderStateRestore(),
                FiniteLossCheck(),
                WandbRunId(),
                StepTimer(),
                signals.StopOnSignal(),
                ProgressLog(),
            ],
        )
        # A bar on a terminal; in a file (nohup, SLURM, CI) ProgressLog's lines instead.
        trainer_defaults.setdefault("enable_progress_bar", is_terminal())
        args = _default_logger_dir(list(sys.argv[1:] if args is None else args))
        super().__init__(
            L.LightningModule,
            L.LightningDataModule,
            subclass_mode_model=True,
            subclass_mode_data=True,
            run=False,
            args=args,
            **kwargs,
        )

    def init_parser(self, **kwargs):
        parser = super().init_parser(**kwargs)
        # A usage error is the error line and a tip to run --help, not 150 lines of usage first.
        parser.print_usage = lambda file=None: None
        return parser

    def add_arguments_to_parser(self, parser) -> None:
        parser.add_argument(
            "--ckpt_path",
            type=str | None,
            default=None,
            help='checkpoint to resume from: a path, or "last" for the run\'s last checkpoint',
        )
        parser.add_argument(
            "--test", type=bool, default=True, help="after fitting, test the best checkpoint when the data has a test split"
        )
        parser.add_argument(
            "--ema_decay",
            type=float | None,
            default=None,
            help="keep an exponential moving average of the weights with this decay (e.g. 0.999); it is "
            "validated, checkpointed and tested instead of the training weights (null: off)",
        )
        parser.add_argument(
            "--log_every_n_seconds",
            type=float,
            default=30.0,
            help="with standard error not a terminal, a progress line at least this often, besides every "
            "--trainer.log_every_n_steps steps (0: by steps only)",
        )
        # The best checkpoints and, from the same options, last.ckpt (checkpointing.checkpoint_callbacks), for
        # every recipe; metric names keep "/" out of file names.
        parser.add_lightning_class_args(BestCheckpoint, "checkpoint")
        parser.set_defaults(
            {
                "checkpoint.monitor": "val/loss",
                "checkpoint.mode": "min",
                "checkpoint.filename": CHECKPOINT_FILENAME,
                "checkpoint.auto_insert_metric_name": False,
                "checkpoint.save_last": True,
            }
        )
        # W&B by default; `--trainer.logger CSVLogger` (or TensorBoardLogger, or false) instead.
        parser.set_defaults({"trainer.logger": {"class_path": f"{AutoWandbLogger.__module__}.AutoWandbLogger"}})
        # Translation models get their tokenizers from the data module they are trained on.
        parser.link_arguments("data", "model.init_args.tokenizers", compute_fn=_tokenizers_of, apply_on="instantiate")
        # Length buckets are made where the batches are collated; the model compiles one graph per bucket.
        parser.link_arguments("data.pad_to_multiple", "model.init_args.pad_to_multiple", apply_on="instantiate")

    def before_instantiate_classes(self) -> None:
        # Loggers write under trainer.default_root_dir unless told otherwise.
        config = self.config
        decay = config.get("ema_decay")
        if decay is not None and not 0.0 < decay < 1.0:
            self.parser.error(f"--ema_decay must lie strictly between 0 and 1 (or be null), got {decay}")
        if config.get("log_every_n_seconds", 0) < 0:
            self.parser.error(f"--log_every_n_seconds must be 0 (off) or more, got {config.log_every_n_seconds}")
        check_accelerator(config.trainer.get("accelerator"))
        if config.trainer.get("precision") is None:
            config.trainer.precision, reason = machine_precision(config.trainer.get("accelerator"))
            rank_zero_info(precision_line(config.trainer.precision, reason))
        _check_pad_to_multiple(self.parser, config)
        root = config.trainer.get("default_root_dir") or "."
        loggers = config.trainer.get("logger")
        for logger in loggers if isinstance(loggers, list) else [loggers]:
            init_args = getattr(logger, "init_args", None) if hasattr(logger, "class_path") else None
            if init_args is not None and "save_dir" in init_args and not init_args.get("save_dir"):
                init_args["save_dir"] = root
            if init_args is not None and "group" in init_args and not init_args.get("group") and config.get("config"):
                # The recipe's name: the first --config (later ones, e.g. configs/variants/*, modify it).
                init_args["group"] = Path(str(config.config[0])).stem

    def instantiate_trainer(self, **kwargs) -> L.Trainer:
        # Our bar and model summary (progress.EpochBar, callbacks.ModelSummaryWithoutZeroFlops: true labels) in place
        # of the ones Lightning would add itself, where they are enabled and the recipe chose none of its own.
        trainer_config = self.config_init["trainer"]
        callbacks = list(trainer_config.get("callbacks") or [])
        if trainer_config.get("enable_progress_bar") is not False and not any(isinstance(c, ProgressBar) for c in callbacks):
            callbacks.append(EpochBar())
        if trainer_config.get("enable_model_summary") is not False and not any(isinstance(c, ModelSummary) for c in callbacks):
            callbacks.append(ModelSummaryWithoutZeroFlops())
        trainer_config["callbacks"] = callbacks
        try:
            trainer = super().instantiate_trainer(**kwargs)
        except MisconfigurationException as err:
            # Devices the machine lacks (`--trainer.devices 4` on one GPU, ...): Lightning's message, first line.
            raise HyperparameterError(f"Trainer: {str(err).strip().splitlines()[0]}") from None
        for best in [c for c in trainer.callbacks if isinstance(c, BestCheckpoint)]:
            at = trainer.callbacks.index(best)
            trainer.callbacks[at : at + 1] = checkpoint_callbacks(best)
        for progress in [c for c in trainer.callbacks if isinstance(c, ProgressLog)]:
            progress.every_n_seconds = self.config_init["log_every_n_seconds"]
        decay = self.config_init.get("ema_decay")
        if decay is not None:
            trainer.callbacks.insert(0, EMA(decay=decay))  # ahead of the ModelCheckpoints, which must run last
        # Atomic checkpoint writes, unless a CheckpointIO plugin was chosen on purpose.
        if not checkpoint_io_chosen(trainer):
            trainer.strategy.checkpoint_io = AtomicCheckpointIO()
        return trainer


def check_accelerator(accelerator) -> None:
    """A GPU asked for on a machine without one is one line before any data is read, rather than
    Lightning's `MisconfigurationException` and its traceback once the trainer is built."""
    if not isinstance(accelerator, str) or accelerator.lower() not in ("gpu", "cuda"):
        return
    import torch

    if accelerator.lower() == "gpu" and torch.backends.mps.is_available():
        return
    if not torch.cuda.is_available():
        build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "no CUDA support"
        raise HyperparameterError(
            f"--trainer.accelerator {accelerator}: no CUDA GPU is available on this machine "
            f"(torch {torch.__version__}, built with {build}, finds none); use --trainer.accelerator cpu, "
            "or auto to take a GPU where there is one"
        )


def _default_logger_dir(args: list[str]) -> list[str]:
    """`--trainer.logger CSVLogger` (or TensorBoardLogger, …) without `--trainer.logger.save_dir`:
    give it an empty save_dir, which `before_instantiate_classes` turns into trainer.default_root_dir
    (CSVLogger and TensorBoardLogger make save_dir a required argument)."""
    for i, arg in enumerate(args):
        if arg == "--trainer.logger" and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith("--trainer.logger="):
            value = arg.split("=", 1)[1]
        else:
            continue
        a_class = value.lower() not in ("true", "false", "null", "none") and not value.lstrip().startswith(("{", "["))
        if a_class and not any(a.startswith("--trainer.logger.save_dir") for a in args):
            return args + ["--trainer.logger.save_dir", ""]
    return args


class NothingToTrain(Exception):
    """A resumed run whose checkpoint already reached `--trainer.max_steps`, `max_epochs` or `max_time`:
    scripts/fit.py says so in one line and exits with `common.exits.EXIT_NOTHING_TO_DO`, before any folder is made."""


def run_fit(cli: TransformerCLI, resume: Callable[[dict[str, str]], str] = lambda settings: "") -> None:
    """Fit (resuming `--ckpt_path`), test the best checkpoint, print and write the summary. `resume` makes the
    command that would resume this run with some settings changed ({flag: value}), printed when a time limit ends it."""
    trainer, model, datamodule = cli.trainer, cli.model, cli.datamodule
    ckpt_path = resolve_ckpt_path(cli.config.ckpt_path, trainer)
    if ckpt_path is not None:
        state = check_resume_checkpoint(ckpt_path, model)
        if state is not None:
            check_something_left(state, trainer, ckpt_path)
            if trainer.is_global_zero:
                remove_stale_temporaries(Path(ckpt_path).parent)  # the resumed run's, if it was killed mid-save
        run_id = continue_wandb_run(trainer.loggers, state) if state is not None else None
        if run_id:
            rank_zero_info(f"Continuing W&B run {run_id}")
            keep_earlier_checkpoints(trainer)
    claim_run_folder(trainer)
    start = time.monotonic()
    # A time limit mid-epoch ends fit with last.ckpt written at the step; test and summarise as after any end.
    with contextlib.suppress(StoppedMidEpoch):
        trainer.fit(model, datamodule=datamodule, ckpt_path=ckpt_path)
    fit_seconds = time.monotonic() - start
    if trainer.is_global_zero:
        report_time_limit(trainer, resume)
    best = trainer.checkpoint_callback.best_model_path if trainer.checkpoint_callback else ""
    tested = None
    if cli.config.test and _has_split(datamodule, "test_dataloader"):
        # By its path: "best" makes Lightning warn that the last.ckpt callbacks are ModelCheckpoints too.
        trainer.test(model, datamodule=datamodule, ckpt_path=best or None)
        tested = evaluated_label(trainer)
    if trainer.is_global_zero:
        folder = run_folder(trainer)
        summary = summarize(trainer, model, datamodule, best, str(folder) if trainer.loggers else None, fit_seconds, tested)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")


def report_time_limit(trainer: L.Trainer, resume: Callable[[dict[str, str]], str]) -> None:
    """After fitting: when `--trainer.max_time` ended it, one line with where it stopped, the checkpoint to
    resume and the command that does, with a limit larger by the one just reached (the time limit counts the
    training time of the runs a resumed one continues: the same limit would train nothing)."""
    timer = time_limit(trainer)
    if timer is None or timer.time_remaining() > 0:
        return
    last = last_checkpoint(trainer) or "none written"
    elapsed = timedelta(seconds=int(timer.time_elapsed("train")))
    limit = timedelta(seconds=round(timer.time_elapsed("train") + timer.time_remaining()))  # the duration given
    seconds = int((elapsed + limit).total_seconds())
    larger = f"{seconds // 86400:02d}:{seconds // 3600 % 24:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"  # DD:HH:MM:SS
    command = resume({"--trainer.max_time": larger})
    print(
        f"time limit reached (--trainer.max_time; {elapsed} of training, counting the runs this one resumes) at "
        f"step {trainer.global_step}; last checkpoint: {last}; resume with a larger --trainer.max_time (another "
        f"{limit} of training): {command}",
        file=sys.stderr,
        flush=True,
    )


def check_something_left(state: dict, trainer: L.Trainer, path: str) -> None:
    """`NothingToTrain` when the checkpoint being resumed has already reached `max_steps`, `max_epochs` or
    `max_time` (Lightning counts the time of the earlier runs: it would train nothing, test again and exit
    0 as if it had trained)."""
    steps = state.get("global_step", 0)
    if 0 <= trainer.max_steps <= steps:
        raise NothingToTrain(
            f"--trainer.max_steps {trainer.max_steps}: {path} has already trained {steps} steps; "
            "pass a larger --trainer.max_steps to train on"
        )
    # `processed`: a checkpoint written at an epoch's end (last.ckpt) counts that epoch as processed, not yet completed.
    epochs = state["loops"]["fit_loop"]["epoch_progress"]["current"]["processed"]
    if trainer.max_epochs is not None and 0 <= trainer.max_epochs <= epochs:
        raise NothingToTrain(
            f"--trainer.max_epochs {trainer.max_epochs}: {path} has already trained {epochs} epochs; "
            "pass a larger --trainer.max_epochs to train on"
        )
    timer = time_limit(trainer)
    if timer is not None:
        limit = timer.time_remaining()  # before fitting, the whole duration
        elapsed = (state.get("callbacks", {}).get(timer.state_key) or {}).get("time_elapsed", {}).get("train", 0.0)
        if elapsed >= limit:
            raise NothingToTrain(
                f"--trainer.max_time {timedelta(seconds=int(limit))}: {path} has already trained for "
                f"{timedelta(seconds=int(elapsed))} (a resumed run's time limit counts the time already trained); "
                "pass a larger --trainer.max_time to train on"
            )


def keep_earlier_checkpoints(trainer: L.Trainer) -> None:
    """A run that continues its W&B run also continues its log folder (`<project>/<run id>/`), where
    Lightning would write the resumed run's checkpoints over the earlier ones: they go to the first
    free `checkpoints-<n>` beside `checkpoints` instead (`--ckpt_path last` takes the newest)."""
    if not trainer.loggers:
        return
    folder = run_folder(trainer)
    for callback in trainer.checkpoint_callbacks:
        if callback.dirpath is None and (folder / "checkpoints").exists():
            n = 2
            while (folder / f"checkpoints-{n}").exists():
                n += 1
            callback.dirpath = str(folder / f"checkpoints-{n}")


def resolve_ckpt_path(ckpt_path: str | None, trainer: L.Trainer) -> str | None:
    """ "last" means the newest last.ckpt of any earlier run under the trainer's root directory
    (each run logs to a new version folder, so Lightning's own "last" would look in an empty one)."""
    if ckpt_path != "last":
        return ckpt_path
    candidates = sorted(Path(trainer.default_root_dir).rglob("last*.ckpt"), key=lambda p: p.stat().st_mtime)
    if not candidates:
        raise CheckpointError(f"--ckpt_path last: no last.ckpt under {trainer.default_root_dir} to resume from")
    rank_zero_info(f"Resuming the run in {candidates[-1].parent.parent} from {candidates[-1]}")
    return str(candidates[-1])


def check_resume_checkpoint(path: str, model: L.LightningModule) -> dict | None:
    """One clear `CheckpointError` before training, rather than a traceback from inside `fit`, when
    `--ckpt_path` is missing, unreadable, of another task, or of another model size. Returns the
    checkpoint's contents (tensors memory-mapped), or None for a remote path."""
    if "://" in path:
        return None  # remote: Lightning reads it
    state = read_checkpoint(path)
    if "loops" not in state:
        raise CheckpointError(f"--ckpt_path {path} is not a Lightning training checkpoint (no loop state to resume)")
    found = (state.get("hyper_parameters") or {}).get("_class_path", "")
    if found and found.rsplit(".", 1)[-1] != type(model).__name__:
        raise CheckpointError(f"--ckpt_path {path} holds a {found} checkpoint, but this run trains a {type(model).__name__}")
    ours = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    theirs = {k: tuple(v.shape) for k, v in state["state_dict"].items()}
    if set(ours) != set(theirs):
        raise CheckpointError(f"--ckpt_path {path} holds a checkpoint of another model: its parameter names differ")
    if ours != theirs:
        name = next(k for k in ours if ours[k] != theirs[k])
        raise CheckpointError(
            f"--ckpt_path {path} does not fit this model's sizes ({name}: {theirs[name]} in the checkpoint, {ours[name]} here)"
        )
    return state


def _has_split(datamodule, hook: str) -> bool:
    # LightningDataModule defines every hook; a split exists when the subclass overrides it.
    return getattr(type(datamodule), hook) is not getattr(L.LightningDataModule, hook)


def summarize(
    trainer: L.Trainer,
    model: L.LightningModule,
    datamodule,
    best: str,
    log_dir: str | None = None,
    fit_seconds: float | None = None,
    tested: str | None = None,
) -> dict:
    """Print the end-of-run summary (a few translations of the best checkpoint, the checkpoints, the
    test metrics, size and speed, where the logs are) and return it as plain data (summary.json)."""
    if best and hasattr(model, "translate") and hasattr(datamodule, "val_pairs"):
        best_model = type(model).load_from_checkpoint(best, map_location="cpu")
        pairs = datamodule.val_pairs()[:10]
        for (src, ref), hyp in zip(pairs, best_model.translate([s for s, _ in pairs])):
            rank_zero_info(f"{src}  →  {hyp}" + ("" if hyp == ref else f"   (reference: {ref})"))
    callback = trainer.checkpoint_callback
    timer = next((c for c in trainer.callbacks if isinstance(c, StepTimer)), None)
    score = callback.best_model_score if best and callback else None
    summary = {
        "best_checkpoint": best or None,
        "monitor": callback.monitor if callback else None,
        "best_score": score.item() if score is not None else None,
        "last_checkpoint": str(last) if (last := last_path(trainer)) and last.is_file() else None,
        "tested": tested,  # which checkpoint, weights and precision the test metrics are of
        "test": {name: value.item() for name, value in sorted(trainer.callback_metrics.items()) if name.startswith("test/")},
        "test_bleu_signature": getattr(model, "bleu_signatures", {}).get("test"),
        "parameters": sum(p.numel() for p in model.parameters()),  # shared tables counted once
        "steps": trainer.global_step,
        "step_ms": timer.median_ms() if timer else None,
        "fit_seconds": fit_seconds,
        "log_dir": log_dir,
    }
    lines = ["", "Summary"]
    if best:
        lines.append(f"  best checkpoint: {best}" + (f"  ({callback.monitor}={score.item():.4f})" if score is not None else ""))
    if summary["last_checkpoint"]:
        lines.append(f"  last checkpoint: {summary['last_checkpoint']}")
    if summary["test"] and tested:
        lines.append(f"  tested: {tested}")
    lines += [f"  {name}: {value:.4f}" for name, value in summary["test"].items()]
    if summary["test_bleu_signature"]:
        lines.append(f"  test/bleu signature: {summary['test_bleu_signature']}")
    speed = f", median step {summary['step_ms']:.1f} ms" if summary["step_ms"] else ""
    lines.append(f"  parameters: {summary['parameters']:,}; {summary['steps']:,} steps{speed}")
    if log_dir:
        lines.append(f"  logs: {log_dir}")
    for logger in trainer.loggers:
        if run_dir(logger):
            lines.append(f"  W&B run: {run_dir(logger)}")
        if sync_command(logger):
            lines.append(f"  offline W&B run; upload it with: {sync_command(logger)}")
    rank_zero_info("\n".join(lines))
    return summary
