"""A sentence's output never depends on its batch: each stops at a·S + b tokens of its own source's S (and within
`max_len`), in greedy search, beam search and its n-best lists, and sampling, in both engines.

The model runs many outputs to the limit (a random, sharpened one), where a limit taken from the batch's longest
source would let a short sentence's output run on when a long one shares its batch. The oracle is each sentence
decoded alone."""

from __future__ import annotations

import pytest

from inference.options import DecodingOptions
from tests.helpers import biased_model

SEARCHES = [dict(beam_size=1), dict(beam_size=4), dict(beam_size=4, nbest=2)]


def sources(n: int = 24) -> list[str]:
    """Sentences of 1 to 12 words, so that their limits differ by up to 16 tokens."""
    return [" ".join(f"w{(7 * i + j) % 60}" for j in range(1 + i % 12)) for i in range(n)]


@pytest.fixture(scope="module")
def model():
    return biased_model(pad=-30.0, bos=-30.0)  # <pad>, <bos> improbable: CTranslate2's beam ranks as ours (its docstring)


@pytest.fixture(scope="module")
def engines(model, tmp_path_factory):
    found = {"torch": model.translator}
    try:
        from deploy.ctranslate2 import export_ctranslate2
        from deploy.ctranslate2_translator import CTranslate2Translator
    except ImportError:
        return found
    exported = export_ctranslate2(model, tmp_path_factory.mktemp("ct2") / "model")
    found["ctranslate2"] = CTranslate2Translator(exported, search="exact")
    found["ctranslate2-fast"] = CTranslate2Translator(exported, search="fast")  # searched once under the longest limit
    return found


def outputs(engine, sentences: list[str], search: dict) -> list:
    """Each sentence's best output's tokens, or its n-best lists' tokens."""
    found = engine.translate(sentences, nbest=search.get("nbest", 1), beam_size=search["beam_size"])
    return [[h.tokens for h in row] for row in found]


@pytest.mark.parametrize("search", SEARCHES, ids=["greedy", "beam4", "beam4-nbest2"])
@pytest.mark.parametrize("name", ["torch", "ctranslate2", "ctranslate2-fast"])
def test_a_sentence_s_output_is_its_output_alone_in_any_batch(engines, name, search):
    if name not in engines:
        pytest.skip("pip install -e '.[deploy]'")
    engine, text = engines[name], sources()
    alone = [outputs(engine, [s], search)[0] for s in text]
    limits = DecodingOptions().output_limits([len(s.split()) + 1 for s in text], 63)  # words, <eos>; max_len 64 - 1
    at_limit = [i for i, row in enumerate(alone) if any(len(t) == limits[i] for t in row)]
    assert len(at_limit) >= len(text) // 3 and len({limits[i] for i in at_limit}) >= 4  # runs to several own limits
    assert all(len(t) <= limits[i] for i, row in enumerate(alone) for t in row)
    assert outputs(engine, text, search) == alone  # one batch, input order
    order = sorted(range(len(text)), key=lambda i: (-len(text[i]), i))  # longest first, as length-sorted batches
    assert [outputs(engine, [text[i] for i in order], search)[k] for k in range(len(text))] == [alone[i] for i in order]
    for size in (5, 8):
        batches = [text[i : i + size] for i in range(0, len(text), size)]
        assert [row for batch in batches for row in outputs(engine, batch, search)] == alone


@pytest.mark.parametrize("name", ["torch", "ctranslate2", "ctranslate2-fast"])
def test_translate_many_and_a_fixed_max_len_keep_each_sentence_s_output(engines, name):
    if name not in engines:
        pytest.skip("pip install -e '.[deploy]'")
    engine, text = engines[name], sources()
    alone = [engine.translate([s], beam_size=4)[0] for s in text]
    assert engine.translate_many(text, batch_size=7, beam_size=4) == alone
    if name == "torch":  # the preallocated cache's search too
        assert engine.translate(text, beam_size=4, static_cache="eager") == alone
    capped = engine.translate(text, beam_size=4, max_len=6, nbest=1)
    assert all(len(row[0].tokens) <= 6 for row in capped) and sum(len(row[0].tokens) == 6 for row in capped) >= 6


@pytest.mark.parametrize("name", ["torch", "ctranslate2"])
def test_samples_stop_at_their_own_sentence_s_limit(engines, name):
    """Sampling draws from one generator across the batch (its draws depend on the batch), but each sample
    stops at its own sentence's limit, never at a longer batch-mate's."""
    if name not in engines:
        pytest.skip("pip install -e '.[deploy]'")
    text = sources()
    limits = DecodingOptions().output_limits([len(s.split()) + 1 for s in text], 63)
    found = engines[name].translate(text, nbest=3, sampling=True, seed=1)
    lengths = [[len(h.tokens) for h in row] for row in found]
    assert all(n <= limits[i] for i, row in enumerate(lengths) for n in row)
    assert sum(n == limits[i] for i, row in enumerate(lengths) for n in row) >= len(text) // 2
    assert len({limits[i] for i, row in enumerate(lengths) if limits[i] in row}) >= 4
