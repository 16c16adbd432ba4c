"""Reconstruction reranking: prefer the candidate from which the source can be translated back.

Beam search ranks a sentence's candidates by log P(y | x) alone, which favours short, fluent, generic output that
drops or invents content. The model translates both ways, so log P(x | y), the log-probability of the source given a
candidate as the reverse direction's input, is one teacher-forced pass away: the noisy-channel score of Yee et al.
(2019), "Simple and Effective Noisy Channel Modeling for Neural Machine Translation", with the model's own reverse
direction as the channel (the "reconstruction" of Tu et al., 2017). The n-best are reordered by

    score(y) = (log P(y | x)  +  λ · |y| · log P(x | y) / |x|) / |y|^α

the search's own length-normalised score with the channel added to the log-probability it normalises: the source's
mean log-probability per token (EOS included) counted once per target token, so that λ weighs the two directions'
per-token log-probabilities against each other the same way for long and short sentences and at any length
penalty α (at α = 1 the score is the sum of the two means).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import torch
from torch import Tensor

from nmt.model import Transformer
from nmt.search import Hypothesis


@torch.inference_mode()
def mean_log_probs(model: Transformer, source: Tensor, target: Tensor) -> Tensor:
    """Mean log-probability per token of each padded ``target`` row (``<s> tokens </s>``, scored from the second
    token on) given its padded ``source`` row, teacher-forced: (B, S), (B, T) → (B,)."""
    model.eval()
    labels = target[:, 1:]
    log_probs = model(source, target[:, :-1]).float().log_softmax(dim=-1)
    real = labels != model.config.pad_id
    return (log_probs.gather(-1, labels[:, :, None]).squeeze(-1) * real).sum(dim=1) / real.sum(dim=1)


def rerank(nbest: list[Hypothesis], channel: Sequence[float], weight: float, length_penalty: float) -> list[Hypothesis]:
    """``nbest`` best first under the combined score above (``channel``: each hypothesis's mean log P(x | y);
    ``length_penalty``: the α its search score was normalised with), each carrying that score; ties keep the
    search's order."""
    combined = [dataclasses.replace(h, score=h.score + weight * c * (len(h.tokens) + 1) ** (1 - length_penalty))
                for h, c in zip(nbest, channel, strict=True)]
    return sorted(combined, key=lambda h: -h.score)
