"""What a run leaves behind: its step times (`StepTimer`) and, in its folder (`run_folder`, common/runs.py), the
end-of-run summary, printed and written as `summary.json` (`write_summary`), and the test's translations
(`write_test_outputs`). The training layer imports no task: what it needs of one comes through the task's
`run_summary` hook. The checkpoints are training/checkpointing.py's; the W&B run's records training/loggers.py's."""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

import lightning as L
from lightning.pytorch.callbacks import Callback, EarlyStopping
from lightning.pytorch.callbacks.early_stopping import EarlyStoppingReason
from lightning.pytorch.utilities import rank_zero_info

from common.files import atomic_write_text
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


def write_summary(
    trainer: L.Trainer, model: L.LightningModule, datamodule, fit_seconds: float, tested: str | None, stopping: dict | None
) -> None:
    """Print the end-of-run summary (what the task's `run_summary(best, datamodule)` hook reports: sample lines and
    the test's line and signatures; then the checkpoints, the test metrics, size and speed, where the logs are) and
    write it as plain data, `summary.json`, in the run's folder (rank zero only). The test's signatures also go to
    the loggers (`log_text`). The test's outputs, where the task reports them, are written there too, one sentence a
    line (`TEST_OUTPUTS`): what scripts/ablate.py's paired tests compare. `stopping`: `early_stopping(trainer)` as fit
    left it."""
    if not trainer.is_global_zero:
        return
    folder = run_folder(trainer)
    log_dir = str(folder) if trainer.loggers else None
    folder.mkdir(parents=True, exist_ok=True)
    best = best_checkpoint(trainer)
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
        "early_stopping": stopping,
        "test_outputs": write_test_outputs(folder, test.get("outputs")),
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
    if stop := summary["early_stopping"]:
        lines.append(f"  early stopping: {stop['line']}")
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
    (folder / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")


# The test's translations and their references, line i of one for line i of the other (several test sets, a
# multilingual model's directions: one after another, in the order the test scores them).
TEST_OUTPUTS = {"hypotheses": "test_hypotheses.txt", "references": "test_references.txt"}


def write_test_outputs(folder: Path, outputs: dict[str, list[str]] | None) -> dict[str, str] | None:
    """`outputs` ({"hypotheses": [...], "references": [...]}) written in `folder`, each whole or not at all; their
    file names (`TEST_OUTPUTS`), or None when the task reported none (MNIST; a run without a test)."""
    if not outputs:
        return None
    for key, name in TEST_OUTPUTS.items():
        atomic_write_text(folder / name, "".join(line.replace("\n", " ") + "\n" for line in outputs[key]))
    return dict(TEST_OUTPUTS)


def read_test_outputs(folder: str | Path | None, names: dict[str, str] | None) -> tuple[list[str], list[str]] | None:
    """A run's test translations and references as `write_test_outputs` left them in its folder (`names`: its
    summary's `test_outputs`), or None where there are none."""
    paths = [Path(folder) / names[key] for key in ("hypotheses", "references")] if folder and names else []
    if not paths or not all(p.is_file() for p in paths):
        return None
    hyps, refs = (p.read_text(encoding="utf-8").splitlines() for p in paths)
    return hyps, refs


def early_stopping(trainer: L.Trainer) -> dict | None:
    """What Lightning's `EarlyStopping` (`--early_stopping.patience`, training/cli.py) did, as plain data with a line
    for the summary; None for a run without one. Its state is in each checkpoint (Lightning saves a callback's
    `state_dict`), so a resumed run counts on from where the run it continues stood."""
    stopper = next((c for c in trainer.callbacks if isinstance(c, EarlyStopping)), None)
    if stopper is None:
        return None
    stopped = stopper.stopping_reason is not EarlyStoppingReason.NOT_STOPPED
    best = stopper.best_score.item() if bool(stopper.best_score.isfinite()) else None
    settings = f"patience {stopper.patience}, min_delta {abs(stopper.min_delta):g}"
    if stopped:  # Lightning's own words for why (patience exhausted, a metric that is not finite)
        line = f"stopped at epoch {stopper.stopped_epoch} ({settings}): {stopper.stopping_reason_message}"
    else:
        since = f"best {stopper.monitor}={best:.4f}" if best is not None else f"no {stopper.monitor} yet"
        line = f"did not stop ({settings}): {since}, {stopper.wait_count} validation(s) since without improvement"
    return {
        "stopped": stopped,
        "epoch": stopper.stopped_epoch if stopped else None,
        "reason": stopper.stopping_reason.name.lower() if stopped else None,  # patience_exhausted, ...
        "message": stopper.stopping_reason_message if stopped else None,
        "monitor": stopper.monitor,
        "mode": stopper.mode,
        "best_score": best,
        "wait_count": stopper.wait_count,
        "patience": stopper.patience,
        "min_delta": abs(stopper.min_delta),
        "line": line,
    }
