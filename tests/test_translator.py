"""`inference.Translator` built three ways: from a checkpoint file (either set of weights) without the
LightningModule, and from a module in memory, whose network it shares; both translate as the module does."""

from __future__ import annotations

import pytest
import torch

from common.errors import CheckpointError
from datamodules import ToyTranslationDataModule
from inference import DecodingOptions, Translator
from tasks import Seq2SeqTransformer
from tests.helpers import TOY_MODEL, save_checkpoint

SOURCES = ["我 是 学 生", "我 喜 欢 学 习", "男 生"]


def toy_module(seed: int, **options) -> Seq2SeqTransformer:
    """An untrained toy translator; `options`: the module's own arguments."""
    torch.manual_seed(seed)  # untrained: long, seed-dependent outputs
    return Seq2SeqTransformer(tokenizers=ToyTranslationDataModule().tokenizers, **{**TOY_MODEL, **options}).eval()


def test_a_checkpoint_gives_either_set_of_weights_without_the_module(tmp_path):
    averaged, training = toy_module(0, length_penalty=0.4), toy_module(1)
    path = save_checkpoint(averaged, tmp_path / "ema.ckpt")
    state = torch.load(path, weights_only=True)
    state["current_model_state"] = training.state_dict()  # what an --ema_decay run stores beside the EMA
    torch.save(state, path)
    for weights, module in (("averaged", averaged), ("training", training)):
        translator = Translator.from_checkpoint(path, weights=weights)
        assert all(torch.equal(a, b) for a, b in zip(translator.net.state_dict().values(), module.net.state_dict().values()))
        assert translator.translate(SOURCES, beam_size=2, max_len=8) == module.translate(SOURCES, beam_size=2, max_len=8)
    assert Translator.from_checkpoint(path).options == DecodingOptions(length_penalty=0.4)  # the checkpoint's defaults
    assert averaged.translate(SOURCES, max_len=8) != training.translate(SOURCES, max_len=8)  # two different models
    with pytest.raises(CheckpointError, match="one set of weights"):
        Translator.from_checkpoint(save_checkpoint(averaged, tmp_path / "plain.ckpt"), weights="training")


def test_a_module_s_translator_shares_its_network_and_follows_its_mode():
    module = toy_module(0)
    translator = module.translator
    assert translator is module.translator and translator.net is module.net
    module.train()
    first = module.translate(SOURCES, max_len=8)
    assert module.training and module.net.training  # decoding ran in eval mode and gave the mode back
    with torch.no_grad():
        module.net.generator.bias = None
        module.net.generator.weight.mul_(-1)  # a change to the module's weights is the translator's
    assert module.translate(SOURCES, max_len=8) != first
