"""Positional encodings: fixed sinusoids (Vaswani et al., 2017, §3.5) or learned vectors, both
added to the embeddings; or rotary positions (RoPE, Su et al., 2021), which rotate the queries
and keys of self-attention instead and add nothing. `POSITIONALS` is every scheme by name, the 2-D
ones of image grids (models.positional2d) included: the `positional` setting's allowed values."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from .positional2d import AxialRotaryEmbedding, LearnedPositionalEncoding2d, SinCos2dPositionalEncoding
from .registry import IMAGE, Scheme, Tokens, lookup


def positions(offset: int | torch.Tensor, length: int, device=None) -> torch.Tensor:
    """(T,) long: the positions offset … offset + T - 1. `offset` is an int, or a (1,) tensor (a static cache's,
    models.cache: one captured decoding step then serves every position), so tables are indexed, not sliced."""
    return offset + torch.arange(length, device=device)


class SinusoidalPositionalEncoding(nn.Module):
    """Adds PE[pos, 2i] = sin(pos / 10000^(2i/D)), PE[pos, 2i+1] = cos(...) to (B, T, D) inputs.

    `halves=True` lays the same values out as [sin | cos]: PE[pos, i] = sin(...), PE[pos, D/2 + i] = cos(...),
    the layout of Marian (OPUS-MT) and fairseq, computed in float64 and rounded once, as Marian's is."""

    def __init__(self, d_model: int, max_len: int = 512, halves: bool = False):
        super().__init__()
        if halves:
            position = torch.arange(max_len, dtype=torch.float64)[:, None]  # (L, 1)
            angles = position / 10000.0 ** (torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)  # (L, ceil(D/2))
            pe = torch.cat([angles.sin(), angles[:, : d_model // 2].cos()], dim=1).to(torch.float32)  # (L, D)
        else:
            position = torch.arange(max_len, dtype=torch.float32)[:, None]  # (L, 1)
            inv_freq = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model))
            pe = torch.zeros(max_len, d_model, dtype=torch.float32)
            pe[:, 0::2] = torch.sin(position * inv_freq)
            pe[:, 1::2] = torch.cos(position * inv_freq[: d_model // 2])
        # A buffer moves with .to(device) once; not persistent because it is derived from the shape.
        self.register_buffer("pe", pe, persistent=False)
        self.max_len = max_len

    def forward(self, x: torch.Tensor, offset: int | torch.Tensor = 0) -> torch.Tensor:  # (B, T, D)
        """`offset`: the first token's position; a (1,) tensor from a static cache (models.cache)."""
        return x + self.pe.index_select(0, positions(offset, x.size(1), x.device)).to(x.dtype)


class LearnedPositionalEncoding(nn.Module):
    def __init__(self, d_model: int, max_len: int = 512):
        super().__init__()
        self.embedding = nn.Embedding(max_len, d_model)
        nn.init.normal_(self.embedding.weight, std=0.02)
        self.max_len = max_len

    def forward(self, x: torch.Tensor, offset: int | torch.Tensor = 0) -> torch.Tensor:  # (B, T, D)
        return x + self.embedding.weight.index_select(0, positions(offset, x.size(1), x.device)).to(x.dtype)


class RotaryEmbedding(nn.Module):
    """Rotary positions for the queries and keys of self-attention (RoPE, Su et al., 2021).

    Dimension i of a head is paired with dimension i + Dh/2 (the "rotate-half" layout of GPT-NeoX
    and LLaMA) and each pair is rotated by the angle pos · base^(-2i/Dh): the dot product of a
    query at position m and a key at position n then depends on m - n only. `forward` returns the
    (cos, sin) tables of positions offset … offset + T - 1, once per forward pass for every layer
    (the offset is the KV cache's length: cached keys were rotated at their own positions).
    No buffer: the tables are computed in at least float32 whatever `.to(dtype)` the model had.
    """

    def __init__(self, head_dim: int, base: float = 10000.0):
        super().__init__()
        if head_dim % 2:
            raise ValueError(f"rotary positions need an even head dimension, got {head_dim}")
        self.head_dim, self.base = head_dim, base

    def forward(self, length: int, offset: int | torch.Tensor = 0, device=None, dtype=torch.float32):
        dtype = torch.promote_types(dtype, torch.float32)  # float64 nets get float64 tables
        inv_freq = self.base ** -(torch.arange(0, self.head_dim, 2, device=device, dtype=dtype) / self.head_dim)
        pos = positions(offset, length, device).to(dtype)  # (T,)
        angles = pos[:, None] * inv_freq[None, :]  # (T, Dh/2)
        angles = torch.cat([angles, angles], dim=-1)  # (T, Dh): dims i and i + Dh/2 share an angle
        return angles.cos(), angles.sin()

    def extra_repr(self) -> str:
        return f"head_dim={self.head_dim}, base={self.base}"


def apply_rotary(x: torch.Tensor, rope: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    """Rotate (B, H, T, Dh) queries or keys by the (T, Dh) tables of `RotaryEmbedding`, computed
    in the tables' precision (at least float32, also under bf16/fp16) and returned in x's dtype."""
    cos, sin = rope
    xf = x.to(cos.dtype)
    x1, x2 = xf.chunk(2, dim=-1)  # (B, H, T, Dh/2) each
    return (xf * cos + torch.cat([-x2, x1], dim=-1) * sin).to(x.dtype)


@dataclass(frozen=True)
class Positions:
    """What a position scheme gives a network for one stack: a module that adds positions to the (B, T, D)
    embeddings (`forward(x, offset=0)`), rotary positions in every self-attention (the core's `rotary`), or
    the encoder's own rotary tables (`encoder_rotary`: RotaryEmbedding's signature). Nothing at all: "none"."""

    added: nn.Module | None = None
    rotary: bool = False
    encoder_rotary: nn.Module | None = None


def _sincos2d_needs(h: Mapping[str, Any]) -> str | bool:
    d_model = h["d_model"]
    return d_model % 4 == 0 or f"positional='sincos2d' needs d_model divisible by 4 (sin and cos for each axis), got {d_model}"


def _head_dim_multiple_of(name: str, multiple: int, what: str) -> Callable[[Mapping[str, Any]], str | bool]:
    """Rotary schemes rotate pairs (2-D ones, pairs for each axis): each head needs a multiple of their dimensions."""

    def needs(h: Mapping[str, Any]) -> str | bool:
        head_dim = h["d_model"] // h["nhead"]  # (an indivisible d_model is divisible()'s error)
        indivisible = h["d_model"] % h["nhead"] != 0
        return indivisible or head_dim % multiple == 0 or f"positional={name!r} needs {what}, d_model/nhead={head_dim}"

    return needs


# Name → position scheme (models.registry.Scheme): what each network's stack gets, the networks it fits, what it needs.
# The 1-D schemes read an image's tokens in reading order; the 2-D ones (models.positional2d) read the grid.
POSITIONALS = {
    "sinusoidal": Scheme(lambda t: Positions(added=SinusoidalPositionalEncoding(t.d_model, t.length))),
    "learned": Scheme(lambda t: Positions(added=LearnedPositionalEncoding(t.d_model, t.length))),
    "rotary": Scheme(lambda t: Positions(rotary=True), needs=_head_dim_multiple_of("rotary", 2, "an even head dimension")),
    "none": Scheme(lambda t: Positions()),  # no absolute positions: with a relative bias (models.relative), or none at all
    # Marian's [sin | cos] layout (imported OPUS-MT models, models/marian.py)
    "sinusoidal_halves": Scheme(lambda t: Positions(added=SinusoidalPositionalEncoding(t.d_model, t.length, halves=True))),
    "sincos2d": Scheme(
        lambda t: Positions(added=SinCos2dPositionalEncoding(t.d_model, *t.grid, extra_tokens=t.extra)),
        fits=(IMAGE,),
        needs=_sincos2d_needs,
    ),
    "rotary2d": Scheme(
        lambda t: Positions(encoder_rotary=AxialRotaryEmbedding(t.head_dim, *t.grid, extra_tokens=t.extra)),
        fits=(IMAGE,),
        needs=_head_dim_multiple_of("rotary2d", 4, "a head dimension divisible by 4"),
    ),
    "learned2d": Scheme(
        lambda t: Positions(added=LearnedPositionalEncoding2d(t.d_model, *t.grid, extra_tokens=t.extra)), fits=(IMAGE,)
    ),
}


def position_scheme(kind: str, tokens: Tokens) -> Positions:
    """The positions of `POSITIONALS[kind]` for one stack's `tokens`."""
    return lookup(POSITIONALS, kind, "positional").build(tokens)
