"""Learning-rate schedules with linear warm-up, as multipliers for `LambdaLR`, and the AdamW both tasks use."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Literal

import torch

from common.errors import HyperparameterError

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


def adamw_with_warmup(
    module: torch.nn.Module,
    lr: float,
    weight_decay: float,
    schedule: Schedule,
    warmup_steps: int,
    total_steps: int | None = None,
    betas: tuple[float, float] = (0.9, 0.999),
    fused: bool = False,
) -> dict:
    """AdamW with decay on weight matrices (and embeddings, learned tokens and positions) but not on
    1-D parameters (biases, norm gains), stepped per batch by `warmup_lr_lambda`: what
    `configure_optimizers` returns for both tasks. `fused`: torch's fused AdamW kernel (one launch for every
    parameter's update); refused with a `HyperparameterError` where torch has none for the parameters' device."""
    params = [p for p in module.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    if fused:
        from torch.utils._foreach_utils import _get_fused_kernels_supported_devices

        unsupported = sorted({p.device.type for p in params} - set(_get_fused_kernels_supported_devices()))
        if unsupported:
            raise HyperparameterError(f"fused_adamw=True: torch has no fused AdamW on {', '.join(unsupported)}; leave it off")
    try:
        # fused=None, not False, when off: torch then picks its default (foreach) implementation as before.
        optimizer = torch.optim.AdamW(groups, lr=lr, betas=tuple(betas), fused=True if fused else None)
    except (RuntimeError, ValueError) as err:
        raise HyperparameterError(f"fused_adamw=True: torch has no fused AdamW here ({err}); leave it off") from None
    # The fused kernel can take a grad scaler's scale into its step, and says so; Lightning then refuses gradient
    # clipping under any mixed precision, bf16 (no scaler) included. Unscaled by the scaler first, as any optimizer
    # is, the kernel's update is the same, and clipping (every recipe's gradient_clip_val) works.
    optimizer._step_supports_amp_scaling = False
    # A plain function: LambdaLR stores None for it, so the checkpoint stays tensors-and-plain-data.
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, warmup_lr_lambda(schedule, warmup_steps, total_steps))
    return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}
