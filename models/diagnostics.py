"""What a trained network's activations say about its health, as numbers a run can log.

`position_similarity`: how alike the encoder's outputs at a sentence's positions are. A network that reads its
source gives each token its own vector (a mean cosine of 0.09 to 0.20 in trained Multi30k models); one whose encoder
has collapsed gives every position the same vector (cosine 1), and then the decoder can only learn a language model of
the target, whatever the source says (docs/results/multilingual.md, "Many languages in one model").
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def position_similarity(memory: torch.Tensor, src_pad: torch.Tensor) -> torch.Tensor:
    """The mean cosine similarity between the encoder outputs at two different positions of one sentence, over every
    such pair of every sentence with two or more tokens: memory (B, S, D), src_pad (B, S) with True = padding → ()."""
    unit = F.normalize(memory.float(), dim=-1).masked_fill(src_pad[..., None], 0.0)  # (B, S, D)
    n = (~src_pad).sum(-1).float()  # (B,)
    total = unit.sum(1).pow(2).sum(-1)  # (B,) the sum over all ordered pairs (i, j) of cos(i, j), i = j included
    pairs = n * (n - 1)
    has_pairs = pairs > 0
    if not has_pairs.any():
        return memory.new_tensor(float("nan"), dtype=torch.float32)
    return ((total - n)[has_pairs] / pairs[has_pairs]).mean()
