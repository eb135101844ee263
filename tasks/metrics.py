"""Corpus-level translation metrics from `sacrebleu` itself, wired once for the module and for scripts/evaluate.py, so
every score carries sacrebleu's signature (docs/guide/scores.md, "Scores")."""

from __future__ import annotations

import math
import unicodedata
from collections import Counter
from collections.abc import Mapping, Sequence

import torch
from sacrebleu.metrics import BLEU, CHRF
from torchmetrics import Metric

from datamodules.languages import parse_direction


def default_bleu_tokenize(refs: Sequence[str]) -> str:
    """SacreBLEU's tokenizer for these references: "zh" when they are mostly Chinese characters
    (13a would count a whole unsegmented sentence as one word), "13a" otherwise (WMT's default)."""
    letters = [c for ref in refs for c in ref if not c.isspace() and unicodedata.category(c)[0] == "L"]
    cjk = sum(1 for c in letters if "\u4e00" <= c <= "\u9fff" or "\u3400" <= c <= "\u4dbf")
    return "zh" if letters and cjk / len(letters) > 0.3 else "13a"


def corpus_scores(
    hyps: Sequence[str], refs: Sequence[str], tokenize: str | None = None, lowercase: bool = False
) -> dict[str, float | str]:
    """Corpus BLEU and chrF (0–100) of `hyps` against one reference each, with their signatures:
    {"bleu", "chrf", "bleu_signature", "chrf_signature"}. `tokenize` None picks 13a or zh from the references."""
    hyps, refs = list(hyps), list(refs)
    if len(hyps) != len(refs):
        raise ValueError(f"{len(hyps)} hypotheses but {len(refs)} references")
    if not all(isinstance(s, str) for s in hyps + refs):
        raise TypeError("hypotheses and references must be strings, one reference per hypothesis")
    bleu = BLEU(tokenize=tokenize or default_bleu_tokenize(refs), lowercase=lowercase)
    chrf = CHRF()  # sacrebleu's default chrF: character 6-grams, beta 2, no word n-grams (not chrF++)
    streams = [refs]  # one reference stream
    return {
        "bleu": bleu.corpus_score(hyps, streams).score,
        "chrf": chrf.corpus_score(hyps, streams).score,
        "bleu_signature": str(bleu.get_signature()),
        "chrf_signature": str(chrf.get_signature()),
    }


class LanguageIdentifier:
    """Which of a few languages a sentence is written in: naive Bayes over its character 1- to 3-grams (lowercased, with
    the sentence's edges as spaces), add-one smoothed from each language's example sentences; it tells a zero-shot
    direction's output in the wrong language from a poor translation (docs/guide/multilingual.md)."""

    ORDERS = (1, 2, 3)

    def __init__(self, examples: Mapping[str, Sequence[str]]):
        if len(examples) < 2 or not all(examples.values()):
            raise ValueError("a language identifier needs example sentences of at least two languages")
        counts = {lang: Counter(g for s in sentences for g in self.grams(s)) for lang, sentences in examples.items()}
        seen = len(set().union(*counts.values()))
        self.log_probs: dict[str, dict[str, float]] = {}
        self.unseen: dict[str, float] = {}
        for lang, grams in counts.items():
            total = sum(grams.values()) + seen + 1  # one more for every n-gram none of the examples holds
            self.log_probs[lang] = {g: math.log((c + 1) / total) for g, c in grams.items()}
            self.unseen[lang] = math.log(1 / total)

    @classmethod
    def grams(cls, sentence: str) -> list[str]:
        text = f" {' '.join(sentence.lower().split())} "
        return [text[i : i + n] for n in cls.ORDERS for i in range(len(text) - n + 1)]

    def identify(self, sentence: str) -> str | None:
        """The most likely language of `sentence`; None for an empty one."""
        grams = self.grams(sentence) if sentence.strip() else []
        if not grams:
            return None
        scores = {lang: sum(lp.get(g, self.unseen[lang]) for g in grams) for lang, lp in self.log_probs.items()}
        return max(scores, key=scores.get)

    def languages_of(self, sentences: Sequence[str]) -> Counter:
        """How many of `sentences` are identified as each language (None: empty)."""
        return Counter(self.identify(s) for s in sentences)


