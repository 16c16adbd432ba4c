"""Score a model on the recipe's dev and test sets: BLEU and chrF per set and direction, with sacrebleu.

    python -m training.evaluate --config configs/release.yaml --model models/default

Tokenization for BLEU. English targets use ``13a``, the WMT standard. For Korean targets the usual choice,
sacrebleu's ``ko-mecab`` (morphemes), needs the mecab-ko extra (``pip install 'sacrebleu[ko]'``), which is
not installed here and cannot be fetched offline. The whitespace tokenizers (``13a``, ``intl``) would split
Korean into eojeol, a word with its particles and endings glued on, so one wrong particle costs the whole
word, and word spacing, which Korean writers and corpora apply inconsistently, moves the score. Korean targets
therefore default to ``char``: BLEU over Hangul syllables, which is close to morpheme granularity, ignores
spacing and works on every machine. Its numbers are higher than word-level BLEU and cannot be compared with
published ko-mecab BLEU; pass ``--korean-bleu-tokenize ko-mecab`` where mecab-ko is installed for that. The
tokenizer is never chosen by what happens to be installed: a score whose meaning depended on the machine
could not be compared across runs. Every score carries its sacrebleu signature.

chrF (character 6-grams, whitespace ignored) is the primary metric for Korean targets: character n-grams
give partial credit for a right stem with a wrong ending, which suits an agglutinative language.

The report goes to ``<model>/eval.json`` (or ``--out``), the hypotheses to ``<report without .json>/
<set>.<src>-<tgt>.hyp``, one line per source line. The report names them relative to its own folder, so a report
copied with its hypotheses folder (into bench/results, to another machine) can still be compared.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path

from sacrebleu.metrics import BLEU, CHRF

from nmt.checkpoint import CheckpointError
from nmt.numbers import number_mismatches, numbers_in
from nmt.search import SearchOptions
from nmt.translate import add_precision_options, add_tuned_options, given_options
from nmt.translator import Translator, UnsupportedLanguagePair, UnsupportedSpeechLevel
from training.recipe import CorpusSpec, Recipe, load_recipe

KOREAN_BLEU_TOKENIZE = "char"
BLEU_TOKENIZE = "13a"  # every target language but Korean


class EvaluationError(ValueError):
    """An evaluation set or a model output that cannot be scored as asked."""


def bleu_tokenize(target_lang: str, korean_bleu_tokenize: str = KOREAN_BLEU_TOKENIZE) -> str:
    return korean_bleu_tokenize if target_lang == "ko" else BLEU_TOKENIZE


def primary_metric(target_lang: str) -> str:
    """The metric a direction is judged by: chrF into Korean (see above), BLEU into English."""
    return "chrf" if target_lang == "ko" else "bleu"


def bleu_metric(target_lang: str, korean_bleu_tokenize: str = KOREAN_BLEU_TOKENIZE) -> BLEU:
    tokenize = bleu_tokenize(target_lang, korean_bleu_tokenize)
    try:
        return BLEU(tokenize=tokenize)
    except RuntimeError as error:  # ko-mecab without the mecab-ko extra
        raise EvaluationError(f"BLEU tokenizer {tokenize!r} is unavailable: {' '.join(str(error).split())}") from error


def score(
    hypotheses: Sequence[str], references: Sequence[str], target_lang: str, korean_bleu_tokenize: str = KOREAN_BLEU_TOKENIZE
) -> dict:
    """Corpus BLEU and chrF of one hypothesis per reference, with the signatures that make them reproducible."""
    if len(hypotheses) != len(references):
        raise EvaluationError(f"{len(hypotheses)} hypotheses for {len(references)} references: they must pair one to one")
    bleu, chrf = bleu_metric(target_lang, korean_bleu_tokenize), CHRF()
    return {
        "bleu": bleu.corpus_score(list(hypotheses), [list(references)]).score,
        "chrf": chrf.corpus_score(list(hypotheses), [list(references)]).score,
        "bleu_signature": str(bleu.get_signature()),
        "chrf_signature": str(chrf.get_signature()),
    }


def read_lines(path: Path) -> list[str]:
    """Lines split on ``\\n`` only, so that stray Unicode line separators cannot shift the alignment."""
    if not path.is_file():
        raise EvaluationError(f"evaluation file {path} does not exist")
    text = path.read_bytes().decode("utf-8")
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return [line.removesuffix("\r") for line in lines]


def read_parallel(prefix: Path, source_lang: str, target_lang: str, limit: int | None = None) -> tuple[list[str], list[str]]:
    """(sources, references) from the line-aligned files ``<prefix>.<source_lang>`` and ``<prefix>.<target_lang>``."""
    source_path, target_path = (prefix.with_name(f"{prefix.name}.{lang}") for lang in (source_lang, target_lang))
    sources, references = read_lines(source_path), read_lines(target_path)
    if len(sources) != len(references):
        raise EvaluationError(f"{source_path} has {len(sources)} lines but {target_path} has {len(references)}")
    if not sources:
        raise EvaluationError(f"{source_path} is empty")
    return sources[:limit], references[:limit]


@dataclass
class EvaluationSet:
    name: str
    split: str  # "dev" or "test"
    prefix: Path


@dataclass
class EvaluationConfig:
    search_overrides: dict = field(default_factory=dict)  # SearchOptions fields over each direction's tuned defaults
    batch_tokens: int = 4096
    limit: int | None = None  # first N lines of every set, for quick checks
    korean_bleu_tokenize: str = KOREAN_BLEU_TOKENIZE
    device: str = "auto"


def evaluation_sets(recipe: Recipe, names: Sequence[str] | None = None) -> list[EvaluationSet]:
    """The recipe's dev and test sets, optionally only those named; all must be ``parallel`` files."""
    tagged: list[tuple[str, CorpusSpec]] = [("dev", s) for s in recipe.dev] + [("test", s) for s in recipe.test]
    known = [spec.name for _, spec in tagged]
    duplicates = sorted({name for name in known if known.count(name) > 1})
    if duplicates:
        raise EvaluationError(f"evaluation set names must be unique across dev and test: {', '.join(duplicates)}")
    unknown = sorted(set(names or []) - set(known))
    if unknown:
        raise EvaluationError(f"unknown evaluation sets {', '.join(unknown)} (the recipe has: {', '.join(known) or 'none'})")
    chosen = [(split, spec) for split, spec in tagged if names is None or spec.name in names]
    if not chosen:
        raise EvaluationError(f"recipe {recipe.name!r} has no dev or test sets to evaluate")
    for _, spec in chosen:
        if spec.format != "parallel" or spec.path is None:
            raise EvaluationError(f"evaluation set {spec.name!r} must be a local 'parallel' corpus, not {spec.format!r}")
    return [EvaluationSet(spec.name, split, recipe.resolve(spec)) for split, spec in chosen]


