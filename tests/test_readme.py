"""The README's Python examples run as they are written, from a fresh folder (a reader pastes them)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from tests.helpers import ENV, HANG_TIMEOUT, ROOT

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
    result = subprocess.run(cmd, capture_output=True, text=True, cwd=tmp_path, env=env, timeout=HANG_TIMEOUT)
    assert result.returncode == 0, result.stderr[-3000:]


def test_the_readme_runs_the_notebook_with_what_dev_installs(tmp_path):
    # The README's command, on a one-cell notebook of our own in place of the quickstart (which trains).
    (line,) = [ln for ln in (ROOT / "README.md").read_text().splitlines() if ln.startswith(".venv/bin/jupyter execute ")]
    command = line.split("#")[0].split()
    assert command[2] == "notebooks/quickstart.ipynb" and (ROOT / command[2]).is_file()
    nbformat = pytest.importorskip("nbformat")
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print(6 * 7)")])
    nbformat.write(nb, tmp_path / "quickstart.ipynb")
    program = [str(ROOT / command[0]), *command[1:2], str(tmp_path / "quickstart.ipynb"), *command[3:]]
    result = subprocess.run(program, capture_output=True, text=True, env=ENV, timeout=HANG_TIMEOUT)
    assert result.returncode == 0, result.stderr[-3000:]
    (written,) = [p for p in tmp_path.glob("*.ipynb") if p.name != "quickstart.ipynb"]
    assert "42" in written.read_text()


def test_what_a_newcomer_looks_for_is_in_the_docs():
    readme, guide = ((ROOT / doc).read_text() for doc in ("README.md", "docs/guide/pretrained.md"))
    assert "`--test false` skips it" in readme
    assert "save_pretrained('opus-mt-de-en')" in guide and "scripts/import_pretrained.py opus-mt-de-en " in guide
    ignored = subprocess.run(["git", "check-ignore", "-q", "exported/multi30k/model.bin"], cwd=ROOT)
    assert ignored.returncode == 0  # scripts/export.py's outputs, as the docs name them, stay out of git
