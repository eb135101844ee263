"""models.diagnostics.position_similarity against a brute-force mean of pairwise cosines, and the task's
val/encoder_similarity with its one warning line when the encoder gives every position the same vector."""

from __future__ import annotations

import logging
import math

import pytest
import torch
import torch.nn.functional as F

from models.diagnostics import position_similarity
from tests.helpers import TOY_MODEL, quiet_trainer


def brute_force(memory: torch.Tensor, src_pad: torch.Tensor) -> float:
    per_sentence = []
    for b in range(memory.size(0)):
        kept = memory[b][~src_pad[b]]
        n = kept.size(0)
        if n < 2:
            continue
        cos = [float(F.cosine_similarity(kept[i], kept[j], dim=0)) for i in range(n) for j in range(n) if i != j]
        per_sentence.append(sum(cos) / len(cos))
    return sum(per_sentence) / len(per_sentence) if per_sentence else math.nan


@pytest.mark.parametrize("lengths", [(6, 3, 1, 5), (2, 2), (1, 4)])
def test_position_similarity_is_the_mean_pairwise_cosine_within_each_sentence(lengths):
    g = torch.Generator().manual_seed(sum(lengths))
    memory = torch.randn(len(lengths), max(lengths), 8, generator=g, dtype=torch.float64) + 0.5  # (B, S, D)
    src_pad = torch.arange(max(lengths))[None, :] >= torch.tensor(lengths)[:, None]  # (B, S)
    memory[src_pad] = 100.0  # padding must not count
    assert float(position_similarity(memory, src_pad)) == pytest.approx(brute_force(memory, src_pad), abs=1e-6)


def test_the_same_vector_everywhere_is_one_and_a_single_token_says_nothing():
    memory = torch.randn(1, 1, 8).expand(3, 5, 8).clone()
    src_pad = torch.zeros(3, 5, dtype=torch.bool)
    assert float(position_similarity(memory, src_pad)) == pytest.approx(1.0)
    assert math.isnan(float(position_similarity(memory[:, :1], src_pad[:, :1])))


@pytest.mark.parametrize("collapsed", [False, True])
def test_validation_logs_the_similarity_and_says_so_in_one_line_when_collapsed(collapsed, caplog):
    from datamodules import ToyTranslationDataModule
    from tasks import Seq2SeqTransformer

    torch.manual_seed(0)
    dm = ToyTranslationDataModule()
    model = Seq2SeqTransformer(tokenizers=dm.tokenizers, bleu_every_n_epochs=0, **TOY_MODEL)
    if collapsed:  # every position the same vector: the encoder's final norm with no gain, one bias
        with torch.no_grad():
            model.net.core.encoder_norm.weight.zero_()
            model.net.core.encoder_norm.bias.fill_(0.5)
    with caplog.at_level(logging.INFO, logger="lightning.pytorch"):
        metrics = quiet_trainer(limit_val_batches=1).validate(model, datamodule=dm, verbose=False)[0]
    similarity = metrics["val/encoder_similarity"]
    warned = [r.getMessage() for r in caplog.records if "val/encoder_similarity=" in r.getMessage()]
    if collapsed:
        assert similarity == pytest.approx(1.0)
        (line,) = warned
        assert line.startswith("warning: epoch 0 step 0: val/encoder_similarity=1.000: the encoder gives nearly the same")
        assert "\n" not in line
    else:
        assert similarity < 0.95 and not warned
