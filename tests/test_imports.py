"""What is imported before a command answers: a script's `--help` and its argument errors load no torch, Lightning,
torchvision, transformers, datasets or sacrebleu (they answer at once); the Translator loads torch and not Lightning;
a translation run loads nothing of MNIST's. Behaviour, not timing: each command runs with PYTHONPROFILEIMPORTTIME
(`python -X importtime`), whose lines on stderr name every module it imported. benchmarks/startup.py times them."""

from __future__ import annotations

import importlib
import json
import sys

import pytest

from tests.helpers import ENV, ROOT, run

HEAVY = {"torch", "lightning", "torchvision", "transformers", "datasets", "sacrebleu"}
# Each script's argument errors: its arguments (paths that need not exist: the error comes first) and the line's end.
ERRORS = {
    "translate": [
        (["--ckpt", "missing.ckpt", "--batch-size", "0", "Ein Hund rennt."], "--batch-size must be at least 1"),
        (["--ckpt", "missing.ckpt", "--sampling-topp", "2", "Ein Hund rennt."], "--sampling-topp 2.0 must be in (0, 1]"),
        (["--engine", "ctranslate2", "x"], "--engine ctranslate2 needs --model DIR (a directory written by scripts/export.py)"),
    ],
    "evaluate": [
        (["--ckpt", "m.ckpt", "--src", "s.de", "--ref", "r.en", "--batch-size", "0"], "--batch-size must be at least 1"),
        (["--ckpt", "m.ckpt", "--src", "s.de", "--ref", "r.en", "--sampling-topk", "3"], "apply to --sampling only"),
    ],
    "generate": [
        (["--ckpt", "m.ckpt", "--src", "s.de", "--output", "out", "--shard-size", "0"], "--shard-size must be at least 1"),
        (["--ckpt", "m.ckpt", "--src", "s.de", "--output", "o", "--nbest", "5"], "a beam holds at most --beam-size hypotheses"),
    ],
    "export": [(["--ckpt", "m.ckpt", "--to", "hf", "--quantization", "int8", "o"], "Hugging Face export keeps float32 weights")],
    "average_checkpoints": [(["runs", "--last", "1", "--out", "a.ckpt"], "--last N takes one directory and N of at least 2")],
    "import_pretrained": [
        (["opus-mt-de-en", "--out", "m.ckpt", "--length-penalty", "-1"], "--length-penalty must be at least 0")
    ],
}
if (ROOT / "scripts" / "compare.py").is_file():
    ERRORS["compare"] = [(["--ref", "r.en", "--hyps", "a.en", "b.en", "--seed", "0"], "(sacrebleu takes 0 as no seed)")]


def traced(*args: str):
    """`python ARGS` with PYTHONPROFILEIMPORTTIME: (the run, the top-level packages it imported, its other stderr lines)."""
    result = run([sys.executable, *args], env={**ENV, "PYTHONPROFILEIMPORTTIME": "1"})
    lines = result.stderr.splitlines()
    modules = {line.split("|")[-1].strip() for line in lines if line.startswith("import time:")}
    return result, modules, [line for line in lines if not line.startswith("import time:")]


def packages(modules: set[str]) -> set[str]:
    return {m.partition(".")[0] for m in modules}


@pytest.mark.parametrize("name", sorted(ERRORS))
def test_a_scripts_help_loads_nothing_heavy(name):
    result, modules, _ = traced(f"scripts/{name}.py", "--help")
    assert result.returncode == 0 and "usage:" in result.stdout, result.stderr[-3000:]
    assert not packages(modules) & HEAVY, sorted(packages(modules) & HEAVY)


@pytest.mark.parametrize("name, args, said", [(n, a, s) for n, cases in ERRORS.items() for a, s in cases])
def test_a_scripts_argument_error_loads_nothing_heavy(name, args, said):
    result, modules, stderr = traced(f"scripts/{name}.py", *args)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert stderr[-1].endswith(said) and "error: " in stderr[-1], stderr[-5:]
    assert not packages(modules) & HEAVY, sorted(packages(modules) & HEAVY)


def test_the_translator_loads_torch_and_not_lightning():
    result, modules, _ = traced("-c", "from inference import Translator, DecodingOptions")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "torch" in modules and not packages(modules) & {"lightning", "torchvision", "transformers", "datasets"}


