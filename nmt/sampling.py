"""Sampling search: draw every next token from the model's distribution instead of taking the most probable.

Back-translation from sampled sources trains better forward models than from beam output once monolingual data
is plentiful (Edunov et al., 2018, "Understanding Back-Translation at Scale"): beam search returns the regular,
most likely sentence, sampling the variety of real translations. The rules of what may come next (no PAD, BOS or
banned ids, no EOS before ``min_length``, EOS at the length limit, optional n-gram blocking) are
:func:`nmt.search.allowed_log_probs`'s, so a sampled sentence obeys exactly what a searched one does.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from nmt.model import Transformer
from nmt.numbers import NumberGuard
from nmt.search import Hypothesis, SearchOptions, one_hypothesis_search, top_k


@dataclass
class SamplingOptions:
    temperature: float = 1.0  # divides the logits: below 1 sharpens the distribution, above 1 flattens it
    top_k: int = 0  # draw among the k most probable allowed tokens; 0 draws from the whole vocabulary

    def __post_init__(self) -> None:
        if self.temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {self.temperature}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be ≥ 0 (0: no limit), got {self.top_k}")


def sample(
    model: Transformer,
    source: Tensor,
    bos_id: int,
    eos_id: int,
    options: SearchOptions,
    sampling: SamplingOptions,
    generator: torch.Generator | None = None,
    guard: NumberGuard | None = None,
) -> list[list[Hypothesis]]:
    """One sampled translation per sentence of a padded batch (B, S), drawn with ``generator`` (on the model's
    device) so that a seed reproduces it; the score is the model's length-normalised log-probability of it."""

    def draw(log_probs: Tensor) -> tuple[Tensor, Tensor]:
        candidates = None
        if 0 < sampling.top_k < log_probs.size(-1):
            log_probs, candidates = top_k(log_probs, sampling.top_k)
        # softmax(log p / T) is softmax(logits / T) over the allowed tokens; banned ones (-inf) get probability 0.
        drawn = torch.multinomial((log_probs / sampling.temperature).softmax(dim=-1), 1, generator=generator)
        drawn_log_prob = log_probs.gather(1, drawn).squeeze(1)
        if candidates is not None:
            drawn = candidates.gather(1, drawn)
        return drawn.squeeze(1), drawn_log_prob

    return one_hypothesis_search(model, source, bos_id, eos_id, options, draw, guard)
