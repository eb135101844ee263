"""Decoding as functions over a network's `encode` and `decode`: greedy search and batched beam
search. Any module with `encode(src) -> (memory, src_pad)`, `decode(tgt, memory, src_pad, cache)
-> logits`, `core.new_cache()`, `pad_id` and `max_len` can be decoded (`models.Seq2SeqNet` is
one); the network does not know about decoding, so nothing imports in a circle.

Beam search runs B sentences × K beams as one (B*K, ...) batch. Each step scores every one-token
extension of the K live hypotheses of every sentence by its total log-prob and takes the 2K best
candidates. Those ending in `<eos>` among the K best are finished, ranked with the GNMT length
penalty (Wu et al., 2016: score / ((5 + n) / 6) ** alpha, n = generated tokens including `<eos>`),
and the best of them is kept per sentence: it stays finished and only grows a padding column per
step. The K best candidates that do not end in `<eos>` stay live, so every sentence keeps K live
beams (2K candidates always hold K of them).

A sentence is done once its best finished hypothesis beats anything a live one can become:
log-probs are <= 0, so a live score can only fall, and with alpha >= 0 its penalised score is
at most score / lp(max_len). Later finished hypotheses can then never win, so stopping here
returns exactly what running to `max_len` would (waiting for K finished ones, as n-best lists
need, would only cost steps). The search stops when every sentence is done, or at `max_len`.

With beam_size=1 and length_penalty=0 beam search is exactly `greedy_decode`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from .seq2seq import Seq2SeqNet


@torch.no_grad()
def greedy_decode(
    net: Seq2SeqNet, src: torch.Tensor, bos_id: int, eos_id: int, max_len: int, use_cache: bool = True
) -> torch.Tensor:
    """(B, S) source ids → (B, ≤ max_len + 1) target ids starting with `<bos>`; each row is padded
    with `net.pad_id` after its `<eos>`. Stops when every row has emitted `<eos>`. With `use_cache`
    each step feeds only the newest token and the decoder's key/value cache holds the rest."""
    memory, src_pad = net.encode(src)
    B = src.size(0)
    max_len = min(max_len, net.max_len - 1)
    ys = torch.full((B, 1), bos_id, dtype=torch.long, device=src.device)
    finished = torch.zeros(B, dtype=torch.bool, device=src.device)
    cache = net.core.new_cache() if use_cache else None
    for _ in range(max_len):
        step_input = ys[:, -1:] if use_cache else ys
        logits = net.decode(step_input, memory, src_pad, cache)[:, -1]  # (B, V)
        next_token = logits.argmax(dim=-1).masked_fill(finished, net.pad_id)
        ys = torch.cat([ys, next_token[:, None]], dim=1)
        finished |= next_token.eq(eos_id)
        if finished.all():
            break
    return ys


def length_penalty_factor(length: int, alpha: float) -> float:
    """GNMT length penalty lp(length) = ((5 + length) / 6) ** alpha; 1 when alpha = 0."""
    return ((5.0 + length) / 6.0) ** alpha


