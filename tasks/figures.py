"""Saving matplotlib figures next to a run's logs, and sending them to the logger when it takes images."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

import matplotlib

matplotlib.use("Agg")  # headless: no display on training machines
import matplotlib.pyplot as plt  # noqa: E402


def figure_dir(module) -> Path:
    """`trainer.log_dir` (the logger's version folder), else `trainer.default_root_dir`, else ".""" 
    trainer = getattr(module, "_trainer", None)
    if trainer is None:
        return Path(".")
    try:
        log_dir = trainer.log_dir
    except Exception:  # some loggers have no local folder
        log_dir = None
    return Path(log_dir or trainer.default_root_dir)


def save_and_log_figure(module, fig, name: str, key: str | None = None) -> Path | None:
    """Save `fig` as `<log dir>/<name>.png` and log it under `key` (default: `name`) to every logger
    of `module`'s trainer that takes images (W&B: `log_image`; TensorBoard: `add_figure`). Closes the
    figure. Call it on every rank: finding the log dir is a collective under DDP. Returns the PNG's
    path, or None on non-zero ranks (which only close the figure)."""
    trainer = getattr(module, "_trainer", None)
    key = key or name.replace(os.sep, "/")
    try:
        out_dir = figure_dir(module)  # every rank: trainer.log_dir broadcasts from rank zero
        if trainer is not None and not trainer.is_global_zero:
            return None
        path = out_dir / f"{name}.png"
        os.makedirs(path.parent, exist_ok=True)
        fig.savefig(path, dpi=100, bbox_inches="tight")
        step = trainer.global_step if trainer is not None else 0
        for logger in (trainer.loggers if trainer is not None else []):
            if hasattr(logger, "log_image"):  # WandbLogger and friends
                logger.log_image(key=key, images=[str(path)], step=step)
            else:
                experiment = getattr(logger, "experiment", None)
                if hasattr(experiment, "add_figure"):  # TensorBoard's SummaryWriter
                    experiment.add_figure(key, fig, global_step=step, close=False)
        return path
    finally:
        plt.close(fig)


def attention_figure(weights, src_tokens: Sequence[str], tgt_tokens: Sequence[str], title: str = ""):
    """Heat map of (T, S) cross-attention `weights`: target tokens down, source tokens across."""
    import numpy as np

    w = np.asarray(weights, dtype=float)
    fig, ax = plt.subplots(figsize=(max(3.0, 0.35 * len(src_tokens) + 1.5), max(2.5, 0.3 * len(tgt_tokens) + 1.2)))
    image = ax.imshow(w, aspect="auto", cmap="viridis", vmin=0.0, vmax=max(float(w.max()), 1e-6))
    ax.set_xticks(range(len(src_tokens)), labels=list(src_tokens), rotation=90, fontsize=7)
    ax.set_yticks(range(len(tgt_tokens)), labels=list(tgt_tokens), fontsize=7)
    ax.set_xlabel("source")
    ax.set_ylabel("output")
    if title:
        ax.set_title(title, fontsize=8)
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
    return fig
