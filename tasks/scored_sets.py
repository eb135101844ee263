"""What a translation task scores at validation and test, and how it translates them under DDP: the data module's
sets (`scored_sets`) and each process's share of their sentences, gathered back in order (`translate_shared`)."""

from __future__ import annotations

import contextlib

import torch

from common.progress import translation_progress


def scored_sets(trainer, stage: str, limit: int | None = None) -> list[tuple[str, list[tuple[str, str]], bool]]:
    """(name, pairs, in the mean) of each set `stage` scores, its first `limit` sentences: a multilingual data
    module's directions (its `eval_sets`: tasks.metrics.scores_by_set), or one unnamed set of `{stage}_pairs()`.
    References are the data module's raw sentences, not ids decoded back to text, which would hand SacreBLEU the
    tokenizer's normalised text (NFKC, <unk>s, lost punctuation spacing); a data module with neither gets no BLEU."""
    datamodule = getattr(trainer, "datamodule", None)
    if callable(sets := getattr(datamodule, "eval_sets", None)):
        found = [(s.name, list(s.pairs), s.in_mean) for s in sets(stage)]
    else:
        found = [("", list(get()), True)] if callable(get := getattr(datamodule, f"{stage}_pairs", None)) else []
    return [(name, pairs[:limit], in_mean) for name, pairs, in_mean in found if pairs]


def translate_shared(module, sources: list[str], beam_size: int) -> list[str]:
    """`module.translate_many(sources)`, each process its share (every world_size-th sentence) under DDP; every
    process gets all hypotheses back in input order. The test's (a beam search, minutes) shows its progress as
    scripts/evaluate.py does: rank zero's share."""
    trainer, world = module.trainer, module.trainer.world_size
    distributed = world > 1 and torch.distributed.is_available() and torch.distributed.is_initialized()
    share = sources[trainer.global_rank :: world] if distributed else sources
    shown = trainer.testing and trainer.is_global_zero
    progress = translation_progress(share, module.translator.batch_size, "test: translating") if shown else None
    with progress or contextlib.nullcontext() as on_batch:
        hyps = module.translate_many(share, beam_size=beam_size, on_batch=on_batch)
    if not distributed:
        return hyps
    gathered: list[list[str] | None] = [None] * world
    torch.distributed.all_gather_object(gathered, hyps)
    ordered: list[str] = [""] * len(sources)
    for r, part in enumerate(gathered):
        ordered[r::world] = part
    return ordered
