"""What a run leaves behind: a folder of its own (`run_folder`, common/runs.py: `config.yaml`, `summary.json`, the
figures and, unless `--checkpoint.dirpath` says otherwise, `checkpoints/`), its step times (`StepTimer`), and the
end-of-run summary (`summarize`: what the task reports through its `run_summary` hook, such as a few translations
of the best checkpoint and the test's line, then the checkpoints, the test metrics, size and speed, where the logs
are), printed and written as `summary.json` (`write_summary`). The training layer imports no task: what it needs
of one comes through that hook. The checkpoints themselves are training/checkpointing.py's; the W&B run's records
are training/loggers.py's.
"""

from __future__ import annotations

import json
import statistics
import time

import lightning as L
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.utilities import rank_zero_info

from common.runs import run_folder

from .checkpointing import last_path
from .loggers import log_text, run_dir, sync_command


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


def best_checkpoint(trainer: L.Trainer) -> str:
    """The best checkpoint's path, "" before one is written (or with no checkpoint callback)."""
    return trainer.checkpoint_callback.best_model_path if trainer.checkpoint_callback else ""


def write_summary(trainer: L.Trainer, model: L.LightningModule, datamodule, fit_seconds: float, tested: str | None) -> None:
    """Print the summary and write it as `summary.json` in the run's folder (rank zero only)."""
    if not trainer.is_global_zero:
        return
    folder = run_folder(trainer)
    log_dir = str(folder) if trainer.loggers else None
    summary = summarize(trainer, model, datamodule, best_checkpoint(trainer), log_dir, fit_seconds, tested)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")


def summarize(
    trainer: L.Trainer,
    model: L.LightningModule,
    datamodule,
    best: str,
    log_dir: str | None = None,
    fit_seconds: float | None = None,
    tested: str | None = None,
) -> dict:
    """Print the end-of-run summary (what the task's `run_summary(best, datamodule)` hook reports: sample lines and
    the test's line and signatures; then the checkpoints, the test metrics, size and speed, where the logs are)
    and return it as plain data (summary.json). The test's signatures also go to the loggers (`log_text`)."""
    reported = model.run_summary(best, datamodule) if hasattr(model, "run_summary") else {}
    for line in reported.get("samples", []):
        rank_zero_info(line)
    test = reported.get("test", {})
    if test.get("line"):  # a test scores a checkpoint: named with its weights, not by the trainer's epoch and step
        rank_zero_info(f"{tested or 'test'}: {test['line']}")
    signatures = {k: v for k, v in test.items() if k.endswith("_signature")}
    if signatures:
        log_text(trainer, signatures)
    callback = trainer.checkpoint_callback
    timer = next((c for c in trainer.callbacks if isinstance(c, StepTimer)), None)
    score = callback.best_model_score if best and callback else None
    summary = {
        "best_checkpoint": best or None,
        "monitor": callback.monitor if callback else None,
        "best_score": score.item() if score is not None else None,
        "last_checkpoint": str(last) if (last := last_path(trainer)) and last.is_file() else None,  # this run's own
        "tested": tested,  # which checkpoint, weights and precision the test metrics are of
        "test": {name: value.item() for name, value in sorted(trainer.callback_metrics.items()) if name.startswith("test/")},
        "test_bleu_signature": test.get("test/bleu_signature"),
        "parameters": sum(p.numel() for p in model.parameters()),  # shared tables counted once
        "precision": str(trainer.precision),  # what ran, whatever --trainer.precision said (training/precision.py)
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
    lines.append(f"  parameters: {summary['parameters']:,}; {summary['steps']:,} steps in {summary['precision']}{speed}")
    if log_dir:
        lines.append(f"  logs: {log_dir}")
    for logger in trainer.loggers:
        if run_dir(logger):
            lines.append(f"  W&B run: {run_dir(logger)}")
        if sync_command(logger):
            lines.append(f"  offline W&B run; upload it with: {sync_command(logger)}")
    rank_zero_info("\n".join(lines))
    return summary