@torch.no_grad()
def beam_search(
    net: Seq2SeqNet,
    src: torch.Tensor,  # (B, S) source ids, right-padded with net.pad_id
    bos_id: int,
    eos_id: int,
    max_len: int,
    beam_size: int = 4,
    length_penalty: float = 1.0,
    use_cache: bool = True,
) -> torch.Tensor:
    """→ (B, L) ids of each sentence's best hypothesis: `<bos>` ... `<eos>` (no `<eos>` only if
    `max_len` tokens were reached without finishing any), right-padded with `net.pad_id`.
    `max_len` counts generated tokens (after `<bos>`), capped at the model's positions."""
    if beam_size < 1:
        raise ValueError(f"beam_size must be >= 1, got {beam_size}")
    if length_penalty < 0:
        raise ValueError(f"length_penalty must be >= 0, got {length_penalty}")
    B, K, device, pad = src.size(0), beam_size, src.device, net.pad_id
    max_len = min(max_len, net.max_len - 1)
    neg_inf = float("-inf")

    memory, src_pad = net.encode(src)  # (B, S, D), (B, S)
    memory = memory.repeat_interleave(K, dim=0)  # (B*K, S, D): row b*K + k is beam k of sentence b
    src_pad = src_pad.repeat_interleave(K, dim=0)  # (B*K, S)
    cache = net.core.new_cache() if use_cache else None
    batch = torch.arange(B, device=device)[:, None]  # (B, 1)

    live_seqs = torch.full((B, K, 1), bos_id, dtype=torch.long, device=device)  # (B, K, t)
    live_scores = torch.full((B, K), neg_inf, device=device)  # (B, K) total log-probs
    live_scores[:, 0] = 0.0  # the K beams start identical: expand only the first one
    fin_seq = torch.full((B, 1), pad, dtype=torch.long, device=device)  # (B, t) best finished so far
    fin_score = torch.full((B,), neg_inf, device=device)  # (B,) its penalised score
    fin_len = torch.zeros(B, dtype=torch.long, device=device)  # (B,) its length, incl. bos and eos
    best_possible = length_penalty_factor(max_len, length_penalty)  # largest lp a live beam reaches

    for t in range(1, max_len + 1):  # t = tokens generated after this step
        step_input = live_seqs.view(B * K, t)
        if use_cache:
            step_input = step_input[:, -1:]  # the cache holds the rest of the prefix
        logits = net.decode(step_input, memory, src_pad, cache)[:, -1]  # (B*K, V)
        logp = logits.log_softmax(-1, dtype=torch.promote_types(logits.dtype, torch.float32))
        V = logp.size(-1)
        cand = live_scores.to(logp.dtype)[:, :, None] + logp.view(B, K, V)  # (B, K, V)
        top, flat = cand.view(B, K * V).topk(min(2 * K, K * V), dim=1)  # (B, 2K), best first
        parent, token = flat // V, flat % V  # (B, 2K)
        cand_seqs = torch.cat([live_seqs[batch, parent], token[:, :, None]], dim=2)  # (B, 2K, t+1)
        is_eos = token.eq(eos_id)  # (B, 2K)

        # Finished: candidates ending in <eos> among the K best; keep each sentence's best one.
        in_top_k = torch.arange(top.size(1), device=device) < K  # (2K,)
        new_fin = torch.where(is_eos & in_top_k, top / length_penalty_factor(t, length_penalty), neg_inf)
        new_score, new_index = new_fin.max(dim=1)  # (B,)
        better = new_score > fin_score.to(new_score.dtype)  # (B,)
        grown = torch.cat([fin_seq, fin_seq.new_full((B, 1), pad)], dim=1)  # (B, t+1) finished stay so
        fin_seq = torch.where(better[:, None], cand_seqs[batch[:, 0], new_index], grown)  # (B, t+1)
        fin_score = torch.where(better, new_score, fin_score)
        fin_len = torch.where(better, t + 1, fin_len)

        # Live: the K best candidates that did not end in <eos>.
        live_scores, keep = top.masked_fill(is_eos, neg_inf).topk(K, dim=1)  # (B, K)
        live_seqs = cand_seqs[batch, keep]  # (B, K, t+1)
        if cache is not None:
            cache.reorder((batch * K + parent.gather(1, keep)).view(-1))  # (B*K,) surviving rows

        # Done: the best finished hypothesis is at least the best any live one can become.
        if (fin_score >= live_scores[:, 0] / best_possible).all():
            break

    # The best finished hypothesis, or the best live one where none finished within max_len.
    has_fin = fin_score > neg_inf  # (B,)
    best = torch.where(has_fin[:, None], fin_seq, live_seqs[:, 0])  # (B, t+1)
    lengths = torch.where(has_fin, fin_len, live_seqs.size(2))  # (B,)
    return best[:, : int(lengths.max())]
