"""Decoding as functions over a network's `encode` and `decode`: greedy search, batched beam search
with n-best lists, sampling, scoring given targets and alignments. Any module with `encode(src) ->
(memory, src_pad)`, `decode(tgt, memory, src_pad, cache) -> logits`, `new_cache()`, `pad_id`
and `max_len` can be decoded (`models.Seq2SeqNet` is one); the network does not know about
decoding, so nothing imports in a circle. Every search also takes a list of such networks, an
ensemble (`StepScorer`).

Beam search runs B sentences × K beams as one (B*K, ...) batch. Each step scores every one-token
extension of the K live hypotheses of every sentence by its total log-prob and takes the 2K best
candidates. Those ending in `<eos>` among the K best are finished, ranked with the GNMT length
penalty (Wu et al., 2016: score / ((5 + n) / 6) ** alpha, n = generated tokens including `<eos>`),
and the N best of them are kept per sentence (N = `nbest`, 1 for plain beam search): they stay
finished and only grow a padding column per step. The K best candidates that do not end in `<eos>`
stay live, so every sentence keeps K live beams (2K candidates always hold K of them).

A sentence is done once its N-th best finished hypothesis beats anything a live one can become:
log-probs are <= 0, so a live score can only fall, and with alpha >= 0 its penalised score is
at most score / lp(max_len). Later finished hypotheses can then never enter the N best, so
stopping here returns exactly what running to `max_len` would. The search stops when every
sentence is done, or at `max_len`.

With beam_size=1 and length_penalty=0 beam search is exactly `greedy_decode`.

No search ever generates `<pad>` or `<bos>` (`no_specials`): neither is text, a start token inside an
output would hide an invisible token in its text (one text, two scores in an n-best list), and Marian's
decoder starts from `<pad>` (fairseq and `transformers` ban them likewise).

Constraints (`Constraints`) mask next-token log-probs to -inf without renormalising: a hypothesis's
score stays the model's own log-probability of its tokens, so scoring an output as a given target
(`score_targets`) gives its search score back, forced prefixes included.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from .checks import at_least, check_hparams, finite_above, finite_at_least, probability_mass

if TYPE_CHECKING:
    from .seq2seq import Seq2SeqNet

NEG_INF = float("-inf")

# What the searches' arguments may hold (models.checks), written once: each search checks its own, and
# inference.options.DecodingOptions, the options a user gives, takes these entries as its own.
SEARCH_CHECKS = {
    "beam_size": at_least(1),
    "nbest": at_least(1),
    "length_penalty": finite_at_least(0),
    "temperature": finite_above(0),
    "top_k": at_least(0),
    "top_p": probability_mass,
    "min_len": at_least(0),
    "no_repeat_ngram_size": at_least(0),
}


def nbest_fits_the_beam(h) -> str | bool:
    """A beam holds at most `beam_size` hypotheses (samples are drawn as many as asked)."""
    return (
        h.get("sampling")
        or h["nbest"] <= h["beam_size"]
        or f"nbest={h['nbest']} is larger than beam_size={h['beam_size']}: a beam holds at most beam_size hypotheses"
    )


def special_ids(pad_id: int, bos_id: int, device: torch.device) -> torch.Tensor:
    """The ids no search generates, `<pad>` and `<bos>`, as an index for `no_specials` (made once per search)."""
    return torch.tensor([pad_id, bos_id], device=device)


def no_specials(scores: torch.Tensor, specials: torch.Tensor) -> torch.Tensor:
    """(N, V) next-token logits or log-probs with `specials` at -inf. A new tensor: a captured step's output
    (models.static_cache) is left as it is."""
    return scores.index_fill(-1, specials, NEG_INF)


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
    cache = net.new_cache() if use_cache else None
    specials = special_ids(net.pad_id, bos_id, src.device)
    for _ in range(max_len):
        step_input = ys[:, -1:] if use_cache else ys
        logits = no_specials(net.decode(step_input, memory, src_pad, cache)[:, -1], specials)  # (B, V)
        next_token = logits.argmax(dim=-1).masked_fill(finished, net.pad_id)
        ys = torch.cat([ys, next_token[:, None]], dim=1)
        finished |= next_token.eq(eos_id)
        if finished.all():
            break
    return ys


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


def _hypothesis(tokens: list[int], log_probs: list[float], length_penalty: float) -> Hypothesis:
    return Hypothesis(tokens, log_probs, sum(log_probs) / length_penalty_factor(len(tokens), length_penalty))


def _as_list(nets) -> list:
    return list(nets) if isinstance(nets, (list, tuple)) else [nets]


class StepScorer:
    """The next-token log-probs of one network, or of an ensemble: fairseq's rule (its EnsembleModel),
    the log of the models' mean probability, logsumexp_m(log p_m) - log M. Each network encodes the
    source itself and keeps its own key/value cache; rows are repeated `repeat` times (beams, samples)."""

    def __init__(self, nets, src: torch.Tensor, repeat: int = 1, use_cache: bool = True):
        self.nets = _as_list(nets)
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
            outs.append(logits.log_softmax(-1, dtype=torch.promote_types(logits.dtype, torch.float32)))
        if len(outs) == 1:
            return outs[0]
        return torch.logsumexp(torch.stack(outs), dim=0) - math.log(len(outs))

    def reorder(self, index: torch.Tensor) -> None:
        """Keep rows `index` of every cache (beam search: the beams that survive a step)."""
        for _, _, cache in self.states:
            if cache is not None:
                cache.reorder(index)


@dataclass
class Constraints:
    """What an output may hold. `min_len`: tokens before `<eos>`; `no_repeat_ngram_size` n: no n-gram
    of generated tokens twice; `banned`: ids never generated (unk); `prefix`: (B, P) ids each output
    starts with, -1 after a row's own prefix. A forced token keeps its log-prob even where another
    rule would ban it."""

    min_len: int = 0
    no_repeat_ngram_size: int = 0
    banned: Sequence[int] = ()
    prefix: torch.Tensor | None = None

    def __post_init__(self):
        check_hparams(self, {"min_len": self.min_len, "no_repeat_ngram_size": self.no_repeat_ngram_size}, SEARCH_CHECKS)

    def rows(self, repeat: int) -> torch.Tensor | None:
        """The prefix of every row of a (B*repeat, ...) batch."""
        return None if self.prefix is None else self.prefix.repeat_interleave(repeat, dim=0)

    def apply(self, logp: torch.Tensor, seqs: torch.Tensor, eos_id: int, prefix: torch.Tensor | None) -> torch.Tensor:
        """Mask (N, V) next-token log-probs of (N, t) prefixes (`<bos>` first) to -inf where banned."""
        generated = seqs.size(1) - 1
        forced = None
        if prefix is not None and generated < prefix.size(1):
            forced = prefix[:, generated]  # (N,) the forced token, or -1
            forced_logp = logp.gather(1, forced.clamp(min=0)[:, None])  # (N, 1)
        if self.banned:
            logp[:, list(self.banned)] = NEG_INF
        if generated < self.min_len:
            logp[:, eos_id] = NEG_INF
        if self.no_repeat_ngram_size:
            ban_repeated_ngrams(logp, seqs[:, 1:], self.no_repeat_ngram_size)
        if forced is not None:
            rows = forced.ge(0)  # (N,)
            logp[rows] = NEG_INF
            logp[rows, forced[rows]] = forced_logp[rows, 0]
        return logp


def ban_repeated_ngrams(logp: torch.Tensor, generated: torch.Tensor, n: int) -> None:
    """In place: ban every token that would complete an n-gram already in `generated` (N, t), i.e.
    the token after each earlier occurrence of the last n - 1 tokens."""
    t = generated.size(1)
    if t < max(n - 1, 1) or (n > 1 and t < n):
        return
    grams = generated.unfold(1, n, 1)  # (N, t - n + 1, n)
    if n == 1:
        match = torch.ones(grams.shape[:2], dtype=torch.bool, device=logp.device)
    else:
        match = grams[:, :, :-1].eq(generated[:, t - n + 1 :][:, None]).all(-1)  # (N, G)
    rows, cols = match.nonzero(as_tuple=True)
    logp[rows, grams[rows, cols, -1]] = NEG_INF


@torch.no_grad()
def beam_search(
    net: Seq2SeqNet | Sequence[Seq2SeqNet],
    src: torch.Tensor,  # (B, S) source ids, right-padded with net.pad_id
    bos_id: int,
    eos_id: int,
    max_len: int,
    beam_size: int = 4,
    length_penalty: float = 1.0,
    use_cache: bool = True,
    constraints: Constraints | None = None,
) -> torch.Tensor:
    """→ (B, L) ids of each sentence's best hypothesis: `<bos>` ... `<eos>` (no `<eos>` only if
    `max_len` tokens were reached without finishing any), right-padded with `net.pad_id`.
    `max_len` counts generated tokens (after `<bos>`), capped at the model's positions."""
    nbest = beam_search_nbest(net, src, bos_id, eos_id, max_len, beam_size, 1, length_penalty, use_cache, constraints)
    best = [hyps[0].tokens for hyps in nbest]
    pad = _as_list(net)[0].pad_id
    out = torch.full((len(best), 1 + max(len(t) for t in best)), pad, dtype=torch.long, device=src.device)
    out[:, 0] = bos_id
    for row, tokens in zip(out, best):
        row[1 : 1 + len(tokens)] = torch.tensor(tokens, dtype=torch.long)
    return out


