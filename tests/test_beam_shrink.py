"""Finished sentences leave the batch: each sentence of a batch decodes exactly as it does alone (a batch of one never
drops a row), and no row of a finished sentence is decoded again.

The oracle is the search on each sentence alone; the rows a batched search decodes are counted, and must add up to
what the sentences alone decode: beam_size rows per step, for as many steps as each sentence takes alone.
"""

from __future__ import annotations

import pytest
import torch

from models.beam import beam_search_nbest
from models.constraints import Constraints
from models.decoding import greedy_decode
from tests.helpers import BOS, EOS, search_net, search_sources

LENGTHS = (7, 3, 5, 1, 6, 2)  # source lengths; with the nets below their outputs end from step 2 to the limit
MAX_LEN = 12


class RowCounter:
    """A network that records how many rows each `decode` call decodes."""

    def __init__(self, net):
        self.net, self.rows = net, []
        self.pad_id, self.max_len = net.pad_id, net.max_len

    def encode(self, src):
        return self.net.encode(src)

    def new_cache(self):
        return self.net.new_cache()

    def decode(self, tgt, memory, src_pad, cache=None):
        self.rows.append(tgt.size(0))
        return self.net.decode(tgt, memory, src_pad, cache)


def search(nets, src, constraints, **kwargs):
    counted = [RowCounter(net) for net in nets]
    out = beam_search_nbest(counted, src, BOS, EOS, MAX_LEN, constraints=constraints, **kwargs)
    return out, sum(counted[0].rows)


def alone(i: int, constraints: Constraints) -> tuple[torch.Tensor, Constraints]:
    src = search_sources(seed=0, lengths=LENGTHS)[i : i + 1, : LENGTHS[i]]
    prefix = None if constraints.prefix is None else constraints.prefix[i : i + 1]
    return src, Constraints(constraints.min_len, constraints.no_repeat_ngram_size, constraints.banned, prefix)


RULES = {
    "none": Constraints(),
    "min_len": Constraints(min_len=4),
    "no_repeat": Constraints(no_repeat_ngram_size=2),
    "banned_and_prefix": Constraints(banned=(3,), prefix=torch.tensor([[4, 5], [6, -1], [-1, -1], [5, 5], [7, -1], [4, -1]])),
}


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("ensemble", [1, 2])
@pytest.mark.parametrize("use_cache", [True, False])
@pytest.mark.parametrize(("beam_size", "nbest", "length_penalty"), [(1, 1, 0.0), (3, 1, 0.6), (3, 3, 1.0), (5, 2, 0.0)])
def test_each_sentence_of_a_shrinking_batch_decodes_as_alone(rule, ensemble, use_cache, beam_size, nbest, length_penalty):
    nets = [search_net(seed) for seed in ((3,), (0, 2))[ensemble - 1]]  # seeds whose outputs end at several steps
    src = search_sources(seed=0, lengths=LENGTHS)
    kwargs = dict(beam_size=beam_size, nbest=nbest, length_penalty=length_penalty, use_cache=use_cache)
    batched, rows = search(nets, src, RULES[rule], **kwargs)
    alone_rows = []
    for i, hyps in enumerate(batched):
        expected, decoded = search(nets, *alone(i, RULES[rule]), **kwargs)
        alone_rows.append(decoded)
        assert [h.tokens for h in hyps] == [h.tokens for h in expected[0]]
        for h, e in zip(hyps, expected[0]):
            assert h.score == pytest.approx(e.score, abs=1e-5)
            assert h.token_log_probs == pytest.approx(e.token_log_probs, abs=1e-5)
    # Sentences finish at different steps (so rows leave), and a batch decodes no more rows than its sentences alone.
    assert len({n // beam_size for n in alone_rows}) > 1
    assert rows == sum(alone_rows)


@pytest.mark.parametrize("use_cache", [True, False])
def test_greedy_rows_leave_the_batch_as_they_end(use_cache):
    net = RowCounter(search_net(0))
    src = search_sources(seed=0, lengths=LENGTHS)
    batched = greedy_decode(net, src, BOS, EOS, MAX_LEN, use_cache)
    steps = []
    for i, n in enumerate(LENGTHS):
        net.rows = []
        out = greedy_decode(net, src[i : i + 1, :n], BOS, EOS, MAX_LEN, use_cache)
        steps.append(len(net.rows))
        assert batched[i, : out.size(1)].tolist() == out[0].tolist()
        assert batched[i, out.size(1) :].eq(net.pad_id).all()
    net.rows = []
    greedy_decode(net, src, BOS, EOS, MAX_LEN, use_cache)
    assert len(set(steps)) > 1 and sum(net.rows) == sum(steps)
