"""benchmarks/gpu_suite.py end to end on the CPU at toy size (`--device cpu --tiny`), so that the suite a lent GPU
runs cannot rot between GPU sessions: every step passes and writes its tables, and the summary names the versions."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.helpers import ENV, HANG_TIMEOUT, ROOT

SUITE = [sys.executable, str(ROOT / "benchmarks" / "gpu_suite.py")]


@pytest.mark.slow
def test_tiny_suite_runs_every_step_on_the_cpu(tmp_path):
    pytest.importorskip("transformers", reason="pip install -e '.[bench]'")
    result = subprocess.run([*SUITE, "--out", str(tmp_path), "--device", "cpu", "--tiny"], capture_output=True, text=True,
                            cwd=ROOT, env=ENV, timeout=HANG_TIMEOUT)  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    suite = json.loads((tmp_path / "suite.json").read_text())
    names = [s["name"] for s in suite["steps"]]
    assert names == ["test_cuda", "static_decode", "peers_base", "peers_big", "compile_check", "multi30k_gpu"]
    assert all(s["status"] == "ok" for s in suite["steps"]), suite["steps"]
    for name in names:
        assert (tmp_path / f"{name}.md").read_text().startswith(f"# {name}")
    for name in names[1:]:
        assert json.loads((tmp_path / f"{name}.json").read_text())
    assert "| ours" in (tmp_path / "peers_base.md").read_text()  # the tables are in the markdown
    fit = json.loads((tmp_path / "multi30k_gpu.json").read_text())
    assert fit["steps"] == 6 and fit["wall_seconds"] > 0
    env = suite["environment"]
    assert env["torch"] and len(env["commit"]) == 40 and "| step | status | seconds |" in (tmp_path / "suite.md").read_text()


def test_a_gpu_suite_without_a_gpu_is_one_line(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the suite would run")
    result = subprocess.run(
        [*SUITE, "--out", str(tmp_path)], capture_output=True, text=True, cwd=ROOT, env=ENV, timeout=HANG_TIMEOUT
    )
    assert result.returncode == 2 and result.stderr.startswith("error: --device cuda: no GPU available")
    assert len(result.stderr.splitlines()) == 1 and not list(tmp_path.iterdir())
