"""The README's Python examples run as they are written, from a fresh folder (a reader pastes them)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.helpers import ENV, ROOT

BLOCKS = re.findall(r"^```python\n(.*?)^```", (ROOT / "README.md").read_text(encoding="utf-8"), flags=re.S | re.M)


def test_the_readme_has_python_examples():
    assert len(BLOCKS) >= 2


# An example that trains (the toy translator's 25 epochs) is slow.
CASES = [pytest.param(i, marks=[pytest.mark.slow] if ".fit(" in b else []) for i, b in enumerate(BLOCKS)]


@pytest.mark.parametrize("block", CASES)
def test_a_readme_python_example_runs(tmp_path, block):
    (tmp_path / "example.py").write_text(BLOCKS[block], encoding="utf-8")
    # From a folder of its own (what it writes stays there), with the project importable as after `pip install -e .`.
    env = {**ENV, "PYTHONPATH": str(ROOT)}
    cmd = [sys.executable, str(tmp_path / "example.py")]
    result = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