def hypotheses_of(translator: Translator, sources: list[str], source_lang: str, target_lang: str, options: SearchOptions) -> list[str]:
    """One single-line hypothesis per source line, or an error: the .hyp file must stay line-aligned."""
    hypotheses = [t.text for t in translator.translate(sources, source_lang, target_lang, options)]
    if len(hypotheses) != len(sources):
        raise EvaluationError(f"the translator returned {len(hypotheses)} hypotheses for {len(sources)} source lines")
    broken = next((i for i, text in enumerate(hypotheses) if "\n" in text), None)
    if broken is not None:
        raise EvaluationError(f"hypothesis for source line {broken + 1} spans several lines: {hypotheses[broken]!r}")
    return hypotheses


def direction_options(translator: Translator, directions: Sequence[tuple[str, str]], overrides: dict) -> dict[str, SearchOptions]:
    """The search options of each direction, ``"ko-en"`` → options: the model's tuned defaults for it under
    ``overrides``, of which a ``speech_level`` applies to the directions into Korean only."""
    return {
        f"{s}-{t}": translator.default_options(s, t, **{k: v for k, v in overrides.items() if k != "speech_level" or t == "ko"})
        for s, t in directions
    }


def evaluate(
    translator: Translator,
    sets: Sequence[EvaluationSet],
    directions: Sequence[tuple[str, str]],
    config: EvaluationConfig,
    hypotheses_dir: Path,
) -> list[dict]:
    """Translate and score every set in every direction; writes each direction's hypotheses as it goes."""
    options = direction_options(translator, directions, config.search_overrides)  # fails on an unserved pair
    for _, target_lang in directions:  # fail before hours of decoding, not after
        bleu_metric(target_lang, config.korean_bleu_tokenize)
    texts = {(s.name, d): read_parallel(s.prefix, *d, config.limit) for s in sets for d in directions}
    hypotheses_dir.mkdir(parents=True, exist_ok=True)
    results = []
    for evaluation_set in sets:
        for source_lang, target_lang in directions:
            sources, references = texts[evaluation_set.name, (source_lang, target_lang)]
            started = time.perf_counter()
            hypotheses = hypotheses_of(translator, sources, source_lang, target_lang, options[f"{source_lang}-{target_lang}"])
            seconds = time.perf_counter() - started
            scores = score(hypotheses, references, target_lang, config.korean_bleu_tokenize)
            hypotheses_file = hypotheses_dir / f"{evaluation_set.name}.{source_lang}-{target_lang}.hyp"
            hypotheses_file.write_text("".join(h + "\n" for h in hypotheses), encoding="utf-8")
            results.append(
                {
                    "set": evaluation_set.name,
                    "split": evaluation_set.split,
                    "direction": f"{source_lang}-{target_lang}",
                    "sentences": len(sources),
                    **scores,
                    "bleu": round(scores["bleu"], 2),
                    "chrf": round(scores["chrf"], 2),
                    "primary_metric": primary_metric(target_lang),
                    "numbers": number_counts(sources, hypotheses),
                    "seconds": round(seconds, 3),
                    "sentences_per_second": round(len(sources) / seconds, 2),
                    "hypotheses": str(hypotheses_file),
                }
            )
    return results


