"""`Translator`: inference for this project's translation networks, the one object a user holds.

    translator = Translator.from_checkpoint("runs/multi30k/.../epoch012-step2899.ckpt")
    translator = Translator.from_pretrained("Helsinki-NLP/opus-mt-de-en")     # a Marian (OPUS-MT) model
    translator = Translator.from_module(model)                                # a Seq2SeqTransformer in memory
    translator.translate(["Ein Hund rennt."])                                 # ['A dog runs.']
    translator.translate(["A dog runs."], tgt_lang="fr")                      # a multilingual model: >>fr<< first

It holds a network (`models.Seq2SeqNet`), its two tokenizers and its default `DecodingOptions` (a checkpoint's
length penalty and length limits), which a call's keywords replace. The searches are in models/; ensembles, forced
prefixes, alignments, attention weights and the static decoders (kept per mode and device) are here.
docs/guide/decoding.md says what each does; deploy/ctranslate2_translator.py offers the same `translate`,
`translate_many` and `score` over CTranslate2.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import torch

from common.errors import InputError
from datamodules.batching import frame_source, pad_sequences
from datamodules.languages import target_languages, with_target_tag
from models import Seq2SeqNet
from models.beam import beam_search, beam_search_nbest
from models.constraints import Constraints
from models.decoding import Hypothesis, greedy_decode
from models.sampling import sample
from models.scoring import align, score_targets
from models.static_cache import StaticDecoder

from .calls import TranslateMany, check_same_vocabularies, evaluating, pieces
from .networks import TRANSLATION, read_network, read_pretrained
from .options import DecodingOptions


class Translator(TranslateMany):
    """A translation network with its tokenizers and default decoding options (see the module's docstring)."""

    def __init__(self, net: Seq2SeqNet, src_tokenizer, tgt_tokenizer, options: DecodingOptions | None = None, batch_size=64):
        self.net, self.src_tokenizer, self.tgt_tokenizer = net, src_tokenizer, tgt_tokenizer
        self.options = options or DecodingOptions()
        self.batch_size = batch_size  # translate_many's sentences per batch
        self.pad_id, self.bos_id, self.eos_id = tgt_tokenizer.pad_id, tgt_tokenizer.bos_id, tgt_tokenizer.eos_id
        self.languages = target_languages(src_tokenizer)  # {} unless multilingual: {"fr": id of >>fr<<, ...}
        self._static_decoders: dict[tuple, StaticDecoder] = {}

    # ---------------------------------------------------------------------------------- construction

    @classmethod
    def from_module(cls, module) -> Translator:
        """The translator of a `Seq2SeqTransformer` in memory: its network itself (not a copy), its tokenizers, and
        its hyperparameters' decoding defaults. Another module (an MNIST classifier, say) is an `InputError`."""
        if not isinstance(getattr(module, "net", None), Seq2SeqNet):
            raise InputError(
                f"Translator.from_module takes a {TRANSLATION} (a translation module); "
                f"this is a {type(module).__name__}, which does not translate"
            )
        hp = module.hparams
        return cls(
            module.net,
            module.src_tokenizer,
            module.tgt_tokenizer,
            DecodingOptions.from_mapping(hp),
            hp.get("eval_batch_size", 64),
        )

    @classmethod
    def from_checkpoint(cls, path: str | Path, weights: str = "averaged", device: str | torch.device = "cpu") -> Translator:
        """The translator of a `Seq2SeqTransformer` checkpoint, with its `weights` ("averaged": the EMA or averaged
        ones where the run kept them, else its only ones; "training": an EMA run's training weights), without the
        LightningModule (inference.networks.read_network). A file that is not such a checkpoint (another task's, say),
        settings this version does not know or weights that do not fit it: one `CheckpointError` line."""
        read = read_network(path, TRANSLATION, weights)
        net = read.network(str(path))
        try:
            net = net.to(device)
        except (RuntimeError, ValueError) as err:  # no such device, or no CUDA here
            raise InputError(f"cannot run the model on device {str(device)!r}: {str(err).strip().splitlines()[0]}") from None
        return cls(net, *read.tokenizers, read.options, read.batch_size)

    @classmethod
    def from_pretrained(cls, name_or_folder: str | Path, options: DecodingOptions | None = None) -> Translator:
        """A Hugging Face Marian (OPUS-MT) model, from its folder or hub name (inference.networks.read_pretrained). Its
        decoding defaults are ours unless `options` are given (Marian's `generate` normalises no beam by length)."""
        read = read_pretrained(name_or_folder)
        return cls(read.network(str(name_or_folder)), *read.tokenizers, options)

    @property
    def device(self) -> torch.device:
        return next(self.net.parameters()).device

    # ---------------------------------------------------------------------------------- translation

    def encode_sources(self, sentences: list[str], tgt_lang: str | None = None) -> torch.Tensor:
        """Strings → (B, S) padded source ids on the network's device, each after `tgt_lang`'s tag for a multilingual
        model (datamodules/languages.py). Over-long sentences are truncated to the network's `max_len` with a warning;
        empty ones are refused."""
        ids = []
        for i, sentence in enumerate(sentences):
            if not isinstance(sentence, str) or not sentence.strip():
                raise InputError(f"sentence {i} is empty: there is nothing to translate")
            encoded = with_target_tag(self.languages, tgt_lang, sentence, self.src_tokenizer.encode(sentence), i)
            if len(encoded) + 1 > self.net.max_len:
                warnings.warn(
                    f"sentence {i} has {len(encoded)} tokens; truncated to the model's max_len={self.net.max_len}",
                    stacklevel=2,  # the line that encoded them: the user's, or the Translator method they called
                )
            ids.append(frame_source(encoded, self.net.max_len, self.src_tokenizer.eos_id))
        return pad_sequences(ids, self.pad_id).to(self.device)

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
        tokens, each token's log-prob, score), best first.

        `ensemble`: more translators (or task modules) whose next-token probabilities are averaged with this one's
        (fairseq's rule); `prefixes`: one target prefix per sentence ("" for none) that each output starts with.
        Each output's length is capped by `max_len`, else max_len_a × its own source's length + max_len_b, within the
        network's positions: a sentence's output never depends on the others in its call."""
        if isinstance(sentences, str):
            sentences = [sentences]
        opts = self.options.for_call(nbest, prefixes, sentences, options, **changes)
        if opts.static_cache is not None and (nbest is not None or ensemble or prefixes is not None):
            raise InputError("static_cache decodes the plain greedy or beam search: not with nbest or the decoding tools")
        if not sentences:
            return []
        if nbest is None and opts.plain and not ensemble and prefixes is None:
            with evaluating([self.net]):
                out = self._best(self.encode_sources(sentences, opts.tgt_lang), opts)
            return [self.tgt_tokenizer.decode(row.tolist()) for row in out]
        hyps = self._hypotheses(sentences, opts, ensemble, prefixes)
        return [row[0].text for row in hyps] if nbest is None else hyps

    def max_output_len(self, src: torch.Tensor, opts: DecodingOptions | None = None, nets=None) -> list[int]:
        """Each sentence's most output tokens: `max_len`, else a·S + b of its own S source tokens (the (B, S) batch's
        non-padding), within every network's positions (`DecodingOptions.output_limits`)."""
        opts, nets = opts or self.options, nets or [self.net]
        return opts.output_limits(src.ne(self.pad_id).sum(1).tolist(), min(net.max_len for net in nets) - 1)

    def _best(self, src: torch.Tensor, opts: DecodingOptions) -> torch.Tensor:
        """(B, L) ids of each sentence's best output by greedy or beam search, `<bos>` first."""
        limit = self.max_output_len(src, opts)
        if opts.static_cache is not None:
            decoder = self.static_decoder(opts.static_cache)
            if opts.beam_size == 1:
                return decoder.greedy(src, self.bos_id, self.eos_id, limit)
            return decoder.beam(
                src, self.bos_id, self.eos_id, limit, beam_size=opts.beam_size, length_penalty=opts.length_penalty
            )
        if opts.beam_size == 1:
            return greedy_decode(self.net, src, self.bos_id, self.eos_id, limit, use_cache=opts.use_cache)
        searched = dict(beam_size=opts.beam_size, length_penalty=opts.length_penalty, use_cache=opts.use_cache)
        return beam_search(self.net, src, self.bos_id, self.eos_id, limit, **searched)

    def static_decoder(self, mode: str) -> StaticDecoder:
        """One `StaticDecoder` per mode and device, kept so that its buffers and compiled steps serve later calls."""
        key = (mode, self.device)
        if key not in self._static_decoders:
            self._static_decoders[key] = StaticDecoder(self.net, mode)
        return self._static_decoders[key]

    def _members(self, ensemble, alignment_layer: int | None) -> list:
        """This translator's network and those of `ensemble`; an `InputError` for an `alignment_layer` one lacks."""
        check_same_vocabularies([self, *ensemble])
        nets = [self.net, *(member.net for member in ensemble)]
        layers = min(net.config.num_decoder_layers for net in nets)
        if alignment_layer is not None and not -layers <= alignment_layer < layers:
            raise InputError(
                f"alignment layer {alignment_layer} is out of range: the model has {layers} decoder layers "
                f"(0 to {layers - 1}, or -{layers} to -1 from the last)"
            )
        return nets

    def _hypotheses(self, sentences: list[str], opts: DecodingOptions, ensemble, prefixes) -> list[list[Hypothesis]]:
        """The `opts.nbest` best hypotheses of each sentence, best first: by beam search (greedy with one beam), or
        `nbest` samples; with their alignments when `opts.alignment_layer` is set."""
        nets = self._members(ensemble, opts.alignment_layer)
        with evaluating(nets):
            src = self.encode_sources(sentences, opts.tgt_lang)
            limit = self.max_output_len(src, opts, nets)
            banned = (self.tgt_tokenizer.unk_id,) if opts.ban_unk else ()
            constraints = Constraints(opts.min_len, opts.no_repeat_ngram_size, banned, self._prefix_ids(prefixes))
            common = dict(length_penalty=opts.ranking_alpha, use_cache=opts.use_cache, constraints=constraints)
            if opts.sampling:
                generator = None if opts.seed is None else torch.Generator(src.device).manual_seed(opts.seed)
                hyps = sample(
                    nets,
                    src,
                    self.bos_id,
                    self.eos_id,
                    limit,
                    num_samples=opts.nbest,
                    temperature=opts.temperature,
                    top_k=opts.top_k,
                    top_p=opts.top_p,
                    generator=generator,
                    **common,
                )
            else:
                hyps = beam_search_nbest(
                    nets, src, self.bos_id, self.eos_id, limit, beam_size=opts.beam_size, nbest=opts.nbest, **common
                )
            if opts.alignment_layer is not None:
                flat = [(b, h) for b, row in enumerate(hyps) for h in row]
                rows = torch.tensor([b for b, _ in flat], device=src.device)
                tokens = [h.tokens for _, h in flat]
                for (_, h), pairs in zip(flat, align(nets, src[rows], tokens, self.bos_id, self.eos_id, opts.alignment_layer)):
                    h.alignment = pairs
        for row in hyps:
            for h in row:
                h.text = self.tgt_tokenizer.decode(h.tokens)
        return hyps

    def _prefix_ids(self, prefixes: list[str] | None) -> torch.Tensor | None:
        """(B, P) target ids each output must start with, -1 after a sentence's own prefix; None when there are none."""
        if prefixes is None:
            return None
        ids = [self.tgt_tokenizer.encode(p) if p and p.strip() else [] for p in prefixes]
        if not any(ids):
            return None
        return pad_sequences(ids, -1).to(self.device)

    # ---------------------------------------------------------------------------------- scoring

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
        nets = self._members(ensemble, alignment_layer)
        targets = [self.tgt_tokenizer.encode(r) for r in references]
        limit = min(net.max_len for net in nets)
        for i, t in enumerate(targets):
            if len(t) + 1 > limit - 1:
                raise InputError(f"reference {i} has {len(t)} tokens: more than the model's max_len={limit} allows")
        with evaluating(nets):
            src = self.encode_sources(sentences, tgt_lang)
            hyps = score_targets(nets, src, targets, self.bos_id, self.eos_id, length_penalty)
            if alignment_layer is not None:
                for h, pairs in zip(hyps, align(nets, src, [h.tokens for h in hyps], self.bos_id, self.eos_id, alignment_layer)):
                    h.alignment = pairs
        for h in hyps:
            h.text = self.tgt_tokenizer.decode(h.tokens)
        return hyps

    def attention_weights(self, sentence: str, layer: int = -1, tgt_lang=None) -> tuple[torch.Tensor, list[str], list[str]]:
        """Greedy-translate one sentence (into `tgt_lang`, else this translator's) and return the decoder's
        cross-attention over the source, averaged over heads, of `layer`: ((T, S) weights, source pieces, output pieces)."""
        self._members((), layer)
        with evaluating([self.net]):
            src = self.encode_sources([sentence], tgt_lang or self.options.tgt_lang)
            greedy = DecodingOptions.from_mapping(self.options.as_dict())  # the limits only: a plain greedy search
            out = self._best(src, greedy)[0].tolist()
            if self.eos_id in out:
                out = out[: out.index(self.eos_id) + 1]
            memory, src_pad = self.net.encode(src)
            tgt_in = torch.tensor([out[:-1] if len(out) > 1 else out], device=src.device)
            _, weights = self.net.decode(tgt_in, memory, src_pad, need_weights=True)
        w = weights[layer][0].float().mean(0).cpu()  # (T, S)
        return w, pieces(self.src_tokenizer, src[0].tolist()), pieces(self.tgt_tokenizer, out[1:])
