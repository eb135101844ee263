"""The feed-forward's nonlinearities by name: what `models.config` accepts and `models.layers.FeedForward` applies
(a file of its own, so that the config and the layers both read it and neither imports the other)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class Activation:
    """`fn`, applied to the hidden units; `gated` (a GLU variant): to a gate that multiplies a value."""

    fn: Callable[[torch.Tensor], torch.Tensor]
    gated: bool = False


# Name → the nonlinearity. "silu" (swish) ungated is Marian's (OPUS-MT's) feed-forward.
ACTIVATIONS = {
    "relu": Activation(F.relu),
    "gelu": Activation(F.gelu),
    "silu": Activation(F.silu),
    "swiglu": Activation(F.silu, gated=True),
    "geglu": Activation(F.gelu, gated=True),
}