def number_counts(sources: Sequence[str], hypotheses: Sequence[str]) -> dict:
    """How faithfully a set's numbers came through (:mod:`nmt.numbers`): the sources' numbers, how many of them the
    translations lack, and how many numbers the translations wrote that their sources lack."""
    mismatches = [number_mismatches(source, hypothesis) for source, hypothesis in zip(sources, hypotheses, strict=True)]
    return {"in_sources": sum(len(numbers_in(source)) for source in sources),
            "missing": sum(missing for missing, _ in mismatches), "invented": sum(invented for _, invented in mismatches)}


def build_report(translator: Translator, model_dir: Path, recipe: Recipe, config_path: Path, config: EvaluationConfig,
                 directions: Sequence[tuple[str, str]], results: list[dict]) -> dict:
    """Everything needed to trust or reproduce the numbers: model, recipe, each direction's decoding, metric signatures."""
    options = direction_options(translator, directions, config.search_overrides)
    return {
        "model": {
            "directory": str(model_dir),
            "name": translator.metadata.get("name"),
            "version": translator.metadata.get("version"),
        },
        "recipe": {"name": recipe.name, "config": str(config_path)},
        "decoding": {"directions": {pair: asdict(o) for pair, o in options.items()}, "batch_tokens": config.batch_tokens,
                     "device": str(translator.device), "precision": translator.precision},
        "limit": config.limit,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "results": results,
    }