@torch.no_grad()
def beam_search_nbest(
    net: Seq2SeqNet | Sequence[Seq2SeqNet],
    src: torch.Tensor,  # (B, S) source ids, right-padded with net.pad_id
    bos_id: int,
    eos_id: int,
    max_len: int,
    beam_size: int = 4,
    nbest: int = 1,
    length_penalty: float = 1.0,
    use_cache: bool = True,
    constraints: Constraints | None = None,
) -> list[list[Hypothesis]]:
    """→ for each sentence its `nbest` best hypotheses, best first (finished ones, then, where fewer
    than `nbest` finished within `max_len`, the best unfinished ones)."""
    searched = {"beam_size": beam_size, "nbest": nbest, "length_penalty": length_penalty}
    check_hparams("beam_search", searched, SEARCH_CHECKS, nbest_fits_the_beam)
    nets = _as_list(net)
    B, K, N, device, pad = src.size(0), beam_size, nbest, src.device, nets[0].pad_id
    scorer = StepScorer(nets, src, K, use_cache)
    max_len = min(max_len, scorer.max_len - 1)
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
    best_possible = length_penalty_factor(max_len, length_penalty)  # largest lp a live beam reaches

    for t in range(1, max_len + 1):  # t = tokens generated after this step
        flat_seqs = live_seqs.view(B * K, t)
        logp = no_specials(scorer.log_probs(flat_seqs), specials)
        logp = constraints.apply(logp, flat_seqs, eos_id, prefix)  # (B*K, V)
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

        # Live: the K best candidates that did not end in <eos>.
        live_scores, keep = top.masked_fill(is_eos, NEG_INF).topk(K, dim=1)  # (B, K)
        live_seqs, live_tok = cand_seqs[batch, keep], cand_tok[batch, keep]  # (B, K, t+1), (B, K, t)
        scorer.reorder((batch * K + parent.gather(1, keep)).view(-1))  # (B*K,) surviving rows

        # Done: the N-th best finished hypothesis is at least the best any live one can become.
        if (fin_score[:, N - 1] >= live_scores[:, 0] / best_possible).all():
            break

    # The N best finished hypotheses, then the best live ones where fewer than N finished.
    out = []
    fin_score, fin_len, live_scores = fin_score.tolist(), fin_len.tolist(), live_scores.tolist()
    for b in range(B):
        hyps = [
            Hypothesis(fin_seqs[b, i, 1 : fin_len[b][i]].tolist(), fin_tok[b, i, : fin_len[b][i] - 1].tolist(), fin_score[b][i])
            for i in range(N)
            if fin_score[b][i] > NEG_INF
        ]
        for k in range(K):
            if len(hyps) == N or live_scores[b][k] == NEG_INF:
                break
            hyps.append(_hypothesis(live_seqs[b, k, 1:].tolist(), live_tok[b, k].tolist(), length_penalty))
        out.append(hyps)
    return out


