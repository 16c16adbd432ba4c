"""training.grow: a deepened or widened model computes what the original did, and what it gained can learn."""

import json
from dataclasses import replace

import pytest
import torch
from fixture_model import tiny_config

from nmt.checkpoint import load_model, save_model
from nmt.model import FeedForward, Transformer
from nmt.tokenizer import SPEECH_LEVEL_TAGS
from training.average import average_checkpoints
from training.grow import GrowthError, copied_layers, grow, main


def random_batch(vocab_size: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    source = torch.randint(4, vocab_size, (3, 7), generator=generator)
    source[0, 5:] = 0  # padding, so the masks take part
    return source, torch.randint(4, vocab_size, (3, 5), generator=generator)


def trained_like_model(**overrides) -> Transformer:
    """A model whose every weight is random and non-zero, so that a silent copy really has something to silence."""
    torch.manual_seed(0)
    model = Transformer(tiny_config(64, **overrides))
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0, 0.2)
    return model.eval()


def test_copies_spread_over_the_stack():
    assert copied_layers(6, 4) == {0: 1, 2: 1, 3: 1, 5: 1}
    assert copied_layers(3, 3) == {0: 1, 1: 1, 2: 1}
    assert copied_layers(2, 5) == {0: 2, 1: 3}
    assert sum(copied_layers(6, 0).values()) == 0


def test_grown_model_computes_the_same_logits_and_greedy_steps():
    model = trained_like_model()
    grown = grow(model, encoder_layers=5, decoder_layers=4).eval()
    assert (len(grown.encoder_layers), len(grown.decoder_layers)) == (5, 4)
    assert (grown.config.encoder_layers, grown.config.decoder_layers) == (5, 4)
    source, target = random_batch(model.config.vocab_size)
    with torch.no_grad():
        torch.testing.assert_close(grown(source, target), model(source, target))
        # the incremental path (key/value caches, one cache per layer) agrees too
        caches = [m.start_cache(*m.encode(source)) for m in (model, grown)]
        for token in target.T:
            before, after = (m.decode_step(token, cache)[0] for m, cache in zip((model, grown), caches))
            torch.testing.assert_close(after, before)
    assert (len(model.encoder_layers), model.config.encoder_layers) == (2, 2)  # the original is left as it was


def test_new_layers_learn_and_the_original_layers_are_shared_by_value_only():
    model = trained_like_model()
    grown = grow(model, encoder_layers=4, decoder_layers=2).train()  # layers 0, copy, 1, copy
    new_layer = grown.encoder_layers[1]  # the copy of layer 0
    assert not new_layer.ffn.down.weight.any() and not new_layer.self_attn.out_proj.bias.any()
    torch.testing.assert_close(new_layer.ffn.up.weight, grown.encoder_layers[0].ffn.up.weight)
    source, target = random_batch(model.config.vocab_size, seed=1)
    grown(source, target).logsumexp(-1).mean().backward()
    assert new_layer.ffn.down.weight.grad.abs().sum() > 0 and new_layer.self_attn.out_proj.weight.grad.abs().sum() > 0
    assert model.encoder_layers[0].ffn.up.weight.grad is None  # no parameter is shared with the original


@pytest.mark.parametrize("pre_norm", [True, False])
def test_widened_model_computes_the_same_logits_in_either_norm_placement(pre_norm):
    model = trained_like_model(pre_norm=pre_norm)
    widened = grow(model, model.config.encoder_layers, model.config.decoder_layers, ffn_dim=3 * model.config.ffn_dim).eval()
    assert widened.config.ffn_dim == 3 * model.config.ffn_dim
    assert {m.up.out_features for m in widened.modules() if isinstance(m, FeedForward)} == {widened.config.ffn_dim}
    source, target = random_batch(model.config.vocab_size)
    with torch.no_grad():
        torch.testing.assert_close(widened(source, target), model(source, target))


def test_new_hidden_units_learn_and_deepening_widens_the_copies_too():
    model = trained_like_model()
    width = model.config.ffn_dim
    grown = grow(model, encoder_layers=3, decoder_layers=2, ffn_dim=2 * width).train()
    ffn = grown.encoder_layers[0].ffn
    torch.testing.assert_close(ffn.up.weight[:width], model.encoder_layers[0].ffn.up.weight)
    assert not ffn.down.weight[:, width:].any() and ffn.up.weight[width:].any()  # fresh rows in, silent columns out
    assert grown.encoder_layers[1].ffn.up.out_features == 2 * width  # the silent copy of layer 0
    source, target = random_batch(model.config.vocab_size, seed=1)
    grown(source, target).logsumexp(-1).mean().backward()
    assert ffn.down.weight.grad[:, width:].abs().sum() > 0


def test_new_units_can_take_a_wider_models_rows_and_stay_silent():
    model = trained_like_model()
    width = model.config.ffn_dim
    donor = trained_like_model(ffn_dim=3 * width)  # a widened continuation of ``model`` would do; any weights will
    grown = grow(model, 2, 2, ffn_dim=3 * width, new_units_from=donor).eval()
    for block, lender in zip(grown.encoder_layers, donor.encoder_layers):
        torch.testing.assert_close(block.ffn.up.weight[width:], lender.ffn.up.weight[width:])
        torch.testing.assert_close(block.ffn.up.bias[width:], lender.ffn.up.bias[width:])
    torch.testing.assert_close(grown.decoder_layers[-1].ffn.up.weight[width:], donor.decoder_layers[-1].ffn.up.weight[width:])
    assert not grown.decoder_layers[-1].ffn.down.weight[:, width:].any()
    source, target = random_batch(model.config.vocab_size)
    with torch.no_grad():
        torch.testing.assert_close(grown(source, target), model(source, target))
    with pytest.raises(GrowthError, match="grown shape"):
        grow(model, 2, 2, ffn_dim=2 * width, new_units_from=donor)


