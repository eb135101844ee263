"""The LightningCLI behind scripts/fit.py: recipe defaults, data → model wiring, the end-of-run summary."""

from __future__ import annotations

from pathlib import Path

import lightning as L
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.cli import LightningCLI
from lightning.pytorch.utilities import rank_zero_info

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_CONFIG = ROOT / "configs" / "toy_translation.yaml"


def _tokenizers_of(datamodule) -> dict | None:
    return getattr(datamodule, "tokenizers", None)


class TransformerCLI(LightningCLI):
    def __init__(self, args=None, **kwargs):
        kwargs.setdefault("save_config_kwargs", {"overwrite": True})
        super().__init__(
            L.LightningModule,
            L.LightningDataModule,
            subclass_mode_model=True,
            subclass_mode_data=True,
            run=False,
            args=args,
            **kwargs,
        )

    def add_arguments_to_parser(self, parser) -> None:
        parser.add_argument("--ckpt_path", type=str | None, default=None,
                            help='checkpoint to resume from: a path, or "last" for the run\'s last checkpoint')
        parser.add_argument("--test", type=bool, default=True,
                            help="after fitting, test the best checkpoint when the data has a test split")
        # One checkpoint callback for every recipe; metric names keep "/" out of file names.
        parser.add_lightning_class_args(ModelCheckpoint, "checkpoint")
        parser.set_defaults({
            "checkpoint.monitor": "val/loss",
            "checkpoint.mode": "min",
            "checkpoint.filename": "epoch{epoch:03d}-step{step}",
            "checkpoint.auto_insert_metric_name": False,
            "checkpoint.save_last": True,
        })
        # Translation models get their tokenizers from the data module they are trained on.
        parser.link_arguments("data", "model.init_args.tokenizers", compute_fn=_tokenizers_of, apply_on="instantiate")


def run_fit(cli: TransformerCLI) -> None:
    trainer, model, datamodule = cli.trainer, cli.model, cli.datamodule
    trainer.fit(model, datamodule=datamodule, ckpt_path=resolve_ckpt_path(cli.config.ckpt_path, trainer))
    best = trainer.checkpoint_callback.best_model_path if trainer.checkpoint_callback else ""
    if cli.config.test and _has_split(datamodule, "test_dataloader"):
        trainer.test(model, datamodule=datamodule, ckpt_path="best" if best else None)
    if trainer.is_global_zero:
        summarize(trainer, model, datamodule, best)


def resolve_ckpt_path(ckpt_path: str | None, trainer: L.Trainer) -> str | None:
    """"last" means the newest last.ckpt of any earlier run under the trainer's root directory
    (each run logs to a new version folder, so Lightning's own "last" would look in an empty one)."""
    if ckpt_path != "last":
        return ckpt_path
    candidates = sorted(Path(trainer.default_root_dir).rglob("last*.ckpt"), key=lambda p: p.stat().st_mtime)
    if not candidates:
        raise FileNotFoundError(f"--ckpt_path last: no last.ckpt under {trainer.default_root_dir} to resume from")
    rank_zero_info(f"Resuming from {candidates[-1]}")
    return str(candidates[-1])


def _has_split(datamodule, hook: str) -> bool:
    # LightningDataModule defines every hook; a split exists when the subclass overrides it.
    return getattr(type(datamodule), hook) is not getattr(L.LightningDataModule, hook)


def summarize(trainer: L.Trainer, model: L.LightningModule, datamodule, best: str) -> None:
    if best and hasattr(model, "translate") and hasattr(datamodule, "val_pairs"):
        best_model = type(model).load_from_checkpoint(best, map_location="cpu")
        pairs = datamodule.val_pairs()[:10]
        for (src, ref), hyp in zip(pairs, best_model.translate([s for s, _ in pairs])):
            rank_zero_info(f"{src}  →  {hyp}" + ("" if hyp == ref else f"   (reference: {ref})"))
    callback = trainer.checkpoint_callback
    lines = ["", "Summary"]
    if best:
        score = callback.best_model_score
        lines.append(f"  best checkpoint: {best}" + (f"  ({callback.monitor}={score.item():.4f})" if score is not None else ""))
    if callback and callback.last_model_path:
        lines.append(f"  last checkpoint: {callback.last_model_path}")
    for name, value in sorted(trainer.callback_metrics.items()):
        if name.startswith("test/"):
            lines.append(f"  {name}: {value.item():.4f}")
    if trainer.logger is not None and trainer.log_dir:
        lines.append(f"  logs: {trainer.log_dir}")
    rank_zero_info("\n".join(lines))
