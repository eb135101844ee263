"""A first run keeps its data inside the project: every data module and recipe defaults to `data/<name>`
(offline copies, such as ../shared/data/<name> on our machines, are passed with --data.data_dir)."""

import inspect
from pathlib import Path

import pytest
import yaml

from datamodules import MNISTDataModule, ParallelCorpusDataModule
from tests.helpers import ROOT

CONFIGS = sorted((ROOT / "configs").glob("*.yaml"))


def _inside_project(path: str) -> bool:
    p = Path(path)
    return not p.is_absolute() and ".." not in p.parts and (ROOT / p).resolve().is_relative_to(ROOT)


@pytest.mark.parametrize("cls, name", [(ParallelCorpusDataModule, "cmn-eng"), (MNISTDataModule, "mnist")])
def test_data_module_defaults_to_data_inside_the_project(cls, name):
    default = inspect.signature(cls.__init__).parameters["data_dir"].default
    assert _inside_project(default) and Path(default) == Path("data") / name, default


@pytest.mark.parametrize("config", CONFIGS, ids=[c.stem for c in CONFIGS])
def test_recipes_keep_their_data_inside_the_project(config):
    data = yaml.safe_load(config.read_text())["data"]
    data_dir = (data.get("init_args") or {}).get("data_dir", data.get("data_dir"))
    if data_dir is not None:
        assert _inside_project(data_dir) and data_dir.startswith("data/"), f"{config.name}: {data_dir}"
    assert "../shared" not in "".join(line for line in config.read_text().splitlines() if not line.lstrip().startswith("#"))


def test_the_recipes_the_readme_lists_are_the_ones_there():
    """The test above runs once per file in configs/: a recipe deleted (or all of them) would go unnoticed."""
    line = next(line for line in (ROOT / "README.md").read_text().splitlines() if line.startswith("configs/ "))
    listed = {name.strip() for name in line.split(":", 1)[1].split(",")}  # "one YAML per recipe: toy_translation, …"
    assert {c.stem for c in CONFIGS} == listed
