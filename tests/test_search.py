"""Greedy and beam search: agreement, exactness on the overfitted fixture, n-best, length penalty, limits."""

import math
from dataclasses import replace

import pytest
import torch
from fixture_model import fixture_examples, pad, tiny_config

from nmt.model import Transformer
from nmt.numbers import NumberGuard
from nmt.search import SearchOptions, allowed_log_probs, banned_ngram_mask, beam_search, greedy_search, search

BOS, EOS = 2, 3
GREEDY_AND_BEAM = pytest.mark.parametrize("beam_size", [1, 2], ids=["greedy", "beam"])  # search() picks greedy for 1


def markov_model(transitions: dict[int, dict[int, float]], vocab_size: int = 10) -> Transformer:
    """A model whose next-token probabilities depend only on the last token, so hypotheses can be scored by hand.

    Tokens without listed successors end the sentence; unlisted successors are impossible.
    """
    table = torch.full((vocab_size, vocab_size), -math.inf)
    table[:, EOS] = 0.0
    for token, successors in transitions.items():
        table[token] = -math.inf
        for successor, probability in successors.items():
            table[token, successor] = math.log(probability)
    torch.manual_seed(0)
    model = Transformer(tiny_config(vocab_size))
    model.decode_step = lambda tokens, cache, need_weights=False: (table[tokens], None)
    return model


# Tokens 4 and 5 equally likely forever; EOS is possible but never among the best candidates.
BABBLER = {token: {4: 0.4999, 5: 0.4999, EOS: 0.0002} for token in (BOS, 4, 5)}


@pytest.fixture(scope="module")
def fixture_batch(fixture_translator) -> tuple[Transformer, torch.Tensor, list[list[int]]]:
    """The overfitted model, every fixture source (both directions, padded) and the target tokens it learnt."""
    examples = fixture_examples(fixture_translator.tokenizer)
    return fixture_translator.model, pad([s for s, _ in examples]), [t[1:-1] for _, t in examples]


def test_beam_search_reproduces_training_targets_in_both_directions(fixture_batch):
    model, source, targets = fixture_batch
    results = beam_search(model, source, BOS, EOS, SearchOptions(beam_size=4))
    assert [nbest[0].tokens for nbest in results] == targets


def test_beam_size_one_equals_greedy(fixture_batch):
    model, source, _ = fixture_batch
    scrambled = source.flip(1)  # reversed inputs: out of domain, so the model is unsure and babbles
    for batch in (source, scrambled):
        options = SearchOptions(beam_size=1)
        greedy, beam = greedy_search(model, batch, BOS, EOS, options), beam_search(model, batch, BOS, EOS, options)
        assert [g[0].tokens for g in greedy] == [b[0].tokens for b in beam]
        assert [g[0].score for g in greedy] == pytest.approx([b[0].score for b in beam], abs=1e-5)


@pytest.mark.parametrize("beam_size", [1, 4])
def test_translation_ignores_padding_and_batch_mates(fixture_batch, beam_size):
    """Sentences of different lengths, so batch mates also finish at different steps."""
    model, source, _ = fixture_batch
    options = SearchOptions(beam_size=beam_size, return_attention=True)
    rows = source[::7]
    together = search(model, rows, BOS, EOS, options)
    for row, batched in zip(rows, together):
        length = int((row != model.config.pad_id).sum())
        for padding in (0, 5):
            alone = search(model, pad([row[:length].tolist() + [0] * padding]), BOS, EOS, options)[0]
            assert alone[0].tokens == batched[0].tokens
            assert alone[0].score == pytest.approx(batched[0].score, abs=1e-5)
            torch.testing.assert_close(alone[0].attention[:, :length], batched[0].attention[:, :length], atol=1e-5, rtol=0)


@GREEDY_AND_BEAM
def test_attention_has_a_row_per_output_token_over_real_source_tokens(fixture_batch, beam_size):
    model, source, _ = fixture_batch
    results = search(model, source[:6], BOS, EOS, SearchOptions(beam_size=beam_size, return_attention=True))
    for row, nbest in zip(source[:6], results):
        length = int((row != model.config.pad_id).sum())
        attention = nbest[0].attention
        assert attention.shape == (len(nbest[0].tokens) + 1, source.size(1))  # + 1 for EOS
        torch.testing.assert_close(attention[:, :length].sum(dim=1), torch.ones(len(attention)))
        assert torch.all(attention[:, length:] == 0)


