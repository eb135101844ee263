"""The W&B sweep files: each argument list that `wandb agent` would build from them parses with
scripts/fit.py's own CLI and instantiates a model and data module that carry the swept values.
No network: the command is built with wandb's own helpers, as the agent builds it."""

import re
from pathlib import Path

import pytest
import yaml
from wandb.sdk.launch.sweeps.utils import create_sweep_command, create_sweep_command_args

from tests.helpers import ROOT, SHARED_DATA
from training.variants import recipe_task, task_input, variants

SWEEPS = sorted((ROOT / "configs" / "sweeps").glob("*.yaml"))
# The data each recipe reads, passed as the user of an offline machine would add it.
DATA = {"mnist_subset": SHARED_DATA / "mnist", "multi30k": SHARED_DATA / "multi30k"}


def sample_values(spec: dict) -> list:
    """Every listed value, or a distribution's two ends."""
    if "values" in spec:
        return list(spec["values"])
    if "value" in spec:
        return [spec["value"]]
    return [spec["min"], spec["max"]]


def agent_command(sweep: dict, values: dict) -> list[str]:
    """The command line `wandb agent` runs for one set of values (wandb_agent.py's macro expansion)."""
    sweep_vars = create_sweep_command_args({"args": {k: {"value": v} for k, v in values.items()}})
    sweep_vars.update(interpreter=["python"], program=[sweep["program"]], env=["/usr/bin/env"])
    command = []
    for chunk in create_sweep_command(list(sweep["command"])):
        chunk = str(chunk)
        command += sweep_vars.get(chunk[2:-1]) or [] if chunk.startswith("${") and chunk.endswith("}") else [chunk]
    return command


def runs_to_check(sweep: dict) -> list[dict]:
    """Each value of each parameter at least once (the others at their first value)."""
    choices = {name: sample_values(spec) for name, spec in sweep["parameters"].items()}
    first = {name: values[0] for name, values in choices.items()}
    runs = [{**first, name: value} for name, values in choices.items() for value in values]
    return [dict(r) for r in {tuple(sorted(r.items(), key=str)) for r in runs}]


@pytest.mark.parametrize("path", SWEEPS, ids=[p.stem for p in SWEEPS])
def test_sweep_file_is_one_wandb_accepts(path):
    sweep = yaml.safe_load(path.read_text())
    assert sweep["method"] in ("grid", "random", "bayes")
    assert sweep["metric"]["goal"] in ("maximize", "minimize") and sweep["metric"]["name"] in ("val/acc", "val/bleu", "val/loss")
    assert (ROOT / sweep["program"]).exists()
    assert sweep["command"][:3] == ["${env}", "${interpreter}", "${program}"] and "${args}" in sweep["command"]
    for name, spec in sweep["parameters"].items():
        assert sample_values(spec), name
        if sweep["method"] == "grid":
            assert "values" in spec or "value" in spec, f"{name}: a grid needs listed values"
        if name == "config":
            assert all((ROOT / v).exists() for v in spec["values"])


@pytest.mark.parametrize("path", SWEEPS, ids=[p.stem for p in SWEEPS])
def test_every_agent_command_parses_and_instantiates(path, tmp_path, monkeypatch):
    from training.cli import TransformerCLI

    monkeypatch.chdir(ROOT)  # the agent runs from the repository's root: the paths in the files are relative
    monkeypatch.setenv("WANDB_MODE", "offline")
    sweep = yaml.safe_load(path.read_text())
    for values in runs_to_check(sweep):
        command = agent_command(sweep, values)
        assert command[:3] == ["/usr/bin/env", "python", "scripts/fit.py"]
        args = command[3:]
        recipe = Path(args[args.index("--config") + 1]).stem
        extra = ["--trainer.default_root_dir", str(tmp_path)]
        if recipe in DATA:
            extra += ["--data.init_args.data_dir", str(DATA[recipe])]
        cli = TransformerCLI(args=args + extra)
        hparams = {**dotted(cli.model.hparams), **{f"data.{k}": v for k, v in cli.datamodule.hparams.items()}}
        for name, value in values.items():
            if name == "config":  # a variant file: its settings reached the model
                for key, expected in dotted(yaml.safe_load((ROOT / value).read_text())["model"]["init_args"]).items():
                    assert hparams[key] == expected, (value, key)
                    assert key.startswith("net.")  # the variants change the network's settings only
            elif name == "seed_everything":
                assert cli.config.seed_everything == value
            elif name.startswith("model.init_args."):
                assert hparams[name.removeprefix("model.init_args.")] == pytest.approx(value), name
            else:
                assert hparams[f"data.{name.removeprefix('data.init_args.')}"] == value, name
        assert cli.trainer.logger._wandb_init["group"] == recipe  # the recipe's group, not the variant's


