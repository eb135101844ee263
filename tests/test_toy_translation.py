"""The toy translator end to end: vocabularies, the recipe learns the pairs, the CLI, checkpoints."""

import subprocess

import pytest
import torch
import yaml

from datamodules import PAD, UNK, ToyTranslationDataModule, Vocab, tokenizer_from_dict
from datamodules.toy import TOY_PAIRS
from tasks import Seq2SeqTransformer
from tests.helpers import ENV, FIT, HANG_TIMEOUT, ROOT, fit_here


def test_vocab_encodes_decodes_and_serialises():
    src = Vocab.build(["我 是 学 生", "我 喜 欢"], level="char")
    tgt = Vocab.build(["I am a student"], level="word")
    assert src.decode(src.encode("我是学生")) == "我是学生"  # characters, with or without spaces
    assert src.encode("我 是 猫")[-1] == UNK  # unseen character
    assert tgt.decode(tgt.encode("I am a student")) == "I am a student"
    assert tgt.decode([1] + tgt.encode("I am") + [2] + tgt.encode("student")) == "I am"  # stops at <eos>
    again = tokenizer_from_dict(tgt.to_dict())
    assert again.encode("a student I") == tgt.encode("a student I") and len(again) == len(tgt)


def test_batches_are_padded_to_the_longest_in_batch():
    dm = ToyTranslationDataModule()
    src, tgt = next(iter(dm.val_dataloader()))
    assert src.shape == (3, 6)  # 我 喜 欢 学 习 + <eos>
    assert tgt.shape == (3, 6)  # <bos> I am a student <eos>
    assert (src[0, 5] == PAD) and (tgt[1, 5] == PAD)  # shorter rows padded on the right


def toy_run(tmp_path, *extra):
    return [*FIT, "--trainer.default_root_dir", str(tmp_path), "--trainer.enable_progress_bar", "false", *extra]


@pytest.fixture(scope="module")
def trained_toy(tmp_path_factory):
    """The default recipe, exactly as `python scripts/fit.py` runs it."""
    root = tmp_path_factory.mktemp("toy")
    result = subprocess.run(toy_run(root), capture_output=True, text=True, cwd=ROOT, env=ENV, timeout=HANG_TIMEOUT)
    assert result.returncode == 0, result.stderr[-3000:]
    ckpts = sorted(root.rglob("epoch*.ckpt"))
    assert ckpts, f"no best checkpoint under {root}"
    return result.stdout + result.stderr, ckpts[-1]


@pytest.mark.slow
def test_default_recipe_learns_the_three_pairs(trained_toy):
    output, ckpt = trained_toy
    for src, tgt in TOY_PAIRS:
        assert f"{src}  →  {tgt}" in output  # the CLI prints each source with its translation
    model = Seq2SeqTransformer.load_from_checkpoint(ckpt)  # no data module needed
    sources = [s for s, _ in TOY_PAIRS]
    assert model.translate(sources) == [t for _, t in TOY_PAIRS]
    assert model.translate(sources, use_cache=False) == [t for _, t in TOY_PAIRS]
    assert "best checkpoint" in output and str(ckpt.name) in output


def test_checkpoint_is_plain_data(trained_toy):
    _, ckpt = trained_toy
    state = torch.load(ckpt, weights_only=True)  # no pickled objects
    assert state["hyper_parameters"]["tokenizers"]["src"]["level"] == "char"


def test_unknown_characters_translate_without_error(trained_toy):
    model = Seq2SeqTransformer.load_from_checkpoint(trained_toy[1])
    assert model.src_tokenizer.encode("我 是 猫")[-1] == model.src_tokenizer.encode("我 是 狗")[-1] == UNK
    assert model.translate(["我 是 猫"]) == model.translate(["我 是 狗"])  # the same <unk>: the same translation
    with pytest.raises(ValueError, match="empty"):
        model.translate(["  "])


def test_cli_print_config_and_overrides(tmp_path):
    result = subprocess.run(
        [*FIT, "--print_config", "--model.init_args.net.d_model", "48"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=ENV,
        timeout=HANG_TIMEOUT,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert yaml.safe_load(result.stdout)["model"]["init_args"]["net"]["d_model"] == 48
    assert "ToyTranslationDataModule" in result.stdout


@pytest.mark.slow
def test_cli_trainer_flags_and_resume(tmp_path, capsys, caplog):
    short = ["--trainer.max_epochs", "2", "--trainer.limit_train_batches", "3"]
    assert fit_here(capsys, caplog, tmp_path, *short).returncode == 0
    last = next(tmp_path.rglob("last.ckpt"))
    assert torch.load(last, weights_only=True)["epoch"] == 1
    more = ["--trainer.max_epochs", "3", "--trainer.limit_train_batches", "3", "--ckpt_path", "last"]
    resumed = fit_here(capsys, caplog, tmp_path, *more)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert f" from {last}" in resumed.stdout + resumed.stderr and "Resuming the run in " in resumed.stdout + resumed.stderr
    newest = max(tmp_path.rglob("last.ckpt"), key=lambda p: p.stat().st_mtime)
    assert newest != last and torch.load(newest, weights_only=True)["epoch"] == 2
    assert torch.load(last, weights_only=True)["epoch"] == 1  # the earlier run's checkpoint is untouched
