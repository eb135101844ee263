"""The position schemes beyond the 1-D ones: MAE's 2-D sin-cos table and Swin's 2-D relative bias for
image tokens, T5's bucketed bias and ALiBi for text, and the additive bias in the core that carries every
relative scheme. Each is held to an oracle written independently of it (MAE's numpy code, brute force over
all pairs, T5's formula distance by distance, ALiBi's −slope·|i − j|) and to what a relative scheme
promises: a sequence shifted inside a longer window gives the same outputs. The invariants that every
variant keeps (padding, causality, cache, batch, bf16) are in tests/test_variants.py."""

import math

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from common.errors import HyperparameterError
from models import MnistNet, MnistNetConfig, Transformer, TransformerConfig
from models.attention import MultiHeadAttention
from models.config import MnistNetSettings, Seq2SeqSettings
from models.masks import with_bias
from models.positional import apply_rotary
from models.positional2d import AxialRotaryEmbedding, LearnedPositionalEncoding2d, sincos_2d_table
from models.relative import ALiBi, SwinRelativeBias2d, T5RelativeBias, alibi_slopes, swin_relative_index, t5_bucket
from tasks import MnistSequenceClassifier
from tests.helpers import PAD, quiet_trainer, sources, tiny_net

TINY = dict(
    d_model=32,
    nhead=4,
    num_encoder_layers=2,
    num_decoder_layers=1,
    dim_feedforward=48,
    dropout=0.0,
    activation="gelu",
    norm_first=True,
)


# ---------------------------------------------------------------------------------------------- MAE's table


def mae_get_2d_sincos_pos_embed(embed_dim, grid_h_size, grid_w_size, cls_token=False):
    """MAE's util/pos_embed.py (facebookresearch/mae), with its square grid_size split into h and w."""
    grid_h = np.arange(grid_h_size, dtype=np.float32)
    grid_w = np.arange(grid_w_size, dtype=np.float32)
    grid = np.meshgrid(grid_w, grid_h)  # here w goes first
    grid = np.stack(grid, axis=0)
    grid = grid.reshape([2, 1, grid_h_size, grid_w_size])
    pos_embed = mae_get_2d_sincos_pos_embed_from_grid(embed_dim, grid)
    if cls_token:
        pos_embed = np.concatenate([np.zeros([1, embed_dim]), pos_embed], axis=0)
    return pos_embed


