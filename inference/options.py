"""Decoding options: one frozen dataclass that checks itself (`replace` gives a new, checked object), read by both
engines and the scripts. Each option's name, default and check is written here once; docs/guide/decoding.md says
where they go (the scripts' flags, a checkpoint's and an export's defaults, CTranslate2's arguments).
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from common.errors import InputError
from datamodules.languages import language_check
from models.checks import (
    SEARCH_CHECKS,
    STATIC_CACHE_MODES,
    Check,
    Relation,
    at_least,
    boolean,
    check_hparams,
    finite_at_least,
    integer,
    nbest_fits_the_beam,
    one_of,
)

# The options a checkpoint (the task's hyperparameters) and an export carry: the model's own decoding defaults.
CHECKPOINT_DEFAULTS = ("length_penalty", "max_len_a", "max_len_b")
# CTranslate2's beam searches, the default first, and the fast one's patience (deploy/ctranslate2_translator.py says
# what each does; inference/flags.py offers them as --ct2-search and --ct2-patience).
CT2_SEARCHES, CT2_PATIENCE = ("fast", "exact"), 1.5
# Options that only sampling reads.
SAMPLING_ONLY = ("temperature", "top_k", "top_p", "seed")
# The engines' `translate` keywords beside the options (`ensemble`: this project's engine only).
TRANSLATE_KEYWORDS = ("nbest", "prefixes", "ensemble", "options")


def _option(default: Any, flag: str, help: str, **argparse: Any) -> Any:
    """A field with its command-line flag (fairseq's name) and help."""
    return field(default=default, metadata={"flag": flag, "help": help, **argparse})


def _sampling_options_need_sampling(h: Mapping[str, Any]) -> str | bool:
    unset = all(h[name] == DecodingOptions.default(name) for name in SAMPLING_ONLY)
    return h["sampling"] or unset or f"{', '.join(SAMPLING_ONLY[:-1])} and {SAMPLING_ONLY[-1]} apply to sampling only"


def _static_cache_is_plain_search(h: Mapping[str, Any]) -> str | bool:
    if h["static_cache"] is None:
        return True
    if not h["use_cache"]:
        return "static_cache is a key/value cache: it cannot be used with use_cache=False"
    tools = ("sampling", "min_len", "no_repeat_ngram_size", "ban_unk", "alignment_layer")
    used = [name for name in tools if h[name] not in (None, False, 0)] + ["nbest"] * (h["nbest"] > 1)
    return not used or f"static_cache decodes the plain greedy or beam search: not with {', '.join(used)}"


@dataclass(frozen=True, kw_only=True)
class DecodingOptions:
    """How to decode: the search, its limits and the decoding tools (models/decoding.py)."""

    beam_size: int = _option(1, "--beam-size", "beam width; 1 = greedy")
    nbest: int = _option(1, "--nbest", "the N best outputs (or N samples) of each input, best first")
    length_penalty: float = _option(1.0, "--length-penalty", "GNMT length penalty alpha of beam search")
    max_len: int | None = _option(None, "--max-len", "most output tokens (default: max_len_a x source length + max_len_b)")
    max_len_a: float = 1.5  # output tokens allowed per source token ...
    max_len_b: int = 10  # ... plus these (fairseq's --max-len-a/b; both a checkpoint's own)
    min_len: int = _option(0, "--min-len", "output tokens before <eos>, at least")
    no_repeat_ngram_size: int = _option(0, "--no-repeat-ngram-size", "no n-gram of this size twice in an output")
    ban_unk: bool = _option(False, "--ban-unk", "never generate <unk>")
    sampling: bool = _option(False, "--sampling", "sample outputs instead of searching (back-translation)")
    temperature: float = _option(1.0, "--temperature", "divides the logits before sampling")
    top_k: int = _option(0, "--sampling-topk", "sample among the K likeliest tokens, 0 for all")
    top_p: float = _option(1.0, "--sampling-topp", "sample in the nucleus of mass P, 0 < P <= 1, 1 for all")
    seed: int | None = _option(None, "--seed", "seed of the sampling", unset="unseeded")
    alignment_layer: int | None = _option(None, "--alignment-layer", "the decoder layer of --print-alignment (default: the last)")
    use_cache: bool = True  # a key/value cache (False: every step reruns the whole prefix, as a reference)
    tgt_lang: str | None = _option(
        None, "--tgt-lang", "the target language (fr; a multilingual model: its >>fr<< token starts each source)", type=str
    )
    static_cache: str | None = _option(
        None,
        "--static-cache",
        "decode with the preallocated key/value cache (models/static_cache.py): eager, compiled by torch.compile "
        "(CUDA graphs on a GPU), or captured in CUDA graphs directly (GPU only); the same outputs",
        choices=STATIC_CACHE_MODES,
    )

    CHECKS: ClassVar[Mapping[str, Check]] = {
        **SEARCH_CHECKS,  # the searches' own (models/checks.py)
        "max_len": at_least(1),
        "max_len_a": finite_at_least(0),
        "max_len_b": at_least(0),
        "ban_unk": boolean,
        "sampling": boolean,
        "seed": integer,
        "alignment_layer": integer,
        "use_cache": boolean,
        "static_cache": one_of(STATIC_CACHE_MODES),
        "tgt_lang": language_check,
    }
    RELATIONS: ClassVar[tuple[Relation, ...]] = (
        nbest_fits_the_beam,
        _sampling_options_need_sampling,
        _static_cache_is_plain_search,
    )

    def __post_init__(self) -> None:
        check_hparams(self, self.as_dict(), self.CHECKS, *self.RELATIONS, error=InputError)

    def as_dict(self) -> dict[str, Any]:
        """Every option by name: plain values, as a checkpoint or an export stores them."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    def output_limits(self, source_lengths: list[int], cap: int) -> list[int]:
        """Each sentence's most output tokens, `<eos>` included: `max_len`, else a·S + b of its own source's S tokens
        (fairseq's rule, per sentence, so that no output depends on its batch-mates), within `cap` (the positions
        left) and at least one (its `<eos>`) unless `cap` is 0. The one place both engines read it."""
        rule = lambda s: self.max_len if self.max_len is not None else int(self.max_len_a * s + self.max_len_b)  # noqa: E731
        return [max(min(rule(s), cap), min(1, cap)) for s in source_lengths]

    def replace(self, **changes: Any) -> DecodingOptions:
        """These options with `changes` (an unknown name is an `InputError`), checked again."""
        unknown = sorted(set(changes) - set(self.as_dict()))
        if unknown:
            raise InputError(f"no decoding option {', '.join(unknown)}; the options: {', '.join(self.as_dict())}")
        return dataclasses.replace(self, **changes)

    def for_call(
        self,
        nbest: int | None = None,
        prefixes: list | None = None,
        sentences: list | None = None,
        options: DecodingOptions | None = None,
        **given,
    ) -> DecodingOptions:
        """The options of a `translate` call on an engine whose defaults these are: its `options` (a whole
        `DecodingOptions`, used as it is), else these with its `given` options (None: the default); with its
        `nbest`. Checks that its `prefixes`, if any, are one per sentence; a keyword that is neither `translate`'s
        nor an option (`prefix=`) is one `InputError` naming the likeliest meant."""
        unknown = sorted(set(given) - set(self.as_dict()))
        if unknown:
            known = [*TRANSLATE_KEYWORDS, *self.as_dict()]
            close = difflib.get_close_matches(unknown[0], known, n=1)
            meant = f" (did you mean {close[0]}?)" if close else ""
            takes = f"it takes {', '.join(TRANSLATE_KEYWORDS)} and the decoding options {', '.join(self.as_dict())}"
            raise InputError(f"translate() takes no {', '.join(unknown)}{meant}; {takes}")
        if prefixes is not None and len(prefixes) != len(sentences):
            raise InputError(f"{len(prefixes)} prefixes for {len(sentences)} sentences: give one per sentence")
        given = {k: v for k, v in given.items() if v is not None}
        if options is not None:
            if given:
                raise InputError(f"translate() takes options= or option keywords, not both ({', '.join(given)} given too)")
            return options if nbest in (None, options.nbest) else options.replace(nbest=nbest)
        return self.replace(**given, **({"nbest": nbest} if nbest is not None else {}))

    @classmethod
    def default(cls, name: str) -> Any:
        return cls.__dataclass_fields__[name].default

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any], names: tuple[str, ...] = CHECKPOINT_DEFAULTS) -> DecodingOptions:
        """The options of `names` that `values` holds (a checkpoint's hyperparameters, an export's metadata), the
        other options at their defaults: what a model written before an option existed decodes with."""
        return cls(**{k: values[k] for k in names if k in values})

    @property
    def ranking_alpha(self) -> float:
        """The length penalty that scores rank by: this one for beam search, 0 for greedy search and sampling
        (which rank by the plain sum of log-probs)."""
        return 0.0 if self.beam_size == 1 or self.sampling else self.length_penalty

    @property
    def plain(self) -> bool:
        """The best output of a greedy or beam search, with none of the decoding tools."""
        return not (self.sampling or self.min_len or self.no_repeat_ngram_size or self.ban_unk or self.nbest > 1) and (
            self.alignment_layer is None
        )
