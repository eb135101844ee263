"""What a machine without the optional packages still runs (a cluster node's image has none of them): the project's
packages import without W&B, Hugging Face `datasets` and the CJK font package, and a feature that needs one of them
says so in one line. The packages are hidden through tests/hide_packages, as if they were not installed."""

from __future__ import annotations

import sys

from tests.helpers import env_hiding, fit, run

OPTIONAL = ["wandb", "datasets", "noto_cjk_sans_otc"]
# Every package of the project with every name it exports (each imported when first used: common/lazy.py), and the
# modules scripts/fit.py and the benchmarks load before any work.
IMPORTS = "import models, datamodules, training, tasks, deploy, training.cli, tasks.figures, datamodules.hf_source\n"
IMPORTS += "\n".join(f"from {package} import *" for package in ("models", "datamodules", "inference", "tasks"))


def test_the_project_imports_without_wandb_datasets_or_the_cjk_font():
    code = f"""
import importlib, sys
for name in {OPTIONAL!r}:
    try:
        importlib.import_module(name)
    except ModuleNotFoundError:
        pass
    else:
        raise SystemExit(name + " is not hidden")
{IMPORTS}
print(sorted(m for m in sys.modules if m.partition(".")[0] in {OPTIONAL!r}))
"""
    result = run([sys.executable, "-c", code], env=env_hiding(*OPTIONAL))
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "[]"


def test_the_wandb_logger_without_wandb_is_one_line(tmp_path):
    result = fit(tmp_path, "--trainer.max_steps", "1", env=env_hiding("wandb"))  # the default logger: W&B
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert result.stderr.splitlines()[-1] == (
        "error: the W&B logger needs wandb: pip install wandb, or pass --trainer.logger CSVLogger"
    )


def test_hugging_face_data_without_datasets_is_one_line(tmp_path):
    cpu = ["--trainer.accelerator", "cpu", "--trainer.precision", "32", "--trainer.logger", "CSVLogger"]
    recipe = ["--config", "configs/wmt14_en_de.yaml", "--data.init_args.data_dir", str(tmp_path), *cpu]
    result = fit(tmp_path, *recipe, env=env_hiding("datasets"))
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert result.stderr.splitlines()[-1] == "error: format=hf reads Hugging Face datasets: pip install datasets"
