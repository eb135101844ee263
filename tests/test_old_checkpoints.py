"""Checkpoints written before the networks took typed configs (models/config.py), their settings flat among the
task module's hyperparameters, still load and compute what they computed then, through `load_checkpoint`, Lightning's
`load_from_checkpoint`, the Translator and the scripts, and save their settings under `net`.

tests/fixtures/seq2seq-7ae343f.ckpt and tests/fixtures/mnist-7ae343f.ckpt were written by commit 7ae343f's code,
where each network took its settings one by one: a Seq2SeqTransformer (d_model=16, nhead=4, num_kv_heads=2,
1 + 2 layers, gelu, pre-norm, tied embeddings, max_len=16) fit for 4 epochs on ToyTranslationDataModule(repeats=16)
after `seed_everything(0)`, and a MnistSequenceClassifier (7×7 patches, a one-layer stem of 2 maps, swiglu,
sinusoidal positions, two decoder queries) fit for 2 steps on 8 `torch.randn` images (generator seed 1), both
saved with `trainer.save_checkpoint(path, weights_only=True)`. The expected outputs below were printed by that
same code right after saving; the ones a later commit computes are compared with them.
"""

from __future__ import annotations

import pytest
import torch

from common.checkpoints import load_checkpoint
from datamodules.mnist import MEAN, STD
from inference import DecodingOptions, Translator
from models.config import MnistNetConfig, MnistNetSettings, Seq2SeqConfig, Seq2SeqSettings
from tasks import MnistSequenceClassifier, Seq2SeqTransformer
from tests.helpers import ROOT, fake_mnist, save_checkpoint, script

FIXTURES = ROOT / "tests" / "fixtures"
SEQ2SEQ, MNIST = FIXTURES / "seq2seq-7ae343f.ckpt", FIXTURES / "mnist-7ae343f.ckpt"
# scripts/fit.py's last.ckpt at 7ae343f (LightningCLI's: its class path and instantiator recorded), d_model 16, nhead 2,
# dim_feedforward 32 given flat (`--model.init_args.d_model 16`); tests/test_faults_fit.py resumes it.
TOY_LAST = FIXTURES / "toy-last-7ae343f.ckpt"
SOURCES = ["我 是 学 生", "我 喜 欢 学 习", "我 是 男 生", "男 生"]
TRANSLATIONS = ["I am a student", "I like learning", "I am a boy", "I am a boy"]  # greedy and beam 3 alike
# The first 4 logits at each of 3 target positions, sources 0 and 1, targets [<bos>, 4, 5] and [<bos>, 6, 7].
SEQ2SEQ_LOGITS = [
    [[-0.2264, 1.7242, 0.9364, -1.072], [-0.8443, -2.6332, -0.4421, -1.2509], [-0.2553, 0.0747, -0.6724, -1.6148]],
    [[-0.0561, 2.1799, -0.0529, -1.0039], [-0.8531, -1.0856, -3.6696, -2.4457], [-0.5724, -0.5911, 6.7816, -1.8278]],
]
# The 10 logits of the first 3 images of torch.randn(8, 1, 28, 28, generator=torch.Generator().manual_seed(1)).
MNIST_LOGITS = [
    [0.9548, 0.3629, 1.3304, 1.498, -0.7569, 0.0602, -0.1731, -0.2425, -1.9874, -0.7222],
    [0.9301, 0.3563, 1.3326, 1.5361, -0.7415, 0.0651, -0.1578, -0.2273, -1.9674, -0.7081],
    [0.9352, 0.3475, 1.3622, 1.4958, -0.7447, 0.054, -0.1675, -0.2492, -1.9855, -0.7209],
]


def test_old_seq2seq_checkpoint_translates_as_it_did_through_the_translator():
    """Written before the decoding options were one object: its hyperparameters (plain values, read with
    weights_only=True) give the Translator its decoding defaults, and a Translator read from the file without
    the LightningModule, or made from the module Lightning loads, translates as the checkpoint did: greedy,
    beam 3, n-best lists headed by the same outputs, and a reference scored as the best output's n-best score."""
    hparams = torch.load(SEQ2SEQ, map_location="cpu", weights_only=True)["hyper_parameters"]
    direct = Translator.from_checkpoint(SEQ2SEQ)
    via_module = Translator.from_module(load_checkpoint(Seq2SeqTransformer, SEQ2SEQ))
    for translator in (direct, via_module):
        assert translator.options == DecodingOptions(
            length_penalty=hparams["length_penalty"], max_len_a=hparams["max_len_a"], max_len_b=hparams["max_len_b"]
        )
        assert translator.translate(SOURCES) == TRANSLATIONS
        assert translator.translate(SOURCES, beam_size=3) == TRANSLATIONS
        lists = translator.translate(SOURCES, beam_size=3, nbest=2)
        assert [row[0].text for row in lists] == TRANSLATIONS and all(len(row) == 2 for row in lists)
        scored = translator.score(SOURCES, TRANSLATIONS, translator.options.replace(beam_size=3).ranking_alpha)
        assert [h.score for h in scored] == pytest.approx([row[0].score for row in lists], abs=1e-5)
    assert direct.net.config == via_module.net.config


