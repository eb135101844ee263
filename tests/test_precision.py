"""The precision a recipe trains in when it names none: chosen from the machine (bf16 autocast where bf16 is native,
else fp32), said in one line, and `--trainer.precision` as the override."""

import json
import logging
import os
import warnings

import pytest
import yaml

import training.precision
from tests.helpers import ROOT, SHARED_DATA, run_script

AVX2_ONLY = {"fpu", "sse4_2", "avx", "avx2", "fma"}  # a common laptop or server CPU: no native bf16
AVX512_BF16 = AVX2_ONLY | {"avx512f", "avx512_bf16", "amx_bf16"}


def recipe_cli(tmp_path, *extra):
    from training.cli import TransformerCLI

    args = ["--config", str(ROOT / "configs" / "mnist_subset.yaml"), "--data.data_dir", str(SHARED_DATA / "mnist")]
    return TransformerCLI(args=[*args, "--trainer.logger", "false", "--trainer.default_root_dir", str(tmp_path), *extra])


@pytest.mark.parametrize("flags, precision", [(AVX2_ONLY, "32-true"), (AVX512_BF16, "bf16-mixed")])
def test_a_recipe_trains_in_the_precision_the_machine_computes_natively(tmp_path, monkeypatch, caplog, flags, precision):
    monkeypatch.setattr(training.precision, "cpu_flags", lambda: flags)
    with caplog.at_level(logging.INFO):
        cli = recipe_cli(tmp_path, "--trainer.accelerator", "cpu")
    assert cli.trainer.precision == precision
    (line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("precision ")]
    if precision == "32-true":
        assert line.startswith("precision 32-true: this ") and "has no native bf16" in line, line
    else:
        assert line.startswith("precision bf16-mixed: this CPU computes bf16 natively (amx_bf16, avx512_bf16"), line
    assert line.endswith("to choose otherwise"), line


def test_trainer_precision_overrides_the_machine(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(training.precision, "cpu_flags", lambda: AVX2_ONLY)
    with caplog.at_level(logging.INFO):
        cli = recipe_cli(tmp_path, "--trainer.accelerator", "cpu", "--trainer.precision", "bf16-mixed")
    assert cli.trainer.precision == "bf16-mixed"
    assert not [r for r in caplog.records if r.getMessage().startswith("precision ")]


def test_cpu_flags_are_read_from_the_machine():
    flags = training.precision.cpu_flags()
    assert isinstance(flags, set)
    if os.path.isfile("/proc/cpuinfo"):  # Linux: x86's "fpu" or Arm's "fp" is in every CPU's list
        assert flags & {"fpu", "fp"}, flags


# fp16 autocast asked for on a CPU: Lightning has none there and would train bf16-mixed with two warnings (the
# emulated, ten-times-slower path where bf16 is not native); here the machine decides, in one line.
FP16_ON_A_CPU = [
    ("16", AVX2_ONLY, "32-true"),
    ("16-mixed", AVX2_ONLY, "32-true"),
    ("16", AVX512_BF16, "bf16-mixed"),
    ("16-mixed", AVX512_BF16, "bf16-mixed"),
]


@pytest.mark.parametrize("asked, flags, runs", FP16_ON_A_CPU, ids=["16-avx2", "16-mixed-avx2", "16-bf16", "16-mixed-bf16"])
def test_fp16_asked_for_on_a_cpu_is_one_line_and_what_the_machine_computes(tmp_path, monkeypatch, caplog, asked, flags, runs):
    monkeypatch.setattr(training.precision, "cpu_flags", lambda: flags)
    with caplog.at_level(logging.INFO), warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        cli = recipe_cli(tmp_path, "--trainer.accelerator", "cpu", "--trainer.precision", asked)
    assert cli.trainer.precision == runs
    assert not [w for w in warned if "precision=" in str(w.message)], [str(w.message) for w in warned]  # Lightning's two
    (line,) = [r.getMessage() for r in caplog.records if "precision" in r.getMessage() and "Automatic" not in r.getMessage()]
    assert line.startswith(f"--trainer.precision {asked}: a CPU has no fp16 autocast "), line
    assert f"training in {runs}: " in line, line
    if runs == "32-true":
        assert "has no native bf16" in line and "about 10× slower a step than fp32" in line, line
        assert line.endswith("--trainer.precision bf16-mixed to insist"), line
    else:
        assert "computes bf16 natively (amx_bf16, avx512_bf16 in /proc/cpuinfo)" in line, line
        assert line.endswith("--trainer.precision 32-true for fp32"), line
    # The flag the line offers, pasted, is taken as it is, without a line.
    other = line.rsplit("--trainer.precision ", 1)[1].split()[0]
    caplog.clear()
    with caplog.at_level(logging.INFO):
        cli = recipe_cli(tmp_path, "--trainer.accelerator", "cpu", "--trainer.precision", other)
    assert cli.trainer.precision == other
    assert not [r for r in caplog.records if "--trainer.precision" in r.getMessage()]


@pytest.mark.parametrize("flags, runs", [(AVX2_ONLY, "32-true"), (AVX512_BF16, "bf16-mixed")], ids=["avx2", "bf16"])
def test_the_records_of_a_run_say_the_precision_that_ran(tmp_path, monkeypatch, capsys, caplog, flags, runs):
    monkeypatch.setattr(training.precision, "cpu_flags", lambda: flags)
    args = ["--trainer.accelerator", "cpu", "--trainer.precision", "16", "--trainer.logger", "false", "--test", "false"]
    args += ["--trainer.max_steps", "2", "--trainer.default_root_dir", str(tmp_path), "--trainer.enable_progress_bar", "false"]
    with caplog.at_level(logging.INFO):
        code, out, err = run_script(capsys, "fit", *args)
    assert code == 0, err[-3000:]
    (folder,) = tmp_path.glob("version_*")
    config = yaml.safe_load((folder / "config.yaml").read_text())
    assert config["trainer"]["precision"] == runs  # config.yaml reruns what ran
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["precision"] == runs
    assert f"2 steps in {runs}" in caplog.text
