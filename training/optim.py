"""Adam with the inverse-square-root warm-up schedule of Vaswani et al. (2017)."""

from __future__ import annotations

import torch
from torch import nn


def inverse_sqrt_schedule(warmup_steps: int):
    """Multiplier on the peak learning rate: linear warm-up to 1, then decay as √(warmup / step)."""

    def multiplier(step: int) -> float:
        step = max(step, 1)
        return step / warmup_steps if step < warmup_steps else (warmup_steps / step) ** 0.5

    return multiplier


def build_optimizer(
    model: nn.Module, lr: float, betas: tuple[float, float], eps: float, weight_decay: float, warmup_steps: int
) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
    """AdamW without decay on biases and LayerNorm gains (decaying them only hurts)."""
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}], lr=lr, betas=betas, eps=eps
    )
    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, inverse_sqrt_schedule(warmup_steps))
