"""Paired significance tests between systems' outputs of one test set, by sacrebleu's own implementation
(`sacrebleu.significance.PairedTest`), as plain data, for scripts/compare.py and scripts/ablate.py; what the
results hold, and the seed: docs/guide/scores.md, "Paired significance tests"."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Hashable, Iterable, Iterator, Mapping, Sequence

from common.errors import InputError

METRICS = ("bleu", "chrf")
DEFAULT_SEED = 12345  # sacrebleu's own (significance.PairedTest, when SACREBLEU_SEED is not set)
DEFAULT_BS_N, DEFAULT_AR_N = 1000, 10000  # sacrebleu's --paired-bs-n and --paired-ar-n


@contextlib.contextmanager
def _sacrebleu_seed(seed: int) -> Iterator[None]:
    before = os.environ.get("SACREBLEU_SEED")
    os.environ["SACREBLEU_SEED"] = str(seed)
    try:
        yield
    finally:
        if before is None:
            del os.environ["SACREBLEU_SEED"]
        else:
            os.environ["SACREBLEU_SEED"] = before


def _metrics(names: Sequence[str], refs: list[str], tokenize: str) -> dict:
    """sacrebleu's metric objects, the references' statistics cached in them, as sacrebleu's command line makes them."""
    from sacrebleu.metrics import BLEU, CHRF

    # chrF: sacrebleu's default (character 6-grams, beta 2, no word n-grams), as tasks/metrics.py scores it.
    made = {"bleu": lambda: BLEU(tokenize=tokenize, references=[refs]), "chrf": lambda: CHRF(references=[refs])}
    return {name: made[name]() for name in names}


def _paired(kind: str, systems: list, refs: list[str], names: Sequence[str], tokenize: str, n: int, seed: int):
    """One PairedTest ("bs" or "ar") of every system against the first: ({our metric name: signature},
    {our metric name: [sacrebleu Result per system]})."""
    from sacrebleu.significance import PairedTest

    metrics = _metrics(names, refs, tokenize)
    with _sacrebleu_seed(seed):  # read by PairedTest as it is set up (the baseline's interval among it)
        test = PairedTest(systems, metrics, references=None, test_type=kind, n_samples=n)
        signatures, results = test()
    ours = {id(metric): name for name, metric in metrics.items()}
    theirs = {ours[id(metric)]: label for label, metric in test.metrics.items()}  # "chrf" → sacrebleu's "chrF2"
    return {name: signatures[theirs[name]].format() for name in names}, {name: results[theirs[name]] for name in names}


def paired_tests(
    systems: Sequence[tuple[str, Sequence[str]]],
    refs: Sequence[str],
    metrics: Sequence[str] = METRICS,
    tokenize: str = "13a",
    bs_n: int = DEFAULT_BS_N,
    ar_n: int | None = DEFAULT_AR_N,
    seed: int = DEFAULT_SEED,
) -> dict:
    """Every system of `systems` ((name, hypotheses), the baseline first) against the baseline, on one reference each
    (`refs`), by paired bootstrap resampling (`bs_n` resamples) and, unless `ar_n` is None, approximate randomisation
    (`ar_n` trials). Returns plain data (JSON; its layout: docs/guide/scores.md, "Paired significance tests")."""
    systems = [(str(name), list(hyps)) for name, hyps in systems]
    refs = list(refs)
    if len(systems) < 2:
        raise InputError(f"a paired test needs a baseline and at least one other system, got {len(systems)} system(s)")
    if unknown := [m for m in metrics if m not in METRICS]:
        raise InputError(f"unknown metric(s) {', '.join(unknown)}; known: {', '.join(METRICS)}")
    if seed < 1 or bs_n < 1 or (ar_n is not None and ar_n < 1):
        raise InputError(f"seed {seed}, {bs_n} resamples, {ar_n} trials: each must be at least 1 (sacrebleu takes 0 as none)")
    for name, hyps in systems:
        if len(hyps) != len(refs):
            raise InputError(f"{name} has {len(hyps)} lines but the references {len(refs)}")
    if not refs:
        raise InputError("no sentence to compare: the references are empty")
    signatures = {m: {} for m in metrics}
    by_test = {}
    for kind, n in (("bs", bs_n), ("ar", ar_n)):
        if n is not None:
            sigs, by_test[kind] = _paired(kind, systems, refs, metrics, tokenize, n, seed)
            for m in metrics:
                signatures[m][kind] = sigs[m]
    rows = []
    for i, (name, _) in enumerate(systems):
        row: dict = {"name": name, "baseline": i == 0}
        for m in metrics:
            bs = by_test["bs"][m][i]
            cell = {"score": bs.score, "mean": _plain(bs.mean), "ci": _plain(bs.ci)}
            if i:
                cell["delta"] = bs.score - by_test["bs"][m][0].score
                cell["p_bs"] = bs.p_value
                cell["p_ar"] = by_test["ar"][m][i].p_value if "ar" in by_test else None
            row[m] = cell
        rows.append(row)
    return {
        "seed": seed,
        "paired_bs_n": bs_n,
        "paired_ar_n": ar_n,
        "tokenize": tokenize,
        "signatures": signatures,
        "systems": rows,
    }


def pooled(runs: Iterable[Sequence[str]]) -> list[str]:
    """Several runs' lines as one test set, run after run: the i-th run of each system then faces the baseline's
    i-th, sentence by sentence, when both are pooled in the same order."""
    return [line for run in runs for line in run]


def pooled_bootstrap(
    baseline: Mapping[Hashable, tuple[list[str], list[str]]],
    system: Mapping[Hashable, tuple[list[str], list[str]]],
    tokenize: str = "13a",
    bs_n: int = DEFAULT_BS_N,
    seed: int = DEFAULT_SEED,
) -> dict | None:
    """A system against the baseline over several runs of each (scripts/ablate.py's seeds), {key: (hypotheses,
    references)} each, pooled over the keys both have with the same references, by the paired bootstrap on BLEU:
    {"delta", "p_bs", "keys", "signature"}; None without such a key (docs/guide/scores.md)."""
    keys = [k for k in system if k in baseline and baseline[k][1] == system[k][1]]
    if not keys:
        return None
    hyps = [pooled(runs[k][0] for k in keys) for runs in (baseline, system)]
    refs = pooled(baseline[k][1] for k in keys)
    test = paired_tests([("baseline", hyps[0]), ("system", hyps[1])], refs, ["bleu"], tokenize, bs_n, None, seed)
    bleu = test["systems"][1]["bleu"]
    return {"delta": bleu["delta"], "p_bs": bleu["p_bs"], "keys": keys, "signature": test["signatures"]["bleu"]["bs"]}


def significant(cell: dict, level: float = 0.05) -> bool:
    """Whether a system's difference to the baseline (a `paired_tests` cell, or `pooled_bootstrap`'s result) is
    significant at `level` by the paired bootstrap: p below it, and a difference that is not 0 (see the docstring)."""
    return cell["p_bs"] < level and cell["delta"] != 0


def _plain(value) -> float | None:
    """A numpy float (sacrebleu's bootstrap means) as a float, for JSON."""
    return None if value is None else float(value)
