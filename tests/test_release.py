"""Publishing a model with fp16 weights: smaller on disk, loads as fp32, translates the fixture pairs the same."""

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
