"""Given outputs through the networks of models/decoding.py: their teacher-forced scores (`score_targets`, what a
search's score of the same tokens is) and their hard alignments to the source (`align`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import torch

from .decoding import NEG_INF, Hypothesis, as_list, ensemble_mean, hypothesis, log_softmax, right_padded

if TYPE_CHECKING:
    from .seq2seq import Seq2SeqNet


@torch.no_grad()
def score_targets(
    net: Seq2SeqNet | Sequence[Seq2SeqNet],
    src: torch.Tensor,  # (B, S)
    targets: list[list[int]],  # B target ids, without <bos> and <eos>
    bos_id: int,
    eos_id: int,
    length_penalty: float = 0.0,
) -> list[Hypothesis]:
    """Teacher-forced scores of given targets: each token's log-prob, `<eos>` appended, and the
    score a search ranks by, sum / lp(len + 1). An ensemble averages as `StepScorer` does."""
    nets = as_list(net)
    tgt = right_padded([[bos_id, *ids, eos_id] for ids in targets], nets[0].pad_id, src.device)  # (B, T+1)
    # (B, T, V) each network's: right padding is hidden by the causal mask
    logp = ensemble_mean([log_softmax(net.decode(tgt[:, :-1], *net.encode(src))) for net in nets])
    tok = logp.gather(-1, tgt[:, 1:, None])[..., 0]  # (B, T)
    return [hypothesis([*ids, eos_id], tok[b, : len(ids) + 1].tolist(), length_penalty) for b, ids in enumerate(targets)]


@torch.no_grad()
def align(
    net: Seq2SeqNet | Sequence[Seq2SeqNet],
    src: torch.Tensor,  # (B, S)
    outputs: list[list[int]],  # B generated ids (<eos> included when finished)
    bos_id: int,
    eos_id: int,
    layer: int = -1,
) -> list[list[tuple[int, int]]]:
    """Hard alignments: for each output token j other than `<eos>`, the source token i (neither
    `<eos>` nor padding) that the decoder's cross-attention of `layer`, averaged over heads (and
    models), weighs most in the step that generated j; as (i, j) pairs, fairseq's order."""
    nets = as_list(net)
    pad = nets[0].pad_id
    tgt_in = right_padded([[bos_id, *ids][: len(ids)] for ids in outputs], pad, src.device)  # (B, T)
    weights = 0
    for net in nets:
        _, per_layer = net.decode(tgt_in, *net.encode(src), need_weights=True)
        weights = weights + per_layer[layer].float().mean(1)  # (B, T, S)
    hidden = src.eq(pad) | src.eq(eos_id)  # (B, S)
    best = weights.masked_fill(hidden[:, None], NEG_INF).argmax(-1)  # (B, T)
    out = []
    for b, ids in enumerate(outputs):
        n = len(ids) - (1 if ids and ids[-1] == eos_id else 0)
        out.append([(int(best[b, j]), j) for j in range(n)])
    return out
