"""A training recipe: which corpora to read and how, and how to build, train and evaluate the model.

Recipes are YAML files under ``configs/``. Corpus paths are relative to ``data_dir`` (``${DATA_DIR}`` in the
file, filled from the Makefile's ``DATA_DIR ?= ../shared/data``), except absolute ones and those under ``runs/``
(our own outputs, such as back-translated corpora, relative to the working directory); a corpus may instead name
a Hub dataset id.

A recipe may start from another with ``extends: release.yaml`` (a path relative to its own file): it changes only
what it names. Its mapping sections (``training``, ``model``, ...) update the base's key by key; its corpora are
added to the base's, split by split, except that one named like a base corpus replaces that entry in place (so
``{name: bible, path: bible-krv-kjv/train, weight: 0}`` leaves the Bible out). So ``release-bt.yaml`` is exactly
the release recipe plus its back-translated corpora, and an ablation arm is a few lines.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import yaml


@dataclass
class CorpusSpec:
    """One parallel corpus: a local path (``path``) or a Hugging Face Hub dataset id (``hub``).

    ``format``: ``parallel`` (``<path>.ko`` + ``<path>.en`` line-aligned), ``tsv``, ``jsonl`` or ``hub``.
    ``columns`` maps our language codes to the corpus's column names where they differ (for ``tsv``: to
    0-based column positions).
    ``weight`` oversamples (2.0 = every pair twice) or undersamples (0.5 = half the pairs) the corpus.
    ``synthetic`` names the machine-translated side of a back-translated corpus ("en" for real Korean text
    translated into English): the corpus then trains only the direction out of that language, so the model
    always learns to produce real text. ``tagged`` puts the tokenizer's ``<bt>`` piece after the language tag
    of those sources (Caswell et al., 2019), so the model can tell synthetic input from human input.
    """

    name: str
    path: str | None = None
    hub: str | None = None
    format: str = "parallel"
    split: str = "train"
    subset: str | None = None
    columns: dict[str, str | int] = field(default_factory=dict)
    weight: float = 1.0
    synthetic: str | None = None
    tagged: bool = False

    def __post_init__(self) -> None:
        if self.tagged and self.synthetic is None:
            raise ValueError(f"corpus {self.name!r}: 'tagged' marks synthetic sources; say which side is synthetic "
                             "with 'synthetic: ko' or 'synthetic: en'")

    def directions(self, recipe_directions: list[tuple[str, str]]) -> list[tuple[str, str]]:
        """The recipe's directions this corpus trains: all of them, or for a synthetic corpus the one out of it."""
        return [d for d in recipe_directions if self.synthetic in (None, d[0])]


RUNS_DIR = "runs"  # corpora under it are our own outputs, read where they are rather than under data_dir


def corpus_path(spec: CorpusSpec, data_dir: Path) -> Path:
    """Where a local corpus lives: ``runs/...`` and absolute paths as written, others under ``data_dir``."""
    path = Path(spec.path)
    return path if path.parts[:1] == (RUNS_DIR,) or path.is_absolute() else data_dir / path


@dataclass
class Recipe:
    name: str
    data_dir: Path
    directions: list[tuple[str, str]]
    train: list[CorpusSpec]
    dev: list[CorpusSpec]
    test: list[CorpusSpec] = field(default_factory=list)
    cleaning: dict = field(default_factory=dict)  # training.clean.CleaningConfig fields
    tokenizer: dict = field(default_factory=dict)  # nmt.tokenizer.TokenizerConfig fields
    model: dict = field(default_factory=dict)  # nmt.model.ModelConfig fields (vocab_size comes from the tokenizer)
    training: dict = field(default_factory=dict)  # training.trainer.TrainingConfig fields
    seed: int = 0  # seeds the random subsets that fractional corpus weights take
    # Share of the examples into Korean whose source carries the speech level of their target (<formal>, <polite>,
    # <plain>; nmt.speech_level): 0 trains no tags. The rest stay untagged, so a source without a tag still works.
    speech_level_tags: float = 0.0

    def __post_init__(self) -> None:
        if not 0.0 <= self.speech_level_tags <= 1.0:
            raise ValueError(f"speech_level_tags is a share of examples, between 0 and 1; got {self.speech_level_tags}")

    def resolve(self, spec: CorpusSpec) -> Path:
        return corpus_path(spec, self.data_dir)


def load_recipe(path: str | Path, data_dir: str | Path | None = None) -> Recipe:
    """Read a recipe; ``${DATA_DIR}`` takes ``data_dir``, else the DATA_DIR variable, else ../shared/data.

    ``${BT_DIR}`` takes the BT_DIR variable, else runs/bt: the folder of one round of back-translated corpora, so
    the same recipe trains on the next round with ``BT_DIR=runs/bt2``.
    """
    data_dir = str(data_dir or os.environ.get("DATA_DIR") or "../shared/data")
    raw = _read_extended(Path(path), data_dir)
    corpora = raw.get("corpora", {})
    return Recipe(
        name=raw["name"],
        data_dir=Path(raw.get("data_dir", data_dir)),
        directions=[tuple(d) for d in raw.get("directions", [["ko", "en"], ["en", "ko"]])],
        train=[CorpusSpec(**c) for c in corpora.get("train", [])],
        dev=[CorpusSpec(**c) for c in corpora.get("dev", [])],
        test=[CorpusSpec(**c) for c in corpora.get("test", [])],
        cleaning=raw.get("cleaning", {}),
        tokenizer=raw.get("tokenizer", {}),
        model=raw.get("model", {}),
        training=raw.get("training", {}),
        seed=raw.get("seed", 0),
        speech_level_tags=raw.get("speech_level_tags", 0.0),
    )


def _read_extended(path: Path, data_dir: str) -> dict:
    """The recipe's YAML merged onto the one it ``extends`` (recursively): sections updated, corpora merged by name."""
    text = path.read_text(encoding="utf-8").replace("${BT_DIR}", os.environ.get("BT_DIR") or "runs/bt")
    raw = yaml.safe_load(text.replace("${DATA_DIR}", data_dir))
    base_name = raw.pop("extends", None)
    if base_name is None:
        return raw
    base = _read_extended(path.parent / base_name, data_dir)
    corpora = raw.pop("corpora", {})
    sections = {key: {**base[key], **value} if isinstance(value, dict) and isinstance(base.get(key), dict) else value
                for key, value in raw.items()}
    merged_corpora = {split: _merge_corpora(base.get("corpora", {}).get(split, []), corpora.get(split, []))
                      for split in ("train", "dev", "test")}
    return {**base, **sections, "corpora": merged_corpora}


def _merge_corpora(base: list[dict], extra: list[dict]) -> list[dict]:
    """``base`` with each same-named entry of ``extra`` put in its place, then the rest of ``extra`` appended."""
    by_name = {spec["name"]: spec for spec in extra}
    kept = [by_name.pop(spec["name"], spec) for spec in base]
    return [*kept, *by_name.values()]
