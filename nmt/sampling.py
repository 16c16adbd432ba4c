"""Sampling search: draw every next token from the model's distribution instead of taking the most probable.

Back-translation from sampled sources trains better forward models than from beam output once monolingual data
is plentiful (Edunov et al., 2018, "Understanding Back-Translation at Scale"): beam search returns the regular,
most likely sentence, sampling the variety of real translations. The rules of what may come next (no PAD, BOS or
banned ids, EOS at the length limit, optional n-gram blocking) are :func:`nmt.search.allowed_log_probs`'s, so a
sampled sentence obeys exactly what a searched one does.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from nmt.model import Transformer
from nmt.search import Hypothesis, SearchOptions, allowed_log_probs, length_normalise, max_target_lengths, top_k


@dataclass
class SamplingOptions:
    temperature: float = 1.0  # divides the logits: below 1 sharpens the distribution, above 1 flattens it
    top_k: int = 0  # draw among the k most probable allowed tokens; 0 draws from the whole vocabulary

    def __post_init__(self) -> None:
        if self.temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {self.temperature}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be ≥ 0 (0: no limit), got {self.top_k}")


@torch.inference_mode()
def sample(
    model: Transformer,
    source: Tensor,
    bos_id: int,
    eos_id: int,
    options: SearchOptions,
    sampling: SamplingOptions,
    generator: torch.Generator | None = None,
) -> list[list[Hypothesis]]:
    """One sampled translation per sentence of a padded batch (B, S), drawn with ``generator`` (on the model's
    device) so that a seed reproduces it; the score is the model's length-normalised log-probability of it."""
    model.eval()
    pad_id, device, sentences = model.config.pad_id, source.device, source.size(0)
    memory, memory_mask = model.encode(source)
    cache = model.start_cache(memory, memory_mask)
    max_lengths = max_target_lengths(source, pad_id, options, model.config.max_positions)

    prefixes = torch.full((sentences, 1), bos_id, dtype=torch.long, device=device)
    log_prob = torch.zeros(sentences, device=device)
    lengths = torch.zeros(sentences, dtype=torch.long, device=device)
    running = torch.ones(sentences, dtype=torch.bool, device=device)
    for step in range(int(max_lengths.max())):
        logits, _ = model.decode_step(prefixes[:, -1], cache)
        log_probs = allowed_log_probs(logits, prefixes, max_lengths <= step + 1, options, (pad_id, bos_id, eos_id))
        candidates = None
        if 0 < sampling.top_k < log_probs.size(-1):
            log_probs, candidates = top_k(log_probs, sampling.top_k)
        # softmax(log p / T) is softmax(logits / T) over the allowed tokens; banned ones (-inf) get probability 0.
        drawn = torch.multinomial((log_probs / sampling.temperature).softmax(dim=-1), 1, generator=generator)
        log_prob += torch.where(running, log_probs.gather(1, drawn).squeeze(1), 0.0)
        if candidates is not None:
            drawn = candidates.gather(1, drawn)
        token = torch.where(running, drawn.squeeze(1), pad_id)
        lengths += running.long()
        prefixes = torch.cat([prefixes, token[:, None]], dim=1)
        running &= token != eos_id
        if not bool(running.any()):
            break

    return [
        [Hypothesis(tokens=prefixes[i, 1 : int(lengths[i])].tolist(),
                    score=length_normalise(float(log_prob[i]), int(lengths[i]), options.length_penalty))]
        for i in range(sentences)
    ]
