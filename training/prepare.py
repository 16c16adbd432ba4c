"""Turn a recipe's corpora into a tokenizer and tokenized training data (``make data``).

    python -m training.prepare --config configs/release.yaml --run-dir runs/release

writes into RUN_DIR:

- ``spm.model``: the joint SentencePiece tokenizer, trained on each distinct cleaned human training pair once;
- ``data/train/``: a ``Dataset.save_to_disk`` of one example per (weighted) training pair and direction, with
  ``source`` (``tokenizer.source_ids``), ``target`` (``tokenizer.target_ids``), ``direction`` ("ko-en"), ``corpus``;
  a synthetic (back-translated) corpus gives examples only in the direction out of its synthetic side, their
  sources tagged ``<2xx> <bt>`` if the corpus is ``tagged``; with ``speech_level_tags`` in the recipe, that share
  of the examples into Korean (a seeded draw per example) carry their target's speech level after the tags:
  ``<2ko> <plain>``, ``<2ko> <bt> <formal>``;
- ``data/dev.jsonl``, ``data/test.jsonl``: ``{"corpus", "source_lang", "target_lang", "source", "target"}`` per pair
  and direction, normalised but never filtered;
- ``data/report.json``: what cleaning dropped per corpus and reason, the weighted totals, the examples per
  direction, the tokenizer's size and <unk> rate, and the hash of the recipe the data was built from.

A second run with an unchanged recipe finds that hash and returns at once, so ``make train`` after ``make data`` is
cheap; any change to the corpora, cleaning, tokenizer, directions or seed rebuilds everything.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import random
import shutil
import time
from collections import Counter
from collections.abc import Iterable
from functools import partial
from pathlib import Path

import datasets
from datasets import Dataset, Features, List, Value, concatenate_datasets

from nmt.speech_level import REQUESTABLE_LEVELS, speech_level
from nmt.tokenizer import SPEECH_LEVEL_TAGS, Tokenizer, TokenizerConfig
from training.clean import (
    DROP_REASONS,
    CleaningConfig,
    CleaningReport,
    HeldOut,
    clean,
    drop_too_many_tokens,
    normalize_pairs,
)
from training.corpus import LANGUAGES, load_corpus
from training.recipe import CorpusSpec, Recipe, load_recipe

FORMAT_VERSION = 1  # bump when the layout of RUN_DIR/data changes, so old runs are rebuilt
TRAIN_FEATURES = Features({
    "source": List(Value("int32")),
    "target": List(Value("int32")),
    "direction": Value("string"),
    "corpus": Value("string"),
})


def prepare(recipe: Recipe, run_dir: Path, num_proc: int = 2, force: bool = False) -> dict:
    """Build RUN_DIR's tokenizer and data unless they already match the recipe; returns the report."""
    fingerprint = recipe_hash(recipe)
    previous = _previous_report(run_dir)
    if not force and previous and previous["recipe_hash"] == fingerprint:
        print(f"{run_dir / 'data'} is up to date with recipe {recipe.name} (hash {fingerprint}); --force rebuilds it")
        return previous

    started = time.monotonic()
    config = CleaningConfig(**recipe.cleaning)
    dev = {spec.name: normalize_pairs(load_corpus(spec, recipe.data_dir)) for spec in recipe.dev}
    test = {spec.name: normalize_pairs(load_corpus(spec, recipe.data_dir)) for spec in recipe.test}
    held_out = HeldOut.from_corpora([*dev.values(), *test.values()])

    cleaned: list[Dataset] = []
    reports: list[CleaningReport] = []
    for spec in recipe.train:
        if not spec.directions(recipe.directions):
            raise ValueError(f"corpus {spec.name!r}: synthetic side {spec.synthetic!r} is the source of none of the "
                             f"recipe's directions {recipe.directions}")
        print(f"cleaning {spec.name}", flush=True)
        pairs, report = clean(load_corpus(spec, recipe.data_dir), config, held_out, corpus=spec.name)
        cleaned.append(pairs)
        reports.append(report)

    tokenizer_config = TokenizerConfig(**recipe.tokenizer)
    print(f"reusing the tokenizer {tokenizer_config.reuse}" if tokenizer_config.reuse else "training the tokenizer", flush=True)
    # Synthetic corpora stay out: their machine-made side would teach the tokenizer the model's own output, and
    # leaving them out keeps the vocabulary of a recipe with back-translation equal to the one without (an A/B
    # then compares data, not tokenizers). Byte fallback covers whatever only they contain.
    train_texts = _distinct_texts([pairs for spec, pairs in zip(recipe.train, cleaned) if spec.synthetic is None])
    level_tags = LevelTagging(recipe.speech_level_tags, recipe.seed)
    tokenizer = Tokenizer.build(train_texts, tokenizer_config, SPEECH_LEVEL_TAGS if level_tags.share else ())

    print("tokenizing", flush=True)
    weighted: list[Dataset] = []
    for spec, pairs, report in zip(recipe.train, cleaned, reports):
        if config.max_tokens is not None:  # <bt> and a speech-level tag are one more source token each
            tags = int(spec.tagged) + int(level_tags.share > 0)
            pairs = drop_too_many_tokens(pairs, tokenizer, config.max_tokens - tags, report)
        rng = random.Random(f"{recipe.seed}:{spec.name}")  # per corpus: adding a corpus leaves the others' samples
        sample = pairs.select(weighted_indices(len(pairs), spec.weight, rng))
        weighted.append(sample.add_column("corpus", [spec.name] * len(sample)))
    human = [sample for spec, sample in zip(recipe.train, weighted) if spec.synthetic is None]
    train = concatenate_datasets([
        *([_tokenize(concatenate_datasets(human), tokenizer, recipe.directions, num_proc, level_tags)] if human else []),
        *(_tokenize(sample, tokenizer, spec.directions(recipe.directions), num_proc, level_tags, tagged=spec.tagged)
          for spec, sample in zip(recipe.train, weighted) if spec.synthetic is not None),
    ])

    dev_texts = [text for pairs in dev.values() for lang in LANGUAGES for text in pairs.to_dict()[lang]]
    staging = run_dir / "data.partial"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    train.save_to_disk(str(staging / "train"))
    _write_evaluation_set(staging / "dev.jsonl", dev, recipe.directions)
    _write_evaluation_set(staging / "test.jsonl", test, recipe.directions)
    report = {
        "recipe": recipe.name,
        "recipe_hash": fingerprint,
        "data_dir": str(recipe.data_dir),
        "cleaning": dataclasses.asdict(config),
        "train": _train_counts(recipe, reports, [len(sample) for sample in weighted], train),
        "examples_per_direction": dict(_count(train, "direction")),
        "dev": {name: len(pairs) for name, pairs in dev.items()},
        "test": {name: len(pairs) for name, pairs in test.items()},
        "tokenizer": {
            **({"reused": tokenizer_config.reuse} if tokenizer_config.reuse else {}),
            "model_type": tokenizer_config.model_type,
            "vocab_size": tokenizer.vocab_size,
            "unk_rate": {"train": unk_rate(tokenizer, train_texts), "dev": unk_rate(tokenizer, dev_texts)},
        },
        **({"speech_level_tags": {"share": level_tags.share, "examples": count_level_tags(train, tokenizer)}}
           if level_tags.share else {}),
        "seconds": round(time.monotonic() - started, 1),
    }
    (staging / "report.json").write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    # The report is written last and the folder renamed whole, so an interrupted run never looks finished.
    tokenizer.save(run_dir / "spm.model")
    shutil.rmtree(run_dir / "data", ignore_errors=True)
    staging.rename(run_dir / "data")
    print_summary(report, run_dir)
    return report


