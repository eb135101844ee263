"""Learning-rate schedules with linear warm-up, as multipliers for `LambdaLR`."""

from __future__ import annotations

import math
from typing import Callable, Literal

Schedule = Literal["inverse_sqrt", "cosine", "constant"]


def warmup_lr_lambda(kind: Schedule, warmup_steps: int, total_steps: int | None = None) -> Callable[[int], float]:
    """Linear warm-up to the base rate over `warmup_steps`, then:
    `inverse_sqrt` (Vaswani et al. 2017: ∝ 1/sqrt(step)), `cosine` (to 0 at `total_steps`) or `constant`."""
    warmup = max(1, warmup_steps)
    if kind == "cosine" and not total_steps:
        raise ValueError("the cosine schedule needs the total number of steps")

    def lr_lambda(step: int) -> float:
        step += 1  # LambdaLR starts at 0; the first update should not use lr = 0
        if step < warmup:
            return step / warmup
        if kind == "inverse_sqrt":
            return math.sqrt(warmup / step)
        if kind == "cosine":
            progress = min(1.0, (step - warmup) / max(1, total_steps - warmup))
            return 0.5 * (1.0 + math.cos(math.pi * progress))
        if kind == "constant":
            return 1.0
        raise ValueError(f"unknown schedule {kind!r}; choose inverse_sqrt, cosine or constant")

    lr_lambda(warmup)  # fail at construction, not mid-training, on an unknown kind
    return lr_lambda
