"""Encoder and decoder layers, post-norm (the 2017 paper, PyTorch's default) or pre-norm. Every norm is `norm`
(models.norms); the attention options live in models.attention; the feed-forward is below, its activations (by name)
in models.activations."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn

from .activations import ACTIVATIONS
from .attention import MultiHeadAttention
from .norms import make_norm
from .registry import lookup

if TYPE_CHECKING:
    from .config import TransformerConfig


class FeedForward(nn.Module):
    """linear2(act(linear1(x))), or with a gated activation (Shazeer, 2020, "GLU Variants Improve
    Transformer") linear2(act(x W_gate) * (x W_value)): SwiGLU with SiLU, GeGLU with GELU.

    Hidden-size convention: `dim_feedforward` is the hidden width in both cases, i.e. the width of
    the gate and of the value. The gated linear1 projects to 2 × dim_feedforward (gate and value
    fused in one matmul), so a gated block has 3·d_model·dim_feedforward weights instead of 2·…:
    1.5× the parameters and compute at the same flag. For a parameter-matched comparison pass
    dim_feedforward ≈ 2/3 of the ungated one (the LLaMA rule: 1024 → 683).
    """

    def __init__(self, d_model: int, dim_feedforward: int, dropout: float, activation: str, bias: bool):
        super().__init__()
        act = lookup(ACTIVATIONS, activation, "activation")
        self.gated = act.gated
        self.linear1 = nn.Linear(d_model, (2 if self.gated else 1) * dim_feedforward, bias=bias)
        self.linear2 = nn.Linear(dim_feedforward, d_model, bias=bias)
        self.activation = act.fn
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, T, D)
        h = self.linear1(x)  # (B, T, F), or (B, T, 2F) gated
        if self.gated:
            gate, value = h.chunk(2, dim=-1)  # (B, T, F) each
            h = self.activation(gate) * value
        else:
            h = self.activation(h)
        return self.linear2(self.dropout(h))


class _Layer(nn.Module):
    """What both layers hold: self-attention (and, in a decoder, cross-attention), the feed-forward,
    one norm per sublayer and the residual dropout, created in that order (seeded inits depend on it)."""

    def __init__(self, config: TransformerConfig, *, cross: bool):
        super().__init__()
        c = config
        self.norm_first = c.norm_first
        attn = dict(
            d_model=c.d_model, nhead=c.nhead, dropout=c.dropout, bias=c.bias, num_kv_heads=c.num_kv_heads,
            qk_norm=c.qk_norm, norm=c.norm, eps=c.layer_norm_eps,
        )  # fmt: skip
        self.self_attn = MultiHeadAttention(**attn)
        if cross:
            self.cross_attn = MultiHeadAttention(**attn, cross=True)
        self.ff = FeedForward(
            d_model=c.d_model, dim_feedforward=c.dim_feedforward, dropout=c.dropout, activation=c.activation, bias=c.bias
        )
        self.norm1 = make_norm(c.norm, c.d_model, c.layer_norm_eps, c.bias)
        self.norm2 = make_norm(c.norm, c.d_model, c.layer_norm_eps, c.bias)
        if cross:
            self.norm3 = make_norm(c.norm, c.d_model, c.layer_norm_eps, c.bias)
        self.dropout = nn.Dropout(c.dropout)


class EncoderLayer(_Layer):
    def __init__(self, config: TransformerConfig, residual: bool = True):
        super().__init__(config, cross=False)
        self.residual = residual  # False: self-attention's output replaces its input (config.residual_free_layer)

    def _sa(self, x, mask, rope, bias):
        return self.dropout(self.self_attn(x, attn_mask=mask, rope=rope, attn_bias=bias)[0])

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None, rope=None, bias=None) -> torch.Tensor:  # (B, S, D)
        """`bias`: this layer's (1, H, S, S) relative position bias, or None."""
        kept = x if self.residual else 0.0
        if self.norm_first:
            x = kept + self._sa(self.norm1(x), mask, rope, bias)
            return x + self.dropout(self.ff(self.norm2(x)))
        x = self.norm1(kept + self._sa(x, mask, rope, bias))
        return self.norm2(x + self.dropout(self.ff(x)))


class DecoderLayer(_Layer):
    def __init__(self, config: TransformerConfig):
        super().__init__(config, cross=True)

    def forward(
        self,
        x: torch.Tensor,  # (B, T, D)
        memory: torch.Tensor | None,  # (B, S, D); may be None when the cache holds its keys/values
        self_mask: torch.Tensor | None,
        memory_mask: torch.Tensor | None,
        is_causal: bool,
        cache=None,  # a key/value cache of models.cache, shared by the layers
        index: int = 0,  # this layer's index among the decoder's: its entry in `cache`
        need_weights: bool = False,
        rope=None,  # rotary (cos, sin) of the new positions, for self-attention; none in cross-attention
        bias=None,  # (1, H, T, keys) relative position bias of self-attention; none in cross-attention
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        def sa(h):
            out = self.self_attn(
                h, attn_mask=self_mask, is_causal=is_causal, cache=cache, layer=index, rope=rope, attn_bias=bias
            )[0]
            return self.dropout(out)

        def ca(h):
            out, w = self.cross_attn(h, memory, attn_mask=memory_mask, cache=cache, layer=index, need_weights=need_weights)
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
