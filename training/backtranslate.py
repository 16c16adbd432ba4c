"""Back-translation (``make backtranslate``): real monolingual text into a synthetic parallel corpus.

    python -m training.backtranslate --model models/default --input ../shared/mono/ko-kowiki/text.ko --lang ko \\
        --out runs/bt/ko-kowiki [--limit N] [--search beam|greedy|sample]

The model translates real text in language L into the other language (Sennrich et al., 2016); the forward model
then learns from (synthetic source → real target). OUT has the layout of ``../shared/data``, so a recipe lists it
like a human corpus (``path: runs/bt/ko-kowiki/train``, ``synthetic: en``, ``tagged: true``):

    OUT/train.ko, OUT/train.en   line-aligned kept pairs in input order, the real text on the L side
    OUT/backtranslation.json     model, settings, seed, lines read/kept/dropped per reason, speed
    OUT/shards/plan.json         the settings the shards are made with: a rerun must use the same
    OUT/shards/00012/            shard 12: its pairs and shard.json, built in a hidden folder and renamed whole

The input is cut into shards of ``shard_size`` lines fixed by (input, limit, shard size), so a run killed at any
moment and restarted with the same command redoes at most the shard in flight, and the final files, assembled
from the shards in order on every run, are byte-identical to an uninterrupted run's. Sampling draws from a
generator seeded by (seed, shard index) for the same reason. Under ``torchrun`` rank r translates shards r, r+N,
...; rank 0 assembles once every rank is done.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import shutil
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import datasets
import torch
import torch.distributed as dist
from tqdm import tqdm

from nmt.normalize import normalize
from nmt.sampling import SamplingOptions, sample
from nmt.search import SearchOptions, search
from nmt.translator import Strategy, Translator, resolve_device
from training.bt_filter import BT_DROP_REASONS, OutputFilterConfig, filter_translations
from training.corpus import LANGUAGES, load_monolingual
from training.train import setup_distributed

SEARCHES = ("beam", "greedy", "sample")
SHARED = (Path(__file__).resolve().parent.parent.parent / "shared").resolve()  # ../shared (or where its link points): inputs only
RECORD, PLAN, SHARD_RECORD = "backtranslation.json", "plan.json", "shard.json"


@dataclass
class BacktranslationConfig:
    """What to translate, with which model and search, and how to cut and filter the work."""

    model: Path
    input: Path
    lang: str  # the language of the input: the real side of the pairs
    out: Path
    limit: int | None = None  # the first ``limit`` input lines; all of them when None
    shard_size: int = 2000
    search: str = "beam"
    beam_size: int = 4
    temperature: float = 1.0  # sampling only
    top_k: int = 0  # sampling only; 0 draws from the whole vocabulary
    seed: int = 0
    precision: str = "fp32"
    device: str = "auto"
    max_batch_tokens: int | None = None  # the Translator's budget for the device when None
    filters: OutputFilterConfig = field(default_factory=OutputFilterConfig)

    def __post_init__(self) -> None:
        if self.lang not in LANGUAGES:
            raise ValueError(f"--lang must be one of {', '.join(LANGUAGES)}, got {self.lang!r}")
        if self.search not in SEARCHES:
            raise ValueError(f"--search must be one of {', '.join(SEARCHES)}, got {self.search!r}")
        if self.shard_size < 1 or (self.limit is not None and self.limit < 0):
            raise ValueError("--shard-size must be at least 1 and --limit at least 0")
        if Path(self.out).resolve().is_relative_to(SHARED):
            raise ValueError(f"--out {self.out} is inside {SHARED}: write synthetic corpora under runs/")

    @property
    def target_lang(self) -> str:
        return next(lang for lang in LANGUAGES if lang != self.lang)

    def search_options(self) -> SearchOptions:
        return SearchOptions(beam_size=self.beam_size if self.search == "beam" else 1)

    def sampling_options(self) -> SamplingOptions:
        return SamplingOptions(temperature=self.temperature, top_k=self.top_k)


def shard_ranges(lines: int, shard_size: int) -> list[range]:
    """Line ranges of the shards: consecutive, ``shard_size`` lines each, the last one possibly shorter."""
    return [range(start, min(start + shard_size, lines)) for start in range(0, lines, shard_size)]


def shards_of_rank(shards: int, rank: int, world_size: int) -> range:
    """The shard indices one of ``world_size`` processes translates: every ``world_size``-th from its rank."""
    return range(rank, shards, world_size)


def shard_seed(seed: int, index: int) -> int:
    """A sampling seed of its own for every shard, the same on every run."""
    return random.Random(f"{seed}:{index}").getrandbits(63)


def shard_dir(out: Path, index: int) -> Path:
    return out / "shards" / f"{index:05d}"


@dataclass
class Shard:
    pairs: dict[str, list[str]]  # the kept pairs, by language, in input order
    record: dict  # index, lines read and kept, drops per reason, seconds of translation


def translate_shard(translator: Translator, lines: Sequence[str], config: BacktranslationConfig, index: int) -> Shard:
    """Translate one shard's lines and filter them."""
    strategy: Strategy = search
    if config.search == "sample":
        generator = torch.Generator(device=translator.device).manual_seed(shard_seed(config.seed, index))
        strategy = partial(sample, sampling=config.sampling_options(), generator=generator)
    started = time.perf_counter()
    hypotheses = translator.translate_sentences(lines, config.target_lang, config.search_options(), strategy)
    seconds = time.perf_counter() - started
    # normalize() also folds any line break a byte-fallback output could hold, which would shift the two files.
    translations = [normalize(translator.tokenizer.decode(nbest[0].tokens)) for nbest in hypotheses]
    kept, dropped = filter_translations(lines, translations, config.filters)
    pairs = {config.lang: [lines[i] for i in kept], config.target_lang: [translations[i] for i in kept]}
    record = {"index": index, "read": len(lines), "kept": len(kept), "dropped": dict(dropped), "seconds": seconds}
    return Shard(pairs, record)


