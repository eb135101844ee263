"""Beam search against greedy decoding, against itself (cache, batching) and against exact search.

Exact search is a brute-force enumeration of every sequence up to a few tokens: on a tiny
vocabulary, a beam at least as wide as the number of candidates must find its best one.
Nets run in float64 so that cached/uncached and batched/alone decoding agree to ~1e-15 and no
near-tie between candidates can flip a choice.
"""

from __future__ import annotations

import math
import random

import pytest
import torch
from torch import nn

from models.beam import beam_search, beam_search_nbest
from models.decoding import greedy_decode, length_penalty_factor
from tests.helpers import BOS, EOS, PAD, SPECIALS, exhaustive_width, search_net, search_sources, strip


def check_well_formed(out: torch.Tensor, max_len: int) -> None:
    assert out.dtype == torch.long and out.size(1) <= max_len + 1
    assert out[:, 0].eq(BOS).all()
    for row in out.tolist():
        end = row.index(EOS, 1)  # every output ends, at the limit (its max_len-th token) at the latest
        assert all(x == PAD for x in row[end + 1 :])


# ----------------------------------------------------------------------- real nets: equivalences


@pytest.mark.parametrize("use_cache", [True, False])
@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_beam_size_one_is_greedy(seed, use_cache):
    net, src = search_net(seed), search_sources(seed=seed)
    greedy = greedy_decode(net, src, BOS, EOS, max_len=12, use_cache=use_cache)
    beam = beam_search(net, src, BOS, EOS, max_len=12, beam_size=1, length_penalty=0.0, use_cache=use_cache)
    assert torch.equal(beam, greedy)


def test_greedy_comparison_covers_ended_rows_and_rows_at_the_limit():
    """The seeds above exercise both outcomes: rows that end by themselves and rows whose <eos> the limit forces,
    as their 12th token."""
    outs = [greedy_decode(search_net(s), search_sources(seed=s), BOS, EOS, 12) for s in range(4)]
    ends = [row.index(EOS, 1) for out in outs for row in out.tolist()]
    assert 12 in ends and min(ends) < 12


def test_the_limit_forces_eos_with_its_log_prob():
    """An output that reaches max_len ends with <eos> as its max_len-th token, in greedy and beam search (n-best
    included) alike; its search score is the teacher-forced log-prob of its tokens, <eos> included."""
    net, src = search_net(0, eos_bias=-5.0), search_sources(seed=0)
    greedy = greedy_decode(net, src, BOS, EOS, 6)
    assert greedy.size(1) == 7 and greedy[:, 6].eq(EOS).all()  # none ends sooner: eos_bias
    for beam_size, nbest in ((1, 1), (3, 3)):
        hyps = beam_search_nbest(net, src, BOS, EOS, 6, beam_size=beam_size, nbest=nbest, length_penalty=1.0)
        for b, row in enumerate(hyps):
            assert len(row) == nbest and all(h.tokens[-1] == EOS and len(h.tokens) <= 6 for h in row)
            assert any(len(h.tokens) == 6 for h in row)  # at the limit
            for h in row:
                oracle_logp = sequence_logprob(net, src[b : b + 1], [BOS, *h.tokens])
                assert h.log_prob == pytest.approx(oracle_logp, abs=1e-9)
                assert h.score == pytest.approx(oracle_logp / length_penalty_factor(len(h.tokens), 1.0), abs=1e-9)


@pytest.mark.parametrize("length_penalty", [0.0, 1.0])
@pytest.mark.parametrize("beam_size", [2, 5])
@pytest.mark.parametrize("seed", [0, 1])
def test_cached_equals_uncached(seed, beam_size, length_penalty):
    net, src = search_net(seed), search_sources(seed=seed)
    kwargs = dict(max_len=12, beam_size=beam_size, length_penalty=length_penalty)
    cached = beam_search(net, src, BOS, EOS, use_cache=True, **kwargs)
    uncached = beam_search(net, src, BOS, EOS, use_cache=False, **kwargs)
    assert torch.equal(cached, uncached)
    check_well_formed(cached, 12)


@pytest.mark.parametrize("length_penalty", [0.0, 0.6])
@pytest.mark.parametrize("beam_size", [1, 3])
@pytest.mark.parametrize("seed", [0, 1])
def test_batched_equals_alone(seed, beam_size, length_penalty):
    """Each sentence decodes the same alone (no padding) as in a padded batch with others."""
    lengths = (7, 3, 5, 1, 6)
    net, src = search_net(seed), search_sources(seed=seed, lengths=lengths)
    kwargs = dict(max_len=12, beam_size=beam_size, length_penalty=length_penalty)
    batched = beam_search(net, src, BOS, EOS, **kwargs)
    for i, n in enumerate(lengths):
        alone = beam_search(net, src[i : i + 1, :n], BOS, EOS, **kwargs)
        assert strip(batched[i]) == strip(alone[0])


