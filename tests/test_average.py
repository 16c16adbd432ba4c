"""training.average: the averaged model directory holds the element-wise mean of the checkpoints' weights."""

import json
import shutil

import pytest
import torch
from fixture_model import tiny_config

from nmt.checkpoint import load_model, save_model
from nmt.model import Transformer
from nmt.search import SearchOptions
from nmt.translator import Translator
from training.average import AveragingError, average_checkpoints, main
from training.state import STATE_FILE


def save_random_model(directory, like, seed: int, **config_overrides):
    """A freshly initialised model of the fixture architecture with the fixture tokenizer."""
    loaded = load_model(like)
    torch.manual_seed(seed)
    model = Transformer(tiny_config(loaded.tokenizer.vocab_size, **config_overrides))
    return save_model(directory, model, loaded.tokenizer, {"name": "random", "step": seed})


def weights(directory) -> dict[str, torch.Tensor]:
    return load_model(directory).model.state_dict()


def test_average_is_the_mean_of_weights(fixture_model_dir, tmp_path):
    other = save_random_model(tmp_path / "other", fixture_model_dir, seed=1)
    averaged = average_checkpoints([fixture_model_dir, other], tmp_path / "averaged")

    first, second, mean = weights(fixture_model_dir), weights(other), weights(averaged)
    for name, tensor in mean.items():
        torch.testing.assert_close(tensor, (first[name] + second[name]) / 2)
    metadata = json.loads((averaged / "metadata.json").read_text())
    assert metadata["averaged_from"] == [str(fixture_model_dir), str(other)]
    assert metadata["name"] == "random"  # metadata follows the last checkpoint given


def test_average_with_itself_translates_identically(fixture_model_dir, fixture_translator, tmp_path):
    averaged = average_checkpoints([fixture_model_dir, fixture_model_dir], tmp_path / "averaged")
    sentences = ["나는 학생입니다.", "그는 의사입니다."]
    options = SearchOptions(beam_size=2)
    expected = [t.text for t in fixture_translator.translate(sentences, "ko", "en", options)]
    actual = [t.text for t in Translator.load(averaged, device="cpu").translate(sentences, "ko", "en", options)]
    assert actual == expected


def test_mismatched_configs_raise(fixture_model_dir, tmp_path):
    wider = save_random_model(tmp_path / "wider", fixture_model_dir, seed=1, ffn_dim=256)
    with pytest.raises(AveragingError, match="different model config"):
        average_checkpoints([fixture_model_dir, wider], tmp_path / "averaged")


def test_cli_averages_the_last_checkpoints_of_a_run(fixture_model_dir, tmp_path):
    checkpoints = tmp_path / "run" / "checkpoints"
    for step in (100, 200, 300):
        save_random_model(checkpoints / f"step-{step:08d}", fixture_model_dir, seed=step)
        (checkpoints / f"step-{step:08d}" / STATE_FILE).write_bytes(b"")  # what marks a checkpoint complete
    shutil.copytree(checkpoints / "step-00000300", tmp_path / "run" / "best")

    out = main(["--run-dir", str(tmp_path / "run"), "--last", "2"])

    assert out == tmp_path / "run" / "averaged"
    averaged_from = json.loads((out / "metadata.json").read_text())["averaged_from"]
    assert [p.rsplit("/", 1)[-1] for p in averaged_from] == ["step-00000200", "step-00000300"]


def test_cli_averages_model_directories_of_different_runs(fixture_model_dir, tmp_path):
    other = save_random_model(tmp_path / "other", fixture_model_dir, seed=2)
    out = main(["--models", str(fixture_model_dir), str(other), "--out", str(tmp_path / "soup")])
    first, second, soup = weights(fixture_model_dir), weights(other), weights(out)
    for name, tensor in soup.items():
        torch.testing.assert_close(tensor, (first[name] + second[name]) / 2)
    with pytest.raises(SystemExit):
        main(["--models", str(fixture_model_dir), str(other)])  # where to write is not guessed


def test_weighted_mean_leans_towards_the_heavier_model(fixture_model_dir, tmp_path):
    other = save_random_model(tmp_path / "other", fixture_model_dir, seed=3)
    out = main(["--models", str(fixture_model_dir), str(other), "--weights", "1", "3", "--out", str(tmp_path / "soup")])
    first, second, soup = weights(fixture_model_dir), weights(other), weights(out)
    for name, tensor in soup.items():
        torch.testing.assert_close(tensor, 0.25 * first[name] + 0.75 * second[name])
    assert json.loads((out / "metadata.json").read_text())["weights"] == [0.25, 0.75]


def test_bad_weights_are_refused(fixture_model_dir, tmp_path):
    with pytest.raises(AveragingError, match="one weight per model"):
        average_checkpoints([fixture_model_dir, fixture_model_dir], tmp_path / "soup", weights=[1.0])
    with pytest.raises(AveragingError, match="not all 0"):
        average_checkpoints([fixture_model_dir, fixture_model_dir], tmp_path / "soup", weights=[0.0, 0.0])
    with pytest.raises(SystemExit):
        main(["--run-dir", str(tmp_path), "--weights", "1", "2"])  # weights name models, not a run's last checkpoints
    assert not (tmp_path / "soup").exists()
