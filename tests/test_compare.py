"""scripts/compare.py against sacrebleu's own command line, on 200 real Multi30k references and three systems made
from them by deleting and swapping words: the same scores, bootstrap means and 95% intervals, and p-values of the
paired bootstrap and of approximate randomisation, for the same numbers of resamples and seed; bad input in one line.
"""

import gzip
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from datamodules.corpus_readers import iter_lines
from tests.helpers import ENV, SHARED_DATA, assert_one_line_error, run, run_script, script

SACREBLEU = str(Path(sys.executable).with_name("sacrebleu"))
N, SEED = 200, 777  # a small test's resamples; a seed not sacrebleu's default, so that it must be passed on


def _dropped(line: str, every: int) -> str:
    return " ".join(w for i, w in enumerate(line.split()) if i % every != 1)


def _swapped(line: str) -> str:
    words = line.split()
    if len(words) > 3:
        words[1], words[2] = words[2], words[1]
    return " ".join(words)


@pytest.fixture(scope="module")
def files(tmp_path_factory) -> dict[str, Path]:
    """The references (plain) and three systems: a baseline (gzip, as the data files are) and two that differ from it
    on some lines only, so that the p-values fall between their floor (1/(N + 1)) and 1."""
    if not (SHARED_DATA / "multi30k" / "val.en.gz").is_file():
        pytest.skip("../shared/data/multi30k is not here")
    folder = tmp_path_factory.mktemp("compare")
    with gzip.open(SHARED_DATA / "multi30k" / "val.en.gz", "rt", encoding="utf-8") as f:
        refs = [line.strip() for _, line in zip(range(200), f)]
    base = [_dropped(r, 5) for r in refs]
    systems = {  # a few lines changed from the baseline's, some for the worse and a few to the reference itself
        "base.txt.gz": base,
        "swapped.txt": [_swapped(b) if i % 23 == 0 else r if i % 23 == 1 else b for i, (r, b) in enumerate(zip(refs, base))],
        "mixed.txt": [r if i % 37 == 0 else _dropped(r, 4) if i % 37 == 1 else b for i, (r, b) in enumerate(zip(refs, base))],
    }
    paths = {"ref": folder / "ref.en"}
    paths["ref"].write_text("".join(r + "\n" for r in refs), encoding="utf-8")
    for name, lines in systems.items():
        paths[name] = folder / name
        with (gzip.open if name.endswith(".gz") else open)(paths[name], "wt", encoding="utf-8") as f:
            f.write("".join(line + "\n" for line in lines))
    return paths


def sacrebleu(ref: Path, systems: list[Path], test: str) -> tuple[dict, dict]:
    """sacrebleu's --paired-bs or --paired-ar on the systems: ({system: {metric: result}}, {metric: signature}).
    Its --format json cannot write a bootstrap's means (numpy float32s; sacrebleu 2.6), so its table is read, at 4
    decimals."""
    cmd = [SACREBLEU, str(ref), "-i", *map(str, systems), "-m", "bleu", "chrf", f"--paired-{test}", f"--paired-{test}-n", str(N)]
    result = run([*cmd, "-q", "--no-color", "-f", "text", "-w", "4"], env={**ENV, "SACREBLEU_SEED": str(SEED)})
    assert result.returncode == 0, result.stderr[-3000:]
    rows: dict[str, list[str]] = {}
    name = None
    for line in result.stdout.splitlines():
        cells = [c.strip() for c in line.strip("│").split("│")] if line.startswith("│") else []
        if len(cells) == 3 and cells[0] != "System":
            name = cells[0].removeprefix("Baseline: ") or name
            rows.setdefault(name, []).extend(cells[1:])
    number = r"(-?\d+\.\d+)"
    parsed = {}
    for name, cells in rows.items():
        parsed[name] = {}
        for metric, cell in zip(("bleu", "chrf"), cells[:2]):
            found = re.match(number + rf"(?: \({number} ± {number}\))?", cell).groups()
            p = re.search(rf"\(p = {number}\)", " ".join(cells[2::2] if metric == "bleu" else cells[3::2]))
            parsed[name][metric] = {"score": found[0], "mean": found[1], "ci": found[2], "p": p and p.group(1)}
    signatures = dict(re.findall(r"^ - (BLEU|chrF2)\s+(\S+)$", result.stdout, re.M))
    return {name: cells for name, cells in parsed.items()}, {"bleu": signatures["BLEU"], "chrf": signatures["chrF2"]}


