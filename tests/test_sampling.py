"""Sampling search on the fixture model: reproducible per seed, greedy in the limit, and it obeys the bans."""

import pytest
import torch

from fixture_model import pad
from nmt.sampling import SamplingOptions, sample
from nmt.search import SearchOptions, greedy_search, max_target_lengths

KOREAN = ["나는 학생입니다.", "그는 의사입니다.", "오늘은 날씨가 좋습니다.", "감사합니다."]


@pytest.fixture(scope="module")
def batch(fixture_translator):
    tokenizer = fixture_translator.tokenizer
    return pad([tokenizer.source_ids(text, "en") for text in KOREAN * 8], tokenizer.pad_id)


def draw(translator, source, options=SearchOptions(beam_size=1), seed=0, **sampling):
    tokenizer = translator.tokenizer
    generator = torch.Generator().manual_seed(seed)
    hypotheses = sample(translator.model, source, tokenizer.bos_id, tokenizer.eos_id, options,
                        SamplingOptions(**sampling), generator)
    return [nbest[0].tokens for nbest in hypotheses]


def test_same_seed_same_sample_other_seed_other_sample(fixture_translator, batch):
    first = draw(fixture_translator, batch, seed=1, temperature=3.0)
    assert draw(fixture_translator, batch, seed=1, temperature=3.0) == first
    assert draw(fixture_translator, batch, seed=2, temperature=3.0) != first


def test_near_zero_temperature_and_top_1_are_greedy(fixture_translator, batch):
    tokenizer = fixture_translator.tokenizer
    options = SearchOptions(beam_size=1)
    greedy = greedy_search(fixture_translator.model, batch, tokenizer.bos_id, tokenizer.eos_id, options)
    expected = [nbest[0].tokens for nbest in greedy]
    assert draw(fixture_translator, batch, temperature=1e-4) == expected
    assert draw(fixture_translator, batch, seed=5, temperature=5.0, top_k=1) == expected
    assert tokenizer.decode(expected[0]) == "I am a student."


def test_banned_ids_are_never_drawn_and_lengths_stay_within_the_limit(fixture_translator, batch):
    """At temperature 50 the draw is nearly uniform over 600 pieces: without the ban these ids would turn up."""
    tokenizer = fixture_translator.tokenizer
    banned = (tokenizer.bt_id, tokenizer.language_id("ko"), tokenizer.language_id("en"), tokenizer.unk_id)
    options = SearchOptions(beam_size=1, banned_ids=banned)
    outputs = draw(fixture_translator, batch, options, temperature=50.0)
    drawn = {token for tokens in outputs for token in tokens}
    assert len(drawn) > 100  # the draw really is spread out
    assert not drawn & {*banned, tokenizer.pad_id, tokenizer.bos_id, tokenizer.eos_id}
    limits = max_target_lengths(batch, tokenizer.pad_id, options, fixture_translator.model.config.max_positions)
    assert all(len(tokens) < int(limit) for tokens, limit in zip(outputs, limits))


def test_top_k_draws_only_among_the_k_best(fixture_translator, batch):
    """With top_k=2 every first token is one of the two most probable first tokens."""
    tokenizer, model = fixture_translator.tokenizer, fixture_translator.model
    with torch.inference_mode():
        memory, mask = model.encode(batch)
        first_logits, _ = model.decode_step(torch.full((batch.size(0),), tokenizer.bos_id), model.start_cache(memory, mask))
    best_two = first_logits.topk(2, dim=-1).indices.tolist()
    outputs = draw(fixture_translator, batch, temperature=100.0, top_k=2)
    assert all(tokens[0] in allowed for tokens, allowed in zip(outputs, best_two))
    assert len({tokens[0] for tokens in outputs}) > len({allowed[0] for allowed in best_two})  # not always the best


@pytest.mark.parametrize("settings", [{"temperature": 0.0}, {"temperature": -1.0}, {"top_k": -1}])
def test_invalid_options_are_refused(settings):
    with pytest.raises(ValueError):
        SamplingOptions(**settings)