def mae_get_2d_sincos_pos_embed_from_grid(embed_dim, grid):
    assert embed_dim % 2 == 0
    # use half of dimensions to encode grid_h
    emb_h = mae_get_1d_sincos_pos_embed_from_grid(embed_dim // 2, grid[0])  # (H*W, D/2)
    emb_w = mae_get_1d_sincos_pos_embed_from_grid(embed_dim // 2, grid[1])  # (H*W, D/2)
    emb = np.concatenate([emb_h, emb_w], axis=1)  # (H*W, D)
    return emb


def mae_get_1d_sincos_pos_embed_from_grid(embed_dim, pos):
    assert embed_dim % 2 == 0
    omega = np.arange(embed_dim // 2, dtype=np.float64)
    omega /= embed_dim / 2.0
    omega = 1.0 / 10000**omega  # (D/2,)
    pos = pos.reshape(-1)  # (M,)
    out = np.einsum("m,d->md", pos, omega)  # (M, D/2), outer product
    emb_sin = np.sin(out)  # (M, D/2)
    emb_cos = np.cos(out)  # (M, D/2)
    emb = np.concatenate([emb_sin, emb_cos], axis=1)  # (M, D)
    return emb


@pytest.mark.parametrize("dim, height, width", [(32, 4, 4), (128, 7, 7), (16, 28, 1), (64, 2, 5)])
@pytest.mark.parametrize("cls_token", [False, True])
def test_sincos2d_table_is_maes(dim, height, width, cls_token):
    expected = torch.from_numpy(mae_get_2d_sincos_pos_embed(dim, height, width, cls_token)).float()
    torch.testing.assert_close(sincos_2d_table(dim, height, width, int(cls_token)), expected, atol=1e-6, rtol=0)


@pytest.mark.parametrize("tokens, head, grid", [("patches", "cls", (4, 4)), ("rows", "mean", (28, 1))])
def test_mnist_sincos2d_is_a_buffer_on_the_token_grid(tokens, head, grid):
    net = MnistNet(MnistNetConfig(tokens=tokens, head=head, positional="sincos2d", **TINY))
    assert net.grid == grid and not any("pos" in name for name, _ in net.named_parameters())
    assert "pos.pe" not in net.state_dict()  # derived from the grid, not saved
    extra = int(head == "cls")
    torch.testing.assert_close(net.pos.pe, sincos_2d_table(32, *grid, extra))
    x = torch.randn(2, extra + grid[0] * grid[1], 32)
    torch.testing.assert_close(net.pos(x), x + net.pos.pe)
    if extra:
        assert not net.pos.pe[0].any()  # the class token's row is zero


# ---------------------------------------------------------------------------------------------- learned 2-D


def test_learned2d_gives_each_token_its_row_plus_its_column_by_brute_force():
    height, width, dim = 3, 4, 8
    pos = LearnedPositionalEncoding2d(dim, height, width, extra_tokens=1)
    assert sum(p.numel() for p in pos.parameters()) == (height + width + 1) * dim  # h + w vectors, not h·w
    x = torch.randn(2, 1 + height * width, dim)
    out = pos(x)
    rows, cols, extra = pos.rows.detach(), pos.cols.detach(), pos.extra.detach()
    torch.testing.assert_close(out[:, 0], x[:, 0] + extra[0])  # the class token: a vector of its own
    for token in range(height * width):
        row, col = divmod(token, width)  # reading order
        torch.testing.assert_close(out[:, 1 + token], x[:, 1 + token] + rows[row] + cols[col])


def test_learned2d_tokens_of_one_column_differ_by_their_rows_only():
    """What row + column promises (and one table of h·w vectors would not): moving a token down a row adds the same
    vector in every column."""
    pos = LearnedPositionalEncoding2d(16, 4, 4)
    table = pos.table().detach().view(4, 4, 16)  # (h, w, D)
    steps = table[1:] - table[:-1]  # (h - 1, w, D): one row down, in each column
    torch.testing.assert_close(steps, steps[:, :1].expand_as(steps))
    assert not torch.allclose(steps[0], steps[1])


@pytest.mark.parametrize("tokens, head, grid", [("patches", "cls", (4, 4)), ("rows", "decoder", (28, 1))])
def test_mnist_learned2d_learns_a_table_per_axis_of_the_token_grid(tokens, head, grid):
    net = MnistNet(MnistNetConfig(tokens=tokens, head=head, positional="learned2d", **TINY))
    extra = int(head == "cls")
    assert isinstance(net.pos, LearnedPositionalEncoding2d)
    state = net.state_dict()
    assert state["pos.rows"].shape == (grid[0], 32) and state["pos.cols"].shape == (grid[1], 32)
    assert state["pos.extra"].shape == (extra, 32)
    with pytest.raises(HyperparameterError, match="positional='learned2d'"):  # a sentence has no rows and columns
        Seq2SeqSettings(positional="learned2d")


# ---------------------------------------------------------------------------------------------- 2-D rotary


def test_axial_rotary_turns_each_pair_by_its_row_or_column_by_brute_force():
    head_dim, height, width = 8, 3, 4
    rope = AxialRotaryEmbedding(head_dim, height, width, extra_tokens=1)
    x = torch.randn(1, 2, 1 + height * width, head_dim, dtype=torch.float64)  # (B, H, N', Dh)
    out = apply_rotary(x, rope(1 + height * width, dtype=torch.float64))
    expected = x.clone()  # the class token (index 0) is not turned
    half, quarter = head_dim // 2, head_dim // 4
    for token in range(height * width):
        row, col = divmod(token, width)
        for i in range(half):  # dims i and i + Dh/2 form a pair; the first Dh/4 pairs follow the row
            theta = (row if i < quarter else col) * 10000 ** -((i % quarter) / quarter)
            a, b = x[..., 1 + token, i], x[..., 1 + token, i + half]
            expected[..., 1 + token, i] = a * math.cos(theta) - b * math.sin(theta)
            expected[..., 1 + token, i + half] = b * math.cos(theta) + a * math.sin(theta)
    torch.testing.assert_close(out, expected)


def test_axial_rotary_scores_depend_on_the_row_and_column_offsets_only():
    height, width = 3, 4
    rope = AxialRotaryEmbedding(16, height, width)
    n = height * width
    q = apply_rotary(torch.randn(16).expand(1, 1, n, 16), rope(n))[0, 0]  # one query vector at every token
    k = apply_rotary(torch.randn(16).expand(1, 1, n, 16), rope(n))[0, 0]
    scores = {}
    for i in range(n):
        for j in range(n):
            delta = (i // width - j // width, i % width - j % width)
            scores.setdefault(delta, []).append(float(q[i] @ k[j]))
    for values in scores.values():
        assert values == pytest.approx([values[0]] * len(values), abs=1e-5)
    firsts = [values[0] for values in scores.values()]
    assert len({round(v, 4) for v in firsts}) == len(firsts)  # and each offset scores differently


def test_mnist_rotary2d_rotates_the_encoder_only():
    net = MnistNet(MnistNetConfig(positional="rotary2d", head="decoder", **TINY))
    assert net.pos is None and net.core.rotary is None and net.core.encoder_rotary.grid == (4, 4)
    assert torch.isfinite(net(torch.randn(2, 1, 28, 28))).all()
    with pytest.raises(HyperparameterError, match="divisible by 4"):
        MnistNetSettings(d_model=24, nhead=4, positional="rotary2d")


# ---------------------------------------------------------------------------------------------- Swin's bias


@pytest.mark.parametrize("height, width", [(4, 4), (28, 1), (2, 3), (1, 1)])
def test_swin_index_is_the_brute_force_over_all_pairs(height, width):
    index = swin_relative_index(height, width)
    n = height * width
    expected = torch.empty(n, n, dtype=torch.long)
    for i in range(n):
        for j in range(n):
            (ri, ci), (rj, cj) = divmod(i, width), divmod(j, width)
            expected[i, j] = (ri - rj + height - 1) * (2 * width - 1) + (ci - cj + width - 1)
    assert torch.equal(index, expected)
    assert int(index.max()) < (2 * height - 1) * (2 * width - 1)


def test_swin_bias_reads_each_layers_table_and_the_class_token_entries():
    bias_module = SwinRelativeBias2d(nhead=3, height=2, width=3, num_layers=2, extra_tokens=1)
    offsets = 3 * 5
    assert bias_module.table.shape == (2, offsets + 3, 3)
    bias = bias_module(7, 7)  # (L, H, 1 + 6, 1 + 6)
    assert bias.shape == (2, 3, 7, 7)
    table = bias_module.table.detach()
    for layer in range(2):
        for i in range(7):
            for j in range(7):
                if i == 0 and j == 0:
                    entry = offsets + 2
                elif i == 0:
                    entry = offsets  # class token → image token
                elif j == 0:
                    entry = offsets + 1  # image token → class token
                else:
                    (ri, ci), (rj, cj) = divmod(i - 1, 3), divmod(j - 1, 3)
                    entry = (ri - rj + 1) * 5 + (ci - cj + 2)
                torch.testing.assert_close(bias[layer, :, i, j], table[layer, entry])
    with pytest.raises(ValueError, match="7 tokens"):
        bias_module(6, 6)


def test_mnist_relative_2d_gives_every_encoder_layer_its_own_table():
    net = MnistNet(MnistNetConfig(head="mean", relative_bias="2d", positional="none", **TINY))
    assert net.pos is None and net.core.encoder_bias.table.shape == (2, 7 * 7, 4)
    layers = []

    def keep_bias(module, args, kwargs):
        layers.append(kwargs["attn_bias"])

    for layer in net.core.encoder_layers:
        layer.self_attn.register_forward_pre_hook(keep_bias, with_kwargs=True)
    net(torch.randn(2, 1, 28, 28))
    table, index = net.core.encoder_bias.table, net.core.encoder_bias.index
    for i, bias in enumerate(layers):
        assert bias.shape == (1, 4, 16, 16)
        torch.testing.assert_close(bias[0], table[i][index].permute(2, 0, 1))


@pytest.mark.parametrize(
    "options",
    [
        dict(positional="sincos2d"),
        dict(relative_bias="2d"),
        dict(positional="none", relative_bias="2d"),
        dict(positional="sincos2d", relative_bias="2d", head="cls"),
        dict(positional="sincos2d", relative_bias="2d", tokens="rows", head="decoder"),
        dict(positional="rotary2d", head="cls"),
        dict(positional="learned2d", head="cls"),
    ],
    ids=["sincos2d", "learned+relative-2d", "relative-2d", "both-cls", "both-rows-decoder", "rotary2d-cls", "learned2d-cls"],
)
def test_each_image_scheme_trains_a_step(tmp_path, options):
    torch.manual_seed(0)
    model = MnistSequenceClassifier(net=MnistNetSettings(**{**TINY, "head": "mean", **options}), lr=1e-2, warmup_fraction=0.0)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    data = TensorDataset(torch.randn(8, 1, 28, 28), torch.randint(0, 10, (8,)))
    trainer = quiet_trainer(tmp_path, max_steps=1, limit_val_batches=0)
    trainer.fit(model, DataLoader(data, batch_size=8))
    assert torch.isfinite(trainer.callback_metrics["train/loss"])
    after = model.state_dict()
    if options.get("relative_bias"):  # the bias table is learned: the step moved it
        assert not torch.equal(after["net.core.encoder_bias.table"], before["net.core.encoder_bias.table"])
    if options.get("positional") == "learned2d":  # so are the row, column and class-token tables
        assert all(not torch.equal(after[f"net.pos.{k}"], before[f"net.pos.{k}"]) for k in ("rows", "cols", "extra"))
    assert all(torch.isfinite(v).all() for v in after.values() if v.is_floating_point())


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("head", ["decoder", "cls"])
@pytest.mark.parametrize("positional", ["sincos2d", "rotary2d", "learned2d"])
def test_image_schemes_stay_finite_in_half_precision(dtype, head, positional):
    """The whole net cast (bias tables and sin-cos buffer included), and fp32 weights under CPU bf16 autocast."""
    torch.manual_seed(0)
    options = dict(positional=positional, relative_bias="2d", head=head, **TINY)
    images = torch.randn(3, 1, 28, 28)
    net = MnistNet(MnistNetConfig(**options)).eval()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert torch.isfinite(net(images)).all()
    logits = net.to(dtype)(images.to(dtype))
    assert logits.dtype == dtype and torch.isfinite(logits).all()


def test_bad_scheme_settings_are_refused():
    with pytest.raises(HyperparameterError, match="relative_bias='swin'"):
        MnistNetSettings(**TINY, relative_bias="swin")
    with pytest.raises(HyperparameterError, match="divisible by 4"):
        MnistNetSettings(d_model=30, nhead=3, positional="sincos2d")
    for bad in (dict(relative_bias="2d"), dict(positional="sincos2d")):
        with pytest.raises(HyperparameterError, match=f"{next(iter(bad))}="):
            Seq2SeqSettings(**bad)


# ---------------------------------------------------------------------------------------------- the core's bias


def test_float_bias_is_added_to_the_logits_under_the_masks():
    """SDPA with the folded float mask equals the explicit softmax(q·kᵀ/√d + bias) with masked keys dropped."""
    attn = MultiHeadAttention(16, 2).eval()
    x = torch.randn(2, 5, 16)
    bias = torch.randn(1, 2, 5, 5)
    pad = torch.tensor([[False] * 5, [False, False, False, True, True]])
    allowed = ~pad[:, None, None, :]
    out = attn(x, attn_mask=allowed, attn_bias=bias, is_causal=True)[0]
    q, k, v = attn.qkv_proj(x).chunk(3, dim=-1)
    q, k, v = (t.view(2, 5, 2, 8).transpose(1, 2) for t in (q, k, v))
    scores = q @ k.transpose(-2, -1) / math.sqrt(8) + bias
    visible = allowed & torch.ones(5, 5, dtype=torch.bool).tril()
    weights = scores.masked_fill(~visible, float("-inf")).softmax(-1)
    expected = attn.out_proj((weights @ v).transpose(1, 2).reshape(2, 5, 16))
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(attn(x, attn_mask=allowed, attn_bias=bias, is_causal=True, need_weights=True)[0], out)
    assert with_bias(bias, None, False, torch.bfloat16).dtype == torch.bfloat16


# ---------------------------------------------------------------------------------------------- T5's buckets


def mesh_tf_bucket(relative_position: int, bidirectional: bool, num_buckets: int, max_distance: int) -> int:
    """Mesh TensorFlow's `_relative_position_bucket` (used by T5), one distance at a time in plain Python."""
    ret = 0
    n = -relative_position
    if bidirectional:
        num_buckets //= 2
        ret += int(n < 0) * num_buckets
        n = abs(n)
    else:
        n = max(n, 0)
    max_exact = num_buckets // 2
    if n < max_exact:
        return ret + n
    val_if_large = max_exact + int(math.log(n / max_exact) / math.log(max_distance / max_exact) * (num_buckets - max_exact))
    return ret + min(val_if_large, num_buckets - 1)


@pytest.mark.parametrize("bidirectional", [True, False])
@pytest.mark.parametrize("num_buckets, max_distance", [(32, 128), (64, 256), (16, 100)])
def test_t5_buckets_follow_the_formula_on_every_distance_up_to_512(bidirectional, num_buckets, max_distance):
    distances = torch.arange(-512, 513)
    buckets = t5_bucket(distances, bidirectional, num_buckets, max_distance)
    expected = [mesh_tf_bucket(d, bidirectional, num_buckets, max_distance) for d in distances.tolist()]
    assert buckets.tolist() == expected
    # Every bucket is reached within ±512, but the future half's distance 0 (which is the past half's).
    assert set(expected) == set(range(num_buckets)) - ({num_buckets // 2} if bidirectional else set())


def test_t5_bias_reads_its_table_by_bucket_at_the_queries_offset():
    module = T5RelativeBias(nhead=3, bidirectional=False)
    with torch.no_grad():
        module.table.normal_()
    bias = module(2, 9, offset=7)  # the last two queries of a 9-token prefix, as a cached decoder asks
    assert bias.shape == (1, 3, 2, 9)
    for i, query in enumerate((7, 8)):
        for key in range(9):
            bucket = mesh_tf_bucket(key - query, False, 32, 128)
            torch.testing.assert_close(bias[0, :, i, key], module.table[bucket])


# ---------------------------------------------------------------------------------------------- ALiBi


@pytest.mark.parametrize(
    "nhead, slopes",
    [
        (8, [2**-1, 2**-2, 2**-3, 2**-4, 2**-5, 2**-6, 2**-7, 2**-8]),  # the paper's example for 8 heads
        (4, [2**-2, 2**-4, 2**-6, 2**-8]),
        (2, [2**-4, 2**-8]),
        (6, [2**-2, 2**-4, 2**-6, 2**-8, 2**-1, 2**-3]),  # 4 heads' slopes, then every other of 8 heads'
    ],
)
def test_alibi_is_minus_slope_times_distance_by_brute_force(nhead, slopes):
    assert alibi_slopes(nhead) == pytest.approx(slopes, rel=1e-12)
    module = ALiBi(nhead)
    assert not list(module.parameters()) and not module.state_dict()  # fixed: nothing learned, nothing saved
    for tgt_len, src_len, offset in ((6, 6, 0), (1, 9, 8), (3, 10, 7)):
        bias = module(tgt_len, src_len, offset)
        assert bias.shape == (1, nhead, tgt_len, src_len)
        for h in range(nhead):
            for i in range(tgt_len):
                for j in range(src_len):
                    assert bias[0, h, i, j].item() == pytest.approx(-slopes[h] * abs(offset + i - j), abs=1e-6)


# ---------------------------------------------------------------------------------------------- shifts


@pytest.mark.parametrize("scheme", ["t5", "alibi"])
def test_a_relative_bias_without_absolute_positions_ignores_a_shift_of_the_sequence(scheme):
    """The same source and target placed after k masked positions of a longer window: every real position's
    output is unchanged, in the encoder (bidirectional bias) and in the decoder (causal bias)."""
    torch.manual_seed(0)
    D, k_src, k_tgt = 32, 6, 3
    core = Transformer(
        TransformerConfig(d_model=D, nhead=4, num_encoder_layers=2, num_decoder_layers=2, dim_feedforward=48, dropout=0.0),
        encoder_bias=make_bias(scheme, causal=False), decoder_bias=make_bias(scheme, causal=True),
    ).eval()  # fmt: skip
    src, tgt = torch.randn(2, 5, D), torch.randn(2, 4, D)
    src_pad, tgt_pad = torch.zeros(2, 5, dtype=torch.bool), torch.zeros(2, 4, dtype=torch.bool)
    src_pad[1, 3:] = True  # the second pair's source has 3 real tokens, right-padded

    def shifted(x, pad, k):  # k junk positions before the sequence, masked as padding
        junk = torch.randn(x.size(0), k, D)
        return torch.cat([junk, x], 1), torch.cat([torch.ones(x.size(0), k, dtype=torch.bool), pad], 1)

    memory = core.encode(src, src_pad)
    memory_s = core.encode(*shifted(src, src_pad, k_src))
    torch.testing.assert_close(memory_s[:, k_src:][~src_pad], memory[~src_pad], atol=1e-5, rtol=1e-5)
    out = core.decode(tgt, memory, None, src_pad)
    tgt_s, tgt_pad_s = shifted(tgt, tgt_pad, k_tgt)
    out_s = core.decode(tgt_s, memory_s, tgt_pad_s, shifted(src, src_pad, k_src)[1])
    torch.testing.assert_close(out_s[:, k_tgt:], out, atol=1e-5, rtol=1e-5)
    # The bias matters: other values of it change the encoder's outputs.
    with torch.no_grad():
        values = core.encoder_bias.table if scheme == "t5" else core.encoder_bias.slopes
        values.mul_(3)
    assert not torch.allclose(core.encode(src, src_pad)[~src_pad], memory[~src_pad], atol=1e-3)


def make_bias(scheme: str, causal: bool) -> torch.nn.Module:
    if scheme == "alibi":
        return ALiBi(4)
    module = T5RelativeBias(4, bidirectional=not causal)
    with torch.no_grad():
        module.table.normal_()
    return module


@pytest.mark.parametrize("options", [dict(positional="none", relative_bias="t5"), dict(positional="none", relative_bias="alibi")])
def test_left_padding_the_source_changes_nothing_with_relative_positions_only(options):
    """Through the whole translation network: a source shifted right by padding (masked) translates the same;
    with sinusoids added to the embeddings the same shift changes the logits (the test can fail)."""
    src, tgt = sources((5, 3)), torch.randint(3, 24, (2, 4))
    shifted = torch.cat([torch.full((2, 4), PAD), src], dim=1)
    net = tiny_net(**options)
    torch.testing.assert_close(net(shifted, tgt), net(src, tgt), atol=1e-5, rtol=1e-5)
    absolute = tiny_net(**{**options, "positional": "sinusoidal"})
    assert not torch.allclose(absolute(shifted, tgt), absolute(src, tgt), atol=1e-3)