def format_table(results: list[dict]) -> str:
    """One row per set and direction, the primary metric starred, the numbers missing and invented against those
    in the sources, then the metric signatures."""
    header = (f"{'set':<20} {'split':<5} {'direction':<9} {'sentences':>9} {'BLEU':>7} {'chrF':>7} {'sent/s':>8} "
              f"{'numbers missing/invented/in sources':>36}")
    rows = []
    for r in results:
        bleu, chrf = (f"{r[m]:.2f}" + ("*" if r["primary_metric"] == m else " ") for m in ("bleu", "chrf"))
        numbers = f"{r['numbers']['missing']}/{r['numbers']['invented']}/{r['numbers']['in_sources']}"
        rows.append(f"{r['set']:<20} {r['split']:<5} {r['direction']:<9} {r['sentences']:>9} {bleu:>7} {chrf:>7} "
                    f"{r['sentences_per_second']:>8.1f} {numbers:>36}")
    signatures = sorted({r["bleu_signature"] for r in results} | {r["chrf_signature"] for r in results})
    return "\n".join([header, "-" * len(header), *rows, "* primary metric", "", *signatures])


def parse_directions(text: str) -> list[tuple[str, str]]:
    """``ko-en,en-ko`` → [("ko", "en"), ("en", "ko")]."""
    directions = []
    for item in text.split(","):
        source, _, target = item.strip().partition("-")
        if not source or not target:
            raise argparse.ArgumentTypeError(f"direction {item!r} must look like ko-en")
        directions.append((source, target))
    return directions


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", type=Path, required=True, help="recipe YAML naming the dev and test sets")
    parser.add_argument("--model", type=Path, required=True, help="model directory to evaluate")
    parser.add_argument("--sets", type=lambda text: text.split(","), help="comma-separated set names (default: all dev and test sets)")
    parser.add_argument("--directions", type=parse_directions, help="e.g. ko-en,en-ko (default: the recipe's directions)")
    parser.add_argument("--beam-size", type=int, default=SearchOptions.beam_size)
    add_tuned_options(parser)  # --speech-level applies to the directions into Korean
    parser.add_argument("--batch-tokens", type=int, default=EvaluationConfig.batch_tokens, help="decoding budget per batch")
    parser.add_argument("--limit", type=int, help="score only the first N lines of every set")
    parser.add_argument("--out", type=Path, help="report path (default: <model>/eval.json); hypotheses go beside it")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda or cuda:N")
    add_precision_options(parser)
    parser.add_argument(
        "--korean-bleu-tokenize", choices=["char", "ko-mecab", "intl", "13a"], default=KOREAN_BLEU_TOKENIZE,
        help="BLEU tokenizer for Korean targets (ko-mecab needs 'sacrebleu[ko]')",
    )
    args = parser.parse_args(argv)
    if args.limit is not None and args.limit < 1:
        parser.error("--limit must be at least 1")
    if args.out is not None and args.out.suffix != ".json":
        parser.error("--out must name a .json file (the hypotheses go in the folder of the same name)")
    return args


def main(argv: Sequence[str] | None = None) -> dict:
    args = parse_args(argv)
    recipe = load_recipe(args.config)
    sets = evaluation_sets(recipe, args.sets)
    translator = Translator.load(args.model, args.device, max_batch_tokens=args.batch_tokens, precision=args.precision)
    directions = args.directions or recipe.directions
    config = EvaluationConfig(
        search_overrides={"beam_size": args.beam_size, **given_options(args)},
        batch_tokens=args.batch_tokens,
        limit=args.limit,
        korean_bleu_tokenize=args.korean_bleu_tokenize,
        device=args.device,
    )
    report_path = args.out or args.model / "eval.json"
    hypotheses_dir = report_path.with_suffix("")
    results = evaluate(translator, sets, directions, config, hypotheses_dir)
    for result in results:  # the report and its folder travel together
        result["hypotheses"] = str(Path(result["hypotheses"]).relative_to(report_path.parent))
    report = build_report(translator, args.model, recipe, args.config, config, directions, results)
    report_path.parent.mkdir(parents=True, exist_ok=True)
    report_path.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(format_table(results))
    print(f"\nreport: {report_path}\nhypotheses: {hypotheses_dir}/")
    return report


if __name__ == "__main__":
    try:
        main()
    except (EvaluationError, CheckpointError, UnsupportedLanguagePair, UnsupportedSpeechLevel) as error:
        raise SystemExit(f"error: {error}") from error
