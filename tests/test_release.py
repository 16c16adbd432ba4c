"""Publishing a model with fp16 weights: smaller on disk, loads as fp32, translates the fixture pairs the same."""

import json

import pytest

from nmt.checkpoint import load_model
from training.release import release

from fixture_model import fixture_pairs


def test_release_stores_fp16_and_keeps_translations(fixture_model_dir, tmp_path):
    sample = [(ko, "ko", "en") for ko, _ in fixture_pairs()[:10]] + [(en, "en", "ko") for _, en in fixture_pairs()[:10]]
    out = tmp_path / "default"
    assert release(fixture_model_dir, out, sample) == 0
    released = load_model(out)
    assert released.metadata["weights_dtype"] == "float16"
    assert all(p.dtype.is_floating_point and p.dtype.itemsize == 4 for p in released.model.parameters())
    assert (out / "model.safetensors").stat().st_size < 0.6 * (fixture_model_dir / "model.safetensors").stat().st_size


def test_release_carries_another_models_decoding_defaults(fixture_model_dir, tmp_path):
    tuned = tmp_path / "tuned"
    release(fixture_model_dir, tuned, [])
    decoding = {"directions": {"ko-en": {"length_penalty": 1.0, "no_repeat_ngram_size": 4}}, "chosen_on": {"limit": 300}}
    metadata = json.loads((tuned / "metadata.json").read_text(encoding="utf-8"))
    (tuned / "metadata.json").write_text(json.dumps({**metadata, "decoding": decoding}), encoding="utf-8")

    out = tmp_path / "default"
    release(fixture_model_dir, out, [], decoding_from=tuned)
    assert load_model(out).metadata["decoding"] == {**decoding, "carried_from": str(tuned)}


def test_release_refuses_to_carry_decoding_that_is_not_there(fixture_model_dir, tmp_path):
    with pytest.raises(ValueError, match="no tuned decoding defaults"):
        release(fixture_model_dir, tmp_path / "default", [], decoding_from=fixture_model_dir)
    assert not (tmp_path / "default").exists()
