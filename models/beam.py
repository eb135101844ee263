"""Batched beam search with n-best lists, over the networks of models/decoding.py: B sentences × K beams run as one
(B*K, ...) batch. docs/guide/decoding.md gives the score, the length limit and when a search ends, and ("How beam
search runs") each step, and why stopping a sentence early returns what running to `max_len` would."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from .checks import SEARCH_CHECKS, check_hparams, nbest_fits_the_beam
from .constraints import Constraints
from .decoding import (
    NEG_INF,
    Hypothesis,
    Limits,
    StepScorer,
    as_list,
    hypothesis,
    length_penalty_factor,
    limited,
    no_specials,
    right_padded,
    special_ids,
)

if TYPE_CHECKING:
    from .seq2seq import Seq2SeqNet


@torch.no_grad()
def beam_search(
    net: Seq2SeqNet | Sequence[Seq2SeqNet],
    src: torch.Tensor,  # (B, S) source ids, right-padded with net.pad_id
    bos_id: int,
    eos_id: int,
    max_len: int | Sequence[int],
    beam_size: int = 4,
    length_penalty: float = 1.0,
    use_cache: bool = True,
    constraints: Constraints | None = None,
) -> torch.Tensor:
    """→ (B, L) ids of each sentence's best hypothesis: `<bos>` ... `<eos>` (only `<bos>` where `max_len` is 0),
    right-padded with `net.pad_id`. `max_len` counts generated tokens (after `<bos>`, `<eos>` included), one for all
    or one per sentence, capped at the model's positions."""
    nbest = beam_search_nbest(net, src, bos_id, eos_id, max_len, beam_size, 1, length_penalty, use_cache, constraints)
    return right_padded([[bos_id, *hyps[0].tokens] for hyps in nbest], as_list(net)[0].pad_id, src.device)


