"""Multi-head attention on `F.scaled_dot_product_attention`, with a key/value cache for decoding (models.cache). Masks
are SDPA's (bool, True = may attend; models.masks), broadcast as (B, 1, T, S) across heads. Each option is off by
default, which is `torch.nn.MultiheadAttention` exactly: docs/guide/variants.md ("Attention options") lists them."""

from __future__ import annotations

import math
from contextlib import nullcontext

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel

from .masks import with_bias
from .norms import make_norm
from .positional import apply_rotary


class MultiHeadAttention(nn.Module):
    """Self-attention (`cross=False`: one fused q/k/v projection) or cross-attention
    (`cross=True`: q from the decoder, one fused k/v projection of the memory)."""

    def __init__(
        self,
        d_model: int,
        nhead: int,
        dropout: float = 0.0,
        bias: bool = True,
        cross: bool = False,
        num_kv_heads: int | None = None,  # None = nhead (multi-head); 1 = multi-query
        qk_norm: bool = False,
        norm: str = "layernorm",  # the kind of the q/k norms
        eps: float = 1e-5,
    ):
        super().__init__()
        if nhead < 1 or d_model % nhead:
            raise ValueError(f"d_model ({d_model}) must be divisible by nhead ({nhead})")
        num_kv_heads = nhead if num_kv_heads is None else num_kv_heads
        if num_kv_heads < 1 or nhead % num_kv_heads:
            raise ValueError(f"nhead ({nhead}) must be divisible by num_kv_heads ({num_kv_heads})")
        self.nhead, self.head_dim, self.cross, self.dropout = nhead, d_model // nhead, cross, dropout
        self.num_kv_heads = num_kv_heads
        kv_dim = num_kv_heads * self.head_dim  # = d_model unless grouped
        if cross:
            self.q_proj = nn.Linear(d_model, d_model, bias=bias)
            self.kv_proj = nn.Linear(d_model, 2 * kv_dim, bias=bias)
        else:
            self.qkv_proj = nn.Linear(d_model, d_model + 2 * kv_dim, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)
        # One gain (and bias) over head_dim, shared by the heads; None keeps the default path as it was.
        self.q_norm = make_norm(norm, self.head_dim, eps, bias) if qk_norm else None
        self.k_norm = make_norm(norm, self.head_dim, eps, bias) if qk_norm else None

    def _heads(self, x: torch.Tensor, n: int) -> torch.Tensor:
        B, T, _ = x.shape
        return x.view(B, T, n, self.head_dim).transpose(1, 2)  # (B, n, T, Dh)

    def _keys(self, k: torch.Tensor, rope) -> torch.Tensor:
        """(B, T, Hkv·Dh) → (B, Hkv, T, Dh) keys as they are cached: normalised, rotated."""
        k = self._heads(k, self.num_kv_heads)
        if self.k_norm is not None:
            k = self.k_norm(k)
        return k if rope is None else apply_rotary(k, rope)

    def project_kv(self, memory: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Cross-attention keys and values of the memory: computed once per source, then cached."""
        k, v = self.kv_proj(memory).chunk(2, dim=-1)  # (B, S, Hkv·Dh) each
        return self._keys(k, None), self._heads(v, self.num_kv_heads)  # (B, Hkv, S, Dh); no positions

    def forward(
        self,
        x: torch.Tensor,  # (B, T, D) queries (and keys/values for self-attention)
        memory: torch.Tensor | None = None,  # (B, S, D) for cross-attention
        attn_mask: torch.Tensor | None = None,  # bool (B or 1, 1, T, S), True = attend
        is_causal: bool = False,
        cache=None,  # a key/value cache of models.cache (the decoder's, when it decodes step by step)
        layer: int = 0,  # this attention's decoder layer: its entry in `cache`
        need_weights: bool = False,
        rope: tuple[torch.Tensor, torch.Tensor] | None = None,  # (T, Dh) cos, sin: self-attention only
        attn_bias: torch.Tensor | None = None,  # float (1 or B, H, T, S) added to the logits
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        B, T, D = x.shape
        if self.cross:
            if rope is not None:
                raise ValueError("rotary positions apply to self-attention only")
            q = self.q_proj(x)
            # With a cache the memory's keys/values were projected once, on the first step (Transformer.decode).
            k, v = self.project_kv(memory) if cache is None else cache.memory(layer)  # (B, Hkv, S, Dh)
        else:
            kv_dim = self.num_kv_heads * self.head_dim
            q, k, v = self.qkv_proj(x).split([D, kv_dim, kv_dim], dim=-1)
            # New keys are normalised and rotated at their own positions before they are cached,
            # so a cached key never changes and beam reordering only moves rows.
            k, v = self._keys(k, rope), self._heads(v, self.num_kv_heads)  # (B, Hkv, T, Dh)
            if cache is not None:
                k, v = cache.update(layer, k, v)  # (B, Hkv, keys, Dh): the cached ones and these
        q = self._heads(q, self.nhead)  # (B, H, T, Dh)
        if self.q_norm is not None:
            q = self.q_norm(q)
        if rope is not None:
            q = apply_rotary(q, rope)

        if attn_bias is not None:  # one float mask: the bias, −inf where the bool mask or causality forbids
            attn_mask, is_causal = with_bias(attn_bias, attn_mask, is_causal, q.dtype), False
        dropout_p = self.dropout if self.training else 0.0
        grouped = self.num_kv_heads != self.nhead
        if need_weights:
            if grouped:  # the explicit path repeats each key/value head for its group of query heads
                groups = self.nhead // self.num_kv_heads
                k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)  # (B, H, S, Dh)
            out, weights = _attention_with_weights(q, k, v, attn_mask, is_causal, dropout_p)
        else:
            # enable_gqa: SDPA maps query head h to key/value head h // groups without copying them.
            with sdpa_kernel(SDPBackend.MATH) if _slow_cpu_backward(q, dropout_p) else nullcontext():
                out = F.scaled_dot_product_attention(
                    q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, enable_gqa=grouped
                )
            weights = None
        out = out.transpose(1, 2).reshape(B, T, D)  # (B, T, D)
        return self.out_proj(out), weights


def _slow_cpu_backward(q: torch.Tensor, dropout_p: float) -> bool:
    """Whether SDPA would pick its CPU flash kernel (no dropout) for a pass that will be differentiated in
    bf16/fp16: that kernel's backward is 4-9x slower there than the math kernel's, while its forward is the
    faster one (measured in docs/results/benchmarks-training.md, "bf16 training without dropout on the CPU"). With dropout SDPA
    takes the math kernel anyway."""
    return q.device.type == "cpu" and q.dtype in (torch.bfloat16, torch.float16) and q.requires_grad and dropout_p == 0


def _attention_with_weights(q, k, v, attn_mask, is_causal, dropout_p):
    """The explicit matmul-softmax path, used only when the caller asks for the weights."""
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.size(-1))  # (B, H, T, S)
    if is_causal:
        T, S = scores.shape[-2:]
        attn_mask = torch.ones(T, S, dtype=torch.bool, device=q.device).tril(S - T)
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        scores = scores.masked_fill(~attn_mask, torch.finfo(scores.dtype).min)
    elif attn_mask is not None:  # a float mask (a bias, −inf where masked) is added, as SDPA does
        scores = scores + attn_mask
    weights = scores.softmax(dim=-1)
    out = F.dropout(weights, dropout_p) @ v  # (B, H, T, Dh)
    return out, weights
