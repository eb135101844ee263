"""The precision a recipe trains in when it names none: chosen from the machine (bf16 autocast where bf16 is native,
else fp32), said in one line, and `--trainer.precision` as the override."""

import logging
import os

import pytest

import training.precision
from tests.helpers import ROOT, SHARED_DATA

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
