"""The research variants of configs/variants/ (docs/guide/variants.md): one YAML file each, a second `--config` to any
recipe whose network it fits. A file's `fits` names the networks it is for, by what they read ("text", "image":
models.registry); scripts/fit.py refuses a variant on a recipe whose network it does not list (`misfit`),
scripts/ablate.py runs every file that fits its recipe, and scripts/regenerate.py writes them into the W&B sweeps."""

from __future__ import annotations

import importlib
import inspect
from dataclasses import dataclass
from pathlib import Path

import yaml

from common.errors import InputError
from models.registry import INPUTS

VARIANTS_DIR = Path(__file__).resolve().parents[1] / "configs" / "variants"


@dataclass(frozen=True)
class Variant:
    """One variant file: its path, the networks it `fits`, and the network settings it sets (`net`)."""

    path: Path
    fits: tuple[str, ...]
    net: dict

    @property
    def name(self) -> str:
        """Its label in tables and run names: the file's name."""
        return self.path.stem


def read_variant(path: Path) -> Variant:
    """The variant file at `path`; one `InputError` line when it is unreadable or its `fits` names no network."""
    try:
        data = yaml.safe_load(Path(path).read_text())
    except (OSError, yaml.YAMLError) as err:
        raise InputError(f"variant {path}: {str(err).splitlines()[0]}") from None
    fits = data.get("fits") if isinstance(data, dict) else None
    if not isinstance(fits, list) or not fits or not set(fits) <= set(INPUTS):
        raise InputError(f"variant {path}: needs `fits:`, a list of the networks it is for, of {', '.join(INPUTS)}")
    net = ((data.get("model") or {}).get("init_args") or {}).get("net") or {}
    return Variant(Path(path), tuple(fits), dict(net))


def variants(network: str | None = None) -> list[Variant]:
    """Every file of configs/variants/ (the baseline first, then by name) that fits `network` (None: all)."""
    found = [read_variant(p) for p in sorted(VARIANTS_DIR.glob("*.yaml"), key=lambda p: (p.stem != "baseline", p.stem))]
    return [v for v in found if network is None or network in v.fits]


def task_input(class_path: str) -> str | None:
    """What the network of the task module at `class_path` ("tasks.Seq2SeqTransformer") reads: its settings' INPUT
    ("text", "image"), or None when it has no settings class of ours."""
    module, _, name = str(class_path).rpartition(".")
    try:
        task = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError):
        return None
    net = inspect.signature(task).parameters.get("net") if isinstance(task, type) else None
    return getattr(net.default, "INPUT", None) if net is not None else None


def recipe_task(recipe: Path) -> str:
    """The `class_path` of the recipe's model ("" when it names none)."""
    data = yaml.safe_load(Path(recipe).read_text())
    model = data.get("model") if isinstance(data, dict) else None
    return str(model.get("class_path") or "") if isinstance(model, dict) else ""


def misfit(fits: list[str] | tuple[str, ...], class_path: str) -> str | None:
    """Why a variant for `fits` does not fit the task at `class_path`, in words, or None when it does."""
    network = task_input(class_path)
    if network is None or network in fits:
        return None
    return f"it is for {' and '.join(fits)} networks (its fits:), and {str(class_path).rpartition('.')[2]} reads {network}"