def test_the_numbers_are_sacrebleus(files, capsys, tmp_path):
    names = ("base.txt.gz", "swapped.txt", "mixed.txt")
    args = ["--ref", str(files["ref"]), "--hyps", *(str(files[n]) for n in names), "--paired-bs-n", str(N)]
    args += ["--paired-ar-n", str(N), "--seed", str(SEED), "--json", str(tmp_path / "out.json")]
    code, out, err = run_script(capsys, "compare", *args)
    assert code == 0, err
    ours = json.loads((tmp_path / "out.json").read_text())
    assert [s["name"] for s in ours["systems"]] == [str(files[n]) for n in names]
    bootstrap, bs_signatures = sacrebleu(files["ref"], [files[n] for n in names], "bs")
    randomised, ar_signatures = sacrebleu(files["ref"], [files[n] for n in names], "ar")
    at4 = lambda value: f"{value:.4f}"  # noqa: E731
    p_values = []
    for system in ours["systems"]:
        for metric in ("bleu", "chrf"):
            cell, theirs = system[metric], bootstrap[system["name"]][metric]
            assert (at4(cell["score"]), at4(cell["mean"]), at4(cell["ci"])) == (theirs["score"], theirs["mean"], theirs["ci"])
            assert at4(cell["score"]) == randomised[system["name"]][metric]["score"]
            if system["baseline"]:
                assert "delta" not in cell and theirs["p"] is None
                continue
            baseline = ours["systems"][0][metric]["score"]
            assert cell["delta"] == pytest.approx(cell["score"] - baseline)
            assert (at4(cell["p_bs"]), at4(cell["p_ar"])) == (theirs["p"], randomised[system["name"]][metric]["p"])
            p_values += [cell["p_bs"], cell["p_ar"]]
            assert f"{cell['delta']:+6.2f}" in out
    assert sum(0.05 < p < 0.5 for p in p_values) >= 2, p_values  # p-values away from their floor, where a slip would show
    for metric in ("bleu", "chrf"):
        assert ours["signatures"][metric] == {"bs": bs_signatures[metric], "ar": ar_signatures[metric]}
        assert f"signature (bs): {bs_signatures[metric]}" in out and f"seed:{SEED}" in bs_signatures[metric]
    assert f"paired bootstrap: {N} resamples, approximate randomisation (AR): {N} trials; seed {SEED}" in out


def test_help_is_fast_and_names_the_defaults():
    result = script("compare", "--help", env={**ENV, "PYTHONPROFILEIMPORTTIME": "1"})
    assert result.returncode == 0 and "--paired-bs-n" in result.stdout and "12345" in result.stdout
    imported = {line.split("|")[-1].strip() for line in result.stderr.splitlines() if line.startswith("import time:")}
    assert not {"sacrebleu", "torch"} & imported  # what the answer does not need is not loaded


@pytest.mark.parametrize(
    "case, words",
    [
        ("missing", ["--hyps file not found", "nowhere.txt"]),
        ("one system", ["give at least two systems"]),
        ("twice", ["given twice"]),
        ("short", ["short.txt has 199 lines", "has 200"]),
        ("seeds", ["every system needs as many seeds' files", "swapped.txt 1"]),
    ],
)
def test_bad_input_is_one_line(files, tmp_path, capsys, case, words):
    base, other = str(files["base.txt.gz"]), str(files["swapped.txt"])
    short = tmp_path / "short.txt"
    shutil.copy(files["ref"], short)
    short.write_text("".join(short.read_text().splitlines(keepends=True)[:-1]))
    hyps = {"missing": [base, str(tmp_path / "nowhere.txt")], "one system": [base], "twice": [base, other, base]}
    hyps["short"], hyps["seeds"] = [base, str(short)], [f"{base},{files['mixed.txt']}", other]
    code, out, err = run_script(capsys, "compare", "--ref", str(files["ref"]), "--hyps", *hyps[case])
    assert code == 2 and not out
    assert_one_line_error(subprocess.CompletedProcess([], code, out, err), *words)


