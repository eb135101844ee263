"""The decoding tools of models/decoding.py against oracles: exhaustive search (n-best lists and
constraints), teacher-forced scoring (every search's scores), greedy search (sampling's limits),
the softmax itself (sampled frequencies), and each member model (ensembles).

Nets are tiny and run in float64 (tests/helpers.py's `search_net`), so that scores computed
step by step and by teacher forcing agree to ~1e-12 and no near-tie can flip a choice."""

from __future__ import annotations

import math

import pytest
import torch

from models.beam import beam_search, beam_search_nbest
from models.constraints import Constraints
from models.decoding import greedy_decode, length_penalty_factor
from models.sampling import sample
from models.scoring import align, score_targets
from tests.helpers import BOS, EOS, PAD, SPECIALS, exhaustive_width, search_net, search_sources, strip


def all_finished(net, src, vocab: int, max_len: int, alpha: float, allowed=lambda seq: True) -> list[tuple[float, list[int]]]:
    """Every sequence ending in <eos> within max_len generated tokens that `allowed` accepts (a
    prefix-closed rule on the generated tokens), with its penalised score; best first."""
    memory, src_pad = net.encode(src)
    out = []

    def expand(prefix, score):
        with torch.no_grad():
            logp = net.decode(torch.tensor([prefix]), memory, src_pad)[0, -1].log_softmax(-1)
        for token in range(vocab):
            seq = prefix[1:] + [token]
            if token in SPECIALS or not allowed(seq):
                continue
            total = score + float(logp[token])
            if token == EOS:
                out.append((total / length_penalty_factor(len(seq), alpha), seq))
            elif len(seq) < max_len:
                expand(prefix + [token], total)

    expand([BOS], 0.0)
    return sorted(out, key=lambda c: -c[0])


def has_repeated_ngram(tokens: list[int], n: int) -> bool:
    grams = [tuple(tokens[i : i + n]) for i in range(len(tokens) - n + 1)]
    return len(grams) != len(set(grams))


def check_scores_are_teacher_forced(net, src, hyps_per_sentence, alpha: float) -> None:
    """Each finished hypothesis's token log-probs and score equal scoring its tokens as a given target."""
    for b, hyps in enumerate(hyps_per_sentence):
        for h in hyps:
            if h.tokens[-1:] != [EOS]:
                continue
            (ref,) = score_targets(net, src[b : b + 1], [h.tokens[:-1]], BOS, EOS, alpha)
            assert ref.tokens == h.tokens
            assert h.token_log_probs == pytest.approx(ref.token_log_probs, abs=1e-9)
            assert h.score == pytest.approx(ref.score, abs=1e-9)
            assert h.score == pytest.approx(h.log_prob / length_penalty_factor(len(h.tokens), alpha), abs=1e-12)


# ------------------------------------------------------------------------------------- special tokens


def test_no_search_generates_pad_or_bos():
    """A net whose likeliest tokens are <pad> and <bos>: greedy search, beam search, n-best lists, sampling,
    constrained searches and ensembles, cached or not, never generate either (models.decoding.no_specials)."""
    net, other, src = search_net(1), search_net(2), search_sources(seed=1)
    for member in (net, other):
        decode, bias = member.decode, torch.zeros(8, dtype=torch.float64)
        bias[list(SPECIALS)] = 4.0
        member.decode = lambda *args, decode=decode, bias=bias, **kwargs: decode(*args, **kwargs) + bias
    with torch.no_grad():
        memory, src_pad = net.encode(src)
        first = net.decode(torch.full((src.size(0), 1), BOS), memory, src_pad)[:, -1]
    assert set(first.argmax(-1).tolist()) <= set(SPECIALS)  # unbanned, every sentence would start with one
    rule = Constraints(min_len=2, no_repeat_ngram_size=2, banned=(3,))
    outputs = []
    for use_cache in (True, False):
        outputs += [strip(row)[1:] for row in greedy_decode(net, src, BOS, EOS, 12, use_cache=use_cache)]
        outputs += [strip(row)[1:] for row in beam_search(net, src, BOS, EOS, 12, 3, 1.0, use_cache)]
        for nets in (net, [net, other]):
            for constraints in (None, rule):
                rows = beam_search_nbest(nets, src, BOS, EOS, 12, 4, 4, 1.0, use_cache, constraints)
                rows += sample(nets, src, BOS, EOS, 12, num_samples=8, use_cache=use_cache, constraints=constraints)
                outputs += [h.tokens for row in rows for h in row]
    assert len(outputs) > 100 and all(tokens for tokens in outputs)
    assert not [tokens for tokens in outputs if set(tokens) & set(SPECIALS)]


