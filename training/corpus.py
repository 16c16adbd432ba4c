"""Load any corpus of a recipe into one ``datasets.Dataset`` with exactly the string columns ``ko`` and ``en``.

Every later step (cleaning, weighting, tokenising) sees the same two columns whatever the source format was:
line-aligned ``parallel`` files, a ``tsv``, a ``jsonl``, or a ``hub`` dataset (a Hub id, or a local directory of
data files that ``load_dataset`` reads the same way, which is how the tests exercise this path offline).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from datasets import Dataset, Features, Value, load_dataset

from training.recipe import CorpusSpec, corpus_path

LANGUAGES = ("ko", "en")
PAIR_FEATURES = Features({lang: Value("string") for lang in LANGUAGES})


def load_corpus(spec: CorpusSpec, data_dir: str | Path = ".") -> Dataset:
    """The corpus as ``{"ko": str, "en": str}`` rows, in file order; local paths are relative to ``data_dir``."""
    loaders: dict[str, Callable[[CorpusSpec, Path], Dataset]] = {
        "parallel": _load_parallel,
        "tsv": _load_tsv,
        "jsonl": _load_jsonl,
        "hub": _load_hub,
    }
    if spec.format not in loaders:
        raise ValueError(f"corpus {spec.name!r}: unknown format {spec.format!r} (known: {', '.join(loaders)})")
    return loaders[spec.format](spec, Path(data_dir))


def load_monolingual(path: str | Path, lang: str, limit: int | None = None) -> Dataset:
    """The first ``limit`` lines (all if None) of a one-sentence-per-line file as rows ``{lang: str}``.

    ``datasets``' text loader reads plain or compressed files alike (``.gz``, ``.bz2``, ``.xz``, ``.zst``) and
    splits on line ends only, so line numbers match ``wc -l`` of the uncompressed text.
    """
    if lang not in LANGUAGES:
        raise ValueError(f"language {lang!r} is not one of {', '.join(LANGUAGES)}")
    if not Path(path).is_file():
        raise FileNotFoundError(f"{path} does not exist")
    split = "train" if limit is None else f"train[:{limit}]"
    return load_dataset("text", data_files=str(path), split=split).rename_column("text", lang)


def _load_parallel(spec: CorpusSpec, data_dir: Path) -> Dataset:
    paths = {lang: _existing_file(spec, data_dir, suffix=f".{lang}") for lang in LANGUAGES}
    lines = {lang: _read_lines(path) for lang, path in paths.items()}
    counts = {lang: len(side) for lang, side in lines.items()}
    if len(set(counts.values())) > 1:
        sizes = ", ".join(f"{paths[lang]} has {counts[lang]}" for lang in LANGUAGES)
        raise ValueError(f"corpus {spec.name!r}: the parallel files are not line-aligned: {sizes} lines")
    return Dataset.from_dict(lines, features=PAIR_FEATURES)


def _load_tsv(spec: CorpusSpec, data_dir: Path) -> Dataset:
    """Tab-separated lines without a header; ``columns`` gives each language's 0-based position (ko 0, en 1)."""
    path = _existing_file(spec, data_dir)
    positions = {lang: int(spec.columns.get(lang, default)) for default, lang in enumerate(LANGUAGES)}
    pairs: dict[str, list[str]] = {lang: [] for lang in LANGUAGES}
    for number, line in enumerate(_read_lines(path), start=1):
        fields = line.split("\t")
        if len(fields) <= max(positions.values()):
            raise ValueError(f"{path}:{number}: expected a tab at column {max(positions.values())}, found {line!r}")
        for lang, position in positions.items():
            pairs[lang].append(fields[position])
    return Dataset.from_dict(pairs, features=PAIR_FEATURES)


def _load_jsonl(spec: CorpusSpec, data_dir: Path) -> Dataset:
    return _pair_columns(Dataset.from_json(str(_existing_file(spec, data_dir))), spec)


def _load_hub(spec: CorpusSpec, data_dir: Path) -> Dataset:
    """``load_dataset(hub, subset, split=split)``, which honours HF_HUB_OFFLINE and HF_DATASETS_OFFLINE.

    ``hub`` is a Hub dataset id, or a directory of data files (absolute, or under ``data_dir``).
    """
    if not spec.hub:
        raise ValueError(f"corpus {spec.name!r}: format 'hub' needs a 'hub' dataset id or directory")
    local = data_dir / spec.hub
    source = str(local) if local.is_dir() else spec.hub
    return _pair_columns(load_dataset(source, spec.subset, split=spec.split), spec)


def _pair_columns(dataset: Dataset, spec: CorpusSpec) -> Dataset:
    """Keep only ko/en, named by ``columns`` or the languages themselves, at the top level or in ``translation``.

    ``translation: {"ko": ..., "en": ...}`` is the layout of most Hub translation datasets (OPUS, WMT).
    """
    keys = {lang: str(spec.columns.get(lang, lang)) for lang in LANGUAGES}
    if all(key in dataset.column_names for key in keys.values()):
        def pick(batch: dict) -> dict:
            return {lang: batch[key] for lang, key in keys.items()}
    elif "translation" in dataset.column_names:
        def pick(batch: dict) -> dict:
            return {lang: [pair[key] for pair in batch["translation"]] for lang, key in keys.items()}
    else:
        raise ValueError(
            f"corpus {spec.name!r}: no columns {sorted(keys.values())} and no 'translation' column "
            f"(it has {dataset.column_names}); set 'columns' in the recipe"
        )
    return dataset.map(pick, batched=True, remove_columns=dataset.column_names, features=PAIR_FEATURES)


def _existing_file(spec: CorpusSpec, data_dir: Path, suffix: str = "") -> Path:
    if not spec.path:
        raise ValueError(f"corpus {spec.name!r}: format {spec.format!r} needs a 'path'")
    path = Path(f"{corpus_path(spec, data_dir)}{suffix}")
    if not path.is_file():
        raise FileNotFoundError(f"corpus {spec.name!r}: {path} does not exist")
    return path


def _read_lines(path: Path) -> list[str]:
    """Lines split on ``\\n`` only: ``str.splitlines`` also splits on U+2028, form feeds and the like, which can
    occur inside a segment and would silently shift one side of a parallel corpus against the other."""
    lines = path.read_text(encoding="utf-8").split("\n")
    if lines[-1] == "":
        lines.pop()
    return lines
