"""--early_stopping.patience: Lightning's own EarlyStopping on the best checkpoint's metric and mode (stated once, by
--checkpoint.monitor and --checkpoint.mode), off by default. The summary says whether, where and why it stopped; its
state travels in the checkpoints, so a run stopped mid-way and resumed with --ckpt_path last stops at the epoch an
uninterrupted run stops at, with the same best score. On the toy recipe: 16 steps an epoch, a validation at each end."""

import json
import logging
from pathlib import Path

import pytest
import yaml
from lightning.pytorch.callbacks import EarlyStopping

from tests.helpers import ROOT, recipe_args, run_script

RUN = ["--trainer.logger", "CSVLogger", "--test", "false", "--trainer.enable_progress_bar", "false"]
# A min_delta larger than any loss: only the first validation improves (on infinity), then patience 2 runs out at the
# third, epoch 2, whatever the machine's arithmetic.
STOP = ["--early_stopping.patience", "2", "--early_stopping.min_delta", "100"]


def fit(capsys, caplog, root: Path, *extra: str) -> tuple[int, str, dict]:
    """scripts/fit.py in this process: (exit status, what it printed and logged, the newest summary.json under root)."""
    with caplog.at_level(logging.INFO):
        code, out, err = run_script(capsys, "fit", *RUN, "--trainer.default_root_dir", str(root), *extra)
    summaries = sorted(root.rglob("summary.json"), key=lambda p: p.stat().st_mtime)
    text = caplog.text + out + err
    caplog.clear()
    return code, text, json.loads(summaries[-1].read_text()) if summaries else {}


def test_a_run_stops_early_and_its_summary_says_where_and_why(tmp_path, capsys, caplog):
    code, text, summary = fit(capsys, caplog, tmp_path, *STOP)
    assert code == 0, text[-3000:]
    stop = summary["early_stopping"]
    assert summary["steps"] == 48 and stop["stopped"] and stop["epoch"] == 2 and stop["reason"] == "patience_exhausted"
    assert (stop["monitor"], stop["mode"], stop["patience"], stop["min_delta"], stop["wait_count"]) == (
        "val/loss",
        "min",
        2,
        100,
        2,
    )
    # The stop's best is the first validation's loss; the best checkpoint's, by the same metric and mode, is lower.
    assert stop["best_score"] > summary["best_score"]
    line = "early stopping: stopped at epoch 2 (patience 2, min_delta 100): Monitored metric val/loss did not improve"
    assert line in text
    (config,) = tmp_path.rglob("config.yaml")
    assert yaml.safe_load(config.read_text())["early_stopping"] == {"patience": 2, "min_delta": 100.0}


def test_the_stop_judges_by_the_checkpoints_metric_and_mode_where_it_is_computed(tmp_path, capsys, caplog):
    """val/bleu, the higher the better, computed at every second epoch's end (epochs 1, 3, ...; 100 from the first):
    patience 1 stops at the second BLEU, epoch 3, not at epoch 2 on epoch 1's value that Lightning's callback_metrics
    still hold, nor with an error at epoch 0, which has none."""
    bleu = ["--checkpoint.monitor", "val/bleu", "--checkpoint.mode", "max", "--model.init_args.bleu_every_n_epochs", "2"]
    code, text, summary = fit(capsys, caplog, tmp_path, *bleu, "--early_stopping.patience", "1")
    assert code == 0, text[-3000:]
    stop = summary["early_stopping"]
    assert (stop["monitor"], stop["mode"], stop["epoch"], stop["best_score"], summary["steps"]) == ("val/bleu", "max", 3, 100, 64)


def test_no_early_stopping_unless_asked(tmp_path):
    from training.cli import TransformerCLI

    recipe = ["--config", str(ROOT / "configs" / "toy_translation.yaml"), "--trainer.logger", "false"]
    cli = TransformerCLI(args=[*recipe, "--trainer.default_root_dir", str(tmp_path)])
    assert not [c for c in cli.trainer.callbacks if isinstance(c, EarlyStopping)]


