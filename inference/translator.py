"""`Translator`: inference for this project's translation networks, the one object a user holds.

It holds a network (`models.Seq2SeqNet`), its two tokenizers and its default `DecodingOptions` (a checkpoint's
length penalty and length limits), which a call's keywords replace. The searches are in models/; ensembles, forced
prefixes, alignments, attention weights and the static decoders (kept per mode and device) are here. Usage and what
each does: docs/guide/decoding.md; deploy/ctranslate2_translator.py offers the same calls over CTranslate2.
"""

from __future__ import annotations

from pathlib import Path

import torch

from common.errors import InputError
from datamodules.batching import pad_sequences
from datamodules.languages import target_languages
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
        options, batch_size = DecodingOptions.from_mapping(hp), hp.get("eval_batch_size", 64)
        return cls(module.net, module.src_tokenizer, module.tgt_tokenizer, options, batch_size)

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
        """Strings → (B, S) padded source ids on the network's device (`source_ids`, in the network's `max_len`)."""
        return pad_sequences(self.source_ids(sentences, tgt_lang, self.net.max_len), self.pad_id).to(self.device)

    def _translate(self, sentences: list[str], opts: DecodingOptions, scored: bool, ensemble, prefixes) -> list:
        """Each sentence's hypotheses (`_hypotheses`), or, for the plain search's best outputs, their texts."""
        if not scored and opts.plain and not ensemble and prefixes is None:
            with evaluating([self.net]):
                out = self._best(self.encode_sources(sentences, opts.tgt_lang), opts)
            return [self.tgt_tokenizer.decode(row.tolist()) for row in out]
        return self._hypotheses(sentences, opts, ensemble, prefixes)

    def max_output_len(self, src: torch.Tensor, opts: DecodingOptions | None = None, nets=None) -> list[int]:
        """Each sentence's most output tokens: `max_len`, else a·S + b of its own S source tokens (the (B, S) batch's
        non-padding), within every network's positions (`DecodingOptions.output_limits`)."""
        opts, nets = opts or self.options, nets or [self.net]
        return opts.output_limits(src.ne(self.pad_id).sum(1).tolist(), min(net.max_len for net in nets) - 1)

    def _best(self, src: torch.Tensor, opts: DecodingOptions) -> torch.Tensor:
        """(B, L) ids of each sentence's best output by greedy or beam search, `<bos>` first."""
        limit = self.max_output_len(src, opts)
        beam = dict(beam_size=opts.beam_size, length_penalty=opts.length_penalty)
        if opts.static_cache is not None:
            decoder = self.static_decoder(opts.static_cache)
            if opts.beam_size == 1:
                return decoder.greedy(src, self.bos_id, self.eos_id, limit)
            return decoder.beam(src, self.bos_id, self.eos_id, limit, **beam)
        if opts.beam_size == 1:
            return greedy_decode(self.net, src, self.bos_id, self.eos_id, limit, use_cache=opts.use_cache)
        return beam_search(self.net, src, self.bos_id, self.eos_id, limit, use_cache=opts.use_cache, **beam)

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
                drawn = dict(num_samples=opts.nbest, temperature=opts.temperature, top_k=opts.top_k, top_p=opts.top_p)
                hyps = sample(nets, src, self.bos_id, self.eos_id, limit, generator=generator, **drawn, **common)
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

    def _score(self, sentences, references, length_penalty, ensemble, alignment_layer, tgt_lang) -> list[Hypothesis]:
        """`score` by teacher forcing through this network and `ensemble`'s."""
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
