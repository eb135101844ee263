"""Sampling (back-translation's outputs): each token drawn from the next-token distribution, over the networks of
models/decoding.py, with its temperature, top-k and nucleus (top-p) restrictions."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from .checks import SEARCH_CHECKS, check_hparams
from .constraints import Constraints
from .decoding import NEG_INF, Hypothesis, Limits, StepScorer, grow_rows, hypothesis

if TYPE_CHECKING:
    from .seq2seq import Seq2SeqNet


@torch.no_grad()
def sample(
    net: Seq2SeqNet | Sequence[Seq2SeqNet],
    src: torch.Tensor,  # (B, S)
    bos_id: int,
    eos_id: int,
    max_len: int | Sequence[int],
    num_samples: int = 1,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    generator: torch.Generator | None = None,
    length_penalty: float = 0.0,
    use_cache: bool = True,
    constraints: Constraints | None = None,
) -> list[list[Hypothesis]]:
    """`num_samples` outputs per sentence, each token drawn from the next-token distribution divided
    by `temperature`, restricted to its `top_k` most likely tokens (0: all) and to the smallest set
    of most likely tokens whose probability reaches `top_p` (nucleus sampling; 1: all). Each sample's
    score is the model's own log-prob of its tokens (at temperature 1, unrestricted), / lp(length):
    what `score_targets` gives it. `<eos>` ends each sample, forced as its `max_len`-th token where it came no
    sooner (models/decoding.py; one limit, or one per sentence). Best first."""
    drawn = {"temperature": temperature, "top_k": top_k, "top_p": top_p, "nbest": num_samples, "length_penalty": length_penalty}
    check_hparams("sample", drawn, SEARCH_CHECKS)
    scorer = StepScorer(net, src, num_samples, use_cache)
    limits = Limits(max_len, src.size(0), scorer.max_len - 1, src.device, repeat=num_samples)
    constraints = constraints or Constraints()
    prefix = constraints.rows(num_samples)  # (B*n, P) or None
    constrain = lambda logp, seqs, rows: constraints.apply(logp, seqs, eos_id, None if prefix is None else prefix[rows])

    def draw(logp: torch.Tensor, finished: torch.Tensor) -> torch.Tensor:  # (N, V), (N,) → (N,)
        logits = logp / temperature
        if top_k:
            kth = logits.topk(min(top_k, logits.size(-1)), dim=-1).values[:, -1:]  # (N, 1)
            logits = logits.masked_fill(logits < kth, NEG_INF)
        if top_p < 1:
            sorted_logits, order = logits.sort(dim=-1, descending=True)
            probs = sorted_logits.softmax(-1)
            outside = probs.cumsum(-1) - probs >= top_p  # the mass before a token already reaches top_p
            logits = logits.scatter(-1, order, sorted_logits.masked_fill(outside, NEG_INF))
        probs = logits.softmax(-1).masked_fill(finished[:, None], 0.0)
        probs[finished, scorer.pad_id] = 1.0  # rows that ended but stay (a cache that keeps its rows) draw padding
        return torch.multinomial(probs, 1, generator=generator)[:, 0]

    ys, tok = grow_rows(scorer, limits, bos_id, eos_id, draw, constrain)  # (B*n, T), (B*n, T-1)
    out = []
    for b in range(src.size(0)):
        hyps = []
        for row in range(b * num_samples, (b + 1) * num_samples):
            tokens = ys[row, 1:].tolist()
            length = tokens.index(eos_id) + 1 if eos_id in tokens else len(tokens)
            hyps.append(hypothesis(tokens[:length], tok[row, :length].tolist(), length_penalty))
        out.append(sorted(hyps, key=lambda h: -h.score))
    return out
