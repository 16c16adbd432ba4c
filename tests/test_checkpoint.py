"""Model directories: lossless round trips, fp16 storage, atomic overwrite, and errors that name the file."""

import json
import re
import shutil
from pathlib import Path

import pytest
import torch
from fixture_model import fixture_examples, pad
from safetensors.torch import load_file

from nmt.checkpoint import CONFIG, METADATA, TOKENIZER, WEIGHTS, CheckpointError, load_model, save_model
from nmt.search import SearchOptions, greedy_search


@pytest.fixture(scope="module")
def fixture_sources(fixture_translator) -> torch.Tensor:
    return pad([source for source, _ in fixture_examples(fixture_translator.tokenizer)])


@pytest.fixture
def model_copy(fixture_model_dir, tmp_path) -> Path:
    """A private copy of the fixture model directory that a test may damage."""
    return Path(shutil.copytree(fixture_model_dir, tmp_path / "tiny"))


def greedy_tokens(model, sources: torch.Tensor) -> list[list[int]]:
    return [nbest[0].tokens for nbest in greedy_search(model, sources, bos_id=2, eos_id=3, options=SearchOptions(beam_size=1))]


def test_save_load_round_trip_is_exact(fixture_translator, fixture_sources, tmp_path):
    original = fixture_translator.model
    save_model(tmp_path / "copy", original, fixture_translator.tokenizer, {"name": "copy", "language_pairs": [["ko", "en"]]})
    loaded = load_model(tmp_path / "copy")

    assert loaded.model.config == original.config
    assert loaded.metadata == {"format_version": 1, "languages": ["ko", "en"], "name": "copy", "language_pairs": [["ko", "en"]]}
    for (name, tensor), (loaded_name, loaded_tensor) in zip(original.state_dict().items(), loaded.model.state_dict().items()):
        assert name == loaded_name and torch.equal(tensor, loaded_tensor)
    with torch.no_grad():
        assert torch.equal(loaded.model(fixture_sources, fixture_sources), original(fixture_sources, fixture_sources))
    assert loaded.tokenizer.model_proto == fixture_translator.tokenizer.model_proto


def test_fp16_storage_loads_as_fp32_with_the_same_translations(fixture_translator, fixture_sources, tmp_path):
    save_model(tmp_path / "half", fixture_translator.model, fixture_translator.tokenizer, {}, dtype=torch.float16)
    stored = load_file(tmp_path / "half" / WEIGHTS)
    assert {t.dtype for t in stored.values()} == {torch.float16}

    loaded = load_model(tmp_path / "half")
    assert {p.dtype for p in loaded.model.parameters()} == {torch.float32}
    assert greedy_tokens(loaded.model, fixture_sources) == greedy_tokens(fixture_translator.model, fixture_sources)


def test_saving_over_an_existing_directory_replaces_it_and_leaves_no_debris(fixture_translator, tmp_path):
    for name in ("first", "second"):
        save_model(tmp_path / "model", fixture_translator.model, fixture_translator.tokenizer, {"name": name})
    assert load_model(tmp_path / "model").metadata["name"] == "second"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]


def test_missing_directory(tmp_path):
    with pytest.raises(CheckpointError, match="no-such-model does not exist"):
        load_model(tmp_path / "no-such-model")


@pytest.mark.parametrize("name", [WEIGHTS, CONFIG, TOKENIZER, METADATA])
def test_missing_file_is_named(model_copy, name):
    (model_copy / name).unlink()
    with pytest.raises(CheckpointError, match=f"missing {name}"):
        load_model(model_copy)


def truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


@pytest.mark.parametrize(
    "name, damage",
    [
        (WEIGHTS, lambda path: path.write_bytes(b"this is not a safetensors file")),
        (WEIGHTS, truncate),
        (CONFIG, lambda path: path.write_text('{"vocab_size": 52')),
        (CONFIG, lambda path: path.write_text("[1, 2]")),
        (CONFIG, lambda path: path.write_text(json.dumps({**json.loads(path.read_text()), "d_modle": 64}))),
        (CONFIG, lambda path: path.write_text(json.dumps({**json.loads(path.read_text()), "n_heads": 5}))),
        (CONFIG, lambda path: path.write_text(json.dumps({**json.loads(path.read_text()), "activation": "swish"}))),
        (CONFIG, lambda path: path.write_text(json.dumps({**json.loads(path.read_text()), "ffn_dim": 96}))),
        (TOKENIZER, lambda path: path.write_bytes(b"\x00garbage")),
        (METADATA, lambda path: path.write_text("{")),
    ],
    ids=["weights-garbage", "weights-truncated", "config-truncated", "config-not-object", "config-unknown-field",
         "config-bad-heads", "config-bad-activation", "config-wrong-shape", "tokenizer-garbage", "metadata-truncated"],
)
def test_corrupt_file_is_named(model_copy, name, damage):
    damage(model_copy / name)
    with pytest.raises(CheckpointError, match=re.escape(str(model_copy / name))):
        load_model(model_copy)
