import dataclasses
import json
import random
import shutil
from pathlib import Path

import pytest
from datasets import load_from_disk

from fixture_model import without_bt
from nmt.speech_level import REQUESTABLE_LEVELS, speech_level
from nmt.tokenizer import Tokenizer
from training.prepare import prepare, recipe_hash, weighted_indices
from training.recipe import CorpusSpec, load_recipe
from training.train import main as train_main

ROOT = Path(__file__).parent.parent


@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    """configs/tiny.yaml prepared once for the module: (recipe, run_dir, report)."""
    recipe = load_recipe(ROOT / "configs" / "tiny.yaml")
    recipe = dataclasses.replace(recipe, data_dir=ROOT / recipe.data_dir)  # whatever the working directory
    run_dir = tmp_path_factory.mktemp("run")
    return recipe, run_dir, prepare(recipe, run_dir, num_proc=1)


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_outputs_are_written(prepared):
    _, run_dir, _ = prepared
    for name in ("spm.model", "data/train/dataset_info.json", "data/dev.jsonl", "data/test.jsonl", "data/report.json"):
        assert (run_dir / name).is_file(), name
    assert not (run_dir / "data.partial").exists()


def test_training_examples_cover_every_direction(prepared):
    _, run_dir, report = prepared
    train = load_from_disk(str(run_dir / "data" / "train"))
    tokenizer = Tokenizer.load(run_dir / "spm.model")
    assert sorted(train.column_names) == ["corpus", "direction", "source", "target"]
    assert report["examples_per_direction"] == {"ko-en": 95, "en-ko": 95}
    first = {direction: train[train["direction"].index(direction)] for direction in ("ko-en", "en-ko")}
    assert first["ko-en"]["source"][0] == tokenizer.language_id("en")
    assert first["en-ko"]["source"][0] == tokenizer.language_id("ko")
    assert tokenizer.decode(first["ko-en"]["source"][1:]) == "나는 학생입니다."
    assert tokenizer.decode(first["ko-en"]["target"]) == "I am a student."
    assert all(ids[0] == tokenizer.bos_id and ids[-1] == tokenizer.eos_id for ids in train["target"])
    assert max(len(ids) for ids in [*train["source"], *train["target"]]) <= 40


def test_report_counts_add_up(prepared):
    recipe, run_dir, report = prepared
    assert report == json.loads((run_dir / "data" / "report.json").read_text(encoding="utf-8"))
    corpora = report["train"]["corpora"]
    assert list(corpora) == ["tiny", "noisy", "extra", "hub-standin"]
    for counts in corpora.values():
        assert counts["read"] == counts["kept"] + sum(counts["dropped"].values())
        assert counts["examples"] == counts["sampled"] * len(recipe.directions)
    assert corpora["tiny"] == {"read": 40, "kept": 39, "dropped": {"in_dev_or_test": 1}, "weight": 2.0,
                               "sampled": 78, "examples": 156}
    assert corpora["noisy"]["kept"] == 7
    assert corpora["extra"]["dropped"] == {"too_many_tokens": 1}
    assert corpora["extra"]["sampled"] == round(0.5 * 7)
    total = report["train"]["total"]
    assert total["read"] == sum(c["read"] for c in corpora.values()) == 72
    assert total["examples"] == sum(report["examples_per_direction"].values()) == 190
    assert report["tokenizer"]["vocab_size"] == 600
    assert report["tokenizer"]["unk_rate"] == {"train": 0.0, "dev": 0.0}


def test_dev_and_test_sets_are_written_for_every_direction(prepared):
    _, run_dir, report = prepared
    dev = read_jsonl(run_dir / "data" / "dev.jsonl")
    assert report["dev"] == {"tiny-dev": 5} and report["test"] == {"tiny-test": 4}
    assert len(dev) == 10 and len(read_jsonl(run_dir / "data" / "test.jsonl")) == 8
    assert dev[0] == {"corpus": "tiny-dev", "source_lang": "ko", "target_lang": "en",
                      "source": "감사합니다.", "target": "Thank you."}
    assert dev[5] == {"corpus": "tiny-dev", "source_lang": "en", "target_lang": "ko",
                      "source": "Thank you.", "target": "감사합니다."}


def test_an_unchanged_recipe_is_not_prepared_again(prepared, capsys):
    recipe, run_dir, report = prepared
    stamp = (run_dir / "spm.model").stat().st_mtime_ns
    assert prepare(recipe, run_dir) == report
    assert "up to date" in capsys.readouterr().out
    assert (run_dir / "spm.model").stat().st_mtime_ns == stamp


