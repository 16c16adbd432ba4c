"""Reconstruction reranking: the reverse direction's log P(source | candidate), and the beam reordered by it."""

import math

import pytest
import torch
from fixture_model import fixture_examples, fixture_pairs

from nmt.loss import label_smoothed_nll
from nmt.rerank import mean_log_probs, rerank
from nmt.search import Hypothesis, SearchOptions

PAIRS = fixture_pairs()


def test_mean_log_probs_are_the_negative_nll_per_token_of_each_pair_alone(fixture_translator):
    model, pad = fixture_translator.inference_model, fixture_translator.pad
    examples = fixture_examples(fixture_translator.tokenizer)[:12]
    sources, targets = [s for s, _ in examples], [t for _, t in examples]
    batched = mean_log_probs(model, pad(sources), pad(targets))  # padding must not change a score
    for source, target, got in zip(sources, targets, batched.tolist()):
        with torch.inference_mode():
            logits = model(torch.tensor([source]), torch.tensor([target[:-1]]))
        nll = label_smoothed_nll(logits, torch.tensor([target[1:]]), 0.0, fixture_translator.tokenizer.pad_id)[1]
        assert got == pytest.approx(-float(nll) / (len(target) - 1), abs=1e-4)


def test_reconstruction_scores_do_not_depend_on_the_batch_budget(fixture_translator, monkeypatch):
    sentences = [ko for ko, _ in PAIRS[:8]]
    nbest = fixture_translator.translate_sentences(sentences, "en", SearchOptions(beam_size=3, nbest=3))
    whole = fixture_translator.reconstruction_scores(sentences, nbest, "ko")
    monkeypatch.setattr(fixture_translator, "max_batch_tokens", 1)  # one candidate per batch
    assert fixture_translator.reconstruction_scores(sentences, nbest, "ko") == [pytest.approx(row, abs=1e-5) for row in whole]


def test_the_true_translation_reconstructs_its_source_better_than_another(fixture_translator):
    tokenizer, pad = fixture_translator.tokenizer, fixture_translator.pad
    (ko, en), (_, other) = PAIRS[0], PAIRS[5]
    candidates = [[tokenizer.language_id("ko"), *tokenizer.encode(text), tokenizer.eos_id] for text in (en, other)]
    true, wrong = mean_log_probs(fixture_translator.inference_model, pad(candidates), pad([tokenizer.target_ids(ko)] * 2)).tolist()
    assert true > wrong and true > -1.0


def hypothesis(length: int, score: float) -> Hypothesis:
    return Hypothesis(tokens=list(range(4, 4 + length)), score=score)


def test_weight_zero_keeps_the_search_order_and_scores():
    nbest = [hypothesis(3, -0.2), hypothesis(5, -0.5), hypothesis(2, -0.9)]
    assert rerank(nbest, [-3.0, -0.1, -0.2], 0.0, 1.0) == nbest


def test_the_channel_is_added_per_target_token_before_the_length_penalty():
    """score + λ · c · n^(1−α): at α = 1 the sum of the two means, at α = 2 the channel shares the 1/n of the score."""
    short, long = hypothesis(1, -1.0), hypothesis(7, -1.1)  # n = 2 and 8 tokens with EOS
    at_one = rerank([short, long], [-2.0, -1.0], 0.5, 1.0)
    assert [h.tokens for h in at_one] == [long.tokens, short.tokens]
    assert [h.score for h in at_one] == pytest.approx([-1.1 - 0.5, -1.0 - 1.0])
    at_two = rerank([short, long], [-2.0, -1.0], 0.5, 2.0)
    assert [h.tokens for h in at_two] == [long.tokens, short.tokens]
    assert [h.score for h in at_two] == pytest.approx([-1.1 - 0.5 * 1.0 / 8, -1.0 - 0.5 * 2.0 / 2])


def test_rerank_needs_one_channel_score_per_hypothesis():
    with pytest.raises(ValueError):
        rerank([hypothesis(1, -1.0)], [-1.0, -2.0], 0.5, 1.0)


@pytest.mark.parametrize("weight", [-0.1, math.inf, math.nan])
def test_a_weight_must_be_finite_and_not_negative(weight):
    with pytest.raises(ValueError, match="reconstruction_weight"):
        SearchOptions(reconstruction_weight=weight)


def test_the_translator_reranks_the_whole_beam_and_returns_nbest(fixture_translator, monkeypatch):
    sentences = [ko for ko, _ in PAIRS[:6]]
    options = SearchOptions(beam_size=4, nbest=2, reconstruction_weight=0.7)
    searched = fixture_translator.translate_sentences(sentences, "en", options)
    assert all(len(nbest) == 4 for nbest in searched)  # the search keeps the whole beam to rerank
    channel = fixture_translator.reconstruction_scores(sentences, searched, "ko")
    expected = [rerank(nbest, scores, 0.7, options.length_penalty) for nbest, scores in zip(searched, channel)]
    translations = fixture_translator.translate(sentences, "ko", "en", options)
    decode = fixture_translator.tokenizer.decode
    for translation, best in zip(translations, expected):
        assert [c.text for c in translation.candidates] == [decode(h.tokens) for h in best[:2]]
        assert [c.score for c in translation.candidates] == pytest.approx([h.score for h in best[:2]])
        assert translation.text == decode(best[0].tokens)


def test_reranking_keeps_what_the_overfitted_model_knows(fixture_translator):
    """On its training pairs the beam's choice is also the best reconstruction: a strong weight changes nothing."""
    sources, targets = [ko for ko, _ in PAIRS], [en for _, en in PAIRS]
    options = SearchOptions(beam_size=4, reconstruction_weight=2.0)
    assert [t.text for t in fixture_translator.translate(sources, "ko", "en", options)] == targets


def test_without_a_weight_or_a_beam_nothing_is_rescored(fixture_translator, monkeypatch):
    monkeypatch.setattr(fixture_translator, "reconstruction_scores", lambda *args: pytest.fail("rescored"))
    [translation] = fixture_translator.translate([PAIRS[0][0]], "ko", "en", SearchOptions(beam_size=4, nbest=2))
    assert translation.text == PAIRS[0][1] and len(translation.candidates) == 2
    [greedy] = fixture_translator.translate([PAIRS[0][0]], "ko", "en", SearchOptions(beam_size=1, reconstruction_weight=0.5))
    assert greedy.text == PAIRS[0][1]  # one hypothesis: nothing to choose between