def recipe_hash(recipe: Recipe) -> str:
    """Hash of every recipe setting that shapes the data; the ``model`` and ``training`` sections do not."""
    settings = {
        "format": FORMAT_VERSION,
        "data_dir": str(recipe.data_dir.resolve()),
        "directions": [list(direction) for direction in recipe.directions],
        "corpora": {split: [_spec_settings(spec, recipe) for spec in getattr(recipe, split)] for split in ("train", "dev", "test")},
        "cleaning": recipe.cleaning,
        "tokenizer": recipe.tokenizer,
        "seed": recipe.seed,
        **({"speech_level_tags": recipe.speech_level_tags} if recipe.speech_level_tags else {}),  # older hashes stay
    }
    if "reuse" in recipe.tokenizer:  # a released tokenizer's file may be replaced by the next release's
        settings["tokenizer_content"] = hashlib.sha256(Path(recipe.tokenizer["reuse"]).read_bytes()).hexdigest()
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]


def _spec_settings(spec: CorpusSpec, recipe: Recipe) -> dict:
    """A corpus's fields for the hash; the back-translation ones only when set, so older recipes keep their hash.

    A synthetic corpus is our own output and may be made again in the same folder (another model, another round),
    so its files' content counts too; human corpora are fixed releases.
    """
    settings = {key: value for key, value in dataclasses.asdict(spec).items() if key not in ("synthetic", "tagged") or value}
    if spec.synthetic is not None and spec.format == "parallel":
        files = [Path(f"{recipe.resolve(spec)}.{lang}") for lang in LANGUAGES]
        settings["content"] = [hashlib.sha256(path.read_bytes()).hexdigest() for path in files if path.is_file()]
    return settings


