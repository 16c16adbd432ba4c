"""Which speech level do translations into Korean end in, against their references? (:mod:`nmt.speech_level`)

    python -m training.speech_levels bench/results/session27/soup-dev.json [more reports]

For every set a ``make eval`` report scored into Korean: the share of lines whose last ending is formal (합쇼체),
polite (해요체), plain (해라체) or none of them, in the references and in each report's hypotheses, with the
hypotheses' chrF as decoded and with their plain endings made formal. The last column measures what the choice of
level costs on that set; it is an analysis, not a decoding setting, and is read on dev sets only.
"""

from __future__ import annotations

import argparse
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from sacrebleu.metrics import CHRF

from nmt.speech_level import SpeechLevel, speech_level, to_formal
from training.compare import load_report, scored_sets
from training.evaluate import EvaluationError


@dataclass
class LevelCounts:
    """One text's lines by speech level, as shares of its lines."""

    text: str  # "references" or the report's name
    shares: dict[SpeechLevel, float]
    chrf: float | None = None  # hypotheses only
    chrf_formal: float | None = None  # with plain endings made formal


def shares(lines: Sequence[str]) -> dict[SpeechLevel, float]:
    counts = Counter(speech_level(line) for line in lines)
    return {level: counts[level] / max(len(lines), 1) for level in SpeechLevel}


def set_levels(references: list[str], systems: Sequence[tuple[str, list[str]]]) -> list[LevelCounts]:
    """The references' levels, then each system's with its chrF before and after the plain → formal rewrite."""
    chrf = CHRF()
    rows = [LevelCounts("references", shares(references))]
    for name, hypotheses in systems:
        if len(hypotheses) != len(references):
            raise EvaluationError(f"{name} has {len(hypotheses)} hypotheses for {len(references)} references")
        formal = [to_formal(h) for h in hypotheses]
        rows.append(LevelCounts(name, shares(hypotheses), chrf.corpus_score(hypotheses, [references]).score,
                                chrf.corpus_score(formal, [references]).score))
    return rows


def report_levels(reports: Sequence[tuple[str, dict]]) -> dict[str, list[LevelCounts]]:
    """Per set every report scored into Korean, its rows of :func:`set_levels`."""
    return {f"{scored.name} {scored.direction}": set_levels(scored.references, scored.systems)
            for scored in scored_sets(reports) if scored.target_lang == "ko"}


def markdown_table(tables: dict[str, list[LevelCounts]]) -> str:
    header = ["set", "text", *(f"{level.value} %" for level in SpeechLevel), "chrF", "chrF, plain made formal"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for key, rows in tables.items():
        for row in rows:
            scores = ["", ""] if row.chrf is None else [f"{row.chrf:.2f}", f"{row.chrf_formal:.2f} ({row.chrf_formal - row.chrf:+.2f})"]
            lines.append("| " + " | ".join([key, row.text, *(f"{100 * row.shares[level]:.0f}" for level in SpeechLevel), *scores]) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> dict[str, list[LevelCounts]]:
    parser = argparse.ArgumentParser(prog="python -m training.speech_levels", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("reports", nargs="+", type=Path, help="eval.json reports, each named by its file name")
    args = parser.parse_args(argv)
    missing = [str(path) for path in args.reports if not path.is_file()]
    if missing:
        parser.error(f"no such report: {', '.join(missing)}")
    try:
        tables = report_levels([(path.stem, load_report(path)) for path in args.reports])
    except ValueError as error:  # hypotheses that do not line up with the references; reports of unequal limits
        parser.error(str(error))
    if not tables:
        raise SystemExit("error: the reports have no set scored into Korean in common")
    print(markdown_table(tables))
    return tables


if __name__ == "__main__":
    main()
