"""Relative position biases: a per-head float added to the attention logits, depending on where a query and a key sit
relative to each other. docs/guide/variants.md ("Position schemes") lists the schemes, their sources and the one way
every scheme reaches the logits: a module called once per forward pass → (L, H, T, S), layer i's slice its own."""

from __future__ import annotations

import math

import torch
from torch import nn

from .positional import positions
from .registry import IMAGE, Scheme, Tokens, lookup


def t5_bucket(
    relative_position: torch.Tensor, bidirectional: bool, num_buckets: int = 32, max_distance: int = 128
) -> torch.Tensor:
    """T5's bucket of each key position − query position (Mesh TensorFlow's `_relative_position_bucket`; the buckets:
    docs/guide/variants.md, "Position schemes"). In float64, so that no distance rounds to its neighbour's bucket."""
    n = -relative_position  # query − key: positive for keys in the past
    bucket = torch.zeros_like(n)
    if bidirectional:
        num_buckets //= 2
        bucket = bucket + (n < 0).long() * num_buckets  # keys in the future: the upper half
        n = n.abs()
    else:
        n = n.clamp(min=0)
    max_exact = num_buckets // 2
    scaled = torch.log(n.double().clamp(min=1) / max_exact) / math.log(max_distance / max_exact)
    large = (max_exact + (scaled * (num_buckets - max_exact)).long()).clamp(max=num_buckets - 1)
    return bucket + torch.where(n < max_exact, n, large)


class T5RelativeBias(nn.Module):
    """T5's bucketed bias: one learned scalar per (bucket, head), shared by every layer of the stack (T5
    computes it in the first layer and passes it on). T5 initialises it like its other weights; we start
    at zero, so an untrained model attends as one without positions would."""

    def __init__(self, nhead: int, bidirectional: bool, num_buckets: int = 32, max_distance: int = 128):
        super().__init__()
        self.bidirectional, self.num_buckets, self.max_distance = bidirectional, num_buckets, max_distance
        self.table = nn.Parameter(torch.zeros(num_buckets, nhead))  # (buckets, H); draws nothing from the RNG

    def forward(self, tgt_len: int, src_len: int, offset: int | torch.Tensor = 0) -> torch.Tensor:  # → (1, H, T, S)
        device = self.table.device
        query = positions(offset, tgt_len, device)  # (T,)
        key = torch.arange(src_len, device=device)  # (S,)
        buckets = t5_bucket(key[None, :] - query[:, None], self.bidirectional, self.num_buckets, self.max_distance)
        return self.table[buckets].permute(2, 0, 1)[None]  # (T, S, H) → (1, H, T, S)

    def extra_repr(self) -> str:
        return f"bidirectional={self.bidirectional}, num_buckets={self.num_buckets}, max_distance={self.max_distance}"


def alibi_slopes(nhead: int) -> list[float]:
    """The ALiBi paper's slopes: for n heads (a power of 2) the geometric sequence 2^(−8/n), 2^(−16/n), …,
    2^(−8); otherwise those of the closest smaller power of 2, then every other slope of twice that many."""
    if math.log2(nhead).is_integer():
        start = 2 ** (-8 / nhead)
        return [start ** (i + 1) for i in range(nhead)]
    closest = 2 ** math.floor(math.log2(nhead))
    return alibi_slopes(closest) + alibi_slopes(2 * closest)[0::2][: nhead - closest]


class ALiBi(nn.Module):
    """−slope_h · |i − j| for query i and key j: a linear penalty on distance, steeper for the first heads.
    The paper's models are causal (i ≥ j); the encoder takes the same penalty in both directions. The
    slopes are a buffer, derived from nhead, not saved in checkpoints."""

    def __init__(self, nhead: int):
        super().__init__()
        self.register_buffer("slopes", torch.tensor(alibi_slopes(nhead)), persistent=False)  # (H,)

    def forward(self, tgt_len: int, src_len: int, offset: int | torch.Tensor = 0) -> torch.Tensor:  # → (1, H, T, S)
        device = self.slopes.device
        query = positions(offset, tgt_len, device)  # (T,)
        key = torch.arange(src_len, device=device)  # (S,)
        distance = (key[None, :] - query[:, None]).abs().to(self.slopes.dtype)  # (T, S)
        return (-self.slopes[:, None, None] * distance)[None]