# ------------------------------------------------------------------------------------------ n-best


@pytest.mark.parametrize("length_penalty", [0.0, 1.0])
def test_nbest_of_a_wide_beam_is_the_exhaustive_ranking(length_penalty):
    vocab, L, N = 5, 3, 6
    net, src = search_net(3, tgt_vocab=vocab, eos_bias=-1.0), search_sources(seed=3, lengths=(4,))
    ranking = all_finished(net, src, vocab, L, length_penalty)
    (hyps,) = beam_search_nbest(net, src, BOS, EOS, L, exhaustive_width(vocab, L), N, length_penalty)
    assert [h.tokens for h in hyps] == [seq for _, seq in ranking[:N]]
    assert [h.score for h in hyps] == pytest.approx([s for s, _ in ranking[:N]], abs=1e-9)


@pytest.mark.parametrize("use_cache", [True, False])
@pytest.mark.parametrize("length_penalty", [0.0, 1.0])
def test_nbest_lists_are_ranked_and_scored_as_teacher_forcing(length_penalty, use_cache):
    net, src = search_net(1), search_sources(seed=1)
    hyps = beam_search_nbest(net, src, BOS, EOS, 12, beam_size=4, nbest=4, length_penalty=length_penalty, use_cache=use_cache)
    best = beam_search(net, src, BOS, EOS, 12, beam_size=4, length_penalty=length_penalty, use_cache=use_cache)
    for b, row in enumerate(hyps):
        assert len(row) == 4 and len({tuple(h.tokens) for h in row}) == 4
        assert [h.score for h in row] == sorted((h.score for h in row), reverse=True)
        assert row[0].tokens == strip(best[b])[1:]  # the first of the list is beam search's output
    check_scores_are_teacher_forced(net, src, hyps, length_penalty)


def test_nbest_larger_than_the_beam_is_refused():
    net, src = search_net(0), search_sources(seed=0)
    with pytest.raises(ValueError, match="nbest"):
        beam_search_nbest(net, src, BOS, EOS, 5, beam_size=2, nbest=3)


# ----------------------------------------------------------------------------------------- sampling


def test_sampling_with_top_k_one_or_a_tiny_temperature_is_greedy():
    net, src = search_net(2), search_sources(seed=2)
    greedy = [strip(row)[1:] for row in greedy_decode(net, src, BOS, EOS, 12)]
    g = torch.Generator().manual_seed(0)
    for kwargs in (dict(top_k=1), dict(temperature=1e-4), dict(top_p=1e-6)):
        out = sample(net, src, BOS, EOS, 12, num_samples=3, generator=g, **kwargs)
        assert [[h.tokens for h in row] for row in out] == [[t] * 3 for t in greedy], kwargs