def test_float32_cached_uncached_and_batched_agree():
    """The float32 net of real use agrees too (no near-tie flips on these inputs)."""
    net, src = search_net(2, dtype=torch.float32), search_sources(seed=2)
    out = beam_search(net, src, BOS, EOS, 12, beam_size=3)
    assert torch.equal(out, beam_search(net, src, BOS, EOS, 12, beam_size=3, use_cache=False))
    for i, n in enumerate((7, 3, 5, 1, 6)):
        assert strip(out[i]) == strip(beam_search(net, src[i : i + 1, :n], BOS, EOS, 12, beam_size=3)[0])


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_beam_scores_at_least_greedy_on_finished_sentences(seed):
    """Not a theorem per sentence (a beam can drop greedy's path), but it holds on these nets,
    and by a wide margin: untrained nets make the short hypotheses likelier."""
    net, src = search_net(seed), search_sources(seed=seed)
    greedy = greedy_decode(net, src, BOS, EOS, 12)
    beam = beam_search(net, src, BOS, EOS, 12, beam_size=6, length_penalty=0.0)
    for i in range(src.size(0)):
        if EOS in strip(greedy[i]):
            g = sequence_logprob(net, src[i : i + 1], strip(greedy[i]))
            assert sequence_logprob(net, src[i : i + 1], strip(beam[i])) >= g - 1e-9


# --------------------------------------------------------------------------- exact search oracle


@torch.no_grad()
def sequence_logprob(net, src: torch.Tensor, hyp: list[int]) -> float:
    """Sum of the log-probs of hyp[1:] given `<bos>` and (1, S) `src`, by teacher forcing."""
    memory, src_pad = net.encode(src)
    logits = net.decode(torch.tensor([hyp[:-1]]), memory, src_pad)  # (1, T, V)
    logp = logits.double().log_softmax(-1)[0]
    return logp.gather(1, torch.tensor(hyp[1:])[:, None]).sum().item()


def oracle(logp_fn, vocab: int, max_len: int, alpha: float) -> tuple[float, list[int]]:
    """Best length-penalised score over every sequence that ends in <eos> within max_len tokens."""
    best = (float("-inf"), [])

    def expand(prefix, score):
        nonlocal best
        with torch.no_grad():
            logp = logp_fn(prefix)
        for token in range(vocab):
            if token in SPECIALS:
                continue
            total = score + float(logp[token])
            if token == EOS:
                cand = (total / length_penalty_factor(len(prefix), alpha), prefix + [EOS])
                best = max(best, cand, key=lambda c: c[0])
            elif len(prefix) < max_len:
                expand(prefix + [token], total)

    expand([BOS], 0.0)
    return best


@pytest.mark.parametrize("use_cache", [True, False])
@pytest.mark.parametrize("length_penalty", [0.0, 1.0])
def test_wide_beam_is_exact_search_on_real_net(length_penalty, use_cache):
    vocab, L = 5, 3
    net, src = search_net(3, tgt_vocab=vocab, eos_bias=-1.0), search_sources(seed=3, lengths=(4,))
    memory, src_pad = net.encode(src)

    def logp_fn(prefix):
        return net.decode(torch.tensor([prefix]), memory, src_pad)[0, -1].log_softmax(-1)

    score, best = oracle(logp_fn, vocab, L, length_penalty)
    out = beam_search(
        net, src, BOS, EOS, L, beam_size=exhaustive_width(vocab, L), length_penalty=length_penalty, use_cache=use_cache
    )
    assert strip(out[0]) == best


class PrefixCache:
    """Stand-in for `models.cache.DynamicCache`: remembers each row's prefix; `reorder` and `keep` select rows."""

    can_drop_rows = True

    def __init__(self):
        self.tokens = None

    @property
    def length(self) -> int:
        return 0 if self.tokens is None else self.tokens.size(1)

    def reorder(self, index: torch.Tensor) -> None:
        self.tokens = self.tokens.index_select(0, index)

    keep = reorder


