"""Positional encodings: fixed sinusoids (Vaswani et al., 2017, §3.5) or learned vectors."""

from __future__ import annotations

import math

import torch
from torch import nn


class SinusoidalPositionalEncoding(nn.Module):
    """Adds PE[pos, 2i] = sin(pos / 10000^(2i/D)), PE[pos, 2i+1] = cos(...) to (B, T, D) inputs."""

    def __init__(self, d_model: int, max_len: int = 512):
        super().__init__()
        position = torch.arange(max_len, dtype=torch.float32)[:, None]  # (L, 1)
        inv_freq = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(10000.0) / d_model))
        pe = torch.zeros(max_len, d_model, dtype=torch.float32)
        pe[:, 0::2] = torch.sin(position * inv_freq)
        pe[:, 1::2] = torch.cos(position * inv_freq[: d_model // 2])
        # A buffer moves with .to(device) once; not persistent because it is derived from the shape.
        self.register_buffer("pe", pe, persistent=False)
        self.max_len = max_len

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:  # (B, T, D)
        return x + self.pe[offset : offset + x.size(1)].to(x.dtype)


class LearnedPositionalEncoding(nn.Module):
    def __init__(self, d_model: int, max_len: int = 512):
        super().__init__()
        self.embedding = nn.Embedding(max_len, d_model)
        nn.init.normal_(self.embedding.weight, std=0.02)
        self.max_len = max_len

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:  # (B, T, D)
        return x + self.embedding.weight[offset : offset + x.size(1)].to(x.dtype)


def positional_encoding(kind: str, d_model: int, max_len: int) -> nn.Module:
    if kind == "sinusoidal":
        return SinusoidalPositionalEncoding(d_model, max_len)
    if kind == "learned":
        return LearnedPositionalEncoding(d_model, max_len)
    raise ValueError(f"positional must be 'sinusoidal' or 'learned', got {kind!r}")
