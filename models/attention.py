"""Multi-head attention on `F.scaled_dot_product_attention`, with an incremental-decoding cache.

Masks follow SDPA's convention internally (bool, True = may attend) and are built once per
forward by `models.masks`, then broadcast as (B, 1, T, S) across heads: never repeated per head.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


class MultiHeadAttention(nn.Module):
    """Self-attention (`cross=False`: one fused q/k/v projection) or cross-attention
    (`cross=True`: q from the decoder, one fused k/v projection of the memory)."""

    def __init__(self, d_model: int, nhead: int, dropout: float = 0.0, bias: bool = True, cross: bool = False):
        super().__init__()
        if nhead < 1 or d_model % nhead:
            raise ValueError(f"d_model ({d_model}) must be divisible by nhead ({nhead})")
        self.nhead, self.head_dim, self.cross, self.dropout = nhead, d_model // nhead, cross, dropout
        if cross:
            self.q_proj = nn.Linear(d_model, d_model, bias=bias)
            self.kv_proj = nn.Linear(d_model, 2 * d_model, bias=bias)
        else:
            self.qkv_proj = nn.Linear(d_model, 3 * d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)

    def _heads(self, x: torch.Tensor) -> torch.Tensor:
        B, T, _ = x.shape
        return x.view(B, T, self.nhead, self.head_dim).transpose(1, 2)  # (B, H, T, Dh)

    def project_kv(self, memory: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Cross-attention keys and values of the memory: computed once per source, then cached."""
        k, v = self.kv_proj(memory).chunk(2, dim=-1)  # (B, S, D) each
        return self._heads(k), self._heads(v)  # (B, H, S, Dh)

    def forward(
        self,
        x: torch.Tensor,  # (B, T, D) queries (and keys/values for self-attention)
        memory: torch.Tensor | None = None,  # (B, S, D) for cross-attention
        attn_mask: torch.Tensor | None = None,  # bool (B or 1, 1, T, S), True = attend
        is_causal: bool = False,
        kv_cache: dict | None = None,  # per-layer dict, filled in place (see DecoderCache)
        need_weights: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        B, T, D = x.shape
        if self.cross:
            q = self._heads(self.q_proj(x))
            if kv_cache is not None and "k" in kv_cache:
                k, v = kv_cache["k"], kv_cache["v"]
            else:
                k, v = self.project_kv(memory)
                if kv_cache is not None:
                    kv_cache["k"], kv_cache["v"] = k, v
        else:
            q, k, v = (self._heads(t) for t in self.qkv_proj(x).chunk(3, dim=-1))
            if kv_cache is not None:
                if "k" in kv_cache:
                    k = torch.cat([kv_cache["k"], k], dim=2)  # (B, H, past + T, Dh)
                    v = torch.cat([kv_cache["v"], v], dim=2)
                kv_cache["k"], kv_cache["v"] = k, v

        dropout_p = self.dropout if self.training else 0.0
        if need_weights:
            out, weights = _attention_with_weights(q, k, v, attn_mask, is_causal, dropout_p)
        else:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal)
            weights = None
        out = out.transpose(1, 2).reshape(B, T, D)  # (B, T, D)
        return self.out_proj(out), weights


def _attention_with_weights(q, k, v, attn_mask, is_causal, dropout_p):
    """The explicit matmul-softmax path, used only when the caller asks for the weights."""
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.size(-1))  # (B, H, T, S)
    if is_causal:
        T, S = scores.shape[-2:]
        attn_mask = torch.ones(T, S, dtype=torch.bool, device=q.device).tril(S - T)
    if attn_mask is not None:
        scores = scores.masked_fill(~attn_mask, torch.finfo(scores.dtype).min)
    weights = scores.softmax(dim=-1)
    out = F.dropout(weights, dropout_p) @ v  # (B, H, T, Dh)
    return out, weights
