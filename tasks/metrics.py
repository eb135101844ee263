"""Corpus-level translation metrics, wired once for the module and for scripts/evaluate.py.

SacreBLEU (torchmetrics' `SacreBLEUScore`, tokenize="13a", cased) and chrF (`CHRFScore`) on
detokenised strings: the hypotheses are the model's decoded output, the references the raw
sentences of the corpus file (never re-decoded from ids). Each hypothesis takes a LIST of
references; passing flat strings would make torchmetrics read every character of a reference as
a separate reference and score (almost) nothing, so `update_translation_metrics` does the wrapping.
Scores are reported on sacrebleu's 0–100 scale.
"""

from __future__ import annotations

from typing import Sequence

from torch import nn
from torchmetrics.text import CHRFScore, SacreBLEUScore


def translation_metrics() -> nn.ModuleDict:
    """Fresh metric objects {"bleu": SacreBLEU 13a cased, "chrf": chrF (char 6-grams, no word n-grams, beta 2: sacrebleu's default chrF, not chrF++)}."""
    return nn.ModuleDict({"bleu": SacreBLEUScore(tokenize="13a", lowercase=False), "chrf": CHRFScore(n_char_order=6, n_word_order=0, beta=2.0)})


def update_translation_metrics(metrics: nn.ModuleDict, hyps: Sequence[str], refs: Sequence[str]) -> None:
    """Add hypotheses and their single references (one reference string per hypothesis)."""
    hyps, refs = list(hyps), list(refs)
    if len(hyps) != len(refs):
        raise ValueError(f"{len(hyps)} hypotheses but {len(refs)} references")
    if not all(isinstance(s, str) for s in hyps + refs):
        raise TypeError("hypotheses and references must be strings")
    targets = [[r] for r in refs]  # one list of references per hypothesis
    for metric in metrics.values():
        metric.update(hyps, targets)


def compute_translation_metrics(metrics: nn.ModuleDict) -> dict[str, float]:
    """{"bleu": 0–100, "chrf": 0–100}."""
    return {name: 100.0 * float(metric.compute()) for name, metric in metrics.items()}


def corpus_scores(hyps: Sequence[str], refs: Sequence[str]) -> dict[str, float]:
    """Corpus SacreBLEU and chrF (0–100) of `hyps` against one reference each."""
    metrics = translation_metrics()
    update_translation_metrics(metrics, hyps, refs)
    return compute_translation_metrics(metrics)