@pytest.mark.parametrize(
    "kwargs", [dict(), dict(temperature=0.6), dict(top_k=3), dict(top_p=0.7), dict(temperature=1.5, top_k=4, top_p=0.9)]
)
def test_sampled_first_tokens_follow_the_softmax(kwargs):
    """n draws of the first token: each token's frequency is within 5 standard errors of the
    probability the restricted, tempered softmax gives it (a false alarm has odds ~1e-6 per token;
    the seed is fixed, so the test is deterministic), and tokens outside top-k / top-p never appear."""
    n, vocab = 20000, 8
    net, src = search_net(4, tgt_vocab=vocab, eos_bias=0.0), search_sources(seed=4, lengths=(5,))
    with torch.no_grad():
        memory, src_pad = net.encode(src)
        logits = net.decode(torch.tensor([[BOS]]), memory, src_pad)[0, -1] / kwargs.get("temperature", 1.0)
        logits[list(SPECIALS)] = float("-inf")  # never drawn: the softmax over the other tokens
    order = logits.argsort(descending=True)
    p = logits.softmax(-1)
    keep = torch.zeros(vocab, dtype=torch.bool)
    mass, k = 0.0, kwargs.get("top_k", 0) or vocab
    for rank, token in enumerate(order.tolist()):  # the top-k tokens, then the nucleus among them
        if rank >= k or mass >= kwargs.get("top_p", 1.0):
            break
        keep[token] = True
        mass += float(p[token])
    expected = torch.where(keep, logits, float("-inf")).softmax(-1)
    assert int(keep.sum()) > 1 and (expected > 0.02).sum() >= 2  # a distribution the test can get wrong
    g = torch.Generator().manual_seed(1234)
    (hyps,) = sample(net, src, BOS, EOS, 2, num_samples=n, generator=g, **kwargs)  # the 2nd: the limit's <eos>
    counts = torch.bincount(torch.tensor([h.tokens[0] for h in hyps]), minlength=vocab).double()
    freq = counts / n
    se = (expected * (1 - expected) / n).sqrt()
    assert ((freq - expected).abs() <= 5 * se + 1e-12).all(), (freq, expected)
    assert counts[~keep].sum() == 0


@pytest.mark.parametrize("use_cache", [True, False])
def test_second_tokens_drawn_after_finished_rows_left_follow_each_rows_own_softmax(use_cache):
    """Rows whose first token is <eos> leave the batch (their memory and cache rows with them): every row still
    drawn keeps its own sentence and prefix. For each (sentence, first token), the second tokens' frequencies are
    within 5 standard errors of the softmax after that prefix; a row paired with another row's memory or cache
    would draw from another sentence's or prefix's distribution."""
    n, vocab = 6000, 8
    net, src = search_net(5, tgt_vocab=vocab, eos_bias=1.0), search_sources(seed=5, lengths=(4, 6))
    sizes = []
    decode = net.decode
    net.decode = lambda tgt, *args, **kwargs: sizes.append(tgt.size(0)) or decode(tgt, *args, **kwargs)
    out = sample(net, src, BOS, EOS, 3, num_samples=n, generator=torch.Generator().manual_seed(7), use_cache=use_cache)
    del net.decode
    assert sizes[0] == 2 * n and 0 < sizes[1] < 2 * n  # rows that ended at their first token left
    memory, src_pad = net.encode(src)
    checked = 0
    for b, hyps in enumerate(out):
        for first in range(vocab):
            seconds = [h.tokens[1] for h in hyps if h.tokens[0] == first and len(h.tokens) > 1]
            if first in SPECIALS or len(seconds) < 500:
                continue
            with torch.no_grad():
                logits = net.decode(torch.tensor([[BOS, first]]), memory[b : b + 1], src_pad[b : b + 1])[0, -1]
            logits[list(SPECIALS)] = float("-inf")
            expected = logits.softmax(-1)
            freq = torch.bincount(torch.tensor(seconds), minlength=vocab).double() / len(seconds)
            se = (expected * (1 - expected) / len(seconds)).sqrt()
            assert ((freq - expected).abs() <= 5 * se + 1e-12).all(), (b, first, freq, expected)
            checked += 1
    assert checked >= 4


def test_sample_scores_are_the_models_log_probs():
    net, src = search_net(0), search_sources(seed=0)
    out = sample(net, src, BOS, EOS, 12, num_samples=3, temperature=1.3, top_k=5, generator=torch.Generator().manual_seed(0))
    assert any(h.tokens[-1] == EOS for row in out for h in row)
    check_scores_are_teacher_forced(net, src, out, 0.0)


