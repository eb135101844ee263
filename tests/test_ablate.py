"""scripts/ablate.py end to end on the toy recipe: one run per variant, a line as each starts, a table with each
variant's score, size and speed, and the raw results beside it; variants by name or by file, labelled by the file,
held to the recipe's network; Ctrl-C ends with the finished runs' table and a command that runs the rest."""

import json
import signal
import subprocess
import sys

import pytest

from scripts.ablate import parse_args
from tests.helpers import ENV, HANG_TIMEOUT, ROOT, script
from training.variants import VARIANTS_DIR, variants

QUICK = ["--", "--trainer.max_steps", "4", "--trainer.logger", "CSVLogger"]  # a run's few steps, no W&B


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
    # A line as each run starts, before the line of its result: which variant, which seed, where its output goes.
    lines = result.stdout.splitlines()
    for number, variant in enumerate(["baseline", "swiglu", "mqa"], 1):
        log = tmp_path / "runs" / f"{variant}-s0" / "output.log"
        start = lines.index(f"[{number}/3] {variant} seed 0: running configs/variants/{variant}.yaml, output in {log}")
        assert lines[start + 1].startswith(f"{variant} seed 0: best val/loss ")
        assert "Summary" in log.read_text()


def test_ablation_refuses_an_unknown_variant_in_one_line(tmp_path):
    result = script("ablate", "--recipe", "configs/toy_translation.yaml", "--variants", "baseline", "nope", timeout=HANG_TIMEOUT)
    assert result.returncode == 2 and "unknown variant(s) nope" in result.stderr
    assert "Traceback" not in result.stderr


def test_a_variant_that_does_not_fit_the_recipe_is_refused_in_one_line(tmp_path):
    """learned2d is for image networks (its fits:); the toy recipe's translator reads text. Nothing is run."""
    result = script("ablate", "--recipe", "configs/toy_translation.yaml", "--variants", "learned2d", "--root", str(tmp_path))
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        "ablate.py: error: variant learned2d does not fit configs/toy_translation.yaml: it is for image networks "
        "(its fits:), and Seq2SeqTransformer reads text"
    )
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("recipe, network", [("toy_translation", "text"), ("mnist_subset", "image")])
def test_by_default_every_variant_file_that_fits_the_recipes_network(recipe, network):
    args, extra = parse_args(["--recipe", f"configs/{recipe}.yaml", "--", "--seed_everything", "1"])
    names = [v.name for v in args.variants]
    files = {p.stem: p.read_text() for p in VARIANTS_DIR.glob("*.yaml")}
    assert names[0] == "baseline" and sorted(names) == sorted(v.name for v in variants(network))
    # The oracle: the file's own words, not the reader's.
    assert set(names) == {name for name, text in files.items() if f"fits: [{network}" in text or f", {network}]" in text}
    assert ("learned2d" in names) == (network == "image") and extra == ["--seed_everything", "1"]


def test_a_variant_file_of_ones_own_is_labelled_by_its_file_name(tmp_path):
    own = tmp_path / "sandwich.yaml"
    own.write_text("fits: [text]\nmodel:\n  init_args:\n    net:\n      norm: rmsnorm\n")
    args, _ = parse_args(["--recipe", "configs/toy_translation.yaml", "--variants", "baseline", str(own)])
    assert [(v.name, v.path) for v in args.variants] == [("baseline", VARIANTS_DIR / "baseline.yaml"), ("sandwich", own)]
    (tmp_path / "other").mkdir()
    namesake = tmp_path / "other" / "sandwich.yaml"
    namesake.write_text(own.read_text())
    with pytest.raises(SystemExit):  # two rows of one label: refused, not merged
        parse_args(["--recipe", "configs/toy_translation.yaml", "--variants", str(own), str(namesake)])


def test_ctrl_c_prints_the_finished_runs_and_the_command_that_resumes_the_rest(tmp_path):
    """SIGINT while the second run starts: the table of the first, and a command that, pasted, reads the first back
    and runs the second (a variant file of one's own, labelled by its name in the rows and the runs)."""
    own = tmp_path / "my_swiglu.yaml"
    own.write_text("fits: [text]\nmodel:\n  init_args:\n    net:\n      activation: swiglu\n")
    root = tmp_path / "runs"
    args = ["--recipe", "configs/toy_translation.yaml", "--variants", "baseline", str(own), "--root", str(root), *QUICK]
    sweep = subprocess.Popen(
        [sys.executable, "scripts/ablate.py", *args], cwd=ROOT, env=ENV, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    seen = []
    for line in sweep.stdout:
        seen.append(line.rstrip("\n"))
        if line.startswith("[1/2]"):
            assert not (root / "baseline-s0" / "result.json").exists()  # said as it starts, not once it ended
        if line.startswith("[2/2] my_swiglu seed 0: running"):
            sweep.send_signal(signal.SIGINT)
    assert sweep.wait(timeout=HANG_TIMEOUT) == 130, sweep.stderr.read()[-3000:]
    assert seen[seen.index("stopped by SIGINT: 1 of 2 runs finished:") :][2].startswith("| variant |")
    rows = [line.split("|")[1].strip() for line in seen if line.startswith("| ") and not line.startswith("| variant")]
    assert rows == ["baseline"]  # the interrupted run is no row
    assert not (root / "my_swiglu-s0" / "result.json").exists()
    resume = seen[-1].removeprefix("resume the rest with: ")
    assert resume != seen[-1] and "--resume -- --trainer.max_steps 4" in resume
    again = subprocess.run(resume, shell=True, cwd=ROOT, env=ENV, text=True, capture_output=True, timeout=HANG_TIMEOUT)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    lines = again.stdout.splitlines()
    assert lines[0].startswith("[1/2] baseline seed 0: finished before, read back from ")
    assert lines[1].startswith(f"[2/2] my_swiglu seed 0: running {own}, output in ")
    table = [line.split("|")[1].strip() for line in lines if line.startswith("| ") and not line.startswith("| variant")]
    assert table == ["baseline", "my_swiglu"]
    assert f"but my_swiglu's is `{own}`" in again.stdout