def dotted(mapping, prefix: str = "") -> dict:
    """A nested mapping's values by dotted key, as the command line names them: {"net": {"qk_norm": x}} → {"net.qk_norm": x}."""
    out = {}
    for key, value in mapping.items():
        if isinstance(value, dict) and key != "tokenizers":
            out.update(dotted(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def test_the_sweep_files_the_readme_names_are_there():
    """The tests above run once per file in configs/sweeps/: with the folder gone they would be skipped, not fail."""
    named = set(re.findall(r"configs/sweeps/(\w+)\.yaml", (ROOT / "README.md").read_text()))
    assert named and named <= {p.stem for p in SWEEPS}


@pytest.mark.parametrize("path", SWEEPS, ids=[p.stem for p in SWEEPS])
def test_a_sweep_of_variants_runs_every_variant_file_that_fits_its_recipe(path):
    """A variant added to configs/variants/ is in every sweep of variants whose recipe's network it fits, and only
    there: a list written by hand is held to the folder."""
    sweep = yaml.safe_load(path.read_text())
    if "config" not in sweep["parameters"]:
        return  # a sweep of other settings
    recipe = ROOT / sweep["command"][sweep["command"].index("--config") + 1]
    network = task_input(recipe_task(recipe))
    assert network in ("text", "image")
    listed = sweep["parameters"]["config"]["values"]
    assert sorted(listed) == sorted(f"configs/variants/{v.name}.yaml" for v in variants(network)), path.name


@pytest.mark.parametrize("path", SWEEPS, ids=[p.stem for p in SWEEPS])
def test_a_sweep_file_is_what_regenerate_writes_and_its_header_counts_its_runs(path):
    """The lists of variants and the header's count are scripts/regenerate.py's: a file left stale after a variant
    was added (or removed) fails with the command; the count it states is its grid's, values × seeds."""
    from scripts.regenerate import COMMAND, sweep_of_variants

    text = path.read_text()
    assert sweep_of_variants(text) == text, f"{path.name} is stale: run {COMMAND}"
    sweep = yaml.safe_load(text)
    if "config" in sweep["parameters"]:
        stated = re.search(r"(\d+) (?:× (\d+) )?runs", text)
        seeds = len(sweep["parameters"].get("seed_everything", {}).get("values", [0]))
        assert (int(stated[1]), int(stated[2] or 1)) == (len(sweep["parameters"]["config"]["values"]), seeds)


def test_runs_to_check_cover_every_value():
    sweep = {"parameters": {"a": {"values": [1, 2, 3]}, "b": {"min": 0.1, "max": 0.5}}}
    runs = runs_to_check(sweep)
    assert {r["a"] for r in runs} == {1, 2, 3} and {r["b"] for r in runs} == {0.1, 0.5}
    assert len(runs) == 4  # (1, 0.1) once, then each other value


def test_agent_command_is_wandbs_flag_format():
    sweep = {"program": "scripts/fit.py", "command": ["${env}", "${interpreter}", "${program}", "--config", "c.yaml", "${args}"]}
    command = agent_command(sweep, {"model.init_args.lr": 0.001, "model.init_args.net.qk_norm": True})
    assert command == [
        "/usr/bin/env",
        "python",
        "scripts/fit.py",
        "--config",
        "c.yaml",
        "--model.init_args.lr=0.001",
        "--model.init_args.net.qk_norm=True",
    ]
