"""What the tests share: where things are, the environment a script runs in, and how to run one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import lightning as L
import torch

from models.config import Seq2SeqSettings

ROOT = Path(__file__).resolve().parents[1]
SHARED_DATA = ROOT.parent / "shared" / "data"  # the offline copies of the real data sets

# One thread per tiny model (no oversubscription of a small machine); W&B offline, never prompting.
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "WANDB_MODE": "offline", "WANDB_SILENT": "true"}
ENV.pop("WANDB_API_KEY", None)
FIT = [sys.executable, str(ROOT / "scripts" / "fit.py")]
# The one time limit of every subprocess (and wait) the tests start. It guards against a hang; it is not a speed
# check: room for a machine several times slower than ours on one loaded core, and a fresh venv's first start
# (byte-compiling, a cold import of torch). Speed is measured by the benchmarks, which print numbers.
HANG_TIMEOUT = 1800
# The toy recipe's model (configs/toy_translation.yaml) with a constant learning rate: learns the 3 pairs in 25 epochs.
TOY_MODEL = dict(
    net=Seq2SeqSettings(d_model=64, num_encoder_layers=2, num_decoder_layers=2, dim_feedforward=128, max_len=32),
    lr=3e-3,
    warmup_steps=30,
    lr_schedule="constant",
    label_smoothing=0.0,
)


def quiet_trainer(root: Path | None = None, **kwargs) -> L.Trainer:
    """A Trainer for in-process tests: CPU, no logger, no checkpoints, no progress bar or model summary
    (each can be turned back on through `kwargs`), writing under `root`."""
    defaults = dict(
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=root,
    )
    return L.Trainer(**{**defaults, **kwargs})


def run(cmd: list[str], timeout: float = HANG_TIMEOUT, env: dict | None = None, **kwargs) -> subprocess.CompletedProcess:
    """Run a command from the repository's root with ENV, capturing its text output."""
    return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env or ENV, timeout=timeout, **kwargs)


def env_hiding(*modules: str) -> dict:
    """ENV with the top-level `modules` hidden from the interpreter and its children, as if they were not installed
    (tests/hide_packages/sitecustomize.py, put first on PYTHONPATH)."""
    path = [str(ROOT / "tests" / "hide_packages"), str(ROOT), *filter(None, [ENV.get("PYTHONPATH")])]
    return {**ENV, "PYTHONPATH": os.pathsep.join(path), "HIDE_PACKAGES": ",".join(modules)}


def script(name: str, *args: str, **kwargs) -> subprocess.CompletedProcess:
    """Run scripts/<name>.py with `args` (see `run`)."""
    return run([sys.executable, str(ROOT / "scripts" / f"{name}.py"), *args], **kwargs)


def fit(root: Path, *extra: str, env: dict | None = None, timeout: float = HANG_TIMEOUT) -> subprocess.CompletedProcess:
    """scripts/fit.py with `extra`, writing under `root`, without a progress bar. The root directory
    comes after `extra`: a --config there would otherwise set its own."""
    return run(
        [*FIT, *extra, "--trainer.default_root_dir", str(root), "--trainer.enable_progress_bar", "false"],
        timeout=timeout,
        env=env,
    )


def save_checkpoint(model: L.LightningModule, path: Path) -> Path:
    """What Lightning's weights-only checkpoint holds, written without a Trainer."""
    torch.save(
        {"state_dict": model.state_dict(), "hyper_parameters": dict(model.hparams), "pytorch-lightning_version": L.__version__},
        path,
    )
    return path