def test_post_norm_and_shrinking_are_refused():
    with pytest.raises(GrowthError, match="pre-norm"):
        grow(trained_like_model(pre_norm=False), encoder_layers=3, decoder_layers=2)
    with pytest.raises(GrowthError, match="cannot shrink"):
        grow(trained_like_model(), encoder_layers=1, decoder_layers=2)
    with pytest.raises(GrowthError, match="cannot narrow"):
        grow(trained_like_model(), encoder_layers=2, decoder_layers=2, ffn_dim=8)


def test_cli_writes_a_model_directory_that_translates_as_before(fixture_model_dir, fixture_translator, tmp_path, capsys):
    from nmt.search import SearchOptions
    from nmt.translator import Translator

    original = load_model(fixture_model_dir).model.config
    main(["--model", str(fixture_model_dir), "--out", str(tmp_path / "grown"), "--decoder-layers", str(original.decoder_layers + 2),
          "--ffn-dim", str(original.ffn_dim + 32)])
    assert "parameters" in capsys.readouterr().out
    grown = load_model(tmp_path / "grown")
    assert grown.model.config.encoder_layers == original.encoder_layers
    assert grown.model.config.decoder_layers == original.decoder_layers + 2
    assert grown.model.config.ffn_dim == original.ffn_dim + 32
    metadata = json.loads((tmp_path / "grown" / "metadata.json").read_text())
    assert metadata["grown_from"]["decoder_layers"] == original.decoder_layers
    assert metadata["grown_from"]["ffn_dim"] == original.ffn_dim
    sentences, options = ["나는 학생입니다.", "그는 의사입니다."], SearchOptions(beam_size=2)
    expected = [t.text for t in fixture_translator.translate(sentences, "ko", "en", options)]
    grown_translator = Translator(grown.model, grown.tokenizer, grown.metadata)
    assert [t.text for t in grown_translator.translate(sentences, "ko", "en", options)] == expected


def test_cli_new_units_from_a_model_directory(fixture_model_dir, tmp_path):
    original = load_model(fixture_model_dir)
    width = original.model.config.ffn_dim
    donor = Transformer(replace(original.model.config, ffn_dim=width + 32))
    save_model(tmp_path / "donor", donor, original.tokenizer, {"name": "donor"})
    main(["--model", str(fixture_model_dir), "--out", str(tmp_path / "grown"), "--ffn-dim", str(width + 32),
          "--new-units-from", str(tmp_path / "donor")])
    grown = load_model(tmp_path / "grown")
    torch.testing.assert_close(grown.model.encoder_layers[0].ffn.up.weight[width:], donor.encoder_layers[0].ffn.up.weight[width:])
    assert json.loads((tmp_path / "grown" / "metadata.json").read_text())["grown_from"]["new_units_from"] == str(tmp_path / "donor")


def test_cli_reports_a_model_that_cannot_grow(fixture_model_dir, tmp_path):
    with pytest.raises(SystemExit, match="cannot shrink"):
        main(["--model", str(fixture_model_dir), "--out", str(tmp_path / "grown"), "--encoder-layers", "1"])
    assert not (tmp_path / "grown").exists()


def test_new_units_from_a_model_with_appended_pieces_lend_their_rows(fixture_model_dir, tmp_path):
    """A released model and a run that appended control pieces to its tokenizer: the grown copy takes the run's
    tokenizer and its rows for the new pieces, keeps its own elsewhere, and can then be averaged with the run."""
    released = load_model(fixture_model_dir)
    size = released.tokenizer.vocab_size
    tokenizer = released.tokenizer.with_control_pieces(SPEECH_LEVEL_TAGS)
    run = Transformer(replace(released.model.config, vocab_size=tokenizer.vocab_size))
    save_model(tmp_path / "run", run, tokenizer, {"name": "run"})
    main(["--model", str(fixture_model_dir), "--out", str(tmp_path / "grown"), "--new-units-from", str(tmp_path / "run")])
    grown = load_model(tmp_path / "grown")
    assert grown.tokenizer.model_proto == tokenizer.model_proto and grown.model.config.vocab_size == size + 3
    torch.testing.assert_close(grown.model.embedding.weight[:size], released.model.embedding.weight)
    torch.testing.assert_close(grown.model.embedding.weight[size:], run.embedding.weight[size:])
    torch.testing.assert_close(grown.model.encoder_layers[0].ffn.up.weight, released.model.encoder_layers[0].ffn.up.weight)
    average_checkpoints([tmp_path / "grown", tmp_path / "run"], tmp_path / "soup")  # same shapes, same tokenizer
    with pytest.raises(SystemExit, match="piece for piece"):
        main(["--model", str(tmp_path / "run"), "--out", str(tmp_path / "shrunk"), "--new-units-from", str(fixture_model_dir)])