@pytest.mark.parametrize("top_p", [0.0, -0.1, 1.5])
def test_top_p_outside_zero_one_is_refused(top_p):
    net, src = search_net(0), search_sources(seed=0)
    with pytest.raises(ValueError, match="top_p"):
        sample(net, src, BOS, EOS, 3, top_p=top_p)


# -------------------------------------------------------------------------------------- constraints


@pytest.mark.parametrize(("n", "length_penalty", "L"), [(1, 0.0, 4), (1, 1.0, 4), (2, 1.0, 5)])
def test_no_repeat_ngrams_against_exhaustive_search(n, length_penalty, L):
    """A wide beam that may not repeat an n-gram finds the best of every sequence without one."""
    vocab = 5
    net, src = search_net(13, tgt_vocab=vocab, eos_bias=-4.0), search_sources(seed=13, lengths=(3,))
    rule = Constraints(no_repeat_ngram_size=n)
    ranking = all_finished(net, src, vocab, L, length_penalty, lambda seq: not has_repeated_ngram(seq, n))
    free = all_finished(net, src, vocab, L, length_penalty)
    assert [seq for _, seq in free[:3]] != [seq for _, seq in ranking[:3]]  # the rule changes the answer
    (hyps,) = beam_search_nbest(net, src, BOS, EOS, L, exhaustive_width(vocab, L), 3, length_penalty, constraints=rule)
    assert [h.tokens for h in hyps] == [seq for _, seq in ranking[:3]]
    assert [h.score for h in hyps] == pytest.approx([s for s, _ in ranking[:3]], abs=1e-9)


@pytest.mark.parametrize("n", [1, 2, 3])
def test_no_repeat_ngrams_holds_for_every_search(n):
    net, src = search_net(0, eos_bias=-3.0), search_sources(seed=0)
    rule = Constraints(no_repeat_ngram_size=n)
    free = beam_search_nbest(net, src, BOS, EOS, 12, 3, 3, 0.0)
    assert any(has_repeated_ngram(h.tokens, n) for row in free for h in row)  # the nets do repeat without the rule
    searches = [
        beam_search_nbest(net, src, BOS, EOS, 12, 1, 1, 0.0, constraints=rule),
        beam_search_nbest(net, src, BOS, EOS, 12, 3, 3, 1.0, constraints=rule),
        sample(net, src, BOS, EOS, 12, 4, generator=torch.Generator().manual_seed(0), constraints=rule),
    ]
    for hyps in searches:
        assert not any(has_repeated_ngram(h.tokens, n) for row in hyps for h in row)
        check_scores_are_teacher_forced(net, src, hyps, 0.0 if hyps is not searches[1] else 1.0)


def test_min_len_and_banned_tokens_against_exhaustive_search():
    vocab, L = 6, 4  # <pad>, <bos>, <eos> and a banned token leave two tokens to write with
    net, src = search_net(6, tgt_vocab=vocab, eos_bias=1.0), search_sources(seed=6, lengths=(3,))
    rule = Constraints(min_len=2, banned=(3,))
    allowed = lambda seq: 3 not in seq and (seq[-1] != EOS or len(seq) > 2)  # noqa: E731
    ranking = all_finished(net, src, vocab, L, 0.0, allowed)
    assert all_finished(net, src, vocab, L, 0.0)[0][1] != ranking[0][1]
    (hyps,) = beam_search_nbest(net, src, BOS, EOS, L, exhaustive_width(vocab, L), 3, 0.0, constraints=rule)
    assert [h.tokens for h in hyps] == [seq for _, seq in ranking[:3]]