@pytest.mark.parametrize(
    "flags, words",
    [
        (["--early_stopping.patience", "0"], "--early_stopping.patience must be at least 1"),
        (["--early_stopping.patience", "1", "--early_stopping.min_delta", "-1"], "--early_stopping.min_delta must be 0"),
        (["--early_stopping.patience", "1", "--checkpoint.monitor", "null"], "judges by --checkpoint.monitor"),
    ],
)
def test_settings_that_cannot_work_are_refused_before_training(tmp_path, capsys, caplog, flags, words):
    code, text, _ = fit(capsys, caplog, tmp_path, *flags)
    assert code == 2 and words in text and "Traceback" not in text
    assert not list(tmp_path.rglob("*.ckpt"))


def test_a_resumed_run_stops_where_an_uninterrupted_one_stops(tmp_path, capsys, caplog):
    code, text, whole = fit(capsys, caplog, tmp_path / "whole", *STOP)
    assert code == 0 and whole["early_stopping"]["stopped"], text[-3000:]
    # Stopped at step 40, mid-epoch 2: one validation without improvement counted, one to go.
    code, text, first = fit(capsys, caplog, tmp_path / "parts", *STOP, "--trainer.max_steps", "40")
    assert code == 0, text[-3000:]
    assert first["steps"] == 40 and not first["early_stopping"]["stopped"] and first["early_stopping"]["wait_count"] == 1
    assert "early stopping: did not stop (patience 2, min_delta 100): best val/loss=" in text
    code, text, resumed = fit(capsys, caplog, tmp_path / "parts", *STOP, "--ckpt_path", "last")
    assert code == 0, text[-3000:]
    # A stopper started afresh would take the resumed run's first validation as an improvement and stop at epoch 4.
    for key in ("stopped", "epoch", "best_score", "wait_count", "message"):
        assert resumed["early_stopping"][key] == whole["early_stopping"][key], key
    assert resumed["steps"] == whole["steps"] == 48 and resumed["best_score"] == whole["best_score"]
    # Resumed once more, it has nothing left to train: said, status 3, as for max_steps; a larger patience trains on.
    code, text, _ = fit(capsys, caplog, tmp_path / "parts", *STOP, "--ckpt_path", "last")
    assert code == 3 and "nothing to train: --early_stopping.patience 2: " in text and "stopped early" in text, text[-3000:]
    # The larger patience is the resumed run's own (Lightning's checkpointed state would bring back 2): it stops where
    # an uninterrupted run with patience 4 stops, at epoch 4, not at epoch 3 one validation after the resume.
    more = ["--early_stopping.patience", "4", "--early_stopping.min_delta", "100", "--trainer.max_epochs", "10"]
    code, text, longer = fit(capsys, caplog, tmp_path / "parts", *more, "--ckpt_path", "last")
    assert code == 0, text[-3000:]
    code, text, patient = fit(capsys, caplog, tmp_path / "patient", *more)
    assert code == 0 and (patient["early_stopping"]["epoch"], patient["steps"]) == (4, 80), text[-3000:]
    for key in ("stopped", "epoch", "patience", "wait_count", "best_score", "message"):
        assert longer["early_stopping"][key] == patient["early_stopping"][key], key
    assert longer["steps"] == patient["steps"] and longer["best_score"] == patient["best_score"]


def test_the_summary_says_where_fit_stopped_though_the_test_restores_an_earlier_checkpoint(tmp_path, capsys, caplog):
    """The test loads the best checkpoint, and with it every callback's state as of that checkpoint's epoch: the
    summary reports the stop as fit left it. The loss falls from epoch to epoch, so with mode max the best checkpoint
    is epoch 0's, two epochs before the stop (only the first validation gains the min_delta of 100)."""
    data = recipe_args("corpus", tmp_path / "data")
    inverted = ["--checkpoint.monitor", "val/loss", "--checkpoint.mode", "max", "--test", "true"]
    root = tmp_path / "run"  # after the recipe, which names its own
    code, text, summary = fit(capsys, caplog, root, *data, "--trainer.default_root_dir", str(root), *inverted, *STOP)
    assert code == 0, text[-3000:]
    assert Path(summary["best_checkpoint"]).name.startswith("epoch000-") and summary["test"], summary
    stop = summary["early_stopping"]
    assert stop["stopped"] and stop["epoch"] == 2 and stop["wait_count"] == 2 and stop["reason"] == "patience_exhausted"
    assert "early stopping: stopped at epoch 2 (patience 2, min_delta 100)" in text