def test_nbest_is_sorted_and_distinct(fixture_batch):
    model, source, _ = fixture_batch
    for nbest in beam_search(model, source[:10], BOS, EOS, SearchOptions(beam_size=4, nbest=4)):
        assert len(nbest) == 4
        scores = [h.score for h in nbest]
        assert scores == sorted(scores, reverse=True)
        assert len({tuple(h.tokens) for h in nbest}) == 4


def test_length_penalty_lets_a_longer_hypothesis_win():
    # short [4]: P = 0.6, 2 steps with EOS; long [5, 6, 7]: P = 0.4, 4 steps.
    model = markov_model({BOS: {4: 0.6, 5: 0.4}, 4: {EOS: 1.0}, 5: {6: 1.0}, 6: {7: 1.0}, 7: {EOS: 1.0}})
    source = torch.tensor([[8, EOS]])
    unnormalised = beam_search(model, source, BOS, EOS, SearchOptions(beam_size=2, nbest=2, length_penalty=0.0))[0]
    per_token = beam_search(model, source, BOS, EOS, SearchOptions(beam_size=2, nbest=2, length_penalty=1.0))[0]
    assert [h.tokens for h in unnormalised] == [[4], [5, 6, 7]]
    assert [h.score for h in unnormalised] == pytest.approx([math.log(0.6), math.log(0.4)])
    assert [h.tokens for h in per_token] == [[5, 6, 7], [4]]
    assert [h.score for h in per_token] == pytest.approx([math.log(0.4) / 4, math.log(0.6) / 2])


@GREEDY_AND_BEAM
def test_output_length_limit_follows_each_source_length(beam_size):
    """max_len_a·source_length + max_len_b steps, EOS included, per sentence of the batch."""
    source = pad([[8, EOS], [8, 8, 8, 8, EOS]])
    options = SearchOptions(beam_size=beam_size, max_len_a=1.0, max_len_b=1)
    results = search(markov_model(BABBLER), source, BOS, EOS, options)
    assert [len(nbest[0].tokens) for nbest in results] == [2, 5]


@GREEDY_AND_BEAM
def test_no_repeat_ngram_size_bans_repeated_ngrams(beam_size):
    model, source = markov_model(BABBLER), torch.tensor([[8, EOS]])

    def bigrams(tokens: list[int]) -> list[tuple[int, int]]:
        return list(zip(tokens, tokens[1:]))

    free = search(model, source, BOS, EOS, SearchOptions(beam_size=beam_size, max_len_a=0, max_len_b=12))[0][0]
    banned = search(model, source, BOS, EOS, SearchOptions(beam_size=beam_size, max_len_a=0, max_len_b=12, no_repeat_ngram_size=2))[0][0]
    assert len(free.tokens) == 11, "without the ban the babbler runs to the length limit"
    assert len(set(bigrams(free.tokens))) < len(bigrams(free.tokens))
    assert banned.tokens and len(set(bigrams(banned.tokens))) == len(bigrams(banned.tokens))


@pytest.mark.parametrize(
    "prefix, n, banned",
    [
        ([5, 6, 5], 2, {6}),  # "5 6" seen: after 5, 6 would repeat it
        ([5, 6, 7, 5, 6], 3, {7}),
        ([5, 5], 2, {5}),
        ([5, 6, 7], 1, {5, 6, 7}),
        ([5, 6, 7], 2, set()),
        ([5, 6], 3, set()),  # shorter than n
    ],
)
def test_banned_ngram_mask(prefix, n, banned):
    mask = banned_ngram_mask(torch.tensor([prefix]), n, vocab_size=10)
    assert set(mask[0].nonzero().flatten().tolist()) == banned


def test_banned_ngram_mask_is_per_row():
    mask = banned_ngram_mask(torch.tensor([[5, 6, 5], [7, 8, 9]]), 2, vocab_size=10)
    assert mask.nonzero().tolist() == [[0, 6]]


