"""scripts/ablate.py end to end on the toy recipe: one run per variant, a line as each starts, a table with each
variant's score, size and speed, and the raw results beside it; variants by name or by file, labelled by the file,
held to the recipe's network; Ctrl-C ends with the finished runs' table and a command that runs the rest."""

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from scripts.ablate import parse_args, table
from tasks.significance import paired_tests, pooled_bootstrap
from tests.helpers import ENV, HANG_TIMEOUT, ROOT, recipe_args, script
from training.records import read_test_outputs, write_test_outputs
from training.variants import VARIANTS_DIR, variants

QUICK = ["--", "--trainer.max_steps", "4", "--trainer.logger", "CSVLogger"]  # a run's few steps, no W&B


@pytest.mark.slow
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


@pytest.mark.slow
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


# ---------------------------------------------------------------------------------------------- differences to the baseline


def _run(folder: Path, variant: str, seed: int, hyps: list[str] | None, refs: list[str], status: int = 0) -> dict:
    """A result as run_one makes it, its run's test translations (training/records.py) in `folder`."""
    result = {"variant": variant, "seed": seed, "status": status, "file": str(VARIANTS_DIR / f"{variant}.yaml")}
    result |= {"parameters": 10, "wall_seconds": 60.0, "test": {"test/bleu": 1.0}}
    if hyps is not None:
        run = folder / f"{variant}-s{seed}"
        run.mkdir(parents=True)
        result |= {"run_folder": str(run), "test_outputs": write_test_outputs(run, {"hypotheses": hyps, "references": refs})}
        result["test_bleu_signature"] = "nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0"
    return result


def test_each_variant_is_tested_against_the_baseline_on_the_seeds_both_ran(tmp_path):
    """The paired bootstrap on the outputs pooled over the seeds the variant shares with the baseline (here 0 and 1;
    its seed 2 has no baseline to pair with), named by the table's header; the rows of the first variant when none is
    named baseline; no columns where no run kept test translations (MNIST)."""
    refs = [f"a man in a {c} shirt is riding a bike down the road" for c in ("red", "blue", "green", "white")] * 5
    base = [" ".join(r.split()[:-3]) for r in refs]
    other = [r if i % 3 else " ".join(r.split()[:-1]) for i, r in enumerate(refs)]
    results = [_run(tmp_path, "baseline", s, base, refs) for s in (0, 1)]
    results += [_run(tmp_path, "rotary", s, other[s:] + other[:s], refs) for s in (0, 1, 2)]
    text = table(results, Path("configs/cmn_eng.yaml"), [])
    assert "| Δ BLEU vs baseline, seeds pooled | p (paired bootstrap) |" in text.splitlines()[0]
    expected = pooled_bootstrap({s: (base, refs) for s in (0, 1)}, {s: (other[s:] + other[:s], refs) for s in (0, 1)})
    pooled = paired_tests([("b", base + base), ("r", other + other[1:] + other[:1])], refs + refs, ["bleu"], ar_n=None)
    assert expected["p_bs"] == pooled["systems"][1]["bleu"]["p_bs"] and expected["keys"] == [0, 1]
    row = next(line for line in text.splitlines() if line.startswith("| rotary |"))
    assert f"| {expected['delta']:+.2f} | {expected['p_bs']:.3f}" in row and expected["delta"] > 0
    assert "| baseline | 2 | 1.00 ± 0.00 | (baseline) | – |" in text and "bs:1000|seed:12345" in text
    no_baseline = [r for r in results if r["variant"] != "baseline"] + [_run(tmp_path / "x", "swiglu", 0, other, refs)]
    assert "Δ BLEU vs rotary, seeds pooled" in table(no_baseline, Path("configs/cmn_eng.yaml"), [])
    mnist = [{**r, "test_outputs": None} for r in results]
    assert "Δ" not in table(mnist, Path("configs/mnist_subset.yaml"), [])


@pytest.mark.slow
def test_a_translation_recipes_table_has_each_variants_difference_to_the_baseline(tmp_path):
    """End to end on a small Tatoeba corpus (the cmn-eng recipe, a tiny network, 4 steps): each run keeps its test
    translations beside its summary.json, and the table's p-value is the paired bootstrap's on them."""
    data = recipe_args("corpus", tmp_path / "data")[2:]  # all but the recipe, which is --recipe here
    quick = [
        "--trainer.max_steps",
        "4",
        "--trainer.logger",
        "CSVLogger",
        "--checkpoint.monitor",
        "val/loss",
        "--checkpoint.mode",
        "min",
    ]
    args = ["--recipe", "configs/cmn_eng.yaml", "--variants", "baseline", "swiglu", "--root", str(tmp_path / "runs")]
    result = script("ablate", *args, "--out", str(tmp_path / "table.md"), "--", *data, *quick)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    runs = {r["variant"]: r for r in json.loads((tmp_path / "table.json").read_text())}
    outputs = {v: read_test_outputs(r["run_folder"], r["test_outputs"]) for v, r in runs.items()}
    assert outputs["baseline"][1] == outputs["swiglu"][1] and len(outputs["baseline"][0]) > 10  # the same test set
    expected = pooled_bootstrap({0: outputs["baseline"]}, {0: outputs["swiglu"]})
    (row,) = [line for line in (tmp_path / "table.md").read_text().splitlines() if line.startswith("| swiglu |")]
    assert f"| {expected['delta']:+.2f} | {expected['p_bs']:.3f}" in row
