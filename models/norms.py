"""Normalisation layers by name: LayerNorm (the 2017 paper, PyTorch's default) or RMSNorm.

RMSNorm (Zhang & Sennrich, 2019) rescales by the root mean square only: no mean subtracted, no
bias, one gain per feature. `norm="rmsnorm"` replaces every norm of the model with it: the two or
three of each layer, each stack's final norm, and the per-head query/key norms of `qk_norm`.
"""

from __future__ import annotations

from torch import nn

from .registry import lookup

# Name → a norm over the last dimension: (dim, eps, bias) → the module. `bias` is LayerNorm's; RMSNorm has none.
NORMS = {
    "layernorm": lambda dim, eps, bias: nn.LayerNorm(dim, eps=eps, bias=bias),
    "rmsnorm": lambda dim, eps, bias: nn.RMSNorm(dim, eps=eps),
}


def make_norm(kind: str, dim: int, eps: float = 1e-5, bias: bool = True) -> nn.Module:
    """A norm over the last dimension (of size `dim`), of the kind `NORMS` names."""
    return lookup(NORMS, kind, "norm")(dim, eps, bias)