def write_shard(out: Path, shard: Shard) -> None:
    """Build the shard in a hidden folder and rename it into place: it exists complete or not at all."""
    final = shard_dir(out, shard.record["index"])
    staging = final.with_name(f".{final.name}.partial")
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    for lang, lines in shard.pairs.items():
        _write_lines(staging / f"train.{lang}", lines)
    (staging / SHARD_RECORD).write_text(json.dumps(shard.record) + "\n", encoding="utf-8")
    staging.rename(final)


def assemble(out: Path, config: BacktranslationConfig, shards: int, model_metadata: dict) -> dict:
    """Concatenate the shards in order into OUT/train.{ko,en} and write the record; the same result every time."""
    records = [json.loads((shard_dir(out, i) / SHARD_RECORD).read_text(encoding="utf-8")) for i in range(shards)]
    for lang in LANGUAGES:
        staging = out / f".train.{lang}.partial"
        with staging.open("wb") as merged:
            for index in range(shards):
                merged.write((shard_dir(out, index) / f"train.{lang}").read_bytes())
        os.replace(staging, out / f"train.{lang}")
    dropped: Counter[str] = Counter()
    for record in records:
        dropped.update(record["dropped"])
    read, seconds = sum(r["read"] for r in records), sum(r["seconds"] for r in records)
    summary = {
        "model": {"path": str(config.model), **{k: model_metadata.get(k) for k in ("name", "version", "format_version", "step")}},
        "input": str(config.input),
        "real": config.lang,
        "synthetic": config.target_lang,
        "settings": _settings(config),
        "counts": {
            "read": read,
            "kept": sum(r["kept"] for r in records),
            "dropped": {reason: dropped[reason] for reason in BT_DROP_REASONS if dropped[reason]},
        },
        "shards": shards,
        "translation_seconds": round(seconds, 2),
        "sentences_per_second": round(read / seconds, 2) if seconds else None,
    }
    _write_json(out / RECORD, summary)
    return summary


def backtranslate(config: BacktranslationConfig, progress_bar: bool = True) -> dict | None:
    """Translate every shard not yet on disk (this rank's share of them), then assemble; rank 0 returns the record."""
    distributed, device = setup_distributed()
    if config.device != "auto":
        device = resolve_device(config.device)
    translator = Translator.load(config.model, device=str(device), precision=config.precision,
                                 max_batch_tokens=config.max_batch_tokens)
    translator.check_pair(config.lang, config.target_lang)
    lines = list(load_monolingual(config.input, config.lang, config.limit)[config.lang])
    ranges = shard_ranges(len(lines), config.shard_size)
    _check_plan(config, len(ranges), write=distributed.is_main)

    todo = [i for i in shards_of_rank(len(ranges), distributed.rank, distributed.world_size)
            if not shard_dir(config.out, i).is_dir()]
    with tqdm(total=sum(len(ranges[i]) for i in todo), unit="sent", desc=f"{config.lang}->{config.target_lang}",
              disable=not (progress_bar and distributed.is_main)) as bar:
        for index in todo:
            shard = translate_shard(translator, lines[ranges[index].start : ranges[index].stop], config, index)
            write_shard(config.out, shard)
            bar.update(shard.record["read"])
    if distributed.world_size > 1:
        dist.barrier()  # every rank's shards are on disk before rank 0 reads them
    summary = assemble(config.out, config, len(ranges), translator.metadata) if distributed.is_main else None
    if distributed.world_size > 1:
        dist.barrier()
        dist.destroy_process_group()
    return summary


