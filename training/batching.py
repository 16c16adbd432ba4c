"""Token-bucketed batches: sentences of similar length together, each batch within a token budget.

Sorting by length wastes little on padding; shuffling the *batches* (not sentences) per epoch keeps
training stochastic. The order is a pure function of (seed, epoch), which is what makes a resumed run
see exactly the batches the uninterrupted one would have.

Padding is off the training step's critical path: a :class:`TokenTable` pads a batch with one vectorised
gather instead of a Python loop, and :func:`prefetched` builds the next batches in a background thread
while the device computes the current one.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TypeVar

import numpy as np
import torch

T = TypeVar("T")
R = TypeVar("R")


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


class TokenTable:
    """Every example's ids in one flat array with offsets, so that padding a batch is one numpy gather."""

    def __init__(self, rows: Sequence[Sequence[int]]):
        self.lengths = np.fromiter((len(r) for r in rows), dtype=np.int64, count=len(rows))
        self.offsets = np.concatenate([[0], np.cumsum(self.lengths)[:-1]]).astype(np.int64)
        self.ids = np.fromiter(itertools.chain.from_iterable(rows), dtype=np.int32, count=int(self.lengths.sum()))

    def pad(self, indices: np.ndarray, pad_id: int) -> torch.Tensor:
        """The rows ``indices`` right-padded to the longest: what :func:`pad_batch` gives for those rows."""
        lengths = self.lengths[indices]
        positions = np.arange(lengths.max())
        inside = positions < lengths[:, None]
        gather = np.where(inside, self.offsets[indices][:, None] + positions, 0)
        return torch.from_numpy(np.where(inside, self.ids[gather], pad_id).astype(np.int64))


def prefetched(function: Callable[[T], R], arguments: Iterable[T], depth: int = 2) -> Iterator[R]:
    """``function(a)`` for each argument in order, computed by a background thread up to ``depth`` items ahead.

    Closing the iterator early (the loop stopped) waits only for the items already under way.
    """
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="batches") as pool:
        pending: deque[Future[R]] = deque()
        for argument in arguments:
            pending.append(pool.submit(function, argument))
            if len(pending) > depth:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()
