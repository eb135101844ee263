"""Every benchmark script runs end to end at a tiny size, so none of them can rot (< 60 s).

Each script is run as CI would, `python benchmarks/<name>.py --tiny --json PATH`, in a
subprocess (the scripts set their own threads and torch.compile state); the tests check the
printed table and the JSON fields, not the timings."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run_benchmark(name: str, tmp_path: Path, *extra: str, timeout: float = 120) -> tuple[str, dict]:
    out = tmp_path / f"{name}.json"
    env = dict(os.environ, OMP_NUM_THREADS="1")  # tiny sizes: one thread, no fighting over 2 cores
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / f"{name}.py"), "--tiny", "--json", str(out), *extra],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout,
    )
    assert proc.returncode == 0, f"{name} failed:\n{proc.stdout}\n{proc.stderr[-4000:]}"
    return proc.stdout, json.loads(out.read_text())


def test_train_step(tmp_path):
    stdout, data = run_benchmark("train_step", tmp_path)
    assert "| model" in stdout and "torch.nn.Transformer" in stdout and "speed vs torch" in stdout
    names = [r["name"] for r in data["results"]]
    assert names == ["ours (SDPA)", "torch.nn.Transformer", "ours (matmul-softmax)"]
    assert data["tokens_per_step"] > 0
    for r in data["results"]:
        assert r["tokens_per_s"] > 0 and r["step"]["median_s"] > 0
        assert r["speed_vs_torch"]["median"] > 0
        assert r["peak_step_memory_bytes"] is None or r["peak_step_memory_bytes"] >= 0
    ref = data["results"][1]["speed_vs_torch"]
    assert ref["median"] == pytest.approx(1.0)
    assert data["environment"]["torch"]


def test_decode(tmp_path):
    stdout, data = run_benchmark("decode", tmp_path)
    assert "greedy, cached" in stdout and "greedy, uncached" in stdout and "beam" in stdout
    modes = {(r["output_tokens"], r["mode"]) for r in data["results"]}
    lengths = data["config"]["lengths"]
    for n in lengths:
        assert (n, "greedy_cached") in modes and (n, "greedy_uncached") in modes
    for r in data["results"]:
        if r["mode"] == "greedy_cached":
            assert r["sentences_per_s"] > 0 and r["speedup_vs_uncached"]["median"] > 0
            assert r["rows_identical_to_uncached"] == 1.0  # the cache changes nothing but the speed
        elif not r.get("pending"):
            assert r["sentences_per_s"] > 0
    beam = [r for r in data["results"] if r["mode"].startswith("beam")]
    assert beam and (all(r.get("pending") for r in beam) or all(r["sentences_per_s"] > 0 for r in beam))


def test_profile_step(tmp_path):
    stdout, data = run_benchmark("profile_step", tmp_path)
    assert "self CPU ms / step" in stdout
    (result,) = data["results"]
    assert result["top_ops"] and result["profiled_wall_ms_per_step"] > 0
    assert all(op["self_cpu_ms_per_step"] >= 0 for op in result["top_ops"])
    # Masks are built once per forward, not per layer or head: a handful of ops per step.
    assert sum(result["mask_ops_per_step"].values()) < 20


def test_compile_check(tmp_path):
    # aot_eager exercises Dynamo's graph capture and the recompilation logic without a C++
    # toolchain and in seconds; inductor is what `python benchmarks/compile_check.py` measures.
    stdout, data = run_benchmark("compile_check", tmp_path, "--backend", "aot_eager")
    assert "graphs so far" in stdout
    assert len(data["train"]) == 3 and all(r["compiled_step_s"] > 0 for r in data["train"])
    assert data["train_graphs_after_second_length"] == 0, data["train"]  # no recompile per padded length
    assert data["decode"] and all(r["same_as_eager"] for r in data["decode"])
