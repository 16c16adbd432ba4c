"""Translator: texts in, translations out, with sentence splitting, batching, n-best and attention."""

from dataclasses import replace
from functools import partial

import pytest
import torch
from fixture_model import fixture_pairs, level_fixture_rows

import nmt.translator
from nmt.sampling import SamplingOptions, sample
from nmt.search import Hypothesis, SearchOptions
from nmt.speech_level import speech_level
from nmt.translator import Translator, UnsupportedLanguagePair, UnsupportedSpeechLevel, resolve_device

PAIRS = fixture_pairs()
KOREAN, ENGLISH = [ko for ko, _ in PAIRS], [en for _, en in PAIRS]


@pytest.mark.parametrize("source_lang, target_lang, sources, targets", [("ko", "en", KOREAN, ENGLISH), ("en", "ko", ENGLISH, KOREAN)])
def test_translates_the_training_pairs(fixture_translator, source_lang, target_lang, sources, targets):
    translations = fixture_translator.translate(sources, source_lang, target_lang)
    assert [t.text for t in translations] == targets


def test_multi_sentence_text_is_split_and_joined(fixture_translator):
    [translation] = fixture_translator.translate([" ".join(KOREAN[:3])], "ko", "en")
    assert translation.text == " ".join(ENGLISH[:3])


def test_empty_texts_give_empty_translations_in_place(fixture_translator):
    translations = fixture_translator.translate(["", KOREAN[0], "   ", KOREAN[1]], "ko", "en", SearchOptions(nbest=2))
    assert [t.text for t in translations] == ["", ENGLISH[0], "", ENGLISH[1]]
    assert [c.text for c in translations[0].candidates] == ["", ""]
    assert fixture_translator.translate([], "ko", "en") == []


@pytest.mark.parametrize("source_lang, target_lang", [("ko", "fr"), ("ko", "ko"), ("ja", "en")])
def test_unsupported_language_pair_is_refused(fixture_translator, source_lang, target_lang):
    with pytest.raises(UnsupportedLanguagePair, match=f"{source_lang}->{target_lang} is not served.*ko->en, en->ko"):
        fixture_translator.translate([KOREAN[0]], source_lang, target_lang)


def test_nbest_candidates_are_sorted_and_led_by_the_translation(fixture_translator):
    [translation] = fixture_translator.translate([KOREAN[4]], "ko", "en", SearchOptions(beam_size=4, nbest=3))
    assert translation.candidates[0].text == translation.text == ENGLISH[4]
    scores = [c.score for c in translation.candidates]
    assert len(scores) == 3 and scores == sorted(scores, reverse=True)


@pytest.mark.parametrize("beam_size", [1, 4])
def test_attention_rows_are_target_tokens_and_columns_source_tokens(fixture_translator, beam_size):
    text = f"{KOREAN[0]} {KOREAN[1]}"  # two sentences: block-diagonal attention
    options = SearchOptions(beam_size=beam_size, return_attention=True)
    [translation] = fixture_translator.translate([text], "ko", "en", options)
    attention = translation.attention
    tokenizer = fixture_translator.tokenizer
    first_source = tokenizer.pieces(tokenizer.source_ids(KOREAN[0], "en"))
    first_target = tokenizer.pieces(tokenizer.encode(ENGLISH[0])) + ["</s>"]

    assert attention.source_tokens[: len(first_source)] == first_source
    assert attention.target_tokens[: len(first_target)] == first_target
    assert attention.source_tokens.count("<2en>") == 2 and attention.target_tokens.count("</s>") == 2
    weights = torch.tensor(attention.weights)
    assert weights.shape == (len(attention.target_tokens), len(attention.source_tokens))
    torch.testing.assert_close(weights.sum(dim=1), torch.ones(len(weights)))
    assert torch.all(weights[: len(first_target), len(first_source) :] == 0)
    assert torch.all(weights[len(first_target) :, : len(first_source)] == 0)


def test_batch_size_does_not_change_results(fixture_translator, monkeypatch):
    """One sentence per batch and everything in one batch give the same translations and scores."""
    texts = [f"{KOREAN[i]} {KOREAN[i + 1]}" for i in range(0, 12, 3)] + KOREAN[20:26]
    options = SearchOptions(beam_size=3, nbest=2)
    searches: list[int] = []
    original_search = nmt.translator.search

    def counting_search(model, source, *args):
        searches.append(source.size(0))
        return original_search(model, source, *args)

    monkeypatch.setattr(nmt.translator, "search", counting_search)
    results = {}
    for budget in (1, 100_000):
        translator = Translator(fixture_translator.model, fixture_translator.tokenizer, fixture_translator.metadata, max_batch_tokens=budget)
        searches.clear()
        results[budget] = translator.translate(texts, "ko", "en", options)
        assert searches == ([1] * 14 if budget == 1 else [14])
    small, large = results[1], results[100_000]
    assert [t.text for t in small] == [t.text for t in large]
    for a, b in zip(small, large):
        assert [c.text for c in a.candidates] == [c.text for c in b.candidates]
        assert [c.score for c in a.candidates] == pytest.approx([c.score for c in b.candidates], abs=1e-5)


