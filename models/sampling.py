"""Sampling (back-translation's outputs): each token drawn from the next-token distribution, over the networks of
models/decoding.py, with its temperature, top-k and nucleus (top-p) restrictions."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from .checks import SEARCH_CHECKS, check_hparams
from .constraints import Constraints
from .decoding import (
    NEG_INF,
    Hypothesis,
    Limits,
    StepScorer,
    as_list,
    hypothesis,
    limited,
    no_specials,
    special_ids,
)

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
    nets = as_list(net)
    B, n, device, pad = src.size(0), num_samples, src.device, nets[0].pad_id
    scorer = StepScorer(nets, src, n, use_cache)
    limits = Limits(max_len, B, scorer.max_len - 1, device, repeat=n)
    constraints = constraints or Constraints()
    prefix = constraints.rows(n)
    specials = special_ids(pad, bos_id, device)
    ys = torch.full((B * n, 1), bos_id, dtype=torch.long, device=device)  # (B*n, t)
    tok = torch.zeros(B * n, 0, device=device)  # (B*n, t-1) each token's log-prob
    rows = torch.arange(B * n, device=device)  # (N,) the rows still drawn
    finished = torch.zeros(B * n, dtype=torch.bool, device=device)  # (N,)
    can_drop_rows = scorer.can_drop_rows
    for t in range(1, limits.steps + 1):  # t = tokens generated after this step
        logp = no_specials(scorer.log_probs(ys[rows]), specials)
        row_prefix = None if prefix is None else prefix[rows]
        constrain = lambda x: constraints.apply(x, ys[rows], eos_id, row_prefix)  # noqa: B023
        logp = limited(logp, limits.ending(t, limits.of_row[rows]), eos_id, constrain)  # (N, V)
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
        probs[finished, pad] = 1.0  # rows that ended but stay (a cache that keeps its rows) draw padding
        drawn = torch.multinomial(probs, 1, generator=generator)[:, 0]  # (N,)
        next_token = ys.new_full((B * n,), pad)  # (B*n,)
        next_token[rows] = drawn
        token_logp = logp.new_zeros(B * n)  # (B*n,)
        token_logp[rows] = logp.gather(1, drawn[:, None])[:, 0].masked_fill(finished, 0.0)
        ys, tok = torch.cat([ys, next_token[:, None]], dim=1), torch.cat([tok.to(logp.dtype), token_logp[:, None]], dim=1)
        finished |= drawn.eq(eos_id)
        n_finished = int(finished.sum())
        if n_finished == len(finished):
            break
        if can_drop_rows and n_finished:
            left = finished.logical_not().nonzero()[:, 0]  # (N',) of the N rows
            rows, finished = rows[left], finished[left]
            scorer.keep(left)
    out = []
    for b in range(B):
        hyps = []
        for row in range(b * n, (b + 1) * n):
            tokens = ys[row, 1:].tolist()
            length = tokens.index(eos_id) + 1 if eos_id in tokens else len(tokens)
            hyps.append(hypothesis(tokens[:length], tok[row, :length].tolist(), length_penalty))
        out.append(sorted(hyps, key=lambda h: -h.score))
    return out
