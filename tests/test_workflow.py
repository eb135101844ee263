"""The paths a new user takes: W&B offline by itself, switching loggers, exact resume after SIGKILL,
atomic checkpoints, DDP on a CPU, bf16-mixed on a CPU, and the quickstart notebook."""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from functools import partial
from pathlib import Path

import pytest
import torch
from lightning.pytorch.callbacks import Callback

from datamodules.toy import TOY_PAIRS
from tests.helpers import ENV, FIT, HANG_TIMEOUT, ROOT, fit, fit_here, recipe_args

# Lines a user can do nothing about (issue: Lightning's litlogger tip, torch's LeafSpec deprecation from
# Lightning's _pytree.py, FLOPs Lightning did not count, the bar's "Epoch 0/-2" of max_epochs -1).
NOISE = ["litlogger", "LeafSpec", "Total FLOPs: 0", "/-2", "Skipping setting a default"]


class PauseAtStep(Callback):
    """Test helper, loaded by scripts/fit.py through --trainer.callbacks: after optimizer step `step`,
    write `marker` and wait to be killed."""

    def __init__(self, step: int, marker: str):
        self.step, self.marker = step, marker

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step == self.step:
            Path(self.marker).write_text(f"{trainer.current_epoch} {batch_idx}")
            time.sleep(3600)


# ---------------------------------------------------------------------------------------------- W&B


def test_offline_reason_never_waits(monkeypatch):
    from training import loggers

    monkeypatch.setenv("WANDB_MODE", "offline")
    assert "WANDB_MODE" in loggers.offline_reason()
    monkeypatch.delenv("WANDB_MODE")
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("NETRC", str(ROOT / "no-such-netrc"))
    assert "API key" in loggers.offline_reason()
    # A key but a server that accepts the connection and never answers: give up after ~2 s.
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    with socket.create_server(("127.0.0.1", 0)) as silent:
        monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{silent.getsockname()[1]}")
        start = time.monotonic()
        assert "unreachable" in loggers.offline_reason()
        assert time.monotonic() - start < 5
    monkeypatch.setenv("WANDB_BASE_URL", "http://no-such-host.invalid")
    assert "unreachable" in loggers.offline_reason()


