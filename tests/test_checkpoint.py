"""Model directories: lossless round trips, fp16 storage, atomic overwrite, and errors that name the file."""

import json
import re
import shutil
from pathlib import Path

import pytest
import torch
from fixture_model import fixture_examples, pad
from safetensors.torch import load_file

from nmt.checkpoint import (
    CONFIG, METADATA, TOKENIZER, WEIGHTS, CheckpointError, join_weights, load_model, main, save_model, split_weights,
    weight_shards,
)
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


def test_weights_split_into_small_shards_and_join_back_bit_for_bit(model_copy):
    original = (model_copy / WEIGHTS).read_bytes()
    shards = split_weights(model_copy, max_bytes=200_000)
    assert len(shards) > 2 and not (model_copy / WEIGHTS).exists()
    assert all(shard.stat().st_size <= 200_000 for shard in shards)
    assert shards[-1].name == f"model-{len(shards):05d}-of-{len(shards):05d}.safetensors"
    with pytest.raises(CheckpointError, match="shards: join them first"):
        load_model(model_copy)
    assert main(["join", str(model_copy)]) == 0
    assert (model_copy / WEIGHTS).read_bytes() == original
    assert not list(model_copy.glob("model-*-of-*.safetensors"))


def test_fp16_shards_stay_fp16(fixture_translator, tmp_path):
    directory = save_model(tmp_path / "half", fixture_translator.model, fixture_translator.tokenizer, {}, dtype=torch.float16)
    split_weights(directory, max_bytes=200_000)
    join_weights(directory)
    assert {t.dtype for t in load_file(directory / WEIGHTS).values() if t.is_floating_point()} == {torch.float16}


def test_a_tensor_larger_than_a_shard_is_refused_and_nothing_is_lost(model_copy, capsys):
    assert main(["split", str(model_copy), "--max-mib", "0.1"]) == 2
    assert "more than a shard" in capsys.readouterr().err
    assert (model_copy / WEIGHTS).is_file() and not list(model_copy.glob("model-*-of-*.safetensors"))


def test_join_refuses_an_incomplete_set_of_shards_and_keeps_them(model_copy):
    shards = split_weights(model_copy, max_bytes=200_000)
    shards[1].unlink()  # lost in transport
    with pytest.raises(CheckpointError, match=f"incomplete or mixed set of weight shards \\(missing: {shards[1].name}\\)"):
        join_weights(model_copy)
    assert not (model_copy / WEIGHTS).exists() and len(weight_shards(model_copy)) == len(shards) - 1
