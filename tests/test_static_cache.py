"""The static key/value cache (models.cache.StaticCache, decoded by models.static_cache) against the growing cache
and an uncached decode (the oracle: every step reruns the whole prefix): the same tokens from greedy and beam
search, over batches, lengths and configurations (every position scheme and relative bias, GQA, Marian's
options), eager and compiled; each comparison also on a net that ends no row early, so that every case decodes
many tokens."""

from __future__ import annotations

from functools import partial

import pytest
import torch

from models.beam import beam_search
from models.decoding import greedy_decode
from models.static_cache import StaticDecoder
from tests.helpers import BOS, EOS, PAD, load_script, sources, tiny_net

# Marian's (OPUS-MT's) options, as an imported model has them (models/marian.py)
MARIAN = {"positional": "sinusoidal_halves", "scale_embeddings": False, "final_norm": False, "activation": "silu"}
# Named configurations, as x-transformers' tests parametrize theirs: every position scheme (each written once, in
# the network, for both caches), every relative bias, grouped and multi-query attention, and Marian's options.
CONFIGS = {
    "sinusoidal": {},
    "gqa": {"num_kv_heads": 2},
    "rotary-qk-norm": {"positional": "rotary", "qk_norm": True},
    "rotary-mqa": {"positional": "rotary", "num_kv_heads": 1},
    "learned-pre-norm-rms": {"positional": "learned", "norm_first": True, "norm": "rmsnorm"},
    "t5": {"positional": "none", "relative_bias": "t5"},
    "alibi-mqa": {"relative_bias": "alibi", "num_kv_heads": 1},
    "marian": MARIAN,
    "marian-t5": {**MARIAN, "relative_bias": "t5"},
    "marian-alibi-gqa": {**MARIAN, "relative_bias": "alibi", "num_kv_heads": 2},
}
configs = pytest.mark.parametrize("options", list(CONFIGS.values()), ids=list(CONFIGS))

# An untrained 20 → 12-token net; its `<eos>` bias makes some sentences finish early and others run to the end.
cache_net = partial(tiny_net, src_vocab=20, tgt_vocab=12, num_encoder_layers=1, dim_feedforward=64, eos_bias=0.2)
BATCHES = [(7,), (7, 3, 5, 1, 6), (4, 4, 9)]


@configs
@pytest.mark.parametrize("lengths", BATCHES)
@pytest.mark.parametrize("max_len", [2, 6, 30])
def test_greedy_equals_growing_cache(options, lengths, max_len):
    src = sources(lengths, vocab=20)
    for eos_bias in (0.2, -3.0):  # some rows end early (all may, at once); then none does, each decodes max_len tokens
        net = cache_net(**options, eos_bias=eos_bias)
        expected = greedy_decode(net, src, BOS, EOS, max_len)
        got = StaticDecoder(net, length_multiple=8).greedy(src, BOS, EOS, max_len)
        assert torch.equal(got, expected)
    assert expected.size(1) == 1 + max_len and expected[:, -1].ne(PAD).all()  # every step of every row compared


@configs
@pytest.mark.parametrize("search", ["greedy", "beam"])
def test_static_and_growing_caches_give_the_uncached_decodes_tokens(options, search):
    # The oracle reruns the whole prefix at every step: no cache, no offset, no buffer. float64: no near-tie
    # between two summation orders can flip a choice.
    src = sources(BATCHES[1], vocab=20)
    for eos_bias in (-0.2, -3.0):  # some rows end early; then none does, each decodes 20 tokens
        net = cache_net(**options, dtype=torch.float64, eos_bias=eos_bias)
        decoder = StaticDecoder(net, length_multiple=8)
        if search == "greedy":
            uncached = greedy_decode(net, src, BOS, EOS, 20, use_cache=False)
            growing, static = greedy_decode(net, src, BOS, EOS, 20), decoder.greedy(src, BOS, EOS, 20)
        else:
            kwargs = dict(beam_size=3, length_penalty=1.0)
            uncached = beam_search(net, src, BOS, EOS, 20, use_cache=False, **kwargs)
            growing, static = beam_search(net, src, BOS, EOS, 20, **kwargs), decoder.beam(src, BOS, EOS, 20, **kwargs)
        assert torch.equal(growing, uncached) and torch.equal(static, uncached)
    assert uncached.size(1) == 1 + 20  # more than one token: every step of the long run compared


