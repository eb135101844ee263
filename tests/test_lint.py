"""The code stays linted and formatted: `ruff check` and `ruff format --check`, configured in
pyproject.toml (what CI runs through this suite; `ruff check --fix . && ruff format .` repairs most)."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import HANG_TIMEOUT, ROOT

RUFF = shutil.which("ruff") or str(Path(sys.executable).with_name("ruff"))


@pytest.mark.parametrize("command", [["check"], ["format", "--check"]], ids=["lint", "format"])
def test_ruff(command):
    if not Path(RUFF).exists():
        pytest.fail("ruff is not installed: pip install -e '.[dev]'")
    result = subprocess.run([RUFF, *command, "."], capture_output=True, text=True, cwd=ROOT, timeout=HANG_TIMEOUT)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]


# The layers, lowest first: a package imports only from layers below it (deploy may also use tasks' model);
# nothing imports the scripts.
LAYERS = {"models": 0, "datamodules": 1, "training": 2, "tasks": 3, "deploy": 4, "scripts": 5}


def test_imports_form_a_tree_of_layers():
    """scripts → deploy/tasks → training → datamodules → models, lazy imports included: no import circle,
    each layer's errors in its own errors.py (the model's in models/, the data files' in datamodules/, the
    checkpoints' in training/), and argument checks (models/checks.py) importable from every layer."""
    import ast

    upward = []
    for package, rank in LAYERS.items():
        for path in sorted((ROOT / package).glob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                modules = [node.module] if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module else []
                modules += [a.name for a in node.names] if isinstance(node, ast.Import) else []
                for module in modules:
                    top = module.split(".")[0]
                    if LAYERS.get(top, -1) > rank:
                        upward.append(f"{path.relative_to(ROOT)} imports {module}")
    assert not upward, upward


def test_subprocess_time_limits_are_set_in_one_place():
    # A test's time limit on a subprocess guards against a hang and is not a speed check: one generous value,
    # tests/helpers.HANG_TIMEOUT (a 60 s limit once failed a loaded machine's first start of a fresh venv).
    number = re.compile(r"\btimeout(?:\s*:\s*\w+)?\s*=\s*\d")
    found = [
        f"{path.name}:{i}: {line.strip()}"
        for path in sorted((ROOT / "tests").glob("*.py"))
        if path.name != "helpers.py"
        for i, line in enumerate(path.read_text().splitlines(), 1)
        if number.search(line)
    ]
    assert not found, "\n".join(found)