def test_the_packages_load_what_their_names_need_when_first_used():
    # The packages themselves cost nothing; a name loads its own module (a translation data module: no MNIST).
    code = "import common, models, datamodules, training, inference, tasks, deploy, models.checks, inference.options"
    result, modules, _ = traced("-c", code)
    assert result.returncode == 0 and not packages(modules) & HEAVY, result.stderr[-3000:]
    # Nor do they change anything: no warning filtered, no logger touched, until a run starts.
    code = (
        "import logging, warnings; before = list(warnings.filters), logging.root.manager.loggerDict.copy(); "
        "import common, models, datamodules, training, inference, tasks, deploy; "
        "assert (list(warnings.filters), logging.root.manager.loggerDict) == before, 'import changed something'"
    )
    result = run([sys.executable, "-c", code])
    assert result.returncode == 0, result.stderr[-3000:]
    code = "from datamodules import ToyTranslationDataModule, Vocab; from models import Seq2SeqNet; import sys"
    result = run([sys.executable, "-c", f"{code}; print(*sys.modules)"])
    modules = set(result.stdout.split())
    assert result.returncode == 0 and {"datamodules.toy", "models.seq2seq"} <= modules, result.stderr[-3000:]
    # (Lightning loads torchvision all the same: torchmetrics, which it imports, imports it where installed.)
    assert not modules & {"datamodules.mnist", "models.mnist_net", "datamodules.corpus", "datamodules.multilingual"}


def test_a_translation_run_loads_nothing_of_mnists_and_the_help_lists_every_class():
    # --print_config: the toy recipe parsed, its classes resolved, and no training.
    result, modules, _ = traced("scripts/fit.py", "--print_config")
    assert result.returncode == 0 and "datamodules.ToyTranslationDataModule" in result.stdout, result.stderr[-3000:]
    assert not modules & {"datamodules.mnist", "tasks.mnist", "datamodules.corpus", "datasets"}, modules
    # A help lists, as known subclasses, every task and data module (those imported: all of them, for a help).
    help_text = " ".join(run([sys.executable, "scripts/fit.py", "--help"]).stdout.split())
    for name in ("tasks.MnistSequenceClassifier", "tasks.Seq2SeqTransformer", "datamodules.MNISTDataModule"):
        assert name in help_text, name


@pytest.mark.parametrize("name", ["fit", "prepare"])
def test_a_stored_help_is_what_the_parser_prints_and_loads_nothing_heavy(name):
    """fit.py's and prepare.py's `--help` print scripts/help/<name>.txt at once when it was written under these
    versions (Python, jsonargparse, Lightning, torch); under them it must be the parser's text, else this fails
    naming the command that writes it again. Under other versions (a newer jsonargparse) the parser answers, as
    slowly as before, never with a text it may not print."""
    from common.commands import help_key, stored_help
    from scripts.regenerate import COMMAND, parsers_help

    path = ROOT / "scripts" / "help" / f"{name}.txt"
    stored, parser = stored_help(path, help_key()), parsers_help(name)
    assert parser.startswith(f"usage: {name}.py ")
    assert stored in (None, parser), f"{path} is not what the parser prints: run {COMMAND}"
    printed, modules, _ = traced(f"scripts/{name}.py", "--help")
    assert printed.returncode == 0 and " ".join(printed.stdout.split()) == " ".join(parser.split()), printed.stderr[-3000:]
    assert bool(packages(modules) & HEAVY) == (stored is None), sorted(packages(modules) & HEAVY)


def test_a_help_stored_under_another_key_is_not_printed(tmp_path):
    from common.commands import stored_help

    path = tmp_path / "fit.txt"
    path.write_text("# key: python 3.11; jsonargparse 4.53.0; lightning 2.6.6; torch 2.14.0\nusage: fit.py\n")
    assert stored_help(path, "python 3.11; jsonargparse 4.53.0; lightning 2.6.6; torch 2.14.0") == "usage: fit.py\n"
    assert stored_help(path, "python 3.11; jsonargparse 4.54.0; lightning 2.6.6; torch 2.14.0") is None
    assert stored_help(tmp_path / "missing.txt", "any") is None


