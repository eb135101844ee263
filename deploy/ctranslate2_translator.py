"""`CTranslate2Translator`: translate with a model written by deploy/ctranslate2.py, as `inference.Translator` does.

Our tokenizers read and write the text around a `ctranslate2.Translator`, with our `DecodingOptions`. What each
option becomes there, what is refused, and why the "exact" search gives our search's N best and scores:
docs/guide/decoding.md, "CTranslate2's exact search".
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from common.errors import InputError
from datamodules.languages import target_languages
from datamodules.tokenizers import tokenizer_from_dict
from inference.calls import TranslateMany
from inference.options import CT2_PATIENCE, CT2_SEARCHES, DecodingOptions
from models.decoding import Hypothesis, length_penalty_factor

from .ctranslate2 import TOKENIZERS_FILE, ExportError, _ctranslate2, vocabulary


class CTranslate2Translator(TranslateMany):
    """Translate text with an exported model. `compute_type` is CTranslate2's ("default" runs the weights as
    exported, "int8", "float32", ...); the default `options` are the exported model's decoding defaults (length
    penalty, max_len_a × source + max_len_b), as `inference.Translator`'s are a checkpoint's."""

    def __init__(
        self,
        model_dir: str | Path,
        device: str = "cpu",
        compute_type: str = "default",
        threads: int = 0,
        search: str = CT2_SEARCHES[0],
        patience: float = CT2_PATIENCE,
    ):
        if search not in CT2_SEARCHES or not (isinstance(patience, (int, float)) and patience >= 1):
            raise InputError(f"search={search!r}, patience={patience!r}: the search is one of {', '.join(CT2_SEARCHES)}, "
                             "the patience a number ≥ 1")  # fmt: skip
        self.search, self.patience = search, float(patience)
        ctranslate2 = _ctranslate2()
        model_dir = Path(model_dir)
        meta_path = model_dir / TOKENIZERS_FILE
        if not (model_dir / "model.bin").is_file() or not meta_path.is_file():
            raise ExportError(f"{model_dir} is not a model written by scripts/export.py (no model.bin or {TOKENIZERS_FILE})")
        try:
            self.meta = json.loads(meta_path.read_text(encoding="utf-8"))
            self.meta["tokenizers"]["src"], self.meta["tokenizers"]["tgt"]  # noqa: B018 (present, or KeyError)
        except (ValueError, KeyError, TypeError) as err:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
            raise ExportError(f"{meta_path} is damaged ({type(err).__name__}: {err}); export the model again") from None
        # Exports before the decoding options had their defaults at the top level.
        self.options = DecodingOptions.from_mapping(self.meta.get("decoding", self.meta))
        self.src_tokenizer = tokenizer_from_dict(self.meta["tokenizers"]["src"])
        self.tgt_tokenizer = tokenizer_from_dict(self.meta["tokenizers"]["tgt"])
        self.src_vocab, self.tgt_vocab = vocabulary(self.src_tokenizer), vocabulary(self.tgt_tokenizer)
        self.languages = target_languages(self.src_tokenizer)  # a multilingual model's, as inference.Translator's
        self.tgt_index = {tok: i for i, tok in enumerate(self.tgt_vocab)}
        self.eos_id = self.tgt_tokenizer.eos_id
        specials = (self.tgt_tokenizer.pad_id, self.tgt_tokenizer.bos_id)  # one id in Marian's vocabulary
        self.banned = [[self.tgt_vocab[i]] for i in dict.fromkeys(specials)]  # never generated (models.decoding.no_specials)
        threads = threads or int(os.environ.get("OMP_NUM_THREADS", "0") or 0)
        self._options = dict(device=device, compute_type=compute_type, inter_threads=1, intra_threads=threads)
        self._model_dir, self._seed = model_dir, None
        try:
            self.translator = ctranslate2.Translator(str(model_dir), **self._options)
        except RuntimeError as err:  # a truncated or damaged model.bin ("... has an invalid payload size"), a bad device
            first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise ExportError(f"{model_dir}: CTranslate2 cannot load it on {device} ({first})") from None

    def source_tokens(self, sentences: list[str], tgt_lang: str | None = None) -> list[list[str]]:
        """Each sentence's source tokens (`source_ids`, in the exported model's `max_len`)."""
        return [[self.src_vocab[i] for i in ids] for ids in self.source_ids(sentences, tgt_lang, self.meta["max_len"])]

    # ---------------------------------------------------------------------------------- the search

    def translate_batch_options(self, limit: int, options: DecodingOptions, prefixes=None) -> dict:
        """Our decoding options as CTranslate2's `translate_batch` arguments for sources whose output `limit` is one,
        the one place they are mapped; an `InputError` for what CTranslate2 cannot do as we do. The search runs one
        token short of the limit (`_search` appends the last `<eos>`)."""
        self._one_model((), options.alignment_layer)
        if options.static_cache is not None or not options.use_cache:
            raise InputError("CTranslate2 decodes with its own cache: static_cache and use_cache are this project's engine's")
        beam = 1 if options.sampling else options.beam_size
        if beam > 1 and prefixes is not None and any(p.strip() for p in prefixes):
            raise InputError("CTranslate2's beam search scores a forced prefix its own way: use --beam-size 1 or --engine torch")
        banning = [flag for flag, on in (("--min-len", options.min_len), ("--no-repeat-ngram-size", options.no_repeat_ngram_size),
                                         ("--ban-unk", options.ban_unk)) if on]  # fmt: skip
        if beam > 1 and banning:
            raise InputError(
                f"CTranslate2's beam search renormalises what {', '.join(banning)} bans and so ranks other hypotheses: "
                "use --beam-size 1 or --engine torch"
            )
        steps = limit - 1
        # Exact: a patience no count of finished hypotheses reaches (at most `beam` a step), so all are kept to the
        # limit; fast: all beam × patience finished are returned. We rank them either way (docs/guide/decoding.md).
        patience = (steps + 1 if self.search == "exact" else self.patience) if beam > 1 else 1
        mapped = dict(
            beam_size=beam,
            patience=patience,
            num_hypotheses=max(options.nbest, round(beam * patience)) if beam > 1 else options.nbest,
            length_penalty=1.0,
            max_decoding_length=steps,
            # Our minimum (0 unless asked): CTranslate2's default, 1, would never let an output end at once.
            min_decoding_length=min(options.min_len, steps),  # tokens before the end token, as ours
            no_repeat_ngram_size=options.no_repeat_ngram_size,
            disable_unk=options.ban_unk,
            suppress_sequences=self.banned,
            return_end_token=True,
            max_input_length=0,
        )
        if options.sampling:
            self._reseed(options.seed)
            mapped.update(sampling_topk=options.top_k, sampling_topp=options.top_p, sampling_temperature=options.temperature)
        if prefixes is not None:
            encoded = [self.tgt_tokenizer.encode(p) if p.strip() else None for p in prefixes]
            mapped["target_prefix"] = [None if ids is None else [self.tgt_vocab[i] for i in ids] for ids in encoded]
        return mapped

    def _search(self, sources: list[list[str]], options: DecodingOptions, prefixes=None) -> list[list[tuple[list[int], float]]]:
        """Each source's outputs as (ids ending in `<eos>`, CTranslate2's sum of their log-probs before the appended
        `<eos>`), each source under its own length limit (docs/guide/decoding.md, "The length limit", says how)."""
        limits = options.output_limits([len(s) for s in sources], self.meta["max_len"] - 1)  # as inference.Translator's
        found: list = [None] * len(sources)
        todo, longest = list(range(len(sources))), max(limits, default=0)
        if not options.sampling and (self.search == "fast" or options.beam_size == 1) and len(set(limits)) > 1:
            self._search_group(sources, todo, longest, options, prefixes, found)
            # A search that ended at step t returns an output of t + 1 tokens; the last step under a limit L is L - 2.
            todo = [i for i in todo if limits[i] < longest and max(len(ids) for ids, _ in found[i]) >= limits[i] - 1]
        for limit in sorted({limits[i] for i in todo}):
            self._search_group(sources, [i for i in todo if limits[i] == limit], limit, options, prefixes, found)
        return found

    def _search_group(self, sources, group: list[int], limit: int, options: DecodingOptions, prefixes, found: list) -> None:
        chosen_prefixes = None if prefixes is None else [prefixes[i] for i in group]
        mapped = self.translate_batch_options(limit, options, chosen_prefixes)
        if mapped["max_decoding_length"] < 1:  # a limit of one token: `<eos>`, forced
            for i in group:
                found[i] = [([self.eos_id], 0.0)]
            return
        results = self.translator.translate_batch([sources[i] for i in group], **mapped, return_scores=True)
        for i, r in zip(group, results):  # scores: sum / length (alpha 1)
            row = [([self.tgt_index[tok] for tok in hyp], score * len(hyp)) for hyp, score in zip(r.hypotheses, r.scores)]
            found[i] = [(ids if ids[-1:] == [self.eos_id] else [*ids, self.eos_id], total) for ids, total in row]

    def _reseed(self, seed: int | None) -> None:
        """CTranslate2's generators live in the translator's worker threads and take the seed when those start: a
        new seed needs a new translator. The same seed goes on drawing."""
        if seed is not None and seed != self._seed:
            _ctranslate2().set_random_seed(seed)
            self.translator = _ctranslate2().Translator(str(self._model_dir), **self._options)
            self._seed = seed

    # ---------------------------------------------------------------------------------- translation

    def translate_ids(self, sources: list[list[str]], options: DecodingOptions | None = None, **given) -> list[list[int]]:
        """Token lists (each ending in `<eos>`) → the best output's ids, `<eos>` last."""
        opts = self.options.for_call(None, None, sources, options, **given)
        return [row[0].tokens for row in self._hypotheses(sources, opts, scored=False)]

    def _translate(self, sentences: list[str], opts: DecodingOptions, scored: bool, ensemble, prefixes) -> list:
        """Each sentence's hypotheses, ranked and scored as ours (docs/guide/decoding.md)."""
        self._one_model(ensemble)
        return self._hypotheses(self.source_tokens(sentences, opts.tgt_lang), opts, prefixes, scored=scored)

    def _one_model(self, ensemble, alignment_layer=None) -> None:
        """What our engine alone does: ensembles and alignments, each an `InputError`."""
        if ensemble:
            raise InputError("CTranslate2 runs one model: an ensemble needs --engine torch")
        if alignment_layer is not None:
            raise InputError("CTranslate2 has no alignments (--print-alignment): use --engine torch")

    def _hypotheses(self, sources: list[list[str]], opts: DecodingOptions, prefixes=None, scored=True) -> list[list[Hypothesis]]:
        """The `opts.nbest` best outputs of each source, ranked by our score (`opts.ranking_alpha`), scored best
        CTranslate2 bound first until the N-th best beats every bound left (docs/guide/decoding.md). Where only texts
        are asked for (`scored` False), one output a source and the fast search's are not scored: their scores are
        those bounds, their token log-probs left empty."""
        alpha, n = opts.ranking_alpha, opts.nbest
        bound = lambda found: found[1] / length_penalty_factor(len(found[0]), alpha)  # noqa: E731
        todo = [sorted(row, key=lambda found: -bound(found)) for row in self._search(sources, opts, prefixes)]
        if not scored and (self.search == "fast" or all(len(row) <= 1 for row in todo)):
            text = self.tgt_tokenizer.decode
            return [[Hypothesis(list(ids), [], bound((ids, s)), text=text(ids)) for ids, s in row[:n]] for row in todo]
        hyps: list[list[Hypothesis]] = [[] for _ in sources]
        while True:
            chunk = []
            for b, row in enumerate(todo):
                kept = sorted((h.score for h in hyps[b]), reverse=True)
                if row and len(kept) >= n and kept[n - 1] > bound(row[0]) + 1e-4:  # 1e-4: above the floats' error
                    row.clear()
                chunk += [(b, ids) for ids, _ in row[:n]]
                del row[:n]
            if not chunk:
                break
            for (b, _), h in zip(chunk, self._score_ids([sources[b] for b, _ in chunk], [ids for _, ids in chunk], alpha)):
                hyps[b].append(h)
        # Stable: equal scores keep CTranslate2's order, as our search keeps the earlier of two.
        return [sorted(row, key=lambda h: -h.score)[:n] for row in hyps]

    # ---------------------------------------------------------------------------------- scoring

    def _score_ids(self, sources: list[list[str]], outputs: list[list[int]], alpha: float) -> list[Hypothesis]:
        """Our `Hypothesis` of each output (ids ending in `<eos>`): CTranslate2's teacher-forced log-prob of each
        token (`<eos>` is always scored last) and the score sum / lp(len) with `alpha`, as our search's."""
        targets = [[self.tgt_vocab[i] for i in ids[:-1]] for ids in outputs]
        results = self.translator.score_batch(sources, targets, max_input_length=0)
        hyps = []
        for ids, r in zip(outputs, results):
            log_probs = list(r.log_probs)
            score = sum(log_probs) / length_penalty_factor(len(ids), alpha)
            hyps.append(Hypothesis(list(ids), log_probs, score, text=self.tgt_tokenizer.decode(ids)))
        return hyps

    def _score(self, sentences, references, length_penalty, ensemble, alignment_layer, tgt_lang) -> list[Hypothesis]:
        """`score` by CTranslate2's `score_batch`."""
        self._one_model(ensemble, alignment_layer)
        targets = [[*self.tgt_tokenizer.encode(r), self.eos_id] for r in references]
        return self._score_ids(self.source_tokens(sentences, tgt_lang), targets, length_penalty)