def weighted_indices(size: int, weight: float, rng: random.Random) -> list[int]:
    """Row indices for a corpus weight: the integer part repeats every row, the fraction adds a random subset."""
    if weight < 0:
        raise ValueError(f"corpus weight must be >= 0, got {weight}")
    repeats, fraction = divmod(weight, 1)
    subset = sorted(rng.sample(range(size), round(fraction * size)))
    return list(range(size)) * int(repeats) + subset


def unk_rate(tokenizer: Tokenizer, texts: Iterable[str]) -> float:
    """Fraction of the tokens of ``texts`` that are <unk> (byte fallback should keep it at 0)."""
    tokens = unknown = 0
    for text in texts:
        ids = tokenizer.encode(text)
        tokens += len(ids)
        unknown += ids.count(tokenizer.unk_id)
    return unknown / tokens if tokens else 0.0


def _distinct_texts(corpora: list[Dataset]) -> list[str]:
    """Both sides of each distinct pair once: the tokenizer should not learn the oversampling."""
    columns = [corpus.to_dict() for corpus in corpora]
    pairs = dict.fromkeys(pair for corpus in columns for pair in zip(corpus["ko"], corpus["en"]))
    return [text for pair in pairs for text in pair]


@dataclasses.dataclass(frozen=True)
class LevelTagging:
    """Which examples into Korean carry their target's speech-level tag: a ``share`` of them, drawn per example
    from ``seed`` and the example's corpus and row, so the draw is the same on every run and in every worker."""

    share: float
    seed: int

    def level(self, target: str, corpus: str, row: int) -> str | None:
        """The tag for one example's Korean ``target``, or None: not drawn, or an ending that names no level."""
        if not self.share or random.Random(f"{self.seed}:{corpus}:{row}").random() >= self.share:
            return None
        level = speech_level(target)
        return level.value if level in REQUESTABLE_LEVELS else None


def count_level_tags(train: Dataset, tokenizer: Tokenizer) -> dict[str, int]:
    """Training examples per speech-level tag on their source (the tag follows ``<2ko>`` and any ``<bt>``)."""
    level_of = {tag_id: level for level, tag_id in tokenizer.level_ids.items()}
    counts: Counter[str] = Counter()
    for batch in train.select_columns("source").iter(batch_size=50_000):
        counts.update(level_of[i] for source in batch["source"] for i in source[1:3] if i in level_of)
    return {level: counts[level] for level in tokenizer.speech_levels}


def _tokenize(
    pairs: Dataset, tokenizer: Tokenizer, directions: list[tuple[str, str]], num_proc: int, level_tags: LevelTagging,
    tagged: bool = False,
) -> Dataset:
    return concatenate_datasets([
        pairs.map(
            partial(_encode_direction, tokenizer=tokenizer, source_lang=source_lang, target_lang=target_lang,
                    tagged=tagged, level_tags=level_tags),
            batched=True,
            with_indices=True,
            num_proc=num_proc if num_proc > 1 and len(pairs) > 1000 else None,  # worker start-up costs more
            remove_columns=pairs.column_names,
            features=TRAIN_FEATURES,
        )
        for source_lang, target_lang in directions
    ])


def _encode_direction(batch: dict, rows: list[int], tokenizer: Tokenizer, source_lang: str, target_lang: str,
                      tagged: bool, level_tags: LevelTagging) -> dict:
    levels = ([level_tags.level(target, corpus, row) for target, corpus, row in zip(batch[target_lang], batch["corpus"], rows)]
              if target_lang == "ko" else [None] * len(rows))  # speech levels are those of Korean endings
    return {
        "source": [tokenizer.source_ids(text, target_lang, tagged=tagged, level=level)
                   for text, level in zip(batch[source_lang], levels)],
        "target": [tokenizer.target_ids(text) for text in batch[target_lang]],
        "direction": [f"{source_lang}-{target_lang}"] * len(batch["corpus"]),
        "corpus": batch["corpus"],
    }