# Arguments for fit.py and prepare.py, and what the stored help answers at once (None: the parser's to judge).
STORED_ANSWERS = {
    "fit": [
        (["--model.init_args.net.d_model", "64", "--trainer.max_steps", "-1"], None),
        (["--trainer.logger.init_args.project", "x", "--trainer.logger", "false"], None),
        (["-c", "configs/multi30k.yaml", "--data.data_dir", "x", "--seed_everything=3"], None),
        (["--trainer.callbacks+=lightning.pytorch.callbacks.RichModelSummary", "--model.net.d_model", "64"], None),
        (["--early_stopping.patience", "2", "--checkpoint.monitor", "val/loss", "--data.init_args.batch_size", "8"], None),
        (["--trainer.max_epoch", "3"], "unrecognized arguments: --trainer.max_epoch 3; did you mean --trainer.max_epochs?"),
        (["--checkpoint.monitr", "x"], "unrecognized arguments: --checkpoint.monitr x; did you mean --checkpoint.monitor?"),
        (["--foo"], "unrecognized arguments: --foo; --help lists the options"),
        (["--config=missing.yaml"], "--config missing.yaml: no such file"),
        (["--trainer.max_epochs", "null", "--trainer.limit_val_batches", "0.5", "--seed_everything=true"], None),
        (["--early_stopping.min_delta", "1e-3", "--checkpoint.ties", "earlier", "--test", "false"], None),
        (["--trainer.max_steps", "1_000", "--trainer.gradient_clip_val", "-1.5", "--trainer.num_nodes", "0x1"], None),
        (["--trainer.max_epochs", "many"], "--trainer.max_epochs many: expected Optional[int]"),
        (["--test=maybe"], "--test maybe: expected bool"),
        (["--checkpoint.ties", "latest"], "--checkpoint.ties latest: expected Literal['later', 'earlier']"),
    ],
    "prepare": [
        (["--config", "configs/multi30k.yaml", "--trainer.max_time", "1", "--seed_everything", "1"], None),
        (["--dat.data_dir", "x"], "unrecognized arguments: --dat.data_dir x; --help lists the options"),
        (["-c", "missing.yaml"], "-c missing.yaml: no such file"),
    ],
}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(STORED_ANSWERS))
def test_the_stored_help_refuses_only_what_the_parser_refuses(name):
    """The oracle is the parser itself (with --print_config: it parses, prints and exits 0): what it accepts, the
    stored help lets through; what the stored help refuses, it refuses too."""
    from common.commands import argument_error

    cases = STORED_ANSWERS[name]
    code = (
        "import contextlib, io, json, sys\n"
        f"from scripts import {name}\n"
        "codes = []\n"
        "for args in json.loads(sys.argv[1]):\n"
        "    try:\n"
        "        with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):\n"
        f"            {name}.main([*args, '--print_config'])\n"
        "        codes.append(0)\n"
        "    except SystemExit as stop:\n"
        "        codes.append(stop.code)\n"
        "print(json.dumps(codes))\n"
    )
    result = run([sys.executable, "-c", code, json.dumps([args for args, _ in cases])], env={**ENV, "PYTHONPATH": str(ROOT)})
    codes = json.loads(result.stdout.splitlines()[-1])
    text = (ROOT / "scripts" / "help" / f"{name}.txt").read_text(encoding="utf-8").partition("\n")[2]
    for (args, said), parsed in zip(cases, codes):
        assert argument_error(args, text) == said, args
        assert parsed == (0 if said is None else 2), args


@pytest.mark.parametrize("args, said", [case for case in STORED_ANSWERS["fit"] if case[1]])
def test_an_argument_error_is_one_line_at_once(args, said):
    from common.commands import help_key, stored_help

    result, modules, lines = traced("scripts/fit.py", *args)
    assert result.returncode == 2
    if stored_help(ROOT / "scripts" / "help" / "fit.txt", help_key()) is not None:  # else the parser answers
        assert lines == [f"error: {said}"] and not packages(modules) & HEAVY, sorted(packages(modules) & HEAVY)


def test_the_startup_benchmark_reports_these(tmp_path, capsys):
    # benchmarks/startup.py, end to end on one script (the runs themselves: a few tenths of a second).
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        startup = importlib.import_module("startup")
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    out = tmp_path / "startup.json"
    startup.main(["--repeats", "1", "--only", "export", "--json", str(out)])
    rows = {r["case"]: r for r in json.loads(out.read_text())["results"]}
    assert list(rows) == ["export.py --help", "export.py error", "from inference import Translator"]
    assert all(r["problem"] is None and r["median_s"] > 0 for r in rows.values()), rows
    heavy = {case: r["heavy_imports"] for case, r in rows.items()}
    assert heavy == {"export.py --help": [], "export.py error": [], "from inference import Translator": ["torch"]}
    assert "| export.py --help" in capsys.readouterr().out
