"""What every `Translator` call shares: the ensemble's vocabulary check, the networks put in eval mode for the
call's length, tokens as their pieces (attention maps' labels), and what both engines offer (`TranslateMany`)."""

from __future__ import annotations

import contextlib
import warnings

import torch

from common.errors import InputError
from datamodules.batching import frame_source, map_in_length_batches
from datamodules.languages import tokens_of, with_target_tag
from models.decoding import Hypothesis

from .options import DecodingOptions


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
    tokens = tokens_of(tokenizer)
    return [specials.get(i) or tokens[i] or "?" for i in ids]


class TranslateMany:
    """What both engines (`inference.Translator`, `CTranslate2Translator`) offer over their own searches: `translate`,
    `score` and `translate_many`, with the same arguments, checks and results. An engine holds its tokenizers, their
    `languages` and its default `options`, and gives `_translate` and `_score`."""

    batch_size = 64  # translate_many's sentences per batch

    def source_ids(self, sentences: list[str], tgt_lang: str | None, max_len: int) -> list[list[int]]:
        """Each sentence's source ids after `tgt_lang`'s tag for a multilingual model (datamodules/languages.py),
        `<eos>` last. Over-long sentences are truncated to `max_len` with a warning; empty ones are refused."""
        ids = []
        for i, sentence in enumerate(sentences):
            if not isinstance(sentence, str) or not sentence.strip():
                raise InputError(f"sentence {i} is empty: there is nothing to translate")
            encoded = with_target_tag(self.languages, tgt_lang, sentence, self.src_tokenizer.encode(sentence), i)
            if len(encoded) + 1 > max_len:
                warnings.warn(
                    f"sentence {i} has {len(encoded)} tokens; truncated to the model's max_len={max_len}",
                    stacklevel=3,  # the line that encoded them: the user's, or the engine's method they called
                )
            ids.append(frame_source(encoded, max_len, self.src_tokenizer.eos_id))
        return ids

    def translate(
        self,
        sentences: list[str],
        nbest: int | None = None,
        ensemble=(),
        prefixes: list[str] | None = None,
        options: DecodingOptions | None = None,
        **changes,
    ) -> list[str] | list[list[Hypothesis]]:
        """Translate a batch of sentences with this translator's options, `changes` (`DecodingOptions`' names; None
        for the default) replacing some, or with `options`, a whole `DecodingOptions` used as it is. Returns each
        sentence's best output's text, or, with `nbest`, its `nbest` best `models.decoding.Hypothesis` (text,
        tokens, each token's log-prob, score), best first. `ensemble`: more translators (or task modules) averaged
        with this one (this project's engine only); `prefixes`: one target prefix per sentence ("" for none). What
        each does, and each sentence's own length limit: docs/guide/decoding.md."""
        if isinstance(sentences, str):
            sentences = [sentences]
        opts = self.options.for_call(nbest, prefixes, sentences, options, **changes)
        if opts.static_cache is not None and (nbest is not None or ensemble or prefixes is not None):
            raise InputError("static_cache decodes the plain greedy or beam search: not with nbest or the decoding tools")
        if not sentences:
            return []
        found = self._translate(sentences, opts, nbest is not None, ensemble, prefixes)  # hypotheses, or texts
        return [row if isinstance(row, str) else row[0].text for row in found] if nbest is None else found

    def score(
        self,
        sentences: list[str],
        references: list[str],
        length_penalty: float = 0.0,
        ensemble=(),
        alignment_layer=None,
        options: DecodingOptions | None = None,
        tgt_lang: str | None = None,
    ) -> list[Hypothesis]:
        """Each (sentence, reference) pair's `Hypothesis` by teacher forcing: the reference's tokens and `<eos>`,
        each one's log-prob, and the score a search with this `length_penalty` would rank it by; with
        `alignment_layer`, the reference's alignment to its source (forced alignment); `tgt_lang`, a multilingual
        model's target language (this translator's by default). `options` (a decoding setting) gives all three."""
        if options is not None:
            length_penalty, alignment_layer, tgt_lang = options.ranking_alpha, options.alignment_layer, options.tgt_lang
        elif tgt_lang is None:
            tgt_lang = self.options.tgt_lang
        if len(references) != len(sentences):
            raise InputError(f"{len(references)} references for {len(sentences)} sentences: give one per sentence")
        if not sentences:
            return []
        return self._score(sentences, references, length_penalty, ensemble, alignment_layer, tgt_lang)

    def translate_many(self, sentences: list[str], batch_size: int | None = None, on_batch=None, **kwargs) -> list[str]:
        """`translate` over many sentences in batches of similar length; results in input order. `on_batch(batch)`
        is called after each batch (progress lines)."""
        translate = lambda batch: self.translate(batch, **kwargs)
        return map_in_length_batches(translate, sentences, batch_size or self.batch_size, on_batch)
