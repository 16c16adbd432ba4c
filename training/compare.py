"""Did a change help, or is the difference luck? Paired significance tests between ``make eval`` reports.

    python -m training.compare runs/ab/v1.json runs/ab/human.json runs/ab/bt.json [--test ar|bs]

The first report is the baseline. Every set and direction that all the reports scored is scored again from
their hypothesis files against the references of the recipe they name, with the report's primary metric (BLEU
into English, chrF into Korean) and its BLEU tokenisation, through sacrebleu's paired test: approximate
randomisation by default (Riezler and Maxwell, 2005), paired bootstrap resampling with ``--test bs`` (Koehn,
2004). A p-value under 0.05 says a difference this large rarely comes from which sentences happen to be in the
set. The reports must score the same sentences (the same ``--limit``).

The table also counts the sentences each system translates differently from the baseline. sacrebleu's
randomisation test (after multeval) counts only shuffles that beat the real difference, never those that tie it,
so a change confined to a few sentences comes out "significant" however small; identical hypotheses get p = 1.
Its last row is the mean primary metric over the sets and directions, the figure a release is chosen by.
"""

from __future__ import annotations

import argparse
import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from sacrebleu.metrics import CHRF
from sacrebleu.significance import PairedTest, Result

from training.evaluate import EvaluationError, bleu_metric, evaluation_sets, read_lines, read_parallel
from training.recipe import load_recipe


@dataclass
class Difference:
    system: str
    score: float
    delta: float  # against the baseline
    p_value: float
    changed: int  # sentences whose hypothesis is not the baseline's: a p-value over a handful says little


@dataclass
class Comparison:
    set: str
    direction: str
    metric: str
    sentences: int
    baseline: float
    differences: list[Difference]


def load_report(path: Path) -> dict:
    """A report with its hypothesis paths resolved against the report's folder; reports from before evaluate wrote
    them so name them from the repository root, and are read from the working directory."""
    report = json.loads(path.read_text(encoding="utf-8"))
    for result in report["results"]:
        beside_report = path.parent / result["hypotheses"]
        if beside_report.is_file() or not Path(result["hypotheses"]).is_file():
            result["hypotheses"] = str(beside_report)
    return report


@dataclass
class ScoredSet:
    """One set and direction that every report scored: the first report's result, the references, and each
    report's hypotheses by its name."""

    name: str
    direction: str
    result: dict
    references: list[str]
    systems: list[tuple[str, list[str]]]

    @property
    def target_lang(self) -> str:
        return self.direction.split("-")[1]


def scored_sets(reports: Sequence[tuple[str, dict]]) -> Iterator[ScoredSet]:
    """The (set, direction) pairs every report scored, in the first report's order, with the references of the
    recipe the first report names and every report's hypotheses read back from its files."""
    (_, first_report), *_ = reports
    limits = {json.dumps(report["limit"]) for _, report in reports}
    if len(limits) > 1:
        raise ValueError(f"the reports score different numbers of lines (limits {', '.join(sorted(limits))})")
    recipe = load_recipe(first_report["recipe"]["config"])
    prefixes = {s.name: s.prefix for s in evaluation_sets(recipe)}
    by_key = [{(r["set"], r["direction"]): r for r in report["results"]} for _, report in reports]
    for key, result in by_key[0].items():
        if not all(key in results for results in by_key[1:]):
            continue
        set_name, direction = key
        source_lang, target_lang = direction.split("-")
        _, references = read_parallel(prefixes[set_name], source_lang, target_lang, first_report["limit"])
        systems = [(name, read_lines(Path(results[key]["hypotheses"]))) for (name, _), results in zip(reports, by_key)]
        yield ScoredSet(set_name, direction, result, references, systems)