class TableNet(nn.Module):
    """A fake `Seq2SeqNet` whose next-token log-probs are a fixed function of (source, prefix):
    `table(source, prefix) -> list of V log-probs`. It counts its `decode` calls."""

    def __init__(self, table, vocab: int, max_len: int = 64):
        super().__init__()
        self.table, self.vocab, self.pad_id, self.max_len, self.calls = table, vocab, PAD, max_len, 0
        self.new_cache = PrefixCache

    def encode(self, src):
        return src[:, :, None].double(), src.eq(PAD)  # the "memory" carries the source ids

    def decode(self, tgt, memory, src_pad, cache=None):
        """→ (N, T, V) log-probs after each prefix that ends at one of the T new positions."""
        self.calls += 1
        prefixes = tgt
        if cache is not None:
            cache.tokens = tgt if cache.tokens is None else torch.cat([cache.tokens, tgt], 1)
            prefixes = cache.tokens
        sources = [tuple(m[~p].long().tolist()) for m, p in zip(memory[:, :, 0], src_pad)]
        start = prefixes.size(1) - tgt.size(1)
        rows = [[self.table(s, tuple(p[: j + 1])) for j in range(start, len(p))] for s, p in zip(sources, prefixes.tolist())]
        return torch.tensor(rows, dtype=torch.float64).log_softmax(-1)  # (N, T, V)


def random_table(vocab: int, seed: int, temperature: float = 2.0):
    def table(source, prefix):
        rng = random.Random(f"{seed}|{source}|{prefix}")
        return [rng.gauss(0, temperature) for _ in range(vocab)]

    return table


def table_from(probs: dict, default: dict, vocab: int):
    """A table from {prefix: {token: prob}} (`default` for other prefixes); the remaining mass
    is shared by the tokens not listed."""

    def table(source, prefix):
        p = probs.get(prefix, default)
        rest = (1.0 - sum(p.values())) / (vocab - len(p))
        return [math.log(p.get(v, rest)) for v in range(vocab)]

    return table


def test_beam_finds_the_better_sequence_that_greedy_misses():
    """<bos> a is likelier than <bos> b, but after `a` everything is uncertain while `b` is
    almost surely followed by <eos>: greedy takes `a`, a beam of 2 finds `b <eos>`."""
    A, B = 3, 4
    probs = {(BOS,): {A: 0.6, B: 0.4 - 3e-6}, (BOS, B): {EOS: 0.99}}
    net = TableNet(table_from(probs, {EOS: 0.34, A: 0.33, B: 0.33 - 2e-6}, 5), 5)
    src = torch.tensor([[5, 6]])
    greedy = strip(greedy_decode(net, src, BOS, EOS, 6)[0])
    beam = strip(beam_search(net, src, BOS, EOS, 6, beam_size=2, length_penalty=0.0)[0])
    memory, src_pad = net.encode(src)
    score, best = oracle(lambda p: net.decode(torch.tensor([p]), memory, src_pad)[0, -1], 5, 4, 0.0)
    assert greedy == [BOS, A, EOS] and beam == best == [BOS, B, EOS]
    assert sequence_logprob(net, src, greedy) < score - 0.5
    assert sequence_logprob(net, src, beam) == pytest.approx(score)


@pytest.mark.parametrize("length_penalty", [0.0, 1.0])
def test_length_penalty_counts_generated_tokens_with_eos(length_penalty):
    """log p(<eos>) = -1 against log p(a <eos>) = -1.15: alpha = 1 prefers the longer one since
    1.15 < lp(2) / lp(1) = 7/6 (it would not with lengths counted from 2: 8/7 < 1.15)."""
    A = 3
    probs = {(BOS,): {EOS: math.exp(-1.0), A: math.exp(-1.15)}}
    net = TableNet(table_from(probs, {EOS: 1 - 4e-9}, 6), 6)
    out = beam_search(net, torch.tensor([[5]]), BOS, EOS, 5, beam_size=2, length_penalty=length_penalty)
    assert strip(out[0]) == ([BOS, A, EOS] if length_penalty else [BOS, EOS])


@pytest.mark.parametrize("use_cache", [True, False])
def test_search_goes_on_while_a_live_hypothesis_can_still_win(use_cache):
    """With alpha = 2, <bos> <eos> (-0.5) is finished at step 1, but the live `a` (-1) can
    still reach -1 / lp(6)^2: the search must go on, and finds a a a a <eos> = -1 / lp(5)^2."""
    A = 3
    certain = 1 - 4e-9
    probs = {(BOS,): {EOS: math.exp(-0.5), A: math.exp(-1.0)}, (BOS, A, A, A, A): {EOS: certain}}
    probs.update({(BOS,) + (A,) * n: {A: certain} for n in (1, 2, 3)})
    net = TableNet(table_from(probs, {EOS: certain}, 5), 5)
    src = torch.tensor([[5]])
    out = beam_search(net, src, BOS, EOS, 6, beam_size=1, length_penalty=2.0, use_cache=use_cache)
    memory, src_pad = net.encode(src)
    _, best = oracle(lambda p: net.decode(torch.tensor([p]), memory, src_pad)[0, -1], 5, 6, 2.0)
    assert strip(out[0]) == best == [BOS, A, A, A, A, EOS]
    assert strip(greedy_decode(net, src, BOS, EOS, 6)[0]) == [BOS, EOS]


