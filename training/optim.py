"""AdamW with the inverse-square-root warm-up schedule of Vaswani et al. (2017), and an optional cooldown."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn


def learning_rate_schedule(warmup_steps: int, cooldown_start: int | None = None, cooldown_steps: int = 0) -> Callable[[int], float]:
    """Multiplier on the peak learning rate: linear warm-up to 1, then decay as √(warmup / step).

    With a cooldown, the rate then falls linearly from its value at ``cooldown_start`` to zero over
    ``cooldown_steps``. A short decay to zero gains much of what a far longer run would (Hägele et al., 2024,
    "Scaling Laws and Compute-Optimal Training Beyond Fixed Training Durations"); a release forks the run for it,
    and the main run goes on from the checkpoint before the cooldown.
    """

    def inverse_sqrt(step: int) -> float:
        step = max(step, 1)
        return step / warmup_steps if step < warmup_steps else (warmup_steps / step) ** 0.5

    def multiplier(step: int) -> float:
        if cooldown_start is None or step <= cooldown_start:
            return inverse_sqrt(step)
        return inverse_sqrt(cooldown_start) * max(0.0, 1 - (step - cooldown_start) / cooldown_steps)

    return multiplier


def build_optimizer(
    model: nn.Module, lr: float, betas: tuple[float, float], eps: float, weight_decay: float, schedule: Callable[[int], float],
    fused: bool = False,
) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
    """AdamW without decay on biases and LayerNorm gains (decaying them only hurts), stepped by ``schedule``.

    ``fused``: one kernel updates all parameters (for GPUs); otherwise PyTorch's default implementation.
    """
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}], lr=lr, betas=betas, eps=eps,
        fused=True if fused else None,
    )
    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, schedule)