def on_target_percent(found: Counter, target: str) -> float:
    """The share of sentences identified as `target`, in percent (empty outputs count as off target)."""
    total = sum(found.values())
    return 100.0 * found.get(target, 0) / total if total else 0.0


class TokenMean(Metric):
    """The mean of a per-token quantity over every token of an epoch, on every process together:
    sum and count are summed across processes, so a batch weighs by its tokens, not as one mean among many."""

    full_state_update = False

    def __init__(self) -> None:
        super().__init__()
        self.add_state("total", torch.tensor(0.0), dist_reduce_fx="sum")
        self.add_state("count", torch.tensor(0.0), dist_reduce_fx="sum")

    def update(self, total: torch.Tensor, count: int) -> None:
        self.total += total.detach().float()
        self.count += count

    def compute(self) -> torch.Tensor:
        return self.total / self.count


def scores_by_set(stage: str, sets: Sequence, hyps: Sequence[str]) -> tuple[dict[str, float], list[str], dict[str, str]]:
    """BLEU and chrF of each evaluation set, and their mean over the sets that count in it (the names they are logged
    under: docs/guide/scores.md, "Scores"). `sets`: (name, [(source, reference), ...], in_mean) each, `hyps` every
    set's hypotheses in that order. Returns the values to log, a line a set and the first set's signatures."""
    values: dict[str, float] = {}
    lines: list[str] = []
    signatures: dict[str, str] = {}
    identifier = identifier_of_targets(sets)
    start = 0
    for name, pairs, in_mean in sets:
        set_hyps = hyps[start : start + len(pairs)]
        scores = corpus_scores(set_hyps, [r for _, r in pairs])
        start += len(pairs)
        tail = f"/{name}" if name else ""
        for metric in ("bleu", "chrf"):
            values[f"{stage}/{metric}{tail}"] = scores[metric]
            signatures.setdefault(f"{stage}/{metric}_signature", scores[f"{metric}_signature"])
        on_target = ""
        if identifier is not None:
            percent = on_target_percent(identifier.languages_of(set_hyps), parse_direction(name)[1])
            values[f"{stage}/on_target{tail}"] = percent
            on_target = f" {stage}/on_target{tail}={percent:.1f}%"
        note = "" if in_mean else ", not in the mean"
        lines.append(
            f"{stage}/bleu{tail}={scores['bleu']:.2f} {stage}/chrf{tail}={scores['chrf']:.2f}{on_target} "
            f"on {len(pairs)} sentences{note}"
        )
    counted = [name for name, _, in_mean in sets if in_mean and name]
    if counted:
        for metric in ("bleu", "chrf"):
            values[f"{stage}/{metric}"] = sum(values[f"{stage}/{metric}/{name}"] for name in counted) / len(counted)
        mean = f"{stage}/bleu={values[f'{stage}/bleu']:.2f} {stage}/chrf={values[f'{stage}/chrf']:.2f}"
        lines.insert(0, f"{mean}, the mean over {', '.join(counted)}")
    return values, lines, signatures


def identifier_of_targets(sets: Sequence) -> LanguageIdentifier | None:
    """A `LanguageIdentifier` of the named sets' target languages, from their references; None when there are
    fewer than two (a bilingual corpus, a many-to-one model)."""
    examples: dict[str, set[str]] = {}
    for name, pairs, _ in sets:
        if name:
            examples.setdefault(parse_direction(name)[1], set()).update(r for _, r in pairs)
    if len(examples) < 2:
        return None
    return LanguageIdentifier({lang: sorted(refs) for lang, refs in examples.items()})