def test_the_same_translations_are_no_significant_difference(files, capsys, tmp_path):
    """sacrebleu's p-value of a zero difference is its floor, 1/(n + 1) (no resample differs by more than 0): the
    line shows it, unmarked."""
    copy = tmp_path / "copy.txt.gz"
    shutil.copy(files["base.txt.gz"], copy)
    args = ["--ref", str(files["ref"]), "--hyps", str(files["base.txt.gz"]), str(copy), "--metrics", "bleu"]
    code, out, err = run_script(capsys, "compare", *args, "--paired-bs-n", "50", "--paired-ar-n", "50")
    assert code == 0, err
    (line,) = [line for line in out.splitlines() if line.startswith(str(copy))]
    assert line.split()[-3:] == ["+0.00", f"{1 / 51:.4f}", f"{1 / 51:.4f}"]


def test_several_seeds_are_tested_pooled_as_sacrebleu_tests_the_joined_files_and_seed_by_seed(files, capsys, tmp_path):
    """Two seeds a system: the pooled numbers are sacrebleu's on each system's files joined, against the references
    repeated; each seed's are compare.py's on that seed's files alone."""
    lines = {n: list(iter_lines(files[n])) for n in ("base.txt.gz", "swapped.txt", "mixed.txt")}
    seeds = {"a0": lines["base.txt.gz"], "a1": lines["swapped.txt"], "b0": lines["mixed.txt"], "b1": lines["base.txt.gz"]}
    for name, text in seeds.items():
        (tmp_path / name).write_text("".join(line + "\n" for line in text), encoding="utf-8")
    joined = {}
    for system in ("a", "b"):
        joined[system] = tmp_path / f"{system}.joined"
        joined[system].write_text("".join(line + "\n" for i in "01" for line in seeds[system + i]), encoding="utf-8")
    refs2 = tmp_path / "ref2.en"
    refs2.write_text(files["ref"].read_text(encoding="utf-8") * 2, encoding="utf-8")
    a, b = (f"{tmp_path / (s + '0')},{tmp_path / (s + '1')}" for s in ("a", "b"))
    tests = ["--paired-bs-n", str(N), "--paired-ar-n", str(N), "--seed", str(SEED)]
    code, out, err = run_script(
        capsys, "compare", "--ref", str(files["ref"]), "--hyps", a, b, *tests, "--json", str(tmp_path / "o.json")
    )
    assert code == 0, err
    ours = json.loads((tmp_path / "o.json").read_text())
    assert ours["pooled_seeds"] == 2 and "2 seeds a system, pooled" in out
    for test in ("bs", "ar"):
        theirs, _ = sacrebleu(refs2, [joined["a"], joined["b"]], test)
        for metric in ("bleu", "chrf"):
            cell, their = ours["systems"][1][metric], theirs[str(joined["b"])][metric]
            assert f"{cell['score']:.4f}" == their["score"] and f"{cell['p_' + test]:.4f}" == their["p"]
    for i in (0, 1):
        alone = tmp_path / f"seed{i}.json"
        code, _, err = run_script(
            capsys,
            "compare",
            "--ref",
            str(files["ref"]),
            "--hyps",
            *(str(tmp_path / f"{s}{i}") for s in "ab"),
            *tests,
            "--json",
            str(alone),
        )
        assert code == 0, err
        single = json.loads(alone.read_text())["systems"]
        assert [{m: r[m] for m in ("bleu", "chrf")} for r in ours["by_seed"][i]["systems"]] == [
            {m: r[m] for m in ("bleu", "chrf")} for r in single
        ]
        delta, p = single[1]["bleu"]["delta"], single[1]["bleu"]["p_bs"]
        assert f"({delta:+.2f}, p {p:.3f})" in out