def _settings(config: BacktranslationConfig) -> dict:
    """Everything that decides the output files (the device does not, up to floating-point rounding)."""
    settings = dataclasses.asdict(config)
    for key in ("device", "out"):
        settings.pop(key)
    return json.loads(json.dumps(settings, default=str))


def _check_plan(config: BacktranslationConfig, shards: int, write: bool) -> None:
    """Refuse to mix shards made with other settings; the main process records the plan on a first run."""
    plan = {"settings": _settings(config), "shards": shards}
    path = config.out / "shards" / PLAN
    if path.is_file():
        existing = json.loads(path.read_text(encoding="utf-8"))
        if existing != plan:
            changed = sorted(k for k in plan["settings"] if existing.get("settings", {}).get(k) != plan["settings"][k])
            raise SystemExit(f"error: {config.out} holds shards made with other settings ({', '.join(changed) or 'shards'}"
                             f" differ): use another --out, or delete {config.out} to start again")
    elif write:
        path.parent.mkdir(parents=True, exist_ok=True)
        _write_json(path, plan)


def _write_lines(path: Path, lines: Sequence[str]) -> None:
    path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")


def _write_json(path: Path, value: dict) -> None:
    staging = path.with_name(f".{path.name}.partial")
    staging.write_text(json.dumps(value, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(staging, path)


def parse_args(argv: list[str] | None = None) -> tuple[BacktranslationConfig, argparse.Namespace]:
    parser = argparse.ArgumentParser(prog="python -m training.backtranslate", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", type=Path, required=True, help="model directory that translates out of --lang")
    parser.add_argument("--input", type=Path, required=True, help="one sentence per line, plain or compressed")
    parser.add_argument("--lang", required=True, choices=LANGUAGES, help="language of the input (the real side)")
    parser.add_argument("--out", type=Path, required=True, help="corpus folder to write, e.g. runs/bt/ko-kowiki")
    parser.add_argument("--limit", type=int, help="translate only the first N lines")
    parser.add_argument("--shard-size", type=int, default=BacktranslationConfig.shard_size)
    parser.add_argument("--search", choices=SEARCHES, default="beam")
    parser.add_argument("--beam-size", type=int, default=BacktranslationConfig.beam_size)
    parser.add_argument("--temperature", type=float, default=1.0, help="--search sample: logits are divided by it")
    parser.add_argument("--top-k", type=int, default=0, help="--search sample: draw among the k best (0: all)")
    parser.add_argument("--seed", type=int, default=0, help="--search sample: base of every shard's seed")
    parser.add_argument("--precision", choices=("fp32", "bf16", "int8"), default="fp32")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N (torchrun: one GPU per rank)")
    parser.add_argument("--max-batch-tokens", type=int, help="decoding batch budget (default: the device's)")
    parser.add_argument("--threads", type=int, help="torch intra-op threads per process")
    parser.add_argument("--no-progress-bar", action="store_true")
    args = parser.parse_args(argv)
    options = {name: getattr(args, name) for name in (
        "model", "input", "lang", "out", "limit", "shard_size", "search", "beam_size", "temperature", "top_k", "seed",
        "precision", "device", "max_batch_tokens")}
    try:
        return BacktranslationConfig(**options), args
    except ValueError as error:
        parser.error(str(error))


def main(argv: list[str] | None = None) -> None:
    config, args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    datasets.disable_progress_bars()
    summary = backtranslate(config, progress_bar=not args.no_progress_bar)
    if summary is not None:
        counts = summary["counts"]
        dropped = ", ".join(f"{reason} {n}" for reason, n in counts["dropped"].items()) or "none"
        print(f"{summary['real']}->{summary['synthetic']}: read {counts['read']}, kept {counts['kept']} (dropped: "
              f"{dropped}); {summary['sentences_per_second']} sentences/s; wrote {config.out}/train.ko, "
              f"{config.out}/train.en and {config.out / RECORD}", flush=True)


if __name__ == "__main__":
    main()
