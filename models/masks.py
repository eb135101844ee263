"""Attention masks, built once per forward pass and shared by every layer.

Public API takes PyTorch's padding convention (bool, True = padding). Internally we pass SDPA
the opposite (True = may attend), shaped (B, 1, T, S) so it broadcasts over heads.
Boolean masks instead of additive -1e9 ones: nothing to overflow in fp16/bf16.
"""

from __future__ import annotations

import torch


def _ensure_some_key(allowed: torch.Tensor) -> torch.Tensor:
    # A query with no visible key (an all-padding sequence, or a padded query under a causal
    # mask) would make softmax return NaN. Let such rows see every key instead: their outputs
    # are finite and land on padded positions that the loss and the caller ignore.
    return allowed | ~allowed.any(dim=-1, keepdim=True)


def padding_mask(key_padding_mask: torch.Tensor | None) -> torch.Tensor | None:
    """(B, S) True = pad → (B, 1, 1, S) True = attend, or None when nothing is padded."""
    if key_padding_mask is None:
        return None
    return _ensure_some_key(~key_padding_mask[:, None, None, :])


def causal_mask(
    tgt_len: int, key_padding_mask: torch.Tensor | None = None, past_len: int = 0, device=None
) -> torch.Tensor | None:
    """Causal (plus key padding) mask for `tgt_len` new queries after `past_len` cached keys.

    Aligned bottom-right: query i (absolute position past_len + i) sees keys 0..past_len + i.
    SDPA's `is_causal=True` aligns top-left, which is only right when past_len == 0, so callers
    use it (mask None) for the common uncached, unpadded case and this mask otherwise.
    Returns None when a single new query may see every key (the usual cached decoding step).
    """
    src_len = past_len + tgt_len
    allowed = None
    if tgt_len > 1:
        allowed = torch.ones(tgt_len, src_len, dtype=torch.bool, device=device).tril(past_len)[None, None]
    if key_padding_mask is not None:
        keys = ~key_padding_mask[:, None, None, :]  # (B, 1, 1, S)
        allowed = keys if allowed is None else allowed & keys
    return None if allowed is None else _ensure_some_key(allowed)


def with_bias(bias: torch.Tensor, allowed: torch.Tensor | None, is_causal: bool, dtype: torch.dtype) -> torch.Tensor:
    """A (1 or B, H, T, S) float bias and the bool mask (True = attend) or SDPA's causal flag → one float
    mask for SDPA, in the queries' dtype: the bias where a key may be seen, −inf where it may not.

    SDPA takes either a mask or `is_causal`, so the causal part is written out here (aligned bottom-right,
    as `causal_mask`). Every row keeps a finite entry: the bool masks already see to it."""
    T, S = bias.shape[-2:]
    if is_causal:
        causal = torch.ones(T, S, dtype=torch.bool, device=bias.device).tril(S - T)
        allowed = causal if allowed is None else allowed & causal
    bias = bias.to(dtype)
    return bias if allowed is None else torch.where(allowed, bias, float("-inf"))  # (B or 1, H, T, S)
