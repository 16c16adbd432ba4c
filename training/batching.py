"""Token-bucketed batches: sentences of similar length together, each batch within a token budget.

Sorting by length wastes little on padding; shuffling the *batches* (not sentences) per epoch keeps
training stochastic. The order is a pure function of (seed, epoch), which is what makes a resumed run
see exactly the batches the uninterrupted one would have.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch


def token_batches(
    source_lengths: Sequence[int], target_lengths: Sequence[int], max_tokens: int, seed: int, epoch: int
) -> list[np.ndarray]:
    """Example indices grouped so that batch_size × longest(source, target) ≤ max_tokens, in shuffled order."""
    rng = np.random.default_rng([seed, epoch])
    source_lengths, target_lengths = np.asarray(source_lengths), np.asarray(target_lengths)
    longest = np.maximum(source_lengths, target_lengths)
    # Random tie-breaking inside each length so equal-length sentences meet different batch mates each epoch.
    order = np.lexsort((rng.random(len(longest)), target_lengths, longest))
    batches, start = [], 0
    while start < len(order):
        end, width = start, 0
        while end < len(order):
            width = max(width, longest[order[end]])
            if (end - start + 1) * width > max_tokens and end > start:
                break
            end += 1
        batches.append(order[start:end])
        start = end
    rng.shuffle(batches)
    return batches


def shard(batches: list[np.ndarray], rank: int, world_size: int) -> list[np.ndarray]:
    """This rank's batches; every rank gets the same count so DDP's collective steps line up."""
    usable = len(batches) - len(batches) % world_size
    return batches[rank:usable:world_size]


def pad_batch(rows: Sequence[Sequence[int]], pad_id: int) -> torch.Tensor:
    width = max(len(r) for r in rows)
    out = torch.full((len(rows), width), pad_id, dtype=torch.long)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.as_tensor(row, dtype=torch.long)
    return out