@pytest.mark.parametrize(
    "settings, message",
    [({"beam_size": 0}, "beam_size"), ({"beam_size": 2, "nbest": 3}, "nbest"), ({"max_len_b": 0}, "max_len"), ({"min_length": -1}, "min_length"),
     ({"no_repeat_ngram_size": -1}, "no_repeat"), ({"invented_number_penalty": -1.0}, "invented_number_penalty"),
     ({"invented_number_penalty": float("inf")}, "invented_number_penalty")],
)
def test_invalid_options_are_refused(settings, message):
    with pytest.raises(ValueError, match=message):
        SearchOptions(**settings)


def test_pad_bos_and_banned_ids_are_never_allowed():
    logits = torch.zeros(2, 10)
    special = (0, 1, 2)  # PAD, BOS, EOS
    allowed = allowed_log_probs(logits, torch.ones(2, 1, dtype=torch.long), torch.tensor([1, 0]), torch.tensor([False, True]),
                                SearchOptions(banned_ids=(7, 1)), special)
    assert torch.isinf(allowed[0]).nonzero().flatten().tolist() == [0, 1, 7]
    assert torch.isfinite(allowed[1]).nonzero().flatten().tolist() == [2]  # at its length limit: only EOS, however short


def test_eos_waits_for_min_length():
    special = (0, 1, 2)  # PAD, BOS, EOS
    steps, no_limit = torch.tensor([0, 1, 2]), torch.zeros(3, dtype=torch.bool)
    allowed = allowed_log_probs(torch.zeros(3, 10), torch.ones(3, 1, dtype=torch.long), steps, no_limit, SearchOptions(min_length=2), special)
    assert torch.isinf(allowed[:, 2]).tolist() == [True, True, False]


@GREEDY_AND_BEAM
def test_a_sentence_never_translates_to_nothing_by_default(beam_size):
    model, source = markov_model({BOS: {EOS: 0.9, 4: 0.1}}), torch.tensor([[8, EOS]])
    assert search(model, source, BOS, EOS, SearchOptions(beam_size=beam_size))[0][0].tokens == [4]
    assert search(model, source, BOS, EOS, SearchOptions(beam_size=beam_size, min_length=0))[0][0].tokens == []


def test_an_empty_hypothesis_does_not_take_a_finished_slot():
    """Beam 2 stops a sentence at 2 finished hypotheses. Were EOS allowed first, the empty one would be the first,
    "4" the second, and the better "4 6 7" (the same probability over more tokens) would be cut off."""
    model = markov_model({BOS: {4: 0.7, EOS: 0.2, 5: 0.1}, 4: {EOS: 0.5, 6: 0.5}, 6: {7: 1.0}, 7: {EOS: 1.0}})
    source, options = torch.tensor([[8, EOS]]), SearchOptions(beam_size=2, nbest=2, length_penalty=1.0)
    cut_off = beam_search(model, source, BOS, EOS, replace(options, min_length=0))[0]
    assert [h.tokens for h in cut_off] == [[4], []]
    assert [h.tokens for h in beam_search(model, source, BOS, EOS, options)[0]] == [[4, 6, 7], [4]]


@GREEDY_AND_BEAM
def test_invented_number_penalty_steers_away_from_numbers_the_source_lacks(beam_size):
    """After BOS the model prefers the number " 1" (0.6) to the word " a" (0.4); a penalty of 1 makes " 1" worth
    log 0.6 - 1 < log 0.4 where the source has no 1, and changes nothing where it has one or without the guard."""
    guard = NumberGuard(["", "", "", "", " a", " 1", " 2", "", "", ""])
    model = markov_model({BOS: {5: 0.6, 4: 0.4}})
    without_one, with_one = torch.tensor([[6, EOS]]), torch.tensor([[5, EOS]])
    options = SearchOptions(beam_size=beam_size, invented_number_penalty=1.0)
    assert search(model, without_one, BOS, EOS, options, guard)[0][0].tokens == [4]
    assert search(model, with_one, BOS, EOS, options, guard)[0][0].tokens == [5]
    assert search(model, without_one, BOS, EOS, options)[0][0].tokens == [5]
    assert search(model, without_one, BOS, EOS, replace(options, invented_number_penalty=0.0), guard)[0][0].tokens == [5]
    # soft: a number the model is sure enough of stays, and its score carries the penalty the search paid for it
    sure = search(markov_model({BOS: {5: 0.9, 4: 0.1}}), without_one, BOS, EOS, options, guard)[0][0]
    assert sure.tokens == [5] and sure.score == pytest.approx((math.log(0.9) - 1.0) / 2)