def test_a_changed_recipe_is_prepared_again(prepared, tmp_path, capsys):
    recipe, run_dir, report = prepared
    assert recipe_hash(dataclasses.replace(recipe, training={"lr": 1.0})) == recipe_hash(recipe)
    reseeded = dataclasses.replace(recipe, seed=recipe.seed + 1)
    copy = tmp_path / "run"
    shutil.copytree(run_dir, copy)
    again = prepare(reseeded, copy, num_proc=1)
    assert "up to date" not in capsys.readouterr().out
    assert again["recipe_hash"] == recipe_hash(reseeded) != report["recipe_hash"]
    assert json.loads((copy / "data" / "report.json").read_text(encoding="utf-8")) == again


def test_a_reused_tokenizer_is_kept_with_the_tag_and_its_content_is_in_the_hash(prepared, tmp_path):
    """``tokenizer: {reuse: FILE}`` keeps a released model's pieces, so the run can warm-start from its weights."""
    recipe, run_dir, _ = prepared
    released = without_bt(Tokenizer.load(run_dir / "spm.model"))
    released.save(tmp_path / "released.model")
    reusing = dataclasses.replace(recipe, tokenizer={"reuse": str(tmp_path / "released.model")})
    report = prepare(reusing, tmp_path / "run", num_proc=1)
    assert Tokenizer.load(tmp_path / "run" / "spm.model").model_proto == released.with_control_pieces(["<bt>"]).model_proto
    assert report["tokenizer"]["reused"] == str(tmp_path / "released.model")
    Tokenizer.load(run_dir / "spm.model").save(tmp_path / "released.model")  # the next release replaces the file
    assert recipe_hash(reusing) != report["recipe_hash"]


def test_weights_repeat_rows_and_sample_the_fraction():
    indices = weighted_indices(10, 2.5, random.Random(0))
    assert len(indices) == 25
    assert all(indices.count(row) in (2, 3) for row in range(10))
    assert indices == weighted_indices(10, 2.5, random.Random(0))
    assert weighted_indices(4, 0.0, random.Random(0)) == []
    with pytest.raises(ValueError):
        weighted_indices(4, -1, random.Random(0))


@pytest.fixture(scope="module")
def prepared_with_bt(tmp_path_factory):
    """configs/tiny.yaml plus a tagged back-translated corpus (real Korean, machine English) outside data_dir."""
    folder = tmp_path_factory.mktemp("bt")
    korean = (ROOT / "tests" / "fixtures" / "mono.ko").read_text(encoding="utf-8").split("\n")[:12]
    english = (ROOT / "tests" / "fixtures" / "mono.en").read_text(encoding="utf-8").lower().split("\n")[:12]
    (folder / "train.ko").write_text("".join(f"{line}\n" for line in korean), encoding="utf-8")
    (folder / "train.en").write_text("".join(f"{line}\n" for line in english), encoding="utf-8")
    corpus = f"    - {{name: bt-ko, path: {folder / 'train'}, synthetic: en, tagged: true, weight: 2}}\n"
    text = (ROOT / "configs" / "tiny.yaml").read_text(encoding="utf-8")
    text = text.replace("data_dir: tests/fixtures", f"data_dir: {ROOT / 'tests' / 'fixtures'}")
    text = text.replace("  dev:\n", corpus + "  dev:\n", 1)
    config = folder / "tiny-bt.yaml"
    config.write_text(text, encoding="utf-8")
    run_dir = folder / "run"
    return config, run_dir, prepare(load_recipe(config), run_dir, num_proc=1)


def test_tagged_synthetic_corpus_trains_only_the_direction_into_its_real_side(prepared_with_bt, prepared):
    _, run_dir, report = prepared_with_bt
    train = load_from_disk(str(run_dir / "data" / "train"))
    tokenizer = Tokenizer.load(run_dir / "spm.model")
    counts = report["train"]["corpora"]["bt-ko"]
    assert counts["read"] == 12 and counts["weight"] == 2.0
    assert counts["examples"] == counts["sampled"] == 2 * counts["kept"] > 0
    synthetic = train.filter(lambda row: row["corpus"] == "bt-ko")
    assert set(synthetic["direction"]) == {"en-ko"}
    assert all(source[:2] == [tokenizer.language_id("ko"), tokenizer.bt_id] for source in synthetic["source"])
    assert tokenizer.decode(synthetic[0]["source"]) == "i am a student."
    assert tokenizer.decode(synthetic[0]["target"]) == "나는 학생입니다."
    human = train.filter(lambda row: row["corpus"] != "bt-ko")
    assert not any(tokenizer.bt_id in source for source in human["source"])
    assert not any(tokenizer.bt_id in target for target in train["target"])
    _, _, without = prepared
    assert report["examples_per_direction"] == {"ko-en": without["examples_per_direction"]["ko-en"],
                                                "en-ko": without["examples_per_direction"]["en-ko"] + counts["examples"]}


def test_synthetic_text_stays_out_of_the_tokenizer(prepared_with_bt, prepared):
    _, with_bt, _ = prepared_with_bt
    _, without, _ = prepared
    assert (with_bt / "spm.model").read_bytes() == (without / "spm.model").read_bytes()