def _write_evaluation_set(path: Path, corpora: dict[str, Dataset], directions: list[tuple[str, str]]) -> None:
    with path.open("w", encoding="utf-8") as out:
        for name, pairs in corpora.items():
            columns = pairs.to_dict()
            for source_lang, target_lang in directions:
                for source, target in zip(columns[source_lang], columns[target_lang]):
                    row = {"corpus": name, "source_lang": source_lang, "target_lang": target_lang,
                           "source": source, "target": target}
                    out.write(json.dumps(row, ensure_ascii=False) + "\n")


def _train_counts(recipe: Recipe, reports: list[CleaningReport], sampled: list[int], train: Dataset) -> dict:
    """Per corpus and in total: pairs read, dropped by reason, kept, weight and weighted pairs, examples."""
    examples = _count(train, "corpus")
    corpora = {
        spec.name: {**report.as_dict(), "weight": float(spec.weight), "sampled": size, "examples": examples[spec.name]}
        for spec, report, size in zip(recipe.train, reports, sampled)
    }
    total = {key: sum(counts[key] for counts in corpora.values()) for key in ("read", "kept", "sampled", "examples")}
    dropped = {reason: sum(counts["dropped"].get(reason, 0) for counts in corpora.values()) for reason in DROP_REASONS}
    return {"corpora": corpora, "total": {**total, "dropped": {reason: n for reason, n in dropped.items() if n}}}


def _count(dataset: Dataset, column: str) -> Counter[str]:
    return Counter(dataset.select_columns(column).to_dict()[column])


def _previous_report(run_dir: Path) -> dict | None:
    report = run_dir / "data" / "report.json"
    if report.is_file() and (run_dir / "spm.model").is_file():
        return json.loads(report.read_text(encoding="utf-8"))
    return None


def print_summary(report: dict, run_dir: Path) -> None:
    """A table of the corpora (read, kept, weight, weighted pairs, what was dropped) and where the outputs went."""
    train = report["train"]
    width = max(len(name) for name in [*train["corpora"], "total"])
    print(f"\n{'corpus':<{width}} {'read':>7} {'kept':>7} {'weight':>6} {'sampled':>8}  dropped")
    for name, counts in [*train["corpora"].items(), ("total", {**train["total"], "weight": ""})]:
        dropped = ", ".join(f"{reason} {n}" for reason, n in counts["dropped"].items()) or "-"
        figures = f"{counts['read']:>7} {counts['kept']:>7} {counts['weight']:>6} {counts['sampled']:>8}"
        print(f"{name:<{width}} {figures}  {dropped}")
    per_direction = ", ".join(f"{direction} {n}" for direction, n in report["examples_per_direction"].items())
    tokenizer = report["tokenizer"]
    print(f"\nexamples: {train['total']['examples']} ({per_direction})")
    print(f"tokenizer: {tokenizer['model_type']}, {tokenizer['vocab_size']} pieces, <unk> rate "
          f"{tokenizer['unk_rate']['train']:.5%} on train text, {tokenizer['unk_rate']['dev']:.5%} on dev text")
    for split in ("dev", "test"):
        print(f"{split}: {sum(report[split].values())} pairs in {len(report[split])} corpora")
    print(f"\nwrote {run_dir / 'spm.model'} and {run_dir / 'data'}/{{train/, dev.jsonl, test.jsonl, report.json}} "
          f"in {report['seconds']} s")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Clean, weight and tokenize a recipe's corpora into RUN_DIR.")
    parser.add_argument("--config", type=Path, required=True, help="recipe YAML, e.g. configs/release.yaml")
    parser.add_argument("--run-dir", type=Path, required=True, help="where spm.model and data/ go")
    parser.add_argument("--num-proc", type=int, default=min(2, os.cpu_count() or 1), help="tokenizing processes")
    parser.add_argument("--force", action="store_true", help="rebuild even if RUN_DIR/data matches the recipe")
    args = parser.parse_args(argv)
    datasets.disable_progress_bars()
    prepare(load_recipe(args.config), args.run_dir, num_proc=args.num_proc, force=args.force)


if __name__ == "__main__":
    main()