@configs
def test_each_static_step_gives_the_uncached_logits(options):
    """Step by step, the static cache's logits are the uncached decode's of the whole prefix: the positions, the
    relative bias and the mask over the buffer's unwritten slots (here 40, for 20 steps) are the network's own."""
    net, src = cache_net(**options, dtype=torch.float64, eos_bias=-3.0), sources(BATCHES[1], vocab=20)
    ys = greedy_decode(net, src, BOS, EOS, 20, use_cache=False)  # (B, 21)
    assert ys.size(1) == 21
    decoder = StaticDecoder(net)
    memory, src_pad = net.encode(src)
    cache = decoder.new_cache()
    for t in range(ys.size(1) - 1):
        got = decoder.decode(ys[:, t : t + 1], memory, src_pad, cache)[:, -1]  # (B, V)
        expected = net.decode(ys[:, : t + 1], memory, src_pad)[:, -1]
        torch.testing.assert_close(got, expected, msg=lambda m, t=t: f"step {t}: {m}")


def test_comparisons_cover_finished_and_unfinished_rows():
    greedy = greedy_decode(cache_net(), sources(BATCHES[1], vocab=20), BOS, EOS, 30)
    beam = beam_search(cache_net(dtype=torch.float64, eos_bias=-0.2), sources(BATCHES[1], vocab=20), BOS, EOS, 20, beam_size=4)
    for out, steps in ((greedy, 30), (beam, 20)):
        ends = torch.tensor([row.index(EOS, 1) for row in out.tolist()])  # every row ends, at the limit at the latest
        assert (ends < steps).any() and (ends == steps).any()  # rows that end by themselves, rows the limit ends
        assert out.size(1) == steps + 1


@configs
@pytest.mark.parametrize("beam_size", [2, 4])
@pytest.mark.parametrize("length_penalty", [0.0, 1.0])
def test_beam_equals_growing_cache(options, beam_size, length_penalty):
    # float64, as tests/test_beam_search.py: no near-tie between candidates can flip a choice.
    for eos_bias in (-0.2, -3.0):  # some hypotheses end early; then none does, each decodes max_len tokens
        net = cache_net(**options, dtype=torch.float64, eos_bias=eos_bias)
        decoder = StaticDecoder(net, length_multiple=8)
        for lengths, max_len in ((BATCHES[1], 20), (BATCHES[2], 5), ((3,), 12)):
            src = sources(lengths, vocab=20, seed=max_len)
            kwargs = dict(beam_size=beam_size, length_penalty=length_penalty)
            expected = beam_search(net, src, BOS, EOS, max_len, **kwargs)
            assert torch.equal(decoder.beam(src, BOS, EOS, max_len, **kwargs), expected)
    assert expected.size(1) > 2  # more than one token decoded


