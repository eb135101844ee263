"""The code stays linted and formatted: `ruff check` and `ruff format --check`, configured in
pyproject.toml (what CI runs through this suite; `ruff check --fix . && ruff format .` repairs most)."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT

RUFF = shutil.which("ruff") or str(Path(sys.executable).with_name("ruff"))


@pytest.mark.parametrize("command", [["check"], ["format", "--check"]], ids=["lint", "format"])
def test_ruff(command):
    if not Path(RUFF).exists():
        pytest.fail("ruff is not installed: pip install -e '.[dev]'")
    result = subprocess.run([RUFF, *command, "."], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
