"""The feed-forward's nonlinearities by name: what `models.config` accepts, `models.layers.FeedForward` applies and
each exporter maps (a file of its own, so that the config and the layers both read it and neither imports the other).
An entry is all an activation needs; a name an engine does not know (None, or no Marian name) is refused by its
exporter (deploy/ctranslate2.py, deploy/marian_shape.py) rather than mapped to something else."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class Activation:
    """`fn`, applied to the hidden units; `gated` (a GLU variant): to a gate that multiplies a value.
    `ctranslate2`: the same function in CTranslate2 (a `ctranslate2.specs.common_spec.Activation` member; its gated
    feed-forward is `ffn_glu`); `marian`: Hugging Face's names for it (`transformers.activations.ACT2FN`, what a
    Marian config's `activation_function` says; the first is exported). None / () : that engine has no equivalent."""

    fn: Callable[[torch.Tensor], torch.Tensor]
    gated: bool = False
    ctranslate2: str | None = None
    marian: tuple[str, ...] = ()


# Name → the nonlinearity. "silu" (swish) ungated is Marian's (OPUS-MT's) feed-forward; Marian has no gated one.
ACTIVATIONS = {
    "relu": Activation(F.relu, ctranslate2="RELU", marian=("relu",)),
    "gelu": Activation(F.gelu, ctranslate2="GELU", marian=("gelu",)),
    "silu": Activation(F.silu, ctranslate2="SWISH", marian=("swish", "silu")),
    "swiglu": Activation(F.silu, gated=True, ctranslate2="SWISH"),
    "geglu": Activation(F.gelu, gated=True, ctranslate2="GELU"),
}
