"""Decoding as functions over a network's `encode` and `decode`: what every search shares, and greedy search. Any module
with `encode(src) -> (memory, src_pad)`, `decode(tgt, memory, src_pad, cache) -> logits`, `new_cache()`, `pad_id` and
`max_len` can be decoded, or a list of them (an ensemble: `StepScorer`); the network knows nothing of decoding, so
nothing imports in a circle. The rules every search keeps here (the length limit, the forced `<eos>` and its log-prob,
no `<pad>` or `<bos>` generated): docs/guide/decoding.md; the other searches: docs/guide/layout.md."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from .seq2seq import Seq2SeqNet

NEG_INF = float("-inf")


def special_ids(pad_id: int, bos_id: int, device: torch.device) -> torch.Tensor:
    """The ids no search generates, `<pad>` and `<bos>`, as an index for `no_specials` (made once per search)."""
    return torch.tensor([pad_id, bos_id], device=device)


def no_specials(scores: torch.Tensor, specials: torch.Tensor) -> torch.Tensor:
    """(N, V) next-token logits or log-probs with `specials` at -inf. A new tensor: a captured step's output
    (models.static_cache) is left as it is."""
    return scores.index_fill(-1, specials, NEG_INF)


def only_eos(scores: torch.Tensor, eos_id: int) -> torch.Tensor:
    """(N, V) next-token scores with every token but `<eos>` at -inf: the step at the length limit, where `<eos>` is
    forced and keeps its own score (fairseq's rule). It overrides every constraint: the limit comes first."""
    out = torch.full_like(scores, NEG_INF)
    out[:, eos_id] = scores[:, eos_id]
    return out


class Limits:
    """Each sentence's most generated tokens (`max_len`: one for all, or one per sentence, `<eos>` included), within
    the networks' positions. A sentence's limit is its own, never its batch's, so that its output is what it would
    be decoded alone."""

    def __init__(self, max_len: int | Sequence[int], batch: int, cap: int, device: torch.device, repeat: int = 1):
        each = [max_len] * batch if isinstance(max_len, int) else [int(n) for n in max_len]
        if len(each) != batch:
            raise ValueError(f"{len(each)} length limits for {batch} sentences")
        self.each = [min(n, cap) for n in each]
        self.steps = max(self.each, default=0)  # the search runs this many steps at most
        self.last_steps = set(self.each)  # known on the host: a step no row ends at costs nothing
        self.of_row = torch.tensor(self.each, device=device).repeat_interleave(repeat)  # (B*repeat,)

    def ending(self, t: int, row_limits: torch.Tensor) -> torch.Tensor | None:
        """(N, 1) whether each row's limit (`row_limits`, (N,)) is step `t`; None when no sentence's is."""
        return row_limits.eq(t)[:, None] if t in self.last_steps else None


def limited(logp: torch.Tensor, ending: torch.Tensor | None, eos_id: int, constrain=None) -> torch.Tensor:
    """(N, V) next-token scores `constrain`ed (models.constraints, in place), with `<eos>` forced (`only_eos` of the
    unconstrained scores) on the rows `ending` marks: a limit overrides every constraint."""
    forced = None if ending is None else only_eos(logp, eos_id)
    logp = logp if constrain is None else constrain(logp)
    return logp if forced is None else torch.where(ending, forced, logp)


@torch.no_grad()
def greedy_decode(
    net: Seq2SeqNet, src: torch.Tensor, bos_id: int, eos_id: int, max_len: int | Sequence[int], use_cache: bool = True
) -> torch.Tensor:
    """(B, S) source ids → (B, ≤ max_len + 1) target ids starting with `<bos>`; each row ends with `<eos>` (forced
    as its `max_len`-th token where it came no sooner: one limit, or one per row) and is padded with `net.pad_id`
    after it. Stops when every row has ended. With `use_cache` each step feeds only the newest token and the
    decoder's key/value cache holds the rest. A row that has ended leaves the decoded batch (its memory and cache
    rows with it), unless the cache keeps its rows (a static cache's captured step has fixed shapes)."""
    scorer = StepScorer(net, src, use_cache=use_cache)
    limits = Limits(max_len, src.size(0), scorer.max_len - 1, src.device)
    return grow_rows(scorer, limits, bos_id, eos_id, lambda logp, finished: logp.argmax(dim=-1))[0]


def grow_rows(
    scorer: StepScorer,
    limits: Limits,
    bos_id: int,
    eos_id: int,
    pick: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],  # (N', V) log-probs, (N',) finished → (N',) ids
    constrain: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Every row of `scorer` grown by the token `pick` chooses from its next-token log-probs (`constrain`ed, given
    the rows' (N', t) prefixes and their indices, then `limited`) until it picks `<eos>`; a row that has ended
    leaves the batch (`StepScorer.keep`), or where it cannot (`can_drop_rows`) grows by padding. → (N, T) ids,
    `<bos>` first, and (N, T - 1) each token's log-prob (0 for padding)."""
    N, device, pad = limits.of_row.numel(), limits.of_row.device, scorer.pad_id
    ys = torch.full((N, 1), bos_id, dtype=torch.long, device=device)  # (N, t)
    tok = torch.zeros(N, 0, device=device)  # (N, t-1)
    rows = torch.arange(N, device=device)  # (N',) the rows still grown
    finished = torch.zeros(N, dtype=torch.bool, device=device)  # (N',)
    specials = special_ids(pad, bos_id, device)
    for t in range(1, limits.steps + 1):  # t = tokens generated after this step
        seqs = ys[rows]  # (N', t)
        logp = no_specials(scorer.log_probs(seqs), specials)
        rule = None if constrain is None else lambda x: constrain(x, seqs, rows)  # noqa: B023
        logp = limited(logp, limits.ending(t, limits.of_row[rows]), eos_id, rule)  # (N', V)
        picked = pick(logp, finished).masked_fill(finished, pad)  # (N',)
        next_token, token_logp = ys.new_full((N,), pad), logp.new_zeros(N)  # (N,), (N,)
        next_token[rows] = picked
        token_logp[rows] = logp.gather(1, picked[:, None])[:, 0].masked_fill(finished, 0.0)
        ys, tok = torch.cat([ys, next_token[:, None]], dim=1), torch.cat([tok.to(logp.dtype), token_logp[:, None]], dim=1)
        finished |= picked.eq(eos_id)
        n_finished = int(finished.sum())  # the step's one wait for the device
        if n_finished == len(finished):
            break
        if scorer.can_drop_rows and n_finished:
            left = finished.logical_not().nonzero()[:, 0]  # (N'',) of the N' rows
            rows, finished = rows[left], finished[left]
            scorer.keep(left)
    return ys, tok


