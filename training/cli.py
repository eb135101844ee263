"""The LightningCLI behind scripts/fit.py, the wiring: recipe defaults, data → model links, the callbacks every run
gets, and `run_fit` (resume, fit, test, summary). What each of them does lives in the module that answers its
question: how a run resumes (resume.py), stops early (stopping.py, signals.py), writes its checkpoints
(checkpointing.py, checkpoint_io.py) and what it leaves behind (records.py); which arguments it refuses (arguments.py)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from pathlib import Path

import lightning as L
from lightning.pytorch.callbacks import ModelSummary, ProgressBar
from lightning.pytorch.cli import LightningCLI
from lightning.pytorch.utilities import rank_zero_info
from lightning.pytorch.utilities.exceptions import MisconfigurationException

from common.errors import HyperparameterError
from common.noise import silence
from common.progress import is_terminal
from common.runs import claim_run_folder
from common.signals import Stopped

from .arguments import RecipeParser, check_pad_to_multiple, check_run_options, moved_setting
from .callbacks import (
    EMA,
    EarlyStoppingWhenComputed,
    FiniteLossCheck,
    LoaderStateRestore,
    LogConfigCallback,
    ModelSummaryWithoutZeroFlops,
    RngStateCallback,
    evaluated_label,
)
from .checkpoint_io import AtomicCheckpointIO
from .checkpointing import BestCheckpoint, checkpoint_callbacks
from .lightning_internals import checkpoint_io_chosen
from .loggers import AutoWandbLogger, WandbRunId, default_logger_dir
from .precision import asked_precision, check_accelerator, machine_precision, precision_line
from .progress import EpochBar, ProgressLog
from .records import StepTimer, best_checkpoint, early_stopping, write_summary
from .resume import prepare_resume
from .stopping import StopAtStep, report_time_limit
from .time_budget import TimeBudget

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CONFIG = ROOT / "configs" / "toy_translation.yaml"
# Checkpoint names, with auto_insert_metric_name=False: epoch024-step400.ckpt (the notebook names them so too).
CHECKPOINT_FILENAME = "epoch{epoch:03d}-step{step}"


def _tokenizers_of(datamodule) -> dict | None:
    return getattr(datamodule, "tokenizers", None)


class TransformerCLI(LightningCLI):
    """Every recipe gets, without a line of YAML: W&B logging that goes offline by itself
    (`--trainer.logger CSVLogger` / `TensorBoardLogger` switch it), best and last checkpoints
    (`--checkpoint.*`), RNG states in checkpoints for an exact resume, a stop with one line on a NaN
    loss, a stop with a checkpoint on SIGTERM or SIGINT, and checkpoints written atomically."""

    def __init__(self, args=None, **kwargs):
        silence()  # Lightning's and torch's messages no user can act on (common/noise.py), from the run's start
        kwargs.setdefault("parser_class", RecipeParser)
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
                StopAtStep(),
                ProgressLog(),
                TimeBudget(),
            ],
        )
        # A bar on a terminal; in a file (nohup, SLURM, CI) ProgressLog's lines instead.
        trainer_defaults.setdefault("enable_progress_bar", is_terminal())
        args = default_logger_dir(list(sys.argv[1:] if args is None else args))
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
        error = parser.error

        def error_or_moved_setting(message, *args, **kwargs):
            if moved := moved_setting(str(message)):
                print(f"error: {moved}", file=sys.stderr)
                raise SystemExit(2)
            return error(message, *args, **kwargs)

        parser.error = error_or_moved_setting
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
            "--fits",
            type=list[str] | None,
            default=None,
            help="a variant file's (configs/variants/): the networks it is for, text and/or image; a recipe whose "
            "network reads another is refused (training/variants.py)",
        )
        parser.add_argument(
            "--log_every_n_seconds",
            type=float,
            default=30.0,
            help="with standard error not a terminal, a progress line at least this often, besides every "
            "--trainer.log_every_n_steps steps (0: by steps only)",
        )
        parser.add_argument(
            "--fit_schedule_to_time",
            type=bool,
            default=False,
            help="with --trainer.max_time: once the step rate is known, run the learning-rate schedule after its "
            "warm-up faster, so that it ends where the time limit stops training (training/time_budget.py)",
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
        # Lightning's EarlyStopping, off unless a patience is given, judging by the best checkpoint's metric and mode
        # (--checkpoint.monitor, --checkpoint.mode; instantiate_trainer): stated once, the stop and the best agree.
        parser.add_argument(
            "--early_stopping.patience",
            type=int | None,
            default=None,
            help="stop training once --checkpoint.monitor has not improved (in --checkpoint.mode's direction) for "
            "this many validations in a row; the summary says where and why (null: never)",
        )
        parser.add_argument(
            "--early_stopping.min_delta",
            type=float,
            default=0.0,
            help="with --early_stopping.patience: a change of the metric smaller than this is no improvement",
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
        check_run_options(self.parser, config)
        check_accelerator(config.trainer.get("accelerator"))
        # The precision that runs is the one config.yaml records (and the summary): chosen by the machine when none
        # is named, and where Lightning would replace the one named (fp16 autocast on a CPU), replaced here.
        accelerator = config.trainer.get("accelerator")
        if config.trainer.get("precision") is None:
            config.trainer.precision, reason = machine_precision(accelerator)
            rank_zero_info(precision_line(config.trainer.precision, reason))
        else:
            config.trainer.precision, replaced = asked_precision(config.trainer.precision, accelerator)
            if replaced:
                rank_zero_info(replaced)
        check_pad_to_multiple(self.parser, config)
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
            if (patience := self.config_init["early_stopping"]["patience"]) is not None:
                delta = self.config_init["early_stopping"]["min_delta"]
                stop = EarlyStoppingWhenComputed(best.monitor, delta, patience, mode=best.mode, check_on_train_epoch_end=False)
                trainer.callbacks.append(stop)
            at = trainer.callbacks.index(best)
            trainer.callbacks[at : at + 1] = checkpoint_callbacks(best)
        for progress in [c for c in trainer.callbacks if isinstance(c, ProgressLog)]:
            progress.every_n_seconds = self.config_init["log_every_n_seconds"]
        for budget in [c for c in trainer.callbacks if isinstance(c, TimeBudget)]:
            budget.fit_schedule = self.config_init["fit_schedule_to_time"]
        decay = self.config_init.get("ema_decay")
        if decay is not None:
            trainer.callbacks.insert(0, EMA(decay=decay))  # ahead of the ModelCheckpoints, which must run last
        # Atomic checkpoint writes, unless a CheckpointIO plugin was chosen on purpose.
        if not checkpoint_io_chosen(trainer):
            trainer.strategy.checkpoint_io = AtomicCheckpointIO()
        return trainer


def run_fit(cli: TransformerCLI, resume: Callable[[dict[str, str]], str] = lambda settings: "") -> None:
    """Fit (resuming `--ckpt_path`: training/resume.py), test the best checkpoint, print and write the summary
    (training/records.py). `resume` makes the command that would resume this run with some settings changed
    ({flag: value}), printed when a time limit ends it (training/stopping.py)."""
    trainer, model, datamodule = cli.trainer, cli.model, cli.datamodule
    ckpt_path = prepare_resume(trainer, model, cli.config.ckpt_path)
    claim_run_folder(trainer)
    start = time.monotonic()
    try:
        trainer.fit(model, datamodule=datamodule, ckpt_path=ckpt_path)
    except Stopped as stop:
        if stop.signum is not None:
            raise  # the script ends with the signal's line and status (signals.exit_on_stop)
        # A time limit or max_steps mid-epoch ends fit with last.ckpt written at the step: go on as after any end.
    fit_seconds = time.monotonic() - start
    stopping = early_stopping(trainer)  # before the test, whose checkpoint restores the callbacks' states of its epoch
    if trainer.is_global_zero:
        report_time_limit(trainer, resume)
    tested = None
    if cli.config.test and _has_split(datamodule, "test_dataloader"):
        # By its path: "best" makes Lightning warn that the last.ckpt callbacks are ModelCheckpoints too. Not verbose:
        # the summary prints the test's scores, once (Lightning's table would print them a second time).
        trainer.test(model, datamodule=datamodule, ckpt_path=best_checkpoint(trainer) or None, verbose=False)
        tested = evaluated_label(trainer)
    write_summary(trainer, model, datamodule, fit_seconds, tested, stopping)


def _has_split(datamodule, hook: str) -> bool:
    # LightningDataModule defines every hook; a split exists when the subclass overrides it.
    return getattr(type(datamodule), hook) is not getattr(L.LightningDataModule, hook)
