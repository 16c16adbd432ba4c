"""Iteration-level beam search (``BeamSearch``): sentences that join a running search, or leave it, translate as alone.

The schedules are random but seeded: which sentences join at which step boundary, with how much padding, and
which are removed mid-search. Every surviving sentence must get the n-best it gets when decoded on its own.
"""

import random

import pytest
import torch
from fixture_model import fixture_examples, pad

from nmt.search import BeamSearch, SearchOptions, search

BOS, EOS = 2, 3
OPTIONS = [
    SearchOptions(beam_size=1, return_attention=True),
    SearchOptions(beam_size=4, nbest=3, return_attention=True),
    SearchOptions(beam_size=3, nbest=2, length_penalty=0.6, no_repeat_ngram_size=2, max_len_a=1.0, max_len_b=3),
]


@pytest.fixture(scope="module")
def sources(fixture_translator) -> list[list[int]]:
    """Fixture sources as learnt, and reversed (out of domain: the model is unsure, so hypotheses differ and run long)."""
    rows = [source for source, _ in fixture_examples(fixture_translator.tokenizer)][::5]
    return rows + [row[::-1] for row in rows]


def alone(model, row: list[int], options: SearchOptions):
    return search(model, torch.tensor([row]), BOS, EOS, options)[0]


def assert_same_nbest(joined, solo, source_length: int) -> None:
    assert [h.tokens for h in joined] == [h.tokens for h in solo]
    assert [h.score for h in joined] == pytest.approx([h.score for h in solo], abs=1e-5)
    for together, single in zip(joined, solo):
        if single.attention is not None:
            torch.testing.assert_close(together.attention[:, :source_length], single.attention, atol=1e-5, rtol=0)
            assert torch.all(together.attention[:, source_length:] == 0)


def run_schedule(engine: BeamSearch, rows: list[list[int]], rng: random.Random, removed: set[int]) -> dict:
    """Add the rows in random groups at random step boundaries, remove ``removed`` soon after they join."""
    pending, results, steps = list(range(len(rows))), {}, 0
    while pending or engine:
        if pending and (not engine or rng.random() < 0.4):
            group = [pending.pop(0) for _ in range(min(len(pending), rng.randint(1, 3)))]
            extra_padding = rng.randint(0, 3)  # padding must not matter either
            width = max(len(rows[i]) for i in group) + extra_padding
            engine.add(pad([rows[i] for i in group]) if not extra_padding else torch.tensor(
                [rows[i] + [0] * (width - len(rows[i])) for i in group]), group)
        if engine:
            results.update(engine.step())
            steps += 1
            engine.remove({key for key in engine.keys if key in removed and rng.random() < 0.5})
        assert steps < 10_000
    return results


@pytest.mark.parametrize("options", OPTIONS, ids=["greedy-attention", "beam-nbest-attention", "beam-penalty-ngram"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_join_schedules_give_the_translations_of_solo_decoding(fixture_translator, sources, options, seed):
    model, rng = fixture_translator.model, random.Random(seed)
    rows = rng.sample(sources, len(sources))
    removed = set(rng.sample(range(len(rows)), 3))
    results = run_schedule(BeamSearch(model, BOS, EOS, options), rows, rng, removed)
    assert set(results) | removed >= set(range(len(rows)))  # every sentence finished unless it was removed
    for key, nbest in results.items():
        assert len(nbest) == options.nbest
        assert_same_nbest(nbest, alone(model, rows[key], options), len(rows[key]))


def test_a_sentence_joining_late_reads_only_its_own_positions(fixture_translator, sources):
    """The long, unsure sentence runs on while short ones join, leave and join again: positions differ per row."""
    model, options = fixture_translator.model, SearchOptions(beam_size=2, max_len_a=3.0, max_len_b=20)
    long_row = max(sources[len(sources) // 2 :], key=len)
    engine = BeamSearch(model, BOS, EOS, options)
    engine.add(torch.tensor([long_row]), ["long"])
    results, joined = {}, 0
    for step in range(200):
        if step % 4 == 1:
            engine.add(torch.tensor([sources[joined % len(sources)]]), [joined])
            joined += 1
        results.update(engine.step())
        if "long" in results and not engine:
            break
    for key, nbest in results.items():
        row = long_row if key == "long" else sources[key % len(sources)]
        assert_same_nbest(nbest, alone(model, row, options), len(row))
    assert joined > 3 and "long" in results


def test_removed_sentences_leave_and_the_search_empties(fixture_translator, sources):
    model, options = fixture_translator.model, SearchOptions(beam_size=2)
    engine = BeamSearch(model, BOS, EOS, options)
    engine.add(pad(sources[:3]), ["a", "b", "c"])
    engine.step()
    engine.remove({"b"})
    assert engine.keys == ["a", "c"]
    engine.remove({"a", "c"})
    assert not engine and engine.keys == []
    engine.add(pad(sources[3:4]), ["d"])  # an emptied search starts afresh
    results = {}
    while engine:
        results.update(engine.step())
    assert_same_nbest(results["d"], alone(model, sources[3], options), len(sources[3]))


def test_the_source_width_shrinks_to_the_longest_source_still_searching(fixture_translator, sources):
    """A running search that never empties must not attend over the padding of its widest source ever."""
    model, options = fixture_translator.model, SearchOptions(beam_size=2, return_attention=True)
    short, long_row = min(sources, key=len), max(sources, key=len)
    engine = BeamSearch(model, BOS, EOS, options)
    engine.add(pad([long_row, short]), ["long", "short"])
    engine.step()
    engine.remove({"long"})
    assert engine._cache.memory_mask.size(-1) == len(short) < len(long_row)
    engine.add(torch.tensor([long_row[: len(short) + 1]]), ["joined"])  # one position wider again
    results = {}
    while engine:
        results.update(engine.step())
    assert_same_nbest(results["short"], alone(model, short, options), len(short))
    assert_same_nbest(results["joined"], alone(model, long_row[: len(short) + 1], options), len(short) + 1)


@pytest.mark.parametrize("beam_size", [1, 3])
def test_the_number_guard_follows_each_sentence_through_joins_and_leaves(fixture_translator, sources, beam_size):
    """Each sentence keeps its own source's numbers however rows move; a huge penalty bans every digit the sources
    lack, so a translation decoded in a crowd is the one it gets alone with the same guard."""
    model, guard, rng = fixture_translator.model, fixture_translator.number_guard, random.Random(7)
    options = SearchOptions(beam_size=beam_size, nbest=1, invented_number_penalty=1e6)
    rows = rng.sample(sources, len(sources))
    results = run_schedule(BeamSearch(model, BOS, EOS, options, guard), rows, rng, removed=set())
    for key, nbest in results.items():
        solo = search(model, torch.tensor([rows[key]]), BOS, EOS, options, guard)[0]
        assert_same_nbest(nbest, solo, len(rows[key]))
        assert not set(nbest[0].tokens) & (set(guard.digit_ids) - set(rows[key]))  # no digit the source lacks
