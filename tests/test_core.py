"""The core against its oracle (torch.nn.Transformer) and its behavioural invariants."""

import pytest
import torch

from models import Seq2SeqConfig, Seq2SeqNet, SinusoidalPositionalEncoding, Transformer, attention
from models.attention import MultiHeadAttention
from models.decoding import greedy_decode
from models.masks import padding_mask
from tests.helpers import D, H, padded_inputs, padded_source_ids, small_core, small_net, torch_reference


@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("train", [True, False])
def test_from_torch_matches_torch_transformer(norm_first, activation, train):
    ref = torch_reference(norm_first, activation)
    ours = Transformer.from_torch(ref)
    ref.train(train), ours.train(train)
    src, tgt, src_pad, tgt_pad = padded_inputs()
    causal = torch.nn.Transformer.generate_square_subsequent_mask(tgt.size(1))
    with torch.no_grad():
        expected = ref(
            src,
            tgt,
            tgt_mask=causal,
            tgt_is_causal=True,
            src_key_padding_mask=src_pad,
            tgt_key_padding_mask=tgt_pad,
            memory_key_padding_mask=src_pad,
        )
        got = ours(src, tgt, src_pad, tgt_pad)
    # PyTorch's eval fast path zeroes padded positions: compare real ones.
    torch.testing.assert_close(got[~tgt_pad], expected[~tgt_pad], atol=1e-5, rtol=0)


def test_from_torch_without_bias_and_sequence_first():
    ref = torch.nn.Transformer(
        d_model=D, nhead=H, num_encoder_layers=1, num_decoder_layers=1, dim_feedforward=64, dropout=0.0, bias=False
    )
    ours = Transformer.from_torch(ref)
    src, tgt = torch.randn(5, 2, D), torch.randn(4, 2, D)  # (S, B, D): PyTorch's default layout
    causal = torch.nn.Transformer.generate_square_subsequent_mask(4)
    expected = ref(src, tgt, tgt_mask=causal).transpose(0, 1)
    torch.testing.assert_close(ours(src.transpose(0, 1), tgt.transpose(0, 1)), expected, atol=1e-5, rtol=0)


