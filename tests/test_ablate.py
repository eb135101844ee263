"""scripts/ablate.py end to end on the toy recipe: one run per variant, a table with each variant's
score, size and speed, and the raw results beside it."""

import json

from tests.helpers import HANG_TIMEOUT, ROOT, script


def test_ablation_runs_each_variant_and_writes_the_table(tmp_path):
    out = tmp_path / "ablation.md"
    result = script(
        "ablate",
        "--recipe",
        "configs/toy_translation.yaml",
        "--variants",
        "baseline",
        "swiglu",
        "mqa",
        "--root",
        str(tmp_path / "runs"),
        "--out",
        str(out),
        "--",
        "--trainer.max_epochs",
        "2",
        "--trainer.logger",
        "CSVLogger",
        timeout=HANG_TIMEOUT,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    rows = {line.split("|")[1].strip(): line for line in out.read_text().splitlines() if line.startswith("| ")}
    assert {"baseline", "swiglu", "mqa"} <= set(rows)
    runs = {r["variant"]: r for r in json.loads(out.with_suffix(".json").read_text())}
    assert all(r["status"] == 0 and r["steps"] == 32 for r in runs.values())
    for variant, r in runs.items():
        # A median step in milliseconds: 16 of the 31 timed steps (the first is left out) took at least that long,
        # and all of them ran within the fit.
        assert 0 < r["step_ms"] * 16 <= 1000 * r["fit_seconds"] <= 1000 * r["wall_seconds"], r
        assert f"| {r['step_ms']:.1f} |" in rows[variant]
    # SwiGLU widens each feed-forward's first matrix (gate and value); one key/value head shrinks attention.
    assert runs["swiglu"]["parameters"] > runs["baseline"]["parameters"] > runs["mqa"]["parameters"]
    assert f"{runs['swiglu']['parameters']:,}" in rows["swiglu"]
    assert "--config configs/variants/mqa.yaml" in runs["mqa"]["command"].replace(str(ROOT) + "/", "")


def test_ablation_refuses_an_unknown_variant_in_one_line(tmp_path):
    result = script("ablate", "--recipe", "configs/toy_translation.yaml", "--variants", "baseline", "nope", timeout=HANG_TIMEOUT)
    assert result.returncode == 2 and "unknown variant(s) nope" in result.stderr
    assert "Traceback" not in result.stderr
