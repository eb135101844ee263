"""The feed-forward's nonlinearities by name: what `models.config` accepts and `models.layers.FeedForward` applies
(a file of its own, so that the config and the layers both read it and neither imports the other)."""

from __future__ import annotations

import torch.nn.functional as F

# Name → the nonlinearity; the gated ones (GLU variants) apply it to a gate that multiplies a value.
# "silu" (swish) ungated is Marian's (OPUS-MT's) feed-forward.
ACTIVATIONS = {"relu": F.relu, "gelu": F.gelu, "silu": F.silu, "swiglu": F.silu, "geglu": F.gelu}
GATED = ("swiglu", "geglu")