def compare(reports: Sequence[tuple[str, dict]], test: str = "ar", samples: int = 0) -> list[Comparison]:
    """One comparison per (set, direction) scored by every report, in the baseline's order.

    sacrebleu seeds its resampling with 12345 (or ``SACREBLEU_SEED``), so a rerun gives the same p-values.
    """
    comparisons = []
    for scored in scored_sets(reports):
        systems, metric = scored.systems, scored.result["primary_metric"]
        scorer = bleu_metric(scored.target_lang, _bleu_tokenizer(scored.result["bleu_signature"])) if metric == "bleu" else CHRF()
        _, scores = PairedTest(systems, {metric: scorer}, [scored.references], test_type=test, n_samples=samples)()
        (base, *others), = (column for name, column in scores.items() if name != "System")  # keyed "BLEU" or "chrF2"
        comparisons.append(Comparison(scored.name, scored.direction, metric, len(scored.references), base.score, [
            difference(name, result, base.score, hypotheses, systems[0][1]) for (name, hypotheses), result in zip(systems[1:], others)
        ]))
    return comparisons


def difference(name: str, result: Result, baseline_score: float, hypotheses: list[str], baseline_hypotheses: list[str]) -> Difference:
    """The system against the baseline; identical hypotheses get p = 1, not sacrebleu's 1/(samples + 1)."""
    changed = sum(h != b for h, b in zip(hypotheses, baseline_hypotheses))
    return Difference(name, result.score, result.score - baseline_score, result.p_value if changed else 1.0, changed)


def _bleu_tokenizer(signature: str) -> str:
    """``tok:char`` in a BLEU signature → ``char``: score again exactly as the report did."""
    match = re.search(r"tok:([^|]+)", signature)
    if match is None:
        raise ValueError(f"no tokenizer in the BLEU signature {signature!r}")
    return match.group(1)


def markdown_table(comparisons: Sequence[Comparison], baseline: str) -> str:
    systems = [d.system for d in comparisons[0].differences] if comparisons else []
    header = ["set", "direction", "metric", "sentences", baseline, *(f"{name} (Δ, p, changed)" for name in systems)]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for c in comparisons:
        cells = [f"{d.score:.2f} ({d.delta:+.2f}, {d.p_value:.3f}, {d.changed})" for d in c.differences]
        lines.append("| " + " | ".join([c.set, c.direction, c.metric, str(c.sentences), f"{c.baseline:.2f}", *cells]) + " |")
    if len(comparisons) > 1:
        lines.append(mean_row(comparisons))
    return "\n".join(lines)


def mean_row(comparisons: Sequence[Comparison]) -> str:
    """The mean primary metric over the sets and directions (BLEU and chrF alike: the figure releases are chosen
    by), and on how many of them each system scores above the baseline."""
    count = len(comparisons)
    baseline = sum(c.baseline for c in comparisons) / count
    cells = []
    for differences in zip(*(c.differences for c in comparisons)):
        mean = sum(d.score for d in differences) / count
        higher = sum(d.delta > 0 for d in differences)
        cells.append(f"{mean:.2f} ({mean - baseline:+.2f}, higher on {higher} of {count})")
    return "| " + " | ".join(["mean", "", "primary", "", f"{baseline:.2f}", *cells]) + " |"


def main(argv: Sequence[str] | None = None) -> list[Comparison]:
    parser = argparse.ArgumentParser(prog="python -m training.compare", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("reports", nargs="+", type=Path, help="eval.json reports (the first is the baseline), each named by its file name")
    parser.add_argument("--test", choices=("ar", "bs"), default="ar", help="approximate randomisation or paired bootstrap")
    parser.add_argument("--samples", type=int, default=0, help="trials or resamples (0: sacrebleu's 10,000 or 1,000)")
    args = parser.parse_args(argv)
    if len(args.reports) < 2:
        parser.error("give a baseline report and at least one to compare with it")
    missing = [str(path) for path in args.reports if not path.is_file()]
    if missing:
        parser.error(f"no such report: {', '.join(missing)}")
    named = [(path.stem, load_report(path)) for path in args.reports]
    try:
        comparisons = compare(named, args.test, args.samples)
    except (EvaluationError, ValueError) as error:  # a report whose hypotheses did not travel with it; unequal limits
        parser.error(str(error))
    if not comparisons:
        raise SystemExit("error: the reports have no set and direction in common")
    print(markdown_table(comparisons, named[0][0]))
    return comparisons


if __name__ == "__main__":
    main()