def test_tagging_or_remaking_a_synthetic_corpus_changes_the_recipe_hash(prepared_with_bt, tmp_path):
    config, _, report = prepared_with_bt
    recipe = load_recipe(config)
    untagged = dataclasses.replace(recipe, train=[dataclasses.replace(spec, tagged=False) for spec in recipe.train])
    assert recipe_hash(recipe) == report["recipe_hash"] != recipe_hash(untagged)
    synthetic = recipe.train[-1]
    for lang in ("ko", "en"):
        shutil.copy(f"{recipe.resolve(synthetic)}.{lang}", tmp_path / f"train.{lang}")
    moved = dataclasses.replace(synthetic, path=str(tmp_path / "train"))
    remade = dataclasses.replace(recipe, train=[*recipe.train[:-1], moved])
    before = recipe_hash(remade)
    with (tmp_path / "train.en").open("a", encoding="utf-8") as english:
        english.write("one more line\n")
    assert recipe_hash(remade) != before


def test_a_synthetic_side_no_direction_starts_from_is_refused(tmp_path):
    recipe = load_recipe(ROOT / "configs" / "tiny.yaml")
    recipe = dataclasses.replace(recipe, data_dir=ROOT / recipe.data_dir, directions=[("ko", "en")],
                                 train=[CorpusSpec(name="bt", path="tiny", synthetic="en")])
    with pytest.raises(ValueError, match="synthetic side 'en' is the source of none"):
        prepare(recipe, tmp_path, num_proc=1)


def test_a_recipe_with_a_tagged_corpus_trains(prepared_with_bt):
    config, run_dir, _ = prepared_with_bt
    train_main(["--config", str(config), "--run-dir", str(run_dir), "--max-steps", "3", "--threads", "1",
                "--no-progress-bar"])
    assert (run_dir / "checkpoints" / "step-00000003" / "model.safetensors").is_file()


@pytest.fixture(scope="module")
def prepared_with_levels(prepared_with_bt, tmp_path_factory):
    """The back-translation recipe with half of the examples into Korean tagged with their target's speech level."""
    config, _, _ = prepared_with_bt
    folder = tmp_path_factory.mktemp("levels")
    tagged = folder / "tiny-levels.yaml"
    tagged.write_text(config.read_text(encoding="utf-8") + "speech_level_tags: 0.5\n", encoding="utf-8")
    run_dir = folder / "run"
    return tagged, run_dir, prepare(load_recipe(tagged), run_dir, num_proc=1)


def test_a_share_of_the_sources_into_korean_carry_their_targets_speech_level(prepared_with_levels):
    _, run_dir, report = prepared_with_levels
    train = load_from_disk(str(run_dir / "data" / "train"))
    tokenizer = Tokenizer.load(run_dir / "spm.model")
    level_of = {tag_id: level for level, tag_id in tokenizer.level_ids.items()}
    counts = {level: 0 for level in tokenizer.speech_levels}
    levelled = 0
    for row in train:
        tags = [level_of[i] for i in row["source"] if i in level_of]
        if row["direction"] == "ko-en":
            assert tags == []
            continue
        level = speech_level(tokenizer.decode(row["target"]))
        levelled += level in REQUESTABLE_LEVELS
        if tags:
            assert tags == [level.value]
            prefix = [tokenizer.language_id("ko"), *([tokenizer.bt_id] if row["corpus"] == "bt-ko" else [])]
            assert row["source"][: len(prefix) + 1] == [*prefix, tokenizer.level_ids[level.value]]
            counts[level.value] += 1
    assert report["speech_level_tags"] == {"share": 0.5, "examples": counts}
    assert 0.3 < sum(counts.values()) / levelled < 0.7
    assert counts["formal"] > 0


def test_level_tags_change_the_hash_and_are_drawn_the_same_every_time(prepared_with_levels, prepared_with_bt, tmp_path):
    config, run_dir, report = prepared_with_levels
    _, untagged_run, untagged = prepared_with_bt
    assert report["recipe_hash"] != untagged["recipe_hash"]
    assert Tokenizer.load(untagged_run / "spm.model").speech_levels == []
    again = prepare(load_recipe(config), tmp_path / "again", num_proc=1, force=True)
    assert again["speech_level_tags"] == report["speech_level_tags"]
    first, second = (load_from_disk(str(run / "data" / "train"))["source"] for run in (run_dir, tmp_path / "again"))
    assert first == second


def test_a_recipe_with_level_tags_trains(prepared_with_levels):
    config, run_dir, _ = prepared_with_levels
    train_main(["--config", str(config), "--run-dir", str(run_dir), "--max-steps", "2", "--threads", "1",
                "--no-progress-bar"])
    assert (run_dir / "checkpoints" / "step-00000002" / "model.safetensors").is_file()
