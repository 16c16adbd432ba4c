"""nmt.explain: every layer's and head's attention of a translation, from a teacher-forced pass."""

import pytest
import torch
from fixture_model import fixture_pairs

from nmt.explain import KINDS, explain
from nmt.search import SearchOptions

KO, EN = fixture_pairs()[0]


@pytest.fixture(scope="module")
def explained(fixture_translator):
    return explain(fixture_translator, KO, "ko", "en")


def test_translation_is_the_one_translate_gives(fixture_translator, explained):
    [translation] = fixture_translator.translate([KO], "ko", "en")
    assert explained.translation.text == translation.text == EN
    assert explained.translation.candidates == translation.candidates


def test_every_kind_has_a_map_per_layer_and_head_shaped_by_its_pieces(fixture_translator, explained):
    [sentence] = explained.sentences
    config = fixture_translator.model.config
    source, target = len(sentence.source_pieces), len(sentence.target_pieces)
    assert sentence.source_pieces[0] == "<2en>" and sentence.source_pieces[-1] == "</s>"
    assert sentence.target_pieces[-1] == "</s>" and sentence.decoder_input_pieces[0] == "<s>"
    assert sentence.decoder_input_pieces[1:] == sentence.target_pieces[:-1]
    assert sentence.encoder.shape == (config.encoder_layers, config.n_heads, source, source)
    assert sentence.decoder.shape == (config.decoder_layers, config.n_heads, target, target)
    assert sentence.cross.shape == (config.decoder_layers, config.n_heads, target, source)


@pytest.mark.parametrize("kind", KINDS)
def test_every_row_is_a_distribution(explained, kind):
    weights = explained.sentences[0].weights(kind)
    assert (weights >= 0).all()
    torch.testing.assert_close(weights.sum(dim=-1), torch.ones(weights.shape[:-1]))


def test_decoder_self_attention_sees_only_the_prefix(explained):
    decoder = explained.sentences[0].decoder
    above_diagonal = torch.ones(decoder.shape[-2:], dtype=torch.bool).triu(diagonal=1)
    assert (decoder[..., above_diagonal] == 0).all()
    assert (decoder[..., ~above_diagonal] > 0).any()


def test_heads_differ(explained):
    """Per-head maps, not one average copied per head."""
    cross = explained.sentences[0].cross
    assert not torch.allclose(cross[-1, 0], cross[-1, 1])


def test_last_layer_cross_average_is_what_the_search_reports(fixture_translator, explained):
    [translation] = fixture_translator.translate([KO], "ko", "en", SearchOptions(return_attention=True))
    average = explained.sentences[0].heatmap("cross", layer=-1, head=None)
    assert average.source_tokens == translation.attention.source_tokens
    assert average.target_tokens == translation.attention.target_tokens
    torch.testing.assert_close(torch.tensor(average.weights), torch.tensor(translation.attention.weights), atol=1e-5, rtol=0)


def test_sentences_of_a_text_are_explained_apart(fixture_translator):
    (ko1, en1), (ko2, en2) = fixture_pairs()[:2]
    explained = explain(fixture_translator, f"{ko1} {ko2}", "ko", "en")
    assert explained.translation.text == f"{en1} {en2}"
    first, second = explained.sentences
    alone = explain(fixture_translator, ko2, "ko", "en").sentences[0]
    assert second.source_pieces == alone.source_pieces and second.target_pieces == alone.target_pieces
    torch.testing.assert_close(second.cross, alone.cross)
    assert first.source_pieces != second.source_pieces


def test_heatmap_picks_a_head_or_the_average(explained):
    sentence = explained.sentences[0]
    head = sentence.heatmap("encoder", layer=0, head=1)
    assert head.source_tokens == head.target_tokens == sentence.source_pieces
    torch.testing.assert_close(torch.tensor(head.weights), sentence.encoder[0, 1])
    decoder = sentence.heatmap("decoder", layer=1)
    assert decoder.target_tokens == sentence.target_pieces and decoder.source_tokens == sentence.decoder_input_pieces
    torch.testing.assert_close(torch.tensor(decoder.weights), sentence.decoder[1].mean(dim=0))


@pytest.mark.parametrize("arguments, message", [
    (dict(kind="self"), "kind must be one of encoder, decoder, cross"),
    (dict(layer=2), "layer must be between 0 and 1"),
    (dict(head=4), "head must be between 0 and 3"),
])
def test_heatmap_refuses_what_the_model_does_not_have(explained, arguments, message):
    with pytest.raises(ValueError, match=message):
        explained.sentences[0].heatmap(**arguments)


def test_to_dict_holds_pieces_and_rounded_maps(explained):
    sentence = explained.sentences[0]
    data = sentence.to_dict(decimals=3)
    assert data["target_pieces"] == sentence.target_pieces
    assert len(data["cross"]) == sentence.cross.shape[0] and len(data["cross"][0][0]) == len(sentence.target_pieces)
    assert data["encoder"][0][0][0][0] == round(float(sentence.encoder[0, 0, 0, 0]), 3)


def test_unserved_pair_is_refused(fixture_translator):
    with pytest.raises(ValueError, match="not served"):
        explain(fixture_translator, KO, "ko", "fr")


def test_a_text_heatmap_puts_its_sentences_on_the_diagonal(fixture_translator):
    (ko1, _), (ko2, _) = fixture_pairs()[:2]
    explained = explain(fixture_translator, f"{ko1} {ko2}", "ko", "en")
    first, second = (sentence.heatmap("cross") for sentence in explained.sentences)
    whole = explained.heatmap("cross")
    assert whole.source_tokens == first.source_tokens + second.source_tokens
    assert whole.target_tokens == first.target_tokens + second.target_tokens
    rows, columns = len(first.target_tokens), len(first.source_tokens)
    weights = torch.tensor(whole.weights)
    torch.testing.assert_close(weights[:rows, :columns], torch.tensor(first.weights))
    torch.testing.assert_close(weights[rows:, columns:], torch.tensor(second.weights))
    assert (weights[:rows, columns:] == 0).all() and (weights[rows:, :columns] == 0).all()
