"""Positions for a grid of image tokens: MAE's fixed 2-D sin-cos table (He et al., 2022; the table of its
`get_2d_sincos_pos_embed`) and learned row and column tables, both added to the embeddings like the 1-D ones,
and axial rotary positions in the encoder's attention. Their names are models.positional.POSITIONALS's."""

from __future__ import annotations

import torch
from torch import nn


def sincos_1d(dim: int, pos: torch.Tensor) -> torch.Tensor:
    """(M,) positions → (M, dim): sin(pos·ω_k) for k < dim/2, then cos(pos·ω_k), ω_k = 10000^(−2k/dim).
    Sines and cosines in two halves, not interleaved as in models.positional's 1-D sinusoid: MAE's layout."""
    omega = 1.0 / 10000 ** (torch.arange(dim // 2, dtype=torch.float64) / (dim / 2))  # (dim/2,)
    angles = pos.double()[:, None] * omega[None, :]  # (M, dim/2)
    return torch.cat([angles.sin(), angles.cos()], dim=1)


def sincos_2d_table(dim: int, height: int, width: int, extra_tokens: int = 0) -> torch.Tensor:
    """(extra + h·w, dim) table for tokens in reading order (row by row), with a zero row per extra token.

    MAE's exact order: its grid is `np.meshgrid(grid_w, grid_h)`, whose first plane holds each token's
    column, so the first dim/2 channels encode the column and the last dim/2 the row (its code names the
    first half "emb_h"; on its square grids the two only swap)."""
    if dim % 4:
        raise ValueError(f"the 2-D sin-cos table needs a model width divisible by 4, got {dim}")
    rows, cols = torch.meshgrid(torch.arange(height), torch.arange(width), indexing="ij")  # (h, w) each
    table = torch.cat([sincos_1d(dim // 2, cols.flatten()), sincos_1d(dim // 2, rows.flatten())], dim=1)
    return torch.cat([table.new_zeros(extra_tokens, dim), table]).float()  # (extra + N, D)


class SinCos2dPositionalEncoding(nn.Module):
    """Adds the fixed table to (B, N', D) tokens; a buffer (it follows .to(device)), not a parameter, and
    not saved: it is derived from the grid."""

    def __init__(self, d_model: int, height: int, width: int, extra_tokens: int = 0):
        super().__init__()
        self.register_buffer("pe", sincos_2d_table(d_model, height, width, extra_tokens), persistent=False)
        self.grid = (height, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, N', D)
        return x + self.pe[: x.size(1)].to(x.dtype)

    def extra_repr(self) -> str:
        return f"grid={self.grid[0]}x{self.grid[1]}, tokens={self.pe.size(0)}"


class LearnedPositionalEncoding2d(nn.Module):
    """Learned 2-D absolute positions: a row table (h, D) and a column table (w, D); the token at (r, c) gets
    row[r] + col[c], so h + w vectors cover the h·w tokens, and tokens of one row (or column) share its vector.
    Tokens before the grid (a class token) get learned vectors of their own, as ViT's class token has.
    Initialised as the 1-D learned table (std 0.02), split between the two tables: each std 0.02/√2."""

    def __init__(self, d_model: int, height: int, width: int, extra_tokens: int = 0):
        super().__init__()
        self.rows = nn.Parameter(torch.randn(height, d_model) * 0.02 / 2**0.5)  # (h, D)
        self.cols = nn.Parameter(torch.randn(width, d_model) * 0.02 / 2**0.5)  # (w, D)
        self.extra = nn.Parameter(torch.randn(extra_tokens, d_model) * 0.02)  # (extra, D)

    def table(self) -> torch.Tensor:  # → (extra + h·w, D), tokens in reading order
        grid = (self.rows[:, None, :] + self.cols[None, :, :]).flatten(0, 1)  # (h, w, D) → (h·w, D)
        return torch.cat([self.extra, grid])

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, N', D)
        return x + self.table()[: x.size(1)].to(x.dtype)

    def extra_repr(self) -> str:
        return f"grid={self.rows.size(0)}x{self.cols.size(0)}, extra_tokens={self.extra.size(0)}"


class AxialRotaryEmbedding(nn.Module):
    """2-D rotary positions (axial RoPE) for the queries and keys of the encoder's self-attention: the
    rotate-half layout of models.positional.RotaryEmbedding, with the first half of each head's Dh/2
    frequency pairs turned by the token's row and the second half by its column, each axis with the
    frequencies of a Dh/2-dimensional RoPE. A query–key score then depends on (Δrow, Δcol) only. Extra
    tokens before the grid (a class token) are not rotated. `forward` has RotaryEmbedding's signature;
    it returns the tables of every token, so the grid's token count is the only length it takes."""

    def __init__(self, head_dim: int, height: int, width: int, extra_tokens: int = 0, base: float = 10000.0):
        super().__init__()
        if head_dim % 4:
            raise ValueError(f"2-D rotary positions need a head dimension divisible by 4, got {head_dim}")
        self.head_dim, self.grid, self.extra_tokens, self.base = head_dim, (height, width), extra_tokens, base

    def forward(self, length: int, offset: int = 0, device=None, dtype=torch.float32):
        height, width = self.grid
        if (length, offset) != (self.extra_tokens + height * width, 0):
            raise ValueError(f"2-D rotary positions are built for {self.extra_tokens + height * width} tokens, got {length}")
        dtype = torch.promote_types(dtype, torch.float32)
        quarter = self.head_dim // 4
        inv_freq = self.base ** -(torch.arange(quarter, device=device, dtype=dtype) / quarter)  # (Dh/4,)
        rows, cols = torch.meshgrid(
            torch.arange(height, device=device, dtype=dtype), torch.arange(width, device=device, dtype=dtype), indexing="ij"
        )  # (h, w) each
        angles = torch.cat([rows.reshape(-1, 1) * inv_freq, cols.reshape(-1, 1) * inv_freq], dim=1)  # (N, Dh/2)
        angles = torch.cat([angles.new_zeros(self.extra_tokens, self.head_dim // 2), angles])  # (N', Dh/2)
        angles = torch.cat([angles, angles], dim=-1)  # (N', Dh): dims i and i + Dh/2 share an angle
        return angles.cos(), angles.sin()

    def extra_repr(self) -> str:
        return f"head_dim={self.head_dim}, grid={self.grid[0]}x{self.grid[1]}, extra_tokens={self.extra_tokens}"