@pytest.mark.parametrize("length_penalty", [0.0, 0.6, 2.0])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_wide_beam_is_exact_search_on_tables(seed, length_penalty):
    vocab, L = 5, 4
    net, src = TableNet(random_table(vocab, seed), vocab), torch.tensor([[7, 8, 9], [5, 6, PAD]])
    out = beam_search(net, src, BOS, EOS, L, beam_size=exhaustive_width(vocab, L), length_penalty=length_penalty)
    for i in range(2):
        memory, src_pad = net.encode(src[i : i + 1])
        logp = lambda p, m=memory, pad=src_pad: net.decode(torch.tensor([p]), m, pad)[0, -1]
        score, best = oracle(logp, vocab, L, length_penalty)
        assert strip(out[i]) == best


@pytest.mark.parametrize("beam_size", [1, 3, 8])
def test_tables_cached_uncached_and_batched_agree(beam_size):
    vocab, lengths = 6, (3, 1, 2)
    net, src = TableNet(random_table(vocab, 7, temperature=1.0), vocab), search_sources(seed=0, lengths=lengths)
    kwargs = dict(max_len=8, beam_size=beam_size, length_penalty=1.0)
    out = beam_search(net, src, BOS, EOS, **kwargs)
    assert torch.equal(out, beam_search(net, src, BOS, EOS, use_cache=False, **kwargs))
    for i, n in enumerate(lengths):
        assert strip(out[i]) == strip(beam_search(net, src[i : i + 1, :n], BOS, EOS, **kwargs)[0])
    check_well_formed(out, 8)


# -------------------------------------------------------------------------------------- edges


@pytest.mark.parametrize("beam_size", [6, 20])
def test_beam_wider_than_vocabulary(beam_size):
    net, src = search_net(0, tgt_vocab=4), search_sources(seed=0)
    out = beam_search(net, src, BOS, EOS, 6, beam_size=beam_size)
    check_well_formed(out, 6)
    assert torch.equal(out, beam_search(net, src, BOS, EOS, 6, beam_size=beam_size, use_cache=False))


@pytest.mark.parametrize("beam_size", [1, 2, 8])
def test_max_len_one_and_zero(beam_size):
    net, src = search_net(1), search_sources(seed=1)
    out = beam_search(net, src, BOS, EOS, 1, beam_size=beam_size, length_penalty=0.0)
    assert out.shape == (src.size(0), 2) and out[:, 0].eq(BOS).all()
    assert out[:, 1].eq(EOS).all()  # the limit: <eos> is the only token left
    zero = beam_search(net, src, BOS, EOS, 0, beam_size=beam_size)
    assert torch.equal(zero, torch.full((src.size(0), 1), BOS))


def test_max_len_is_capped_by_positions():
    net, src = search_net(0, eos_bias=-5.0, max_len=10), search_sources(seed=0)
    out = beam_search(net, src, BOS, EOS, 1000, beam_size=3)
    assert out.size(1) == 10  # <bos> + the 9 tokens that fit in 10 positions
    check_well_formed(out, 9)


@pytest.mark.parametrize("length_penalty", [0.0, 1.0])
def test_stops_once_all_sentences_have_finished(length_penalty):
    """After the first token <eos> is certain: K finished hypotheses that no live one can beat
    exist after step 2, so the search stops there although max_len is 50."""
    vocab = 8

    def table(source, prefix):
        if len(prefix) == 1:
            return [0.0 if v != EOS else -30.0 for v in range(vocab)]
        return [30.0 if v == EOS else 0.0 for v in range(vocab)]

    net = TableNet(table, vocab)
    out = beam_search(net, search_sources(seed=0, lengths=(2, 4)), BOS, EOS, 50, beam_size=3, length_penalty=length_penalty)
    assert net.calls == 2 and out.shape == (2, 3) and out[:, 2].eq(EOS).all()


def test_invalid_arguments():
    net, src = search_net(0), search_sources(seed=0)
    with pytest.raises(ValueError):
        beam_search(net, src, BOS, EOS, 5, beam_size=0)
    with pytest.raises(ValueError):
        beam_search(net, src, BOS, EOS, 5, length_penalty=-1.0)
