"""What every `Translator` call shares: the ensemble's vocabulary check, the networks put in eval mode for the
call's length, tokens as their pieces (attention maps' labels), and `translate_many`, which both engines offer."""

from __future__ import annotations

import contextlib

import torch

from common.errors import InputError
from datamodules.batching import map_in_length_batches


def check_same_vocabularies(models: list) -> None:
    """An ensemble's models (translators or task modules) must read and write the same ids: the same tokenizers."""
    first = models[0]
    for i, other in enumerate(models[1:], 1):
        for side in ("src", "tgt"):
            if getattr(other, f"{side}_tokenizer").to_dict() != getattr(first, f"{side}_tokenizer").to_dict():
                raise InputError(
                    f"the ensemble's model {i + 1} has another {'source' if side == 'src' else 'target'} vocabulary "
                    "than model 1: an ensemble needs models trained on the same vocabularies"
                )


@contextlib.contextmanager
def evaluating(nets: list):
    """The networks in eval mode, each put back in its own mode afterwards (a validation's BLEU runs mid-fit)."""
    modes = [net.training for net in nets]
    for net in nets:
        net.eval()
    try:
        with torch.no_grad():
            yield
    finally:
        for net, mode in zip(nets, modes):
            net.train(mode)


def pieces(tokenizer, ids: list[int]) -> list[str]:
    """Each id's piece as the tokenizer has it, the special tokens by their names."""
    specials = {tokenizer.pad_id: "<pad>", tokenizer.bos_id: "<bos>", tokenizer.eos_id: "<eos>"}
    inner = getattr(tokenizer, "tokenizer", None)  # a SubwordTokenizer's Hugging Face tokenizer
    out = []
    for i in ids:
        if i in specials:
            out.append(specials[i])
        elif inner is not None:
            out.append(inner.id_to_token(i) or "?")
        else:
            out.append(tokenizer.tokens[i] if hasattr(tokenizer, "tokens") else str(i))
    return out


class TranslateMany:
    """`translate_many` over an engine's `translate` (`inference.Translator`, `CTranslate2Translator`)."""

    batch_size = 64  # translate_many's sentences per batch

    def translate_many(self, sentences: list[str], batch_size: int | None = None, on_batch=None, **kwargs) -> list[str]:
        """`translate` over many sentences in batches of similar length; results in input order. `on_batch(batch)`
        is called after each batch (progress lines)."""
        translate = lambda batch: self.translate(batch, **kwargs)
        return map_in_length_batches(translate, sentences, batch_size or self.batch_size, on_batch)
