"""benchmarks/gpu_suite.py end to end on the CPU at toy size (`--device cpu --tiny`), so that the suite a lent GPU
runs cannot rot between GPU sessions: every step runs and writes its tables, labels say what happened (the CUDA
tests skipped, not passed; no CUDA version on a CPU run; no BLEU for the toy set), a missing optional peer is left
out with a line, a missing requirement stops the suite with one line, and a step that does not fit its part's
budget is skipped with a line. Packages are hidden through tests/hide_packages (a `sitecustomize` on PYTHONPATH)."""

from __future__ import annotations

import json
import os
import sys

import pytest
import yaml

from tests.helpers import ROOT, env_hiding, run

SUITE = [sys.executable, str(ROOT / "benchmarks" / "gpu_suite.py")]
TINY = ["--device", "cpu", "--tiny"]
PEERS = ["transformers", "x_transformers", "ctranslate2"]
sys.path.insert(0, str(ROOT / "benchmarks"))  # the suite's helpers, imported below as the script imports them
TINY_SIZES = __import__("gpu_suite").TINY_SIZES
# What the suite sets for any run of the GPU recipe: the device, the data's folder, and where and how it logs.
RUN_SETTINGS = ["trainer.accelerator", "trainer.logger", "trainer.enable_progress_bar", "trainer.default_root_dir",
                "data.init_args.data_dir", "trainer.max_time"]  # fmt: skip


def flat(tree: dict, prefix: str = "") -> dict:
    """{"a.b.c": value} of a nested recipe."""
    out = {}
    for key, value in tree.items():
        out |= flat(value, f"{prefix}{key}.") if isinstance(value, dict) else {f"{prefix}{key}": value}
    return out


def assert_the_gpu_recipe_ran(config: dict) -> None:
    """Every setting of configs/multi30k_gpu.yaml in a run's resolved `config`, but the sizes --tiny changes and
    the suite's run settings: the compile, fused AdamW, no length buckets, BLEU validation, the beam test, ..."""
    recipe, ran = flat(yaml.safe_load((ROOT / "configs" / "multi30k_gpu.yaml").read_text())), flat(config)
    differ = {key: (value, ran.get(key)) for key, value in recipe.items() if ran.get(key) != value}
    assert set(differ) <= set(TINY_SIZES) | set(RUN_SETTINGS), differ
    assert ran["model.init_args.compile"] is True and ran.get("data.init_args.pad_to_multiple", 1) == 1, ran
    for key, value in TINY_SIZES.items():
        assert ran[key] == value, key


def run_suite(*args: str, hide: list[str] = ()):
    return run([*SUITE, *args], env=env_hiding(*hide))