@torch.no_grad()
def sample(
    net: Seq2SeqNet | Sequence[Seq2SeqNet],
    src: torch.Tensor,  # (B, S)
    bos_id: int,
    eos_id: int,
    max_len: int,
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
    what `score_targets` gives it. Best first."""
    drawn = {"temperature": temperature, "top_k": top_k, "top_p": top_p, "nbest": num_samples, "length_penalty": length_penalty}
    check_hparams("sample", drawn, SEARCH_CHECKS)
    nets = _as_list(net)
    B, n, device, pad = src.size(0), num_samples, src.device, nets[0].pad_id
    scorer = StepScorer(nets, src, n, use_cache)
    max_len = min(max_len, scorer.max_len - 1)
    constraints = constraints or Constraints()
    prefix = constraints.rows(n)
    specials = special_ids(pad, bos_id, device)
    ys = torch.full((B * n, 1), bos_id, dtype=torch.long, device=device)  # (B*n, t)
    tok = torch.zeros(B * n, 0, device=device)  # (B*n, t-1) each token's log-prob
    finished = torch.zeros(B * n, dtype=torch.bool, device=device)
    for _ in range(max_len):
        logp = constraints.apply(no_specials(scorer.log_probs(ys), specials), ys, eos_id, prefix)  # (B*n, V)
        logits = logp / temperature
        if top_k:
            kth = logits.topk(min(top_k, logits.size(-1)), dim=-1).values[:, -1:]  # (B*n, 1)
            logits = logits.masked_fill(logits < kth, NEG_INF)
        if top_p < 1:
            sorted_logits, order = logits.sort(dim=-1, descending=True)
            probs = sorted_logits.softmax(-1)
            outside = probs.cumsum(-1) - probs >= top_p  # the mass before a token already reaches top_p
            logits = logits.scatter(-1, order, sorted_logits.masked_fill(outside, NEG_INF))
        probs = logits.softmax(-1).masked_fill(finished[:, None], 0.0)
        probs[finished, pad] = 1.0
        next_token = torch.multinomial(probs, 1, generator=generator)  # (B*n, 1)
        token_logp = logp.gather(1, next_token).masked_fill(finished[:, None], 0.0)
        ys, tok = torch.cat([ys, next_token], dim=1), torch.cat([tok.to(logp.dtype), token_logp], dim=1)
        finished |= next_token[:, 0].eq(eos_id)
        if finished.all():
            break
    out = []
    for b in range(B):
        hyps = []
        for row in range(b * n, (b + 1) * n):
            tokens = ys[row, 1:].tolist()
            length = tokens.index(eos_id) + 1 if eos_id in tokens else len(tokens)
            hyps.append(_hypothesis(tokens[:length], tok[row, :length].tolist(), length_penalty))
        out.append(sorted(hyps, key=lambda h: -h.score))
    return out


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
    nets = _as_list(net)
    pad = nets[0].pad_id
    T = 1 + max(len(t) for t in targets)
    tgt = torch.full((len(targets), T + 1), pad, dtype=torch.long, device=src.device)  # (B, T+1)
    for row, ids in zip(tgt, targets):
        row[: len(ids) + 2] = torch.tensor([bos_id, *ids, eos_id])
    logps = []
    for net in nets:
        memory, src_pad = net.encode(src)
        logits = net.decode(tgt[:, :-1], memory, src_pad)  # (B, T, V): right padding is hidden by the causal mask
        logps.append(logits.log_softmax(-1, dtype=torch.promote_types(logits.dtype, torch.float32)))
    logp = logps[0] if len(logps) == 1 else torch.logsumexp(torch.stack(logps), dim=0) - math.log(len(logps))
    tok = logp.gather(-1, tgt[:, 1:, None])[..., 0]  # (B, T)
    return [_hypothesis([*ids, eos_id], tok[b, : len(ids) + 1].tolist(), length_penalty) for b, ids in enumerate(targets)]


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
    nets = _as_list(net)
    pad = nets[0].pad_id
    T = max(1, max(len(o) for o in outputs))
    tgt_in = torch.full((len(outputs), T), pad, dtype=torch.long, device=src.device)  # (B, T)
    for row, ids in zip(tgt_in, outputs):
        row[: len(ids)] = torch.tensor([bos_id, *ids][: len(ids)])
    weights = 0
    for net in nets:
        memory, src_pad = net.encode(src)
        _, per_layer = net.decode(tgt_in, memory, src_pad, need_weights=True)
        weights = weights + per_layer[layer].float().mean(1)  # (B, T, S)
    hidden = src.eq(pad) | src.eq(eos_id)  # (B, S)
    best = weights.masked_fill(hidden[:, None], NEG_INF).argmax(-1)  # (B, T)
    out = []
    for b, ids in enumerate(outputs):
        n = len(ids) - (1 if ids and ids[-1] == eos_id else 0)
        out.append([(int(best[b, j]), j) for j in range(n)])
    return out
