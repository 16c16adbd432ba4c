"""Session 36: numbers missing and invented (nmt.numbers) in the hypotheses of evaluation reports, per set and
direction, with the totals over the dev and the test sets; a report whose hypotheses left the tree is restored from
git first and left untracked (bench/results/README.md). Run from the repository root:
    .venv/bin/python bench/results/session36/numbers-count.py bench/results/session34/v14-rerank-eval.json bench/results/session36/v14-numbers-eval.json"""

import json
import subprocess
import sys
from pathlib import Path

from training.evaluate import evaluation_sets, number_counts, read_lines, read_parallel
from training.recipe import load_recipe

sets = {s.name: s for s in evaluation_sets(load_recipe("configs/release-v4.yaml"))}
reports = [Path(name) for name in sys.argv[1:]]
for report in reports:
    folder = report.with_suffix("")
    if not folder.is_dir():  # sessions 34 and earlier at e8c2951, session 36 at e77a9a7
        commit = "e77a9a7" if "session36" in str(folder) else "e8c2951"
        subprocess.run(["git", "checkout", commit, "--", str(folder)], check=True)
        subprocess.run(["git", "rm", "-rq", "--cached", str(folder)], check=True)
counts = {}
for report in reports:
    for result in json.loads(report.read_text(encoding="utf-8"))["results"]:
        source_lang, target_lang = result["direction"].split("-")
        sources, _ = read_parallel(sets[result["set"]].prefix, source_lang, target_lang)
        hypotheses = read_lines(report.parent / result["hypotheses"])
        counts.setdefault((result["split"], result["set"], result["direction"]), []).append(number_counts(sources, hypotheses))
print("| split | set | direction | numbers in sources | " + " | ".join(f"{r.stem} missing / invented" for r in reports) + " |")
print("|---|---|---|---|" + "---|" * len(reports))
for (split, name, direction), per_report in counts.items():
    cells = " | ".join(f"{c['missing']} / {c['invented']}" for c in per_report)
    print(f"| {split} | {name} | {direction} | {per_report[0]['in_sources']} | {cells} |")
for split in ("dev", "test"):
    totals = [[sum(c[i][k] for (s, _, _), c in counts.items() if s == split) for k in ("missing", "invented")]
              for i in range(len(reports))]
    cells = " | ".join(f"{m} / {v}" for m, v in totals)
    print(f"| {split} | all | both | {sum(c[0]['in_sources'] for (s, _, _), c in counts.items() if s == split)} | {cells} |")
