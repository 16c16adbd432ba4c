"""training.batching: every example once per epoch, within the token budget, in an order fixed by (seed, epoch)."""

import numpy as np
import pytest
import torch

from training.batching import TokenTable, pad_batch, prefetched, shard, token_batches

RNG = np.random.default_rng(0)
SOURCE_LENGTHS = RNG.integers(1, 60, size=500)
TARGET_LENGTHS = RNG.integers(1, 60, size=500)


def test_each_example_appears_once_and_batches_respect_the_budget():
    batches = token_batches(SOURCE_LENGTHS, TARGET_LENGTHS, max_tokens=256, seed=1, epoch=0)
    assert sorted(np.concatenate(batches).tolist()) == list(range(500))
    longest = np.maximum(SOURCE_LENGTHS, TARGET_LENGTHS)
    for batch in batches:
        assert len(batch) * longest[batch].max() <= 256


def test_an_example_longer_than_the_budget_gets_a_batch_of_its_own():
    batches = token_batches([300, 5, 5], [10, 5, 5], max_tokens=100, seed=1, epoch=0)
    assert sorted(map(len, batches)) == [1, 2]
    assert [0] in [b.tolist() for b in batches]


def test_batches_group_similar_lengths():
    batches = token_batches(SOURCE_LENGTHS, TARGET_LENGTHS, max_tokens=256, seed=1, epoch=0)
    longest = np.maximum(SOURCE_LENGTHS, TARGET_LENGTHS)
    padding = sum(len(b) * longest[b].max() - longest[b].sum() for b in batches)
    assert padding < 0.05 * longest.sum()


def test_the_order_is_a_function_of_seed_and_epoch():
    def order(seed: int, epoch: int) -> list[list[int]]:
        return [b.tolist() for b in token_batches(SOURCE_LENGTHS, TARGET_LENGTHS, 256, seed, epoch)]

    assert order(1, 0) == order(1, 0)
    assert order(1, 0) != order(1, 1)
    assert order(1, 0) != order(2, 0)


@pytest.mark.parametrize("world_size", [1, 2, 3])
def test_shards_are_disjoint_and_equally_long(world_size):
    batches = [np.array([i]) for i in range(10)]
    shards = [shard(batches, rank, world_size) for rank in range(world_size)]
    assert len({len(s) for s in shards}) == 1
    seen = [int(b[0]) for s in shards for b in s]
    assert len(seen) == len(set(seen)) == 10 - 10 % world_size


def test_pad_batch_right_pads_with_the_pad_id():
    assert pad_batch([[5, 6, 7], [8]], pad_id=0).tolist() == [[5, 6, 7], [8, 0, 0]]
    assert pad_batch([[5]], pad_id=0).dtype == torch.long


def test_a_token_table_pads_exactly_as_pad_batch():
    rows = [RNG.integers(4, 100, length).tolist() for length in RNG.integers(1, 30, size=50)]
    table = TokenTable(rows)
    for indices in (np.array([3]), np.array([7, 1, 30, 2]), np.arange(50)):
        padded = table.pad(indices, pad_id=0)
        assert padded.dtype == torch.long
        assert torch.equal(padded, pad_batch([rows[i] for i in indices], pad_id=0))


def test_prefetched_keeps_the_order_and_stops_with_its_consumer():
    started = []

    def square(x: int) -> int:
        started.append(x)
        return x * x

    assert list(prefetched(square, range(10), depth=2)) == [x * x for x in range(10)]
    started.clear()
    items = prefetched(square, range(100), depth=2)
    assert [next(items) for _ in range(3)] == [0, 1, 4]
    items.close()
    assert len(started) <= 3 + 2 + 1  # the three consumed, the two queued, at most one being built


def test_prefetched_passes_an_error_on_to_the_consumer():
    def fail_on_three(x: int) -> int:
        if x == 3:
            raise ValueError("bad batch")
        return x

    with pytest.raises(ValueError, match="bad batch"):
        list(prefetched(fail_on_three, range(10)))