def test_old_seq2seq_checkpoint_loads_and_translates_as_it_did():
    model = load_checkpoint(Seq2SeqTransformer, SEQ2SEQ).eval()
    assert model.translate(SOURCES) == TRANSLATIONS
    assert model.translate(SOURCES, beam_size=3) == TRANSLATIONS
    src = model.translator.encode_sources(SOURCES[:2])
    tgt = torch.tensor([[model.bos_id, 4, 5], [model.bos_id, 6, 7]])
    with torch.no_grad():
        logits = model(src, tgt)  # (2, 3, V)
    torch.testing.assert_close(logits[..., :4], torch.tensor(SEQ2SEQ_LOGITS), atol=1e-4, rtol=0)
    # Its settings reached the network's config by name, not by position.
    config = model.net.config
    assert isinstance(config, Seq2SeqConfig)
    assert (config.d_model, config.nhead, config.num_kv_heads, config.num_encoder_layers, config.num_decoder_layers) == (
        16,
        4,
        2,
        1,
        2,
    )
    assert (config.activation, config.norm_first, config.tie_embeddings, config.max_len) == ("gelu", True, True, 16)
    assert config.src_vocab_size == len(model.src_tokenizer) and config.pad_id == model.pad_id


def test_old_mnist_checkpoint_loads_and_classifies_as_it_did():
    model = load_checkpoint(MnistSequenceClassifier, MNIST).eval()
    images = torch.randn(8, 1, 28, 28, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        logits = model(images[:3])  # (3, 10)
    torch.testing.assert_close(logits, torch.tensor(MNIST_LOGITS), atol=1e-4, rtol=0)
    config = model.net.config
    assert isinstance(config, MnistNetConfig)
    assert (config.activation, config.positional, config.stem_channels, config.num_queries) == ("swiglu", "sinusoidal", 2, 2)


def test_old_mnist_checkpoint_scores_through_evaluate_mnist(tmp_path):
    """The script loads it too, and scores what the loaded model (checked against its recorded logits above) predicts."""
    test_x, test_y = fake_mnist(tmp_path / "data", n_train=60, n_test=40)
    images = (test_x.unsqueeze(1).float() / 255 - MEAN) / STD  # (N, 1, 28, 28), as the data module reads them
    model = load_checkpoint(MnistSequenceClassifier, MNIST).eval()
    with torch.no_grad():
        expected = 100 * float(model(images).argmax(-1).eq(test_y).float().mean())
    result = script("evaluate_mnist", "--ckpt", str(MNIST), "--data-dir", str(tmp_path / "data"), "--val-size", "10")
    assert result.returncode == 0, result.stderr[-2000:]
    assert f"test accuracy: {expected:.2f} % (40 images)" in result.stdout


def test_old_checkpoint_translates_and_scores_through_the_scripts(tmp_path):
    translated = script("translate", "--ckpt", str(SEQ2SEQ), "--beam-size", "1", *SOURCES)
    assert translated.returncode == 0, translated.stderr[-2000:]
    assert translated.stdout.splitlines() == TRANSLATIONS
    src, ref, hyp = tmp_path / "src.txt", tmp_path / "ref.txt", tmp_path / "hyp.txt"
    src.write_text("\n".join(SOURCES) + "\n", encoding="utf-8")
    ref.write_text("\n".join(TRANSLATIONS) + "\n", encoding="utf-8")
    scored = script("evaluate", "--ckpt", str(SEQ2SEQ), "--src", str(src), "--ref", str(ref), "--hyp-out", str(hyp))
    assert scored.returncode == 0, scored.stderr[-2000:]
    assert hyp.read_text(encoding="utf-8").splitlines() == TRANSLATIONS  # beam 4, the script's default
    assert "SacreBLEU: 100.00" in scored.stdout


@pytest.mark.parametrize(
    "task, settings, path", [(Seq2SeqTransformer, Seq2SeqSettings, SEQ2SEQ), (MnistSequenceClassifier, MnistNetSettings, MNIST)]
)
def test_old_flat_settings_load_into_net_and_save_in_the_new_spelling(tmp_path, task, settings, path):
    """Lightning's own `load_from_checkpoint` gathers the flat settings into `net`; the module then saves them there,
    and a checkpoint in the new spelling loads into the same network with the same weights."""
    old = torch.load(path, map_location="cpu", weights_only=True)["hyper_parameters"]
    model = task.load_from_checkpoint(path, map_location="cpu").eval()
    flat = {name: old[name] for name in settings.field_names() if name in old}
    assert flat and model.hparams.net == {**settings().as_dict(), **flat}
    assert not set(settings.field_names()) & set(model.hparams)  # no setting left beside the module's own
    assert {k: v for k, v in model.hparams.items() if k != "net"} == {k: v for k, v in old.items() if k not in flat}
    new = save_checkpoint(model, tmp_path / "new.ckpt")
    assert torch.load(new, map_location="cpu", weights_only=True)["hyper_parameters"]["net"] == model.hparams.net
    again = load_checkpoint(task, new).eval()
    assert again.net.config == model.net.config
    for key, value in model.state_dict().items():
        assert torch.equal(value, again.state_dict()[key]), key
    if task is Seq2SeqTransformer:
        assert again.translate(SOURCES) == TRANSLATIONS
        assert Translator.from_checkpoint(new).translate(SOURCES, beam_size=3) == TRANSLATIONS
    else:
        images = torch.randn(8, 1, 28, 28, generator=torch.Generator().manual_seed(1))
        with torch.no_grad():
            torch.testing.assert_close(again(images[:3]), torch.tensor(MNIST_LOGITS), atol=1e-4, rtol=0)


def test_an_old_command_line_checkpoint_loads_with_its_flat_settings():
    """A checkpoint LightningCLI wrote (its instantiator recorded, which Lightning calls with the hyperparameters)
    loads with the sizes it was trained at, through the module and through the Translator alike."""
    model = load_checkpoint(Seq2SeqTransformer, TOY_LAST).eval()
    config = model.net.config
    assert (config.d_model, config.nhead, config.dim_feedforward) == (16, 2, 32)
    direct = Translator.from_checkpoint(TOY_LAST)
    assert direct.net.config == config
    assert direct.translate(SOURCES, beam_size=3) == model.translate(SOURCES, beam_size=3)