@torch.no_grad()
def beam_search_nbest(
    net: Seq2SeqNet | Sequence[Seq2SeqNet],
    src: torch.Tensor,  # (B, S) source ids, right-padded with net.pad_id
    bos_id: int,
    eos_id: int,
    max_len: int | Sequence[int],
    beam_size: int = 4,
    nbest: int = 1,
    length_penalty: float = 1.0,
    use_cache: bool = True,
    constraints: Constraints | None = None,
) -> list[list[Hypothesis]]:
    """→ for each sentence its `nbest` best hypotheses, best first, each ending in `<eos>` (fewer than `nbest` only
    where fewer sequences exist within `max_len`; an empty one where `max_len` is 0)."""
    searched = {"beam_size": beam_size, "nbest": nbest, "length_penalty": length_penalty}
    check_hparams("beam_search", searched, SEARCH_CHECKS, nbest_fits_the_beam)
    scorer = StepScorer(net, src, beam_size, use_cache)
    B, K, N, device, pad = src.size(0), beam_size, nbest, src.device, scorer.pad_id
    limits = Limits(max_len, B, scorer.max_len - 1, device)
    limit = limits.of_row  # (B,) each sentence's own: its steps, its forced `<eos>`, its bound on a live score
    constraints = constraints or Constraints()
    prefix = constraints.rows(K)  # (B*K, P) or None
    batch = torch.arange(B, device=device)[:, None]  # (B, 1)
    specials = special_ids(pad, bos_id, device)

    live_seqs = torch.full((B, K, 1), bos_id, dtype=torch.long, device=device)  # (B, K, t)
    live_scores = torch.full((B, K), NEG_INF, device=device)  # (B, K) total log-probs
    live_scores[:, 0] = 0.0  # the K beams start identical: expand only the first one
    live_tok = torch.zeros(B, K, 0, device=device)  # (B, K, t-1) each token's log-prob
    fin_seqs = torch.full((B, N, 1), pad, dtype=torch.long, device=device)  # (B, N, t) best finished so far
    fin_tok = torch.zeros(B, N, 0, device=device)  # (B, N, t-1)
    fin_score = torch.full((B, N), NEG_INF, device=device)  # (B, N) penalised scores, best first
    fin_len = torch.zeros(B, N, dtype=torch.long, device=device)  # (B, N) lengths, incl. bos and eos
    # The largest lp a live beam of each sentence reaches: (B,)
    best_possible = torch.tensor([length_penalty_factor(n, length_penalty) for n in limits.each], device=device)
    ids, out = list(range(B)), [[] for _ in range(B)]  # ids[b]: row b's sentence; out: each sentence's n-best

    for t in range(1, limits.steps + 1):  # t = tokens generated after this step
        flat_seqs = live_seqs.view(B * K, t)
        logp = no_specials(scorer.log_probs(flat_seqs), specials)
        constrain = lambda x: constraints.apply(x, flat_seqs, eos_id, prefix)  # noqa: B023
        ending = limits.ending(t, limit)  # (B, 1) or None
        ending = None if ending is None else ending.repeat_interleave(K, dim=0)  # (B*K, 1)
        logp = limited(logp, ending, eos_id, constrain)  # (B*K, V)
        V = logp.size(-1)
        logp = logp.view(B, K, V)
        cand = live_scores.to(logp.dtype)[:, :, None] + logp  # (B, K, V)
        top, flat = cand.view(B, K * V).topk(min(2 * K, K * V), dim=1)  # (B, 2K), best first
        parent, token = flat // V, flat % V  # (B, 2K)
        cand_seqs = torch.cat([live_seqs[batch, parent], token[:, :, None]], dim=2)  # (B, 2K, t+1)
        cand_tok = torch.cat([live_tok.to(logp.dtype)[batch, parent], logp[batch, parent, token][:, :, None]], dim=2)
        is_eos = token.eq(eos_id)  # (B, 2K)

        # Finished: candidates ending in <eos> among the K best, merged with the N kept so far. A
        # stable sort keeps the earlier of two equal scores, as a strict comparison would.
        in_top_k = torch.arange(top.size(1), device=device) < K  # (2K,)
        new_fin = torch.where(is_eos & in_top_k, top / length_penalty_factor(t, length_penalty), NEG_INF)
        all_score = torch.cat([fin_score.to(new_fin.dtype), new_fin], dim=1)  # (B, N + 2K)
        all_seqs = torch.cat([torch.cat([fin_seqs, fin_seqs.new_full((B, N, 1), pad)], dim=2), cand_seqs], dim=1)
        grown_tok = torch.cat([fin_tok.to(logp.dtype), logp.new_zeros(B, N, 1)], dim=2)  # (B, N, t)
        all_tok = torch.cat([grown_tok, cand_tok], dim=1)  # (B, N + 2K, t)
        all_len = torch.cat([fin_len, fin_len.new_full(top.shape, t + 1)], dim=1)
        order = all_score.sort(dim=1, descending=True, stable=True).indices[:, :N]  # (B, N)
        fin_score, fin_len = all_score.gather(1, order), all_len.gather(1, order)
        fin_seqs, fin_tok = all_seqs[batch, order], all_tok[batch, order]

        # Live: the K best candidates that did not end in <eos>; before the last step, only those among the K best.
        not_live = is_eos | (~in_top_k & limit.eq(t + 1)[:, None]) if t + 1 in limits.last_steps else is_eos
        live_scores, keep = top.masked_fill(not_live, NEG_INF).topk(K, dim=1)  # (B, K)
        live_seqs, live_tok = cand_seqs[batch, keep], cand_tok[batch, keep]  # (B, K, t+1), (B, K, t)
        rows = batch * K + parent.gather(1, keep)  # (B, K) each surviving beam's row

        # Done: the N-th best finished hypothesis is at least the best any live one can become.
        done = fin_score[:, N - 1] >= live_scores[:, 0] / best_possible  # (B,)
        n_done = int(done.sum())  # the step's one wait for the device
        if n_done == B:
            break
        if n_done == 0 or not scorer.can_drop_rows:
            scorer.reorder(rows.view(-1))
            continue
        state = (live_seqs, live_tok, live_scores, fin_seqs, fin_tok, fin_score, fin_len)
        finished = done.nonzero()[:, 0].tolist()
        for b, hyps in zip(finished, _nbest(*state, finished, N, length_penalty)):
            out[ids[b]] = hyps
        alive = done.logical_not().nonzero()[:, 0]  # (B',) the sentences still searched
        live_seqs, live_tok, live_scores, fin_seqs, fin_tok, fin_score, fin_len = (x[alive] for x in state)
        limit, best_possible = limit[alive], best_possible[alive]
        ids, B = [ids[b] for b in alive.tolist()], alive.numel()
        batch = torch.arange(B, device=device)[:, None]  # (B', 1)
        scorer.keep(rows[alive].view(-1))  # their surviving beams (a beam's row holds its sentence's memory)
        prefix = None if prefix is None else prefix.index_select(0, rows[alive].view(-1))  # (B'*K, P)

    state = (live_seqs, live_tok, live_scores, fin_seqs, fin_tok, fin_score, fin_len)
    for b, hyps in enumerate(_nbest(*state, range(B), N, length_penalty)):
        out[ids[b]] = hyps
    return out


def _nbest(
    live_seqs: torch.Tensor,  # (B, K, t) `<bos>` first
    live_tok: torch.Tensor,  # (B, K, t-1)
    live_scores: torch.Tensor,  # (B, K) total log-probs, -inf for no beam
    fin_seqs: torch.Tensor,  # (B, N, t) `<pad>` first
    fin_tok: torch.Tensor,  # (B, N, t-1)
    fin_score: torch.Tensor,  # (B, N) penalised, best first
    fin_len: torch.Tensor,  # (B, N) lengths, incl. bos and eos
    which: Sequence[int],  # the sentences to return
    N: int,
    length_penalty: float,
) -> list[list[Hypothesis]]:
    """The N best finished hypotheses of each sentence in `which`; where fewer finished (`max_len` 0: none), its
    best live ones complete the list."""
    out = []
    fin_score, fin_len, live_scores = fin_score.tolist(), fin_len.tolist(), live_scores.tolist()
    for b in which:
        hyps = [
            Hypothesis(fin_seqs[b, i, 1 : fin_len[b][i]].tolist(), fin_tok[b, i, : fin_len[b][i] - 1].tolist(), fin_score[b][i])
            for i in range(N)
            if fin_score[b][i] > NEG_INF
        ]
        for k in range(live_seqs.size(1)):
            if len(hyps) == N or live_scores[b][k] == NEG_INF:
                break
            hyps.append(hypothesis(live_seqs[b, k, 1:].tolist(), live_tok[b, k].tolist(), length_penalty))
        out.append(hyps)
    return out
