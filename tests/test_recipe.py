"""Recipes: corpus paths, synthetic corpora, and a recipe that extends another."""

from pathlib import Path

import pytest

from nmt.model import ModelConfig
from nmt.tokenizer import TokenizerConfig
from training.clean import CleaningConfig
from training.recipe import CorpusSpec, load_recipe
from training.trainer import TrainingConfig

ROOT = Path(__file__).resolve().parent.parent


def test_release_bt_is_the_release_recipe_plus_tagged_synthetic_corpora(monkeypatch):
    monkeypatch.delenv("BT_DIR", raising=False)
    release = load_recipe(ROOT / "configs" / "release.yaml", data_dir="/data")
    extended = load_recipe(ROOT / "configs" / "release-bt.yaml", data_dir="/data")
    assert extended.name == "release-bt" and extended.data_dir == Path("/data")
    assert extended.train[: len(release.train)] == release.train
    added = extended.train[len(release.train) :]
    assert [(spec.synthetic, spec.tagged) for spec in added] == [("en", True), ("ko", True)]
    assert all(extended.resolve(spec) == Path(spec.path) and spec.path.startswith("runs/bt/") for spec in added)
    for section in ("directions", "dev", "test", "cleaning", "tokenizer", "model", "training", "seed"):
        assert getattr(extended, section) == getattr(release, section), section


@pytest.mark.parametrize("path", sorted((ROOT / "configs").rglob("*.yaml")), ids=lambda p: p.stem)
def test_every_committed_recipe_builds_its_configs(path):
    """A misspelt key in any recipe fails here, not an hour into ``make data`` or ``make train``."""
    recipe = load_recipe(path, data_dir="/data")
    CleaningConfig(**recipe.cleaning)
    TokenizerConfig(**recipe.tokenizer)
    ModelConfig(vocab_size=8001, **recipe.model)
    TrainingConfig(**recipe.training)
    assert recipe.dev, f"{path.name} selects on no dev set"


def test_the_korsts_mt_arm_trains_ko_en_only_from_its_tagged_machine_translated_korean():
    control = load_recipe(ROOT / "configs" / "release-v4.yaml", data_dir="/data")
    arm = load_recipe(ROOT / "configs" / "ablation" / "korsts-mt.yaml", data_dir="/data")
    assert arm.train[:-1] == control.train
    added = arm.train[-1]
    assert (added.path, added.synthetic, added.tagged) == ("korsts-train-mt/train", "ko", True)
    assert added.directions(arm.directions) == [("ko", "en")]
    assert (arm.model, arm.training, arm.dev) == (control.model, control.training, control.dev)


def test_bt_dir_picks_the_round_of_back_translated_corpora(monkeypatch):
    monkeypatch.setenv("BT_DIR", "runs/bt2")
    recipe = load_recipe(ROOT / "configs" / "release-bt.yaml", data_dir="/data")
    assert [spec.path for spec in recipe.train if spec.synthetic] == [
        "runs/bt2/ko-kowiki/train", "runs/bt2/en-enwikinews/train"]


def test_an_extending_recipe_updates_sections_and_appends_corpora(tmp_path):
    (tmp_path / "base.yaml").write_text(
        "name: base\nseed: 3\ntraining: {lr: 0.1, warmup_steps: 50}\n"
        "corpora:\n  train: [{name: a, path: a}]\n  dev: [{name: d, path: d}]\n"
    )
    (tmp_path / "child.yaml").write_text(
        "extends: base.yaml\nname: child\ntraining: {lr: 0.2}\ncorpora:\n  train: [{name: b, path: b, weight: 2}]\n"
    )
    child = load_recipe(tmp_path / "child.yaml", data_dir=tmp_path)
    assert (child.name, child.seed, child.training) == ("child", 3, {"lr": 0.2, "warmup_steps": 50})
    assert [spec.name for spec in child.train] == ["a", "b"] and child.train[1].weight == 2
    assert [spec.name for spec in child.dev] == ["d"]


def test_a_corpus_named_like_a_base_corpus_replaces_it_in_place(tmp_path):
    (tmp_path / "base.yaml").write_text(
        "name: base\ncorpora:\n  train: [{name: a, path: a}, {name: bible, path: bible}, {name: c, path: c}]\n")
    (tmp_path / "child.yaml").write_text(
        "extends: base.yaml\nname: no-bible\ncorpora:\n  train: [{name: bible, path: bible, weight: 0}, {name: d, path: d}]\n")
    child = load_recipe(tmp_path / "child.yaml", data_dir=tmp_path)
    assert [(spec.name, spec.weight) for spec in child.train] == [("a", 1.0), ("bible", 0), ("c", 1.0), ("d", 1.0)]


def test_directions_of_human_and_synthetic_corpora():
    both = [("ko", "en"), ("en", "ko")]
    assert CorpusSpec(name="human", path="x").directions(both) == both
    assert CorpusSpec(name="bt", path="x", synthetic="en").directions(both) == [("en", "ko")]
    with pytest.raises(ValueError, match="say which side is synthetic"):
        CorpusSpec(name="bt", path="x", tagged=True)


def test_the_share_of_speech_level_tags_is_read_and_checked(tmp_path):
    (tmp_path / "base.yaml").write_text("name: base\ncorpora:\n  train: [{name: a, path: a}]\n")
    (tmp_path / "tagged.yaml").write_text("extends: base.yaml\nname: tagged\nspeech_level_tags: 0.5\n")
    (tmp_path / "wrong.yaml").write_text("extends: base.yaml\nname: wrong\nspeech_level_tags: 50\n")
    assert load_recipe(tmp_path / "base.yaml", data_dir=tmp_path).speech_level_tags == 0.0
    assert load_recipe(tmp_path / "tagged.yaml", data_dir=tmp_path).speech_level_tags == 0.5
    with pytest.raises(ValueError, match="between 0 and 1; got 50"):
        load_recipe(tmp_path / "wrong.yaml", data_dir=tmp_path)