def test_resolve_device():
    assert resolve_device("cpu") == torch.device("cpu")
    assert resolve_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="no CUDA device"):
            resolve_device("cuda")


def test_banning_the_end_of_sentence_is_refused_before_searching(fixture_translator):
    """With EOS banned no hypothesis could end: a clear error, not an empty n-best list that breaks joining."""
    options = SearchOptions(banned_ids=(fixture_translator.tokenizer.eos_id,))
    with pytest.raises(ValueError, match="end-of-sentence"):
        fixture_translator.translate([KOREAN[0]], "ko", "en", options)


@pytest.mark.parametrize("level", [None, "formal", "plain", "polite"])
def test_a_speech_level_is_asked_of_a_translation_into_korean(level_translator, level):
    """The level model learned each level from its tag; untagged it translates as its data did (formal)."""
    rows = level_fixture_rows()
    options = level_translator.default_options("en", "ko", speech_level=level)
    translations = level_translator.translate([row["en"] for row in rows], "en", "ko", options)
    assert [t.text for t in translations] == [row[level or "formal"] for row in rows]
    assert {speech_level(t.text).value for t in translations} == {level or "formal"}


def test_attention_covers_the_level_tag(level_translator):
    options = level_translator.default_options("en", "ko", speech_level="plain", return_attention=True)
    attention = level_translator.translate(["I am a student."], "en", "ko", options)[0].attention
    assert attention.source_tokens[:2] == ["<2ko>", "<plain>"]
    assert all(len(row) == len(attention.source_tokens) for row in attention.weights)


def test_a_model_directory_may_set_a_default_level_per_direction(level_translator):
    metadata = {**level_translator.metadata, "decoding": {"directions": {"en-ko": {"speech_level": "polite"}}}}
    translator = Translator(level_translator.model, level_translator.tokenizer, metadata)
    assert translator.default_options("en", "ko").speech_level == "polite"
    assert translator.default_options("ko", "en").speech_level is None
    assert translator.translate(["I am a student."], "en", "ko")[0].text == "저는 학생이에요."
    assert translator.default_options("en", "ko", speech_level="plain").speech_level == "plain"


@pytest.mark.parametrize("target_lang, level, message", [
    ("en", "formal", "translations into Korean, not into 'en'"),
    ("ko", "casual", "speech_level must be one of formal, polite, plain"),
])
def test_a_level_that_cannot_be_asked_is_refused(level_translator, target_lang, level, message):
    source_lang = "ko" if target_lang == "en" else "en"
    with pytest.raises(ValueError, match=message):
        level_translator.default_options(source_lang, target_lang, speech_level=level)


def test_a_model_without_level_tags_refuses_a_level_before_searching(fixture_translator):
    with pytest.raises(UnsupportedSpeechLevel, match="trained without speech-level tags"):
        fixture_translator.default_options("en", "ko", speech_level="formal")
    with pytest.raises(UnsupportedSpeechLevel, match="trained without speech-level tags"):
        fixture_translator.translate(["I am a student."], "en", "ko", SearchOptions(speech_level="formal"))


def test_every_search_is_given_the_vocabularys_number_guard(fixture_translator):
    seen = []

    def spy(model, source, bos_id, eos_id, options, guard=None):
        seen.append(guard)
        return [[Hypothesis(tokens=[], score=0.0)] for _ in range(source.size(0))]

    def unaware(model, source, bos_id, eos_id, options):  # a strategy written before the guard
        return [[Hypothesis(tokens=[], score=0.0)] for _ in range(source.size(0))]

    options = SearchOptions(invented_number_penalty=1.0)
    fixture_translator.translate_sentences(["3년 전"], "en", options, spy)
    assert seen == [fixture_translator.number_guard]
    assert fixture_translator.translate_sentences(["3년 전"], "en", SearchOptions(), unaware) == [[Hypothesis([], 0.0)]]
    sampled = partial(sample, sampling=SamplingOptions(top_k=5), generator=torch.Generator().manual_seed(0))
    assert len(fixture_translator.translate_sentences(["3년 전"], "en", replace(options, beam_size=1), sampled)) == 1
    assert fixture_translator.beam_search(options).guard is fixture_translator.number_guard
    assert fixture_translator.beam_search(SearchOptions()).guard is None  # no penalty: nothing to guard


def test_decoding_overrides_replace_every_pairs_tuned_default_and_must_be_tuned_options(fixture_model_dir):
    translator = Translator.load(fixture_model_dir, device="cpu", decoding_overrides={"reconstruction_weight": 0.4})
    assert {pair: translator.default_options(*pair).reconstruction_weight for pair in translator.language_pairs} == {
        ("ko", "en"): 0.4, ("en", "ko"): 0.4}
    with pytest.raises(ValueError, match="not tuned decoding options: beam_size"):
        Translator.load(fixture_model_dir, device="cpu", decoding_overrides={"beam_size": 2})
