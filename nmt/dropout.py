"""Dropout with a cheap random mask on the CPU.

torch's CPU dropout draws one random number per element (``bernoulli_``), and on a 2-core AVX2 machine that was a
tenth of a training step (BENCHMARKS.md, "Dropout masks from 64-bit draws"). One 64-bit random integer holds
enough bits for four elements: each element takes a 16-bit lane of it, keeps the lane's low 15 bits (uniform on
[0, 2^15)) and is dropped when they fall below p·2^15. ``random_()`` fills an int64 with 63 random bits (its sign
bit is 0), which is why every lane drops its top bit: all four lanes are then alike. The drop rate is p rounded to
a multiple of 2^-15 (0.1 becomes 0.100006), and the kept elements are scaled by 1 / (1 - that rate), so the
expected output is the input exactly. Masks come from torch's default generator, which the trainer's checkpoints
save, so a resumed run draws the same masks. On a GPU torch's fused dropout is already cheap and runs unchanged.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

LANE_BITS = 15
LANES = 1 << LANE_BITS


def drop_threshold(p: float) -> int:
    """Lanes below this are dropped: ``p`` in units of 2^-15."""
    return round(p * LANES)


def keep_mask(shape: torch.Size | tuple[int, ...], p: float) -> Tensor:
    """A boolean CPU tensor of ``shape``, each element True with probability 1 - drop_threshold(p) / 2^15."""
    count = math.prod(shape)
    draws = torch.empty((count + 3) // 4, dtype=torch.int64).random_()  # four 16-bit lanes per draw
    lanes = draws.view(torch.int16)[:count].bitwise_and_(LANES - 1)
    return (lanes >= drop_threshold(p)).view(shape)


class Dropout(nn.Module):
    """``nn.Dropout`` with :func:`keep_mask` on the CPU; identity in eval mode or at p = 0."""

    def __init__(self, p: float = 0.1):
        super().__init__()
        if not 0.0 <= p < 1.0 or drop_threshold(p) == LANES:
            raise ValueError(f"dropout probability must be in [0, 1) and below 1 - 2^-16, got {p}")
        self.p = p

    def forward(self, x: Tensor) -> Tensor:
        if not self.training or self.p == 0.0:
            return x
        if x.device.type != "cpu":
            return F.dropout(x, self.p, training=True)
        return x * keep_mask(x.shape, self.p) * (LANES / (LANES - drop_threshold(self.p)))

    def extra_repr(self) -> str:
        return f"p={self.p}"