@pytest.mark.parametrize("beam_size", [1, 3])
def test_forced_prefixes_start_the_outputs_and_keep_their_scores(beam_size):
    net, src = search_net(7, eos_bias=-1.0), search_sources(seed=7, lengths=(4, 2, 6))
    prefixes = [[4, 4, 5], [], [2 + 4, 3]]  # the first repeats a token that no-repeat would ban
    prefix = torch.tensor([p + [-1] * (3 - len(p)) for p in prefixes])
    rule = Constraints(no_repeat_ngram_size=1, prefix=prefix)
    for hyps, alpha in (
        (beam_search_nbest(net, src, BOS, EOS, 10, beam_size, beam_size, 0.5, constraints=rule), 0.5),
        (sample(net, src, BOS, EOS, 10, 2, generator=torch.Generator().manual_seed(0), constraints=rule), 0.0),
    ):
        for p, row in zip(prefixes, hyps):
            assert all(h.tokens[: len(p)] == p for h in row)
        check_scores_are_teacher_forced(net, src, hyps, alpha)


# ---------------------------------------------------------------------------------------- ensembles


@pytest.mark.parametrize("beam_size", [1, 4])
def test_an_ensemble_of_one_model_or_of_two_copies_is_the_model(beam_size):
    net, src = search_net(1), search_sources(seed=1)
    alone = beam_search_nbest(net, src, BOS, EOS, 12, beam_size, beam_size, 1.0)
    for members in ([net], [net, net]):
        together = beam_search_nbest(members, src, BOS, EOS, 12, beam_size, beam_size, 1.0)
        assert [[h.tokens for h in row] for row in together] == [[h.tokens for h in row] for row in alone]
        for a, b in zip(sum(together, []), sum(alone, [])):
            assert a.score == pytest.approx(b.score, abs=1e-9)


def test_an_ensemble_averages_the_models_probabilities():
    """fairseq's rule: each token's log-prob is the log of the members' mean probability."""
    nets, src = [search_net(1), search_net(2)], search_sources(seed=1)
    hyps = beam_search_nbest(nets, src, BOS, EOS, 12, 3, 3, 0.0)
    assert [[h.tokens for h in row] for row in hyps] != [
        [h.tokens for h in row] for row in beam_search_nbest(nets[0], src, BOS, EOS, 12, 3, 3, 0.0)
    ]
    for b, row in enumerate(hyps):
        for h in row:
            targets = [h.tokens[:-1] if h.tokens[-1] == EOS else h.tokens]
            each = [
                torch.tensor(score_targets(n, src[b : b + 1], targets, BOS, EOS)[0].token_log_probs, dtype=torch.float64)
                for n in nets
            ]
            mean = (torch.stack(each).exp().mean(0)).log()[: len(h.tokens)]
            assert h.token_log_probs == pytest.approx(mean.tolist(), abs=1e-9)


# --------------------------------------------------------------------------------------- alignments


def test_alignment_batched_equals_alone_and_points_at_real_source_tokens():
    net, src = search_net(3, eos_bias=None), search_sources(seed=3, lengths=(7, 3, 5))
    src[[0, 2], [6, 4]] = EOS  # two sources framed as ours are, ending in <eos>
    outputs = [h[0].tokens for h in beam_search_nbest(net, src, BOS, EOS, 8, 2, 1, 0.0)]
    batched = align(net, src, outputs, BOS, EOS, layer=0)
    for b, (pairs, out) in enumerate(zip(batched, outputs)):
        n = len(out) - (out[-1] == EOS)
        assert [j for _, j in pairs] == list(range(n))
        real = src[b].ne(PAD) & src[b].ne(EOS)
        assert all(real[i] for i, _ in pairs)
        assert align(net, src[b : b + 1, : int(src[b].ne(PAD).sum())], [out], BOS, EOS, layer=0)[0] == pairs
        # The oracle: the argmax of the head-averaged cross-attention of layer 0, by teacher forcing alone.
        with torch.no_grad():
            memory, src_pad = net.encode(src[b : b + 1])
            _, weights = net.decode(torch.tensor([[BOS, *out][:n]]), memory, src_pad, need_weights=True)
        w = weights[0][0].mean(0).masked_fill(~real, -math.inf)  # (T, S)
        assert [i for i, _ in pairs] == w.argmax(-1).tolist()