@configs
def test_under_bf16_autocast_equals_growing_cache_with_bf16_buffers(options):
    # Rows may end early here, in some configurations all at once: over long runs bf16 rounding can part two searches
    # at a near-tie (below), so the long runs are the next test's, which compares every step's logits.
    net, src = cache_net(**options), sources(BATCHES[1], vocab=20)
    decoder = StaticDecoder(net, length_multiple=8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert torch.equal(decoder.greedy(src, BOS, EOS, 20), greedy_decode(net, src, BOS, EOS, 20))
        assert torch.equal(decoder.beam(src, BOS, EOS, 12, beam_size=3), beam_search(net, src, BOS, EOS, 12, beam_size=3))
    assert {key[3] for key in decoder._states} == {torch.bfloat16}  # the buffers hold what the projections give


# Under bf16 the whole buffer's attention (unwritten positions masked) rounds otherwise than the growing cache's over
# the positions written, by up to one bf16 step in the logits, so greedy tokens may part where the top two logits are
# that close: seen in a net with no position information at all (no positional table, T5's table at its zero start),
# 0.8281 against 0.8242 at step 10 of one row in five (2026-11-25). The logits themselves are checked here.
@configs
def test_under_bf16_autocast_each_step_gives_the_growing_caches_logits_within_rounding(options):
    net, src = cache_net(**options, eos_bias=-3.0), sources(BATCHES[1], vocab=20)  # no row ends early: 20 steps compared
    decoder = StaticDecoder(net, length_multiple=8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ys = greedy_decode(net, src, BOS, EOS, 20)  # the tokens both caches are fed, one step at a time
        assert ys.size(1) == 21
        memory, src_pad = net.encode(src)
        growing, static = net.core.new_cache(), decoder.new_cache()
        for t in range(ys.size(1) - 1):
            expected = net.decode(ys[:, t : t + 1], memory, src_pad, growing)[:, -1].float()  # (N, V)
            got = decoder.decode(ys[:, t : t + 1], memory, src_pad, static)[:, -1].float()
            # Two bf16 steps (8 significant bits) at the logits' size, about 1: rounding, not a wrong bias or mask.
            torch.testing.assert_close(got, expected, atol=2**-6, rtol=2**-7, msg=lambda m, t=t: f"step {t}: {m}")


def test_one_decoder_serves_many_shapes_and_reuses_its_buffers():
    net = cache_net(num_kv_heads=1)
    decoder = StaticDecoder(net, length_multiple=16)
    for lengths, max_len in ((BATCHES[1], 10), (BATCHES[0], 25), (BATCHES[1], 12), (BATCHES[2], 3)):
        src = sources(lengths, vocab=20, seed=max_len)
        assert torch.equal(decoder.greedy(src, BOS, EOS, max_len), greedy_decode(net, src, BOS, EOS, max_len))
    # (5, 7, 16) twice (10 and 12 steps round up to one buffer length), (1, 7, 32), (3, 9, 16).
    assert sorted(k[:3] for k in decoder._states) == [(1, 7, 32), (3, 9, 16), (5, 7, 16)]


def test_buffers_are_sized_for_the_steps_and_the_positions():
    net = cache_net()
    decoder = StaticDecoder(net, length_multiple=32)
    decoder.greedy(sources((5,), vocab=20), BOS, EOS, 100)  # 100 steps asked: capped at the net's 39 positions
    ((_, _, length, _),) = decoder._states
    assert length == net.max_len
    cache = decoder.new_cache()
    memory, src_pad = decoder.encode(sources((5,), vocab=20))
    for _ in range(net.max_len):
        decoder.decode(torch.full((1, 1), BOS), memory, src_pad, cache)
    with pytest.raises(ValueError, match="holds 40 positions"):
        decoder.decode(torch.full((1, 1), BOS), memory, src_pad, cache)
    assert cache.nbytes("self") == 2 * 2 * 4 * 40 * 8 * 4  # layers × (k, v) × heads × positions × head_dim × fp32


@pytest.mark.parametrize("name", ["rotary-mqa", "marian-t5"])
def test_compiled_step_equals_eager_and_compiles_once_per_shape(name):
    # aot_eager: Dynamo's capture and the functionalisation of the in-place cache writes, in seconds, without
    # a C++ toolchain; the inductor is what benchmarks/static_decode.py measures. The configurations: each way a
    # position enters the step (rotary tables, a relative bias, a table added to the embeddings) from a tensor.
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    net = cache_net(**CONFIGS[name])
    decoder = StaticDecoder(net, mode="compile", length_multiple=32, backend="aot_eager")
    src = sources(BATCHES[1], vocab=20)
    assert torch.equal(decoder.greedy(src, BOS, EOS, 20), greedy_decode(net, src, BOS, EOS, 20))
    graphs = counters["stats"]["unique_graphs"]
    assert graphs >= 1
    for seed in (1, 2):  # new sources of the same shape, other lengths within the buffer: no new graph
        other = sources(BATCHES[1], vocab=20, seed=seed)
        assert torch.equal(decoder.greedy(other, BOS, EOS, 25), greedy_decode(net, other, BOS, EOS, 25))
    assert counters["stats"]["unique_graphs"] == graphs
    expected = beam_search(net, src, BOS, EOS, 20, beam_size=3)
    assert torch.equal(decoder.beam(src, BOS, EOS, 20, beam_size=3), expected)
    assert expected.size(1) > 2  # more than one token decoded


def test_bad_modes_are_refused():
    net = cache_net()
    with pytest.raises(ValueError, match="mode must be one of"):
        StaticDecoder(net, mode="fast")
    with pytest.raises(ValueError, match="needs the network on a CUDA device"):
        StaticDecoder(net, mode="cuda-graph")
    with pytest.raises(ValueError, match="length_multiple"):
        StaticDecoder(net, length_multiple=0)


# ------------------------------------------------------------------------------- translate() and the script


@pytest.fixture(scope="module")
def toy_checkpoint(tmp_path_factory):
    """A toy translator after one step of the recipe's model, saved as scripts/fit.py saves."""
    from datamodules import ToyTranslationDataModule
    from tasks import Seq2SeqTransformer
    from tests.helpers import TOY_MODEL, quiet_trainer

    torch.manual_seed(0)
    dm = ToyTranslationDataModule()
    model = Seq2SeqTransformer(tokenizers=dm.tokenizers, **TOY_MODEL)
    trainer = quiet_trainer(max_steps=1, limit_val_batches=0)
    trainer.fit(model, train_dataloaders=dm.train_dataloader())
    path = tmp_path_factory.mktemp("static") / "toy.ckpt"
    trainer.save_checkpoint(path)
    return path


SENTENCES = ["我 是 学 生", "我 喜 欢 学 习", "我 是"]


def test_translate_with_the_static_cache_equals_the_growing_one():
    from datamodules import ToyTranslationDataModule
    from tasks import Seq2SeqTransformer
    from tests.helpers import TOY_MODEL

    torch.manual_seed(1)  # an untrained model that decodes long with this seed
    model = Seq2SeqTransformer(tokenizers=ToyTranslationDataModule().tokenizers, **TOY_MODEL).eval()
    for beam_size in (1, 3):
        expected = model.translate(SENTENCES, beam_size=beam_size, max_len=12)
        assert model.translate(SENTENCES, beam_size=beam_size, max_len=12, static_cache="eager") == expected
    assert any(len(t.split()) > 3 for t in expected)  # untrained: long outputs, many steps compared
    with pytest.raises(ValueError, match="use_cache=False"):
        model.translate(SENTENCES, use_cache=False, static_cache="eager")


def test_translate_script_flag(toy_checkpoint, capsys):
    translate = load_script("translate")
    args = ["--ckpt", str(toy_checkpoint), "--max-len", "10", *SENTENCES]
    translate.main(args)
    plain = capsys.readouterr().out
    translate.main([*args, "--static-cache", "eager"])
    assert capsys.readouterr().out == plain and len(plain.splitlines()) == len(SENTENCES)
    with pytest.raises(SystemExit) as refused:
        translate.main([*args, "--static-cache", "cuda-graph"])
    out = capsys.readouterr()
    assert refused.value.code == 2 and "needs --device cuda" in out.err and not out.out
    with pytest.raises(SystemExit) as refused:
        translate.main([*args, "--static-cache", "eager", "--nbest", "2", "--beam-size", "2"])
    out = capsys.readouterr()
    assert refused.value.code == 2 and "not with --nbest" in out.err and not out.out