def test_default_logger_is_wandb_offline_with_config_and_sync_hint(tmp_path):
    env = {k: v for k, v in ENV.items() if k != "WANDB_MODE"}  # no key: must go offline by itself
    env["NETRC"] = str(tmp_path / "no-netrc")
    result = fit(tmp_path, "--trainer.max_epochs", "1", "--trainer.limit_train_batches", "2", env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout + result.stderr
    runs = list((tmp_path / "wandb").glob("offline-run-*"))
    assert len(runs) == 1, runs
    assert f"upload it with: .venv/bin/wandb sync {runs[0]}" in out and "best checkpoint" in out  # the venv's wandb
    record = next(runs[0].glob("*.wandb")).read_bytes()
    assert b"d_model" in record and b"ToyTranslationDataModule" in record  # hparams and the full config
    assert b"val/loss" in record
    assert list(tmp_path.rglob("last.ckpt"))


def test_a_fit_run_prints_nothing_a_user_cannot_act_on(tmp_path):
    result = fit(tmp_path, "--trainer.max_epochs", "1", "--trainer.enable_model_summary", "true")
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout + result.stderr
    assert "Trainable params" in out and "best checkpoint" in out  # the summaries are there
    for noise in NOISE:
        assert noise not in out, noise


def test_a_bf16_run_stopped_by_its_time_limit_prints_nothing_a_user_cannot_act_on(tmp_path):
    # Lightning's `weights_only` guess (last.ckpt at the stop), its bf16-mixed model-size warning, its warning
    # that the test's "best" has several ModelCheckpoints to choose from, and its own time-limit line.
    limited = ["--trainer.max_epochs", "1000", "--trainer.max_time", "00:00:00:03", "--trainer.precision", "bf16-mixed"]
    result = fit(tmp_path, *limited, "--trainer.enable_model_summary", "true")
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout + result.stderr
    assert "time limit reached (--trainer.max_time" in out and "best checkpoint" in out and "Trainable params" in out
    lightning = ["weights_only", "not supported by the model summary", "multiple `ModelCheckpoint`", "Time limit reached."]
    for noise in NOISE + lightning:
        assert noise not in out, noise


class ReadsTheBar(Callback):
    def __init__(self):
        self.descriptions = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        bar = trainer.progress_bar_callback
        self.descriptions += [t.description.strip() for t in bar.progress.tasks if t.id == bar.train_progress_bar_id]


@pytest.mark.parametrize("max_epochs, description", [(-1, "Epoch 0"), (3, "Epoch 0/2")])
def test_the_bar_of_a_run_bounded_by_steps_counts_no_epochs(tmp_path, max_epochs, description):
    from lightning import Trainer
    from lightning.pytorch.demos.boring_classes import BoringModel

    from training.progress import EpochBar

    reader = ReadsTheBar()
    trainer = Trainer(
        default_root_dir=tmp_path,
        max_steps=3,
        max_epochs=max_epochs,
        callbacks=[EpochBar(), reader],
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        limit_val_batches=0,
    )
    trainer.fit(BoringModel())
    assert reader.descriptions == [description] * 3


def test_resumed_run_continues_the_same_wandb_run_in_its_recipe_group(tmp_path):

    from training.loggers import offline_history, offline_records

    first = fit(tmp_path, "--trainer.max_epochs", "1", "--trainer.limit_train_batches", "4", "--trainer.log_every_n_steps", "2")
    assert first.returncode == 0, first.stderr[-3000:]
    resumed = fit(
        tmp_path,
        "--trainer.max_epochs",
        "2",
        "--trainer.limit_train_batches",
        "4",
        "--trainer.log_every_n_steps",
        "2",
        "--test",
        "false",
        "--ckpt_path",
        "last",
    )
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    runs = sorted((tmp_path / "wandb").glob("offline-run-*"))
    assert len(runs) == 2, runs
    run_id = runs[0].name.rsplit("-", 1)[1]
    assert runs[1].name.rsplit("-", 1)[1] == run_id  # `wandb sync` uploads both folders into one run
    assert f"Continuing W&B run {run_id}" in resumed.stdout + resumed.stderr
    # Both, in order, with the venv's wandb: on PATH only inside an activated venv.
    assert f"upload it with: .venv/bin/wandb sync {runs[0]} {runs[1]}\n" in resumed.stdout + resumed.stderr

    # Steps keep increasing: W&B's own `_step` (else `wandb sync` writes the second folder's rows over
    # the first's) and Lightning's x axis, `trainer/global_step`.
    before, after = (list(offline_history(next(run.glob("*.wandb")))) for run in runs)
    assert any("val/loss" in row for row in before) and any("val/loss" in row for row in after), (before, after)
    steps = [row["_step"] for row in before + after]
    assert steps == sorted(steps) and len(set(steps)) == len(steps), steps
    global_steps = [row["trainer/global_step"] for row in before + after if "trainer/global_step" in row]
    assert max(row.get("trainer/global_step", 0) for row in before) == 4  # 1 epoch of 4 batches
    assert [g for g in global_steps if g > 4] and min(
        row["trainer/global_step"] for row in after if "trainer/global_step" in row
    ) > 4, global_steps

    # Both folders: the recipe's group, and the resolved config as a file of the run.
    for run in runs:
        records = [r.run for r in offline_records(next(run.glob("*.wandb"))) if r.WhichOneof("record_type") == "run"]
        assert records and all(r.run_id == run_id and r.run_group == "toy_translation" for r in records), records
        config = (run / "files" / "lightning_config.yaml").read_text()
        assert "ToyTranslationDataModule" in config and "d_model: 64" in config
    assert "ckpt_path: last" in (runs[1] / "files" / "lightning_config.yaml").read_text()


def test_two_runs_in_one_root_keep_their_own_records(tmp_path):
    # The default logger (W&B, offline): each run's config.yaml, summary.json and attention maps go to its own
    # folder beside its checkpoints (Lightning's log_dir is the root that both runs share).
    short = ["--trainer.max_epochs", "1", "--trainer.limit_train_batches", "2", "--model.init_args.attention_maps", "1"]
    first = fit(tmp_path, *short)
    second = fit(tmp_path, *short, "--model.init_args.net.d_model", "32")
    assert first.returncode == 0 and second.returncode == 0, (first.stderr + second.stderr)[-3000:]
    summaries = sorted(tmp_path.rglob("summary.json"))
    assert len(summaries) == 2, summaries
    folders = [p.parent for p in summaries]
    for folder, width in zip(sorted(folders, key=lambda f: f.stat().st_mtime), ("64", "32")):
        summary = json.loads((folder / "summary.json").read_text())
        assert Path(summary["best_checkpoint"]).parent == folder / "checkpoints", summary
        assert f"d_model: {width}" in (folder / "config.yaml").read_text()
        assert len(list((folder / "attention").glob("*.png"))) == 1
        assert summary["log_dir"] == str(folder)
    assert not list(tmp_path.glob("*.json")) and not (tmp_path / "config.yaml").exists() and not (tmp_path / "attention").exists()


@pytest.mark.parametrize(
    "logger", ["false", "CSVLogger", "TensorBoardLogger", pytest.param("AutoWandbLogger", marks=pytest.mark.slow)]
)
def test_a_second_run_in_one_root_overwrites_nothing_of_the_first_whatever_the_logger(tmp_path, logger, capsys, caplog):
    # In this process but for wandb's, whose debug logs one process's wandb would append the second run to.
    run = partial(fit_here, capsys, caplog) if logger != "AutoWandbLogger" else fit
    # With no logger, both runs once wrote <root>/checkpoints/last.ckpt, <root>/config.yaml and <root>/summary.json.
    short = ["--trainer.logger", logger, "--trainer.max_steps", "3", "--test", "false"]
    if logger == "AutoWandbLogger":
        short = short[2:]  # the default
    first = run(tmp_path, *short, "--model.init_args.net.d_model", "64")
    assert first.returncode == 0, first.stderr[-3000:]
    # Not wandb's own links to its latest run (wandb/latest-run, wandb/debug.log), which move on to the second.
    files = [p for p in tmp_path.rglob("*") if p.is_file() and "latest-run" not in p.parts and not p.is_symlink()]
    before = {p: p.read_bytes() for p in files}
    second = run(tmp_path, *short, "--model.init_args.net.d_model", "32")
    assert second.returncode == 0, second.stderr[-3000:]
    assert {p: p.read_bytes() for p in before} == before  # every file of the first run, byte for byte
    folders = sorted((json.loads(p.read_text())["last_checkpoint"], p.parent) for p in tmp_path.rglob("summary.json"))
    assert len(folders) == 2 and folders[0][1] != folders[1][1], folders
    newest = max(folders, key=lambda f: Path(f[0]).stat().st_mtime)
    assert "d_model: 32" in (newest[1] / "config.yaml").read_text()
    assert Path(newest[0]).parent == newest[1] / "checkpoints"
    resumed = run(tmp_path, *short, "--trainer.max_steps", "4", "--model.init_args.net.d_model", "32", "--ckpt_path", "last")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"Resuming the run in {newest[1]} from {newest[0]}" in resumed.stdout + resumed.stderr


def test_ckpt_path_last_names_the_run_it_resumes(tmp_path, capsys, caplog):
    fit = partial(fit_here, capsys, caplog)
    result = fit(tmp_path, "--trainer.max_epochs", "1", "--trainer.limit_train_batches", "2", "--trainer.logger", "CSVLogger")
    assert result.returncode == 0, result.stderr[-3000:]
    resumed = fit(
        tmp_path, "--trainer.max_epochs", "2", "--trainer.limit_train_batches", "2", "--trainer.logger", "CSVLogger",
        "--ckpt_path", "last",
    )  # fmt: skip
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    last = tmp_path / "version_0" / "checkpoints" / "last.ckpt"
    assert f"Resuming the run in {tmp_path / 'version_0'} from {last}" in resumed.stdout + resumed.stderr


def test_output_to_a_file_shows_progress_lines(tmp_path):
    # stderr is a pipe here, as under nohup or SLURM: no bar; a line at the first step, then one every
    # log_every_n_steps (8 in the toy recipe).
    by_steps = ["--log_every_n_seconds", "0"]  # (lines by time too on a slow machine: test_progress_lines_by_time)
    result = fit(tmp_path, "--trainer.max_epochs", "2", "--trainer.logger", "CSVLogger", "--test", "false", *by_steps)
    assert result.returncode == 0, result.stderr[-3000:]
    pattern = re.compile(r"^epoch (\d) step (\d+)/32 \| loss \d+\.\d{3} \| lr \S+ \| [\d.,]+ tok/s \| elapsed \S+ \| eta \S+$")
    lines = [m for m in map(pattern.match, result.stderr.splitlines()) if m]
    assert [(int(m[1]), int(m[2])) for m in lines] == [(0, 1), (0, 8), (0, 16), (1, 24), (1, 32)], result.stderr[-3000:]
    assert "\r" not in result.stderr  # no bar redrawn into the file


def test_progress_line_counts_target_tokens_and_tells_the_time_left():
    from datamodules.batching import Seq2SeqBatch
    from training.progress import eta, units_in

    tgt = torch.tensor([[1, 5, 6, 2, 0], [1, 7, 2, 0, 0]])  # <bos> … <eos> then padding
    assert units_in(Seq2SeqBatch(src=tgt, tgt=tgt)) == (5, "tok")
    assert units_in([torch.zeros(4, 1, 28, 28), torch.zeros(4)]) == (4, "ex")
    assert eta(10, 40, 30.0) == "0:01:30" and eta(0, 40, 1.0) is None and eta(10, float("inf"), 1.0) is None
    assert eta(10, 40, 30.0, limit=60.0) == "0:01:00" and eta(10, float("inf"), 1.0, limit=5.0) == "0:00:05"


def test_progress_lines_by_time_and_an_eta_that_knows_the_time_limit(monkeypatch, capsys):
    # Steps of 20 s, a line every 50 steps or every 30 s, and a 4-minute --trainer.max_time: a line each
    # 2 steps (40 s), and an eta of what the limit leaves rather than the 1,000 steps left at 20 s each.
    from types import SimpleNamespace

    from lightning.pytorch.callbacks import Timer

    import training.progress
    from training.progress import ProgressLog

    now = [0.0]
    monkeypatch.setattr(training.progress.time, "monotonic", lambda: now[0])
    monkeypatch.setattr(training.progress, "is_terminal", lambda: False)
    timer = Timer(duration="00:00:04:00")
    monkeypatch.setattr(timer, "time_remaining", lambda stage="train": 240.0 - now[0])
    trainer = SimpleNamespace(
        global_step=0, current_epoch=0, log_every_n_steps=50, is_global_zero=True, estimated_stepping_batches=1006,
        callback_metrics={}, optimizers=[], callbacks=[timer],
    )  # fmt: skip
    progress = ProgressLog()
    progress.on_train_start(trainer, None)
    for step in range(1, 7):
        now[0], trainer.global_step = 20.0 * step, step
        progress.on_train_batch_end(trainer, None, None, [torch.zeros(8)], step - 1)
    lines = capsys.readouterr().err.splitlines()
    # The first step at once, then every 30 s.
    assert [line.split(" | ")[0] for line in lines] == ["epoch 0 step 1/1006", "epoch 0 step 3/1006", "epoch 0 step 5/1006"]
    assert [line.rsplit(" | ", 1)[1] for line in lines] == ["eta 0:03:40", "eta 0:03:00", "eta 0:02:20"]


def test_wandb_runs_of_a_recipe_share_a_group(tmp_path, monkeypatch):
    from training.cli import TransformerCLI

    monkeypatch.setenv("WANDB_MODE", "offline")
    cli = TransformerCLI(
        args=["--config", str(ROOT / "configs" / "toy_translation.yaml"), "--trainer.default_root_dir", str(tmp_path)]
    )
    assert cli.trainer.logger._wandb_init["group"] == "toy_translation"
    cli = TransformerCLI(
        args=[
            "--config",
            str(ROOT / "configs" / "toy_translation.yaml"),
            "--trainer.default_root_dir",
            str(tmp_path),
            "--trainer.logger.group",
            "mine",
        ]
    )
    assert cli.trainer.logger._wandb_init["group"] == "mine"


@pytest.mark.parametrize("logger, produces", [("CSVLogger", "metrics.csv"), ("TensorBoardLogger", "events.out.tfevents*")])
def test_logger_switch(tmp_path, logger, produces):
    result = fit(
        tmp_path, "--trainer.logger", logger, "--trainer.max_epochs", "1", "--trainer.limit_train_batches", "2", "--test", "false"
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert list(tmp_path.rglob(produces)) and not (tmp_path / "wandb").exists()
    assert list(tmp_path.rglob("last.ckpt"))


# ---------------------------------------------------------------------------------------------- exact resume


@pytest.mark.parametrize("ema", [True, False])
def test_the_test_lines_name_the_tested_checkpoint_its_weights_and_precision(tmp_path, ema):
    # The trainer's own epoch and step after fitting are the run's last, not the tested (best) checkpoint's.
    args = [*recipe_args("corpus", tmp_path / "data"), "--trainer.logger", "CSVLogger", "--trainer.max_epochs", "2"]
    args += ["--checkpoint.monitor", "val/loss", "--checkpoint.mode", "min"]  # (val/bleu is scored every 100 epochs here)
    args += ["--trainer.precision", "bf16-mixed"]  # named: the recipe's own choice depends on the machine
    result = fit(tmp_path / "run", *args, "--ema_decay", "0.9" if ema else "null")
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout + result.stderr
    summary = json.loads(next((tmp_path / "run").rglob("summary.json")).read_text())
    best = Path(summary["best_checkpoint"])
    state = torch.load(best, weights_only=True)
    assert best.name == f"epoch{state['epoch']:03d}-step{state['global_step']}.ckpt"
    weights = "EMA weights" if ema else "its only weights (no EMA)"
    assert ("current_model_state" in state) == ema  # the checkpoint holds what the label says
    expected = f"checkpoint {best.name}, {weights}, precision bf16-mixed"
    assert f"{expected}: test/bleu=" in out and f"  tested: {expected}\n" in out, out[-3000:]
    assert summary["tested"] == expected
    # The test's scores are printed once, by the summary: not again in Lightning's table.
    assert "test/bleu=" in out and "Test metric" not in out and "DataLoader 0" not in out, out[-3000:]


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["toy", "mnist", "corpus", "corpus, validation every 6 steps"])
def test_sigkill_mid_epoch_then_resume_gives_the_same_weights(tmp_path, kind):
    # 3 epochs; a last.ckpt every 4 steps. Run B is killed at step 22, in its second epoch, two steps
    # after the last.ckpt of step 20; resumed, it must end where the uninterrupted run A ends.
    # With an EMA of the weights on: the average, too, must resume exactly. The last case validates (and
    # scores BLEU) every 6 steps, as a long WMT epoch would, so validations fall mid-epoch and mid-resume.
    mid_epoch_validation = ["--trainer.val_check_interval", "6", "--model.init_args.bleu_every_n_epochs", "1"]
    common = [
        *recipe_args(kind.split(",")[0], tmp_path / "data"),
        *(mid_epoch_validation if "validation" in kind else []),
        "--trainer.max_epochs",
        "3",
        "--trainer.logger",
        "CSVLogger",
        "--checkpoint.every_n_train_steps",
        "4",
        "--test",
        "false",
        "--ema_decay",
        "0.9",
    ]
    a = fit(tmp_path / "a", *common)
    assert a.returncode == 0, a.stderr[-3000:]
    a_last = next((tmp_path / "a").rglob("last.ckpt"))
    steps = torch.load(a_last, weights_only=True)["global_step"]
    assert 11 <= steps // 3 <= 19  # so steps 20 to 22 lie in the second epoch, not at its start

    b_root, marker = tmp_path / "b", tmp_path / "paused"
    pause = f'{{"class_path": "tests.test_workflow.PauseAtStep", "init_args": {{"step": 22, "marker": "{marker}"}}}}'
    cmd = [
        *FIT,
        *common,
        "--trainer.default_root_dir",
        str(b_root),
        "--trainer.enable_progress_bar",
        "false",
        f"--trainer.callbacks+={pause}",
    ]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 900
        while not marker.exists():
            assert proc.poll() is None, proc.stderr.read()[-3000:]
            assert time.monotonic() < deadline, "run B never reached step 22"
            time.sleep(0.2)
        epoch, batch_idx = map(int, marker.read_text().split())
        assert epoch == 1 and batch_idx >= 2  # mid-epoch, and so is last.ckpt, two steps earlier
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    killed_last = next(b_root.rglob("last.ckpt"))
    killed = torch.load(killed_last, weights_only=True)
    assert killed["global_step"] == 20
    assert killed["loops"]["fit_loop"]["state_dict"]["combined_loader"] == [{"epoch": 1, "batches_yielded": batch_idx - 1}]

    resumed = fit(b_root, *common, "--ckpt_path", "last")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"Resuming the run in {killed_last.parent.parent} from {killed_last}" in resumed.stdout + resumed.stderr
    b_last = max(b_root.rglob("last.ckpt"), key=lambda p: p.stat().st_mtime)
    assert b_last != killed_last
    assert torch.load(b_last, weights_only=True)["global_step"] == steps
    a_state, b_state = torch.load(a_last, weights_only=True), torch.load(b_last, weights_only=True)
    # The best score so far carried over the resume (into a new folder): the same best as run A's.
    (a_best,), (b_best,) = ([v for k, v in s["callbacks"].items() if k.startswith("BestCheckpoint")] for s in (a_state, b_state))
    assert a_best["best_model_score"] == b_best["best_model_score"]
    for key in ("state_dict", "current_model_state", "averaging_state"):  # the average, the training weights
        wa, wb = a_state[key], b_state[key]
        assert wa.keys() == wb.keys()
        different = [k for k in wa if not torch.equal(wa[k], wb[k])]
        assert not different, f"resumed run differs in {key}: {different[:5]}"


def test_last_checkpoint_follows_every_epoch_when_the_best_does_not_change(tmp_path):
    # mode "max" on a falling val/loss: the first epoch stays the best one. last.ckpt must still
    # be the end of the run (Lightning 2.6 alone would leave it at the best epoch).
    result = fit(
        tmp_path, "--trainer.max_epochs", "3", "--trainer.logger", "CSVLogger", "--checkpoint.mode", "max", "--test", "false"
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (best,) = [p for p in tmp_path.rglob("*.ckpt") if p.name != "last.ckpt"]
    assert torch.load(best, weights_only=True)["global_step"] == 16
    assert torch.load(next(tmp_path.rglob("last.ckpt")), weights_only=True)["global_step"] == 48


def test_rng_state_round_trips_through_a_weights_only_checkpoint(tmp_path):
    import random

    import numpy as np

    from training.callbacks import RngStateCallback

    cb = RngStateCallback()
    torch.manual_seed(1), random.seed(1), np.random.seed(1)
    torch.save({"callbacks": {"rng": cb.state_dict()}}, tmp_path / "x.ckpt")
    expected = (torch.rand(3), random.random(), np.random.rand())
    state = torch.load(tmp_path / "x.ckpt", weights_only=True)["callbacks"]["rng"]
    torch.manual_seed(2), random.seed(2), np.random.seed(2)
    cb.load_state_dict(state)
    cb.on_train_start(None, None)
    again = (torch.rand(3), random.random(), np.random.rand())
    assert torch.equal(expected[0], again[0]) and expected[1:] == again[1:]


def test_toy_loader_resumes_mid_epoch_in_the_same_order():
    from datamodules import ToyTranslationDataModule

    def order(loader):
        return [src.tolist() for src, _ in loader]

    dm = ToyTranslationDataModule(repeats=4)
    loader = dm.train_dataloader()
    loader.batch_sampler.sampler.set_epoch(3)
    full = order(loader)
    assert full != order(_at_epoch(dm.train_dataloader(), 4))  # another epoch, another order
    it = iter(loader)
    for _ in range(2):
        next(it)
    state = loader.state_dict()
    assert state == {"epoch": 3, "batches_yielded": 2}
    fresh = _at_epoch(dm.train_dataloader(), 3)
    fresh.load_state_dict(state)
    assert order(fresh) == full[2:]
    assert order(fresh) == full  # only the first pass after a resume skips


def _at_epoch(loader, epoch):
    loader.batch_sampler.sampler.set_epoch(epoch)
    return loader


# ---------------------------------------------------------------------------------------------- checkpoints


def test_interrupted_checkpoint_write_keeps_the_old_checkpoint(tmp_path, monkeypatch):
    from training.checkpoint_io import AtomicCheckpointIO

    io, path = AtomicCheckpointIO(), tmp_path / "last.ckpt"
    io.save_checkpoint({"state_dict": {"w": torch.ones(3)}, "epoch": 1}, path)

    def crash(obj, f, *args, **kwargs):
        f.write(b"PK\x03\x04 half a checkpoint")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", crash)
    with pytest.raises(OSError, match="disk full"):
        io.save_checkpoint({"state_dict": {"w": torch.zeros(3)}, "epoch": 2}, path)
    monkeypatch.undo()
    state = torch.load(path, weights_only=True)
    assert state["epoch"] == 1 and torch.equal(state["state_dict"]["w"], torch.ones(3))
    assert [p.name for p in tmp_path.iterdir()] == ["last.ckpt"]  # no temporary file left behind


def test_fit_writes_checkpoints_atomically(tmp_path):
    from lightning.pytorch import Trainer

    from training.checkpoint_io import AtomicCheckpointIO
    from training.cli import TransformerCLI

    cli = TransformerCLI(
        args=[
            "--config",
            str(ROOT / "configs" / "toy_translation.yaml"),
            "--trainer.default_root_dir",
            str(tmp_path),
            "--trainer.logger",
            "false",
        ]
    )
    assert isinstance(cli.trainer, Trainer) and isinstance(cli.trainer.strategy.checkpoint_io, AtomicCheckpointIO)
    names = {type(c).__name__ for c in cli.trainer.callbacks}
    ours = {"RngStateCallback", "LoaderStateRestore", "FiniteLossCheck", "WandbRunId"}
    assert ours | {"BestCheckpoint", "KeepLastUntilFinite", "StopAtStep", "ModelCheckpoint"} <= names


# ---------------------------------------------------------------------------------------------- scale, precision


@pytest.mark.slow
def test_ddp_two_cpu_processes_make_one_wandb_run(tmp_path):
    # Attention maps stay on: rank zero alone saves them, and no rank may wait on another for it.
    result = fit(
        tmp_path,
        "--trainer.accelerator",
        "cpu",
        "--trainer.devices",
        "2",
        "--trainer.strategy",
        "ddp",
        "--trainer.max_epochs",
        "2",
        "--trainer.limit_train_batches",
        "4",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    runs = list((tmp_path / "wandb").glob("offline-run-*"))
    assert len(runs) == 1, runs  # rank zero only
    out = result.stdout + result.stderr
    assert out.count("Summary") == 1 and "best checkpoint" in out
    assert torch.load(next(tmp_path.rglob("last.ckpt")), weights_only=True)["global_step"] == 8  # 2 epochs × 4 steps
    assert "sync_dist" not in out, out[-3000:]  # val/bleu and val/chrf: the same score on every process (common/noise.py)


def test_bf16_mixed_on_cpu(tmp_path):
    result = fit(
        tmp_path,
        "--trainer.precision",
        "bf16-mixed",
        "--trainer.logger",
        "CSVLogger",
        "--trainer.max_epochs",
        "2",
        "--trainer.limit_train_batches",
        "4",
        "--test",
        "false",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    metrics = next(tmp_path.rglob("metrics.csv")).read_text().splitlines()
    header = metrics[0].split(",")
    losses = [float(row.split(",")[header.index("val/loss")]) for row in metrics[1:] if row.split(",")[header.index("val/loss")]]
    assert losses and all(torch.isfinite(torch.tensor(losses)))


# ---------------------------------------------------------------------------------------------- notebook


@pytest.mark.slow
def test_quickstart_notebook_runs(tmp_path):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import KernelManager

    nb = nbformat.read(ROOT / "notebooks" / "quickstart.ipynb", as_version=4)
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), "commit the notebook without outputs"
    # A kernel spec of our own: this very interpreter (the project's venv), whatever kernels the
    # machine has installed under "python3", and a quiet, single-threaded environment.
    spec = tmp_path / "kernels" / "quickstart"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": "quickstart",
                "language": "python",
                "env": {
                    "OMP_NUM_THREADS": "1",
                    "WANDB_MODE": "offline",
                    "QUICKSTART_ROOT": str(tmp_path / "run"),
                    "MPLBACKEND": "module://matplotlib_inline.backend_inline",
                },
            }
        )
    )
    km = KernelManager(kernel_name="quickstart", kernel_spec_manager=KernelSpecManager(kernel_dirs=[str(tmp_path / "kernels")]))
    client = nbclient.NotebookClient(nb, km=km, timeout=HANG_TIMEOUT, resources={"metadata": {"path": str(ROOT / "notebooks")}})
    client.execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    text = "".join(o.get("text", "") for o in outputs)
    for src, tgt in TOY_PAIRS:
        assert f"{src}  →  {tgt}" in text
    assert "error: checkpoint not found" in text
    assert any("image/png" in o.get("data", {}) for o in outputs)  # the attention map
    assert "missing from font" not in text  # ... with its Chinese characters drawn, not boxes
    assert list((tmp_path / "run").rglob("last.ckpt"))
    # Checkpoints named as scripts/fit.py names them; no output a reader cannot act on.
    assert re.search(r"best checkpoint: \S+/epoch024-step400\.ckpt ", text), text
    for noise in NOISE + ["IProgress not found"]:
        assert noise not in text, noise
    assert not [o for o in outputs if o.get("output_type") == "execute_result" and o["data"].get("text/plain") == "0"]
