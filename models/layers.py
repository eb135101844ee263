"""Encoder and decoder layers, post-norm (the 2017 paper, PyTorch's default) or pre-norm."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .attention import MultiHeadAttention

ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu}


class FeedForward(nn.Module):
    def __init__(self, d_model: int, dim_feedforward: int, dropout: float, activation: str, bias: bool):
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}")
        self.linear1 = nn.Linear(d_model, dim_feedforward, bias=bias)
        self.linear2 = nn.Linear(dim_feedforward, d_model, bias=bias)
        self.activation = ACTIVATIONS[activation]
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear2(self.dropout(self.activation(self.linear1(x))))


class EncoderLayer(nn.Module):
    def __init__(self, d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps, norm_first, bias):
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, nhead, dropout, bias)
        self.ff = FeedForward(d_model, dim_feedforward, dropout, activation, bias)
        self.norm1 = nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.norm2 = nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def _sa(self, x, mask):
        return self.dropout(self.self_attn(x, attn_mask=mask)[0])

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:  # (B, S, D)
        if self.norm_first:
            x = x + self._sa(self.norm1(x), mask)
            return x + self.dropout(self.ff(self.norm2(x)))
        x = self.norm1(x + self._sa(x, mask))
        return self.norm2(x + self.dropout(self.ff(x)))


class DecoderLayer(nn.Module):
    def __init__(self, d_model, nhead, dim_feedforward, dropout, activation, layer_norm_eps, norm_first, bias):
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, nhead, dropout, bias)
        self.cross_attn = MultiHeadAttention(d_model, nhead, dropout, bias, cross=True)
        self.ff = FeedForward(d_model, dim_feedforward, dropout, activation, bias)
        self.norm1 = nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.norm2 = nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.norm3 = nn.LayerNorm(d_model, eps=layer_norm_eps, bias=bias)
        self.dropout = nn.Dropout(dropout)

    def forward(
        self,
        x: torch.Tensor,  # (B, T, D)
        memory: torch.Tensor | None,  # (B, S, D); may be None when the cache holds its keys/values
        self_mask: torch.Tensor | None,
        memory_mask: torch.Tensor | None,
        is_causal: bool,
        cache: dict | None = None,  # {"self": {...}, "cross": {...}} for this layer
        need_weights: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        self_cache = cache["self"] if cache is not None else None
        cross_cache = cache["cross"] if cache is not None else None

        def sa(h):
            return self.dropout(self.self_attn(h, attn_mask=self_mask, is_causal=is_causal, kv_cache=self_cache)[0])

        def ca(h):
            out, w = self.cross_attn(h, memory, attn_mask=memory_mask, kv_cache=cross_cache, need_weights=need_weights)
            return self.dropout(out), w

        if self.norm_first:
            x = x + sa(self.norm1(x))
            h, weights = ca(self.norm2(x))
            x = x + h
            return x + self.dropout(self.ff(self.norm3(x))), weights
        x = self.norm1(x + sa(x))
        h, weights = ca(x)
        x = self.norm2(x + h)
        return self.norm3(x + self.dropout(self.ff(x))), weights