@pytest.mark.parametrize("norm_first", [False, True])
def test_padding_changes_nothing(norm_first):
    model = small_core(2, 2, norm_first=norm_first)
    src, tgt = torch.randn(1, 5, D), torch.randn(1, 4, D)
    alone = model(src, tgt)
    # The same pair inside a batch, padded on both sides by a longer neighbour.
    src_b = torch.cat([torch.cat([src, torch.randn(1, 4, D)], 1), torch.randn(1, 9, D)])
    tgt_b = torch.cat([torch.cat([tgt, torch.randn(1, 3, D)], 1), torch.randn(1, 7, D)])
    src_pad = torch.zeros(2, 9, dtype=torch.bool)
    src_pad[0, 5:] = True
    tgt_pad = torch.zeros(2, 7, dtype=torch.bool)
    tgt_pad[0, 4:] = True
    batched = model(src_b, tgt_b, src_pad, tgt_pad)
    torch.testing.assert_close(batched[0, :4], alone[0], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("norm_first", [False, True])
def test_future_is_invisible(norm_first):
    model = small_core(2, 2, norm_first=norm_first)
    src, tgt = torch.randn(2, 5, D), torch.randn(2, 6, D)
    changed = tgt.clone()
    changed[:, 4] = torch.randn(2, D)  # change target token 4 only
    a, b = model(src, tgt), model(src, changed)
    torch.testing.assert_close(a[:, :4], b[:, :4])
    assert not torch.allclose(a[:, 4:], b[:, 4:])


def test_cached_steps_equal_full_decoder():
    model = small_core(2, 3)
    src, tgt = torch.randn(2, 5, D), torch.randn(2, 6, D)
    src_pad = torch.tensor([[False] * 5, [False] * 3 + [True] * 2])
    memory = model.encode(src, src_pad)
    full = model.decode(tgt, memory, memory_key_padding_mask=src_pad)
    cache = model.new_cache()
    # A two-token prefix in one call (the bottom-right-aligned causal mask), then one token a step.
    steps = [model.decode(tgt[:, :2], memory, memory_key_padding_mask=src_pad, cache=cache)]
    for t in range(2, 6):
        steps.append(model.decode(tgt[:, t : t + 1], None, memory_key_padding_mask=src_pad, cache=cache))
    torch.testing.assert_close(torch.cat(steps, 1), full, atol=1e-5, rtol=1e-5)
    assert cache.length == 6


def test_cache_reorder_selects_rows():
    model = small_core(1, 2)
    memory = model.encode(torch.randn(3, 4, D))
    cache = model.new_cache()
    model.decode(torch.randn(3, 2, D), memory, cache=cache)
    before, memory_before = cache.keys[1].clone(), cache.memory_keys[1].clone()
    cache.reorder(torch.tensor([2, 2, 0]))  # beams: self-attention's rows move, the memory's stay
    torch.testing.assert_close(cache.keys[1], before[[2, 2, 0]])
    torch.testing.assert_close(cache.memory_keys[1], memory_before)
    cache.keep(torch.tensor([2, 0]))  # finished sentences leave: every row of theirs goes
    torch.testing.assert_close(cache.keys[1], before[[0, 2]])
    torch.testing.assert_close(cache.memory_keys[1], memory_before[[2, 0]])


def greedy_one_by_one(net: Seq2SeqNet, src: torch.Tensor, bos_id: int, eos_id: int, max_len: int) -> list[list[int]]:
    """Oracle: each sentence alone, its padding cut off, the whole prefix through the teacher-forced
    `forward` every step, argmax until `<eos>`, forced as the `max_len`-th token: no batching, no padding mask,
    no cache."""
    rows = []
    for ids in src:
        ids = ids[ids.ne(net.pad_id)][None]  # (1, S_i)
        out = [bos_id]
        while len(out) <= max_len and out[-1] != eos_id:
            out.append(int(net(ids, torch.tensor([out]))[0, -1].argmax()) if len(out) < max_len else eos_id)
        rows.append(out)
    return rows


@pytest.mark.parametrize("use_cache", [True, False])
def test_greedy_decode_equals_decoding_each_sentence_alone(use_cache):
    net = small_net().eval()
    src = padded_source_ids()
    with torch.no_grad():
        expected = greedy_one_by_one(net, src, bos_id=1, eos_id=2, max_len=25)
    got = greedy_decode(net, src, bos_id=1, eos_id=2, max_len=25, use_cache=use_cache)
    assert got.size(1) == max(map(len, expected))  # stops once every row has ended, not later
    assert [row[: len(want)] for row, want in zip(got.tolist(), expected)] == expected
    assert all(set(row[len(want) :]) <= {net.pad_id} for row, want in zip(got.tolist(), expected))  # padded after <eos>
    assert got.size(1) > 5  # an untrained net decodes long sequences: the test covers many steps


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_query_with_only_padded_keys_is_finite(dtype):
    attn = MultiHeadAttention(D, H).to(dtype)
    x = torch.randn(2, 5, D, dtype=dtype)
    allowed = torch.ones(2, 1, 5, 5, dtype=torch.bool)
    mask = padding_mask(torch.tensor([[True] * 5, [False] * 2 + [True] * 3]))  # row 0: every key is padding
    out, _ = attn(x, attn_mask=mask & allowed)
    assert torch.isfinite(out).all()
    out, weights = attn(x, attn_mask=mask, need_weights=True)
    assert torch.isfinite(out).all() and torch.isfinite(weights).all()


def test_bf16_autocast_with_heavy_padding_is_finite():
    config = Seq2SeqConfig(src_vocab_size=20, tgt_vocab_size=20, d_model=32, nhead=4, num_encoder_layers=2, num_decoder_layers=2,
                           dim_feedforward=64)  # fmt: skip
    net = Seq2SeqNet(config)
    src = torch.randint(4, 20, (4, 16))
    src[:, 1:] = 0  # 15 of 16 source tokens are padding
    tgt = torch.randint(4, 20, (4, 12))
    tgt[:, 2:] = 0
    with torch.autocast("cpu", dtype=torch.bfloat16):
        logits = net(src, tgt)
        loss = logits.float().logsumexp(-1).mean()
    loss.backward()
    assert torch.isfinite(logits).all()
    assert all(torch.isfinite(p.grad).all() for p in net.parameters() if p.grad is not None)


def test_attention_weights_match_sdpa_path_and_sum_to_one():
    model = small_core(1, 2)
    src, tgt = torch.randn(2, 5, D), torch.randn(2, 4, D)
    src_pad = torch.tensor([[False] * 5, [False] * 3 + [True] * 2])
    memory = model.encode(src, src_pad)
    plain = model.decode(tgt, memory, memory_key_padding_mask=src_pad)
    out, weights = model.decode(tgt, memory, memory_key_padding_mask=src_pad, need_weights=True)
    torch.testing.assert_close(out, plain, atol=1e-5, rtol=1e-5)
    assert len(weights) == 2 and weights[0].shape == (2, H, 4, 5)
    torch.testing.assert_close(weights[0].sum(-1), torch.ones(2, H, 4))
    assert weights[0][1, :, :, 3:].abs().max() == 0  # padded keys get no attention


def test_sinusoidal_positions_are_a_float32_buffer():
    pe = SinusoidalPositionalEncoding(16, max_len=50)
    assert pe.pe.dtype == torch.float32 and "pe" in dict(pe.named_buffers())
    assert "pe" not in pe.state_dict()  # derived from the shape, so not saved
    x = torch.zeros(1, 3, 16)
    torch.testing.assert_close(pe(x, offset=2)[0, 0], pe.pe[2])
    assert pe.pe[1, 0] == torch.sin(torch.tensor(1.0)) and pe.pe[1, 1] == torch.cos(torch.tensor(1.0))


def test_tied_embeddings_share_one_tensor():
    config = Seq2SeqConfig(
        src_vocab_size=10, tgt_vocab_size=12, d_model=16, nhead=2, num_encoder_layers=1, num_decoder_layers=1,
        dim_feedforward=32, tie_embeddings=True,
    )  # fmt: skip
    net = Seq2SeqNet(config)
    assert net.generator.weight is net.tgt_embed.weight


def test_sequence_longer_than_positions_is_refused():
    config = Seq2SeqConfig(src_vocab_size=10, tgt_vocab_size=10, d_model=16, nhead=2, num_encoder_layers=1, num_decoder_layers=1,
                           dim_feedforward=32, max_len=8)  # fmt: skip
    net = Seq2SeqNet(config)
    with pytest.raises(ValueError, match="max_len=8"):
        net(torch.randint(4, 10, (1, 9)), torch.randint(4, 10, (1, 3)))


def test_cpu_bf16_backward_is_routed_to_the_math_kernel_with_the_same_result(monkeypatch):
    """SDPA's CPU flash kernel differentiates bf16 several times slower than its math kernel
    (docs/results/benchmarks-training.md), so a pass that will be differentiated takes the math kernel; values and
    gradients stay those of SDPA's own choice."""
    half = torch.zeros(1, dtype=torch.bfloat16, requires_grad=True)
    assert attention._slow_cpu_backward(half, 0.0)
    assert not attention._slow_cpu_backward(half, 0.1)  # dropout: SDPA takes the math kernel by itself
    assert not attention._slow_cpu_backward(half.detach(), 0.0)  # inference keeps the faster flash forward
    assert not attention._slow_cpu_backward(torch.zeros(1, requires_grad=True), 0.0)  # fp32

    attn = MultiHeadAttention(D, H)
    x = torch.randn(2, 5, D, requires_grad=True)
    mask = padding_mask(torch.tensor([[False] * 5, [False] * 3 + [True] * 2]))

    def output_and_gradient():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out, _ = attn(x, attn_mask=mask)
        return out.float(), torch.autograd.grad(out.float().square().sum(), x)[0]

    routed = output_and_gradient()
    monkeypatch.setattr(attention, "_slow_cpu_backward", lambda q, dropout_p: False)
    sdpa_choice = output_and_gradient()
    for a, b in zip(routed, sdpa_choice):
        torch.testing.assert_close(a, b, atol=3e-2, rtol=3e-2)