@pytest.mark.slow
def test_tiny_suite_runs_both_parts_on_the_cpu(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the CUDA tests would run, not skip")
    result = run_suite("--out", str(tmp_path), *TINY)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    suite = json.loads((tmp_path / "suite.json").read_text())
    steps = {s["name"]: s for s in suite["steps"]}
    assert [(s["part"], s["name"]) for s in suite["steps"]] == [
        ("speed", "test_cuda"), ("speed", "peers_base"), ("speed", "peers_big"), ("quality", "multi30k_gpu_tiny"),
    ]  # fmt: skip
    # every CUDA test skips on a CPU: the step says so, with pytest's count and reason, instead of "ok"
    assert steps["test_cuda"]["status"] == "skipped" and steps["test_cuda"]["detail"].endswith("skipped: needs a CUDA device")
    assert all(steps[name]["status"] == "ok" for name in ("peers_base", "peers_big", "multi30k_gpu_tiny")), steps
    for name in steps:
        assert (tmp_path / f"{name}.md").read_text().startswith(f"# {name}")
    assert json.loads((tmp_path / "peers_base.json").read_text())["train"]["results"]
    fit = json.loads((tmp_path / "multi30k_gpu_tiny.json").read_text())
    assert fit["steps"] == TINY_SIZES["trainer.max_steps"] and fit["wall_seconds"] > 0
    # The GPU recipe's path to its end: validated by BLEU, its best checkpoint tested with beam search.
    assert fit["monitor"] == "val/bleu" and fit["best_score"] is not None and fit["tested"].startswith("checkpoint ")
    (config,) = (tmp_path / "multi30k_gpu_tiny_run").rglob("config.yaml")
    assert_the_gpu_recipe_ran(yaml.safe_load(config.read_text()))
    env = suite["environment"]
    assert env["torch"] == torch.__version__ and len(env["commit"]) == 40 and "cuda" not in env and "gpu" not in env
    md = (tmp_path / "suite.md").read_text()
    assert md.startswith("### GPU suite: at toy size (--tiny) on the CPU\n") and f"`{env['commit'][:7]}`" in md
    assert f"torch {torch.__version__}" in md and "CUDA" not in md.replace("needs a CUDA device", "")
    assert "| speed | test_cuda | skipped (" in md and "| ours" in md  # the step table, then the peers' tables
    assert "BLEU" not in md and "nothing scored (--tiny)" in md


@pytest.mark.slow
def test_the_speed_part_leaves_missing_peers_out_with_a_line(tmp_path):
    result = run_suite("--out", str(tmp_path), *TINY, "--part", "speed", hide=PEERS)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    notes = [line for line in result.stdout.splitlines() if line.startswith("note: ")]
    assert notes == [f"note: {name} is not installed: its rows are left out of the peers' tables"
                     for name in ("transformers", "x-transformers", "ctranslate2")]  # fmt: skip
    suite = json.loads((tmp_path / "suite.json").read_text())
    assert [s["name"] for s in suite["steps"]] == ["test_cuda", "peers_base", "peers_big"]
    assert all(s["status"] in ("ok", "skipped") for s in suite["steps"]), suite["steps"]
    peers = json.loads((tmp_path / "peers_base.json").read_text())
    assert [r["name"] for r in peers["train"]["results"]] == ["ours", "torch.nn.Transformer"]
    assert all([r["name"] for r in rows] == ["ours", "ours"] for rows in peers["decode"]["results"].values())  # batch 1, 64
    md = (tmp_path / "suite.md").read_text()
    assert "Not installed, so left out of the peers' tables: transformers, x-transformers, ctranslate2." in md
    assert "HF Marian" not in md and "CTranslate2" not in md


@pytest.mark.parametrize(
    "hidden, line",
    [
        ("jsonargparse", "error: the speed part needs jsonargparse[signatures], which is not installed (pip install"),
        ("sacrebleu", "error: the project needs sacrebleu, which is not installed (pip install 'sacrebleu'"),
    ],
)
def test_a_missing_requirement_is_one_line_before_any_step(tmp_path, hidden, line):
    result = run_suite("--out", str(tmp_path / "out"), *TINY, hide=[hidden])
    assert result.returncode == 2 and result.stderr.startswith(line), result.stderr[-3000:]
    assert len(result.stderr.splitlines()) == 1 and "benchmarks/node_wheels.txt" in result.stderr
    assert not (tmp_path / "out").exists()


def test_steps_that_do_not_fit_the_budget_are_skipped_with_a_line(tmp_path):
    result = run_suite("--out", str(tmp_path), *TINY, "--part", "quality", "--budget-min", "1")
    assert result.returncode == 0, result.stderr[-3000:]
    (step,) = json.loads((tmp_path / "suite.json").read_text())["steps"]
    assert step["status"] == "skipped" and step["detail"].startswith("its 290 s limit > the ") and step["seconds"] == 0
    assert step["detail"].endswith("s left of the quality part's 60 s")
    assert "multi30k_gpu_tiny: skipped (its 290 s" in result.stdout
    assert "| quality | multi30k_gpu_tiny | skipped (its 290 s limit" in (tmp_path / "suite.md").read_text()


def test_a_gpu_suite_without_a_gpu_is_one_line(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the suite would run")
    result = run_suite("--out", str(tmp_path))
    assert result.returncode == 2 and result.stderr.startswith("error: --device cuda: no GPU available")
    assert len(result.stderr.splitlines()) == 1 and not list(tmp_path.iterdir())


def test_a_torch_older_than_the_oldest_stated_is_one_line(monkeypatch):
    import torch

    gpu_suite = __import__("gpu_suite")
    monkeypatch.setattr(torch, "__version__", "2.10.1+cu128")
    error = gpu_suite.requirement_error(gpu_suite.parse_args(["--out", "x", *TINY]))
    assert error == "error: torch 2.10.1+cu128 is older than 2.11, the oldest the suite runs on"
    monkeypatch.setattr(torch, "__version__", "2.11.0+cu130")
    assert gpu_suite.requirement_error(gpu_suite.parse_args(["--out", "x", *TINY])) is None


def test_the_cuda_tests_label_says_whether_any_ran():
    outcome = __import__("gpu_suite").pytest_outcome
    skipped = "sss\n=== short test summary info ===\nSKIPPED [18] tests/test_cuda.py:22: needs a CUDA device\n18 skipped in 3.1s"
    assert outcome(skipped) == ("skipped", "18 skipped: needs a CUDA device")
    assert outcome("....\n15 passed in 120.00s (0:02:00)\n") == ("ok", "15 passed")
    assert outcome("SKIPPED [1] tests/test_cuda.py:9: no bf16\n14 passed, 1 skipped in 99.1s\n") == ("ok", "14 passed, 1 skipped")


def test_the_fit_line_names_what_was_trained_and_scored():
    fit_line = __import__("gpu_suite").fit_line
    toy = {"name": "multi30k_gpu_tiny", "status": "ok", "detail": "", "steps": 10, "wall_seconds": 30.0, "test_bleu": 0.0}
    assert fit_line(toy) == (
        "The GPU recipe at toy size, 10 steps on a slice of Multi30k with every setting of its own but the sizes, "
        "0.5 min wall time; nothing scored (--tiny)."
    )
    failed = {"name": "multi30k_gpu", "status": "timed out", "detail": "stopped at its 290 s limit", "wall_seconds": 290.0}
    assert fit_line(failed).startswith("multi30k_gpu: not scored (the step timed out (stopped at its 290 s limit)")
    scored = {"name": "multi30k_gpu", "status": "ok", "detail": "", "steps": 3000, "wall_seconds": 285.0, "fit_seconds": 231.0}
    scored |= {"tested": "best", "test_bleu": 40.123, "bleu_signature": "nrefs:1|tok:13a", "monitor": "val/bleu"}
    scored["best_score"] = 39.9
    assert fit_line(scored) == (
        "Multi30k test_2016_flickr: **40.12 BLEU** (nrefs:1|tok:13a), the best checkpoint (val/bleu 39.9); "
        "3000 steps in 3.9 min of training, 4.8 min wall time."
    )
    killed_after_its_test = scored | {"status": "timed out", "detail": "stopped at its 290 s limit"}
    assert fit_line(killed_after_its_test).startswith("Multi30k test_2016_flickr: **40.12 BLEU** (nrefs:1|tok:13a)")
    assert fit_line(killed_after_its_test).endswith(
        "4.8 min wall time; the step timed out (stopped at its 290 s limit) after writing its summary."
    )


def test_the_hardware_line_names_cuda_only_on_a_gpu():
    hardware_line = __import__("gpu_suite").hardware_line
    common = {"torch": "2.11.0+cu130", "python": "3.12.3", "packages": {"lightning": "2.6.6"}, "cpu_count": 16}
    cpu = hardware_line({**common, "device": "cpu", "processor": "Xeon", "torch_threads": 1})
    assert cpu == ("Hardware and software: the CPU alone (Xeon, 16 cores, 1 torch threads), no GPU; torch 2.11.0+cu130, "
                   "Python 3.12.3, lightning 2.6.6.")  # fmt: skip
    gpu = {**common, "device": "cuda", "gpu": "NVIDIA H100 80GB HBM3", "gpu_memory_gib": 79.2}
    gpu |= {"driver": "580.159.04", "cuda": "13.0"}
    assert hardware_line(gpu) == ("Hardware and software: one NVIDIA H100 80GB HBM3 (79.2 GiB, driver 580.159.04), 16 CPU cores; "
                                  "torch 2.11.0+cu130 (CUDA 13.0), Python 3.12.3, lightning 2.6.6.")  # fmt: skip


def test_the_tiny_rehearsal_runs_the_gpu_recipe_with_only_its_sizes_changed(tmp_path):
    gpu_suite = __import__("gpu_suite")
    args = gpu_suite.parse_args(["--out", str(tmp_path), *TINY])
    (step,) = gpu_suite.steps(args, "quality")
    cmd = step["cmd"]
    assert cmd[1:4] == [str(ROOT / "scripts" / "fit.py"), "--config", str(ROOT / "configs" / "multi30k_gpu.yaml")], cmd
    given = [arg.split("=")[0][2:] for arg in cmd[4:] if arg.startswith("--")]
    assert set(given) <= set(TINY_SIZES) | set(RUN_SETTINGS), given  # nothing of the recipe's own is changed
    assert set(TINY_SIZES) <= set(given)
    data = tmp_path / "multi30k_slice"
    assert cmd[cmd.index("--data.init_args.data_dir") + 1] == str(data)
    lines = (data / "train.de").read_text().splitlines()  # the first pairs of Multi30k, line-aligned
    assert len(lines) == len((data / "train.en").read_text().splitlines()) == gpu_suite.TINY_PAIRS["train"]


def test_the_suites_recorded_command_names_the_interpreter_that_ran_it(tmp_path):
    result = run_suite("--out", str(tmp_path), *TINY, "--part", "quality", "--budget-min", "1")
    assert result.returncode == 0, result.stderr[-3000:]
    md = (tmp_path / "suite.md").read_text()
    command = md.split("```bash\n")[1].split("\n")[0]
    python = os.path.relpath(sys.executable, ROOT)  # as the user typed it from the root, inside the checkout
    python = sys.executable if python.startswith("..") else python
    assert command.startswith(f"PYTHONPATH=. {python} benchmarks/gpu_suite.py --out {tmp_path}"), command