def length_penalty_factor(length: int, alpha: float) -> float:
    """GNMT length penalty lp(length) = ((5 + length) / 6) ** alpha; 1 when alpha = 0."""
    return ((5.0 + length) / 6.0) ** alpha


@dataclass
class Hypothesis:
    """One output: its generated ids (`<eos>` included when it finished), the log-prob of each, and
    the ranking score sum(token_log_probs) / lp(len(tokens)). `alignment` holds (source, target)
    position pairs when asked for (`align`); `text` is for the caller to fill."""

    tokens: list[int]
    token_log_probs: list[float]
    score: float
    alignment: list[tuple[int, int]] | None = None
    text: str = ""

    @property
    def log_prob(self) -> float:
        """The raw sum of the token log-probs, `<eos>` included."""
        return float(sum(self.token_log_probs))


def hypothesis(tokens: list[int], log_probs: list[float], length_penalty: float) -> Hypothesis:
    return Hypothesis(tokens, log_probs, sum(log_probs) / length_penalty_factor(len(tokens), length_penalty))


def right_padded(rows: Sequence[list[int]], pad_id: int, device: torch.device) -> torch.Tensor:
    """(B, L) the ids of each row, right-padded with `pad_id` to the longest (L ≥ 1, all padding where every row is
    empty)."""
    out = torch.full((len(rows), max([1, *map(len, rows)])), pad_id, dtype=torch.long, device=device)
    for row, ids in zip(out, rows):
        row[: len(ids)] = torch.tensor(ids, dtype=torch.long)
    return out


def as_list(nets) -> list:
    return list(nets) if isinstance(nets, (list, tuple)) else [nets]


def log_softmax(logits: torch.Tensor) -> torch.Tensor:
    """Log-probs over the last dimension, in float32 at least (half-precision logits lose the small ones)."""
    return logits.log_softmax(-1, dtype=torch.promote_types(logits.dtype, torch.float32))


def ensemble_mean(log_probs: list[torch.Tensor]) -> torch.Tensor:
    """The models' log-probs → the log of their mean probability, logsumexp_m(log p_m) - log M (fairseq's rule)."""
    if len(log_probs) == 1:
        return log_probs[0]
    return torch.logsumexp(torch.stack(log_probs), dim=0) - math.log(len(log_probs))


class StepScorer:
    """The next-token log-probs of one network, or of an ensemble (`ensemble_mean`, fairseq's EnsembleModel). Each
    network encodes the source itself and keeps its own key/value cache; rows are repeated `repeat` times."""

    def __init__(self, nets, src: torch.Tensor, repeat: int = 1, use_cache: bool = True):
        self.nets = as_list(nets)
        self.pad_id = self.nets[0].pad_id
        self.states = []
        for net in self.nets:
            memory, src_pad = net.encode(src)  # (B, S, D), (B, S)
            # Row b*repeat + k is copy k of sentence b.
            memory, src_pad = memory.repeat_interleave(repeat, dim=0), src_pad.repeat_interleave(repeat, dim=0)
            self.states.append((memory, src_pad, net.new_cache() if use_cache else None))

    @property
    def max_len(self) -> int:
        return min(net.max_len for net in self.nets)

    def log_probs(self, prefix: torch.Tensor) -> torch.Tensor:
        """(N, t) target prefixes → (N, V) log-probs of the next token (float32 at least)."""
        outs = []
        for net, (memory, src_pad, cache) in zip(self.nets, self.states):
            step_input = prefix[:, -1:] if cache is not None else prefix  # the cache holds the rest
            logits = net.decode(step_input, memory, src_pad, cache)[:, -1]  # (N, V)
            outs.append(log_softmax(logits))
        return ensemble_mean(outs)

    def reorder(self, index: torch.Tensor) -> None:
        """Keep rows `index` of every cache (beam search: the beams that survive a step)."""
        for _, _, cache in self.states:
            if cache is not None:
                cache.reorder(index)

    @property
    def can_drop_rows(self) -> bool:
        """Whether `keep` may take fewer rows than there are (a static cache's captured step has fixed shapes)."""
        return all(cache is None or cache.can_drop_rows for _, _, cache in self.states)

    def keep(self, index: torch.Tensor) -> None:
        """Keep rows `index`, fewer than there are (finished sentences leave the batch): of every cache, memory
        and source padding mask."""
        self.states = [(m.index_select(0, index), p.index_select(0, index), c) for m, p, c in self.states]
        for _, _, cache in self.states:
            if cache is not None:
                cache.keep(index)
