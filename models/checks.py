"""Hyperparameter checks that every module runs first thing in `__init__`, one short line per mistake:

    check_hparams(self, locals(), {"d_model": at_least(1), "dropout": fraction}, divisible("d_model", "nhead"))

Each entry checks one argument (None, an unset optional one, passes); the relations after it run only once every
argument is valid, so a bad value is reported as itself, not as a ZeroDivisionError. All problems make one
`HyperparameterError`: "Seq2SeqTransformer: d_model=30 must be divisible by nhead=4"."""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Mapping
from numbers import Real
from typing import Any

from common.errors import HyperparameterError

Check = Callable[[Any], "str | None"]  # a value → what is wrong with it, or None
Relation = Callable[[Mapping[str, Any]], "str | bool | None"]  # all values → what is wrong, or True/None


def check_hparams(
    owner: object,
    values: Mapping[str, Any],
    checks: Mapping[str, Check],
    *relations: Relation,
    error: type[ValueError] = HyperparameterError,
) -> None:
    """Raise one `error` naming `owner` (a class name, or an object whose class names it) and every argument of
    `values` that fails its entry of `checks`, then every failing relation. The default, `HyperparameterError`,
    is a module's; input to `translate` (inference.options) is an `InputError`."""
    name = owner if isinstance(owner, str) else type(owner).__name__
    problems = []
    for arg, check in checks.items():
        value = values.get(arg)
        if value is not None and (problem := check(value)):
            problems.append(f"{arg}={value!r} {problem}")
    if not problems:
        problems = [r for r in (relation(values) for relation in relations) if isinstance(r, str)]
    if problems:
        raise error(f"{name}: {'; '.join(problems)}")


def _number(value: Any) -> bool:
    return isinstance(value, Real) and not isinstance(value, bool)


def at_least(low: float) -> Check:
    """A number ≥ `low` (sizes and counts: `at_least(1)`; rates and decays: `at_least(0)`)."""
    return lambda v: "must be a number" if not _number(v) else None if v >= low else f"must be at least {low}"


def above(low: float) -> Check:
    """A number > `low` (a learning rate: `above(0)`)."""
    return lambda v: "must be a number" if not _number(v) else None if v > low else f"must be above {low}"


def fraction(value: Any) -> str | None:
    """A number in [0, 1) (dropout, label smoothing, a held-out fraction), or a tuple of them (Adam's betas)."""
    values = value if isinstance(value, (tuple, list)) else (value,)
    return None if all(_number(v) and 0 <= v < 1 for v in values) else "must lie in [0, 1)"


def one_of(options: Collection[str]) -> Check:
    def check(v):
        return None if v in options else f"must be one of {', '.join(map(repr, options))}"

    check.options = options  # read at each use (a table's entry added later too): what a generated test or doc lists
    return check


def boolean(value: Any) -> str | None:
    return None if isinstance(value, bool) else "must be true or false"


def divisible(a: str, b: str) -> Relation:
    """`values[a]` a multiple of `values[b]` (d_model and nhead: each head gets d_model / nhead dimensions).
    Passes when either is None (an unset optional argument, e.g. num_kv_heads)."""
    return lambda h: h[a] is None or h[b] is None or h[a] % h[b] == 0 or f"{a}={h[a]} must be divisible by {b}={h[b]}"


def no_more_than(a: str, b: str) -> Relation:
    """`values[a]` ≤ `values[b]` (max_len and max_tokens: one pair must fit a batch)."""
    return lambda h: h[a] <= h[b] or f"{b}={h[b]} must be at least {a}={h[a]}"


# The optimiser's settings, shared by the task modules (a network's own are checked by its config, models/config.py).
OPTIMISER = {"lr": above(0), "weight_decay": at_least(0), "label_smoothing": fraction}


def finite_at_least(low: float) -> Check:
    """A finite number ≥ `low` (a length penalty: `finite_at_least(0)`; NaN and infinity are refused)."""
    return lambda v: None if _number(v) and low <= v < math.inf else f"must be at least {low} and finite"


def finite_above(low: float) -> Check:
    """A finite number > `low` (a sampling temperature: `finite_above(0)`)."""
    return lambda v: None if _number(v) and low < v < math.inf else f"must be above {low} and finite"


def probability_mass(value: Any) -> str | None:
    """A number in (0, 1] (nucleus sampling's top-p)."""
    return None if _number(value) and 0 < value <= 1 else "must be in (0, 1]"


def integer(value: Any) -> str | None:
    return None if isinstance(value, int) and not isinstance(value, bool) else "must be an integer"


# ---------------------------------------------------------------------------------------------- the searches'
# Here, without torch, so that a script's decoding flags are checked before torch loads (inference/options.py).

# What the searches' arguments may hold, written once: each search (models/decoding.py, beam.py, sampling.py)
# checks its own, and inference.options.DecodingOptions, the options a user gives, takes these entries as its own.
SEARCH_CHECKS = {
    "beam_size": at_least(1),
    "nbest": at_least(1),
    "length_penalty": finite_at_least(0),
    "temperature": finite_above(0),
    "top_k": at_least(0),
    "top_p": probability_mass,
    "min_len": at_least(0),
    "no_repeat_ngram_size": at_least(0),
}
STATIC_CACHE_MODES = ("eager", "compile", "cuda-graph")  # how models/static_cache.py runs its decode step


def nbest_fits_the_beam(h) -> str | bool:
    """A beam holds at most `beam_size` hypotheses (samples are drawn as many as asked)."""
    return (
        h.get("sampling")
        or h["nbest"] <= h["beam_size"]
        or f"nbest={h['nbest']} is larger than beam_size={h['beam_size']}: a beam holds at most beam_size hypotheses"
    )