def swin_relative_index(height: int, width: int) -> torch.Tensor:
    """(N, N) index into a (2h − 1)(2w − 1) table for the N = h·w tokens of an h × w grid in reading order:
    (Δrow + h − 1)(2w − 1) + (Δcol + w − 1), as Swin's `relative_position_index`."""
    rows, cols = torch.meshgrid(torch.arange(height), torch.arange(width), indexing="ij")  # (h, w) each
    coords = torch.stack([rows.flatten(), cols.flatten()])  # (2, N)
    delta = coords[:, :, None] - coords[:, None, :]  # (2, N, N): query's minus key's
    return (delta[0] + height - 1) * (2 * width - 1) + (delta[1] + width - 1)


class SwinRelativeBias2d(nn.Module):
    """Swin's learned 2-D bias for the encoder over an h × w grid of tokens: a table of (2h − 1)(2w − 1)
    offsets × heads for each layer (Swin gives every block its own; they cost L·(2h − 1)(2w − 1)·H scalars,
    196 a layer on a 4 × 4 grid with 4 heads, and let each layer weigh distance its own way), initialised as
    Swin's with a truncated normal of std 0.02.

    `extra_tokens` (a class token) are placed before the grid; as in BEiT (Bao et al., 2022) three more
    learned entries per head hold their biases: class token → image token, image token → class token, and
    class token → class token."""

    def __init__(self, nhead: int, height: int, width: int, num_layers: int = 1, extra_tokens: int = 0):
        super().__init__()
        if extra_tokens not in (0, 1):
            raise ValueError(f"the 2-D relative bias takes at most one class token, got {extra_tokens}")
        self.height, self.width, self.extra_tokens = height, width, extra_tokens
        offsets = (2 * height - 1) * (2 * width - 1)
        self.table = nn.Parameter(torch.empty(num_layers, offsets + 3 * extra_tokens, nhead))  # (L, R, H)
        nn.init.trunc_normal_(self.table, std=0.02)
        index = swin_relative_index(height, width)  # (N, N)
        if extra_tokens:
            n = height * width
            index = torch.cat([torch.full((n, 1), offsets + 1), index], dim=1)  # image token → class token
            index = torch.cat([torch.full((1, n + 1), offsets), index], dim=0)  # class token → image token
            index[0, 0] = offsets + 2
        self.register_buffer("index", index, persistent=False)  # (N', N'), derived from the grid

    def forward(self, tgt_len: int, src_len: int, offset: int = 0) -> torch.Tensor:  # → (L, H, N', N')
        n = self.index.size(0)
        if (tgt_len, src_len, offset) != (n, n, 0):
            raise ValueError(f"the 2-D relative bias is built for {n} tokens, got {tgt_len} queries and {src_len} keys")
        return self.table[:, self.index].permute(0, 3, 1, 2)  # (L, N', N', H) → (L, H, N', N')

    def extra_repr(self) -> str:
        return f"grid={self.height}x{self.width}, extra_tokens={self.extra_tokens}"


# Name → relative bias (models.registry.Scheme): the module of one stack, or None. The 1-D ones read an image's
# tokens in reading order (and the decoder head's queries); Swin's reads the grid, so a sequence gets none of it.
RELATIVE_BIASES = {
    "t5": Scheme(lambda t: T5RelativeBias(t.nhead, bidirectional=not t.causal)),
    "alibi": Scheme(lambda t: ALiBi(t.nhead)),
    "2d": Scheme(
        lambda t: None if t.grid is None else SwinRelativeBias2d(t.nhead, *t.grid, t.num_layers, extra_tokens=t.extra),
        fits=(IMAGE,),
    ),
}


def relative_bias(kind: str | None, tokens: Tokens) -> nn.Module | None:
    """The bias module of `RELATIVE_BIASES[kind]` for one stack's `tokens`, or None (no relative bias)."""
    return None if kind is None else lookup(RELATIVE_BIASES, kind, "relative_bias").build(tokens)
